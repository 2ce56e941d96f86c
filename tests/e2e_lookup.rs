//! The container lookup against a real containerd (1.6, 1.7, 2.1), on this machine's
//! kernel: a running container's PID is its init process and its cgroup id the inode
//! of the cgroup `/proc/PID/cgroup` names; its image digest is the one containerd's
//! `ctr` reports; an OOM kill counts once under `OOMKilled`; a removed container is
//! looked up by id, cgroup id and PID until the retention ends. Also measures how soon
//! `GetContainer(pid)` answers after `StartContainer` returns.
//! Run by `tests/e2e/run.sh` (it starts containerd and sets `PLEGD_E2E_*`).

mod support;

use std::os::unix::fs::MetadataExt;
use std::process::Command;
use std::time::Duration;

use plegd::cri::client::CriClient;
use plegd::cri::spec::{ContainerSpec, PodSpec};
use plegd::proto::plegd as api;
use plegd::proto::plegd::get_container_request::Key;
use plegd::proto::runtime as cri;
use support::containerd::{Env, env, figure, remove_pod, run_pod};
use tokio::time::Instant;

struct Plegd {
    app: plegd::app::Sidecar,
    socket: String,
    shutdown: tokio_util::sync::CancellationToken,
    tracker: tokio_util::task::TaskTracker,
}

impl Env {
    async fn plegd(&self, state: &std::path::Path, retention: Duration) -> Plegd {
        self.plegd_tuned(state, retention, |_| {}).await
    }

    async fn plegd_tuned(
        &self,
        state: &std::path::Path,
        retention: Duration,
        tune: impl FnOnce(&mut plegd::config::RunConfig),
    ) -> Plegd {
        let mut cfg = plegd::config::RunConfig::for_endpoint(&self.endpoint).unwrap();
        cfg.api.socket = state.join("plegd.sock");
        cfg.runtime.request_timeout = Duration::from_secs(10);
        cfg.state_dir = Some(state.to_owned());
        cfg.lookup.retention = retention;
        tune(&mut cfg);
        let shutdown = tokio_util::sync::CancellationToken::new();
        let tracker = tokio_util::task::TaskTracker::new();
        let app = plegd::app::start(&cfg, &tracker, &shutdown).await.unwrap();
        let deadline = Instant::now() + Duration::from_secs(30);
        while app.readiness().check().is_err() {
            assert!(Instant::now() < deadline, "not ready: {:?}", app.readiness().check());
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        Plegd { app, socket: format!("unix://{}", cfg.api.socket.display()), shutdown, tracker }
    }

    /// The manifest digest `ctr images ls` shows for `name`.
    fn ctr_digest(&self, name: &str) -> String {
        let out = Command::new(&self.ctl).args(["ctr", &self.version, "images", "ls"]).output().unwrap();
        assert!(out.status.success(), "ctr images ls: {}", String::from_utf8_lossy(&out.stderr));
        let text = String::from_utf8_lossy(&out.stdout).to_string();
        text.lines()
            .find(|l| l.split_whitespace().next() == Some(name))
            .and_then(|l| l.split_whitespace().find(|w| w.starts_with("sha256:")))
            .unwrap_or_else(|| panic!("{name} not in ctr's list:\n{text}"))
            .to_owned()
    }
}

impl Plegd {
    async fn get(&self, key: Key) -> Result<api::GetContainerResponse, tonic::Status> {
        let mut c = plegd::cli::client::connect(&self.socket).unwrap();
        c.get_container(api::GetContainerRequest { key: Some(key), at: None }).await.map(|r| r.into_inner())
    }

    async fn until(&self, key: Key, ok: impl Fn(&api::GetContainerResponse) -> bool) -> api::GetContainerResponse {
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            if let Ok(r) = self.get(key.clone()).await
                && ok(&r)
            {
                return r;
            }
            assert!(Instant::now() < deadline, "GetContainer({key:?}) never answered as expected");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    async fn terminations(&self, namespace: &str, reason: &str) -> u64 {
        let (_, body) = support::http(self.app.admin_addr(), "GET", "/metrics").await;
        let needle = format!("plegd_container_terminations_total{{namespace=\"{namespace}\",reason=\"{reason}\"}} ");
        body.lines().find_map(|l| l.strip_prefix(&needle)).map_or(0, |v| v.trim().parse().unwrap())
    }

    async fn stop(self) {
        self.shutdown.cancel();
        self.tracker.close();
        self.tracker.wait().await;
    }
}

async fn create(c: &CriClient, pod: &PodSpec, sid: &str, spec: &ContainerSpec) -> String {
    c.raw().create_container(pod.create_request(sid, spec)).await.expect("CreateContainer").into_inner().container_id
}

async fn start(c: &CriClient, id: &str) {
    c.raw().start_container(cri::StartContainerRequest { container_id: id.into() }).await.expect("StartContainer");
}

/// The cgroup `/proc/PID/cgroup` names, and its directory: the unified hierarchy's
/// where the process sits below its root (cgroup v2, or a hybrid host like this
/// machine), else the memory hierarchy's (v1).
fn proc_cgroup(pid: u32) -> (String, String) {
    let text = std::fs::read_to_string(format!("/proc/{pid}/cgroup")).unwrap();
    if let Some(path) = text.lines().find_map(|l| l.strip_prefix("0::")).filter(|p| *p != "/") {
        let unified = if std::path::Path::new("/sys/fs/cgroup/cgroup.controllers").exists() {
            "/sys/fs/cgroup"
        } else {
            "/sys/fs/cgroup/unified"
        };
        return (path.to_owned(), format!("{unified}{path}"));
    }
    let path = text
        .lines()
        .find_map(|l| l.split(':').nth(1).filter(|c| c.split(',').any(|c| c == "memory")).map(|_| l))
        .and_then(|l| l.splitn(3, ':').nth(2))
        .expect("a memory line")
        .to_owned();
    (path.clone(), format!("/sys/fs/cgroup/memory{path}"))
}

/// The PID of the process whose cgroup names container `id` (what an agent sees in the
/// kernel).
fn pid_in_kernel(id: &str) -> Option<u32> {
    std::fs::read_dir("/proc").ok()?.flatten().find_map(|e| {
        let pid: u32 = e.file_name().to_str()?.parse().ok()?;
        let cg = std::fs::read_to_string(e.path().join("cgroup")).ok()?;
        cg.contains(id).then_some(pid)
    })
}

#[tokio::test]
#[ignore = "needs a real containerd: run tests/e2e/run.sh"]
async fn a_running_container_has_its_kernel_pid_cgroup_id_and_containerds_image_digest() {
    let env = env();
    let state = tempfile::tempdir().unwrap();
    let p = env.plegd(state.path(), Duration::from_secs(3600)).await;
    let c = env.client();
    let pod = PodSpec::new("e2e-lookup", "facts");
    let sid = run_pod(&c, &pod).await;
    let id = create(&c, &pod, &sid, &ContainerSpec::new("main").limits(250, 64 << 20)).await;
    start(&c, &id).await;
    let r = p.until(Key::ContainerId(id.clone()), |r| r.container.as_ref().is_some_and(|c| c.pid != 0)).await;
    let ci = r.container.clone().unwrap();

    // The PID is the container's init process (busybox sleep), in the cgroup it names.
    let cmdline = std::fs::read(format!("/proc/{}/cmdline", ci.pid)).unwrap();
    assert!(cmdline.starts_with(b"sleep\0"), "PID {} runs {:?}", ci.pid, String::from_utf8_lossy(&cmdline));
    let (cgroup, dir) = proc_cgroup(ci.pid);
    assert!(cgroup.contains(&id), "{cgroup}");
    let ino = std::fs::metadata(&dir).unwrap().ino();
    assert_eq!(ci.cgroup_id, ino, "the cgroup id is the inode of {cgroup}");
    assert!(!ci.cgroup_path.is_empty(), "the runtime's cgroupsPath");
    // The image by digest, as containerd resolved it.
    let digest = env.ctr_digest("docker.io/library/busybox:latest");
    assert_eq!(ci.image_ref, format!("docker.io/library/busybox@{digest}"), "containerd {}", env.version);
    // Resources, where the runtime reports them (containerd ≥ 1.7).
    if env.version != "1.6" {
        let res = ci.resources.expect("resources");
        assert_eq!((res.cpu_quota, res.cpu_period, res.memory_limit_bytes), (25_000, 100_000, 64 << 20));
    }
    let sandbox = &r.pod.as_ref().unwrap().sandboxes[0];
    assert!(sandbox.pid != 0, "{sandbox:?}");
    for key in [Key::Pid(ci.pid), Key::CgroupId(ino)] {
        assert_eq!(p.get(key.clone()).await.unwrap().container.unwrap().id, id, "{key:?}");
    }
    // What reading a container's process costs: a verbose status against a plain one,
    // alternated, 50 each.
    use plegd::cri::RuntimeService;
    let (mut plain, mut verbose) = (Vec::new(), Vec::new());
    for _ in 0..50 {
        let t = Instant::now();
        c.container_status(&id).await.unwrap();
        plain.push(t.elapsed().as_secs_f64() * 1e3);
        let t = Instant::now();
        c.container_status_verbose(&id).await.unwrap();
        verbose.push(t.elapsed().as_secs_f64() * 1e3);
    }
    let median = |v: &mut Vec<f64>| {
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    };
    figure(&format!(
        "containerd {}: ContainerStatus median {:.2} ms plain, {:.2} ms verbose (50 each, alternated)",
        env.version,
        median(&mut plain),
        median(&mut verbose)
    ));
    figure(&format!(
        "containerd {}: container {} pid {} cgroup {cgroup} (id {ino}) image_ref {} sandbox netns {:?}",
        env.version,
        &id[..12],
        ci.pid,
        ci.image_ref,
        sandbox.netns_path
    ));
    remove_pod(&c, &sid).await;
    p.stop().await;
}

/// plegd as a node runs it, its own process (the binary, defaults), and the agent asking
/// apart from it: neither waits for the other's turn on the same threads.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs a real containerd: run tests/e2e/run.sh"]
async fn get_container_by_pid_answers_soon_after_start_container_returns() {
    let env = env();
    let bin = env!("CARGO_BIN_EXE_plegd");
    let dir = tempfile::tempdir().unwrap();
    let p = support::binary::start_with(bin, &env.endpoint, &dir.path().join("state"), dir.path(), &[]).await;
    pid_latency(&env, &p.socket, "CRI event stream").await;
    support::binary::stop(p, support::binary::Stop::Term);
    if env.version != "1.6" {
        let out = Command::new(&env.ctl).args(["nri-socket", &env.version]).output().unwrap();
        let socket = String::from_utf8(out.stdout).unwrap().trim().to_owned();
        let dir = tempfile::tempdir().unwrap();
        let flags = ["--nri", "on", "--nri-socket", &socket];
        let p = support::binary::start_with(bin, &env.endpoint, &dir.path().join("state"), dir.path(), &flags).await;
        let deadline = Instant::now() + Duration::from_secs(10);
        while !support::http(p.admin, "GET", "/metrics").await.1.lines().any(|l| l == "plegd_nri_registered 1") {
            assert!(Instant::now() < deadline, "plegd registered with containerd {}'s NRI", env.version);
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        pid_latency(&env, &p.socket, "NRI plugin and CRI event stream").await;
        support::binary::stop(p, support::binary::Stop::Term);
    }
}

/// Containers a pod of the latency test holds: a node's pods hold a few. Each start
/// makes plegd read the pod whole, as the kubelet's `GetPodStatus` does, so in a pod of
/// 40 a start costs the runtime up to 40 status reads: a load of the test's own making
/// that then shows in every answer's tail.
const CONTAINERS_A_POD: usize = 4;

/// Starts in a round of the latency test.
const STARTS_A_ROUND: usize = 40;
const _: () = assert!(STARTS_A_ROUND.is_multiple_of(CONTAINERS_A_POD), "a round is whole pods");

/// Rounds of [`STARTS_A_ROUND`] starts (`PLEGD_E2E_PID_ROUNDS`, default 1), in pods of
/// [`CONTAINERS_A_POD`] each removed after its starts, each start followed at once by
/// `GetContainer(pid)` as an agent asks it: the figures, from `StartContainer`'s return.
async fn pid_latency(env: &Env, socket: &str, with: &str) {
    let c = env.client();
    let rounds: usize = std::env::var("PLEGD_E2E_PID_ROUNDS").ok().and_then(|r| r.parse().ok()).unwrap_or(1);
    let (mut total, mut answer, mut again) = (Vec::new(), Vec::new(), Vec::new());
    // An agent keeps its connection.
    let mut agent = plegd::cli::client::connect(socket).unwrap();
    agent.list_pods(api::ListPodsRequest::default()).await.unwrap();
    for n in 0..rounds * STARTS_A_ROUND / CONTAINERS_A_POD {
        let pod = PodSpec::new("e2e-lookup", &format!("latency-{n}"));
        let sid = run_pod(&c, &pod).await;
        starts(&c, &mut agent, &pod, &sid, [&mut total, &mut answer, &mut again]).await;
        remove_pod(&c, &sid).await;
    }
    let pct = |v: &mut Vec<f64>, q: f64| {
        v.sort_by(f64::total_cmp);
        v[((v.len() - 1) as f64 * q).round() as usize]
    };
    figure(&format!(
        "containerd {} ({with}): StartContainer returned -> GetContainer(pid) answered, {} starts in pods of {}: \
         p50 {:.1} ms, p99 {:.1} ms (of which the call itself p50 {:.1} ms, p99 {:.1} ms; the rest is the test \
         finding the PID in /proc); the same call asked again at once p50 {:.1} ms, p99 {:.1} ms",
        env.version,
        total.len(),
        CONTAINERS_A_POD,
        pct(&mut total, 0.5),
        pct(&mut total, 0.99),
        pct(&mut answer, 0.5),
        pct(&mut answer, 0.99),
        pct(&mut again, 0.5),
        pct(&mut again, 0.99)
    ));
}

/// [`CONTAINERS_A_POD`] containers started in pod `sid`, each followed at once by
/// `GetContainer(pid)`: in ms, from `StartContainer`'s return to the answer, from the
/// question to the answer, and the same question asked again.
async fn starts(
    c: &CriClient,
    agent: &mut api::pod_lifecycle_client::PodLifecycleClient<tonic::transport::Channel>,
    pod: &PodSpec,
    sid: &str,
    [total, answer, again]: [&mut Vec<f64>; 3],
) {
    for i in 0..CONTAINERS_A_POD {
        let id = create(c, pod, sid, &ContainerSpec::new(&format!("c{i}"))).await;
        start(c, &id).await;
        let returned = Instant::now();
        // What an agent does: it sees a new PID in the kernel and asks at once.
        let pid = pid_in_kernel(&id).expect("the container's process is in the kernel once StartContainer returns");
        let asked = Instant::now();
        let r = agent
            .get_container(api::GetContainerRequest { key: Some(Key::Pid(pid)), at: None })
            .await
            .unwrap_or_else(|e| panic!("GetContainer(pid {pid}): {e}"))
            .into_inner();
        let done = Instant::now();
        assert_eq!(r.container.unwrap().id, id);
        total.push((done - returned).as_secs_f64() * 1e3);
        answer.push((done - asked).as_secs_f64() * 1e3);
        // The same call once plegd has published the container: what the call costs.
        let t = Instant::now();
        agent.get_container(api::GetContainerRequest { key: Some(Key::Pid(pid)), at: None }).await.unwrap();
        again.push(t.elapsed().as_secs_f64() * 1e3);
    }
}

#[tokio::test]
#[ignore = "needs a real containerd: run tests/e2e/run.sh"]
async fn an_oom_killed_container_counts_once_under_oomkilled_across_plegds_restart() {
    let env = env();
    let state = tempfile::tempdir().unwrap();
    let p = env.plegd(state.path(), Duration::from_secs(3600)).await;
    let c = env.client();
    let pod = PodSpec::new("e2e-oom", "hungry");
    let sid = run_pod(&c, &pod).await;
    // A shell that doubles a string until the cgroup's 16 MiB run out.
    let mut spec = ContainerSpec::new("eater").limits(500, 16 << 20);
    spec.command = vec!["sh".into(), "-c".into(), "x=aaaaaaaaaaaaaaaa; while true; do x=$x$x; done".into()];
    let id = create(&c, &pod, &sid, &spec).await;
    start(&c, &id).await;
    let dead = p
        .until(Key::ContainerId(id.clone()), |r| {
            r.container.as_ref().is_some_and(|c| c.state == api::ContainerState::Exited as i32)
        })
        .await;
    assert_eq!(dead.container.as_ref().unwrap().reason, "OOMKilled", "containerd {}", env.version);
    let deadline = Instant::now() + Duration::from_secs(10);
    while p.terminations("e2e-oom", "OOMKilled").await < 1 {
        assert!(Instant::now() < deadline, "the OOM kill was never counted");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    p.app.pleg().request_relist();
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(p.terminations("e2e-oom", "OOMKilled").await, 1, "once, whatever relists follow");
    p.stop().await;
    let p = env.plegd(state.path(), Duration::from_secs(3600)).await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(p.terminations("e2e-oom", "OOMKilled").await, 0, "not again after plegd's restart");
    remove_pod(&c, &sid).await;
    p.stop().await;
}

#[tokio::test]
#[ignore = "needs a real containerd: run tests/e2e/run.sh"]
async fn a_removed_container_is_found_by_id_cgroup_and_pid_until_the_retention_ends() {
    let env = env();
    let state = tempfile::tempdir().unwrap();
    let p = env.plegd(state.path(), Duration::from_secs(4)).await;
    let c = env.client();
    let pod = PodSpec::new("e2e-lookup", "brief");
    let sid = run_pod(&c, &pod).await;
    let id = create(&c, &pod, &sid, &ContainerSpec::new("main")).await;
    start(&c, &id).await;
    let live = p.until(Key::ContainerId(id.clone()), |r| r.container.as_ref().is_some_and(|c| c.pid != 0)).await;
    let ci = live.container.unwrap();
    remove_pod(&c, &sid).await;
    p.until(Key::ContainerId(id.clone()), |r| r.removed).await;
    for key in [Key::ContainerId(id.clone()), Key::CgroupId(ci.cgroup_id), Key::Pid(ci.pid)] {
        let r = p.get(key.clone()).await.unwrap_or_else(|e| panic!("{key:?} after removal: {e}"));
        assert!(r.removed, "{key:?}");
        assert_eq!(r.container.unwrap().id, id);
    }
    tokio::time::sleep(Duration::from_secs(5)).await;
    let deadline = Instant::now() + Duration::from_secs(20);
    let e = loop {
        match p.get(Key::ContainerId(id.clone())).await {
            Err(e) => break e,
            Ok(_) => {
                assert!(Instant::now() < deadline, "the tombstone outlived its retention");
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        }
    };
    assert_eq!(e.code(), tonic::Code::NotFound);
    assert!(e.message().contains("--tombstone-retention"), "{}", e.message());
    p.stop().await;
}

//! `GetContainer`: an agent holding a PID, a cgroup id or a container id finds the pod
//! and the container — while it runs and after it is gone, across plegd's restart,
//! never through a PID another process has taken since — on a simulated node whose
//! `/proc` and cgroupfs are files under a temporary `--host-root`.

mod support;

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use plegd::cri::spec::{ContainerSpec, PodSpec};
use plegd::proto::plegd as api;
use plegd::proto::plegd::get_container_request::Key;
use support::{Plegd, start_plegd, start_plegd_on};

fn tune(state: PathBuf, root: PathBuf, retention: Duration) -> impl FnOnce(&mut plegd::config::RunConfig) + Clone {
    move |c| {
        c.state_dir = Some(state);
        c.host = plegd::host::Host::new(root);
        c.lookup.retention = retention;
    }
}

async fn get(p: &Plegd, key: Key) -> Result<api::GetContainerResponse, tonic::Status> {
    p.client().get_container(api::GetContainerRequest { key: Some(key), at: None }).await.map(|r| r.into_inner())
}

/// The PID and cgroup id of a container, as the simulated node's files show them.
fn kernel_view(root: &Path, resp: &api::GetContainerResponse) -> (u32, u64) {
    let c = resp.container.as_ref().unwrap();
    let cgroup = std::fs::read_to_string(root.join(format!("proc/{}/cgroup", c.pid))).unwrap();
    let path = cgroup.trim().strip_prefix("0::").unwrap().to_owned();
    let ino = std::fs::metadata(root.join("sys/fs/cgroup").join(path.trim_start_matches('/'))).unwrap().ino();
    (c.pid, ino)
}

/// Waits until `GetContainer(key)` answers with a container that satisfies `ok`.
async fn until(p: &Plegd, key: Key, ok: impl Fn(&api::GetContainerResponse) -> bool) -> api::GetContainerResponse {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    loop {
        if let Ok(r) = get(p, key.clone()).await
            && ok(&r)
        {
            return r;
        }
        assert!(tokio::time::Instant::now() < deadline, "GetContainer({key:?}) never answered as expected");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_container_is_found_by_id_cgroup_id_and_pid_running_removed_and_after_plegds_restart() {
    let (state, root) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let t = tune(state.path().into(), root.path().into(), Duration::from_secs(3600));
    let p = start_plegd(t.clone()).await;
    p.h.sim.set_host_root(root.path().into());
    let pod = PodSpec::new("shop", "web").label("app", "web");
    let (_, ids) = p.h.run_pod(&pod, &[ContainerSpec::new("main").limits(500, 256 << 20)]).await;
    let id = ids[0].clone();

    let live = until(&p, Key::ContainerId(id.clone()), |r| r.container.as_ref().is_some_and(|c| c.pid != 0)).await;
    let c = live.container.clone().unwrap();
    let (pid, cgroup_id) = kernel_view(root.path(), &live);
    assert_eq!(c.cgroup_id, cgroup_id, "the cgroup id is the cgroup directory's inode");
    assert!(c.cgroup_path.ends_with(&format!("cri-containerd:{id}")), "{}", c.cgroup_path);
    assert!(c.image_ref.starts_with("docker.io/library/busybox@sha256:"), "{}", c.image_ref);
    assert!(c.image_id.starts_with("sha256:"));
    let r = c.resources.expect("resources");
    assert_eq!((r.cpu_quota, r.cpu_period, r.cpu_shares, r.memory_limit_bytes), (50_000, 100_000, 512, 256 << 20));
    let sandbox = &live.pod.as_ref().unwrap().sandboxes[0];
    assert!(sandbox.pid != 0 && sandbox.netns_path.starts_with("/var/run/netns/"), "{sandbox:?}");
    for key in [Key::Pid(pid), Key::CgroupId(cgroup_id)] {
        let r = get(&p, key.clone()).await.unwrap();
        assert_eq!(r.container.unwrap().id, id, "{key:?}");
        assert_eq!(r.pod.unwrap().name, "web");
        assert!(!r.removed);
    }

    p.h.stop_container(&id).await;
    p.h.remove_container(&id).await;
    let gone = until(&p, Key::ContainerId(id.clone()), |r| r.removed).await;
    assert!(gone.removed_at.is_some());
    assert_eq!(gone.container.as_ref().unwrap().pid, 0, "no PID once it does not run");
    for key in [Key::Pid(pid), Key::CgroupId(cgroup_id)] {
        let r = get(&p, key.clone()).await.unwrap();
        assert_eq!((r.container.unwrap().id.as_str(), r.removed), (id.as_str(), true), "{key:?}");
    }

    // plegd restarts: the removed container is still found, from the state dir.
    let h = p.stop_plegd().await;
    let p = start_plegd_on(h, t).await;
    for key in [Key::ContainerId(id.clone()), Key::Pid(pid), Key::CgroupId(cgroup_id)] {
        let r = get(&p, key.clone()).await.unwrap_or_else(|e| panic!("{key:?} after the restart: {e}"));
        assert_eq!((r.container.unwrap().id.as_str(), r.removed), (id.as_str(), true), "{key:?}");
        assert_eq!(r.pod.unwrap().namespace, "shop");
    }
    p.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reused_pid_is_never_attributed_to_the_container_that_had_it_before() {
    let (state, root) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let p = start_plegd(tune(state.path().into(), root.path().into(), Duration::from_secs(3600))).await;
    p.h.sim.set_host_root(root.path().into());
    let pod = PodSpec::new("ns", "first");
    let (sid, ids) = p.h.run_pod(&pod, &[ContainerSpec::new("a")]).await;
    let first = until(&p, Key::ContainerId(ids[0].clone()), |r| r.container.as_ref().is_some_and(|c| c.pid != 0)).await;
    let pid = first.container.unwrap().pid;
    p.h.stop_container(&ids[0]).await;
    p.h.remove_container(&ids[0]).await;
    until(&p, Key::ContainerId(ids[0].clone()), |r| r.removed).await;

    // The simulated node hands the freed PID to the next process: a new container.
    let second = p.h.start_container(&pod, &sid, &ContainerSpec::new("b")).await;
    let r = until(&p, Key::Pid(pid), |r| r.container.as_ref().is_some_and(|c| c.id == second)).await;
    assert!(!r.removed);

    // It goes too, and the PID is taken by a process outside any container.
    p.h.stop_container(&second).await;
    p.h.remove_container(&second).await;
    until(&p, Key::ContainerId(second.clone()), |r| r.removed).await;
    let proc_dir = root.path().join(format!("proc/{pid}"));
    std::fs::create_dir_all(&proc_dir).unwrap();
    std::fs::write(proc_dir.join("cgroup"), "0::/system.slice/sshd.service\n").unwrap();
    std::fs::write(
        proc_dir.join("stat"),
        format!("{pid} (sshd) S 1 1 1 0 -1 0 0 0 0 0 0 0 0 0 20 0 1 0 99999999 0 0\n"),
    )
    .unwrap();
    let e = get(&p, Key::Pid(pid)).await.expect_err("the PID is not a container's any more");
    assert_eq!(e.code(), tonic::Code::NotFound);
    assert!(e.message().contains("sshd.service"), "{}", e.message());
    p.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_the_retention_a_removed_container_is_not_found_and_the_answer_says_why() {
    let (state, root) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let p = start_plegd(tune(state.path().into(), root.path().into(), Duration::from_secs(1))).await;
    let (sid, ids) = p.h.run_pod(&PodSpec::new("ns", "brief"), &[ContainerSpec::new("a")]).await;
    until(&p, Key::ContainerId(ids[0].clone()), |r| !r.removed).await;
    p.h.stop_pod(&sid).await;
    p.h.remove_pod(&sid).await;
    until(&p, Key::ContainerId(ids[0].clone()), |r| r.removed).await;
    // Nothing else happens on the node: the retention alone ends the tombstone.
    tokio::time::sleep(Duration::from_millis(1200)).await;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    let e = loop {
        match get(&p, Key::ContainerId(ids[0].clone())).await {
            Err(e) => break e,
            Ok(_) => {
                assert!(tokio::time::Instant::now() < deadline, "the tombstone outlived its retention");
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
    };
    assert_eq!(e.code(), tonic::Code::NotFound);
    assert!(e.message().contains("--tombstone-retention"), "{}", e.message());
    p.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_lookups_get_a_clear_error_and_change_nothing() {
    let p = start_plegd(|_| {}).await;
    for (req, code) in [
        (api::GetContainerRequest { key: None, at: None }, tonic::Code::InvalidArgument),
        (
            api::GetContainerRequest { key: Some(Key::ContainerId(String::new())), at: None },
            tonic::Code::InvalidArgument,
        ),
        (api::GetContainerRequest { key: Some(Key::Pid(0)), at: None }, tonic::Code::InvalidArgument),
        (api::GetContainerRequest { key: Some(Key::CgroupId(0)), at: None }, tonic::Code::InvalidArgument),
        (api::GetContainerRequest { key: Some(Key::ContainerId("nope".into())), at: None }, tonic::Code::NotFound),
        (api::GetContainerRequest { key: Some(Key::CgroupId(12345)), at: None }, tonic::Code::NotFound),
        // The node's init, and a PID no kernel gives.
        (api::GetContainerRequest { key: Some(Key::Pid(1)), at: None }, tonic::Code::NotFound),
        (api::GetContainerRequest { key: Some(Key::Pid(u32::MAX)), at: None }, tonic::Code::NotFound),
    ] {
        let e = p.client().get_container(req.clone()).await.expect_err("an error");
        assert_eq!(e.code(), code, "{req:?}: {}", e.message());
        assert!(!e.message().is_empty());
    }
    p.stop().await;
}

/// `plegd_container_terminations_total{namespace,reason}` as the admin port shows it.
async fn terminations(p: &Plegd, reason: &str) -> u64 {
    let (_, body) = support::http(p.app.admin_addr(), "GET", "/metrics").await;
    let needle = format!("plegd_container_terminations_total{{namespace=\"ns\",reason=\"{reason}\"}} ");
    body.lines().find_map(|l| l.strip_prefix(&needle)).map_or(0, |v| v.trim().parse().unwrap())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_oom_kill_is_counted_once_under_its_reason_and_not_again_after_plegds_restart() {
    let (state, root) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let t = tune(state.path().into(), root.path().into(), Duration::from_secs(3600));
    let p = start_plegd(t.clone()).await;
    let (_, ids) =
        p.h.run_pod(&PodSpec::new("ns", "hungry"), &[ContainerSpec::new("a"), ContainerSpec::new("b")]).await;
    until(&p, Key::ContainerId(ids[1].clone()), |r| r.container.as_ref().is_some_and(|c| c.pid != 0)).await;
    assert!(p.h.sim.exit_container(&ids[0], 137, "OOMKilled"));
    assert!(p.h.sim.exit_container(&ids[1], 1, "Error"));
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while terminations(&p, "OOMKilled").await < 1 || terminations(&p, "Error").await < 1 {
        assert!(tokio::time::Instant::now() < deadline, "the deaths were never counted");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // A full relist reads both dead containers again: still once each.
    p.app.pleg().request_relist();
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!((terminations(&p, "OOMKilled").await, terminations(&p, "Error").await), (1, 1));

    let h = p.stop_plegd().await;
    let p = start_plegd_on(h, t).await;
    tokio::time::sleep(Duration::from_millis(600)).await;
    assert_eq!(
        (terminations(&p, "OOMKilled").await, terminations(&p, "Error").await),
        (0, 0),
        "the restarted plegd does not count deaths the last one counted"
    );
    p.stop().await;
}

/// The PID whose cgroup names container `id` on the simulated node.
fn pid_in(root: &Path, id: &str) -> u32 {
    std::fs::read_dir(root.join("proc"))
        .unwrap()
        .flatten()
        .find_map(|e| {
            let cg = std::fs::read_to_string(e.path().join("cgroup")).ok()?;
            cg.contains(id).then(|| e.file_name().to_str()?.parse().ok()).flatten()
        })
        .expect("the container's process")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pid_plegd_has_not_read_yet_is_answered_at_once_from_the_runtime() {
    let (state, root) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let base = tune(state.path().into(), root.path().into(), Duration::from_secs(3600));
    // No event stream and a relist a minute away: only the lookup's own read can answer.
    let p = start_plegd(move |c| {
        base(c);
        c.pleg.mode = plegd::pleg::evented::Mode::Generic;
        c.pleg.relist_period = Duration::from_secs(60);
        c.pleg.threshold = Duration::from_secs(180);
    })
    .await;
    p.h.sim.set_host_root(root.path().into());
    let pod = PodSpec::new("ns", "fresh");
    let (_, ids) = p.h.run_pod(&pod, &[ContainerSpec::new("main")]).await;
    let pid = pid_in(root.path(), &ids[0]);
    let asked = std::time::Instant::now();
    let r = get(&p, Key::Pid(pid)).await.expect("answered from the runtime");
    assert!(asked.elapsed() < Duration::from_secs(1), "took {:?}", asked.elapsed());
    let c = r.container.unwrap();
    assert_eq!((c.id.as_str(), c.pid, c.state), (ids[0].as_str(), pid, api::ContainerState::Running as i32));
    let pod = r.pod.unwrap();
    assert_eq!((pod.namespace.as_str(), pod.name.as_str()), ("ns", "fresh"));
    assert!(p.app.journal().pods().iter().all(|p| p.name != "fresh"), "the relister has not read the pod yet");
    p.stop().await;
}

/// A process outside what the simulated runtime started: its `/proc` entry, in `cgroup`.
fn fake_process(root: &Path, pid: u32, cgroup: &str) {
    let dir = root.join(format!("proc/{pid}"));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("cgroup"), format!("0::{cgroup}\n")).unwrap();
    std::fs::write(dir.join("stat"), format!("{pid} (sh) S 1 1 1 0 -1 0 0 0 0 0 0 0 0 0 20 0 1 0 77777777 0 0\n"))
        .unwrap();
}

fn cgroup_of(root: &Path, pid: u32) -> String {
    let text = std::fs::read_to_string(root.join(format!("proc/{pid}/cgroup"))).unwrap();
    text.trim().strip_prefix("0::").unwrap().to_owned()
}

/// `ContainerStatus` calls plegd has made, by its own CRI metrics.
async fn container_status_calls(p: &Plegd) -> u64 {
    let (_, body) = support::http(p.app.admin_addr(), "GET", "/metrics").await;
    body.lines()
        .filter(|l| l.starts_with("plegd_cri_requests_total{") && l.contains("method=\"ContainerStatus\""))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum::<f64>() as u64
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_process_cannot_choose_its_container_by_naming_its_cgroup_after_another() {
    let (state, root) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let p = start_plegd(tune(state.path().into(), root.path().into(), Duration::from_secs(3600))).await;
    p.h.sim.set_host_root(root.path().into());
    let (_, a) = p.h.run_pod(&PodSpec::new("ns", "pod-a"), &[ContainerSpec::new("a1")]).await;
    let (_, b) = p.h.run_pod(&PodSpec::new("ns", "pod-b"), &[ContainerSpec::new("b1")]).await;
    for id in [&a[0], &b[0]] {
        until(&p, Key::ContainerId(id.clone()), |r| r.container.as_ref().is_some_and(|c| c.pid != 0)).await;
    }
    let (a, b) = (a[0].clone(), b[0].clone());
    let a_cgroup = cgroup_of(root.path(), pid_in(root.path(), &a));
    let inner = "d".repeat(64);
    let cases = [
        // A host user's own scope (systemd-run --user --scope --unit=<B>), any shape.
        (format!("/user.slice/user-1000.slice/user@1000.service/app.slice/{b}.scope"), None),
        (format!("/user.slice/user-1000.slice/user@1000.service/app.slice/cri-containerd-{b}.scope"), None),
        (format!("/user.slice/user-1000.slice/user@1000.service/kubepods.slice/cri-containerd-{b}.scope"), None),
        // A's process in a child cgroup it named after B is A's.
        (format!("{a_cgroup}/{b}"), Some(&a)),
        (format!("{a_cgroup}/cri-containerd-{b}.scope"), Some(&a)),
        // Docker in Docker: a container nested in A is in A.
        (format!("{a_cgroup}/docker/{inner}"), Some(&a)),
    ];
    for (i, (cgroup, want)) in cases.iter().enumerate() {
        let pid = 3_000_000 + i as u32;
        fake_process(root.path(), pid, cgroup);
        match (get(&p, Key::Pid(pid)).await, want) {
            (Ok(r), Some(want)) => assert_eq!(&r.container.unwrap().id, *want, "{cgroup}"),
            (Err(e), None) => assert_eq!(e.code(), tonic::Code::NotFound, "{cgroup}: {e}"),
            (got, want) => panic!("{cgroup}: expected {want:?}, got {got:?}"),
        }
    }
    p.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pid_a_host_process_took_after_a_removal_is_not_the_removed_containers_once_that_process_exits() {
    let (state, root) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let p = start_plegd(tune(state.path().into(), root.path().into(), Duration::from_secs(3600))).await;
    p.h.sim.set_host_root(root.path().into());
    let (_, ids) = p.h.run_pod(&PodSpec::new("ns", "gone"), &[ContainerSpec::new("main")]).await;
    let id = ids[0].clone();
    let live = until(&p, Key::ContainerId(id.clone()), |r| r.container.as_ref().is_some_and(|c| c.pid != 0)).await;
    let pid = live.container.unwrap().pid;
    p.h.stop_container(&id).await;
    p.h.remove_container(&id).await;
    until(&p, Key::ContainerId(id.clone()), |r| r.removed).await;
    // Nothing has taken the PID since: it still finds the removed container.
    let r = get(&p, Key::Pid(pid)).await.expect("the PID cannot have been reused yet");
    assert_eq!((r.container.unwrap().id.as_str(), r.removed), (id.as_str(), true));

    // A host process takes the PID (the node's allocator went round to it) and exits
    // before anyone asks.
    p.h.sim.count_round();
    fake_process(root.path(), pid, "/system.slice/cron.service");
    std::fs::remove_dir_all(root.path().join(format!("proc/{pid}"))).unwrap();
    let e = get(&p, Key::Pid(pid)).await.expect_err("the PID may have been another process's since");
    assert_eq!(e.code(), tonic::Code::NotFound);
    assert!(e.message().contains(&id) && e.message().contains("container id or cgroup id"), "{}", e.message());
    // By its id and its cgroup id it is still found.
    let r = get(&p, Key::ContainerId(id.clone())).await.unwrap();
    assert!(r.removed);
    p.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lookups_of_a_pause_process_or_an_unknown_container_ask_the_runtime_once_however_many_come() {
    let (state, root) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let p = start_plegd(tune(state.path().into(), root.path().into(), Duration::from_secs(3600))).await;
    p.h.sim.set_host_root(root.path().into());
    let (sid, ids) = p.h.run_pod(&PodSpec::new("ns", "paused"), &[ContainerSpec::new("main")]).await;
    until(&p, Key::ContainerId(ids[0].clone()), |r| r.container.as_ref().is_some_and(|c| c.pid != 0)).await;
    let pause = pid_in(root.path(), &sid);
    let unknown = "e".repeat(64);
    let stranger = 3_100_000;
    fake_process(
        root.path(),
        stranger,
        &format!("/kubepods.slice/kubepods-besteffort.slice/cri-containerd-{unknown}.scope"),
    );
    let before = container_status_calls(&p).await;
    // Many callers at once, over a few channels (one process keeps at most 64
    // connections open; `grpc::connections`).
    let channels: Vec<_> = (0..8).map(|_| p.client()).collect();
    for pid in [pause, stranger] {
        let asks = (0..150).map(|i| {
            let mut c = channels[i % channels.len()].clone();
            async move { c.get_container(api::GetContainerRequest { key: Some(Key::Pid(pid)), at: None }).await }
        });
        for r in futures_util::future::join_all(asks).await {
            let e = r.expect_err("neither is a pod's container");
            assert_eq!(e.code(), tonic::Code::NotFound, "{e}");
        }
    }
    let e = get(&p, Key::Pid(pause)).await.unwrap_err();
    assert!(e.message().contains("sandbox") && e.message().contains("ns/paused"), "{}", e.message());
    let calls = container_status_calls(&p).await - before;
    assert!(calls <= 2, "300 lookups made {calls} ContainerStatus calls");
    p.stop().await;
}

/// A host `/proc` file that blocks whoever opens it until `release` is sent (or 30 s).
fn blocking_proc_file(path: &Path) -> std::sync::mpsc::Sender<()> {
    let ok = std::process::Command::new("mkfifo").arg(path).status().expect("mkfifo (coreutils) runs");
    assert!(ok.success(), "mkfifo {}", path.display());
    let (release, wait) = std::sync::mpsc::channel::<()>();
    let path = path.to_owned();
    std::thread::spawn(move || {
        let _ = wait.recv_timeout(Duration::from_secs(30));
        // Opening the other end lets the blocked reader go (it reads an empty file).
        let _ = std::fs::OpenOptions::new().write(true).open(&path);
    });
    release
}

#[tokio::test(flavor = "current_thread")]
async fn a_proc_read_that_blocks_holds_up_only_its_own_lookup() {
    let (state, root) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let p = start_plegd(tune(state.path().into(), root.path().into(), Duration::from_secs(3600))).await;
    p.h.sim.set_host_root(root.path().into());
    p.h.run_pod(&PodSpec::new("ns", "steady"), &[ContainerSpec::new("main")]).await;
    let dir = root.path().join("proc/3200000");
    std::fs::create_dir_all(&dir).unwrap();
    let release = blocking_proc_file(&dir.join("cgroup"));
    // On plegd's one thread (this test's), a lookup whose /proc read never returns.
    let mut c = p.client();
    let stuck = tokio::spawn(async move {
        c.get_container(api::GetContainerRequest { key: Some(Key::Pid(3_200_000)), at: None }).await
    });
    tokio::time::sleep(Duration::from_millis(200)).await;
    let asked = std::time::Instant::now();
    let (code, _) = support::http(p.app.admin_addr(), "GET", "/livez").await;
    assert_eq!(code, 200);
    let pods = p.client().list_pods(api::ListPodsRequest::default()).await.expect("ListPods answers");
    assert!(!pods.into_inner().pods.is_empty());
    let took = asked.elapsed();
    assert!(took < Duration::from_secs(1), "/livez and ListPods waited {took:?} behind a /proc read");
    let e = stuck.await.unwrap().expect_err("the stuck read is answered, not waited for");
    assert_eq!(e.code(), tonic::Code::Unavailable, "{e}");
    release.send(()).unwrap();
    p.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_container_is_found_by_its_log_file_its_attempt_and_its_namespaces_live_removed_and_after_a_restart() {
    let (state, root) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let t = tune(state.path().into(), root.path().into(), Duration::from_secs(3600));
    let p = start_plegd(t.clone()).await;
    p.h.sim.set_host_root(root.path().into());
    let pod = PodSpec::new("shop", "web").kubelet_logs();
    let (sid, ids) = p.h.run_pod(&pod, &[ContainerSpec::new("main")]).await;
    let first = until(&p, Key::ContainerId(ids[0].clone()), |r| r.container.as_ref().is_some_and(|c| c.pid != 0)).await;
    let c = first.container.clone().unwrap();
    let dir = format!("/var/log/pods/shop_web_{}", pod.uid);
    assert_eq!(c.log_path, format!("{dir}/main/0.log"), "the runtime's log path, as containerd joins it");
    let ns = c.namespaces.expect("the init process's namespaces");
    assert!(ns.mnt != 0 && ns.pid != 0 && ns.net != 0);
    // The next attempt: a file of its own.
    let mut again = ContainerSpec::new("main");
    again.attempt = 1;
    p.h.stop_container(&ids[0]).await;
    let second = p.h.start_container(&pod, &sid, &again).await;
    until(&p, Key::ContainerId(second.clone()), |r| r.container.as_ref().is_some_and(|c| c.pid != 0)).await;

    let by = |key: Key| {
        let p = &p;
        async move { get(p, key.clone()).await.unwrap_or_else(|e| panic!("{key:?}: {e}")).container.unwrap().id }
    };
    let attempt = |n: u32| {
        Key::Container(api::ContainerRef { pod_uid: pod.uid.clone(), container_name: "main".into(), attempt: n })
    };
    for (key, want) in [
        (Key::LogPath(format!("{dir}/main/0.log")), &ids[0]),
        (Key::LogPath(format!("{dir}/main/0.log.20261128-010203")), &ids[0]),
        (Key::LogPath(format!("{dir}/main/0.log.20261128-010203.gz")), &ids[0]),
        (Key::LogPath(format!("{dir}/main/1.log")), &second),
        (Key::LogPath(format!("{dir}/main/1.log.1")), &second),
        (Key::LogPath(format!("/var/log/containers/web_shop_main-{second}.log")), &second),
        (attempt(0), &ids[0]),
        (attempt(1), &second),
        (Key::MntNs(ns.mnt), &ids[0]),
        (Key::PidNs(ns.pid), &ids[0]),
    ] {
        assert_eq!(&by(key.clone()).await, want, "{key:?}");
    }
    // A link whose name says another pod is not taken at its word.
    let e = get(&p, Key::LogPath(format!("/var/log/containers/other_shop_main-{second}.log"))).await.unwrap_err();
    assert_eq!(e.code(), tonic::Code::NotFound, "{e}");
    // The host's own namespace and an inode no container has are no container's.
    for key in [Key::MntNs(plegd::sim::host::HOST_NS + 1), Key::PidNs(plegd::sim::host::HOST_NS), Key::MntNs(12345)] {
        let e = get(&p, key.clone()).await.expect_err("not a container's");
        assert_eq!(e.code(), tonic::Code::NotFound, "{key:?}: {e}");
    }

    // Removed, then plegd restarts: still found by each key.
    p.h.stop_pod(&sid).await;
    p.h.remove_pod(&sid).await;
    until(&p, Key::ContainerId(ids[0].clone()), |r| r.removed).await;
    let h = p.stop_plegd().await;
    let p = start_plegd_on(h, t).await;
    for (key, want) in
        [(Key::LogPath(format!("{dir}/main/0.log.3")), &ids[0]), (attempt(1), &second), (Key::MntNs(ns.mnt), &ids[0])]
    {
        let r = get(&p, key.clone()).await.unwrap_or_else(|e| panic!("{key:?} after the restart: {e}"));
        assert_eq!((&r.container.unwrap().id, r.removed), (want, true), "{key:?}");
        assert_eq!(r.pod.unwrap().name, "web");
    }
    p.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn malformed_lookup_keys_are_invalid_arguments_naming_their_field() {
    let p = start_plegd(|_| {}).await;
    for (key, field) in [
        (Key::LogPath("relative/0.log".into()), "log_path"),
        (Key::LogPath("/var/log/pods/ns_pod_uid/c/../0.log".into()), "log_path"),
        (Key::LogPath("/var/log/syslog".into()), "log_path"),
        (Key::LogPath("/var/log/pods/nodir/c/0.log".into()), "log_path"),
        (
            Key::Container(api::ContainerRef { pod_uid: String::new(), container_name: "c".into(), attempt: 0 }),
            "container.pod_uid",
        ),
        (
            Key::Container(api::ContainerRef { pod_uid: "u".into(), container_name: String::new(), attempt: 0 }),
            "container.container_name",
        ),
        (Key::MntNs(0), "mnt_ns"),
        (Key::PidNs(0), "pid_ns"),
    ] {
        let e = get(&p, key.clone()).await.expect_err("refused");
        assert_eq!(e.code(), tonic::Code::InvalidArgument, "{key:?}: {e}");
        assert!(e.message().starts_with(field), "{key:?}: {}", e.message());
    }
    p.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_error_about_a_huge_key_is_the_real_error_with_the_key_cut_short() {
    let p = start_plegd(|_| {}).await;
    let huge = "x".repeat(60 << 10);
    for (key, code) in [
        (Key::LogPath(format!("/var/log/{huge}.txt")), tonic::Code::InvalidArgument),
        (Key::LogPath(format!("/var/log/pods/ns_{huge}_u/c/0.log")), tonic::Code::NotFound),
        (Key::ContainerId(huge.clone()), tonic::Code::NotFound),
    ] {
        // The stock client's header limit would turn a 60 KiB grpc-message into
        // RESOURCE_EXHAUSTED: the message is cut, the code is the real one.
        let e = get(&p, key).await.expect_err("refused");
        assert_eq!(e.code(), code, "{}", &e.message()[..200.min(e.message().len())]);
        assert!(e.message().len() <= plegd::grpc::MAX_ERROR_MESSAGE, "{} bytes", e.message().len());
        assert!(e.message().contains("more bytes not shown"), "it says it was cut");
    }
    p.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_removal_the_tombstone_file_had_not_written_when_plegd_died_is_found_after_the_restart() {
    let (state, root) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let t = tune(state.path().into(), root.path().into(), Duration::from_secs(3600));
    let p = start_plegd(t.clone()).await;
    p.h.sim.set_host_root(root.path().into());
    let early = PodSpec::new("shop", "early");
    let (_, early_ids) = p.h.run_pod(&early, &[ContainerSpec::new("main")]).await;
    p.h.stop_container(&early_ids[0]).await;
    p.h.remove_container(&early_ids[0]).await;
    until(&p, Key::ContainerId(early_ids[0].clone()), |r| r.removed).await;
    let pod = PodSpec::new("shop", "late");
    let (_, ids) = p.h.run_pod(&pod, &[ContainerSpec::new("main")]).await;
    let id = ids[0].clone();
    until(&p, Key::ContainerId(id.clone()), |r| r.container.as_ref().is_some_and(|c| c.pid != 0)).await;
    p.h.stop_container(&id).await;
    p.h.remove_container(&id).await;
    until(&p, Key::ContainerId(id.clone()), |r| r.removed).await;
    let h = p.stop_plegd().await;

    // The file as a plegd killed right after publishing the removal leaves it: the
    // journal has the removal, the file only what was written before.
    let db = rusqlite::Connection::open(state.path().join("tombstones.sqlite")).unwrap();
    let gone = db.execute("DELETE FROM tombstones WHERE id = ?1", [&id]).unwrap();
    assert_eq!(gone, 1, "the removal had been written before the stop");
    drop(db);

    let p = start_plegd_on(h, t).await;
    for id in [&id, &early_ids[0]] {
        let r = get(&p, Key::ContainerId(id.clone())).await.unwrap_or_else(|e| panic!("{id} after the restart: {e}"));
        assert!(r.removed, "{id}");
        assert_eq!(r.pod.unwrap().namespace, "shop");
    }
    let r = get(
        &p,
        Key::Container(api::ContainerRef { pod_uid: pod.uid.clone(), container_name: "main".into(), attempt: 0 }),
    )
    .await
    .expect("by pod, name and attempt too");
    assert_eq!(r.container.unwrap().id, id);
    p.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_log_file_a_recreated_static_pod_writes_again_is_the_new_containers_and_the_old_one_keeps_its_id() {
    let (state, root) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let t = tune(state.path().into(), root.path().into(), Duration::from_secs(3600));
    let p = start_plegd(t).await;
    p.h.sim.set_host_root(root.path().into());
    // A static pod's UID is a hash of its manifest: deleted and written again, the pod
    // comes back with the same UID, and its container writes the same file.
    let pod = PodSpec::new("kube-system", "etcd").kubelet_logs();
    let (sid, old) = p.h.run_pod(&pod, &[ContainerSpec::new("etcd")]).await;
    until(&p, Key::ContainerId(old[0].clone()), |r| r.container.as_ref().is_some_and(|c| c.pid != 0)).await;
    p.h.stop_pod(&sid).await;
    p.h.remove_pod(&sid).await;
    until(&p, Key::ContainerId(old[0].clone()), |r| r.removed).await;
    let (_, new) = p.h.run_pod(&pod, &[ContainerSpec::new("etcd")]).await;
    until(&p, Key::ContainerId(new[0].clone()), |r| r.container.as_ref().is_some_and(|c| c.pid != 0)).await;

    let file = format!("/var/log/pods/kube-system_etcd_{}/etcd/0.log", pod.uid);
    for key in [Key::LogPath(file.clone()), Key::LogPath(format!("{file}.1"))] {
        let r = get(&p, key.clone()).await.unwrap_or_else(|e| panic!("{key:?}: {e}"));
        assert_eq!((&r.container.unwrap().id, r.removed), (&new[0], false), "{key:?}: the pod's current container");
    }
    let attempt0 =
        Key::Container(api::ContainerRef { pod_uid: pod.uid.clone(), container_name: "etcd".into(), attempt: 0 });
    assert_eq!(get(&p, attempt0).await.unwrap().container.unwrap().id, new[0]);
    // The removed one is still itself by its id, and by its link under /var/log/containers.
    let r = get(&p, Key::ContainerId(old[0].clone())).await.unwrap();
    assert!(r.removed);
    let link = format!("/var/log/containers/etcd_kube-system_etcd-{}.log", old[0]);
    let r = get(&p, Key::LogPath(link)).await.unwrap();
    assert_eq!((&r.container.unwrap().id, r.removed), (&old[0], true));
    p.stop().await;
}

/// `plegd run`'s flags as the command line gives them, validated.
fn flags(argv: &[&str]) -> plegd::config::RunConfig {
    #[derive(clap::Parser)]
    struct Run {
        #[command(flatten)]
        run: plegd::config::RunArgs,
    }
    let args = <Run as clap::Parser>::try_parse_from(std::iter::once("plegd").chain(argv.iter().copied())).unwrap();
    plegd::config::RunConfig::try_from(&args.run).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_state_dir_and_host_root_flags_reach_the_journal_the_lookup_and_the_run_log() {
    let (state, root) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let given = flags(&[
        "--state-dir",
        state.path().to_str().unwrap(),
        "--host-root",
        root.path().to_str().unwrap(),
        "--tombstone-retention",
        "7m",
    ]);
    assert_eq!(given.lookup.retention, Duration::from_secs(420));
    let p = start_plegd(move |c| {
        c.state_dir = given.state_dir;
        c.host = given.host;
        c.lookup = given.lookup;
    })
    .await;
    p.h.sim.set_host_root(root.path().into());
    let (_, ids) = p.h.run_pod(&PodSpec::new("shop", "web"), &[ContainerSpec::new("main")]).await;
    // The host root reached the relister and the lookup: the container's PID is read there.
    let live = until(&p, Key::ContainerId(ids[0].clone()), |r| r.container.as_ref().is_some_and(|c| c.pid != 0)).await;
    let (pid, _) = kernel_view(root.path(), &live);
    assert_eq!(get(&p, Key::Pid(pid)).await.unwrap().container.unwrap().id, ids[0]);
    p.h.stop_container(&ids[0]).await;
    p.h.remove_container(&ids[0]).await;
    until(&p, Key::ContainerId(ids[0].clone()), |r| r.removed).await;
    p.stop().await;
    // The one state dir reached each subsystem that keeps something there.
    for file in ["journal.db", "tombstones.sqlite", "runs.log"] {
        assert!(state.path().join(file).exists(), "{file} is not in the state dir");
    }
}

async fn by_ip(
    p: &Plegd,
    ip: &str,
    at: Option<std::time::SystemTime>,
) -> Result<api::GetContainerResponse, tonic::Status> {
    let req =
        api::GetContainerRequest { key: Some(Key::PodIp(ip.into())), at: at.map(plegd::model::system_to_timestamp) };
    p.client().get_container(req).await.map(|r| r.into_inner())
}

/// `ip` was held by pod `first` at its moment and by `second` at its moment and now.
async fn holders(p: &Plegd, ip: &str, first: (&str, std::time::SystemTime), second: (&str, std::time::SystemTime)) {
    let then = by_ip(p, ip, Some(first.1)).await.expect("the earlier holder");
    assert_eq!(then.pod.as_ref().unwrap().uid, first.0, "before the reuse: the first pod");
    assert!(then.removed, "it is removed");
    for at in [Some(second.1), None] {
        let r = by_ip(p, ip, at).await.expect("the later holder");
        assert_eq!((r.pod.unwrap().uid.as_str(), r.removed), (second.0, false), "after the reuse ({at:?})");
    }
    let before = first.1 - Duration::from_secs(3600);
    assert_eq!(by_ip(p, ip, Some(before)).await.unwrap_err().code(), tonic::Code::NotFound, "before anyone");
    let none = by_ip(p, "10.0.0.1", None).await.unwrap_err();
    assert_eq!(none.code(), tonic::Code::NotFound, "an address no pod held");
    let mapped = by_ip(p, &format!("::ffff:{ip}"), None).await.expect("IPv4 written as IPv6 is the same address");
    assert_eq!(mapped.pod.unwrap().uid, second.0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_address_reused_at_once_names_each_pod_that_held_it_at_its_time_across_a_restart() {
    let (state, root) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let t = tune(state.path().into(), root.path().into(), Duration::from_secs(3600));
    let p = start_plegd(t.clone()).await;
    p.h.sim.set_host_root(root.path().into());
    let pod_network = |name: &str| PodSpec { host_network: false, ..PodSpec::new("shop", name) };
    let first = pod_network("first");
    let (sid, ids) = p.h.run_pod(&first, &[ContainerSpec::new("app")]).await;
    let live = until(&p, Key::ContainerId(ids[0].clone()), |r| r.pod.as_ref().is_some_and(|p| !p.ips.is_empty())).await;
    let ip = live.pod.unwrap().ips[0].clone();
    let during_first = std::time::SystemTime::now();
    let now = by_ip(&p, &ip, None).await.expect("the live pod");
    assert_eq!((now.pod.unwrap().uid, now.container.unwrap().id), (first.uid.clone(), ids[0].clone()));

    // The pod goes, and the runtime gives its address to the next pod at once.
    p.h.stop_pod(&sid).await;
    p.h.remove_pod(&sid).await;
    until(&p, Key::ContainerId(ids[0].clone()), |r| r.removed).await;
    tokio::time::sleep(Duration::from_millis(50)).await;
    let second = pod_network("second");
    let (sid2, ids2) = p.h.run_pod(&second, &[ContainerSpec::new("app")]).await;
    // An init container of the live pod, removed: a tombstone of a pod that still runs
    // (after a restart, it must not end the pod's holding).
    let init = p.h.start_container(&second, &sid2, &ContainerSpec::new("init")).await;
    // Seen running first: one gone before plegd ever read it leaves no tombstone (on a
    // loaded machine the start, stop and removal fitted between two reads).
    until(&p, Key::ContainerId(init.clone()), |r| !r.removed).await;
    p.h.stop_container(&init).await;
    p.h.remove_container(&init).await;
    until(&p, Key::ContainerId(init.clone()), |r| r.removed).await;
    let again =
        until(&p, Key::ContainerId(ids2[0].clone()), |r| r.pod.as_ref().is_some_and(|p| !p.ips.is_empty())).await;
    assert_eq!(
        again.pod.unwrap().ips[0],
        ip,
        "the simulated runtime reuses the lowest free address, as host-local does"
    );
    let during_second = std::time::SystemTime::now();

    // A host-network pod has no address of its own (the runtime reports none, as
    // containerd does), so no address plegd holds is its.
    let host = PodSpec::new("shop", "host");
    let (_, host_ids) = p.h.run_pod(&host, &[ContainerSpec::new("app")]).await;
    let h = until(&p, Key::ContainerId(host_ids[0].clone()), |r| r.pod.is_some()).await.pod.unwrap();
    assert!(h.ips.is_empty() && h.sandboxes.iter().all(|s| s.ip.is_empty()), "{h:?}");
    holders(&p, &ip, (&first.uid, during_first), (&second.uid, during_second)).await;
    // plegd restarts on its state dir: the same answers.
    let h = p.stop_plegd().await;
    let p = start_plegd_on(h, t).await;
    holders(&p, &ip, (&first.uid, during_first), (&second.uid, during_second)).await;
    // Bad input: a clear error naming the field.
    for (req, field) in [
        (api::GetContainerRequest { key: Some(Key::PodIp("10.244.0.300".into())), at: None }, "pod_ip"),
        (api::GetContainerRequest { key: Some(Key::PodIp("web".into())), at: None }, "pod_ip"),
        (
            api::GetContainerRequest {
                key: Some(Key::ContainerId(ids2[0].clone())),
                at: Some(plegd::model::system_to_timestamp(during_first)),
            },
            "at",
        ),
        (
            api::GetContainerRequest {
                key: Some(Key::PodIp(ip.clone())),
                at: Some(prost_types::Timestamp { seconds: -5, nanos: 0 }),
            },
            "at",
        ),
    ] {
        let e = p.client().get_container(req).await.unwrap_err();
        assert_eq!(e.code(), tonic::Code::InvalidArgument);
        assert!(e.message().contains(field), "{}", e.message());
    }
    p.stop().await;
}

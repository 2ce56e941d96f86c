//! plegd as users deploy it: its image (`scripts/build-image.sh`), run as a pod under a
//! real containerd through CRI with the container spec of `manifests/daemonset.yaml` —
//! read from the file, so this test cannot drift from the manifest — while a kubelet-like
//! prober evaluates the manifest's liveness and readiness probes for minutes, a quiet
//! period and a containerd restart included. A client on the host reads plegd's API
//! through the socket's hostPath.
//!
//! Run by `tests/e2e/run.sh` (containerd 2.1 by default, `PLEGD_E2E_POD_VERSIONS`), which
//! sets `PLEGD_E2E_IMAGE` to the image archive besides the usual `PLEGD_E2E_*`.
//!
//! Where this differs from a kubelet, and why: the pod uses the host network (these
//! machines have no CNI), so the probes reach the admin port on 127.0.0.1 rather than on
//! a pod IP; hostPaths are mapped to the test containerd's directories (below).

mod support;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::Command;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use support::containerd::figure;

use plegd::cri::RuntimeService;
use plegd::cri::client::{ClientOptions, CriClient};
use plegd::cri::spec::{ContainerSpec, PodSpec};
use plegd::proto::plegd as api;
use plegd::proto::plegd::watch_event::Kind;
use plegd::proto::runtime as cri;
use serde::Deserialize;
use serde_yaml::Value;
use tokio::time::Instant;

const NEEDS: &str = "needs a real containerd and plegd's image: run tests/e2e/run.sh (it installs containerd, builds the image with scripts/build-image.sh and sets PLEGD_E2E_IMAGE)";

fn var(k: &str) -> String {
    std::env::var(k).unwrap_or_else(|_| {
        panic!("\n\n*** {k} is not set: this end-to-end test {NEEDS}. It cannot run without them. ***\n")
    })
}

/// A probe as the manifest declares it, with Kubernetes' defaults for what it leaves out.
#[derive(Clone, Debug)]
struct Probe {
    path: String,
    port: u16,
    initial_delay: Duration,
    period: Duration,
    timeout: Duration,
    failure_threshold: u32,
    success_threshold: u32,
}

/// The DaemonSet's plegd container, as a kubelet would turn it into CRI requests.
#[derive(Debug)]
struct Manifest {
    image: String,
    command: Vec<String>,
    args: Vec<String>,
    env: Vec<(String, String)>,
    /// (container path, host path, read-only, hostPath type)
    mounts: Vec<(String, String, bool, String)>,
    liveness: Probe,
    readiness: Probe,
    run_as_user: Option<i64>,
    run_as_group: Option<i64>,
    no_new_privs: bool,
    readonly_rootfs: bool,
    drop_caps: Vec<String>,
    cpu_request_milli: i64,
    cpu_limit_milli: i64,
    memory_limit: i64,
    grace: i64,
}

fn seconds(v: &Value, key: &str, default: u64) -> Duration {
    Duration::from_secs(v[key].as_u64().unwrap_or(default))
}

fn cpu_milli(v: &Value) -> i64 {
    let s = v.as_str().map(str::to_owned).unwrap_or_else(|| v.as_f64().expect("a cpu quantity").to_string());
    match s.strip_suffix('m') {
        Some(m) => m.parse().expect("cpu millis"),
        None => (s.parse::<f64>().expect("cpu cores") * 1000.0) as i64,
    }
}

fn bytes(v: &Value) -> i64 {
    let s = v.as_str().expect("a memory quantity");
    let (n, unit) = s.split_at(s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len()));
    let n: i64 = n.parse().expect("memory amount");
    n * match unit {
        "" => 1,
        "Ki" => 1 << 10,
        "Mi" => 1 << 20,
        "Gi" => 1 << 30,
        "k" => 1000,
        "M" => 1_000_000,
        "G" => 1_000_000_000,
        u => panic!("memory unit {u} is not handled by this test"),
    }
}

impl Manifest {
    fn read() -> Manifest {
        let path = format!("{}/manifests/daemonset.yaml", env!("CARGO_MANIFEST_DIR"));
        let text = std::fs::read_to_string(&path).unwrap();
        let docs: Vec<Value> =
            serde_yaml::Deserializer::from_str(&text).map(|d| Value::deserialize(d).expect("valid YAML")).collect();
        let ds = docs.iter().find(|d| d["kind"] == "DaemonSet").expect("a DaemonSet");
        let spec = &ds["spec"]["template"]["spec"];
        let containers = spec["containers"].as_sequence().unwrap();
        assert_eq!(containers.len(), 1, "the test runs the DaemonSet's one container");
        let c = &containers[0];
        let strings = |v: &Value| -> Vec<String> {
            v.as_sequence().map(|s| s.iter().map(|x| x.as_str().unwrap().to_owned()).collect()).unwrap_or_default()
        };
        let ports: BTreeMap<String, u16> = c["ports"]
            .as_sequence()
            .unwrap()
            .iter()
            .map(|p| (p["name"].as_str().unwrap().to_owned(), p["containerPort"].as_u64().unwrap() as u16))
            .collect();
        let probe = |p: &Value| -> Probe {
            let get = &p["httpGet"];
            let port = match &get["port"] {
                Value::String(name) => ports[name],
                n => n.as_u64().unwrap() as u16,
            };
            Probe {
                path: get["path"].as_str().unwrap().to_owned(),
                port,
                initial_delay: seconds(p, "initialDelaySeconds", 0),
                period: seconds(p, "periodSeconds", 10),
                timeout: seconds(p, "timeoutSeconds", 1),
                failure_threshold: p["failureThreshold"].as_u64().unwrap_or(3) as u32,
                success_threshold: p["successThreshold"].as_u64().unwrap_or(1) as u32,
            }
        };
        let volumes: BTreeMap<String, (String, String)> = spec["volumes"]
            .as_sequence()
            .unwrap()
            .iter()
            .map(|v| {
                let hp = &v["hostPath"];
                assert!(hp.is_mapping(), "volume {:?}: only hostPath volumes are mapped by this test", v["name"]);
                (
                    v["name"].as_str().unwrap().to_owned(),
                    (hp["path"].as_str().unwrap().to_owned(), hp["type"].as_str().unwrap_or("").to_owned()),
                )
            })
            .collect();
        let mounts = c["volumeMounts"]
            .as_sequence()
            .unwrap()
            .iter()
            .map(|m| {
                let (host, kind) = volumes[m["name"].as_str().unwrap()].clone();
                (m["mountPath"].as_str().unwrap().to_owned(), host, m["readOnly"].as_bool().unwrap_or(false), kind)
            })
            .collect();
        let sc = &c["securityContext"];
        let res = &c["resources"];
        Manifest {
            image: c["image"].as_str().unwrap().to_owned(),
            command: strings(&c["command"]),
            args: strings(&c["args"]),
            env: c["env"]
                .as_sequence()
                .map(|s| s.iter().map(|e| (e["name"].as_str().unwrap().to_owned(), env_value(e))).collect())
                .unwrap_or_default(),
            mounts,
            liveness: probe(&c["livenessProbe"]),
            readiness: probe(&c["readinessProbe"]),
            run_as_user: sc["runAsUser"].as_i64(),
            run_as_group: sc["runAsGroup"].as_i64(),
            no_new_privs: sc["allowPrivilegeEscalation"] == false,
            readonly_rootfs: sc["readOnlyRootFilesystem"] == true,
            drop_caps: strings(&sc["capabilities"]["drop"]),
            cpu_request_milli: cpu_milli(&res["requests"]["cpu"]),
            cpu_limit_milli: cpu_milli(&res["limits"]["cpu"]),
            memory_limit: bytes(&res["limits"]["memory"]),
            grace: spec["terminationGracePeriodSeconds"].as_i64().unwrap_or(30),
        }
    }

    /// The CreateContainer config a kubelet would send for this container, with hostPaths
    /// replaced by `host`'s mapping.
    fn container_config(
        &self,
        pod: &PodSpec,
        sid: &str,
        host: &dyn Fn(&str) -> PathBuf,
    ) -> cri::CreateContainerRequest {
        let mut req = pod.create_request(sid, &ContainerSpec { command: Vec::new(), ..ContainerSpec::new("plegd") });
        let cfg = req.config.as_mut().unwrap();
        cfg.image = Some(cri::ImageSpec { image: self.image.clone(), ..Default::default() });
        cfg.command = self.command.clone();
        cfg.args = self.args.clone();
        cfg.envs = self.env.iter().map(|(k, v)| cri::KeyValue { key: k.clone(), value: v.clone() }).collect();
        cfg.log_path = "plegd/0.log".into();
        cfg.mounts = self
            .mounts
            .iter()
            .map(|(path, hp, ro, _)| cri::Mount {
                container_path: path.clone(),
                host_path: host(hp).display().to_string(),
                readonly: *ro,
            })
            .collect();
        // The kubelet's translation of requests and limits (cgroup v1): shares from the
        // request, a CFS quota over a 100 ms period from the limit.
        let resources = cri::LinuxContainerResources {
            cpu_shares: (self.cpu_request_milli * 1024 / 1000).max(2),
            cpu_period: 100_000,
            cpu_quota: self.cpu_limit_milli * 100_000 / 1000,
            memory_limit_in_bytes: self.memory_limit,
            ..Default::default()
        };
        let security = cri::LinuxContainerSecurityContext {
            capabilities: Some(cri::Capability { drop_capabilities: self.drop_caps.clone(), ..Default::default() }),
            run_as_user: self.run_as_user.map(|value| cri::Int64Value { value }),
            run_as_group: self.run_as_group.map(|value| cri::Int64Value { value }),
            readonly_rootfs: self.readonly_rootfs,
            no_new_privs: self.no_new_privs,
            ..Default::default()
        };
        cfg.linux = Some(cri::LinuxContainerConfig { resources: Some(resources), security_context: Some(security) });
        req
    }
}

/// One HTTP probe as the kubelet runs it: a GET with the probe's timeout; 200–399 is
/// success, anything else (refused, timed out, another code) a failure.
async fn probe_once(p: &Probe) -> Result<u16, String> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let attempt = async {
        let mut s = tokio::net::TcpStream::connect(("127.0.0.1", p.port)).await.map_err(|e| e.to_string())?;
        let req = format!(
            "GET {} HTTP/1.1\r\nHost: 127.0.0.1\r\nUser-Agent: kube-probe/1.34\r\nConnection: close\r\n\r\n",
            p.path
        );
        s.write_all(req.as_bytes()).await.map_err(|e| e.to_string())?;
        let mut buf = Vec::new();
        s.read_to_end(&mut buf).await.map_err(|e| e.to_string())?;
        let text = String::from_utf8_lossy(&buf);
        let code: u16 = text.split_whitespace().nth(1).and_then(|c| c.parse().ok()).ok_or("no status line")?;
        if (200..400).contains(&code) {
            Ok(code)
        } else {
            Err(format!("HTTP {code}: {}", text.lines().last().unwrap_or("")))
        }
    };
    match tokio::time::timeout(p.timeout, attempt).await {
        Ok(r) => r,
        Err(_) => Err(format!("timed out after {:?}", p.timeout)),
    }
}

/// `/metrics` as a Prometheus scrape reads it (HTTP/1.0: one unchunked body).
async fn scrape(port: u16) -> String {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut s = tokio::net::TcpStream::connect(("127.0.0.1", port)).await.expect("the admin port");
    s.write_all(b"GET /metrics HTTP/1.0\r\n\r\n").await.unwrap();
    let mut buf = Vec::new();
    s.read_to_end(&mut buf).await.unwrap();
    String::from_utf8_lossy(&buf).into_owned()
}

/// What the prober saw.
#[derive(Default, Debug)]
struct ProbeLog {
    liveness_runs: u32,
    liveness_failures: Vec<(f64, String)>,
    /// Set when consecutive liveness failures reached the threshold: the kubelet would
    /// have killed and restarted plegd here.
    restart_at: Option<(f64, String)>,
    readiness_runs: u32,
    ready: bool,
    ready_since: Option<f64>,
    /// (from, to) seconds after start during which the pod was not ready, after it first was.
    not_ready: Vec<(f64, Option<f64>, String)>,
}

/// Runs one probe on the kubelet's schedule until `stop`: its initial delay, then every
/// period; `failure_threshold` consecutive failures flip it to failed,
/// `success_threshold` consecutive successes back.
async fn prober(
    p: Probe,
    liveness: bool,
    t0: Instant,
    log: Arc<Mutex<ProbeLog>>,
    stop: tokio_util::sync::CancellationToken,
) {
    tokio::time::sleep(p.initial_delay).await;
    let (mut fails, mut oks) = (0u32, 0u32);
    let mut tick = tokio::time::interval(p.period);
    loop {
        tokio::select! {
            _ = stop.cancelled() => return,
            _ = tick.tick() => {}
        }
        let r = probe_once(&p).await;
        let at = t0.elapsed().as_secs_f64();
        let mut l = log.lock().unwrap();
        match r {
            Ok(_) => {
                fails = 0;
                oks += 1;
            }
            Err(e) => {
                oks = 0;
                fails += 1;
                if liveness {
                    l.liveness_failures.push((at, e.clone()));
                }
                if fails >= p.failure_threshold {
                    if liveness && l.restart_at.is_none() {
                        l.restart_at = Some((at, e.clone()));
                    }
                    if !liveness && l.ready {
                        l.ready = false;
                        l.not_ready.push((at, None, e));
                    }
                }
            }
        }
        if liveness {
            l.liveness_runs += 1;
        } else {
            l.readiness_runs += 1;
            if oks >= p.success_threshold && !l.ready {
                l.ready = true;
                l.ready_since.get_or_insert(at);
                if let Some(last) = l.not_ready.last_mut() {
                    last.1 = Some(at);
                }
            }
        }
    }
}

/// The message of the panic that failed the test, kept by [`LogOnFailure::new`]'s hook.
static FAILURE: Mutex<Option<String>> = Mutex::new(None);

/// Prints plegd's own log (the container's, written by containerd) when the test fails,
/// then the failure again: a backtrace between the panic and the end of the output must
/// not push the reason out of what a CI summary shows.
struct LogOnFailure(PathBuf);

impl LogOnFailure {
    fn new(log: PathBuf) -> Self {
        let default = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            *FAILURE.lock().unwrap_or_else(|e| e.into_inner()) = Some(info.to_string());
            default(info);
        }));
        Self(log)
    }
}

impl Drop for LogOnFailure {
    fn drop(&mut self) {
        if std::thread::panicking() {
            let log = std::fs::read_to_string(&self.0).unwrap_or_else(|e| format!("({}: {e})", self.0.display()));
            let tail: Vec<&str> = log.lines().rev().take(80).collect();
            eprintln!("---- plegd's container log ({}), last lines ----", self.0.display());
            for l in tail.into_iter().rev() {
                eprintln!("{l}");
            }
            let why = FAILURE.lock().unwrap_or_else(|e| e.into_inner()).take();
            eprintln!("---- the test failed: {} ----", why.as_deref().unwrap_or("(no panic message recorded)"));
        }
    }
}

fn ctl(args: &[&str]) {
    let out = Command::new(var("PLEGD_E2E_CTL")).args(args).output().unwrap();
    assert!(out.status.success(), "containerd.sh {args:?}: {}", String::from_utf8_lossy(&out.stderr));
}

/// Reads the watch until an event of `kind` about container `id` (or any container of
/// pod `uid` when `id` is empty), keeping what it reads.
async fn wait_watch(
    watch: &mut tonic::Streaming<api::WatchEvent>,
    seen: &mut Vec<api::LifecycleEvent>,
    kind: api::LifecycleEventType,
    id: &str,
    within: Duration,
) -> api::LifecycleEvent {
    if let Some(e) = seen.iter().find(|e| e.r#type == kind as i32 && e.container_id == id) {
        return e.clone();
    }
    let deadline = Instant::now() + within;
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        let m = tokio::time::timeout(left, watch.message())
            .await
            .unwrap_or_else(|_| panic!("no {kind:?} for {id} within {within:?}; saw {seen:#?}"))
            .expect("the watch stream stays up")
            .expect("the watch stream stays open");
        match m.kind {
            Some(Kind::Event(e)) => {
                seen.push(e.clone());
                if e.r#type == kind as i32 && e.container_id == id {
                    return e;
                }
            }
            Some(Kind::Reset(r)) => panic!("the host client was reset: {r:?}"),
            _ => {}
        }
    }
}

async fn start_container(c: &CriClient, pod: &PodSpec, sid: &str, spec: &ContainerSpec) -> String {
    let mut raw = c.raw();
    let id =
        raw.create_container(pod.create_request(sid, spec)).await.expect("CreateContainer").into_inner().container_id;
    raw.start_container(cri::StartContainerRequest { container_id: id.clone() }).await.expect("StartContainer");
    id
}

/// An env entry's value as the kubelet would give it: a literal, or from the downward
/// API (this test's node is "e2e-node").
fn env_value(e: &serde_yaml::Value) -> String {
    if let Some(v) = e["value"].as_str() {
        return v.to_owned();
    }
    match e["valueFrom"]["fieldRef"]["fieldPath"].as_str() {
        Some("spec.nodeName") => "e2e-node".into(),
        other => {
            panic!("manifests/daemonset.yaml env {:?} from {other:?}, which tests/e2e_pod.rs does not map", e["name"])
        }
    }
}

#[tokio::test]
#[ignore = "needs a real containerd and plegd's image: run tests/e2e/run.sh"]
async fn plegd_runs_as_the_daemonset_describes_and_its_probes_pass_through_quiet_and_a_containerd_restart() {
    let endpoint = var("PLEGD_E2E_ENDPOINT");
    let version = var("PLEGD_E2E_VERSION");
    let archive = var("PLEGD_E2E_IMAGE");
    let m = Manifest::read();
    println!("manifest: {m:#?}");

    // hostPaths → the test containerd's directories. A hostPath this test does not know
    // fails it: a new mount in the manifest must be mapped here, not silently skipped.
    let containerd_sock = PathBuf::from(endpoint.trim_start_matches("unix://"));
    let containerd_dir = containerd_sock.parent().unwrap().to_owned();
    assert_eq!(
        containerd_sock.file_name().unwrap(),
        "containerd.sock",
        "the manifest's endpoint names containerd.sock"
    );
    let host = tempfile::tempdir().unwrap();
    let (run_dir, state_dir, log_dir) =
        (host.path().join("run-plegd"), host.path().join("state"), host.path().join("logs"));
    let map = |hp: &str| -> PathBuf {
        match hp {
            "/run/containerd" => containerd_dir.clone(),
            "/run/plegd" => run_dir.clone(),
            "/var/lib/plegd" => state_dir.clone(),
            // The host's own, read-only: the pod runs on this machine.
            "/proc" | "/sys/fs/cgroup" => PathBuf::from(hp),
            other => panic!("manifests/daemonset.yaml mounts hostPath {other}, which tests/e2e_pod.rs does not map"),
        }
    };
    for (_, hp, _, kind) in &m.mounts {
        match kind.as_str() {
            "DirectoryOrCreate" => std::fs::create_dir_all(map(hp)).unwrap(),
            "Directory" => assert!(map(hp).is_dir(), "hostPath {hp} (type Directory) must exist"),
            other => panic!("hostPath type {other:?} is not handled by this test"),
        }
    }
    std::fs::create_dir_all(&log_dir).unwrap();
    let _log = LogOnFailure::new(log_dir.join("plegd/0.log"));

    // The image, imported as the manifest names it.
    ctl(&["import", &version, &archive, &m.image]);

    let c = CriClient::new(
        &endpoint,
        ClientOptions {
            timeout: Duration::from_secs(20),
            backoff_initial: Duration::from_millis(50),
            backoff_max: Duration::from_millis(500),
        },
        None,
    )
    .unwrap();
    // A plegd pod left by an earlier failed run would hold the admin port.
    for old in c.list_pod_sandboxes(None).await.unwrap() {
        if old.metadata.as_ref().is_some_and(|m| m.namespace == "plegd") {
            let _ = c.raw().stop_pod_sandbox(cri::StopPodSandboxRequest { pod_sandbox_id: old.id.clone() }).await;
            let _ = c.raw().remove_pod_sandbox(cri::RemovePodSandboxRequest { pod_sandbox_id: old.id }).await;
        }
    }
    let pod = PodSpec::new("plegd", &format!("plegd-{}", fastrand::u32(..)));
    let mut sandbox = pod.sandbox_config();
    sandbox.log_directory = log_dir.display().to_string();
    let sid = c
        .raw()
        .run_pod_sandbox(cri::RunPodSandboxRequest { config: Some(sandbox.clone()), runtime_handler: String::new() })
        .await
        .expect("RunPodSandbox")
        .into_inner()
        .pod_sandbox_id;
    let mut create = m.container_config(&pod, &sid, &map);
    create.sandbox_config = Some(sandbox);
    let plegd_id = c.raw().create_container(create).await.expect("CreateContainer (plegd)").into_inner().container_id;
    c.raw()
        .start_container(cri::StartContainerRequest { container_id: plegd_id.clone() })
        .await
        .expect("StartContainer");
    let t0 = Instant::now();

    // The kubelet's prober, on the manifest's schedule, for the whole test.
    let log = Arc::new(Mutex::new(ProbeLog::default()));
    let stop = tokio_util::sync::CancellationToken::new();
    let probers = [
        tokio::spawn(prober(m.liveness.clone(), true, t0, log.clone(), stop.clone())),
        tokio::spawn(prober(m.readiness.clone(), false, t0, log.clone(), stop.clone())),
    ];
    let ready_by = m.readiness.initial_delay + m.readiness.period * 4 + Duration::from_secs(10);
    while !log.lock().unwrap().ready {
        assert!(t0.elapsed() < ready_by, "not ready within {ready_by:?}: {:?}", log.lock().unwrap());
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let ready_after = log.lock().unwrap().ready_since.unwrap();

    // A client on the host, through the hostPath the manifest shares.
    let socket = run_dir.join("plegd.sock");
    assert!(socket.exists(), "plegd's API socket appears in the host directory {}", run_dir.display());
    let mut client = plegd::cli::client::connect(&format!("unix://{}", socket.display())).unwrap();
    let mut watch = client.watch(api::WatchRequest::default()).await.expect("Watch").into_inner();
    let mut seen = Vec::new();
    // The snapshot has plegd's own pod, its container running.
    let mut snapshot = Vec::new();
    loop {
        let m = tokio::time::timeout(Duration::from_secs(20), watch.message()).await.expect("the snapshot in time");
        match m.expect("the watch stream").expect("open").kind {
            Some(Kind::Snapshot(p)) => snapshot.push(p),
            Some(Kind::Synced(_)) => break,
            Some(Kind::Event(e)) => seen.push(e),
            _ => {}
        }
    }
    let own = snapshot
        .iter()
        .find(|p| p.uid == pod.uid)
        .unwrap_or_else(|| panic!("plegd's own pod in the snapshot: {snapshot:#?}"));
    assert!(own.containers.iter().any(|c| c.id == plegd_id), "plegd's container in its pod: {own:#?}");

    // A pod started afterwards reaches the host client.
    let work = PodSpec::new("e2e", "after-plegd");
    let wsid = c.raw().run_pod_sandbox(work.run_request()).await.expect("RunPodSandbox").into_inner().pod_sandbox_id;
    let first = start_container(&c, &work, &wsid, &ContainerSpec::new("main")).await;
    let asked = Instant::now();
    wait_watch(&mut watch, &mut seen, api::LifecycleEventType::ContainerStarted, &first, Duration::from_secs(20)).await;
    let first_ms = asked.elapsed().as_secs_f64() * 1e3;

    // A quiet node: nothing changes while the probes keep running.
    let quiet: u64 = std::env::var("PLEGD_E2E_POD_QUIET_SECS").ok().and_then(|s| s.parse().ok()).unwrap_or(150);
    tokio::time::sleep(Duration::from_secs(quiet)).await;
    {
        let l = log.lock().unwrap();
        assert!(l.restart_at.is_none(), "the kubelet would have restarted plegd on a quiet node: {l:?}");
    }

    // containerd restarts under plegd's pod; a container exits while it is down.
    let dies =
        start_container(&c, &work, &wsid, &ContainerSpec::new("dies").exits_after(Duration::from_secs(3), 5)).await;
    wait_watch(&mut watch, &mut seen, api::LifecycleEventType::ContainerStarted, &dies, Duration::from_secs(20)).await;
    let outage = t0.elapsed().as_secs_f64();
    ctl(&["kill", &version]);
    tokio::time::sleep(Duration::from_secs(6)).await;
    ctl(&["resume", &version]);
    let back = Instant::now();
    let died =
        wait_watch(&mut watch, &mut seen, api::LifecycleEventType::ContainerDied, &dies, Duration::from_secs(60)).await;
    let died_s = back.elapsed().as_secs_f64();
    let live = c.container_status(&dies).await.expect("ContainerStatus after the restart");
    let reported = died.pod.as_ref().and_then(|p| p.containers.iter().find(|s| s.id == dies)).unwrap();
    assert_eq!(reported.exit_code, live.exit_code, "the runtime's exit code");
    // A container started after the restart arrives too: plegd reconnected.
    let after = start_container(&c, &work, &wsid, &ContainerSpec::new("after-restart")).await;
    let asked = Instant::now();
    wait_watch(&mut watch, &mut seen, api::LifecycleEventType::ContainerStarted, &after, Duration::from_secs(20)).await;
    let after_ms = asked.elapsed().as_secs_f64() * 1e3;
    // Let the prober run past the restart by a full liveness window.
    tokio::time::sleep(m.liveness.period * m.liveness.failure_threshold + Duration::from_secs(5)).await;

    stop.cancel();
    for p in probers {
        p.await.unwrap();
    }
    let l = std::mem::take(&mut *log.lock().unwrap());
    assert!(l.restart_at.is_none(), "the kubelet would have restarted plegd: {l:?}");
    assert!(l.ready, "ready at the end: {l:?}");
    // The kubelet's schedule, less one period of slack for each probe.
    let ran_for = t0.elapsed();
    let expected =
        |p: &Probe| ((ran_for.saturating_sub(p.initial_delay)).as_secs() / p.period.as_secs()).saturating_sub(1);
    assert!(
        u64::from(l.liveness_runs) >= expected(&m.liveness) && u64::from(l.readiness_runs) >= expected(&m.readiness),
        "the probes ran on schedule: {l:?}"
    );
    // The event stream went down once, with containerd, and never otherwise: a stream
    // closed as "fell behind" on a quiet node would show here (it did, before the fix).
    let metrics = scrape(m.liveness.port).await;
    let value = |name: &str| -> f64 {
        metrics
            .lines()
            .find(|l| l.starts_with(name) && l[name.len()..].starts_with([' ', '{']))
            .and_then(|l| l.rsplit(' ').next())
            .and_then(|v| v.parse().ok())
            .unwrap_or_else(|| panic!("{name} in /metrics"))
    };
    let (ups, downs) = (value("plegd_evented_connections_total"), value("plegd_evented_connection_errors_total"));
    // Failed reconnection attempts during the outage count as errors too.
    assert!(
        ups == 2.0 && downs >= 1.0,
        "the stream came up once at start and once after containerd's restart: {ups} up, {downs} errors"
    );
    // plegd's container is the one started, never restarted, still running.
    let own = c.container_status(&plegd_id).await.expect("plegd's container");
    assert_eq!(own.state, cri::ContainerState::ContainerRunning as i32, "plegd still runs: {own:?}");

    // The kubelet's stop: StopContainer with the pod's grace period; plegd drains and exits 0.
    let stopping = Instant::now();
    c.raw()
        .stop_container(cri::StopContainerRequest { container_id: plegd_id.clone(), timeout: m.grace })
        .await
        .expect("StopContainer");
    let stop_s = stopping.elapsed().as_secs_f64();
    let own = c.container_status(&plegd_id).await.unwrap();
    assert_eq!(own.exit_code, 0, "SIGTERM is a clean exit: {own:?}");
    assert!(stop_s < m.grace as f64, "stopped within the grace period ({stop_s:.1} s)");
    // The journal is on the hostPath: it survives the pod.
    assert!(state_dir.join("journal.db").exists(), "the journal is in the state dir's hostPath");

    let not_ready: Vec<String> = l
        .not_ready
        .iter()
        .map(|(a, b, why)| format!("{:.0}–{} s ({why})", a, b.map(|b| format!("{b:.0}")).unwrap_or("end".into())))
        .collect();
    figure(&format!(
        "containerd {version}, plegd as a pod ({}; manifest's args, env, mounts, security context, resources): ready after {ready_after:.1} s; {} liveness and {} readiness probes over {:.0} s incl. {quiet} s quiet and a containerd restart at {outage:.0} s: {} liveness failures, no restart; not ready: {}; host client via the hostPath: a pod started later arrived in {first_ms:.1} ms; a death during the containerd outage arrived {died_s:.1} s after containerd returned (exit {}); a start after it in {after_ms:.1} ms; SIGTERM → exit 0 in {stop_s:.2} s",
        m.image,
        l.liveness_runs,
        l.readiness_runs,
        t0.elapsed().as_secs_f64(),
        l.liveness_failures.len(),
        if not_ready.is_empty() { "never".to_string() } else { not_ready.join(", ") },
        reported.exit_code,
    ));

    for s in [&wsid, &sid] {
        let _ = c.raw().stop_pod_sandbox(cri::StopPodSandboxRequest { pod_sandbox_id: s.to_string() }).await;
        let _ = c.raw().remove_pod_sandbox(cri::RemovePodSandboxRequest { pod_sandbox_id: s.to_string() }).await;
    }
}

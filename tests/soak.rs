//! A soak under chaos, checked against a ground truth plegd has no part in.
//!
//! For a given time the harness runs the real plegd binary (journal on a state dir)
//! against a runtime — the simulated one in this process, or a real containerd — and:
//! - churns pods as a kubelet would: sandboxes and containers created and started,
//!   exiting with varied codes, OOM-killed, restarted as new attempts, stopped, removed,
//!   at `PLEGD_SOAK_RATE` actions/s with bursts;
//! - injects every fault kind in turn: plegd `kill -9` and SIGTERM (restarted on its
//!   state dir), the runtime killed and resumed, the event stream cut, and the event
//!   stream kept open but silent for 12–25 s while churn goes on (these two on the
//!   simulated runtime only: containerd cannot drop or mute a stream without going
//!   down);
//! - runs watchers that connect, stall, disconnect and resume with and without their
//!   epoch, some filtered to one namespace, each checked by `watchcheck`, and
//!   `GetPodStatus(min_timestamp)` callers.
//!
//! The ground truth is the runtime's own word: a poller reads every container's status
//! from the runtime and records each death with the exit code and reason the runtime
//! reports. The checks: every death reached every watcher entitled to it (its filter
//! matches) exactly once, in order after the container's start, with the runtime's exit
//! code and reason — or the watcher did not follow the death's journal revision as an
//! event stream (it broke off before it and took a snapshot after: a reset or a fresh
//! start), so the snapshot carried it; and at quiescent points each watcher's copy equals
//! `ListPods` equals the runtime. The report: events, violations with their evidence,
//! resets by reason, plegd's RSS and CPU over time, latency from the runtime's change to
//! each watcher.
//!
//! `PLEGD_SOAK_SECS` (default 30 on the simulated runtime, 300 on containerd),
//! `PLEGD_SOAK_SEED` replays the harness's choices. The containerd run is ignored by default:
//! `tests/e2e/run.sh` runs it (containerd 2.1 by default, `PLEGD_SOAK_VERSIONS`).

mod support;

use std::collections::{BTreeMap, HashMap};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use plegd::cri::RuntimeService;
use plegd::cri::client::{ClientOptions, CriClient};
use plegd::cri::spec::{ContainerSpec, PodSpec};
use plegd::proto::plegd as api;
use plegd::proto::plegd::watch_event::Kind;
use plegd::proto::runtime as cri;
use plegd::sim::SimRuntime;
use plegd::watchcheck::WatchChecker;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

const BIN: &str = env!("CARGO_BIN_EXE_plegd");
const NAMESPACES: [&str; 2] = ["soak-a", "soak-b"];

fn env_or<T: std::str::FromStr>(k: &str, d: T) -> T {
    std::env::var(k).ok().and_then(|v| v.parse().ok()).unwrap_or(d)
}

fn ts(t: &Option<prost_types::Timestamp>) -> Option<SystemTime> {
    let t = t.as_ref()?;
    (t.seconds > 0).then(|| SystemTime::UNIX_EPOCH + Duration::new(t.seconds as u64, t.nanos as u32))
}

// ---------------------------------------------------------------- the runtime

enum Runtime {
    Sim { sim: SimRuntime, socket: std::path::PathBuf, serving: CancellationToken, _dir: tempfile::TempDir },
    Containerd { endpoint: String, version: String, ctl: String },
}

impl Runtime {
    async fn sim() -> Runtime {
        let dir = tempfile::tempdir().unwrap();
        let socket = dir.path().join("cri.sock");
        let rt = Runtime::Sim { sim: SimRuntime::new(), socket, serving: CancellationToken::new(), _dir: dir };
        rt.serve().await;
        rt
    }

    async fn serve(&self) {
        if let Runtime::Sim { sim, socket, serving, .. } = self {
            let listener = plegd::uds::bind(socket, 0o660).await.expect("bind the simulated runtime's socket");
            tokio::spawn(plegd::sim::server::serve(sim.clone(), listener, serving.clone()));
        }
    }

    fn endpoint(&self) -> String {
        match self {
            Runtime::Sim { socket, .. } => format!("unix://{}", socket.display()),
            Runtime::Containerd { endpoint, .. } => endpoint.clone(),
        }
    }

    fn name(&self) -> String {
        match self {
            Runtime::Sim { .. } => "the simulated runtime".into(),
            Runtime::Containerd { version, .. } => format!("containerd {version}"),
        }
    }

    /// The runtime goes away (`kill -9` for containerd; the server stops for the
    /// simulated one, its containers living on) and comes back after `down`.
    async fn outage(&mut self, down: Duration) {
        match self {
            Runtime::Sim { serving, .. } => {
                serving.cancel();
                tokio::time::sleep(down).await;
                *serving = CancellationToken::new();
            }
            Runtime::Containerd { version, ctl, .. } => {
                run_ctl(ctl, &["kill", version]);
                tokio::time::sleep(down).await;
                run_ctl(ctl, &["resume", version]);
            }
        }
        self.serve().await;
    }

    /// Cuts the event stream without an outage; false where the runtime cannot.
    fn cut_stream(&self) -> bool {
        match self {
            Runtime::Sim { sim, .. } => {
                sim.drop_event_streams();
                true
            }
            Runtime::Containerd { .. } => false,
        }
    }

    /// Keeps the event stream open and says nothing on it for `d` (a CRI proxy that
    /// forwards nothing looks the same), while the runtime goes on.
    fn silence(&self, d: Duration) -> bool {
        match self {
            Runtime::Sim { sim, .. } => {
                sim.mute_events(true);
                let sim = sim.clone();
                tokio::spawn(async move {
                    tokio::time::sleep(d).await;
                    sim.mute_events(false);
                });
                true
            }
            Runtime::Containerd { .. } => false,
        }
    }

    fn is_sim(&self) -> bool {
        matches!(self, Runtime::Sim { .. })
    }
}

fn run_ctl(ctl: &str, args: &[&str]) {
    let out = Command::new(ctl).args(args).output().unwrap();
    assert!(out.status.success(), "containerd.sh {args:?}: {}", String::from_utf8_lossy(&out.stderr));
}

// ---------------------------------------------------------------- plegd

struct Plegd {
    child: Child,
}

impl Drop for Plegd {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

struct PlegdHost {
    endpoint: String,
    socket: String,
    state: tempfile::TempDir,
    dir: tempfile::TempDir,
    running: Option<Plegd>,
    /// The running plegd's admin address, for the stream watcher.
    admin: Shared<Option<std::net::SocketAddr>>,
    /// The running plegd's debug address, for its timelines.
    debug: Shared<Option<std::net::SocketAddr>>,
}

impl PlegdHost {
    async fn start(&mut self) {
        let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
        let admin: std::net::SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
        let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
        let debug: std::net::SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
        let child = Command::new(BIN)
            .args(["run", "--runtime-endpoint", &self.endpoint, "--listen", &self.socket])
            .args(["--admin-addr", &admin.to_string(), "--debug-addr", &debug.to_string()])
            .arg("--state-dir")
            .arg(self.state.path())
            .env("RUST_LOG", std::env::var("PLEGD_SOAK_LOG").unwrap_or_else(|_| "warn".into()))
            .stdout(Stdio::null())
            // Appended: every plegd of the run, for the evidence.
            .stderr(
                std::fs::OpenOptions::new()
                    .create(true)
                    .append(true)
                    .open(self.dir.path().join("plegd.log"))
                    .map(Stdio::from)
                    .unwrap_or(Stdio::null()),
            )
            .spawn()
            .expect("start plegd");
        let p = Plegd { child };
        let deadline = Instant::now() + Duration::from_secs(30);
        while tokio::net::TcpStream::connect(admin).await.is_err()
            || support::http(admin, "GET", "/livez").await.0 != 200
        {
            assert!(Instant::now() < deadline, "plegd did not come up");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        self.running = Some(p);
        *self.admin.lock().unwrap() = Some(admin);
        *self.debug.lock().unwrap() = Some(debug);
    }

    fn pid(&self) -> Option<u32> {
        self.running.as_ref().map(|p| p.child.id())
    }

    fn kill9(&mut self) {
        *self.admin.lock().unwrap() = None;
        if let Some(mut p) = self.running.take() {
            p.child.kill().unwrap();
            p.child.wait().unwrap();
        }
    }

    /// SIGTERM, as a rollout stops it; returns how it exited.
    fn terminate(&mut self) -> Option<i32> {
        *self.admin.lock().unwrap() = None;
        let mut p = self.running.take()?;
        let _ = Command::new("kill").args(["-TERM", &p.child.id().to_string()]).status();
        let deadline = std::time::Instant::now() + Duration::from_secs(20);
        loop {
            if let Some(s) = p.child.try_wait().unwrap() {
                return s.code();
            }
            if std::time::Instant::now() > deadline {
                return None; // Drop kills it.
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

// ---------------------------------------------------------------- ground truth

#[derive(Clone, Debug)]
struct Death {
    code: i32,
    reason: String,
    at: SystemTime,
    /// When the poller first saw it.
    seen: std::time::Instant,
    /// What the runtime said of it later, where that differs: containerd can change
    /// its word (an OOM kill first reported as "Error", containerd#12714; around its
    /// own restart the hour-long soak saw "Unknown" from the poller and "OOMKilled"
    /// from plegd for the same death, with the same exit code).
    later: Vec<(i32, String)>,
}

impl Death {
    /// Whether the runtime ever gave this death's exit code and reason.
    fn said(&self, code: i32, reason: &str) -> bool {
        (self.code == code && self.reason == reason) || self.later.iter().any(|(c, r)| *c == code && r == reason)
    }
}

/// How long the poller reads a death again for a changed word.
const REREAD_FOR: Duration = Duration::from_secs(60);

#[derive(Clone, Debug)]
struct TruthContainer {
    namespace: String,
    pod_uid: String,
    started_at: Option<SystemTime>,
    death: Option<Death>,
    /// When the harness removed it (with its pod).
    removed_at: Option<SystemTime>,
}

#[derive(Default)]
struct Truth {
    containers: BTreeMap<String, TruthContainer>,
    /// Runtime call failures by method (expected during outages).
    call_errors: BTreeMap<&'static str, u64>,
    actions: BTreeMap<&'static str, u64>,
}

type Shared<T> = Arc<Mutex<T>>;

fn state_name(s: i32) -> &'static str {
    match cri::ContainerState::try_from(s) {
        Ok(cri::ContainerState::ContainerCreated) => "created",
        Ok(cri::ContainerState::ContainerRunning) => "running",
        Ok(cri::ContainerState::ContainerExited) => "exited",
        _ => "unknown",
    }
}

fn api_state_name(s: i32) -> &'static str {
    match api::ContainerState::try_from(s) {
        Ok(api::ContainerState::Created) => "created",
        Ok(api::ContainerState::Running) => "running",
        Ok(api::ContainerState::Exited) => "exited",
        _ => "unknown",
    }
}

/// Pod UID → container id → state, for the soak's namespaces.
type View = BTreeMap<String, BTreeMap<String, &'static str>>;

/// The runtime's state, read from the runtime, and each pod's namespace.
async fn runtime_view(c: &CriClient) -> Result<(View, BTreeMap<String, String>), String> {
    let sandboxes = c.list_pod_sandboxes(None).await.map_err(|e| e.to_string())?;
    let containers = c.list_containers(None).await.map_err(|e| e.to_string())?;
    let mut uid_of = BTreeMap::new();
    let mut namespace_of = BTreeMap::new();
    let mut v = View::new();
    for s in sandboxes {
        let Some(m) = s.metadata else { continue };
        if NAMESPACES.contains(&m.namespace.as_str()) {
            uid_of.insert(s.id.clone(), m.uid.clone());
            namespace_of.insert(m.uid.clone(), m.namespace.clone());
            v.entry(m.uid).or_default();
        }
    }
    for c in containers {
        if let Some(uid) = uid_of.get(&c.pod_sandbox_id) {
            v.get_mut(uid).unwrap().insert(c.id, state_name(c.state));
        }
    }
    Ok((v, namespace_of))
}

fn pods_view<'a>(pods: impl IntoIterator<Item = &'a api::PodStatus>, ns: Option<&str>) -> View {
    pods.into_iter()
        .filter(|p| NAMESPACES.contains(&p.namespace.as_str()) && ns.is_none_or(|n| n == p.namespace))
        .map(|p| (p.uid.clone(), p.containers.iter().map(|c| (c.id.clone(), api_state_name(c.state))).collect()))
        .collect()
}

/// The windows in which plegd could only relist, as plegd says (`plegd_pleg_mode`
/// not `evented`) or because it is not running, read every 200 ms until `end`. Each
/// opens 200 ms before the read that saw it (the change fell between two reads).
async fn watch_stream(
    admin: Shared<Option<std::net::SocketAddr>>,
    end: CancellationToken,
) -> Vec<(SystemTime, SystemTime)> {
    const EVERY: Duration = Duration::from_millis(200);
    let mut windows = Vec::new();
    let mut open: Option<SystemTime> = None;
    while !end.is_cancelled() {
        let addr = *admin.lock().unwrap();
        let evented = match addr {
            None => false,
            // No answer is no word: the window stays as it was (a busy plegd is not
            // excused by being slow to answer).
            Some(a) => {
                match tokio::time::timeout(Duration::from_secs(1), support::try_http(a, "GET", "/metrics")).await {
                    Ok(Ok((200, body))) if body.contains("plegd_pleg_mode{mode=\"generic\"}") => {
                        body.contains("plegd_pleg_mode{mode=\"evented\"} 1")
                    }
                    _ => open.is_none(),
                }
            }
        };
        let now = SystemTime::now();
        match (evented, open) {
            (false, None) => open = Some(now - EVERY),
            (true, Some(from)) => {
                windows.push((from, now));
                open = None;
            }
            _ => {}
        }
        tokio::time::sleep(EVERY).await;
    }
    if let Some(from) = open {
        windows.push((from, SystemTime::now()));
    }
    windows
}

/// Records each container's death as the runtime reports it: its exit code, reason
/// and finish time, read with ContainerStatus.
async fn record_deaths(c: &CriClient, truth: &Shared<Truth>) {
    let Ok(containers) = c.list_containers(None).await else { return };
    for ctr in containers {
        if ctr.state != cri::ContainerState::ContainerExited as i32 {
            continue;
        }
        let known = truth.lock().unwrap().containers.get(&ctr.id).map(|t| t.death.as_ref().map(|d| d.seen));
        match known {
            None => continue, // not ours
            Some(Some(seen)) if seen.elapsed() >= REREAD_FOR => continue,
            Some(Some(_)) => {
                // Recorded: read again for a changed word.
                if let Ok(st) = c.container_status(&ctr.id).await {
                    let mut t = truth.lock().unwrap();
                    if let Some(d) = t.containers.get_mut(&ctr.id).and_then(|tc| tc.death.as_mut())
                        && !d.said(st.exit_code, &st.reason)
                    {
                        d.later.push((st.exit_code, st.reason.clone()));
                    }
                }
                continue;
            }
            Some(None) => {}
        }
        if let Ok(st) = c.container_status(&ctr.id).await {
            let at = if st.finished_at > 0 {
                SystemTime::UNIX_EPOCH + Duration::from_nanos(st.finished_at as u64)
            } else {
                SystemTime::now()
            };
            let mut t = truth.lock().unwrap();
            if let Some(tc) = t.containers.get_mut(&ctr.id) {
                tc.death = Some(Death {
                    code: st.exit_code,
                    reason: st.reason.clone(),
                    at,
                    seen: std::time::Instant::now(),
                    later: Vec::new(),
                });
            }
        }
    }
}

// ---------------------------------------------------------------- the kubelet

struct Kubelet {
    c: CriClient,
    rng: fastrand::Rng,
    truth: Shared<Truth>,
    /// Live pods: uid → (spec, sandbox id, latest container id, attempt).
    pods: BTreeMap<String, (PodSpec, String, Option<String>, u32)>,
    oom_spec: bool,
}

impl Kubelet {
    fn fail(&self, method: &'static str) {
        *self.truth.lock().unwrap().call_errors.entry(method).or_default() += 1;
    }

    fn did(&self, what: &'static str) {
        *self.truth.lock().unwrap().actions.entry(what).or_default() += 1;
    }

    fn container_spec(&mut self, attempt: u32) -> (ContainerSpec, bool) {
        let spec = ContainerSpec::new("app").attempt(attempt);
        let roll = self.rng.f64();
        if self.oom_spec && roll < 0.1 {
            // A memory bomb under a 32 MiB limit: the kernel OOM-kills it (exit 137).
            let mut s = spec;
            s.command = vec!["sh".into(), "-c".into(), "sleep 1; x=a; while true; do x=$x$x; done".into()];
            return (s, true);
        }
        if roll < 0.55 {
            let code = [0, 1, 2, 42, 143][self.rng.usize(..5)];
            (spec.exits_after(Duration::from_millis(self.rng.u64(500..6000)), code), false)
        } else {
            (spec, false)
        }
    }

    async fn start_container(&mut self, uid: &str) {
        let (pod, sid, _, attempt) = self.pods[uid].clone();
        let next = if self.pods[uid].2.is_some() { attempt + 1 } else { 0 };
        let (spec, oom) = self.container_spec(next);
        let mut req = pod.create_request(&sid, &spec);
        if oom {
            req.config.as_mut().unwrap().linux = Some(cri::LinuxContainerConfig {
                resources: Some(cri::LinuxContainerResources { memory_limit_in_bytes: 32 << 20, ..Default::default() }),
                security_context: None,
            });
        }
        let id = match self.c.raw().create_container(req).await {
            Ok(r) => r.into_inner().container_id,
            Err(_) => return self.fail("CreateContainer"),
        };
        self.truth.lock().unwrap().containers.insert(
            id.clone(),
            TruthContainer {
                namespace: pod.namespace.clone(),
                pod_uid: uid.into(),
                started_at: None,
                death: None,
                removed_at: None,
            },
        );
        self.pods.get_mut(uid).unwrap().2 = Some(id.clone());
        self.pods.get_mut(uid).unwrap().3 = next;
        match self.c.raw().start_container(cri::StartContainerRequest { container_id: id.clone() }).await {
            Ok(_) => {
                self.truth.lock().unwrap().containers.get_mut(&id).unwrap().started_at = Some(SystemTime::now());
                self.did(if oom { "start (OOM-bound)" } else { "start" });
            }
            Err(_) => self.fail("StartContainer"),
        }
    }

    async fn new_pod(&mut self) {
        let ns = NAMESPACES[self.rng.usize(..2)];
        let pod = PodSpec::new(ns, &format!("soak-{}", self.rng.u32(..)));
        let sid = match self.c.raw().run_pod_sandbox(pod.run_request()).await {
            Ok(r) => r.into_inner().pod_sandbox_id,
            Err(_) => return self.fail("RunPodSandbox"),
        };
        self.did("run pod");
        let uid = pod.uid.clone();
        self.pods.insert(uid.clone(), (pod, sid, None, 0));
        self.start_container(&uid).await;
    }

    /// A pod whose latest container exited gets the next attempt.
    async fn restart(&mut self) -> bool {
        let truth = self.truth.lock().unwrap().containers.clone();
        let dead: Vec<String> = self
            .pods
            .iter()
            .filter(|(_, (_, _, latest, _))| {
                latest.as_ref().is_some_and(|id| truth.get(id).is_some_and(|t| t.death.is_some()))
            })
            .map(|(uid, _)| uid.clone())
            .collect();
        if dead.is_empty() {
            return false;
        }
        let uid = dead[self.rng.usize(..dead.len())].clone();
        self.did("restart as a new attempt");
        self.start_container(&uid).await;
        true
    }

    fn running(&self) -> Vec<String> {
        let truth = self.truth.lock().unwrap();
        self.pods
            .values()
            .filter_map(|(_, _, latest, _)| latest.clone())
            .filter(|id| truth.containers.get(id).is_some_and(|t| t.death.is_none() && t.started_at.is_some()))
            .collect()
    }

    async fn stop_one(&mut self) {
        let running = self.running();
        if running.is_empty() {
            return;
        }
        let id = running[self.rng.usize(..running.len())].clone();
        let timeout = if self.rng.bool() { 0 } else { 2 };
        match self.c.raw().stop_container(cri::StopContainerRequest { container_id: id, timeout }).await {
            Ok(_) => self.did("stop container"),
            Err(_) => self.fail("StopContainer"),
        }
    }

    async fn remove_pod(&mut self) {
        if self.pods.is_empty() {
            return;
        }
        let uid = self.pods.keys().nth(self.rng.usize(..self.pods.len())).unwrap().clone();
        let sid = self.pods[&uid].1.clone();
        if self.c.raw().stop_pod_sandbox(cri::StopPodSandboxRequest { pod_sandbox_id: sid.clone() }).await.is_err() {
            return self.fail("StopPodSandbox");
        }
        // The deaths the stop caused, read before the containers go.
        record_deaths(&self.c, &self.truth).await;
        if self.c.raw().remove_pod_sandbox(cri::RemovePodSandboxRequest { pod_sandbox_id: sid }).await.is_err() {
            return self.fail("RemovePodSandbox");
        }
        self.did("remove pod");
        let now = SystemTime::now();
        for t in self.truth.lock().unwrap().containers.values_mut().filter(|t| t.pod_uid == uid) {
            t.removed_at.get_or_insert(now);
        }
        self.pods.remove(&uid);
    }

    async fn step(&mut self, runtime: &Runtime) {
        let r = self.rng.f64();
        match () {
            _ if self.pods.len() < 4 || (r < 0.3 && self.pods.len() < 24) => self.new_pod().await,
            _ if r < 0.55 => {
                if !self.restart().await {
                    self.new_pod().await;
                }
            }
            _ if r < 0.7 => self.stop_one().await,
            _ if r < 0.8 => {
                // The simulated runtime's OOM kill; on containerd the kernel does it.
                if let Runtime::Sim { sim, .. } = runtime {
                    let running = self.running();
                    if !running.is_empty()
                        && sim.exit_container(&running[self.rng.usize(..running.len())], 137, "OOMKilled")
                    {
                        self.did("OOM kill (simulated)");
                    }
                }
            }
            _ => self.remove_pod().await,
        }
    }
}

/// The (epoch, revision) of `CONTAINER_DIED` for each death of `truth` that no watcher
/// received, as the running plegd's `/debug/pods/{uid}/timeline` (read from the
/// journal on disk) has it. A death missing here was never published.
async fn journaled_deaths(
    plegd: &PlegdHost,
    truth: &Shared<Truth>,
    watchers: &[Shared<Watcher>],
) -> BTreeMap<String, std::collections::BTreeSet<(u64, u64)>> {
    let died = api::LifecycleEventType::ContainerDied as i32;
    let received: std::collections::BTreeSet<String> = watchers
        .iter()
        .flat_map(|w| {
            let g = w.lock().unwrap();
            g.events
                .iter()
                .filter(|(_, evs)| evs.iter().any(|e| e.0 == died))
                .map(|(id, _)| id.clone())
                .collect::<Vec<_>>()
        })
        .collect();
    let unreceived: Vec<(String, String)> = truth
        .lock()
        .unwrap()
        .containers
        .iter()
        .filter(|(id, t)| t.death.is_some() && !received.contains(*id))
        .map(|(id, t)| (id.clone(), t.pod_uid.clone()))
        .collect();
    let mut out: BTreeMap<String, std::collections::BTreeSet<(u64, u64)>> = BTreeMap::new();
    let Some(debug) = *plegd.debug.lock().unwrap() else { return out };
    for (id, uid) in unreceived {
        let Ok((200, body)) = support::try_http(debug, "GET", &format!("/debug/pods/{uid}/timeline")).await else {
            continue;
        };
        let Ok(v) = serde_json::from_str::<serde_json::Value>(&body) else { continue };
        let epoch = v["epoch"].as_u64().unwrap_or(0);
        for c in v["changes"].as_array().into_iter().flatten() {
            if c["container_id"] == id.as_str()
                && c["type"] == "CONTAINER_DIED"
                && let Some(r) = c["revision"].as_u64()
            {
                out.entry(id.clone()).or_default().insert((epoch, r));
            }
        }
    }
    out
}

// ---------------------------------------------------------------- watchers

/// One event for a container as a watcher received it: its kind, the container's exit
/// code and reason as the event's pod has it (`None` when the pod no longer has the
/// container), the receipt, and where it sits in the journal (epoch, revision).
type Seen = (i32, Option<(i32, String)>, SystemTime, (u64, u64));

/// One watch stream: opened, resumed from (revision, epoch), first and last revision.
type StreamLog = (SystemTime, u64, u64, Option<u64>, Option<u64>);

#[derive(Default, Debug)]
struct Watcher {
    name: String,
    namespace: Option<&'static str>,
    checker: Option<WatchChecker>,
    violations: Vec<String>,
    /// Container id → each event for it, in order.
    events: BTreeMap<String, Vec<Seen>>,
    /// Container id → the last exit code and reason any event's pod or snapshot gave it:
    /// the watcher's copy of its word, amendments included.
    words: HashMap<String, (i32, String)>,
    /// Each time the watcher's continuity broke (a fresh start, a reset, a resume into
    /// another journal) and when the snapshot that followed was complete (`synced`):
    /// only a death around such a gap may reach it as snapshot state instead of an event.
    breaks: Vec<(SystemTime, Option<SystemTime>)>,
    resets: BTreeMap<String, u64>,
    /// When its last stream ended.
    last_end: Option<SystemTime>,
    /// When it last received a message.
    last_message: Option<SystemTime>,
    connects: u64,
    resumes_without_epoch: u64,
    stalls: u64,
    /// Each stream: when it opened, the revision and epoch it asked to resume from,
    /// and the first and last revisions it received (the evidence for a missed death).
    streams: Vec<StreamLog>,
    attending: bool,
    latencies_started: Vec<f64>,
    latencies_died: Vec<f64>,
}

impl Watcher {
    /// Continuity broke at `at` (unless a break is already open).
    fn broke(&mut self, at: SystemTime) {
        if self.breaks.last().is_none_or(|(_, synced)| synced.is_some()) {
            self.breaks.push((at, None));
        }
    }

    /// Whether a death at `died` may have reached this watcher only as snapshot state:
    /// it falls in a gap — from a break (less the time plegd may take to publish a death
    /// while it or the runtime is being faulted, 15 s) to the snapshot after it.
    fn gap_covers(&self, died: SystemTime) -> bool {
        let slack = Duration::from_secs(15);
        self.breaks
            .iter()
            .any(|(from, synced)| from.checked_sub(slack).is_none_or(|f| f <= died) && synced.is_none_or(|s| died <= s))
    }
}

async fn watch_loop(
    w: Shared<Watcher>,
    socket: String,
    truth: Shared<Truth>,
    quiet: tokio::sync::watch::Receiver<bool>,
    end: CancellationToken,
    seed: u64,
) {
    let mut rng = fastrand::Rng::with_seed(seed);
    let ns = w.lock().unwrap().namespace;
    while !end.is_cancelled() {
        let (since, epoch) = {
            let mut g = w.lock().unwrap();
            let checker = g.checker.as_mut().unwrap();
            checker.reconnect();
            let point = checker.resume_point();
            match point {
                Some((rev, ep)) if rng.f64() < 0.85 => {
                    if rng.f64() < 0.2 {
                        g.resumes_without_epoch += 1;
                        (rev, 0)
                    } else {
                        (rev, ep)
                    }
                }
                _ => {
                    checker.start_over();
                    // It has what it received: the break began at its last message (a
                    // stream that died while the watcher stalled is noticed late).
                    let at = g.last_message.or(g.last_end).unwrap_or_else(SystemTime::now);
                    g.broke(at);
                    (0, 0)
                }
            }
        };
        let req = api::WatchRequest {
            since_revision: since,
            epoch,
            filter: ns.map(|n| api::PodFilter { namespace: n.into(), ..Default::default() }),
            ..Default::default()
        };
        let Ok(mut client) = plegd::cli::client::connect(&socket) else {
            tokio::time::sleep(Duration::from_millis(200)).await;
            continue;
        };
        let mut stream = match client.watch(req).await {
            Ok(s) => s.into_inner(),
            Err(_) => {
                tokio::time::sleep(Duration::from_millis(200)).await;
                continue;
            }
        };
        {
            let mut g = w.lock().unwrap();
            g.connects += 1;
            g.streams.push((SystemTime::now(), since, epoch, None, None));
        }
        // How long this connection lasts before the watcher misbehaves again.
        let mut next_mischief = Instant::now() + Duration::from_millis(rng.u64(1000..10_000));
        loop {
            let quieting = *quiet.borrow();
            if !quieting && Instant::now() >= next_mischief {
                next_mischief = Instant::now() + Duration::from_millis(rng.u64(1000..10_000));
                match rng.u8(..10) {
                    0..=2 => {
                        // Stall: hold the stream and read nothing, past plegd's buffers.
                        w.lock().unwrap().stalls += 1;
                        tokio::time::sleep(Duration::from_millis(rng.u64(500..15_000))).await;
                    }
                    3..=4 => break, // disconnect; resume (or not) next time round
                    _ => {}
                }
            }
            let msg = tokio::select! {
                _ = end.cancelled() => return,
                m = tokio::time::timeout(Duration::from_millis(500), stream.message()) => m,
            };
            let m = match msg {
                Err(_) => {
                    if *quiet.borrow() {
                        let mut g = w.lock().unwrap();
                        g.attending = g.checker.as_ref().unwrap().is_synced();
                    }
                    continue;
                }
                Ok(Ok(Some(m))) => m,
                Ok(_) => break, // plegd went away: reconnect
            };
            let now = SystemTime::now();
            let mut g = w.lock().unwrap();
            if let Some(Kind::Start(start)) = &m.kind
                && g.checker.as_ref().unwrap().is_foreign(start)
            {
                // Resumed without an epoch into a new journal: start over.
                g.checker.as_mut().unwrap().start_over();
                g.broke(now);
                break;
            }
            g.last_message = Some(now);
            if let Some(s) = g.streams.last_mut() {
                s.3.get_or_insert(m.revision);
                s.4 = Some(m.revision);
            }
            if let Err(v) = g.checker.as_mut().unwrap().observe(&m) {
                let name = g.name.clone();
                g.violations.push(format!("{name}: {v}"));
            }
            let pod = match &m.kind {
                Some(Kind::Event(e)) => e.pod.as_ref(),
                Some(Kind::Snapshot(p)) => Some(p),
                _ => None,
            };
            for c in pod.iter().flat_map(|p| &p.containers) {
                g.words.insert(c.id.clone(), (c.exit_code, c.reason.clone()));
            }
            match m.kind {
                Some(Kind::Synced(_)) => {
                    if let Some((_, synced @ None)) = g.breaks.last_mut() {
                        *synced = Some(now);
                    }
                }
                Some(Kind::Reset(r)) => {
                    g.broke(now);
                    let reason = api::ResetReason::try_from(r.reason).map(|r| r.as_str_name()).unwrap_or("?");
                    *g.resets.entry(reason.to_string()).or_default() += 1;
                }
                Some(Kind::Event(e)) => {
                    let status = e.pod.as_ref().and_then(|p| p.containers.iter().find(|c| c.id == e.container_id));
                    let exit = status.map(|s| (s.exit_code, s.reason.clone()));
                    if e.r#type == api::LifecycleEventType::ContainerStarted as i32 {
                        let started = truth.lock().unwrap().containers.get(&e.container_id).and_then(|t| t.started_at);
                        if let Some(ms) = started.and_then(|s| now.duration_since(s).ok()) {
                            g.latencies_started.push(ms.as_secs_f64() * 1e3);
                        }
                    }
                    if e.r#type == api::LifecycleEventType::ContainerDied as i32
                        && let Some(ms) = ts(&e.runtime_timestamp).and_then(|t| now.duration_since(t).ok())
                    {
                        g.latencies_died.push(ms.as_secs_f64() * 1e3);
                    }
                    let at = (g.checker.as_ref().unwrap().epoch().unwrap_or(0), m.revision);
                    g.events.entry(e.container_id.clone()).or_default().push((e.r#type, exit, now, at));
                }
                _ => {}
            }
            if *quiet.borrow() {
                g.attending = g.checker.as_ref().unwrap().is_synced();
            }
        }
        let mut g = w.lock().unwrap();
        g.attending = false;
        g.last_end = Some(SystemTime::now());
    }
}

/// `GetPodStatus(min_timestamp = now)` for pods the harness made: the answer is a
/// status read at or after that time, or "not found".
async fn status_caller(
    socket: String,
    truth: Shared<Truth>,
    violations: Shared<Vec<String>>,
    end: CancellationToken,
) -> BTreeMap<String, u64> {
    let mut outcomes: BTreeMap<String, u64> = BTreeMap::new();
    let mut rng = fastrand::Rng::with_seed(7);
    while !end.is_cancelled() {
        tokio::time::sleep(Duration::from_millis(300)).await;
        let uids: Vec<String> = truth.lock().unwrap().containers.values().map(|t| t.pod_uid.clone()).collect();
        if uids.is_empty() {
            continue;
        }
        let uid = uids[rng.usize(..uids.len())].clone();
        let Ok(mut client) = plegd::cli::client::connect(&socket) else { continue };
        let asked = SystemTime::now();
        let mut req = tonic::Request::new(api::GetPodStatusRequest {
            pod_uid: uid.clone(),
            min_timestamp: Some(plegd::model::system_to_timestamp(asked)),
        });
        req.set_timeout(Duration::from_secs(5));
        match client.get_pod_status(req).await {
            Ok(r) => {
                let r = r.into_inner();
                if r.not_found {
                    *outcomes.entry("not found".into()).or_default() += 1;
                } else {
                    // The kubelet's GetNewerThan: the pod was read after the time, or the
                    // whole cache is current as of a later time (the response's timestamp).
                    let observed = r.pod.as_ref().and_then(|p| ts(&p.observed_at));
                    let current = ts(&r.timestamp);
                    if observed.is_some_and(|o| o >= asked) || current.is_some_and(|c| c >= asked) {
                        *outcomes.entry("fresh".into()).or_default() += 1;
                    } else {
                        violations.lock().unwrap().push(format!(
                            "GetPodStatus({uid}, min_timestamp={asked:?}) answered with a status observed at {observed:?}, cache current as of {current:?}"
                        ));
                    }
                }
            }
            Err(s) => *outcomes.entry(format!("{:?}", s.code())).or_default() += 1,
        }
    }
    outcomes
}

// ---------------------------------------------------------------- the soak

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Fault {
    PlegdKill9,
    PlegdSigterm,
    RuntimeKill,
    StreamCut,
    StreamSilence,
}

fn pct(v: &mut [f64], p: f64) -> f64 {
    if v.is_empty() {
        return f64::NAN;
    }
    v.sort_by(f64::total_cmp);
    v[((v.len() - 1) as f64 * p).round() as usize]
}

/// Reads plegd's RSS (MiB) and CPU seconds from /proc.
fn sample(pid: u32) -> Option<(f64, f64)> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let fields: Vec<&str> = stat.rsplit_once(") ")?.1.split_whitespace().collect();
    let ticks = 100.0; // USER_HZ on Linux
    let cpu = (fields[11].parse::<f64>().ok()? + fields[12].parse::<f64>().ok()?) / ticks;
    let rss_pages: f64 = fields[21].parse().ok()?;
    Some((rss_pages * 4096.0 / 1048576.0, cpu))
}

async fn soak(mut runtime: Runtime, secs: u64, seed: u64) {
    eprintln!("soak on {}: PLEGD_SOAK_SECS={secs} PLEGD_SOAK_SEED={seed}", runtime.name());
    let mut rng = fastrand::Rng::with_seed(seed);
    let opts = ClientOptions {
        timeout: Duration::from_secs(10),
        backoff_initial: Duration::from_millis(50),
        backoff_max: Duration::from_millis(500),
    };
    let endpoint = runtime.endpoint();
    let cri =
        CriClient::new(&endpoint, opts.clone(), plegd::cri::metrics::CriMetrics::register(&mut Default::default()))
            .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let socket = format!("unix://{}", dir.path().join("plegd.sock").display());
    let mut plegd = PlegdHost {
        endpoint: endpoint.clone(),
        socket: socket.clone(),
        state: tempfile::tempdir().unwrap(),
        dir,
        running: None,
        admin: Default::default(),
        debug: Default::default(),
    };
    plegd.start().await;

    let truth: Shared<Truth> = Default::default();
    let violations: Shared<Vec<String>> = Default::default();
    let end = CancellationToken::new();
    let (quiet_tx, quiet_rx) = tokio::sync::watch::channel(false);

    // Watchers: unfiltered and filtered to one namespace.
    let mut watchers = Vec::new();
    for i in 0..6 {
        let namespace = if i % 3 == 2 { Some(NAMESPACES[i % 2]) } else { None };
        let w = Arc::new(Mutex::new(Watcher {
            name: format!("watcher {i} ({})", namespace.unwrap_or("all namespaces")),
            namespace,
            checker: Some(WatchChecker::new(namespace.is_some())),
            breaks: vec![(SystemTime::UNIX_EPOCH, None)],
            ..Default::default()
        }));
        tokio::spawn(watch_loop(w.clone(), socket.clone(), truth.clone(), quiet_rx.clone(), end.clone(), rng.u64(..)));
        watchers.push(w);
    }
    let caller = tokio::spawn(status_caller(socket.clone(), truth.clone(), violations.clone(), end.clone()));
    // When plegd could only relist: down, or up without its event stream (plegd's own
    // word, `plegd_pleg_mode`), read every 200 ms.
    let stream_watch = tokio::spawn(watch_stream(plegd.admin.clone(), end.clone()));
    // The ground-truth poller.
    let poller = tokio::spawn({
        let (c, truth, end) = (
            CriClient::new(&endpoint, opts.clone(), plegd::cri::metrics::CriMetrics::register(&mut Default::default()))
                .unwrap(),
            truth.clone(),
            end.clone(),
        );
        async move {
            while !end.is_cancelled() {
                record_deaths(&c, &truth).await;
                tokio::time::sleep(Duration::from_millis(250)).await;
            }
        }
    });

    let mut kubelet = Kubelet {
        c: CriClient::new(&endpoint, opts.clone(), plegd::cri::metrics::CriMetrics::register(&mut Default::default()))
            .unwrap(),
        rng: fastrand::Rng::with_seed(rng.u64(..)),
        truth: truth.clone(),
        pods: BTreeMap::new(),
        oom_spec: !runtime.is_sim(),
    };
    let rate: f64 = env_or("PLEGD_SOAK_RATE", 4.0);
    let kinds: Vec<Fault> = if runtime.is_sim() {
        vec![Fault::PlegdKill9, Fault::PlegdSigterm, Fault::RuntimeKill, Fault::StreamCut, Fault::StreamSilence]
    } else {
        vec![Fault::PlegdKill9, Fault::PlegdSigterm, Fault::RuntimeKill]
    };
    // Faults spread over the run, each kind at least once; quiescent checks between.
    let fault_every = Duration::from_secs((secs / (kinds.len() as u64 * 2 + 1)).clamp(2, 30));
    let quiesce_every = Duration::from_secs((secs / 3).clamp(8, 120));
    let mut faults: BTreeMap<Fault, u64> = BTreeMap::new();
    let mut fault_order: Vec<Fault> = Vec::new();
    let mut sigterm_exits = Vec::new();
    // Every fault: (from, to).
    let mut blind_windows: Vec<(SystemTime, SystemTime)> = Vec::new();
    // Where the stream stayed up and said nothing: plegd finds changes by its stream
    // check (every 10 s), then by relists at the relist period.
    let mut silent_windows: Vec<(SystemTime, SystemTime)> = Vec::new();
    let mut samples: Vec<(f64, f64, f64)> = Vec::new(); // (t, rss MiB, cpu s)
    let mut cpu_base = 0.0;
    let mut quiescent_checks = 0u32;
    let t0 = Instant::now();
    let (mut next_fault, mut next_quiet, mut next_sample) = (t0 + fault_every, t0 + quiesce_every, t0);
    let mut next_burst = t0 + Duration::from_secs(rng.u64(5..20));

    let plegd_debug = plegd.debug.clone();
    let check_quiescent = |label: String| {
        let (watchers, socket, quiet_tx, violations) =
            (watchers.clone(), socket.clone(), quiet_tx.clone(), violations.clone());
        let debug = plegd_debug.clone();
        let cri =
            CriClient::new(&endpoint, opts.clone(), plegd::cri::metrics::CriMetrics::register(&mut Default::default()))
                .unwrap();
        async move {
            quiet_tx.send(true).unwrap();
            let deadline = Instant::now() + Duration::from_secs(45);
            let mut last_diff = String::new();
            let ok = loop {
                if Instant::now() > deadline {
                    break false;
                }
                tokio::time::sleep(Duration::from_millis(500)).await;
                if !watchers.iter().all(|w| w.lock().unwrap().attending) {
                    last_diff = "not every watcher is synced and reading".into();
                    continue;
                }
                let Ok((rt, namespace_of)) = runtime_view(&cri).await else { continue };
                let Ok(mut client) = plegd::cli::client::connect(&socket) else { continue };
                let Ok(listed) = client.list_pods(api::ListPodsRequest::default()).await else { continue };
                let listed = pods_view(&listed.into_inner().pods, None);
                if listed != rt {
                    last_diff = format!("ListPods {listed:?}\nruntime  {rt:?}");
                    // The evidence: what plegd saw of the pods the two disagree on, as
                    // its journal has it (each change with its source and revision).
                    let differ: Vec<&String> =
                        listed.keys().chain(rt.keys()).filter(|uid| listed.get(*uid) != rt.get(*uid)).collect();
                    let at = *debug.lock().unwrap();
                    for uid in differ.into_iter().take(3) {
                        last_diff.push_str(&format!(
                            "\ndiffers: {uid}: ListPods {:?}, runtime {:?}",
                            listed.get(uid),
                            rt.get(uid)
                        ));
                        if let Some(at) = at
                            && let Ok((_, body)) =
                                support::try_http(at, "GET", &format!("/debug/pods/{uid}/timeline")).await
                        {
                            last_diff.push_str(&format!("; plegd's timeline of it: {}", &body[..body.len().min(6000)]));
                        }
                    }
                    continue;
                }
                let mut all = true;
                for w in &watchers {
                    let g = w.lock().unwrap();
                    let mine = pods_view(g.checker.as_ref().unwrap().view().values(), g.namespace);
                    let want: View = rt
                        .iter()
                        .filter(|(uid, _)| g.namespace.is_none_or(|n| namespace_of.get(*uid).is_some_and(|x| x == n)))
                        .map(|(k, v)| (k.clone(), v.clone()))
                        .collect();
                    if mine != want {
                        last_diff = format!("{}: copy {mine:?}\nruntime {want:?}", g.name);
                        all = false;
                        break;
                    }
                }
                if all {
                    break true;
                }
            };
            quiet_tx.send(false).unwrap();
            if !ok {
                violations.lock().unwrap().push(format!("{label}: views never agreed within 45 s: {last_diff}"));
            }
            ok
        }
    };

    // The run ends when its time is up and every fault kind was injected at least once.
    while t0.elapsed() < Duration::from_secs(secs) || fault_order.len() < kinds.len() {
        let now = Instant::now();
        if now >= next_sample {
            next_sample = now + Duration::from_secs(5);
            if let Some((rss, cpu)) = plegd.pid().and_then(sample) {
                samples.push((t0.elapsed().as_secs_f64(), rss, cpu_base + cpu));
            }
        }
        let overtime = t0.elapsed() >= Duration::from_secs(secs);
        if now >= next_fault || overtime {
            next_fault = now + fault_every;
            // Every kind once before any repeats, then at random.
            let kind = if fault_order.len() < kinds.len() {
                let left: Vec<Fault> = kinds.iter().copied().filter(|k| !fault_order.contains(k)).collect();
                left[rng.usize(..left.len())]
            } else {
                kinds[rng.usize(..kinds.len())]
            };
            let cpu_before = plegd.pid().and_then(sample).map(|s| s.1).unwrap_or(0.0);
            let fault_started = SystemTime::now();
            match kind {
                Fault::PlegdKill9 => {
                    plegd.kill9();
                    tokio::time::sleep(Duration::from_millis(rng.u64(200..3000))).await;
                    plegd.start().await;
                }
                Fault::PlegdSigterm => {
                    sigterm_exits.push(plegd.terminate());
                    tokio::time::sleep(Duration::from_millis(rng.u64(200..3000))).await;
                    plegd.start().await;
                }
                Fault::RuntimeKill => runtime.outage(Duration::from_millis(rng.u64(1000..6000))).await,
                Fault::StreamCut => {
                    runtime.cut_stream();
                }
                Fault::StreamSilence => {
                    let d = Duration::from_millis(rng.u64(12_000..25_000));
                    runtime.silence(d);
                    silent_windows.push((fault_started, fault_started + d));
                }
            }
            if matches!(kind, Fault::PlegdKill9 | Fault::PlegdSigterm) {
                cpu_base += cpu_before;
            }
            fault_order.push(kind);
            *faults.entry(kind).or_default() += 1;
            let until = silent_windows.last().filter(|w| w.0 == fault_started).map_or(SystemTime::now(), |w| w.1);
            blind_windows.push((fault_started, until));
        }
        if now >= next_quiet {
            let label = format!("quiescent point at {:.0} s", t0.elapsed().as_secs_f64());
            check_quiescent(label).await;
            quiescent_checks += 1;
            next_quiet = Instant::now() + quiesce_every;
        }
        if now >= next_burst {
            next_burst = now + Duration::from_secs(rng.u64(10..30));
            for _ in 0..rng.usize(5..15) {
                kubelet.step(&runtime).await;
            }
        }
        kubelet.step(&runtime).await;
        tokio::time::sleep(Duration::from_secs_f64(rng.f64() * 2.0 / rate)).await;
    }
    // The final quiescent point: wait for every timed exit to happen first.
    tokio::time::sleep(Duration::from_secs(7)).await;
    record_deaths(&cri, &truth).await;
    check_quiescent("the final quiescent point".into()).await;
    quiescent_checks += 1;
    record_deaths(&cri, &truth).await;
    // Where the journal holds the deaths no watcher received (each followed none of
    // them: all broke off around one fault), from the pods' timelines on disk.
    let journaled = journaled_deaths(&plegd, &truth, &watchers).await;
    if let Some((rss, cpu)) = plegd.pid().and_then(sample) {
        samples.push((t0.elapsed().as_secs_f64(), rss, cpu_base + cpu));
    }
    end.cancel();
    let outcomes = caller.await.unwrap();
    poller.await.unwrap();
    let relist_only = stream_watch.await.unwrap();

    // ------------------------------------------------ every death, every watcher
    let truth = std::mem::take(&mut *truth.lock().unwrap());
    let mut v = std::mem::take(&mut *violations.lock().unwrap());
    let deaths: Vec<(&String, &TruthContainer, &Death)> =
        truth.containers.iter().filter_map(|(id, t)| t.death.as_ref().map(|d| (id, t, d))).collect();
    let started = api::LifecycleEventType::ContainerStarted as i32;
    let died = api::LifecycleEventType::ContainerDied as i32;
    let removed = api::LifecycleEventType::ContainerRemoved as i32;
    let (mut delivered, mut carried_by_snapshot, mut reason_races) = (0u64, 0u64, 0u64);
    // Deaths told with containerd's lost word (255 "Unknown") whose reason the runtime
    // amended later: the watcher's copy ended with the amendment, or did not (and why).
    let (mut amended, mut not_amended) = (0u64, Vec::<String>::new());
    let mut exit_unknown = 0u64;
    // While plegd is down or its stream is (an outage, a cut, a restart, and the
    // reconnection after), it can only relist: a container stopped and removed between
    // two relists dies without the exit status no read could see.
    // The windows are the faults, each as long as plegd itself said it could only relist
    // (it reconnects after the fault ends); 5 s after each for the repair relist that
    // follows the stream's return. A window plegd gave itself without a fault excuses
    // nothing: it is reported.
    let caused = |(from, to): &(SystemTime, SystemTime)| {
        blind_windows.iter().any(|(f, t)| *from <= *t + Duration::from_secs(2) && *f <= *to)
    };
    let (explained, unexplained): (Vec<_>, Vec<_>) = relist_only.iter().copied().partition(|w| caused(w));
    let windows: Vec<(SystemTime, SystemTime)> = blind_windows.iter().copied().chain(explained).collect();
    let blind = |at: SystemTime| windows.iter().any(|(from, to)| *from <= at && at <= *to + Duration::from_secs(5));
    // A container whose whole life, from its start to its removal, fell inside one such
    // window and was shorter than two relist periods (1 s each), and that no watcher
    // ever saw: nothing that reads the runtime could see it.
    let seen_by_any: std::collections::BTreeSet<String> =
        watchers.iter().flat_map(|w| w.lock().unwrap().events.keys().cloned().collect::<Vec<_>>()).collect();
    // Where each death sits in the journal, as any watcher received it or, for the
    // rest, as the journal's own timeline of the pod has it: (epoch, revision).
    let mut death_revisions: BTreeMap<String, std::collections::BTreeSet<(u64, u64)>> = journaled;
    for w in &watchers {
        for (id, evs) in &w.lock().unwrap().events {
            for e in evs.iter().filter(|e| e.0 == died) {
                death_revisions.entry(id.clone()).or_default().insert(e.3);
            }
        }
    }
    // Behind a silent stream, until the stream check finds its first miss (10 s at
    // most), a life of up to that long is as unseeable.
    let unseeable = |id: &str, t: &TruthContainer| match (t.started_at, t.removed_at) {
        (Some(start), Some(gone)) => {
            let life = gone.duration_since(start).unwrap_or_default();
            !seen_by_any.contains(id)
                && ((life < Duration::from_secs(2) && windows.iter().any(|(from, to)| *from <= start && gone <= *to))
                    || (life < Duration::from_secs(12)
                        && silent_windows
                            .iter()
                            .any(|(from, to)| *from <= start && gone <= *to + Duration::from_secs(2))))
        }
        _ => false,
    };
    let mut unseen = 0u64;
    let secs_of = |w: &[(SystemTime, SystemTime)]| -> f64 {
        w.iter().map(|(a, b)| b.duration_since(*a).unwrap_or_default().as_secs_f64()).sum()
    };
    let (relist_only_n, relist_only_s) = (relist_only.len(), secs_of(&relist_only));
    let (unexplained_n, unexplained_s) = (unexplained.len(), secs_of(&unexplained));
    let mut total_events = 0u64;
    let mut resets: BTreeMap<String, u64> = BTreeMap::new();
    let mut lat_started = Vec::new();
    let mut lat_died = Vec::new();
    let mut watcher_lines = Vec::new();
    for w in &watchers {
        let mut g = w.lock().unwrap();
        v.append(&mut g.violations);
        total_events += g.events.values().map(|e| e.len() as u64).sum::<u64>();
        for (r, n) in &g.resets {
            *resets.entry(r.clone()).or_default() += n;
        }
        lat_started.extend(g.latencies_started.iter());
        lat_died.extend(g.latencies_died.iter());
        watcher_lines.push(format!(
            "{}: {} connects, {} resume attempts without the epoch, {} stalls, resets {:?}",
            g.name, g.connects, g.resumes_without_epoch, g.stalls, g.resets
        ));
        // No event happens twice to a container (attempts are new containers).
        for (id, evs) in &g.events {
            let mut kinds: BTreeMap<i32, u32> = BTreeMap::new();
            for e in evs {
                *kinds.entry(e.0).or_default() += 1;
            }
            for (kind, n) in kinds.into_iter().filter(|(k, n)| *n > 1 && (*k == started || *k == removed)) {
                let kind = api::LifecycleEventType::try_from(kind).map(|k| k.as_str_name()).unwrap_or("?");
                v.push(format!("{}: container {id}: {kind} delivered {n} times: {evs:?}", g.name));
            }
        }
        for (id, t, d) in &deaths {
            if g.namespace.is_some_and(|n| n != t.namespace) {
                continue; // not entitled: filtered out
            }
            let evs = g.events.get(*id).cloned().unwrap_or_default();
            let dies: Vec<&Seen> = evs.iter().filter(|e| e.0 == died).collect();
            match dies.len() {
                0 => {
                    // Owed where the watcher followed the death's revision as an event
                    // stream (its filter admits the pod); otherwise it reached it as
                    // snapshot state after a break. Exact where some watcher received
                    // the death; where none did, judged by time: the death fell in one
                    // of its gaps, or no read could have seen the container.
                    let checker = g.checker.as_ref().unwrap();
                    let revisions = death_revisions.get(*id);
                    let owed = match revisions {
                        Some(at) => at.iter().any(|&(epoch, r)| checker.followed(epoch, r)),
                        None => !g.gap_covers(d.at),
                    };
                    if !owed {
                        carried_by_snapshot += 1;
                    } else if revisions.is_none() && unseeable(id, t) {
                        unseen += 1;
                    } else {
                        let near: Vec<_> = g
                            .streams
                            .iter()
                            .filter(|s| s.0 + Duration::from_secs(60) >= d.at && s.0 <= d.at + Duration::from_secs(60))
                            .collect();
                        v.push(format!(
                            "{}: container {id} (pod {}) died at {:?} (exit {} {:?}) and was never delivered; the death's (epoch, revision) in the journal: {revisions:?} (None: plegd never published it); the runs of revisions the watcher followed (epoch, after, to): {:?}; the watcher's gaps: {:?}; its events for the container: {evs:?}; its streams within a minute (opened, resumed from revision, epoch, first and last revision received): {near:?}",
                            g.name, t.pod_uid, d.at, d.code, d.reason, checker.runs(), g.breaks
                        ));
                    }
                }
                1 => {
                    delivered += 1;
                    let (_, exit, _, _) = dies[0];
                    let Some((code, reason)) = exit else {
                        // Removed before plegd read it, and no event carried its end: only
                        // possible while plegd could only relist.
                        if blind(d.at) {
                            exit_unknown += 1;
                        } else {
                            v.push(format!(
                                "{}: container {id} CONTAINER_DIED without its exit status (the runtime says {} {:?}) while the stream was up",
                                g.name, d.code, d.reason
                            ));
                        }
                        continue;
                    };
                    if (*code, reason.as_str()) != (d.code, d.reason.as_str()) {
                        // The runtime's own word changed (see `Death::later`); or
                        // containerd before 2.3 reported an OOM kill as "Error" for a
                        // moment the poller missed (containerd#12714). Counted, not a
                        // plegd fault: plegd reports what the runtime said when it read.
                        let oom_moment = *code == d.code && d.reason == "OOMKilled" && reason == "Error";
                        // 255 "Unknown" is containerd's word for an exit status it lost
                        // (a task gone when it recovered from its own restart); a TaskOOM
                        // handled after that amends the reason, not the code, and emits no
                        // CRI event. The poller can read only the amended word: the hour on
                        // containerd 2.1 (c7b32b2) had plegd say 255 "Unknown" and the
                        // poller 255 "OOMKilled" for one death, without a poll in between.
                        let recovery_word = *code == 255 && reason == "Unknown" && d.code == 255;
                        if d.said(*code, reason) || oom_moment || recovery_word {
                            reason_races += 1;
                        } else {
                            v.push(format!(
                                "{}: container {id} CONTAINER_DIED with {code} {reason:?}, the runtime says {} {:?} (later {:?})",
                                g.name, d.code, d.reason, d.later
                            ));
                        }
                    }
                    // Told with containerd's lost word, and the runtime's last word (the
                    // poller's, read for a minute) is another: plegd reads such a
                    // container again for a minute (src/pleg/amended_exits.rs), so the watcher's
                    // copy should end with the amendment. Counted; listed where not.
                    let last = d.later.last().cloned().unwrap_or((d.code, d.reason.clone()));
                    if (*code, reason.as_str()) == (255, "Unknown") && last != (*code, reason.clone()) {
                        match g.words.get(*id) {
                            Some(w) if *w == last => amended += 1,
                            w => not_amended.push(format!(
                                "{}: {id} told 255 \"Unknown\", the runtime later {last:?}, the watcher's copy {w:?}",
                                g.name
                            )),
                        }
                    }
                    let pos = |k: i32| evs.iter().position(|e| e.0 == k);
                    let in_order = match (pos(started), pos(died), pos(removed)) {
                        (Some(s), Some(x), _) if s > x => false,
                        (_, Some(x), Some(r)) if x > r => false,
                        _ => true,
                    };
                    if !in_order {
                        v.push(format!("{}: container {id}: events out of order: {evs:?}", g.name));
                    }
                }
                n => v.push(format!("{}: container {id} CONTAINER_DIED delivered {n} times: {evs:?}", g.name)),
            }
        }
    }

    // ------------------------------------------------ the report
    let mut reasons: BTreeMap<String, u64> = BTreeMap::new();
    for (_, _, d) in &deaths {
        *reasons.entry(format!("{} {}", d.code, if d.reason.is_empty() { "-" } else { &d.reason })).or_default() += 1;
    }
    let (rss_first, rss_max, rss_last) = (
        samples.first().map(|s| s.1).unwrap_or(f64::NAN),
        samples.iter().map(|s| s.1).fold(0.0, f64::max),
        samples.last().map(|s| s.1).unwrap_or(f64::NAN),
    );
    let cpu_pct = samples.last().map(|s| s.2 / s.0 * 100.0).unwrap_or(f64::NAN);
    let rss_line: Vec<String> =
        samples.iter().step_by((samples.len() / 8).max(1)).map(|(t, r, _)| format!("{t:.0}s {r:.1}")).collect();
    let report = format!(
        "soak on {} for {secs} s (PLEGD_SOAK_SEED={seed}): actions {:?}; runtime call errors {:?}; faults {:?} (SIGTERM exits {:?}); \
{} containers, {} deaths (runtime's record: exit code and reason {reasons:?}); {total_events} events to 6 watchers; deaths delivered {delivered}, carried by a later snapshot {carried_by_snapshot}, died without exit status while plegd could only relist {exit_unknown}, lived and went unseen while it could only relist {unseen}, the runtime changed its word {reason_races} (of which told 255 \"Unknown\" and amended by a later message {amended}, not amended {}); plegd could only relist {relist_only_n} times for {relist_only_s:.0} s in all, of which {unexplained_n} times for {unexplained_s:.0} s without a fault (excusing nothing); \
resets {resets:?}; GetPodStatus {outcomes:?}; {quiescent_checks} quiescent checks; latency StartContainer→watcher p50 {:.1} p99 {:.1} max {:.1} ms, exit→watcher p50 {:.1} p99 {:.1} max {:.1} ms; \
plegd RSS MiB {rss_first:.1} first, {rss_max:.1} max, {rss_last:.1} last ({}); plegd CPU {cpu_pct:.1}% of a core; VIOLATIONS {}",
        runtime.name(),
        truth.actions,
        truth.call_errors,
        faults,
        sigterm_exits,
        truth.containers.len(),
        deaths.len(),
        not_amended.len(),
        pct(&mut lat_started, 0.5),
        pct(&mut lat_started, 0.99),
        lat_started.last().copied().unwrap_or(f64::NAN),
        pct(&mut lat_died, 0.5),
        pct(&mut lat_died, 0.99),
        lat_died.last().copied().unwrap_or(f64::NAN),
        rss_line.join(", "),
        v.len(),
    );
    println!("{report}");
    for l in &watcher_lines {
        println!("  {l}");
    }
    for l in not_amended.iter().take(10) {
        println!("  not amended: {l}");
    }
    if let Ok(path) = std::env::var("PLEGD_E2E_FIGURES") {
        use std::io::Write;
        let mut f = std::fs::OpenOptions::new().create(true).append(true).open(path).unwrap();
        writeln!(f, "{report}").unwrap();
    }
    let log = std::fs::read_to_string(plegd.dir.path().join("plegd.log")).unwrap_or_default();
    let kept = std::env::temp_dir().join(format!("plegd-soak-{seed}.log"));
    if !v.is_empty() {
        let _ = std::fs::write(&kept, &log);
    }
    assert!(
        v.is_empty(),
        "{} violations (seed {seed}):\n{}\n--- faults ---\n{}\n--- plegd's log (all of it in {}; last 40 lines) ---\n{}",
        v.len(),
        v.join("\n"),
        fault_order
            .iter()
            .zip(&blind_windows)
            .map(|(kind, (from, to))| format!("{kind:?} {from:?} .. {to:?}"))
            .collect::<Vec<_>>()
            .join("\n"),
        kept.display(),
        log.lines().rev().take(40).collect::<Vec<_>>().into_iter().rev().collect::<Vec<_>>().join("\n")
    );
    for k in &kinds {
        assert!(faults.contains_key(k), "every fault kind was injected: {k:?} was not ({faults:?}); run longer");
    }
    assert!(sigterm_exits.iter().all(|c| *c == Some(0)), "SIGTERM is a clean exit: {sigterm_exits:?}");
    assert!(deaths.len() >= 5 && delivered > 0, "the soak made and saw deaths: {report}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_soak_under_chaos_on_the_simulated_runtime_loses_no_death_and_every_view_matches_the_runtime() {
    let secs = env_or("PLEGD_SOAK_SECS", 30);
    let seed = env_or("PLEGD_SOAK_SEED", fastrand::u64(..));
    soak(Runtime::sim().await, secs, seed).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs a real containerd: tests/e2e/run.sh runs it (PLEGD_SOAK_VERSIONS, default 2.1)"]
async fn a_soak_under_chaos_on_real_containerd_loses_no_death_and_every_view_matches_the_runtime() {
    let support::containerd::Env { endpoint, version, ctl } = support::containerd::env();
    let runtime = Runtime::Containerd { endpoint, version, ctl };
    let secs = env_or("PLEGD_SOAK_SECS", 300);
    let seed = env_or("PLEGD_SOAK_SEED", fastrand::u64(..));
    soak(runtime, secs, seed).await;
}

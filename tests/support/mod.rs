//! Shared test support: a simulated runtime served on a real unix socket, a CRI client
//! on it, and helpers to create pods the way the kubelet does.
#![allow(dead_code)]

pub mod binary;
pub mod containerd;

use std::path::PathBuf;
use std::time::Duration;

use futures_util::StreamExt as _;
use plegd::cache::{self, PodCache};
use plegd::cri::client::{ClientOptions, CriClient};
use plegd::cri::spec::{ContainerSpec, PodSpec};
use plegd::model::event::PodLifecycleEvent;
use plegd::pleg::PlegConfig;
use plegd::pleg::generic::GenericPleg;
use plegd::pleg::health::PlegHealth;
use plegd::proto::runtime as cri;
use plegd::proto::runtime::runtime_service_client::RuntimeServiceClient;
use plegd::sim::SimRuntime;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

/// A simulated runtime on a unix socket in a temporary directory.
pub struct SimHarness {
    pub sim: SimRuntime,
    pub dir: tempfile::TempDir,
    pub socket: PathBuf,
    pub endpoint: String,
    pub shutdown: CancellationToken,
    pub tracker: TaskTracker,
}

impl SimHarness {
    /// Starts the simulated runtime's gRPC server.
    pub async fn start() -> Self {
        let dir = tempfile::tempdir().expect("tempdir");
        let socket = dir.path().join("cri.sock");
        let h = Self {
            sim: SimRuntime::new(),
            endpoint: format!("unix://{}", socket.display()),
            socket,
            dir,
            shutdown: CancellationToken::new(),
            tracker: TaskTracker::new(),
        };
        h.serve().await;
        h
    }

    /// (Re)binds the socket and serves the same runtime state on it.
    pub async fn serve(&self) {
        let listener = plegd::uds::bind(&self.socket, 0o660).await.expect("bind sim socket");
        self.tracker.spawn(plegd::sim::server::serve(self.sim.clone(), listener, self.shutdown.child_token()));
    }

    /// A CRI client on the socket with a short deadline.
    pub fn client(&self) -> CriClient {
        CriClient::new(
            &self.endpoint,
            fast_client(),
            plegd::cri::metrics::CriMetrics::register(&mut Default::default()),
        )
        .expect("client")
    }

    /// A raw tonic client, as the kubelet would hold.
    pub fn raw(&self) -> RuntimeServiceClient<tonic::transport::Channel> {
        self.client().raw()
    }

    /// Runs a pod with the given containers over the socket; returns the sandbox id and
    /// the container ids.
    pub async fn run_pod(&self, pod: &PodSpec, containers: &[ContainerSpec]) -> (String, Vec<String>) {
        let mut raw = self.raw();
        let sid = raw.run_pod_sandbox(pod.run_request()).await.expect("run sandbox").into_inner().pod_sandbox_id;
        let mut ids = Vec::new();
        for c in containers {
            ids.push(self.start_container(pod, &sid, c).await);
        }
        (sid, ids)
    }

    /// Creates and starts one container in a sandbox.
    pub async fn start_container(&self, pod: &PodSpec, sid: &str, c: &ContainerSpec) -> String {
        let mut raw = self.raw();
        let id = raw.create_container(pod.create_request(sid, c)).await.expect("create").into_inner().container_id;
        raw.start_container(cri::StartContainerRequest { container_id: id.clone() }).await.expect("start");
        id
    }

    pub async fn stop_container(&self, id: &str) {
        self.raw()
            .stop_container(cri::StopContainerRequest { container_id: id.into(), timeout: 0 })
            .await
            .expect("stop");
    }

    pub async fn remove_container(&self, id: &str) {
        self.raw().remove_container(cri::RemoveContainerRequest { container_id: id.into() }).await.expect("remove");
    }

    pub async fn stop_pod(&self, sid: &str) {
        self.raw().stop_pod_sandbox(cri::StopPodSandboxRequest { pod_sandbox_id: sid.into() }).await.expect("stop pod");
    }

    pub async fn remove_pod(&self, sid: &str) {
        self.raw()
            .remove_pod_sandbox(cri::RemovePodSandboxRequest { pod_sandbox_id: sid.into() })
            .await
            .expect("remove pod");
    }

    /// Opens the runtime's event stream and waits until the runtime has subscribed it.
    pub async fn subscribe_events(&self) -> plegd::cri::EventStream {
        use plegd::cri::RuntimeService;
        let before = self.sim.event_subscribers();
        let s = self.client().container_events().await.expect("events");
        let deadline = tokio::time::Instant::now() + Duration::from_secs(2);
        while self.sim.event_subscribers() <= before {
            assert!(tokio::time::Instant::now() < deadline, "the runtime never subscribed the stream");
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
        s
    }

    /// Stops serving (the socket file stays, like a crashed runtime's).
    pub async fn stop(&self) {
        self.shutdown.cancel();
        self.tracker.close();
        self.tracker.wait().await;
    }
}

/// Client options with short deadlines and backoff, for tests.
pub fn fast_client() -> ClientOptions {
    ClientOptions {
        timeout: Duration::from_millis(500),
        backoff_initial: Duration::from_millis(20),
        backoff_max: Duration::from_millis(200),
    }
}

/// A relister on `client` and what it writes.
pub struct PlegUnderTest {
    pub pleg: GenericPleg<CriClient>,
    pub cache: PodCache,
    /// One message per pod read.
    pub events: mpsc::Receiver<Vec<PodLifecycleEvent>>,
    pub health: PlegHealth,
}

pub fn pleg(client: CriClient, inspect_timeout: Duration) -> PlegUnderTest {
    let (writer, cache) = cache::new();
    let (tx, events) = mpsc::channel(100_000);
    let health = PlegHealth::new(Duration::from_secs(180));
    let cfg =
        PlegConfig { relist_period: Duration::from_millis(100), concurrency: 4, inspect_timeout, ..Default::default() };
    let pleg = GenericPleg::new(
        client,
        writer,
        tx,
        health.clone(),
        plegd::pleg::metrics::PlegMetrics::register(&mut Default::default()),
        cfg,
        Default::default(),
    );
    PlegUnderTest { pleg, cache, events, health }
}

impl PlegUnderTest {
    /// Events queued so far.
    pub fn drain(&mut self) -> Vec<PodLifecycleEvent> {
        let mut v = Vec::new();
        while let Ok(evs) = self.events.try_recv() {
            v.extend(evs);
        }
        v
    }

    /// Relists and returns the events it emitted.
    pub async fn relist(&mut self) -> Vec<PodLifecycleEvent> {
        self.pleg.relist().await.expect("relist");
        self.drain()
    }
}

/// `(type, container name or "(sandbox)")` of each event, for compact assertions.
pub fn summary(events: &[PodLifecycleEvent]) -> Vec<(&'static str, String)> {
    events
        .iter()
        .map(|e| (e.kind.as_str(), if e.is_sandbox { "(sandbox)".to_string() } else { e.container_name.to_string() }))
        .collect()
}

/// The exit code of a container in an event's pod status.
pub fn exit_code(ev: &PodLifecycleEvent) -> Option<i32> {
    ev.pod.as_ref()?.containers.iter().find(|c| c.id == ev.container_id).map(|c| c.exit_code)
}

/// The PLEG's events as the whole sidecar publishes them (the same builder production
/// uses, `app::start_on`), read from its journal; reconcilers' events are left out.
pub struct Sidecar {
    pub events: mpsc::UnboundedReceiver<PodLifecycleEvent>,
    pub cache: PodCache,
    pub stream: tokio::sync::watch::Receiver<plegd::pleg::evented::StreamState>,
    pub metrics: plegd::app::Metrics,
    pub inbox: plegd::pleg::inbox::Inbox,
    pub health: PlegHealth,
    pub app: plegd::app::Sidecar,
    pub shutdown: CancellationToken,
    pub tracker: TaskTracker,
    _dir: tempfile::TempDir,
}

/// Evented settings that retry quickly, for tests.
pub fn fast_evented() -> plegd::pleg::evented::EventedConfig {
    plegd::pleg::evented::EventedConfig {
        retry_initial: Duration::from_millis(20),
        retry_max: Duration::from_millis(200),
        reset_after: Duration::from_secs(5),
        no_stream_retry: Duration::from_millis(200),
        connect_grace: Duration::from_millis(100),
    }
}

/// Starts the sidecar on `client` in `mode` with the given periods, and forwards every
/// event its PLEG publishes, from revision 1 on, to [`Sidecar::events`].
pub async fn start_sidecar(
    client: CriClient,
    mode: plegd::pleg::evented::Mode,
    relist_period: Duration,
    evented_period: Duration,
) -> Sidecar {
    start_sidecar_tuned(client, mode, relist_period, evented_period, |_| {}).await
}

/// [`start_sidecar`], with `tune` setting the rest of the config last.
pub async fn start_sidecar_tuned(
    client: CriClient,
    mode: plegd::pleg::evented::Mode,
    relist_period: Duration,
    evented_period: Duration,
    tune: impl FnOnce(&mut plegd::config::RunConfig),
) -> Sidecar {
    use plegd::journal::{Filter, Since, Start};
    use plegd::model::event::EventSource;
    let dir = tempfile::tempdir().expect("tempdir");
    let mut cfg = plegd::config::RunConfig::for_endpoint("unix:///the/client/is/given").unwrap();
    cfg.pleg.mode = mode;
    cfg.pleg.relist_period = relist_period;
    cfg.pleg.net_period = evented_period;
    cfg.pleg.stream = fast_evented();
    cfg.pleg.concurrency = 8;
    cfg.pleg.inspect_timeout = Duration::from_secs(2);
    cfg.admin.addr = "127.0.0.1:0".parse().unwrap();
    cfg.api.socket = dir.path().join("plegd.sock");
    cfg.journal.capacity = 1_000_000;
    cfg.journal.memory_budget = u64::MAX / 2;
    cfg.journal.client_buffer = 1_000_000;
    tune(&mut cfg);
    let metrics = plegd::app::Metrics::new();
    let shutdown = CancellationToken::new();
    let tracker = TaskTracker::new();
    let app = plegd::app::start_on(&cfg, client, metrics.clone(), &tracker, &shutdown).await.expect("sidecar starts");
    // From revision 1: nothing published before this subscription is lost.
    let sub = app.journal().subscribe(Since::Revision(0, 0), std::sync::Arc::new(Filter::default()));
    assert!(matches!(sub.start, Start::Replay(_)), "a journal that kept everything replays from revision 0");
    let (_, mut feed) = sub.into_feed();
    let (tx, events) = mpsc::unbounded_channel();
    let sd = shutdown.clone();
    tracker.spawn(async move {
        let forward = |e: &plegd::journal::Entry| {
            if e.event.source != EventSource::Reconciler {
                let _ = tx.send((*e.event).clone());
            }
        };
        loop {
            tokio::select! {
                _ = sd.cancelled() => return,
                item = feed.next() => match item {
                    Some(plegd::journal::FeedItem::Entry(e)) => forward(&e),
                    _ if sd.is_cancelled() => return,
                    other => panic!("the test's journal subscriber was dropped: {other:?}"),
                },
            }
        }
    });
    Sidecar {
        events,
        cache: app.cache().clone(),
        stream: app.stream().clone(),
        metrics,
        inbox: app.inbox().clone(),
        health: app.health().clone(),
        app,
        shutdown,
        tracker,
        _dir: dir,
    }
}

impl Sidecar {
    /// The next event, if one comes within `timeout`.
    pub async fn next(&mut self, timeout: Duration) -> Option<PodLifecycleEvent> {
        tokio::time::timeout(timeout, self.events.recv()).await.ok().flatten()
    }

    /// Collects events until none arrived for `quiet`.
    pub async fn until_quiet(&mut self, quiet: Duration) -> Vec<PodLifecycleEvent> {
        let mut v = Vec::new();
        while let Some(ev) = self.next(quiet).await {
            v.push(ev);
        }
        v
    }

    /// Waits until the stream state satisfies `pred`.
    pub async fn wait_stream(&mut self, timeout: Duration, pred: impl Fn(plegd::pleg::evented::StreamState) -> bool) {
        let ok = tokio::time::timeout(timeout, self.stream.wait_for(|s| pred(*s))).await.is_ok();
        assert!(ok, "stream state never matched; it is {:?}", *self.stream.borrow());
    }

    pub async fn stop(self) {
        self.shutdown.cancel();
        self.tracker.close();
        self.tracker.wait().await;
    }
}

/// The runtime's truth as `(id → state)` of every container and sandbox, and the
/// cache's view of the same.
pub async fn truth_and_cache(
    sim: &SimRuntime,
    cache: &PodCache,
) -> (std::collections::BTreeMap<String, String>, std::collections::BTreeMap<String, String>) {
    let mut truth = std::collections::BTreeMap::new();
    for s in sim.list_pod_sandbox(None).await.unwrap() {
        truth.insert(s.id, format!("sandbox:{}", s.state));
    }
    for c in sim.list_containers_cri(None).await.unwrap() {
        let st = sim.container_status_cri(&c.id).await.unwrap();
        truth.insert(c.id, format!("container:{}:{}", st.state, st.exit_code));
    }
    let mut cached = std::collections::BTreeMap::new();
    for e in cache.snapshot() {
        let st = e.status.as_ref().unwrap();
        for s in &st.sandboxes {
            let v = match s.state {
                plegd::model::SandboxState::Ready => 0,
                plegd::model::SandboxState::NotReady => 1,
                plegd::model::SandboxState::Unknown => -1,
            };
            cached.insert(s.id.clone(), format!("sandbox:{v}"));
        }
        for c in &st.containers {
            let v = match c.state {
                plegd::model::ContainerState::Created => 0,
                plegd::model::ContainerState::Running => 1,
                plegd::model::ContainerState::Exited => 2,
                plegd::model::ContainerState::Unknown => 3,
            };
            cached.insert(c.id.clone(), format!("container:{v}:{}", c.exit_code));
        }
    }
    (truth, cached)
}

/// Replays events on a per-id state model and checks each one is a transition the
/// state table allows from the model's current state; returns the final model.
pub fn replay(events: &[PodLifecycleEvent]) -> std::collections::BTreeMap<String, plegd::pleg::PlegState> {
    use plegd::model::event::EventType;
    use plegd::pleg::PlegState;
    let mut model: std::collections::BTreeMap<String, PlegState> = Default::default();
    for ev in events {
        if ev.container_id.is_empty() {
            continue;
        }
        let cur = model.get(&ev.container_id).copied().unwrap_or(PlegState::NonExistent);
        let next = match ev.kind {
            EventType::ContainerStarted => PlegState::Running,
            EventType::ContainerDied => PlegState::Exited,
            EventType::ContainerChanged => PlegState::Unknown,
            EventType::ContainerRemoved => PlegState::NonExistent,
            _ => continue,
        };
        let allowed = (cur != next && ev.kind != EventType::ContainerRemoved)
            || (ev.kind == EventType::ContainerRemoved && cur == PlegState::Exited);
        assert!(allowed, "{:?} for {} in state {cur:?}: not a state-table transition", ev.kind, ev.container_id);
        if next == PlegState::NonExistent {
            model.remove(&ev.container_id);
        } else {
            model.insert(ev.container_id.clone(), next);
        }
    }
    model
}

/// A whole plegd (`app::start`) on a simulated runtime, with its API socket.
pub struct Plegd {
    pub h: SimHarness,
    pub app: plegd::app::Sidecar,
    pub socket: String,
    pub shutdown: CancellationToken,
    pub tracker: TaskTracker,
}

/// Starts a simulated runtime and a plegd on it; `tune` adjusts the config.
pub async fn start_plegd(tune: impl FnOnce(&mut plegd::config::RunConfig)) -> Plegd {
    start_plegd_on(SimHarness::start().await, tune).await
}

/// Starts a plegd on a runtime that is already serving (a restart of plegd alone).
pub async fn start_plegd_on(h: SimHarness, tune: impl FnOnce(&mut plegd::config::RunConfig)) -> Plegd {
    let mut cfg = plegd::config::RunConfig::for_endpoint(&h.endpoint).unwrap();
    cfg.api.socket = h.dir.path().join("api/plegd.sock");
    cfg.admin.addr = "127.0.0.1:0".parse().unwrap();
    cfg.pleg.relist_period = Duration::from_millis(200);
    cfg.pleg.stream = fast_evented();
    tune(&mut cfg);
    let shutdown = CancellationToken::new();
    let tracker = TaskTracker::new();
    let app = plegd::app::start(&cfg, &tracker, &shutdown).await.expect("plegd starts");
    let socket = format!("unix://{}", cfg.api.socket.display());
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while app.readiness().check().is_err() {
        assert!(tokio::time::Instant::now() < deadline, "plegd never became ready: {:?}", app.readiness().check());
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    Plegd { h, app, socket, shutdown, tracker }
}

impl Plegd {
    /// A gRPC client on plegd's socket.
    pub fn client(&self) -> plegd::proto::plegd::pod_lifecycle_client::PodLifecycleClient<tonic::transport::Channel> {
        plegd::cli::client::connect(&self.socket).expect("client")
    }

    pub async fn stop(self) {
        let h = self.stop_plegd().await;
        h.stop().await;
    }

    /// Stops plegd alone; the runtime goes on.
    pub async fn stop_plegd(self) -> SimHarness {
        self.shutdown.cancel();
        self.tracker.close();
        tokio::time::timeout(Duration::from_secs(10), self.tracker.wait()).await.expect("plegd stops in time");
        self.h
    }
}

/// A minimal HTTP/1.1 request to the admin server: (status, body).
pub async fn http(addr: std::net::SocketAddr, method: &str, path: &str) -> (u16, String) {
    try_http(addr, method, path).await.expect("admin request")
}

/// [`http`], for a server that may be gone: an error instead of a panic.
#[allow(dead_code)]
pub async fn try_http(addr: std::net::SocketAddr, method: &str, path: &str) -> std::io::Result<(u16, String)> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut s = tokio::net::TcpStream::connect(addr).await?;
    let req = format!("{method} {path} HTTP/1.1\r\nHost: localhost\r\nContent-Length: 0\r\nConnection: close\r\n\r\n");
    s.write_all(req.as_bytes()).await?;
    let mut buf = Vec::new();
    s.read_to_end(&mut buf).await?;
    let text = String::from_utf8_lossy(&buf).to_string();
    let code = text.split_whitespace().nth(1).and_then(|c| c.parse().ok()).unwrap_or(0);
    let body = text.split_once("\r\n\r\n").map(|(_, b)| b.to_string()).unwrap_or_default();
    // Bodies may be chunked: drop chunk-size lines for the JSON/text checks.
    let body = if text.to_ascii_lowercase().contains("transfer-encoding: chunked") { dechunk(&body) } else { body };
    Ok((code, body))
}

fn dechunk(body: &str) -> String {
    let mut out = String::new();
    let mut rest = body;
    while let Some((size, after)) = rest.split_once("\r\n") {
        let Ok(n) = usize::from_str_radix(size.trim(), 16) else { break };
        if n == 0 {
            break;
        }
        out.push_str(&after[..n.min(after.len())]);
        rest = after.get(n + 2..).unwrap_or("");
    }
    out
}

/// The whole sidecar (`app::start`) on a single-threaded runtime of its own, on its own
/// thread, so a test can stall every one of plegd's workers while the runtime's callers
/// go on (`tests/runtime_never_waits.rs`, the e2e suite).
#[allow(dead_code)]
pub struct OwnRuntimePlegd {
    pub cache: plegd::cache::PodCache,
    pub metrics: plegd::app::Metrics,
    pub handle: tokio::runtime::Handle,
    shutdown: CancellationToken,
    thread: Option<std::thread::JoinHandle<()>>,
    _dir: tempfile::TempDir,
}

#[allow(dead_code)]
impl OwnRuntimePlegd {
    pub fn start(endpoint: &str) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let mut cfg = plegd::config::RunConfig::for_endpoint(endpoint).unwrap();
        cfg.api.socket = dir.path().join("plegd.sock");
        cfg.admin.addr = "127.0.0.1:0".parse().unwrap();
        cfg.pleg.stream = fast_evented();
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        let handle = rt.handle().clone();
        let shutdown = CancellationToken::new();
        let (tx, rx) = std::sync::mpsc::channel();
        let sd = shutdown.clone();
        let thread = std::thread::spawn(move || {
            rt.block_on(async move {
                let tracker = TaskTracker::new();
                let app = plegd::app::start(&cfg, &tracker, &sd).await.expect("plegd starts");
                tx.send((app.cache().clone(), app.metrics().clone())).unwrap();
                sd.cancelled().await;
                tracker.close();
                tracker.wait().await;
            })
        });
        let (cache, metrics) = rx.recv().unwrap();
        Self { cache, metrics, handle, shutdown, thread: Some(thread), _dir: dir }
    }

    /// Blocks plegd's only worker for `d`: nothing of plegd's runs but its event reader.
    pub fn stall(&self, d: Duration) {
        self.handle.spawn(async move { std::thread::sleep(d) });
    }

    /// The sum of a metric family's samples.
    pub fn metric(&self, name: &str) -> f64 {
        self.metrics
            .encode_text()
            .lines()
            .filter(|l| l.starts_with(name))
            .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
            .sum()
    }
}

impl Drop for OwnRuntimePlegd {
    fn drop(&mut self) {
        self.shutdown.cancel();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

//! Shared test support: a simulated runtime served on a real unix socket, a CRI client
//! on it, and helpers to create pods the way the kubelet does.
#![allow(dead_code)]

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use plegd::cache::{self, PodCache};
use plegd::cri::client::{ClientOptions, CriClient};
use plegd::cri::spec::{ContainerSpec, PodSpec};
use plegd::pleg::PodLifecycleEvent;
use plegd::pleg::generic::{GenericPleg, RelistConfig};
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
        CriClient::new(&self.endpoint, fast_client(), None).expect("client")
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
    pub events: mpsc::Receiver<PodLifecycleEvent>,
    pub health: PlegHealth,
}

pub fn pleg(client: CriClient, inspect_timeout: Duration) -> PlegUnderTest {
    let (writer, cache) = cache::new();
    let (tx, events) = mpsc::channel(100_000);
    let health = PlegHealth::new(Duration::from_secs(180));
    let cfg = RelistConfig { period: Duration::from_millis(100), concurrency: 4, inspect_timeout };
    let pleg = GenericPleg::new(client, writer, tx, health.clone(), None, cfg);
    PlegUnderTest { pleg, cache, events, health }
}

impl PlegUnderTest {
    /// Events queued so far.
    pub fn drain(&mut self) -> Vec<PodLifecycleEvent> {
        let mut v = Vec::new();
        while let Ok(ev) = self.events.try_recv() {
            v.push(ev);
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
        .map(|e| (e.kind.as_str(), if e.is_sandbox { "(sandbox)".to_string() } else { e.container_name.clone() }))
        .collect()
}

/// The exit code of a container in an event's pod status.
pub fn exit_code(ev: &PodLifecycleEvent) -> Option<i32> {
    ev.pod.as_ref()?.containers.iter().find(|c| c.id == ev.container_id).map(|c| c.exit_code)
}

pub fn arc<T>(t: T) -> Arc<T> {
    Arc::new(t)
}

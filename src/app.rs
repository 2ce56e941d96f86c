//! Builds the sidecar's components from a validated config and spawns each into the
//! task tracker: the one place long-running tasks start, each under [`tasks`]' rule that
//! an essential task's early end is fatal.

mod tasks;
pub use tasks::{Fatal, Tasks};

use std::net::SocketAddr;
use std::time::Duration;

use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::admin::{AdminError, AdminState, HttpServer};
use crate::backoff::Backoff;
use crate::cache::PodCache;
use crate::config::RunConfig;
use crate::cri::RuntimeService;
use crate::grpc::{ApiError, PodLifecycleService};
use crate::journal::{Journal, StoreError};
use crate::kubelet::PodsApiWatcher;
use crate::liveness::{Liveness, QUICK_LOOP_LIMIT};
use crate::lookup::resolver::{ContainerReader, DirectRead, ReadContainer, Resolver};
use crate::lookup::{ContainerLookup, LookupError};
use crate::metrics::Registry;
use crate::model::identity::Identities;
use crate::pleg::evented::{Mode, StreamState};
use crate::pleg::generic::PlegHandle;
use crate::pleg::health::{PlegHealth, Readiness};
use crate::pleg::inbox::Inbox;
use crate::pleg::{Pleg, PlegDeps};
use crate::publish;
use crate::reconcile::PipelineInputs;
use crate::runlog::{Mark, MarkKind, RunLog};
use crate::syncloop::{History, SyncLoopHandle};
use crate::uds::UdsError;
use crate::workqueue::WorkQueue;
use std::sync::{Arc, Mutex};

/// Errors of starting the sidecar.
#[derive(Debug, thiserror::Error)]
pub enum AppError {
    /// The admin server could not start.
    #[error(transparent)]
    Admin(#[from] AdminError),
    /// The runtime endpoint is unusable.
    #[error("--runtime-endpoint: {0}")]
    Endpoint(#[source] UdsError),
    /// The API socket could not be bound.
    #[error("--listen: {0}")]
    Listen(#[source] UdsError),
    /// The API server failed.
    #[error(transparent)]
    Api(#[from] ApiError),
    /// The state dir cannot be created (a usage error: the flag names a bad place).
    #[error(transparent)]
    StateDir(StoreError),
    /// Shutdown came before the sidecar had started (while it waited for the state dir).
    #[error("shut down before it had started")]
    Interrupted,
    /// The tombstone file in the state dir cannot be opened.
    #[error(transparent)]
    Lookup(#[from] LookupError),
    /// The OTLP export's settings are unusable.
    #[error(transparent)]
    Export(#[from] crate::export::ExportError),
}

impl AppError {
    /// Whether the command line is at fault (exit status 64).
    pub fn is_usage(&self) -> bool {
        matches!(self, Self::StateDir(_))
    }
}

/// A running sidecar: its components' handles, behind accessors.
pub struct Sidecar {
    cache: PodCache,
    journal: Journal,
    health: PlegHealth,
    readiness: Readiness,
    metrics: Metrics,
    pleg: PlegHandle,
    liveness: Liveness,
    admin_addr: SocketAddr,
    debug_addr: SocketAddr,
    api_socket: std::path::PathBuf,
    stream: tokio::sync::watch::Receiver<StreamState>,
    history: Arc<Mutex<History>>,
    sync: SyncLoopHandle,
    queues: Vec<WorkQueue<String>>,
    inbox: Inbox,
    lookup: ContainerLookup,
    tasks: Tasks,
}

impl Sidecar {
    /// The first essential task that ended early (plegd is then shutting down).
    pub fn fatal(&self) -> Option<Fatal> {
        self.tasks.fatal()
    }

    /// The pod-status cache.
    pub fn cache(&self) -> &PodCache {
        &self.cache
    }

    /// The journal of published events.
    pub fn journal(&self) -> &Journal {
        &self.journal
    }

    /// PLEG health.
    pub fn health(&self) -> &PlegHealth {
        &self.health
    }

    /// Readiness, as `/readyz` and grpc health report it.
    pub fn readiness(&self) -> &Readiness {
        &self.readiness
    }

    /// Every subsystem's metrics.
    pub fn metrics(&self) -> &Metrics {
        &self.metrics
    }

    /// Asks the relister for a full relist.
    pub fn pleg(&self) -> &PlegHandle {
        &self.pleg
    }

    /// The liveness of every long-running loop, as `/livez` reports it.
    pub fn liveness(&self) -> &Liveness {
        &self.liveness
    }

    /// The sync loop's history.
    pub fn history(&self) -> &Arc<Mutex<History>> {
        &self.history
    }

    /// The sync loop's inputs.
    pub fn sync(&self) -> &SyncLoopHandle {
        &self.sync
    }

    /// The relister's inbox (where the event stream and waiting readers send their requests).
    pub fn inbox(&self) -> &Inbox {
        &self.inbox
    }

    /// Containers by id, cgroup id and PID, removed ones too.
    pub fn lookup(&self) -> &ContainerLookup {
        &self.lookup
    }

    /// Where the metrics and health listener is.
    pub fn admin_addr(&self) -> SocketAddr {
        self.admin_addr
    }

    /// Where the debug listener is.
    pub fn debug_addr(&self) -> SocketAddr {
        self.debug_addr
    }

    /// The API socket.
    pub fn api_socket(&self) -> &std::path::Path {
        &self.api_socket
    }

    /// The event stream's state (a receiver of its own).
    pub fn stream(&self) -> tokio::sync::watch::Receiver<StreamState> {
        self.stream.clone()
    }

    /// One work queue per reconciler.
    pub fn queues(&self) -> &[WorkQueue<String>] {
        &self.queues
    }
}

/// Starts the sidecar's tasks in `tracker` against the CRI runtime at
/// `--runtime-endpoint`; they stop when `shutdown` is cancelled. Sockets are bound
/// before anything runs, so a bad address fails here.
pub async fn start(cfg: &RunConfig, tracker: &TaskTracker, shutdown: &CancellationToken) -> Result<Sidecar, AppError> {
    let metrics = Metrics::new();
    let client = cfg.runtime.clone().build(metrics.cri.clone()).map_err(AppError::Endpoint)?;
    start_on(cfg, client, metrics, tracker, shutdown).await
}

/// Starts the sidecar on any runtime (the CRI client in production; the simulated
/// runtime in-process for tests that run hours of paused time). Takes the config apart,
/// one part per subsystem, and builds each: the stores, the PLEG, the pipeline behind
/// it, the listeners (bound before anything runs), then spawns every task.
pub async fn start_on<R: RuntimeService>(
    cfg: &RunConfig,
    client: R,
    metrics: Metrics,
    tracker: &TaskTracker,
    shutdown: &CancellationToken,
) -> Result<Sidecar, AppError> {
    crate::clock::start();
    let RunConfig { state_dir, host, runtime, pleg, admin, api, journal, sync, memory, lookup, export, kubelet, nri } =
        cfg.clone();
    let identities = Arc::new(Identities::new(&api.node_name, lookup.retention));
    let liveness = Liveness::new();
    let stores = Stores::open(journal, lookup, &state_dir, &api.socket, &host, pleg.mode, &metrics, shutdown).await?;
    let (Pleg { relister, watcher, cache, health, readiness, stream: state_rx }, publisher) =
        pleg_and_publisher(pleg.clone(), &client, &stores, &host, &liveness, &metrics, runtime.request_timeout);
    let Stores { journal, lookup, tombstones, runlog } = stores;
    let (relist_handle, inbox) = (relister.handle(), relister.inbox());
    let on = PipelineInputs {
        journal: &journal,
        cache: &cache,
        runtime: &client,
        health: &health,
        publish: publisher.path(),
        liveness: &liveness,
    };
    let pipeline = sync.build(on, metrics.queues.clone(), metrics.reconcile.clone());

    // Bind every socket before starting anything.
    let api_listener = crate::uds::bind(&api.socket, 0o660).await.map_err(AppError::Listen)?;
    let admin_state = Arc::new(AdminState {
        metrics: metrics.registry.clone(),
        health: health.clone(),
        liveness: liveness.clone(),
        readiness: readiness.clone(),
        history: pipeline.history.clone(),
        queues: pipeline.queues.clone(),
        sync: pipeline.sync.clone(),
        pleg: relist_handle.clone(),
        cache: cache.clone(),
        journal: journal.clone(),
        runtime_view: runtime_view(client.clone(), cache.clone(), pleg.concurrency, host.clone()),
        work: Default::default(),
        runlog: runlog.clone(),
        identities: identities.clone(),
    });
    let (admin, debug) = admin.build(admin_state, &metrics.http).await?;
    let (admin_addr, debug_addr) = (admin.local_addr(), debug.local_addr());
    let exporter = exporter(export, &state_dir, &journal, &metrics)?.map(|e| e.with_identities(identities.clone()));
    // Every task, each in its span.
    let tasks = Tasks::new(tracker, shutdown);
    let identity =
        PodsApiWatcher::new(kubelet, &identities, publisher.path(), &cache, &metrics.kubelet, state_dir.as_deref());
    tasks.essential("publish", publisher.run(shutdown.clone()));
    if let Some(exporter) = exporter {
        tasks.essential("otlp_export", exporter.run(shutdown.clone()));
    }
    spawn_upkeep(&tasks, shutdown, tombstones, memory.build(metrics.memory.clone()), &journal, &lookup);
    if let Some(w) = watcher {
        tasks.essential("event_stream", w.run(shutdown.clone()));
    }
    tasks.essential("kubelet_pods_api", identity.run(shutdown.clone()));
    spawn_nri(&tasks, nri, &inbox, &lookup, &metrics.nri, &liveness, shutdown);
    tasks.essential("run_log", keep_run_log(runlog, state_rx.clone(), health.clone(), shutdown.clone()));
    tasks.essential("relist", relister.run(shutdown.clone()));
    tasks.essential("sync_loop", pipeline.sync_loop.run(shutdown.clone()));
    for c in pipeline.controllers {
        let span = tracing::info_span!("reconciler", name = c.name());
        tasks.essential_in("reconciler", span, c.run(shutdown.clone()));
    }
    tasks.once("announce_runtime", announce_runtime(client.clone(), shutdown.clone()));
    tasks.essential("admin", serve_http("admin", admin, shutdown.clone()));
    tasks.essential("debug", serve_http("debug", debug, shutdown.clone()));
    let reader = container_reader(client.clone(), host.clone());
    let svc = api_service(&api, &journal, &cache, &lookup, reader, &identities, &metrics, tracker, shutdown);
    let (beat, ready) = (liveness.register("api", QUICK_LOOP_LIMIT), readiness.clone());
    serve_api(&tasks, api_listener, svc, ready, beat, api.socket.clone(), shutdown);
    tracing::info!(
        runtime = %runtime.endpoint, api = %api.socket.display(), admin = %admin_addr, debug = %debug_addr,
        mode = ?pleg.mode, "plegd started"
    );
    Ok(Sidecar {
        cache,
        journal,
        health,
        readiness,
        metrics,
        pleg: relist_handle,
        liveness,
        admin_addr,
        debug_addr,
        api_socket: api.socket,
        stream: state_rx,
        history: pipeline.history,
        sync: pipeline.sync,
        queues: pipeline.queues,
        inbox,
        lookup,
        tasks,
    })
}

/// The PLEG over the stores (seeded with the journal's pods), and the publisher its
/// reads feed, which marks the journal primed once the first relist is in.
fn pleg_and_publisher<R: RuntimeService>(
    cfg: crate::pleg::PlegConfig,
    client: &R,
    stores: &Stores,
    host: &crate::host::Host,
    liveness: &Liveness,
    metrics: &Metrics,
    request_timeout: std::time::Duration,
) -> (Pleg<R>, publish::Publisher) {
    let (events, publisher) = publish::channel(4096, stores.journal.clone(), metrics.events.clone());
    let pleg = cfg.build(PlegDeps {
        runtime: client.clone(),
        events,
        host: host.clone(),
        seed: stores.journal.pods(),
        liveness,
        metrics: metrics.pleg.clone(),
        request_timeout,
    });
    let publisher = publisher
        .with_liveness(liveness.register("publish", QUICK_LOOP_LIMIT))
        .priming(pleg.health.clone())
        .with_lookup(stores.lookup.clone());
    (pleg, publisher)
}

/// The gRPC API's service over the journal and the cache; `GetContainer` resolves by
/// the lookup, and reads a container plegd has not published yet with `reader`.
#[allow(clippy::too_many_arguments)]
fn api_service(
    api: &crate::grpc::ApiConfig,
    journal: &Journal,
    cache: &PodCache,
    lookup: &ContainerLookup,
    reader: ContainerReader,
    identities: &Arc<Identities>,
    metrics: &Metrics,
    tracker: &TaskTracker,
    shutdown: &CancellationToken,
) -> PodLifecycleService {
    let resolver = Resolver::new(lookup.clone(), Some(reader), journal.clone(), cache.clone(), shutdown.clone());
    let (journal, cache) = (journal.clone(), cache.clone());
    PodLifecycleService::new(journal, cache, api.clone(), metrics.api.clone(), tracker.clone(), shutdown.clone())
        .with_resolver(resolver)
        .with_identities(identities.clone())
}

/// The OTLP exporter, when the export is on; it keeps its cursor in the state dir.
fn exporter(
    export: Option<crate::export::ExportConfig>,
    state_dir: &Option<std::path::PathBuf>,
    journal: &Journal,
    metrics: &Metrics,
) -> Result<Option<crate::export::OtlpExporter>, AppError> {
    let Some(export) = export else { return Ok(None) };
    Ok(Some(crate::export::OtlpExporter::new(export, state_dir.clone(), journal.clone(), metrics.export.clone())?))
}

/// The NRI observer plugin, unless `--nri=off`: its hints go to the relister's inbox.
fn spawn_nri(
    tasks: &Tasks,
    nri: crate::nri::NriConfig,
    inbox: &Inbox,
    lookup: &crate::lookup::ContainerLookup,
    metrics: &crate::nri::NriMetrics,
    liveness: &Liveness,
    shutdown: &CancellationToken,
) {
    if nri.mode != crate::nri::NriMode::Off {
        let plugin = crate::nri::NriPlugin::new(nri, inbox.clone(), metrics.clone())
            .with_lookup(lookup.clone())
            .with_liveness(liveness.register("nri", QUICK_LOOP_LIMIT));
        tasks.essential("nri", plugin.run(shutdown.clone()));
    }
}

/// Spawns what keeps the state dir and the memory in shape: the tombstone file's
/// writer, the journal's checkpointer, the memory scavenger; and the lookup's count of
/// settled deaths.
fn spawn_upkeep(
    tasks: &Tasks,
    shutdown: &CancellationToken,
    tombstones: Option<crate::lookup::TombstoneWriter>,
    scavenger: crate::memory::Scavenger,
    journal: &Journal,
    lookup: &ContainerLookup,
) {
    tasks.essential("terminations", lookup.terminations().run(shutdown.clone()));
    if let Some(w) = tombstones {
        tasks.essential("tombstones", w.run(shutdown.clone()));
    }
    // It ends at once when trimming is off or not glibc's to do.
    tasks.once("memory_trim", scavenger.run(shutdown.clone()));
    if let Some(checkpointer) = journal.checkpointer() {
        tasks.essential("journal_checkpoint", checkpointer.run(shutdown.clone()));
    }
}

/// Serves the gRPC API on its bound socket until shutdown; the socket file goes with
/// it. A server that fails stops plegd.
fn serve_api(
    tasks: &Tasks,
    listener: tokio::net::UnixListener,
    svc: PodLifecycleService,
    ready: Readiness,
    beat: crate::liveness::Beat,
    socket: std::path::PathBuf,
    shutdown: &CancellationToken,
) {
    let sd = shutdown.clone();
    tasks.essential("grpc", async move {
        // A server that fails returns before shutdown: fatal (`tasks`), exit status 1.
        if let Err(e) = crate::grpc::serve(listener, svc, ready, beat, sd.clone()).await {
            tracing::error!(error = %e, "gRPC API stopped");
        }
        let _ = std::fs::remove_file(&socket);
    });
}

/// What lives in the state dir: the journal, the lookup's tombstones, the run log.
struct Stores {
    journal: Journal,
    lookup: ContainerLookup,
    /// Writes tombstones to disk, when there is a state dir.
    tombstones: Option<crate::lookup::TombstoneWriter>,
    runlog: RunLog,
}

impl Stores {
    #[allow(clippy::too_many_arguments)]
    /// Opens each on a blocking thread (the journal may wait for a plegd that still holds
    /// the state dir, and signals must be heard meanwhile); the lookup learns the pods the
    /// journal holds; the run log records this start.
    async fn open(
        journal: crate::journal::JournalConfig,
        lookup: crate::lookup::LookupConfig,
        state_dir: &Option<std::path::PathBuf>,
        api_socket: &std::path::Path,
        host: &crate::host::Host,
        mode: Mode,
        metrics: &Metrics,
        shutdown: &CancellationToken,
    ) -> Result<Self, AppError> {
        let journal = {
            // The journal's lineage is marked beside the API socket, a per-boot directory.
            let lineage = api_socket.parent().map(|d| d.join(crate::journal::lineage::FILE));
            let place = crate::journal::Place { state_dir: state_dir.clone(), lineage };
            let (jmetrics, stop) = (metrics.journal.clone(), shutdown.clone());
            tokio::task::spawn_blocking(move || journal.build(&place, jmetrics, &stop))
                .await
                .expect("opening the journal panicked")
                .map_err(|e| match e {
                    StoreError::Interrupted { .. } => AppError::Interrupted,
                    e => AppError::StateDir(e),
                })?
        };
        let (lookup, tombstones) = {
            // The tombstones are kept in the state dir; processes are read on the host.
            let (host, dir, lmetrics) = (host.clone(), state_dir.clone(), metrics.lookup.clone());
            tokio::task::spawn_blocking(move || open_lookup(lookup, host, dir.as_deref(), lmetrics))
                .await
                .expect("opening the lookup panicked")?
        };
        // Removals the tombstone file had not written when the last plegd stopped (killed
        // right after publishing them) are in the journal: learned again, then the pods.
        lookup.catch_up(journal.recent(lookup.catch_up_since()).iter().map(|e| &*e.event));
        lookup.seed(&journal.pods());
        let detail = format!("plegd {} pid {} mode {mode:?}", env!("CARGO_PKG_VERSION"), std::process::id());
        let dir = state_dir.clone();
        let runlog = tokio::task::spawn_blocking(move || {
            let log = RunLog::open(dir.as_deref());
            log.record(Mark::now(MarkKind::Start, detail));
            log
        })
        .await
        .expect("opening the run log panicked");
        Ok(Self { journal, lookup, tombstones, runlog })
    }
}

/// The lookup with its tombstones in the state dir; in memory only when they cannot be
/// kept there (a read-only dir, as the journal goes on in memory), so that a state dir
/// the journal can live without does not keep plegd from starting.
fn open_lookup(
    cfg: crate::lookup::LookupConfig,
    host: crate::host::Host,
    state_dir: Option<&std::path::Path>,
    metrics: crate::lookup::LookupMetrics,
) -> Result<(ContainerLookup, Option<crate::lookup::TombstoneWriter>), LookupError> {
    match ContainerLookup::open(cfg.clone(), host.clone(), state_dir, metrics.clone()) {
        Err(e) if state_dir.is_some() => {
            tracing::error!(error = %e, "the tombstones cannot be kept in the state dir; the lookup keeps them in memory only");
            ContainerLookup::open(cfg, host, None, metrics)
        }
        opened => opened,
    }
}

/// `/debug/pods?view=runtime`: every pod read from the runtime now, against the cache's
/// statuses (a container's process is carried over, as the relister does).
fn runtime_view<R: RuntimeService>(
    client: R,
    cache: PodCache,
    n: usize,
    host: crate::host::Host,
) -> crate::admin::RuntimeView {
    Arc::new(move || {
        let (client, host, cache) = (client.clone(), host.clone(), cache.clone());
        Box::pin(async move {
            let previous = move |uid: &str| cache.get(uid).and_then(|e| e.status.clone());
            crate::pleg::inspect::read_all(&client, &host, n, &previous).await.map_err(|e| e.to_string())
        })
    })
}

/// `GetContainer`'s read of a container plegd has not published yet.
fn container_reader<R: RuntimeService>(client: R, host: crate::host::Host) -> ContainerReader {
    Arc::new(move |id: String| {
        let (client, host) = (client.clone(), host.clone());
        Box::pin(async move {
            match crate::pleg::inspect::read_container(&client, &host, &id).await {
                Ok(Some((pod, container))) => DirectRead::Found(Box::new(ReadContainer { pod, container })),
                Ok(None) => DirectRead::NotAPodsContainer,
                Err(e) => DirectRead::Failed(e.to_string()),
            }
        })
    })
}

/// Serves an HTTP listener until shutdown; a listener that fails stops plegd (status 1).
async fn serve_http(name: &'static str, server: HttpServer, shutdown: CancellationToken) {
    // A listener that fails returns before shutdown: fatal (`tasks`), exit status 1.
    if let Err(e) = server.run(shutdown.clone()).await {
        tracing::error!(error = %e, listener = name, "HTTP server stopped");
    }
}

/// Records in the run log what the pages draw beside the pods: the event stream's
/// changes of state, relists failing and recovering, and plegd's stop.
async fn keep_run_log(
    log: RunLog,
    mut stream: tokio::sync::watch::Receiver<StreamState>,
    health: PlegHealth,
    shutdown: CancellationToken,
) {
    let record = |m: Mark| {
        let log = log.clone();
        async move {
            let _ = tokio::task::spawn_blocking(move || log.record(m)).await;
        }
    };
    let mut last_stream: Option<&'static str> = None;
    let mut failing = false;
    let mut stream_open = true;
    let mut tick = tokio::time::interval(Duration::from_secs(1));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        let state = *stream.borrow_and_update();
        let word = match state {
            StreamState::Up => Some("up"),
            StreamState::Down => Some("down"),
            StreamState::NoStream | StreamState::Disabled => Some(state.as_str()),
            StreamState::Starting | StreamState::Connecting => None,
        };
        if let Some(w) = word
            && last_stream != Some(w)
        {
            record(Mark::now(MarkKind::Stream, w)).await;
            last_stream = Some(w);
        }
        match (health.last_error(), failing) {
            (Some(e), false) => {
                record(Mark::now(MarkKind::RuntimeDown, e)).await;
                failing = true;
            }
            (None, true) => {
                record(Mark::now(MarkKind::RuntimeUp, "")).await;
                failing = false;
            }
            _ => {}
        }
        tokio::select! {
            _ = shutdown.cancelled() => {
                record(Mark::now(MarkKind::Stop, "")).await;
                return;
            }
            changed = stream.changed(), if stream_open => stream_open = changed.is_ok(),
            _ = tick.tick() => {}
        }
    }
}

/// Logs the runtime's name and version once it answers; until then says, once, that
/// plegd waits for it.
async fn announce_runtime<R: RuntimeService>(client: R, shutdown: CancellationToken) {
    let mut backoff = Backoff::new(Duration::from_millis(200), Duration::from_secs(10));
    let mut warned = false;
    loop {
        match client.version().await {
            Ok(v) => {
                tracing::info!(
                    runtime = %v.runtime_name, version = %v.runtime_version, api = %v.runtime_api_version,
                    "connected to the container runtime"
                );
                return;
            }
            Err(e) => {
                if !warned {
                    tracing::warn!(error = %e, "container runtime not reachable yet; plegd is not ready until it answers");
                    warned = true;
                }
            }
        }
        tokio::select! {
            _ = shutdown.cancelled() => return,
            _ = tokio::time::sleep(backoff.next_delay()) => {}
        }
    }
}

/// Every subsystem's metrics, each registered by its owner in one registry.
#[derive(Clone)]
pub struct Metrics {
    /// The registry, encoded by `/metrics`.
    pub registry: Arc<Registry>,
    /// PLEG metrics.
    pub pleg: crate::pleg::metrics::PlegMetrics,
    /// CRI client metrics.
    pub cri: crate::cri::metrics::CriMetrics,
    /// Published-event metrics.
    pub events: crate::publish::EventMetrics,
    /// Journal metrics.
    pub journal: crate::journal::JournalMetrics,
    /// API metrics.
    pub api: crate::grpc::ApiMetrics,
    /// Work queue metrics (client-go's names).
    pub queues: crate::workqueue::QueueMetrics,
    /// Reconciler metrics.
    pub reconcile: crate::reconcile::ReconcileMetrics,
    /// The scavenger's metrics.
    pub memory: crate::memory::MemoryMetrics,
    /// The HTTP listeners' metrics.
    pub http: crate::admin::HttpMetrics,
    /// The container lookup's metrics (terminations, tombstones).
    pub lookup: crate::lookup::LookupMetrics,
    /// The OTLP exporter's metrics.
    pub export: crate::export::ExportMetrics,
    /// The kubelet Pods API watcher's metrics.
    pub kubelet: crate::kubelet::KubeletMetrics,
    /// The NRI plugin's metrics.
    pub nri: crate::nri::NriMetrics,
}

impl Metrics {
    /// Creates one registry and has every subsystem register its families in it, each
    /// under the prefix it is given here: plegd's own under `plegd` (the one place that
    /// prefix is written), client-go's work queue names and the process's at the root.
    pub fn new() -> Self {
        let mut root = Registry::default();
        let plegd = root.sub_registry_with_prefix("plegd");
        let pleg = crate::pleg::metrics::PlegMetrics::register(plegd);
        let cri = crate::cri::metrics::CriMetrics::register(plegd.sub_registry_with_prefix("cri"));
        let events = crate::publish::EventMetrics::register(plegd);
        let journal = crate::journal::JournalMetrics::register(plegd);
        let api = crate::grpc::ApiMetrics::register(plegd);
        let memory = crate::memory::MemoryMetrics::register(plegd.sub_registry_with_prefix("memory"));
        let reconcile = crate::reconcile::ReconcileMetrics::register(plegd);
        let http = crate::admin::HttpMetrics::register(plegd.sub_registry_with_prefix("http"));
        let lookup = crate::lookup::LookupMetrics::register(plegd);
        let export = crate::export::ExportMetrics::register(plegd.sub_registry_with_prefix("otlp"));
        let kubelet = crate::kubelet::KubeletMetrics::register(plegd);
        let nri = crate::nri::NriMetrics::register(plegd);
        crate::telemetry::LogCollector::register(plegd);
        plegd.register(
            "build",
            "The version and the revision plegd was built from (as `plegd --version` says)",
            prometheus_client::metrics::info::Info::new([
                ("version", env!("CARGO_PKG_VERSION")),
                ("revision", crate::REVISION),
            ]),
        );
        let queues = crate::workqueue::QueueMetrics::register(root.sub_registry_with_prefix("workqueue"));
        crate::process::ProcessCollector::register(root.sub_registry_with_prefix("process"));
        Self {
            registry: Arc::new(root),
            pleg,
            cri,
            events,
            journal,
            api,
            queues,
            reconcile,
            memory,
            http,
            lookup,
            export,
            kubelet,
            nri,
        }
    }

    /// The registry in OpenMetrics text format.
    pub fn encode(&self) -> String {
        crate::metrics::encode(&self.registry)
    }

    /// The registry in the classic Prometheus text format.
    pub fn encode_text(&self) -> String {
        crate::metrics::encode_text(&self.registry)
    }
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

//! Reconcilers: level-triggered controllers over pod UIDs (`reconcile(uid, status)`),
//! each with its own work queue and workers; the built-in `crashloop` and `gc`; and the
//! sync-loop handlers that feed the queues and publish follow-ups into the stream.

use std::collections::{BTreeMap, HashMap};
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::cache::PodCache;
use crate::cri::{CriError, RuntimeService};
use crate::labels::shared;
use crate::model::event::{EventSource, EventType, PodLifecycleEvent};
use crate::model::{ContainerState, PodStatus, nanos_to_system};
use crate::syncloop::{FollowUp, Handler, History, LoopEvent, LoopInput, Outbox, SyncLoop, SyncLoopHandle};
use crate::workqueue::WorkQueue;

/// What a reconciler asks for after a successful run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Action {
    /// Nothing until the pod changes again.
    AwaitChange,
    /// Run again after this long even if nothing changes.
    RequeueAfter(Duration),
}

/// A reconciler's failure; the key is retried with backoff.
#[derive(Debug, thiserror::Error)]
pub enum ReconcileError {
    /// A runtime call failed.
    #[error(transparent)]
    Cri(#[from] CriError),
}

/// A boxed reconcile future.
pub type ReconcileFuture<'a> = Pin<Box<dyn Future<Output = Result<Action, ReconcileError>> + Send + 'a>>;

/// A level-triggered controller over pods.
pub trait Reconciler: Send + Sync + 'static {
    /// Its name (queue name, metric label).
    fn name(&self) -> &'static str;
    /// Brings the world in line with the pod's current status (`None`: the pod is gone).
    fn reconcile<'a>(&'a self, uid: &'a str, status: Option<Arc<PodStatus>>) -> ReconcileFuture<'a>;
}

/// Label set `{reconciler, outcome}`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct Outcome {
    /// Reconciler name.
    pub reconciler: String,
    /// `success`, `requeue` or `error`.
    pub outcome: String,
}

/// Label set `{reconciler}`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ReconcilerLabel {
    /// Reconciler name.
    pub reconciler: String,
}

/// Reconciler metrics.
#[derive(Clone)]
pub struct ReconcileMetrics {
    /// `plegd_reconcile_total{reconciler,outcome}`.
    pub total: Family<Outcome, Counter>,
    /// `plegd_reconcile_duration_seconds{reconciler}`.
    pub duration: Family<ReconcilerLabel, Histogram, fn() -> Histogram>,
}

fn reconcile_buckets() -> Histogram {
    Histogram::new(exponential_buckets(0.0001, 2.0, 18))
}

impl ReconcileMetrics {
    /// Creates the families and registers them in `r` (the caller gives it the `plegd`
    /// prefix: `reconcile` is a whole name here, not a stem).
    pub fn register(r: &mut prometheus_client::registry::Registry) -> Self {
        let m = Self {
            total: Family::default(),
            duration: Family::new_with_constructor(reconcile_buckets as fn() -> Histogram),
        };
        r.register("reconcile", "Reconciles by reconciler and outcome", m.total.clone());
        r.register("reconcile_duration_seconds", "Duration of reconciles", m.duration.clone());
        m
    }
}

/// A reconciler with its queue and workers.
pub struct Controller {
    reconciler: Arc<dyn Reconciler>,
    queue: WorkQueue<String>,
    cache: PodCache,
    workers: usize,
    metrics: ReconcileMetrics,
    beat: crate::liveness::Beat,
}

/// A reconcile running longer than this counts as a wedged worker for `/livez`.
pub const RECONCILE_STUCK_AFTER: Duration = Duration::from_secs(60);

impl Controller {
    /// A controller running `reconciler` with `workers` workers on `queue`.
    pub fn new(
        reconciler: Arc<dyn Reconciler>,
        queue: WorkQueue<String>,
        cache: PodCache,
        workers: usize,
        metrics: ReconcileMetrics,
    ) -> Self {
        Self {
            reconciler,
            queue,
            cache,
            workers: workers.max(1),
            metrics,
            beat: crate::liveness::Beat::detached("reconcile"),
        }
    }

    /// The reconciler's name.
    pub fn name(&self) -> &'static str {
        self.reconciler.name()
    }

    /// Beats `beat` every half second while no reconcile has been running longer than
    /// [`RECONCILE_STUCK_AFTER`].
    pub fn with_liveness(mut self, beat: crate::liveness::Beat) -> Self {
        self.beat = beat;
        self
    }

    async fn work(self: Arc<Self>) {
        let name = self.reconciler.name();
        while let Some(key) = self.queue.get().await {
            let status = self.cache.get(&key).and_then(|e| e.status.clone());
            let t0 = Instant::now();
            let res = self.reconciler.reconcile(&key, status).await;
            let outcome = match res {
                Ok(Action::AwaitChange) => {
                    self.queue.forget(&key);
                    "success"
                }
                Ok(Action::RequeueAfter(d)) => {
                    self.queue.forget(&key);
                    self.queue.add_after(key.clone(), d);
                    "requeue"
                }
                Err(e) => {
                    let n = self.queue.num_requeues(&key);
                    tracing::warn!(reconciler = name, pod = %key, retries = n, error = %e, "reconcile failed; retrying with backoff");
                    self.queue.add_rate_limited(key.clone());
                    "error"
                }
            };
            let m = &self.metrics;
            m.total.get_or_create(&Outcome { reconciler: name.into(), outcome: outcome.into() }).inc();
            m.duration.get_or_create(&ReconcilerLabel { reconciler: name.into() }).observe(t0.elapsed().as_secs_f64());
            self.queue.done(&key);
        }
    }

    /// Runs the workers until shutdown, then lets keys in flight finish.
    pub async fn run(self, shutdown: CancellationToken) {
        let me = Arc::new(self);
        let mut workers = tokio::task::JoinSet::new();
        for _ in 0..me.workers {
            workers.spawn(me.clone().work());
        }
        let mut tick = tokio::time::interval(Duration::from_millis(500));
        let moving = me.queue.move_due_keys(&shutdown);
        tokio::pin!(moving);
        let mut moved = false;
        loop {
            tokio::select! {
                _ = shutdown.cancelled() => break,
                // Returns only at shutdown; a completed future is never polled again.
                _ = &mut moving, if !moved => moved = true,
                _ = tick.tick() => {
                    me.queue.update_in_flight_metrics();
                    if me.queue.longest_in_flight() <= RECONCILE_STUCK_AFTER {
                        me.beat.beat();
                    }
                }
            }
        }
        me.queue.shutdown_with_drain().await;
        while workers.join_next().await.is_some() {}
    }
}

/// Sync-loop handler: queues the pod of every lifecycle event (and every cached pod on
/// a resync) for each reconciler.
pub struct Enqueue {
    queues: Vec<WorkQueue<String>>,
    cache: PodCache,
    handle: SyncLoopHandle,
}

impl Enqueue {
    /// Feeds `queues` from the loop behind `handle`.
    pub fn new(queues: Vec<WorkQueue<String>>, cache: PodCache, handle: SyncLoopHandle) -> Self {
        Self { queues, cache, handle }
    }
}

impl Handler for Enqueue {
    fn name(&self) -> &'static str {
        "enqueue"
    }

    fn selects(&self, ev: &LoopEvent) -> bool {
        match &ev.input {
            // Reconcilers' own events are their output, not news about the pod.
            LoopInput::Lifecycle(e) => !e.event.source.follows_the_view(),
            LoopInput::Resync(_) => true,
            LoopInput::FollowUp(_) => false,
        }
    }

    fn handle(&mut self, ev: &LoopEvent, _: &mut Outbox) -> Result<String, crate::syncloop::HandlerError> {
        let (uids, gone): (Vec<String>, bool) = match &ev.input {
            LoopInput::Lifecycle(e) => (vec![e.event.pod_uid.to_string()], e.event.pod.is_none()),
            _ => {
                let uids: Vec<String> = self.cache.snapshot().iter().map(|e| e.uid.to_string()).collect();
                // Origins are remembered for pods that exist, not every pod ever seen.
                let live: std::collections::HashSet<&str> = uids.iter().map(String::as_str).collect();
                self.handle.retain_origins(|k| live.contains(k));
                (uids, false)
            }
        };
        for uid in &uids {
            if gone {
                self.handle.forget_origin(uid);
            } else {
                self.handle.set_origin(uid, ev.seq);
            }
            for q in &self.queues {
                q.add(uid.clone());
            }
        }
        let names: Vec<&str> = self.queues.iter().map(|q| q.name()).collect();
        Ok(match uids.as_slice() {
            // The record's description names the pod already: the change says only
            // where it went (the history keeps tens of thousands of these).
            [_] => format!("queued for {}", names.join(",")),
            many => format!("queued {} pods for {}", many.len(), names.join(",")),
        })
    }
}

/// Sync-loop handler: publishes follow-ups that carry a lifecycle event into the stream,
/// through the one publish path every producer uses.
pub struct Publish {
    path: crate::publish::PublishPath,
}

impl Publish {
    /// Publishes through `path`.
    pub fn new(path: crate::publish::PublishPath) -> Self {
        Self { path }
    }
}

impl Handler for Publish {
    fn name(&self) -> &'static str {
        "publish"
    }

    fn selects(&self, ev: &LoopEvent) -> bool {
        matches!(&ev.input, LoopInput::FollowUp(f) if f.event.is_some())
    }

    fn handle(&mut self, ev: &LoopEvent, _: &mut Outbox) -> Result<String, crate::syncloop::HandlerError> {
        let LoopInput::FollowUp(f) = &ev.input else { return Ok(String::new()) };
        let e = f.event.clone().expect("selected");
        let kind = e.kind.as_str();
        Ok(match self.path.publish(e) {
            Some(rev) => format!("published {kind} at revision {rev}"),
            None => format!("not published: the pod is gone ({kind})"),
        })
    }
}

/// `crashloop` settings.
#[derive(Clone, Debug)]
pub struct CrashLoopConfig {
    /// Deaths within `window` that make a crash loop.
    pub deaths: usize,
    /// The window.
    pub window: Duration,
    /// A crash loop clears when the newest attempt has run this long.
    pub clear_after: Duration,
}

impl Default for CrashLoopConfig {
    fn default() -> Self {
        Self { deaths: 3, window: Duration::from_secs(600), clear_after: Duration::from_secs(120) }
    }
}

/// Only containers that died within the window or are flagged have one: a node's
/// healthy containers cost nothing here.
#[derive(Default)]
struct Track {
    deaths: BTreeMap<String, SystemTime>,
    flagged: bool,
}

/// Notices containers that keep dying and says so with a `CRASH_LOOP` event (once),
/// then `CRASH_LOOP_CLEARED` when the container stays up.
pub struct CrashLoop {
    cfg: CrashLoopConfig,
    /// Pod uid → container name → its track.
    tracks: Mutex<HashMap<String, BTreeMap<String, Track>>>,
    sink: SyncLoopHandle,
}

impl CrashLoop {
    /// A detector that sends its events through the sync loop behind `sink`.
    pub fn new(cfg: CrashLoopConfig, sink: SyncLoopHandle) -> Self {
        Self { cfg, tracks: Mutex::new(HashMap::new()), sink }
    }

    /// Queues a crash-loop event; `false` when the sync loop's follow-up queue is full
    /// (nothing changes then: the state moves only with an event that will be sent).
    fn emit(&self, status: &Arc<PodStatus>, name: &str, kind: EventType, message: String) -> bool {
        let newest = status.containers.iter().find(|c| c.name == name);
        let ev = PodLifecycleEvent {
            pod_uid: shared(&status.uid),
            pod_namespace: shared(&status.namespace),
            pod_name: shared(&status.name),
            kind,
            container_id: newest.map(|c| c.id.clone()).unwrap_or_default(),
            container_name: shared(name),
            is_sandbox: false,
            source: EventSource::Reconciler,
            observed_at: SystemTime::now(),
            runtime_timestamp: newest.and_then(|c| nanos_to_system(c.finished_at.max(c.started_at))),
            pod: Some(status.clone()),
            message: message.clone(),
        };
        let f = FollowUp {
            name: kind.as_str().into(),
            description: format!("{}/{} {name}: {message}", status.namespace, status.name),
            event: Some(ev),
        };
        if self.sink.push_follow_up(f, self.sink.origin(&status.uid)).is_err() {
            tracing::warn!(pod = %status.uid, "sync loop follow-up queue full; the crash-loop event is retried");
            return false;
        }
        true
    }

    /// How soon a pod whose crash-loop event could not be queued is checked again.
    const RETRY_EMIT: Duration = Duration::from_secs(1);

    fn check(&self, uid: &str, status: &Arc<PodStatus>) -> Action {
        let now = SystemTime::now();
        let mut all = self.tracks.lock().expect("tracks lock");
        let mut tracks = all.remove(uid).unwrap_or_default();
        let mut requeue: Option<Duration> = None;
        let mut names: Vec<&str> = status.containers.iter().map(|c| c.name.as_str()).collect();
        names.sort();
        names.dedup();
        for name in names {
            let mut t = tracks.remove(name).unwrap_or_default();
            for c in status.containers.iter().filter(|c| c.name == name && c.state == ContainerState::Exited) {
                if let Some(at) = nanos_to_system(c.finished_at) {
                    t.deaths.entry(c.id.clone()).or_insert(at);
                }
            }
            t.deaths.retain(|_, at| now.duration_since(*at).map(|age| age <= self.cfg.window).unwrap_or(true));
            let newest = status.containers.iter().find(|c| c.name == name);
            if !t.flagged && t.deaths.len() >= self.cfg.deaths {
                let msg = format!("{} deaths within {}", t.deaths.len(), humantime::format_duration(self.cfg.window));
                if self.emit(status, name, EventType::CrashLoop, msg) {
                    t.flagged = true;
                } else {
                    requeue = Some(Self::RETRY_EMIT);
                }
            }
            if t.flagged
                && let Some(c) = newest.filter(|c| c.state == ContainerState::Running)
            {
                let up = nanos_to_system(c.started_at).and_then(|s| now.duration_since(s).ok()).unwrap_or_default();
                if up >= self.cfg.clear_after {
                    let msg = format!("running for {}", humantime::format_duration(Duration::from_secs(up.as_secs())));
                    if self.emit(status, name, EventType::CrashLoopCleared, msg) {
                        t.flagged = false;
                        t.deaths.clear();
                    } else {
                        requeue = Some(Self::RETRY_EMIT);
                    }
                } else {
                    let left = self.cfg.clear_after - up;
                    requeue = Some(requeue.map_or(left, |r| r.min(left)));
                }
            }
            if t.flagged || !t.deaths.is_empty() {
                tracks.insert(name.to_owned(), t);
            }
        }
        if !tracks.is_empty() {
            all.insert(uid.to_owned(), tracks);
        }
        requeue.map_or(Action::AwaitChange, Action::RequeueAfter)
    }
}

impl Reconciler for CrashLoop {
    fn name(&self) -> &'static str {
        "crashloop"
    }

    fn reconcile<'a>(&'a self, uid: &'a str, status: Option<Arc<PodStatus>>) -> ReconcileFuture<'a> {
        Box::pin(async move {
            match status {
                None => {
                    self.tracks.lock().expect("tracks lock").remove(uid);
                    Ok(Action::AwaitChange)
                }
                Some(s) => Ok(self.check(uid, &s)),
            }
        })
    }
}

/// `gc` mode (`--gc`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum GcMode {
    /// No garbage collection.
    Off,
    /// Remove dead containers beyond the policy.
    On,
    /// Log what would be removed.
    DryRun,
}

/// `gc` policy.
#[derive(Clone, Debug)]
pub struct GcConfig {
    /// Mode.
    pub mode: GcMode,
    /// Dead containers kept per container name (newest first).
    pub keep: usize,
    /// Only containers dead at least this long are removed.
    pub min_age: Duration,
}

impl Default for GcConfig {
    fn default() -> Self {
        Self { mode: GcMode::Off, keep: 1, min_age: Duration::from_secs(60) }
    }
}

/// Removes dead containers beyond the policy through CRI `RemoveContainer`; never
/// touches a container that is not exited.
pub struct Gc<R: RuntimeService> {
    runtime: R,
    cfg: GcConfig,
}

impl<R: RuntimeService> Gc<R> {
    /// A collector on `runtime`.
    pub fn new(runtime: R, cfg: GcConfig) -> Self {
        Self { runtime, cfg }
    }

    /// The containers the policy removes now, and when the next one becomes old enough.
    pub fn plan(&self, status: &PodStatus, now: SystemTime) -> (Vec<String>, Option<Duration>) {
        let mut by_name: BTreeMap<&str, Vec<&crate::model::ContainerStatus>> = BTreeMap::new();
        for c in status.containers.iter().filter(|c| c.state == ContainerState::Exited) {
            by_name.entry(&c.name).or_default().push(c);
        }
        let mut remove = Vec::new();
        let mut next: Option<Duration> = None;
        for dead in by_name.values_mut() {
            dead.sort_by_key(|c| std::cmp::Reverse(c.created_at));
            for c in dead.iter().skip(self.cfg.keep) {
                let age = nanos_to_system(c.finished_at).and_then(|t| now.duration_since(t).ok()).unwrap_or_default();
                if age >= self.cfg.min_age {
                    remove.push(c.id.clone());
                } else {
                    let left = self.cfg.min_age - age;
                    next = Some(next.map_or(left, |n| n.min(left)));
                }
            }
        }
        (remove, next)
    }
}

impl<R: RuntimeService> Reconciler for Gc<R> {
    fn name(&self) -> &'static str {
        "gc"
    }

    fn reconcile<'a>(&'a self, uid: &'a str, status: Option<Arc<PodStatus>>) -> ReconcileFuture<'a> {
        Box::pin(async move {
            let Some(status) = status else { return Ok(Action::AwaitChange) };
            let (remove, next) = self.plan(&status, SystemTime::now());
            for id in &remove {
                if self.cfg.mode == GcMode::DryRun {
                    tracing::info!(pod = %uid, container = %id, "gc (dry run): would remove dead container");
                    continue;
                }
                match self.runtime.remove_container(id).await {
                    Ok(()) => tracing::info!(pod = %uid, container = %id, "gc: removed dead container"),
                    Err(e) if e.is_not_found() => {}
                    Err(e) => return Err(e.into()),
                }
            }
            Ok(next.map_or(Action::AwaitChange, Action::RequeueAfter))
        })
    }
}

/// The sync loop's and reconcilers' validated settings: the part of `RunConfig` that
/// builds the [`Pipeline`]. (It lives here, not in `syncloop`, because it names the
/// reconcilers' settings and the reconcilers import the sync loop.)
#[derive(Clone, Debug)]
pub struct SyncConfig {
    /// Workers per reconciler.
    pub workers: usize,
    /// History retention.
    pub history_retention: Duration,
    /// Bytes the history may take.
    pub history_budget: usize,
    /// Periodic resync, if any.
    pub resync_period: Option<Duration>,
    /// Retry rate limits.
    pub rate_limit: crate::workqueue::RateLimit,
    /// Garbage collection.
    pub gc: GcConfig,
    /// Crash-loop detection.
    pub crashloop: CrashLoopConfig,
}

impl Default for SyncConfig {
    fn default() -> Self {
        Self {
            workers: 4,
            history_retention: Duration::from_secs(24 * 3600),
            history_budget: 3 << 20,
            resync_period: Some(Duration::from_secs(300)),
            rate_limit: crate::workqueue::RateLimit::default(),
            gc: GcConfig::default(),
            crashloop: CrashLoopConfig::default(),
        }
    }
}

/// The pipeline behind the journal: the sync loop, and one queue and controller per
/// reconciler.
pub struct Pipeline {
    /// The sync loop, to run.
    pub sync_loop: SyncLoop,
    /// The sync loop's inputs.
    pub sync: SyncLoopHandle,
    /// The sync loop's history.
    pub history: Arc<Mutex<History>>,
    /// One work queue per reconciler.
    pub queues: Vec<WorkQueue<String>>,
    /// One controller per reconciler, to run.
    pub controllers: Vec<Controller>,
}

/// What the pipeline is built on: the stores before it and the PLEG's health.
pub struct PipelineInputs<'a, R> {
    /// The journal the sync loop follows.
    pub journal: &'a crate::journal::Journal,
    /// The cache the reconcilers read.
    pub cache: &'a PodCache,
    /// The runtime garbage collection removes containers from.
    pub runtime: &'a R,
    /// The startup resync waits for the first relist.
    pub health: &'a crate::pleg::health::PlegHealth,
    /// Where reconcilers' events are published.
    pub publish: crate::publish::PublishPath,
    /// Where each loop registers its liveness.
    pub liveness: &'a crate::liveness::Liveness,
}

impl SyncConfig {
    /// Builds the sync loop, the reconcilers (crash loops always, garbage collection when
    /// on), a queue and a controller for each, with their metrics.
    pub fn build<R: RuntimeService>(
        self,
        on: PipelineInputs<'_, R>,
        queue_metrics: crate::workqueue::QueueMetrics,
        metrics: ReconcileMetrics,
    ) -> Pipeline {
        let SyncConfig { workers, history_retention, history_budget, resync_period, rate_limit, gc, crashloop } = self;
        let quick = crate::liveness::QUICK_LOOP_LIMIT;
        let history = Arc::new(Mutex::new(
            History::new(history_retention, Duration::from_secs(3600), 100_000).with_budget(history_budget),
        ));
        let mut sync_loop = SyncLoop::new(on.journal.clone(), Vec::new(), history.clone())
            .with_periodic_resync(resync_period)
            .with_startup_gate(on.health.clone(), Duration::from_secs(30))
            .with_liveness(on.liveness.register("sync", quick));
        let sync = sync_loop.handle();
        let mut reconcilers: Vec<Arc<dyn Reconciler>> = vec![Arc::new(CrashLoop::new(crashloop, sync.clone()))];
        if gc.mode != GcMode::Off {
            reconcilers.push(Arc::new(Gc::new(on.runtime.clone(), gc)));
        }
        let mut queues = Vec::new();
        let mut controllers = Vec::new();
        for r in reconcilers {
            let q = WorkQueue::new(r.name(), rate_limit.clone(), queue_metrics.clone());
            let beat = on.liveness.register(r.name(), RECONCILE_STUCK_AFTER + quick);
            controllers
                .push(Controller::new(r, q.clone(), on.cache.clone(), workers, metrics.clone()).with_liveness(beat));
            queues.push(q);
        }
        sync_loop.add_handler(Box::new(Enqueue::new(queues.clone(), on.cache.clone(), sync.clone())));
        sync_loop.add_handler(Box::new(Publish::new(on.publish)));
        Pipeline { sync_loop, sync, history, queues, controllers }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{ContainerStatus, system_to_nanos};
    use crate::proto::runtime as cri;
    use crate::syncloop::{History, SyncLoop};

    fn container(id: &str, name: &str, state: cri::ContainerState, finished: Option<SystemTime>) -> ContainerStatus {
        ContainerStatus::from_cri(&cri::ContainerStatus {
            id: id.into(),
            metadata: Some(cri::ContainerMetadata { name: name.into(), attempt: 0 }),
            state: state as i32,
            finished_at: finished.map_or(0, system_to_nanos),
            ..Default::default()
        })
    }

    fn pod(containers: Vec<ContainerStatus>) -> Arc<PodStatus> {
        Arc::new(PodStatus {
            containers: containers.into_iter().map(Arc::new).collect(),
            ..PodStatus::empty("u1", "default", "web")
        })
    }

    fn tracked(cl: &CrashLoop) -> Vec<(String, String, usize)> {
        let all = cl.tracks.lock().unwrap();
        all.iter().flat_map(|(uid, t)| t.iter().map(|(name, t)| (uid.clone(), name.clone(), t.deaths.len()))).collect()
    }

    #[tokio::test]
    async fn crash_loop_tracks_only_containers_that_died_within_the_window() {
        let history = Arc::new(Mutex::new(History::new(Duration::from_secs(60), Duration::ZERO, 100)));
        let sync = SyncLoop::new(
            crate::journal::Journal::new(16, 16, crate::journal::JournalMetrics::throwaway()),
            Vec::new(),
            history,
        );
        let cl = CrashLoop::new(CrashLoopConfig::default(), sync.handle());
        let (running, exited) = (cri::ContainerState::ContainerRunning, cri::ContainerState::ContainerExited);
        let now = SystemTime::now();

        cl.check("u1", &pod(vec![container("a1", "app", running, None), container("s1", "sidecar", running, None)]));
        assert_eq!(tracked(&cl), vec![], "healthy containers leave nothing behind");

        let long_ago = now - Duration::from_secs(3600);
        cl.check(
            "u1",
            &pod(vec![container("s2", "sidecar", running, None), container("s1", "sidecar", exited, Some(long_ago))]),
        );
        assert_eq!(tracked(&cl), vec![], "a death outside the window is not kept");

        let just_now = now - Duration::from_secs(1);
        cl.check(
            "u1",
            &pod(vec![container("a2", "app", running, None), container("a1", "app", exited, Some(just_now))]),
        );
        assert_eq!(tracked(&cl), vec![("u1".to_owned(), "app".to_owned(), 1)]);

        // A later status that no longer shows the container keeps its record.
        cl.check("u1", &pod(vec![container("s2", "sidecar", running, None)]));
        assert_eq!(tracked(&cl), vec![("u1".to_owned(), "app".to_owned(), 1)]);

        assert!(matches!(cl.reconcile("u1", None).await, Ok(Action::AwaitChange)));
        assert_eq!(tracked(&cl), vec![], "a pod that is gone is forgotten");
    }

    #[tokio::test]
    async fn the_sync_loop_forgets_the_origin_of_pods_that_are_gone() {
        use crate::journal::Journal;
        use crate::syncloop::{LoopEvent, LoopInput, ResyncKind};
        let journal = Journal::new(100, 100, crate::journal::JournalMetrics::throwaway());
        let history = Arc::new(Mutex::new(History::new(Duration::from_secs(60), Duration::ZERO, 100)));
        let sync = SyncLoop::new(journal.clone(), Vec::new(), history);
        let (_writer, cache) = crate::cache::new();
        let mut enqueue = Enqueue::new(Vec::new(), cache, sync.handle());
        let mut out = Outbox::default();
        let ev = |uid: &str, pod: Option<Arc<PodStatus>>| PodLifecycleEvent {
            pod_uid: uid.into(),
            pod_namespace: "ns".into(),
            pod_name: "p".into(),
            kind: if pod.is_some() { EventType::ContainerStarted } else { EventType::ContainerRemoved },
            container_id: "c".into(),
            container_name: "c".into(),
            is_sandbox: false,
            source: EventSource::Relist,
            observed_at: SystemTime::now(),
            runtime_timestamp: None,
            pod,
            message: String::new(),
        };
        for i in 0..100 {
            let uid = format!("u{i}");
            for pod_now in [Some(Arc::new(PodStatus::empty(&uid, "ns", "p"))), None] {
                let rev = journal.append(ev(&uid, pod_now)).unwrap();
                let entry = journal.timeline(&uid).unwrap().into_iter().find(|e| e.revision == rev).unwrap();
                let le = LoopEvent { seq: rev, input: LoopInput::Lifecycle(entry), follow_up_of: None };
                enqueue.handle(&le, &mut out).unwrap();
            }
        }
        assert_eq!(sync.handle().origins(), 0, "a hundred pods came and went; nothing is remembered of them");
        let le = LoopEvent { seq: 500, input: LoopInput::Resync(ResyncKind::Periodic), follow_up_of: None };
        enqueue.handle(&le, &mut out).unwrap();
        assert_eq!(sync.handle().origins(), 0, "a resync keeps origins of cached pods only");
    }
}

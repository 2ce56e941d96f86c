//! The journal of published events: one revision per event, a view of every pod
//! consistent with the latest revision for snapshots, and fan-out to subscribers
//! through bounded buffers that never block the publisher (a full buffer marks the
//! subscriber for a reset instead).
//!
//! With a state dir ([`store`]) every batch of events and the view's changes are
//! committed to disk before any subscriber sees them; memory keeps the newest records
//! within a byte budget for live fan-out and recent resumes, older ones are replayed
//! from disk, and the disk keeps revisions within a count and a byte budget. The
//! epoch names the journal on disk, so a restart that keeps the state dir continues
//! its revisions. When the disk fails (full, read-only) the journal goes on in memory
//! under a new epoch — every watcher is reset once, so no revision a crash could take
//! back is ever delivered under the durable epoch — and writes the disk afresh when it
//! works again.
//!
//! A subscriber reads its subscription as one stream, a [`Feed`] ([`feed`]): the
//! replay its resume asked for, from disk and then memory, then live entries, and an
//! item that ends it when it must start over.

mod disk;
mod feed;
pub mod lineage;
mod metrics;
mod queue;
pub mod record;
pub mod store;
mod timeline;

pub use disk::{Checkpointer, DiskReplay, ReplayError};
use disk::{Disk, store_config};
pub use feed::{Dropped, Feed, FeedError, FeedItem, Snapshot};
pub use metrics::{JournalMetrics, ReasonLabel};

use std::collections::{BTreeMap, HashSet, VecDeque};
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

use tokio_util::sync::CancellationToken;

use crate::labels::Labels;
use crate::model::PodStatus;
use crate::model::event::{EventType, PodLifecycleEvent};
use crate::selector::Selector;
pub use store::StoreError;
use store::{Store, StoreConfig};

/// Why a subscriber must start over.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ResetReason {
    /// Its buffer overflowed.
    SlowConsumer,
    /// The revision it asked for is no longer kept (or is of another epoch).
    RevisionTooOld,
    /// plegd rebuilt its view of the runtime.
    RuntimeResync,
}

/// Who a pod is, for filtering (kept for removed pods too).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PodMeta {
    /// UID.
    pub uid: Arc<str>,
    /// Namespace.
    pub namespace: Arc<str>,
    /// Name.
    pub name: Arc<str>,
    /// Sandbox labels.
    pub labels: Labels,
    /// The pod's addresses, the last it held: a removal, which carries no pod, still
    /// says which address its pod had.
    pub ips: Arc<[String]>,
}

/// One journal entry.
#[derive(Debug)]
pub struct Entry {
    /// Its revision.
    pub revision: u64,
    /// The event.
    pub event: Arc<PodLifecycleEvent>,
    /// The pod it is about, for filters.
    pub meta: Arc<PodMeta>,
    /// Who the pod was before this event, when the event changed its labels: a watcher
    /// whose filter matched that and not `meta` saw the pod leave its selection.
    pub left: Option<Arc<PodMeta>>,
    /// The size of its record, what it counts against the byte budgets.
    pub bytes: usize,
}

impl From<store::Stored> for Entry {
    fn from(s: store::Stored) -> Self {
        Self {
            revision: s.revision,
            event: Arc::new(s.event),
            meta: Arc::new(s.meta),
            left: s.left.map(Arc::new),
            bytes: s.bytes,
        }
    }
}

/// Which events and pods a subscriber wants. Empty fields match everything.
#[derive(Clone, Debug, Default)]
pub struct Filter {
    /// Namespace.
    pub namespace: String,
    /// Pod UID.
    pub pod_uid: String,
    /// Pod name.
    pub pod_name: String,
    /// Label selector over the sandbox labels.
    pub selector: Selector,
    /// Event types (empty: all).
    pub types: HashSet<EventType>,
}

/// How long a starting plegd waits for another that holds its state dir: less than the
/// DaemonSet's liveness allowance (5 s + 3 × 10 s), more than its grace period (15 s).
pub const LOCK_WAIT: std::time::Duration = std::time::Duration::from_secs(20);

/// Where a subscription starts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Since {
    /// With a snapshot of every (matching) pod.
    Snapshot,
    /// After this revision of this epoch (0: unknown epoch, trust the revision).
    Revision(u64, u64),
}

/// How a subscription begins.
#[derive(Debug)]
pub enum Start {
    /// A snapshot consistent with `revision`; events after it follow.
    Snapshot {
        /// Matching pods.
        pods: Vec<Arc<PodStatus>>,
        /// The revision the snapshot is consistent with.
        revision: u64,
    },
    /// Every matching entry after the requested revision, in order; live ones follow.
    Replay(Replay),
}

/// The entries a resume asked for: first those only the disk still has, page by
/// page, then those memory holds.
#[derive(Debug, Default)]
pub struct Replay {
    /// Older entries, read from disk.
    pub disk: Option<DiskReplay>,
    /// The newest, from memory.
    pub memory: Vec<Arc<Entry>>,
}

/// Why [`Journal::primed_within`] gave up: an answer now would be wrong, one later
/// may not be.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Unprimed {
    /// The first full relist is not in yet.
    NotYet,
    /// plegd is shutting down.
    ShuttingDown,
}

impl Unprimed {
    /// What the caller is told.
    pub fn why(self) -> &'static str {
        match self {
            Self::NotYet => "plegd has not completed its first read of the runtime yet; retry",
            Self::ShuttingDown => "plegd is shutting down; ask the next one",
        }
    }
}

/// A live subscription: how it starts, then [`Subscription::into_feed`], the one way
/// to read it. Dropping it unsubscribes.
pub struct Subscription {
    /// The journal's epoch when the subscription was taken, read under the same lock as
    /// its start: the epoch its stream announces (a disk failure between the two would
    /// otherwise name an epoch the start does not belong to).
    pub epoch: u64,
    /// How it begins (and, if a resume was refused, why a snapshot comes instead).
    pub start: Start,
    /// Set when a requested resume was refused.
    pub reset: Option<ResetReason>,
    /// Live entries after the start.
    queue: Arc<queue::Queue>,
    id: u64,
    journal: Journal,
}

struct Sub {
    id: u64,
    filter: Arc<Filter>,
    queue: Arc<queue::Queue>,
}

pub use timeline::TIMELINE_READS;
/// Pods whose identity is kept after they are gone: every removal event of a pod (its
/// containers', its sandbox's, in one batch or a few) matches filters as the pod did.
/// Those follow within a relist; 2,000 is ≈ 18 node-fulls of pods (the kubelet's 110)
/// and ≈ 0.5 MiB. (It was 10,000: on a busy node its filling was the last slow growth
/// of plegd's RSS, ≈ 2 MiB over 17 minutes.)
const GONE_PODS: usize = 2_000;
/// How often a journal whose disk failed tries the disk again.
const RETRY_DISK_EVERY: Duration = Duration::from_secs(5);

/// The journal's settings.
#[derive(Clone, Debug)]
pub struct JournalConfig {
    /// Revisions kept for resumes (in memory, and on disk).
    pub capacity: usize,
    /// Entries buffered per subscriber.
    pub client_buffer: usize,
    /// Bytes of records memory keeps (the newest).
    pub memory_budget: u64,
    /// Bytes of records the disk keeps.
    pub disk_budget: u64,
}

/// Where a journal lives: shared with the rest of plegd, so an argument of
/// [`JournalConfig::build`] and [`Journal::open`], never part of the journal's config.
#[derive(Clone, Debug, Default)]
pub struct Place {
    /// The state dir (`--state-dir`, shared with the tombstones and the export cursor);
    /// `None`: memory only.
    pub state_dir: Option<PathBuf>,
    /// Where the lineage mark is kept ([`lineage`]): a per-boot place outside the state
    /// dir. `None`: not kept.
    pub lineage: Option<PathBuf>,
}

impl Place {
    /// In `dir`, with no lineage mark.
    pub fn at(dir: impl Into<PathBuf>) -> Self {
        Self { state_dir: Some(dir.into()), lineage: None }
    }
}

/// Where `plegd run` keeps its state by default.
pub const STATE_DIR: &str = "/var/lib/plegd";

impl Default for JournalConfig {
    fn default() -> Self {
        Self { capacity: 100_000, client_buffer: 4096, memory_budget: 8 << 20, disk_budget: 256 << 20 }
    }
}

impl JournalConfig {
    /// Opens the journal at `place` (memory only without a state dir), its lineage
    /// marked there ([`lineage`]), waiting up to
    /// [`LOCK_WAIT`] for a plegd that still holds it ([`Journal::open_waiting`]). It
    /// blocks: async callers run it on a blocking thread.
    pub fn build(
        self,
        place: &Place,
        metrics: JournalMetrics,
        shutdown: &CancellationToken,
    ) -> Result<Journal, StoreError> {
        Journal::open_waiting(&self, place, metrics, LOCK_WAIT, shutdown)
    }

    /// In memory only, `capacity` revisions within 8 MiB.
    pub fn memory(capacity: usize, client_buffer: usize) -> Self {
        Self { capacity, client_buffer, memory_budget: 8 << 20, disk_budget: 0 }
    }
}

struct Inner {
    /// The first revision whose record says who its pod was before a label change.
    left_since: u64,
    ring: VecDeque<Arc<Entry>>,
    ring_bytes: u64,
    view: BTreeMap<Arc<str>, Arc<PodStatus>>,
    metas: BTreeMap<Arc<str>, Arc<PodMeta>>,
    /// Who the pods that went away were (their labels above all), so every one of a
    /// removed pod's events matches a filter as the pod did; the last [`GONE_PODS`]
    /// are kept.
    gone_metas: std::collections::HashMap<Arc<str>, Arc<PodMeta>>,
    gone_order: VecDeque<Arc<str>>,
    subs: Vec<Sub>,
    next_sub: u64,
    disk: Disk,
    epoch: u64,
}

struct Shared {
    inner: Mutex<Inner>,
    /// Turns to read a timeline ([`Journal::read_timeline`]).
    timeline_reads: Arc<tokio::sync::Semaphore>,
    revision: AtomicU64,
    epoch: AtomicU64,
    capacity: usize,
    client_buffer: usize,
    memory_budget: u64,
    metrics: JournalMetrics,
    /// The database, for the checkpointer.
    path: Option<PathBuf>,
    /// Commits since the last checkpoint.
    dirty: AtomicU64,
    /// The store's settings, to open it again after a failure.
    store_cfg: Option<StoreConfig>,
    /// Whether the first full relist's events are in: until then the view is empty (a
    /// new journal) or as plegd last left it, and a snapshot would tell a client of a
    /// node plegd has not read yet.
    primed: tokio::sync::watch::Sender<bool>,
}

/// The journal. Cheap to clone.
#[derive(Clone)]
pub struct Journal {
    shared: Arc<Shared>,
}

impl ResetReason {
    /// The API enum name.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::SlowConsumer => "SLOW_CONSUMER",
            Self::RevisionTooOld => "REVISION_TOO_OLD",
            Self::RuntimeResync => "RUNTIME_RESYNC",
        }
    }
}

impl PodMeta {
    /// Who `status`'s pod is.
    pub fn of(status: &PodStatus) -> Self {
        Self {
            uid: crate::labels::shared(&status.uid),
            namespace: crate::labels::shared(&status.namespace),
            name: crate::labels::shared(&status.name),
            labels: status.labels.clone(),
            ips: status.ips.as_slice().into(),
        }
    }
}

impl Filter {
    /// Whether a pod passes the pod filters.
    pub fn matches_pod(&self, m: &PodMeta) -> bool {
        (self.namespace.is_empty() || *self.namespace == *m.namespace)
            && (self.pod_uid.is_empty() || *self.pod_uid == *m.uid)
            && (self.pod_name.is_empty() || *self.pod_name == *m.name)
            && self.selector.matches(&m.labels)
    }

    /// Whether an entry passes.
    pub fn matches(&self, e: &Entry) -> bool {
        (self.types.is_empty() || self.types.contains(&e.event.kind)) && self.matches_pod(&e.meta)
    }

    /// Whether with this entry its pod leaves the selection: it matched before the
    /// entry changed its labels and no longer does. Its later events, removal included,
    /// no longer match, so a watcher's copy would keep the pod for good: such a watcher
    /// gets a reset and a fresh snapshot instead, live or resuming.
    pub fn leaves(&self, e: &Entry) -> bool {
        e.left.as_deref().is_some_and(|old| self.matches_pod(old)) && !self.matches_pod(&e.meta)
    }
}

fn epoch_now() -> u64 {
    crate::model::system_to_nanos(SystemTime::now()) as u64
}

impl Journal {
    /// A journal in memory keeping `capacity` entries (within 8 MiB of records),
    /// giving each subscriber a buffer of `client_buffer` entries. Its epoch is its
    /// start time in nanoseconds.
    pub fn new(capacity: usize, client_buffer: usize, metrics: JournalMetrics) -> Self {
        Self::build(&JournalConfig::memory(capacity, client_buffer), None, metrics, Disk::None, None)
    }

    /// Opens the journal `cfg` describes at `place`: from its state dir when it has one,
    /// continuing its epoch and revisions. Fails only when the state dir cannot be
    /// created (a usage error); a journal on disk that cannot be used is moved aside or,
    /// failing that, the journal runs in memory and says so.
    pub fn open(cfg: &JournalConfig, place: &Place, metrics: JournalMetrics) -> Result<Self, StoreError> {
        Self::open_waiting(cfg, place, metrics, LOCK_WAIT, &CancellationToken::new())
    }

    /// [`Journal::open`], waiting up to `wait` for another plegd that holds the state
    /// dir (a rollout's old pod, in its grace period) to let go: the journal, its epoch
    /// and every client's resume point pass from one to the other. Past `wait` it runs in
    /// memory, says so, and takes the dir over when it is free. A `shutdown` while it
    /// waits ends the wait with [`StoreError::Interrupted`]: a SIGTERM is obeyed at
    /// once, not after the wait. It blocks: async callers run it on a blocking thread.
    pub fn open_waiting(
        cfg: &JournalConfig,
        place: &Place,
        metrics: JournalMetrics,
        wait: std::time::Duration,
        shutdown: &CancellationToken,
    ) -> Result<Self, StoreError> {
        let Some(dir) = &place.state_dir else { return Ok(Self::build(cfg, None, metrics, Disk::None, None)) };
        let scfg = store_config(cfg, dir.clone(), place.lineage.clone());
        let deadline = Instant::now() + wait;
        let mut opened = Store::open(scfg.clone(), &store::boot_id());
        if let Err(e @ StoreError::Locked { .. }) = &opened {
            tracing::warn!(error = %e, "waiting up to {wait:?} for it to exit");
            while let Err(StoreError::Locked { path }) = &opened
                && Instant::now() < deadline
            {
                if shutdown.is_cancelled() {
                    return Err(StoreError::Interrupted { path: path.clone() });
                }
                std::thread::sleep(std::time::Duration::from_millis(50));
                opened = Store::open(scfg.clone(), &store::boot_id());
            }
        }
        match opened {
            Ok((store, loaded)) => {
                match &loaded.new_epoch {
                    None => tracing::info!(
                        epoch = loaded.epoch,
                        revision = loaded.revision,
                        pods = loaded.view.len(),
                        "journal continues from {}",
                        store.path().display()
                    ),
                    Some(why) => tracing::info!(epoch = loaded.epoch, "journal begins a new epoch: {why}"),
                }
                let j = Self::build(cfg, Some(scfg), metrics, Disk::Durable(store), Some(loaded.epoch));
                j.load(loaded);
                Ok(j)
            }
            Err(e @ StoreError::CreateDir { .. }) => Err(e),
            Err(e) => {
                tracing::error!(error = %e, "the journal cannot use its state dir; it keeps events in memory only and retries");
                let disk = Disk::Failing { store: None, error: e.to_string(), last_try: Instant::now() };
                Ok(Self::build(cfg, Some(scfg), metrics, disk, None))
            }
        }
    }

    fn build(
        cfg: &JournalConfig,
        store_cfg: Option<StoreConfig>,
        metrics: JournalMetrics,
        disk: Disk,
        epoch: Option<u64>,
    ) -> Self {
        let epoch = epoch.unwrap_or_else(epoch_now);
        let path = store_cfg.as_ref().map(|c| c.dir.join(store::FILE));
        metrics.durable.set(matches!(disk, Disk::Durable(_)) as i64);
        Self {
            shared: Arc::new(Shared {
                timeline_reads: Arc::new(tokio::sync::Semaphore::new(TIMELINE_READS)),
                inner: Mutex::new(Inner {
                    ring: VecDeque::new(),
                    ring_bytes: 0,
                    view: BTreeMap::new(),
                    metas: BTreeMap::new(),
                    gone_metas: Default::default(),
                    gone_order: VecDeque::new(),
                    left_since: 1,
                    subs: Vec::new(),
                    next_sub: 0,
                    disk,
                    epoch,
                }),
                revision: AtomicU64::new(0),
                epoch: AtomicU64::new(epoch),
                capacity: cfg.capacity.max(1),
                client_buffer: cfg.client_buffer.max(1),
                memory_budget: cfg.memory_budget.max(1),
                metrics,
                path,
                dirty: AtomicU64::new(0),
                store_cfg,
                primed: tokio::sync::watch::Sender::new(false),
            }),
        }
    }

    /// Takes what the disk held: the view, and the newest records into memory.
    fn load(&self, loaded: store::Loaded) {
        let mut inner = self.lock();
        for (pod, meta) in loaded.view {
            let uid = crate::labels::shared(&pod.uid);
            inner.view.insert(uid.clone(), Arc::new(pod));
            inner.metas.insert(uid, Arc::new(meta));
        }
        for s in loaded.tail {
            let entry = Entry::from(s);
            inner.ring_bytes += entry.bytes as u64;
            inner.ring.push_back(Arc::new(entry));
        }
        inner.left_since = loaded.left_since;
        self.shared.revision.store(loaded.revision, Ordering::Release);
        self.update_gauges(&inner);
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.shared.inner.lock().expect("journal lock")
    }

    /// Marks the first full relist's events as appended (the publisher does, once they
    /// are): snapshots wait for it.
    pub fn mark_primed(&self) {
        self.shared.primed.send_if_modified(|p| !std::mem::replace(p, true));
    }

    /// Whether the first full relist's events are in.
    pub fn is_primed(&self) -> bool {
        *self.shared.primed.borrow()
    }

    /// Waits until the first full relist's events are in.
    pub async fn primed(&self) {
        let mut rx = self.shared.primed.subscribe();
        let _ = rx.wait_for(|p| *p).await;
    }

    /// Waits at most `deadline` until the first full relist's events are in: what an
    /// answer that needs every pod waits for.
    pub async fn primed_within(
        &self,
        deadline: Duration,
        shutdown: &tokio_util::sync::CancellationToken,
    ) -> Result<(), Unprimed> {
        if self.is_primed() {
            return Ok(());
        }
        let primed = async {
            tokio::select! {
                _ = self.primed() => Ok(()),
                _ = shutdown.cancelled() => Err(Unprimed::ShuttingDown),
            }
        };
        tokio::time::timeout(deadline, primed).await.unwrap_or(Err(Unprimed::NotYet))
    }

    /// The journal's epoch: the same across restarts that keep the state dir.
    pub fn epoch(&self) -> u64 {
        self.shared.epoch.load(Ordering::Acquire)
    }

    /// The latest revision (0 before the first event).
    pub fn revision(&self) -> u64 {
        self.shared.revision.load(Ordering::Acquire)
    }

    /// Number of live subscribers.
    pub fn subscribers(&self) -> usize {
        self.lock().subs.len()
    }

    /// Every pod as the journal's last events left it: at start, what the disk held,
    /// which seeds the relister so that what changed while plegd was down becomes
    /// events.
    pub fn pods(&self) -> Vec<Arc<PodStatus>> {
        self.lock().view.values().cloned().collect()
    }

    /// The entries held in memory that were observed at or after `since`, oldest first
    /// (at start: the newest records the disk held).
    pub fn recent(&self, since: std::time::SystemTime) -> Vec<Arc<Entry>> {
        self.lock().ring.iter().filter(|e| e.event.observed_at >= since).cloned().collect()
    }

    /// `None` while the journal is durable or has no state dir by choice; otherwise
    /// why events are kept in memory only.
    pub fn disk_problem(&self) -> Option<String> {
        match &self.lock().disk {
            Disk::Failing { error, .. } => Some(error.clone()),
            _ => None,
        }
    }

    /// Appends one event; see [`Journal::append_batch`].
    pub fn append(&self, event: PodLifecycleEvent) -> Option<u64> {
        self.append_batch(vec![event]).pop().flatten()
    }

    /// Appends a batch: assigns each event the next revision, updates the view, commits
    /// the batch to disk (one transaction), and only then hands each entry to every
    /// matching subscriber, without waiting. Returns each event's revision.
    ///
    /// The PLEG's events carry the pod as the runtime has it and move the view. A
    /// reconciler's event (source `RECONCILER`) is about the pod as the view has it
    /// now: it carries that status and never moves the view, so a status its
    /// reconciler read earlier cannot overwrite a newer one, nor bring back a pod that
    /// is gone; about a pod that is gone it is not appended (`None`).
    pub fn append_batch(&self, events: Vec<PodLifecycleEvent>) -> Vec<Option<u64>> {
        let mut inner = self.lock();
        let mut revision = self.shared.revision.load(Ordering::Relaxed);
        let mut out = Vec::with_capacity(events.len());
        let mut entries = Vec::with_capacity(events.len());
        // Pods whose view this batch moved, and the identity a pod had before an event
        // that changed it (watchers it matched and no longer does are reset).
        let mut moved: Vec<Arc<str>> = Vec::new();
        for event in events {
            match Self::admit(&mut inner, event) {
                Some((event, meta, left)) => {
                    revision += 1;
                    if !event.source.follows_the_view() {
                        moved.push(event.pod_uid.clone());
                    }
                    let body = record::encode_event(&event, &meta, left.as_deref());
                    let entry = Entry { revision, event: Arc::new(event), meta, left, bytes: body.len() };
                    entries.push((Arc::new(entry), body));
                    out.push(Some(revision));
                }
                None => out.push(None),
            }
        }
        if entries.is_empty() {
            return out;
        }
        self.commit(&mut inner, &entries, &moved, revision);
        for (entry, _) in entries {
            self.keep(&mut inner, entry.clone());
            Self::fan_out(&mut inner, &entry);
        }
        self.shared.revision.store(revision, Ordering::Release);
        self.update_gauges(&inner);
        out
    }

    /// Moves the view for one event; returns the event as it is journaled, the pod's
    /// identity, and the identity it had before when this event changed it.
    #[allow(clippy::type_complexity)]
    fn admit(
        inner: &mut Inner,
        mut event: PodLifecycleEvent,
    ) -> Option<(PodLifecycleEvent, Arc<PodMeta>, Option<Arc<PodMeta>>)> {
        let uid = event.pod_uid.clone();
        let mut left = None;
        let meta = if event.source.follows_the_view() {
            let current = inner.view.get(&*uid).cloned()?;
            event.pod = Some(current);
            inner.metas.get(&*uid).cloned()?
        } else {
            match &event.pod {
                Some(status) => {
                    let known = inner.metas.get(&*uid).or_else(|| inner.gone_metas.get(&*uid));
                    let meta = match known {
                        Some(m) if m.labels == status.labels && *m.name == *status.name => {
                            if status.ips.is_empty() || *m.ips == *status.ips {
                                m.clone()
                            } else {
                                // A new address (a new sandbox): the same pod, still matching.
                                Arc::new(PodMeta { ips: status.ips.as_slice().into(), ..(**m).clone() })
                            }
                        }
                        // A pod's labels are its sandbox's: a status read while no sandbox
                        // is left says nothing of them, and the pod keeps matching the
                        // filters it matched.
                        Some(m) if status.sandboxes.is_empty() => m.clone(),
                        Some(m) => {
                            // New labels (a new sandbox with the pod's current ones).
                            left = Some(m.clone());
                            let mut meta = PodMeta::of(status);
                            if meta.ips.is_empty() {
                                meta.ips = m.ips.clone();
                            }
                            Arc::new(meta)
                        }
                        None => Arc::new(PodMeta::of(status)),
                    };
                    inner.view.insert(uid.clone(), status.clone());
                    inner.metas.insert(uid.clone(), meta.clone());
                    if inner.gone_metas.remove(&*uid).is_some() {
                        inner.gone_order.retain(|u| *u != uid);
                    }
                    meta
                }
                None => {
                    inner.view.remove(&*uid);
                    // Every removal event of a pod matches as the pod did: its labels
                    // outlive the first of them.
                    match inner.metas.remove(&*uid) {
                        Some(meta) => {
                            inner.gone_metas.insert(uid.clone(), meta.clone());
                            inner.gone_order.push_back(uid.clone());
                            while inner.gone_order.len() > GONE_PODS {
                                let old = inner.gone_order.pop_front().expect("non-empty");
                                inner.gone_metas.remove(&old);
                            }
                            meta
                        }
                        None => inner.gone_metas.get(&*uid).cloned().unwrap_or_else(|| {
                            // A pod plegd never saw alive: nothing is known of its labels.
                            Arc::new(PodMeta {
                                uid: uid.clone(),
                                namespace: event.pod_namespace.clone(),
                                name: event.pod_name.clone(),
                                labels: Labels::default(),
                                ips: Arc::default(),
                            })
                        }),
                    }
                }
            }
        };
        Some((event, meta, left))
    }

    /// Keeps an entry in memory, dropping the oldest beyond the count and the bytes.
    fn keep(&self, inner: &mut Inner, entry: Arc<Entry>) {
        inner.ring_bytes += entry.bytes as u64;
        inner.ring.push_back(entry);
        while inner.ring.len() > self.shared.capacity
            || (inner.ring_bytes > self.shared.memory_budget && inner.ring.len() > 1)
        {
            let old = inner.ring.pop_front().expect("non-empty");
            inner.ring_bytes -= old.bytes as u64;
        }
    }

    fn fan_out(inner: &mut Inner, entry: &Arc<Entry>) {
        inner.subs.retain(|s| {
            if s.queue.is_closed() {
                return false;
            }
            if s.filter.leaves(entry) {
                s.queue.drop_for(Dropped::LeftSelection);
                return false;
            }
            if !s.filter.matches(entry) {
                return true;
            }
            if s.queue.push(entry.clone()) {
                true
            } else {
                s.queue.drop_for(Dropped::FellBehind);
                false
            }
        });
    }

    fn update_gauges(&self, inner: &Inner) {
        let m = &self.shared.metrics;
        m.revision.set(self.revision() as i64);
        m.memory_bytes.set(inner.ring_bytes as i64);
        m.oldest.set(self.oldest(inner).saturating_sub(1) as i64);
        if let Disk::Durable(s) = &inner.disk {
            m.disk_bytes.set(s.kept_bytes() as i64);
        }
    }

    /// The oldest revision a replay can send.
    fn oldest(&self, inner: &Inner) -> u64 {
        let memory = inner.ring.front().map_or(self.revision() + 1, |e| e.revision);
        match &inner.disk {
            Disk::Durable(s) => s.oldest().min(memory),
            _ => memory,
        }
    }

    /// The number of pods whose identity is kept after they went away (bounded).
    pub fn gone_pods(&self) -> usize {
        self.lock().gone_metas.len()
    }

    /// The matching pods and the revision they are consistent with.
    pub fn list(&self, filter: &Filter) -> (Vec<Arc<PodStatus>>, u64) {
        let inner = self.lock();
        match snapshot(&inner, filter, self.revision()) {
            Start::Snapshot { pods, revision } => (pods, revision),
            Start::Replay(_) => unreachable!("snapshot() makes snapshots"),
        }
    }

    /// The oldest revision the journal still holds, in memory or on disk (the next
    /// revision when it holds none).
    pub fn oldest_revision(&self) -> u64 {
        let inner = self.lock();
        let current = self.revision();
        let memory = inner.ring.front().map_or(current + 1, |e| e.revision);
        let disk = match (&inner.disk, &self.shared.path) {
            (Disk::Durable(s), Some(_)) => s.oldest(),
            _ => u64::MAX,
        };
        memory.min(disk).min(current + 1)
    }

    /// Subscribes atomically: the start (snapshot or replay) and the live entries meet
    /// with no gap and no repeat.
    pub fn subscribe(&self, since: Since, filter: Arc<Filter>) -> Subscription {
        let mut inner = self.lock();
        let current = self.revision();
        let memory_oldest = inner.ring.front().map_or(current + 1, |e| e.revision);
        let (start, reset) = match since {
            Since::Revision(r, epoch) => {
                let same_epoch = epoch == 0 || epoch == inner.epoch;
                let disk_oldest = match (&inner.disk, &self.shared.path) {
                    (Disk::Durable(s), Some(_)) => s.oldest(),
                    _ => u64::MAX,
                };
                let skip = r.saturating_add(1).saturating_sub(memory_oldest) as usize;
                let kept = same_epoch && r <= current && r + 1 >= memory_oldest.min(disk_oldest);
                // Records an earlier version wrote do not say who a pod was before its
                // labels changed: a selector's resume from before they do cannot be
                // checked for a pod that left, so it starts over.
                let unchecked = !filter.selector.is_empty() && r.saturating_add(1) < inner.left_since;
                if kept && (unchecked || inner.ring.iter().skip(skip).any(|e| filter.leaves(e))) {
                    // A pod the client's copy holds left its selection after `r`: a
                    // replay of the matching entries would never remove it.
                    (snapshot(&inner, &filter, current), Some(ResetReason::RuntimeResync))
                } else if same_epoch && r <= current && r + 1 >= memory_oldest {
                    let memory = inner.ring.iter().skip(skip).filter(|e| filter.matches(e)).cloned().collect();
                    (Start::Replay(Replay { disk: None, memory }), None)
                } else if same_epoch && r <= current && r + 1 >= disk_oldest {
                    let memory = inner.ring.iter().filter(|e| filter.matches(e)).cloned().collect();
                    let disk = DiskReplay {
                        reader: None,
                        path: self.shared.path.clone().expect("a durable journal has a path"),
                        after: r,
                        before: memory_oldest,
                        filter: filter.clone(),
                    };
                    (Start::Replay(Replay { disk: Some(disk), memory }), None)
                } else {
                    (snapshot(&inner, &filter, current), Some(ResetReason::RevisionTooOld))
                }
            }
            Since::Snapshot => (snapshot(&inner, &filter, current), None),
        };
        let queue = queue::Queue::new(self.shared.client_buffer);
        let id = inner.next_sub;
        inner.next_sub += 1;
        inner.subs.push(Sub { id, filter, queue: queue.clone() });
        let epoch = inner.epoch;
        drop(inner);
        if let Some(reason) = reset {
            self.count_reset(reason);
        }
        Subscription { epoch, start, reset, queue, id, journal: self.clone() }
    }

    /// Counts a reset in the metrics.
    pub fn count_reset(&self, reason: ResetReason) {
        self.shared.metrics.resets.get_or_create(&ReasonLabel { reason: reason.as_str().into() }).inc();
    }

    fn unsubscribe(&self, id: u64) {
        self.lock().subs.retain(|s| s.id != id);
    }

    /// The task that checkpoints the database's WAL off the write path, when the
    /// journal has a state dir.
    pub fn checkpointer(&self) -> Option<Checkpointer> {
        self.shared.path.clone().map(|path| Checkpointer { journal: self.clone(), path })
    }
}

fn snapshot(inner: &Inner, filter: &Filter, revision: u64) -> Start {
    let pods = inner
        .view
        .iter()
        .filter(|(uid, _)| inner.metas.get(*uid).is_some_and(|m| filter.matches_pod(m)))
        .map(|(_, p)| p.clone())
        .collect();
    Start::Snapshot { pods, revision }
}

impl Drop for Subscription {
    fn drop(&mut self) {
        self.queue.close();
        self.journal.unsubscribe(self.id);
    }
}

#[cfg(test)]
mod tests;

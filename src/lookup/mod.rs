//! The container lookup: every container plegd has published, looked up by container id,
//! cgroup id or PID — while it exists, and for `--tombstone-retention` after it was
//! removed (a tombstone: the pod and the container as plegd last saw them). Tombstones
//! are bounded in count and bytes, oldest dropped first, and kept in the state dir so a
//! restarted plegd still answers for them.
//!
//! It learns in revision order from the publish path (each published event's pod
//! status) and, at start, from the journal's view of the pods. It also counts each
//! container's death once (`plegd_container_terminations_total{namespace,reason}`), by
//! its final reason ([`deaths`]): a container already dead in the journal's view at
//! start was counted by the plegd that saw it die.
//!
//! A PID is attributed with the kernel's word where plegd can read the host's `/proc`
//! (see [`crate::host`]): a live process belongs to the container its cgroup names,
//! never to an earlier container that had the same PID. Only a PID with no process
//! left falls back to the newest container that had it.

mod addresses;
mod catch_up;
mod deaths;
mod index;
pub mod keys;
pub mod resolver;
mod started;
pub mod tombstones;

use std::path::Path;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, SystemTime};

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use tokio::sync::{Notify, mpsc};

use crate::host::{Host, HostProcess, PidClock, container_id_in, placed_in, under_kubepods, user_delegated};
use crate::journal::record::decode_view;
use crate::metrics::Registry;
use crate::model::event::{EventType, PodLifecycleEvent};
use crate::model::{ContainerState, ContainerStatus, PodStatus};
use index::{Index, NsKind};
pub use keys::{LogFile, LookupKey, cgroup_path, log_file};
pub use tombstones::TombstoneWriter;
use tombstones::{TombstoneOp, TombstoneStore};

/// How the lookup keeps removed containers.
#[derive(Clone, Debug)]
pub struct LookupConfig {
    /// How long a removed container is still found.
    pub retention: Duration,
    /// Tombstones kept at most.
    pub max_tombstones: usize,
    /// Bytes of tombstone records kept at most.
    pub max_bytes: usize,
}

impl Default for LookupConfig {
    fn default() -> Self {
        Self { retention: Duration::from_secs(3600), max_tombstones: MAX_TOMBSTONES, max_bytes: MAX_TOMBSTONE_BYTES }
    }
}

/// Tombstones kept at most, by default.
pub const MAX_TOMBSTONES: usize = 10_000;
/// Bytes of tombstones kept at most, by default, as [`ContainerLookup::tombstone_bytes`]
/// counts them (records, ids, keys and index entries). A tombstone of an ordinary pod
/// counts 1.8–1.9 KiB, so 5 MiB holds about 2,750: the retention's hour of the worst
/// churn the kubelet makes at its default 110 pods (two containers each, every one
/// crash-looping at the back-off's 5-minute cap: 2,640 removals an hour,
/// `tests/tombstone_budget.rs`). Only churn beyond the kubelet's — the busy-node bench
/// removes 26 containers a second — loses its oldest tombstones sooner than the
/// retention: after about 1.8 instead of 2.9 minutes there, for about 2.4 MiB less
/// live heap (the lookup held 6.3 MiB of heap at 8 MiB, dhat).
pub const MAX_TOMBSTONE_BYTES: usize = 5 << 20;

impl LookupConfig {
    /// Memory only, with the default bounds.
    pub fn in_memory(retention: Duration) -> Self {
        Self { retention, max_tombstones: MAX_TOMBSTONES, max_bytes: MAX_TOMBSTONE_BYTES }
    }
}

/// A container found.
#[derive(Clone, Debug)]
pub struct Found {
    /// The pod as plegd last saw it with the container (for a removed container, only
    /// that container is left in it).
    pub pod: Arc<PodStatus>,
    /// The container's last status.
    pub container: Arc<ContainerStatus>,
    /// When it was removed, if it was.
    pub removed_at: Option<SystemTime>,
}

/// What a lookup answers.
#[derive(Debug)]
pub enum Answer {
    /// Found.
    Found(Found),
    /// The kernel names this container for the PID, and plegd has not published it
    /// yet: worth waiting for ([`ContainerLookup::learned`]), or reading from the
    /// runtime — whose answer must still place the process ([`ContainerLookup::holds`]).
    NotYet {
        /// The container id the process's cgroup names.
        id: String,
        /// The process's cgroup.
        cgroup: String,
    },
    /// Not found; the sentence says why.
    NotFound(String),
    /// The key names more than one container; the sentence says which.
    Ambiguous(String),
    /// The host could not be read in time to vet the answer; the sentence says why.
    Unavailable(String),
}

/// Failures of opening the lookup.
#[derive(Debug, thiserror::Error)]
pub enum LookupError {
    /// The tombstone file.
    #[error(transparent)]
    Tombstones(#[from] tombstones::TombstoneError),
}

/// The lookup's metrics.
#[derive(Clone, Default)]
pub struct LookupMetrics {
    /// `plegd_container_terminations_total{namespace,reason}`.
    pub terminations: Family<TerminationLabels, Counter>,
    /// `plegd_tombstones`.
    pub tombstones: Gauge,
}

/// Labels of a termination.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct TerminationLabels {
    /// The pod's namespace.
    pub namespace: String,
    /// The runtime's reason (`OOMKilled`, `Error`, `Completed`; `Unknown` when it gave none).
    pub reason: String,
}

impl LookupMetrics {
    /// Creates the lookup's families and registers them in `registry` (the caller gives
    /// it the `plegd` prefix: the two names share no stem).
    pub fn register(registry: &mut Registry) -> Self {
        let m = Self::default();
        registry.register(
            "container_terminations",
            "Container deaths plegd reported, each container once, by namespace and the runtime's reason",
            m.terminations.clone(),
        );
        registry.register("tombstones", "Removed containers the lookup still answers for", m.tombstones.clone());
        m
    }
}

/// The lookup. Cheap to clone; clones share the index.
#[derive(Clone)]
pub struct ContainerLookup {
    index: Arc<Mutex<Index>>,
    /// `kernel.pid_max`, read once.
    pid_max: u64,
    learned: Arc<Notify>,
    cfg: Arc<LookupConfig>,
    /// The host's `/proc` and `/sys/fs/cgroup`, where PIDs and namespaces are read.
    host: Host,
    store: Option<mpsc::Sender<TombstoneOp>>,
    metrics: LookupMetrics,
    /// Deaths waiting to be counted by their final reason.
    deaths: Arc<Mutex<deaths::Deaths>>,
    /// The runtime's word on containers just started (NRI), under a lock of its own,
    /// taken inside the index's and held for one insert or one look.
    started: Arc<Mutex<started::StartedWords>>,
}

/// Counts deaths as they settle ([`deaths::SETTLE`] after they were heard).
pub struct Terminations {
    lookup: ContainerLookup,
}

impl Terminations {
    /// Counts each death when its wait is over, until shutdown; what waits then is
    /// counted as it stands.
    pub async fn run(self, shutdown: tokio_util::sync::CancellationToken) {
        loop {
            let next = self.lookup.deaths.lock().expect("deaths lock").next_due();
            let wait = async {
                match next {
                    Some(at) => tokio::time::sleep_until(at).await,
                    // A death heard meanwhile is due no sooner than SETTLE from now.
                    None => tokio::time::sleep(deaths::SETTLE).await,
                }
            };
            tokio::select! {
                _ = shutdown.cancelled() => {
                    let all = self.lookup.deaths.lock().expect("deaths lock").due(tokio::time::Instant::now() + deaths::SETTLE_LOST);
                    self.lookup.count(all);
                    return;
                }
                _ = wait => self.lookup.count_settled_deaths(),
            }
        }
    }
}

/// Ids the runtime said are not a pod's container (a read for a PID's cgroup), and
/// when: asked again only after [`NOT_A_CONTAINER_FOR`].
const NOT_A_CONTAINER_FOR: Duration = Duration::from_secs(30);

/// Such ids remembered at most.
const NOT_A_CONTAINER_MAX: usize = 4096;

impl ContainerLookup {
    /// An empty lookup; with a state dir, the tombstones kept there come back and the
    /// returned writer keeps the file (run it in the task tracker).
    pub fn open(
        cfg: LookupConfig,
        host: Host,
        state_dir: Option<&Path>,
        metrics: LookupMetrics,
    ) -> Result<(Self, Option<TombstoneWriter>), LookupError> {
        let pid_max = host.pid_max();
        let host_ns = host.namespaces(1);
        let mut lookup = Self {
            index: Arc::default(),
            pid_max,
            learned: Arc::new(Notify::new()),
            cfg: Arc::new(cfg),
            host,
            store: None,
            metrics,
            deaths: Arc::default(),
            started: Arc::default(),
        };
        lookup.lock().host_ns = host_ns;
        let Some(dir) = state_dir else { return Ok((lookup, None)) };
        let mut store = TombstoneStore::open(dir)?;
        let since = SystemTime::now().checked_sub(lookup.cfg.retention).unwrap_or(std::time::UNIX_EPOCH);
        // The newest within the bounds (twice the bytes, so that the fair eviction
        // below chooses among pods); the file drops the rest.
        let stored = store.load_newest(since, lookup.cfg.max_tombstones, lookup.cfg.max_bytes.saturating_mul(2))?;
        let oldest = stored.first().map(|t| t.removed_at);
        let boot =
            lookup.host.pid_clock().map_or(SystemTime::now(), |c| std::time::UNIX_EPOCH + Duration::from_secs(c.boot));
        {
            let mut ops = Vec::new();
            let mut ix = lookup.lock();
            for t in stored {
                match decode_view(&t.record) {
                    Ok((pod, _)) => {
                        let Some(container) = pod.containers.first().cloned() else { continue };
                        let found = Found { pod: Arc::new(pod), container, removed_at: Some(t.removed_at) };
                        let id = ix.id(&t.id);
                        ix.counted.insert(id.clone());
                        // A stamp from before this boot counted another boot's tasks.
                        let stamp = t.forks_at_start.filter(|_| t.removed_at >= boot);
                        let uid = crate::labels::shared(&found.pod.uid);
                        ix.addresses.learn_removed(&found.pod, t.removed_at);
                        ix.index_keys(&id, &found.container, &found.pod, false, stamp);
                        ix.add_tomb(id, &uid, t.record, t.removed_at);
                    }
                    Err(e) => tracing::warn!(id = %t.id, error = %e, "a tombstone does not decode; skipped"),
                }
            }
            ix.expire(SystemTime::now(), &lookup.cfg, &mut ops);
            lookup.metrics.tombstones.set(ix.tombs.len() as i64);
            drop(ix);
            let expired = SystemTime::now().checked_sub(lookup.cfg.retention).unwrap_or(std::time::UNIX_EPOCH);
            store.apply(&ops, expired)?;
            if let Some(oldest) = oldest {
                store.drop_older_than(oldest)?;
            }
        }
        let (tx, rx) = mpsc::channel(tombstones::QUEUE);
        lookup.store = Some(tx);
        let writer = TombstoneWriter { store, rx, retention: lookup.cfg.retention };
        Ok((lookup, Some(writer)))
    }

    fn lock(&self) -> MutexGuard<'_, Index> {
        self.index.lock().expect("lookup index lock")
    }

    /// Learns the pods as the journal holds them at start. Their dead containers'
    /// deaths were counted by the plegd that saw them.
    pub fn seed(&self, pods: &[Arc<PodStatus>]) {
        let mut ops = Vec::new();
        // What the journal held was seen by an earlier plegd, perhaps before a reboot:
        // none of it stands for when a PID was taken.
        let clock = None;
        let mut ix = self.lock();
        let live: std::collections::HashSet<&str> = pods.iter().map(|p| p.uid.as_str()).collect();
        for pod in pods {
            for c in &pod.containers {
                if c.state == ContainerState::Exited {
                    ix.count(&c.id);
                }
            }
            ix.addresses.learn(pod, pod.observed_at);
            ix.learn(pod, clock, &mut ops);
        }
        ix.addresses.settle(&live);
        drop(ix);
        self.send(ops);
        self.learned.notify_waiters();
    }

    /// Learns from published events, in revision order.
    pub fn observe<'a>(&self, events: impl IntoIterator<Item = &'a PodLifecycleEvent>) {
        // `/proc/stat`: the kernel's own counters, never behind a cgroup lock.
        self.take(events, self.host.pid_clock(), true);
    }

    /// Learns events, in revision order; `live`: as they happen (deaths counted).
    fn take<'a>(&self, events: impl IntoIterator<Item = &'a PodLifecycleEvent>, clock: Option<PidClock>, live: bool) {
        let now = SystemTime::now();
        let mut ops = Vec::new();
        {
            let mut ix = self.lock();
            for ev in events {
                if ev.source.follows_the_view() {
                    continue;
                }
                if live && ev.kind == EventType::ContainerDied && !ev.is_sandbox {
                    self.count_death(&mut ix, ev);
                }
                if live && ev.kind == EventType::ContainerChanged && !ev.is_sandbox {
                    let now = ev.pod.as_ref().and_then(|p| p.containers.iter().find(|c| c.id == ev.container_id));
                    if let Some(c) = now.filter(|c| c.state == ContainerState::Exited && !c.reason.is_empty()) {
                        self.deaths.lock().expect("deaths lock").reworded(&c.id, &c.reason);
                    }
                }
                let gone = match &ev.pod {
                    Some(status) => {
                        ix.addresses.learn(status, ev.observed_at);
                        ix.learn(status, clock, &mut ops)
                    }
                    None => {
                        ix.addresses.pod_gone(&ev.pod_uid, ev.observed_at);
                        ix.forget_pod(&ev.pod_uid)
                    }
                };
                for id in gone {
                    ix.bury(&id, ev.observed_at, &mut ops);
                }
            }
            ix.expire(now, &self.cfg, &mut ops);
            self.metrics.tombstones.set(ix.tombs.len() as i64);
        }
        self.learned.notify_waiters();
        self.send(ops);
    }

    /// Hands changes to the tombstone file's writer, never waiting.
    fn send(&self, ops: Vec<TombstoneOp>) {
        let Some(tx) = &self.store else { return };
        for op in ops {
            if tx.try_send(op).is_err() {
                tracing::debug!("the tombstone file is behind; a change stays in memory only");
            }
        }
    }

    fn count_death(&self, ix: &mut Index, ev: &PodLifecycleEvent) {
        if !ix.count(&ev.container_id) {
            return;
        }
        let after = ev.pod.as_ref().and_then(|p| p.containers.iter().find(|c| c.id == ev.container_id));
        let before = ix.live.get(ev.container_id.as_str()).map(|l| &l.container);
        let reason = after
            .map(|c| c.reason.as_str())
            .filter(|r| !r.is_empty())
            .or_else(|| before.filter(|c| c.state == ContainerState::Exited).map(|c| c.reason.as_str()))
            .filter(|r| !r.is_empty())
            .unwrap_or("Unknown");
        let now = tokio::time::Instant::now();
        let counted = self.deaths.lock().expect("deaths lock").died(&ev.container_id, &ev.pod_namespace, reason, now);
        self.count(counted);
    }

    fn count(&self, deaths: Vec<deaths::Counted>) {
        for d in deaths {
            self.metrics
                .terminations
                .get_or_create(&TerminationLabels { namespace: d.namespace, reason: d.reason })
                .inc();
        }
    }

    /// Counts the deaths that have settled.
    pub fn count_settled_deaths(&self) {
        let due = self.deaths.lock().expect("deaths lock").due(tokio::time::Instant::now());
        self.count(due);
    }

    /// Counts every waiting death now, settled or not.
    #[cfg(test)]
    pub(crate) fn count_waiting_deaths(&self) {
        let all = self.deaths.lock().expect("deaths lock").due(tokio::time::Instant::now() + deaths::SETTLE_LOST);
        self.count(all);
    }

    /// The task that counts each death once it has settled.
    pub fn terminations(&self) -> Terminations {
        Terminations { lookup: self.clone() }
    }

    /// Resolves `key`, reading the host's `/proc` here for a PID (tests, and callers
    /// that may block; the API reads it off its threads and calls [`Self::find_read`]).
    pub fn find(&self, key: &LookupKey) -> Answer {
        let (process, clock) = match key {
            LookupKey::Pid(pid) => (self.host.process(*pid), self.host.pid_clock()),
            _ => (None, None),
        };
        self.find_read(key, process, clock)
    }

    /// Resolves `key`, given what the host says of the PID now (`process`, for a
    /// [`LookupKey::Pid`]; `None`: no such process) and its task count (`clock`).
    /// Tombstones past the retention are dropped first, so a quiet node answers as the
    /// retention says.
    pub fn find_read(&self, key: &LookupKey, process: Option<HostProcess>, clock: Option<PidClock>) -> Answer {
        let mut ops = Vec::new();
        let mut ix = self.lock();
        ix.expire(SystemTime::now(), &self.cfg, &mut ops);
        self.metrics.tombstones.set(ix.tombs.len() as i64);
        self.send(ops);
        match key {
            LookupKey::Id(id) => match ix.get(id) {
                Some(f) => Answer::Found(f),
                None => Answer::NotFound(self.unknown(&format!("container {id:?}"))),
            },
            LookupKey::CgroupId(cg) => match ix.by_cgroup.get(cg).and_then(|id| ix.get(id)) {
                Some(f) => Answer::Found(f),
                None => Answer::NotFound(self.unknown(&format!("a container with cgroup id {cg}"))),
            },
            LookupKey::LogPath(LogFile::Attempt(path)) => match ix.by_log_path(path) {
                Some(f) => Answer::Found(f),
                None => Answer::NotFound(self.unknown(&format!("a container that writes {path}"))),
            },
            LookupKey::LogPath(LogFile::Link { pod, namespace, container, id }) => match ix.get(id) {
                Some(f) if f.pod.name == *pod && f.pod.namespace == *namespace && f.container.name == *container => {
                    Answer::Found(f)
                }
                Some(f) => Answer::NotFound(format!(
                    "container {id} is {}/{}'s {}, not {namespace}/{pod}'s {container} as the link's name says",
                    f.pod.namespace, f.pod.name, f.container.name
                )),
                None => Answer::NotFound(self.unknown(&format!("container {id:?}"))),
            },
            LookupKey::Attempt { pod_uid, name, attempt } => match ix.by_attempt_of(pod_uid, name, *attempt) {
                Some(f) => Answer::Found(f),
                None => {
                    Answer::NotFound(self.unknown(&format!("attempt {attempt} of container {name:?} of pod {pod_uid}")))
                }
            },
            LookupKey::MntNs(inode) => self.find_ns(&ix, NsKind::Mnt, *inode),
            LookupKey::PidNs(inode) => self.find_ns(&ix, NsKind::Pid, *inode),
            LookupKey::CgroupPath(cgroup) => self.find_cgroup(&ix, cgroup),
            LookupKey::PodIp { ip, at } => self.find_address(&ix, *ip, *at),
            LookupKey::Pid(pid) => match process {
                Some(process) => {
                    let answer = self.find_live_pid(&ix, *pid, process);
                    let owner = match &answer {
                        Answer::Found(f) => Some(f.container.id.as_str()),
                        _ => None,
                    };
                    ix.taken(*pid, owner);
                    answer
                }
                None => self.find_gone_pid(&ix, *pid, clock),
            },
        }
    }

    /// Whether `container` (as the runtime or the index holds it) is where a process in
    /// `cgroup` is: at or below the cgroup the runtime set for it, or, where the runtime
    /// does not say (no verbose status), in the kubelet's pod hierarchy.
    /// A user's own delegated tree is never a container's, whatever its directories are
    /// named: an unprivileged user can make any name there.
    pub fn holds(container: &ContainerStatus, cgroup: &str) -> bool {
        if user_delegated(cgroup) {
            return false;
        }
        match container.process.as_ref().map(|p| p.cgroup_path.as_str()).filter(|p| !p.is_empty()) {
            Some(path) => placed_in(cgroup, path),
            None => under_kubepods(cgroup),
        }
    }

    /// The runtime said `id` is no pod's container: a PID whose cgroup names it is
    /// answered so, without asking the runtime again, for [`NOT_A_CONTAINER_FOR`].
    pub fn not_a_container(&self, id: &str) {
        let mut ix = self.lock();
        let now = std::time::Instant::now();
        if ix.not_containers.len() >= NOT_A_CONTAINER_MAX {
            ix.not_containers.retain(|_, at| now.duration_since(*at) < NOT_A_CONTAINER_FOR);
            // Still full: the oldest quarter goes.
            if ix.not_containers.len() >= NOT_A_CONTAINER_MAX {
                let mut ats: Vec<std::time::Instant> = ix.not_containers.values().copied().collect();
                ats.sort();
                let cut = ats[NOT_A_CONTAINER_MAX / 4];
                ix.not_containers.retain(|_, at| *at > cut);
            }
        }
        ix.not_containers.insert(id.to_owned(), now);
    }

    /// A pod address at `at` (default now): the pod that held it then, with the
    /// container of it that ran then (else the one that started last before, else any).
    fn find_address(&self, ix: &Index, ip: std::net::IpAddr, at: Option<SystemTime>) -> Answer {
        let when = at.unwrap_or_else(SystemTime::now);
        let Some(h) = ix.addresses.holder(ip, when) else {
            let moment = at.map_or_else(|| "now".to_owned(), |t| format!("at {}", crate::model::rfc3339(t)));
            return Answer::NotFound(format!(
                "{}; a host-network pod's address is the node's and never names a pod",
                self.unknown(&format!("a pod holding {ip} {moment}"))
            ));
        };
        let ns = |t: SystemTime| t.duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos() as i64);
        let at_ns = ns(when);
        let ran = |f: &Found| f.container.started_at > 0 && f.container.started_at <= at_ns;
        let ran_then = |f: &Found| ran(f) && (f.container.finished_at == 0 || at_ns <= f.container.finished_at);
        let mut all = ix.containers_of(&h.pod_uid);
        all.sort_by_key(|f| f.container.started_at);
        let pick = all.iter().rev().find(|f| ran_then(f)).or_else(|| all.iter().rev().find(|f| ran(f))).or(all.last());
        match pick {
            Some(f) => Answer::Found(f.clone()),
            None => Answer::NotFound(format!(
                "pod {} held {ip} then (sandbox {}), but plegd no longer holds any container of it",
                h.pod_uid, h.sandbox
            )),
        }
    }

    /// A cgroup path: the container its runtime-named component names, if that
    /// container is where the path is (at or below the cgroup the runtime set for it).
    fn find_cgroup(&self, ix: &Index, cgroup: &str) -> Answer {
        let Some(id) = container_id_in(cgroup) else {
            return Answer::NotFound(format!(
                "cgroup {cgroup} names no container (a runtime names each container's cgroup after its id): \
                 a pod's or a system cgroup"
            ));
        };
        if let Some(f) = ix.get(id) {
            if Self::holds(&f.container, cgroup) {
                return Answer::Found(f);
            }
            let set = f.container.process.as_ref().map_or("", |p| p.cgroup_path.as_str());
            return Answer::NotFound(format!(
                "cgroup {cgroup} is named after container {id} but is not where the runtime put it ({}): \
                 the name was chosen by whoever made that cgroup",
                if set.is_empty() { "the kubelet's kubepods hierarchy" } else { set }
            ));
        }
        if let Some(pod) = ix.sandboxes.get(id) {
            return Answer::NotFound(format!(
                "cgroup {cgroup} is the sandbox {id} of pod {pod}, which is not a container"
            ));
        }
        Answer::NotFound(self.unknown(&format!("container {id} (named by cgroup {cgroup})")))
    }

    /// A PID that has a process now: the kernel says whose it is — the container the
    /// outermost runtime-named component of its cgroup names, if the process is where
    /// the runtime put that container.
    fn find_live_pid(&self, ix: &Index, pid: u32, process: HostProcess) -> Answer {
        let cgroup = process.cgroup.as_deref().unwrap_or("");
        if let Some(id) = container_id_in(cgroup) {
            if let Some(f) = ix.get(id) {
                if Self::holds(&f.container, cgroup) {
                    return Answer::Found(f);
                }
                if f.container.process.as_ref().is_none_or(|p| p.cgroup_path.is_empty()) {
                    // Published before plegd read where the runtime put it (created, not
                    // yet started): the runtime's word on its start, where it gave one,
                    // else its answer, decides.
                    let placed = self.started.lock().expect("started words lock").place(&f, &process);
                    if let Some(placed) = placed {
                        return Answer::Found(placed);
                    }
                    return Answer::NotYet { id: id.to_owned(), cgroup: cgroup.to_owned() };
                }
                let set = f.container.process.as_ref().map_or("", |p| p.cgroup_path.as_str());
                return Answer::NotFound(format!(
                    "PID {pid} is in cgroup {cgroup}, which is named after container {id} but is not where the \
                     runtime put it ({}): the name was chosen by whoever made that cgroup",
                    if set.is_empty() { "the kubelet's kubepods hierarchy" } else { set }
                ));
            }
            if let Some(pod) = ix.sandboxes.get(id) {
                return Answer::NotFound(format!(
                    "PID {pid} is in the sandbox {id} of pod {pod} (its pause process), which is not a container"
                ));
            }
            if user_delegated(cgroup) {
                return Answer::NotFound(format!(
                    "PID {pid} is in cgroup {cgroup}, a user's own tree: no runtime puts a pod's container there, \
                     whatever the cgroup is named"
                ));
            }
            let recent = ix.not_containers.get(id).is_some_and(|at| at.elapsed() < NOT_A_CONTAINER_FOR);
            if recent {
                return Answer::NotFound(format!(
                    "the kernel puts PID {pid} in container {id}, which the runtime does not know as a pod's \
                     container: a sandbox's pause process, or a container the kubelet did not create"
                ));
            }
            return Answer::NotYet { id: id.to_owned(), cgroup: cgroup.to_owned() };
        }
        // No container named in its cgroup: only a container whose init process is this
        // very process (same start) can claim it.
        let same = ix.by_pid.get(&pid).and_then(|uses| {
            uses.iter().rev().find(|u| u.start_ticks != 0 && Some(u.start_ticks) == process.start_ticks)
        });
        match same.and_then(|u| ix.get(&u.id)) {
            Some(f) => Answer::Found(f),
            None => Answer::NotFound(format!(
                "PID {pid} is not in a container plegd knows: its cgroup is {}",
                process.cgroup.as_deref().unwrap_or("unknown (no cgroup v2 line)")
            )),
        }
    }

    /// A PID with no process now: a running container the runtime gave this PID, else
    /// the newest that had it — if the PID cannot have been another process's since.
    fn find_gone_pid(&self, ix: &Index, pid: u32, clock: Option<PidClock>) -> Answer {
        let uses = ix.by_pid.get(&pid).map(Vec::as_slice).unwrap_or_default();
        let mut found: Vec<(Found, Option<u64>)> =
            uses.iter().filter_map(|u| ix.get(&u.id).map(|f| (f, u.forks_at_start))).collect();
        let running = |f: &Found| f.container.state == ContainerState::Running && f.removed_at.is_none();
        found.sort_by_key(|(f, _)| (running(f), f.container.started_at));
        let Some((f, forks_at_start)) = found.pop() else {
            return Answer::NotFound(self.unknown(&format!("a container with PID {pid}")));
        };
        if running(&f) {
            return Answer::Found(f);
        }
        if !self.host.sees_processes() {
            return Answer::NotFound(format!(
                "no container runs with PID {pid}, and plegd cannot see the host's processes \
                 (--host-root {}) to rule out that the PID was reused since one did",
                self.host.root().display()
            ));
        }
        let window = PidClock::window(self.pid_max);
        match (forks_at_start, clock) {
            (Some(then), Some(now)) if now.forks >= then && now.forks - then < window => Answer::Found(f),
            (then, now) => Answer::NotFound(format!(
                "no process has PID {pid} now; container {} had it, but {}, so the PID may have been another \
                 process's since: ask by its container id or cgroup id",
                f.container.id,
                match (then, now) {
                    (Some(then), Some(now)) if now.forks >= then => format!(
                        "the host has started {} tasks since its process took the PID (a PID can come round again \
                         after {window})",
                        now.forks - then
                    ),
                    (Some(_), _) => "the host has rebooted since".to_owned(),
                    (None, _) => "plegd did not see it start, or saw another process with the PID since".to_owned(),
                }
            )),
        }
    }

    /// Answers a removed or exited container for a namespace inode only while no live
    /// process on the host is in that namespace (and plegd can tell): the kernel gives a freed namespace's inode to the
    /// next namespace of any kind at once (a host `unshare -m` got a removed container's
    /// mount-namespace inode on containerd 2.1). Any other answer passes unchanged. The
    /// host is read off the async threads.
    pub async fn vet(&self, key: &LookupKey, answer: Answer) -> Answer {
        let (kind, name, inode) = match key {
            LookupKey::MntNs(inode) => ("mnt", "mount", *inode),
            LookupKey::PidNs(inode) => ("pid", "PID", *inode),
            _ => return answer,
        };
        let Answer::Found(f) = answer else { return answer };
        // The inode is freed when the container's last process ends, not when it is
        // removed: a dead container is vetted too.
        if f.removed_at.is_none() && f.container.state != ContainerState::Exited {
            return Answer::Found(f);
        }
        let how = if f.removed_at.is_some() { "removed" } else { "exited" };
        let was = format!("{}/{}'s {} ({how})", f.pod.namespace, f.pod.name, f.container.name);
        match self.host.off_thread(move |h| h.namespace_in_use(kind, inode)).await {
            Ok(Some(false)) => Answer::Found(f),
            Ok(Some(true)) => Answer::NotFound(format!(
                "{name} namespace {inode} is a live process's that is in no container plegd knows; {was} had that \
                 inode before, and the kernel reuses a freed namespace's inode at once"
            )),
            Ok(None) => Answer::NotFound(format!(
                "{name} namespace {inode} was {was}'s, but plegd cannot read every host process's namespaces to \
                 tell whether another namespace holds that inode now (see --host-root)"
            )),
            Err(e) => Answer::Unavailable(format!("{e}; try again")),
        }
    }

    /// A namespace's container: the one live container in it, else the one removed
    /// container that was; more than one is ambiguous (a pod that shares its PID
    /// namespace), and the host's own namespace is no container's.
    fn find_ns(&self, ix: &Index, kind: NsKind, inode: u64) -> Answer {
        let (name, host) = match kind {
            NsKind::Mnt => ("mount", ix.host_ns.mnt),
            NsKind::Pid => ("PID", ix.host_ns.pid),
        };
        if inode == host {
            return Answer::NotFound(format!("{name} namespace {inode} is the host's own, not a container's"));
        }
        let found: Vec<Found> =
            ix.by_ns.get(&(kind, inode)).into_iter().flatten().filter_map(|id| ix.get(id)).collect();
        let live: Vec<&Found> = found.iter().filter(|f| f.removed_at.is_none()).collect();
        let pick: Vec<&Found> = if live.is_empty() { found.iter().collect() } else { live };
        match pick.as_slice() {
            [] => Answer::NotFound(self.unknown(&format!("a container in {name} namespace {inode}"))),
            [one] => Answer::Found((*one).clone()),
            many => Answer::Ambiguous(format!(
                "{name} namespace {inode} holds {} containers ({}): the pod shares it; ask by mnt_ns, PID or \
                 container id",
                many.len(),
                many.iter().map(|f| format!("{}/{}", f.pod.name, f.container.name)).collect::<Vec<_>>().join(", ")
            )),
        }
    }

    fn unknown(&self, what: &str) -> String {
        format!(
            "plegd has no record of {what} on this node: it never saw one, or it was removed more than {} ago \
             (--tombstone-retention)",
            humantime::format_duration(self.cfg.retention)
        )
    }

    /// Resolves when the lookup learned something new (enable it before asking, then
    /// wait with a deadline).
    pub fn learned(&self) -> tokio::sync::futures::Notified<'_> {
        self.learned.notified()
    }

    /// Tombstones held.
    pub fn tombstones(&self) -> usize {
        self.lock().tombs.len()
    }

    /// What the tombstones held cost in memory, as their byte bound counts it.
    pub fn tombstone_bytes(&self) -> usize {
        self.lock().tomb_bytes
    }

    /// The host it reads PIDs on.
    pub fn host(&self) -> &Host {
        &self.host
    }

    /// The retention.
    pub fn retention(&self) -> Duration {
        self.cfg.retention
    }
}

#[cfg(test)]
mod tests;

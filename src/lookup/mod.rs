//! The container lookup: every container plegd has published, looked up by container id,
//! cgroup id or PID — while it exists, and for `--tombstone-retention` after it was
//! removed (a tombstone: the pod and the container as plegd last saw them). Tombstones
//! are bounded in count and bytes, oldest dropped first, and kept in the state dir so a
//! restarted plegd still answers for them.
//!
//! It learns in revision order from the publish path (each published event's pod
//! status) and, at start, from the journal's view of the pods. It also counts each
//! container's death once (`plegd_container_terminations_total{namespace,reason}`):
//! a container already dead in the journal's view at start was counted by the plegd
//! that saw it die.
//!
//! A PID is attributed with the kernel's word where plegd can read the host's `/proc`
//! (see [`crate::host`]): a live process belongs to the container its cgroup names,
//! never to an earlier container that had the same PID. Only a PID with no process
//! left falls back to the newest container that had it.

pub mod tombstones;

use std::collections::{HashMap, HashSet, VecDeque};
use std::path::PathBuf;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, SystemTime};

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use tokio::sync::{Notify, mpsc};

use crate::host::{Host, container_id_in};
use crate::journal::PodMeta;
use crate::journal::record::{decode_view, encode_view};
use crate::metrics::Registry;
use crate::model::event::{EventSource, EventType, PodLifecycleEvent};
use crate::model::{ContainerState, ContainerStatus, PodStatus};
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
    /// Where tombstones survive restarts; `None`: memory only.
    pub state_dir: Option<PathBuf>,
    /// The host's `/proc` and `/sys/fs/cgroup`.
    pub host: Host,
}

impl Default for LookupConfig {
    fn default() -> Self {
        Self {
            retention: Duration::from_secs(3600),
            max_tombstones: MAX_TOMBSTONES,
            max_bytes: MAX_TOMBSTONE_BYTES,
            state_dir: Some(PathBuf::from(crate::journal::STATE_DIR)),
            host: Host::default(),
        }
    }
}

/// Tombstones kept at most, by default.
pub const MAX_TOMBSTONES: usize = 10_000;
/// Bytes of tombstone records kept at most, by default.
pub const MAX_TOMBSTONE_BYTES: usize = 8 << 20;

impl LookupConfig {
    /// Memory only, with the default bounds.
    pub fn in_memory(retention: Duration) -> Self {
        Self {
            retention,
            max_tombstones: MAX_TOMBSTONES,
            max_bytes: MAX_TOMBSTONE_BYTES,
            state_dir: None,
            host: Host::default(),
        }
    }
}

/// What a lookup asks by.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum LookupKey {
    /// Container id.
    Id(String),
    /// cgroup id (the cgroup directory's inode).
    CgroupId(u64),
    /// Host PID of any process of the container.
    Pid(u32),
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
    /// yet: worth waiting for ([`ContainerLookup::learned`]).
    NotYet(String),
    /// Not found; the sentence says why.
    NotFound(String),
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
    /// Creates the lookup's families and registers them.
    pub fn register(registry: &mut Registry) -> Self {
        let m = Self::default();
        registry.register(
            "plegd_container_terminations",
            "Container deaths plegd reported, each container once, by namespace and the runtime's reason",
            m.terminations.clone(),
        );
        registry.register("plegd_tombstones", "Removed containers the lookup still answers for", m.tombstones.clone());
        m
    }
}

/// The lookup. Cheap to clone; clones share the index.
#[derive(Clone)]
pub struct ContainerLookup {
    index: Arc<Mutex<Index>>,
    learned: Arc<Notify>,
    cfg: Arc<LookupConfig>,
    store: Option<mpsc::Sender<TombstoneOp>>,
    metrics: LookupMetrics,
}

struct Live {
    pod: Arc<PodStatus>,
    container: Arc<ContainerStatus>,
}

struct Tomb {
    found: Found,
    bytes: usize,
}

/// A container that had a PID.
#[derive(Clone, Debug)]
struct PidUse {
    id: String,
    start_ticks: u64,
    started_at: i64,
}

#[derive(Default)]
struct Index {
    live: HashMap<String, Live>,
    pods: HashMap<Arc<str>, Vec<String>>,
    tombs: HashMap<String, Tomb>,
    /// Tombstones by removal, oldest first.
    order: VecDeque<String>,
    tomb_bytes: usize,
    by_cgroup: HashMap<u64, String>,
    by_pid: HashMap<u32, Vec<PidUse>>,
    /// Containers whose death is counted (live or tombstoned).
    counted: HashSet<String>,
}

impl ContainerLookup {
    /// An empty lookup; with a state dir, the tombstones kept there come back and the
    /// returned writer keeps the file (run it in the task tracker).
    pub fn open(cfg: LookupConfig, metrics: LookupMetrics) -> Result<(Self, Option<TombstoneWriter>), LookupError> {
        let mut lookup =
            Self { index: Arc::default(), learned: Arc::new(Notify::new()), cfg: Arc::new(cfg), store: None, metrics };
        let Some(dir) = lookup.cfg.state_dir.clone() else { return Ok((lookup, None)) };
        let store = TombstoneStore::open(&dir)?;
        let since = SystemTime::now().checked_sub(lookup.cfg.retention).unwrap_or(std::time::UNIX_EPOCH);
        let stored = store.load(since)?;
        {
            let mut ix = lookup.lock();
            for t in stored {
                match decode_view(&t.record) {
                    Ok((pod, _)) => {
                        let Some(container) = pod.containers.first().cloned() else { continue };
                        let found = Found { pod: Arc::new(pod), container, removed_at: Some(t.removed_at) };
                        ix.counted.insert(t.id.clone());
                        ix.index_keys(&found.container);
                        ix.add_tomb(t.id, found, t.record.len());
                    }
                    Err(e) => tracing::warn!(id = %t.id, error = %e, "a tombstone does not decode; skipped"),
                }
            }
            lookup.metrics.tombstones.set(ix.tombs.len() as i64);
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
        let mut ix = self.lock();
        for pod in pods {
            for c in &pod.containers {
                if c.state == ContainerState::Exited {
                    ix.counted.insert(c.id.clone());
                }
            }
            ix.learn(pod, &mut ops);
        }
        drop(ix);
        self.send(ops);
        self.learned.notify_waiters();
    }

    /// Learns from published events, in revision order.
    pub fn observe<'a>(&self, events: impl IntoIterator<Item = &'a PodLifecycleEvent>) {
        let now = SystemTime::now();
        let mut ops = Vec::new();
        {
            let mut ix = self.lock();
            for ev in events {
                if ev.source == EventSource::Reconciler {
                    continue;
                }
                if ev.kind == EventType::ContainerDied && !ev.is_sandbox {
                    self.count_death(&mut ix, ev);
                }
                let gone = match &ev.pod {
                    Some(status) => ix.learn(status, &mut ops),
                    None => ix.pods.remove(&ev.pod_uid).unwrap_or_default(),
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
        if !ix.counted.insert(ev.container_id.clone()) {
            return;
        }
        let after = ev.pod.as_ref().and_then(|p| p.containers.iter().find(|c| c.id == ev.container_id));
        let before = ix.live.get(&ev.container_id).map(|l| &l.container);
        let reason = after
            .map(|c| c.reason.as_str())
            .filter(|r| !r.is_empty())
            .or_else(|| before.filter(|c| c.state == ContainerState::Exited).map(|c| c.reason.as_str()))
            .filter(|r| !r.is_empty())
            .unwrap_or("Unknown");
        self.metrics
            .terminations
            .get_or_create(&TerminationLabels { namespace: ev.pod_namespace.to_string(), reason: reason.into() })
            .inc();
    }

    /// Resolves `key`. Tombstones past the retention are dropped first, so a quiet
    /// node answers as the retention says.
    pub fn find(&self, key: &LookupKey) -> Answer {
        // The kernel is asked before the index is locked: reading /proc may wait on the
        // kernel's cgroup locks, the publish path must not.
        let process = match key {
            LookupKey::Pid(pid) => self.cfg.host.process(*pid),
            _ => None,
        };
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
            LookupKey::Pid(pid) => self.find_pid(&ix, *pid, process),
        }
    }

    fn find_pid(&self, ix: &Index, pid: u32, process: Option<crate::host::HostProcess>) -> Answer {
        match process {
            Some(process) => {
                // A live process: the kernel says whose it is.
                if let Some(id) = process.cgroup.as_deref().and_then(container_id_in) {
                    return match ix.get(id) {
                        Some(f) => Answer::Found(f),
                        None => Answer::NotYet(id.to_owned()),
                    };
                }
                // No container id in its cgroup: only a container whose init process
                // is this very process (same start) can claim it.
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
            None => {
                // No such process now: a running container the runtime gave this PID,
                // else the newest that had it. Without a view of the host's processes
                // the PID may have been reused since: only a running container answers.
                let uses = ix.by_pid.get(&pid).map(Vec::as_slice).unwrap_or_default();
                let mut found: Vec<Found> = uses.iter().filter_map(|u| ix.get(&u.id)).collect();
                let running = |f: &Found| f.container.state == ContainerState::Running && f.removed_at.is_none();
                found.sort_by_key(|f| (running(f), f.container.started_at));
                match found.pop() {
                    Some(f) if running(&f) || self.cfg.host.sees_processes() => Answer::Found(f),
                    Some(_) => Answer::NotFound(format!(
                        "no container runs with PID {pid}, and plegd cannot see the host's processes \
                         (--host-root {}) to rule out that the PID was reused since one did",
                        self.cfg.host.root().display()
                    )),
                    None => Answer::NotFound(self.unknown(&format!("a container with PID {pid}"))),
                }
            }
        }
    }

    fn unknown(&self, what: &str) -> String {
        format!(
            "plegd knows no {what} on this node: it never saw one, or it was removed more than {} ago \
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

    /// The retention.
    pub fn retention(&self) -> Duration {
        self.cfg.retention
    }
}

impl Index {
    fn get(&self, id: &str) -> Option<Found> {
        if let Some(l) = self.live.get(id) {
            return Some(Found { pod: l.pod.clone(), container: l.container.clone(), removed_at: None });
        }
        self.tombs.get(id).map(|t| t.found.clone())
    }

    /// Learns a pod's status; returns the ids of its containers that left it.
    fn learn(&mut self, status: &Arc<PodStatus>, ops: &mut Vec<TombstoneOp>) -> Vec<String> {
        let uid = crate::labels::shared(&status.uid);
        let ids: Vec<String> = status.containers.iter().map(|c| c.id.clone()).collect();
        for c in &status.containers {
            // A container back from a tombstone (an event that carries its last status
            // after another one's buried it) is live again, its keys and count kept.
            if let Some(t) = self.tombs.remove(&c.id) {
                self.tomb_bytes -= t.bytes;
                self.order.retain(|o| o != &c.id);
                ops.push(TombstoneOp::Delete(c.id.clone()));
                self.live.insert(c.id.clone(), Live { pod: t.found.pod, container: t.found.container });
            }
            self.index_keys(c);
            // A status that does not carry the process (a final status the runtime's
            // event stream gave) keeps the one learned before: its PID and cgroup id
            // still find it once it is gone.
            let container = match self.live.get(&c.id).and_then(|l| l.container.process.clone()) {
                Some(p) if c.process.is_none() => {
                    Arc::new(ContainerStatus { process: Some(p), ..ContainerStatus::clone(c) })
                }
                _ => c.clone(),
            };
            self.live.insert(c.id.clone(), Live { pod: status.clone(), container });
        }
        let before = self.pods.insert(uid, ids.clone()).unwrap_or_default();
        before.into_iter().filter(|id| !ids.contains(id)).collect()
    }

    /// Points the container's cgroup id and PID at it.
    fn index_keys(&mut self, c: &ContainerStatus) {
        let Some(p) = &c.process else { return };
        if p.cgroup_id != 0 {
            self.by_cgroup.insert(p.cgroup_id, c.id.clone());
        }
        if p.pid != 0 {
            let uses = self.by_pid.entry(p.pid).or_default();
            if !uses.iter().any(|u| u.id == c.id) {
                uses.push(PidUse { id: c.id.clone(), start_ticks: p.start_ticks, started_at: c.started_at });
                uses.sort_by_key(|u| u.started_at);
            }
        }
    }

    /// Makes a live container a tombstone.
    fn bury(&mut self, id: &str, removed_at: SystemTime, ops: &mut Vec<TombstoneOp>) {
        let Some(mut live) = self.live.remove(id) else { return };
        if live.container.state == ContainerState::Running {
            // It vanished while running: how it ended is unknown.
            live.container =
                Arc::new(ContainerStatus { state: ContainerState::Unknown, ..ContainerStatus::clone(&live.container) });
        }
        let mut pod = PodStatus::clone(&live.pod);
        pod.containers = vec![live.container.clone()];
        let record = encode_view(&pod, &PodMeta::of(&pod));
        let found = Found { pod: Arc::new(pod), container: live.container, removed_at: Some(removed_at) };
        self.add_tomb(id.to_owned(), found, record.len());
        ops.push(TombstoneOp::Put { id: id.to_owned(), removed_at, record });
    }

    fn add_tomb(&mut self, id: String, found: Found, bytes: usize) {
        if self.tombs.contains_key(&id) {
            self.drop_tomb(&id);
        }
        self.tomb_bytes += bytes;
        self.order.push_back(id.clone());
        self.tombs.insert(id, Tomb { found, bytes });
    }

    /// Forgets a tombstone and what points at it.
    fn drop_tomb(&mut self, id: &str) {
        self.order.retain(|o| o != id);
        self.forget_tomb(id);
    }

    /// Forgets a tombstone no longer in `order`.
    fn forget_tomb(&mut self, id: &str) {
        let Some(t) = self.tombs.remove(id) else { return };
        self.tomb_bytes -= t.bytes;
        if !self.live.contains_key(id) {
            self.forget_keys(id, &t.found.container);
        }
    }

    fn forget_keys(&mut self, id: &str, c: &ContainerStatus) {
        self.counted.remove(id);
        if let Some(p) = &c.process {
            if self.by_cgroup.get(&p.cgroup_id).is_some_and(|x| x == id) {
                self.by_cgroup.remove(&p.cgroup_id);
            }
            if let Some(uses) = self.by_pid.get_mut(&p.pid) {
                uses.retain(|u| u.id != id);
                if uses.is_empty() {
                    self.by_pid.remove(&p.pid);
                }
            }
        }
    }

    /// Drops tombstones past the retention, then the oldest beyond the bounds.
    fn expire(&mut self, now: SystemTime, cfg: &LookupConfig, ops: &mut Vec<TombstoneOp>) {
        let cutoff = now.checked_sub(cfg.retention).unwrap_or(std::time::UNIX_EPOCH);
        while let Some(id) = self.order.front().cloned() {
            let t = &self.tombs[&id];
            let expired = t.found.removed_at.is_some_and(|at| at < cutoff);
            if !expired && self.tombs.len() <= cfg.max_tombstones && self.tomb_bytes <= cfg.max_bytes {
                break;
            }
            self.order.pop_front();
            self.forget_tomb(&id);
            ops.push(TombstoneOp::Delete(id));
        }
    }
}

#[cfg(test)]
mod tests;

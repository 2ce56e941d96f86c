//! The lookup's index: live containers by id and by every key a lookup asks by, and the
//! tombstones of removed ones. A container's id is one allocation however many keys
//! point at it; a tombstone keeps its view record as the file has it (decoded when a
//! lookup finds it), and its cost — the record, its keys and the index entries that
//! hold them — is what the byte bound counts.

use std::collections::{HashMap, HashSet, VecDeque};
use std::mem::size_of;
use std::sync::Arc;
use std::time::{Instant, SystemTime};

use super::keys::{LogFile, log_file};
use super::tombstones::TombstoneOp;
use super::{Found, LookupConfig};
use crate::host::{FRESH_START, PidClock};
use crate::journal::record::{decode_view, encode_pod_view};
use crate::model::{ContainerState, ContainerStatus, PodStatus, nanos_to_system};

/// A container's id, shared by every index that names it.
pub(super) type Id = Arc<str>;

pub(super) struct Live {
    pub(super) pod: Arc<PodStatus>,
    pub(super) container: Arc<ContainerStatus>,
}

/// A removed container.
pub(super) struct Tomb {
    /// Its pod as plegd last saw it, with only this container in it: the view record
    /// the file holds.
    record: Box<[u8]>,
    pub(super) removed_at: SystemTime,
    pub(super) pod: Arc<str>,
    /// What it costs in memory ([`tomb_cost`]).
    pub(super) bytes: usize,
}

impl Tomb {
    /// The pod and container its record holds; `None` if the record does not decode
    /// (records are encoded by this plegd or read back from its file: never expected).
    fn found(&self) -> Option<Found> {
        let (pod, _) = decode_view(&self.record).ok()?;
        let container = pod.containers.first()?.clone();
        Some(Found { pod: Arc::new(pod), container, removed_at: Some(self.removed_at) })
    }
}

/// A container that had a PID.
#[derive(Clone, Debug)]
pub(super) struct PidUse {
    pub(super) id: Id,
    pub(super) start_ticks: u64,
    pub(super) started_at: i64,
    /// The host's task count when plegd first saw the container running, taken only
    /// within [`crate::host::FRESH_START`] of its start (`None` otherwise, or once plegd
    /// saw another process hold the PID). The PID cannot have been another process's
    /// before the count has grown by [`PidClock::window`] past it.
    pub(super) forks_at_start: Option<u64>,
}

/// A container's log file, or its pod, name and attempt, as a key: a hash, so that a
/// container's keys cost no copy of its strings. A lookup checks the container it finds
/// against what it asked ([`Index::by_log_path`], [`Index::by_attempt_of`]).
type KeyHash = u64;

fn hash_of(key: impl std::hash::Hash) -> KeyHash {
    use std::hash::{BuildHasher, BuildHasherDefault, DefaultHasher};
    BuildHasherDefault::<DefaultHasher>::default().hash_one(key)
}

/// The key of a log file ([`LogFile::Attempt`]'s path).
fn log_key(path: &str) -> KeyHash {
    hash_of(path)
}

/// The key of pod `uid`'s container `name`, attempt `attempt`.
fn attempt_key(uid: &str, name: &str, attempt: u32) -> KeyHash {
    hash_of((uid, name, attempt))
}

#[derive(Default)]
pub(super) struct Index {
    pub(super) live: HashMap<Id, Live>,
    pub(super) pods: HashMap<Arc<str>, Vec<Id>>,
    pub(super) tombs: HashMap<Id, Tomb>,
    /// Tombstones by removal, oldest first.
    pub(super) order: VecDeque<Id>,
    pub(super) tomb_bytes: usize,
    /// Tombstone bytes and count by pod: when over the bounds, the pod holding the most
    /// gives up its oldest first, so one pod's large records never evict the others'.
    pub(super) pod_tombs: HashMap<Arc<str>, PodTombs>,
    pub(super) by_cgroup: HashMap<u64, Id>,
    pub(super) by_pid: HashMap<u32, Vec<PidUse>>,
    /// Containers whose death is counted (live or tombstoned).
    pub(super) counted: HashSet<Id>,
    /// Sandboxes of the pods plegd holds: id → `namespace/name` (a pause process's
    /// cgroup names its sandbox, which is not a container).
    pub(super) sandboxes: HashMap<String, String>,
    pub(super) pod_sandboxes: HashMap<Arc<str>, Vec<String>>,
    /// Ids the runtime said are no pod's container, and when it said so.
    pub(super) not_containers: HashMap<String, Instant>,
    /// Containers by their log file ([`LogFile::Attempt`]'s path).
    pub(super) by_log: HashMap<KeyHash, Id>,
    /// Containers by pod, name and attempt.
    pub(super) by_attempt: HashMap<KeyHash, Id>,
    /// Containers by a namespace's inode (a pod may share its PID namespace).
    pub(super) by_ns: HashMap<(NsKind, u64), Vec<Id>>,
    /// The host's own namespaces (PID 1's): a container that shares one (`hostPID`) is
    /// not found by it.
    pub(super) host_ns: crate::model::Namespaces,
    /// Who held each pod address when.
    pub(super) addresses: super::addresses::Addresses,
}

/// The namespaces a lookup asks by.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(super) enum NsKind {
    Mnt,
    Pid,
}

#[derive(Default)]
pub(super) struct PodTombs {
    pub(super) bytes: usize,
    pub(super) count: usize,
}

/// What one allocation of `len` bytes costs glibc's malloc: the bytes, rounded up to
/// its 16-byte chunks, and the 8-byte chunk header.
fn block(len: usize) -> usize {
    if len == 0 { 0 } else { (len + 8).div_ceil(16) * 16 }
}

/// A hash table entry of `T`: the slot and its control byte, at the table's lowest
/// load (7/16, just after it doubled).
fn entry<T>() -> usize {
    (size_of::<T>() + 1) * 16 / 7
}

/// What a tombstone costs in memory: its record; its id (one allocation); the
/// `tombs`, `order` and `counted` entries that name it; and its keys — the attempt, the
/// log file, the cgroup id, the PID and two namespaces — as if all were set, each in a
/// table at its lowest load.
pub(super) fn tomb_cost(id: &str, record_len: usize) -> usize {
    let one_of = |slot: usize| block(slot);
    block(record_len)
        + block(id.len() + 2 * size_of::<usize>())
        + entry::<(Id, Tomb)>()
        + 2 * size_of::<Id>()
        + entry::<Id>()
        + 2 * entry::<(KeyHash, Id)>()
        + entry::<(u64, Id)>()
        + entry::<(u32, Vec<PidUse>)>()
        + one_of(size_of::<PidUse>())
        + 2 * (entry::<((NsKind, u64), Vec<Id>)>() + one_of(size_of::<Id>()))
}

impl Index {
    pub(super) fn get(&self, id: &str) -> Option<Found> {
        if let Some(l) = self.live.get(id) {
            return Some(Found { pod: l.pod.clone(), container: l.container.clone(), removed_at: None });
        }
        self.tombs.get(id).and_then(Tomb::found)
    }

    /// Every container of pod `uid` the index holds, live or removed.
    pub(super) fn containers_of(&self, uid: &str) -> Vec<Found> {
        let live = self.pods.get(uid).into_iter().flatten().filter_map(|id| self.get(id));
        let removed = self.tombs.values().filter(|t| *t.pod == *uid).filter_map(Tomb::found);
        live.chain(removed).collect()
    }

    /// The container that writes log file `path`.
    pub(super) fn by_log_path(&self, path: &str) -> Option<Found> {
        let f = self.by_log.get(&log_key(path)).and_then(|id| self.get(id))?;
        matches!(log_file(&f.container.log_path), Ok(LogFile::Attempt(p)) if p == path).then_some(f)
    }

    /// Pod `uid`'s container `name`, attempt `attempt`.
    pub(super) fn by_attempt_of(&self, uid: &str, name: &str, attempt: u32) -> Option<Found> {
        let f = self.by_attempt.get(&attempt_key(uid, name, attempt)).and_then(|id| self.get(id))?;
        (*f.pod.uid == *uid && f.container.name == name && f.container.attempt == attempt).then_some(f)
    }

    /// The shared id of a container the index holds, or a new one.
    pub(super) fn id(&self, id: &str) -> Id {
        let held = self.live.get_key_value(id).map(|(k, _)| k);
        let held = held.or_else(|| self.tombs.get_key_value(id).map(|(k, _)| k)).or_else(|| self.counted.get(id));
        held.cloned().unwrap_or_else(|| Arc::from(id))
    }

    /// Marks `id`'s death counted; false if it was.
    pub(super) fn count(&mut self, id: &str) -> bool {
        if self.counted.contains(id) {
            return false;
        }
        let id = self.id(id);
        self.counted.insert(id)
    }

    /// Learns a pod's status; returns the ids of its containers that left it.
    pub(super) fn learn(
        &mut self,
        status: &Arc<PodStatus>,
        clock: Option<PidClock>,
        ops: &mut Vec<TombstoneOp>,
    ) -> Vec<Id> {
        let uid = crate::labels::shared(&status.uid);
        let mut ids: Vec<Id> = Vec::with_capacity(status.containers.len());
        for c in &status.containers {
            let id = self.id(&c.id);
            // A container back from a tombstone (an event that carries its last status
            // after another one's buried it) is live again, its keys and count kept.
            if let Some(t) = self.tombs.remove(&id) {
                self.untally(&t);
                self.order.retain(|o| *o != id);
                ops.push(TombstoneOp::Delete(c.id.clone()));
                if let Some(f) = t.found() {
                    self.live.insert(id.clone(), Live { pod: f.pod, container: f.container });
                }
            }
            let fresh = nanos_to_system(c.started_at)
                .and_then(|at| SystemTime::now().duration_since(at).ok())
                .is_some_and(|age| age <= FRESH_START);
            let forks_at_start =
                (c.state == ContainerState::Running && fresh).then_some(clock).flatten().map(|k| k.forks);
            self.index_keys(&id, c, status, true, forks_at_start);
            // A status that does not carry the process (a final status the runtime's
            // event stream gave) keeps the one learned before: its PID and cgroup id
            // still find it once it is gone.
            let container = match self.live.get(&id).and_then(|l| l.container.process.clone()) {
                Some(p) if c.process.is_none() => {
                    Arc::new(ContainerStatus { process: Some(p), ..ContainerStatus::clone(c) })
                }
                _ => c.clone(),
            };
            self.live.insert(id.clone(), Live { pod: status.clone(), container });
            ids.push(id);
        }
        self.learn_sandboxes(status, &uid);
        let before = self.pods.insert(uid, ids.clone()).unwrap_or_default();
        before.into_iter().filter(|id| !ids.contains(id)).collect()
    }

    /// Points the pod's sandbox ids at it, and forgets those it no longer has.
    fn learn_sandboxes(&mut self, status: &PodStatus, uid: &Arc<str>) {
        let sandboxes: Vec<String> = status.sandboxes.iter().map(|s| s.id.clone()).collect();
        for id in &sandboxes {
            self.sandboxes.entry(id.clone()).or_insert_with(|| format!("{}/{}", status.namespace, status.name));
        }
        for old in self.pod_sandboxes.insert(uid.clone(), sandboxes.clone()).unwrap_or_default() {
            if !sandboxes.contains(&old) {
                self.sandboxes.remove(&old);
            }
        }
    }

    /// Forgets a pod that went away; returns its containers' ids.
    pub(super) fn forget_pod(&mut self, uid: &str) -> Vec<Id> {
        for id in self.pod_sandboxes.remove(uid).unwrap_or_default() {
            self.sandboxes.remove(&id);
        }
        self.pods.remove(uid).unwrap_or_default()
    }

    /// Points the container's attempt, log file, namespaces, cgroup id and PID at it;
    /// `forks_at_start` is the host's task count near its start, if plegd has it.
    ///
    /// A log file is pointed at the container only when its path is the pod's own
    /// (`<namespace>_<name>_<uid>/<container>/`, as the kubelet builds it): a sandbox
    /// created with another pod's log directory takes no other pod's file. And a removed
    /// container (`live`: false) never takes a path from a live one.
    pub(super) fn index_keys(
        &mut self,
        id: &Id,
        c: &ContainerStatus,
        pod: &PodStatus,
        live: bool,
        forks_at_start: Option<u64>,
    ) {
        let uid = &crate::labels::shared(&pod.uid);
        self.by_attempt.insert(attempt_key(uid, &c.name, c.attempt), id.clone());
        if let Ok(LogFile::Attempt(path)) = log_file(&c.log_path) {
            let key = log_key(&path);
            let held_live = self.by_log.get(&key).is_some_and(|x| x != id && self.live.contains_key(x));
            if !owns_log_path(&path, pod, &c.name) {
                tracing::debug!(container = %id, %path, pod = %pod.uid, "a log path outside the pod's own directory is not indexed");
            } else if live || !held_live {
                self.by_log.insert(key, id.clone());
            }
        }
        let Some(p) = &c.process else { return };
        for (kind, inode, host) in
            [(NsKind::Mnt, p.namespaces.mnt, self.host_ns.mnt), (NsKind::Pid, p.namespaces.pid, self.host_ns.pid)]
        {
            if inode != 0 && inode != host {
                let ids = self.by_ns.entry((kind, inode)).or_insert_with(|| Vec::with_capacity(1));
                if !ids.contains(id) {
                    ids.push(id.clone());
                }
            }
        }
        if p.cgroup_id != 0 {
            self.by_cgroup.insert(p.cgroup_id, id.clone());
        }
        if p.pid != 0 {
            let uses = self.by_pid.entry(p.pid).or_insert_with(|| Vec::with_capacity(1));
            // Only the first sight stands for when the PID was taken: later ones are later.
            if !uses.iter().any(|u| u.id == *id) {
                uses.push(PidUse {
                    id: id.clone(),
                    start_ticks: p.start_ticks,
                    started_at: c.started_at,
                    forks_at_start,
                });
                uses.sort_by_key(|u| u.started_at);
            }
        }
    }

    /// A live process holds `pid` and is not (or not known to be) a container that no
    /// longer runs: such containers lose their claim to the PID for good.
    pub(super) fn taken(&mut self, pid: u32, owner: Option<&str>) {
        let running: HashSet<Id> = self
            .by_pid
            .get(&pid)
            .into_iter()
            .flatten()
            .filter(|u| self.live.get(&u.id).is_some_and(|l| l.container.state == ContainerState::Running))
            .map(|u| u.id.clone())
            .collect();
        for u in self.by_pid.get_mut(&pid).into_iter().flatten() {
            if owner != Some(&*u.id) && !running.contains(&u.id) {
                u.forks_at_start = None;
            }
        }
    }

    /// When plegd last saw `id` running with `pid`, by the host's task count.
    fn forks_at_start(&self, id: &str, pid: u32) -> Option<u64> {
        self.by_pid.get(&pid)?.iter().find(|u| &*u.id == id)?.forks_at_start
    }

    /// Makes a live container a tombstone.
    pub(super) fn bury(&mut self, id: &str, removed_at: SystemTime, ops: &mut Vec<TombstoneOp>) {
        let Some((id, mut live)) = self.live.remove_entry(id) else { return };
        if live.container.state == ContainerState::Running {
            // It vanished while running: how it ended is unknown.
            live.container =
                Arc::new(ContainerStatus { state: ContainerState::Unknown, ..ContainerStatus::clone(&live.container) });
        }
        let mut pod = PodStatus::clone(&live.pod);
        pod.containers = vec![live.container.clone()];
        let record = encode_pod_view(&pod);
        let forks_at_start = live.container.process.as_ref().and_then(|p| self.forks_at_start(&id, p.pid));
        let uid = crate::labels::shared(&pod.uid);
        self.add_tomb(id.clone(), &uid, record.clone(), removed_at);
        ops.push(TombstoneOp::Put { id: id.to_string(), removed_at, record, forks_at_start });
    }

    /// Keeps `record` as the tombstone of container `id` of pod `uid`.
    pub(super) fn add_tomb(&mut self, id: Id, uid: &Arc<str>, record: Vec<u8>, removed_at: SystemTime) {
        if self.tombs.contains_key(&id) {
            self.drop_tomb(&id);
        }
        let bytes = tomb_cost(&id, record.len());
        let t = Tomb { record: record.into_boxed_slice(), removed_at, pod: uid.clone(), bytes };
        self.tomb_bytes += bytes;
        let share = self.pod_tombs.entry(t.pod.clone()).or_default();
        share.bytes += bytes;
        share.count += 1;
        self.order.push_back(id.clone());
        self.tombs.insert(id, t);
    }

    /// Takes a tombstone out of the totals.
    fn untally(&mut self, t: &Tomb) {
        self.tomb_bytes -= t.bytes;
        if let Some(share) = self.pod_tombs.get_mut(&t.pod) {
            share.bytes -= t.bytes;
            share.count -= 1;
            if share.count == 0 {
                self.pod_tombs.remove(&t.pod);
            }
        }
    }

    /// Forgets a tombstone and what points at it.
    fn drop_tomb(&mut self, id: &str) {
        self.order.retain(|o| &**o != id);
        let Some(t) = self.tombs.remove(id) else { return };
        self.untally(&t);
        if self.live.contains_key(id) {
            return;
        }
        match t.found() {
            Some(f) => self.forget_keys(id, &t.pod, &f.container),
            None => tracing::warn!(id, "a tombstone's record does not decode; its keys stay until they are reused"),
        }
    }

    fn forget_keys(&mut self, id: &str, uid: &Arc<str>, c: &ContainerStatus) {
        self.counted.remove(id);
        let attempt = attempt_key(uid, &c.name, c.attempt);
        if self.by_attempt.get(&attempt).is_some_and(|x| &**x == id) {
            self.by_attempt.remove(&attempt);
        }
        if let Ok(LogFile::Attempt(path)) = log_file(&c.log_path)
            && self.by_log.get(&log_key(&path)).is_some_and(|x| &**x == id)
        {
            self.by_log.remove(&log_key(&path));
        }
        let Some(p) = &c.process else { return };
        for key in [(NsKind::Mnt, p.namespaces.mnt), (NsKind::Pid, p.namespaces.pid)] {
            if let Some(ids) = self.by_ns.get_mut(&key) {
                ids.retain(|x| &**x != id);
                if ids.is_empty() {
                    self.by_ns.remove(&key);
                }
            }
        }
        if self.by_cgroup.get(&p.cgroup_id).is_some_and(|x| &**x == id) {
            self.by_cgroup.remove(&p.cgroup_id);
        }
        if let Some(uses) = self.by_pid.get_mut(&p.pid) {
            uses.retain(|u| &*u.id != id);
            if uses.is_empty() {
                self.by_pid.remove(&p.pid);
            }
        }
    }

    /// Drops tombstones past the retention, then, while over a bound, the oldest of the
    /// pod that holds the most of it: a pod whose records are large (annotations up to
    /// the API server's 256 KiB) or many gives up its own first.
    pub(super) fn expire(&mut self, now: SystemTime, cfg: &LookupConfig, ops: &mut Vec<TombstoneOp>) {
        let cutoff = now.checked_sub(cfg.retention).unwrap_or(std::time::UNIX_EPOCH);
        self.addresses.expire(cutoff);
        while let Some(id) = self.order.front().cloned() {
            if self.tombs[&id].removed_at >= cutoff {
                break;
            }
            self.drop_tomb(&id);
            ops.push(TombstoneOp::Delete(id.to_string()));
        }
        loop {
            let by_bytes = self.tomb_bytes > cfg.max_bytes;
            if !by_bytes && self.tombs.len() <= cfg.max_tombstones {
                break;
            }
            let heaviest = self
                .pod_tombs
                .iter()
                .max_by_key(|(_, s)| if by_bytes { s.bytes } else { s.count })
                .map(|(pod, _)| pod.clone());
            let Some(pod) = heaviest else { break };
            let Some(id) = self.order.iter().find(|id| self.tombs[*id].pod == pod).cloned() else { break };
            self.drop_tomb(&id);
            ops.push(TombstoneOp::Delete(id.to_string()));
        }
    }
}

/// Whether `path` (a kubelet log file, `…/<namespace>_<name>_<uid>/<container>/<n>.log`)
/// is in pod `pod`'s own directory, under container `container`'s.
pub(super) fn owns_log_path(path: &str, pod: &PodStatus, container: &str) -> bool {
    let mut dirs = path.rsplit('/').skip(1);
    let (Some(cdir), Some(pdir)) = (dirs.next(), dirs.next()) else { return false };
    cdir == container && pdir == format!("{}_{}_{}", pod.namespace, pod.name, pod.uid)
}

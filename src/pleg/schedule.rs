//! The relister's one schedule of reads to come: every "read this again later" — a pod
//! the stream named, a pod a reader waits on, a pod whose read failed, a container
//! whose exit status the runtime lost, a sandbox the runtime said deleted — is a
//! [`ScheduleRequest`] for a [`Read`] at a time. Requests for the same read merge: the
//! earliest time wins and every reason given is kept, so a read is asked for once however
//! many paths ask. The full relist keeps its own period; everything else the relister
//! does later is here, and the run loop sleeps until [`Scheduler::next_at`].

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::hash::Hash;

use tokio::time::Instant;

use super::hints::Hint;
use crate::model::event::EventSource;

/// What the relister reads.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Read {
    /// A pod, listed alone and inspected.
    Pod(String),
    /// One container's status, for an exit status the runtime lost.
    ExitStatus(String),
    /// One sandbox's status, for a sandbox the runtime said deleted.
    DeletedSandbox(String),
}

/// Why a read was asked for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Reason {
    /// The runtime's event stream named the pod.
    StreamEvent,
    /// A reader waits on the pod (`GetPodStatus` with a `min_timestamp`).
    Waiting,
    /// The pod's last read failed; its events wait for one that succeeds.
    FailedRead,
    /// A re-read of a container or sandbox found it changed: its pod is read in full.
    Reread,
    /// Asked for by a caller of [`super::generic::GenericPleg::relist_pods`].
    Asked,
    /// A container's exit status the runtime lost, read again in case it amends it.
    LostExit,
    /// A sandbox the runtime said deleted, read again until it is gone.
    SandboxDeleted,
}

/// What merges when a read is asked for again.
pub trait Merge {
    /// Takes in what a later request for the same read says.
    fn merge(&mut self, other: Self);
}

/// The reasons for a read and, for a pod, what the stream named in it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Why {
    /// Every reason given.
    pub reasons: BTreeSet<Reason>,
    /// Sandbox ids the stream named (read with the pod's listing).
    pub sandbox_ids: BTreeSet<String>,
    /// Container ids the stream named.
    pub container_ids: BTreeSet<String>,
    /// When the first request arrived.
    pub first_seen: Instant,
}

impl Why {
    /// One reason, nothing named.
    pub fn because(reason: Reason, now: Instant) -> Self {
        Self {
            reasons: BTreeSet::from([reason]),
            sandbox_ids: BTreeSet::new(),
            container_ids: BTreeSet::new(),
            first_seen: now,
        }
    }

    /// A pod read the stream asked for, with the ids it named.
    pub fn of_hint(hint: Hint) -> Self {
        let reason = if hint.source == EventSource::CriEvent { Reason::StreamEvent } else { Reason::Asked };
        Self {
            reasons: BTreeSet::from([reason]),
            sandbox_ids: hint.sandbox_ids,
            container_ids: hint.container_ids,
            first_seen: hint.first_seen,
        }
    }

    /// Whether `reason` is among the reasons.
    pub fn has(&self, reason: Reason) -> bool {
        self.reasons.contains(&reason)
    }

    /// Whether a reader waiting is the only reason.
    pub fn only_waiting(&self) -> bool {
        self.reasons.len() == 1 && self.has(Reason::Waiting)
    }

    /// Whether the read is paced: a reader waits, and nothing but a failed read (whose
    /// own retry comes later) asks for it now. A reader cannot make plegd read a pod
    /// whose reads fail faster than the pace.
    pub fn paced(&self) -> bool {
        self.has(Reason::Waiting) && self.reasons.iter().all(|r| matches!(r, Reason::Waiting | Reason::FailedRead))
    }

    /// The pod read this asks for, as the relister's targeted read takes it: announced by
    /// the stream when the stream named it (what it finds is then no miss of the stream).
    pub fn into_hint(self) -> Hint {
        let source = if self.has(Reason::StreamEvent) { EventSource::CriEvent } else { EventSource::PodRelist };
        Hint { source, first_seen: self.first_seen, sandbox_ids: self.sandbox_ids, container_ids: self.container_ids }
    }
}

impl Merge for Why {
    fn merge(&mut self, other: Self) {
        self.reasons.extend(other.reasons);
        self.sandbox_ids.extend(other.sandbox_ids);
        self.container_ids.extend(other.container_ids);
        self.first_seen = self.first_seen.min(other.first_seen);
    }
}

impl Merge for () {
    fn merge(&mut self, _: Self) {}
}

/// A request to run `message` for `key` at `run_at`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ScheduleRequest<K, M> {
    /// What to run.
    pub key: K,
    /// What the request says.
    pub message: M,
    /// When.
    pub run_at: Instant,
}

/// Scheduled requests, one per key; the earliest time asked for wins.
#[derive(Debug)]
pub struct Scheduler<K, M> {
    entries: HashMap<K, (Instant, M)>,
    by_time: BTreeMap<(Instant, K), ()>,
}

impl<K, M> Default for Scheduler<K, M> {
    fn default() -> Self {
        Self { entries: HashMap::new(), by_time: BTreeMap::new() }
    }
}

impl<K: Clone + Eq + Hash + Ord, M: Merge> Scheduler<K, M> {
    /// Schedules `message` for `key` at `run_at`. A key already scheduled keeps the
    /// earlier of the two times and merges the messages.
    pub fn schedule(&mut self, key: K, message: M, run_at: Instant) {
        match self.entries.get_mut(&key) {
            Some((at, held)) => {
                held.merge(message);
                if run_at < *at {
                    self.by_time.remove(&(*at, key.clone()));
                    *at = run_at;
                    self.by_time.insert((run_at, key), ());
                }
            }
            None => {
                self.by_time.insert((run_at, key.clone()), ());
                self.entries.insert(key, (run_at, message));
            }
        }
    }

    /// When the earliest request is due.
    pub fn next_at(&self) -> Option<Instant> {
        self.by_time.keys().next().map(|(at, _)| *at)
    }

    /// Takes every request due at `now`, earliest first.
    pub fn take_due(&mut self, now: Instant) -> Vec<ScheduleRequest<K, M>> {
        let mut due = Vec::new();
        while let Some(((at, _), ())) = self.by_time.first_key_value() {
            if *at > now {
                break;
            }
            let ((run_at, key), ()) = self.by_time.pop_first().expect("checked");
            let (_, message) = self.entries.remove(&key).expect("indexed");
            due.push(ScheduleRequest { key, message, run_at });
        }
        due
    }

    /// Takes every request, due or not, that `pick` accepts.
    pub fn take_where(&mut self, pick: impl Fn(&K, &M) -> bool) -> Vec<ScheduleRequest<K, M>> {
        let keys: Vec<K> = self.entries.iter().filter(|(k, (_, m))| pick(k, m)).map(|(k, _)| k.clone()).collect();
        let mut taken: Vec<_> = keys.into_iter().filter_map(|k| self.remove(&k)).collect();
        taken.sort_by(|a, b| (a.run_at, &a.key).cmp(&(b.run_at, &b.key)));
        taken
    }

    /// Takes the request for `key`, if any.
    pub fn remove(&mut self, key: &K) -> Option<ScheduleRequest<K, M>> {
        let (run_at, message) = self.entries.remove(key)?;
        self.by_time.remove(&(run_at, key.clone()));
        Some(ScheduleRequest { key: key.clone(), message, run_at })
    }

    /// The message scheduled for `key`, if any.
    pub fn get(&self, key: &K) -> Option<&M> {
        self.entries.get(key).map(|(_, m)| m)
    }

    /// Whether any request satisfies `pred`.
    pub fn any(&self, pred: impl Fn(&K, &M) -> bool) -> bool {
        self.entries.iter().any(|(k, (_, m))| pred(k, m))
    }

    /// Requests scheduled.
    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether nothing is scheduled.
    #[cfg(test)]
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }
}

#[cfg(test)]
mod tests;

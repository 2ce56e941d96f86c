//! The relister's one schedule of reads to come: every read the relister does — the full
//! relist at its period or when asked for, a pod the stream named, a pod a reader waits
//! on, a pod whose read failed, a container whose exit status the runtime lost, a sandbox
//! the runtime said deleted — is a [`ScheduleRequest`] for a [`Read`] at a time. Requests
//! arrive through the relister's [`super::inbox`] or from the relister itself. Requests
//! for the same read merge: the earliest time wins and every reason given is kept, so a
//! read is asked for once however many paths ask. The run loop sleeps until
//! [`Scheduler::next_at`]. How a book's re-reads are paced ([`Pace`]) is here too.

use std::collections::{BTreeSet, HashMap};
use std::hash::Hash;
use std::time::Duration;

use tokio::time::Instant;

use futures_util::future::BoxFuture;

use crate::cri::RuntimeService;
use crate::model::event::EventSource;

/// What the relister reads.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Read {
    /// Every pod: a full relist.
    Full,
    /// A pod, listed alone and inspected.
    Pod(String),
    /// One status an entry of a book is read again for: a container's or a sandbox's.
    Status(StatusBook, String),
}

/// The books whose entries are read again one status at a time ([`Book`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum StatusBook {
    /// Dead containers whose exit status the runtime may still amend
    /// ([`super::amended_exits`]): a `ContainerStatus`.
    AmendedExits,
    /// Sandboxes the runtime said deleted ([`super::deleted_sandboxes`]): a
    /// `PodSandboxStatus`.
    DeletedSandboxes,
    /// What the runtime said through NRI ahead of its status ([`super::early_words`]):
    /// a `ContainerStatus` or a `PodSandboxStatus`.
    EarlyWords,
}

/// Why a read was asked for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Reason {
    /// The full relist's period came (or the relister started).
    Period,
    /// Someone asked for a full relist (`PlegHandle::request_relist`).
    Requested,
    /// The event stream came up: a full relist repairs what it missed while down.
    StreamUp,
    /// The event stream came back after failing: the runtime may still be recovering
    /// state it sends no events for, so fast full relists follow for a while.
    StreamRecovered,
    /// The event stream went up or down: the full-relist period changed.
    StreamChanged,
    /// The stream named a container no record knows, without its pod.
    UnknownContainer,
    /// The inbox overflowed: what it dropped is read by a full relist.
    InboxFull,
    /// The runtime's event stream named the pod.
    StreamEvent,
    /// An NRI plugin call from the runtime named the pod.
    NriEvent,
    /// The runtime's NRI synchronization at a plugin's registration: a full relist.
    NriSynchronized,
    /// A reader waits on the pod (`GetPodStatus` with a `min_timestamp`).
    Waiting,
    /// The pod's last read failed; its events wait for one that succeeds.
    FailedRead,
    /// A re-read of a container or sandbox found it changed: its pod is read in full.
    Reread,
    /// A dead container's exit status the runtime may still amend (lost, or fresh), read
    /// again until it settles.
    UnsettledExit,
    /// A sandbox the runtime said deleted, read again until it is gone.
    SandboxDeleted,
    /// What the runtime said through NRI ahead of its status, read again until the
    /// status shows it.
    EarlyWord,
}

/// What merges when a read is asked for again.
pub trait Merge {
    /// Takes in what a later request for the same read says.
    fn merge(&mut self, other: Self);
}

/// The reasons for a read and, for a pod, what the stream said of it.
#[derive(Clone, Debug)]
pub struct Why {
    /// Every reason given.
    pub reasons: BTreeSet<Reason>,
    /// Sandbox ids the stream named (read with the pod's listing).
    pub sandbox_ids: BTreeSet<String>,
    /// Container ids the stream named (may include sandbox ids: the runtime sends
    /// sandbox events under the sandbox's id).
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

    /// A read the stream asked for, naming the sandbox and the container the event was
    /// about, where known.
    pub fn stream_event(sandbox_id: Option<&str>, container_id: Option<&str>, now: Instant) -> Self {
        Self::named(Reason::StreamEvent, sandbox_id, container_id, now)
    }

    /// A read an NRI call asked for, naming the sandbox and the container it was about.
    pub fn nri_event(sandbox_id: Option<&str>, container_id: Option<&str>, now: Instant) -> Self {
        Self::named(Reason::NriEvent, sandbox_id, container_id, now)
    }

    fn named(reason: Reason, sandbox_id: Option<&str>, container_id: Option<&str>, now: Instant) -> Self {
        let ids = |id: Option<&str>| id.filter(|s| !s.is_empty()).map(str::to_owned).into_iter().collect();
        Self { sandbox_ids: ids(sandbox_id), container_ids: ids(container_id), ..Self::because(reason, now) }
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

    /// Which path the read counts as: the stream's, when the stream named the pod or
    /// said its sandbox deleted (what it finds is then no miss of the stream), else NRI's when an NRI call named it (or
    /// said something of it ahead of its status), else a relist of the pod alone.
    pub fn source(&self) -> EventSource {
        if self.has(Reason::StreamEvent) || self.has(Reason::SandboxDeleted) {
            EventSource::CriEvent
        } else if self.has(Reason::NriEvent) || self.has(Reason::EarlyWord) {
            EventSource::Nri
        } else {
            EventSource::PodRelist
        }
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
    by_time: BTreeSet<(Instant, K)>,
}

impl<K, M> Default for Scheduler<K, M> {
    fn default() -> Self {
        Self { entries: HashMap::new(), by_time: BTreeSet::new() }
    }
}

impl<K: Clone + Eq + Hash + Ord, M: Merge> Scheduler<K, M> {
    /// Schedules `message` for `key` at `run_at`. A key already scheduled keeps the
    /// earlier of the two times and merges the messages; returns whether it did.
    pub fn schedule(&mut self, key: K, message: M, run_at: Instant) -> bool {
        match self.entries.get_mut(&key) {
            Some((at, held)) => {
                held.merge(message);
                if run_at < *at {
                    self.by_time.remove(&(*at, key.clone()));
                    *at = run_at;
                    self.by_time.insert((run_at, key));
                }
                true
            }
            None => {
                self.by_time.insert((run_at, key.clone()));
                self.entries.insert(key, (run_at, message));
                false
            }
        }
    }

    /// When the earliest request is due.
    pub fn next_at(&self) -> Option<Instant> {
        self.by_time.first().map(|(at, _)| *at)
    }

    /// Takes every request due at `now`, earliest first.
    pub fn take_due(&mut self, now: Instant) -> Vec<ScheduleRequest<K, M>> {
        let mut due = Vec::new();
        while let Some((at, _)) = self.by_time.first() {
            if *at > now {
                break;
            }
            let (run_at, key) = self.by_time.pop_first().expect("checked");
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

    /// When `key` is scheduled, if it is.
    pub fn at(&self, key: &K) -> Option<Instant> {
        self.entries.get(key).map(|(at, _)| *at)
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

/// Pods a read found gone lately, so that a reader waiting on one is answered by a read
/// of it (absent, or back) rather than by the next full relist, which a trusted stream
/// puts up to its check period away. Bounded by count and age.
#[derive(Default)]
pub(super) struct RecentlyGone {
    at: HashMap<String, Instant>,
    order: std::collections::VecDeque<(Instant, String)>,
}

impl RecentlyGone {
    /// Pods followed at most.
    const MAX: usize = 4096;
    /// How long a pod is followed after it was found gone.
    const FOR: Duration = Duration::from_secs(600);

    /// A read found pod `uid` gone.
    pub fn note(&mut self, uid: &str, now: Instant) {
        self.at.insert(uid.to_owned(), now);
        self.order.push_back((now, uid.to_owned()));
        while self
            .order
            .front()
            .is_some_and(|(t, _)| now.duration_since(*t) >= Self::FOR || self.order.len() > Self::MAX)
        {
            let (t, id) = self.order.pop_front().expect("checked");
            if self.at.get(&id) == Some(&t) {
                self.at.remove(&id);
            }
        }
    }

    /// Whether pod `uid` was found gone lately.
    pub fn contains(&self, uid: &str, now: Instant) -> bool {
        self.at.get(uid).is_some_and(|t| now.duration_since(*t) < Self::FOR)
    }
}

/// What a re-read of one container's or sandbox's status found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Reread {
    /// The same as before.
    Same,
    /// Changed, or gone: its pod is to be read in full.
    Changed,
    /// The read failed: tried again, not counted.
    Failed,
}

/// A book whose entries the relister reads again, one status each, on a schedule
/// ([`Read::Status`]): what the re-read of an entry is, and what its outcome means for
/// the next one.
pub(super) trait Book {
    /// Why its re-reads are scheduled.
    fn reason(&self) -> Reason;
    /// The pod of entry `id`, while a re-read of it is to come.
    fn pod_of(&self, id: &str) -> Option<&str>;
    /// The re-read of entry `id` from `runtime` (within `timeout`), while one is to come;
    /// made while the book is at hand, run without it.
    fn reread<R: RuntimeService>(&self, id: &str, runtime: R, timeout: Duration) -> Option<BoxFuture<'static, Reread>>
    where
        Self: Sized;
    /// Records a re-read of entry `id`; when the next is due (none: done).
    fn read(&mut self, id: &str, found: Reread) -> Option<Instant>;
}

/// An entry of a book the relister reads again (the lost exit statuses,
/// [`super::amended_exits`], and the sandboxes said deleted, [`super::deleted_sandboxes`]):
/// its pod, and how its re-reads went.
pub(super) struct Rereads {
    pub uid: String,
    /// When it was entered.
    pub since: Instant,
    /// No re-read is to come (all done, or given up).
    pub done: bool,
    /// Re-reads done.
    pub reads: u32,
    /// Re-reads failed in a row.
    pub fails: u32,
}

/// How a book reads again: the first re-read this long after it starts, each next one
/// twice as long after the one before, `reads` in all; a failed read retried 1, 2, 4 …
/// `2^max_doubling` firsts later, until `recent` after the entry was made.
pub(super) struct Pace {
    pub first: Duration,
    pub reads: u32,
    pub max_doubling: u32,
    pub recent: Duration,
}

impl Rereads {
    pub fn new(uid: &str, now: Instant) -> Self {
        Self { uid: uid.to_owned(), since: now, done: false, reads: 0, fails: 0 }
    }

    /// Records a re-read that found the same (counted; none is next after the last) or
    /// failed (not counted; none is next past `recent`), and says when the next is due.
    /// A changed one is the book's.
    pub fn read(&mut self, found: Reread, pace: &Pace) -> Option<Instant> {
        let now = Instant::now();
        let next = match found {
            Reread::Same => {
                self.fails = 0;
                self.reads += 1;
                (self.reads < pace.reads).then(|| now + pace.first * 2u32.pow(self.reads))
            }
            Reread::Failed => {
                let wait = pace.first * 2u32.pow(self.fails.min(pace.max_doubling));
                self.fails += 1;
                (now.duration_since(self.since) < pace.recent).then(|| now + wait)
            }
            Reread::Changed => None,
        };
        self.done = next.is_none();
        next
    }
}

#[cfg(test)]
mod tests;

//! The dirty-pod set between the CRI event-stream consumer and the relister: level
//! triggered, coalescing per pod, bounded by the number of pods, so it cannot overflow
//! the way the kubelet's 1000-slot event channel does.

use std::collections::{BTreeSet, HashMap};
use std::sync::{Arc, Mutex};

use tokio::sync::Notify;
use tokio::time::Instant;

use crate::model::event::EventSource;

/// Stopped containers' words kept between two takes at most (a relister that far
/// behind reads the pods anyway; the words only add the exit status).
const MAX_PENDING_WORDS: usize = 4096;

/// Why a pod should be relisted.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Hint {
    /// Which path asked.
    pub source: EventSource,
    /// When the first still-pending hint for the pod arrived.
    pub first_seen: Instant,
    /// Sandbox ids the hints named.
    pub sandbox_ids: BTreeSet<String>,
    /// Container ids the hints named (may include sandbox ids: the runtime sends
    /// sandbox events under the sandbox's id).
    pub container_ids: BTreeSet<String>,
}

impl Hint {
    /// A read of one pod the relister asks for itself (a retry, a reader waiting on the
    /// pod, an exit status the runtime may amend), with nothing named.
    pub fn pod_relist(now: Instant) -> Self {
        Self {
            source: EventSource::PodRelist,
            first_seen: now,
            sandbox_ids: BTreeSet::new(),
            container_ids: BTreeSet::new(),
        }
    }
}

/// A stopped container's final status from the stream, with its pod's identity.
#[derive(Clone, Debug)]
pub struct FinalStatus {
    /// The pod's UID.
    pub uid: String,
    /// The pod's metadata (namespace, name) as the sandbox's status gave it.
    pub pod: crate::proto::runtime::PodSandboxMetadata,
    /// The pod's labels.
    pub labels: std::collections::HashMap<String, String>,
    /// The container's final status.
    pub status: crate::proto::runtime::ContainerStatus,
}

/// Everything pending at the time of a [`PodHints::take`].
#[derive(Debug, Default)]
pub struct Pending {
    /// Pods by UID.
    pub pods: HashMap<String, Hint>,
    /// Container ids whose pod the hint did not name.
    pub containers: Vec<(String, Instant)>,
    /// Whether a full relist was asked for.
    pub full: bool,
    /// Whether the stream came back after failing, so the runtime may still be
    /// recovering state it will not send events for.
    pub recovered: bool,
    /// The final status the runtime's stream carried for containers that stopped, by
    /// pod UID: a container removed before plegd reads it still dies with its exit code.
    pub final_statuses: Vec<FinalStatus>,
    /// Sandboxes (pod UID, sandbox id) the stream said deleted.
    pub deleted_sandboxes: Vec<(String, String)>,
}

#[derive(Default)]
struct Inner {
    pending: Pending,
    coalesced: u64,
}

/// The shared dirty set. Cheap to clone. Whatever it takes in wakes the relister, through
/// the one [`Notify`] the relister waits on (shared with the cache's waiting readers and
/// the stream's state changes).
#[derive(Clone, Default)]
pub struct PodHints {
    inner: Arc<Mutex<Inner>>,
    notify: Arc<Notify>,
}

impl PodHints {
    /// Hints that wake whoever waits on `wake`.
    pub fn waking(wake: Arc<Notify>) -> Self {
        Self { inner: Arc::default(), notify: wake }
    }

    /// Wakes the relister (the stream's state changed).
    pub fn wake(&self) {
        self.notify.notify_one();
    }

    /// Marks a pod dirty, naming the sandbox and the container the change was about
    /// where known. Hints for a pod that is already dirty coalesce (the earliest
    /// arrival time is kept, the ids add up).
    pub fn pod(&self, uid: &str, sandbox_id: Option<&str>, container_id: Option<&str>, source: EventSource) {
        {
            let mut inner = self.inner.lock().expect("hints lock");
            let now = Instant::now();
            let mut coalesced = false;
            let hint = inner.pending.pods.entry(uid.to_owned()).and_modify(|_| coalesced = true).or_insert_with(|| {
                Hint { source, first_seen: now, sandbox_ids: BTreeSet::new(), container_ids: BTreeSet::new() }
            });
            if let Some(id) = sandbox_id.filter(|s| !s.is_empty()) {
                hint.sandbox_ids.insert(id.to_owned());
            }
            if let Some(id) = container_id.filter(|s| !s.is_empty()) {
                hint.container_ids.insert(id.to_owned());
            }
            if coalesced {
                inner.coalesced += 1;
            }
        }
        self.notify.notify_one();
    }

    /// Keeps the final status the stream carried for a container that stopped, with its
    /// pod's metadata (the pod is marked dirty by [`PodHints::pod`] as well).
    pub fn final_statuses(
        &self,
        sandbox: &crate::proto::runtime::PodSandboxStatus,
        status: crate::proto::runtime::ContainerStatus,
    ) {
        let Some(meta) = &sandbox.metadata else { return };
        let mut inner = self.inner.lock().expect("hints lock");
        // Bounded like the dirty set: a container's words replace its earlier ones.
        let words = &mut inner.pending.final_statuses;
        words.retain(|w| w.status.id != status.id);
        if words.len() < MAX_PENDING_WORDS {
            words.push(FinalStatus {
                uid: meta.uid.clone(),
                pod: meta.clone(),
                labels: sandbox.labels.clone(),
                status,
            });
        }
    }

    /// Takes the words pending for the containers `ids` only: a read that found them
    /// gone settles them now. Every other container's words wait for a read that comes
    /// after them (matched against an older read they would be wrong).
    pub fn take_final_statuses_for(&self, ids: &[String]) -> Vec<FinalStatus> {
        let mut inner = self.inner.lock().expect("hints lock");
        let (mine, rest) =
            std::mem::take(&mut inner.pending.final_statuses).into_iter().partition(|w| ids.contains(&w.status.id));
        inner.pending.final_statuses = rest;
        mine
    }

    /// Notes that the runtime said sandbox `id` of pod `uid` deleted (the pod is marked
    /// dirty by [`PodHints::pod`] as well): containerd 2.x says so before the sandbox
    /// leaves its store, so the relister reads it again until it is gone.
    pub fn sandbox_deleted(&self, uid: &str, id: &str) {
        let mut inner = self.inner.lock().expect("hints lock");
        // Bounded like the dirty set.
        let deleted = &mut inner.pending.deleted_sandboxes;
        if deleted.len() < MAX_PENDING_WORDS {
            deleted.push((uid.to_owned(), id.to_owned()));
        }
    }

    /// Marks the pod of a container dirty when only the container id is known.
    pub fn container(&self, id: &str) {
        self.inner.lock().expect("hints lock").pending.containers.push((id.to_owned(), Instant::now()));
        self.notify.notify_one();
    }

    /// Asks for a full relist.
    pub fn full(&self) {
        self.inner.lock().expect("hints lock").pending.full = true;
        self.notify.notify_one();
    }

    /// Asks for a full relist because the stream came back after failing.
    pub fn full_after_outage(&self) {
        {
            let mut inner = self.inner.lock().expect("hints lock");
            inner.pending.full = true;
            inner.pending.recovered = true;
        }
        self.notify.notify_one();
    }

    /// Takes everything pending.
    pub fn take(&self) -> Pending {
        std::mem::take(&mut self.inner.lock().expect("hints lock").pending)
    }

    /// Whether anything is pending.
    pub fn is_empty(&self) -> bool {
        let inner = self.inner.lock().expect("hints lock");
        inner.pending.pods.is_empty() && inner.pending.containers.is_empty() && !inner.pending.full
    }

    /// Hints that landed on an already-dirty pod.
    pub fn coalesced(&self) -> u64 {
        self.inner.lock().expect("hints lock").coalesced
    }

    /// Resolves when something may be pending (a permit is kept if nobody waits).
    pub async fn notified(&self) {
        self.notify.notified().await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn hints_for_one_pod_coalesce_and_keep_the_first_arrival() {
        let h = PodHints::default();
        h.pod("a", Some("s1"), Some("c1"), EventSource::CriEvent);
        let first = Instant::now();
        tokio::time::advance(std::time::Duration::from_millis(5)).await;
        h.pod("a", Some("s2"), Some("c2"), EventSource::CriEvent);
        h.pod("b", None, None, EventSource::CriEvent);
        h.notified().await;
        let p = h.take();
        assert_eq!(p.pods.len(), 2);
        assert_eq!(p.pods["a"].first_seen, first);
        assert_eq!(p.pods["a"].sandbox_ids.len(), 2);
        assert_eq!(p.pods["a"].container_ids, BTreeSet::from(["c1".to_owned(), "c2".to_owned()]));
        assert!(p.pods["b"].container_ids.is_empty());
        assert_eq!(h.coalesced(), 1);
        assert!(h.is_empty());
    }
}

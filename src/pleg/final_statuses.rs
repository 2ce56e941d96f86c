//! A stopped container's final status (exit code, reason, finish time)
//! the runtime's `CONTAINER_STOPPED` event carries, kept until a read of the pod settles
//! it. The event stays a hint — the read is still the truth — but when the read no longer
//! finds the container (removed within milliseconds, or created, stopped and removed
//! between two reads), its `CONTAINER_DIED` carries this final status rather than no exit
//! status, or nothing at all. Owned by the relister; bounded by count and age.

use std::collections::{HashMap, HashSet, VecDeque};
use std::time::Duration;

use tokio::time::Instant;

use super::records::Transition;
use crate::labels::Labels;
use crate::model::event::EventType;
use crate::model::{ContainerStatus, PodStatus};

/// Final statuses older than this are dropped unread (their pod was read long since).
const TTL: Duration = Duration::from_secs(600);
/// At most this many final statuses, and as many remembered removals, are kept.
const MAX: usize = 4096;

/// A stopped container's final status as the stream carried it, with its pod's identity.
#[derive(Clone, Debug)]
pub struct FinalStatus {
    /// The pod's UID.
    pub uid: String,
    /// The pod's metadata (namespace, name) as the sandbox's status gave it.
    pub pod: crate::proto::runtime::PodSandboxMetadata,
    /// The pod's labels.
    pub labels: HashMap<String, String>,
    /// The container's final status.
    pub status: crate::proto::runtime::ContainerStatus,
}

impl FinalStatus {
    /// The final status a `CONTAINER_STOPPED` event carries for its container, if any.
    pub fn of_event(ev: &crate::proto::runtime::ContainerEventResponse) -> Option<Self> {
        use crate::proto::runtime as cri;
        if ev.container_event_type != cri::ContainerEventType::ContainerStoppedEvent as i32 {
            return None;
        }
        let sandbox = ev.pod_sandbox_status.as_ref()?;
        let meta = sandbox.metadata.as_ref()?;
        let last = ev
            .containers_statuses
            .iter()
            .find(|c| c.id == ev.container_id && c.state == cri::ContainerState::ContainerExited as i32)?;
        Some(Self { uid: meta.uid.clone(), pod: meta.clone(), labels: sandbox.labels.clone(), status: last.clone() })
    }
}

/// A pod's identity as the runtime's event gave it.
#[derive(Clone, Debug)]
pub struct PodIdentity {
    /// The pod's namespace.
    pub namespace: String,
    /// The pod's name.
    pub name: String,
    /// The pod's labels.
    pub labels: Labels,
}

/// One container's final status, with its pod's identity for a pod the records never knew.
struct Kept {
    uid: String,
    pod: PodIdentity,
    at: Instant,
    status: ContainerStatus,
}

/// What a read of a pod settles: the final statuses of its containers gone from the read (for
/// their `CONTAINER_DIED`), and the transitions of containers the records never knew.
#[derive(Default)]
pub(super) struct Settled {
    /// Final statuses by container id.
    pub final_statuses: HashMap<String, ContainerStatus>,
    /// `CONTAINER_DIED` and `CONTAINER_REMOVED` for containers no read ever saw.
    pub unseen: Vec<Transition>,
}

/// The relister's book of final statuses.
#[derive(Default)]
pub(super) struct FinalStatuses {
    kept: HashMap<String, Kept>,
    /// Containers reported removed lately: final statuses that arrive after the removal (a
    /// runtime replaying what a broken stream missed) must not make them die twice.
    removed: (VecDeque<(Instant, String)>, HashSet<String>),
}

impl FinalStatuses {
    /// Keeps final statuses the stream carried (a container's replace its earlier ones);
    /// drops stale ones.
    pub fn keep(&mut self, incoming: Vec<FinalStatus>) {
        let now = Instant::now();
        for FinalStatus { uid, pod: meta, labels, status } in incoming {
            let status = ContainerStatus::from_cri(&status);
            let pod = PodIdentity { namespace: meta.namespace, name: meta.name, labels: labels.iter().collect() };
            self.kept.insert(status.id.clone(), Kept { uid, pod, at: now, status });
        }
        if self.kept.is_empty() {
            return;
        }
        self.kept.retain(|_, w| now.duration_since(w.at) < TTL);
        if self.kept.len() > MAX {
            // The oldest go, in one pass.
            let mut by_age: Vec<(Instant, String)> = self.kept.iter().map(|(id, w)| (w.at, id.clone())).collect();
            by_age.sort();
            for (_, id) in by_age.iter().take(self.kept.len() - MAX) {
                self.kept.remove(id);
            }
        }
    }

    /// The containers `transitions` report dead that are gone from the read with no
    /// final statuses kept for them: their `CONTAINER_DIED` would carry no exit status.
    pub fn unheard(&self, transitions: &[Transition], status: Option<&PodStatus>) -> Vec<String> {
        transitions
            .iter()
            .filter(|t| {
                t.kind == EventType::ContainerDied
                    && !t.is_sandbox
                    && !self.kept.contains_key(&t.id)
                    && status.is_none_or(|s| s.containers.iter().all(|c| c.id != t.id))
            })
            .map(|t| t.id.clone())
            .collect()
    }

    /// Whether no final status waits.
    pub fn is_empty(&self) -> bool {
        self.kept.is_empty()
    }

    /// The pods final statuses wait for.
    pub fn pods(&self) -> impl Iterator<Item = &String> {
        self.kept.values().map(|w| &w.uid)
    }

    /// Keeps only the final statuses of pods `keep` accepts.
    pub fn retain_pods(&mut self, keep: impl Fn(&str) -> bool) {
        self.kept.retain(|_, w| keep(&w.uid));
    }

    /// The namespace, name and labels the runtime's event gave pod `uid`.
    pub fn identity(&self, uid: &str) -> Option<&PodIdentity> {
        self.kept.values().find(|w| w.uid == uid).map(|w| &w.pod)
    }

    /// Settles pod `uid`'s final statuses against a read of it. A container the read shows has
    /// its own final state: its final status goes. A container gone from the read keeps its exit
    /// for the `CONTAINER_DIED` its transition makes. A container the records never knew
    /// (`known` says no), stopped and removed between two reads, gets the
    /// `CONTAINER_DIED` and `CONTAINER_REMOVED` it would otherwise never have.
    pub fn settle(
        &mut self,
        uid: &str,
        transitions: &[Transition],
        status: Option<&PodStatus>,
        known: impl Fn(&str) -> bool,
    ) -> Settled {
        let mut settled = Settled::default();
        self.note_removed(transitions);
        if self.kept.is_empty() {
            return settled;
        }
        let ids: Vec<String> = self.kept.iter().filter(|(_, w)| w.uid == uid).map(|(id, _)| id.clone()).collect();
        for id in ids {
            let w = self.kept.remove(&id).expect("listed above");
            if status.is_some_and(|s| s.containers.iter().any(|c| c.id == id)) {
                continue;
            }
            let named = transitions.iter().any(|t| t.id == id);
            if !named && !known(&id) && !self.removed.1.contains(&id) {
                for kind in [EventType::ContainerDied, EventType::ContainerRemoved] {
                    let name = w.status.name.clone();
                    settled.unseen.push(Transition { id: id.clone(), name, is_sandbox: false, kind });
                }
            }
            settled.final_statuses.insert(id, w.status);
        }
        let unseen = std::mem::take(&mut settled.unseen);
        self.note_removed(&unseen);
        settled.unseen = unseen;
        settled
    }

    /// Remembers the containers `transitions` report removed, as long as final statuses are kept.
    fn note_removed(&mut self, transitions: &[Transition]) {
        let now = Instant::now();
        let (order, ids) = &mut self.removed;
        for t in transitions {
            if t.kind == EventType::ContainerRemoved && !t.is_sandbox && ids.insert(t.id.clone()) {
                order.push_back((now, t.id.clone()));
            }
        }
        while order.front().is_some_and(|(at, _)| now.duration_since(*at) >= TTL || ids.len() > MAX) {
            let (_, id) = order.pop_front().expect("checked");
            ids.remove(&id);
        }
    }
}

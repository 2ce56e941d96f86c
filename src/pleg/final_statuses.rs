//! A stopped container's final status (exit code, reason, finish time)
//! the runtime's `CONTAINER_STOPPED` event carries, kept until a read of the pod settles
//! it. The event stays a hint — the read is still the truth — but when the read no longer
//! finds the container (removed within milliseconds, or created, stopped and removed
//! between two reads), its `CONTAINER_DIED` carries this final status rather than no exit
//! status, or nothing at all. Bounded by count and age.
//!
//! A final status goes into the book the moment the stream hears it
//! ([`FinalStatusBook::heard`], stamped with that moment), not through the relister's
//! inbox: a read that finds its container gone uses it however late it came, even while
//! the read's own turn is still under way. A read that still shows the container
//! settles only what was heard before the read began; one heard after waits for a later
//! read (matched against an older read it would be dropped as stale).

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard};
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
    /// When the stream carried it.
    heard_at: Instant,
    status: ContainerStatus,
}

/// The book, shared by the stream's consumer, which enters what it hears, and the
/// relister, which settles it. Cheap to clone.
#[derive(Clone, Default)]
pub struct FinalStatusBook(Arc<Mutex<FinalStatuses>>);

impl FinalStatusBook {
    /// The stream carried `word`: kept from now, stamped now.
    pub fn heard(&self, word: FinalStatus) {
        self.lock().keep(word, Instant::now());
    }

    /// The book; a panic while it was held (the book is consistent after each call)
    /// does not take the stream's consumer down with the relister.
    pub(super) fn lock(&self) -> MutexGuard<'_, FinalStatuses> {
        self.0.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }
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
    /// Keeps a final status the stream carried at `heard_at` (a container's replaces its
    /// earlier one); drops stale ones, and the oldest past [`MAX`].
    fn keep(&mut self, word: FinalStatus, heard_at: Instant) {
        let FinalStatus { uid, pod: meta, labels, status } = word;
        let status = ContainerStatus::from_cri(&status);
        let pod = PodIdentity { namespace: meta.namespace, name: meta.name, labels: labels.iter().collect() };
        self.kept.insert(status.id.clone(), Kept { uid, pod, heard_at, status });
        self.kept.retain(|_, w| heard_at.saturating_duration_since(w.heard_at) < TTL);
        if self.kept.len() > MAX {
            // The oldest go, in one pass.
            let mut by_age: Vec<(Instant, String)> = self.kept.iter().map(|(id, w)| (w.heard_at, id.clone())).collect();
            by_age.sort();
            for (_, id) in by_age.iter().take(self.kept.len() - MAX) {
                self.kept.remove(id);
            }
        }
    }

    /// Whether no final status waits.
    pub fn is_empty(&self) -> bool {
        self.kept.is_empty()
    }

    /// The pods final statuses heard before `at` wait for.
    pub fn pods_heard_before(&self, at: Instant) -> impl Iterator<Item = &String> {
        self.kept.values().filter(move |w| w.heard_at <= at).map(|w| &w.uid)
    }

    /// Keeps only the final statuses heard after `at`, and those of pods `keep` accepts;
    /// drops those older than [`TTL`] either way (a pod whose reads keep failing while
    /// the stream is quiet).
    pub fn retain_pods(&mut self, at: Instant, keep: impl Fn(&str) -> bool) {
        let now = Instant::now();
        self.kept.retain(|_, w| now.saturating_duration_since(w.heard_at) < TTL && (w.heard_at > at || keep(&w.uid)));
    }

    /// The namespace, name and labels the runtime's event gave pod `uid`.
    pub fn identity(&self, uid: &str) -> Option<&PodIdentity> {
        self.kept.values().find(|w| w.uid == uid).map(|w| &w.pod)
    }

    /// Settles pod `uid`'s final statuses against a read of it that began at `read_at`.
    ///
    /// Heard before the read began: a container the read shows has its own final state,
    /// and its final status goes; a container gone from the read keeps its exit for the
    /// `CONTAINER_DIED` its transition makes; a container the records never knew
    /// (`known` says no), stopped and removed between two reads, gets the
    /// `CONTAINER_DIED` and `CONTAINER_REMOVED` it would otherwise never have.
    ///
    /// Heard after the read began, a final status is settled only for a container whose
    /// death this read found gone from the pod (the stream's word was on its way while
    /// the read ran): its `CONTAINER_DIED` carries it. Any other waits for a later read —
    /// this one may predate the container (created, started and stopped since), and
    /// would make it die and go while it still exists.
    pub fn settle(
        &mut self,
        uid: &str,
        read_at: Instant,
        transitions: &[Transition],
        status: Option<&PodStatus>,
        known: impl Fn(&str) -> bool,
    ) -> Settled {
        let mut settled = Settled::default();
        self.note_removed(transitions);
        if self.kept.is_empty() {
            return settled;
        }
        let shown = |id: &str| status.is_some_and(|s| s.containers.iter().any(|c| c.id == id));
        let died_gone = |id: &str| {
            !shown(id) && transitions.iter().any(|t| t.id == id && t.kind == EventType::ContainerDied && !t.is_sandbox)
        };
        let ids: Vec<String> = self
            .kept
            .iter()
            .filter(|(id, w)| w.uid == uid && (w.heard_at <= read_at || died_gone(id)))
            .map(|(id, _)| id.clone())
            .collect();
        for id in ids {
            let w = self.kept.remove(&id).expect("listed above");
            if shown(&id) {
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

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::proto::runtime as cri;

    fn word(id: &str, code: i32) -> FinalStatus {
        let pod = cri::PodSandboxMetadata { name: "p".into(), uid: "u".into(), namespace: "ns".into(), attempt: 0 };
        let status = cri::ContainerStatus {
            id: id.into(),
            metadata: Some(cri::ContainerMetadata { name: id.into(), attempt: 0 }),
            state: cri::ContainerState::ContainerExited as i32,
            exit_code: code,
            ..Default::default()
        };
        FinalStatus { uid: "u".into(), pod, labels: Default::default(), status }
    }

    fn showing(ids: &[&str]) -> PodStatus {
        let mut p = PodStatus::empty("u", "ns", "p");
        for id in ids {
            p.containers.push(Arc::new(ContainerStatus { id: (*id).into(), ..Default::default() }));
        }
        p
    }

    /// Every case of when a final status was heard against the read that settles it:
    /// before or after the read began, its container shown by the read or not, its
    /// death found by the read or not, known to the records or not.
    #[tokio::test(start_paused = true)]
    async fn a_final_status_is_settled_by_the_first_read_that_may_use_it_and_never_by_an_older_one() {
        for heard_before in [true, false] {
            for shown in [true, false] {
                for died in [true, false] {
                    for known in [true, false] {
                        let case = format!("heard_before={heard_before} shown={shown} died={died} known={known}");
                        let book = FinalStatusBook::default();
                        // Time stands still: the word is heard at `heard`.
                        let heard = Instant::now();
                        book.heard(word("c", 7));
                        let ms = Duration::from_millis(1);
                        let read_at = if heard_before { heard + ms } else { heard - ms };
                        let transitions: Vec<Transition> = died
                            .then(|| Transition {
                                id: "c".into(),
                                name: "c".into(),
                                is_sandbox: false,
                                kind: EventType::ContainerDied,
                            })
                            .into_iter()
                            .collect();
                        let status = showing(if shown { &["c"] } else { &[] });
                        let settled = book.lock().settle("u", read_at, &transitions, Some(&status), |_| known);
                        let used = settled.final_statuses.get("c").map(|c| c.exit_code);
                        let waits = !book.lock().is_empty();
                        let want_used = !shown && (heard_before || died);
                        assert_eq!(used, want_used.then_some(7), "{case}");
                        assert_eq!(waits, !heard_before && !want_used, "{case}: waits for a later read");
                        let unseen = settled.unseen.iter().map(|t| t.kind).collect::<Vec<_>>();
                        let want_unseen = want_used && !died && !known;
                        assert_eq!(
                            unseen,
                            if want_unseen {
                                vec![EventType::ContainerDied, EventType::ContainerRemoved]
                            } else {
                                vec![]
                            },
                            "{case}"
                        );
                        if waits {
                            // The next read, after it was heard, settles it.
                            let again = book.lock().settle("u", heard + ms, &[], Some(&status), |_| true);
                            assert_eq!(again.final_statuses.contains_key("c"), !shown, "{case}");
                            assert!(book.lock().is_empty(), "{case}");
                        }
                    }
                }
            }
        }
    }
}

//! The journal of published events: one revision per event, a bounded ring for
//! resuming watchers, a view of every pod consistent with the latest revision for
//! snapshots, and fan-out to subscribers through bounded buffers that never block the
//! publisher (a full buffer marks the subscriber for a reset instead).

use std::collections::{BTreeMap, HashSet, VecDeque};
use std::sync::atomic::{AtomicU8, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::SystemTime;

use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use tokio::sync::mpsc;

use crate::labels::Labels;
use crate::model::PodStatus;
use crate::model::event::{EventType, PodLifecycleEvent};
use crate::selector::Selector;

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
}

impl Entry {
    fn new(revision: u64, event: PodLifecycleEvent, meta: Arc<PodMeta>) -> Self {
        Self { revision, event: Arc::new(event), meta }
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
    Replay(Vec<Arc<Entry>>),
}

/// A live subscription. Dropping it unsubscribes.
pub struct Subscription {
    /// How it begins (and, if a resume was refused, why a snapshot comes instead).
    pub start: Start,
    /// Set when a requested resume was refused.
    pub reset: Option<ResetReason>,
    /// Live entries after the start.
    pub rx: mpsc::Receiver<Arc<Entry>>,
    overflowed: Arc<AtomicU8>,
    id: u64,
    journal: Journal,
}

/// Why the journal dropped a subscriber: its buffer overflowed.
const SLOW: u8 = 1;
/// Why the journal dropped a subscriber: a pod it watched changed labels and left its
/// selection.
const LEFT_SELECTION: u8 = 2;

/// Journal metrics.
#[derive(Clone, Default)]
pub struct JournalMetrics {
    /// `plegd_journal_revision`.
    pub revision: Gauge,
    /// `plegd_watch_resets_total{reason}`.
    pub resets: Family<ReasonLabel, Counter>,
}

/// Label set `{reason}`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, prometheus_client::encoding::EncodeLabelSet)]
pub struct ReasonLabel {
    /// Reason, as in the API enum.
    pub reason: String,
}

impl JournalMetrics {
    /// Creates the journal's families and registers them.
    pub fn register(registry: &mut crate::metrics::Registry) -> Self {
        let journal = Self::default();
        registry.register("plegd_journal_revision", "The latest event revision", journal.revision.clone());
        registry.register("plegd_watch_resets", "Watch streams told to start over, by reason", journal.resets.clone());
        // Known label values start at zero, so rate() and alerts work from the start.
        for reason in ["SLOW_CONSUMER", "REVISION_TOO_OLD", "RUNTIME_RESYNC"] {
            let _ = journal.resets.get_or_create(&ReasonLabel { reason: reason.into() });
        }
        journal
    }
}

struct Sub {
    id: u64,
    filter: Arc<Filter>,
    tx: mpsc::Sender<Arc<Entry>>,
    overflowed: Arc<AtomicU8>,
}

/// Entries kept per pod for its timeline.
const TIMELINE_PER_POD: usize = 1000;
/// Pods whose timelines are kept after they are gone.
const TIMELINE_GONE_PODS: usize = 10_000;

struct Inner {
    ring: VecDeque<Arc<Entry>>,
    timelines: std::collections::HashMap<Arc<str>, VecDeque<Arc<Entry>>>,
    gone: VecDeque<Arc<str>>,
    view: BTreeMap<Arc<str>, Arc<PodStatus>>,
    metas: BTreeMap<Arc<str>, Arc<PodMeta>>,
    /// Who the pods that went away were (their labels above all), so every one of a
    /// removed pod's events matches a filter as the pod did; the last
    /// [`TIMELINE_GONE_PODS`] are kept.
    gone_metas: std::collections::HashMap<Arc<str>, Arc<PodMeta>>,
    gone_order: VecDeque<Arc<str>>,
    subs: Vec<Sub>,
    next_sub: u64,
}

struct Shared {
    inner: Mutex<Inner>,
    revision: AtomicU64,
    epoch: u64,
    capacity: usize,
    client_buffer: usize,
    metrics: Option<JournalMetrics>,
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
    fn of(status: &PodStatus) -> Self {
        Self {
            uid: crate::labels::shared(&status.uid),
            namespace: crate::labels::shared(&status.namespace),
            name: crate::labels::shared(&status.name),
            labels: status.labels.clone(),
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
}

impl Journal {
    /// A journal keeping `capacity` entries, giving each subscriber a buffer of
    /// `client_buffer` entries. The epoch is the process's start time in nanoseconds.
    pub fn new(capacity: usize, client_buffer: usize, metrics: Option<JournalMetrics>) -> Self {
        let epoch = crate::model::system_to_nanos(SystemTime::now()) as u64;
        Self {
            shared: Arc::new(Shared {
                inner: Mutex::new(Inner {
                    ring: VecDeque::with_capacity(capacity.min(1 << 16)),
                    timelines: Default::default(),
                    gone: VecDeque::new(),
                    view: BTreeMap::new(),
                    metas: BTreeMap::new(),
                    gone_metas: Default::default(),
                    gone_order: VecDeque::new(),
                    subs: Vec::new(),
                    next_sub: 0,
                }),
                revision: AtomicU64::new(0),
                epoch,
                capacity: capacity.max(1),
                client_buffer: client_buffer.max(1),
                metrics,
            }),
        }
    }

    /// The process's epoch.
    pub fn epoch(&self) -> u64 {
        self.shared.epoch
    }

    /// The latest revision (0 before the first event).
    pub fn revision(&self) -> u64 {
        self.shared.revision.load(Ordering::Acquire)
    }

    /// Number of live subscribers.
    pub fn subscribers(&self) -> usize {
        self.shared.inner.lock().expect("journal lock").subs.len()
    }

    /// Appends an event: assigns the next revision, updates the view and hands the
    /// entry to every matching subscriber without waiting. Returns the revision.
    ///
    /// The PLEG's events carry the pod as the runtime has it and move the view. A
    /// reconciler's event (source `RECONCILER`) is about the pod as the view has it
    /// now: it carries that status and never moves the view, so a status its
    /// reconciler read earlier cannot overwrite a newer one, nor bring back a pod that
    /// is gone; about a pod that is gone it is not appended (`None`).
    pub fn append(&self, mut event: PodLifecycleEvent) -> Option<u64> {
        let mut inner = self.shared.inner.lock().expect("journal lock");
        let revision = self.shared.revision.load(Ordering::Relaxed) + 1;
        let uid = event.pod_uid.clone();
        // The pod's identity before this event, when this event changes it.
        let mut left: Option<Arc<PodMeta>> = None;
        let meta = if event.source == crate::model::event::EventSource::Reconciler {
            let current = inner.view.get(&*uid).cloned()?;
            event.pod = Some(current);
            inner.metas.get(&*uid).cloned()?
        } else {
            match &event.pod {
                Some(status) => {
                    let known = inner.metas.get(&*uid).or_else(|| inner.gone_metas.get(&*uid));
                    let meta = match known {
                        Some(m) if m.labels == status.labels && *m.name == *status.name => m.clone(),
                        // A pod's labels are its sandbox's: a status read while no sandbox
                        // is left says nothing of them, and the pod keeps matching the
                        // filters it matched (found by tests/watch_property.rs).
                        Some(m) if status.sandboxes.is_empty() => m.clone(),
                        Some(m) => {
                            // New labels (a new sandbox with the pod's current ones):
                            // watchers it matched and no longer does are reset below.
                            left = Some(m.clone());
                            Arc::new(PodMeta::of(status))
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
                            while inner.gone_order.len() > TIMELINE_GONE_PODS {
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
                            })
                        }),
                    }
                }
            }
        };
        let entry = Arc::new(Entry::new(revision, event, meta));
        if inner.ring.len() == self.shared.capacity {
            inner.ring.pop_front();
        }
        inner.ring.push_back(entry.clone());
        let tl = inner.timelines.entry(uid.clone()).or_default();
        if tl.len() == TIMELINE_PER_POD {
            tl.pop_front();
        }
        tl.push_back(entry.clone());
        if entry.event.pod.is_none() && entry.event.kind == EventType::ContainerRemoved && entry.event.is_sandbox {
            inner.gone.push_back(uid.clone());
            while inner.gone.len() > TIMELINE_GONE_PODS {
                let old = inner.gone.pop_front().expect("non-empty");
                if !inner.view.contains_key(&old) {
                    inner.timelines.remove(&old);
                }
            }
        }
        inner.subs.retain(|s| {
            if !s.filter.matches(&entry) {
                if left.as_ref().is_some_and(|old| s.filter.matches_pod(old)) {
                    // The pod left this watcher's selection: its later events, removal
                    // included, no longer match, so its copy would keep the pod for
                    // good. A reset and a fresh snapshot instead of a silent gap.
                    s.overflowed.store(LEFT_SELECTION, Ordering::Release);
                    return false;
                }
                return !s.tx.is_closed();
            }
            match s.tx.try_send(entry.clone()) {
                Ok(()) => true,
                Err(mpsc::error::TrySendError::Full(_)) => {
                    s.overflowed.store(SLOW, Ordering::Release);
                    false
                }
                Err(mpsc::error::TrySendError::Closed(_)) => false,
            }
        });
        self.shared.revision.store(revision, Ordering::Release);
        if let Some(m) = &self.shared.metrics {
            m.revision.set(revision as i64);
        }
        Some(revision)
    }

    /// The number of pods whose identity is kept after they went away (bounded).
    pub fn gone_pods(&self) -> usize {
        self.shared.inner.lock().expect("journal lock").gone_metas.len()
    }

    /// The matching pods and the revision they are consistent with.
    pub fn list(&self, filter: &Filter) -> (Vec<Arc<PodStatus>>, u64) {
        let inner = self.shared.inner.lock().expect("journal lock");
        match snapshot(&inner, filter, self.revision()) {
            Start::Snapshot { pods, revision } => (pods, revision),
            Start::Replay(_) => unreachable!("snapshot() makes snapshots"),
        }
    }

    /// Every event plegd published for a pod (the last 1,000), oldest first; kept for
    /// the last 10,000 pods that went away too.
    pub fn timeline(&self, uid: &str) -> Option<Vec<Arc<Entry>>> {
        let inner = self.shared.inner.lock().expect("journal lock");
        inner.timelines.get(uid).map(|t| t.iter().cloned().collect())
    }

    /// Subscribes atomically: the start (snapshot or replay) and the live entries meet
    /// with no gap and no repeat.
    pub fn subscribe(&self, since: Since, filter: Arc<Filter>) -> Subscription {
        let mut inner = self.shared.inner.lock().expect("journal lock");
        let current = self.revision();
        let oldest = inner.ring.front().map_or(current + 1, |e| e.revision);
        let (start, reset) = match since {
            Since::Revision(r, epoch) => {
                let same_epoch = epoch == 0 || epoch == self.shared.epoch;
                // Resumable when every entry after r is still kept.
                if same_epoch && r <= current && r + 1 >= oldest {
                    let skip = (r + 1).saturating_sub(oldest) as usize;
                    let replay = inner.ring.iter().skip(skip).filter(|e| filter.matches(e)).cloned().collect();
                    (Start::Replay(replay), None)
                } else {
                    (snapshot(&inner, &filter, current), Some(ResetReason::RevisionTooOld))
                }
            }
            Since::Snapshot => (snapshot(&inner, &filter, current), None),
        };
        let (tx, rx) = mpsc::channel(self.shared.client_buffer);
        let overflowed = Arc::new(AtomicU8::new(0));
        let id = inner.next_sub;
        inner.next_sub += 1;
        inner.subs.push(Sub { id, filter, tx, overflowed: overflowed.clone() });
        drop(inner);
        if let Some(reason) = reset {
            self.count_reset(reason);
        }
        Subscription { start, reset, rx, overflowed, id, journal: self.clone() }
    }

    /// Counts a reset in the metrics.
    pub fn count_reset(&self, reason: ResetReason) {
        if let Some(m) = &self.shared.metrics {
            m.resets.get_or_create(&ReasonLabel { reason: reason.as_str().into() }).inc();
        }
    }

    fn unsubscribe(&self, id: u64) {
        self.shared.inner.lock().expect("journal lock").subs.retain(|s| s.id != id);
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

impl Subscription {
    /// Whether the journal dropped this subscriber (its buffer overflowed, or a pod it
    /// watched left its selection): it must start over.
    pub fn overflowed(&self) -> bool {
        self.overflowed.load(Ordering::Acquire) != 0
    }

    /// Why the journal dropped this subscriber, if it did.
    pub fn dropped_because(&self) -> Option<ResetReason> {
        match self.overflowed.load(Ordering::Acquire) {
            0 => None,
            LEFT_SELECTION => Some(ResetReason::RuntimeResync),
            _ => Some(ResetReason::SlowConsumer),
        }
    }

    /// Whether every entry handed to this subscriber has been taken (and it did not
    /// overflow): with the journal's revision read before, nothing at or below that
    /// revision is still to come.
    pub fn is_drained(&self) -> bool {
        self.rx.is_empty() && !self.overflowed()
    }

    /// The next live entry; `None` once the subscriber overflowed (check
    /// [`Subscription::overflowed`]) and its buffer is drained.
    pub async fn next(&mut self) -> Option<Arc<Entry>> {
        if self.overflowed() {
            return None;
        }
        self.rx.recv().await
    }
}

impl Drop for Subscription {
    fn drop(&mut self) {
        self.journal.unsubscribe(self.id);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::event::EventSource;

    fn status(uid: &str, ns: &str, app: &str) -> Arc<PodStatus> {
        let labels = [("app".to_string(), app.to_string())].into();
        Arc::new(PodStatus { labels, ..PodStatus::empty(uid, ns, &format!("pod-{uid}")) })
    }

    fn event(uid: &str, kind: EventType, pod: Option<Arc<PodStatus>>) -> PodLifecycleEvent {
        PodLifecycleEvent {
            pod_uid: uid.into(),
            pod_namespace: "ns".into(),
            pod_name: format!("pod-{uid}").into(),
            kind,
            container_id: format!("c-{uid}"),
            container_name: "c".into(),
            is_sandbox: false,
            source: EventSource::Relist,
            observed_at: SystemTime::now(),
            runtime_timestamp: None,
            pod,
            message: String::new(),
        }
    }

    #[tokio::test]
    async fn a_snapshot_and_the_live_entries_meet_without_gap() {
        let j = Journal::new(100, 100, None);
        j.append(event("a", EventType::ContainerStarted, Some(status("a", "ns", "web"))));
        j.append(event("b", EventType::ContainerStarted, Some(status("b", "ns", "db"))));
        let mut sub = j.subscribe(Since::Snapshot, Arc::new(Filter::default()));
        let Start::Snapshot { pods, revision } = &sub.start else { panic!() };
        assert_eq!((pods.len(), *revision), (2, 2));
        j.append(event("a", EventType::ContainerDied, Some(status("a", "ns", "web"))));
        assert_eq!(sub.next().await.unwrap().revision, 3);
    }

    #[tokio::test]
    async fn a_removed_pod_leaves_the_view_but_its_events_still_match_its_labels() {
        let j = Journal::new(100, 100, None);
        let filter = Filter { selector: Selector::parse("app=web").unwrap(), ..Default::default() };
        let mut sub = j.subscribe(Since::Snapshot, Arc::new(filter));
        j.append(event("a", EventType::ContainerStarted, Some(status("a", "ns", "web"))));
        j.append(event("b", EventType::ContainerStarted, Some(status("b", "ns", "db"))));
        j.append(event("a", EventType::ContainerRemoved, None));
        assert_eq!(sub.next().await.unwrap().revision, 1);
        assert_eq!(sub.next().await.unwrap().revision, 3, "the removal of a web pod matches app=web");
        assert!(j.list(&Filter::default()).0.iter().all(|p| p.uid != "a"));
    }

    #[tokio::test]
    async fn a_full_buffer_marks_the_subscriber_and_never_blocks() {
        let j = Journal::new(100, 2, None);
        let mut slow = j.subscribe(Since::Snapshot, Arc::new(Filter::default()));
        let mut fast = j.subscribe(Since::Snapshot, Arc::new(Filter::default()));
        for i in 0..5 {
            j.append(event("a", EventType::PodSync, Some(status("a", "ns", "web"))));
            assert_eq!(fast.next().await.unwrap().revision, i + 1);
        }
        assert!(slow.overflowed());
        assert!(slow.next().await.is_none());
        assert_eq!(j.subscribers(), 1);
    }

    #[tokio::test]
    async fn resuming_too_far_back_or_from_another_epoch_resets() {
        let j = Journal::new(3, 10, None);
        for _ in 0..5 {
            j.append(event("a", EventType::PodSync, Some(status("a", "ns", "web"))));
        }
        let f = Arc::new(Filter::default());
        let s = j.subscribe(Since::Revision(1, 0), f.clone());
        assert_eq!(s.reset, Some(ResetReason::RevisionTooOld));
        let s = j.subscribe(Since::Revision(2, j.epoch()), f.clone());
        let Start::Replay(r) = &s.start else { panic!("revision 2 is resumable: 3..5 are kept") };
        assert_eq!(r.iter().map(|e| e.revision).collect::<Vec<_>>(), [3, 4, 5]);
        let s = j.subscribe(Since::Revision(2, j.epoch() + 1), f.clone());
        assert_eq!(s.reset, Some(ResetReason::RevisionTooOld), "another process's revisions mean nothing here");
        let s = j.subscribe(Since::Revision(9, 0), f);
        assert_eq!(s.reset, Some(ResetReason::RevisionTooOld), "a revision from the future");
    }

    proptest::proptest! {
        #[test]
        fn a_resume_from_any_kept_revision_equals_the_continuous_stream(
            n in 1usize..200, cap in 1usize..64, at in 0usize..200, types in 0u8..4,
        ) {
            let rt = tokio::runtime::Builder::new_current_thread().build().unwrap();
            rt.block_on(async {
                let j = Journal::new(cap, 1000, None);
                let mut filter = Filter::default();
                if types > 0 {
                    filter.types.insert(EventType::ContainerDied);
                }
                let filter = Arc::new(filter);
                let mut continuous = j.subscribe(Since::Snapshot, filter.clone());
                let kinds = [EventType::ContainerStarted, EventType::ContainerDied];
                let at = at.min(n);
                let mut resumed = None;
                let mut since_r = 0;
                for i in 0..n {
                    if i == at {
                        since_r = j.revision().saturating_sub(cap as u64 / 2);
                        resumed = Some(j.subscribe(Since::Revision(since_r, 0), filter.clone()));
                    }
                    j.append(event(&format!("p{}", i % 7), kinds[i % 2], Some(status(&format!("p{}", i % 7), "ns", "x"))));
                }
                let mut resumed = resumed.unwrap_or_else(|| {
                    since_r = j.revision();
                    j.subscribe(Since::Revision(since_r, 0), filter.clone())
                });
                let mut all = Vec::new();
                while let Ok(e) = continuous.rx.try_recv() {
                    all.push(e.revision);
                }
                let Start::Replay(replay) = &resumed.start else { panic!("kept revisions resume") };
                let mut got: Vec<u64> = replay.iter().map(|e| e.revision).collect();
                while let Ok(e) = resumed.rx.try_recv() {
                    got.push(e.revision);
                }
                let want: Vec<u64> = all.iter().copied().filter(|r| *r > since_r).collect();
                proptest::prop_assert_eq!(&got, &want, "no gap, no repeat");
                let mut sorted = got.clone();
                sorted.dedup();
                proptest::prop_assert_eq!(sorted.len(), got.len());
                Ok(())
            })?;
        }
    }
}

#[cfg(test)]
mod guarantee_tests {
    use super::*;
    use crate::model::event::EventSource;

    /// A pod as the PLEG reads it: with its sandbox, whose labels are the pod's.
    fn pod(uid: &str, app: Option<&str>) -> Arc<PodStatus> {
        let labels = app.map(|a| [("app".to_string(), a.to_string())].into()).unwrap_or_default();
        let sandbox = crate::model::SandboxStatus {
            id: format!("s-{uid}"),
            attempt: 0,
            state: crate::model::SandboxState::Ready,
            created_at: 0,
            ip: String::new(),
            additional_ips: vec![],
        };
        Arc::new(PodStatus { labels, sandboxes: vec![sandbox], ..PodStatus::empty(uid, "ns", &format!("pod-{uid}")) })
    }

    fn ev(uid: &str, kind: EventType, id: &str, p: Option<Arc<PodStatus>>, source: EventSource) -> PodLifecycleEvent {
        PodLifecycleEvent {
            pod_uid: uid.into(),
            pod_namespace: "ns".into(),
            pod_name: format!("pod-{uid}").into(),
            kind,
            container_id: id.into(),
            container_name: "c".into(),
            is_sandbox: id.starts_with('s'),
            source,
            observed_at: SystemTime::now(),
            runtime_timestamp: None,
            pod: p,
            message: String::new(),
        }
    }

    fn drain(s: &mut Subscription) -> Vec<u64> {
        let mut v = Vec::new();
        while let Ok(e) = s.rx.try_recv() {
            v.push(e.revision);
        }
        v
    }

    #[test]
    fn every_removal_event_of_a_pod_matches_by_the_labels_it_had() {
        let j = Journal::new(100, 100, None);
        let web = Filter { selector: Selector::parse("app=web").unwrap(), ..Default::default() };
        let not_app = Filter { selector: Selector::parse("!app").unwrap(), ..Default::default() };
        let mut web_sub = j.subscribe(Since::Snapshot, Arc::new(web));
        let mut not_app_sub = j.subscribe(Since::Snapshot, Arc::new(not_app));
        j.append(ev("a", EventType::ContainerStarted, "c1", Some(pod("a", Some("web"))), EventSource::Relist));
        // The pod goes: its container's removal, the sandbox's death and removal.
        for (kind, id) in
            [(EventType::ContainerRemoved, "c1"), (EventType::ContainerDied, "s1"), (EventType::ContainerRemoved, "s1")]
        {
            j.append(ev("a", kind, id, None, EventSource::Relist));
        }
        assert_eq!(drain(&mut web_sub), [1, 2, 3, 4], "every event of the web pod, removals included");
        assert!(drain(&mut not_app_sub).is_empty(), "none of a pod that carried app");
        // The identity of gone pods is bounded.
        for i in 0..(TIMELINE_GONE_PODS + 10) {
            let uid = format!("g{i}");
            j.append(ev(&uid, EventType::ContainerStarted, "c", Some(pod(&uid, None)), EventSource::Relist));
            j.append(ev(&uid, EventType::ContainerRemoved, "c", None, EventSource::Relist));
        }
        assert_eq!(j.gone_pods(), TIMELINE_GONE_PODS);
    }

    #[test]
    fn a_pod_read_after_its_sandbox_went_keeps_matching_by_its_labels() {
        // Found by tests/watch_property.rs: with the sandbox removed first, the pod's
        // next status has no sandbox and no labels; its later events must still reach
        // the filters it matched.
        let j = Journal::new(100, 100, None);
        let web = Filter { selector: Selector::parse("app=web").unwrap(), ..Default::default() };
        let mut sub = j.subscribe(Since::Snapshot, Arc::new(web.clone()));
        j.append(ev("a", EventType::ContainerStarted, "s1", Some(pod("a", Some("web"))), EventSource::Relist));
        let no_sandbox = Arc::new(PodStatus::empty("a", "ns", "pod-a"));
        j.append(ev("a", EventType::ContainerRemoved, "s1", Some(no_sandbox), EventSource::Relist));
        j.append(ev("a", EventType::ContainerRemoved, "c1", None, EventSource::Relist));
        assert_eq!(drain(&mut sub), [1, 2, 3]);
        assert!(j.list(&web).0.is_empty());
    }

    #[test]
    fn a_reconcilers_event_carries_the_current_view_and_never_brings_a_gone_pod_back() {
        let j = Journal::new(100, 100, None);
        let old = pod("a", Some("web"));
        j.append(ev("a", EventType::ContainerStarted, "c1", Some(old.clone()), EventSource::Relist));
        let newer = Arc::new(PodStatus { ips: vec!["10.0.0.9".into()], ..(*pod("a", Some("web"))).clone() });
        j.append(ev("a", EventType::ContainerDied, "c1", Some(newer.clone()), EventSource::Relist));
        // A crash-loop event made from the older status.
        let r = j.append(ev("a", EventType::CrashLoop, "c1", Some(old), EventSource::Reconciler)).unwrap();
        let (view, _) = j.list(&Filter::default());
        assert_eq!(view[0].ips, ["10.0.0.9"], "the view keeps the newer status");
        let tl = j.timeline("a").unwrap();
        let sent = tl.iter().find(|e| e.revision == r).unwrap();
        assert_eq!(sent.event.pod.as_ref().unwrap().ips, ["10.0.0.9"], "the event carries the current status");
        // The pod goes; a late reconciler event about it is not published.
        j.append(ev("a", EventType::ContainerRemoved, "s1", None, EventSource::Relist));
        assert_eq!(j.append(ev("a", EventType::CrashLoopCleared, "c1", Some(newer), EventSource::Reconciler)), None);
        assert!(j.list(&Filter::default()).0.is_empty(), "no ghost");
    }

    #[tokio::test]
    async fn a_pod_whose_new_labels_leave_a_watchers_selection_resets_that_watcher() {
        // Found by review: with the pod's later events (its removal too) no longer
        // matching, the watcher's copy would have kept the pod for good.
        let j = Journal::new(100, 100, None);
        let web = Filter { selector: Selector::parse("app=web").unwrap(), ..Default::default() };
        let db = Filter { selector: Selector::parse("app=db").unwrap(), ..Default::default() };
        let mut web_sub = j.subscribe(Since::Snapshot, Arc::new(web));
        let mut db_sub = j.subscribe(Since::Snapshot, Arc::new(db));
        j.append(ev("a", EventType::ContainerStarted, "s1", Some(pod("a", Some("web"))), EventSource::Relist));
        j.append(ev("a", EventType::ContainerStarted, "s2", Some(pod("a", Some("db"))), EventSource::Relist));
        assert!(web_sub.next().await.is_none(), "dropped: a reset and a snapshot follow");
        assert_eq!(web_sub.dropped_because(), Some(ResetReason::RuntimeResync));
        assert_eq!(db_sub.next().await.unwrap().revision, 2, "the pod entered this selection with the event");
        assert!(!db_sub.overflowed());
    }

    /// One step of a generated schedule.
    #[derive(Clone, Debug)]
    enum Step {
        /// A pod (0..6) with labels (0: none, 1: app=web, 2: app=db) starts a container.
        Start(u8, u8),
        /// A pod's container dies.
        Die(u8),
        /// A pod goes away: its container's and sandbox's removal events.
        Remove(u8),
        /// A reconciler event about a pod.
        Reconcile(u8),
        /// Subscriber (0..3) reads everything queued.
        Read(u8),
        /// Subscriber (0..3) disconnects and resumes after the last revision it took.
        Resume(u8),
    }

    fn step() -> impl proptest::strategy::Strategy<Value = Step> {
        use proptest::prelude::*;
        prop_oneof![
            4 => (0u8..6, 0u8..3).prop_map(|(p, l)| Step::Start(p, l)),
            3 => (0u8..6).prop_map(Step::Die),
            2 => (0u8..6).prop_map(Step::Remove),
            1 => (0u8..6).prop_map(Step::Reconcile),
            4 => (0u8..3).prop_map(Step::Read),
            1 => (0u8..3).prop_map(Step::Resume),
        ]
    }

    const SELECTORS: [&str; 5] = ["", "app=web", "!app", "app!=web", "app in (web,db)"];

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(256))]
        /// Random churn, random filters (negative selectors too), tiny buffers, stalls,
        /// resumes: each filtered subscriber receives exactly the unfiltered journal
        /// restricted to the pods that matched (by the labels they had), in order, with
        /// no gap and no repeat except across a reset it was told about.
        #[test]
        fn a_filtered_stream_is_the_unfiltered_one_restricted_by_the_filter(
            steps in proptest::collection::vec(step(), 1..150),
            filters in proptest::collection::vec(0usize..SELECTORS.len(), 3),
            buffer in 1usize..6,
        ) {
            let j = Journal::new(1000, buffer, None);
            let filters: Vec<Arc<Filter>> = filters
                .iter()
                .map(|i| Arc::new(Filter { selector: Selector::parse(SELECTORS[*i]).unwrap(), ..Default::default() }))
                .collect();
            let mut subs: Vec<Subscription> = filters.iter().map(|f| j.subscribe(Since::Snapshot, f.clone())).collect();
            let mut got: Vec<Vec<u64>> = vec![Vec::new(); 3];
            // Revisions each subscriber was told it may have missed (a reset).
            let mut reset_at: Vec<Option<u64>> = vec![None; 3];
            // Ground truth: each revision and the labels its pod had.
            let mut truth: Vec<(u64, Labels)> = Vec::new();
            let mut labels_of: BTreeMap<u8, Labels> = BTreeMap::new();
            let mut alive: BTreeMap<u8, Arc<PodStatus>> = BTreeMap::new();
            for s in steps {
                match s {
                    Step::Start(p, l) => {
                        let status = alive.entry(p).or_insert_with(|| {
                            pod(&format!("p{p}"), [None, Some("web"), Some("db")][l as usize])
                        }).clone();
                        labels_of.insert(p, status.labels.clone());
                        let r = j.append(ev(&format!("p{p}"), EventType::ContainerStarted, "c", Some(status.clone()), EventSource::Relist)).unwrap();
                        truth.push((r, status.labels.clone()));
                    }
                    Step::Die(p) => if let Some(status) = alive.get(&p) {
                        let r = j.append(ev(&format!("p{p}"), EventType::ContainerDied, "c", Some(status.clone()), EventSource::Relist)).unwrap();
                        truth.push((r, status.labels.clone()));
                    },
                    Step::Remove(p) => if let Some(status) = alive.remove(&p) {
                        for id in ["c", "s"] {
                            let r = j.append(ev(&format!("p{p}"), EventType::ContainerRemoved, id, None, EventSource::Relist)).unwrap();
                            truth.push((r, status.labels.clone()));
                        }
                    },
                    Step::Reconcile(p) => {
                        let appended = j.append(ev(&format!("p{p}"), EventType::CrashLoop, "c", None, EventSource::Reconciler));
                        proptest::prop_assert_eq!(appended.is_some(), alive.contains_key(&p), "reconciler events only about live pods");
                        if let Some(r) = appended {
                            truth.push((r, labels_of[&p].clone()));
                        }
                    }
                    Step::Read(i) => {
                        let i = i as usize;
                        while let Ok(e) = subs[i].rx.try_recv() {
                            got[i].push(e.revision);
                        }
                        if subs[i].overflowed() {
                            // A reset: the client starts over from a snapshot.
                            let r = j.revision();
                            reset_at[i] = Some(r);
                            got[i].clear();
                            subs[i] = j.subscribe(Since::Snapshot, filters[i].clone());
                        }
                    }
                    Step::Resume(i) => {
                        let i = i as usize;
                        if subs[i].overflowed() {
                            continue;
                        }
                        while let Ok(e) = subs[i].rx.try_recv() {
                            got[i].push(e.revision);
                        }
                        let last = got[i].last().copied().or(reset_at[i]).unwrap_or(0);
                        let resumed = j.subscribe(Since::Revision(last.max(1), j.epoch()), filters[i].clone());
                        if last == 0 || resumed.reset.is_some() {
                            subs[i] = j.subscribe(Since::Snapshot, filters[i].clone());
                            reset_at[i] = Some(j.revision());
                            got[i].clear();
                            continue;
                        }
                        let Start::Replay(entries) = &resumed.start else { panic!("kept revisions resume") };
                        got[i].extend(entries.iter().map(|e| e.revision));
                        subs[i] = resumed;
                    }
                }
            }
            for i in 0..3 {
                if subs[i].overflowed() {
                    continue;
                }
                while let Ok(e) = subs[i].rx.try_recv() {
                    got[i].push(e.revision);
                }
                let from = reset_at[i].unwrap_or(0);
                let want: Vec<u64> = truth
                    .iter()
                    .filter(|(r, l)| *r > from && filters[i].selector.matches(l))
                    .map(|(r, _)| *r)
                    .collect();
                proptest::prop_assert_eq!(&got[i], &want, "subscriber {} with {:?}", i, &filters[i].selector);
            }
        }
    }
}

//! The GenericPLEG relister: list, diff against committed pod records, inspect the
//! pods that changed, write the cache (its only writer), and emit lifecycle events.

mod run_loop;

use std::collections::{BTreeMap, HashSet};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use futures_util::StreamExt;
use tokio::sync::{mpsc, watch};
use tokio::time::Instant;

use super::deleted_sandboxes::DeletedSandboxes;
use super::evented::StreamState;
use super::final_statuses::FinalStatuses;
use super::health::PlegHealth;
use super::hints::{Hint, PodHints};
use super::inspect::{Prefetched, inspect_pod, inspect_prefetched, list_pod};
use super::lost_exits::LostExits;
use super::metrics::{ModeLabel, PlegMetrics, StateLabel};
use super::records::{PodRecords, RuntimePod, Transition, group_pods};
use super::stream_trust::StreamTrust;
use super::{PlegState, build_events, same_status};
use crate::cache::CacheWriter;
use crate::cri::{CriError, RuntimeService};
use crate::liveness::Beat;
use crate::model::event::{EventSource, EventType, PodLifecycleEvent};
use crate::model::{ContainerState, PodStatus};

/// How the relister runs.
#[derive(Clone, Debug)]
pub struct RelistConfig {
    /// Time from the end of one relist to the start of the next.
    pub period: Duration,
    /// Pods inspected at once.
    pub concurrency: usize,
    /// Longest time one pod's inspection may take; past it the pod is retried at the
    /// next relist and the relist goes on.
    pub inspect_timeout: Duration,
    /// Where the host's `/proc` and cgroupfs are, for a new container's PID and cgroup.
    pub host: crate::host::Host,
}

impl Default for RelistConfig {
    fn default() -> Self {
        Self {
            period: Duration::from_secs(1),
            concurrency: 8,
            inspect_timeout: Duration::from_secs(5),
            host: crate::host::Host::default(),
        }
    }
}

/// Errors of a relist.
#[derive(Debug, thiserror::Error)]
pub enum PlegError {
    /// The runtime could not be listed; nothing was changed.
    #[error("relist failed: {0}")]
    List(#[source] CriError),
    /// The listing was read but does not decode; nothing was changed.
    #[error("relist failed: the runtime's listing does not decode: {0}")]
    Decode(#[source] CriError),
}

/// What one relist did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RelistOutcome {
    /// Pods in the runtime.
    pub pods: usize,
    /// Pods inspected.
    pub inspected: usize,
    /// Inspections that failed (retried next time).
    pub failed: usize,
    /// Events emitted.
    pub events: usize,
    /// The listing was the last one's, unchanged: nothing was decoded or diffed.
    pub unchanged: bool,
    /// Changes found while the event stream was up and not announced by it yet: each
    /// counts as missed unless its pod's event arrives within 2 s.
    pub missed: usize,
}

/// Asks the relister for a full relist now. Cheap to clone.
#[derive(Clone)]
pub struct PlegHandle {
    tx: mpsc::Sender<()>,
}

impl PlegHandle {
    /// Requests a full relist as soon as the current one (if any) ends. Requests made
    /// before it starts coalesce into one.
    pub fn request_relist(&self) {
        let _ = self.tx.try_send(());
    }
}

/// The relister.
pub struct GenericPleg<R: RuntimeService> {
    runtime: R,
    cache: CacheWriter,
    /// One message per pod read: its events, which the journal commits together, so
    /// that the pod's status they carry never reaches the disk without all of them.
    events: mpsc::Sender<Vec<PodLifecycleEvent>>,
    records: PodRecords,
    reinspect: HashSet<String>,
    /// Seeded pods not read yet in this process: the next full relist reads them.
    unread: HashSet<String>,
    /// What the journal last said of each seeded pod, until that relist.
    seeded: std::collections::HashMap<String, Arc<PodStatus>>,
    health: PlegHealth,
    metrics: Option<PlegMetrics>,
    cfg: RelistConfig,
    last_start: Option<Instant>,
    requests: mpsc::Receiver<()>,
    handle: PlegHandle,
    failing: bool,
    beat: Beat,
    hints: PodHints,
    stream: watch::Receiver<StreamState>,
    evented_period: Duration,
    /// The longest a trusted stream goes unchecked by a full relist.
    stream_check: Duration,
    /// Paces reads of single pods that readers wait on.
    demand_reads: crate::backoff::TokenBucket,
    /// Pods readers wait on whose read waits for the pace.
    deferred: std::collections::BTreeSet<String>,
    /// The fingerprint of the listing the records were last set from by a full relist;
    /// cleared when anything else touches the records.
    listed: Option<u64>,
    /// This process's key for listing fingerprints.
    seed: u64,
    /// What the relister knows of the event stream it is paired with.
    trust: StreamTrust,
    /// Stopped containers' final statuses from the stream, until a read settles them.
    final_statuses: FinalStatuses,
    /// Containers read with an exit status the runtime lost, read again for a while.
    lost_exits: LostExits,
    /// Sandboxes the runtime said deleted, read again until a read finds them gone.
    deleted_sandboxes: DeletedSandboxes,
}

type Inspection = (String, Instant, Result<PodStatus, String>);

/// Reads of single pods that waiting readers (`GetPodStatus` with `min_timestamp`) may
/// cause, a second, beyond a burst of [`DEMAND_READS_BURST`]; more wait their turn or
/// the next full relist.
pub const DEMAND_READS_PER_SEC: f64 = 20.0;
/// See [`DEMAND_READS_PER_SEC`].
pub const DEMAND_READS_BURST: u32 = 40;

/// The longest a trusted event stream goes unchecked by a full relist, by default: a
/// change a silent stream hides reaches watchers within this and one relist.
pub const STREAM_CHECK: Duration = Duration::from_secs(10);

impl<R: RuntimeService> GenericPleg<R> {
    /// A relister that owns the cache's writer and sends events on `events`.
    pub fn new(
        runtime: R,
        cache: CacheWriter,
        events: mpsc::Sender<Vec<PodLifecycleEvent>>,
        health: PlegHealth,
        metrics: Option<PlegMetrics>,
        cfg: RelistConfig,
    ) -> Self {
        let (tx, requests) = mpsc::channel(1);
        if let Some(m) = &metrics {
            m.mode.get_or_create(&ModeLabel { mode: "generic".into() }).set(1);
        }
        Self {
            runtime,
            cache,
            events,
            records: PodRecords::default(),
            reinspect: HashSet::new(),
            unread: HashSet::new(),
            seeded: Default::default(),
            health,
            metrics,
            cfg,
            last_start: None,
            requests,
            handle: PlegHandle { tx },
            failing: false,
            beat: Beat::detached("relist"),
            hints: PodHints::default(),
            stream: watch::channel(StreamState::Disabled).1,
            evented_period: Duration::from_secs(300),
            stream_check: STREAM_CHECK,
            demand_reads: crate::backoff::TokenBucket::new(DEMAND_READS_PER_SEC, DEMAND_READS_BURST),
            deferred: Default::default(),
            listed: None,
            seed: fastrand::u64(..),
            trust: StreamTrust::new(Duration::from_secs(300)),
            final_statuses: FinalStatuses::default(),
            lost_exits: LostExits::default(),
            deleted_sandboxes: DeletedSandboxes::default(),
        }
    }

    /// Starts from what plegd last published of each pod (the journal's view, kept on
    /// disk across restarts) instead of from nothing: the first relist diffs the runtime
    /// against it, so a container that started, died or went away while plegd was down
    /// gives its event — with the runtime's timestamps and exit code — and one that did
    /// not change gives none. Every seeded pod is read in that relist so the cache has
    /// it; one whose dead container's exit word changed while plegd was down (containerd
    /// amends a lost exit status, [`super::amend`]) gets a `POD_SYNC` carrying the new one.
    pub fn with_seed(mut self, pods: Vec<Arc<PodStatus>>) -> Self {
        for pod in pods {
            self.unread.insert(pod.uid.clone());
            self.records.seed(&pod);
            self.seeded.insert(pod.uid.clone(), pod);
        }
        self
    }

    /// Beats `beat` on every turn of the loop, at least every [`BEAT_EVERY`], and as
    /// each pod read completes.
    pub fn with_liveness(mut self, beat: Beat) -> Self {
        self.beat = beat;
        self
    }

    /// While a trusted event stream is up, relists fully at least every `period` (see
    /// [`GenericPleg::period`]); zero leaves it to the safety-net period alone.
    pub fn with_stream_check(mut self, period: Duration) -> Self {
        self.stream_check = if period.is_zero() { Duration::MAX } else { period };
        self
    }

    /// Takes targeted relist requests from `hints`, and relists fully every
    /// `evented_period` instead of the relist period while `stream` is up.
    pub fn with_hints(
        mut self,
        hints: PodHints,
        stream: watch::Receiver<StreamState>,
        evented_period: Duration,
    ) -> Self {
        self.hints = hints;
        self.stream = stream;
        self.evented_period = evented_period;
        self.trust.net_period = evented_period;
        self
    }

    /// The hints this relister serves.
    pub fn hints(&self) -> PodHints {
        self.hints.clone()
    }

    /// The full-relist period in force: the safety-net period while a stream that
    /// delivers every event is up, except during the settle window after it came up
    /// (the runtime may still be recovering state it sends no events for) and after a
    /// relist found changes the stream did not announce. A stream that may split or
    /// drop events (containerd 1.x) never makes full relists slower than the relist
    /// period: its silence proves nothing.
    ///
    /// On a trusted stream a full relist still runs every `stream_check` at least: a
    /// stream that stays connected but stops delivering (a stuck runtime, a CRI proxy)
    /// hides nothing for longer. When the runtime's listing equals the last full
    /// relist's, that relist costs its two list calls and a hash; what it finds that the
    /// stream did not announce is counted as missed, and shortens the period.
    fn period(&self) -> Duration {
        if self.stream.borrow().is_up() && Instant::now() >= self.trust.settle_until && self.trust.complete {
            self.trust.net_period.min(self.stream_check)
        } else {
            self.cfg.period
        }
    }

    /// Whether full relists are slower than the relist period now, so pods that readers
    /// wait on are read at once instead.
    fn full_relists_are_slow(&self) -> bool {
        self.period() > self.cfg.period
    }

    /// A handle to request relists.
    pub fn handle(&self) -> PlegHandle {
        self.handle.clone()
    }

    /// One full relist.
    pub async fn relist(&mut self) -> Result<RelistOutcome, PlegError> {
        let start = Instant::now();
        let start_wall = SystemTime::now();
        if let (Some(prev), Some(m)) = (self.last_start, &self.metrics) {
            m.relist_interval.observe((start - prev).as_secs_f64());
        }
        self.last_start = Some(start);
        let res = self.relist_inner(start, start_wall).await;
        if let Some(m) = &self.metrics {
            m.relist_duration.observe(start.elapsed().as_secs_f64());
            if res.is_err() {
                m.relist_errors.inc();
            }
        }
        match &res {
            Err(e) => self.health.record_failure(e.to_string()),
            // A full relist that found nothing the stream missed lets the period grow.
            Ok(o) if o.missed == 0 && self.trust.suspects.is_empty() => self.judge_stream(0),
            Ok(_) => {}
        }
        res
    }

    async fn relist_inner(&mut self, start: Instant, start_wall: SystemTime) -> Result<RelistOutcome, PlegError> {
        let listing = self.runtime.list_encoded().await.map_err(PlegError::List)?;
        // An idle node lists the same bytes (in some order) every period: with no pod
        // waiting for a re-inspection, the records already hold this listing and every
        // diff would be empty.
        let fingerprint = listing.fingerprint(self.seed);
        if fingerprint.is_some()
            && fingerprint == self.listed
            && self.reinspect.is_empty()
            && self.final_statuses.is_empty()
        {
            self.finish(start, start_wall);
            return Ok(RelistOutcome { pods: self.records.len(), unchanged: true, ..Default::default() });
        }
        self.listed = None;
        let (sandboxes, containers) =
            super::inspect::decode_listing(&self.runtime, &listing).await.map_err(PlegError::Decode)?;
        drop(listing);
        let pods = group_pods(sandboxes, containers);
        let mut outcome = RelistOutcome { pods: pods.len(), ..Default::default() };
        self.records.set_current(pods);

        // Pods with transitions, or whose last inspection failed, or with a stopped
        // container's last words to settle.
        let mut also: HashSet<String> = self.reinspect.union(&self.unread).cloned().collect();
        also.extend(self.final_statuses.pods().cloned());
        let work: BTreeMap<String, Vec<Transition>> =
            self.records.changed(&also).into_iter().filter(|(uid, t)| !t.is_empty() || also.contains(uid)).collect();
        self.unread.clear();
        let seeded = std::mem::take(&mut self.seeded);
        let inspections = self.inspect_all(work.keys(), &seeded).await;
        outcome.inspected = inspections.len();

        let mut needs_reinspect = HashSet::new();
        let mut results: BTreeMap<String, (Instant, Result<PodStatus, String>)> =
            inspections.into_iter().map(|(uid, at, r)| (uid, (at, r))).collect();
        for (uid, transitions) in work {
            let (found, at) = match results.remove(&uid) {
                // The pod is gone from the runtime.
                None => (Found::Gone, start),
                Some((at, Ok(status))) if vanished(&status) => (Found::Gone, at),
                Some((at, Ok(status))) => (Found::Status(status), at),
                Some((at, Err(err))) => (Found::Failed(err), at),
            };
            let reworded = match &found {
                Found::Status(status) => seeded.get(&uid).is_some_and(|seed| words_changed(seed, status)),
                _ => false,
            };
            let sync = self.reinspect.contains(&uid) || reworded;
            match self.apply(&uid, found, at, &transitions, sync, EventSource::Relist, Some(start)).await {
                Some((events, missed)) => {
                    outcome.events += events;
                    outcome.missed += missed;
                }
                None => {
                    needs_reinspect.insert(uid);
                    outcome.failed += 1;
                }
            }
        }
        self.reinspect = needs_reinspect;
        // Words left are about pods this relist did not apply: pods to read again, and
        // pods the records never knew that are gone (their whole life fell between two
        // reads): those die and go now, with the runtime's exit status.
        let gone: std::collections::BTreeSet<String> = self
            .final_statuses
            .pods()
            .filter(|uid| !self.reinspect.contains(*uid) && self.records.current(uid).is_none())
            .cloned()
            .collect();
        for uid in gone {
            if let Some((events, _)) = self.apply(&uid, Found::Gone, start, &[], false, EventSource::Relist, None).await
            {
                outcome.events += events;
            }
        }
        let reinspect = &self.reinspect;
        self.final_statuses.retain_pods(|uid| reinspect.contains(uid));
        self.listed = fingerprint;
        self.count_states();
        self.finish(start, start_wall);
        Ok(outcome)
    }

    /// Stores a failed inspection. A pod whose very first inspection fails is cached
    /// with the error and what the listing says of it, as the kubelet caches
    /// `(status, err)`, so readers and waiters get the error rather than no pod.
    fn store_failure(&mut self, uid: &str, err: String, at: Instant) {
        let placeholder = match self.cache.reader().get(uid).and_then(|e| e.status.clone()) {
            Some(_) => None,
            None => {
                let (namespace, name) = self.records.pod_name(uid);
                Some(Arc::new(PodStatus::empty(uid, &namespace, &name)))
            }
        };
        self.cache.set(uid, placeholder, Some(err), at);
    }

    /// Clears the suspects whose events arrived and judges the stream on the rest.
    fn settle_suspects(&mut self, hinted: &[(String, Hint)]) {
        let missed = self.trust.settle(hinted);
        if missed > 0 {
            self.judge_stream(missed);
        }
    }

    /// Counts and logs changes the stream missed, and moves the safety-net period.
    fn judge_stream(&mut self, missed: usize) {
        let up = self.stream.borrow().is_up();
        self.trust.judge(missed, up, self.cfg.period, self.evented_period, self.metrics.as_ref());
    }

    /// Applies what a read of one pod found — to the cache, the pod records, and the
    /// publish channel as lifecycle events. The one path from any read of the runtime
    /// (full relist, targeted relist) to the events. `at` is when the read started;
    /// `suspect_from`, when set, counts the changes found as suspected misses of the
    /// stream. Returns the events sent and the changes suspected, or `None` when the
    /// read failed: the pod's events wait for a read that succeeds.
    #[allow(clippy::too_many_arguments)]
    async fn apply(
        &mut self,
        uid: &str,
        found: Found,
        at: Instant,
        transitions: &[Transition],
        sync: bool,
        source: EventSource,
        suspect_from: Option<Instant>,
    ) -> Option<(usize, usize)> {
        let gone = matches!(found, Found::Gone);
        let status = match found {
            Found::Gone => {
                self.cache.delete(uid, at);
                None
            }
            Found::Status(status) => {
                let status = Arc::new(status);
                self.cache.set(uid, Some(status.clone()), None, at);
                Some(status)
            }
            Found::Failed(err) => {
                tracing::debug!(pod = %uid, error = %err, "pod read failed; its events wait for a read that succeeds");
                if let Some(m) = &self.metrics {
                    m.inspection_errors.inc();
                }
                self.store_failure(uid, err, at);
                return None;
            }
        };
        // A read can see a container already removed while
        // the stream's STOPPED for it (its exit status) waits in the hints, taken only at
        // the next turn. Take the words of exactly those containers; every other
        // container's words wait for a read newer than they are. (Words still on their
        // way are not waited for.)
        let unheard = self.final_statuses.unheard(transitions, status.as_deref());
        if !unheard.is_empty() {
            self.final_statuses.keep(self.hints.take_final_statuses_for(&unheard));
        }
        let (mut namespace, mut name) = self.records.pod_name(uid);
        let mut status = status;
        if namespace.is_empty()
            && name.is_empty()
            && let Some(w) = self.final_statuses.identity(uid)
        {
            // A pod the records never knew, gone before it was read: its name and labels
            // are the ones the runtime's event gave (a label selector must find it).
            (namespace, name) = (w.0.clone(), w.1.clone());
            if status.is_none() {
                status = Some(Arc::new(PodStatus { labels: w.2.clone(), ..PodStatus::empty(uid, &namespace, &name) }));
            }
        }
        self.lost_exits.note(uid, status.as_deref());
        // A sandbox said deleted is still there if the listing or the statuses have it
        // (a status read NotFound while the listing still had it: still there).
        let records = &self.records;
        self.deleted_sandboxes.note(uid, |id| {
            records.current(uid).is_some_and(|p| p.sandboxes.iter().any(|s| s.id == id))
                || status.as_ref().is_some_and(|p| p.sandboxes.iter().any(|s| s.id == id))
        });
        let old = self.records.old(uid);
        // A record with nothing in it: a pod seeded from the journal's view as plegd last
        // published it, with no sandbox and no container.
        let empty_record = old.is_some_and(|p| p.sandboxes.is_empty() && p.containers.is_empty());
        let known = |id: &str| old.is_some_and(|p| p.state_of(id) != PlegState::NonExistent);
        let super::final_statuses::Settled { words: final_statuses, unseen } =
            self.final_statuses.settle(uid, transitions, status.as_deref(), known);
        self.records.commit(uid);
        let with_unseen;
        let transitions = if unseen.is_empty() {
            transitions
        } else {
            // Before the sandbox's own death and removal: a pod goes last.
            let (sandbox_end, rest): (Vec<_>, Vec<_>) = transitions.iter().cloned().partition(|t| {
                t.is_sandbox && matches!(t.kind, EventType::ContainerDied | EventType::ContainerRemoved)
            });
            with_unseen = [rest, unseen, sandbox_end].concat();
            &with_unseen[..]
        };
        let mut events = build_events(uid, &namespace, &name, transitions, status, sync, source, &final_statuses);
        if gone {
            // A pod gone before any read carries the identity the stream gave it (for
            // filters and selectors) on its deaths; its removals carry no pod, so the
            // journal's view lets it go.
            for e in events.iter_mut().filter(|e| e.kind == EventType::ContainerRemoved) {
                e.pod = None;
            }
            // Every event that still carries the pod before the first that does not: a
            // client that drops a pod on an event without one must not see it come
            // back (a death's pod as it ended) and go again.
            events.sort_by_key(|e| e.pod.is_none());
            if empty_record && events.iter().all(|e| e.pod.is_some()) {
                // Gone with nothing left to name: a pod plegd last published with no
                // sandbox and no container (seeded so from the journal's view after a
                // restart). A `POD_SYNC` without a pod lets every copy of it go.
                let empty = Some(Arc::new(PodStatus::empty(uid, &namespace, &name)));
                let none = std::collections::HashMap::new();
                for mut e in build_events(uid, &namespace, &name, &[], empty, true, source, &none) {
                    e.pod = None;
                    events.push(e);
                }
            }
        }
        let missed = suspect_from.map_or(0, |listed| self.trust.suspect(uid, &events, listed));
        let sent = events.len();
        if sent > 0 && self.events.send(events).await.is_err() {
            tracing::debug!("event receiver gone; dropping events");
        }
        Some((sent, missed))
    }

    /// Ends a full relist that started at `start`, its results in the cache: the
    /// cache's global timestamp advances, and only now does the relist count for
    /// health and readiness.
    fn finish(&mut self, start: Instant, start_wall: SystemTime) {
        self.cache.update_time(start);
        self.health.record_relist(start, start_wall);
        if let Some(m) = &self.metrics {
            m.cache_pods.set(self.cache.reader().len() as i64);
            m.last_seen.set(start_wall.duration_since(SystemTime::UNIX_EPOCH).map(|d| d.as_secs_f64()).unwrap_or(0.0));
        }
    }

    /// Inspects the listed pods among `uids` concurrently; pods not listed any more
    /// are left out (they are gone). A pod the cache does not hold yet is read against
    /// what the journal last said of it (`seeded`): what was read once (a container's
    /// process) is not read again after a restart.
    async fn inspect_all<'a>(
        &self,
        uids: impl Iterator<Item = &'a String>,
        seeded: &std::collections::HashMap<String, Arc<PodStatus>>,
    ) -> Vec<Inspection> {
        let reader = self.cache.reader();
        let jobs: Vec<(String, RuntimePod, Option<Arc<PodStatus>>)> = uids
            .filter_map(|uid| {
                let pod = self.records.current(uid)?.clone();
                let previous = reader.get(uid).and_then(|e| e.status.clone()).or_else(|| seeded.get(uid).cloned());
                Some((uid.clone(), pod, previous))
            })
            .collect();
        let timeout = self.cfg.inspect_timeout;
        let host = &self.cfg.host;
        futures_util::stream::iter(jobs)
            .map(|(uid, pod, previous)| {
                let runtime = self.runtime.clone();
                async move {
                    let at = Instant::now();
                    let read = inspect_pod(&runtime, Some(host), &pod, previous.as_deref());
                    let res = match tokio::time::timeout(timeout, read).await {
                        Ok(Ok(status)) => Ok(status),
                        Ok(Err(e)) => Err(e.to_string()),
                        Err(_) => Err(format!("inspecting pod {uid} took longer than {timeout:?}")),
                    };
                    (uid, at, res)
                }
            })
            .buffer_unordered(self.cfg.concurrency.max(1))
            .inspect(|_| self.beat.beat())
            .collect()
            .await
    }

    /// Sets the container-state gauges from the cache (after full and targeted relists
    /// alike, so they stay current while the stream makes full relists rare).
    fn count_states(&self) {
        let Some(m) = &self.metrics else { return };
        let mut counts = [0i64; 4];
        for entry in self.cache.reader().snapshot() {
            for c in entry.status.iter().flat_map(|s| &s.containers) {
                let i = match c.state {
                    ContainerState::Created => 0,
                    ContainerState::Running => 1,
                    ContainerState::Exited => 2,
                    ContainerState::Unknown => 3,
                };
                counts[i] += 1;
            }
        }
        for (state, n) in ["created", "running", "exited", "unknown"].into_iter().zip(counts) {
            m.running_containers.get_or_create(&StateLabel { state: state.into() }).set(n);
        }
    }

    /// Relists one batch of pods named by hints: lists each pod alone, inspects it, and
    /// applies the results in UID order, chunk by chunk. Pods that cannot be read are
    /// retried later.
    pub async fn relist_pods(&mut self, batch: Vec<(String, Hint)>) -> RelistOutcome {
        // The records move past the last full listing: the next one is diffed in full.
        self.listed = None;
        let reader = self.cache.reader();
        let jobs: Vec<_> = batch
            .into_iter()
            .map(|(uid, hint)| {
                let mut known = self.records.sandbox_ids(&uid);
                known.extend(hint.sandbox_ids);
                let mut containers = self.records.container_ids(&uid);
                containers.extend(hint.container_ids.into_iter().filter(|id| !known.contains(id)));
                let previous = reader.get(&uid).and_then(|e| e.status.clone());
                (uid, hint.source, known, containers, previous)
            })
            .collect();
        let timeout = self.cfg.inspect_timeout;
        let host = self.cfg.host.clone();
        let host = &host;
        let mut outcome = RelistOutcome::default();
        // In chunks, so a burst of dirty pods publishes as it goes rather than after
        // the slowest of hundreds of reads.
        let chunk = self.cfg.concurrency.max(1) * 4;
        let mut jobs = jobs.into_iter().peekable();
        while jobs.peek().is_some() {
            let part: Vec<_> = jobs.by_ref().take(chunk).collect();
            let mut results: Vec<PodRead> = futures_util::stream::iter(part)
                .map(|(uid, source, known, containers, previous)| {
                    let runtime = self.runtime.clone();
                    async move {
                        let at = Instant::now();
                        let read = async {
                            // The statuses of what the pod is known to hold are read with
                            // the listing: one round trip unless the listing shows more.
                            let (listed, prefetched) = futures_util::future::join(
                                list_pod(&runtime, &uid, &known),
                                Prefetched::read(&runtime, known.iter().cloned(), containers, previous.as_deref()),
                            )
                            .await;
                            match listed? {
                                None => Ok(None),
                                Some(pod) => {
                                    let status =
                                        inspect_prefetched(&runtime, Some(host), &pod, previous.as_deref(), prefetched)
                                            .await;
                                    Ok(Some((pod, at, status)))
                                }
                            }
                        };
                        let res = match tokio::time::timeout(timeout, read).await {
                            Ok(r) => r.map_err(|e: CriError| e.to_string()),
                            Err(_) => Err(format!("relisting pod {uid} took longer than {timeout:?}")),
                        };
                        PodRead { uid, source, at, took: at.elapsed(), res }
                    }
                })
                .buffer_unordered(self.cfg.concurrency.max(1))
                .inspect(|_| self.beat.beat())
                .collect()
                .await;
            results.sort_by(|a, b| a.uid.cmp(&b.uid));
            for r in results {
                if let Some(m) = &self.metrics {
                    m.pod_relist_duration.observe(r.took.as_secs_f64());
                }
                outcome.pods += 1;
                let (pod, at, status) = match r.res {
                    Err(err) => {
                        tracing::debug!(pod = %r.uid, error = %err, "targeted relist failed; retrying");
                        // Its event (if any) is used up: the retry's finding is no miss.
                        self.trust.announced.insert(r.uid.clone(), Instant::now());
                        self.reinspect.insert(r.uid);
                        outcome.failed += 1;
                        continue;
                    }
                    Ok(None) => (None, r.at, None),
                    // Listed, then every object read NotFound: removed while it was read.
                    // The pod is gone (see `vanished`).
                    Ok(Some((_, at, Ok(status)))) if vanished(&status) => (None, at, None),
                    Ok(Some((pod, at, status))) => (Some(pod), at, Some(status)),
                };
                self.records.set_current_one(&r.uid, pod);
                let transitions = self.records.transitions(&r.uid);
                let mut sync = self.reinspect.remove(&r.uid);
                let found = match status {
                    None => Found::Gone,
                    Some(Ok(status)) => {
                        outcome.inspected += 1;
                        let previous = reader.get(&r.uid).and_then(|e| e.status.clone());
                        sync |= previous.is_some_and(|p| !same_status(&p, &status));
                        Found::Status(status)
                    }
                    Some(Err(e)) => {
                        outcome.inspected += 1;
                        Found::Failed(e.to_string())
                    }
                };
                // A pod read because someone waits on it, or retried: a change found
                // here was not announced either.
                let suspect_from = (r.source != EventSource::CriEvent).then_some(at);
                match self.apply(&r.uid, found, at, &transitions, sync, r.source, suspect_from).await {
                    Some((events, missed)) => {
                        outcome.events += events;
                        outcome.missed += missed;
                    }
                    None => {
                        outcome.failed += 1;
                        self.trust.announced.insert(r.uid.clone(), Instant::now());
                        self.reinspect.insert(r.uid);
                    }
                }
            }
        }
        if let Some(m) = &self.metrics {
            m.cache_pods.set(self.cache.reader().len() as i64);
        }
        // A container's state moves only with an event; a failed read drops a status.
        if outcome.events > 0 || outcome.failed > 0 {
            self.count_states();
        }
        outcome
    }
}

/// A pod that was listed but whose every sandbox and container read NotFound: removed
/// between the listing and the status reads. The runtime lists a pod only while it has
/// a sandbox or a container, so the pod is gone; published as a pod with nothing in it,
/// it would stay in the journal's view (and `ListPods`) until a later read found it gone
/// — 300 s with the event stream up.
fn vanished(status: &PodStatus) -> bool {
    status.sandboxes.is_empty() && status.containers.is_empty()
}

/// Whether a container dead in both `before` and `now` says another exit code or reason
/// now.
fn words_changed(before: &PodStatus, now: &PodStatus) -> bool {
    now.containers.iter().filter(|c| c.state == ContainerState::Exited).any(|c| {
        before.containers.iter().any(|b| {
            b.id == c.id && b.state == ContainerState::Exited && (b.exit_code, &b.reason) != (c.exit_code, &c.reason)
        })
    })
}

/// What a read of one pod found.
enum Found {
    /// The runtime no longer has the pod.
    Gone,
    /// Its fresh status.
    Status(PodStatus),
    /// The read failed.
    Failed(String),
}

/// One pod's targeted read.
struct PodRead {
    uid: String,
    source: EventSource,
    at: Instant,
    took: Duration,
    res: Result<Option<Listed>, String>,
}

/// A pod as listed, when it was inspected, and the inspection's result.
type Listed = (RuntimePod, Instant, Result<PodStatus, CriError>);

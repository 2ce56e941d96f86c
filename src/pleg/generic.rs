//! The GenericPLEG relister: list, diff against committed pod records, inspect the
//! pods that changed, write the cache (its only writer), and emit lifecycle events.

mod books;
mod read;
mod run_loop;

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use tokio::sync::{mpsc, watch};
use tokio::time::Instant;

use super::early_words::Shown;
use super::evented::StreamState;
use super::final_statuses::Settled;
use super::health::PlegHealth;
use super::inbox::{Inbox, InboxRx, inbox};
use super::metrics::{ModeLabel, PlegMetrics, StateLabel};
use super::records::{PodRecords, Transition, group_pods, in_story_order};
use super::schedule::{Merge, Read, Reason, Scheduler, StatusBook, Why};
use super::state::{PlegState, same_status};
use super::step::{PodNow, PodRead, events_of};
use super::stream_trust::StreamTrust;
use crate::backoff::TokenBucket;
use crate::cache::CacheWriter;
use crate::cri::{CriError, RuntimeService};
use crate::liveness::Beat;
use crate::model::event::{EventSource, PodLifecycleEvent};
use crate::model::{ContainerState, PodStatus, SandboxState};
use books::Books;
use read::{Found, PodListing, PodReader, ReadError, ReadJob, ReadResult, Seen};

use super::config::PlegConfig;
use crate::host::Host;

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
    inbox: Inbox,
}

impl PlegHandle {
    /// Requests a full relist as soon as the current one (if any) ends. Requests made
    /// before it starts coalesce into one.
    pub fn request_relist(&self) {
        self.inbox.full(Reason::Requested);
    }
}

/// The relister.
pub struct GenericPleg<R: RuntimeService> {
    /// Its reads of the runtime.
    reader: PodReader<R>,
    cache: CacheWriter,
    /// One message per pod read: its events, which the journal commits together, so
    /// that the pod's status they carry never reaches the disk without all of them.
    events: mpsc::Sender<Vec<PodLifecycleEvent>>,
    records: PodRecords,
    cfg: PlegConfig,
    /// Every read to come: the full relist, pods the stream named, pods readers wait on,
    /// pods whose read failed, exit statuses the runtime lost, sandboxes said deleted.
    reads: Scheduler<Read, Why>,
    /// Where every request for a read arrives (the stream's, readers', relist requests).
    inbox_rx: InboxRx,
    /// The sending side of the inbox, for those the relister hands it to.
    inbox: Inbox,
    /// Paces reads of pods that only readers wait on.
    waiting_pace: TokenBucket,
    stream: Stream,
    books: Books,
    seeds: Seeds,
    listing: Listing,
    report: Report,
}

/// The CRI event stream the relister is paired with.
struct Stream {
    state: watch::Receiver<StreamState>,
    /// Whether the stream's state may still change (its sender is alive).
    state_open: bool,
    /// The longest a trusted stream goes unchecked by a full relist.
    check: Duration,
    trust: StreamTrust,
}

/// Pods seeded from the journal's view and not read yet in this process: the next full
/// relist reads them, against what the journal last said of each.
#[derive(Default)]
struct Seeds {
    unread: HashSet<String>,
    last: HashMap<String, Arc<PodStatus>>,
}

/// The listing the records were last set from by a full relist.
struct Listing {
    /// Its fingerprint; cleared when anything else touches the records.
    fingerprint: Option<u64>,
    /// Whether the last full relist found the listing unchanged: the next one asks the
    /// runtime for the fingerprint first ([`RuntimeService::list_if_changed`]) and lists
    /// in full only if it changed. A node that is changing lists in full at once.
    idle: bool,
    /// This process's key for fingerprints.
    key: u64,
}

/// What the relister reports of itself.
struct Report {
    health: PlegHealth,
    metrics: PlegMetrics,
    beat: Beat,
    /// Full relists fail (for logging the change).
    failing: bool,
    last_start: Option<Instant>,
}

/// What applying one read sent.
#[derive(Clone, Copy, Debug, Default)]
struct Applied {
    /// Events sent.
    events: usize,
    /// Changes suspected as misses of the stream.
    missed: usize,
    /// The read found the pod changed since its listing: the records hold what it found.
    read_past_listing: bool,
}

/// A pod's transitions since its last read: what a full relist's read of it settles.
type Transitions = Vec<Transition>;

/// Who asked for a targeted read, and how.
#[derive(Clone, Copy, Debug)]
struct Asked {
    /// The stream's read, or a relist of the pod alone.
    source: EventSource,
    /// The pod's last read failed.
    retried: bool,
}

/// How a read's findings are applied.
struct ApplyHow<'a> {
    /// When the pod's listing was taken: what the read can show is what the runtime held
    /// then (the full relist's listing, or the read's own), so the stream's final statuses
    /// are settled against it.
    listed_at: Instant,
    /// The record's transitions since the last read.
    transitions: &'a [Transition],
    /// Publish a `POD_SYNC` when nothing transitioned.
    sync: bool,
    /// Which path read the pod.
    source: EventSource,
    /// When set, the changes found count as suspected misses of the stream, for a read
    /// that listed the runtime at this time.
    suspect_from: Option<Instant>,
}

/// Reads of single pods that waiting readers (`GetPodStatus` with `min_timestamp`) may
/// cause, a second, beyond a burst of [`DEMAND_READS_BURST`]; more wait their turn or
/// the next full relist.
pub const DEMAND_READS_PER_SEC: f64 = 20.0;
/// See [`DEMAND_READS_PER_SEC`].
pub const DEMAND_READS_BURST: u32 = 40;

impl<R: RuntimeService> GenericPleg<R> {
    /// A relister that owns the cache's writer and sends events on `events`.
    pub fn new(
        runtime: R,
        cache: CacheWriter,
        events: mpsc::Sender<Vec<PodLifecycleEvent>>,
        health: PlegHealth,
        metrics: PlegMetrics,
        cfg: PlegConfig,
        host: Host,
    ) -> Self {
        metrics.mode.get_or_create(&ModeLabel { mode: "generic".into() }).set(1);
        let books = Books::default();
        let (inbox, inbox_rx) = inbox(books.final_statuses.clone());
        let waiting = inbox.clone();
        cache.on_demand(move |uid| waiting.waiting(uid));
        let check = if cfg.stream_check.is_zero() { Duration::MAX } else { cfg.stream_check };
        let trust = StreamTrust::new(cfg.net_period);
        Self {
            reader: PodReader::new(runtime, host, cfg.inspect_timeout, cfg.concurrency),
            cache,
            events,
            records: PodRecords::default(),
            cfg,
            reads: Scheduler::default(),
            inbox_rx,
            inbox,
            waiting_pace: TokenBucket::new(DEMAND_READS_PER_SEC, DEMAND_READS_BURST),
            stream: Stream { state: watch::channel(StreamState::Disabled).1, state_open: false, check, trust },
            books,
            seeds: Seeds::default(),
            listing: Listing { fingerprint: None, idle: false, key: fastrand::u64(..) },
            report: Report { health, metrics, beat: Beat::detached("relist"), failing: false, last_start: None },
        }
    }

    /// Starts from what plegd last published of each pod (the journal's view, kept on
    /// disk across restarts) instead of from nothing: the first relist diffs the runtime
    /// against it, so a container that started, died or went away while plegd was down
    /// gives its event — with the runtime's timestamps and exit code — and one that did
    /// not change gives none. Every seeded pod is read in that relist so the cache has
    /// it; one whose dead container's exit word changed while plegd was down (containerd
    /// amends a lost exit status, `pleg::amended_exits`) gets a `POD_SYNC` carrying the new one.
    pub fn with_seed(mut self, pods: Vec<Arc<PodStatus>>) -> Self {
        for pod in pods {
            self.seeds.unread.insert(pod.uid.clone());
            self.records.seed(&pod);
            self.seeds.last.insert(pod.uid.clone(), pod);
        }
        self
    }

    /// Beats `beat` on every turn of the loop, at least every [`crate::liveness::BEAT_EVERY`], and as
    /// each pod read completes.
    pub fn with_liveness(mut self, beat: Beat) -> Self {
        self.reader.beat = beat.clone();
        self.report.beat = beat;
        self
    }

    /// Pairs the relister with the event stream whose state `state` tells: it relists
    /// fully every [`PlegConfig::net_period`] instead of the relist period while a
    /// complete stream is up (and at least every [`PlegConfig::stream_check`]). The
    /// stream's consumer sends its requests to [`GenericPleg::inbox`].
    pub fn with_stream(mut self, state: watch::Receiver<StreamState>) -> Self {
        self.stream.state = state;
        self.stream.state_open = true;
        self
    }

    /// Where requests for reads go: the event stream's consumer sends its own here.
    pub fn inbox(&self) -> Inbox {
        self.inbox.clone()
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
        if self.stream.trust.trusted(self.stream.state.borrow().is_up()) {
            self.stream.trust.net_period().min(self.stream.check)
        } else {
            self.cfg.relist_period
        }
    }

    /// Whether full relists are slower than the relist period now, so pods that readers
    /// wait on are read at once instead.
    fn full_relists_are_slow(&self) -> bool {
        self.period() > self.cfg.relist_period
    }

    /// A handle to request relists.
    pub fn handle(&self) -> PlegHandle {
        PlegHandle { inbox: self.inbox.clone() }
    }

    /// One full relist.
    pub async fn relist(&mut self) -> Result<RelistOutcome, PlegError> {
        let start = Instant::now();
        let start_wall = SystemTime::now();
        if let Some(prev) = self.report.last_start {
            self.report.metrics.relist_interval.observe((start - prev).as_secs_f64());
        }
        self.report.last_start = Some(start);
        let res = self.relist_inner(start, start_wall).await;
        let m = &self.report.metrics;
        m.relist_duration.observe(start.elapsed().as_secs_f64());
        if res.is_err() {
            m.relist_errors.inc();
        }
        match &res {
            Err(e) => self.report.health.record_failure(e.to_string()),
            // A full relist that found nothing the stream missed lets the period grow.
            Ok(o) if o.missed == 0 && self.stream.trust.no_suspects() => self.judge_stream(0),
            Ok(_) => {}
        }
        res
    }

    /// The runtime's listing and its fingerprint; `None` when it is the one the records
    /// already hold. An idle node lists the same bytes (in some order) every period:
    /// with no pod waiting for a re-inspection, every diff would be empty. After a relist
    /// that found it so, the runtime is asked for the fingerprint first
    /// ([`RuntimeService::list_if_changed`]), and lists in full only if it changed.
    async fn list_unless_unchanged(
        &mut self,
    ) -> Result<Option<(crate::cri::brief::EncodedListing, Option<u64>)>, PlegError> {
        let skippable = self
            .listing
            .fingerprint
            .filter(|_| {
                !self.reads.any(|_, why| why.has(Reason::FailedRead)) && self.books.final_statuses.lock().is_empty()
            })
            .filter(|_| self.books.failed.is_empty());
        let listing = match skippable {
            Some(unchanged) if self.listing.idle => {
                let listed = self.reader.runtime.list_if_changed(self.listing.key, unchanged).await;
                // A failed hashed listing is not retried as one: the next relist lists in full.
                self.listing.idle &= listed.is_ok();
                listed.map_err(PlegError::List)?
            }
            _ => Some(self.reader.runtime.list_encoded().await.map_err(PlegError::List)?),
        };
        let key = self.listing.key;
        let listed = listing.map(|l| {
            let fingerprint = l.fingerprint(key);
            (l, fingerprint)
        });
        let changed = listed.filter(|(_, f)| skippable.is_none() || *f != skippable);
        self.listing.idle = changed.is_none();
        Ok(changed)
    }

    async fn relist_inner(&mut self, start: Instant, start_wall: SystemTime) -> Result<RelistOutcome, PlegError> {
        let Some((listing, fingerprint)) = self.list_unless_unchanged().await? else {
            self.finish(start, start_wall);
            return Ok(RelistOutcome { pods: self.records.len(), unchanged: true, ..Default::default() });
        };
        self.listing.fingerprint = None;
        let (sandboxes, containers) =
            super::list::decode_listing(&self.reader.runtime, &listing).await.map_err(PlegError::Decode)?;
        drop(listing);
        let pods = group_pods(sandboxes, containers);
        let mut outcome = RelistOutcome { pods: pods.len(), ..Default::default() };
        self.records.set_current(pods);

        // Pods with transitions, or whose last read failed (this relist is their retry),
        // or with a stopped container's final status to settle.
        let retried: HashSet<String> = self
            .reads
            .take_where(|read, why| matches!(read, Read::Pod(_)) && why.has(Reason::FailedRead))
            .into_iter()
            .filter_map(|r| match r.key {
                Read::Pod(uid) => Some(uid),
                _ => None,
            })
            .chain(std::mem::take(&mut self.books.failed))
            .collect();
        let mut also: HashSet<String> = retried.union(&self.seeds.unread).cloned().collect();
        also.extend(self.books.final_statuses.lock().pods_heard_before(start).cloned());
        let work: BTreeMap<String, Transitions> =
            self.records.changed(&also).into_iter().filter(|(uid, t)| !t.is_empty() || also.contains(uid)).collect();
        self.seeds.unread.clear();
        let seeded = std::mem::take(&mut self.seeds.last);
        // Not listed any more: the pod is gone from the runtime.
        let (jobs, unlisted) = self.listed_jobs(work, &seeded, start);
        outcome.inspected = jobs.len();
        let mut results = self.reader.read_many(jobs).await;
        results.extend(unlisted);
        results.sort_by(|a, b| a.uid.cmp(&b.uid));

        let mut failed = HashSet::new();
        // Whether a read found a pod changed since the listing: the records no longer
        // hold this listing, and the next one is diffed in full.
        let mut read_past_listing = false;
        for ReadResult { uid, at, asked: transitions, seen, .. } in results {
            // A listed pod's read is never unlisted; were it, nothing is known of it.
            let found = seen.map_or_else(Found::Failed, |s| s.found);
            let reworded_since_seed = match &found {
                Found::Status(status) => seeded.get(&uid).is_some_and(|seed| !reworded(seed, status).is_empty()),
                _ => false,
            };
            let sync = retried.contains(&uid) || reworded_since_seed;
            let how = ApplyHow {
                listed_at: start,
                transitions: &transitions,
                sync,
                source: EventSource::Relist,
                suspect_from: Some(start),
            };
            match self.apply(uid.clone(), at, found, how).await {
                Some(applied) => {
                    outcome.events += applied.events;
                    outcome.missed += applied.missed;
                    read_past_listing |= applied.read_past_listing;
                }
                None => {
                    failed.insert(uid);
                    outcome.failed += 1;
                }
            }
        }
        for uid in &failed {
            self.retry_later(uid);
        }
        outcome.events += self.end_unread_lives(start, &failed).await;
        // Those heard since the relist began wait for a read after them.
        self.books.final_statuses.lock().retain_pods(start, |uid| failed.contains(uid));
        self.listing.fingerprint = fingerprint.filter(|_| !read_past_listing);
        self.count_states();
        self.finish(start, start_wall);
        Ok(outcome)
    }

    /// Ends the pods the records never knew that the stream's final statuses heard of
    /// before the relist at `start` and that are gone (their whole life fell between two
    /// reads): they die and go now, with the runtime's exit status. Words about pods this
    /// relist did not apply otherwise (`failed`: to read again) stay. Returns the events sent.
    async fn end_unread_lives(&mut self, start: Instant, failed: &HashSet<String>) -> usize {
        let gone: std::collections::BTreeSet<String> = self
            .books
            .final_statuses
            .lock()
            .pods_heard_before(start)
            .filter(|uid| !failed.contains(*uid) && self.records.current(uid).is_none())
            .cloned()
            .collect();
        let mut events = 0;
        for uid in gone {
            let how = ApplyHow {
                listed_at: start,
                transitions: &[],
                sync: false,
                source: EventSource::Relist,
                suspect_from: None,
            };
            if let Some(applied) = self.apply(uid, start, Found::Gone, how).await {
                events += applied.events;
            }
        }
        events
    }

    /// Reads pod `uid` again after a failed read: at the relist period while the stream
    /// is up (full relists may be far apart), else at the next full relist, which reads
    /// every pod in [`Books::failed`].
    fn retry_later(&mut self, uid: &str) {
        if self.stream.state.borrow().is_up() {
            let now = Instant::now();
            self.reads.schedule(
                Read::Pod(uid.to_owned()),
                Why::because(Reason::FailedRead, now),
                now + self.cfg.relist_period,
            );
        } else {
            self.books.failed.insert(uid.to_owned());
        }
    }

    /// Stores a failed inspection. A pod whose very first inspection fails is cached
    /// with the error and what the listing says of it, as the kubelet caches
    /// `(status, err)`, so readers and waiters get the error rather than no pod.
    fn store_failure(&mut self, uid: &str, err: &ReadError, at: Instant) {
        let placeholder = match self.cache.reader().get(uid).and_then(|e| e.status.clone()) {
            Some(_) => None,
            None => {
                let (namespace, name) = self.records.pod_name(uid);
                Some(Arc::new(PodStatus::empty(uid, &namespace, &name)))
            }
        };
        self.cache.set(uid, placeholder, Some(err.to_string()), at);
    }

    /// Clears the suspects whose events arrived (`announced`: the pods the stream named)
    /// and judges the stream on the rest.
    fn settle_suspects(&mut self, announced: &[String]) {
        let missed = self.stream.trust.settle(announced);
        if missed > 0 {
            self.judge_stream(missed);
        }
    }

    /// Counts and logs changes the stream missed, and moves the safety-net period.
    fn judge_stream(&mut self, missed: usize) {
        let up = self.stream.state.borrow().is_up();
        let stream = &mut self.stream;
        stream.trust.judge(missed, up, self.cfg.relist_period, &self.report.metrics);
    }

    /// Applies what a read of one pod found — to the cache, the pod records, the books and
    /// the publish channel as lifecycle events ([`events_of`] decides them). The one path
    /// from any read of the runtime (full relist, targeted relist) to the events. `None`
    /// when the read failed: the pod's events wait for a read that succeeds.
    async fn apply(&mut self, uid: String, at: Instant, found: Found, how: ApplyHow<'_>) -> Option<Applied> {
        let ApplyHow { listed_at, transitions, sync, source, suspect_from } = how;
        let uid = uid.as_str();
        let previous = self.cache.reader().get(uid).and_then(|e| e.status.clone());
        let status = match found {
            Found::Gone => {
                self.cache.delete(uid, at);
                self.books.gone.note(uid, at);
                None
            }
            Found::Status(status) => {
                let status = Arc::new(status);
                self.cache.set(uid, Some(status.clone()), None, at);
                Some(status)
            }
            Found::Failed(err) => {
                tracing::debug!(pod = %uid, error = %err, "pod read failed; its events wait for a read that succeeds");
                self.report.metrics.inspection_errors.inc();
                self.store_failure(uid, &err, at);
                return None;
            }
        };
        let books = &mut self.books;
        let (namespace, name) = self.records.pod_name(uid);
        let now = Instant::now();
        for (id, first) in books.amended_exits.note(uid, status.as_deref()) {
            let read = Read::Status(StatusBook::AmendedExits, id);
            self.reads.schedule(read, Why::because(Reason::UnsettledExit, now), first);
        }
        // A sandbox said deleted is still there if the listing or the statuses have it
        // (a status read NotFound while the listing still had it: still there).
        let records = &self.records;
        books.deleted_sandboxes.note(uid, |id| {
            records.current(uid).is_some_and(|p| p.sandboxes.iter().any(|s| s.id == id))
                || status.as_ref().is_some_and(|p| p.sandboxes.iter().any(|s| s.id == id))
        });
        // What NRI said ahead of the status, let go where this read shows it: the statuses
        // say whether an object runs, the listing too whether it is there.
        books.early_words.note(uid, |id, container| shown(records.current(uid), status.as_deref(), id, container));
        // The read came after the listing: what it found is the later word, and the
        // record commits it, so what is committed is what the events carry.
        let late = self.records.observe(uid, status.as_deref());
        let read_past_listing = !late.is_empty();
        let with_late;
        let transitions: &[Transition] = if late.is_empty() {
            transitions
        } else {
            with_late = in_story_order([transitions, &late].concat());
            &with_late
        };
        let old = self.records.old(uid);
        let empty_record = old.is_some_and(|p| p.sandboxes.is_empty() && p.containers.is_empty());
        let known = |id: &str| old.is_some_and(|p| p.state_of(id) != PlegState::NonExistent);
        let (identity, Settled { final_statuses, unseen }) = {
            let mut book = books.final_statuses.lock();
            (book.identity(uid).cloned(), book.settle(uid, listed_at, transitions, status.as_deref(), known))
        };
        self.records.commit(uid);
        debug_assert!(
            status.as_deref().is_none_or(|s| self.records.old(uid).is_some_and(|o| o.holds(s))),
            "pod {uid}: the committed record is not the status its events carry"
        );
        let events = events_of(PodRead {
            uid,
            namespace: &namespace,
            name: &name,
            identity: identity.as_ref(),
            observed_at: SystemTime::now(),
            now: status.as_ref().map_or(PodNow::Gone, PodNow::Present),
            transitions,
            unseen: &unseen,
            final_statuses: &final_statuses,
            reworded: &match (&previous, &status) {
                (Some(before), Some(now)) => reworded(before, now),
                _ => Vec::new(),
            },
            sync,
            empty_record,
            source,
        });
        let missed = suspect_from.map_or(0, |listed| self.stream.trust.suspect(uid, &events, listed));
        let sent = events.len();
        if sent > 0 && self.events.send(events).await.is_err() {
            tracing::debug!("event receiver gone; dropping events");
        }
        Some(Applied { events: sent, missed, read_past_listing })
    }

    /// Ends a full relist that started at `start`, its results in the cache: the
    /// cache's global timestamp advances, and only now does the relist count for
    /// health and readiness.
    fn finish(&mut self, start: Instant, start_wall: SystemTime) {
        self.cache.update_time(start);
        self.report.health.record_relist(start, start_wall);
        let m = &self.report.metrics;
        m.cache_pods.set(self.cache.reader().len() as i64);
        m.last_seen.set(start_wall.duration_since(SystemTime::UNIX_EPOCH).map(|d| d.as_secs_f64()).unwrap_or(0.0));
    }

    /// Sets the container-state gauges from the cache (after full and targeted relists
    /// alike, so they stay current while the stream makes full relists rare).
    fn count_states(&self) {
        let m = &self.report.metrics;
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

    /// Reads the pods of `batch` alone, now, as the run loop does when they come due:
    /// lists each pod alone, inspects it, and applies the results in UID order, chunk by
    /// chunk. A read of a pod answers every request for it still scheduled: they are
    /// taken with it. Pods that cannot be read are retried later; one that follows a
    /// failed read publishes a `POD_SYNC` when nothing transitioned.
    pub async fn read_pods(&mut self, batch: Vec<(String, Why)>) -> RelistOutcome {
        // The records move past the last full listing: the next one is diffed in full.
        self.listing.fingerprint = None;
        let jobs: Vec<ReadJob<Asked>> = batch.into_iter().map(|(uid, why)| self.pod_job(uid, why)).collect();
        let mut outcome = RelistOutcome::default();
        // In chunks, so a burst of dirty pods publishes as it goes rather than after
        // the slowest of hundreds of reads.
        let chunk = self.cfg.concurrency.max(1) * 4;
        let mut jobs = jobs.into_iter().peekable();
        while jobs.peek().is_some() {
            let mut results = self.reader.read_many(jobs.by_ref().take(chunk).collect()).await;
            results.sort_by(|a, b| a.uid.cmp(&b.uid));
            for r in results {
                self.apply_read(r, &mut outcome).await;
            }
        }
        self.report.metrics.cache_pods.set(self.cache.reader().len() as i64);
        // A container's state moves only with an event; a failed read drops a status.
        if outcome.events > 0 || outcome.failed > 0 {
            self.count_states();
        }
        outcome
    }

    /// The read of pod `uid` for `why` and every request for it still scheduled: listed
    /// alone, with the sandboxes and containers it is known to hold or was told of read
    /// alongside.
    fn pod_job(&mut self, uid: String, mut why: Why) -> ReadJob<Asked> {
        if let Some(pending) = self.reads.remove(&Read::Pod(uid.clone())) {
            why.merge(pending.message);
        }
        let retried = self.books.failed.remove(&uid) || why.has(Reason::FailedRead);
        let asked = Asked { source: why.source(), retried };
        let mut sandboxes = self.records.sandbox_ids(&uid);
        sandboxes.extend(why.sandbox_ids);
        let mut containers = self.records.container_ids(&uid);
        containers.extend(why.container_ids.into_iter().filter(|id| !sandboxes.contains(id)));
        let previous = self.cache.reader().get(&uid).and_then(|e| e.status.clone());
        ReadJob { uid, listing: PodListing::Alone { sandboxes, containers }, previous, asked }
    }

    /// The full relist's reads of the listed pods of `work`, each carrying its
    /// transitions; and the results of the pods not listed any more (gone at `start`),
    /// with theirs. A pod
    /// the cache does not hold yet is read against what the journal last said of it
    /// (`seeded`): what was read once (a container's process) is not read again after a
    /// restart.
    fn listed_jobs(
        &self,
        work: BTreeMap<String, Transitions>,
        seeded: &HashMap<String, Arc<PodStatus>>,
        start: Instant,
    ) -> (Vec<ReadJob<Transitions>>, Vec<ReadResult<Transitions>>) {
        let reader = self.cache.reader();
        let (mut jobs, mut unlisted) = (Vec::new(), Vec::new());
        for (uid, transitions) in work {
            let Some(pod) = self.records.current(&uid).cloned() else {
                unlisted.push(ReadResult::gone(uid, start, transitions));
                continue;
            };
            let previous = reader.get(&uid).and_then(|e| e.status.clone()).or_else(|| seeded.get(&uid).cloned());
            jobs.push(ReadJob { uid, listing: PodListing::Listed(pod), previous, asked: transitions });
        }
        (jobs, unlisted)
    }

    /// Applies one pod's targeted read: its records, its status and events; a read that
    /// failed, or whose events could not be applied, is retried later.
    async fn apply_read(&mut self, r: ReadResult<Asked>, outcome: &mut RelistOutcome) {
        let ReadResult { uid, at, took, asked, seen } = r;
        self.report.metrics.pod_relist_duration.observe(took.as_secs_f64());
        outcome.pods += 1;
        let Seen { listed, found } = match seen {
            Ok(seen) => seen,
            Err(err) => {
                tracing::debug!(pod = %uid, error = %err, "targeted relist failed; retrying");
                // Its event (if any) is used up: the retry's finding is no miss.
                self.stream.trust.announce(&uid);
                self.retry_later(&uid);
                outcome.failed += 1;
                return;
            }
        };
        self.records.set_current_one(&uid, listed);
        let transitions = self.records.transitions(&uid);
        let mut sync = asked.retried;
        if let Found::Status(status) = &found {
            let previous = self.cache.reader().get(&uid).and_then(|e| e.status.clone());
            sync |= previous.is_some_and(|p| !same_status(&p, status));
        }
        if matches!(found, Found::Status(_) | Found::Failed(_)) {
            outcome.inspected += 1;
        }
        // A pod read because someone waits on it, or retried: a change found
        // here was not announced either.
        let suspect_from = (asked.source != EventSource::CriEvent).then_some(at);
        let how = ApplyHow { listed_at: at, transitions: &transitions, sync, source: asked.source, suspect_from };
        match self.apply(uid.clone(), at, found, how).await {
            Some(applied) => {
                outcome.events += applied.events;
                outcome.missed += applied.missed;
            }
            None => {
                outcome.failed += 1;
                self.stream.trust.announce(&uid);
                self.retry_later(&uid);
            }
        }
    }
}

/// The containers dead in both `before` and `now` that say another exit code or reason
/// now.
fn reworded(before: &PodStatus, now: &PodStatus) -> Vec<String> {
    now.containers
        .iter()
        .filter(|c| c.state == ContainerState::Exited)
        .filter(|c| {
            before.containers.iter().any(|b| {
                b.id == c.id
                    && b.state == ContainerState::Exited
                    && (b.exit_code, &b.reason) != (c.exit_code, &c.reason)
            })
        })
        .map(|c| c.id.clone())
        .collect()
}

/// What a read of a pod shows of object `id` (a container, else a sandbox) an early word
/// was said of: the statuses read (`read`) say whether it runs and has left `CREATED`,
/// the listing (`listed`) too whether it is there.
fn shown(listed: Option<&super::records::RuntimePod>, read: Option<&PodStatus>, id: &str, container: bool) -> Shown {
    // (runs or is ready, has left CREATED)
    let read = read.and_then(|p| {
        if container {
            let c = p.containers.iter().find(|c| c.id == id)?;
            Some((c.state == ContainerState::Running, c.state != ContainerState::Created))
        } else {
            p.sandboxes.iter().find(|s| s.id == id).map(|s| (s.state == SandboxState::Ready, true))
        }
    });
    let listed = listed.and_then(|p| {
        let objects = if container { &p.containers } else { &p.sandboxes };
        let o = objects.iter().find(|o| o.id == id)?;
        Some((o.state == PlegState::Running, matches!(o.state, PlegState::Running | PlegState::Exited)))
    });
    let (up, begun) = read.or(listed).unwrap_or((false, false));
    Shown { found: read.is_some() || listed.is_some(), up, begun }
}

#[cfg(test)]
mod tests;

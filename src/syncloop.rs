//! The sync loop: one ordered event loop over lifecycle events, resync requests and
//! follow-up events. Handlers run in registration order (reversed for events that undo
//! things), each processed event gets a sequence number and a history record, and the
//! loop never waits for anything slow (handlers only enqueue or publish).

use std::borrow::Cow;
use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::mpsc;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use futures_util::StreamExt;

use crate::journal::{Entry, Feed, FeedItem, Journal, Since};
use crate::model::event::{EventType, PodLifecycleEvent};

mod history;
pub use history::*;

/// Why a resync runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ResyncKind {
    /// The first event of the loop.
    Startup,
    /// Periodic healing.
    Periodic,
    /// Healing after a handler failed.
    AfterError,
    /// Asked for (`POST /debug/resync`).
    OnDemand,
    /// The loop's input overflowed: events were skipped, so everything is re-read.
    Overflow,
}

impl ResyncKind {
    /// Its name in records (`startup`, `after-error`, …).
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Startup => "startup",
            Self::Periodic => "periodic",
            Self::AfterError => "after-error",
            Self::OnDemand => "on-demand",
            Self::Overflow => "overflow",
        }
    }
}

/// A follow-up event produced while handling another one.
#[derive(Clone, Debug)]
pub struct FollowUp {
    /// Short name.
    pub name: String,
    /// What it is about.
    pub description: String,
    /// A lifecycle event to publish into the stream, if any.
    pub event: Option<PodLifecycleEvent>,
}

/// What the loop processes.
#[derive(Clone, Debug)]
pub enum LoopInput {
    /// A published lifecycle event.
    Lifecycle(Arc<Entry>),
    /// A resync.
    Resync(ResyncKind),
    /// A follow-up.
    FollowUp(Box<FollowUp>),
}

/// An event being processed.
#[derive(Clone, Debug)]
pub struct LoopEvent {
    /// Sequence number (0: the startup resync).
    pub seq: u64,
    /// The input.
    pub input: LoopInput,
    /// The sequence number of the event this follows up, if it is a follow-up.
    pub follow_up_of: Option<u64>,
}

/// Where handlers put follow-ups.
#[derive(Default)]
pub struct Outbox {
    follow_ups: Vec<FollowUp>,
}

/// A sync-loop handler. Handlers must be quick: they run inside the one loop.
pub trait Handler: Send {
    /// Its name, for records.
    fn name(&self) -> &'static str;
    /// Whether it wants this event.
    fn selects(&self, ev: &LoopEvent) -> bool;
    /// Handles the event; returns a description of the change made.
    fn handle(&mut self, ev: &LoopEvent, out: &mut Outbox) -> Result<String, HandlerError>;
}

/// A handler's failure, with its source (each handler has its own error types).
pub type HandlerError = Box<dyn std::error::Error + Send + Sync>;

/// The loop's inputs from other tasks. Cheap to clone.
#[derive(Clone)]
pub struct SyncLoopHandle {
    follow_tx: mpsc::Sender<(FollowUp, Option<u64>)>,
    resync_tx: mpsc::Sender<ResyncKind>,
    origins: Arc<Mutex<HashMap<String, u64>>>,
}

/// The follow-up queue is full.
#[derive(Debug, thiserror::Error)]
#[error("the sync loop's follow-up queue is full")]
pub struct QueueFull;

impl SyncLoopHandle {
    /// Queues a follow-up; it overtakes lifecycle events already queued. Never waits.
    pub fn push_follow_up(&self, f: FollowUp, follow_up_of: Option<u64>) -> Result<(), QueueFull> {
        self.follow_tx.try_send((f, follow_up_of)).map_err(|_| QueueFull)
    }

    /// Asks for a resync (requests coalesce while the queue of 10 is full).
    pub fn request_resync(&self, kind: ResyncKind) {
        let _ = self.resync_tx.try_send(kind);
    }

    /// Records that event `seq` is why `key` was queued.
    pub fn set_origin(&self, key: &str, seq: u64) {
        self.origins.lock().expect("origins lock").insert(key.to_owned(), seq);
    }

    /// The sequence number of the event that last queued `key`.
    pub fn origin(&self, key: &str) -> Option<u64> {
        self.origins.lock().expect("origins lock").get(key).copied()
    }

    /// Forgets why `key` was queued (its pod is gone).
    pub fn forget_origin(&self, key: &str) {
        self.origins.lock().expect("origins lock").remove(key);
    }

    /// Keeps the origins of the keys `keep` accepts only.
    pub fn retain_origins(&self, mut keep: impl FnMut(&str) -> bool) {
        self.origins.lock().expect("origins lock").retain(|k, _| keep(k));
    }

    /// How many keys have a remembered origin.
    pub fn origins(&self) -> usize {
        self.origins.lock().expect("origins lock").len()
    }
}

/// The loop.
pub struct SyncLoop {
    handlers: Vec<Box<dyn Handler>>,
    journal: Journal,
    history: Arc<Mutex<History>>,
    follow_rx: mpsc::Receiver<(FollowUp, Option<u64>)>,
    resync_rx: mpsc::Receiver<ResyncKind>,
    handle: SyncLoopHandle,
    periodic: Option<Duration>,
    healing_delay: Duration,
    startup_gate: Option<crate::pleg::health::PlegHealth>,
    startup_deadline: Duration,
    seq: u64,
    started: bool,
    pending: VecDeque<(FollowUp, Option<u64>)>,
    beat: crate::liveness::Beat,
}

impl SyncLoop {
    /// A loop over `journal`'s events with `handlers` in this order.
    pub fn new(journal: Journal, handlers: Vec<Box<dyn Handler>>, history: Arc<Mutex<History>>) -> Self {
        let (follow_tx, follow_rx) = mpsc::channel(1000);
        let (resync_tx, resync_rx) = mpsc::channel(10);
        let handle = SyncLoopHandle { follow_tx, resync_tx, origins: Default::default() };
        Self {
            handlers,
            journal,
            history,
            follow_rx,
            resync_rx,
            handle,
            periodic: None,
            healing_delay: Duration::from_secs(5),
            startup_gate: None,
            startup_deadline: Duration::from_secs(30),
            seq: 0,
            started: false,
            pending: VecDeque::new(),
            beat: crate::liveness::Beat::detached("sync"),
        }
    }

    /// Beats `beat` on every event and at least every [`crate::liveness::BEAT_EVERY`].
    pub fn with_liveness(mut self, beat: crate::liveness::Beat) -> Self {
        self.beat = beat;
        self
    }

    /// Adds a handler after the others.
    pub fn add_handler(&mut self, h: Box<dyn Handler>) {
        self.handlers.push(h);
    }

    /// Resyncs every `period` (periodic healing).
    pub fn with_periodic_resync(mut self, period: Option<Duration>) -> Self {
        self.periodic = period;
        self
    }

    /// Runs the startup resync once the first relist completed (or after `deadline`).
    pub fn with_startup_gate(mut self, health: crate::pleg::health::PlegHealth, deadline: Duration) -> Self {
        self.startup_gate = Some(health);
        self.startup_deadline = deadline;
        self
    }

    /// Delay of the healing resync after a handler error.
    pub fn with_healing_delay(mut self, d: Duration) -> Self {
        self.healing_delay = d;
        self
    }

    /// A handle for other tasks.
    pub fn handle(&self) -> SyncLoopHandle {
        self.handle.clone()
    }

    fn process(&mut self, input: LoopInput, follow_up_of: Option<u64>) -> bool {
        let seq = if self.started { self.seq + 1 } else { 0 };
        self.started = true;
        self.seq = seq;
        let ev = LoopEvent { seq, input, follow_up_of };
        let reverse = matches!(&ev.input, LoopInput::Lifecycle(e) if e.event.kind == EventType::ContainerRemoved);
        let started_at = crate::clock::now();
        let t0 = Instant::now();
        let mut out = Outbox::default();
        let mut order: Vec<usize> =
            if reverse { (0..self.handlers.len()).rev().collect() } else { (0..self.handlers.len()).collect() };
        order.retain(|&i| self.handlers[i].selects(&ev));
        // Sized exactly: a history keeps up to 200,000 records, most of them with one
        // handler, and a Vec grown by push starts at four.
        let mut records = Vec::with_capacity(order.len());
        let mut failed = false;
        for i in order {
            let h = &mut self.handlers[i];
            match h.handle(&ev, &mut out) {
                // Boxed strings are exactly as long as their text; the history keeps
                // them for the first hour and up to the retention after it.
                Ok(change) => records.push(HandlerRecord { handler: h.name(), change: change.into(), error: None }),
                Err(e) => {
                    failed = true;
                    tracing::warn!(handler = h.name(), seq, error = %e, "sync loop handler failed");
                    records.push(HandlerRecord {
                        handler: h.name(),
                        change: "".into(),
                        error: Some(e.to_string().into()),
                    });
                }
            }
        }
        let (name, description, revision) = describe(&ev);
        let record = EventRecord {
            seq,
            name,
            description: description.into(),
            revision,
            follow_up_of,
            reverse,
            started_at,
            duration_us: t0.elapsed().as_micros() as u64,
            handlers: records,
        };
        self.history.lock().expect("history lock").push(record);
        // Follow-ups made here run next, before anything else.
        for f in out.follow_ups.into_iter().rev() {
            self.pending.push_front((f, Some(seq)));
        }
        failed
    }

    /// Runs until shutdown.
    pub async fn run(mut self, shutdown: CancellationToken) {
        let live = |j: &Journal| -> Feed {
            j.subscribe(Since::Revision(j.revision(), j.epoch()), Default::default()).into_feed().1
        };
        let mut feed = live(&self.journal);
        // Startup resync first: events arriving meanwhile wait in the feed.
        if let Some(h) = self.startup_gate.clone() {
            let deadline = tokio::time::sleep(self.startup_deadline);
            let (first, mut beat) = (h.first_relist(), crate::liveness::beat_timer());
            tokio::pin!(deadline, first);
            loop {
                self.beat.beat();
                tokio::select! {
                    _ = shutdown.cancelled() => return,
                    _ = &mut first => break,
                    _ = &mut deadline => break,
                    _ = beat.tick() => {}
                }
            }
        }
        let mut healing_at: Option<Instant> = None;
        if self.process(LoopInput::Resync(ResyncKind::Startup), None) {
            healing_at = Some(Instant::now() + self.healing_delay);
        }
        let mut next_periodic = self.periodic.map(|p| Instant::now() + p);
        let mut beat = crate::liveness::beat_timer();
        loop {
            self.beat.beat();
            // Follow-ups overtake queued events.
            let input = if let Some((f, of)) = self.pending.pop_front() {
                Some((LoopInput::FollowUp(Box::new(f)), of))
            } else if let Ok((f, of)) = self.follow_rx.try_recv() {
                Some((LoopInput::FollowUp(Box::new(f)), of))
            } else {
                None
            };
            if let Some((input, of)) = input {
                if self.process(input, of) && healing_at.is_none() {
                    healing_at = Some(Instant::now() + self.healing_delay);
                }
                continue;
            }
            let wake = [healing_at, next_periodic].into_iter().flatten().min();
            let sleep = async {
                match wake {
                    Some(t) => tokio::time::sleep_until(t).await,
                    None => std::future::pending().await,
                }
            };
            let input = tokio::select! {
                biased;
                _ = shutdown.cancelled() => return,
                _ = beat.tick() => continue,
                Some((f, of)) = self.follow_rx.recv() => (LoopInput::FollowUp(Box::new(f)), of),
                Some(kind) = self.resync_rx.recv() => (LoopInput::Resync(kind), None),
                item = feed.next() => match item {
                    Some(FeedItem::Entry(e)) => (LoopInput::Lifecycle(e), None),
                    // The journal dropped the loop (or a replay stopped, which a live
                    // feed never has): a resync, never a silent gap.
                    Some(FeedItem::Overflowed(_) | FeedItem::ReplayStopped(_)) | None => {
                        feed = live(&self.journal);
                        (LoopInput::Resync(ResyncKind::Overflow), None)
                    }
                },
                _ = sleep => {
                    let now = Instant::now();
                    if healing_at.is_some_and(|t| t <= now) {
                        healing_at = None;
                        (LoopInput::Resync(ResyncKind::AfterError), None)
                    } else {
                        next_periodic = self.periodic.map(|p| now + p);
                        (LoopInput::Resync(ResyncKind::Periodic), None)
                    }
                }
            };
            let (input, of) = input;
            if self.process(input, of) && healing_at.is_none() {
                healing_at = Some(Instant::now() + self.healing_delay);
            }
        }
    }
}

fn describe(ev: &LoopEvent) -> (Cow<'static, str>, String, Option<u64>) {
    match &ev.input {
        LoopInput::Lifecycle(e) => {
            let x = &e.event;
            let what = if x.is_sandbox { "sandbox" } else { &x.container_name };
            (
                Cow::Borrowed(x.kind.as_str()),
                format!(
                    "{}/{} {} {} ({})",
                    x.pod_namespace,
                    x.pod_name,
                    what,
                    crate::model::short_id(&x.container_id),
                    x.source.as_str()
                ),
                Some(e.revision),
            )
        }
        LoopInput::Resync(k) => (format!("resync:{}", k.as_str()).into(), String::new(), None),
        LoopInput::FollowUp(f) => (format!("follow-up:{}", f.name).into(), f.description.clone(), None),
    }
}

impl Outbox {
    /// Queues a follow-up of the current event.
    pub fn follow_up(&mut self, f: FollowUp) {
        self.follow_ups.push(f);
    }
}

#[cfg(test)]
mod tests {
    use std::time::SystemTime;

    use super::history::{buffer_cost, text_cost as measured};
    use super::*;
    use crate::model::event::EventSource;

    /// Records what it saw into a shared log; follows up on `CONTAINER_DIED`, fails on
    /// `POD_SYNC`.
    struct Recorder {
        name: &'static str,
        log: Arc<Mutex<Vec<String>>>,
        follow_up_on_died: bool,
    }

    impl Handler for Recorder {
        fn name(&self) -> &'static str {
            self.name
        }
        fn selects(&self, _: &LoopEvent) -> bool {
            true
        }
        fn handle(&mut self, ev: &LoopEvent, out: &mut Outbox) -> Result<String, HandlerError> {
            let (name, _, _) = describe(ev);
            self.log.lock().unwrap().push(format!("{}#{}:{}", self.name, ev.seq, name));
            if let LoopInput::Lifecycle(e) = &ev.input {
                if self.follow_up_on_died && e.event.kind == EventType::ContainerDied {
                    out.follow_up(FollowUp { name: "CHECK".into(), description: String::new(), event: None });
                }
                if e.event.kind == EventType::PodSync {
                    return Err("boom".into());
                }
            }
            Ok("noted".into())
        }
    }

    fn event(kind: EventType) -> PodLifecycleEvent {
        PodLifecycleEvent {
            pod_uid: "u".into(),
            pod_namespace: "ns".into(),
            pod_name: "p".into(),
            kind,
            container_id: "c".into(),
            container_name: "app".into(),
            is_sandbox: false,
            source: EventSource::Relist,
            observed_at: SystemTime::now(),
            runtime_timestamp: None,
            pod: None,
            message: String::new(),
        }
    }

    struct Rig {
        journal: Journal,
        history: Arc<Mutex<History>>,
        log: Arc<Mutex<Vec<String>>>,
        health: crate::pleg::health::PlegHealth,
        handle: SyncLoopHandle,
        shutdown: CancellationToken,
    }

    fn rig(buffer: usize) -> Rig {
        let journal = Journal::new(1000, buffer, crate::journal::JournalMetrics::throwaway());
        let history = Arc::new(Mutex::new(History::new(Duration::from_secs(3600), Duration::from_secs(3600), 10_000)));
        let log = Arc::new(Mutex::new(Vec::new()));
        let handlers: Vec<Box<dyn Handler>> = vec![
            Box::new(Recorder { name: "A", log: log.clone(), follow_up_on_died: true }),
            Box::new(Recorder { name: "B", log: log.clone(), follow_up_on_died: false }),
        ];
        let health = crate::pleg::health::PlegHealth::new(Duration::from_secs(180));
        let l = SyncLoop::new(journal.clone(), handlers, history.clone())
            .with_startup_gate(health.clone(), Duration::from_secs(30))
            .with_healing_delay(Duration::from_secs(5));
        let handle = l.handle();
        let shutdown = CancellationToken::new();
        tokio::spawn(l.run(shutdown.clone()));
        Rig { journal, history, log, health, handle, shutdown }
    }

    async fn settle() {
        for _ in 0..50 {
            tokio::task::yield_now().await;
        }
    }

    fn names(r: &Rig) -> Vec<String> {
        r.history.lock().unwrap().query(&Query::default()).iter().map(|r| format!("{}:{}", r.seq, r.name)).collect()
    }

    #[tokio::test(start_paused = true)]
    async fn the_startup_resync_runs_before_any_other_event() {
        let r = rig(100);
        settle().await;
        r.journal.append(event(EventType::ContainerStarted));
        settle().await;
        assert!(names(&r).is_empty(), "nothing runs before the first relist");
        r.health.record_relist(Instant::now(), SystemTime::now());
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert_eq!(names(&r), ["0:resync:startup", "1:CONTAINER_STARTED"]);
        r.shutdown.cancel();
    }

    #[tokio::test(start_paused = true)]
    async fn handlers_run_in_order_and_in_reverse_for_removals() {
        let r = rig(100);
        r.health.record_relist(Instant::now(), SystemTime::now());
        tokio::time::sleep(Duration::from_millis(50)).await;
        r.journal.append(event(EventType::ContainerStarted));
        r.journal.append(event(EventType::ContainerRemoved));
        settle().await;
        let log = r.log.lock().unwrap().clone();
        assert_eq!(
            log,
            [
                "A#0:resync:startup",
                "B#0:resync:startup",
                "A#1:CONTAINER_STARTED",
                "B#1:CONTAINER_STARTED",
                "B#2:CONTAINER_REMOVED",
                "A#2:CONTAINER_REMOVED"
            ]
        );
        let rec = r.history.lock().unwrap().query(&Query { seq: Some(2), ..Default::default() });
        assert!(rec[0].reverse);
        r.shutdown.cancel();
    }

    #[tokio::test(start_paused = true)]
    async fn follow_ups_overtake_queued_events() {
        let r = rig(100);
        r.health.record_relist(Instant::now(), SystemTime::now());
        tokio::time::sleep(Duration::from_millis(50)).await;
        // Both are queued before the loop runs again.
        r.journal.append(event(EventType::ContainerDied));
        r.journal.append(event(EventType::ContainerStarted));
        settle().await;
        assert_eq!(names(&r), ["0:resync:startup", "1:CONTAINER_DIED", "2:follow-up:CHECK", "3:CONTAINER_STARTED"]);
        let rec = r.history.lock().unwrap().query(&Query { seq: Some(2), ..Default::default() });
        assert_eq!(rec[0].follow_up_of, Some(1));
        // One pushed from outside overtakes lifecycle events queued behind it too.
        r.handle
            .push_follow_up(FollowUp { name: "EXT".into(), description: String::new(), event: None }, Some(3))
            .unwrap();
        r.journal.append(event(EventType::ContainerStarted));
        settle().await;
        let all = names(&r);
        assert_eq!(&all[4..], ["4:follow-up:EXT", "5:CONTAINER_STARTED"]);
        r.shutdown.cancel();
    }

    #[tokio::test(start_paused = true)]
    async fn a_failed_handler_schedules_one_healing_resync() {
        let r = rig(100);
        r.health.record_relist(Instant::now(), SystemTime::now());
        tokio::time::sleep(Duration::from_millis(50)).await;
        r.journal.append(event(EventType::PodSync));
        r.journal.append(event(EventType::PodSync));
        settle().await;
        tokio::time::sleep(Duration::from_secs(6)).await;
        let all = names(&r);
        assert_eq!(all, ["0:resync:startup", "1:POD_SYNC", "2:POD_SYNC", "3:resync:after-error"]);
        let rec = r.history.lock().unwrap().query(&Query { seq: Some(1), ..Default::default() });
        assert_eq!(rec[0].handlers[0].error.as_deref(), Some("boom"));
        r.shutdown.cancel();
    }

    #[tokio::test(start_paused = true)]
    async fn an_input_overflow_becomes_a_resync_and_on_demand_resyncs_are_recorded() {
        let r = rig(2);
        r.health.record_relist(Instant::now(), SystemTime::now());
        tokio::time::sleep(Duration::from_millis(50)).await;
        for _ in 0..5 {
            r.journal.append(event(EventType::ContainerStarted));
        }
        settle().await;
        r.handle.request_resync(ResyncKind::OnDemand);
        settle().await;
        let all = names(&r);
        assert_eq!(all.last().unwrap(), &format!("{}:resync:on-demand", all.len() - 1));
        assert!(all.iter().any(|n| n.ends_with("resync:overflow")), "{all:?}");
        r.shutdown.cancel();
    }

    #[tokio::test(start_paused = true)]
    async fn records_age_on_plegds_clock_so_a_wall_clock_step_back_cannot_keep_them() {
        // Paused time moves the monotonic clock and leaves the system's wall clock
        // where it is: to the history that is a wall clock stepped back by however
        // long passed. Records must still age out after the retention.
        crate::clock::start();
        let hour = Duration::from_secs(3600);
        let mut h = History::new(2 * hour, Duration::from_secs(1), 1000);
        tokio::time::sleep(Duration::from_secs(5)).await;
        h.push(record(1, crate::clock::now()));
        tokio::time::sleep(3 * hour).await;
        h.push(record(2, crate::clock::now()));
        let kept: Vec<u64> = h.query(&Query::default()).iter().map(|r| r.seq).collect();
        assert_eq!(kept, [2], "the record of three hours ago is past the two-hour retention");
    }

    fn record(seq: u64, at: SystemTime) -> EventRecord {
        EventRecord {
            seq,
            name: "x".into(),
            description: "".into(),
            revision: None,
            follow_up_of: None,
            reverse: false,
            started_at: at,
            duration_us: 0,
            handlers: vec![],
        }
    }

    #[test]
    fn history_keeps_the_first_hour_for_good_and_trims_the_rest_by_age() {
        let hour = Duration::from_secs(3600);
        let start = SystemTime::now() - 30 * hour;
        let mut h = History::started_at(start, 24 * hour, hour, 1000);
        h.push(record(0, start));
        h.push(record(1, start + hour / 2));
        h.push(record(2, start + 2 * hour)); // 28 h ago: beyond the 24 h retention
        h.push(record(3, start + 20 * hour)); // 10 h ago
        let kept: Vec<u64> = h.query(&Query::default()).iter().map(|r| r.seq).collect();
        assert_eq!(kept, [0, 1, 3]);
        let last: Vec<u64> = h.query(&Query { last: Some(1), ..Default::default() }).iter().map(|r| r.seq).collect();
        assert_eq!(last, [3]);
        let window = Query { since: Some(start + hour / 4), until: Some(start + 21 * hour), ..Default::default() };
        assert_eq!(h.query(&window).iter().map(|r| r.seq).collect::<Vec<_>>(), [1, 3]);
    }

    #[test]
    fn history_is_bounded_in_count_too() {
        let start = SystemTime::now() - Duration::from_secs(7200);
        let mut h = History::started_at(start, Duration::from_secs(86400), Duration::from_secs(60), 3);
        for i in 0..10 {
            h.push(record(i, SystemTime::now()));
        }
        assert_eq!(h.len(), 3);
    }

    fn sized(
        seq: u64,
        at: SystemTime,
        name: Option<usize>,
        description: usize,
        changes: &[(usize, Option<usize>)],
    ) -> EventRecord {
        EventRecord {
            seq,
            name: name.map_or(Cow::Borrowed("CONTAINER_DIED"), |n| Cow::Owned("n".repeat(n))),
            description: "d".repeat(description).into(),
            revision: seq.is_multiple_of(2).then_some(seq),
            follow_up_of: seq.is_multiple_of(3).then_some(seq / 3),
            reverse: seq.is_multiple_of(5),
            started_at: at,
            duration_us: seq * 7,
            handlers: changes
                .iter()
                .enumerate()
                .map(|(i, &(c, e))| HandlerRecord {
                    handler: ["enqueue", "publish", "other"][i % 3],
                    change: "c".repeat(c).into(),
                    error: e.map(|e| "é".repeat(e).into()),
                })
                .collect(),
        }
    }

    #[test]
    fn a_packed_record_reads_back_as_it_was_pushed() {
        let at = SystemTime::now();
        let mut h = History::new(Duration::from_secs(3600), Duration::from_secs(3600), 100);
        let records = [
            sized(0, at, Some(14), 0, &[]),
            sized(1, at, None, 300, &[(20, None), (0, Some(200))]),
            sized(6, at, Some(0), 1, &[(128, Some(1)), (5, None), (0, None)]),
        ];
        for r in &records {
            h.push(r.clone());
        }
        let back = h.query(&Query::default());
        let json = |r: &EventRecord| serde_json::to_string(r).unwrap();
        assert_eq!(back.iter().map(|r| json(r)).collect::<Vec<_>>(), records.iter().map(json).collect::<Vec<_>>());
    }

    proptest::proptest! {
        /// Whatever the records' sizes, the history's memory — each text block as the
        /// allocator sized it, and the queues' buffers — stays within its budget, is
        /// what `bytes` says, and the newest record is kept whenever it fits easily.
        #[test]
        fn the_history_takes_no_more_memory_than_its_budget_for_any_mix_of_records(
            budget in 256usize..256 * 1024,
            boot_secs in 0u64..3,
            records in proptest::collection::vec(
                (proptest::option::of(0usize..40), 0usize..600, proptest::collection::vec((0usize..300, proptest::option::of(0usize..100)), 0..4)),
                1..400,
            ),
        ) {
            let start = SystemTime::now() - Duration::from_secs(1);
            let mut h = History::started_at(start, Duration::from_secs(86400), Duration::from_secs(boot_secs), 1000)
                .with_budget(budget);
            for (seq, (name, description, changes)) in records.into_iter().enumerate() {
                let r = sized(seq as u64, start + Duration::from_millis(seq as u64 * 5), name, description, &changes);
                let fits_easily = r.footprint() + 8 * 1024 <= budget / 2;
                h.push(r);
                for p in h.boot.iter().chain(h.recent.iter()) {
                    proptest::prop_assert!(measured(&p.text) >= block(p.text.len()), "the model is a floor");
                }
                let texts: usize = h.boot.iter().chain(h.recent.iter()).map(|p| measured(&p.text)).sum();
                let measured = texts + buffer_cost(&h.boot) + buffer_cost(&h.recent);
                proptest::prop_assert_eq!(h.bytes(), measured);
                proptest::prop_assert!(measured <= budget, "{} > {}", measured, budget);
                // (The first hour's records are kept before newer ones.)
                if fits_easily && h.boot.is_empty() {
                    let last = h.recent.back().or(h.boot.back()).map(|p| p.seq);
                    proptest::prop_assert_eq!(last, Some(seq as u64));
                }
            }
        }
    }
}

//! One Watch stream, the framing over the journal's [`Feed`]: the epoch first, then
//! the snapshot (converted a few messages ahead of the transport) when the stream does
//! not resume, then the feed's entries (the replay a resume asked for, then live ones)
//! as the connection has room, bookmarks when it is quiet, and a reset and a fresh
//! snapshot when the feed ends. It also holds the caps on open and stalled streams.

use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use futures_util::{Stream, StreamExt};
use prometheus_client::metrics::gauge::Gauge;
use tokio::sync::mpsc;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tonic::Status;

use super::connections::{Flow, StreamFlow};
pub use super::connections::{Holder, ROOT_CONNECTIONS_SHARE};
use super::wire::{EncodedTail, WatchFrame};
use super::{PodLifecycleService, pod_api, to_filter, watch_event};
use crate::cache::PodCache;
use crate::journal::{Dropped, Entry, Feed, FeedError, FeedItem, Filter, Journal, ResetReason, Since, Snapshot, Start};
use crate::model::PodStatus;
use crate::proto::plegd as api;

/// Starts a watch: a stream that makes the snapshot or the replay, then live
/// events and bookmarks, as the transport asks for them. It ends at shutdown;
/// dropping it (the client went away) unsubscribes.
pub fn open(
    svc: &PodLifecycleService,
    holder: Option<Holder>,
    cut: Option<CancellationToken>,
    flow: Option<Arc<Flow>>,
    r: api::WatchRequest,
) -> Result<FeedStream, Status> {
    let filter = Arc::new(to_filter(r.filter, &r.types)?);
    let slot = match holder {
        Some(holder) => Some(svc.streams.take(holder, svc.cfg.max_watch_streams_per_uid).inspect_err(|_| {
            svc.metrics.watch_refused.inc();
        })?),
        None => None,
    };
    let handed = Arc::new(std::sync::atomic::AtomicU64::new(0));
    let flow = flow.as_ref().map(|f| f.watch());
    let tracked = cut.map(|cut| svc.streams.track(handed.clone(), cut, holder));
    let since = if r.since_revision == 0 { Since::Snapshot } else { Since::Revision(r.since_revision, r.epoch) };
    svc.metrics.watch_clients.inc();
    let feed = WatchFeed {
        journal: svc.journal.clone(),
        cache: svc.cache.clone(),
        tail: svc.tail.clone(),
        tasks: svc.tasks.clone(),
        filter,
        bookmark: svc.cfg.bookmark_interval,
        identities: svc.identities.clone(),
        shutdown: svc.shutdown.clone(),
        phase: Phase::Subscribe(since),
        feed: None,
        announced: false,
        queued: None,
        last_sent: Instant::now(),
        idle: Box::pin(tokio::time::sleep(svc.cfg.bookmark_interval)),
        burst: 0,
        replays: svc.replays.clone(),
        _guard: ClientGuard(svc.metrics.watch_clients.clone()),
        _slot: slot,
        _tracked: tracked,
        handed,
        flow,
        counted: false,
    };
    Ok(Box::pin(futures_util::stream::unfold(feed, |mut feed| async move {
        use prost::Message;
        use std::sync::atomic::Ordering::Relaxed;
        feed.handed.store(0, Relaxed);
        let item = match feed.next().await? {
            Ok(item) => item,
            Err(status) => return Some((Err(status), feed)),
        };
        // From now until the transport asks again, this stream waits for its client:
        // first for its connection to have room ([`Flow`]), then for the transport.
        feed.handed.store(millis_since_start().max(1), Relaxed);
        if let Some(flow) = &feed.flow
            && !std::mem::take(&mut feed.counted)
        {
            if let Err(held) = flow.room(&feed.shutdown).await {
                feed.phase = Phase::Done;
                return Some((Err(Status::resource_exhausted(held.to_string())), feed));
            }
            flow.handed(item.encoded_len() as u64);
        }
        Some((Ok(item), feed))
    })))
}

/// One Watch stream's source, polled by the connection as it has room: a live event
/// goes from the journal's buffer to the connection with no task or channel in
/// between (that hop had been the fan-out's largest cost per message and watcher).
/// Snapshots are converted on a short-lived task a few messages ahead instead, which
/// keeps the memory a burst of snapshots leaves behind as low as before.
struct WatchFeed {
    journal: Journal,
    cache: PodCache,
    tail: Arc<EncodedTail>,
    tasks: TaskTracker,
    filter: Arc<Filter>,
    bookmark: Duration,
    /// The pods' identities and the node's name, which `synced` says.
    identities: Arc<crate::model::identity::Identities>,
    shutdown: CancellationToken,
    phase: Phase,
    /// The journal's entries for this stream, once subscribed.
    feed: Option<Feed>,
    /// Whether the stream told its epoch (its first message does).
    announced: bool,
    /// A message to send before anything else (the reset after the epoch).
    queued: Option<WatchFrame>,
    /// When the last message went out; a bookmark follows `bookmark` after it.
    last_sent: Instant,
    /// One timer per stream, moved only when it fires: re-arming a timer for every
    /// event sent would cost a timer-wheel insert and removal per event and watcher.
    idle: Pin<Box<tokio::time::Sleep>>,
    /// Live messages since the feed last yielded.
    burst: usize,
    /// Turns to read a page of the journal's disk (shared by every stream).
    replays: Arc<tokio::sync::Semaphore>,
    _guard: ClientGuard,
    /// Its place among its holder's streams (none when the peer is not known).
    _slot: Option<StreamSlot>,
    /// Its place among the node's streams, for the stalled-stream ceiling.
    _tracked: Option<Tracked>,
    /// When it last handed its transport a message and has not been asked for the next
    /// since ([`millis_since_start`]; 0: it is being asked).
    handed: Arc<std::sync::atomic::AtomicU64>,
    /// Its share of its connection's bytes ahead of the peer (none when the peer is not
    /// known).
    flow: Option<Arc<StreamFlow>>,
    /// The message about to go was counted on the flow when it was made (a snapshot's).
    counted: bool,
}

/// Where a [`WatchFeed`] is.
enum Phase {
    /// About to subscribe (at the start, or again after falling behind).
    Subscribe(Since),
    /// Sending a snapshot's pods, then `Synced`, as a task converts them.
    Snapshot(mpsc::Receiver<Result<WatchFrame, Status>>),
    /// Sending the feed's entries (the replay a resume asked for, then live ones) and
    /// bookmarks.
    Feed,
    /// Shut down.
    Done,
}

/// Snapshot messages converted ahead of the transport: enough to keep the stream busy,
/// few enough that a snapshot of a thousand pods to many watchers is not held converted
/// in memory (64 here cost about 1 MiB of resident memory per watcher).
const SNAPSHOT_AHEAD: usize = 8;

/// Live messages a feed sends before it yields once, so that the connection writes
/// out what it has. Without it a backlog fills the transport's send buffer (hundreds
/// of KiB per stream) in one go, and the heap keeps that high-water mark: 3 MiB more
/// resident with 10 watchers through a startup burst. Every 8th message cost a
/// quarter of the fan-out rate; every 64th costs none measurable.
const LIVE_BURST: usize = 64;

/// The response stream of a watch.
pub type FeedStream = Pin<Box<dyn Stream<Item = Result<WatchFrame, Status>> + Send>>;

impl WatchFeed {
    fn message(revision: u64, kind: api::watch_event::Kind) -> WatchFrame {
        WatchFrame::Message(Box::new(watch_event(revision, kind)))
    }

    fn reset(&self, reason: ResetReason, message: &str) -> WatchFrame {
        self.reset_at(self.journal.revision(), reason, message)
    }

    /// A reset at `revision` (a refused resume's is its snapshot's, so `synced` never
    /// comes below it).
    fn reset_at(&self, revision: u64, reason: ResetReason, message: &str) -> WatchFrame {
        let reason = match reason {
            ResetReason::SlowConsumer => api::ResetReason::SlowConsumer,
            ResetReason::RevisionTooOld => api::ResetReason::RevisionTooOld,
            ResetReason::RuntimeResync => api::ResetReason::RuntimeResync,
        };
        let reset = api::Reset { reason: reason as i32, message: message.into() };
        Self::message(revision, api::watch_event::Kind::Reset(reset))
    }

    /// Converts a snapshot on a task of its own, a few messages ahead of the transport,
    /// ending with `Synced`. The task ends when the snapshot is sent, the stream is
    /// dropped or plegd shuts down.
    ///
    /// A message converted is counted on the connection's flow as it is made, and the
    /// next is made only while the connection has room: a peer that reads nothing holds
    /// its allowance, not [`SNAPSHOT_AHEAD`] converted messages per stream on top.
    fn convert(
        &self,
        pods: Vec<Arc<PodStatus>>,
        revision: u64,
        epoch: u64,
    ) -> mpsc::Receiver<Result<WatchFrame, Status>> {
        let (tx, rx) = mpsc::channel(SNAPSHOT_AHEAD);
        let (cache, shutdown, flow) = (self.cache.clone(), self.shutdown.clone(), self.flow.clone());
        let mut node_name = self.identities.node();
        let node = self.identities.clone();
        self.tasks.spawn(async move {
            use prost::Message;
            let count = pods.len() as u32;
            let mut pods = pods.iter();
            let mut synced = false;
            loop {
                if let Some(flow) = &flow {
                    let room = tokio::select! {
                        room = flow.room(&shutdown) => room,
                        _ = tx.closed() => return,
                    };
                    if let Err(held) = room {
                        let _ = tx.send(Err(Status::resource_exhausted(held.to_string()))).await;
                        return;
                    }
                }
                let m = match pods.next() {
                    Some(p) => Self::message(revision, api::watch_event::Kind::Snapshot(pod_api(p, &node, &cache))),
                    None if !synced => {
                        synced = true;
                        let synced = api::Synced { epoch, pods: count, node_name: std::mem::take(&mut node_name) };
                        Self::message(revision, api::watch_event::Kind::Synced(synced))
                    }
                    None => return,
                };
                // Counted once its place in the channel is taken: a message the stream
                // never takes is not counted.
                let permit = tokio::select! {
                    permit = tx.reserve() => match permit { Ok(p) => p, Err(_) => return },
                    _ = shutdown.cancelled() => return,
                };
                if let Some(flow) = &flow {
                    flow.handed(m.encoded_len() as u64);
                }
                permit.send(Ok(m));
            }
        });
        rx
    }

    /// Sends the feed from now on, a bookmark `bookmark` after the last message.
    fn follow_feed(&mut self) {
        self.phase = Phase::Feed;
        self.last_sent = Instant::now();
        self.idle.as_mut().reset(self.last_sent + self.bookmark);
    }

    /// The next message; `None` at shutdown.
    async fn next(&mut self) -> Option<Result<WatchFrame, Status>> {
        loop {
            if self.shutdown.is_cancelled() {
                self.phase = Phase::Done;
            }
            if let Some(m) = self.queued.take() {
                return Some(Ok(m));
            }
            let turn = match &self.phase {
                Phase::Done => return None,
                Phase::Subscribe(since) => self.subscribe(*since).await,
                Phase::Snapshot(_) => self.snapshot_turn().await,
                Phase::Feed => self.feed_turn().await,
            };
            match turn {
                Turn::Send(m) => return Some(Ok(m)),
                Turn::Again => {}
                Turn::End => return None,
                Turn::Fail(status) => {
                    self.phase = Phase::Done;
                    return Some(Err(status));
                }
            }
        }
    }

    /// Subscribes to the journal from `since`: a snapshot once plegd's first relist is
    /// in, or the replay a resume asked for; a refused resume queues its reset. The
    /// stream's first message tells its epoch.
    async fn subscribe(&mut self, since: Since) -> Turn {
        let sub = self.journal.subscribe(since, self.filter.clone());
        if matches!(sub.start, Start::Snapshot { .. }) && !self.journal.is_primed() {
            // Until plegd's first full relist is in, its view is empty (a new journal)
            // or last run's: a snapshot now would tell the client of pods plegd has not
            // read yet. A resume the journal can replay needs no wait.
            drop(sub);
            tokio::select! {
                _ = self.journal.primed() => {}
                _ = self.shutdown.cancelled() => self.phase = Phase::Done,
            }
            return Turn::Again;
        }
        let (epoch, refused) = (sub.epoch, sub.reset);
        let (snapshot, feed) = sub.into_feed();
        self.feed = Some(feed.with_turns(self.replays.clone()));
        let (resumed, after, snapshot_at) = match (&snapshot, since) {
            (None, Since::Revision(r, _)) => (true, r, 0),
            (None, Since::Snapshot) => (true, 0, 0),
            (Some(s), _) => (false, 0, s.revision),
        };
        match snapshot {
            Some(Snapshot { pods, revision }) => self.phase = Phase::Snapshot(self.convert(pods, revision, epoch)),
            None => self.follow_feed(),
        }
        if let Some(reason) = refused {
            self.queued = Some(self.reset_at(snapshot_at, reason, refused_message(reason)));
        }
        if !std::mem::replace(&mut self.announced, true) {
            // Every stream tells its epoch before anything else.
            let start = api::StreamStart { epoch, resumed };
            return Turn::Send(Self::message(after, api::watch_event::Kind::Start(start)));
        }
        Turn::Again
    }

    /// The snapshot's next converted message; the feed once it is all sent.
    async fn snapshot_turn(&mut self) -> Turn {
        let Phase::Snapshot(rx) = &mut self.phase else { return Turn::Again };
        tokio::select! {
            _ = self.shutdown.cancelled() => self.phase = Phase::Done,
            m = rx.recv() => match m {
                Some(Ok(m)) => {
                    self.counted = self.flow.is_some();
                    return Turn::Send(m);
                }
                Some(Err(status)) => return Turn::Fail(status),
                None => self.follow_feed(),
            },
        }
        Turn::Again
    }

    /// The feed's next entry (the replay's, then live ones), a reset when the feed
    /// ended, or a bookmark when the stream has been quiet and every entry it matches
    /// is sent.
    async fn feed_turn(&mut self) -> Turn {
        let Some(feed) = self.feed.as_mut() else { return Turn::End };
        tokio::select! {
            // Queued events always go before a bookmark.
            biased;
            _ = self.shutdown.cancelled() => self.phase = Phase::Done,
            item = feed.next() => return match item {
                Some(FeedItem::Entry(e)) => self.send_entry(&e).await,
                Some(FeedItem::Overflowed(why)) => Turn::Send(self.dropped(why)),
                Some(FeedItem::ReplayStopped(e)) => Turn::Send(self.replay_stopped(&e)),
                None => Turn::End,
            },
            _ = &mut self.idle => return self.bookmark_turn(),
        }
        Turn::Again
    }

    /// An entry's message, yielding to the connection once in a while.
    async fn send_entry(&mut self, e: &Entry) -> Turn {
        self.last_sent = Instant::now();
        self.burst += 1;
        if self.burst >= LIVE_BURST {
            self.burst = 0;
            tokio::task::yield_now().await;
        }
        Turn::Send(self.tail.frame(e))
    }

    /// A bookmark when one is due and every entry up to the journal's revision that
    /// this stream matches is sent; otherwise the timer moves to when one may be.
    fn bookmark_turn(&mut self) -> Turn {
        let due = self.last_sent + self.bookmark;
        // The journal hands an entry to its subscribers before it publishes the
        // entry's revision: with the revision read first, a drained feed means every
        // entry up to it that this stream matches has been sent. Otherwise the queued
        // events go first and the bookmark waits.
        let revision = self.journal.revision();
        let feed = self.feed.as_ref();
        if Instant::now() >= due && feed.is_some_and(Feed::is_drained) {
            self.last_sent = Instant::now();
            self.idle.as_mut().reset(self.last_sent + self.bookmark);
            let bookmark = api::watch_event::Kind::Bookmark(api::Bookmark {});
            return Turn::Send(Self::message(revision, bookmark));
        }
        // A replay waiting for its turn on disk sends nothing for a while: no bookmark
        // comes before it is sent, and the timer need not spin meanwhile.
        let next = if feed.is_some_and(Feed::is_replaying) { Instant::now() + self.bookmark } else { due };
        self.idle.as_mut().reset(next.max(Instant::now() + Duration::from_millis(1)));
        Turn::Again
    }

    /// The replay from disk stopped short: the client starts over with a reset.
    fn replay_stopped(&mut self, e: &FeedError) -> WatchFrame {
        tracing::info!(error = %e, "a replay from disk stopped short; the client starts over");
        self.feed = None;
        self.phase = Phase::Subscribe(Since::Snapshot);
        let (reason, msg) = if e.left_selection() {
            (ResetReason::RuntimeResync, format!("{e}; here is a fresh snapshot"))
        } else {
            (
                ResetReason::RevisionTooOld,
                format!("the rest of the requested revisions is no longer kept ({e}); here is a fresh snapshot"),
            )
        };
        self.journal.count_reset(reason);
        self.reset(reason, &msg)
    }

    /// The journal dropped this stream: the client must start over, told why.
    fn dropped(&mut self, why: Dropped) -> WatchFrame {
        self.feed = None;
        self.phase = Phase::Subscribe(Since::Snapshot);
        let reason = why.reset_reason();
        self.journal.count_reset(reason);
        let msg = match why {
            Dropped::FellBehind => {
                tracing::info!("watch client fell behind; sending a reset and a fresh snapshot");
                "this client did not keep up; here is a fresh snapshot"
            }
            Dropped::NewEpoch => {
                "the journal could not write to disk and began a new epoch in memory; here is a fresh snapshot"
            }
            Dropped::LeftSelection => {
                "a pod this stream selected changed its labels and left the selection; here is a fresh snapshot"
            }
        };
        self.reset(reason, msg)
    }
}

/// Why a resume was refused, as the client is told.
fn refused_message(reason: ResetReason) -> &'static str {
    match reason {
        ResetReason::RuntimeResync => {
            "a pod this stream selected changed its labels and left the selection after the requested revision; here is a fresh snapshot"
        }
        _ => "the requested revision is no longer kept (or belongs to another plegd process); here is a fresh snapshot",
    }
}

/// What one turn of a feed's loop came to.
enum Turn {
    /// A message to send.
    Send(WatchFrame),
    /// Nothing to send yet: the loop goes on.
    Again,
    /// The stream ends.
    End,
    /// The stream ends with this error.
    Fail(Status),
}

/// Milliseconds since plegd's first call (a clock for [`WatchFeed::handed`]).
fn millis_since_start() -> u64 {
    static START: std::sync::OnceLock<std::time::Instant> = std::sync::OnceLock::new();
    START.get_or_init(std::time::Instant::now).elapsed().as_millis() as u64
}

/// Open Watch streams: per holder, so that one local user cannot fill plegd's memory
/// with stalled streams (each can hold its HTTP/2 send buffer, up to 400 KiB) beyond
/// `--max-watch-streams-per-uid` of them; and on the node, so that however many peers
/// there are, at most `--max-stalled-watch-streams` stalled streams are kept.
#[derive(Clone, Default)]
pub(super) struct PeerStreams {
    open: Arc<std::sync::Mutex<std::collections::HashMap<Holder, usize>>>,
    node: Arc<std::sync::Mutex<std::collections::HashMap<u64, Watched>>>,
    next: Arc<std::sync::atomic::AtomicU64>,
}

/// A stream as the ceiling sees it: when it last waited for its client, and how to
/// close its connection.
struct Watched {
    handed: Arc<std::sync::atomic::AtomicU64>,
    cut: CancellationToken,
    holder: Option<Holder>,
}

/// A stream's place among the node's, given back when the stream ends.
pub(super) struct Tracked {
    streams: PeerStreams,
    id: u64,
}

impl Drop for Tracked {
    fn drop(&mut self) {
        self.streams.node.lock().expect("node streams lock").remove(&self.id);
    }
}

impl PeerStreams {
    /// A slot for one more stream of `holder`, or `RESOURCE_EXHAUSTED` naming the cap
    /// when it holds `max` already (0: no cap).
    fn take(&self, holder: Holder, max: usize) -> Result<StreamSlot, Status> {
        let mut open = self.open.lock().expect("peer streams lock");
        if let Holder::RootConnection(_) = holder {
            // Such peers cannot be told apart by process: together they hold at most
            // ROOT_CONNECTIONS_SHARE caps' worth.
            let all: usize = open.iter().filter(|(h, _)| matches!(h, Holder::RootConnection(_))).map(|(_, n)| n).sum();
            if max > 0 && all >= max.saturating_mul(ROOT_CONNECTIONS_SHARE) {
                return Err(Status::resource_exhausted(format!(
                    "uid-0 peers in other PID namespaces hold {all} Watch streams open, \
                     {ROOT_CONNECTIONS_SHARE} times --max-watch-streams-per-uid; close one"
                )));
            }
        }
        let n = open.entry(holder).or_insert(0);
        if max > 0 && *n >= max {
            return Err(Status::resource_exhausted(format!(
                "{holder} holds {n} Watch streams open, the most --max-watch-streams-per-uid allows; \
                 close one (a client needs one stream, however many pods it watches)"
            )));
        }
        *n += 1;
        Ok(StreamSlot { streams: self.clone(), holder })
    }

    /// Counts a stream on the node; `cut` closes its connection.
    pub(super) fn track(
        &self,
        handed: Arc<std::sync::atomic::AtomicU64>,
        cut: CancellationToken,
        holder: Option<Holder>,
    ) -> Tracked {
        let id = self.next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        self.node.lock().expect("node streams lock").insert(id, Watched { handed, cut, holder });
        Tracked { streams: self.clone(), id }
    }

    /// Closes the connections of stalled streams beyond the ceiling: first of the holder
    /// with the most stalled streams (the leak), the longest stalled first; returns how
    /// many it closed.
    pub(super) fn close_stalled_once(&self, max: usize, after: Duration) -> usize {
        let now = millis_since_start();
        let after = after.as_millis() as u64;
        let node = self.node.lock().expect("node streams lock");
        let mut stalled: Vec<(u64, &CancellationToken, Option<Holder>)> = node
            .values()
            .filter(|w| !w.cut.is_cancelled())
            .filter_map(|w| {
                let at = w.handed.load(std::sync::atomic::Ordering::Relaxed);
                (at != 0 && now.saturating_sub(at) >= after).then_some((at, &w.cut, w.holder))
            })
            .collect();
        if stalled.len() <= max {
            return 0;
        }
        let mut per_holder: std::collections::HashMap<Option<Holder>, usize> = Default::default();
        for (_, _, h) in &stalled {
            *per_holder.entry(*h).or_default() += 1;
        }
        stalled.sort_by_key(|(at, _, h)| (std::cmp::Reverse(per_holder[h]), *at));
        let over = stalled.len() - max;
        for (_, cut, _) in &stalled[..over] {
            cut.cancel();
        }
        over
    }

    /// Keeps the node's stalled streams within `cfg.max_stalled_watch_streams`, checking
    /// every second, until shutdown.
    pub(super) async fn close_stalled(
        self,
        cfg: Arc<super::ApiConfig>,
        closed: prometheus_client::metrics::counter::Counter,
        shutdown: CancellationToken,
    ) {
        let mut every = tokio::time::interval(Duration::from_secs(1));
        every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                _ = every.tick() => {}
                _ = shutdown.cancelled() => return,
            }
            let n = self.close_stalled_once(cfg.max_stalled_watch_streams, cfg.stalled_after);
            if n > 0 {
                closed.inc_by(n as u64);
                tracing::warn!(
                    closed = n,
                    ceiling = cfg.max_stalled_watch_streams,
                    "closed the connections of Watch streams whose clients stopped reading (--max-stalled-watch-streams)"
                );
            }
        }
    }
}

/// One open stream of a holder, given back when the stream ends.
struct StreamSlot {
    streams: PeerStreams,
    holder: Holder,
}

impl Drop for StreamSlot {
    fn drop(&mut self) {
        let mut open = self.streams.open.lock().expect("peer streams lock");
        if let Some(n) = open.get_mut(&self.holder) {
            *n = n.saturating_sub(1);
            if *n == 0 {
                open.remove(&self.holder);
            }
        }
    }
}

/// Counts a Watch stream for as long as it lives.
struct ClientGuard(Gauge);

impl Drop for ClientGuard {
    fn drop(&mut self) {
        self.0.dec();
    }
}

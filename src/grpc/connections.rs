//! The API socket's connections, as plegd bounds them: how many one holder and the node
//! may keep open, how long one may sit idle with no call in progress, and how many
//! bytes of Watch messages each may have ahead of what its peer has taken off the
//! socket — from the first byte, whether or not a stream counts as stalled yet.
//!
//! - **Caps.** At most [`MAX_CONNECTIONS`] on the node and [`MAX_PER_HOLDER`] per holder
//!   ([`Holder`]: a non-root uid, a uid-0 process; uid-0 peers whose process plegd
//!   cannot see share [`ROOT_CONNECTIONS_SHARE`] holders' worth). An idle HTTP/2
//!   connection costs about 16.5 KiB; a client that leaks a channel per call once held
//!   plegd at 146 MiB with 8,000 of them. A connection over a cap takes the place of the
//!   oldest one with no call in progress (of its holder, else of the node); when there
//!   is none it is closed as it is accepted.
//! - **Idle.** A connection with no call in progress for [`IDLE_AFTER`] is closed; a gRPC
//!   client dials again on its next call.
//! - **Ahead.** Each connection counts the Watch bytes handed to its transport and the
//!   bytes written to its socket: the difference is what HTTP/2 holds for a peer that
//!   does not read. A stream hands its next message only while its connection holds
//!   less than [`AHEAD_PER_CONNECTION`], or, once the node holds more than
//!   [`AHEAD_ON_NODE`] in all, less than [`AHEAD_SHARE`]: a reader's connection drains
//!   as it goes, and 1,024 unread `Watch(since=0)` hold a bounded amount, not a snapshot
//!   each in send buffers (128.8 MiB within a second, before). Each stream has its own
//!   share of the count ([`StreamFlow`]), taken back when it ends; a stream held back for
//!   [`HELD_BACK_FOR`] ends with an error its client sees, rather than hang.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

/// Who holds Watch streams against the cap: a uid as a whole, except root, whose
/// processes are held each to it (every root agent on a node shares uid 0; one that
/// leaks streams must not lock the others out). A root peer whose process plegd cannot
/// see (in another PID namespace, as every other pod's is from plegd's DaemonSet pod,
/// the kernel says PID 0) is held per connection: all such agents would otherwise share
/// one cap. The node-wide ceiling on stalled streams bounds them all.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Holder {
    /// Every process of a uid other than 0.
    Uid(u32),
    /// One process of uid 0.
    RootProcess(i32),
    /// One connection of a uid-0 peer whose process is not visible.
    RootConnection(u64),
}

impl Holder {
    /// The holder a peer with these credentials, on connection `conn`, counts against.
    pub fn of(uid: u32, pid: Option<i32>, conn: u64) -> Self {
        match (uid, pid) {
            (0, Some(pid)) if pid > 0 => Self::RootProcess(pid),
            (0, _) => Self::RootConnection(conn),
            _ => Self::Uid(uid),
        }
    }
}

impl std::fmt::Display for Holder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Uid(uid) => write!(f, "peer uid {uid}"),
            Self::RootProcess(pid) => write!(f, "peer process {pid} (uid 0)"),
            Self::RootConnection(c) => write!(f, "connection {c} of a uid-0 peer in another PID namespace"),
        }
    }
}

/// How many per-holder caps uid-0 peers in other PID namespaces share in all.
pub const ROOT_CONNECTIONS_SHARE: usize = 4;

/// Connections on the node at most.
pub const MAX_CONNECTIONS: usize = 512;
/// Connections of one holder at most.
pub const MAX_PER_HOLDER: usize = 64;
/// A connection with no call in progress for this long is closed.
pub const IDLE_AFTER: Duration = Duration::from_secs(120);
/// How often idle connections are looked for.
const IDLE_CHECK_EVERY: Duration = Duration::from_secs(5);
/// Watch bytes one connection may have ahead of its peer.
pub const AHEAD_PER_CONNECTION: u64 = 512 << 10;
/// Watch bytes all connections together may have ahead before each is held to
/// [`AHEAD_SHARE`].
pub const AHEAD_ON_NODE: u64 = 8 << 20;
/// A connection's allowance while the node is over [`AHEAD_ON_NODE`].
pub const AHEAD_SHARE: u64 = 32 << 10;
/// How often a stream held back looks again even without a write to wake it.
const AHEAD_RECHECK: Duration = Duration::from_millis(100);

/// Why a connection was turned away at accept.
#[derive(Debug, thiserror::Error)]
pub enum OverCap {
    /// The node holds [`MAX_CONNECTIONS`].
    #[error("the node holds {MAX_CONNECTIONS} API connections already")]
    Node,
    /// Its holder holds its share.
    #[error("{holder} holds {cap} API connections already")]
    Holder {
        /// Whose.
        holder: Holder,
        /// Its cap.
        cap: usize,
    },
}

/// Every open connection, by holder, and the node's bytes ahead.
#[derive(Clone, Default)]
pub struct Connections {
    inner: Arc<Shared>,
}

#[derive(Default)]
struct Shared {
    open: Mutex<Open>,
    /// Watch bytes handed and not yet written, all connections together.
    ahead: AtomicU64,
}

#[derive(Default)]
struct Open {
    /// Every connection accepted; one that has gone is a dead handle, let go at the next
    /// admission.
    all: Vec<Weak<Flow>>,
}

impl Connections {
    /// A place for one more connection of `holder`, or why not. Over a cap (its
    /// holder's, or the node's), the newcomer takes the place of the oldest connection
    /// of that holder (or of the node) with no call in progress, which is closed; only
    /// when every such connection has a call in progress is the newcomer refused. So a
    /// leaking agent closes its own idle connections, not another agent's place.
    /// Returns the connection's flow, and whether another connection was displaced.
    pub fn admit(&self, holder: Holder, cut: CancellationToken) -> Result<(Arc<Flow>, bool), OverCap> {
        // The live connections, read once; their handles are dropped after the lock.
        let live: Vec<Arc<Flow>> = {
            let mut open = self.inner.open.lock().expect("connections lock");
            open.all.retain(|w| w.strong_count() > 0);
            open.all.iter().filter_map(Weak::upgrade).collect()
        };
        let counted: Vec<&Arc<Flow>> = live.iter().filter(|f| !f.cut.is_cancelled()).collect();
        let same = |f: &&&Arc<Flow>| match holder {
            Holder::RootConnection(_) => matches!(f.holder, Holder::RootConnection(_)),
            h => f.holder == h,
        };
        let cap = match holder {
            Holder::RootConnection(_) => MAX_PER_HOLDER * ROOT_CONNECTIONS_SHARE,
            _ => MAX_PER_HOLDER,
        };
        fn idle_oldest<'a>(fs: impl Iterator<Item = &'a &'a Arc<Flow>>) -> Option<Arc<Flow>> {
            fs.filter(|f| f.idle_since.lock().expect("idle lock").is_some())
                .min_by_key(|f| f.opened)
                .map(|f| (*f).clone())
        }
        let victim = if counted.iter().filter(same).count() >= cap {
            Some(idle_oldest(counted.iter().filter(same)).ok_or(OverCap::Holder { holder, cap })?)
        } else if counted.len() >= MAX_CONNECTIONS {
            Some(idle_oldest(counted.iter()).ok_or(OverCap::Node)?)
        } else {
            None
        };
        let displaced = victim.inspect(|v| v.cut.cancel()).is_some();
        drop(counted);
        let flow = Arc::new(Flow {
            connections: self.clone(),
            holder,
            cut,
            opened: Instant::now(),
            ahead: AtomicU64::new(0),
            calls: AtomicUsize::new(0),
            idle_since: Mutex::new(Some(Instant::now())),
            drained: tokio::sync::Notify::new(),
            watches: AtomicUsize::new(0),
        });
        {
            let mut open = self.inner.open.lock().expect("connections lock");
            open.all.push(Arc::downgrade(&flow));
        }
        drop(live);
        Ok((flow, displaced))
    }

    /// Connections open now.
    pub fn open(&self) -> usize {
        self.inner.open.lock().expect("connections lock").all.iter().filter(|w| w.strong_count() > 0).count()
    }

    /// Watch bytes handed to transports and not yet written, on the node.
    pub fn ahead(&self) -> u64 {
        self.inner.ahead.load(Ordering::Relaxed)
    }

    /// Closes every connection idle for [`IDLE_AFTER`]; returns how many.
    pub fn close_idle(&self, now: Instant) -> usize {
        let flows: Vec<Arc<Flow>> =
            self.inner.open.lock().expect("connections lock").all.iter().filter_map(Weak::upgrade).collect();
        let mut closed = 0;
        for f in flows {
            let idle = *f.idle_since.lock().expect("idle lock");
            if idle.is_some_and(|since| now.duration_since(since) >= IDLE_AFTER) && !f.cut.is_cancelled() {
                f.cut.cancel();
                closed += 1;
            }
        }
        closed
    }

    /// Closes idle connections every few seconds until shutdown, counting them, and
    /// keeps the gauges of open connections and bytes ahead.
    pub async fn run_idle_closer(self, metrics: super::ApiMetrics, shutdown: CancellationToken) {
        let mut tick = tokio::time::interval(IDLE_CHECK_EVERY);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                _ = shutdown.cancelled() => return,
                _ = tick.tick() => {}
            }
            metrics.open.set(self.open() as i64);
            metrics.ahead.set(self.ahead() as i64);
            let n = self.close_idle(Instant::now());
            if n > 0 {
                metrics.idle_closed.inc_by(n as u64);
                tracing::debug!(closed = n, "closed API connections idle with no call for {IDLE_AFTER:?}");
            }
        }
    }
}

/// One connection's place and flow: released when the connection goes.
pub struct Flow {
    connections: Connections,
    holder: Holder,
    cut: CancellationToken,
    /// When it was accepted.
    opened: Instant,
    /// Watch bytes handed to the transport and not yet written to the socket.
    ahead: AtomicU64,
    /// Calls in progress (a Watch stream is one until it ends).
    calls: AtomicUsize,
    /// Since when no call is in progress (`None`: one is).
    idle_since: Mutex<Option<Instant>>,
    /// Woken when bytes are written.
    drained: tokio::sync::Notify,
    /// Watch streams open on it.
    watches: AtomicUsize,
}

impl std::fmt::Debug for Flow {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Flow").field("holder", &self.holder).field("ahead", &self.ahead).finish()
    }
}

impl Drop for Flow {
    fn drop(&mut self) {
        let left = self.ahead.swap(0, Ordering::Relaxed);
        self.connections.inner.ahead.fetch_sub(left, Ordering::Relaxed);
    }
}

impl Flow {
    /// `n` Watch bytes handed to the transport.
    pub fn handed(&self, n: u64) {
        self.ahead.fetch_add(n, Ordering::Relaxed);
        self.connections.inner.ahead.fetch_add(n, Ordering::Relaxed);
    }

    /// `n` bytes written to the socket: they leave what is ahead (bytes of other calls
    /// and of HTTP/2 itself take nothing below 0).
    pub fn written(&self, n: usize) {
        self.release(n as u64);
    }

    /// What this connection may have ahead now.
    fn allowance(&self) -> u64 {
        if self.connections.ahead() > AHEAD_ON_NODE { AHEAD_SHARE } else { AHEAD_PER_CONNECTION }
    }

    /// Waits until this connection may hand its transport more, or `stop` ends; held
    /// back for [`HELD_BACK_FOR`] in a row, it gives up.
    pub async fn room(&self, stop: &CancellationToken) -> Result<(), HeldBack> {
        let since = Instant::now();
        loop {
            let drained = self.drained.notified();
            tokio::pin!(drained);
            drained.as_mut().enable();
            let ahead = self.ahead.load(Ordering::Relaxed);
            if ahead < self.allowance() {
                return Ok(());
            }
            if since.elapsed() >= HELD_BACK_FOR {
                return Err(HeldBack { ahead });
            }
            tokio::select! {
                _ = drained => {}
                _ = tokio::time::sleep(AHEAD_RECHECK) => {}
                _ = stop.cancelled() => return Ok(()),
                _ = self.cut.cancelled() => return Ok(()),
            }
        }
    }

    /// A Watch stream began on this connection: its own share of the connection's flow.
    pub fn watch(self: &Arc<Self>) -> Arc<StreamFlow> {
        self.watches.fetch_add(1, Ordering::Relaxed);
        Arc::new(StreamFlow { flow: self.clone(), mine: AtomicU64::new(0) })
    }

    /// Takes `n` bytes back from what is ahead (never below 0); wakes the waiters.
    fn release(&self, n: u64) {
        let before = self.ahead.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |a| Some(a.saturating_sub(n)));
        let freed = before.unwrap_or(0).min(n);
        if freed > 0 {
            self.connections.inner.ahead.fetch_sub(freed, Ordering::Relaxed);
            self.drained.notify_waiters();
        }
    }

    /// A call began; the returned guard ends it.
    pub fn call(self: &Arc<Self>) -> CallGuard {
        if self.calls.fetch_add(1, Ordering::Relaxed) == 0 {
            *self.idle_since.lock().expect("idle lock") = None;
        }
        CallGuard(self.clone())
    }
}

/// One Watch stream's share of its connection's flow. What the stream handed and its
/// peer had not taken when the stream ends (cancelled by the peer, closed by plegd) is
/// never written: it is taken back then — at most what the stream itself handed — and
/// all of the connection's once its last Watch stream ends. Dropped when the stream and
/// its snapshot's conversion have both let go of it.
pub struct StreamFlow {
    flow: Arc<Flow>,
    /// Bytes this stream handed.
    mine: AtomicU64,
}

/// A stream held back by its connection for [`HELD_BACK_FOR`]: the peer does not read
/// what it was handed.
#[derive(Debug, thiserror::Error)]
#[error(
    "this connection holds {ahead} bytes of Watch messages its peer has not read, and none was read for \
     {HELD_BACK_FOR:?}: the stream ends; resume from the last revision received"
)]
pub struct HeldBack {
    /// Bytes ahead of the peer.
    pub ahead: u64,
}

/// How long a stream may wait for its connection to drain before it ends with an
/// error, rather than hang: a client learns of it and resumes.
pub const HELD_BACK_FOR: Duration = Duration::from_secs(10);

impl StreamFlow {
    /// Waits for room on the connection ([`Flow::room`]).
    pub async fn room(&self, stop: &CancellationToken) -> Result<(), HeldBack> {
        self.flow.room(stop).await
    }

    /// `n` bytes handed to the transport by this stream.
    pub fn handed(&self, n: u64) {
        self.mine.fetch_add(n, Ordering::Relaxed);
        self.flow.handed(n);
    }
}

impl Drop for StreamFlow {
    fn drop(&mut self) {
        let flow = &self.flow;
        if flow.watches.fetch_sub(1, Ordering::Relaxed) == 1 {
            flow.release(u64::MAX);
        } else {
            flow.release(self.mine.load(Ordering::Relaxed));
        }
    }
}

/// A call in progress on a connection.
pub struct CallGuard(Arc<Flow>);

impl Drop for CallGuard {
    fn drop(&mut self) {
        if self.0.calls.fetch_sub(1, Ordering::Relaxed) == 1 {
            *self.0.idle_since.lock().expect("idle lock") = Some(Instant::now());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn connections_are_capped_per_holder_and_on_the_node_and_given_back_when_they_close() {
        let c = Connections::default();
        let mut held: Vec<Arc<Flow>> =
            (0..MAX_PER_HOLDER).map(|_| c.admit(Holder::Uid(1000), CancellationToken::new()).unwrap().0).collect();
        // Each has a call in progress (a stream): the next is refused.
        let calls: Vec<_> = held.iter().map(|f| f.call()).collect();
        assert!(matches!(c.admit(Holder::Uid(1000), CancellationToken::new()), Err(OverCap::Holder { .. })));
        // Idle, the oldest of that holder's gives its place to the newcomer.
        drop(calls);
        let first_cut = held[0].cut.clone();
        let (newcomer, displaced) =
            c.admit(Holder::Uid(1000), CancellationToken::new()).expect("displaces an idle one");
        assert!(displaced);
        assert!(first_cut.is_cancelled() && !held[1].cut.is_cancelled(), "the oldest idle one, only");
        held.remove(0);
        held.push(newcomer);
        assert!(c.admit(Holder::RootProcess(7), CancellationToken::new()).is_ok(), "another holder is not held back");
        held.pop();
        assert!(c.admit(Holder::Uid(1000), CancellationToken::new()).is_ok(), "a closed connection frees its place");
        // Root peers plegd cannot see are one connection each, and share a pool.
        let pool: Vec<_> = (0..(MAX_PER_HOLDER * ROOT_CONNECTIONS_SHARE) as u64)
            .map(|i| c.admit(Holder::RootConnection(i), CancellationToken::new()).unwrap().0)
            .collect();
        let busy: Vec<_> = pool.iter().map(|f| f.call()).collect();
        assert!(c.admit(Holder::RootConnection(99_999), CancellationToken::new()).is_err(), "the pool is full");
        drop((busy, pool));
        // The node fills with connections that each have a call in progress.
        let mut busy: Vec<_> = held.iter().map(|f| f.call()).collect();
        let mut many = Vec::new();
        for uid in 0..(MAX_CONNECTIONS - held.len()) as u32 {
            let (f, _) = c.admit(Holder::Uid(10_000 + uid), CancellationToken::new()).expect("room on the node");
            busy.push(f.call());
            many.push(f);
        }
        assert_eq!(c.open(), MAX_CONNECTIONS);
        assert!(matches!(c.admit(Holder::Uid(5), CancellationToken::new()), Err(OverCap::Node)));
        drop(busy);
        assert!(c.admit(Holder::Uid(5), CancellationToken::new()).is_ok(), "an idle one makes room on the node");
        drop((many, held));
    }

    #[tokio::test(start_paused = true)]
    async fn a_connection_with_no_call_for_the_idle_limit_is_closed_and_one_with_a_stream_never() {
        let c = Connections::default();
        let (idle_cut, busy_cut) = (CancellationToken::new(), CancellationToken::new());
        let idle = c.admit(Holder::Uid(1), idle_cut.clone()).unwrap().0;
        let busy = c.admit(Holder::Uid(2), busy_cut.clone()).unwrap().0;
        let stream = busy.call();
        let unary = idle.call();
        drop(unary);
        tokio::time::advance(IDLE_AFTER - Duration::from_secs(1)).await;
        assert_eq!(c.close_idle(Instant::now()), 0);
        tokio::time::advance(Duration::from_secs(1)).await;
        assert_eq!(c.close_idle(Instant::now()), 1);
        assert!(idle_cut.is_cancelled() && !busy_cut.is_cancelled(), "a stream keeps its connection, however long");
        tokio::time::advance(IDLE_AFTER * 10).await;
        assert_eq!(c.close_idle(Instant::now()), 0);
        drop((stream, idle, busy));
    }

    #[tokio::test(start_paused = true)]
    async fn a_connection_whose_peer_does_not_read_is_held_to_its_allowance_and_a_reader_never_waits() {
        let c = Connections::default();
        let stop = CancellationToken::new();
        let unread = c.admit(Holder::Uid(1), CancellationToken::new()).unwrap().0;
        unread.handed(AHEAD_PER_CONNECTION);
        assert!(
            tokio::time::timeout(HELD_BACK_FOR / 2, unread.room(&stop)).await.is_err(),
            "held while its peer reads nothing"
        );
        unread.written(4096);
        tokio::time::timeout(Duration::from_millis(1), unread.room(&stop)).await.expect("room once it drains").unwrap();
        unread.handed(4096);
        assert!(
            unread.room(&stop).await.is_err(),
            "held back for {HELD_BACK_FOR:?} in a row, the stream gives up rather than hang"
        );
        // Many such peers push the node past its total: each is held to its share, and
        // a connection that drains as it goes is not held at all.
        let many: Vec<_> = (2..40u32)
            .map(|uid| {
                let f = c.admit(Holder::Uid(uid), CancellationToken::new()).unwrap().0;
                f.handed(AHEAD_PER_CONNECTION / 2);
                f
            })
            .collect();
        assert!(c.ahead() > AHEAD_ON_NODE);
        assert!(tokio::time::timeout(Duration::from_secs(1), many[0].room(&stop)).await.is_err());
        assert!(c.ahead() > AHEAD_ON_NODE);
        let reader = c.admit(Holder::Uid(1000), CancellationToken::new()).unwrap().0;
        for _ in 0..100 {
            tokio::time::timeout(Duration::from_millis(1), reader.room(&stop))
                .await
                .expect("a reader never waits")
                .unwrap();
            reader.handed(AHEAD_SHARE / 4);
            reader.written((AHEAD_SHARE / 4 + 100) as usize);
        }
        drop(many);
        assert!(c.ahead() < AHEAD_ON_NODE, "a closed connection's bytes leave the node's total");
        // A stream cancelled before its bytes were written, beside one that reads: what
        // the cancelled one handed goes with it, and the reader is not held back.
        let keeps = reader.watch();
        for _ in 0..60 {
            let cancelled = reader.watch();
            cancelled.handed(AHEAD_SHARE);
            drop(cancelled);
        }
        keeps.handed(1000);
        reader.written(1000);
        tokio::time::timeout(Duration::from_millis(1), keeps.room(&stop))
            .await
            .expect("the reading stream goes on beside cancelled ones")
            .unwrap();
        // The last stream's end takes back all the connection had ahead.
        keeps.handed(AHEAD_PER_CONNECTION * 2);
        drop(keeps);
        tokio::time::timeout(Duration::from_millis(1), reader.room(&stop))
            .await
            .expect("room once no stream is left")
            .unwrap();
        drop((unread, reader));
    }
}

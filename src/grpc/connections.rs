//! The API socket's connections, as plegd bounds them: how many one holder and the node
//! may keep open, how long one may sit idle with no call in progress, and how many
//! bytes of Watch messages each may have ahead of what its peer has taken off the
//! socket — from the first byte, whether or not a stream counts as stalled yet.
//!
//! - **Caps.** At most [`MAX_CONNECTIONS`] on the node and [`MAX_PER_HOLDER`] per holder
//!   ([`Holder`]: a non-root uid, a uid-0 process; uid-0 peers whose process plegd
//!   cannot see share [`ROOT_CONNECTIONS_SHARE`] holders' worth). An idle HTTP/2
//!   connection costs about 16.5 KiB; a client that leaks a channel per call once held
//!   plegd at 146 MiB with 8,000 of them. More are closed as they are accepted.
//! - **Idle.** A connection with no call in progress for [`IDLE_AFTER`] is closed; a gRPC
//!   client dials again on its next call.
//! - **Ahead.** Each connection counts the Watch bytes handed to its transport and the
//!   bytes written to its socket: the difference is what HTTP/2 holds for a peer that
//!   does not read. A stream hands its next message only while its connection holds
//!   less than [`AHEAD_PER_CONNECTION`], or, once the node holds more than
//!   [`AHEAD_ON_NODE`] in all, less than [`AHEAD_SHARE`]: a reader's connection drains
//!   as it goes and is never held back, and 1,024 unread `Watch(since=0)` hold a bounded
//!   amount, not a snapshot each in send buffers (128.8 MiB within a second, before).

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::watch::{Holder, ROOT_CONNECTIONS_SHARE};

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
    by_holder: std::collections::HashMap<Holder, usize>,
    all: Vec<Weak<Flow>>,
}

impl Connections {
    /// A place for one more connection of `holder`, or why not.
    pub fn admit(&self, holder: Holder, cut: CancellationToken) -> Result<Arc<Flow>, OverCap> {
        let mut open = self.inner.open.lock().expect("connections lock");
        open.all.retain(|w| w.strong_count() > 0);
        if open.all.len() >= MAX_CONNECTIONS {
            return Err(OverCap::Node);
        }
        let (held, cap) = match holder {
            Holder::RootConnection(_) => {
                let all = open.by_holder.iter().filter(|(h, _)| matches!(h, Holder::RootConnection(_))).count();
                (all, MAX_PER_HOLDER * ROOT_CONNECTIONS_SHARE)
            }
            _ => (open.by_holder.get(&holder).copied().unwrap_or(0), MAX_PER_HOLDER),
        };
        if held >= cap {
            return Err(OverCap::Holder { holder, cap });
        }
        *open.by_holder.entry(holder).or_default() += 1;
        let flow = Arc::new(Flow {
            connections: self.clone(),
            holder,
            cut,
            ahead: AtomicU64::new(0),
            calls: AtomicUsize::new(0),
            idle_since: Mutex::new(Some(Instant::now())),
            drained: tokio::sync::Notify::new(),
            watches: AtomicUsize::new(0),
        });
        open.all.push(Arc::downgrade(&flow));
        Ok(flow)
    }

    /// Connections open now.
    pub fn open(&self) -> usize {
        self.inner.open.lock().expect("connections lock").by_holder.values().sum()
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
        let mut open = self.connections.inner.open.lock().expect("connections lock");
        if let Some(n) = open.by_holder.get_mut(&self.holder) {
            *n -= 1;
            if *n == 0 {
                open.by_holder.remove(&self.holder);
            }
        }
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
        let taken = self.ahead.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |a| Some(a.saturating_sub(n as u64)));
        let before = taken.unwrap_or(0);
        let freed = before.min(n as u64);
        if freed > 0 {
            self.connections.inner.ahead.fetch_sub(freed, Ordering::Relaxed);
            self.drained.notify_waiters();
        }
    }

    /// What this connection may have ahead now.
    fn allowance(&self) -> u64 {
        if self.connections.ahead() > AHEAD_ON_NODE { AHEAD_SHARE } else { AHEAD_PER_CONNECTION }
    }

    /// Waits until this connection may hand its transport more, or `stop` ends.
    pub async fn room(&self, stop: &CancellationToken) {
        loop {
            let drained = self.drained.notified();
            tokio::pin!(drained);
            drained.as_mut().enable();
            if self.ahead.load(Ordering::Relaxed) < self.allowance() {
                return;
            }
            tokio::select! {
                _ = drained => {}
                _ = tokio::time::sleep(AHEAD_RECHECK) => {}
                _ = stop.cancelled() => return,
                _ = self.cut.cancelled() => return,
            }
        }
    }

    /// A Watch stream began on this connection; the guard ends it. When the last one
    /// ends, nothing of the connection's is ahead any more: what a stream handed and its
    /// peer cancelled before it was written is let go with it.
    pub fn watch(self: &Arc<Self>) -> WatchGuard {
        self.watches.fetch_add(1, Ordering::Relaxed);
        WatchGuard(self.clone())
    }

    /// A call began; the returned guard ends it.
    pub fn call(self: &Arc<Self>) -> CallGuard {
        if self.calls.fetch_add(1, Ordering::Relaxed) == 0 {
            *self.idle_since.lock().expect("idle lock") = None;
        }
        CallGuard(self.clone())
    }
}

/// A Watch stream open on a connection.
pub struct WatchGuard(Arc<Flow>);

impl Drop for WatchGuard {
    fn drop(&mut self) {
        if self.0.watches.fetch_sub(1, Ordering::Relaxed) == 1 {
            let left = self.0.ahead.swap(0, Ordering::Relaxed);
            self.0.connections.inner.ahead.fetch_sub(left, Ordering::Relaxed);
            self.0.drained.notify_waiters();
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
            (0..MAX_PER_HOLDER).map(|_| c.admit(Holder::Uid(1000), CancellationToken::new()).unwrap()).collect();
        assert!(matches!(c.admit(Holder::Uid(1000), CancellationToken::new()), Err(OverCap::Holder { .. })));
        assert!(c.admit(Holder::RootProcess(7), CancellationToken::new()).is_ok(), "another holder is not held back");
        held.pop();
        assert!(c.admit(Holder::Uid(1000), CancellationToken::new()).is_ok(), "a closed connection frees its place");
        // Root peers plegd cannot see are one connection each, and share a pool.
        let pool: Vec<_> = (0..(MAX_PER_HOLDER * ROOT_CONNECTIONS_SHARE) as u64)
            .map(|i| c.admit(Holder::RootConnection(i), CancellationToken::new()).unwrap())
            .collect();
        assert!(c.admit(Holder::RootConnection(99_999), CancellationToken::new()).is_err());
        drop(pool);
        let many: Vec<_> = (0..MAX_CONNECTIONS as u32)
            .map_while(|uid| c.admit(Holder::Uid(10_000 + uid), CancellationToken::new()).ok())
            .collect();
        assert_eq!(c.open(), MAX_CONNECTIONS);
        assert!(matches!(c.admit(Holder::Uid(5), CancellationToken::new()), Err(OverCap::Node)));
        drop((many, held));
    }

    #[tokio::test(start_paused = true)]
    async fn a_connection_with_no_call_for_the_idle_limit_is_closed_and_one_with_a_stream_never() {
        let c = Connections::default();
        let (idle_cut, busy_cut) = (CancellationToken::new(), CancellationToken::new());
        let idle = c.admit(Holder::Uid(1), idle_cut.clone()).unwrap();
        let busy = c.admit(Holder::Uid(2), busy_cut.clone()).unwrap();
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
        let unread = c.admit(Holder::Uid(1), CancellationToken::new()).unwrap();
        unread.handed(AHEAD_PER_CONNECTION);
        assert!(
            tokio::time::timeout(Duration::from_secs(60), unread.room(&stop)).await.is_err(),
            "held while its peer reads nothing"
        );
        unread.written(4096);
        tokio::time::timeout(Duration::from_millis(1), unread.room(&stop)).await.expect("room once it drains");
        // Many such peers push the node past its total: each is held to its share, and
        // a connection that drains as it goes is not held at all.
        let many: Vec<_> = (2..40u32)
            .map(|uid| {
                let f = c.admit(Holder::Uid(uid), CancellationToken::new()).unwrap();
                f.handed(AHEAD_PER_CONNECTION / 2);
                f
            })
            .collect();
        assert!(c.ahead() > AHEAD_ON_NODE);
        assert!(tokio::time::timeout(Duration::from_secs(1), many[0].room(&stop)).await.is_err());
        let reader = c.admit(Holder::Uid(1000), CancellationToken::new()).unwrap();
        for _ in 0..100 {
            tokio::time::timeout(Duration::from_millis(1), reader.room(&stop)).await.expect("a reader never waits");
            reader.handed(AHEAD_SHARE / 4);
            reader.written((AHEAD_SHARE / 4 + 100) as usize);
        }
        drop(many);
        assert!(c.ahead() < AHEAD_ON_NODE, "a closed connection's bytes leave the node's total");
        // A stream cancelled before its bytes were written: they go with the last one.
        let w = reader.watch();
        reader.handed(AHEAD_PER_CONNECTION * 2);
        assert!(tokio::time::timeout(Duration::from_millis(50), reader.room(&stop)).await.is_err());
        drop(w);
        tokio::time::timeout(Duration::from_millis(1), reader.room(&stop)).await.expect("room once no stream is left");
        drop((unread, reader));
    }
}

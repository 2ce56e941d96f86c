//! The relister's one inbox. Everything that asks the relister to read sends the same
//! value, a [`Request`] (a [`ScheduleRequest`] of a [`Read`] and its [`Why`]), to one
//! cloneable [`Inbox`]: the CRI event stream (a pod it named, with the ids and the final
//! statuses it carried; a container whose pod it did not name; a full relist when it
//! comes up), a reader waiting on a pod (through the cache), and whoever asks for a full
//! relist. The relister drains the [`InboxRx`] into its one
//! [`Scheduler`](super::schedule::Scheduler), where requests coalesce — there and
//! nowhere else.
//!
//! Bounded: past [`CAPACITY`] requests not yet drained, further requests are dropped and
//! the next drain reports the overflow, for which the relister relists fully (a full
//! relist reads whatever the dropped requests would have made it read).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};

use tokio::sync::mpsc;
use tokio::time::Instant;

use super::schedule::{Read, Reason, ScheduleRequest, Why};

/// Requests the inbox holds at most before it drops new ones (and reports the overflow).
pub const CAPACITY: usize = 65_536;

/// What the inbox carries.
pub type Request = ScheduleRequest<Read, Why>;

#[derive(Default)]
struct Counters {
    queued: AtomicUsize,
    overflowed: AtomicBool,
    coalesced: AtomicU64,
}

/// The sending side. Cheap to clone.
#[derive(Clone)]
pub struct Inbox {
    tx: mpsc::UnboundedSender<Request>,
    counters: Arc<Counters>,
}

/// The receiving side, the relister's.
pub struct InboxRx {
    rx: mpsc::UnboundedReceiver<Request>,
    counters: Arc<Counters>,
}

/// A new inbox.
pub fn inbox() -> (Inbox, InboxRx) {
    let (tx, rx) = mpsc::unbounded_channel();
    let counters = Arc::new(Counters::default());
    (Inbox { tx, counters: counters.clone() }, InboxRx { rx, counters })
}

impl Inbox {
    /// Sends `request`; dropped (and the overflow reported to the relister) when the inbox
    /// holds [`CAPACITY`] requests already.
    pub fn send(&self, request: Request) {
        if self.counters.queued.fetch_add(1, Ordering::AcqRel) >= CAPACITY {
            self.counters.queued.fetch_sub(1, Ordering::AcqRel);
            self.counters.overflowed.store(true, Ordering::Release);
            return;
        }
        if self.tx.send(request).is_err() {
            // The relister is gone (shutdown): nothing is read any more.
            self.counters.queued.fetch_sub(1, Ordering::AcqRel);
        }
    }

    /// Asks for a full relist now, for `reason`.
    pub fn full(&self, reason: Reason) {
        let now = Instant::now();
        self.send(ScheduleRequest { key: Read::Full, message: Why::because(reason, now), run_at: now });
    }

    /// A reader started waiting on pod `uid`.
    pub fn waiting(&self, uid: &str) {
        let now = Instant::now();
        self.send(ScheduleRequest {
            key: Read::Pod(uid.to_owned()),
            message: Why::because(Reason::Waiting, now),
            run_at: now,
        });
    }

    /// Requests that landed on a read already scheduled (they coalesced).
    pub fn coalesced(&self) -> u64 {
        self.counters.coalesced.load(Ordering::Relaxed)
    }
}

impl InboxRx {
    /// The next request; waits for one. `None` only when every sender is gone (never
    /// while the relister holds its own [`Inbox`]).
    pub async fn recv(&mut self) -> Option<Request> {
        let r = self.rx.recv().await;
        if r.is_some() {
            self.counters.queued.fetch_sub(1, Ordering::AcqRel);
        }
        r
    }

    /// A request already there, if any.
    pub fn try_recv(&mut self) -> Option<Request> {
        let r = self.rx.try_recv().ok();
        if r.is_some() {
            self.counters.queued.fetch_sub(1, Ordering::AcqRel);
        }
        r
    }

    /// Whether requests were dropped since the last call (the inbox was full).
    pub fn take_overflow(&self) -> bool {
        self.counters.overflowed.swap(false, Ordering::AcqRel)
    }

    /// Counts a request that coalesced with a read already scheduled.
    pub fn count_coalesced(&self) {
        self.counters.coalesced.fetch_add(1, Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_full_inbox_drops_new_requests_and_says_so_once() {
        let (tx, mut rx) = inbox();
        for i in 0..CAPACITY + 10 {
            tx.waiting(&format!("pod-{i}"));
        }
        assert!(rx.take_overflow(), "the overflow is reported");
        assert!(!rx.take_overflow(), "once");
        let mut n = 0;
        while rx.try_recv().is_some() {
            n += 1;
        }
        assert_eq!(n, CAPACITY, "what fitted is all there, in order");
        tx.waiting("again");
        assert_eq!(rx.recv().await.map(|r| r.key), Some(Read::Pod("again".into())), "drained, it takes requests again");
        assert!(!rx.take_overflow());
    }
}

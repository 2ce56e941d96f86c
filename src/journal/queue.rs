//! A subscriber's queue of live entries: bounded, filled by the journal without ever
//! waiting, taken by the subscriber. When the journal drops a subscriber — its queue
//! was full, a pod it watched left its selection, the journal began a new epoch — it
//! empties the queue at once: a client that stopped reading holds nothing of the
//! journal while it stalls, however many such clients there are.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicU8, Ordering};
use std::sync::{Arc, Mutex};

use tokio::sync::Notify;

use super::{Dropped, Entry};

/// One subscriber's live entries.
pub(super) struct Queue {
    entries: Mutex<VecDeque<Arc<Entry>>>,
    ready: Notify,
    cap: usize,
    /// Why the journal dropped the subscriber (0: it did not; else a [`Dropped`]).
    dropped: AtomicU8,
    /// The subscriber went away.
    closed: AtomicBool,
}

impl Queue {
    /// An empty queue of at most `cap` entries.
    pub(super) fn new(cap: usize) -> Arc<Self> {
        Arc::new(Self {
            entries: Mutex::new(VecDeque::new()),
            ready: Notify::new(),
            cap: cap.max(1),
            dropped: AtomicU8::new(0),
            closed: AtomicBool::new(false),
        })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, VecDeque<Arc<Entry>>> {
        self.entries.lock().expect("queue lock")
    }

    /// Adds an entry; `false` when the queue is full (the journal then drops the
    /// subscriber).
    pub(super) fn push(&self, e: Arc<Entry>) -> bool {
        let mut q = self.lock();
        if q.len() >= self.cap {
            return false;
        }
        q.push_back(e);
        drop(q);
        self.ready.notify_one();
        true
    }

    /// Drops the subscriber for `why`: its entries go now.
    pub(super) fn drop_for(&self, why: Dropped) {
        self.dropped.store(why as u8, Ordering::Release);
        let gone = std::mem::take(&mut *self.lock());
        drop(gone);
        self.ready.notify_one();
    }

    /// Why the journal dropped the subscriber, if it did: the one place the stored
    /// byte is read back.
    pub(super) fn dropped(&self) -> Option<Dropped> {
        match self.dropped.load(Ordering::Acquire) {
            0 => None,
            x if x == Dropped::LeftSelection as u8 => Some(Dropped::LeftSelection),
            x if x == Dropped::NewEpoch as u8 => Some(Dropped::NewEpoch),
            _ => Some(Dropped::FellBehind),
        }
    }

    /// The next entry, waiting for one; `None` once the subscriber was dropped.
    /// Cancel-safe: an entry is taken only when it is returned.
    pub(super) async fn pop(&self) -> Option<Arc<Entry>> {
        loop {
            if self.dropped().is_some() {
                return None;
            }
            if let Some(e) = self.lock().pop_front() {
                return Some(e);
            }
            // A push after the look above leaves a permit: this returns at once.
            self.ready.notified().await;
        }
    }

    /// Whether no entry waits.
    pub(super) fn is_empty(&self) -> bool {
        self.lock().is_empty()
    }

    /// The subscriber went away: the journal stops filling the queue.
    pub(super) fn close(&self) {
        self.closed.store(true, Ordering::Release);
        self.lock().clear();
    }

    /// Whether the subscriber went away.
    pub(super) fn is_closed(&self) -> bool {
        self.closed.load(Ordering::Acquire)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn why_a_subscriber_was_dropped_reads_back_as_it_was_stored_and_undropped_is_none() {
        let q = Queue::new(4);
        assert_eq!(q.dropped(), None);
        for why in [Dropped::FellBehind, Dropped::LeftSelection, Dropped::NewEpoch] {
            let q = Queue::new(4);
            q.drop_for(why);
            assert_eq!(q.dropped(), Some(why));
            assert!(q.is_empty(), "a dropped subscriber's entries are gone");
        }
    }
}

//! The relister's one intake. Everything that asks the relister for work sends it to
//! one cloneable [`Inbox`] as an [`Intake`]: a read (a [`Request`], a
//! [`ScheduleRequest`] of a [`Read`] and its [`Why`]: a pod the stream named with the ids
//! it carried, a full relist when the stream comes up, a pod a reader waits on, a full
//! relist someone asks for), a container the stream named without its pod, a sandbox
//! the stream said deleted, or what NRI said of a container or a sandbox ahead of its status. The relister drains the [`InboxRx`] into its one
//! [`Scheduler`](super::schedule::Scheduler), where reads coalesce — there and nowhere
//! else. A request names work; it carries no facts.
//!
//! Facts go to their book: a final status the stream carried enters the
//! [`FinalStatusBook`] the moment it is heard ([`Inbox::final_status`]), stamped, so a
//! read under way finds it there without draining anything.
//!
//! Bounded: past [`CAPACITY`] messages not yet drained, further ones are dropped and the
//! next drain reports the overflow, for which the relister relists fully (a full relist
//! reads whatever the dropped messages would have made it read).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use tokio::sync::mpsc;
use tokio::time::Instant;

use super::early_words::Word;
use super::final_statuses::{FinalStatus, FinalStatusBook};
use super::schedule::{Read, Reason, ScheduleRequest, Why};

/// Requests the inbox holds at most before it drops new ones (and reports the overflow).
pub const CAPACITY: usize = 65_536;

/// A read asked for.
pub type Request = ScheduleRequest<Read, Why>;

/// What the inbox carries: work for the relister.
#[derive(Debug)]
pub enum Intake {
    /// A read.
    Read(Request),
    /// The stream (or an NRI call) named container `id` without its pod (containerd
    /// does, once the sandbox is gone): its pod, found through the records, is read; an
    /// unknown container asks for a full relist.
    ContainerOnly {
        /// The container.
        id: String,
        /// Who named it.
        by: Teller,
    },
    /// The stream said pod `uid`'s sandbox `id` was deleted: it is read again until
    /// gone.
    SandboxDeleted {
        /// The pod.
        uid: String,
        /// The sandbox.
        id: String,
    },
    /// The runtime said `word` of pod `uid`'s container or sandbox `id` through NRI,
    /// ahead of its status: it is read again until its status shows it. A container
    /// named without its pod (its sandbox gone) is found through the records.
    EarlyWord {
        /// The pod, where the call named it.
        uid: Option<String>,
        /// The container or sandbox.
        id: String,
        /// What was said.
        word: Word,
    },
}

/// Who named a container without its pod.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Teller {
    /// The CRI event stream.
    Stream,
    /// An NRI call.
    Nri,
}

#[derive(Default)]
struct Counters {
    overflowed: AtomicBool,
    coalesced: AtomicU64,
}

/// The sending side. Cheap to clone.
#[derive(Clone)]
pub struct Inbox {
    tx: mpsc::Sender<Intake>,
    counters: Arc<Counters>,
    final_statuses: FinalStatusBook,
}

/// The receiving side, the relister's.
pub struct InboxRx {
    rx: mpsc::Receiver<Intake>,
    counters: Arc<Counters>,
}

/// A new inbox, whose final statuses go to `final_statuses`.
pub fn inbox(final_statuses: FinalStatusBook) -> (Inbox, InboxRx) {
    let (tx, rx) = mpsc::channel(CAPACITY);
    let counters = Arc::new(Counters::default());
    (Inbox { tx, counters: counters.clone(), final_statuses }, InboxRx { rx, counters })
}

impl Inbox {
    /// Sends `intake`; dropped (and the overflow reported to the relister) when the
    /// inbox holds [`CAPACITY`] messages already.
    pub fn submit(&self, intake: Intake) {
        match self.tx.try_send(intake) {
            Ok(()) => {}
            Err(mpsc::error::TrySendError::Full(_)) => self.counters.overflowed.store(true, Ordering::Release),
            // The relister is gone (shutdown): nothing is read any more.
            Err(mpsc::error::TrySendError::Closed(_)) => {}
        }
    }

    /// Asks for a read.
    pub fn send(&self, request: Request) {
        self.submit(Intake::Read(request));
    }

    /// The stream carried a stopped container's final status: into its book, now.
    pub fn final_status(&self, word: FinalStatus) {
        self.final_statuses.heard(word);
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
    pub async fn recv(&mut self) -> Option<Intake> {
        self.rx.recv().await
    }

    /// A request already there, if any.
    pub fn try_recv(&mut self) -> Option<Intake> {
        self.rx.try_recv().ok()
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
        let (tx, mut rx) = inbox(Default::default());
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
        let Some(Intake::Read(again)) = rx.recv().await else { panic!("a read") };
        assert_eq!(again.key, Read::Pod("again".into()), "drained, it takes requests again");
        assert!(!rx.take_overflow());
    }
}

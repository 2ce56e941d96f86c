//! A subscription as one stream of entries: [`Feed`]. It owns the order a subscriber
//! sees the journal in — the part of a resume only the disk still holds (page by page,
//! each page read off the async threads, in a turn when the consumer shares turns), then
//! the part memory held when the subscription was taken, then live entries — and it is
//! the only code that knows that order.
//!
//! Its promises: the entries it yields are the subscription's matching entries in
//! revision order with no gap and no repeat (a snapshot start's entries begin right
//! after the snapshot's revision). When it cannot keep that promise it says so with an
//! item and ends: [`FeedItem::Overflowed`] when the journal dropped the subscriber (its
//! buffer filled while it was not read, a pod it selected left its selection, the
//! journal began a new epoch), [`FeedItem::ReplayStopped`] when the replay from disk
//! could not go on. A consumer starts over from the last entry it took (or a snapshot).
//! Taking an item is cancel-safe: nothing is taken from the journal until it is
//! yielded. Shutdown is the consumer's: dropping the feed unsubscribes.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, ready};

use futures_util::Stream;
use tokio::sync::Semaphore;
use tokio_util::sync::ReusableBoxFuture;

use super::{DiskReplay, Entry, Replay, ReplayError, ResetReason, Start, Subscription, queue};
use crate::model::PodStatus;

/// One thing a [`Feed`] yields.
#[derive(Debug)]
pub enum FeedItem {
    /// The next matching entry.
    Entry(Arc<Entry>),
    /// The journal dropped the subscriber: nothing follows, start over.
    Overflowed(Dropped),
    /// The replay from disk stopped short: nothing follows, start over.
    ReplayStopped(FeedError),
}

/// Why the journal dropped a subscriber (kept in its queue as one byte, never 0).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum Dropped {
    /// Its buffer filled while it was not read.
    FellBehind = 1,
    /// A pod it selected changed its labels and left its selection.
    LeftSelection = 2,
    /// The journal's disk failed and it began a new epoch in memory.
    NewEpoch = 3,
}

/// Why a feed's replay stopped short.
#[derive(Debug, thiserror::Error)]
pub enum FeedError {
    /// The disk could not give the rest (compacted, a pod left the selection, the
    /// disk failed).
    #[error(transparent)]
    Replay(#[from] ReplayError),
    /// The blocking read of a page did not finish (it panicked or the runtime is
    /// shutting down).
    #[error(transparent)]
    Read(#[from] tokio::task::JoinError),
}

/// The pods a subscription starts with, consistent with `revision`; its feed yields the
/// entries after it.
#[derive(Debug)]
pub struct Snapshot {
    /// The matching pods.
    pub pods: Vec<Arc<PodStatus>>,
    /// The revision they are consistent with.
    pub revision: u64,
}

/// A subscription's entries as one stream: replay from disk, then memory, then live.
pub struct Feed {
    sub: Subscription,
    /// Entries read and not yet yielded (a disk page, or memory's part).
    page: std::vec::IntoIter<Arc<Entry>>,
    /// Memory's part of a replay, yielded once the disk's is.
    memory: Vec<Arc<Entry>>,
    stage: Stage,
    /// Turns to read a page from disk, shared with other feeds (none: no limit).
    turns: Option<Arc<Semaphore>>,
}

/// Where a [`Feed`] is, once its current page is yielded.
enum Stage {
    /// The disk's part is next.
    Disk(Box<DiskReplay>),
    /// A page is being read.
    Reading(PageRead),
    /// Live entries, taken through one reusable wait (created on the first poll).
    Live(Option<ReusableBoxFuture<'static, Option<Arc<Entry>>>>),
    /// It ended with an item that said why.
    Ended,
}

/// A page read off the async threads: the page (`None`: the disk's part is done) and
/// the replay, to read the next.
type PageRead = Pin<Box<dyn Future<Output = Result<(Option<Vec<Arc<Entry>>>, Box<DiskReplay>), FeedError>> + Send>>;

/// What one step of a feed came to.
enum Step {
    Yield(FeedItem),
    Again,
}

impl Subscription {
    /// The subscription as a feed, with the snapshot it starts with, if it starts with
    /// one (the feed then yields the entries after it).
    pub fn into_feed(mut self) -> (Option<Snapshot>, Feed) {
        let (snapshot, replay) = match std::mem::replace(&mut self.start, Start::Replay(Replay::default())) {
            Start::Snapshot { pods, revision } => (Some(Snapshot { pods, revision }), Replay::default()),
            Start::Replay(replay) => (None, replay),
        };
        let (page, memory, stage) = match replay.disk {
            Some(disk) => (Vec::new().into_iter(), replay.memory, Stage::Disk(Box::new(disk))),
            None => (replay.memory.into_iter(), Vec::new(), Stage::Live(None)),
        };
        (snapshot, Feed { sub: self, page, memory, stage, turns: None })
    }
}

impl Dropped {
    /// What a watcher is told.
    pub fn reset_reason(self) -> ResetReason {
        match self {
            Self::FellBehind => ResetReason::SlowConsumer,
            Self::LeftSelection | Self::NewEpoch => ResetReason::RuntimeResync,
        }
    }

    fn of(sub: &Subscription) -> Option<Self> {
        sub.queue.dropped()
    }
}

impl FeedError {
    /// Whether a pod the subscriber selected left its selection during the replay.
    pub fn left_selection(&self) -> bool {
        matches!(self, Self::Replay(ReplayError::LeftSelection { .. }))
    }
}

impl Feed {
    /// Reads pages from disk only in a turn of `turns` (few at once, so a crowd of
    /// resuming consumers cannot multiply the readers' memory). A turn goes with its
    /// read and ends with it, even when the consumer leaves meanwhile.
    pub fn with_turns(mut self, turns: Arc<Semaphore>) -> Self {
        self.turns = Some(turns);
        self
    }

    /// The journal's epoch when the subscription was taken: its entries' revisions are
    /// of this epoch.
    pub fn epoch(&self) -> u64 {
        self.sub.epoch
    }

    /// Whether the feed follows live entries and has yielded every one handed to it: with
    /// the journal's revision read before, nothing it matches at or below that revision
    /// is still to come.
    pub fn is_drained(&self) -> bool {
        matches!(self.stage, Stage::Live(_))
            && self.page.len() == 0
            && self.sub.queue.is_empty()
            && Dropped::of(&self.sub).is_none()
    }

    /// Whether the feed is still yielding the replay a resume asked for.
    pub fn is_replaying(&self) -> bool {
        matches!(self.stage, Stage::Disk(_) | Stage::Reading(_)) || self.page.len() > 0
    }

    /// Ends the feed with the item that says why.
    fn end(&mut self, item: FeedItem) -> FeedItem {
        self.stage = Stage::Ended;
        self.page = Vec::new().into_iter();
        self.memory = Vec::new();
        item
    }

    /// Moves the feed on once its page is yielded: starts the next read from disk,
    /// takes a page read, or the next live entry.
    fn poll_stage(&mut self, cx: &mut Context<'_>) -> Poll<Step> {
        match &mut self.stage {
            Stage::Disk(_) => {
                let Stage::Disk(disk) = std::mem::replace(&mut self.stage, Stage::Ended) else { unreachable!() };
                self.stage = Stage::Reading(read_page(disk, self.turns.clone()));
            }
            Stage::Reading(read) => match ready!(read.as_mut().poll(cx)) {
                Ok((Some(page), disk)) => {
                    self.page = page.into_iter();
                    self.stage = Stage::Disk(disk);
                }
                Ok((None, _)) => {
                    self.page = std::mem::take(&mut self.memory).into_iter();
                    self.stage = Stage::Live(None);
                }
                Err(e) => return Poll::Ready(Step::Yield(self.end(FeedItem::ReplayStopped(e)))),
            },
            Stage::Live(wait) => {
                let queue = &self.sub.queue;
                let wait = wait.get_or_insert_with(|| ReusableBoxFuture::new(pop(queue.clone())));
                // `None`: the journal dropped the subscriber; the next step says why.
                if let Some(e) = ready!(wait.poll(cx)) {
                    wait.set(pop(queue.clone()));
                    return Poll::Ready(Step::Yield(FeedItem::Entry(e)));
                }
                if Dropped::of(&self.sub).is_none() {
                    return Poll::Ready(Step::Yield(self.end(FeedItem::Overflowed(Dropped::FellBehind))));
                }
            }
            Stage::Ended => {}
        }
        Poll::Ready(Step::Again)
    }
}

impl Stream for Feed {
    type Item = FeedItem;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<FeedItem>> {
        let feed = self.get_mut();
        loop {
            if matches!(feed.stage, Stage::Ended) {
                return Poll::Ready(None);
            }
            // Checked before each entry: a replay stops as soon as live entries
            // overflowed, its rest would be of no use.
            if let Some(why) = Dropped::of(&feed.sub) {
                return Poll::Ready(Some(feed.end(FeedItem::Overflowed(why))));
            }
            if let Some(e) = feed.page.next() {
                return Poll::Ready(Some(FeedItem::Entry(e)));
            }
            if let Step::Yield(item) = ready!(feed.poll_stage(cx)) {
                return Poll::Ready(Some(item));
            }
        }
    }
}

/// The subscriber's next live entry (`None` once the journal dropped it).
async fn pop(queue: Arc<queue::Queue>) -> Option<Arc<Entry>> {
    queue.pop().await
}

/// Reads the replay's next page from disk off the async threads, in a turn when
/// `turns` are shared.
fn read_page(mut disk: Box<DiskReplay>, turns: Option<Arc<Semaphore>>) -> PageRead {
    Box::pin(async move {
        let turn = match turns {
            Some(turns) => turns.acquire_owned().await.ok(),
            None => None,
        };
        let read = tokio::task::spawn_blocking(move || {
            let _turn = turn;
            disk.next_page().map(|page| (page, disk))
        });
        read.await?.map_err(FeedError::from)
    })
}

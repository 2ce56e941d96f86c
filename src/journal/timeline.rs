//! A pod's timeline: the events plegd published for it, read from disk (or memory) off
//! the async threads, a few at a time, with what the caller draws from them in the
//! same turn.

use std::sync::Arc;
use std::time::Duration;

use super::store::Reader;
use super::{Disk, Entry, Journal, Shared};

/// Entries a pod's timeline shows at most.
const TIMELINE_PER_POD: usize = 1000;
/// Timelines read at once.
pub const TIMELINE_READS: usize = 2;

impl Shared {
    async fn timeline_reads_owned(&self) -> Option<tokio::sync::OwnedSemaphorePermit> {
        self.timeline_reads.clone().acquire_owned().await.ok()
    }
}

impl Journal {
    /// The events plegd published for a pod (the last 1,000 of those still kept: on
    /// disk with a state dir, else in memory), oldest first; `None` when there are none.
    pub fn timeline(&self, uid: &str) -> Option<Vec<Arc<Entry>>> {
        let durable = matches!(self.lock().disk, Disk::Durable(_));
        if let (true, Some(path)) = (durable, &self.shared.path) {
            let read = Reader::open(path).and_then(|r| r.timeline(uid, TIMELINE_PER_POD));
            match read {
                Ok(v) if v.is_empty() => {}
                Ok(v) => {
                    return Some(v.into_iter().map(|s| Arc::new(Entry::from(s))).collect());
                }
                Err(e) => tracing::warn!(error = %e, "reading a timeline from disk failed; showing memory's"),
            }
        }
        let inner = self.lock();
        let mut v: Vec<_> = inner.ring.iter().filter(|e| *e.event.pod_uid == *uid).cloned().collect();
        if v.len() > TIMELINE_PER_POD {
            v.drain(..v.len() - TIMELINE_PER_POD);
        }
        (!v.is_empty()).then_some(v)
    }

    /// [`Self::timeline`] with the journal's epoch, read off the async threads, at
    /// most [`TIMELINE_READS`] at once (more wait their turn, up to 10 s): the pages and
    /// the debug API each read one per request, and a pod's timeline can be large.
    /// `None` when the read failed or found no turn.
    pub async fn read_timeline(&self, uid: &str) -> Option<(u64, Option<Vec<Arc<Entry>>>)> {
        self.with_timeline(uid, |epoch, entries| (epoch, entries)).await
    }

    /// [`Self::read_timeline`], and what `use_it` makes of it within the same turn, on
    /// the same blocking thread: a page drawn from a large timeline is bounded by the
    /// turns as the read is (eight views of a crash-looping pod of 150 containers once
    /// reached 173 MiB, drawing after their turns had ended).
    pub async fn with_timeline<T: Send + 'static>(
        &self,
        uid: &str,
        use_it: impl FnOnce(u64, Option<Vec<Arc<Entry>>>) -> T + Send + 'static,
    ) -> Option<T> {
        // A turn within 10 s, or the caller is told to come back. The turn goes with the
        // read and ends with it, even when the caller leaves meanwhile.
        let reads = self.shared.clone();
        let turn = tokio::time::timeout(Duration::from_secs(10), async move { reads.timeline_reads_owned().await })
            .await
            .ok()??;
        let (journal, uid) = (self.clone(), uid.to_owned());
        // Its revisions belong to the journal's epoch, read with it.
        tokio::task::spawn_blocking(move || {
            let _turn = turn;
            use_it(journal.epoch(), journal.timeline(&uid))
        })
        .await
        .ok()
    }
}

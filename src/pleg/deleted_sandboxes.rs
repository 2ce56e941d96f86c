//! Sandboxes the runtime said deleted, until a read finds them gone. containerd 2.x's
//! `RemovePodSandbox` sends the sandbox's `CONTAINER_DELETED` before it takes the
//! sandbox out of its store (NRI's removal notification runs in between), so the read
//! the event prompts can still find the sandbox, with its containers gone, and no event
//! comes when the sandbox goes. Unless a read finds it gone first, the relister reads
//! such a sandbox's status again 0.1, 0.3, 0.7 … s after the event (ten reads over about
//! 100 s; a read that fails is retried and not counted), and reads its pod in full once
//! it is gone: the pod's
//! removal reaches the cache and the watchers then, not at the next full relist (five
//! minutes apart while the stream is trusted), so a pod with no container that the
//! runtime no longer lists does not stay in `ListPods`. Owned by the relister; bounded
//! by count.

use std::collections::HashMap;
use std::time::Duration;

use tokio::time::Instant;

use super::lost_exits::{Pace, Reread, Rereads, due_now, earliest};
use crate::cri::CriError;
use crate::proto::runtime as cri;

/// The first re-read comes this long after the read that still found the sandbox; each
/// next one twice as long after the one before.
const FIRST: Duration = Duration::from_millis(100);
/// Re-reads per sandbox.
const READS: u32 = 10;
/// A sandbox said deleted and not read since, or whose re-reads keep failing, is let go
/// this long after it was said deleted (full relists cover it).
const RECENT: Duration = Duration::from_secs(600);
/// At most this many sandboxes are followed; past it the oldest go (down to three
/// quarters, in one pass).
const MAX: usize = 1024;

/// What a `PodSandboxStatus` answer says of a sandbox said deleted: still there (the
/// same), gone (NotFound: its pod is to be read in full), or a failed read.
pub(super) fn reread_of(answer: Result<cri::PodSandboxStatus, CriError>) -> Reread {
    match answer {
        Ok(_) => Reread::Same,
        Err(e) if e.is_not_found() => Reread::Changed,
        Err(_) => Reread::Failed,
    }
}

const PACE: Pace = Pace { first: FIRST, reads: READS, max_doubling: 8, recent: RECENT };

/// The sandboxes said deleted, until a read finds them gone.
#[derive(Default)]
pub(super) struct DeletedSandboxes {
    by_id: HashMap<String, Rereads>,
}

impl DeletedSandboxes {
    /// The runtime said sandbox `id` of pod `uid` deleted (its `CONTAINER_DELETED`): it
    /// is read again [`FIRST`] from now unless a read of the pod finds it gone before
    /// (the read the event prompts, usually). Scheduled here, not by that read: a full
    /// relist that takes the event's turn reads the pod only if it changed.
    pub fn said(&mut self, uid: &str, id: &str) {
        let now = Instant::now();
        self.by_id.entry(id.to_owned()).or_insert_with(|| Rereads::new(uid, now, Some(now + FIRST)));
        if self.by_id.len() > MAX {
            self.by_id.retain(|_, s| now.duration_since(s.since) < RECENT);
        }
        if self.by_id.len() > MAX {
            let mut order: Vec<(Instant, String)> = self.by_id.iter().map(|(id, s)| (s.since, id.clone())).collect();
            order.sort();
            for (_, id) in order.iter().take(self.by_id.len() - MAX * 3 / 4) {
                self.by_id.remove(id);
            }
        }
    }

    /// Takes in a read of pod `uid`: a sandbox said deleted that it does not find
    /// (`finds`: in the pod's listing or its statuses; neither, for a pod gone) is let
    /// go; one it still finds keeps its re-reads.
    pub fn note(&mut self, uid: &str, finds: impl Fn(&str) -> bool) {
        if self.by_id.is_empty() {
            return;
        }
        self.by_id.retain(|id, s| s.uid != uid || finds(id));
    }

    /// The pods whose sandboxes are followed.
    pub fn uids(&self) -> impl Iterator<Item = &str> {
        self.by_id.values().map(|s| s.uid.as_str())
    }

    /// When the next re-read is due, if any is.
    pub fn next_due(&self) -> Option<Instant> {
        earliest(self.by_id.values())
    }

    /// The sandboxes (id, pod uid) due for a re-read now.
    pub fn due(&self) -> Vec<(String, String)> {
        due_now(self.by_id.iter())
    }

    /// Records a re-read of sandbox `id`: still there counts a read and schedules the
    /// next (after [`READS`] the sandbox is let go: full relists cover it); a failed
    /// read is not counted and is tried again, 0.1, 0.2, 0.4 … 25.6 s later (until
    /// [`RECENT`] after it was said deleted); gone lets it go (the read of its pod that
    /// follows tells the removal).
    pub fn read(&mut self, id: &str, found: Reread) {
        let Some(s) = self.by_id.get_mut(id) else { return };
        s.read(found, &PACE);
        if s.next.is_none() {
            self.by_id.remove(id);
        }
    }

    /// Sandboxes followed.
    #[cfg(test)]
    fn len(&self) -> usize {
        self.by_id.len()
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;

    /// A read that finds the sandboxes `ids`.
    fn finding(ids: &'static [&'static str]) -> impl Fn(&str) -> bool {
        move |id| ids.contains(&id)
    }

    /// Plays a relister that re-reads what is due and gets `answer` for each; the
    /// times of the reads, in milliseconds from the start.
    async fn reread_times(d: &mut DeletedSandboxes, mut answer: impl FnMut(u32) -> Reread) -> Vec<u64> {
        let start = Instant::now();
        let mut reads = Vec::new();
        let mut n = 0;
        while let Some(at) = d.next_due() {
            tokio::time::sleep_until(at).await;
            for (id, _) in d.due() {
                d.read(&id, answer(n));
                reads.push((Instant::now() - start).as_millis() as u64);
                n += 1;
            }
        }
        reads
    }

    #[tokio::test(start_paused = true)]
    async fn a_sandbox_said_deleted_and_still_read_is_read_again_until_gone_for_about_a_hundred_seconds() {
        let mut d = DeletedSandboxes::default();
        d.said("p", "s");
        d.note("p", finding(&["s"]));
        let times = reread_times(&mut d, |_| Reread::Same).await;
        assert_eq!(times, [100, 300, 700, 1500, 3100, 6300, 12700, 25500, 51100, 102300]);
        assert_eq!((d.len(), d.next_due()), (0, None), "then let go: full relists cover it");

        // Gone at the third re-read: let go.
        d.said("p", "s");
        d.note("p", finding(&["s"]));
        let times = reread_times(&mut d, |n| if n == 2 { Reread::Changed } else { Reread::Same }).await;
        assert_eq!(times, [100, 300, 700]);
        assert_eq!(d.len(), 0);
    }

    #[tokio::test(start_paused = true)]
    async fn a_read_that_no_longer_lists_the_sandbox_or_a_gone_pod_lets_it_go_and_other_pods_keep_theirs() {
        let mut d = DeletedSandboxes::default();
        d.said("p", "s1");
        d.said("q", "s2");
        d.said("r", "s3");
        assert_eq!(d.next_due(), Some(Instant::now() + FIRST), "read again soon unless a read finds it gone");
        // The prompted read already found it gone (the runtime's usual order), or the
        // pod gone.
        d.note("p", finding(&["older"]));
        d.note("q", finding(&[]));
        assert_eq!(d.len(), 1, "only r's sandbox, not read yet, is still followed");
        d.note("r", finding(&["s3"]));
        tokio::time::advance(FIRST).await;
        assert_eq!(d.due(), [("s3".to_owned(), "r".to_owned())]);
        // A later read of the pod (any read) does not start the schedule over.
        d.read("s3", Reread::Same);
        d.note("r", finding(&["s3"]));
        assert_eq!(d.next_due(), Some(Instant::now() + FIRST * 2));
        // Not read at all (a full relist took the event's turn and found the pod
        // unchanged): read again all the same.
        d.said("t", "s4");
        tokio::time::advance(FIRST).await;
        assert!(d.due().contains(&("s4".to_owned(), "t".to_owned())));
    }

    #[tokio::test(start_paused = true)]
    async fn failed_re_reads_are_retried_and_not_counted_and_given_up_after_ten_minutes() {
        let mut d = DeletedSandboxes::default();
        d.said("p", "s");
        d.note("p", finding(&["s"]));
        let times = reread_times(&mut d, |n| if n < 2 { Reread::Failed } else { Reread::Changed }).await;
        assert_eq!(times, [100, 200, 400], "two retries backing off, then gone");
        d.said("p", "s");
        d.note("p", finding(&["s"]));
        let times = reread_times(&mut d, |_| Reread::Failed).await;
        assert!(times.windows(2).all(|w| w[1] - w[0] <= 25_600), "{times:?}");
        assert!(*times.last().unwrap() <= (RECENT + Duration::from_millis(25_600)).as_millis() as u64, "{times:?}");
        assert_eq!(d.len(), 0);
    }

    #[test]
    fn a_sandbox_status_answer_is_still_there_gone_or_a_failure() {
        assert_eq!(reread_of(Ok(cri::PodSandboxStatus::default())), Reread::Same);
        let err = |code| {
            Err(CriError::Call {
                method: "PodSandboxStatus",
                endpoint: Arc::from("unix:///x"),
                status: tonic::Status::new(code, "x"),
            })
        };
        assert_eq!(reread_of(err(tonic::Code::NotFound)), Reread::Changed);
        assert_eq!(reread_of(err(tonic::Code::Unavailable)), Reread::Failed);
        assert_eq!(reread_of(err(tonic::Code::DeadlineExceeded)), Reread::Failed);
    }

    #[tokio::test(start_paused = true)]
    async fn the_book_is_bounded_and_lets_the_oldest_go() {
        let mut d = DeletedSandboxes::default();
        for i in 0..=MAX {
            d.said(&format!("p{i}"), &format!("s{i}"));
            tokio::time::advance(Duration::from_millis(1)).await;
        }
        assert_eq!(d.len(), MAX * 3 / 4, "cut down in one pass");
        assert!(!d.by_id.contains_key("s0") && d.by_id.contains_key(&format!("s{MAX}")), "the oldest went");
    }
}

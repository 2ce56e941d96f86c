//! Sandboxes the runtime said deleted, until a read finds them gone. containerd 2.x's
//! `RemovePodSandbox` sends the sandbox's `CONTAINER_DELETED` before it takes the
//! sandbox out of its store (NRI's removal notification runs in between), so the read
//! the event prompts can still find the sandbox, with its containers gone, and no event
//! comes when the sandbox goes. Unless a read finds it gone first, the relister reads
//! such a sandbox's status again 25, 75, 175 … ms after the event (twelve reads over about
//! 100 s; a read that fails is retried and not counted), and reads its pod in full once
//! it is gone: the pod's
//! removal reaches the cache and the watchers then, not at the next full relist (five
//! minutes apart while the stream is trusted), so a pod with no container that the
//! runtime no longer lists does not stay in `ListPods`. Owned by the relister; bounded
//! by count ([`super::followed`]).

use std::time::Duration;

use tokio::time::Instant;

use futures_util::future::BoxFuture;

use super::followed::Followed;
use super::schedule::{Book, Pace, Reason, Reread};
use crate::cri::{CriError, RuntimeService};
use crate::proto::runtime as cri;

/// The first re-read comes this long after the read that still found the sandbox; each
/// next one twice as long after the one before.
const FIRST: Duration = Duration::from_millis(25);
/// Re-reads per sandbox.
const READS: u32 = 12;
/// A sandbox said deleted and not read since, or whose re-reads keep failing, is let go
/// this long after it was said deleted (full relists cover it).
const RECENT: Duration = Duration::from_secs(600);
/// What a `PodSandboxStatus` answer says of a sandbox said deleted: still there (the
/// same), gone (NotFound: its pod is to be read in full), or a failed read.
pub(super) fn reread_of(answer: Result<cri::PodSandboxStatus, CriError>) -> Reread {
    match answer {
        Ok(_) => Reread::Same,
        Err(e) if e.is_not_found() => Reread::Changed,
        Err(_) => Reread::Failed,
    }
}

const PACE: Pace = Pace { first: FIRST, reads: READS, max_doubling: 10, recent: RECENT };

/// The sandboxes said deleted, until a read finds them gone.
pub(super) struct DeletedSandboxes(pub(super) Followed);

impl Default for DeletedSandboxes {
    fn default() -> Self {
        Self(Followed::new(&PACE))
    }
}

impl DeletedSandboxes {
    /// The runtime said sandbox `id` of pod `uid` deleted (its `CONTAINER_DELETED`): it
    /// is read again [`FIRST`] from now (the time returned, for a sandbox not followed
    /// yet) unless a read of the pod finds it gone before (the read the event prompts,
    /// usually).
    pub fn said(&mut self, uid: &str, id: &str) -> Option<Instant> {
        self.0.said(uid, id)
    }

    /// Takes in a read of pod `uid`: a sandbox said deleted that it does not find
    /// (`finds`: in the pod's listing or its statuses; neither, for a pod gone) is let
    /// go; one it still finds keeps its re-reads.
    pub fn note(&mut self, uid: &str, finds: impl Fn(&str) -> bool) {
        self.0.note(uid, finds);
    }

    /// The pods whose sandboxes are followed.
    pub fn uids(&self) -> impl Iterator<Item = &str> {
        self.0.uids()
    }

    /// The pod of sandbox `id`, while it is followed.
    pub fn pod_of(&self, id: &str) -> Option<&str> {
        self.0.pod_of(id)
    }

    /// Records a re-read of sandbox `id` and says when the next is due: still there
    /// counts a read (after [`READS`] the sandbox is let go: full relists cover it); a
    /// failed read is not counted and is tried again, 25, 50, 100 ms … 25.6 s later (until
    /// [`RECENT`] after it was said deleted); gone lets it go (the read of its pod that
    /// follows tells the removal).
    pub fn read(&mut self, id: &str, found: Reread) -> Option<Instant> {
        self.0.read(id, found)
    }

    /// Sandboxes followed.
    #[cfg(test)]
    fn len(&self) -> usize {
        self.0.len()
    }
}

impl Book for DeletedSandboxes {
    fn reason(&self) -> Reason {
        Reason::SandboxDeleted
    }

    fn pod_of(&self, id: &str) -> Option<&str> {
        DeletedSandboxes::pod_of(self, id)
    }

    /// One `PodSandboxStatus`.
    fn reread<R: RuntimeService>(&self, id: &str, runtime: R, timeout: Duration) -> Option<BoxFuture<'static, Reread>> {
        let id = self.pod_of(id).map(|_| id.to_owned())?;
        Some(Box::pin(async move {
            match tokio::time::timeout(timeout, runtime.pod_sandbox_status(&id)).await {
                Ok(answer) => reread_of(answer),
                Err(_) => Reread::Failed,
            }
        }))
    }

    fn read(&mut self, id: &str, found: Reread) -> Option<Instant> {
        tracing::debug!(sandbox = %id, ?found, "sandbox said deleted, read again");
        DeletedSandboxes::read(self, id, found)
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::pleg::followed::MAX;
    use crate::pleg::schedule::Scheduler;

    /// A read that finds the sandboxes `ids`.
    fn finding(ids: &'static [&'static str]) -> impl Fn(&str) -> bool {
        move |id| ids.contains(&id)
    }

    /// Says sandbox `id` of `uid` deleted and schedules its first re-read.
    fn say(d: &mut DeletedSandboxes, s: &mut Scheduler<String, ()>, uid: &str, id: &str) {
        if let Some(at) = d.said(uid, id) {
            s.schedule(id.to_owned(), (), at);
        }
    }

    /// The times of the re-reads, in milliseconds from the start.
    async fn reread_times(
        d: &mut DeletedSandboxes,
        s: &mut Scheduler<String, ()>,
        answer: impl FnMut(u32) -> Reread,
    ) -> Vec<u64> {
        crate::pleg::amended_exits::reread_times(d, s, Duration::from_millis(1), answer).await
    }

    #[tokio::test(start_paused = true)]
    async fn a_sandbox_said_deleted_and_still_read_is_read_again_until_gone_for_about_a_hundred_seconds() {
        let (mut d, mut s) = (DeletedSandboxes::default(), Scheduler::default());
        say(&mut d, &mut s, "p", "s");
        d.note("p", finding(&["s"]));
        let times = reread_times(&mut d, &mut s, |_| Reread::Same).await;
        assert_eq!(times, [25, 75, 175, 375, 775, 1575, 3175, 6375, 12775, 25575, 51175, 102375]);
        assert_eq!((d.len(), s.next_at()), (0, None), "then let go: full relists cover it");

        // Gone at the third re-read: let go.
        say(&mut d, &mut s, "p", "s");
        d.note("p", finding(&["s"]));
        let times = reread_times(&mut d, &mut s, |n| if n == 2 { Reread::Changed } else { Reread::Same }).await;
        assert_eq!(times, [25, 75, 175]);
        assert_eq!(d.len(), 0);
    }

    #[tokio::test(start_paused = true)]
    async fn a_read_that_no_longer_lists_the_sandbox_or_a_gone_pod_lets_it_go_and_other_pods_keep_theirs() {
        let (mut d, mut s) = (DeletedSandboxes::default(), Scheduler::default());
        say(&mut d, &mut s, "p", "s1");
        say(&mut d, &mut s, "q", "s2");
        say(&mut d, &mut s, "r", "s3");
        assert_eq!(s.next_at(), Some(Instant::now() + FIRST), "read again soon unless a read finds it gone");
        // The prompted read already found it gone (the runtime's usual order), or the
        // pod gone.
        d.note("p", finding(&["older"]));
        d.note("q", finding(&[]));
        assert_eq!(d.len(), 1, "only r's sandbox, not read yet, is still followed");
        assert_eq!((d.pod_of("s1"), d.pod_of("s2"), d.pod_of("s3")), (None, None, Some("r")));
        d.note("r", finding(&["s3"]));
        // Said again: the schedule is not started over.
        assert_eq!(d.said("r", "s3"), None);
        tokio::time::advance(FIRST).await;
        // A later read of the pod (any read) does not start the schedule over.
        assert_eq!(d.read("s3", Reread::Same), Some(Instant::now() + FIRST * 2));
        d.note("r", finding(&["s3"]));
        assert_eq!(d.pod_of("s3"), Some("r"));
        // Not read at all (a full relist took the event's turn and found the pod
        // unchanged): read again all the same.
        assert_eq!(d.said("t", "s4"), Some(Instant::now() + FIRST));
    }

    #[tokio::test(start_paused = true)]
    async fn failed_re_reads_are_retried_and_not_counted_and_given_up_after_ten_minutes() {
        let (mut d, mut s) = (DeletedSandboxes::default(), Scheduler::default());
        say(&mut d, &mut s, "p", "s");
        d.note("p", finding(&["s"]));
        let times = reread_times(&mut d, &mut s, |n| if n < 2 { Reread::Failed } else { Reread::Changed }).await;
        assert_eq!(times, [25, 50, 100], "two retries backing off, then gone");
        say(&mut d, &mut s, "p", "s");
        d.note("p", finding(&["s"]));
        let times = reread_times(&mut d, &mut s, |_| Reread::Failed).await;
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
        assert!(!d.0.by_id.contains_key("s0") && d.0.by_id.contains_key(&format!("s{MAX}")), "the oldest went");
    }
}

//! Exit statuses the runtime may still amend, read again until they settle:
//!
//! - **A lost one.** containerd marks a container whose task it lost across its own
//!   restart exited 255 "Unknown"; an event of the task's end it handles after that (a
//!   `TaskOOM` the shim publishes again once containerd is back) amends the reason —
//!   "OOMKilled" — without a CRI event. Read again 1, 3, 7, 15, 31 and 63 s after plegd
//!   first read the lost word; only a word lost in the last ten minutes (by the runtime's
//!   finish time) is followed, so a restart of plegd does not follow a node's old lost
//!   containers again.
//! - **A fresh death's.** containerd before 2.3 can report a death as `Error` first and
//!   `OOMKilled` a moment later (its exit and OOM events race), again without a CRI
//!   event; the kubelet, which reads the pod again at each sync, shows the correction.
//!   A death the runtime says finished at most [`FRESH`] before plegd read it is read
//!   again 1 and 3 s after that read.
//!
//! Each re-read is one `ContainerStatus` (a read that fails is retried and not counted);
//! the pod is read in full only when the word changed, and the relister publishes the
//! correction as a `CONTAINER_CHANGED` of that container. Owned by the relister;
//! bounded by count.

use std::collections::HashMap;
use std::time::{Duration, SystemTime};

use tokio::time::Instant;

use futures_util::future::BoxFuture;

use super::schedule::{Book, Pace, Reason, Reread, Rereads};
use crate::cri::{CriError, RuntimeService};
use crate::model::{ContainerState, ContainerStatus, PodStatus, nanos_to_system};
use crate::proto::runtime as cri;

/// containerd's exit code and reason for an exit status it lost (`unknownExitCode`,
/// `unknownExitReason` in its CRI plugin).
const LOST: (i32, &str) = (255, "Unknown");
/// The first re-read comes this long after the word was read; each next one twice as
/// long after the one before.
const FIRST: Duration = Duration::from_secs(1);
/// Re-reads of a lost word.
pub(super) const READS: u32 = 6;
/// A word lost longer ago than this (by the runtime's finish time) is not followed, and
/// one whose re-reads keep failing is given up this long after it was first read.
const RECENT: Duration = Duration::from_secs(600);
/// A death is fresh when the runtime says it finished at most this long before plegd
/// read it.
pub(super) const FRESH: Duration = Duration::from_secs(10);
/// At most this many containers are followed; past it the ones done, then the oldest,
/// go (down to three quarters, in one pass).
const MAX: usize = 1024;

/// A dead container's exit code and reason, as a read found them.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct Word {
    /// The exit code.
    pub exit_code: i32,
    /// The reason.
    pub reason: String,
}

impl Word {
    fn of(c: &ContainerStatus) -> Self {
        Self { exit_code: c.exit_code, reason: c.reason.clone() }
    }
}

/// Whether `c` says containerd lost its exit status.
pub(super) fn lost(c: &ContainerStatus) -> bool {
    c.state == ContainerState::Exited && (c.exit_code, c.reason.as_str()) == LOST
}

/// What a `ContainerStatus` answer says of a dead container first read with `word`: the
/// same word, another word or gone (its pod is to be read in full), or a failed read.
pub(super) fn reread_of(answer: Result<cri::ContainerStatus, CriError>, word: &Word) -> Reread {
    match answer {
        Ok(st) => {
            let state = ContainerState::from_cri(st.state);
            if state == ContainerState::Exited && st.exit_code == word.exit_code && st.reason == word.reason {
                Reread::Same
            } else {
                Reread::Changed
            }
        }
        Err(e) if e.is_not_found() => Reread::Changed,
        Err(_) => Reread::Failed,
    }
}

const LOST_PACE: Pace = Pace { first: FIRST, reads: READS, max_doubling: 5, recent: RECENT };
/// A fresh death: read again 1 and 3 s after; failed reads retried for a minute.
const FRESH_PACE: Pace = Pace { first: FIRST, reads: 2, max_doubling: 4, recent: Duration::from_secs(60) };

/// One followed container: how its re-reads go, and the word they compare with.
struct Followed {
    rereads: Rereads,
    word: Word,
    pace: &'static Pace,
}

/// The dead containers whose exit status the relister reads again.
#[derive(Default)]
pub(super) struct AmendedExits {
    by_id: HashMap<String, Followed>,
}

impl AmendedExits {
    /// Takes in a read of pod `uid` (`None`: the pod is gone): its dead containers read
    /// with a word lost lately, or dead freshly, are followed from now on, unless already
    /// — returned with the time of their first re-read; the ones no longer in the pod or
    /// no longer dead are let go.
    pub fn note(&mut self, uid: &str, status: Option<&PodStatus>) -> Vec<(String, Instant)> {
        let dead: Vec<&ContainerStatus> = status
            .map(|s| s.containers.iter().map(|c| &**c).filter(|c| c.state == ContainerState::Exited).collect())
            .unwrap_or_default();
        let mut first = Vec::new();
        if dead.is_empty() && self.by_id.is_empty() {
            return first;
        }
        self.by_id.retain(|id, f| f.rereads.uid != uid || dead.iter().any(|c| c.id == *id));
        let now = Instant::now();
        let wall = SystemTime::now();
        for c in dead {
            if self.by_id.contains_key(&c.id) {
                continue;
            }
            // No finish time, or one ahead of this clock: taken as lately.
            let ago = nanos_to_system(c.finished_at).and_then(|at| wall.duration_since(at).ok());
            let pace = if lost(c) {
                ago.is_none_or(|ago| ago <= RECENT).then_some(&LOST_PACE)
            } else {
                ago.is_none_or(|ago| ago <= FRESH).then_some(&FRESH_PACE)
            };
            if let Some(pace) = pace {
                self.by_id.insert(c.id.clone(), Followed { rereads: Rereads::new(uid, now), word: Word::of(c), pace });
                first.push((c.id.clone(), now + FIRST));
            }
        }
        if self.by_id.len() > MAX {
            // Done first, then by age.
            let mut order: Vec<(bool, Instant, String)> =
                self.by_id.iter().map(|(id, f)| (!f.rereads.done, f.rereads.since, id.clone())).collect();
            order.sort();
            for (_, _, id) in order.iter().take(self.by_id.len() - MAX * 3 / 4) {
                self.by_id.remove(id);
            }
            first.retain(|(id, _)| self.by_id.contains_key(id));
        }
        first
    }

    /// The pod of container `id` and the word it was read with, while a re-read of it is
    /// to come.
    pub fn pod_of(&self, id: &str) -> Option<&str> {
        self.by_id.get(id).filter(|f| !f.rereads.done).map(|f| f.rereads.uid.as_str())
    }

    /// The word container `id` was read with, while a re-read of it is to come.
    pub fn word_of(&self, id: &str) -> Option<&Word> {
        self.by_id.get(id).filter(|f| !f.rereads.done).map(|f| &f.word)
    }

    /// Records a re-read of container `id` and says when the next is due: the same word
    /// counts a read (none after the pace's last); a failed read is not counted and is
    /// tried again, 1, 2, 4 … s later (until the pace gives up); a changed word ends the
    /// re-reads (the read of its pod that follows publishes what it is now). A followed
    /// container stays in the book, done, while it is dead in its pod, so that a later
    /// read of the pod does not follow it again.
    pub fn read(&mut self, id: &str, found: Reread) -> Option<Instant> {
        let f = self.by_id.get_mut(id)?;
        if found == Reread::Changed {
            f.rereads.done = true;
            return None;
        }
        f.rereads.read(found, f.pace)
    }

    /// Containers followed.
    #[cfg(test)]
    fn len(&self) -> usize {
        self.by_id.len()
    }
}

impl Book for AmendedExits {
    fn reason(&self) -> Reason {
        Reason::UnsettledExit
    }

    fn pod_of(&self, id: &str) -> Option<&str> {
        AmendedExits::pod_of(self, id)
    }

    /// One `ContainerStatus`, against the word the container was read with.
    fn reread<R: RuntimeService>(&self, id: &str, runtime: R, timeout: Duration) -> Option<BoxFuture<'static, Reread>> {
        let (id, word) = (id.to_owned(), self.word_of(id)?.clone());
        Some(Box::pin(async move {
            match tokio::time::timeout(timeout, runtime.container_status(&id)).await {
                Ok(answer) => reread_of(answer, &word),
                Err(_) => Reread::Failed,
            }
        }))
    }

    fn read(&mut self, id: &str, found: Reread) -> Option<Instant> {
        AmendedExits::read(self, id, found)
    }
}

/// Plays a relister that re-reads what the schedule `s` says is due in `book` and gets
/// `answer` for the n-th read; the times of the reads from the start, in `unit`s.
#[cfg(test)]
pub(super) async fn reread_times(
    book: &mut impl Book,
    s: &mut super::schedule::Scheduler<String, ()>,
    unit: Duration,
    mut answer: impl FnMut(u32) -> Reread,
) -> Vec<u64> {
    let start = Instant::now();
    let mut reads = Vec::new();
    let mut n = 0;
    while let Some(at) = s.next_at() {
        tokio::time::sleep_until(at).await;
        for due in s.take_due(Instant::now()) {
            if book.pod_of(&due.key).is_none() {
                continue;
            }
            if let Some(next) = book.read(&due.key, answer(n)) {
                s.schedule(due.key, (), next);
            }
            reads.push(((Instant::now() - start).as_nanos() / unit.as_nanos()) as u64);
            n += 1;
        }
    }
    reads
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::model::system_to_nanos;
    use crate::pleg::schedule::Scheduler;

    fn pod(uid: &str, containers: &[(&str, ContainerState, i32, &str)]) -> PodStatus {
        let mut p = PodStatus::empty(uid, "default", uid);
        for (id, state, code, reason) in containers {
            p.containers.push(Arc::new(ContainerStatus {
                id: (*id).into(),
                name: (*id).into(),
                attempt: 0,
                state: *state,
                created_at: 1,
                started_at: 2,
                finished_at: system_to_nanos(SystemTime::now()),
                exit_code: *code,
                reason: (*reason).into(),
                message: String::new(),
                image: Default::default(),
                labels: Default::default(),
                annotations: Default::default(),
                ..Default::default()
            }));
        }
        p
    }

    fn lost_pod(uid: &str, id: &str) -> PodStatus {
        pod(uid, &[(id, ContainerState::Exited, 255, "Unknown")])
    }

    /// Schedules what a note says is to be read.
    fn noted(s: &mut Scheduler<String, ()>, first: Vec<(String, Instant)>) {
        for (id, at) in first {
            s.schedule(id, (), at);
        }
    }

    async fn reread_times(
        a: &mut AmendedExits,
        s: &mut Scheduler<String, ()>,
        answer: impl FnMut(u32) -> Reread,
    ) -> Vec<u64> {
        super::reread_times(a, s, Duration::from_secs(1), answer).await
    }

    #[tokio::test(start_paused = true)]
    async fn a_lost_exit_status_is_read_again_six_times_over_about_a_minute_then_let_be() {
        let (mut a, mut s) = (AmendedExits::default(), Scheduler::default());
        noted(&mut s, a.note("p", Some(&lost_pod("p", "c"))));
        assert_eq!(reread_times(&mut a, &mut s, |_| Reread::Same).await, [1, 3, 7, 15, 31, 63]);
        assert_eq!(a.pod_of("c"), None, "done");
        // The last re-read's pod read (or any later read) finds the same word: no new
        // schedule.
        assert!(a.note("p", Some(&lost_pod("p", "c"))).is_empty(), "a read of the same lost word starts nothing over");
        // A new lost container in the same pod is followed from its own first read.
        let both = [("c", ContainerState::Exited, 255, "Unknown"), ("d", ContainerState::Exited, 255, "Unknown")];
        assert_eq!(a.note("p", Some(&pod("p", &both))), [("d".to_owned(), Instant::now() + FIRST)]);
    }

    #[tokio::test(start_paused = true)]
    async fn a_fresh_death_is_read_again_twice_and_a_correction_ends_it_for_good() {
        let (mut a, mut s) = (AmendedExits::default(), Scheduler::default());
        let error = pod("p", &[("c", ContainerState::Exited, 137, "Error")]);
        noted(&mut s, a.note("p", Some(&error)));
        assert_eq!(a.word_of("c"), Some(&Word { exit_code: 137, reason: "Error".into() }));
        assert_eq!(reread_times(&mut a, &mut s, |_| Reread::Same).await, [1, 3], "1 and 3 s after its first read");
        assert_eq!(a.pod_of("c"), None, "done");
        // Corrected at the first re-read: no more re-reads, and the pod read that follows
        // (which finds OOMKilled) starts none.
        let (mut a, mut s) = (AmendedExits::default(), Scheduler::default());
        noted(&mut s, a.note("p", Some(&error)));
        assert_eq!(reread_times(&mut a, &mut s, |_| Reread::Changed).await, [1]);
        let oom = pod("p", &[("c", ContainerState::Exited, 137, "OOMKilled")]);
        assert!(a.note("p", Some(&oom)).is_empty(), "a corrected death is not followed again");
        assert_eq!(a.pod_of("c"), None);
        // Removed: let go.
        a.note("p", Some(&pod("p", &[])));
        assert_eq!(a.len(), 0);
    }

    #[tokio::test(start_paused = true)]
    async fn failed_re_reads_are_retried_and_not_counted_and_given_up_after_ten_minutes() {
        let (mut a, mut s) = (AmendedExits::default(), Scheduler::default());
        noted(&mut s, a.note("p", Some(&lost_pod("p", "c"))));
        // The runtime is down for the first three tries.
        let times = reread_times(&mut a, &mut s, |n| if n < 3 { Reread::Failed } else { Reread::Same }).await;
        assert_eq!(times, [1, 2, 4, 8, 10, 14, 22, 38, 70], "three retries backing off, then six counted reads");
        // Down for good: retried, backing off to every 32 s, then given up.
        let mut a = AmendedExits::default();
        noted(&mut s, a.note("p", Some(&lost_pod("p", "c"))));
        let times = reread_times(&mut a, &mut s, |_| Reread::Failed).await;
        assert_eq!(&times[..7], [1, 2, 4, 8, 16, 32, 64]);
        assert!(times.windows(2).all(|w| w[1] - w[0] <= 32), "{times:?}");
        assert!(*times.last().unwrap() <= RECENT.as_secs() + 32, "{times:?}");
        assert_eq!(a.pod_of("c"), None, "given up");
    }

    #[tokio::test(start_paused = true)]
    async fn only_a_lately_lost_word_is_followed_and_an_amendment_or_a_removal_ends_it() {
        let mut a = AmendedExits::default();
        let others =
            [("run", ContainerState::Running, 0, ""), ("unknown-state", ContainerState::Unknown, 255, "Unknown")];
        assert!(a.note("p", Some(&pod("p", &others))).is_empty());
        assert_eq!(a.len(), 0, "nothing dead, nothing followed");
        // Dead long ago, with a word that is not the lost one: settled.
        let mut settled = pod("s", &[("err", ContainerState::Exited, 1, "Error")]);
        Arc::make_mut(&mut settled.containers[0]).finished_at = system_to_nanos(SystemTime::now() - FRESH * 2);
        assert!(a.note("s", Some(&settled)).is_empty());
        assert_eq!(a.len(), 0, "an old death is not followed");
        // Lost an hour ago (a plegd restarted on a node with old lost containers).
        let mut old = lost_pod("o", "x");
        Arc::make_mut(&mut old.containers[0]).finished_at = system_to_nanos(SystemTime::now() - RECENT * 6);
        a.note("o", Some(&old));
        assert_eq!(a.len(), 0, "an old lost word is not followed");
        let first = Instant::now() + FIRST;
        assert_eq!(a.note("p", Some(&lost_pod("p", "c"))), [("c".to_owned(), first)]);
        assert_eq!(a.note("q", Some(&lost_pod("q", "d"))), [("d".to_owned(), first)]);
        assert_eq!(a.len(), 2);
        // Read again (by a re-read or any other read): the same word keeps its schedule.
        tokio::time::advance(Duration::from_millis(600)).await;
        assert!(a.note("p", Some(&lost_pod("p", "c"))).is_empty());
        assert_eq!((a.pod_of("c"), a.pod_of("d")), (Some("p"), Some("q")));
        // The re-read finds a changed word: no more re-reads (its pod is read in full).
        assert_eq!(a.read("c", Reread::Changed), None);
        assert_eq!(a.pod_of("c"), None);
        // The pod read notes the amendment and follows nothing anew; a pod gone lets its
        // containers go.
        assert!(a.note("p", Some(&pod("p", &[("c", ContainerState::Exited, 255, "OOMKilled")]))).is_empty());
        a.note("q", None);
        a.note("p", None);
        assert_eq!((a.len(), a.pod_of("d")), (0, None));
    }

    #[test]
    fn a_status_answer_is_the_same_word_a_changed_one_or_a_failure() {
        let st = |state: cri::ContainerState, code, reason: &str| {
            Ok(cri::ContainerStatus {
                state: state as i32,
                exit_code: code,
                reason: reason.into(),
                ..Default::default()
            })
        };
        use cri::ContainerState::*;
        let lost = Word { exit_code: 255, reason: "Unknown".into() };
        assert_eq!(reread_of(st(ContainerExited, 255, "Unknown"), &lost), Reread::Same);
        assert_eq!(reread_of(st(ContainerExited, 255, "OOMKilled"), &lost), Reread::Changed);
        assert_eq!(reread_of(st(ContainerRunning, 255, "Unknown"), &lost), Reread::Changed);
        // A fresh death first said Error, then OOMKilled (containerd before 2.3).
        let error = Word { exit_code: 137, reason: "Error".into() };
        assert_eq!(reread_of(st(ContainerExited, 137, "Error"), &error), Reread::Same);
        assert_eq!(reread_of(st(ContainerExited, 137, "OOMKilled"), &error), Reread::Changed);
        assert_eq!(reread_of(st(ContainerExited, 1, "Error"), &error), Reread::Changed, "another exit code");
        let err = |code| {
            Err(CriError::Call {
                method: "ContainerStatus",
                endpoint: Arc::from("unix:///x"),
                status: tonic::Status::new(code, "x"),
            })
        };
        assert_eq!(reread_of(err(tonic::Code::NotFound), &lost), Reread::Changed, "gone: its pod is read");
        assert_eq!(reread_of(err(tonic::Code::Unavailable), &lost), Reread::Failed);
        assert_eq!(reread_of(err(tonic::Code::DeadlineExceeded), &error), Reread::Failed);
    }

    #[tokio::test(start_paused = true)]
    async fn the_book_is_bounded_and_lets_the_done_then_the_oldest_go() {
        let (mut a, mut s) = (AmendedExits::default(), Scheduler::default());
        noted(&mut s, a.note("done", Some(&lost_pod("done", "done"))));
        reread_times(&mut a, &mut s, |_| Reread::Same).await;
        for i in 0..MAX {
            let uid = format!("p{i}");
            a.note(&uid, Some(&lost_pod(&uid, &format!("c{i}"))));
            tokio::time::advance(Duration::from_millis(1)).await;
        }
        assert_eq!(a.len(), MAX * 3 / 4, "cut down in one pass");
        assert!(!a.by_id.contains_key("done"), "the one done went first");
        assert!(!a.by_id.contains_key("c0") && a.by_id.contains_key(&format!("c{}", MAX - 1)), "then the oldest");
    }
}

//! Exit statuses the runtime may still amend. containerd marks a container whose task it
//! lost across its own restart exited 255 "Unknown"; an event of the task's end it
//! handles after that (a `TaskOOM` the shim publishes again once containerd is back)
//! amends the reason — "OOMKilled" — without a CRI event. The relister reads such a
//! container's status again 1, 3, 7, 15, 31 and 63 s after it first read the lost word
//! (a read that fails is retried and not counted), and reads its pod in full only when
//! the word changed, so an amendment reaches the cache and the watchers (a `POD_SYNC`
//! carrying the amended status) instead of staying unseen until the pod's next event.
//! (containerd 2.1 can first say 255 "Unknown" of a death it later says was
//! "OOMKilled".) Owned by the relister; bounded by count, and only
//! a word lost in the last ten minutes (by the runtime's finish time) is followed, so a
//! restart of plegd does not follow a node's old lost containers again.

use std::collections::HashMap;
use std::time::{Duration, SystemTime};

use tokio::time::Instant;

use super::schedule::{Pace, Reread, Rereads};
use crate::cri::CriError;
use crate::model::{ContainerState, ContainerStatus, PodStatus, nanos_to_system};
use crate::proto::runtime as cri;

/// containerd's exit code and reason for an exit status it lost (`unknownExitCode`,
/// `unknownExitReason` in its CRI plugin).
const LOST: (i32, &str) = (255, "Unknown");
/// The first re-read comes this long after the lost word was read; each next one
/// twice as long after the one before.
const FIRST: Duration = Duration::from_secs(1);
/// Re-reads per container.
pub(super) const READS: u32 = 6;
/// A word lost longer ago than this (by the runtime's finish time) is not followed, and
/// one whose re-reads keep failing is given up this long after it was first read.
const RECENT: Duration = Duration::from_secs(600);
/// At most this many containers are followed; past it the ones done, then the oldest,
/// go (down to three quarters, in one pass).
const MAX: usize = 1024;

/// Whether `c` says containerd lost its exit status.
pub(super) fn lost(c: &ContainerStatus) -> bool {
    c.state == ContainerState::Exited && (c.exit_code, c.reason.as_str()) == LOST
}

/// What a `ContainerStatus` answer says of a container whose exit status was lost: the
/// same lost word, another word or gone (its pod is to be read in full), or a failed read.
pub(super) fn reread_of(answer: Result<cri::ContainerStatus, CriError>) -> Reread {
    match answer {
        Ok(st) => {
            let state = ContainerState::from_cri(st.state);
            if state == ContainerState::Exited && (st.exit_code, st.reason.as_str()) == LOST {
                Reread::Same
            } else {
                Reread::Changed
            }
        }
        Err(e) if e.is_not_found() => Reread::Changed,
        Err(_) => Reread::Failed,
    }
}

const PACE: Pace = Pace { first: FIRST, reads: READS, max_doubling: 5, recent: RECENT };

/// The containers whose lost exit status the relister reads again.
#[derive(Default)]
pub(super) struct LostExits {
    by_id: HashMap<String, Rereads>,
}

impl LostExits {
    /// Takes in a read of pod `uid` (`None`: the pod is gone): its containers read with a
    /// word lost lately are followed from now on, unless already — returned with the time
    /// of their first re-read; the ones that are not lost any more (amended, or gone) are
    /// let go.
    pub fn note(&mut self, uid: &str, status: Option<&PodStatus>) -> Vec<(String, Instant)> {
        let lost_now: Vec<&ContainerStatus> =
            status.map(|s| s.containers.iter().map(|c| &**c).filter(|c| lost(c)).collect()).unwrap_or_default();
        let mut first = Vec::new();
        if lost_now.is_empty() && self.by_id.is_empty() {
            return first;
        }
        self.by_id.retain(|id, f| f.uid != uid || lost_now.iter().any(|c| c.id == *id));
        let now = Instant::now();
        let wall = SystemTime::now();
        for c in lost_now {
            // No finish time, or one ahead of this clock: taken as lately.
            let lately = nanos_to_system(c.finished_at)
                .and_then(|at| wall.duration_since(at).ok())
                .is_none_or(|ago| ago <= RECENT);
            if lately && !self.by_id.contains_key(&c.id) {
                self.by_id.insert(c.id.clone(), Rereads::new(uid, now));
                first.push((c.id.clone(), now + FIRST));
            }
        }
        if self.by_id.len() > MAX {
            // Done first, then by age.
            let mut order: Vec<(bool, Instant, String)> =
                self.by_id.iter().map(|(id, f)| (!f.done, f.since, id.clone())).collect();
            order.sort();
            for (_, _, id) in order.iter().take(self.by_id.len() - MAX * 3 / 4) {
                self.by_id.remove(id);
            }
            first.retain(|(id, _)| self.by_id.contains_key(id));
        }
        first
    }

    /// The pod of container `id`, while a re-read of it is to come.
    pub fn pod_of(&self, id: &str) -> Option<&str> {
        self.by_id.get(id).filter(|f| !f.done).map(|f| f.uid.as_str())
    }

    /// Records a re-read of container `id` and says when the next is due: the same word
    /// counts a read (none after [`READS`]); a failed read is not counted and is tried
    /// again, 1, 2, 4 … 32 s later (until [`RECENT`] after the first read); a changed
    /// word lets the container go (the read of its pod that follows notes what it is now).
    pub fn read(&mut self, id: &str, found: Reread) -> Option<Instant> {
        if found == Reread::Changed {
            self.by_id.remove(id);
            return None;
        }
        self.by_id.get_mut(id)?.read(found, &PACE)
    }

    /// Containers followed.
    #[cfg(test)]
    fn len(&self) -> usize {
        self.by_id.len()
    }
}

/// A book a test relister re-reads from a schedule (this one, and the sandboxes said
/// deleted).
#[cfg(test)]
pub(super) trait Book {
    /// The pod of `id`, while a re-read of it is to come.
    fn pod_of(&self, id: &str) -> Option<&str>;
    /// Records a re-read of `id`; when the next is due.
    fn read(&mut self, id: &str, found: Reread) -> Option<Instant>;
}

#[cfg(test)]
impl Book for LostExits {
    fn pod_of(&self, id: &str) -> Option<&str> {
        LostExits::pod_of(self, id)
    }
    fn read(&mut self, id: &str, found: Reread) -> Option<Instant> {
        LostExits::read(self, id, found)
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
        a: &mut LostExits,
        s: &mut Scheduler<String, ()>,
        answer: impl FnMut(u32) -> Reread,
    ) -> Vec<u64> {
        super::reread_times(a, s, Duration::from_secs(1), answer).await
    }

    #[tokio::test(start_paused = true)]
    async fn a_lost_exit_status_is_read_again_six_times_over_about_a_minute_then_let_be() {
        let (mut a, mut s) = (LostExits::default(), Scheduler::default());
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
    async fn failed_re_reads_are_retried_and_not_counted_and_given_up_after_ten_minutes() {
        let (mut a, mut s) = (LostExits::default(), Scheduler::default());
        noted(&mut s, a.note("p", Some(&lost_pod("p", "c"))));
        // The runtime is down for the first three tries.
        let times = reread_times(&mut a, &mut s, |n| if n < 3 { Reread::Failed } else { Reread::Same }).await;
        assert_eq!(times, [1, 2, 4, 8, 10, 14, 22, 38, 70], "three retries backing off, then six counted reads");
        // Down for good: retried, backing off to every 32 s, then given up.
        let mut a = LostExits::default();
        noted(&mut s, a.note("p", Some(&lost_pod("p", "c"))));
        let times = reread_times(&mut a, &mut s, |_| Reread::Failed).await;
        assert_eq!(&times[..7], [1, 2, 4, 8, 16, 32, 64]);
        assert!(times.windows(2).all(|w| w[1] - w[0] <= 32), "{times:?}");
        assert!(*times.last().unwrap() <= RECENT.as_secs() + 32, "{times:?}");
        assert_eq!(a.pod_of("c"), None, "given up");
    }

    #[tokio::test(start_paused = true)]
    async fn only_a_lately_lost_word_is_followed_and_an_amendment_or_a_removal_ends_it() {
        let mut a = LostExits::default();
        let others = [
            ("oom", ContainerState::Exited, 255, "OOMKilled"),
            ("err", ContainerState::Exited, 1, "Error"),
            ("run", ContainerState::Running, 0, ""),
            ("unknown-state", ContainerState::Unknown, 255, "Unknown"),
        ];
        assert!(a.note("p", Some(&pod("p", &others))).is_empty());
        assert_eq!(a.len(), 0, "nothing lost, nothing followed");
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
        // The re-read finds a changed word: let go (its pod is read in full).
        assert_eq!(a.read("c", Reread::Changed), None);
        assert_eq!(a.len(), 1);
        // The pod read notes the amendment; a pod gone lets its containers go.
        a.note("p", Some(&pod("p", &[("c", ContainerState::Exited, 255, "OOMKilled")])));
        a.note("q", None);
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
        assert_eq!(reread_of(st(ContainerExited, 255, "Unknown")), Reread::Same);
        assert_eq!(reread_of(st(ContainerExited, 255, "OOMKilled")), Reread::Changed);
        assert_eq!(reread_of(st(ContainerRunning, 255, "Unknown")), Reread::Changed);
        let err = |code| {
            Err(CriError::Call {
                method: "ContainerStatus",
                endpoint: Arc::from("unix:///x"),
                status: tonic::Status::new(code, "x"),
            })
        };
        assert_eq!(reread_of(err(tonic::Code::NotFound)), Reread::Changed, "gone: its pod is read");
        assert_eq!(reread_of(err(tonic::Code::Unavailable)), Reread::Failed);
        assert_eq!(reread_of(err(tonic::Code::DeadlineExceeded)), Reread::Failed);
    }

    #[tokio::test(start_paused = true)]
    async fn the_book_is_bounded_and_lets_the_done_then_the_oldest_go() {
        let (mut a, mut s) = (LostExits::default(), Scheduler::default());
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

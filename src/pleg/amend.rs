//! Exit statuses the runtime may still amend. containerd marks a container whose task it
//! lost across its own restart exited 255 "Unknown"; an event of the task's end it
//! handles after that (a `TaskOOM` the shim publishes again once containerd is back)
//! amends the reason — "OOMKilled" — without a CRI event. The relister reads such a
//! container's pod again 1, 2, 4, 8, 16 and 32 s after it first read the lost word
//! (about a minute in all), so an amendment reaches the cache and the watchers (a
//! `POD_SYNC` carrying the amended status) instead of staying unseen until the pod's next
//! event. Found by the hour-long soak on containerd 2.1: one death said 255 "Unknown"
//! while the runtime later said 255 "OOMKilled". Owned by the relister; bounded by count.

use std::collections::{BTreeSet, HashMap};
use std::time::Duration;

use tokio::time::Instant;

use crate::model::{ContainerState, ContainerStatus, PodStatus};

/// containerd's exit code and reason for an exit status it lost (`unknownExitCode`,
/// `unknownExitReason` in its CRI plugin).
const LOST: (i32, &str) = (255, "Unknown");
/// The first re-read comes this long after the lost word was read; each next one
/// twice as long after the one before.
const FIRST: Duration = Duration::from_secs(1);
/// Re-reads per container.
const READS: u32 = 6;
/// At most this many containers are followed; past it the oldest go.
const MAX: usize = 1024;

/// Whether `c` says containerd lost its exit status.
pub(super) fn lost(c: &ContainerStatus) -> bool {
    c.state == ContainerState::Exited && (c.exit_code, c.reason.as_str()) == LOST
}

struct Followed {
    uid: String,
    /// When it was first read lost (for dropping the oldest).
    since: Instant,
    /// The next re-read; `None` once all [`READS`] are done (the container stays in the
    /// book, so that a read of its pod does not start it over, until it is amended or
    /// gone).
    next: Option<Instant>,
    /// Re-reads done.
    reads: u32,
}

/// The containers whose lost exit status the relister reads again.
#[derive(Default)]
pub(super) struct Amendable {
    by_id: HashMap<String, Followed>,
}

impl Amendable {
    /// Takes in a read of pod `uid` (`None`: the pod is gone): its containers read lost
    /// are followed from now on, unless already; the ones that are not (amended, or
    /// gone) are not any more.
    pub fn note(&mut self, uid: &str, status: Option<&PodStatus>) {
        let now = Instant::now();
        let lost_now: BTreeSet<&str> = status
            .map(|s| s.containers.iter().filter(|c| lost(c)).map(|c| c.id.as_str()).collect())
            .unwrap_or_default();
        if lost_now.is_empty() && self.by_id.is_empty() {
            return;
        }
        self.by_id.retain(|id, f| f.uid != uid || lost_now.contains(id.as_str()));
        for id in lost_now {
            self.by_id.entry(id.to_owned()).or_insert_with(|| Followed {
                uid: uid.to_owned(),
                since: now,
                next: Some(now + FIRST),
                reads: 0,
            });
        }
        if self.by_id.len() > MAX {
            let mut by_age: Vec<(Instant, String)> = self.by_id.iter().map(|(id, f)| (f.since, id.clone())).collect();
            by_age.sort();
            for (_, id) in by_age.iter().take(self.by_id.len() - MAX) {
                self.by_id.remove(id);
            }
        }
    }

    /// When the next re-read is due, if any is.
    pub fn next_due(&self) -> Option<Instant> {
        self.by_id.values().filter_map(|f| f.next).min()
    }

    /// The pods due for a re-read now; their next one is scheduled, and containers read
    /// [`READS`] times are not read again.
    pub fn take_due(&mut self) -> BTreeSet<String> {
        let now = Instant::now();
        let mut due = BTreeSet::new();
        for f in self.by_id.values_mut() {
            if f.next.is_some_and(|at| at <= now) {
                due.insert(f.uid.clone());
                f.reads += 1;
                f.next = (f.reads < READS).then(|| now + FIRST * 2u32.pow(f.reads));
            }
        }
        due
    }

    /// Containers followed.
    #[cfg(test)]
    fn len(&self) -> usize {
        self.by_id.len()
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;

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
                finished_at: 3,
                exit_code: *code,
                reason: (*reason).into(),
                message: String::new(),
                image: String::new(),
                labels: Default::default(),
                annotations: Default::default(),
            }));
        }
        p
    }

    #[tokio::test(start_paused = true)]
    async fn a_lost_exit_status_is_read_again_six_times_over_about_a_minute_then_let_go() {
        let mut a = Amendable::default();
        a.note("p", Some(&pod("p", &[("c", ContainerState::Exited, 255, "Unknown")])));
        let start = Instant::now();
        let mut reads = Vec::new();
        while let Some(at) = a.next_due() {
            tokio::time::sleep_until(at).await;
            assert_eq!(a.take_due(), BTreeSet::from(["p".to_owned()]));
            reads.push((Instant::now() - start).as_secs());
        }
        assert_eq!(reads, [1, 3, 7, 15, 31, 63]);
        assert!(a.take_due().is_empty());
        // The last re-read (or any later read) finds the same word: no new schedule.
        a.note("p", Some(&pod("p", &[("c", ContainerState::Exited, 255, "Unknown")])));
        assert_eq!(a.next_due(), None, "a read of the same lost word starts nothing over");
        // A new lost container in the same pod is followed from its own first read.
        let both = [("c", ContainerState::Exited, 255, "Unknown"), ("d", ContainerState::Exited, 255, "Unknown")];
        a.note("p", Some(&pod("p", &both)));
        assert_eq!(a.next_due(), Some(Instant::now() + FIRST));
    }

    #[tokio::test(start_paused = true)]
    async fn only_the_lost_word_is_followed_and_an_amendment_or_a_removal_ends_it() {
        let mut a = Amendable::default();
        let others = [
            ("oom", ContainerState::Exited, 255, "OOMKilled"),
            ("err", ContainerState::Exited, 1, "Error"),
            ("run", ContainerState::Running, 0, ""),
            ("unknown-state", ContainerState::Unknown, 255, "Unknown"),
        ];
        a.note("p", Some(&pod("p", &others)));
        assert_eq!((a.len(), a.next_due()), (0, None), "nothing lost, nothing followed");
        a.note("p", Some(&pod("p", &[("c", ContainerState::Exited, 255, "Unknown")])));
        a.note("q", Some(&pod("q", &[("d", ContainerState::Exited, 255, "Unknown")])));
        assert_eq!(a.len(), 2);
        // Read again (by a re-read or any other read): the same word keeps its schedule.
        tokio::time::advance(Duration::from_millis(600)).await;
        a.note("p", Some(&pod("p", &[("c", ContainerState::Exited, 255, "Unknown")])));
        tokio::time::advance(Duration::from_millis(400)).await;
        assert_eq!(a.take_due(), BTreeSet::from(["p".to_owned(), "q".to_owned()]));
        // Amended: no longer followed. Gone with its pod: no longer followed.
        a.note("p", Some(&pod("p", &[("c", ContainerState::Exited, 255, "OOMKilled")])));
        a.note("q", None);
        assert_eq!((a.len(), a.next_due()), (0, None));
    }

    #[tokio::test(start_paused = true)]
    async fn the_book_is_bounded_and_lets_the_oldest_go() {
        let mut a = Amendable::default();
        for i in 0..MAX + 10 {
            let uid = format!("p{i}");
            a.note(&uid, Some(&pod(&uid, &[(&format!("c{i}"), ContainerState::Exited, 255, "Unknown")])));
            tokio::time::advance(Duration::from_millis(1)).await;
        }
        assert_eq!(a.len(), MAX);
        assert!(!a.by_id.contains_key("c0") && a.by_id.contains_key(&format!("c{}", MAX + 9)));
    }
}

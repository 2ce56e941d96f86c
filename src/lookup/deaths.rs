//! Each container's death counted once, by its final reason
//! (`plegd_container_terminations_total{namespace,reason}`). A runtime may correct a
//! death's reason a moment after it first reports it (containerd before 2.3 says
//! `Error`, then `OOMKilled`; the relister reads a fresh death again 1 and 3 s later and
//! publishes a correction as `CONTAINER_CHANGED`). So a death waits [`SETTLE`] before it
//! is counted, and a correction heard meanwhile changes the reason it is counted by.

use std::collections::VecDeque;
use std::time::Duration;

use tokio::time::Instant;

/// How long a death waits to be counted: past the relister's last re-read of a fresh
/// death (3 s after its first read), with room for a slow read.
pub const SETTLE: Duration = Duration::from_secs(6);
/// How long a death the runtime reported with a lost exit status (containerd's 255
/// `Unknown`) waits: past the relister's last re-read of it (63 s after its first read).
pub const SETTLE_LOST: Duration = Duration::from_secs(70);

/// Deaths waiting past this many are counted at once (oldest first), whatever their wait.
const MAX_PENDING: usize = 4096;

/// A death not counted yet.
#[derive(Debug)]
struct Pending {
    id: String,
    namespace: String,
    reason: String,
    due: Instant,
}

/// A death to count: its pod's namespace and its reason.
#[derive(Debug, PartialEq, Eq)]
pub struct Counted {
    /// The pod's namespace.
    pub namespace: String,
    /// The final reason.
    pub reason: String,
}

/// Deaths waiting to be counted, in the order they were heard.
#[derive(Debug, Default)]
pub struct Deaths {
    pending: VecDeque<Pending>,
}

impl Deaths {
    /// A death heard now; it is counted [`SETTLE`] later, or at once past
    /// [`MAX_PENDING`] waiting.
    pub fn died(&mut self, id: &str, namespace: &str, reason: &str, now: Instant) -> Vec<Counted> {
        let wait = if reason == "Unknown" { SETTLE_LOST } else { SETTLE };
        self.pending.push_back(Pending {
            id: id.to_owned(),
            namespace: namespace.to_owned(),
            reason: reason.to_owned(),
            due: now + wait,
        });
        let mut out = Vec::new();
        while self.pending.len() > MAX_PENDING {
            out.push(Self::count(self.pending.pop_front().expect("non-empty")));
        }
        out
    }

    /// A dead container's reason, corrected by the runtime: the reason it will be counted
    /// by, if it is not counted yet.
    pub fn reworded(&mut self, id: &str, reason: &str) {
        if let Some(p) = self.pending.iter_mut().rev().find(|p| p.id == id) {
            reason.clone_into(&mut p.reason);
        }
    }

    /// The deaths whose wait is over at `now`, in the order they were heard.
    pub fn due(&mut self, now: Instant) -> Vec<Counted> {
        let mut out = Vec::new();
        self.pending.retain(|p| {
            if p.due > now {
                return true;
            }
            out.push(Counted { namespace: p.namespace.clone(), reason: p.reason.clone() });
            false
        });
        out
    }

    /// When the next death is due, if one waits.
    pub fn next_due(&self) -> Option<Instant> {
        self.pending.iter().map(|p| p.due).min()
    }

    fn count(p: Pending) -> Counted {
        Counted { namespace: p.namespace, reason: p.reason }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn counted(namespace: &str, reason: &str) -> Counted {
        Counted { namespace: namespace.into(), reason: reason.into() }
    }

    #[tokio::test(start_paused = true)]
    async fn a_death_is_counted_after_it_settles_by_the_reason_it_ended_with() {
        let mut d = Deaths::default();
        let t0 = Instant::now();
        assert!(d.died("a", "web", "Error", t0).is_empty());
        assert!(d.died("b", "web", "Completed", t0 + Duration::from_secs(1)).is_empty());
        assert!(d.due(t0 + SETTLE - Duration::from_millis(1)).is_empty(), "nothing counted before it settles");
        d.reworded("a", "OOMKilled");
        assert_eq!(d.due(t0 + SETTLE), [counted("web", "OOMKilled")], "the corrected reason, once");
        d.reworded("a", "Error");
        assert_eq!(d.next_due(), Some(t0 + Duration::from_secs(1) + SETTLE));
        assert_eq!(d.due(t0 + SETTLE * 2), [counted("web", "Completed")], "a counted death is not counted again");
        assert!(d.due(t0 + SETTLE * 9).is_empty());
        // A lost exit status waits past its minute of re-reads.
        d.died("lost", "web", "Unknown", t0);
        assert!(d.due(t0 + SETTLE * 2).is_empty(), "not counted while it may still be amended");
        d.reworded("lost", "OOMKilled");
        assert_eq!(d.due(t0 + SETTLE_LOST), [counted("web", "OOMKilled")]);
    }

    #[tokio::test(start_paused = true)]
    async fn deaths_past_the_bound_are_counted_at_once_oldest_first() {
        let mut d = Deaths::default();
        let now = Instant::now();
        for i in 0..MAX_PENDING {
            assert!(d.died(&format!("c{i}"), "ns", "Error", now).is_empty());
        }
        assert_eq!(d.died("last", "ns", "OOMKilled", now), [counted("ns", "Error")]);
        assert_eq!(d.due(now + SETTLE).len(), MAX_PENDING);
    }
}

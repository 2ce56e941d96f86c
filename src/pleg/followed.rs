//! What the runtime said of one sandbox or container ahead of what its reads show,
//! followed until a read shows it: each entry is read again on its book's [`Pace`]
//! unless a read of its pod settles it first. The one home of that bookkeeping for the
//! books that need it ([`super::deleted_sandboxes`], [`super::early_words`]).
//! Bounded by count.

use std::collections::HashMap;

use tokio::time::Instant;

use super::schedule::{Pace, Reread, Rereads};

/// At most this many entries are followed per book; past it the oldest go (down to
/// three quarters, in one pass).
pub(super) const MAX: usize = 1024;

/// Entries by id, each with its pod and its re-reads so far.
pub(super) struct Followed {
    pub(super) by_id: HashMap<String, Rereads>,
    pace: &'static Pace,
}

impl Followed {
    /// A book read again at `pace`.
    pub fn new(pace: &'static Pace) -> Self {
        Self { by_id: HashMap::new(), pace }
    }

    /// The runtime said something of entry `id` of pod `uid`: it is read again
    /// `pace.first` from now (the time returned, for an entry not followed yet) unless
    /// a read of the pod settles it before. Scheduled on the word, not by that read: a
    /// full relist that takes the word's turn reads the pod only if it changed.
    pub fn said(&mut self, uid: &str, id: &str) -> Option<Instant> {
        let now = Instant::now();
        let mut first = None;
        self.by_id.entry(id.to_owned()).or_insert_with(|| {
            first = Some(now + self.pace.first);
            Rereads::new(uid, now)
        });
        if self.by_id.len() > MAX {
            let recent = self.pace.recent;
            self.by_id.retain(|_, s| now.duration_since(s.since) < recent);
        }
        if self.by_id.len() > MAX {
            let mut order: Vec<(Instant, String)> = self.by_id.iter().map(|(id, s)| (s.since, id.clone())).collect();
            order.sort();
            for (_, id) in order.iter().take(self.by_id.len() - MAX * 3 / 4) {
                self.by_id.remove(id);
            }
        }
        first.filter(|_| self.by_id.contains_key(id))
    }

    /// Takes in a read of pod `uid`: an entry of it that the read does not still find
    /// as it was (`still`) is let go; one it does keeps its re-reads.
    pub fn note(&mut self, uid: &str, still: impl Fn(&str) -> bool) {
        if self.by_id.is_empty() {
            return;
        }
        self.by_id.retain(|id, s| s.uid != uid || still(id));
    }

    /// Stops following entry `id`.
    pub fn forget(&mut self, id: &str) {
        self.by_id.remove(id);
    }

    /// The pods whose entries are followed.
    pub fn uids(&self) -> impl Iterator<Item = &str> {
        self.by_id.values().map(|s| s.uid.as_str())
    }

    /// The pod of entry `id`, while it is followed.
    pub fn pod_of(&self, id: &str) -> Option<&str> {
        self.by_id.get(id).map(|s| s.uid.as_str())
    }

    /// Records a re-read of entry `id` and says when the next is due: the same counts
    /// a read (after `pace.reads` the entry is let go: full relists cover it); a failed
    /// read is not counted and is tried again (until `pace.recent` after the word);
    /// changed lets it go (the read of its pod that follows tells the change).
    pub fn read(&mut self, id: &str, found: Reread) -> Option<Instant> {
        let s = self.by_id.get_mut(id)?;
        let next = s.read(found, self.pace);
        if next.is_none() {
            self.by_id.remove(id);
        }
        next
    }

    /// Entries followed.
    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.by_id.len()
    }
}

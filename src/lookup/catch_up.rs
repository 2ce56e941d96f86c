//! At start, the journal's newest events that the tombstone file may not have: the file
//! is written off the publish path, so a plegd killed right after publishing a removal
//! can leave the journal holding it and the file not. Those events are learned again —
//! as an earlier plegd saw them, so no death is counted twice and no PID claimed.

use std::time::{Duration, SystemTime};

use super::ContainerLookup;
use crate::model::event::PodLifecycleEvent;

/// How far before the newest tombstone in the file the journal is read again: the file
/// follows the journal in revision order, and times are wall-clock.
const OVERLAP: Duration = Duration::from_secs(1);

impl ContainerLookup {
    /// From when the journal must be read again: just before the newest removal the
    /// tombstone file holds, and never before the retention (an older removal would be
    /// expired at once). At most the journal's in-memory tail is read, once, at start.
    pub fn catch_up_since(&self) -> SystemTime {
        let retained = SystemTime::now().checked_sub(self.cfg.retention).unwrap_or(SystemTime::UNIX_EPOCH);
        let ix = self.lock();
        let newest = ix.tombs.values().map(|t| t.removed_at).max().and_then(|t| t.checked_sub(OVERLAP));
        newest.map_or(retained, |t| t.max(retained))
    }

    /// Learns the journal's events since [`Self::catch_up_since`], oldest first, before
    /// [`Self::seed`] learns the pods as the journal holds them now.
    pub fn catch_up<'a>(&self, events: impl IntoIterator<Item = &'a PodLifecycleEvent>) {
        self.take(events, None, false);
    }
}

//! The delays between attempts at one batch, after an [`Outcome`] that asks to retry
//! (see [`super::otlp::classify`]): the crate's jittered [`Backoff`] from the first delay
//! to the longest, and a collector's `RetryInfo` honoured within reason (never shorter
//! than the first delay, never longer than the ceiling), so a collector cannot stop the
//! export for longer than the ceiling at a time.

use std::time::Duration;

#[cfg(doc)]
use super::otlp::Outcome;
use crate::backoff::Backoff;

/// The delays between attempts at one batch.
#[derive(Clone, Copy, Debug)]
pub struct RetryPolicy {
    /// The first delay.
    pub initial: Duration,
    /// The longest delay of the policy's own.
    pub max: Duration,
    /// The longest delay a collector's `RetryInfo` may ask for.
    pub after_max: Duration,
}

/// One batch's attempts so far, under a [`RetryPolicy`].
#[derive(Debug)]
pub struct Retries {
    policy: RetryPolicy,
    /// The policy's own delays: doubling, capped and jittered (± 25 %), so that the
    /// exporters of a DaemonSet do not come back to a restarted collector in step.
    backoff: Backoff,
    /// Attempts made.
    attempts: u32,
}

impl RetryPolicy {
    /// A batch's first attempt is next.
    pub fn start(self) -> Retries {
        Retries { policy: self, backoff: Backoff::new(self.initial, self.max), attempts: 0 }
    }
}

impl Retries {
    /// Counts an attempt (its end is an [`Outcome`], the one enum of how it went).
    pub fn attempted(&mut self) {
        self.attempts += 1;
    }

    /// The delay before the next attempt after one that asked to be retried, `after`
    /// if the collector said (its `RetryInfo`, honoured within the policy's bounds).
    pub fn delay(&mut self, after: Option<Duration>) -> Duration {
        let own = self.backoff.next_delay();
        let p = self.policy;
        after.map_or(own, |a| a.min(p.after_max).max(p.initial))
    }

    /// Attempts made.
    pub fn attempts(&self) -> u32 {
        self.attempts
    }

    /// Whether an attempt was made and failed (the next one is a retry).
    pub fn retrying(&self) -> bool {
        self.attempts > 0
    }
}

//! What the exporter does with a batch after each attempt, decided from the answer's
//! [`Outcome`] (see [`super::otlp::classify`]): done, send it again after a delay, or
//! give it up. It owns the delays: doubling from the first to the longest, and a
//! collector's `RetryInfo` honoured within reason (never shorter than the first delay,
//! never longer than the ceiling), so a collector cannot stop the export for longer
//! than the ceiling at a time.

use std::time::Duration;

use super::otlp::Outcome;

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

/// What to do with a batch after an attempt.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RetryAction {
    /// The collector took it; `rejected` of its records it refused (a partial
    /// success, which OTLP says not to retry), saying `message`.
    Successful {
        /// Records refused.
        rejected: u64,
        /// The collector's words about them.
        message: String,
    },
    /// Send it again after `delay`.
    Retry {
        /// How long to wait first.
        delay: Duration,
        /// Which attempt failed (the first is 1).
        attempt: u32,
        /// What failed.
        error: String,
    },
    /// Give it up for good: it is dropped and counted.
    DontRetry {
        /// What failed.
        error: String,
    },
}

/// One batch's attempts so far, under a [`RetryPolicy`].
#[derive(Debug)]
pub struct Retries {
    policy: RetryPolicy,
    /// The next delay of the policy's own.
    backoff: Duration,
    /// Attempts made.
    attempts: u32,
}

impl RetryPolicy {
    /// A batch's first attempt is next.
    pub fn start(self) -> Retries {
        Retries { policy: self, backoff: self.initial, attempts: 0 }
    }
}

impl Retries {
    /// What to do after an attempt that came to `outcome`.
    pub fn action(&mut self, outcome: Outcome) -> RetryAction {
        self.attempts += 1;
        match outcome {
            Outcome::Accepted => RetryAction::Successful { rejected: 0, message: String::new() },
            Outcome::Partial { rejected, message } => {
                RetryAction::Successful { rejected: rejected.max(0) as u64, message }
            }
            Outcome::Dropped { error } => RetryAction::DontRetry { error },
            Outcome::Retry { after, error } => {
                let p = self.policy;
                let delay = after.map_or(self.backoff, |a| a.min(p.after_max).max(p.initial));
                self.backoff = (self.backoff * 2).min(p.max);
                RetryAction::Retry { delay, attempt: self.attempts, error }
            }
        }
    }

    /// Whether an attempt was made and failed (the next one is a retry).
    pub fn retrying(&self) -> bool {
        self.attempts > 0
    }
}

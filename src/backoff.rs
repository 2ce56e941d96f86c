//! Pacing: capped, jittered exponential backoff that resets after a healthy period, and
//! a token bucket for work that others may ask for faster than it should run.

use std::time::Duration;

use tokio::time::Instant;

/// Exponential backoff: `initial · 2ⁿ`, capped at `max`, with ± `jitter`/2 spread so
/// that many clients do not retry in step, and reset after `reset_after` of health.
#[derive(Clone, Debug)]
pub struct Backoff {
    initial: Duration,
    max: Duration,
    jitter: f64,
    reset_after: Duration,
    attempt: u32,
    healthy_since: Option<Instant>,
}

impl Backoff {
    /// A backoff from `initial` up to `max`; jitter 0.5; reset after `max` of health.
    pub fn new(initial: Duration, max: Duration) -> Self {
        Self { initial, max, jitter: 0.5, reset_after: max, attempt: 0, healthy_since: None }
    }

    /// Sets the fraction of random spread (0: none, 1: from 0.5× to 1.5×).
    pub fn with_jitter(mut self, jitter: f64) -> Self {
        self.jitter = jitter.clamp(0.0, 1.0);
        self
    }

    /// Sets how long things must go well before the next failure starts from `initial`.
    pub fn with_reset_after(mut self, d: Duration) -> Self {
        self.reset_after = d;
        self
    }

    /// The delay before the next attempt, after a failure.
    pub fn next_delay(&mut self) -> Duration {
        if let Some(since) = self.healthy_since.take()
            && since.elapsed() >= self.reset_after
        {
            self.attempt = 0;
        }
        let base = self.initial.saturating_mul(1u32 << self.attempt.min(20)).min(self.max);
        self.attempt = self.attempt.saturating_add(1);
        let spread = 1.0 - self.jitter / 2.0 + self.jitter * fastrand::f64();
        base.mul_f64(spread).min(self.max)
    }

    /// Records that the guarded thing works now; the counter resets once it has
    /// stayed healthy for `reset_after`.
    pub fn mark_healthy(&mut self) {
        if self.healthy_since.is_none() {
            self.healthy_since = Some(Instant::now());
        }
    }

    /// Forgets all failures at once.
    pub fn reset(&mut self) {
        self.attempt = 0;
        self.healthy_since = None;
    }
}

/// One warning that may repeat many times a second (every write to a full disk): said
/// at once, then at most once a minute, each time with how many went unsaid since.
pub struct Repeats {
    bucket: TokenBucket,
    unsaid: u64,
}

impl Default for Repeats {
    fn default() -> Self {
        Self { bucket: TokenBucket::new(1.0 / 60.0, 1), unsaid: 0 }
    }
}

impl Repeats {
    /// `Some(n)`: say it now, with `n` unsaid since the last time; `None`: keep quiet.
    pub fn say(&mut self) -> Option<u64> {
        if self.bucket.try_take() {
            Some(std::mem::take(&mut self.unsaid))
        } else {
            self.unsaid += 1;
            None
        }
    }
}

/// A token bucket: `rate` tokens a second, at most `burst` saved up.
#[derive(Clone, Debug)]
pub struct TokenBucket {
    rate: f64,
    burst: f64,
    tokens: f64,
    last: Instant,
}

impl TokenBucket {
    /// A full bucket.
    pub fn new(rate: f64, burst: u32) -> Self {
        Self { rate, burst: f64::from(burst), tokens: f64::from(burst), last: Instant::now() }
    }

    fn refill(&mut self) {
        let now = Instant::now();
        self.tokens = (self.tokens + now.duration_since(self.last).as_secs_f64() * self.rate).min(self.burst);
        self.last = now;
    }

    /// Takes a token if there is one.
    pub fn try_take(&mut self) -> bool {
        self.refill();
        if self.tokens >= 1.0 {
            self.tokens -= 1.0;
            true
        } else {
            false
        }
    }

    /// When the next token will be there.
    pub fn next_at(&mut self) -> Instant {
        self.refill();
        let missing = (1.0 - self.tokens).max(0.0);
        self.last + Duration::from_secs_f64(missing / self.rate)
    }
}

#[cfg(test)]
mod repeats_tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn a_repeated_warning_is_said_once_a_minute_with_how_many_went_unsaid() {
        let mut r = Repeats::default();
        assert_eq!(r.say(), Some(0), "the first at once");
        let unsaid = (0..233).filter(|_| r.say().is_none()).count();
        assert_eq!(unsaid, 233, "a minute's worth at 4 a second stays quiet");
        tokio::time::advance(std::time::Duration::from_secs(60)).await;
        assert_eq!(r.say(), Some(233), "then once, with the count");
        assert_eq!(r.say(), None);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn delays_double_up_to_the_cap_without_jitter() {
        let mut b = Backoff::new(Duration::from_millis(100), Duration::from_secs(1)).with_jitter(0.0);
        let got: Vec<_> = (0..6).map(|_| b.next_delay().as_millis()).collect();
        assert_eq!(got, vec![100, 200, 400, 800, 1000, 1000]);
    }

    #[test]
    fn jitter_stays_within_its_band() {
        let mut b = Backoff::new(Duration::from_millis(100), Duration::from_secs(10)).with_jitter(0.5);
        for _ in 0..100 {
            b.reset();
            let d = b.next_delay();
            assert!(d >= Duration::from_millis(75) && d <= Duration::from_millis(125), "{d:?}");
        }
    }

    #[tokio::test(start_paused = true)]
    async fn resets_only_after_a_healthy_period() {
        let mut b = Backoff::new(Duration::from_millis(100), Duration::from_secs(10))
            .with_jitter(0.0)
            .with_reset_after(Duration::from_secs(60));
        b.next_delay();
        b.next_delay();
        b.mark_healthy();
        tokio::time::advance(Duration::from_secs(5)).await;
        assert_eq!(b.next_delay(), Duration::from_millis(400), "too short a healthy spell keeps the count");
        b.mark_healthy();
        tokio::time::advance(Duration::from_secs(61)).await;
        assert_eq!(b.next_delay(), Duration::from_millis(100));
    }
}

#[cfg(test)]
mod bucket_tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn a_bucket_gives_its_burst_then_its_rate() {
        let mut b = TokenBucket::new(10.0, 5);
        let taken = (0..100).filter(|_| b.try_take()).count();
        assert_eq!(taken, 5, "the burst");
        tokio::time::sleep(Duration::from_secs(2)).await;
        let taken = (0..100).filter(|_| b.try_take()).count();
        assert_eq!(taken, 5, "two seconds at 10/s, capped at the burst");
        let next = b.next_at();
        assert!(next > Instant::now() && next <= Instant::now() + Duration::from_millis(100));
    }
}

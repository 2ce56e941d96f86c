//! PLEG health the kubelet's way: how long since the last relist whose listing
//! succeeded, against a threshold.

use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use tokio::time::Instant;

/// Shared PLEG health: written by the relister, read by `/healthz` and `/readyz`.
#[derive(Clone)]
pub struct PlegHealth {
    inner: Arc<Mutex<Option<(Instant, SystemTime)>>>,
    threshold: Duration,
    extra: Arc<Mutex<Duration>>,
}

impl PlegHealth {
    /// Health with the given threshold (the kubelet's is 3 minutes).
    pub fn new(threshold: Duration) -> Self {
        Self { inner: Arc::new(Mutex::new(None)), threshold, extra: Arc::new(Mutex::new(Duration::ZERO)) }
    }

    /// The threshold in force: the configured one, plus the safety-net relist period
    /// while the event stream is up (full relists are that far apart then).
    pub fn threshold(&self) -> Duration {
        self.threshold + *self.extra.lock().expect("health lock")
    }

    /// Sets the allowance added to the threshold while the event stream is up.
    pub fn set_evented_allowance(&self, extra: Duration) {
        *self.extra.lock().expect("health lock") = extra;
    }

    /// Records the start of a relist whose listing succeeded.
    pub fn record_relist(&self, start: Instant, wall: SystemTime) {
        *self.inner.lock().expect("health lock") = Some((start, wall));
    }

    /// Whether a relist has ever succeeded.
    pub fn first_relist_done(&self) -> bool {
        self.inner.lock().expect("health lock").is_some()
    }

    /// Wall time of the last successful relist's start.
    pub fn last_seen(&self) -> Option<SystemTime> {
        self.inner.lock().expect("health lock").map(|(_, w)| w)
    }

    /// `Ok` when healthy; otherwise the kubelet's message, e.g. `pleg was last seen
    /// active 3m1s ago; threshold is 3m0s`.
    pub fn check(&self) -> Result<(), String> {
        let Some((start, _)) = *self.inner.lock().expect("health lock") else {
            return Err("pleg has yet to be successful".into());
        };
        let elapsed = start.elapsed();
        let threshold = self.threshold();
        if elapsed > threshold {
            return Err(format!(
                "pleg was last seen active {} ago; threshold is {}",
                go_duration(elapsed),
                go_duration(threshold)
            ));
        }
        Ok(())
    }
}

/// Formats a duration the way Go's `time.Duration.String` does (`3m0s`, `1.5s`,
/// `250ms`, `1h2m3.5s`), so messages read like the kubelet's.
pub fn go_duration(d: Duration) -> String {
    let ns = d.as_nanos();
    if ns == 0 {
        return "0s".into();
    }
    let frac = |v: u128, unit: u128| -> String {
        let whole = v / unit;
        let rest = v % unit;
        if rest == 0 {
            return whole.to_string();
        }
        let width = unit.ilog10() as usize;
        let digits = format!("{rest:0width$}");
        format!("{whole}.{}", digits.trim_end_matches('0'))
    };
    if ns < 1_000 {
        return format!("{ns}ns");
    }
    if ns < 1_000_000 {
        return format!("{}µs", frac(ns, 1_000));
    }
    if ns < 1_000_000_000 {
        return format!("{}ms", frac(ns, 1_000_000));
    }
    let secs_total = ns / 1_000_000_000;
    let h = secs_total / 3600;
    let m = (secs_total % 3600) / 60;
    let s_ns = ns - (h * 3600 + m * 60) * 1_000_000_000;
    let s = frac(s_ns, 1_000_000_000);
    if h > 0 {
        format!("{h}h{m}m{s}s")
    } else if m > 0 {
        format!("{m}m{s}s")
    } else {
        format!("{s}s")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats_durations_like_go() {
        let cases = [
            (Duration::from_secs(180), "3m0s"),
            (Duration::from_secs(181), "3m1s"),
            (Duration::from_millis(180_300), "3m0.3s"),
            (Duration::from_millis(1500), "1.5s"),
            (Duration::from_millis(250), "250ms"),
            (Duration::from_micros(1500), "1.5ms"),
            (Duration::from_nanos(42), "42ns"),
            (Duration::from_millis(3_723_500), "1h2m3.5s"),
            (Duration::from_secs(3600), "1h0m0s"),
            (Duration::ZERO, "0s"),
        ];
        for (d, want) in cases {
            assert_eq!(go_duration(d), want);
        }
    }

    #[tokio::test(start_paused = true)]
    async fn health_reports_the_kubelet_message_past_the_threshold() {
        let h = PlegHealth::new(Duration::from_secs(180));
        assert_eq!(h.check().unwrap_err(), "pleg has yet to be successful");
        h.record_relist(Instant::now(), SystemTime::now());
        assert!(h.check().is_ok());
        tokio::time::advance(Duration::from_secs(181)).await;
        assert_eq!(h.check().unwrap_err(), "pleg was last seen active 3m1s ago; threshold is 3m0s");
    }
}

/// Liveness of the relist loop: it ticks on every turn, failed relists included.
#[derive(Clone)]
pub struct Liveness {
    last: Arc<Mutex<Instant>>,
    window: Duration,
}

impl Liveness {
    /// A liveness tracker that fails after `window` without a tick.
    pub fn new(window: Duration) -> Self {
        Self { last: Arc::new(Mutex::new(Instant::now())), window }
    }

    /// Records a turn of the loop.
    pub fn tick(&self) {
        *self.last.lock().expect("liveness lock") = Instant::now();
    }

    /// `Ok` while the loop turned within the window.
    pub fn check(&self) -> Result<(), String> {
        let since = self.last.lock().expect("liveness lock").elapsed();
        if since > self.window {
            return Err(format!(
                "relist loop has not run for {}; limit is {}",
                go_duration(since),
                go_duration(self.window)
            ));
        }
        Ok(())
    }
}

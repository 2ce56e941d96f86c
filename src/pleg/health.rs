//! PLEG health the kubelet's way (how long since the last relist whose results are
//! in the cache, against a threshold), and the liveness of every long-running loop.

use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use tokio::time::Instant;

/// Shared PLEG health: written by the relister, read by `/healthz` and `/readyz`.
#[derive(Clone)]
pub struct PlegHealth {
    inner: Arc<Mutex<Option<(Instant, SystemTime)>>>,
    threshold: Duration,
    extra: Arc<Mutex<Duration>>,
    last_error: Arc<Mutex<Option<String>>>,
}

impl PlegHealth {
    /// Health with the given threshold (the kubelet's is 3 minutes).
    pub fn new(threshold: Duration) -> Self {
        Self {
            inner: Arc::new(Mutex::new(None)),
            threshold,
            extra: Arc::new(Mutex::new(Duration::ZERO)),
            last_error: Arc::new(Mutex::new(None)),
        }
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

    /// Records a relist that started at `start` and whose results are now in the cache
    /// (the kubelet records the listing; plegd waits until readers can see it).
    pub fn record_relist(&self, start: Instant, wall: SystemTime) {
        *self.inner.lock().expect("health lock") = Some((start, wall));
        *self.last_error.lock().expect("health lock") = None;
    }

    /// Records a relist that failed (its listing could not be read or decoded): health
    /// does not move, and `/healthz` shows why.
    pub fn record_failure(&self, error: String) {
        *self.last_error.lock().expect("health lock") = Some(error);
    }

    /// Why the latest relist failed, if it did.
    pub fn last_error(&self) -> Option<String> {
        self.last_error.lock().expect("health lock").clone()
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

/// How often a quiet loop shows it is alive. Every long-running loop wakes at least
/// this often, busy or not, so `/livez` tells a wedged loop from a quiet node.
pub const BEAT_EVERY: Duration = Duration::from_secs(5);

/// The limit for loops whose every turn is quick (no runtime call inside): a few
/// missed beats, never a quiet period.
pub const QUICK_LOOP_LIMIT: Duration = Duration::from_secs(30);

/// Liveness of plegd's long-running loops. Each loop registers a [`Beat`] with its own
/// limit and beats on every turn and at least every [`BEAT_EVERY`]; `/livez` fails when
/// any of them has not beaten within its limit. Cheap to clone.
#[derive(Clone, Default)]
pub struct Liveness {
    beats: Arc<Mutex<Vec<BeatState>>>,
}

struct BeatState {
    name: &'static str,
    last: Instant,
    limit: Duration,
}

/// One loop's heartbeat. Cheap to clone.
#[derive(Clone)]
pub struct Beat {
    beats: Arc<Mutex<Vec<BeatState>>>,
    index: usize,
}

impl Liveness {
    /// No loop registered yet: alive.
    pub fn new() -> Self {
        Self::default()
    }

    /// Registers a loop that must beat at least every `limit`; it counts as just beaten.
    pub fn register(&self, name: &'static str, limit: Duration) -> Beat {
        let mut beats = self.beats.lock().expect("liveness lock");
        beats.push(BeatState { name, last: Instant::now(), limit });
        Beat { beats: self.beats.clone(), index: beats.len() - 1 }
    }

    /// `Ok` while every loop beat within its limit; otherwise names each one that did
    /// not (`relist loop has not turned for 1m4s; limit is 51s`).
    pub fn check(&self) -> Result<(), String> {
        let beats = self.beats.lock().expect("liveness lock");
        let stalled: Vec<String> = beats
            .iter()
            .filter(|b| b.last.elapsed() > b.limit)
            .map(|b| {
                format!(
                    "{} loop has not turned for {}; limit is {}",
                    b.name,
                    go_duration(b.last.elapsed()),
                    go_duration(b.limit)
                )
            })
            .collect();
        if stalled.is_empty() { Ok(()) } else { Err(stalled.join("; ")) }
    }
}

impl Beat {
    /// Records a turn of the loop.
    pub fn beat(&self) {
        self.beats.lock().expect("liveness lock")[self.index].last = Instant::now();
    }

    /// A beat registered nowhere (for components run alone, as in tests).
    pub fn detached(name: &'static str) -> Self {
        Liveness::new().register(name, Duration::MAX)
    }
}

/// A timer that fires every [`BEAT_EVERY`], for a loop's `select!`.
pub fn beat_timer() -> tokio::time::Interval {
    let mut t = tokio::time::interval(BEAT_EVERY);
    t.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    t
}

#[cfg(test)]
mod liveness_tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn a_loop_that_beats_stays_live_for_hours_and_one_that_stops_is_named() {
        let l = Liveness::new();
        let relist = l.register("relist", Duration::from_secs(51));
        let publish = l.register("publish", QUICK_LOOP_LIMIT);
        for _ in 0..(4 * 3600 / 5) {
            tokio::time::advance(BEAT_EVERY).await;
            relist.beat();
            publish.beat();
            assert!(l.check().is_ok());
        }
        tokio::time::advance(Duration::from_secs(31)).await;
        relist.beat();
        assert_eq!(l.check().unwrap_err(), "publish loop has not turned for 31s; limit is 30s");
        publish.beat();
        assert!(l.check().is_ok());
    }
}

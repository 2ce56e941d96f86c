//! Liveness of plegd's long-running loops: each registers a beat with its own limit
//! and beats on every turn and at least every [`BEAT_EVERY`], quiet or busy, so
//! `/livez` tells a wedged loop from a quiet node and names the loop that stopped.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::time::Instant;

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

/// The loops that stopped beating, as `/livez` reports them.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{}", .0.iter().map(ToString::to_string).collect::<Vec<_>>().join("; "))]
pub struct Stalled(pub Vec<StalledLoop>);

/// One loop that stopped beating.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{name} loop has not turned for {}; limit is {}", go_duration(*.since), go_duration(*.limit))]
pub struct StalledLoop {
    /// The loop's name.
    pub name: &'static str,
    /// Since its last beat.
    pub since: Duration,
    /// Its limit.
    pub limit: Duration,
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
    pub fn check(&self) -> Result<(), Stalled> {
        let beats = self.beats.lock().expect("liveness lock");
        let loops: Vec<StalledLoop> = beats
            .iter()
            .filter(|b| b.last.elapsed() > b.limit)
            .map(|b| StalledLoop { name: b.name, since: b.last.elapsed(), limit: b.limit })
            .collect();
        if loops.is_empty() { Ok(()) } else { Err(Stalled(loops)) }
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
        assert_eq!(l.check().unwrap_err().to_string(), "publish loop has not turned for 31s; limit is 30s");
        publish.beat();
        assert!(l.check().is_ok());
    }
}

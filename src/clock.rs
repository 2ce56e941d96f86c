//! plegd's wall clock: a wall time fixed once per process and advanced by the monotonic
//! clock, so that every time plegd hands out for a monotonic instant (a cache entry's
//! read, a relist's start) maps back to exactly that instant, whatever the system clock
//! does meanwhile.
//!
//! `GetPodStatus` answers with such times and takes them back as `min_timestamp`: a
//! client that passes back the timestamp it got waits for a strictly newer read, and a
//! step of the system clock (NTP, a VM resumed, an operator) neither wedges a waiter nor
//! answers it with a stale status. The price: after a step, these times differ from the
//! system clock by the step until plegd restarts. A time later than plegd's now (a
//! client's clock ahead of plegd's) means "newer than now": the next read.

use std::sync::OnceLock;
use std::time::{Duration, SystemTime};

use tokio::time::Instant;

#[derive(Clone, Copy, Debug)]
struct Anchor {
    mono: Instant,
    wall: SystemTime,
}

static ANCHOR: OnceLock<Anchor> = OnceLock::new();

fn anchor() -> Anchor {
    *ANCHOR.get_or_init(|| Anchor { mono: Instant::now(), wall: SystemTime::now() })
}

/// Fixes plegd's wall clock now, if nothing did yet (the sidecar calls it as it
/// starts, before any read).
pub fn start() {
    anchor();
}

/// The wall time of a monotonic instant, on plegd's clock.
pub fn wall_of(at: Instant) -> SystemTime {
    let a = anchor();
    if at >= a.mono {
        a.wall.checked_add(at - a.mono).unwrap_or(a.wall)
    } else {
        a.wall.checked_sub(a.mono - at).unwrap_or(SystemTime::UNIX_EPOCH)
    }
}

/// Now, on plegd's clock.
pub fn now() -> SystemTime {
    wall_of(Instant::now())
}

/// The monotonic instant of a wall time on plegd's clock, the inverse of [`wall_of`]
/// (exact for times it gave). A time later than now is now; one too far back for the
/// monotonic clock is its earliest instant plegd can name.
pub fn instant_of(t: SystemTime) -> Instant {
    let a = anchor();
    let now = Instant::now();
    match t.duration_since(a.wall) {
        Ok(after) => a.mono.checked_add(after).map_or(now, |i| i.min(now)),
        Err(before) => {
            let back = before.duration();
            a.mono.checked_sub(back).unwrap_or_else(|| earliest(a.mono))
        }
    }
}

/// The earliest instant below `from` that the monotonic clock can represent, found by
/// halving (it is bounded by the time since boot).
fn earliest(from: Instant) -> Instant {
    let mut step = Duration::from_secs(1 << 40);
    let mut at = from;
    while step >= Duration::from_millis(1) {
        if let Some(i) = at.checked_sub(step) {
            at = i;
        } else {
            step /= 2;
        }
    }
    at
}

/// A wall time from a protobuf `Timestamp`'s fields: `None` when the nanoseconds are
/// out of range; seconds before 1970 are 1970, seconds past what the system can hold
/// are the latest time it can.
pub fn from_timestamp(seconds: i64, nanos: i32) -> Option<SystemTime> {
    if !(0..1_000_000_000).contains(&nanos) {
        return None;
    }
    if seconds < 0 {
        return Some(SystemTime::UNIX_EPOCH);
    }
    let d = Duration::new(seconds as u64, nanos as u32);
    Some(SystemTime::UNIX_EPOCH.checked_add(d).unwrap_or_else(|| {
        // Past the representable range: the latest time is "later than now" anyway.
        SystemTime::now() + Duration::from_secs(100 * 365 * 86_400)
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn a_time_plegd_gave_maps_back_to_its_instant_exactly() {
        start();
        for _ in 0..100 {
            let at = Instant::now();
            assert_eq!(instant_of(wall_of(at)), at);
            tokio::time::sleep(Duration::from_nanos(fastrand::u64(1..10_000_000_000))).await;
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_time_later_than_now_means_now_and_one_long_ago_means_the_earliest_instant() {
        start();
        let now = Instant::now();
        assert_eq!(instant_of(now_wall_plus(Duration::from_secs(3600))), now);
        assert_eq!(instant_of(from_timestamp(i64::MAX, 0).unwrap()), now, "past year 2262 is later, not 1970");
        let old = instant_of(SystemTime::UNIX_EPOCH);
        assert!(old <= now);
    }

    fn now_wall_plus(d: Duration) -> SystemTime {
        wall_of(Instant::now()) + d
    }

    #[test]
    fn timestamps_with_bad_nanoseconds_are_refused() {
        assert_eq!(from_timestamp(1, -1), None);
        assert_eq!(from_timestamp(1, 1_000_000_000), None);
        assert_eq!(from_timestamp(-5, 0), Some(SystemTime::UNIX_EPOCH));
    }
}

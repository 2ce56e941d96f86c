//! plegd's wall clock: a wall time fixed once per process and advanced by the monotonic
//! clock, so that every time plegd hands out for a monotonic instant (a cache entry's
//! read, a relist's start) maps back to exactly that instant, whatever the system clock
//! does meanwhile.
//!
//! `GetPodStatus` answers with such times and takes them back as `min_timestamp`. A
//! time is read both ways — on plegd's clock, and on the system clock as it is now —
//! and the later instant wins, capped at now: a client that passes back a timestamp it
//! got waits for a strictly newer read, one that passes its own clock's "now" waits for
//! a read after now, and a step of the system clock (NTP, a VM resumed, an operator)
//! either way neither wedges a waiter nor answers it with a stale status. The price:
//! after a step, plegd's times differ from the system clock by the step until plegd
//! restarts, and a timestamp plegd gave before a backward step waits for a read after
//! the call rather than after that timestamp.

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

/// The monotonic instant a waiter for "newer than `t`" waits past: the later of `t`
/// on plegd's clock (the inverse of [`wall_of`], exact for times it gave) and `t` on
/// the system clock as it reads now, capped at now. One too far back for the monotonic
/// clock is the earliest instant plegd can name.
pub fn instant_of(t: SystemTime) -> Instant {
    instant_at(t, anchor().mono, anchor().wall, Instant::now(), SystemTime::now())
}

/// [`instant_of`] with plegd's anchor and the two clocks' readings given.
fn instant_at(t: SystemTime, mono: Instant, wall: SystemTime, now: Instant, now_wall: SystemTime) -> Instant {
    let on = |mono: Instant, wall: SystemTime| match t.duration_since(wall) {
        Ok(after) => mono.checked_add(after).unwrap_or(now),
        Err(before) => mono.checked_sub(before.duration()).unwrap_or_else(|| earliest(mono)),
    };
    on(mono, wall).max(on(now, now_wall)).min(now)
}

/// The earliest instant below `from` that the monotonic clock can represent, searched
/// by halving (it is bounded by the time since boot).
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

    /// The clocks as they read after the system clock stepped by `step` (seconds,
    /// negative: back) an hour after plegd started.
    fn stepped(step: i64) -> (Instant, SystemTime, Instant, SystemTime) {
        let (mono, wall) = (Instant::now(), SystemTime::UNIX_EPOCH + Duration::from_secs(1_800_000_000));
        let now = mono + Duration::from_secs(3600);
        let now_wall = if step >= 0 {
            wall + Duration::from_secs(3600 + step as u64)
        } else {
            wall + Duration::from_secs(3600) - Duration::from_secs((-step) as u64)
        };
        (mono, wall, now, now_wall)
    }

    #[test]
    fn after_a_step_either_way_no_client_is_answered_early_nor_wedged() {
        for step in [-3600, -5, 0, 5, 3600] {
            let (mono, wall, now, now_wall) = stepped(step);
            // A read plegd told 10 minutes ago, passed back.
            let read = now - Duration::from_secs(600);
            let told = wall + (read - mono);
            let at = instant_at(told, mono, wall, now, now_wall);
            assert!(at >= read, "step {step}: a timestamp passed back waits for a read after it");
            assert!(at <= now, "step {step}: and never for one after now");
            // A client's own "now" on the stepped system clock.
            let at = instant_at(now_wall, mono, wall, now, now_wall);
            assert_eq!(at, now, "step {step}: the client's now is now, not an hour ago or ahead");
        }
    }

    #[test]
    fn timestamps_with_bad_nanoseconds_are_refused() {
        assert_eq!(from_timestamp(1, -1), None);
        assert_eq!(from_timestamp(1, 1_000_000_000), None);
        assert_eq!(from_timestamp(-5, 0), Some(SystemTime::UNIX_EPOCH));
    }
}

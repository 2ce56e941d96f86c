//! PLEG health the kubelet's way — how long since the last relist whose results are in
//! the cache, against a threshold — and the readiness built on it, which `/readyz` and
//! the API's `grpc.health.v1` service both report.

use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use crate::liveness::go_duration;

use tokio::time::Instant;

/// Shared PLEG health: written by the relister, read by `/healthz` and `/readyz`.
#[derive(Clone)]
pub struct PlegHealth {
    inner: Arc<Mutex<Option<(Instant, SystemTime)>>>,
    threshold: Duration,
    extra: Arc<Mutex<Duration>>,
    last_error: Arc<Mutex<Option<String>>>,
    /// Turns true with the first successful relist, for those who wait for it.
    first: Arc<tokio::sync::watch::Sender<bool>>,
}

impl PlegHealth {
    /// Health with the given threshold (the kubelet's is 3 minutes).
    pub fn new(threshold: Duration) -> Self {
        Self {
            inner: Arc::new(Mutex::new(None)),
            threshold,
            extra: Arc::new(Mutex::new(Duration::ZERO)),
            last_error: Arc::new(Mutex::new(None)),
            first: Arc::new(tokio::sync::watch::Sender::new(false)),
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
        self.first.send_if_modified(|done| !std::mem::replace(done, true));
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

    /// Resolves once a relist has succeeded (at once if one has): what the sync loop's
    /// startup resync and the publisher's priming wait for, woken by the relist itself.
    pub async fn first_relist(&self) {
        let mut done = self.first.subscribe();
        // The sender lives in `self`, so the wait can only end with a relist.
        let _ = done.wait_for(|d| *d).await;
    }

    /// Wall time of the last successful relist's start.
    pub fn last_seen(&self) -> Option<SystemTime> {
        self.inner.lock().expect("health lock").map(|(_, w)| w)
    }

    /// `Ok` when healthy; otherwise the kubelet's message, e.g. `pleg was last seen
    /// active 3m1s ago; threshold is 3m0s`.
    pub fn check(&self) -> Result<(), Unhealthy> {
        let Some((start, _)) = *self.inner.lock().expect("health lock") else {
            return Err(Unhealthy::NeverRelisted);
        };
        let elapsed = start.elapsed();
        let threshold = self.threshold();
        if elapsed > threshold {
            return Err(Unhealthy::Stale { ago: elapsed, threshold });
        }
        Ok(())
    }
}

/// Why the PLEG is not healthy, in the kubelet's words.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum Unhealthy {
    /// No relist has completed yet.
    #[error("pleg has yet to be successful")]
    NeverRelisted,
    /// The last completed relist started too long ago.
    #[error("pleg was last seen active {} ago; threshold is {}", go_duration(*.ago), go_duration(*.threshold))]
    Stale {
        /// Since the last completed relist's start.
        ago: Duration,
        /// The threshold in force.
        threshold: Duration,
    },
}

/// Readiness, derived from the subsystems: the first relist completed, PLEG is
/// healthy, and (with `--mode evented`) the event stream is up. The sockets are bound
/// before any of this can be true.
#[derive(Clone)]
pub struct Readiness {
    /// PLEG health.
    pub health: PlegHealth,
    /// The CRI event stream's state.
    pub stream: tokio::sync::watch::Receiver<crate::pleg::evented::StreamState>,
    /// Whether the stream is required.
    pub require_stream: bool,
}

impl Readiness {
    /// `Ok`, or why not ready.
    pub fn check(&self) -> Result<(), NotReady> {
        if !self.health.first_relist_done() {
            return Err(NotReady::FirstRelist);
        }
        self.health.check()?;
        let stream = *self.stream.borrow();
        if self.require_stream && !stream.is_up() {
            return Err(NotReady::NoStream(stream.as_str()));
        }
        Ok(())
    }
}

/// Why plegd is not ready.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum NotReady {
    /// The first relist has not completed.
    #[error("the first relist has not completed")]
    FirstRelist,
    /// The PLEG is unhealthy.
    #[error("PLEG is not healthy: {0}")]
    Unhealthy(#[from] Unhealthy),
    /// `--mode evented` without the stream.
    #[error("--mode evented requires the CRI event stream, which is {0}")]
    NoStream(&'static str),
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
        assert_eq!(h.check().unwrap_err().to_string(), "pleg has yet to be successful");
        h.record_relist(Instant::now(), SystemTime::now());
        assert!(h.check().is_ok());
        tokio::time::advance(Duration::from_secs(181)).await;
        assert_eq!(h.check().unwrap_err().to_string(), "pleg was last seen active 3m1s ago; threshold is 3m0s");
    }

    #[tokio::test(start_paused = true)]
    async fn first_relist_resolves_after_the_first_relist_and_not_before() {
        let h = PlegHealth::new(Duration::from_secs(180));
        let waiter = tokio::spawn({
            let h = h.clone();
            async move { h.first_relist().await }
        });
        // A failed relist is not one; an hour of paused time passes without a relist.
        h.record_failure("runtime down".into());
        tokio::time::sleep(Duration::from_secs(3600)).await;
        assert!(!waiter.is_finished(), "resolved before any relist");
        h.record_relist(Instant::now(), SystemTime::now());
        tokio::time::timeout(Duration::from_millis(1), waiter).await.expect("woken by the relist").unwrap();
        // Once done, it stays done: a later wait resolves at once.
        tokio::time::timeout(Duration::ZERO, h.first_relist()).await.expect("resolved at once");
    }
}

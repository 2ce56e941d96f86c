//! How far the relister trusts the CRI event stream it is paired with: whether the
//! runtime delivers every event to every subscriber, the changes a read found that the
//! stream has not announced (suspects, missed once their grace passes), and the
//! safety-net period that follows from both.

use std::time::Duration;

use tokio::time::Instant;

use super::metrics::PlegMetrics;
use crate::model::event::{EventType, PodLifecycleEvent};

/// How far the relister trusts the CRI event stream, and what it learned.
#[derive(Debug)]
pub(super) struct StreamTrust {
    /// The runtime delivers every event to every subscriber (containerd 2.x); learned
    /// from `Version` each time the stream comes up.
    complete: bool,
    /// The runtime as `Version` named it, for messages.
    runtime: String,
    /// Since when the stream has been up without a break.
    up_since: Option<Instant>,
    /// Until when fast relists follow a stream that came back after an outage (the
    /// runtime may still be recovering state it sends no events for; not misses).
    settle_until: Instant,
    /// Changes a relist found while the stream was up, per pod, with when they were
    /// found: a miss unless the pod's event arrives within [`MISS_GRACE`] (it was in
    /// flight).
    suspects: Vec<(Instant, String, usize)>,
    /// Pods the stream announced lately, or whose reads failed, with when: a change a
    /// read finds for them is not a miss (their event was taken, or used up by a
    /// failed read).
    announced: std::collections::HashMap<String, Instant>,
    /// The safety-net period in force on a complete stream: the configured one, or
    /// shorter after a relist found changes the stream did not announce.
    net_period: Duration,
    /// The configured safety-net period (`--evented-relist-period`): the most it is.
    configured: Duration,
    /// Whether the last relist found missed changes (for logging transitions).
    missing: bool,
    /// When the stream was last found to have missed a change.
    last_miss: Option<Instant>,
}

/// A change a relist found counts as missed by the stream only if the stream had been
/// up this long before the listing and the pod's event has not arrived this long
/// after it: an event still in flight is not a miss. Measured on plegd's monotonic
/// clock, so neither clock steps nor the runtime's timestamps matter.
pub(super) const MISS_GRACE: Duration = Duration::from_secs(2);

/// After the stream missed a change, full relists keep the relist period this long
/// before they slow down again (a quiet stream proves nothing while it may be missing
/// changes; a quiet node proves nothing either).
pub(super) const MISS_HOLD: Duration = Duration::from_secs(300);

/// After the event stream comes back from an outage, full relists keep the relist period this long.
pub(super) const SETTLE: Duration = Duration::from_secs(10);

impl StreamTrust {
    /// Nothing learned yet; `net_period` is the configured safety-net period.
    pub(super) fn new(net_period: Duration) -> Self {
        Self {
            complete: false,
            runtime: String::new(),
            up_since: None,
            settle_until: Instant::now(),
            suspects: Vec::new(),
            announced: Default::default(),
            net_period,
            configured: net_period,
            missing: false,
            last_miss: None,
        }
    }

    /// The stream came up: `complete` says whether the runtime (`runtime`, for messages)
    /// delivers every event to every subscriber; the safety net starts at the
    /// configured period.
    pub(super) fn came_up(&mut self, complete: bool, runtime: String) {
        self.up_since = Some(Instant::now());
        self.complete = complete;
        self.runtime = runtime;
        self.net_period = self.configured;
        self.missing = false;
        self.last_miss = None;
    }

    /// The stream went down.
    pub(super) fn went_down(&mut self) {
        self.up_since = None;
    }

    /// A change a read finds for pod `uid` in the next moments is no miss: its event was
    /// taken (the stream announced it, or said its sandbox deleted) or used up by a
    /// failed read.
    pub(super) fn announce(&mut self, uid: &str) {
        self.announced.insert(uid.to_owned(), Instant::now());
    }

    /// Fast full relists follow until `until` (the stream came back after failing).
    pub(super) fn settle_until(&mut self, until: Instant) {
        self.settle_until = until;
    }

    /// Whether full relists may slow down to the safety net now: a complete stream, up,
    /// past its settle window.
    pub(super) fn trusted(&self, up: bool) -> bool {
        up && self.complete && Instant::now() >= self.settle_until
    }

    /// The safety-net period in force on a complete stream.
    pub(super) fn net_period(&self) -> Duration {
        self.net_period
    }

    /// Whether no change found lately waits to be judged.
    pub(super) fn no_suspects(&self) -> bool {
        self.suspects.is_empty()
    }

    /// Notes the changes among `events` (seen by a read of the runtime that started at
    /// `listed`, not by an event) as suspected misses of the stream; returns how many.
    pub(super) fn suspect(&mut self, uid: &str, events: &[PodLifecycleEvent], listed: Instant) -> usize {
        let Some(up_since) = self.up_since else { return 0 };
        if listed < up_since + MISS_GRACE || listed < self.settle_until {
            return 0;
        }
        if self.announced.get(uid).is_some_and(|t| *t + MISS_GRACE >= listed) {
            return 0;
        }
        // A dead container's corrected word is a `CONTAINER_CHANGED` the runtime sends no
        // event for: not the stream's miss.
        let corrected = |e: &PodLifecycleEvent| {
            e.kind == EventType::ContainerChanged
                && e.pod.as_ref().is_some_and(|p| {
                    p.containers
                        .iter()
                        .any(|c| c.id == e.container_id && c.state == crate::model::ContainerState::Exited)
                })
        };
        let n = events.iter().filter(|e| e.kind != EventType::PodSync && !corrected(e)).count();
        if n > 0 {
            self.suspects.push((Instant::now(), uid.to_owned(), n));
        }
        n
    }

    /// Clears the suspects of pods whose events arrived (`announced`: the pods the stream
    /// named since the last call); returns the changes of those whose events did not
    /// arrive within the grace (missed).
    pub(super) fn settle(&mut self, announced: &[String]) -> usize {
        let now = Instant::now();
        for uid in announced {
            self.announced.insert(uid.clone(), now);
        }
        self.announced.retain(|_, t| now.duration_since(*t) < MISS_GRACE * 2);
        if self.suspects.is_empty() {
            return 0;
        }
        self.suspects.retain(|(_, uid, _)| !announced.contains(uid));
        let mut missed = 0;
        self.suspects.retain(|(found, _, n)| {
            let due = now.duration_since(*found) >= MISS_GRACE;
            if due {
                missed += n;
            }
            !due
        });
        missed
    }

    /// Counts and logs changes the stream missed, and moves the safety-net period: down
    /// to the relist period at once when the stream missed something, back up by
    /// doubling after each full relist that found nothing missed, once [`MISS_HOLD`]
    /// has passed since the last miss.
    pub(super) fn judge(&mut self, missed: usize, stream_up: bool, relist_period: Duration, metrics: &PlegMetrics) {
        if missed > 0 {
            metrics.evented_missed.inc_by(missed as u64);
            if !self.missing {
                tracing::warn!(
                    missed,
                    runtime = %self.runtime,
                    "a relist found changes the CRI event stream never announced: the stream is not complete \
                     on this node (another subscriber may be taking events, or the runtime dropped them), so \
                     full relists run at the relist period until relists find nothing missed"
                );
            }
            self.missing = true;
            self.last_miss = Some(Instant::now());
            self.net_period = relist_period;
        } else if stream_up && self.last_miss.is_none_or(|t| t.elapsed() >= MISS_HOLD) {
            if std::mem::take(&mut self.missing) {
                tracing::info!("a relist found nothing the CRI event stream missed; full relists slow down again");
            }
            // Never below the relist period, never above the safety net (nor below the
            // relist period if the safety net was configured shorter).
            self.net_period = (self.net_period * 2).min(self.configured).max(relist_period);
        }
    }
}

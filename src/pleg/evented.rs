//! The CRI event-stream consumer: turns `GetContainerEvents` into requests, sent to the
//! relister's [`super::inbox`], that make it re-read one pod at once. The stream is a latency hint, never a source of
//! truth: payloads are not written anywhere, so stale or reordered events cannot
//! corrupt the cache. Reconnects forever with capped, jittered backoff.

use std::time::Duration;

use futures_util::StreamExt;
use tokio::sync::watch;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::final_statuses::FinalStatus;
use super::inbox::{Inbox, Intake, Teller};
use super::metrics::{ModeLabel, PlegMetrics};
use super::schedule::{Read, Reason, ScheduleRequest, Why};
use crate::backoff::Backoff;
use crate::cri::RuntimeService;
use crate::liveness::{Beat, beat_timer};
use crate::proto::runtime as cri;

/// Which PLEG mode the sidecar runs in (`--mode`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum Mode {
    /// Use the CRI event stream when the runtime has it, relist otherwise.
    #[default]
    Auto,
    /// Relist only.
    Generic,
    /// Require the stream (not ready without it), still relisting as a safety net.
    Evented,
}

/// The event stream's state, as the relister and readiness see it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StreamState {
    /// Not tried yet.
    Starting,
    /// The call is open, not yet proven to work.
    Connecting,
    /// Events flow (or the call stayed open past the grace period).
    Up,
    /// The runtime has no usable stream (`Unimplemented`, an immediate end, an empty OK).
    NoStream,
    /// The stream failed and is being retried.
    Down,
    /// Generic mode: the stream is not used.
    Disabled,
}

impl StreamState {
    /// A word for messages.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Starting => "starting",
            Self::Connecting => "connecting",
            Self::Up => "up",
            Self::NoStream => "not offered by the runtime",
            Self::Down => "down",
            Self::Disabled => "disabled",
        }
    }

    /// Whether events flow, so the relister can slow down.
    pub fn is_up(self) -> bool {
        self == Self::Up
    }
}

/// Reconnection and detection settings.
#[derive(Clone, Debug)]
pub struct EventedConfig {
    /// First retry delay after a failed stream.
    pub retry_initial: Duration,
    /// Longest retry delay.
    pub retry_max: Duration,
    /// A stream healthy for this long resets the retry delay.
    pub reset_after: Duration,
    /// Delay before asking again a runtime that has no stream.
    pub no_stream_retry: Duration,
    /// A call still open after this long with no error counts as connected
    /// (containerd sends nothing, not even headers, until the first event).
    pub connect_grace: Duration,
}

impl Default for EventedConfig {
    fn default() -> Self {
        Self {
            retry_initial: Duration::from_millis(100),
            retry_max: Duration::from_secs(30),
            reset_after: Duration::from_secs(60),
            no_stream_retry: Duration::from_secs(30),
            connect_grace: Duration::from_millis(500),
        }
    }
}

/// The stream consumer.
pub struct EventedWatcher<R: RuntimeService> {
    runtime: R,
    inbox: Inbox,
    state: watch::Sender<StreamState>,
    metrics: PlegMetrics,
    cfg: EventedConfig,
    beat: Beat,
}

/// How one stream ended.
#[derive(Debug)]
struct Ended {
    connected: bool,
    unimplemented: bool,
    error: Option<String>,
}

/// Whether a runtime's `GetContainerEvents` hands every event to every subscriber and
/// never drops one, so a quiet stream means a quiet runtime. containerd 2.x does (each
/// subscriber has its own queue, and publishing waits for room); containerd 1.x does
/// not (one shared channel: each event goes to one subscriber only, and events are
/// dropped when it is full), and neither does a runtime plegd does not know. The
/// simulated runtime streams like containerd 2.x.
pub fn stream_is_complete(runtime_name: &str, runtime_version: &str) -> bool {
    let major = runtime_version.trim_start_matches('v').split('.').next().and_then(|m| m.parse::<u32>().ok());
    match runtime_name {
        "containerd" => major.is_some_and(|m| m >= 2),
        "plegd-sim" => true,
        _ => false,
    }
}

/// Creates the shared stream state.
pub fn stream_state() -> (watch::Sender<StreamState>, watch::Receiver<StreamState>) {
    watch::channel(StreamState::Starting)
}

impl<R: RuntimeService> EventedWatcher<R> {
    /// A consumer that sends its requests to `inbox` and publishes its state on `state`.
    pub fn new(
        runtime: R,
        inbox: Inbox,
        state: watch::Sender<StreamState>,
        metrics: PlegMetrics,
        cfg: EventedConfig,
    ) -> Self {
        Self { runtime, inbox, state, metrics, cfg, beat: Beat::detached("event stream") }
    }

    /// Beats `beat` as events arrive and at least every [`crate::liveness::BEAT_EVERY`].
    pub fn with_liveness(mut self, beat: Beat) -> Self {
        self.beat = beat;
        self
    }

    fn set_state(&self, s: StreamState) {
        let prev = self.state.send_replace(s);
        if prev == s {
            return;
        }
        let evented = i64::from(s.is_up());
        self.metrics.mode.get_or_create(&ModeLabel { mode: "evented".into() }).set(evented);
        self.metrics.mode.get_or_create(&ModeLabel { mode: "generic".into() }).set(1 - evented);
        match s {
            StreamState::Up => tracing::info!("CRI event stream up; full relists slow down to the safety-net period"),
            StreamState::NoStream if prev != StreamState::NoStream => {
                tracing::info!("runtime has no CRI event stream; relisting at the relist period")
            }
            StreamState::Down if prev == StreamState::Up => {
                tracing::warn!("CRI event stream lost; relisting at the relist period until it is back")
            }
            _ => {}
        }
    }

    /// Hands the relister what the event says: the final status a `CONTAINER_STOPPED`
    /// carries (into its book at once), the sandbox a sandbox's `CONTAINER_DELETED` says
    /// deleted, and a read of its pod with the sandbox and container ids; or, when the
    /// event names no pod, its container, whose pod the relister finds.
    fn request(&self, ev: &cri::ContainerEventResponse) {
        let now = Instant::now();
        let sandbox = ev.pod_sandbox_status.as_ref();
        let uid = sandbox.and_then(|s| s.metadata.as_ref()).map(|m| m.uid.as_str()).filter(|u| !u.is_empty());
        let Some(uid) = uid else {
            // containerd drops or sends events without a sandbox status when the sandbox
            // is already gone: find the pod by the container id.
            self.inbox.submit(Intake::ContainerOnly { id: ev.container_id.clone(), by: Teller::Stream });
            return;
        };
        if let Some(word) = FinalStatus::of_event(ev) {
            self.inbox.final_status(word);
        }
        if ev.container_event_type == cri::ContainerEventType::ContainerDeletedEvent as i32
            && let Some(sandbox) = sandbox.filter(|s| s.id == ev.container_id)
        {
            self.inbox.submit(Intake::SandboxDeleted { uid: uid.to_owned(), id: sandbox.id.clone() });
        }
        let why = Why::stream_event(sandbox.map(|s| s.id.as_str()), Some(&ev.container_id), now);
        self.inbox.send(ScheduleRequest { key: Read::Pod(uid.to_owned()), message: why, run_at: now });
    }

    async fn consume(&self, shutdown: &CancellationToken, backoff: &mut Backoff, after_outage: bool) -> Option<Ended> {
        self.set_state(StreamState::Connecting);
        self.beat.beat();
        let mut stream = match self.runtime.container_events().await {
            Ok(s) => s,
            Err(e) => {
                return Some(Ended {
                    connected: false,
                    unimplemented: e.is_unimplemented(),
                    error: Some(e.to_string()),
                });
            }
        };
        let grace = tokio::time::sleep(self.cfg.connect_grace);
        tokio::pin!(grace);
        let mut connected = false;
        let mut beat = beat_timer();
        loop {
            tokio::select! {
                _ = shutdown.cancelled() => return None,
                _ = beat.tick() => self.beat.beat(),
                _ = &mut grace, if !connected => {
                    connected = true;
                    self.on_connected(backoff, after_outage);
                }
                item = stream.next() => match item {
                    Some(Ok(ev)) => {
                        self.beat.beat();
                        if !connected {
                            connected = true;
                            self.on_connected(backoff, after_outage);
                        }
                        self.request(&ev);
                    }
                    Some(Err(e)) => {
                        return Some(Ended { connected, unimplemented: e.is_unimplemented(), error: Some(e.to_string()) });
                    }
                    None => return Some(Ended { connected, unimplemented: false, error: None }),
                }
            }
        }
    }

    fn on_connected(&self, backoff: &mut Backoff, after_outage: bool) {
        self.metrics.evented_connections.inc();
        backoff.mark_healthy();
        self.set_state(StreamState::Up);
        // Whatever happened while the stream was down is repaired by a full relist (and,
        // after an outage, by fast relists while the runtime may still be recovering).
        self.inbox.full(if after_outage { Reason::StreamRecovered } else { Reason::StreamUp });
    }

    /// Consumes the stream until shutdown, reconnecting forever.
    pub async fn run(self, shutdown: CancellationToken) {
        let mut backoff =
            Backoff::new(self.cfg.retry_initial, self.cfg.retry_max).with_reset_after(self.cfg.reset_after);
        let mut after_outage = false;
        loop {
            let opened = Instant::now();
            let Some(ended) = self.consume(&shutdown, &mut backoff, after_outage).await else { return };
            after_outage = true;
            self.metrics.evented_connection_errors.inc();
            let lasted = opened.elapsed();
            // Unimplemented, or a clean end before the stream proved itself (an empty OK
            // stream): this runtime has no stream. Errors before that are failures.
            let no_stream = ended.unimplemented || (!ended.connected && ended.error.is_none());
            let delay = if no_stream {
                self.set_state(StreamState::NoStream);
                self.cfg.no_stream_retry
            } else {
                // The relister relists at once when the stream goes down (it watches
                // the state), and again when it comes back; a failed retry adds nothing.
                self.set_state(StreamState::Down);
                backoff.next_delay()
            };
            tracing::debug!(
                error = ended.error.as_deref().unwrap_or("end of stream"),
                lasted = ?lasted,
                retry_in = ?delay,
                "CRI event stream ended"
            );
            let until = Instant::now() + delay;
            let mut beat = beat_timer();
            loop {
                tokio::select! {
                    _ = shutdown.cancelled() => return,
                    _ = tokio::time::sleep_until(until) => break,
                    _ = beat.tick() => self.beat.beat(),
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_runtimes_known_to_deliver_every_event_are_trusted_with_a_quiet_stream() {
        assert!(stream_is_complete("containerd", "v2.1.9"));
        assert!(stream_is_complete("containerd", "2.0.0"));
        assert!(!stream_is_complete("containerd", "v1.7.24"));
        assert!(!stream_is_complete("containerd", "1.6.20"));
        assert!(!stream_is_complete("containerd", "garbage"));
        assert!(!stream_is_complete("cri-o", "1.31.0"));
        assert!(stream_is_complete("plegd-sim", "0.1.0"));
    }
}

//! plegd as an NRI observer plugin: the runtime's own word on each sandbox and container
//! change, heard before the runtime answers the kubelet, and handed to the relister's
//! inbox as a hint. The relist stays the truth; a call says only which pod to read.
//!
//! Promises:
//! - **Never slows the runtime.** A call is answered the moment it is read, with success
//!   and no adjustment; only then is it handed on, by a `try_send` into the bounded
//!   inbox (a full inbox drops the hint and asks for a full relist). plegd subscribes
//!   only to the events after a change ([`api::Event::SUBSCRIBED`]).
//! - **Only the runtime is heard.** The socket's peer must be root or plegd's own user
//!   (`SO_PEERCRED`); bad frames end the connection ([`wire`]), never plegd.
//! - **Comes back.** A closed connection, a refused registration or a runtime that
//!   never configures the plugin is retried with backoff; a socket that is not there
//!   is looked for again ([`NriMode::Auto`] quietly).
//!
//! The wire ([`wire`], [`api`]) is plegd's own: a small unary ttrpc over NRI's
//! multiplexer, on the prost plegd already uses.

pub mod api;
pub mod session;
pub mod wire;

use std::path::PathBuf;
use std::time::Duration;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;
use tokio::net::UnixStream;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::backoff::Backoff;
use crate::liveness::{Beat, beat_timer};
use crate::lookup::ContainerLookup;
use crate::pleg::early_words::Word;
use crate::pleg::inbox::{Inbox, Intake, Teller};
use crate::pleg::schedule::{Read, Reason, ScheduleRequest, Why};
use session::{Ended, EventHint, Hand, Hint, Session};

/// The runtime's NRI socket where containerd and CRI-O put it.
pub const DEFAULT_SOCKET: &str = "/var/run/nri/nri.sock";

/// How often a socket that is not there is looked for again.
pub const LOOK_AGAIN: Duration = Duration::from_secs(10);

/// `--nri`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum NriMode {
    /// Register where the socket exists; a node without it is not a warning.
    #[default]
    Auto,
    /// Register; a socket not there, or a registration that fails, is a warning.
    On,
    /// Never register.
    Off,
}

/// The plugin's settings.
#[derive(Clone, Debug)]
pub struct NriConfig {
    /// Whether to register.
    pub mode: NriMode,
    /// The runtime's NRI socket.
    pub socket: PathBuf,
}

impl Default for NriConfig {
    fn default() -> Self {
        Self { mode: NriMode::Auto, socket: PathBuf::from(DEFAULT_SOCKET) }
    }
}

/// Why a connection to the runtime ended.
#[derive(Debug, thiserror::Error)]
pub enum NriError {
    /// Reading or writing the socket failed.
    #[error("the NRI socket: {0}")]
    Io(#[source] std::io::Error),
    /// The socket's peer is not root nor plegd's user.
    #[error("the NRI socket's peer runs as uid {0}, neither root nor plegd's own user: not the runtime")]
    Peer(u32),
    /// A frame that cannot be read.
    #[error(transparent)]
    Wire(#[from] wire::WireError),
    /// A message that cannot be decoded.
    #[error("cannot decode {what}: {source}")]
    Decode {
        /// Which message.
        what: &'static str,
        /// The cause.
        #[source]
        source: prost::DecodeError,
    },
    /// The runtime refused the registration.
    #[error("the runtime refused the registration: {0}")]
    Refused(String),
    /// The runtime closed the connection.
    #[error("the runtime closed the connection")]
    Closed,
    /// The runtime did not configure the plugin in time.
    #[error("the runtime did not configure the plugin within {0:?} of its registration")]
    NotConfigured(Duration),
    /// A message no runtime sends a plugin.
    #[error("unexpected ttrpc message type {kind} on connection {conn}, stream {stream}")]
    Unexpected {
        /// The connection.
        conn: u32,
        /// The type.
        kind: u8,
        /// The stream.
        stream: u32,
    },
}

/// The `event` label.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct EventLabel {
    /// NRI's name of the event.
    pub event: &'static str,
}

/// The plugin's metrics.
#[derive(Clone)]
pub struct NriMetrics {
    /// `plegd_nri_events_total{event}`: events the runtime told.
    pub events: Family<EventLabel, Counter>,
    /// `plegd_nri_answer_duration_seconds`: from a call's read to its answer's write.
    pub answer: Histogram,
    /// `plegd_nri_registered`: 1 while the runtime calls the plugin (configured and
    /// synchronized).
    pub registered: Gauge,
}

impl NriMetrics {
    /// Registers the families in `registry` (the caller gives it the `plegd` prefix).
    pub fn register(registry: &mut Registry) -> Self {
        let m = Self {
            events: Family::default(),
            answer: Histogram::new([1e-5, 5e-5, 1e-4, 2.5e-4, 5e-4, 1e-3, 2.5e-3, 1e-2, 0.1]),
            registered: Gauge::default(),
        };
        registry.register(
            "nri_events",
            "Sandbox and container events the runtime told plegd through NRI",
            m.events.clone(),
        );
        registry.register(
            "nri_answer_duration_seconds",
            "From an NRI call's read to its answer's write: what plegd adds to the runtime's call",
            m.answer.clone(),
        );
        registry.register(
            "nri_registered",
            "1 while the runtime has plegd registered as an NRI plugin",
            m.registered.clone(),
        );
        for e in api::Event::SUBSCRIBED {
            let _ = m.events.get_or_create(&EventLabel { event: e.as_str() });
        }
        m
    }
}

/// The plugin: connects, registers, answers, hands on, and comes back.
pub struct NriPlugin {
    cfg: NriConfig,
    inbox: Inbox,
    metrics: NriMetrics,
    beat: Beat,
    lookup: Option<ContainerLookup>,
}

impl NriPlugin {
    /// A plugin that hands what it hears to `inbox`.
    pub fn new(cfg: NriConfig, inbox: Inbox, metrics: NriMetrics) -> Self {
        Self { cfg, inbox, metrics, beat: Beat::detached("nri"), lookup: None }
    }

    /// Gives `lookup` each started container's process and cgroup as the runtime says
    /// them, so a PID is placed before plegd has read the container.
    pub fn with_lookup(mut self, lookup: ContainerLookup) -> Self {
        self.lookup = Some(lookup);
        self
    }

    /// Beats `beat` while it runs.
    pub fn with_liveness(mut self, beat: Beat) -> Self {
        self.beat = beat;
        self
    }

    /// Registers and re-registers with the runtime until `shutdown`. Returns at once in
    /// [`NriMode::Off`].
    pub async fn run(self, shutdown: CancellationToken) {
        if self.cfg.mode == NriMode::Off {
            return;
        }
        let mut backoff =
            Backoff::new(Duration::from_millis(100), Duration::from_secs(10)).with_reset_after(Duration::from_secs(60));
        let mut said = None;
        // When the last connection ended: a socket gone right after (a runtime restarting
        // removes it) is looked for with backoff, not every LOOK_AGAIN.
        let mut ended_at: Option<Instant> = None;
        loop {
            let delay = match self.connect().await {
                Ok(stream) => {
                    let mut hand = ToInbox {
                        inbox: &self.inbox,
                        metrics: &self.metrics,
                        lookup: self.lookup.as_ref(),
                        backoff: &mut backoff,
                    };
                    let ended = Session::new(stream).run(&mut hand, &self.beat, &shutdown).await;
                    self.metrics.registered.set(0);
                    match ended {
                        Ok(Ended::Shutdown) => return,
                        Ok(Ended::ByRuntime) => {
                            tracing::info!("the runtime shut plegd's NRI plugin down; registering again")
                        }
                        Err(e) => tracing::warn!(error = %e, "NRI connection ended; registering again"),
                    }
                    said = None;
                    ended_at = Some(Instant::now());
                    backoff.next_delay()
                }
                Err(e) => {
                    // No socket: looked for again now and then. A socket that refuses (the
                    // runtime restarting) is tried again with backoff.
                    let absent = matches!(&e, NriError::Io(io) if io.kind() == std::io::ErrorKind::NotFound);
                    let why = e.to_string();
                    if said.as_ref() != Some(&why) {
                        let socket = self.cfg.socket.display();
                        if self.cfg.mode == NriMode::On || !absent {
                            tracing::warn!(%socket, error = %why, "cannot register as an NRI plugin");
                        } else {
                            tracing::info!(%socket, error = %why, "not registered as an NRI plugin (--nri auto); looking again");
                        }
                        said = Some(why);
                    }
                    let restarting = ended_at.is_some_and(|t| t.elapsed() < Duration::from_secs(60));
                    if absent && !restarting { LOOK_AGAIN } else { backoff.next_delay() }
                }
            };
            let until = Instant::now() + delay;
            let mut tick = beat_timer();
            loop {
                tokio::select! {
                    _ = shutdown.cancelled() => return,
                    _ = tokio::time::sleep_until(until) => break,
                    _ = tick.tick() => self.beat.beat(),
                }
            }
        }
    }

    async fn connect(&self) -> Result<UnixStream, NriError> {
        let stream = UnixStream::connect(&self.cfg.socket).await.map_err(NriError::Io)?;
        match crate::uds::peer_is_root_or_self(&stream).map_err(NriError::Io)? {
            (true, _) => Ok(stream),
            (false, uid) => Err(NriError::Peer(uid)),
        }
    }
}

/// Hands each answered call to the relister's inbox.
struct ToInbox<'a> {
    inbox: &'a Inbox,
    metrics: &'a NriMetrics,
    lookup: Option<&'a ContainerLookup>,
    backoff: &'a mut Backoff,
}

impl Hand for ToInbox<'_> {
    fn hand(&mut self, method: &str, hint: Hint, answered_in: Duration) {
        self.metrics.answer.observe(answered_in.as_secs_f64());
        tracing::debug!(method, ?hint, ?answered_in, "NRI call answered");
        match hint {
            Hint::Configured { runtime, version } => {
                tracing::info!(%runtime, %version, "configured as an NRI plugin");
            }
            // The runtime adds a plugin to those it calls once its synchronization went
            // through: registered from here.
            Hint::Synchronized => {
                self.metrics.registered.set(1);
                self.backoff.mark_healthy();
                tracing::info!("registered as an NRI plugin; relisting");
                self.inbox.full(Reason::NriSynchronized);
            }
            Hint::Event(ev) => {
                self.metrics.events.get_or_create(&EventLabel { event: ev.event.as_str() }).inc();
                if let (api::Event::PostStartContainer, Some(lookup), Some(id), Some(pid), Some(cgroup)) =
                    (ev.event, self.lookup, &ev.container, ev.pid, &ev.cgroup)
                {
                    lookup.started(id, pid, cgroup);
                }
                hand_event(self.inbox, ev);
            }
            Hint::Unreadable { .. } => {
                tracing::warn!(method, "an NRI call's payload could not be decoded; relisting");
                self.inbox.full(Reason::NriEvent);
            }
            Hint::Shutdown | Hint::None => {}
        }
    }
}

/// An event's read: its pod, named with the sandbox and container, and for a change the
/// runtime tells ahead of its status, the word read again until shown; an event naming
/// no pod asks for its container's. What the plugin hands the relister of each event
/// (public for the relister-level tests).
pub fn hand_event(inbox: &Inbox, ev: EventHint) {
    let now = Instant::now();
    // Said ahead of the runtime's own status (src/pleg/early_words.rs): read until shown.
    let word = match (ev.event, &ev.sandbox, &ev.container) {
        (api::Event::PostStartContainer, _, Some(id)) => Some((Word::ContainerStarted, id)),
        (api::Event::StopContainer, _, Some(id)) => Some((Word::ContainerStopped, id)),
        (api::Event::RemoveContainer, _, Some(id)) => Some((Word::ContainerRemoved, id)),
        (api::Event::RunPodSandbox, Some(id), _) => Some((Word::SandboxStarted, id)),
        (api::Event::StopPodSandbox, Some(id), _) => Some((Word::SandboxStopped, id)),
        (api::Event::RemovePodSandbox, Some(id), _) => Some((Word::SandboxRemoved, id)),
        _ => None,
    };
    if let Some((word, id)) = word {
        inbox.submit(Intake::EarlyWord { uid: ev.uid.clone(), id: id.clone(), word });
    }
    let Some(uid) = ev.uid else {
        if let Some(id) = ev.container {
            inbox.submit(Intake::ContainerOnly { id, by: Teller::Nri });
        }
        return;
    };
    let why = Why::nri_event(ev.sandbox.as_deref(), ev.container.as_deref(), now);
    inbox.send(ScheduleRequest { key: Read::Pod(uid), message: why, run_at: now });
}

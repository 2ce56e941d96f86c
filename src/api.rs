//! plegd's gRPC API on the `--listen` socket: `plegd.v1.PodLifecycle` (Watch, ListPods,
//! GetPodStatus) and `grpc.health.v1.Health`, with peer-credential checks per
//! connection and request size limits. The one mapping to `tonic::Status` lives here.

use std::path::PathBuf;
use std::pin::Pin;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use futures_util::Stream;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::gauge::Gauge;
use tokio::net::{UnixListener, UnixStream};
use tokio::sync::mpsc;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tonic::{Request, Response, Status};

use crate::cache::PodCache;
use crate::journal::{Entry, Filter, Journal, ResetReason, Since, Start, Subscription};
use crate::model::event::EventType;
use crate::model::{PodStatus, system_to_timestamp};
use crate::proto::plegd as api;
use crate::proto::plegd::pod_lifecycle_server::{PodLifecycle, PodLifecycleServer};
use crate::selector::Selector;

/// Largest request accepted (requests are small; this stops abuse, not users).
pub const MAX_REQUEST_BYTES: usize = 64 * 1024;

/// How the API serves.
#[derive(Clone, Debug)]
pub struct ApiConfig {
    /// Socket path.
    pub socket: PathBuf,
    /// Peer UIDs allowed (with `allow_gids`: either matches); both empty: all.
    pub allow_uids: Vec<u32>,
    /// Peer GIDs allowed.
    pub allow_gids: Vec<u32>,
    /// A Watch stream with nothing to send for this long gets a bookmark.
    pub bookmark_interval: Duration,
    /// Longest wait of a `GetPodStatus` with `min_timestamp` and no deadline.
    pub max_wait: Duration,
    /// A new connection must send the HTTP/2 preface within this long.
    pub handshake_timeout: Duration,
}

/// API metrics.
#[derive(Clone, Default)]
pub struct ApiMetrics {
    /// `plegd_watch_clients`.
    pub watch_clients: Gauge,
    /// `plegd_api_connections_refused_total`.
    pub refused: Counter,
    /// `plegd_api_connections_total`.
    pub accepted: Counter,
}

impl ApiMetrics {
    /// Creates the API's families and registers them.
    pub fn register(registry: &mut crate::metrics::Registry) -> Self {
        let api = Self::default();
        registry.register("plegd_watch_clients", "Open Watch streams", api.watch_clients.clone());
        registry.register("plegd_api_connections", "API connections accepted", api.accepted.clone());
        registry.register(
            "plegd_api_connections_refused",
            "API connections refused by the peer-credential allowlist",
            api.refused.clone(),
        );
        api
    }
}

/// Errors of starting the API.
#[derive(Debug, thiserror::Error)]
pub enum ApiError {
    /// Serving failed.
    #[error("gRPC server failed: {0}")]
    Serve(#[from] tonic::transport::Error),
}

/// Invalid requests, mapped to `INVALID_ARGUMENT` at the boundary.
#[derive(Debug, thiserror::Error)]
pub enum RequestError {
    /// The label selector does not parse.
    #[error(transparent)]
    Selector(#[from] crate::selector::SelectorError),
    /// An event type number that does not exist.
    #[error("unknown event type {0} in types")]
    Type(i32),
    /// A required field is empty.
    #[error("{0} is required")]
    Missing(&'static str),
    /// No status newer than asked came in time.
    #[error("no status of pod {uid} newer than {min} within {waited:?}")]
    NotNewer {
        /// The pod.
        uid: String,
        /// The time asked for, RFC 3339.
        min: String,
        /// How long plegd waited.
        waited: Duration,
    },
}

impl From<RequestError> for Status {
    fn from(e: RequestError) -> Self {
        match e {
            RequestError::NotNewer { .. } => Status::deadline_exceeded(e.to_string()),
            _ => Status::invalid_argument(e.to_string()),
        }
    }
}

/// The PodLifecycle service.
#[derive(Clone)]
pub struct PodLifecycleService {
    journal: Journal,
    cache: PodCache,
    cfg: Arc<ApiConfig>,
    metrics: ApiMetrics,
    shutdown: CancellationToken,
}

impl PodLifecycleService {
    /// Starts a watch: a stream that makes the snapshot or the replay, then live
    /// events and bookmarks, as the transport asks for them. It ends at shutdown;
    /// dropping it (the client went away) unsubscribes.
    fn open_watch(&self, r: api::WatchRequest) -> Result<FeedStream, Status> {
        let filter = Arc::new(to_filter(r.filter, &r.types)?);
        let since = if r.since_revision == 0 { Since::Snapshot } else { Since::Revision(r.since_revision, r.epoch) };
        self.metrics.watch_clients.inc();
        let feed = WatchFeed {
            journal: self.journal.clone(),
            cache: self.cache.clone(),
            filter,
            bookmark: self.cfg.bookmark_interval,
            shutdown: self.shutdown.clone(),
            phase: Phase::Subscribe(since),
            sub: None,
            announced: false,
            queued: None,
            last_sent: Instant::now(),
            idle: Box::pin(tokio::time::sleep(self.cfg.bookmark_interval)),
            burst: 0,
            _guard: ClientGuard(self.metrics.watch_clients.clone()),
        };
        Ok(Box::pin(futures_util::stream::unfold(feed, |mut feed| async move {
            let item = feed.next().await?;
            Some((Ok(item), feed))
        })))
    }

    /// A service over the journal and the cache.
    pub fn new(
        journal: Journal,
        cache: PodCache,
        cfg: ApiConfig,
        metrics: ApiMetrics,
        shutdown: CancellationToken,
    ) -> Self {
        Self { journal, cache, cfg: Arc::new(cfg), metrics, shutdown }
    }
}

/// Builds a journal filter from the request, validating it.
pub fn to_filter(f: Option<api::PodFilter>, types: &[i32]) -> Result<Filter, RequestError> {
    let f = f.unwrap_or_default();
    let mut set = std::collections::HashSet::new();
    for t in types {
        let kind = match api::LifecycleEventType::try_from(*t) {
            Ok(api::LifecycleEventType::ContainerStarted) => EventType::ContainerStarted,
            Ok(api::LifecycleEventType::ContainerDied) => EventType::ContainerDied,
            Ok(api::LifecycleEventType::ContainerRemoved) => EventType::ContainerRemoved,
            Ok(api::LifecycleEventType::ContainerChanged) => EventType::ContainerChanged,
            Ok(api::LifecycleEventType::PodSync) => EventType::PodSync,
            Ok(api::LifecycleEventType::CrashLoop) => EventType::CrashLoop,
            Ok(api::LifecycleEventType::CrashLoopCleared) => EventType::CrashLoopCleared,
            _ => return Err(RequestError::Type(*t)),
        };
        set.insert(kind);
    }
    Ok(Filter {
        namespace: f.namespace,
        pod_uid: f.pod_uid,
        pod_name: f.pod_name,
        selector: Selector::parse(&f.label_selector)?,
        types: set,
    })
}

fn watch_event(revision: u64, kind: api::watch_event::Kind) -> api::WatchEvent {
    api::WatchEvent { revision, kind: Some(kind) }
}

fn pod_api(p: &PodStatus, cache: &PodCache) -> api::PodStatus {
    let err = cache.get(&p.uid).and_then(|e| e.error.clone());
    p.to_api(err.as_deref())
}

/// One Watch stream's source, polled by the connection as it has room: a live event
/// goes from the journal's buffer to the connection with no task or channel in
/// between (that hop had been the fan-out's largest cost per message and watcher).
/// Snapshots are converted on a short-lived task a few messages ahead instead, which
/// keeps the memory a burst of snapshots leaves behind as low as before.
struct WatchFeed {
    journal: Journal,
    cache: PodCache,
    filter: Arc<Filter>,
    bookmark: Duration,
    shutdown: CancellationToken,
    phase: Phase,
    sub: Option<Subscription>,
    /// Whether the stream told its epoch (its first message does).
    announced: bool,
    /// A message to send before anything else (the reset after the epoch).
    queued: Option<Outgoing>,
    /// When the last message went out; a bookmark follows `bookmark` after it.
    last_sent: Instant,
    /// One timer per stream, moved only when it fires: re-arming a timer for every
    /// event sent would cost a timer-wheel insert and removal per event and watcher.
    idle: Pin<Box<tokio::time::Sleep>>,
    /// Live messages since the feed last yielded.
    burst: usize,
    _guard: ClientGuard,
}

/// Where a [`WatchFeed`] is.
enum Phase {
    /// About to subscribe (at the start, or again after falling behind).
    Subscribe(Since),
    /// Sending a snapshot's pods, then `Synced`, as a task converts them.
    Snapshot(mpsc::Receiver<Outgoing>),
    /// Sending the entries a resume asked for.
    Replay(std::vec::IntoIter<Arc<Entry>>),
    /// Sending live entries and bookmarks.
    Live,
    /// Shut down.
    Done,
}

/// Snapshot messages converted ahead of the transport: enough to keep the stream busy,
/// few enough that a snapshot of a thousand pods to many watchers is not held converted
/// in memory (64 here cost about 1 MiB of resident memory per watcher).
const SNAPSHOT_AHEAD: usize = 8;

/// Live messages a feed sends before it yields once, so that the connection writes
/// out what it has. Without it a backlog fills the transport's send buffer (hundreds
/// of KiB per stream) in one go, and the heap keeps that high-water mark: 3 MiB more
/// resident with 10 watchers through a startup burst. Every 8th message cost a
/// quarter of the fan-out rate; every 64th costs none measurable.
const LIVE_BURST: usize = 64;

/// The response stream of a watch.
type FeedStream = Pin<Box<dyn Stream<Item = Result<Outgoing, Status>> + Send>>;

impl WatchFeed {
    fn entry(e: &Entry) -> Outgoing {
        Outgoing::Event { revision: e.revision, event: e.encoded_event() }
    }

    fn message(revision: u64, kind: api::watch_event::Kind) -> Outgoing {
        Outgoing::Message(Box::new(watch_event(revision, kind)))
    }

    fn reset(&self, reason: ResetReason, message: &str) -> Outgoing {
        self.reset_at(self.journal.revision(), reason, message)
    }

    /// A reset at `revision` (a refused resume's is its snapshot's, so `synced` never
    /// comes below it).
    fn reset_at(&self, revision: u64, reason: ResetReason, message: &str) -> Outgoing {
        let reason = match reason {
            ResetReason::SlowConsumer => api::ResetReason::SlowConsumer,
            ResetReason::RevisionTooOld => api::ResetReason::RevisionTooOld,
            ResetReason::RuntimeResync => api::ResetReason::RuntimeResync,
        };
        let reset = api::Reset { reason: reason as i32, message: message.into() };
        Self::message(revision, api::watch_event::Kind::Reset(reset))
    }

    /// Converts a snapshot on a task of its own, a few messages ahead of the transport,
    /// ending with `Synced`. The task ends when the snapshot is sent, the stream is
    /// dropped or plegd shuts down.
    fn convert(&self, pods: Vec<Arc<PodStatus>>, revision: u64) -> mpsc::Receiver<Outgoing> {
        let (tx, rx) = mpsc::channel(SNAPSHOT_AHEAD);
        let (cache, epoch, shutdown) = (self.cache.clone(), self.journal.epoch(), self.shutdown.clone());
        tokio::spawn(async move {
            let count = pods.len() as u32;
            let messages = pods
                .iter()
                .map(|p| Self::message(revision, api::watch_event::Kind::Snapshot(pod_api(p, &cache))))
                .chain(std::iter::once_with(|| {
                    Self::message(revision, api::watch_event::Kind::Synced(api::Synced { epoch, pods: count }))
                }));
            for m in messages {
                tokio::select! {
                    sent = tx.send(m) => if sent.is_err() { return },
                    _ = shutdown.cancelled() => return,
                }
            }
        });
        rx
    }

    fn go_live(&mut self) {
        self.phase = Phase::Live;
        self.last_sent = Instant::now();
        self.idle.as_mut().reset(self.last_sent + self.bookmark);
    }

    /// The next message; `None` at shutdown.
    async fn next(&mut self) -> Option<Outgoing> {
        loop {
            if self.shutdown.is_cancelled() {
                self.phase = Phase::Done;
            }
            if let Some(m) = self.queued.take() {
                return Some(m);
            }
            match &mut self.phase {
                Phase::Done => return None,
                Phase::Subscribe(since) => {
                    let mut sub = self.journal.subscribe(*since, self.filter.clone());
                    let resumed = matches!(sub.start, Start::Replay(_));
                    let after = match (&sub.start, since) {
                        (Start::Replay(_), Since::Revision(r, _)) => *r,
                        _ => 0,
                    };
                    let snapshot_at = match &sub.start {
                        Start::Snapshot { revision, .. } => *revision,
                        Start::Replay(_) => 0,
                    };
                    self.phase = match std::mem::replace(&mut sub.start, Start::Replay(Vec::new())) {
                        Start::Snapshot { pods, revision } => Phase::Snapshot(self.convert(pods, revision)),
                        Start::Replay(entries) => Phase::Replay(entries.into_iter()),
                    };
                    let refused = sub.reset == Some(ResetReason::RevisionTooOld);
                    self.sub = Some(sub);
                    if refused {
                        let msg = "the requested revision is no longer kept (or belongs to another plegd process); here is a fresh snapshot";
                        self.queued = Some(self.reset_at(snapshot_at, ResetReason::RevisionTooOld, msg));
                    }
                    if !std::mem::replace(&mut self.announced, true) {
                        // Every stream tells its epoch before anything else.
                        let start = api::StreamStart { epoch: self.journal.epoch(), resumed };
                        return Some(Self::message(after, api::watch_event::Kind::Start(start)));
                    }
                }
                Phase::Snapshot(rx) => {
                    tokio::select! {
                        _ = self.shutdown.cancelled() => self.phase = Phase::Done,
                        m = rx.recv() => match m {
                            Some(m) => return Some(m),
                            None => self.go_live(),
                        },
                    }
                }
                Phase::Replay(entries) => match entries.next() {
                    Some(e) => return Some(Self::entry(&e)),
                    None => self.go_live(),
                },
                Phase::Live => {
                    let sub = self.sub.as_mut()?;
                    tokio::select! {
                        // Queued events always go before a bookmark.
                        biased;
                        _ = self.shutdown.cancelled() => self.phase = Phase::Done,
                        entry = sub.next() => match entry {
                            Some(e) => {
                                self.last_sent = Instant::now();
                                self.burst += 1;
                                if self.burst >= LIVE_BURST {
                                    self.burst = 0;
                                    tokio::task::yield_now().await;
                                }
                                return Some(Self::entry(&e));
                            }
                            None => {
                                // Dropped by the journal: the client must start over.
                                let reason = sub.dropped_because().unwrap_or(ResetReason::SlowConsumer);
                                self.sub = None;
                                self.phase = Phase::Subscribe(Since::Snapshot);
                                self.journal.count_reset(reason);
                                let msg = if reason == ResetReason::SlowConsumer {
                                    tracing::info!("watch client fell behind; sending a reset and a fresh snapshot");
                                    "this client did not keep up; here is a fresh snapshot"
                                } else {
                                    "a pod this stream selected changed its labels and left the selection; here is a fresh snapshot"
                                };
                                return Some(self.reset(reason, msg));
                            }
                        },
                        _ = &mut self.idle => {
                            let due = self.last_sent + self.bookmark;
                            // The journal hands an entry to its subscribers before it
                            // publishes the entry's revision: with the revision read
                            // first, an empty buffer means every entry up to it that this
                            // stream matches has been sent. Otherwise the queued events go
                            // first and the bookmark waits.
                            let revision = self.journal.revision();
                            if Instant::now() >= due && sub.is_drained() {
                                self.last_sent = Instant::now();
                                self.idle.as_mut().reset(self.last_sent + self.bookmark);
                                let bookmark = api::watch_event::Kind::Bookmark(api::Bookmark {});
                                return Some(Self::message(revision, bookmark));
                            }
                            self.idle.as_mut().reset(due.max(Instant::now() + Duration::from_millis(1)));
                        }
                    }
                }
            }
        }
    }
}

type WatchStream = Pin<Box<dyn Stream<Item = Result<api::WatchEvent, Status>> + Send>>;

/// One message of a Watch stream as it goes on the wire: a message made for this
/// watcher, or a journal event whose encoding all watchers share.
#[derive(Debug)]
pub enum Outgoing {
    /// A snapshot, synced, reset or bookmark message.
    Message(Box<api::WatchEvent>),
    /// A published event: its revision and its encoded `LifecycleEvent`.
    Event {
        /// The event's revision.
        revision: u64,
        /// `LifecycleEvent`, encoded once.
        event: prost::bytes::Bytes,
    },
}

impl Outgoing {
    /// The message this stands for, decoded (for callers that need the message type).
    pub fn into_message(self) -> Result<api::WatchEvent, Status> {
        use prost::Message;
        match self {
            Self::Message(m) => Ok(*m),
            Self::Event { revision, event } => {
                let event = api::LifecycleEvent::decode(event)
                    .map_err(|e| Status::internal(format!("a journal event does not decode: {e}")))?;
                Ok(watch_event(revision, api::watch_event::Kind::Event(event)))
            }
        }
    }
}

/// The Watch codec: decodes requests with prost, writes shared event encodings as they
/// are (a `WatchEvent` is its revision, field 1, and the event, field 4, one after the
/// other on the wire).
#[derive(Clone, Copy, Debug, Default)]
pub struct WatchCodec;

/// The encoder of [`WatchCodec`].
#[derive(Clone, Copy, Debug, Default)]
pub struct WatchEncoder;

impl tonic::codec::Codec for WatchCodec {
    type Encode = Outgoing;
    type Decode = api::WatchRequest;
    type Encoder = WatchEncoder;
    type Decoder = tonic_prost::ProstDecoder<api::WatchRequest>;

    fn encoder(&mut self) -> Self::Encoder {
        WatchEncoder
    }

    fn decoder(&mut self) -> Self::Decoder {
        tonic_prost::ProstDecoder::default()
    }
}

impl tonic::codec::Encoder for WatchEncoder {
    type Item = Outgoing;
    type Error = Status;

    fn encode(&mut self, item: Outgoing, dst: &mut tonic::codec::EncodeBuf<'_>) -> Result<(), Status> {
        use prost::Message;
        use prost::bytes::BufMut;
        use prost::encoding::{WireType, encode_key, encode_varint};
        match item {
            Outgoing::Message(m) => {
                m.encode(dst).map_err(|e| Status::internal(format!("encoding a watch message: {e}")))
            }
            Outgoing::Event { revision, event } => {
                if revision != 0 {
                    prost::encoding::uint64::encode(1, &revision, dst);
                }
                encode_key(4, WireType::LengthDelimited, dst);
                encode_varint(event.len() as u64, dst);
                dst.put_slice(&event);
                Ok(())
            }
        }
    }

    /// Chunks of 8 KiB rather than tonic's 32 KiB: a backlog reaches the socket in
    /// smaller pieces and leaves less memory behind (about 2 MiB less with 10 watchers
    /// at startup), and at 100 watchers × 10,000 events/s the rate was the same.
    fn buffer_settings(&self) -> tonic::codec::BufferSettings {
        tonic::codec::BufferSettings::new(8 * 1024, 8 * 1024)
    }
}

/// The gRPC path of `Watch`.
const WATCH_PATH: &str = "/plegd.v1.PodLifecycle/Watch";

/// `plegd.v1.PodLifecycle` as served: `Watch` through [`WatchCodec`], so that each
/// published event is encoded once however many watchers send it; the other methods
/// through the generated server.
#[derive(Clone)]
pub struct LifecycleRoutes {
    svc: Arc<PodLifecycleService>,
    generated: PodLifecycleServer<PodLifecycleService>,
}

/// `Watch` as a tonic server-streaming method over [`WatchCodec`].
struct WatchMethod(Arc<PodLifecycleService>);

impl LifecycleRoutes {
    /// Routes for `svc`.
    pub fn new(svc: PodLifecycleService) -> Self {
        let svc = Arc::new(svc);
        let generated = PodLifecycleServer::from_arc(svc.clone()).max_decoding_message_size(MAX_REQUEST_BYTES);
        Self { svc, generated }
    }
}

impl tonic::server::NamedService for LifecycleRoutes {
    const NAME: &'static str = "plegd.v1.PodLifecycle";
}

impl tower::Service<tonic::codegen::http::Request<tonic::body::Body>> for LifecycleRoutes {
    type Response = tonic::codegen::http::Response<tonic::body::Body>;
    type Error = std::convert::Infallible;
    type Future = tonic::codegen::BoxFuture<Self::Response, Self::Error>;

    fn poll_ready(&mut self, _cx: &mut std::task::Context<'_>) -> std::task::Poll<Result<(), Self::Error>> {
        std::task::Poll::Ready(Ok(()))
    }

    fn call(&mut self, req: tonic::codegen::http::Request<tonic::body::Body>) -> Self::Future {
        if req.uri().path() != WATCH_PATH {
            return self.generated.call(req);
        }
        let method = WatchMethod(self.svc.clone());
        Box::pin(async move {
            let mut grpc =
                tonic::server::Grpc::new(WatchCodec).apply_max_message_size_config(Some(MAX_REQUEST_BYTES), None);
            Ok(grpc.server_streaming(method, req).await)
        })
    }
}

impl tonic::server::ServerStreamingService<api::WatchRequest> for WatchMethod {
    type Response = Outgoing;
    type ResponseStream = FeedStream;
    type Future = tonic::codegen::BoxFuture<Response<Self::ResponseStream>, Status>;

    fn call(&mut self, req: Request<api::WatchRequest>) -> Self::Future {
        let svc = self.0.clone();
        Box::pin(async move { Ok(Response::new(svc.open_watch(req.into_inner())?)) })
    }
}

/// Counts a Watch stream for as long as it lives.
struct ClientGuard(Gauge);

impl Drop for ClientGuard {
    fn drop(&mut self) {
        self.0.dec();
    }
}

#[tonic::async_trait]
impl PodLifecycle for PodLifecycleService {
    type WatchStream = WatchStream;

    /// Served by [`LifecycleRoutes`] with shared encodings; this path (the generated
    /// server mounted alone) decodes them again.
    async fn watch(&self, req: Request<api::WatchRequest>) -> Result<Response<WatchStream>, Status> {
        use futures_util::StreamExt;
        let stream = self.open_watch(req.into_inner())?.map(|m| m.and_then(Outgoing::into_message));
        Ok(Response::new(Box::pin(stream)))
    }

    async fn list_pods(&self, req: Request<api::ListPodsRequest>) -> Result<Response<api::ListPodsResponse>, Status> {
        let filter = to_filter(req.into_inner().filter, &[])?;
        let (pods, revision) = self.journal.list(&filter);
        Ok(Response::new(api::ListPodsResponse {
            pods: pods.iter().map(|p| pod_api(p, &self.cache)).collect(),
            revision,
            epoch: self.journal.epoch(),
        }))
    }

    async fn get_pod_status(
        &self,
        req: Request<api::GetPodStatusRequest>,
    ) -> Result<Response<api::GetPodStatusResponse>, Status> {
        let deadline = grpc_timeout(req.metadata()).unwrap_or(self.cfg.max_wait).min(self.cfg.max_wait);
        let r = req.into_inner();
        if r.pod_uid.is_empty() {
            return Err(RequestError::Missing("pod_uid").into());
        }
        let (entry, absent_at) = match r.min_timestamp {
            None => (self.cache.get(&r.pod_uid), None),
            Some(ts) => {
                let min_wall = crate::model::nanos_to_system(ts.seconds * 1_000_000_000 + i64::from(ts.nanos))
                    .unwrap_or(SystemTime::UNIX_EPOCH);
                let min = wall_to_instant(min_wall);
                match tokio::time::timeout(deadline, self.cache.get_newer_than(&r.pod_uid, min)).await {
                    Ok(fresh) => (fresh.entry, fresh.absent_at),
                    Err(_) => {
                        return Err(RequestError::NotNewer {
                            uid: r.pod_uid,
                            min: crate::model::rfc3339(min_wall),
                            waited: deadline,
                        }
                        .into());
                    }
                }
            }
        };
        // The time the answer is current to: the pod's read, or the last full relist if
        // that is later (a relist that found the pod unchanged vouches for it too).
        let global = self.cache.global_timestamp_wall();
        let timestamp = entry
            .as_ref()
            .map(|e| global.map_or(e.modified_wall, |g| g.max(e.modified_wall)))
            .or_else(|| absent_at.map(|at| SystemTime::now() - at.elapsed()))
            .or(global)
            .map(system_to_timestamp);
        let pod = entry.as_ref().map(|e| match &e.status {
            Some(s) => s.to_api(e.error.as_deref()),
            None => api::PodStatus {
                uid: r.pod_uid.clone(),
                error: e.error.as_deref().unwrap_or("").into(),
                ..Default::default()
            },
        });
        let not_found = entry.is_none() && (absent_at.is_some() || self.cache.global_timestamp().is_some());
        Ok(Response::new(api::GetPodStatusResponse { pod, timestamp, not_found }))
    }
}

/// A wall-clock time as a point on the monotonic clock.
fn wall_to_instant(t: SystemTime) -> Instant {
    let now_wall = SystemTime::now();
    let now = Instant::now();
    match now_wall.duration_since(t) {
        Ok(ago) => now.checked_sub(ago).unwrap_or(now - now.elapsed()),
        Err(ahead) => now + ahead.duration(),
    }
}

/// The call's deadline from its `grpc-timeout` header.
fn grpc_timeout(md: &tonic::metadata::MetadataMap) -> Option<Duration> {
    let v = md.get("grpc-timeout")?.to_str().ok()?;
    let (num, unit) = v.split_at(v.len().checked_sub(1)?);
    let n: u64 = num.parse().ok()?;
    Some(match unit {
        "H" => Duration::from_secs(n * 3600),
        "M" => Duration::from_secs(n * 60),
        "S" => Duration::from_secs(n),
        "m" => Duration::from_millis(n),
        "u" => Duration::from_micros(n),
        "n" => Duration::from_nanos(n),
        _ => return None,
    })
}

/// Whether a peer may connect.
pub fn peer_allowed(cfg: &ApiConfig, uid: u32, gid: u32) -> bool {
    (cfg.allow_uids.is_empty() && cfg.allow_gids.is_empty())
        || cfg.allow_uids.contains(&uid)
        || cfg.allow_gids.contains(&gid)
}

/// The HTTP/2 client preface every gRPC connection starts with.
const PREFACE: &[u8; 24] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

/// Why a connection was turned away before reaching the gRPC server.
fn screen_failure(cfg: &ApiConfig, conn: &UnixStream) -> Option<String> {
    match conn.peer_cred() {
        Ok(cred) if peer_allowed(cfg, cred.uid(), cred.gid()) => None,
        Ok(cred) => Some(format!("peer uid {} gid {} not in --allow-uid/--allow-gid", cred.uid(), cred.gid())),
        Err(e) => Some(format!("no peer credentials: {e}")),
    }
}

/// Reads the HTTP/2 preface (bounded in time, failing fast on anything else) and
/// returns the connection with the preface put back in front.
async fn read_preface(mut conn: UnixStream, timeout: Duration) -> Result<Prefaced, String> {
    use tokio::io::AsyncReadExt;
    let check = async {
        let mut buf = [0u8; 24];
        let mut n = 0;
        while n < buf.len() {
            let got = conn.read(&mut buf[n..]).await.map_err(|e| e.to_string())?;
            if got == 0 {
                return Err("closed before the HTTP/2 preface".to_string());
            }
            n += got;
            if buf[..n] != PREFACE[..n] {
                return Err("not an HTTP/2 connection".to_string());
            }
        }
        Ok(())
    };
    tokio::time::timeout(timeout, check).await.map_err(|_| format!("no HTTP/2 preface within {timeout:?}"))??;
    Ok(Prefaced { replayed: 0, inner: conn })
}

/// A connection whose HTTP/2 preface was read for screening; reads replay it first.
pub struct Prefaced {
    replayed: usize,
    inner: UnixStream,
}

impl tokio::io::AsyncRead for Prefaced {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &mut tokio::io::ReadBuf<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        if self.replayed < PREFACE.len() {
            let rest = &PREFACE[self.replayed..];
            let n = rest.len().min(buf.remaining());
            buf.put_slice(&rest[..n]);
            self.replayed += n;
            return std::task::Poll::Ready(Ok(()));
        }
        Pin::new(&mut self.inner).poll_read(cx, buf)
    }
}

impl tokio::io::AsyncWrite for Prefaced {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &[u8],
    ) -> std::task::Poll<std::io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut std::task::Context<'_>) -> std::task::Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(
        mut self: Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> std::task::Poll<std::io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }
}

impl tonic::transport::server::Connected for Prefaced {
    type ConnectInfo = <UnixStream as tonic::transport::server::Connected>::ConnectInfo;

    fn connect_info(&self) -> Self::ConnectInfo {
        self.inner.connect_info()
    }
}

/// Accepts connections and screens each in its own task (peer credentials, then the
/// HTTP/2 preface within the handshake timeout), so a stalled or hostile peer never
/// holds up others. Screened connections come out of the returned stream.
fn incoming(
    listener: UnixListener,
    cfg: Arc<ApiConfig>,
    metrics: ApiMetrics,
    beat: crate::liveness::Beat,
    shutdown: CancellationToken,
) -> impl Stream<Item = Result<Prefaced, std::io::Error>> {
    let (tx, rx) = mpsc::channel::<Result<Prefaced, std::io::Error>>(64);
    tokio::spawn(async move {
        // The API's liveness is its accept loop turning, quiet or busy.
        let mut ticks = crate::liveness::beat_timer();
        loop {
            let conn = tokio::select! {
                _ = shutdown.cancelled() => return,
                _ = tx.closed() => return,
                _ = ticks.tick() => {
                    beat.beat();
                    continue;
                }
                c = listener.accept() => c,
            };
            beat.beat();
            let conn = match conn {
                Ok((c, _)) => c,
                Err(e) => {
                    // EMFILE and friends: wait a little rather than spin.
                    tracing::warn!(error = %e, "accepting an API connection failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            };
            if let Some(why) = screen_failure(&cfg, &conn) {
                metrics.refused.inc();
                tracing::warn!(reason = %why, "refused an API connection");
                continue;
            }
            let (tx, timeout, metrics) = (tx.clone(), cfg.handshake_timeout, metrics.clone());
            tokio::spawn(async move {
                match read_preface(conn, timeout).await {
                    Ok(conn) => {
                        metrics.accepted.inc();
                        let _ = tx.send(Ok(conn)).await;
                    }
                    Err(why) => tracing::info!(reason = %why, "dropped an API connection"),
                }
            });
        }
    });
    tokio_stream::wrappers::ReceiverStream::new(rx)
}

/// Serves the API on `listener` until shutdown. `ready` reports readiness to the gRPC
/// health service every second.
pub async fn serve(
    listener: UnixListener,
    svc: PodLifecycleService,
    ready: impl Fn() -> bool + Send + 'static,
    beat: crate::liveness::Beat,
    shutdown: CancellationToken,
) -> Result<(), ApiError> {
    let (reporter, health) = tonic_health::server::health_reporter();
    let sd = shutdown.clone();
    let health_task = tokio::spawn(async move {
        let mut tick = tokio::time::interval(Duration::from_secs(1));
        loop {
            tokio::select! {
                _ = sd.cancelled() => return,
                _ = tick.tick() => {
                    let status = if ready() { tonic_health::ServingStatus::Serving } else { tonic_health::ServingStatus::NotServing };
                    reporter.set_service_status("", status).await;
                    reporter.set_service_status("plegd.v1.PodLifecycle", status).await;
                }
            }
        }
    });
    let cfg = svc.cfg.clone();
    let metrics = svc.metrics.clone();
    let res = tonic::transport::Server::builder()
        .http2_max_header_list_size(16 * 1024)
        .concurrency_limit_per_connection(256)
        .http2_keepalive_interval(Some(Duration::from_secs(30)))
        .http2_keepalive_timeout(Some(Duration::from_secs(10)))
        .add_service(health)
        .add_service(LifecycleRoutes::new(svc))
        .serve_with_incoming_shutdown(incoming(listener, cfg, metrics, beat, shutdown.clone()), shutdown.cancelled())
        .await;
    health_task.abort();
    Ok(res?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grpc_timeouts_parse() {
        let mut md = tonic::metadata::MetadataMap::new();
        md.insert("grpc-timeout", "1500m".parse().unwrap());
        assert_eq!(grpc_timeout(&md), Some(Duration::from_millis(1500)));
        md.insert("grpc-timeout", "2S".parse().unwrap());
        assert_eq!(grpc_timeout(&md), Some(Duration::from_secs(2)));
        md.insert("grpc-timeout", "x".parse().unwrap());
        assert_eq!(grpc_timeout(&md), None);
    }

    #[test]
    fn peers_are_allowed_by_uid_or_gid_and_everyone_without_lists() {
        let mut cfg = ApiConfig {
            socket: "/x".into(),
            allow_uids: vec![],
            allow_gids: vec![],
            bookmark_interval: Duration::from_secs(1),
            max_wait: Duration::from_secs(1),
            handshake_timeout: Duration::from_secs(1),
        };
        assert!(peer_allowed(&cfg, 1000, 1000));
        cfg.allow_uids = vec![0];
        cfg.allow_gids = vec![42];
        assert!(peer_allowed(&cfg, 0, 1));
        assert!(peer_allowed(&cfg, 7, 42));
        assert!(!peer_allowed(&cfg, 7, 7));
    }

    #[test]
    fn a_shared_event_encoding_stands_for_the_watch_event_it_carries() {
        use prost::Message;
        let event = api::LifecycleEvent {
            pod_uid: "u1".into(),
            container_id: "c1".into(),
            r#type: api::LifecycleEventType::ContainerStarted as i32,
            ..Default::default()
        };
        let out = Outgoing::Event { revision: 42, event: event.encode_to_vec().into() };
        let want = watch_event(42, api::watch_event::Kind::Event(event));
        assert_eq!(out.into_message().unwrap(), want);
        let broken = Outgoing::Event { revision: 1, event: vec![0x0a, 0x05, 0x61].into() };
        assert_eq!(broken.into_message().unwrap_err().code(), tonic::Code::Internal);
    }

    #[test]
    fn an_unknown_event_type_is_an_invalid_argument() {
        let e = to_filter(None, &[99]).unwrap_err();
        assert_eq!(Status::from(e).code(), tonic::Code::InvalidArgument);
    }
}

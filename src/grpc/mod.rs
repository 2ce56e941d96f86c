//! plegd's gRPC API on the `--listen` socket: `plegd.v1.PodLifecycle` (Watch, ListPods,
//! GetPodStatus) and `grpc.health.v1.Health`, with peer-credential checks per
//! connection and request size limits. The one mapping to `tonic::Status` lives here.
//!
//! - [`incoming`]: the socket's front door (screening each connection).
//! - [`watch`]: one Watch stream, pulled from the journal.
//! - [`wire`]: the served message type and the encode-once tail of published events.
//!
//! The service implements the generated `PodLifecycle` trait (served through
//! [`wire::Codec`], `Watch` yielding [`wire::WatchFrame`]s), so the generated server
//! routes every method; clients decode plain `WatchEvent`s.

pub mod connections;
pub mod health;
pub mod incoming;
pub mod served;
pub mod watch;
pub mod wire;

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::gauge::Gauge;
use tokio::net::UnixListener;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tonic::{Request, Response, Status};

use crate::cache::PodCache;
use crate::journal::{Filter, Journal};
use crate::lookup::LookupKey;
use crate::lookup::resolver::{ResolveError, Resolver};
use crate::model::event::EventType;
use crate::model::identity::Identities;
use crate::model::{PodStatus, system_to_timestamp};
use crate::proto::plegd as api;
use crate::selector::Selector;
use served::pod_lifecycle_server::{PodLifecycle, PodLifecycleServer};

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
    /// Watch streams one peer uid may hold open at once, or one process of uid 0 (0: no
    /// cap).
    pub max_watch_streams_per_uid: usize,
    /// Stalled Watch streams kept on the node, whatever their peers (0: no ceiling).
    pub max_stalled_watch_streams: usize,
    /// A stream whose client has not taken its next message for this long is stalled.
    pub stalled_after: Duration,
    /// The node's name, as `ListPods` and `synced` say it (`RunConfig` resolves it once).
    pub node_name: String,
}

/// A Watch stream whose transport has not asked for its next message for this long is
/// stalled: its client stopped reading (a live client reads within a bookmark, and an
/// idle stream is waiting for an event, not for its client).
pub const STALLED_AFTER: Duration = Duration::from_secs(10);

impl Default for ApiConfig {
    fn default() -> Self {
        Self {
            socket: PathBuf::from("/run/plegd/plegd.sock"),
            allow_uids: Vec::new(),
            allow_gids: Vec::new(),
            bookmark_interval: Duration::from_secs(30),
            max_wait: Duration::from_secs(300),
            handshake_timeout: Duration::from_secs(10),
            max_watch_streams_per_uid: 256,
            max_stalled_watch_streams: 64,
            stalled_after: STALLED_AFTER,
            node_name: crate::host::host_name().to_lowercase(),
        }
    }
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
    /// `plegd_api_watch_streams_refused_total`.
    pub watch_refused: Counter,
    /// `plegd_api_stalled_watch_connections_closed_total`.
    pub stalled_closed: Counter,
    /// `plegd_api_connections_over_cap_total`.
    pub over_cap: Counter,
    /// `plegd_api_idle_connections_closed_total`.
    pub idle_closed: Counter,
    /// `plegd_api_open_connections`.
    pub open: Gauge,
    /// `plegd_api_watch_ahead_bytes`.
    pub ahead: Gauge,
}

impl ApiMetrics {
    /// Creates the API's families and registers them in `registry` (the caller gives it
    /// the `plegd` prefix): the connections' under `api`, the open streams under `watch`,
    /// beside the journal's `watch_resets`.
    pub fn register(registry: &mut crate::metrics::Registry) -> Self {
        let api = Self::default();
        registry.sub_registry_with_prefix("watch").register("clients", "Open Watch streams", api.watch_clients.clone());
        let registry = registry.sub_registry_with_prefix("api");
        registry.register("connections", "API connections accepted", api.accepted.clone());
        registry.register(
            "connections_over_cap",
            "API connections closed at a cap: refused as they were accepted, or idle and displaced by a newer one",
            api.over_cap.clone(),
        );
        registry.register(
            "idle_connections_closed",
            "API connections closed after two minutes with no call in progress",
            api.idle_closed.clone(),
        );
        registry.register("open_connections", "API connections open", api.open.clone());
        registry.register(
            "watch_ahead_bytes",
            "Watch bytes handed to connections and not yet written to their sockets",
            api.ahead.clone(),
        );
        registry.register(
            "connections_refused",
            "API connections refused by the peer-credential allowlist",
            api.refused.clone(),
        );
        registry.register(
            "watch_streams_refused",
            "Watch streams refused because their peer uid held --max-watch-streams-per-uid open",
            api.watch_refused.clone(),
        );
        registry.register(
            "stalled_watch_connections_closed",
            "Connections closed because plegd held more than --max-stalled-watch-streams stalled Watch streams",
            api.stalled_closed.clone(),
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
    /// The descriptors for reflection do not decode (a build fault).
    #[error("server reflection: {0}")]
    Reflection(#[from] tonic_reflection::server::Error),
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
    /// A field holds what it cannot.
    #[error("{field}: {why}")]
    Invalid {
        /// The field.
        field: &'static str,
        /// What is wrong with it.
        why: String,
    },
    /// A timestamp whose nanoseconds are not within a second.
    #[error("min_timestamp.nanos {0} is not within 0..999999999")]
    Timestamp(i32),
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
        let status = match e {
            RequestError::NotNewer { .. } => Status::deadline_exceeded(e.to_string()),
            _ => Status::invalid_argument(e.to_string()),
        };
        capped(status)
    }
}

/// The most of an error message the API sends. A message travels in a response header
/// (`grpc-message`); one that quotes a huge key would pass the client's header limit,
/// which the client then reports as `RESOURCE_EXHAUSTED` instead of the real error.
pub const MAX_ERROR_MESSAGE: usize = 1024;

/// `status` with its message cut to [`MAX_ERROR_MESSAGE`] bytes (at a character's
/// boundary), saying how much was cut.
pub fn capped(status: Status) -> Status {
    let msg = status.message();
    if msg.len() <= MAX_ERROR_MESSAGE {
        return status;
    }
    let mut end = MAX_ERROR_MESSAGE - 64;
    while !msg.is_char_boundary(end) {
        end -= 1;
    }
    Status::new(status.code(), format!("{}… ({} more bytes not shown)", &msg[..end], msg.len() - end))
}

/// The PodLifecycle service.
#[derive(Clone)]
pub struct PodLifecycleService {
    journal: Journal,
    cache: PodCache,
    cfg: Arc<ApiConfig>,
    metrics: ApiMetrics,
    /// Published events' encodings, shared by every watcher.
    tail: Arc<wire::EncodedTail>,
    /// Every pod's identity, and the node's name.
    identities: Arc<Identities>,
    /// Where the service's own tasks (snapshot conversion, connection screening, the
    /// health reporter) run.
    tasks: TaskTracker,
    shutdown: CancellationToken,
    /// Resumes reading from disk at once; more wait their turn.
    replays: Arc<tokio::sync::Semaphore>,
    /// `GetContainer`'s answers.
    resolver: Option<Resolver>,
    /// Open Watch streams per peer uid.
    streams: watch::PeerStreams,
}

/// HTTP/2 streams one API connection may have open at once (calls past it wait for the
/// client's own HTTP/2 layer to open them).
pub const MAX_STREAMS_PER_CONNECTION: u32 = 256;

/// Resumes that read the journal's disk at once. Each holds a read-only connection
/// (128 KiB of page cache), a decoded page of records and a blocking thread while it
/// reads; the rest wait, their live events queued (a wait too long overflows their
/// buffer into a reset, never a gap).
pub const CONCURRENT_DISK_REPLAYS: usize = 4;

impl PodLifecycleService {
    /// A service over the journal and the cache.
    pub fn new(
        journal: Journal,
        cache: PodCache,
        cfg: ApiConfig,
        metrics: ApiMetrics,
        tasks: TaskTracker,
        shutdown: CancellationToken,
    ) -> Self {
        let identities = Arc::new(Identities::new(&cfg.node_name, Duration::ZERO));
        let tail = Arc::new(wire::EncodedTail::with(identities.clone()));
        let replays = Arc::new(tokio::sync::Semaphore::new(CONCURRENT_DISK_REPLAYS));
        Self {
            journal,
            cache,
            cfg: Arc::new(cfg),
            metrics,
            tail,
            identities,
            tasks,
            shutdown,
            replays,
            resolver: None,
            streams: Default::default(),
        }
    }

    /// Serves each pod's identity as `identities` holds it (by default: inferred, on
    /// `--node-name`).
    pub fn with_identities(mut self, identities: Arc<Identities>) -> Self {
        self.tail = Arc::new(wire::EncodedTail::with(identities.clone()));
        self.identities = identities;
        self
    }

    /// Answers `GetContainer` with `resolver`.
    pub fn with_resolver(mut self, resolver: Resolver) -> Self {
        self.resolver = Some(resolver);
        self
    }

    /// Waits (within `deadline`) until the journal holds the first relist's pods.
    async fn primed(&self, deadline: Duration) -> Result<(), Status> {
        let primed = self.journal.primed_within(deadline, &self.shutdown).await;
        primed.map_err(|u| Status::unavailable(u.why()))
    }
}

/// The lookup a `GetContainerRequest` asks for, validated.
pub fn lookup_key(req: api::GetContainerRequest) -> Result<LookupKey, RequestError> {
    use api::get_container_request::Key;
    let invalid = |field: &'static str, why: String| RequestError::Invalid { field, why };
    if req.at.is_some() && !matches!(req.key, Some(Key::PodIp(_))) {
        return Err(invalid("at", "applies to pod_ip only".into()));
    }
    match req.key {
        Some(Key::ContainerId(id)) if !id.is_empty() => Ok(LookupKey::Id(id)),
        Some(Key::CgroupId(cg)) if cg != 0 => Ok(LookupKey::CgroupId(cg)),
        Some(Key::Pid(pid)) if pid != 0 => Ok(LookupKey::Pid(pid)),
        Some(Key::LogPath(path)) => {
            crate::lookup::log_file(&path).map(LookupKey::LogPath).map_err(|why| invalid("log_path", why))
        }
        Some(Key::Container(r)) if r.pod_uid.is_empty() => Err(invalid("container.pod_uid", "is required".into())),
        Some(Key::Container(r)) if r.container_name.is_empty() => {
            Err(invalid("container.container_name", "is required".into()))
        }
        Some(Key::Container(r)) => {
            Ok(LookupKey::Attempt { pod_uid: r.pod_uid, name: r.container_name, attempt: r.attempt })
        }
        Some(Key::MntNs(inode)) if inode != 0 => Ok(LookupKey::MntNs(inode)),
        Some(Key::PidNs(inode)) if inode != 0 => Ok(LookupKey::PidNs(inode)),
        Some(Key::CgroupPath(path)) => {
            crate::lookup::cgroup_path(&path).map(LookupKey::CgroupPath).map_err(|why| invalid("cgroup_path", why))
        }
        Some(Key::PodIp(ip)) => {
            let ip =
                ip.trim().parse().map_err(|_| invalid("pod_ip", format!("{ip:?} is not an IPv4 or IPv6 address")))?;
            let at = match req.at {
                Some(t) if t.seconds < 0 || !(0..1_000_000_000).contains(&t.nanos) => {
                    return Err(invalid("at", "is not a time after 1970".into()));
                }
                Some(t) => Some(std::time::UNIX_EPOCH + Duration::new(t.seconds as u64, t.nanos as u32)),
                None => None,
            };
            Ok(LookupKey::PodIp { ip, at })
        }
        Some(Key::MntNs(_)) => Err(invalid("mnt_ns", "is 0: a namespace inode is never 0".into())),
        Some(Key::PidNs(_)) => Err(invalid("pid_ns", "is 0: a namespace inode is never 0".into())),
        _ => Err(RequestError::Missing(
            "one of container_id, cgroup_id, pid, log_path, container, mnt_ns, pid_ns (non-zero), cgroup_path and pod_ip",
        )),
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
            Ok(api::LifecycleEventType::PodUpdated) => EventType::PodUpdated,
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

fn pod_api(p: &PodStatus, ids: &Identities, cache: &PodCache) -> api::PodStatus {
    let err = cache.get(&p.uid).and_then(|e| e.error.clone());
    p.to_api(ids, err.as_deref())
}

#[tonic::async_trait]
impl PodLifecycle for PodLifecycleService {
    type WatchStream = watch::FeedStream;

    async fn watch(&self, req: Request<api::WatchRequest>) -> Result<Response<watch::FeedStream>, Status> {
        let peer = req.extensions().get::<incoming::Peer>().cloned();
        let holder =
            peer.as_ref().and_then(|p| Some(watch::Holder::of(p.uds.peer_cred?.uid(), p.uds.peer_cred?.pid(), p.id)));
        let flow = peer.as_ref().map(|p| p.flow.clone());
        let cut = peer.map(|p| p.cut);
        Ok(Response::new(watch::open(self, holder, cut, flow, req.into_inner())?))
    }

    async fn list_pods(&self, req: Request<api::ListPodsRequest>) -> Result<Response<api::ListPodsResponse>, Status> {
        let deadline = grpc_timeout(req.metadata()).unwrap_or(self.cfg.max_wait).min(self.cfg.max_wait);
        let filter = to_filter(req.into_inner().filter, &[])?;
        self.primed(deadline).await?;
        let (pods, revision) = self.journal.list(&filter);
        Ok(Response::new(api::ListPodsResponse {
            pods: pods.iter().map(|p| pod_api(p, &self.identities, &self.cache)).collect(),
            revision,
            epoch: self.journal.epoch(),
            node_name: self.identities.node(),
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
                let min_wall =
                    crate::clock::from_timestamp(ts.seconds, ts.nanos).ok_or(RequestError::Timestamp(ts.nanos))?;
                // plegd's clock: a timestamp it answered with maps back to its read
                // exactly, whatever the system clock did since.
                let min = crate::clock::instant_of(min_wall);
                let wait = async {
                    tokio::select! {
                        fresh = self.cache.get_newer_than(&r.pod_uid, min) => Some(fresh),
                        _ = self.shutdown.cancelled() => None,
                    }
                };
                match tokio::time::timeout(deadline, wait).await {
                    Ok(Some(fresh)) => (fresh.entry, fresh.absent_at),
                    Ok(None) => return Err(Status::unavailable("plegd is shutting down; ask the next one")),
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
            .or_else(|| absent_at.map(crate::clock::wall_of))
            .or(global)
            .map(system_to_timestamp);
        let pod = entry.as_ref().map(|e| match &e.status {
            Some(s) => s.to_api(&self.identities, e.error.as_deref()),
            None => api::PodStatus {
                uid: r.pod_uid.clone(),
                error: e.error.as_deref().unwrap_or("").into(),
                ..Default::default()
            },
        });
        let not_found = entry.is_none() && (absent_at.is_some() || self.cache.global_timestamp().is_some());
        Ok(Response::new(api::GetPodStatusResponse { pod, timestamp, not_found }))
    }

    async fn get_container(
        &self,
        req: Request<api::GetContainerRequest>,
    ) -> Result<Response<api::GetContainerResponse>, Status> {
        self.find_container(req).await.map(Response::new).map_err(capped)
    }
}

impl From<ResolveError> for Status {
    fn from(e: ResolveError) -> Self {
        match e {
            ResolveError::NotFound(why) => Status::not_found(why),
            ResolveError::Ambiguous(why) => Status::invalid_argument(why),
            ResolveError::Unavailable(why) => Status::unavailable(why),
        }
    }
}

impl PodLifecycleService {
    async fn find_container(
        &self,
        req: Request<api::GetContainerRequest>,
    ) -> Result<api::GetContainerResponse, Status> {
        let deadline = grpc_timeout(req.metadata()).unwrap_or(self.cfg.max_wait).min(self.cfg.max_wait);
        let key = lookup_key(req.into_inner())?;
        let Some(resolver) = &self.resolver else {
            return Err(Status::unimplemented("this server keeps no container lookup"));
        };
        let found = resolver.resolve(&key, deadline).await?;
        Ok(api::GetContainerResponse {
            pod: Some(pod_api(&found.pod, &self.identities, &self.cache)),
            container: Some(found.container.to_api()),
            removed: found.removed_at.is_some(),
            removed_at: found.removed_at.map(system_to_timestamp),
        })
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

/// Serves the API on `listener` until shutdown: `plegd.v1.PodLifecycle`,
/// `grpc.health.v1.Health` (answered from `ready` when asked) and server reflection.
pub async fn serve(
    listener: UnixListener,
    svc: PodLifecycleService,
    ready: crate::pleg::health::Readiness,
    beat: crate::liveness::Beat,
    shutdown: CancellationToken,
) -> Result<(), ApiError> {
    let health = health::ReadinessHealth::server(ready, shutdown.clone());
    let reflection = || {
        tonic_reflection::server::Builder::configure()
            .register_encoded_file_descriptor_set(crate::proto::PLEGD_DESCRIPTOR_SET)
            .register_encoded_file_descriptor_set(tonic_health::pb::FILE_DESCRIPTOR_SET)
    };
    let reflection_v1 = reflection().build_v1()?;
    let reflection_v1alpha = reflection().build_v1alpha()?;
    let (cfg, metrics, tasks) = (svc.cfg.clone(), svc.metrics.clone(), svc.tasks.clone());
    if cfg.max_stalled_watch_streams > 0 {
        tasks.spawn(svc.streams.clone().close_stalled(cfg.clone(), metrics.stalled_closed.clone(), shutdown.clone()));
    }
    let connections = connections::Connections::default();
    tasks.spawn(connections.clone().run_idle_closer(metrics.clone(), shutdown.clone()));
    let lifecycle = PodLifecycleServer::new(svc).max_decoding_message_size(MAX_REQUEST_BYTES);
    let incoming = incoming::incoming(listener, cfg, connections, metrics, beat, tasks, shutdown.clone());
    let res = tonic::transport::Server::builder()
        .http2_max_header_list_size(16 * 1024)
        .concurrency_limit_per_connection(MAX_STREAMS_PER_CONNECTION as usize)
        .http2_keepalive_interval(Some(Duration::from_secs(30)))
        .http2_keepalive_timeout(Some(Duration::from_secs(10)))
        .max_concurrent_streams(Some(MAX_STREAMS_PER_CONNECTION))
        .layer(tower::layer::layer_fn(incoming::Screened))
        .add_service(health)
        .add_service(reflection_v1)
        .add_service(reflection_v1alpha)
        .add_service(lifecycle)
        .serve_with_incoming_shutdown(incoming, shutdown.cancelled())
        .await;
    Ok(res?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_stalled_stream_ceiling_closes_the_leaking_holders_streams_first_and_never_a_read_one() {
        use std::sync::atomic::AtomicU64;
        use watch::Holder;
        let streams = watch::PeerStreams::default();
        let mut tracked = Vec::new();
        let mut add = |holder: Holder, handed: u64| {
            let cut = CancellationToken::new();
            tracked.push(streams.track(Arc::new(AtomicU64::new(handed)), cut.clone(), Some(holder)));
            cut
        };
        // A leaking agent with five stalled streams, a paused client with one (stalled
        // longest), and a client that reads (0: its transport is asking for more).
        let leak: Vec<_> = (0..5).map(|i| add(Holder::RootProcess(42), 10 + i)).collect();
        let paused = add(Holder::Uid(1000), 1);
        let reader = add(Holder::Uid(1001), 0);
        // Within the ceiling nothing is closed.
        assert_eq!(streams.close_stalled_once(6, Duration::ZERO), 0);
        assert_eq!(streams.close_stalled_once(2, Duration::ZERO), 4);
        assert_eq!(leak.iter().filter(|c| c.is_cancelled()).count(), 4, "the leak pays first");
        assert!(!leak[4].is_cancelled(), "its newest stall is the one kept");
        assert!(!paused.is_cancelled() && !reader.is_cancelled());
        // A stream that is read is never closed, whatever the ceiling.
        assert_eq!(streams.close_stalled_once(0, Duration::ZERO), 2);
        assert!(paused.is_cancelled() && !reader.is_cancelled());
        drop(tracked);
    }

    #[test]
    fn root_peers_whose_process_plegd_cannot_see_are_held_per_connection() {
        use watch::Holder;
        // In plegd's own PID namespace (the DaemonSet), every other pod's process is PID 0.
        assert_eq!(Holder::of(0, Some(0), 7), Holder::RootConnection(7));
        assert_eq!(Holder::of(0, None, 8), Holder::RootConnection(8));
        assert_ne!(Holder::of(0, Some(0), 7), Holder::of(0, Some(0), 8), "two agents are two holders");
        assert_eq!(Holder::of(0, Some(42), 7), Holder::RootProcess(42));
        assert_eq!(Holder::of(1000, Some(42), 7), Holder::Uid(1000));
        assert_eq!(Holder::of(1000, Some(0), 9), Holder::Uid(1000));
    }

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
        let mut cfg = ApiConfig::default();
        assert!(incoming::peer_allowed(&cfg, 1000, 1000, &[]));
        cfg.allow_uids = vec![0];
        cfg.allow_gids = vec![42];
        assert!(incoming::peer_allowed(&cfg, 0, 1, &[]));
        assert!(incoming::peer_allowed(&cfg, 7, 42, &[]));
        assert!(incoming::peer_allowed(&cfg, 7, 7, &[3, 42]), "a supplementary group counts");
        assert!(!incoming::peer_allowed(&cfg, 7, 7, &[3]));
    }

    #[test]
    fn an_unknown_event_type_is_an_invalid_argument() {
        let e = to_filter(None, &[99]).unwrap_err();
        assert_eq!(Status::from(e).code(), tonic::Code::InvalidArgument);
    }
}

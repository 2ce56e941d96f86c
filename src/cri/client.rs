//! The CRI client over a unix socket: per-call deadlines, a jittered backoff gate while
//! the runtime is unreachable, and per-call metrics.

use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures_util::StreamExt;
use tokio::time::Instant;
use tonic::transport::Channel;

use super::brief::Answer;
use super::metrics::{CriMetrics, MethodCode, MethodLabel};
use super::{CriError, EventStream, RuntimeService};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

use crate::backoff::Backoff;
use crate::proto::runtime as v1;
use crate::proto::runtime::runtime_service_client::RuntimeServiceClient;
use crate::uds::{UdsError, parse_unix_endpoint};

/// Which runtime plegd talks to, and how long a call may take.
#[derive(Clone, Debug)]
pub struct RuntimeConfig {
    /// The CRI endpoint, `unix:///…`.
    pub endpoint: String,
    /// Deadline of each CRI call.
    pub request_timeout: Duration,
}

impl RuntimeConfig {
    /// The client of this runtime, counting its calls in `metrics`.
    pub fn build(self, metrics: CriMetrics) -> Result<CriClient, UdsError> {
        let RuntimeConfig { endpoint, request_timeout } = self;
        CriClient::new(&endpoint, ClientOptions { timeout: request_timeout, ..Default::default() }, metrics)
    }
}

impl Default for RuntimeConfig {
    fn default() -> Self {
        Self { endpoint: "unix:///run/containerd/containerd.sock".into(), request_timeout: Duration::from_secs(2) }
    }
}

/// How the client treats calls.
#[derive(Clone, Debug)]
pub struct ClientOptions {
    /// Deadline of each unary call.
    pub timeout: Duration,
    /// First wait after the runtime was found unreachable.
    pub backoff_initial: Duration,
    /// Longest wait between dials while the runtime is unreachable.
    pub backoff_max: Duration,
}

impl Default for ClientOptions {
    fn default() -> Self {
        Self {
            timeout: Duration::from_secs(2),
            backoff_initial: Duration::from_millis(100),
            backoff_max: Duration::from_secs(5),
        }
    }
}

/// A CRI `RuntimeService` client on a unix socket. Cheap to clone; clones share the
/// connection and the reachability gate.
#[derive(Clone)]
pub struct CriClient {
    inner: RuntimeServiceClient<Channel>,
    channel: Channel,
    /// The socket, for the event reader's own connection.
    socket: std::path::PathBuf,
    endpoint: Arc<str>,
    opts: ClientOptions,
    gate: Arc<Mutex<Gate>>,
    metrics: CriMetrics,
}

/// While the runtime is unreachable, calls fail fast until `next_attempt`.
struct Gate {
    backoff: Backoff,
    next_attempt: Option<Instant>,
}

impl CriClient {
    /// A client for `endpoint` (`unix:///path`). Connects lazily: a runtime that is not
    /// up yet is not an error here; calls fail until it is.
    pub fn new(endpoint: &str, opts: ClientOptions, metrics: CriMetrics) -> Result<Self, UdsError> {
        let path = parse_unix_endpoint(endpoint)?;
        let channel = crate::uds::lazy_channel_windowed(path.clone(), RUNTIME_WINDOW);
        let inner = RuntimeServiceClient::new(channel.clone()).max_decoding_message_size(MAX_MESSAGE);
        let backoff = Backoff::new(opts.backoff_initial, opts.backoff_max);
        Ok(Self {
            inner,
            channel,
            socket: path,
            endpoint: Arc::from(endpoint),
            opts,
            gate: Arc::new(Mutex::new(Gate { backoff, next_attempt: None })),
            metrics,
        })
    }

    /// The raw tonic client, for callers that need calls outside the trait (the
    /// end-to-end harness creates pods with it).
    pub fn raw(&self) -> RuntimeServiceClient<Channel> {
        self.inner.clone()
    }

    async fn unary<T, F, Fut>(&self, method: &'static str, f: F) -> Result<T, CriError>
    where
        F: FnOnce(RuntimeServiceClient<Channel>, Duration) -> Fut,
        Fut: Future<Output = Result<tonic::Response<T>, tonic::Status>>,
    {
        if let Some(at) = self.gate.lock().expect("gate lock").next_attempt {
            let now = Instant::now();
            if now < at {
                self.record(method, "Unavailable", None);
                return Err(CriError::Unreachable { method, endpoint: self.endpoint.clone(), retry_in: at - now });
            }
        }
        let started = Instant::now();
        let out = tokio::time::timeout(self.opts.timeout, f(self.inner.clone(), self.opts.timeout)).await;
        let elapsed = started.elapsed();
        match out {
            Ok(Ok(resp)) => {
                self.record(method, "OK", Some(elapsed));
                let mut gate = self.gate.lock().expect("gate lock");
                if gate.next_attempt.take().is_some() {
                    tracing::info!(endpoint = %self.endpoint, "runtime reachable again");
                }
                gate.backoff.reset();
                Ok(resp.into_inner())
            }
            Ok(Err(status)) if is_deadline(&status) => {
                self.record(method, "DeadlineExceeded", Some(elapsed));
                Err(CriError::Timeout { method, endpoint: self.endpoint.clone(), timeout: self.opts.timeout })
            }
            Ok(Err(status)) => {
                self.record(method, code_name(status.code()), Some(elapsed));
                if status.code() == tonic::Code::Unavailable {
                    let mut gate = self.gate.lock().expect("gate lock");
                    let wait = gate.backoff.next_delay();
                    gate.next_attempt = Some(Instant::now() + wait);
                }
                Err(CriError::Call { method, endpoint: self.endpoint.clone(), status })
            }
            Err(_) => {
                self.record(method, "DeadlineExceeded", Some(elapsed));
                Err(CriError::Timeout { method, endpoint: self.endpoint.clone(), timeout: self.opts.timeout })
            }
        }
    }

    fn record(&self, method: &'static str, code: &str, elapsed: Option<Duration>) {
        let m = &self.metrics;
        m.requests.get_or_create(&MethodCode { method: method.to_owned(), code: code.to_owned() }).inc();
        if let Some(d) = elapsed {
            m.duration.get_or_create(&MethodLabel { method: method.to_owned() }).observe(d.as_secs_f64());
        }
    }
}

/// The largest response plegd decodes (a listing of tens of thousands of containers).
const MAX_MESSAGE: usize = 64 * 1024 * 1024;

/// HTTP/2 flow-control window of the runtime connection, per stream and in all: how
/// much of an answer may wait unread. A listing of 20,000 containers (about 10 MiB) then
/// takes about 40 window updates, each a few microseconds on a unix socket.
const RUNTIME_WINDOW: u32 = 256 * 1024;

/// Calls `path` (a unary method of `runtime.v1.RuntimeService`) with `req` and returns
/// the answer undecoded.
async fn call_raw<Req, S>(
    channel: S,
    path: &'static str,
    req: tonic::Request<Req>,
) -> Result<tonic::Response<prost::bytes::Bytes>, tonic::Status>
where
    Req: prost::Message + Send + Sync + 'static,
    S: tonic::client::GrpcService<tonic::body::Body>,
    S::ResponseBody: Send + 'static,
    <S::ResponseBody as http_body::Body>::Error: Into<tonic::codegen::StdError> + Send,
    S::Error: Into<tonic::codegen::StdError>,
{
    let mut grpc = tonic::client::Grpc::new(channel).max_decoding_message_size(MAX_MESSAGE);
    grpc.ready().await.map_err(|e| tonic::Status::unavailable(format!("runtime not ready: {}", e.into())))?;
    let path = tonic::codegen::http::uri::PathAndQuery::from_static(path);
    grpc.unary(req, path, super::brief::RawCodec::<Req>::default()).await
}

/// A listing call: its method (in metrics and errors) and its path.
struct ListingRpc {
    method: &'static str,
    path: &'static str,
}

impl ListingRpc {
    /// The call that answers `answer`.
    fn of(answer: Answer) -> Self {
        match answer {
            Answer::Sandboxes => Self { method: "ListPodSandbox", path: "/runtime.v1.RuntimeService/ListPodSandbox" },
            Answer::Containers => Self { method: "ListContainers", path: "/runtime.v1.RuntimeService/ListContainers" },
        }
    }
}

/// Lists everything for `answer` (no filter) through `channel`, the answer undecoded.
async fn call_listing<S>(
    channel: S,
    answer: Answer,
    timeout: Duration,
) -> Result<tonic::Response<prost::bytes::Bytes>, tonic::Status>
where
    S: tonic::client::GrpcService<tonic::body::Body>,
    S::ResponseBody: Send + 'static,
    <S::ResponseBody as http_body::Body>::Error: Into<tonic::codegen::StdError> + Send,
    S::Error: Into<tonic::codegen::StdError>,
{
    let path = ListingRpc::of(answer).path;
    match answer {
        Answer::Sandboxes => {
            call_raw(channel, path, request(v1::ListPodSandboxRequest { filter: None }, timeout)).await
        }
        Answer::Containers => {
            call_raw(channel, path, request(v1::ListContainersRequest { filter: None }, timeout)).await
        }
    }
}

/// Whether a status means the call's deadline passed: tonic reports the deadline it
/// enforces from `grpc-timeout` as `Cancelled: Timeout expired`.
fn is_deadline(status: &tonic::Status) -> bool {
    status.code() == tonic::Code::DeadlineExceeded
        || (status.code() == tonic::Code::Cancelled && status.message().contains("Timeout expired"))
}

fn request<T>(msg: T, timeout: Duration) -> tonic::Request<T> {
    let mut req = tonic::Request::new(msg);
    req.set_timeout(timeout);
    req
}

/// The canonical name of a gRPC code, as used in metric labels.
pub fn code_name(code: tonic::Code) -> &'static str {
    use tonic::Code::*;
    match code {
        Ok => "OK",
        Cancelled => "Canceled",
        Unknown => "Unknown",
        InvalidArgument => "InvalidArgument",
        DeadlineExceeded => "DeadlineExceeded",
        NotFound => "NotFound",
        AlreadyExists => "AlreadyExists",
        PermissionDenied => "PermissionDenied",
        ResourceExhausted => "ResourceExhausted",
        FailedPrecondition => "FailedPrecondition",
        Aborted => "Aborted",
        OutOfRange => "OutOfRange",
        Unimplemented => "Unimplemented",
        Internal => "Internal",
        Unavailable => "Unavailable",
        DataLoss => "DataLoss",
        Unauthenticated => "Unauthenticated",
    }
}

impl RuntimeService for CriClient {
    fn endpoint(&self) -> &str {
        &self.endpoint
    }

    async fn version(&self) -> Result<v1::VersionResponse, CriError> {
        self.unary("Version", |mut c, t| async move {
            c.version(request(v1::VersionRequest { version: "v1".into() }, t)).await
        })
        .await
    }

    async fn list_pod_sandboxes(&self, filter: Option<v1::PodSandboxFilter>) -> Result<Vec<v1::PodSandbox>, CriError> {
        let resp = self
            .unary("ListPodSandbox", |mut c, t| async move {
                c.list_pod_sandbox(request(v1::ListPodSandboxRequest { filter }, t)).await
            })
            .await?;
        Ok(resp.items)
    }

    async fn list_encoded(&self) -> Result<super::brief::EncodedListing, CriError> {
        let raw = |answer: Answer| {
            let channel = self.channel.clone();
            self.unary(ListingRpc::of(answer).method, move |_, t| call_listing(channel, answer, t))
        };
        let sandboxes = raw(Answer::Sandboxes).await?;
        let containers = raw(Answer::Containers).await?;
        Ok(super::brief::EncodedListing { sandboxes, containers })
    }

    async fn list_if_changed(
        &self,
        seed: u64,
        unchanged: u64,
    ) -> Result<Option<super::brief::EncodedListing>, CriError> {
        use super::brief::fingerprint_of;
        let hashed = |answer: Answer| {
            let hashing = super::hashed::Hashing { channel: self.channel.clone(), answer, seed, max_len: MAX_MESSAGE };
            self.unary(ListingRpc::of(answer).method, move |_, t| call_listing(hashing, answer, t))
        };
        let sandboxes = hashed(Answer::Sandboxes).await?;
        let containers = hashed(Answer::Containers).await?;
        let fingerprint = super::hashed::hash_of(&sandboxes)
            .zip(super::hashed::hash_of(&containers))
            .map(|(s, c)| fingerprint_of(seed, s, c));
        if fingerprint == Some(unchanged) {
            return Ok(None);
        }
        self.list_encoded().await.map(Some)
    }

    async fn pod_sandbox_status(&self, id: &str) -> Result<v1::PodSandboxStatus, CriError> {
        let id = id.to_owned();
        let resp = self
            .unary("PodSandboxStatus", |mut c, t| async move {
                c.pod_sandbox_status(request(v1::PodSandboxStatusRequest { pod_sandbox_id: id, verbose: false }, t))
                    .await
            })
            .await?;
        resp.status.ok_or(CriError::Incomplete {
            method: "PodSandboxStatus",
            endpoint: self.endpoint.clone(),
            field: "status",
        })
    }

    async fn list_containers(&self, filter: Option<v1::ContainerFilter>) -> Result<Vec<v1::Container>, CriError> {
        let resp = self
            .unary("ListContainers", |mut c, t| async move {
                c.list_containers(request(v1::ListContainersRequest { filter }, t)).await
            })
            .await?;
        Ok(resp.containers)
    }

    async fn container_status(&self, id: &str) -> Result<v1::ContainerStatus, CriError> {
        let id = id.to_owned();
        let resp = self
            .unary("ContainerStatus", |mut c, t| async move {
                c.container_status(request(v1::ContainerStatusRequest { container_id: id, verbose: false }, t)).await
            })
            .await?;
        resp.status.ok_or(CriError::Incomplete {
            method: "ContainerStatus",
            endpoint: self.endpoint.clone(),
            field: "status",
        })
    }

    async fn container_status_verbose(
        &self,
        id: &str,
    ) -> Result<(v1::ContainerStatus, super::verbose::ContainerVerbose), CriError> {
        let id = id.to_owned();
        let resp = self
            .unary("ContainerStatus", |mut c, t| async move {
                c.container_status(request(v1::ContainerStatusRequest { container_id: id, verbose: true }, t)).await
            })
            .await?;
        let verbose = super::verbose::ContainerVerbose::parse(&resp.info);
        let status = resp.status.ok_or(CriError::Incomplete {
            method: "ContainerStatus",
            endpoint: self.endpoint.clone(),
            field: "status",
        })?;
        Ok((status, verbose))
    }

    async fn pod_sandbox_status_verbose(
        &self,
        id: &str,
    ) -> Result<(v1::PodSandboxStatus, super::verbose::SandboxVerbose), CriError> {
        let id = id.to_owned();
        let resp = self
            .unary("PodSandboxStatus", |mut c, t| async move {
                c.pod_sandbox_status(request(v1::PodSandboxStatusRequest { pod_sandbox_id: id, verbose: true }, t))
                    .await
            })
            .await?;
        let verbose = super::verbose::SandboxVerbose::parse(&resp.info);
        let status = resp.status.ok_or(CriError::Incomplete {
            method: "PodSandboxStatus",
            endpoint: self.endpoint.clone(),
            field: "status",
        })?;
        Ok((status, verbose))
    }

    /// Opens the runtime's event stream on a reader of its own: a thread with its own
    /// connection and a single-threaded runtime that only reads the socket and queues
    /// what it reads, so neither plegd's other work nor a stalled consumer ever makes
    /// the runtime wait (containerd 2.x blocks its own CRI calls while a subscriber's
    /// queue of 100 is full). When plegd falls behind — more than
    /// [`EVENTS_BEHIND_LIMIT`] events wait, or events wait and nothing was taken for
    /// [`STALLED_AFTER`] — the reader closes the stream and ends it with
    /// [`CriError::FellBehind`]: plegd relists instead of falling further behind. Errors of the call itself (for
    /// instance `Unimplemented`) arrive as the stream's first item, because containerd
    /// sends its headers only with the first event. Dropping the stream ends the call
    /// and the thread.
    async fn container_events(&self) -> Result<EventStream, CriError> {
        let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
        let backlog = Arc::new(Backlog {
            queued: AtomicUsize::new(0),
            progress_ms: AtomicU64::new(0),
            since: std::time::Instant::now(),
        });
        let reader = EventReader {
            socket: self.socket.clone(),
            endpoint: self.endpoint.clone(),
            metrics: self.metrics.clone(),
            backlog: backlog.clone(),
            tx,
        };
        std::thread::Builder::new().name("cri-events".into()).spawn(move || reader.run()).map_err(|e| {
            CriError::Call {
                method: "GetContainerEvents",
                endpoint: self.endpoint.clone(),
                status: tonic::Status::internal(format!("cannot start the event reader thread: {e}")),
            }
        })?;
        let taken = tokio_stream::wrappers::UnboundedReceiverStream::new(rx).map(move |item| {
            backlog.took();
            item
        });
        Ok(taken.boxed())
    }

    async fn remove_container(&self, id: &str) -> Result<(), CriError> {
        let id = id.to_owned();
        self.unary("RemoveContainer", |mut c, t| async move {
            c.remove_container(request(v1::RemoveContainerRequest { container_id: id }, t)).await
        })
        .await?;
        Ok(())
    }
}

/// Events read from the runtime and not yet taken by plegd beyond which the reader
/// closes the stream (a few MiB to tens of MiB of events): plegd relists instead.
pub const EVENTS_BEHIND_LIMIT: usize = 16 * 1024;

/// A consumer that took nothing for this long while events wait has stalled: the
/// reader closes the stream at the next event rather than queue ever more. A busy
/// consumer that keeps taking (a burst of thousands) is not behind.
pub const STALLED_AFTER: Duration = Duration::from_secs(5);

/// What the reader and the consumer share: how many events wait, and since when the
/// consumer has had something to take without taking it.
struct Backlog {
    queued: AtomicUsize,
    /// Milliseconds since `since` at the consumer's last take, or when an event began
    /// to wait in an empty queue, whichever is later: a consumer with nothing to take
    /// is waiting, not stalled.
    progress_ms: AtomicU64,
    since: std::time::Instant,
}

impl Backlog {
    fn now_ms(&self) -> u64 {
        self.since.elapsed().as_millis() as u64
    }

    fn took(&self) {
        self.queued.fetch_sub(1, Ordering::Relaxed);
        self.progress_ms.store(self.now_ms(), Ordering::Relaxed);
    }

    /// Counts one more waiting event; `Some(queued)` when the consumer is behind.
    fn push(&self) -> Option<usize> {
        let now = self.now_ms();
        let queued = self.queued.fetch_add(1, Ordering::Relaxed);
        if queued == 0 {
            // The first event to wait starts the stall clock.
            self.progress_ms.store(now, Ordering::Relaxed);
            return None;
        }
        let stalled = now.saturating_sub(self.progress_ms.load(Ordering::Relaxed)) > STALLED_AFTER.as_millis() as u64;
        (queued >= EVENTS_BEHIND_LIMIT || stalled).then_some(queued)
    }
}

/// The event stream's reader, on a thread of its own.
struct EventReader {
    socket: std::path::PathBuf,
    endpoint: Arc<str>,
    metrics: CriMetrics,
    backlog: Arc<Backlog>,
    tx: tokio::sync::mpsc::UnboundedSender<Result<v1::ContainerEventResponse, CriError>>,
}

impl EventReader {
    fn run(self) {
        let rt = match tokio::runtime::Builder::new_current_thread().enable_all().build() {
            Ok(rt) => rt,
            Err(e) => {
                let status = tonic::Status::internal(format!("cannot start the event reader's runtime: {e}"));
                let _ = self.tx.send(Err(self.err(status)));
                return;
            }
        };
        rt.block_on(self.read());
    }

    fn err(&self, status: tonic::Status) -> CriError {
        CriError::Call { method: "GetContainerEvents", endpoint: self.endpoint.clone(), status }
    }

    /// Reads until the consumer goes away, the call ends, or the consumer falls behind.
    async fn read(self) {
        // Its own connection: the socket is read on this thread whatever plegd's
        // worker threads are doing.
        let channel = crate::uds::lazy_channel(self.socket.clone());
        let mut client = RuntimeServiceClient::new(channel).max_decoding_message_size(MAX_MESSAGE);
        let opened = tokio::select! {
            _ = self.tx.closed() => return,
            res = client.get_container_events(v1::GetEventsRequest {}) => res,
        };
        let m = &self.metrics;
        let code = opened.as_ref().map(|_| tonic::Code::Ok).unwrap_or_else(|s| s.code());
        m.requests
            .get_or_create(&MethodCode { method: "GetContainerEvents".into(), code: code_name(code).into() })
            .inc();
        let mut streaming = match opened {
            Ok(resp) => resp.into_inner(),
            Err(status) => {
                let _ = self.tx.send(Err(self.err(status)));
                return;
            }
        };
        loop {
            let msg = tokio::select! {
                _ = self.tx.closed() => return,
                msg = streaming.message() => msg,
            };
            let item = match msg {
                Ok(Some(ev)) => {
                    if let Some(queued) = self.backlog.push() {
                        // Dropping `streaming` below ends the call: the runtime stops
                        // queueing for plegd at once.
                        let _ = self.tx.send(Err(CriError::FellBehind { endpoint: self.endpoint.clone(), queued }));
                        return;
                    }
                    Ok(ev)
                }
                Ok(None) => return,
                Err(status) => Err(self.err(status)),
            };
            let last = item.is_err();
            if self.tx.send(item).is_err() || last {
                return;
            }
        }
    }
}

#[cfg(test)]
mod backlog_tests {
    use super::*;

    fn backlog(idle: Duration) -> Backlog {
        // The consumer last made progress at `since` (0 ms); now is `idle` later.
        Backlog { queued: AtomicUsize::new(0), progress_ms: AtomicU64::new(0), since: std::time::Instant::now() - idle }
    }

    #[test]
    fn a_consumer_that_keeps_taking_is_behind_only_past_the_limit() {
        let b = backlog(Duration::ZERO);
        for _ in 0..EVENTS_BEHIND_LIMIT {
            assert_eq!(b.push(), None);
        }
        assert_eq!(b.push(), Some(EVENTS_BEHIND_LIMIT), "the limit bounds the memory of a busy consumer");
        b.took();
        assert_eq!(b.queued.load(Ordering::Relaxed), EVENTS_BEHIND_LIMIT);
    }

    #[test]
    fn a_consumer_that_took_nothing_for_the_stall_limit_is_behind_at_the_next_event() {
        // One event has waited since 0 ms; now is past the limit.
        let b = backlog(STALLED_AFTER + Duration::from_millis(100));
        b.queued.store(1, Ordering::Relaxed);
        assert_eq!(b.push(), Some(1), "an event waited and nothing was taken for longer than the limit");
        let fresh = backlog(STALLED_AFTER - Duration::from_secs(1));
        fresh.queued.store(1, Ordering::Relaxed);
        assert_eq!(fresh.push(), None, "within the limit");
    }

    /// On a quiet node the first burst of events must not close the stream as "fell
    /// behind": a stall is measured from when events began to wait, not from the last
    /// take minutes before.
    #[test]
    fn a_burst_after_a_long_quiet_is_not_a_stall() {
        let b = backlog(Duration::from_secs(3600));
        assert_eq!(b.push(), None, "nothing was waiting: an idle consumer is not behind");
        for _ in 0..100 {
            assert_eq!(b.push(), None, "the burst has waited for no time at all");
        }
        b.took();
        assert_eq!(b.push(), None);
    }
}

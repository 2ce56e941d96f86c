//! plegd's two HTTP listeners. `--admin-addr` serves what Prometheus and the kubelet
//! need — metrics, liveness (every long-running loop turning), PLEG health and
//! readiness — and nothing that tells who runs on the node: the DaemonSet binds it on
//! the pod address. `--debug-addr`, loopback-only by default, serves the debug API (the
//! cache and the runtime afresh, pod timelines, the sync loop's history, the work
//! queues, resync requests), with what makes plegd work rate-limited.
//!
//! Both bound what a client can hold: a connection cap (further connections are
//! closed at once and counted), a deadline to send a request's headers, a bounded
//! header buffer, and a connection age after which keep-alive ends.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

use crate::metrics::Registry;
use crate::pleg::health::{PlegHealth, Readiness};

/// Errors of the admin server.
#[derive(Debug, thiserror::Error)]
pub enum AdminError {
    /// The address could not be bound.
    #[error("cannot listen on {addr}: {source}")]
    Bind {
        /// The address.
        addr: SocketAddr,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
    /// Serving failed.
    #[error("admin server failed: {0}")]
    Serve(#[source] std::io::Error),
}

/// Where the HTTP listeners are.
#[derive(Clone, Debug)]
pub struct AdminConfig {
    /// Metrics and health, for Prometheus and the kubelet's probes.
    pub addr: SocketAddr,
    /// The debug API and the pages.
    pub debug_addr: SocketAddr,
}

impl Default for AdminConfig {
    fn default() -> Self {
        Self { addr: SocketAddr::from(([127, 0, 0, 1], 9477)), debug_addr: SocketAddr::from(([127, 0, 0, 1], 9478)) }
    }
}

impl AdminConfig {
    /// Binds the admin listener (metrics, health) and the debug listener (pages, views)
    /// on `state`, each counting the connections it refuses in `metrics`.
    pub async fn build(
        self,
        state: Arc<AdminState>,
        metrics: &HttpMetrics,
    ) -> Result<(HttpServer, HttpServer), AdminError> {
        let AdminConfig { addr, debug_addr } = self;
        let admin = HttpServer::bind(addr, admin_router(state.clone()), HttpLimits::ADMIN)
            .await?
            .counting_refusals(metrics.refused_on("admin"));
        let debug = HttpServer::bind(debug_addr, debug_router(state), HttpLimits::DEBUG)
            .await?
            .counting_refusals(metrics.refused_on("debug"));
        Ok((admin, debug))
    }
}

/// A debug query parameter that does not parse.
#[derive(Debug, thiserror::Error)]
pub enum QueryError {
    /// Not a time.
    #[error("invalid {name}={value:?}: {source} (expected RFC 3339, e.g. 2026-11-21T15:04:05Z)")]
    Time {
        /// The parameter.
        name: String,
        /// Its value.
        value: String,
        /// Why.
        source: humantime::TimestampError,
    },
    /// Not a count.
    #[error("invalid {name}={value:?}: expected a non-negative whole number")]
    Number {
        /// The parameter.
        name: String,
        /// Its value.
        value: String,
    },
    /// Not one of the choices.
    #[error("invalid {name}={value:?}: expected {expected}")]
    Choice {
        /// The parameter.
        name: String,
        /// Its value.
        value: String,
        /// The choices.
        expected: &'static str,
    },
    /// A parameter the endpoint does not take.
    #[error("unknown parameter {name:?} ({known})")]
    Unknown {
        /// The parameter.
        name: String,
        /// The ones it takes.
        known: &'static str,
    },
}

/// What the admin handlers read.
#[derive(Clone)]
pub struct AdminState {
    /// Metrics to expose.
    pub metrics: Arc<Registry>,
    /// PLEG health.
    pub health: PlegHealth,
    /// Relist loop liveness.
    pub liveness: crate::liveness::Liveness,
    /// Readiness.
    pub readiness: Readiness,
    /// The sync loop's history.
    pub history: Arc<std::sync::Mutex<crate::syncloop::History>>,
    /// The reconcilers' queues.
    pub queues: Vec<crate::workqueue::WorkQueue<String>>,
    /// The sync loop's inputs.
    pub sync: crate::syncloop::SyncLoopHandle,
    /// The relister.
    pub pleg: crate::pleg::generic::PlegHandle,
    /// The pod-status cache.
    pub cache: crate::cache::PodCache,
    /// Every pod's identity, and where it comes from (`/readyz` says).
    pub identities: Arc<crate::model::identity::Identities>,
    /// The journal (timelines).
    pub journal: crate::journal::Journal,
    /// Reads the runtime afresh for `?view=runtime`.
    pub runtime_view: RuntimeView,
    /// Paces the debug requests that make plegd work.
    pub work: Arc<WorkLimiter>,
    /// plegd's starts and the outages it saw (the pod pages draw them).
    pub runlog: crate::runlog::RunLog,
}

/// Reads every pod from the runtime afresh.
pub type RuntimeView = Arc<
    dyn Fn()
            -> std::pin::Pin<Box<dyn std::future::Future<Output = Result<Vec<crate::model::PodStatus>, String>> + Send>>
        + Send
        + Sync,
>;

/// The listeners' metrics.
#[derive(Clone, Default)]
pub struct HttpMetrics {
    /// `plegd_http_connections_refused_total{listener}`: connections closed at a cap
    /// (refused, or displaced).
    pub refused:
        prometheus_client::metrics::family::Family<ListenerLabel, prometheus_client::metrics::counter::Counter>,
}

/// Which listener.
#[derive(Clone, Debug, Hash, PartialEq, Eq, prometheus_client::encoding::EncodeLabelSet)]
pub struct ListenerLabel {
    /// `admin` or `debug`.
    pub listener: String,
}

impl HttpMetrics {
    /// Creates the listeners' families and registers them in `registry` (the caller
    /// gives it the `http` prefix).
    pub fn register(registry: &mut Registry) -> Self {
        let m = Self::default();
        registry.register(
            "connections_refused",
            "HTTP connections closed at a cap: refused as they were accepted, or idle and displaced by a newer one",
            m.refused.clone(),
        );
        m
    }

    /// The refusal counter of `listener`.
    pub fn refused_on(&self, listener: &str) -> prometheus_client::metrics::counter::Counter {
        self.refused.get_or_create(&ListenerLabel { listener: listener.into() }).clone()
    }
}

/// What one HTTP listener lets a client hold.
#[derive(Clone, Copy, Debug)]
pub struct HttpLimits {
    /// Connections open at once; more are closed as they are accepted.
    pub max_connections: usize,
    /// Connections open at once from one address: one neighbour cannot take every slot
    /// and lock the kubelet's probes and Prometheus out.
    pub per_source: usize,
    /// A request's headers must arrive within this long.
    pub header_read_timeout: Duration,
    /// After this long a connection's keep-alive ends (its request in flight finishes).
    pub max_connection_age: Duration,
}

impl HttpLimits {
    /// The metrics and health listener: Prometheus and the kubelet's probes use a
    /// handful of connections; 256 idle ones cost ≈ 5 MiB.
    pub const ADMIN: Self = Self {
        max_connections: 256,
        per_source: 16,
        header_read_timeout: Duration::from_secs(5),
        max_connection_age: Duration::from_secs(120),
    };
    /// The debug listener: a person and a script or two.
    pub const DEBUG: Self = Self {
        max_connections: 32,
        per_source: 16,
        header_read_timeout: Duration::from_secs(5),
        max_connection_age: Duration::from_secs(300),
    };
}

/// The largest request head a listener buffers (hyper's smallest allowed buffer).
const MAX_HEAD: usize = 16 << 10;

/// An HTTP listener, bound and ready to serve one router within its limits.
pub struct HttpServer {
    listener: TcpListener,
    router: Router,
    limits: HttpLimits,
    refused: prometheus_client::metrics::counter::Counter,
}

impl HttpServer {
    /// Binds `addr` for `router`.
    pub async fn bind(addr: SocketAddr, router: Router, limits: HttpLimits) -> Result<Self, AdminError> {
        let listener = TcpListener::bind(addr).await.map_err(|source| AdminError::Bind { addr, source })?;
        Ok(Self { listener, router, limits, refused: Default::default() })
    }

    /// Counts connections refused at the cap in `refused`.
    pub fn counting_refusals(mut self, refused: prometheus_client::metrics::counter::Counter) -> Self {
        self.refused = refused;
        self
    }

    /// The bound address (useful with port 0).
    pub fn local_addr(&self) -> SocketAddr {
        self.listener.local_addr().expect("bound listener has an address")
    }

    /// Serves until shutdown: one task per connection, at most `max_connections`, at
    /// most `per_source` from one address. A connection over either cap takes the place
    /// of the oldest one (of that address, or of all) that is not running a request — an
    /// idle keep-alive or one still sending its headers — so a user on the node that
    /// holds connections open never locks the kubelet's probes out, which come from the
    /// node's own address like every host process. Only when every connection it could
    /// displace is running a request is a new one closed.
    pub async fn run(self, shutdown: CancellationToken) -> Result<(), AdminError> {
        let Self { listener, router, limits, refused } = self;
        let open = Open::default();
        let conns = tokio_util::task::TaskTracker::new();
        loop {
            let accepted = tokio::select! {
                _ = shutdown.cancelled() => break,
                a = listener.accept() => a,
            };
            let (stream, peer) = match accepted {
                Ok(a) => a,
                Err(e) => {
                    // EMFILE and friends: wait a little rather than spin.
                    tracing::warn!(error = %e, "accepting an HTTP connection failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            };
            let Some((slot, displaced)) = open.admit(peer.ip(), &limits) else {
                refused.inc();
                tracing::debug!(%peer, "HTTP connection refused: every connection it could displace is busy");
                continue;
            };
            if displaced {
                refused.inc();
            }
            let (router, shutdown) = (router.clone(), shutdown.clone());
            conns.spawn(async move {
                serve_connection(stream, router, limits, slot, shutdown).await;
            });
        }
        conns.close();
        let _ = tokio::time::timeout(Duration::from_secs(2), conns.wait()).await;
        Ok(())
    }
}

/// The listener's open connections, oldest first.
#[derive(Clone, Default)]
struct Open(Arc<std::sync::Mutex<Vec<Arc<Conn>>>>);

/// One open connection as the caps see it.
struct Conn {
    ip: std::net::IpAddr,
    /// A request is being answered on it.
    busy: std::sync::atomic::AtomicBool,
    /// Closes it to make room for a newer one.
    displaced: CancellationToken,
}

/// A connection's place among the open ones, given back when dropped.
struct ConnSlot {
    open: Open,
    conn: Arc<Conn>,
}

impl Open {
    /// A place for a connection from `ip`, displacing the oldest idle one where a cap is
    /// reached (then `true`); `None` when none can be displaced.
    fn admit(&self, ip: std::net::IpAddr, limits: &HttpLimits) -> Option<(ConnSlot, bool)> {
        use std::sync::atomic::Ordering::Relaxed;
        let mut open = self.0.lock().expect("open connections lock");
        // Those already displaced are on their way out.
        let counted = |c: &&Arc<Conn>| !c.displaced.is_cancelled();
        let same = |c: &&Arc<Conn>| c.ip == ip;
        let idle = |c: &&Arc<Conn>| !c.busy.load(Relaxed);
        let from_ip = open.iter().filter(counted).filter(same).count();
        let all = open.iter().filter(counted).count();
        let victim = if from_ip >= limits.per_source {
            Some(open.iter().filter(counted).filter(same).find(idle)?)
        } else if all >= limits.max_connections {
            Some(open.iter().filter(counted).find(idle)?)
        } else {
            None
        };
        let displaced = victim.inspect(|v| v.displaced.cancel()).is_some();
        let conn = Arc::new(Conn { ip, busy: Default::default(), displaced: CancellationToken::new() });
        open.push(conn.clone());
        Some((ConnSlot { open: self.clone(), conn }, displaced))
    }
}

impl Drop for ConnSlot {
    fn drop(&mut self) {
        let mut open = self.open.0.lock().expect("open connections lock");
        open.retain(|c| !Arc::ptr_eq(c, &self.conn));
    }
}

/// Serves one connection: HTTP/1.1 with a header deadline and a bounded buffer, ended
/// gracefully at its age limit or at shutdown.
async fn serve_connection(
    stream: tokio::net::TcpStream,
    router: Router,
    limits: HttpLimits,
    slot: ConnSlot,
    shutdown: CancellationToken,
) {
    use std::sync::atomic::Ordering::Relaxed;
    let conn_state = slot.conn.clone();
    let svc = tower::service_fn(move |req: axum::http::Request<hyper::body::Incoming>| {
        let (router, conn) = (router.clone(), conn_state.clone());
        async move {
            use tower::ServiceExt;
            conn.busy.store(true, Relaxed);
            let answered = router.oneshot(req).await;
            conn.busy.store(false, Relaxed);
            answered
        }
    });
    let svc = hyper_util::service::TowerToHyperService::new(svc);
    let mut builder = hyper::server::conn::http1::Builder::new();
    builder
        .timer(hyper_util::rt::TokioTimer::new())
        .header_read_timeout(limits.header_read_timeout)
        .max_buf_size(MAX_HEAD);
    let conn = builder.serve_connection(hyper_util::rt::TokioIo::new(stream), svc);
    let mut conn = std::pin::pin!(conn);
    tokio::select! {
        _ = conn.as_mut() => return,
        // A newer connection took its place while it sat idle: closed at once.
        _ = slot.conn.displaced.cancelled() => return,
        _ = tokio::time::sleep(limits.max_connection_age) => {}
        _ = shutdown.cancelled() => {}
    }
    conn.as_mut().graceful_shutdown();
    let _ = tokio::time::timeout(limits.header_read_timeout, conn).await;
}

/// The metrics and health router (`--admin-addr`).
pub fn admin_router(state: Arc<AdminState>) -> Router {
    Router::new()
        .route("/metrics", get(metrics))
        .route("/livez", get(livez))
        .route("/healthz", get(healthz))
        .route("/readyz", get(readyz))
        .fallback(admin_not_found)
        .with_state(state)
}

/// The debug router (`--debug-addr`): the debug API and the pages for people.
pub fn debug_router(state: Arc<AdminState>) -> Router {
    let pages = crate::pages::PagesState {
        cache: state.cache.clone(),
        journal: state.journal.clone(),
        runlog: state.runlog.clone(),
    };
    Router::new()
        .route("/debug/pods", get(debug_pods))
        .route("/debug/pods/{uid}/timeline", get(debug_timeline))
        .route("/debug/events", get(debug_events))
        .route("/debug/queue", get(debug_queue))
        .route("/debug/resync", axum::routing::post(debug_resync))
        .fallback(debug_not_found)
        .with_state(state)
        .merge(crate::pages::router(pages))
}

async fn admin_not_found(uri: axum::http::Uri) -> Response {
    let paths = "/metrics /livez /healthz /readyz";
    let more = if uri.path().starts_with("/debug") || uri.path() == "/" || uri.path().starts_with("/pods/") {
        " (the debug API and the pages are on --debug-addr)"
    } else {
        ""
    };
    (StatusCode::NOT_FOUND, format!("no such path {}; try {paths}{more}\n", uri.path())).into_response()
}

async fn debug_not_found(uri: axum::http::Uri) -> Response {
    let paths = "/ /pods/{uid} /debug/pods /debug/pods/{uid}/timeline /debug/events /debug/queue POST:/debug/resync";
    (StatusCode::NOT_FOUND, format!("no such path {}; try {paths}\n", uri.path())).into_response()
}

/// Requests that make plegd work (a resync, a read of the whole runtime) at most this
/// often; more get 429 with `Retry-After`.
const WORK_EVERY: Duration = Duration::from_secs(1);

/// When work requested over the debug API last ran, per kind.
#[derive(Default)]
pub struct WorkLimiter {
    last: std::sync::Mutex<std::collections::HashMap<&'static str, tokio::time::Instant>>,
}

impl WorkLimiter {
    /// Whether `kind` may run now (and notes that it does).
    fn admit(&self, kind: &'static str) -> bool {
        let now = tokio::time::Instant::now();
        let mut last = self.last.lock().expect("limiter lock");
        match last.get(kind) {
            Some(t) if now.duration_since(*t) < WORK_EVERY => false,
            _ => {
                last.insert(kind, now);
                true
            }
        }
    }
}

fn too_many(what: &str) -> Response {
    (
        StatusCode::TOO_MANY_REQUESTS,
        [(header::RETRY_AFTER, "1")],
        format!("{what} runs at most once a second; try again shortly\n"),
    )
        .into_response()
}

fn pod_json(p: &crate::model::PodStatus, error: Option<&str>) -> serde_json::Value {
    let mut v = serde_json::to_value(p).unwrap_or_default();
    if let Some(o) = v.as_object_mut() {
        o.insert("error".into(), error.map_or(serde_json::Value::Null, |e| e.into()));
    }
    v
}

async fn debug_pods(
    State(s): State<Arc<AdminState>>,
    axum::extract::Query(params): axum::extract::Query<std::collections::HashMap<String, String>>,
) -> Response {
    if let Some(k) = params.keys().find(|k| k.as_str() != "view") {
        return bad_request(QueryError::Unknown { name: k.clone(), known: "view=cache|runtime" });
    }
    match params.get("view").map(String::as_str).unwrap_or("cache") {
        "cache" => {
            let pods: Vec<_> = s
                .cache
                .snapshot()
                .iter()
                .filter_map(|e| e.status.as_ref().map(|st| pod_json(st, e.error.as_deref())))
                .collect();
            axum::Json(serde_json::json!({ "view": "cache", "revision": s.journal.revision(), "pods": pods }))
                .into_response()
        }
        "runtime" if !s.work.admit("runtime view") => too_many("reading the whole runtime"),
        "runtime" => match (s.runtime_view)().await {
            Ok(pods) => {
                let pods: Vec<_> = pods.iter().map(|p| pod_json(p, None)).collect();
                axum::Json(serde_json::json!({ "view": "runtime", "pods": pods })).into_response()
            }
            Err(e) => (StatusCode::BAD_GATEWAY, format!("reading the runtime failed: {e}\n")).into_response(),
        },
        other => {
            bad_request(QueryError::Choice { name: "view".into(), value: other.into(), expected: "cache or runtime" })
        }
    }
}

async fn debug_timeline(
    State(s): State<Arc<AdminState>>,
    axum::extract::Path(uid): axum::extract::Path<String>,
) -> Response {
    let Some((epoch, read)) = s.journal.read_timeline(&uid).await else {
        return (StatusCode::SERVICE_UNAVAILABLE, "reading the timeline failed\n").into_response();
    };
    let Some(entries) = read else {
        return (StatusCode::NOT_FOUND, format!("plegd has seen no change of pod {uid:?}\n")).into_response();
    };
    let items: Vec<_> = entries
        .iter()
        .map(|e| {
            let x = &e.event;
            let exit =
                x.pod.as_ref().and_then(|p| p.containers.iter().find(|c| c.id == x.container_id)).map(|c| c.exit_code);
            serde_json::json!({
                "revision": e.revision,
                "type": x.kind.as_str(),
                "source": x.source.as_str(),
                "container_id": x.container_id,
                "container_name": x.container_name,
                "is_sandbox": x.is_sandbox,
                "observed_at": crate::model::rfc3339(x.observed_at),
                "runtime_timestamp": x.runtime_timestamp.map(crate::model::rfc3339),
                "exit_code": exit,
                "message": x.message,
            })
        })
        .collect();
    axum::Json(serde_json::json!({ "pod_uid": uid, "epoch": epoch, "changes": items })).into_response()
}

/// OpenMetrics for scrapers that ask for it (Prometheus does), the classic text
/// format for everyone else (curl, promtool).
async fn metrics(State(s): State<Arc<AdminState>>, headers: axum::http::HeaderMap) -> Response {
    let wants_om = headers
        .get(header::ACCEPT)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|a| a.contains("application/openmetrics-text"));
    if wants_om {
        (
            [(header::CONTENT_TYPE, "application/openmetrics-text; version=1.0.0; charset=utf-8")],
            crate::metrics::encode(&s.metrics),
        )
            .into_response()
    } else {
        ([(header::CONTENT_TYPE, "text/plain; version=0.0.4; charset=utf-8")], crate::metrics::encode_text(&s.metrics))
            .into_response()
    }
}

async fn livez(State(s): State<Arc<AdminState>>) -> Response {
    match s.liveness.check() {
        Ok(()) => (StatusCode::OK, "ok\n").into_response(),
        Err(msg) => (StatusCode::INTERNAL_SERVER_ERROR, format!("{msg}\n")).into_response(),
    }
}

/// The kubelet's PLEG health; a relist that failed since the last good one (its
/// listing could not be read or decoded) is named on a second line, healthy or not.
async fn healthz(State(s): State<Arc<AdminState>>) -> Response {
    let mut detail = s.health.last_error().map(|e| format!("last relist failed: {e}\n")).unwrap_or_default();
    if let Some(e) = s.journal.disk_problem() {
        // Not a failure of health: events still flow, from memory. Said here, and by
        // plegd_journal_durable, so that an operator sees it.
        detail.push_str(&format!("journal not durable (events kept in memory only until the disk works again): {e}\n"));
    }
    match s.health.check() {
        Ok(()) => (StatusCode::OK, format!("ok\n{detail}")).into_response(),
        Err(msg) => {
            (StatusCode::INTERNAL_SERVER_ERROR, format!("PLEG is not healthy: {msg}\n{detail}")).into_response()
        }
    }
}

async fn readyz(State(s): State<Arc<AdminState>>) -> Response {
    use crate::model::identity::KubeletSource;
    // The identity's source is said, never a reason to be unready: plegd serves without it.
    let identity = match s.identities.source() {
        KubeletSource::Up => "identity: the kubelet's Pods API".to_owned(),
        KubeletSource::Off => "identity: inferred (--kubelet-pods-socket is off)".to_owned(),
        KubeletSource::Waiting(why) => format!("identity: inferred or last heard ({why})"),
    };
    match s.readiness.check() {
        Ok(()) => (StatusCode::OK, format!("ok\n{identity}\n")).into_response(),
        Err(msg) => (StatusCode::SERVICE_UNAVAILABLE, format!("not ready: {msg}\n{identity}\n")).into_response(),
    }
}

fn bad_request(e: QueryError) -> Response {
    (StatusCode::BAD_REQUEST, format!("{e}\n")).into_response()
}

/// The history query `/debug/events` takes (`since`, `until`, `seq`, `last`, and
/// whether `format=text`), checked.
pub fn events_query(
    params: &std::collections::HashMap<String, String>,
) -> Result<(crate::syncloop::Query, bool), QueryError> {
    let mut q = crate::syncloop::Query::default();
    let mut text = false;
    for (k, v) in params {
        match k.as_str() {
            "since" => q.since = Some(parse_time(k, v)?),
            "until" => q.until = Some(parse_time(k, v)?),
            "seq" => q.seq = Some(parse_num(k, v)?),
            "last" => q.last = Some(parse_num(k, v)?),
            "format" => match v.as_str() {
                "text" => text = true,
                "json" => {}
                _ => {
                    return Err(QueryError::Choice {
                        name: "format".into(),
                        value: v.clone(),
                        expected: "json or text",
                    });
                }
            },
            _ => return Err(QueryError::Unknown { name: k.clone(), known: "since, until, seq, last, format" }),
        }
    }
    Ok((q, text))
}

fn parse_time(name: &str, v: &str) -> Result<std::time::SystemTime, QueryError> {
    humantime::parse_rfc3339_weak(v).map_err(|source| QueryError::Time { name: name.into(), value: v.into(), source })
}

fn parse_num<T: std::str::FromStr>(name: &str, v: &str) -> Result<T, QueryError> {
    v.parse().map_err(|_| QueryError::Number { name: name.into(), value: v.into() })
}

async fn debug_events(
    State(s): State<Arc<AdminState>>,
    axum::extract::Query(params): axum::extract::Query<std::collections::HashMap<String, String>>,
) -> Response {
    let (q, text) = match events_query(&params) {
        Ok(q) => q,
        Err(msg) => return bad_request(msg),
    };
    let records = s.history.lock().expect("history lock").query(&q);
    if !text {
        return axum::Json(records).into_response();
    }
    let mut out = String::new();
    for r in &records {
        let follow = r.follow_up_of.map(|f| format!(" (follow-up of #{f})")).unwrap_or_default();
        let rev = r.revision.map(|v| format!(" rev {v}")).unwrap_or_default();
        out.push_str(&format!(
            "#{} {} {}{follow}{rev} {} [{}µs]{}\n",
            r.seq,
            crate::model::rfc3339(r.started_at),
            r.name,
            r.description,
            r.duration_us,
            if r.reverse { " (handlers in reverse)" } else { "" }
        ));
        for h in &r.handlers {
            match &h.error {
                Some(e) => out.push_str(&format!("    {}: ERROR {e}\n", h.handler)),
                None => out.push_str(&format!("    {}: {}\n", h.handler, h.change)),
            }
        }
    }
    ([(header::CONTENT_TYPE, "text/plain; charset=utf-8")], out).into_response()
}

async fn debug_queue(State(s): State<Arc<AdminState>>) -> Response {
    let views: Vec<_> = s.queues.iter().map(|q| q.view()).collect();
    axum::Json(views).into_response()
}

async fn debug_resync(State(s): State<Arc<AdminState>>) -> Response {
    if !s.work.admit("resync") {
        return too_many("a requested resync");
    }
    s.pleg.request_relist();
    s.sync.request_resync(crate::syncloop::ResyncKind::OnDemand);
    (StatusCode::ACCEPTED, "resync requested: a full relist and a sync-loop resync\n").into_response()
}

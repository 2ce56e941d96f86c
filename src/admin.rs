//! The admin HTTP surface on `--admin-addr`: metrics, liveness, PLEG health and
//! readiness.

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

use crate::metrics::Metrics;
use crate::pleg::health::PlegHealth;

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
    pub fn check(&self) -> Result<(), String> {
        if !self.health.first_relist_done() {
            return Err("the first relist has not completed".into());
        }
        self.health.check().map_err(|msg| format!("PLEG is not healthy: {msg}"))?;
        let stream = *self.stream.borrow();
        if self.require_stream && !stream.is_up() {
            return Err(format!("--mode evented requires the CRI event stream, which is {}", stream.as_str()));
        }
        Ok(())
    }
}

/// What the admin handlers read.
#[derive(Clone)]
pub struct AdminState {
    /// Metrics to expose.
    pub metrics: Metrics,
    /// PLEG health.
    pub health: PlegHealth,
    /// Relist loop liveness.
    pub liveness: crate::pleg::health::Liveness,
    /// Readiness.
    pub readiness: Readiness,
}

/// The admin server, bound and ready to serve.
pub struct AdminServer {
    listener: TcpListener,
    state: Arc<AdminState>,
}

impl AdminServer {
    /// Binds `addr`.
    pub async fn bind(addr: SocketAddr, state: AdminState) -> Result<Self, AdminError> {
        let listener = TcpListener::bind(addr).await.map_err(|source| AdminError::Bind { addr, source })?;
        Ok(Self { listener, state: Arc::new(state) })
    }

    /// The bound address (useful with port 0).
    pub fn local_addr(&self) -> SocketAddr {
        self.listener.local_addr().expect("bound listener has an address")
    }

    /// Serves until shutdown.
    pub async fn run(self, shutdown: CancellationToken) -> Result<(), AdminError> {
        axum::serve(self.listener, router(self.state))
            .with_graceful_shutdown(shutdown.cancelled_owned())
            .await
            .map_err(AdminError::Serve)
    }
}

/// The router, for tests.
pub fn router(state: Arc<AdminState>) -> Router {
    Router::new()
        .route("/metrics", get(metrics))
        .route("/livez", get(livez))
        .route("/healthz", get(healthz))
        .route("/readyz", get(readyz))
        .with_state(state)
}

async fn metrics(State(s): State<Arc<AdminState>>) -> Response {
    ([(header::CONTENT_TYPE, "application/openmetrics-text; version=1.0.0; charset=utf-8")], s.metrics.encode())
        .into_response()
}

async fn livez(State(s): State<Arc<AdminState>>) -> Response {
    match s.liveness.check() {
        Ok(()) => (StatusCode::OK, "ok\n").into_response(),
        Err(msg) => (StatusCode::INTERNAL_SERVER_ERROR, format!("{msg}\n")).into_response(),
    }
}

async fn healthz(State(s): State<Arc<AdminState>>) -> Response {
    match s.health.check() {
        Ok(()) => (StatusCode::OK, "ok\n").into_response(),
        Err(msg) => (StatusCode::INTERNAL_SERVER_ERROR, format!("PLEG is not healthy: {msg}\n")).into_response(),
    }
}

async fn readyz(State(s): State<Arc<AdminState>>) -> Response {
    match s.readiness.check() {
        Ok(()) => (StatusCode::OK, "ok\n").into_response(),
        Err(msg) => (StatusCode::SERVICE_UNAVAILABLE, format!("not ready: {msg}\n")).into_response(),
    }
}

/// How long the relist loop may go without a turn before `/livez` fails.
pub fn liveness_window(period: Duration, inspect_timeout: Duration, request_timeout: Duration) -> Duration {
    period * 3 + inspect_timeout * 2 + request_timeout * 4 + Duration::from_secs(30)
}

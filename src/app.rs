//! Builds the sidecar's components from a validated config and spawns each into the
//! task tracker: the one place long-running tasks start.

use std::net::SocketAddr;
use std::time::Duration;

use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::admin::{AdminError, AdminServer, AdminState, liveness_window};
use crate::backoff::Backoff;
use crate::cache::{self, PodCache};
use crate::config::RunConfig;
use crate::cri::RuntimeService;
use crate::cri::client::{ClientOptions, CriClient};
use crate::metrics::Metrics;
use crate::pleg::evented::{self, EventedWatcher, Mode, StreamState};
use crate::pleg::generic::{GenericPleg, PlegHandle, RelistConfig};
use crate::pleg::health::{Liveness, PlegHealth};
use crate::pleg::hints::PodHints;
use crate::publish::{self, EventFeed};
use crate::uds::UdsError;

/// Errors of starting the sidecar.
#[derive(Debug, thiserror::Error)]
pub enum AppError {
    /// The admin server could not start.
    #[error(transparent)]
    Admin(#[from] AdminError),
    /// The runtime endpoint is unusable.
    #[error("--runtime-endpoint: {0}")]
    Endpoint(#[from] UdsError),
}

/// Handles on a running sidecar.
pub struct Sidecar {
    /// The pod-status cache.
    pub cache: PodCache,
    /// Published lifecycle events.
    pub feed: EventFeed,
    /// PLEG health.
    pub health: PlegHealth,
    /// Metrics.
    pub metrics: Metrics,
    /// Relist requests.
    pub pleg: PlegHandle,
    /// Where the admin server listens.
    pub admin_addr: SocketAddr,
    /// The CRI client.
    pub runtime: CriClient,
    /// The event stream's state.
    pub stream: tokio::sync::watch::Receiver<StreamState>,
}

/// Starts the sidecar's tasks in `tracker`; they stop when `shutdown` is cancelled.
pub async fn start(cfg: &RunConfig, tracker: &TaskTracker, shutdown: &CancellationToken) -> Result<Sidecar, AppError> {
    let metrics = Metrics::new();
    let opts = ClientOptions { timeout: cfg.runtime_request_timeout, ..Default::default() };
    let client = CriClient::new(&cfg.runtime_endpoint, opts, Some(metrics.cri.clone()))?;
    let (writer, cache) = cache::new();
    let health = PlegHealth::new(cfg.relist_threshold);
    let liveness = Liveness::new(liveness_window(cfg.relist_period, cfg.inspect_timeout, cfg.runtime_request_timeout));
    let (events_tx, publisher, feed) = publish::channel(4096, Some(metrics.events.clone()));
    let relist = RelistConfig {
        period: cfg.relist_period,
        concurrency: cfg.inspect_concurrency,
        inspect_timeout: cfg.inspect_timeout,
    };
    let hints = PodHints::default();
    let (state_tx, state_rx) = evented::stream_state();
    let pleg = GenericPleg::new(client.clone(), writer, events_tx, health.clone(), Some(metrics.pleg.clone()), relist)
        .with_liveness(liveness.clone())
        .with_hints(hints.clone(), state_rx.clone(), cfg.evented_relist_period);
    let handle = pleg.handle();
    let admin_state = AdminState {
        metrics: metrics.clone(),
        health: health.clone(),
        liveness,
        stream: state_rx.clone(),
        require_stream: cfg.mode == Mode::Evented,
    };
    let admin = AdminServer::bind(cfg.admin_addr, admin_state).await?;
    let admin_addr = admin.local_addr();

    tracker.spawn(publisher.run(shutdown.clone()));
    if cfg.mode == Mode::Generic {
        state_tx.send_replace(StreamState::Disabled);
    } else {
        let watcher =
            EventedWatcher::new(client.clone(), hints, state_tx, Some(metrics.pleg.clone()), cfg.evented.clone());
        tracker.spawn(watcher.run(shutdown.clone()));
    }
    tracker.spawn(pleg.run(shutdown.clone()));
    tracker.spawn(announce_runtime(client.clone(), shutdown.clone()));
    let sd = shutdown.clone();
    tracker.spawn(async move {
        if let Err(e) = admin.run(sd.clone()).await {
            tracing::error!(error = %e, "admin server stopped");
            sd.cancel();
        }
    });
    tracing::info!(runtime = %cfg.runtime_endpoint, admin = %admin_addr, "plegd started");
    Ok(Sidecar { cache, feed, health, metrics, pleg: handle, admin_addr, runtime: client, stream: state_rx })
}

/// Logs the runtime's name and version once it answers; until then says, once, that
/// plegd waits for it.
async fn announce_runtime(client: CriClient, shutdown: CancellationToken) {
    let mut backoff = Backoff::new(Duration::from_millis(200), Duration::from_secs(10));
    let mut warned = false;
    loop {
        match client.version().await {
            Ok(v) => {
                tracing::info!(
                    runtime = %v.runtime_name, version = %v.runtime_version, api = %v.runtime_api_version,
                    "connected to the container runtime"
                );
                return;
            }
            Err(e) => {
                if !warned {
                    tracing::warn!(error = %e, "container runtime not reachable yet; plegd is not ready until it answers");
                    warned = true;
                }
            }
        }
        tokio::select! {
            _ = shutdown.cancelled() => return,
            _ = tokio::time::sleep(backoff.next_delay()) => {}
        }
    }
}

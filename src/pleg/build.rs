//! The PLEG as its config builds it ([`PlegConfig::build`]): the relister (the cache's
//! only writer) seeded with what the journal last said of each pod, the event stream's
//! watcher that feeds the relister's inbox (none in generic mode), health, and
//! readiness. What it shares with the rest of plegd — the runtime, where events go,
//! the host, liveness, metrics — comes in as [`PlegDeps`]; nothing is patched into
//! another subsystem's config.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{mpsc, watch};

use super::config::PlegConfig;
use super::evented::{self, EventedWatcher, Mode, StreamState};
use super::generic::GenericPleg;
use super::health::{PlegHealth, Readiness};
use super::metrics::PlegMetrics;
use crate::cache::{self, PodCache};
use crate::cri::RuntimeService;
use crate::host::Host;
use crate::liveness::{Liveness, QUICK_LOOP_LIMIT};
use crate::model::PodStatus;
use crate::model::event::PodLifecycleEvent;

/// What the PLEG takes from the rest of plegd.
pub struct PlegDeps<'a, R: RuntimeService> {
    /// The runtime it reads and whose event stream it follows.
    pub runtime: R,
    /// Where each pod read's events go (the publisher).
    pub events: mpsc::Sender<Vec<PodLifecycleEvent>>,
    /// Where a new container's PID and cgroup are read.
    pub host: Host,
    /// What the journal last said of each pod: the first relist turns what changed
    /// while plegd was down into events.
    pub seed: Vec<Arc<PodStatus>>,
    /// Where the relist loop and the stream's watcher register their beats.
    pub liveness: &'a Liveness,
    /// The PLEG's metrics.
    pub metrics: PlegMetrics,
    /// The runtime's per-call timeout: part of how long a relist turn may take.
    pub request_timeout: Duration,
}

/// The PLEG, built: each part is run or handed out by the caller.
pub struct Pleg<R: RuntimeService> {
    /// The relister, the cache's only writer.
    pub relister: GenericPleg<R>,
    /// The CRI event stream's watcher; none in generic mode.
    pub watcher: Option<EventedWatcher<R>>,
    /// The pod-status cache the relister writes.
    pub cache: PodCache,
    /// Relist health.
    pub health: PlegHealth,
    /// What `/readyz` and the gRPC health service answer from.
    pub readiness: Readiness,
    /// The event stream's state.
    pub stream: watch::Receiver<StreamState>,
}

impl PlegConfig {
    /// Builds the PLEG over `deps`.
    pub fn build<R: RuntimeService>(self, deps: PlegDeps<'_, R>) -> Pleg<R> {
        let PlegDeps { runtime, events, host, seed, liveness, metrics, request_timeout } = deps;
        let (writer, cache) = cache::new();
        let health = PlegHealth::new(self.threshold);
        let (state_tx, state_rx) = evented::stream_state();
        let relist_limit = self.relist_liveness_limit(request_timeout);
        let (mode, stream_cfg) = (self.mode, self.stream.clone());
        let relister = GenericPleg::new(runtime.clone(), writer, events, health.clone(), metrics.clone(), self, host)
            .with_seed(seed)
            .with_liveness(liveness.register("relist", relist_limit))
            .with_stream(state_rx.clone());
        let readiness =
            Readiness { health: health.clone(), stream: state_rx.clone(), require_stream: mode == Mode::Evented };
        let watcher = if mode == Mode::Generic {
            state_tx.send_replace(StreamState::Disabled);
            None
        } else {
            let watcher = EventedWatcher::new(runtime, relister.inbox(), state_tx, metrics, stream_cfg)
                .with_liveness(liveness.register("event stream", QUICK_LOOP_LIMIT));
            Some(watcher)
        };
        Pleg { relister, watcher, cache, health, readiness, stream: state_rx }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn deps<'a>(liveness: &'a Liveness, sim: &crate::sim::SimRuntime) -> PlegDeps<'a, crate::sim::SimRuntime> {
        PlegDeps {
            runtime: sim.clone(),
            events: mpsc::channel(8).0,
            host: Host::default(),
            seed: Vec::new(),
            liveness,
            metrics: PlegMetrics::register(&mut Default::default()),
            request_timeout: Duration::from_secs(2),
        }
    }

    #[tokio::test]
    async fn each_mode_builds_the_parts_it_runs_and_readiness_asks_for_the_stream_only_in_evented_mode() {
        let sim = crate::sim::SimRuntime::new();
        for (mode, watcher, require_stream) in
            [(Mode::Generic, false, false), (Mode::Auto, true, false), (Mode::Evented, true, true)]
        {
            let liveness = Liveness::new();
            let pleg = PlegConfig { mode, ..Default::default() }.build(deps(&liveness, &sim));
            assert_eq!(pleg.watcher.is_some(), watcher, "{mode:?}");
            assert_eq!(pleg.readiness.require_stream, require_stream, "{mode:?}");
            if mode == Mode::Generic {
                assert_eq!(*pleg.stream.borrow(), StreamState::Disabled, "generic mode says so at once");
            }
        }
    }
}

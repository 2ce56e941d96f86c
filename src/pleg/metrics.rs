//! The PLEG's metrics (relister, event stream, cache), registered by the PLEG itself.

use std::sync::atomic::AtomicU64;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;

use crate::metrics::{Registry, fast_buckets, relist_buckets};

/// Label set `{state}`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct StateLabel {
    /// Container state, lower case.
    pub state: String,
}

/// Label set `{mode}`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ModeLabel {
    /// `generic` or `evented`.
    pub mode: String,
}

/// Metrics of the PLEG (relister and cache).
#[derive(Clone)]
pub struct PlegMetrics {
    /// `plegd_pleg_relist_duration_seconds`.
    pub relist_duration: Histogram,
    /// `plegd_pleg_relist_interval_seconds` (start to start).
    pub relist_interval: Histogram,
    /// `plegd_pleg_last_seen_seconds` (unix time of the last completed relist's start).
    pub last_seen: Gauge<f64, AtomicU64>,
    /// `plegd_pleg_pod_relist_duration_seconds`.
    pub pod_relist_duration: Histogram,
    /// `plegd_pleg_mode{mode}`.
    pub mode: Family<ModeLabel, Gauge>,
    /// `plegd_evented_connections_total`.
    pub evented_connections: Counter,
    /// `plegd_evented_connection_errors_total`.
    pub evented_connection_errors: Counter,
    /// `plegd_evented_missed_changes_total`: changes a relist found that the event
    /// stream, up at the time, never announced.
    pub evented_missed: Counter,
    /// `plegd_pleg_relist_errors_total`: relists whose listing failed.
    pub relist_errors: Counter,
    /// `plegd_pleg_inspection_errors_total`: pod inspections that failed.
    pub inspection_errors: Counter,
    /// `plegd_cache_pods`.
    pub cache_pods: Gauge,
    /// `plegd_running_containers{state}`.
    pub running_containers: Family<StateLabel, Gauge>,
}

impl PlegMetrics {
    /// Creates the PLEG's families and registers them in `registry` (the caller gives it
    /// the `plegd` prefix): the relister's under `pleg`, the event stream's under
    /// `evented`, the cache's by their whole names.
    pub fn register(registry: &mut Registry) -> Self {
        let pleg = PlegMetrics {
            relist_duration: relist_buckets(),
            relist_interval: relist_buckets(),
            last_seen: Gauge::default(),
            pod_relist_duration: fast_buckets(),
            mode: Family::default(),
            evented_connections: Counter::default(),
            evented_connection_errors: Counter::default(),
            evented_missed: Counter::default(),
            relist_errors: Counter::default(),
            inspection_errors: Counter::default(),
            cache_pods: Gauge::default(),
            running_containers: Family::default(),
        };
        let p = registry.sub_registry_with_prefix("pleg");
        p.register("relist_duration_seconds", "Duration of a full relist", pleg.relist_duration.clone());
        p.register(
            "relist_interval_seconds",
            "Time between the starts of two full relists",
            pleg.relist_interval.clone(),
        );
        p.register("last_seen_seconds", "Unix time at which the last completed relist started", pleg.last_seen.clone());
        p.register(
            "pod_relist_duration_seconds",
            "Duration of a targeted relist of one pod",
            pleg.pod_relist_duration.clone(),
        );
        p.register("mode", "1 for the PLEG mode in use", pleg.mode.clone());
        p.register("relist_errors", "Relists whose runtime listing failed", pleg.relist_errors.clone());
        p.register(
            "inspection_errors",
            "Pod inspections that failed and will be retried",
            pleg.inspection_errors.clone(),
        );
        let e = registry.sub_registry_with_prefix("evented");
        e.register("connections", "CRI event streams established", pleg.evented_connections.clone());
        e.register(
            "connection_errors",
            "CRI event streams that failed or ended",
            pleg.evented_connection_errors.clone(),
        );
        e.register(
            "missed_changes",
            "Changes a relist found that the CRI event stream, up at the time, never announced",
            pleg.evented_missed.clone(),
        );
        registry.register("cache_pods", "Pods in the status cache", pleg.cache_pods.clone());
        registry.register(
            "running_containers",
            "Containers by state in the status cache",
            pleg.running_containers.clone(),
        );

        for mode in ["generic", "evented"] {
            let _ = pleg.mode.get_or_create(&ModeLabel { mode: mode.into() });
        }
        pleg
    }
}

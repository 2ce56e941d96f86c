//! The Prometheus registry and the metric families plegd's components write.

use std::sync::Arc;
use std::sync::atomic::AtomicU64;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

/// Label set `{method, code}` of CRI calls.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct MethodCode {
    /// CRI method name.
    pub method: String,
    /// gRPC code name (`OK`, `NotFound`, `DeadlineExceeded`, …).
    pub code: String,
}

/// Label set `{method}`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct MethodLabel {
    /// CRI method name.
    pub method: String,
}

/// Label set `{type, source}` of lifecycle events.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct TypeSource {
    /// Event type, as in the API enum.
    pub r#type: String,
    /// Event source, as in the API enum.
    pub source: String,
}

/// Label set `{state}`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct StateLabel {
    /// Container state, lower case.
    pub state: String,
}

/// Label set `{reason}`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ReasonLabel {
    /// Reason, as in the API enum.
    pub reason: String,
}

/// Label set `{mode}`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ModeLabel {
    /// `generic` or `evented`.
    pub mode: String,
}

type HistogramFamily<L> = Family<L, Histogram, fn() -> Histogram>;

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

/// Metrics of CRI calls.
#[derive(Clone)]
pub struct CriMetrics {
    /// `plegd_cri_requests_total{method,code}`.
    pub requests: Family<MethodCode, Counter>,
    /// `plegd_cri_request_duration_seconds{method}`.
    pub duration: HistogramFamily<MethodLabel>,
}

/// Metrics of published lifecycle events.
#[derive(Clone)]
pub struct EventMetrics {
    /// `plegd_lifecycle_events_total{type,source}`.
    pub total: Family<TypeSource, Counter>,
    /// `plegd_event_delivery_latency_seconds`: runtime time of a change → published.
    pub delivery_latency: Histogram,
}

/// All of plegd's metrics and the registry that exposes them.
#[derive(Clone)]
pub struct Metrics {
    /// The registry, encoded by `/metrics`.
    pub registry: Arc<Registry>,
    /// PLEG metrics.
    pub pleg: PlegMetrics,
    /// CRI client metrics.
    pub cri: CriMetrics,
    /// Event metrics.
    pub events: EventMetrics,
    /// Journal metrics.
    pub journal: crate::journal::JournalMetrics,
    /// API metrics.
    pub api: crate::api::ApiMetrics,
    /// Work queue metrics (client-go's names).
    pub queues: crate::workqueue::QueueMetrics,
    /// Reconciler metrics.
    pub reconcile: crate::reconcile::ReconcileMetrics,
}

/// Buckets for fast things (CRI calls, event latency): 100 µs … ~13 s.
fn fast_buckets() -> Histogram {
    Histogram::new(exponential_buckets(0.0001, 2.0, 18))
}

/// Buckets for relist periods and durations: 1 ms … ~524 s.
fn relist_buckets() -> Histogram {
    Histogram::new(exponential_buckets(0.001, 2.0, 20))
}

impl Metrics {
    /// Creates and registers every family.
    pub fn new() -> Self {
        let mut r = Registry::default();
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
        r.register("plegd_pleg_relist_duration_seconds", "Duration of a full relist", pleg.relist_duration.clone());
        r.register(
            "plegd_pleg_relist_interval_seconds",
            "Time between the starts of two full relists",
            pleg.relist_interval.clone(),
        );
        r.register(
            "plegd_pleg_last_seen_seconds",
            "Unix time at which the last completed relist started",
            pleg.last_seen.clone(),
        );
        r.register(
            "plegd_pleg_pod_relist_duration_seconds",
            "Duration of a targeted relist of one pod",
            pleg.pod_relist_duration.clone(),
        );
        r.register("plegd_pleg_mode", "1 for the PLEG mode in use", pleg.mode.clone());
        r.register("plegd_evented_connections", "CRI event streams established", pleg.evented_connections.clone());
        r.register(
            "plegd_evented_connection_errors",
            "CRI event streams that failed or ended",
            pleg.evented_connection_errors.clone(),
        );
        r.register(
            "plegd_evented_missed_changes",
            "Changes a relist found that the CRI event stream, up at the time, never announced",
            pleg.evented_missed.clone(),
        );
        r.register("plegd_pleg_relist_errors", "Relists whose runtime listing failed", pleg.relist_errors.clone());
        r.register(
            "plegd_pleg_inspection_errors",
            "Pod inspections that failed and will be retried",
            pleg.inspection_errors.clone(),
        );
        r.register("plegd_cache_pods", "Pods in the status cache", pleg.cache_pods.clone());
        r.register(
            "plegd_running_containers",
            "Containers by state in the status cache",
            pleg.running_containers.clone(),
        );

        let cri = CriMetrics {
            requests: Family::default(),
            duration: Family::new_with_constructor(fast_buckets as fn() -> Histogram),
        };
        r.register("plegd_cri_requests", "CRI calls by method and gRPC code", cri.requests.clone());
        r.register("plegd_cri_request_duration_seconds", "Duration of CRI calls", cri.duration.clone());

        let events = EventMetrics { total: Family::default(), delivery_latency: fast_buckets() };
        r.register("plegd_lifecycle_events", "Pod lifecycle events published", events.total.clone());
        r.register(
            "plegd_event_delivery_latency_seconds",
            "From the runtime's time of a change to the event being published",
            events.delivery_latency.clone(),
        );
        let journal = crate::journal::JournalMetrics::default();
        r.register("plegd_journal_revision", "The latest event revision", journal.revision.clone());
        r.register("plegd_watch_resets", "Watch streams told to start over, by reason", journal.resets.clone());
        // Known label values start at zero, so rate() and alerts work from the start.
        for reason in ["SLOW_CONSUMER", "REVISION_TOO_OLD", "RUNTIME_RESYNC"] {
            let _ = journal.resets.get_or_create(&ReasonLabel { reason: reason.into() });
        }
        for mode in ["generic", "evented"] {
            let _ = pleg.mode.get_or_create(&ModeLabel { mode: mode.into() });
        }
        let api = crate::api::ApiMetrics::default();
        r.register("plegd_watch_clients", "Open Watch streams", api.watch_clients.clone());
        r.register("plegd_api_connections", "API connections accepted", api.accepted.clone());
        r.register(
            "plegd_api_connections_refused",
            "API connections refused by the peer-credential allowlist",
            api.refused.clone(),
        );
        r.register_collector(Box::new(crate::process::ProcessCollector));
        let queues = crate::workqueue::QueueMetrics::register(&mut r);
        let reconcile = crate::reconcile::ReconcileMetrics::register(&mut r);
        Self { registry: Arc::new(r), pleg, cri, events, journal, api, queues, reconcile }
    }

    /// The registry in the classic Prometheus text format (0.0.4): counters' HELP and
    /// TYPE name the `_total` series, and there are no `# UNIT` or `# EOF` lines.
    pub fn encode_text(&self) -> String {
        openmetrics_to_text(&self.encode())
    }

    /// The registry in OpenMetrics text format.
    pub fn encode(&self) -> String {
        let mut out = String::new();
        prometheus_client::encoding::text::encode(&mut out, &self.registry).expect("writing to a String cannot fail");
        out
    }
}

/// Rewrites OpenMetrics text as the classic Prometheus text format.
pub fn openmetrics_to_text(om: &str) -> String {
    let counters: std::collections::HashSet<&str> =
        om.lines().filter_map(|l| l.strip_prefix("# TYPE ")).filter_map(|l| l.strip_suffix(" counter")).collect();
    let mut out = String::with_capacity(om.len());
    for line in om.lines() {
        if line == "# EOF" || line.starts_with("# UNIT ") {
            continue;
        }
        let rewritten = ["# HELP ", "# TYPE "].iter().find_map(|p| {
            let rest = line.strip_prefix(p)?;
            let (name, tail) = rest.split_once(' ')?;
            counters.contains(name).then(|| format!("{p}{name}_total {tail}"))
        });
        out.push_str(rewritten.as_deref().unwrap_or(line));
        out.push('\n');
    }
    out
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

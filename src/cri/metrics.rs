//! Metrics of CRI calls, registered by the CRI client's owner.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::histogram::Histogram;

use crate::metrics::{HistogramFamily, Registry, fast_buckets};

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

/// Metrics of CRI calls.
#[derive(Clone)]
pub struct CriMetrics {
    /// `plegd_cri_requests_total{method,code}`.
    pub requests: Family<MethodCode, Counter>,
    /// `plegd_cri_request_duration_seconds{method}`.
    pub duration: HistogramFamily<MethodLabel>,
}

impl CriMetrics {
    /// Creates the CRI client's families and registers them in `registry` (the caller
    /// gives it the `cri` prefix).
    pub fn register(registry: &mut Registry) -> Self {
        let cri = CriMetrics {
            requests: Family::default(),
            duration: Family::new_with_constructor(fast_buckets as fn() -> Histogram),
        };
        registry.register("requests", "CRI calls by method and gRPC code", cri.requests.clone());
        registry.register("request_duration_seconds", "Duration of CRI calls", cri.duration.clone());

        cri
    }
}

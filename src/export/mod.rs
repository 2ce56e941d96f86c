//! OTLP export: every event the journal publishes leaves the node as an OTLP log record
//! (see [`records`]) for an OpenTelemetry Collector, at least once.
//!
//! The exporter is a journal subscriber with a cursor ([`cursor`]): it reads from the
//! revision after the cursor (from disk when memory no longer holds it), sends batches,
//! and moves the cursor only when the collector accepted a batch (a partial success
//! counts its rejected records and is not retried; other failures follow OTLP's retry
//! rules, [`otlp::classify`]). A collector that is down or slow makes the exporter fall
//! behind and nothing else: its live buffer overflows and is dropped (it holds none of
//! the journal while it waits), and it reads again from its cursor when the collector
//! answers. Revisions the journal dropped before the exporter sent them are named in
//! one record (`plegd.export.lost`) and counted. A crash sends at most the batch in
//! flight again; each record's `log.record.uid` lets a backend drop the duplicate.
//!
//! The loop — the journal's feed from the cursor, batches, delivery — is [`driver`]'s;
//! what follows a failed attempt is [`retry`]'s; this module holds the settings, the
//! metrics and the collector over gRPC.

pub mod cursor;
mod driver;
pub mod otlp;
pub mod records;
pub mod retry;

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::gauge::Gauge;
use tokio_util::sync::CancellationToken;

use crate::journal::Journal;
use crate::metrics::Registry;
use crate::model::identity::Identities;
pub use driver::Collector;
use otlp::{ExportLogsServiceRequest, Outcome};

/// Where and how to export.
#[derive(Clone, Debug)]
pub struct ExportConfig {
    /// The collector, `http://host:port` (OTLP over gRPC).
    pub endpoint: String,
    /// Headers sent with each export (vendor endpoints' keys).
    pub headers: Vec<(String, String)>,
    /// PEM certificates of the CAs an `https://` collector's certificate is checked
    /// against; none: the public web's roots (webpki-roots, built in).
    pub ca_pem: Option<Vec<u8>>,
    /// `k8s.node.name` of the records.
    pub node: String,
    /// Records per export at most.
    pub batch: usize,
    /// How long a batch waits for more records once it has one.
    pub linger: Duration,
    /// Deadline of one export.
    pub timeout: Duration,
    /// First retry delay (doubles per failure).
    pub backoff_initial: Duration,
    /// Longest retry delay.
    pub backoff_max: Duration,
    /// Longest delay a collector's `RetryInfo` may ask for.
    pub retry_after_max: Duration,
}

/// A header as gRPC metadata.
type Header = (tonic::metadata::AsciiMetadataKey, tonic::metadata::AsciiMetadataValue);

impl ExportConfig {
    /// The endpoint and headers, checked. Errors never hold a header's value or a
    /// password (they are logged and printed).
    pub fn check(&self) -> Result<(tonic::codegen::http::Uri, Vec<Header>), ExportError> {
        let bad = |reason: &str| ExportError::Endpoint { endpoint: redacted(&self.endpoint), reason: reason.into() };
        // A URL that does not parse may hide credentials anywhere: only its scheme is shown.
        let unparsed = || ExportError::Endpoint {
            endpoint: format!("{}://…", self.endpoint.split_once("://").map_or("?", |(s, _)| s)),
            reason: "not a URL".into(),
        };
        let uri: tonic::codegen::http::Uri = self.endpoint.parse().map_err(|_| unparsed())?;
        match uri.scheme_str() {
            Some("http") | Some("https") => {}
            _ => return Err(bad("expected http://host:port or https://host:port (OTLP over gRPC)")),
        }
        if uri.host().is_none_or(str::is_empty) {
            return Err(bad("no host"));
        }
        if uri.authority().is_some_and(|a| a.as_str().contains('@')) {
            return Err(bad("credentials in the URL are never sent over gRPC; give them as a header \
                 (--otlp-header authorization=...)"));
        }
        let authority = uri.authority().map_or("", |a| a.as_str());
        let port = authority.rsplit_once(':').map(|(_, p)| p).filter(|p| !p.ends_with(']'));
        if port.is_some_and(|p| p.parse::<u16>().is_err() || p == "0") {
            return Err(bad("the port is not one of 1 to 65535"));
        }
        if uri.path_and_query().is_some_and(|p| p.as_str() != "/" && !p.as_str().is_empty()) {
            return Err(bad("a gRPC endpoint has no path: give http://host:port"));
        }
        let headers = self
            .headers
            .iter()
            .map(|(k, v)| {
                let key = k.parse().map_err(|_| ExportError::Header {
                    name: k.clone(),
                    problem: "not a valid header name (lowercase letters, digits, '-', '_', '.')",
                })?;
                let value = v.parse().map_err(|_| ExportError::Header {
                    name: k.clone(),
                    problem: "its value is not printable ASCII (the value is not shown: it may be a secret)",
                })?;
                Ok((key, value))
            })
            .collect::<Result<_, ExportError>>()?;
        Ok((uri, headers))
    }

    /// The defaults for `endpoint`.
    pub fn new(endpoint: &str, node: &str) -> Self {
        Self {
            endpoint: endpoint.into(),
            headers: Vec::new(),
            ca_pem: None,
            node: node.into(),
            batch: 512,
            linger: Duration::from_millis(200),
            timeout: Duration::from_secs(10),
            backoff_initial: Duration::from_millis(500),
            backoff_max: Duration::from_secs(30),
            retry_after_max: Duration::from_secs(300),
        }
    }
}

/// Bad export settings.
#[derive(Debug, thiserror::Error)]
pub enum ExportError {
    /// The endpoint is not a usable URL.
    #[error("--otlp-endpoint {endpoint:?}: {reason}")]
    Endpoint {
        /// The value.
        endpoint: String,
        /// Why.
        reason: String,
    },
    /// A header is not a valid gRPC metadata entry.
    #[error("--otlp-header {name:?}: {problem}")]
    Header {
        /// The header's name (never its value).
        name: String,
        /// What is wrong.
        problem: &'static str,
    },
}

/// The exporter's metrics.
#[derive(Clone, Default)]
pub struct ExportMetrics {
    /// `plegd_otlp_exported_records_total`: records the collector accepted.
    pub exported: Counter,
    /// `plegd_otlp_failed_requests_total`: exports that failed (each retry counts).
    pub failed: Counter,
    /// `plegd_otlp_retried_requests_total`: exports sent again after a failure.
    pub retried: Counter,
    /// `plegd_otlp_rejected_records_total`: records a partial success rejected.
    pub rejected: Counter,
    /// `plegd_otlp_dropped_records_total`: records of batches a non-retryable error dropped.
    pub dropped: Counter,
    /// `plegd_otlp_lost_revisions_total`: revisions the journal dropped before export.
    pub lost: Counter,
    /// `plegd_otlp_lag_revisions`: revisions published and not yet accepted.
    pub lag_revisions: Gauge,
    /// `plegd_otlp_lag_seconds`: how old the oldest event not yet accepted is.
    pub lag_seconds: Gauge<f64, std::sync::atomic::AtomicU64>,
}

impl ExportMetrics {
    /// Creates the exporter's families and registers them in `registry` (the caller
    /// gives it the `otlp` prefix).
    pub fn register(registry: &mut Registry) -> Self {
        let m = Self::default();
        registry.register("exported_records", "Records the OTLP collector accepted", m.exported.clone());
        registry.register("failed_requests", "OTLP exports that failed", m.failed.clone());
        registry.register("retried_requests", "OTLP exports sent again after a failure", m.retried.clone());
        registry.register(
            "rejected_records",
            "Records the collector rejected in a partial success (not retried)",
            m.rejected.clone(),
        );
        registry.register("dropped_records", "Records of exports a non-retryable error dropped", m.dropped.clone());
        registry.register(
            "lost_revisions",
            "Revisions the journal dropped before the exporter sent them",
            m.lost.clone(),
        );
        registry.register("lag_revisions", "Revisions published and not yet exported", m.lag_revisions.clone());
        registry.register("lag_seconds", "Age of the oldest published event not yet exported", m.lag_seconds.clone());
        m
    }
}

/// The exporter: a [`driver`] over the collector at the configured endpoint.
pub struct OtlpExporter {
    driver: driver::Driver<GrpcCollector>,
}

/// The collector over OTLP/gRPC. The connection is replaced by a new one after an
/// export that failed: a connection the collector accepted and never answers on (a
/// hung process, a half-open TCP connection) must not be used for ever.
pub struct GrpcCollector {
    channel: std::sync::Mutex<tonic::transport::Channel>,
    endpoint: tonic::transport::Endpoint,
    headers: Vec<Header>,
    timeout: Duration,
}

impl OtlpExporter {
    /// An exporter of `journal`'s events to the collector at `cfg.endpoint` (connected
    /// lazily: a collector that is not up yet is not an error).
    pub fn new(
        cfg: ExportConfig,
        state_dir: Option<PathBuf>,
        journal: Journal,
        metrics: ExportMetrics,
    ) -> Result<Self, ExportError> {
        let collector = GrpcCollector::new(&cfg)?;
        let resource = otlp::Resource {
            attributes: vec![
                records::kv("service.name", "plegd"),
                records::kv("service.version", env!("CARGO_PKG_VERSION")),
                records::kv("k8s.node.name", &cfg.node),
            ],
        };
        let shutdown = CancellationToken::new();
        let identities = Arc::new(Identities::new(&cfg.node, std::time::Duration::ZERO));
        let driver = driver::Driver {
            cfg,
            journal,
            metrics,
            collector,
            resource,
            cursor: None,
            state_dir,
            shutdown,
            identities,
        };
        Ok(Self { driver })
    }

    /// Names each pod's workload as `identities` holds it (by default: inferred).
    pub fn with_identities(mut self, identities: Arc<Identities>) -> Self {
        self.driver.identities = identities;
        self
    }

    /// Exports until shutdown.
    pub async fn run(mut self, shutdown: CancellationToken) {
        self.driver.shutdown = shutdown;
        self.driver.run().await
    }
}

impl GrpcCollector {
    /// The collector `cfg` names, checked; connected lazily.
    pub fn new(cfg: &ExportConfig) -> Result<Self, ExportError> {
        let (uri, headers) = cfg.check()?;
        let tls = (uri.scheme_str() == Some("https")).then(|| {
            let tls = tonic::transport::ClientTlsConfig::new().domain_name(uri.host().unwrap_or_default());
            match &cfg.ca_pem {
                Some(pem) => tls.ca_certificate(tonic::transport::Certificate::from_pem(pem)),
                None => tls.with_webpki_roots(),
            }
        });
        let mut endpoint = tonic::transport::Endpoint::from(uri)
            .connect_timeout(Duration::from_secs(5))
            .tcp_keepalive(Some(Duration::from_secs(30)))
            .http2_keep_alive_interval(Duration::from_secs(30))
            .keep_alive_timeout(Duration::from_secs(10))
            .timeout(cfg.timeout);
        if let Some(tls) = tls {
            endpoint = endpoint
                .tls_config(tls)
                .map_err(|e| ExportError::Endpoint { endpoint: cfg.endpoint.clone(), reason: format!("TLS: {e}") })?;
        }
        let channel = std::sync::Mutex::new(endpoint.connect_lazy());
        Ok(Self { channel, endpoint, headers, timeout: cfg.timeout })
    }
}

impl Collector for GrpcCollector {
    /// One export, within the export's deadline whatever the connection does; a
    /// failure puts a new connection in place for the next try.
    async fn export(&self, req: ExportLogsServiceRequest) -> Outcome {
        let channel = self.channel.lock().expect("otlp channel lock").clone();
        let outcome = tokio::time::timeout(self.timeout, otlp::export(channel, &self.headers, req, self.timeout))
            .await
            .unwrap_or_else(|_| Outcome::Retry {
                after: None,
                error: format!("the collector did not answer within {:?}", self.timeout),
            });
        if matches!(outcome, Outcome::Retry { .. } | Outcome::Dropped { .. }) {
            *self.channel.lock().expect("otlp channel lock") = self.endpoint.connect_lazy();
        }
        outcome
    }
}

/// `endpoint` fit for a log line or an error: a password in it (`user:secret@`) is
/// replaced by `***`.
pub fn redacted(endpoint: &str) -> String {
    let Some((scheme, rest)) = endpoint.split_once("://") else { return endpoint.to_owned() };
    // Whatever stands before the last `@` is credentials, a user name or a token alike
    // (it may hold `/`, `?` or `#` too).
    match rest.rsplit_once('@') {
        Some((_, host)) => format!("{scheme}://***@{host}"),
        None => endpoint.to_owned(),
    }
}

#[cfg(test)]
mod tests;

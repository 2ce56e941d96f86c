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

pub mod cursor;
pub mod otlp;
pub mod records;

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::gauge::Gauge;
use tokio_util::sync::CancellationToken;

use crate::journal::{Entry, Filter, Journal, Since, Start};
use crate::metrics::Registry;
use cursor::Cursor;
use otlp::{ExportLogsServiceRequest, LogRecord, Outcome};

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
    /// Where the cursor is kept; `None`: memory only.
    pub state_dir: Option<PathBuf>,
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
            state_dir: None,
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

/// The exporter.
pub struct OtlpExporter {
    cfg: ExportConfig,
    journal: Journal,
    metrics: ExportMetrics,
    /// The connection to the collector, replaced by a new one after an export that
    /// failed: a connection the collector accepted and never answers on (a hung
    /// process, a half-open TCP connection) must not be used for ever.
    channel: std::sync::Mutex<tonic::transport::Channel>,
    endpoint: tonic::transport::Endpoint,
    headers: Vec<Header>,
    resource: otlp::Resource,
}

/// A batch on its way: records and the revision that accepting them reaches.
struct Batch {
    records: Vec<LogRecord>,
    /// Event records (the lost-revisions record is not one).
    events: u64,
    upto: Cursor,
    /// The first event record's revision (0: none).
    first_revision: u64,
    oldest_observed: Option<SystemTime>,
}

impl OtlpExporter {
    /// An exporter of `journal`'s events to the collector at `cfg.endpoint` (connected
    /// lazily: a collector that is not up yet is not an error).
    pub fn new(cfg: ExportConfig, journal: Journal, metrics: ExportMetrics) -> Result<Self, ExportError> {
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
        let resource = otlp::Resource {
            attributes: vec![
                records::kv("service.name", "plegd"),
                records::kv("service.version", env!("CARGO_PKG_VERSION")),
                records::kv("k8s.node.name", &cfg.node),
            ],
        };
        Ok(Self { cfg, journal, metrics, channel, endpoint, headers, resource })
    }

    /// Exports until shutdown.
    pub async fn run(self, shutdown: CancellationToken) {
        let mut cursor = self.cfg.state_dir.as_deref().and_then(cursor::load);
        tracing::info!(endpoint = %redacted(&self.cfg.endpoint), ?cursor, "exporting lifecycle events over OTLP");
        while !shutdown.is_cancelled() {
            if !self.journal.is_primed() {
                tokio::select! {
                    _ = self.journal.primed() => {}
                    _ = shutdown.cancelled() => return,
                }
            }
            let (start, lost) = self.start_from(cursor);
            cursor = Some(start);
            if let Some(lost) = lost
                && !self.send_lost(lost, &mut cursor, &shutdown).await
            {
                return;
            }
            match self.follow(start, &mut cursor, &shutdown).await {
                Follow::Shutdown => return,
                Follow::Again => {}
            }
        }
    }

    /// Where to start: after the cursor if the journal still holds what follows it,
    /// else after what it dropped (named in the returned record).
    fn start_from(&self, cursor: Option<Cursor>) -> (Cursor, Option<(LogRecord, u64)>) {
        let (epoch, oldest) = (self.journal.epoch(), self.journal.oldest_revision());
        let node = &self.cfg.node;
        match cursor {
            // A new cursor: everything the journal holds.
            None => (Cursor { epoch, revision: oldest.saturating_sub(1) }, None),
            Some(c) if c.epoch != epoch => {
                // A new epoch continues the revisions (a reboot, a failed disk): what the
                // old one held after the cursor, up to the new one's oldest, is gone.
                // Revisions that started over leave the end unknown.
                let why = format!("the journal began epoch {epoch} (a reboot or a failed disk took them)");
                let from = c.revision + 1;
                let next = Cursor { epoch, revision: oldest.saturating_sub(1) };
                if oldest == from {
                    // Everything the old epoch published was exported.
                    return (next, None);
                }
                let to = oldest.checked_sub(1).filter(|to| *to >= from);
                let rec = records::lost_record(node, c.epoch, from, to, &why);
                let count = to.map_or(0, |to| to - from + 1);
                (next, Some((rec, count)))
            }
            Some(c) if c.revision > self.journal.revision() => {
                // A cursor past the journal's head (a state dir restored or copied from
                // another node): where the collector is in this journal is unknown.
                // Everything the journal holds goes again (each record's uid lets a
                // backend drop what it has), and whatever it no longer holds is named.
                let why = format!(
                    "the export cursor named revision {} of epoch {epoch}, beyond the journal's newest ({}): \
                     the state dir was restored or copied, and which revisions the collector has is unknown",
                    c.revision,
                    self.journal.revision()
                );
                let next = Cursor { epoch, revision: oldest.saturating_sub(1) };
                tracing::warn!(
                    cursor = c.revision,
                    head = self.journal.revision(),
                    "{why}; exporting again all the journal holds"
                );
                // Named, not counted: the collector may well have them.
                match oldest.checked_sub(1).filter(|to| *to >= 1) {
                    Some(to) => (next, Some((records::lost_record(node, epoch, 1, Some(to), &why), 0))),
                    None => (next, None),
                }
            }
            Some(c) if c.revision + 1 < oldest => {
                let (from, to) = (c.revision + 1, oldest - 1);
                let why = "the journal dropped them (its capacity or disk budget) before they were exported";
                let rec = records::lost_record(node, epoch, from, Some(to), why);
                (Cursor { epoch, revision: to }, Some((rec, to - from + 1)))
            }
            Some(c) => (c, None),
        }
    }

    /// Sends the lost-revisions record (with retries); false on shutdown.
    async fn send_lost(
        &self,
        (rec, count): (LogRecord, u64),
        cursor: &mut Option<Cursor>,
        sd: &CancellationToken,
    ) -> bool {
        tracing::warn!(count, "revisions were lost before export; sending a record that says so");
        self.metrics.lost.inc_by(count);
        let upto = cursor.expect("set");
        let batch = Batch { records: vec![rec], events: 0, upto, first_revision: 0, oldest_observed: None };
        self.deliver(batch, cursor, sd).await
    }

    /// Follows the journal from `start` until the subscription ends (dropped for
    /// falling behind, a new epoch) or shutdown.
    async fn follow(&self, start: Cursor, cursor: &mut Option<Cursor>, sd: &CancellationToken) -> Follow {
        let mut sub = self.journal.subscribe(Since::Revision(start.revision, start.epoch), Arc::new(Filter::default()));
        let epoch = sub.epoch;
        let replay = match std::mem::replace(&mut sub.start, Start::Replay(Default::default())) {
            Start::Replay(r) => r,
            // Compacted or a new epoch between the check and the subscription.
            Start::Snapshot { .. } => return self.pause(sd).await,
        };
        let mut pending: Vec<Arc<Entry>> = Vec::new();
        if let Some(mut disk) = replay.disk {
            loop {
                let page = tokio::task::spawn_blocking(move || disk.next_page().map(|p| (p, disk))).await;
                match page {
                    Ok(Ok((Some(page), d))) => {
                        disk = d;
                        pending.extend(page);
                        while pending.len() >= self.cfg.batch {
                            let rest = pending.split_off(self.cfg.batch);
                            let full = std::mem::replace(&mut pending, rest);
                            if !self.deliver(self.batch(&full, epoch), cursor, sd).await {
                                return Follow::Shutdown;
                            }
                        }
                    }
                    Ok(Ok((None, _))) => break,
                    Ok(Err(e)) => {
                        tracing::info!(error = %e, "the export's replay from disk stopped; starting again from the cursor");
                        if let Follow::Shutdown = self.flush(pending, epoch, cursor, sd).await {
                            return Follow::Shutdown;
                        }
                        return self.pause(sd).await;
                    }
                    Err(_) => return Follow::Shutdown,
                }
            }
        }
        pending.extend(replay.memory);
        // A batch waits at most `linger` from its first record.
        let mut due: Option<tokio::time::Instant> = None;
        loop {
            // Whatever is queued, up to a batch; then linger for more once one is held.
            while pending.len() < self.cfg.batch {
                match sub.try_next() {
                    Some(e) => pending.push(e),
                    None => break,
                }
            }
            if pending.len() >= self.cfg.batch || (!pending.is_empty() && sub.overflowed()) {
                let take = pending.len().min(self.cfg.batch);
                let rest = pending.split_off(take);
                let full = std::mem::replace(&mut pending, rest);
                if !self.deliver(self.batch(&full, epoch), cursor, sd).await {
                    return Follow::Shutdown;
                }
                continue;
            }
            if sub.overflowed() {
                // Fell behind while the collector was away: read again from the cursor.
                return Follow::Again;
            }
            let now = tokio::time::Instant::now();
            let until = match (pending.is_empty(), due) {
                (true, _) => {
                    due = None;
                    now + Duration::from_secs(3600)
                }
                (false, Some(d)) => d,
                (false, None) => *due.insert(now + self.cfg.linger),
            };
            tokio::select! {
                next = sub.next() => match next {
                    Some(e) => pending.push(e),
                    None => return self.flush(pending, epoch, cursor, sd).await,
                },
                _ = tokio::time::sleep_until(until) => {
                    due = None;
                    let full = std::mem::take(&mut pending);
                    if !self.deliver(self.batch(&full, epoch), cursor, sd).await {
                        return Follow::Shutdown;
                    }
                }
                _ = sd.cancelled() => {
                    let _ = self.flush(pending, epoch, cursor, sd).await;
                    return Follow::Shutdown;
                }
            }
            self.update_lag(cursor);
        }
    }

    /// Waits a moment before reading again after a read that could not go on.
    async fn pause(&self, sd: &CancellationToken) -> Follow {
        tokio::select! {
            _ = tokio::time::sleep(self.cfg.backoff_initial) => Follow::Again,
            _ = sd.cancelled() => Follow::Shutdown,
        }
    }

    /// Delivers what is pending (once), then starts over.
    async fn flush(
        &self,
        pending: Vec<Arc<Entry>>,
        epoch: u64,
        cursor: &mut Option<Cursor>,
        sd: &CancellationToken,
    ) -> Follow {
        for chunk in pending.chunks(self.cfg.batch.max(1)) {
            if !self.deliver(self.batch(chunk, epoch), cursor, sd).await {
                return Follow::Shutdown;
            }
        }
        Follow::Again
    }

    fn batch(&self, entries: &[Arc<Entry>], epoch: u64) -> Batch {
        let upto = Cursor { epoch, revision: entries.last().map_or(0, |e| e.revision) };
        Batch {
            records: entries.iter().map(|e| records::log_record(e, epoch, &self.cfg.node)).collect(),
            events: entries.len() as u64,
            upto,
            first_revision: entries.first().map_or(0, |e| e.revision),
            oldest_observed: entries.first().map(|e| e.event.observed_at),
        }
    }

    /// Sends a batch until the collector accepts it (or drops it for good), then
    /// moves the cursor; false when shutdown came first.
    async fn deliver(&self, batch: Batch, cursor: &mut Option<Cursor>, sd: &CancellationToken) -> bool {
        if batch.records.is_empty() {
            return true;
        }
        if let Some(at) = batch.oldest_observed {
            self.metrics.lag_seconds.set(SystemTime::now().duration_since(at).unwrap_or_default().as_secs_f64());
        }
        let req = ExportLogsServiceRequest {
            resource_logs: vec![otlp::ResourceLogs {
                resource: Some(self.resource.clone()),
                scope_logs: vec![otlp::ScopeLogs {
                    scope: Some(otlp::InstrumentationScope {
                        name: "plegd".into(),
                        version: env!("CARGO_PKG_VERSION").into(),
                    }),
                    log_records: batch.records,
                }],
            }],
        };
        let mut backoff = self.cfg.backoff_initial;
        let mut attempt = 0u32;
        loop {
            self.update_lag(cursor);
            if attempt > 0 {
                self.metrics.retried.inc();
            }
            attempt += 1;
            let outcome = tokio::select! {
                o = self.export(req.clone()) => o,
                _ = sd.cancelled() => return false,
            };
            match outcome {
                Outcome::Accepted => {
                    self.metrics.exported.inc_by(batch.events);
                    break;
                }
                Outcome::Partial { rejected, message } => {
                    let rejected = rejected.max(0) as u64;
                    tracing::warn!(rejected, %message, "the collector rejected part of a batch; not retried (OTLP)");
                    self.metrics.rejected.inc_by(rejected);
                    self.metrics.exported.inc_by(batch.events.saturating_sub(rejected));
                    break;
                }
                Outcome::Retry { after, error } => {
                    self.metrics.failed.inc();
                    // The collector's RetryInfo is honoured, within reason: a collector
                    // cannot stop the export for longer than `retry_after_max` at a time.
                    let delay =
                        after.map_or(backoff, |a| a.min(self.cfg.retry_after_max).max(self.cfg.backoff_initial));
                    if attempt == 1 || attempt.is_power_of_two() {
                        tracing::warn!(%error, attempt, ?delay, "OTLP export failed; retrying");
                    }
                    backoff = (backoff * 2).min(self.cfg.backoff_max);
                    tokio::select! {
                        _ = tokio::time::sleep(delay) => {}
                        _ = sd.cancelled() => return false,
                    }
                }
                Outcome::Dropped { error } => {
                    self.metrics.failed.inc();
                    self.metrics.dropped.inc_by(batch.events);
                    tracing::error!(%error, records = batch.events, "OTLP export refused for good; the batch is dropped and counted");
                    if batch.events > 0 && batch.first_revision > 0 {
                        // Named, once, in a record of its own (best effort: the same
                        // collector may refuse it too).
                        let why = format!("the collector refused them for good ({error})");
                        let first = batch.first_revision;
                        let rec = records::lost_record(
                            &self.cfg.node,
                            batch.upto.epoch,
                            first,
                            Some(batch.upto.revision),
                            &why,
                        );
                        let mut one = req.clone();
                        one.resource_logs[0].scope_logs[0].log_records = vec![rec];
                        let _ = self.export(one).await;
                    }
                    break;
                }
            }
        }
        *cursor = Some(batch.upto);
        if let Some(dir) = self.cfg.state_dir.clone() {
            let upto = batch.upto;
            match tokio::task::spawn_blocking(move || cursor::store(&dir, upto)).await {
                Ok(Ok(())) => {}
                Ok(Err(e)) => tracing::warn!(error = %e, "the OTLP cursor was not saved; a restart sends more again"),
                Err(_) => {}
            }
        }
        self.update_lag(cursor);
        true
    }

    /// One export, within the export's deadline whatever the connection does; a
    /// failure puts a new connection in place for the next try.
    async fn export(&self, req: ExportLogsServiceRequest) -> Outcome {
        let channel = self.channel.lock().expect("otlp channel lock").clone();
        let outcome =
            tokio::time::timeout(self.cfg.timeout, otlp::export(channel, &self.headers, req, self.cfg.timeout))
                .await
                .unwrap_or_else(|_| Outcome::Retry {
                    after: None,
                    error: format!("the collector did not answer within {:?}", self.cfg.timeout),
                });
        if matches!(outcome, Outcome::Retry { .. } | Outcome::Dropped { .. }) {
            *self.channel.lock().expect("otlp channel lock") = self.endpoint.connect_lazy();
        }
        outcome
    }

    fn update_lag(&self, cursor: &Option<Cursor>) {
        let lag = match cursor {
            Some(c) if c.epoch == self.journal.epoch() => self.journal.revision().saturating_sub(c.revision),
            _ => self.journal.revision(),
        };
        self.metrics.lag_revisions.set(lag as i64);
        if lag == 0 {
            self.metrics.lag_seconds.set(0.0);
        }
    }
}

/// How following the journal ended.
enum Follow {
    /// Start over from the cursor.
    Again,
    /// Shutdown.
    Shutdown,
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

/// The node's name when `--node-name` is not given: the kernel's host name.
pub fn host_name() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .or_else(|_| std::fs::read_to_string("/etc/hostname"))
        .map(|s| s.trim().to_owned())
        .ok()
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| "unknown".into())
}

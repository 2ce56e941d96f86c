//! The exporter's loop: the journal's [`Feed`](crate::journal::Feed) from the cursor, cut into batches (a
//! batch goes when it is full or `linger` after its first record, whichever comes
//! first), each delivered under the [`RetryPolicy`] before the cursor moves past it.
//!
//! It owns the cursor: it names the last revision the collector accepted (or refused
//! for good), it moves only after a batch is settled, and it is saved after each move.
//! When the feed ends (the exporter fell behind, the journal began a new epoch, a
//! replay stopped) the exporter reads again from its cursor; what the journal dropped
//! before the exporter sent it is named in one record and counted. Shutdown is one
//! convention: every wait is raced against it ([`Driver::until_shutdown`]) and ends
//! the loop with [`Shutdown`], leaving the cursor where the last settled batch put it.

use std::future::Future;
use std::pin::pin;
use std::sync::Arc;
use std::time::SystemTime;

use tokio_stream::StreamExt;
use tokio_util::sync::CancellationToken;

use super::cursor::{self, Cursor};
use super::otlp::{self, ExportLogsServiceRequest, LogRecord, Outcome};
use super::retry::RetryPolicy;
use super::{ExportConfig, ExportMetrics, records, redacted};

/// A cursor save slower than this is logged: the exporter waits for each.
const SLOW_SAVE: std::time::Duration = std::time::Duration::from_secs(1);
use crate::journal::{Entry, FeedItem, Filter, Journal, Since};

/// Where the exporter sends a request: the collector.
pub trait Collector: Send + Sync {
    /// Sends one request; the answer, classified.
    fn export(&self, req: ExportLogsServiceRequest) -> impl Future<Output = Outcome> + Send;
}

/// Shutdown came: the exporter stops where it is.
#[derive(Debug)]
pub(super) struct Shutdown;

/// A step of the loop: `Err` at shutdown.
type Step<T = ()> = Result<T, Shutdown>;

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

/// The exporter's loop and its cursor.
pub(super) struct Driver<C> {
    pub(super) cfg: ExportConfig,
    pub(super) journal: Journal,
    pub(super) metrics: ExportMetrics,
    pub(super) collector: C,
    pub(super) resource: otlp::Resource,
    /// The last revision the collector settled (`None`: none yet, and none saved).
    pub(super) cursor: Option<Cursor>,
    /// Where the cursor is kept; `None`: memory only.
    pub(super) state_dir: Option<std::path::PathBuf>,
    pub(super) shutdown: CancellationToken,
    /// Every pod's identity, as the records name its workload.
    pub(super) identities: std::sync::Arc<crate::model::identity::Identities>,
}

impl<C: Collector> Driver<C> {
    /// Exports until shutdown, from the cursor saved in the state dir if there is one.
    pub(super) async fn run(mut self) {
        self.cursor = self.state_dir.as_deref().and_then(cursor::load);
        let (endpoint, cursor) = (redacted(&self.cfg.endpoint), self.cursor);
        tracing::info!(%endpoint, ?cursor, "exporting lifecycle events over OTLP");
        let Err(Shutdown) = self.export_all().await;
    }

    /// Reads the journal from the cursor, again and again, until shutdown.
    async fn export_all(&mut self) -> Step<std::convert::Infallible> {
        loop {
            self.until_shutdown(self.journal.primed()).await?;
            let (start, lost) = self.start_from(self.cursor);
            self.cursor = Some(start);
            if let Some(lost) = lost {
                self.send_lost(lost).await?;
            }
            self.follow(start).await?;
        }
    }

    /// `work`, unless shutdown comes first.
    pub(super) async fn until_shutdown<F: Future>(&self, work: F) -> Step<F::Output> {
        tokio::select! {
            biased;
            _ = self.shutdown.cancelled() => Err(Shutdown),
            out = work => Ok(out),
        }
    }

    /// Where to start: after the cursor if the journal still holds what follows it,
    /// else after what it dropped (named in the returned record, with how many
    /// revisions it counts as lost).
    fn start_from(&self, cursor: Option<Cursor>) -> (Cursor, Option<(LogRecord, u64)>) {
        let (epoch, oldest) = (self.journal.epoch(), self.journal.oldest_revision());
        let node = &self.cfg.node;
        let held = Cursor { epoch, revision: oldest.saturating_sub(1) };
        match cursor {
            // A new cursor: everything the journal holds.
            None => (held, None),
            Some(c) if c.epoch != epoch => {
                // A new epoch continues the revisions (a reboot, a failed disk): what the
                // old one held after the cursor, up to the new one's oldest, is gone.
                // Revisions that started over leave the end unknown.
                let why = format!("the journal began epoch {epoch} (a reboot or a failed disk took them)");
                let from = c.revision + 1;
                if oldest == from {
                    // Everything the old epoch published was exported.
                    return (held, None);
                }
                let to = oldest.checked_sub(1).filter(|to| *to >= from);
                let rec = records::lost_record(node, c.epoch, from, to, &why);
                let count = to.map_or(0, |to| to - from + 1);
                (held, Some((rec, count)))
            }
            Some(c) if c.revision > self.journal.revision() => (held, self.restored_cursor(c, epoch, oldest)),
            Some(c) if c.revision + 1 < oldest => {
                let (from, to) = (c.revision + 1, oldest - 1);
                let why = "the journal dropped them (its capacity or disk budget) before they were exported";
                let rec = records::lost_record(node, epoch, from, Some(to), why);
                (Cursor { epoch, revision: to }, Some((rec, to - from + 1)))
            }
            Some(c) => (c, None),
        }
    }

    /// A cursor past the journal's head (a state dir restored or copied from another
    /// node): where the collector is in this journal is unknown. Everything the journal
    /// holds goes again (each record's uid lets a backend drop what it has), and
    /// whatever it no longer holds is named, not counted: the collector may well have
    /// it.
    fn restored_cursor(&self, c: Cursor, epoch: u64, oldest: u64) -> Option<(LogRecord, u64)> {
        let head = self.journal.revision();
        let why = format!(
            "the export cursor named revision {} of epoch {epoch}, beyond the journal's newest ({head}): \
             the state dir was restored or copied, and which revisions the collector has is unknown",
            c.revision,
        );
        tracing::warn!(cursor = c.revision, head, "{why}; exporting again all the journal holds");
        let to = oldest.checked_sub(1).filter(|to| *to >= 1)?;
        Some((records::lost_record(&self.cfg.node, epoch, 1, Some(to), &why), 0))
    }

    /// Sends the lost-revisions record (with retries).
    async fn send_lost(&mut self, (rec, count): (LogRecord, u64)) -> Step {
        tracing::warn!(count, "revisions were lost before export; sending a record that says so");
        self.metrics.lost.inc_by(count);
        let upto = self.cursor.expect("set before");
        let batch = Batch { records: vec![rec], events: 0, upto, first_revision: 0, oldest_observed: None };
        self.deliver(batch).await
    }

    /// Follows the journal from `start`, batch by batch, until the feed ends.
    async fn follow(&mut self, start: Cursor) -> Step {
        let sub = self.journal.subscribe(Since::Revision(start.revision, start.epoch), Arc::new(Filter::default()));
        let epoch = sub.epoch;
        let (snapshot, feed) = sub.into_feed();
        if snapshot.is_some() {
            // Compacted or a new epoch between the check and the subscription.
            return self.pause().await;
        }
        let mut batches = pin!(feed.chunks_timeout(self.cfg.batch.max(1), self.cfg.linger));
        while let Some(chunk) = self.until_shutdown(batches.next()).await? {
            let (entries, end) = split_chunk(chunk);
            self.deliver(self.batch(&entries, epoch)).await?;
            match end {
                None => self.update_lag(),
                Some(FeedItem::ReplayStopped(e)) => {
                    tracing::info!(error = %e, "the export's replay from disk stopped; starting again from the cursor");
                    return self.pause().await;
                }
                // Fell behind (while the collector was away) or a new epoch: read again
                // from the cursor.
                Some(_) => return Ok(()),
            }
        }
        Ok(())
    }

    /// Waits a moment before reading again after a read that could not go on.
    async fn pause(&self) -> Step {
        self.until_shutdown(tokio::time::sleep(self.cfg.backoff_initial)).await
    }

    fn batch(&self, entries: &[Arc<Entry>], epoch: u64) -> Batch {
        Batch {
            records: entries.iter().map(|e| records::log_record(e, epoch, &self.cfg.node, &self.identities)).collect(),
            events: entries.len() as u64,
            upto: Cursor { epoch, revision: entries.last().map_or(0, |e| e.revision) },
            first_revision: entries.first().map_or(0, |e| e.revision),
            oldest_observed: entries.first().map(|e| e.event.observed_at),
        }
    }

    fn request(&self, records: Vec<LogRecord>) -> ExportLogsServiceRequest {
        let scope = otlp::InstrumentationScope { name: "plegd".into(), version: env!("CARGO_PKG_VERSION").into() };
        ExportLogsServiceRequest {
            resource_logs: vec![otlp::ResourceLogs {
                resource: Some(self.resource.clone()),
                scope_logs: vec![otlp::ScopeLogs { scope: Some(scope), log_records: records }],
            }],
        }
    }

    /// Sends a batch until the collector settles it (accepts it, or refuses it for
    /// good), then moves the cursor past it.
    async fn deliver(&mut self, mut batch: Batch) -> Step {
        if batch.records.is_empty() {
            return Ok(());
        }
        if let Some(at) = batch.oldest_observed {
            self.metrics.lag_seconds.set(SystemTime::now().duration_since(at).unwrap_or_default().as_secs_f64());
        }
        let req = self.request(std::mem::take(&mut batch.records));
        let mut retries = self.cfg.retry_policy().start();
        loop {
            self.update_lag();
            if retries.retrying() {
                self.metrics.retried.inc();
            }
            let outcome = self.until_shutdown(self.collector.export(req.clone())).await?;
            retries.attempted();
            match outcome {
                Outcome::Accepted => {
                    self.count_accepted(&batch, 0, "");
                    break;
                }
                Outcome::Partial { rejected, message } => {
                    self.count_accepted(&batch, rejected.max(0) as u64, &message);
                    break;
                }
                Outcome::Retry { after, error } => {
                    let (delay, attempt) = (retries.delay(after), retries.attempts());
                    self.metrics.failed.inc();
                    if attempt == 1 || attempt.is_power_of_two() {
                        tracing::warn!(%error, attempt, ?delay, "OTLP export failed; retrying");
                    }
                    self.until_shutdown(tokio::time::sleep(delay)).await?;
                }
                Outcome::Dropped { error } => {
                    self.give_up(&batch, req, &error).await;
                    break;
                }
            }
        }
        self.advance(batch.upto).await;
        Ok(())
    }

    fn count_accepted(&self, batch: &Batch, rejected: u64, message: &str) {
        if rejected > 0 || !message.is_empty() {
            tracing::warn!(rejected, %message, "the collector rejected part of a batch; not retried (OTLP)");
            self.metrics.rejected.inc_by(rejected);
        }
        self.metrics.exported.inc_by(batch.events.saturating_sub(rejected));
    }

    /// A batch the collector refused for good: counted, and its revisions named once in
    /// a record of their own (best effort: the same collector may refuse it too). That
    /// one send is not raced against shutdown, so that a refused batch is not refused
    /// and counted again after a restart; the export's deadline bounds it.
    async fn give_up(&self, batch: &Batch, mut req: ExportLogsServiceRequest, error: &str) {
        self.metrics.failed.inc();
        self.metrics.dropped.inc_by(batch.events);
        tracing::error!(%error, records = batch.events, "OTLP export refused for good; the batch is dropped and counted");
        if batch.events == 0 || batch.first_revision == 0 {
            return;
        }
        let why = format!("the collector refused them for good ({error})");
        let (first, upto) = (batch.first_revision, batch.upto);
        let rec = records::lost_record(&self.cfg.node, upto.epoch, first, Some(upto.revision), &why);
        req.resource_logs[0].scope_logs[0].log_records = vec![rec];
        let _ = self.collector.export(req).await;
    }

    /// Moves the cursor to `upto` and saves it. The lag counts from the collector's
    /// acceptance, before the save: a slow disk (a sync can take seconds) delays the next
    /// batch, never what the gauge says of the last one.
    async fn advance(&mut self, upto: Cursor) {
        self.cursor = Some(upto);
        self.update_lag();
        if let Some(dir) = self.state_dir.clone() {
            let started = std::time::Instant::now();
            match tokio::task::spawn_blocking(move || cursor::store(&dir, upto)).await {
                Ok(Ok(())) => {}
                Ok(Err(e)) => tracing::warn!(error = %e, "the OTLP cursor was not saved; a restart sends more again"),
                Err(_) => {}
            }
            let took = started.elapsed();
            if took > SLOW_SAVE {
                tracing::warn!(?took, "saving the OTLP cursor was slow (the state dir's disk); export waited for it");
            }
        }
    }

    fn update_lag(&self) {
        let lag = match self.cursor {
            Some(c) if c.epoch == self.journal.epoch() => self.journal.revision().saturating_sub(c.revision),
            _ => self.journal.revision(),
        };
        self.metrics.lag_revisions.set(lag as i64);
        if lag == 0 {
            self.metrics.lag_seconds.set(0.0);
        }
    }
}

/// A chunk of the feed as a batch's entries and the item that ended the feed, if one
/// did (it comes last: the feed ends with it).
fn split_chunk(chunk: Vec<FeedItem>) -> (Vec<Arc<Entry>>, Option<FeedItem>) {
    let mut entries = Vec::with_capacity(chunk.len());
    let mut end = None;
    for item in chunk {
        match item {
            FeedItem::Entry(e) if end.is_none() => entries.push(e),
            other => {
                end.get_or_insert(other);
            }
        }
    }
    (entries, end)
}

impl ExportConfig {
    /// The delays between attempts at a batch.
    pub fn retry_policy(&self) -> RetryPolicy {
        RetryPolicy { initial: self.backoff_initial, max: self.backoff_max, after_max: self.retry_after_max }
    }
}

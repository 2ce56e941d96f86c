//! The journal's metrics, registered by the journal.

use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;

/// Journal metrics.
#[derive(Clone)]
pub struct JournalMetrics {
    /// `plegd_journal_revision`.
    pub revision: Gauge,
    /// `plegd_watch_resets_total{reason}`.
    pub resets: Family<ReasonLabel, Counter>,
    /// `plegd_journal_durable`: 1 while batches reach the disk before delivery.
    pub durable: Gauge,
    /// `plegd_journal_write_errors_total`.
    pub write_errors: Counter,
    /// `plegd_journal_commit_seconds`.
    pub commit: Histogram,
    /// `plegd_journal_memory_bytes`: records held in memory.
    pub memory_bytes: Gauge,
    /// `plegd_journal_disk_bytes`: records kept on disk.
    pub disk_bytes: Gauge,
    /// `plegd_journal_oldest_revision`: the oldest revision a resume can start after.
    pub oldest: Gauge,
}

/// Label set `{reason}`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, prometheus_client::encoding::EncodeLabelSet)]
pub struct ReasonLabel {
    /// Reason, as in the API enum.
    pub reason: String,
}

impl JournalMetrics {
    /// Creates the journal's families and registers them in `registry` (the caller gives
    /// it the `plegd` prefix): its own under `journal`, the resets it tells watch streams
    /// under `watch`, beside the API's `watch_clients`.
    pub fn register(registry: &mut crate::metrics::Registry) -> Self {
        let journal = Self {
            revision: Gauge::default(),
            resets: Family::default(),
            durable: Gauge::default(),
            write_errors: Counter::default(),
            commit: crate::metrics::fast_buckets(),
            memory_bytes: Gauge::default(),
            disk_bytes: Gauge::default(),
            oldest: Gauge::default(),
        };
        registry.sub_registry_with_prefix("watch").register(
            "resets",
            "Watch streams told to start over, by reason",
            journal.resets.clone(),
        );
        let registry = registry.sub_registry_with_prefix("journal");
        registry.register("revision", "The latest event revision", journal.revision.clone());
        registry.register(
            "durable",
            "1 while each batch of events is on disk before any watcher sees it; 0 in memory only (no state dir, or the disk failed)",
            journal.durable.clone(),
        );
        registry.register("write_errors", "Failed writes of the journal to disk", journal.write_errors.clone());
        registry.register("commit_seconds", "Time to commit one batch of events to disk", journal.commit.clone());
        registry.register(
            "memory_bytes",
            "Bytes of event records the journal holds in memory",
            journal.memory_bytes.clone(),
        );
        registry.register("disk_bytes", "Bytes of event records the journal keeps on disk", journal.disk_bytes.clone());
        registry.register(
            "oldest_revision",
            "The oldest revision kept: a resume from an older one is reset",
            journal.oldest.clone(),
        );
        // Known label values start at zero, so rate() and alerts work from the start.
        for reason in ["SLOW_CONSUMER", "REVISION_TOO_OLD", "RUNTIME_RESYNC"] {
            let _ = journal.resets.get_or_create(&ReasonLabel { reason: reason.into() });
        }
        journal
    }
}

#[cfg(test)]
impl JournalMetrics {
    /// Families registered in a registry nobody reads: a journal in a test.
    pub(crate) fn throwaway() -> Self {
        Self::register(&mut crate::metrics::Registry::default())
    }
}

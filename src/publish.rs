//! The one publish path: every producer's events (the PLEG's, through the publisher
//! task; the reconcilers', through the sync loop) are accounted in metrics and appended
//! to the journal by [`PublishPath::publish`], which gives each its revision and fans it
//! out.

use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use crate::journal::Journal;
use crate::lookup::ContainerLookup;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::histogram::Histogram;

use crate::liveness::{Beat, beat_timer};
use crate::metrics::{Registry, fast_buckets};
use crate::model::event::PodLifecycleEvent;

/// Publishes one event: the journal, then the metrics. Cheap to clone.
#[derive(Clone)]
pub struct PublishPath {
    journal: Journal,
    metrics: EventMetrics,
    lookup: Option<ContainerLookup>,
}

impl PublishPath {
    /// A path into `journal`.
    pub fn new(journal: Journal, metrics: EventMetrics) -> Self {
        Self { journal, metrics, lookup: None }
    }

    /// Also teaches `lookup` what each published event says.
    pub fn with_lookup(mut self, lookup: ContainerLookup) -> Self {
        self.lookup = Some(lookup);
        self
    }

    /// Publishes `ev`; its revision, or `None` when the journal refused it (a
    /// reconciler's event about a pod that is gone).
    pub fn publish(&self, ev: PodLifecycleEvent) -> Option<u64> {
        self.publish_batch(vec![ev]).pop().flatten()
    }

    /// Publishes a batch in order, committed to the journal's disk in one write;
    /// each event's revision, or `None` where the journal refused it.
    pub fn publish_batch(&self, events: Vec<PodLifecycleEvent>) -> Vec<Option<u64>> {
        let counted: Vec<_> = events.iter().map(|ev| (ev.kind, ev.source, ev.runtime_timestamp)).collect();
        // The lookup learns before the journal's disk write: an agent asking by PID
        // waits for the runtime's read only. (It skips reconcilers' events, the only
        // ones the journal may refuse.)
        if let Some(lookup) = &self.lookup {
            lookup.observe(&events);
        }
        let revisions = self.journal.append_batch(events);
        let m = &self.metrics;
        let now = std::time::SystemTime::now();
        for ((kind, source, runtime_ts), rev) in counted.into_iter().zip(&revisions) {
            if rev.is_none() {
                continue;
            }
            m.total.get_or_create(&TypeSource { r#type: kind.as_str().into(), source: source.as_str().into() }).inc();
            if let Some(d) = runtime_ts.and_then(|t| now.duration_since(t).ok()) {
                m.delivery_latency.observe(d.as_secs_f64());
            }
        }
        revisions
    }
}

/// Events the publisher commits to the journal in one batch at most: what the PLEG
/// queued while the previous batch was written (a relist's events, a hint round's).
const BATCH: usize = 512;

/// Receives the PLEG's events in order and publishes them.
pub struct Publisher {
    rx: mpsc::Receiver<Vec<PodLifecycleEvent>>,
    path: PublishPath,
    beat: Beat,
    /// Tells when the first full relist is done (its events were sent before).
    health: Option<crate::pleg::health::PlegHealth>,
}

/// Creates the producer side (bounded: a full channel makes producers wait, it never
/// drops) and the publisher that appends to `journal`. Each message is the events of
/// one pod read; the publisher commits whole messages only.
pub fn channel(
    capacity: usize,
    journal: Journal,
    metrics: EventMetrics,
) -> (mpsc::Sender<Vec<PodLifecycleEvent>>, Publisher) {
    let (tx, rx) = mpsc::channel(capacity);
    (tx, Publisher { rx, path: PublishPath::new(journal, metrics), beat: Beat::detached("publish"), health: None })
}

impl Publisher {
    /// Beats `beat` as it publishes and at least every [`crate::liveness::BEAT_EVERY`].
    pub fn with_liveness(mut self, beat: Beat) -> Self {
        self.beat = beat;
        self
    }

    /// Teaches `lookup` what each published event says.
    pub fn with_lookup(mut self, lookup: crate::lookup::ContainerLookup) -> Self {
        self.path = self.path.with_lookup(lookup);
        self
    }

    /// Marks the journal primed once `health` says the first full relist is done and
    /// every event queued before is appended (the relister sends a relist's events
    /// before it records the relist).
    pub fn priming(mut self, health: crate::pleg::health::PlegHealth) -> Self {
        self.health = Some(health);
        self
    }

    fn prime(&mut self) {
        let done = self.health.as_ref().is_some_and(|h| h.first_relist_done());
        if done && self.rx.is_empty() {
            self.path.journal.mark_primed();
            self.health = None;
        }
    }

    /// The publish path, for the other producers.
    pub fn path(&self) -> PublishPath {
        self.path.clone()
    }

    /// Publishes until shutdown or until every producer is gone; on shutdown it
    /// publishes what was already queued.
    pub async fn run(mut self, shutdown: CancellationToken) {
        let mut beat = beat_timer();
        // Woken by the first relist itself; a batch still queued then primes after it.
        let health = self.health.clone();
        let first_relist = async move {
            match health {
                Some(h) => h.first_relist().await,
                None => std::future::pending().await,
            }
        };
        tokio::pin!(first_relist);
        let mut relisted = false;
        loop {
            tokio::select! {
                biased;
                _ = &mut first_relist, if !relisted => {
                    relisted = true;
                    self.prime();
                }
                ev = self.rx.recv() => match ev {
                    Some(mut batch) => {
                        while batch.len() < BATCH {
                            match self.rx.try_recv() {
                                Ok(more) => batch.extend(more),
                                Err(_) => break,
                            }
                        }
                        self.path.publish_batch(batch);
                        self.beat.beat();
                        if self.health.is_some() {
                            self.prime();
                        }
                    }
                    None => return,
                },
                _ = beat.tick() => self.beat.beat(),
                _ = shutdown.cancelled() => {
                    let mut rest = Vec::new();
                    while let Ok(more) = self.rx.try_recv() {
                        rest.extend(more);
                    }
                    self.path.publish_batch(rest);
                    return;
                }
            }
        }
    }
}

/// Label set `{type, source}` of lifecycle events.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct TypeSource {
    /// Event type, as in the API enum.
    pub r#type: String,
    /// Event source, as in the API enum.
    pub source: String,
}

/// Metrics of published lifecycle events.
#[derive(Clone)]
pub struct EventMetrics {
    /// `plegd_lifecycle_events_total{type,source}`.
    pub total: Family<TypeSource, Counter>,
    /// `plegd_event_delivery_latency_seconds`: runtime time of a change → published.
    pub delivery_latency: Histogram,
}

impl EventMetrics {
    /// Creates the publish path's families and registers them in `registry` (the caller
    /// gives it the `plegd` prefix: the two names share no stem).
    pub fn register(registry: &mut Registry) -> Self {
        let events = EventMetrics { total: Family::default(), delivery_latency: fast_buckets() };
        registry.register("lifecycle_events", "Pod lifecycle events published", events.total.clone());
        registry.register(
            "event_delivery_latency_seconds",
            "From the runtime's time of a change to the event being published",
            events.delivery_latency.clone(),
        );
        events
    }
}

//! The publisher: takes the PLEG's events in order, accounts them in metrics, and
//! appends them to the journal, which gives each its revision and fans it out.

use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use crate::journal::Journal;
use crate::metrics::{EventMetrics, TypeSource};
use crate::pleg::PodLifecycleEvent;
use crate::pleg::health::{Beat, beat_timer};

/// Receives events from producers and publishes them.
pub struct Publisher {
    rx: mpsc::Receiver<PodLifecycleEvent>,
    journal: Journal,
    metrics: Option<EventMetrics>,
    beat: Beat,
}

/// Creates the producer side (bounded: a full channel makes producers wait, it never
/// drops) and the publisher that appends to `journal`.
pub fn channel(
    capacity: usize,
    journal: Journal,
    metrics: Option<EventMetrics>,
) -> (mpsc::Sender<PodLifecycleEvent>, Publisher) {
    let (tx, rx) = mpsc::channel(capacity);
    (tx, Publisher { rx, journal, metrics, beat: Beat::detached("publish") })
}

impl Publisher {
    /// Beats `beat` as it publishes and at least every [`crate::pleg::health::BEAT_EVERY`].
    pub fn with_liveness(mut self, beat: Beat) -> Self {
        self.beat = beat;
        self
    }

    fn publish(&self, ev: PodLifecycleEvent) {
        if let Some(m) = &self.metrics {
            m.total
                .get_or_create(&TypeSource { r#type: ev.kind.as_str().into(), source: ev.source.as_str().into() })
                .inc();
            if let Some(d) = ev.runtime_timestamp.and_then(|t| std::time::SystemTime::now().duration_since(t).ok()) {
                m.delivery_latency.observe(d.as_secs_f64());
            }
        }
        self.journal.append(ev);
    }

    /// Publishes until shutdown or until every producer is gone; on shutdown it
    /// publishes what was already queued.
    pub async fn run(mut self, shutdown: CancellationToken) {
        let mut beat = beat_timer();
        loop {
            tokio::select! {
                biased;
                ev = self.rx.recv() => match ev {
                    Some(ev) => {
                        self.publish(ev);
                        self.beat.beat();
                    }
                    None => return,
                },
                _ = beat.tick() => self.beat.beat(),
                _ = shutdown.cancelled() => {
                    while let Ok(ev) = self.rx.try_recv() {
                        self.publish(ev);
                    }
                    return;
                }
            }
        }
    }
}

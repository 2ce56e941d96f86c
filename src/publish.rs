//! The publisher: takes the PLEG's events in order, accounts them in metrics, and
//! appends them to the journal, which gives each its revision and fans it out.

use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use crate::journal::Journal;
use crate::metrics::{EventMetrics, TypeSource};
use crate::pleg::PodLifecycleEvent;

/// Receives events from producers and publishes them.
pub struct Publisher {
    rx: mpsc::Receiver<PodLifecycleEvent>,
    journal: Journal,
    metrics: Option<EventMetrics>,
}

/// Creates the producer side (bounded: a full channel makes producers wait, it never
/// drops) and the publisher that appends to `journal`.
pub fn channel(
    capacity: usize,
    journal: Journal,
    metrics: Option<EventMetrics>,
) -> (mpsc::Sender<PodLifecycleEvent>, Publisher) {
    let (tx, rx) = mpsc::channel(capacity);
    (tx, Publisher { rx, journal, metrics })
}

impl Publisher {
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
        loop {
            tokio::select! {
                biased;
                ev = self.rx.recv() => match ev {
                    Some(ev) => self.publish(ev),
                    None => return,
                },
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

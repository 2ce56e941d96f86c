//! The publisher: takes the PLEG's events in order, accounts them in metrics, and fans
//! them out to in-process subscribers.

use std::sync::Arc;

use tokio::sync::{broadcast, mpsc};
use tokio_util::sync::CancellationToken;

use crate::metrics::{EventMetrics, TypeSource};
use crate::pleg::PodLifecycleEvent;

/// Receives events from producers and publishes them.
pub struct Publisher {
    rx: mpsc::Receiver<PodLifecycleEvent>,
    tx: broadcast::Sender<Arc<PodLifecycleEvent>>,
    metrics: Option<EventMetrics>,
}

/// Subscribes to published events. Cheap to clone.
#[derive(Clone)]
pub struct EventFeed {
    tx: broadcast::Sender<Arc<PodLifecycleEvent>>,
}

/// Creates the producer side (bounded: a full channel makes producers wait, it never
/// drops), the publisher, and the feed.
pub fn channel(
    capacity: usize,
    metrics: Option<EventMetrics>,
) -> (mpsc::Sender<PodLifecycleEvent>, Publisher, EventFeed) {
    let (in_tx, rx) = mpsc::channel(capacity);
    let (tx, _) = broadcast::channel(capacity.max(16));
    (in_tx, Publisher { rx, tx: tx.clone(), metrics }, EventFeed { tx })
}

impl EventFeed {
    /// A subscription to events published from now on. A subscriber that falls behind
    /// by the channel's capacity gets `Lagged`.
    pub fn subscribe(&self) -> broadcast::Receiver<Arc<PodLifecycleEvent>> {
        self.tx.subscribe()
    }
}

impl Publisher {
    fn publish(&self, ev: PodLifecycleEvent) {
        if let Some(m) = &self.metrics {
            m.total
                .get_or_create(&TypeSource { r#type: ev.kind.as_str().into(), source: ev.source.as_str().into() })
                .inc();
            if let Some(t) = ev.runtime_timestamp
                && let Ok(d) = std::time::SystemTime::now().duration_since(t)
            {
                m.delivery_latency.observe(d.as_secs_f64());
            }
        }
        let _ = self.tx.send(Arc::new(ev));
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

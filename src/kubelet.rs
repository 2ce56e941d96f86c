//! The kubelet's Pods API (KEP-4188) as plegd's source of who each pod is. One watch,
//! never a poll: the watcher holds what the kubelet says in [`Identities`] and tells a
//! change of a pod's identity as `POD_UPDATED` (source `KUBELET`) through the one publish
//! path.
//!
//! The API has no resume: every watch replays every pod as ADDED, then
//! INITIAL_SYNC_COMPLETE. A replayed pod whose identity did not change makes no event;
//! a pod the replay did not name was deleted while the watch was away, and is noted gone.
//! Every call is answered FAILED_PRECONDITION while the kubelet starts, and a watcher
//! that falls behind is cut off with RESOURCE_EXHAUSTED: both are retried with backoff,
//! and meanwhile every pod keeps the identity last heard (inferred for a pod never
//! heard of). Of each pod only its identity is decoded ([`KubeletWord::decode`]).
//!
//! With a state dir, what the kubelet said is kept there ([`saved`]) at each upkeep
//! that finds it changed and at shutdown, and taken back at the next start. The watch
//! never waits for the disk: a write runs off the async threads, one at a time, and a
//! slow one is looked at again at the next upkeep.

pub mod saved;

use std::collections::HashSet;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use tokio_util::sync::CancellationToken;

use crate::backoff::Backoff;
use crate::cache::PodCache;
use crate::labels::shared;
use crate::metrics::Registry;
use crate::model::event::{EventSource, EventType, PodLifecycleEvent};
use crate::model::identity::{Identities, KubeletSource, KubeletWord};
use crate::proto::kubelet_pods::{EventType as WatchType, WatchPodsRequest, pods_client::PodsClient};
use crate::publish::PublishPath;

/// The kubelet's Pods API socket, as the kubelet makes it under its root directory.
pub const DEFAULT_SOCKET: &str = "/var/lib/kubelet/pods-api/pods-api.sock";

/// Where the kubelet's Pods API is.
#[derive(Clone, Debug, Default)]
pub struct KubeletConfig {
    /// The Pods API socket; `None`: not asked, every identity inferred.
    pub pods_socket: Option<PathBuf>,
}

/// The longest wait before the next try: a socket that appears later (a kubelet
/// upgraded, started after plegd) is found within it.
const RETRY_AT_MOST: Duration = Duration::from_secs(10);

/// The wait while the kubelet says it is initializing (its sources are not ready yet).
const INITIALIZING_RETRY: Duration = Duration::from_secs(1);

/// How often the pods' identity sources are counted and gone pods' identities pruned.
const UPKEEP: Duration = Duration::from_secs(5);

/// How long shutdown waits for each write of the kubelet's word (a disk that hangs must
/// not hold plegd's exit; the word is told again by the watch's replay after a restart).
const LAST_WRITE: Duration = Duration::from_secs(2);

/// The Pods API watcher's metrics.
#[derive(Clone, Default)]
pub struct KubeletMetrics {
    /// `plegd_kubelet_pods_api_up`: 1 while a watch is open and synced.
    pub up: Gauge,
    /// `plegd_kubelet_pods_api_connections_total`: watches opened.
    pub connections: Counter,
    /// `plegd_pod_identity_source{source}`: pods in the cache by where their identity
    /// came from.
    pub sources: Family<SourceLabel, Gauge>,
}

/// The `source` label.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct SourceLabel {
    /// `PODS_API` or `INFERRED`.
    pub source: &'static str,
}

impl KubeletMetrics {
    /// Registers the families in `registry` (the caller gives it the `plegd` prefix).
    pub fn register(registry: &mut Registry) -> Self {
        let m = Self::default();
        registry.register("kubelet_pods_api_up", "1 while plegd watches the kubelet's Pods API", m.up.clone());
        registry.register(
            "kubelet_pods_api_connections",
            "Watches of the kubelet's Pods API opened",
            m.connections.clone(),
        );
        registry.register(
            "pod_identity_source",
            "Pods by where their identity came from: the kubelet's Pods API, or inferred from the node",
            m.sources.clone(),
        );
        // Both children from the start, so a query never finds the family missing.
        for source in ["PODS_API", "INFERRED"] {
            m.sources.get_or_create(&SourceLabel { source }).set(0);
        }
        m
    }
}

/// Why a watch ended.
#[derive(Debug, thiserror::Error)]
pub enum WatchError {
    /// No socket there.
    #[error("no Pods API socket at {0}")]
    NoSocket(PathBuf),
    /// The kubelet answered with an error.
    #[error("the kubelet's Pods API answered {}: {}", .0.code(), .0.message())]
    Status(#[from] tonic::Status),
    /// The kubelet ended the stream.
    #[error("the kubelet ended the watch")]
    Ended,
}

/// Watches the kubelet's Pods API at `socket` for as long as plegd runs.
pub struct PodsApiWatcher {
    socket: Option<PathBuf>,
    identities: Arc<Identities>,
    publish: PublishPath,
    cache: PodCache,
    metrics: KubeletMetrics,
    backoff: Backoff,
    /// Where what the kubelet said is kept; `None`: memory only.
    state_dir: Option<PathBuf>,
    /// The [`Identities::changes`] last kept.
    kept: u64,
    /// The book's write under way: the watch never waits for the disk.
    writing: Option<saved::Writing>,
}

impl PodsApiWatcher {
    /// A watcher of `cfg`'s socket (none: not asked; it only counts the pods' sources)
    /// that fills `identities`, publishes through `publish`, counts `cache`'s pods, and
    /// keeps what the kubelet said in `state_dir`. What an earlier run kept there is
    /// taken back into `identities` now: the app makes the watcher before any task runs
    /// (with the state dir locked), so nothing serves an identity before it.
    pub fn new(
        cfg: KubeletConfig,
        identities: &Arc<Identities>,
        publish: PublishPath,
        cache: &PodCache,
        metrics: &KubeletMetrics,
        state_dir: Option<&std::path::Path>,
    ) -> Self {
        let backoff = Backoff::new(Duration::from_millis(500), RETRY_AT_MOST).with_jitter(0.2);
        let restored = match (state_dir, &cfg.pods_socket) {
            (Some(dir), Some(_)) => saved::restore(identities, dir),
            // Not asked: every identity is inferred, and an earlier run's word is dropped.
            (Some(dir), None) => {
                saved::discard(dir);
                false
            }
            (None, _) => false,
        };
        // A restored book is written again at the first upkeep (with when it was restored,
        // so the next start does not count afresh); otherwise only after a change.
        let kept = if restored { u64::MAX } else { identities.changes() };
        let (identities, cache, metrics) = (identities.clone(), cache.clone(), metrics.clone());
        let state_dir = state_dir.map(ToOwned::to_owned);
        Self { socket: cfg.pods_socket, identities, publish, cache, metrics, backoff, state_dir, kept, writing: None }
    }

    /// Watches until `shutdown`, coming back after every error; then keeps what the
    /// kubelet said.
    pub async fn run(mut self, shutdown: CancellationToken) {
        self.watch_until(shutdown).await;
        self.keep_last().await;
    }

    async fn watch_until(&mut self, shutdown: CancellationToken) {
        let mut upkeep = tokio::time::interval(UPKEEP);
        let Some(socket) = self.socket.clone() else {
            self.identities.set_source(KubeletSource::Off);
            tokio::select! {
                _ = shutdown.cancelled() => {}
                _ = self.upkeep_for(Duration::MAX, &mut upkeep) => {}
            }
            return;
        };
        self.identities.set_source(KubeletSource::Waiting(format!("connecting to {}", socket.display())));
        // Said when the reason changes (a node without the API would repeat it forever).
        let mut said = String::new();
        loop {
            let ended = tokio::select! {
                _ = shutdown.cancelled() => return,
                ended = self.watch(&socket, &mut upkeep) => ended,
            };
            self.metrics.up.set(0);
            let why = ended.to_string();
            if self.identities.source() == KubeletSource::Up {
                said.clear(); // it was watched: its end is news
            }
            if why != said {
                tracing::info!(error = %why, "the kubelet's Pods API is not watched; pods' identity is the last heard, else inferred");
                said.clone_from(&why);
            }
            self.identities.set_source(KubeletSource::Waiting(why));
            let delay = match &ended {
                WatchError::Status(s) if s.code() == tonic::Code::FailedPrecondition => INITIALIZING_RETRY,
                _ => self.backoff.next_delay(),
            };
            tokio::select! {
                _ = shutdown.cancelled() => return,
                _ = self.upkeep_for(delay, &mut upkeep) => {}
            }
        }
    }

    /// Keeps the counts current for `delay`.
    async fn upkeep_for(&mut self, delay: Duration, upkeep: &mut tokio::time::Interval) {
        let sleep = tokio::time::sleep(delay.min(Duration::from_secs(86400 * 365)));
        tokio::pin!(sleep);
        loop {
            tokio::select! {
                _ = &mut sleep => return,
                _ = upkeep.tick() => self.upkeep().await,
            }
        }
    }

    /// Keeps what the kubelet said in the state dir, if it changed since last kept,
    /// without waiting for the disk: a write still under way (a slow disk) is left to
    /// end, and what changed meanwhile is written at a later upkeep.
    async fn keep(&mut self) {
        let Some(dir) = &self.state_dir else { return };
        // Taken only once it has ended, so awaiting its result returns at once: a watch
        // dropped at shutdown never loses a write that is still under way (keep_last
        // would start a second one on the same temporary file).
        if self.writing.as_ref().is_some_and(|w| !w.is_finished()) {
            return;
        }
        if let Some(w) = self.writing.take() {
            self.kept = w.finish(self.kept, Duration::MAX).await.unwrap_or(self.kept);
        }
        self.writing = saved::start(&self.identities, dir, self.kept);
    }

    /// At shutdown: the write under way, then what changed since, each waited for at
    /// most [`LAST_WRITE`].
    async fn keep_last(&mut self) {
        let Some(dir) = &self.state_dir else { return };
        let unfinished = || tracing::warn!(limit = ?LAST_WRITE, "the kubelet's last word was not kept: a write to the state dir did not end in time");
        if let Some(w) = self.writing.take() {
            match w.finish(self.kept, LAST_WRITE).await {
                Ok(kept) => self.kept = kept,
                Err(_) => return unfinished(),
            }
        }
        if let Some(w) = saved::start(&self.identities, dir, self.kept) {
            match w.finish(self.kept, LAST_WRITE).await {
                Ok(kept) => self.kept = kept,
                Err(_) => unfinished(),
            }
        }
    }

    /// Counts the pods by the source of their identity; forgets gone pods' identities
    /// past the tombstones' retention; keeps what changed.
    async fn upkeep(&mut self) {
        self.count();
        self.keep().await;
    }

    fn count(&self) {
        self.identities.prune(SystemTime::now());
        let pods = self.cache.snapshot();
        let from_kubelet = pods.iter().filter(|e| self.identities.kubelet_pod(&e.uid).is_some()).count();
        let set = |source, n: usize| self.metrics.sources.get_or_create(&SourceLabel { source }).set(n as i64);
        set("PODS_API", from_kubelet);
        set("INFERRED", pods.len() - from_kubelet);
    }

    /// One watch: replay, then changes, until it ends.
    async fn watch(&mut self, socket: &std::path::Path, upkeep: &mut tokio::time::Interval) -> WatchError {
        if !socket.exists() {
            return WatchError::NoSocket(socket.to_owned());
        }
        let mut client = PodsClient::new(crate::uds::lazy_channel(socket.to_owned()));
        let mut stream = match client.watch_pods(WatchPodsRequest {}).await {
            Ok(s) => s.into_inner(),
            Err(e) => return e.into(),
        };
        self.metrics.connections.inc();
        let mut replay: Option<HashSet<String>> = Some(HashSet::new());
        loop {
            let next = tokio::select! {
                next = stream.message() => next,
                _ = upkeep.tick() => {
                    self.upkeep().await;
                    continue;
                }
            };
            let ev = match next {
                Ok(Some(ev)) => ev,
                Ok(None) => return WatchError::Ended,
                Err(e) => return e.into(),
            };
            match WatchType::try_from(ev.r#type) {
                Ok(WatchType::Added | WatchType::Modified) => {
                    let made = |uid: &str| self.cache.get(uid)?.status.as_ref()?.first_sandbox_made_at();
                    let mut word = match KubeletWord::decode_made(&ev.pod, made) {
                        Ok(w) => w,
                        Err(e) => {
                            tracing::warn!(error = %e, "a pod from the kubelet's Pods API is skipped");
                            continue;
                        }
                    };
                    // A static pod heard before its sandbox was read (plegd just started):
                    // the workload held stands, not one found from now.
                    if word.made_guessed
                        && let Some(held) = self.identities.kubelet_pod(&word.uid)
                    {
                        word.pod = word.pod.with_workload_of(&held);
                    }
                    if let Some(seen) = &mut replay {
                        seen.insert(word.uid.clone());
                    }
                    let (uid, namespace, name) = (word.uid.clone(), word.namespace.clone(), word.name.clone());
                    if self.identities.said(&uid, word.pod) {
                        self.updated(&uid, &namespace, &name);
                    }
                }
                Ok(WatchType::Deleted) => match KubeletWord::decode(&ev.pod) {
                    Ok(w) => self.identities.gone(&w.uid, SystemTime::now()),
                    Err(e) => tracing::warn!(error = %e, "a deletion from the kubelet's Pods API is skipped"),
                },
                Ok(WatchType::InitialSyncComplete) => {
                    if let Some(seen) = replay.take() {
                        let gone = self.identities.replayed(&seen, SystemTime::now());
                        tracing::info!(pods = seen.len(), gone = gone.len(), "the kubelet's Pods API is watched");
                        self.identities.set_source(KubeletSource::Up);
                        self.metrics.up.set(1);
                        self.backoff.reset();
                        self.upkeep().await;
                    }
                }
                _ => tracing::debug!(r#type = ev.r#type, "an unknown Pods API event is skipped"),
            }
        }
    }

    /// Pod `uid`'s identity changed: `POD_UPDATED`, which the journal takes only for a
    /// pod it holds (a pod the runtime has not started yet has nothing to update).
    fn updated(&self, uid: &str, namespace: &str, name: &str) {
        let ev = PodLifecycleEvent {
            pod_uid: shared(uid),
            pod_namespace: shared(namespace),
            pod_name: shared(name),
            kind: EventType::PodUpdated,
            container_id: String::new(),
            container_name: shared(""),
            is_sandbox: false,
            source: EventSource::Kubelet,
            observed_at: SystemTime::now(),
            runtime_timestamp: None,
            pod: None,
            message: String::new(),
        };
        self.publish.publish(ev);
    }
}

//! The GenericPLEG relister: list, diff against committed pod records, inspect the
//! pods that changed, write the cache (its only writer), and emit lifecycle events.

use std::collections::{BTreeMap, HashSet};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use futures_util::StreamExt;
use tokio::sync::mpsc;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::health::PlegHealth;
use super::inspect::inspect_pod;
use super::records::{PodRecords, RuntimePod, Transition, group_pods};
use super::{EventSource, EventType, PodLifecycleEvent};
use crate::cache::CacheWriter;
use crate::cri::{CriError, RuntimeService};
use crate::metrics::{ModeLabel, PlegMetrics, StateLabel};
use crate::model::{ContainerState, PodStatus, nanos_to_system};
use crate::proto::runtime as cri;

/// How the relister runs.
#[derive(Clone, Debug)]
pub struct RelistConfig {
    /// Time from the end of one relist to the start of the next.
    pub period: Duration,
    /// Pods inspected at once.
    pub concurrency: usize,
    /// Longest time one pod's inspection may take; past it the pod is retried at the
    /// next relist and the relist goes on.
    pub inspect_timeout: Duration,
}

impl Default for RelistConfig {
    fn default() -> Self {
        Self { period: Duration::from_secs(1), concurrency: 8, inspect_timeout: Duration::from_secs(5) }
    }
}

/// Errors of a relist.
#[derive(Debug, thiserror::Error)]
pub enum PlegError {
    /// The runtime could not be listed; nothing was changed.
    #[error("relist failed: {0}")]
    List(#[source] CriError),
}

/// What one relist did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RelistOutcome {
    /// Pods in the runtime.
    pub pods: usize,
    /// Pods inspected.
    pub inspected: usize,
    /// Inspections that failed (retried next time).
    pub failed: usize,
    /// Events emitted.
    pub events: usize,
}

/// Asks the relister for a full relist now. Cheap to clone.
#[derive(Clone)]
pub struct PlegHandle {
    tx: mpsc::Sender<()>,
}

impl PlegHandle {
    /// Requests a full relist as soon as the current one (if any) ends. Requests made
    /// before it starts coalesce into one.
    pub fn request_relist(&self) {
        let _ = self.tx.try_send(());
    }
}

/// The relister.
pub struct GenericPleg<R: RuntimeService> {
    runtime: R,
    cache: CacheWriter,
    events: mpsc::Sender<PodLifecycleEvent>,
    records: PodRecords,
    reinspect: HashSet<String>,
    health: PlegHealth,
    metrics: Option<PlegMetrics>,
    cfg: RelistConfig,
    last_start: Option<Instant>,
    requests: mpsc::Receiver<()>,
    handle: PlegHandle,
    failing: bool,
    liveness: Option<super::health::Liveness>,
}

type Inspection = (String, Instant, Result<PodStatus, String>);

impl<R: RuntimeService> GenericPleg<R> {
    /// A relister that owns the cache's writer and sends events on `events`.
    pub fn new(
        runtime: R,
        cache: CacheWriter,
        events: mpsc::Sender<PodLifecycleEvent>,
        health: PlegHealth,
        metrics: Option<PlegMetrics>,
        cfg: RelistConfig,
    ) -> Self {
        let (tx, requests) = mpsc::channel(1);
        if let Some(m) = &metrics {
            m.mode.get_or_create(&ModeLabel { mode: "generic".into() }).set(1);
        }
        Self {
            runtime,
            cache,
            events,
            records: PodRecords::default(),
            reinspect: HashSet::new(),
            health,
            metrics,
            cfg,
            last_start: None,
            requests,
            handle: PlegHandle { tx },
            failing: false,
            liveness: None,
        }
    }

    /// Ticks `liveness` on every turn of the loop.
    pub fn with_liveness(mut self, liveness: super::health::Liveness) -> Self {
        self.liveness = Some(liveness);
        self
    }

    /// A handle to request relists.
    pub fn handle(&self) -> PlegHandle {
        self.handle.clone()
    }

    /// One full relist.
    pub async fn relist(&mut self) -> Result<RelistOutcome, PlegError> {
        let start = Instant::now();
        let start_wall = SystemTime::now();
        if let (Some(prev), Some(m)) = (self.last_start, &self.metrics) {
            m.relist_interval.observe((start - prev).as_secs_f64());
        }
        self.last_start = Some(start);
        let res = self.relist_inner(start, start_wall).await;
        if let Some(m) = &self.metrics {
            m.relist_duration.observe(start.elapsed().as_secs_f64());
            if res.is_err() {
                m.relist_errors.inc();
            }
        }
        res
    }

    async fn relist_inner(&mut self, start: Instant, start_wall: SystemTime) -> Result<RelistOutcome, PlegError> {
        let sandboxes = self.runtime.list_pod_sandboxes(None).await.map_err(PlegError::List)?;
        let containers = self.runtime.list_containers(None).await.map_err(PlegError::List)?;
        self.health.record_relist(start, start_wall);
        self.count_states(&containers);
        let pods = group_pods(sandboxes, containers);
        let mut outcome = RelistOutcome { pods: pods.len(), ..Default::default() };
        self.records.set_current(pods);

        // Pods with transitions, or whose last inspection failed.
        let mut work: BTreeMap<String, Vec<Transition>> = BTreeMap::new();
        for uid in self.records.uids() {
            let transitions = self.records.transitions(&uid);
            if !transitions.is_empty() || self.reinspect.contains(&uid) {
                work.insert(uid, transitions);
            }
        }
        let inspections = self.inspect_all(work.keys()).await;
        outcome.inspected = inspections.len();

        let mut needs_reinspect = HashSet::new();
        let mut results: BTreeMap<String, (Instant, Result<PodStatus, String>)> =
            inspections.into_iter().map(|(uid, at, r)| (uid, (at, r))).collect();
        for (uid, transitions) in work {
            let status = match results.remove(&uid) {
                // The pod is gone from the runtime.
                None => {
                    self.cache.delete(&uid);
                    None
                }
                Some((at, Ok(status))) => {
                    let status = Arc::new(status);
                    self.cache.set(&uid, Some(status.clone()), None, at);
                    Some(status)
                }
                Some((at, Err(err))) => {
                    tracing::debug!(pod = %uid, error = %err, "pod inspection failed; events held until it succeeds");
                    if let Some(m) = &self.metrics {
                        m.inspection_errors.inc();
                    }
                    self.cache.set(&uid, None, Some(err), at);
                    needs_reinspect.insert(uid);
                    outcome.failed += 1;
                    continue;
                }
            };
            let (namespace, name) = self.records.pod_name(&uid);
            self.records.commit(&uid);
            let was_reinspect = self.reinspect.contains(&uid);
            let events =
                build_events(&uid, &namespace, &name, &transitions, status, was_reinspect, EventSource::Relist);
            outcome.events += events.len();
            for ev in events {
                if self.events.send(ev).await.is_err() {
                    tracing::debug!("event receiver gone; dropping events");
                }
            }
        }
        self.cache.update_time(start);
        self.reinspect = needs_reinspect;
        if let Some(m) = &self.metrics {
            m.cache_pods.set(self.cache.reader().len() as i64);
            m.last_seen.set(start_wall.duration_since(SystemTime::UNIX_EPOCH).map(|d| d.as_secs_f64()).unwrap_or(0.0));
        }
        Ok(outcome)
    }

    /// Inspects the listed pods among `uids` concurrently; pods not listed any more
    /// are left out (they are gone).
    async fn inspect_all<'a>(&self, uids: impl Iterator<Item = &'a String>) -> Vec<Inspection> {
        let reader = self.cache.reader();
        let jobs: Vec<(String, RuntimePod, Vec<String>)> = uids
            .filter_map(|uid| {
                let pod = self.records.current(uid)?.clone();
                let ips = reader.get(uid).and_then(|e| e.status.as_ref().map(|s| s.ips.clone())).unwrap_or_default();
                Some((uid.clone(), pod, ips))
            })
            .collect();
        let timeout = self.cfg.inspect_timeout;
        futures_util::stream::iter(jobs)
            .map(|(uid, pod, ips)| {
                let runtime = self.runtime.clone();
                async move {
                    let at = Instant::now();
                    let res = match tokio::time::timeout(timeout, inspect_pod(&runtime, &pod, &ips)).await {
                        Ok(Ok(status)) => Ok(status),
                        Ok(Err(e)) => Err(e.to_string()),
                        Err(_) => Err(format!("inspecting pod {uid} took longer than {timeout:?}")),
                    };
                    (uid, at, res)
                }
            })
            .buffer_unordered(self.cfg.concurrency.max(1))
            .collect()
            .await
    }

    fn count_states(&self, containers: &[cri::Container]) {
        let Some(m) = &self.metrics else { return };
        let mut counts = [0i64; 4];
        for c in containers {
            let i = match ContainerState::from_cri(c.state) {
                ContainerState::Created => 0,
                ContainerState::Running => 1,
                ContainerState::Exited => 2,
                ContainerState::Unknown => 3,
            };
            counts[i] += 1;
        }
        for (state, n) in ["created", "running", "exited", "unknown"].into_iter().zip(counts) {
            m.running_containers.get_or_create(&StateLabel { state: state.into() }).set(n);
        }
    }

    /// Relists every period (sliding: measured from the end of one relist to the start
    /// of the next) and on request, until shutdown.
    pub async fn run(mut self, shutdown: CancellationToken) {
        loop {
            if let Some(l) = &self.liveness {
                l.tick();
            }
            match self.relist().await {
                Ok(o) => {
                    if std::mem::take(&mut self.failing) {
                        tracing::info!(pods = o.pods, "relist succeeded again");
                    }
                    tracing::trace!(?o, "relist done");
                }
                Err(e) => {
                    if !self.failing {
                        tracing::warn!(error = %e, "relist failed; retrying every period");
                    } else {
                        tracing::debug!(error = %e, "relist failed");
                    }
                    self.failing = true;
                }
            }
            tokio::select! {
                _ = shutdown.cancelled() => return,
                _ = tokio::time::sleep(self.cfg.period) => {}
                Some(()) = self.requests.recv() => {}
            }
        }
    }
}

/// Turns a pod's transitions into lifecycle events carrying the pod's fresh status. A
/// re-inspected pod with no transition gets one `POD_SYNC`.
pub fn build_events(
    uid: &str,
    namespace: &str,
    name: &str,
    transitions: &[Transition],
    status: Option<Arc<PodStatus>>,
    reinspected: bool,
    source: EventSource,
) -> Vec<PodLifecycleEvent> {
    let observed_at = SystemTime::now();
    let base = |kind, id: &str, cname: &str, is_sandbox, ts| PodLifecycleEvent {
        pod_uid: uid.to_owned(),
        pod_namespace: status.as_ref().map_or(namespace, |s| s.namespace.as_str()).to_owned(),
        pod_name: status.as_ref().map_or(name, |s| s.name.as_str()).to_owned(),
        kind,
        container_id: id.to_owned(),
        container_name: cname.to_owned(),
        is_sandbox,
        source,
        observed_at,
        runtime_timestamp: ts,
        pod: status.clone(),
        message: String::new(),
    };
    if transitions.is_empty() {
        if reinspected && status.is_some() {
            return vec![base(EventType::PodSync, "", "", false, None)];
        }
        return Vec::new();
    }
    transitions
        .iter()
        .map(|t| {
            let ts = status.as_deref().and_then(|s| runtime_time(s, t));
            base(t.kind, &t.id, &t.name, t.is_sandbox, ts)
        })
        .collect()
}

/// The runtime's time of a transition, from the fresh status.
fn runtime_time(status: &PodStatus, t: &Transition) -> Option<SystemTime> {
    if t.is_sandbox {
        let s = status.sandboxes.iter().find(|s| s.id == t.id)?;
        return match t.kind {
            EventType::ContainerStarted => nanos_to_system(s.created_at),
            _ => None,
        };
    }
    let c = status.containers.iter().find(|c| c.id == t.id)?;
    match t.kind {
        EventType::ContainerStarted => nanos_to_system(c.started_at),
        EventType::ContainerDied => nanos_to_system(c.finished_at),
        EventType::ContainerChanged => nanos_to_system(c.created_at),
        _ => None,
    }
}

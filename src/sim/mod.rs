//! The simulated CRI runtime: containerd's call semantics, errors and event order over
//! in-memory sandboxes and containers, with fault injection for tests.
//!
//! Containers behave like busybox commands in the end-to-end suite: the annotations
//! `plegd.sim/exit-after` (a duration) and `plegd.sim/exit-code` make a started
//! container exit on its own; otherwise it runs until stopped.

pub mod churn;
mod fault;
pub mod host;
pub mod kubelet;
mod records;
mod runtime;
pub mod server;
mod unprompted;

pub use fault::{FULL_LISTING, Fault, FaultAction};
use records::{Container, Sandbox};
pub use server::{SimError, serve_cli};

use std::collections::{BTreeSet, HashMap, HashSet};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::SystemTime;

use futures_util::StreamExt;
use tokio::sync::{Notify, broadcast, watch};
use tokio::time::Instant;
use tonic::Status;

use crate::cri::{CriError, EventStream, RuntimeService};
use crate::model::system_to_nanos;
use crate::proto::runtime as cri;

/// The annotations the simulated runtime honours.
pub use crate::cri::spec::{EXIT_AFTER, EXIT_CODE};

/// How `GetContainerEvents` behaves (`plegd sim --events`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum EventsMode {
    /// Streams events (containerd 1.7).
    Stream,
    /// Answers `Unimplemented` (containerd 1.6).
    Unimplemented,
    /// Answers OK and ends the stream at once (CRI-O with pod events off).
    #[value(name = "empty")]
    EmptyOk,
}

/// Counts of what the simulated runtime holds.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SimCounts {
    /// Sandboxes (any state).
    pub sandboxes: usize,
    /// Ready sandboxes.
    pub ready_sandboxes: usize,
    /// Containers (any state).
    pub containers: usize,
    /// Running containers.
    pub running: usize,
}

/// The simulated runtime. Cheap to clone; clones share state.
#[derive(Clone)]
pub struct SimRuntime {
    inner: Arc<Inner>,
}

struct Inner {
    state: Mutex<State>,
    faults: Mutex<Vec<Fault>>,
    events: broadcast::Sender<cri::ContainerEventResponse>,
    events_mode: Mutex<EventsMode>,
    drop_streams: watch::Sender<u64>,
    reaper: Notify,
    muted: std::sync::atomic::AtomicBool,
    /// `Version`'s runtime name and version (tests stand in for containerd 1.7 or 2.x).
    identity: Mutex<(String, String)>,
    /// containerd 2.x's delivery: set, each new stream gets its own queue of
    /// [`BLOCKING_QUEUE`] events and a change waits while any queue is full.
    blocking: std::sync::atomic::AtomicBool,
    /// The queues of streams opened with blocking delivery.
    queues: Mutex<Vec<tokio::sync::mpsc::Sender<cri::ContainerEventResponse>>>,
    /// containerd 2.x's order in `RemovePodSandbox`: set, the sandbox's
    /// `CONTAINER_DELETED` goes out first and the sandbox leaves the store this long after.
    removal_lag: Mutex<Option<std::time::Duration>>,
    /// The simulated node's processes and cgroups.
    host: Arc<Mutex<host::SimHost>>,
    /// Calls answered or refused so far, by CRI method name.
    calls: Mutex<HashMap<&'static str, u64>>,
}

/// Events a stream's queue holds under containerd 2.x's delivery before the runtime's
/// own calls wait for the subscriber (containerd 2.x: 100, and a blocking publish).
pub const BLOCKING_QUEUE: usize = 100;

#[derive(Default)]
struct State {
    seq: u64,
    sandboxes: HashMap<String, Sandbox>,
    containers: HashMap<String, Container>,
    names: HashSet<String>,
    /// Pod addresses in use, as offsets into [`POD_NETWORK`]: the lowest free one is
    /// taken next, so an address is reused as soon as its sandbox stops, as a node's
    /// small pod range does.
    addresses: BTreeSet<u32>,
}

/// The pod network sandboxes get their addresses from (a flannel-style node range).
const POD_NETWORK: [u8; 2] = [10, 244];

/// The network mode the kubelet asks for a `hostNetwork` pod.
fn host_network(config: &cri::PodSandboxConfig) -> bool {
    config
        .linux
        .as_ref()
        .and_then(|l| l.security_context.as_ref())
        .and_then(|s| s.namespace_options.as_ref())
        .is_some_and(|n| n.network == cri::NamespaceMode::Node as i32)
}

fn now_nanos() -> i64 {
    system_to_nanos(SystemTime::now())
}

fn new_id() -> String {
    (0..4).map(|_| format!("{:016x}", fastrand::u64(..))).collect()
}

fn sandbox_not_found(id: &str) -> Status {
    Status::not_found(format!("an error occurred when try to find sandbox \"{id}\": not found"))
}

fn container_not_found(id: &str) -> Status {
    Status::not_found(format!("an error occurred when try to find container \"{id}\": not found"))
}

/// Resolves an id or unique id prefix, as containerd's truncated-index lookups do.
fn resolve<'a, T>(map: &'a HashMap<String, T>, id: &str) -> Option<&'a String> {
    if id.is_empty() {
        return None;
    }
    if let Some((k, _)) = map.get_key_value(id) {
        return Some(k);
    }
    let mut hits = map.keys().filter(|k| k.starts_with(id));
    match (hits.next(), hits.next()) {
        (Some(k), None) => Some(k),
        _ => None,
    }
}

fn labels_match(labels: &HashMap<String, String>, selector: &HashMap<String, String>) -> bool {
    selector.iter().all(|(k, v)| labels.get(k) == Some(v))
}

impl State {
    fn next_seq(&mut self) -> u64 {
        self.seq += 1;
        self.seq
    }

    fn event(&self, id: &str, kind: cri::ContainerEventType, sandbox_id: &str) -> cri::ContainerEventResponse {
        let sandbox = self.sandboxes.get(sandbox_id);
        let mut statuses: Vec<_> = self.containers.values().filter(|c| c.sandbox_id == sandbox_id).collect();
        statuses.sort_by_key(|c| c.seq);
        cri::ContainerEventResponse {
            container_id: id.to_owned(),
            container_event_type: kind as i32,
            created_at: now_nanos(),
            pod_sandbox_status: sandbox.map(Sandbox::status),
            containers_statuses: statuses.into_iter().map(Container::status).collect(),
        }
    }

    fn remove_sandbox(&mut self, id: &str) {
        if let Some(sb) = self.sandboxes.remove(id) {
            self.names.remove(&sb.name);
            self.release_address(&sb.ip);
        }
    }

    /// The lowest free pod address, taken.
    fn take_address(&mut self) -> String {
        let offset = (2..u32::from(u16::MAX)).find(|o| !self.addresses.contains(o)).expect("a free pod address");
        self.addresses.insert(offset);
        format!("{}.{}.{}.{}", POD_NETWORK[0], POD_NETWORK[1], offset >> 8, offset & 0xff)
    }

    /// Gives `ip` back (CNI's DEL, when the sandbox stops).
    fn release_address(&mut self, ip: &str) {
        let octets: Vec<u32> = ip.split('.').filter_map(|o| o.parse().ok()).collect();
        if let [_, _, hi, lo] = octets[..] {
            self.addresses.remove(&(hi << 8 | lo));
        }
    }

    /// Stops every running container of a sandbox, then the sandbox; returns the events.
    fn stop_sandbox(&mut self, sandbox_id: &str) -> Vec<cri::ContainerEventResponse> {
        let mut events = Vec::new();
        let mut ids: Vec<_> =
            self.containers.values().filter(|c| c.sandbox_id == sandbox_id).map(|c| (c.seq, c.id.clone())).collect();
        ids.sort();
        for (_, id) in ids {
            let exited = self.containers.get_mut(&id).is_some_and(|c| c.exit(137, "Error"));
            if exited {
                events.push(self.event(&id, cri::ContainerEventType::ContainerStoppedEvent, sandbox_id));
            }
        }
        if let Some(sb) = self.sandboxes.get_mut(sandbox_id)
            && sb.state == cri::PodSandboxState::SandboxReady
        {
            sb.state = cri::PodSandboxState::SandboxNotready;
            sb.host.lock().expect("sim host lock").exit(&sb.process, &sb.cgroups_path);
            // containerd reports no address once the network namespace is closed.
            let ip = std::mem::take(&mut sb.ip);
            self.release_address(&ip);
            events.push(self.event(sandbox_id, cri::ContainerEventType::ContainerStoppedEvent, sandbox_id));
        }
        events
    }
}

impl Default for SimRuntime {
    fn default() -> Self {
        Self::new()
    }
}

impl SimRuntime {
    /// An empty runtime whose event stream works.
    pub fn new() -> Self {
        let (events, _) = broadcast::channel(4096);
        Self {
            inner: Arc::new(Inner {
                state: Mutex::new(State::default()),
                faults: Mutex::new(Vec::new()),
                events,
                events_mode: Mutex::new(EventsMode::Stream),
                drop_streams: watch::channel(0).0,
                reaper: Notify::new(),
                muted: std::sync::atomic::AtomicBool::new(false),
                identity: Mutex::new(("plegd-sim".into(), env!("CARGO_PKG_VERSION").into())),
                blocking: std::sync::atomic::AtomicBool::new(false),
                queues: Mutex::new(Vec::new()),
                removal_lag: Mutex::new(Some(std::time::Duration::ZERO)),
                host: Arc::new(Mutex::new(host::SimHost::new(None))),
                calls: Mutex::new(HashMap::new()),
            }),
        }
    }

    /// Writes the simulated node's processes and cgroups under `root` from now on
    /// (see [`host`]).
    pub fn set_host_root(&self, root: std::path::PathBuf) {
        *self.inner.host.lock().expect("sim host lock") = host::SimHost::new(Some(root));
    }

    /// Some process on the node took a PID a container had: the node's PID allocator
    /// went round the whole range first, as a real kernel's does.
    pub fn count_round(&self) {
        self.inner.host.lock().expect("sim host lock").count_round();
    }

    fn state(&self) -> MutexGuard<'_, State> {
        self.inner.state.lock().expect("sim state lock")
    }

    /// Publishes the events of a CRI call. Under blocking delivery (containerd 2.x)
    /// the call waits while a subscriber's queue is full, as containerd's own calls do.
    async fn publish(&self, events: Vec<cri::ContainerEventResponse>) {
        if self.inner.muted.load(std::sync::atomic::Ordering::SeqCst) {
            return;
        }
        if self.inner.blocking.load(std::sync::atomic::Ordering::SeqCst) {
            let queues: Vec<_> = self.inner.queues.lock().expect("queues lock").clone();
            for ev in &events {
                for q in &queues {
                    // A closed queue is a gone subscriber: skipped, removed below.
                    let _ = q.send(ev.clone()).await;
                }
            }
            self.inner.queues.lock().expect("queues lock").retain(|q| !q.is_closed());
        }
        self.broadcast(events);
    }

    /// Publishes without waiting (the reaper and tests' direct exits): under blocking
    /// delivery an event that does not fit a full queue is dropped for that subscriber.
    fn publish_now(&self, events: Vec<cri::ContainerEventResponse>) {
        if self.inner.muted.load(std::sync::atomic::Ordering::SeqCst) {
            return;
        }
        for q in self.inner.queues.lock().expect("queues lock").iter() {
            for ev in &events {
                let _ = q.try_send(ev.clone());
            }
        }
        self.broadcast(events);
    }

    /// Sends to the streams opened without blocking delivery.
    fn broadcast(&self, events: Vec<cri::ContainerEventResponse>) {
        for ev in events {
            // No subscriber is fine: containerd drops events nobody listens to.
            let _ = self.inner.events.send(ev);
        }
    }

    /// Sets containerd 2.x's delivery for streams opened from now on: a queue of
    /// [`BLOCKING_QUEUE`] events per stream, and CRI calls that change something wait
    /// while any stream's queue is full.
    pub fn set_blocking_delivery(&self, on: bool) {
        self.inner.blocking.store(on, std::sync::atomic::Ordering::SeqCst);
    }

    /// containerd 2.x's `RemovePodSandbox` sends the sandbox's `CONTAINER_DELETED`
    /// before it takes the sandbox out of its store (NRI's removal notification runs in
    /// between): a reader acting on the event at once still finds the sandbox. `Some`:
    /// that order, with the sandbox listed this long after its event (the default: no
    /// longer than the event's delivery takes); `None`: removed, then told (containerd
    /// 1.7's default CRI server).
    pub fn set_sandbox_removal_lag(&self, lag: Option<std::time::Duration>) {
        *self.inner.removal_lag.lock().expect("lag lock") = lag;
    }

    /// Adds a fault.
    pub fn inject(&self, fault: Fault) {
        self.inner.faults.lock().expect("faults lock").push(fault);
    }

    /// Removes all faults.
    pub fn clear_faults(&self) {
        self.inner.faults.lock().expect("faults lock").clear();
    }

    /// Sets how `GetContainerEvents` behaves for new streams.
    pub fn set_events_mode(&self, mode: EventsMode) {
        *self.inner.events_mode.lock().expect("mode lock") = mode;
    }

    /// Ends every open event stream with an error, as a runtime restart would.
    pub fn drop_event_streams(&self) {
        self.inner.drop_streams.send_modify(|g| *g += 1);
    }

    /// Publishes a raw event on every open stream, as a misbehaving runtime might
    /// (duplicates, stale or reordered events, events without a sandbox status).
    pub fn inject_event(&self, ev: cri::ContainerEventResponse) {
        let _ = self.inner.events.send(ev);
    }

    /// While muted, changes publish no events, as when containerd's full event channel
    /// discards them.
    pub fn mute_events(&self, muted: bool) {
        self.inner.muted.store(muted, std::sync::atomic::Ordering::SeqCst);
    }

    /// Makes `Version` answer as another runtime (for instance `containerd` `v1.7.24`,
    /// whose event stream plegd does not trust to be complete).
    pub fn set_identity(&self, runtime_name: &str, runtime_version: &str) {
        *self.inner.identity.lock().expect("identity lock") = (runtime_name.into(), runtime_version.into());
    }

    /// Number of open event streams.
    pub fn event_subscribers(&self) -> usize {
        let queued = self.inner.queues.lock().expect("queues lock").iter().filter(|q| !q.is_closed()).count();
        self.inner.events.receiver_count() + queued
    }

    /// Counts of what the runtime holds.
    pub fn counts(&self) -> SimCounts {
        let s = self.state();
        SimCounts {
            sandboxes: s.sandboxes.len(),
            ready_sandboxes: s.sandboxes.values().filter(|b| b.state == cri::PodSandboxState::SandboxReady).count(),
            containers: s.containers.len(),
            running: s.containers.values().filter(|c| c.state == cri::ContainerState::ContainerRunning).count(),
        }
    }

    /// How many `method` calls (`ContainerStatus`, `ListPodSandbox`, …) the runtime has
    /// been asked so far, verbose or not, whether they answered or failed.
    pub fn calls(&self, method: &str) -> u64 {
        self.inner.calls.lock().expect("calls lock").get(method).copied().unwrap_or(0)
    }

    /// Counts the call, then applies the first matching fault, if any.
    async fn fault(&self, method: &'static str, target: &str) -> Result<(), Status> {
        *self.inner.calls.lock().expect("calls lock").entry(method).or_default() += 1;
        let action = {
            let mut faults = self.inner.faults.lock().expect("faults lock");
            let pos = faults.iter().position(|f| {
                f.method == method && f.target.as_deref().is_none_or(|t| !target.is_empty() && target.starts_with(t))
            });
            let Some(pos) = pos else { return Ok(()) };
            let action = faults[pos].action.clone();
            if let Some(n) = faults[pos].times.as_mut() {
                *n = n.saturating_sub(1);
                if *n == 0 {
                    faults.remove(pos);
                }
            }
            action
        };
        match action {
            FaultAction::Error(code, msg) => Err(Status::new(code, msg)),
            FaultAction::Hang => std::future::pending().await,
            FaultAction::Delay(d) => {
                tokio::time::sleep(d).await;
                Ok(())
            }
        }
    }

    /// `Version`.
    pub async fn version(&self) -> Result<cri::VersionResponse, Status> {
        self.fault("Version", "").await?;
        let (runtime_name, runtime_version) = self.inner.identity.lock().expect("identity lock").clone();
        Ok(cri::VersionResponse {
            version: "0.1.0".into(),
            runtime_name,
            runtime_version,
            runtime_api_version: "v1".into(),
        })
    }

    /// `Status`.
    pub async fn status(&self) -> Result<cri::StatusResponse, Status> {
        self.fault("Status", "").await?;
        let cond = |t: &str| cri::RuntimeCondition {
            r#type: t.into(),
            status: true,
            reason: String::new(),
            message: String::new(),
        };
        Ok(cri::StatusResponse {
            status: Some(cri::RuntimeStatus { conditions: vec![cond("RuntimeReady"), cond("NetworkReady")] }),
            info: HashMap::new(),
        })
    }

    /// `RunPodSandbox`: creates a READY sandbox; emits CREATED then STARTED.
    pub async fn run_pod_sandbox(&self, req: cri::RunPodSandboxRequest) -> Result<String, Status> {
        self.fault("RunPodSandbox", "").await?;
        let config = req.config.unwrap_or_default();
        let host_network = host_network(&config);
        let Some(md) = config.metadata else {
            return Err(Status::invalid_argument("sandbox config must include metadata"));
        };
        if md.name.is_empty() || md.uid.is_empty() || md.namespace.is_empty() {
            return Err(Status::invalid_argument("sandbox metadata must include name, uid and namespace"));
        }
        let id = new_id();
        let name = format!("{}_{}_{}_{}", md.name, md.namespace, md.uid, md.attempt);
        let (id, events) = {
            let mut s = self.state();
            if !s.names.insert(name.clone()) {
                let owner = s.sandboxes.values().find(|b| b.name == name).map(|b| b.id.clone()).unwrap_or_default();
                return Err(Status::unknown(format!(
                    "failed to reserve sandbox name \"{name}\": name \"{name}\" is reserved for \"{owner}\""
                )));
            }
            let seq = s.next_seq();
            let cgroups_path = host::SimHost::cgroups_path(&md.uid, &id);
            let process = self.inner.host.lock().expect("sim host lock").spawn(&cgroups_path);
            let ip = if host_network { String::new() } else { s.take_address() };
            s.sandboxes.insert(
                id.clone(),
                Sandbox {
                    seq,
                    id: id.clone(),
                    metadata: md,
                    state: cri::PodSandboxState::SandboxReady,
                    created_at: now_nanos(),
                    labels: config.labels,
                    annotations: config.annotations,
                    runtime_handler: req.runtime_handler,
                    name,
                    process,
                    cgroups_path,
                    ip,
                    host: self.inner.host.clone(),
                },
            );
            let events = vec![
                s.event(&id, cri::ContainerEventType::ContainerCreatedEvent, &id),
                s.event(&id, cri::ContainerEventType::ContainerStartedEvent, &id),
            ];
            (id, events)
        };
        self.publish(events).await;
        Ok(id)
    }

    /// `StopPodSandbox`: kills its containers, then marks it NOTREADY. Idempotent;
    /// NotFound for an unknown id.
    pub async fn stop_pod_sandbox(&self, id: &str) -> Result<(), Status> {
        self.fault("StopPodSandbox", id).await?;
        let events = {
            let mut s = self.state();
            let Some(id) = resolve(&s.sandboxes, id).cloned() else { return Err(sandbox_not_found(id)) };
            s.stop_sandbox(&id)
        };
        self.publish(events).await;
        Ok(())
    }

    /// `RemovePodSandbox`: stops, removes its containers, then the sandbox. Idempotent.
    /// With a removal lag ([`SimRuntime::set_sandbox_removal_lag`], containerd 2.x) the
    /// sandbox's `CONTAINER_DELETED` is sent while the sandbox is still listed, and the
    /// sandbox leaves the store (and the call returns) the lag later, with no event.
    pub async fn remove_pod_sandbox(&self, id: &str) -> Result<(), Status> {
        self.fault("RemovePodSandbox", id).await?;
        let lag = *self.inner.removal_lag.lock().expect("lag lock");
        let (id, events) = {
            let mut s = self.state();
            let Some(id) = resolve(&s.sandboxes, id).cloned() else { return Ok(()) };
            let mut events = s.stop_sandbox(&id);
            let mut ids: Vec<_> =
                s.containers.values().filter(|c| c.sandbox_id == id).map(|c| (c.seq, c.id.clone())).collect();
            ids.sort();
            for (_, cid) in ids {
                if let Some(c) = s.containers.remove(&cid) {
                    s.names.remove(&c.name);
                }
                events.push(s.event(&cid, cri::ContainerEventType::ContainerDeletedEvent, &id));
            }
            events.push(s.event(&id, cri::ContainerEventType::ContainerDeletedEvent, &id));
            if lag.is_none() {
                s.remove_sandbox(&id);
            }
            (id, events)
        };
        self.publish(events).await;
        if let Some(lag) = lag {
            tokio::time::sleep(lag).await;
            self.state().remove_sandbox(&id);
        }
        Ok(())
    }

    /// `PodSandboxStatus`.
    pub async fn pod_sandbox_status(&self, id: &str) -> Result<cri::PodSandboxStatus, Status> {
        Ok(self.pod_sandbox_status_verbose(id).await?.0)
    }

    /// `PodSandboxStatus` with `verbose`: the status and containerd's `info` map.
    pub async fn pod_sandbox_status_verbose(
        &self,
        id: &str,
    ) -> Result<(cri::PodSandboxStatus, HashMap<String, String>), Status> {
        self.fault("PodSandboxStatus", id).await?;
        let s = self.state();
        let key = resolve(&s.sandboxes, id).ok_or_else(|| sandbox_not_found(id))?;
        Ok((s.sandboxes[key].status(), s.sandboxes[key].info()))
    }

    /// `ListPodSandbox`, oldest first.
    pub async fn list_pod_sandbox(
        &self,
        filter: Option<cri::PodSandboxFilter>,
    ) -> Result<Vec<cri::PodSandbox>, Status> {
        let f = filter.unwrap_or_default();
        let full = f.id.is_empty() && f.state.is_none() && f.label_selector.is_empty();
        self.fault("ListPodSandbox", if full { fault::FULL_LISTING } else { "" }).await?;
        let s = self.state();
        let id = if f.id.is_empty() {
            None
        } else {
            match resolve(&s.sandboxes, &f.id) {
                Some(k) => Some(k.clone()),
                None => return Ok(Vec::new()),
            }
        };
        let mut out: Vec<_> = s
            .sandboxes
            .values()
            .filter(|b| id.as_ref().is_none_or(|i| *i == b.id))
            .filter(|b| f.state.as_ref().is_none_or(|st| st.state == b.state as i32))
            .filter(|b| labels_match(&b.labels, &f.label_selector))
            .collect();
        out.sort_by_key(|b| b.seq);
        Ok(out.into_iter().map(Sandbox::listed).collect())
    }

    /// `CreateContainer`: a CREATED container in a READY sandbox; emits CREATED.
    pub async fn create_container(&self, req: cri::CreateContainerRequest) -> Result<String, Status> {
        self.fault("CreateContainer", &req.pod_sandbox_id).await?;
        let config = req.config.unwrap_or_default();
        let Some(md) = config.metadata.clone() else {
            return Err(Status::invalid_argument("container config must include metadata"));
        };
        // As containerd: the sandbox's log directory joined with the container's log
        // path, when both are given.
        let log_dir = req.sandbox_config.as_ref().map(|c| c.log_directory.as_str()).unwrap_or_default();
        let log_path = match (log_dir, config.log_path.as_str()) {
            ("", _) | (_, "") => String::new(),
            (dir, file) => format!("{}/{file}", dir.trim_end_matches('/')),
        };
        let (id, ev) = {
            let mut s = self.state();
            let Some(sid) = resolve(&s.sandboxes, &req.pod_sandbox_id).cloned() else {
                return Err(Status::not_found(format!(
                    "failed to find sandbox id \"{}\": not found",
                    req.pod_sandbox_id
                )));
            };
            let sb = &s.sandboxes[&sid];
            let pod_uid = sb.metadata.uid.clone();
            if sb.state != cri::PodSandboxState::SandboxReady {
                return Err(Status::unknown(format!("sandbox container \"{sid}\" is not running")));
            }
            let name = format!("{}_{}_{}", md.name, sb.name, md.attempt);
            if !s.names.insert(name.clone()) {
                let owner = s.containers.values().find(|c| c.name == name).map(|c| c.id.clone()).unwrap_or_default();
                return Err(Status::unknown(format!(
                    "failed to reserve container name \"{name}\": name \"{name}\" is reserved for \"{owner}\""
                )));
            }
            let id = new_id();
            let seq = s.next_seq();
            s.containers.insert(
                id.clone(),
                Container {
                    seq,
                    id: id.clone(),
                    sandbox_id: sid.clone(),
                    metadata: md,
                    image: config.image.map(|i| i.image).unwrap_or_default(),
                    state: cri::ContainerState::ContainerCreated,
                    created_at: now_nanos(),
                    started_at: 0,
                    finished_at: 0,
                    exit_code: 0,
                    reason: String::new(),
                    labels: config.labels,
                    annotations: config.annotations,
                    log_path,
                    name,
                    exit_at: None,
                    resources: config.linux.and_then(|l| l.resources),
                    process: host::SimProcess::default(),
                    cgroups_path: host::SimHost::cgroups_path(&pod_uid, &id),
                    host: self.inner.host.clone(),
                },
            );
            let ev = s.event(&id, cri::ContainerEventType::ContainerCreatedEvent, &sid);
            (id, ev)
        };
        self.publish(vec![ev]).await;
        Ok(id)
    }

    /// `StartContainer`: CREATED → RUNNING; emits STARTED.
    pub async fn start_container(&self, id: &str) -> Result<(), Status> {
        self.fault("StartContainer", id).await?;
        let (ev, exit_after) = {
            let mut s = self.state();
            let Some(id) = resolve(&s.containers, id).cloned() else { return Err(container_not_found(id)) };
            let sid = s.containers[&id].sandbox_id.clone();
            if s.sandboxes.get(&sid).is_none_or(|b| b.state != cri::PodSandboxState::SandboxReady) {
                return Err(Status::unknown(format!("sandbox container \"{sid}\" is not running")));
            }
            let c = s.containers.get_mut(&id).expect("resolved above");
            if c.state != cri::ContainerState::ContainerCreated {
                let state =
                    cri::ContainerState::try_from(c.state as i32).map(|st| st.as_str_name()).unwrap_or("UNKNOWN");
                return Err(Status::unknown(format!(
                    "failed to set starting state for container \"{id}\": container is in {state} state"
                )));
            }
            c.state = cri::ContainerState::ContainerRunning;
            c.started_at = now_nanos();
            c.process = c.host.lock().expect("sim host lock").spawn(&c.cgroups_path);
            let exit_after = c.annotations.get(EXIT_AFTER).and_then(|v| humantime::parse_duration(v).ok());
            if let Some(d) = exit_after {
                c.exit_at = Some(Instant::now() + d);
            }
            let ev = s.event(&id, cri::ContainerEventType::ContainerStartedEvent, &sid);
            (ev, exit_after)
        };
        self.publish(vec![ev]).await;
        if exit_after.is_some() {
            self.inner.reaper.notify_one();
        }
        Ok(())
    }

    /// `StopContainer`: RUNNING → EXITED (137, as after SIGKILL); idempotent.
    pub async fn stop_container(&self, id: &str) -> Result<(), Status> {
        self.fault("StopContainer", id).await?;
        let stopped = {
            let mut s = self.state();
            let Some(id) = resolve(&s.containers, id).cloned() else { return Err(container_not_found(id)) };
            let c = s.containers.get_mut(&id).expect("resolved above");
            let sid = c.sandbox_id.clone();
            c.exit(137, "Error").then(|| s.event(&id, cri::ContainerEventType::ContainerStoppedEvent, &sid))
        };
        if let Some(ev) = stopped {
            self.publish(vec![ev]).await;
        }
        Ok(())
    }

    /// `RemoveContainer`: kills a running container first; idempotent.
    pub async fn remove_container_cri(&self, id: &str) -> Result<(), Status> {
        self.fault("RemoveContainer", id).await?;
        let events = {
            let mut s = self.state();
            let Some(id) = resolve(&s.containers, id).cloned() else { return Ok(()) };
            let mut events = Vec::new();
            let sid = s.containers[&id].sandbox_id.clone();
            if s.containers.get_mut(&id).is_some_and(|c| c.exit(137, "Error")) {
                events.push(s.event(&id, cri::ContainerEventType::ContainerStoppedEvent, &sid));
            }
            if let Some(c) = s.containers.remove(&id) {
                s.names.remove(&c.name);
            }
            events.push(s.event(&id, cri::ContainerEventType::ContainerDeletedEvent, &sid));
            events
        };
        self.publish(events).await;
        Ok(())
    }

    /// `ListContainers`, oldest first.
    pub async fn list_containers_cri(
        &self,
        filter: Option<cri::ContainerFilter>,
    ) -> Result<Vec<cri::Container>, Status> {
        let f = filter.unwrap_or_default();
        let full = f.id.is_empty() && f.pod_sandbox_id.is_empty() && f.state.is_none() && f.label_selector.is_empty();
        self.fault("ListContainers", if full { fault::FULL_LISTING } else { "" }).await?;
        let s = self.state();
        let id = if f.id.is_empty() {
            None
        } else {
            match resolve(&s.containers, &f.id) {
                Some(k) => Some(k.clone()),
                None => return Ok(Vec::new()),
            }
        };
        let sid = if f.pod_sandbox_id.is_empty() {
            None
        } else {
            match resolve(&s.sandboxes, &f.pod_sandbox_id) {
                Some(k) => Some(k.clone()),
                None => return Ok(Vec::new()),
            }
        };
        let mut out: Vec<_> = s
            .containers
            .values()
            .filter(|c| id.as_ref().is_none_or(|i| *i == c.id))
            .filter(|c| sid.as_ref().is_none_or(|i| *i == c.sandbox_id))
            .filter(|c| f.state.as_ref().is_none_or(|st| st.state == c.state as i32))
            .filter(|c| labels_match(&c.labels, &f.label_selector))
            .collect();
        out.sort_by_key(|c| c.seq);
        Ok(out.into_iter().map(Container::listed).collect())
    }

    /// `ContainerStatus`.
    pub async fn container_status_cri(&self, id: &str) -> Result<cri::ContainerStatus, Status> {
        Ok(self.container_status_verbose_cri(id).await?.0)
    }

    /// `ContainerStatus` with `verbose`: the status and containerd's `info` map.
    pub async fn container_status_verbose_cri(
        &self,
        id: &str,
    ) -> Result<(cri::ContainerStatus, HashMap<String, String>), Status> {
        self.fault("ContainerStatus", id).await?;
        let s = self.state();
        let key = resolve(&s.containers, id).ok_or_else(|| container_not_found(id))?;
        Ok((s.containers[key].status(), s.containers[key].info()))
    }

    /// `GetContainerEvents`, per the events mode.
    pub async fn events(
        &self,
    ) -> Result<impl futures_util::Stream<Item = Result<cri::ContainerEventResponse, Status>> + Send + 'static, Status>
    {
        self.fault("GetContainerEvents", "").await?;
        let mode = *self.inner.events_mode.lock().expect("mode lock");
        if mode == EventsMode::Unimplemented {
            return Err(Status::unimplemented(
                "unknown method GetContainerEvents for service runtime.v1.RuntimeService",
            ));
        }
        let mut drop_rx = self.inner.drop_streams.subscribe();
        drop_rx.mark_unchanged();
        let empty = mode == EventsMode::EmptyOk;
        if self.inner.blocking.load(std::sync::atomic::Ordering::SeqCst) && !empty {
            let (tx, rx) = tokio::sync::mpsc::channel(BLOCKING_QUEUE);
            self.inner.queues.lock().expect("queues lock").push(tx);
            return Ok(futures_util::stream::unfold((rx, drop_rx, false), |(mut rx, mut drop_rx, done)| async move {
                if done {
                    return None;
                }
                tokio::select! {
                    _ = drop_rx.changed() => {
                        Some((Err(Status::unavailable("event stream closed: runtime restarting")), (rx, drop_rx, true)))
                    }
                    ev = rx.recv() => ev.map(|ev| (Ok(ev), (rx, drop_rx, false))),
                }
            })
            .left_stream());
        }
        let rx = self.inner.events.subscribe();
        Ok(futures_util::stream::unfold((rx, drop_rx, empty), |(mut rx, mut drop_rx, done)| async move {
            if done {
                return None;
            }
            loop {
                tokio::select! {
                    _ = drop_rx.changed() => {
                        return Some((Err(Status::unavailable("event stream closed: runtime restarting")), (rx, drop_rx, true)));
                    }
                    ev = rx.recv() => match ev {
                        Ok(ev) => return Some((Ok(ev), (rx, drop_rx, false))),
                        Err(broadcast::error::RecvError::Lagged(n)) => {
                            // containerd discards events a slow subscriber cannot take.
                            tracing::warn!(dropped = n, "sim: event subscriber too slow, events discarded");
                        }
                        Err(broadcast::error::RecvError::Closed) => return None,
                    }
                }
            }
        })
        .right_stream())
    }
}

const IN_PROCESS: &str = "sim://in-process";

fn call_err(method: &'static str) -> impl FnOnce(Status) -> CriError {
    move |status| CriError::Call { method, endpoint: Arc::from(IN_PROCESS), status }
}

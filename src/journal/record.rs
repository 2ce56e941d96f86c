//! How the journal writes an event and a pod to disk: protobuf messages of its own
//! (not the API's, which may change for clients' sake), converted both ways. A record
//! carries everything an entry holds — the event, the pod's status after it, and who
//! the pod was for filters — so a replay from disk is the entry that was delivered.

use std::sync::Arc;

use prost::Message;

use super::PodMeta;
use crate::labels::{Labels, shared};
use crate::model::event::{EventSource, EventType, PodLifecycleEvent};
use crate::model::{
    ContainerState, ContainerStatus, Namespaces, PodStatus, Process, Resources, SandboxState, SandboxStatus,
    nanos_to_system, system_to_nanos,
};

/// Why a record could not be read back.
#[derive(Debug, thiserror::Error)]
pub enum RecordError {
    /// Not a record at all.
    #[error("malformed record: {0}")]
    Decode(#[from] prost::DecodeError),
    /// A field holds a value this version does not know.
    #[error("malformed record: {0}")]
    Value(String),
}

#[derive(Clone, PartialEq, Message)]
struct StoredEvent {
    #[prost(string, tag = "1")]
    pod_uid: String,
    #[prost(string, tag = "2")]
    pod_namespace: String,
    #[prost(string, tag = "3")]
    pod_name: String,
    #[prost(string, tag = "4")]
    kind: String,
    #[prost(string, tag = "5")]
    container_id: String,
    #[prost(string, tag = "6")]
    container_name: String,
    #[prost(bool, tag = "7")]
    is_sandbox: bool,
    #[prost(string, tag = "8")]
    source: String,
    #[prost(int64, tag = "9")]
    observed_at: i64,
    #[prost(int64, optional, tag = "10")]
    runtime_timestamp: Option<i64>,
    #[prost(string, tag = "11")]
    message: String,
    #[prost(message, optional, tag = "12")]
    pod: Option<StoredPod>,
    #[prost(message, optional, tag = "13")]
    meta: Option<StoredMeta>,
    /// Who the pod was before this event changed its labels, if it did.
    #[prost(message, optional, tag = "14")]
    left: Option<StoredMeta>,
}

#[derive(Clone, PartialEq, Message)]
struct StoredMeta {
    #[prost(string, tag = "1")]
    uid: String,
    #[prost(string, tag = "2")]
    namespace: String,
    #[prost(string, tag = "3")]
    name: String,
    #[prost(btree_map = "string, string", tag = "4")]
    labels: std::collections::BTreeMap<String, String>,
    /// The pod's last addresses. A plegd that does not know the field skips it, and a
    /// record such a plegd wrote decodes with none: no layout change either way.
    #[prost(string, repeated, tag = "5")]
    ips: Vec<String>,
}

#[derive(Clone, PartialEq, Message)]
struct StoredPod {
    #[prost(string, tag = "1")]
    uid: String,
    #[prost(string, tag = "2")]
    name: String,
    #[prost(string, tag = "3")]
    namespace: String,
    #[prost(btree_map = "string, string", tag = "4")]
    labels: std::collections::BTreeMap<String, String>,
    #[prost(btree_map = "string, string", tag = "5")]
    annotations: std::collections::BTreeMap<String, String>,
    #[prost(string, repeated, tag = "6")]
    ips: Vec<String>,
    #[prost(message, repeated, tag = "7")]
    sandboxes: Vec<StoredSandbox>,
    #[prost(message, repeated, tag = "8")]
    containers: Vec<StoredContainer>,
    #[prost(int64, tag = "9")]
    observed_at: i64,
}

#[derive(Clone, PartialEq, Message)]
struct StoredSandbox {
    #[prost(string, tag = "1")]
    id: String,
    #[prost(uint32, tag = "2")]
    attempt: u32,
    #[prost(uint32, tag = "3")]
    state: u32,
    #[prost(int64, tag = "4")]
    created_at: i64,
    #[prost(string, tag = "5")]
    ip: String,
    #[prost(string, repeated, tag = "6")]
    additional_ips: Vec<String>,
    #[prost(string, tag = "7")]
    runtime_handler: String,
    #[prost(uint32, tag = "8")]
    pid: u32,
    #[prost(string, tag = "9")]
    netns_path: String,
}

#[derive(Clone, PartialEq, Message)]
struct StoredContainer {
    #[prost(string, tag = "1")]
    id: String,
    #[prost(string, tag = "2")]
    name: String,
    #[prost(uint32, tag = "3")]
    attempt: u32,
    #[prost(uint32, tag = "4")]
    state: u32,
    #[prost(int64, tag = "5")]
    created_at: i64,
    #[prost(int64, tag = "6")]
    started_at: i64,
    #[prost(int64, tag = "7")]
    finished_at: i64,
    #[prost(int32, tag = "8")]
    exit_code: i32,
    #[prost(string, tag = "9")]
    reason: String,
    #[prost(string, tag = "10")]
    message: String,
    #[prost(string, tag = "11")]
    image: String,
    #[prost(btree_map = "string, string", tag = "12")]
    labels: std::collections::BTreeMap<String, String>,
    #[prost(btree_map = "string, string", tag = "13")]
    annotations: std::collections::BTreeMap<String, String>,
    #[prost(string, tag = "14")]
    image_ref: String,
    #[prost(string, tag = "15")]
    image_id: String,
    #[prost(message, optional, tag = "16")]
    resources: Option<StoredResources>,
    #[prost(message, optional, tag = "17")]
    process: Option<StoredProcess>,
    #[prost(string, tag = "18")]
    log_path: String,
}

#[derive(Clone, PartialEq, Message)]
struct StoredResources {
    #[prost(int64, tag = "1")]
    cpu_shares: i64,
    #[prost(int64, tag = "2")]
    cpu_quota: i64,
    #[prost(int64, tag = "3")]
    cpu_period: i64,
    #[prost(int64, tag = "4")]
    memory_limit_bytes: i64,
}

#[derive(Clone, PartialEq, Message)]
struct StoredProcess {
    #[prost(uint32, tag = "1")]
    pid: u32,
    #[prost(string, tag = "2")]
    cgroup_path: String,
    #[prost(uint64, tag = "3")]
    cgroup_id: u64,
    #[prost(uint64, tag = "4")]
    start_ticks: u64,
    /// pid, mnt, net, uts, ipc, cgroup, user: the namespaces' inodes (empty: not read).
    #[prost(uint64, repeated, tag = "5")]
    namespaces: Vec<u64>,
}

/// A pod in the journal's view, as the pods table keeps it.
#[derive(Clone, PartialEq, Message)]
struct StoredView {
    #[prost(message, optional, tag = "1")]
    pod: Option<StoredPod>,
    #[prost(message, optional, tag = "2")]
    meta: Option<StoredMeta>,
}

/// An event read back, with who its pod was after it and, when the event changed the
/// pod's labels, before it.
pub struct DecodedEvent {
    /// The event.
    pub event: PodLifecycleEvent,
    /// The pod, for filters.
    pub meta: PodMeta,
    /// The pod before this event changed its labels.
    pub left: Option<PodMeta>,
}

/// Encodes an event with the pod it is about (and who it was before, when the event
/// changed its labels).
pub fn encode_event(ev: &PodLifecycleEvent, meta: &PodMeta, left: Option<&PodMeta>) -> Vec<u8> {
    StoredEvent {
        pod_uid: ev.pod_uid.to_string(),
        pod_namespace: ev.pod_namespace.to_string(),
        pod_name: ev.pod_name.to_string(),
        kind: ev.kind.as_str().into(),
        container_id: ev.container_id.clone(),
        container_name: ev.container_name.to_string(),
        is_sandbox: ev.is_sandbox,
        source: ev.source.as_str().into(),
        observed_at: system_to_nanos(ev.observed_at),
        runtime_timestamp: ev.runtime_timestamp.map(system_to_nanos),
        message: ev.message.clone(),
        pod: ev.pod.as_deref().map(stored_pod),
        meta: Some(stored_meta(meta)),
        left: left.map(stored_meta),
    }
    .encode_to_vec()
}

/// Decodes an event and the pod it is about.
pub fn decode_event(bytes: &[u8]) -> Result<DecodedEvent, RecordError> {
    let s = StoredEvent::decode(bytes)?;
    let kind: EventType =
        s.kind.parse().map_err(|e: crate::model::event::UnknownEventType| RecordError::Value(e.to_string()))?;
    let source = source_of(&s.source)?;
    let meta = s.meta.map(meta_of).unwrap_or_else(|| PodMeta {
        uid: shared(&s.pod_uid),
        namespace: shared(&s.pod_namespace),
        name: shared(&s.pod_name),
        labels: Labels::default(),
        ips: Arc::default(),
    });
    let pod = s.pod.map(pod_of).transpose()?.map(Arc::new);
    let ev = PodLifecycleEvent {
        pod_uid: shared(&s.pod_uid),
        pod_namespace: shared(&s.pod_namespace),
        pod_name: shared(&s.pod_name),
        kind,
        container_id: s.container_id,
        container_name: shared(&s.container_name),
        is_sandbox: s.is_sandbox,
        source,
        observed_at: time(s.observed_at),
        runtime_timestamp: s.runtime_timestamp.and_then(nanos_to_system),
        pod,
        message: s.message,
    };
    Ok(DecodedEvent { event: ev, meta, left: s.left.map(meta_of) })
}

/// Encodes a pod of the view.
pub fn encode_view(pod: &PodStatus, meta: &PodMeta) -> Vec<u8> {
    StoredView { pod: Some(stored_pod(pod)), meta: Some(stored_meta(meta)) }.encode_to_vec()
}

/// Encodes a pod of the view whose meta is its own ([`PodMeta::of`]) without the meta,
/// which [`decode_view`] derives back: a record a third smaller for labelled pods.
pub fn encode_pod_view(pod: &PodStatus) -> Vec<u8> {
    StoredView { pod: Some(stored_pod(pod)), meta: None }.encode_to_vec()
}

/// Decodes a pod of the view.
pub fn decode_view(bytes: &[u8]) -> Result<(PodStatus, PodMeta), RecordError> {
    let v = StoredView::decode(bytes)?;
    let pod = pod_of(v.pod.ok_or_else(|| RecordError::Value("a view record without its pod".into()))?)?;
    let meta = v.meta.map(meta_of).unwrap_or_else(|| PodMeta {
        uid: shared(&pod.uid),
        namespace: shared(&pod.namespace),
        name: shared(&pod.name),
        labels: pod.labels.clone(),
        ips: pod.ips.as_slice().into(),
    });
    Ok((pod, meta))
}

fn time(ns: i64) -> std::time::SystemTime {
    nanos_to_system(ns).unwrap_or(std::time::UNIX_EPOCH)
}

fn map(l: &Labels) -> std::collections::BTreeMap<String, String> {
    l.iter().map(|(k, v)| (k.to_owned(), v.to_owned())).collect()
}

fn stored_meta(m: &PodMeta) -> StoredMeta {
    StoredMeta {
        uid: m.uid.to_string(),
        namespace: m.namespace.to_string(),
        name: m.name.to_string(),
        labels: map(&m.labels),
        ips: m.ips.to_vec(),
    }
}

fn meta_of(m: StoredMeta) -> PodMeta {
    PodMeta {
        uid: shared(&m.uid),
        namespace: shared(&m.namespace),
        name: shared(&m.name),
        labels: m.labels.into_iter().collect(),
        ips: m.ips.into(),
    }
}

fn stored_pod(p: &PodStatus) -> StoredPod {
    StoredPod {
        uid: p.uid.clone(),
        name: p.name.clone(),
        namespace: p.namespace.clone(),
        labels: map(&p.labels),
        annotations: map(&p.annotations),
        ips: p.ips.clone(),
        sandboxes: p
            .sandboxes
            .iter()
            .map(|s| StoredSandbox {
                id: s.id.clone(),
                attempt: s.attempt,
                state: match s.state {
                    SandboxState::Ready => 0,
                    SandboxState::NotReady => 1,
                    SandboxState::Unknown => 2,
                },
                created_at: s.created_at,
                ip: s.ip.clone(),
                additional_ips: s.additional_ips.clone(),
                runtime_handler: s.runtime_handler.clone(),
                pid: s.pid,
                netns_path: s.netns_path.clone(),
            })
            .collect(),
        containers: p
            .containers
            .iter()
            .map(|c| StoredContainer {
                id: c.id.clone(),
                name: c.name.clone(),
                attempt: c.attempt,
                state: match c.state {
                    ContainerState::Created => 0,
                    ContainerState::Running => 1,
                    ContainerState::Exited => 2,
                    ContainerState::Unknown => 3,
                },
                created_at: c.created_at,
                started_at: c.started_at,
                finished_at: c.finished_at,
                exit_code: c.exit_code,
                reason: c.reason.clone(),
                message: c.message.clone(),
                image: c.image.to_string(),
                labels: map(&c.labels),
                annotations: map(&c.annotations),
                image_ref: c.image_ref.to_string(),
                image_id: c.image_id.to_string(),
                resources: c.resources.map(|r| StoredResources {
                    cpu_shares: r.cpu_shares,
                    cpu_quota: r.cpu_quota,
                    cpu_period: r.cpu_period,
                    memory_limit_bytes: r.memory_limit_bytes,
                }),
                process: c.process.as_ref().map(|p| StoredProcess {
                    pid: p.pid,
                    cgroup_path: p.cgroup_path.clone(),
                    cgroup_id: p.cgroup_id,
                    start_ticks: p.start_ticks,
                    namespaces: stored_namespaces(&p.namespaces),
                }),
                log_path: c.log_path.clone(),
            })
            .collect(),
        observed_at: system_to_nanos(p.observed_at),
    }
}

fn stored_namespaces(n: &Namespaces) -> Vec<u64> {
    if *n == Namespaces::default() {
        return Vec::new();
    }
    vec![n.pid, n.mnt, n.net, n.uts, n.ipc, n.cgroup, n.user]
}

/// Namespaces from a record: seven inodes, or none (a record of a version that knew
/// fewer reads as many as it has).
fn namespaces_of(v: &[u64]) -> Namespaces {
    let at = |i: usize| v.get(i).copied().unwrap_or(0);
    Namespaces { pid: at(0), mnt: at(1), net: at(2), uts: at(3), ipc: at(4), cgroup: at(5), user: at(6) }
}

fn pod_of(p: StoredPod) -> Result<PodStatus, RecordError> {
    let sandboxes = p
        .sandboxes
        .into_iter()
        .map(|s| {
            let state = match s.state {
                0 => SandboxState::Ready,
                1 => SandboxState::NotReady,
                2 => SandboxState::Unknown,
                n => return Err(RecordError::Value(format!("sandbox state {n}"))),
            };
            Ok(SandboxStatus {
                id: s.id,
                attempt: s.attempt,
                state,
                created_at: s.created_at,
                ip: s.ip,
                additional_ips: s.additional_ips,
                runtime_handler: s.runtime_handler,
                pid: s.pid,
                netns_path: s.netns_path,
            })
        })
        .collect::<Result<_, _>>()?;
    let containers = p
        .containers
        .into_iter()
        .map(|c| {
            let state = match c.state {
                0 => ContainerState::Created,
                1 => ContainerState::Running,
                2 => ContainerState::Exited,
                3 => ContainerState::Unknown,
                n => return Err(RecordError::Value(format!("container state {n}"))),
            };
            Ok(Arc::new(ContainerStatus {
                id: c.id,
                name: c.name,
                attempt: c.attempt,
                state,
                created_at: c.created_at,
                started_at: c.started_at,
                finished_at: c.finished_at,
                exit_code: c.exit_code,
                reason: c.reason,
                message: c.message,
                image: crate::labels::shared(&c.image),
                labels: c.labels.into_iter().collect(),
                annotations: c.annotations.into_iter().collect(),
                image_ref: crate::labels::shared(&c.image_ref),
                image_id: crate::labels::shared(&c.image_id),
                resources: c.resources.map(|r| Resources {
                    cpu_shares: r.cpu_shares,
                    cpu_quota: r.cpu_quota,
                    cpu_period: r.cpu_period,
                    memory_limit_bytes: r.memory_limit_bytes,
                }),
                process: c.process.map(|p| Process {
                    pid: p.pid,
                    cgroup_path: p.cgroup_path,
                    cgroup_id: p.cgroup_id,
                    start_ticks: p.start_ticks,
                    namespaces: namespaces_of(&p.namespaces),
                }),
                log_path: c.log_path,
            }))
        })
        .collect::<Result<_, _>>()?;
    Ok(PodStatus {
        uid: p.uid,
        name: p.name,
        namespace: p.namespace,
        labels: p.labels.into_iter().collect(),
        annotations: p.annotations.into_iter().collect(),
        ips: p.ips,
        sandboxes,
        containers,
        observed_at: time(p.observed_at),
    })
}

fn source_of(s: &str) -> Result<EventSource, RecordError> {
    Ok(match s {
        "RELIST" => EventSource::Relist,
        "POD_RELIST" => EventSource::PodRelist,
        "CRI_EVENT" => EventSource::CriEvent,
        "RECONCILER" => EventSource::Reconciler,
        "KUBELET" => EventSource::Kubelet,
        "NRI" => EventSource::Nri,
        other => return Err(RecordError::Value(format!("event source {other:?}"))),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The fuzz targets start from `fuzz/corpus/`: its records must be today's format, or
    /// the fuzzer spends its time on inputs plegd refuses at the first byte.
    #[test]
    fn the_fuzz_seed_records_are_records_of_todays_format() {
        let corpus = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("fuzz/corpus");
        let read = |dir: &str| -> Vec<(String, Vec<u8>)> {
            let mut v: Vec<_> = std::fs::read_dir(corpus.join(dir))
                .unwrap_or_else(|e| panic!("fuzz/corpus/{dir}: {e}"))
                .map(|f| f.unwrap())
                .map(|f| (f.file_name().to_string_lossy().into_owned(), std::fs::read(f.path()).unwrap()))
                .collect();
            v.sort();
            v
        };
        let events = read("journal_event");
        assert!(events.len() >= 3);
        for (name, bytes) in events {
            decode_event(&bytes).unwrap_or_else(|e| panic!("journal_event/{name}: {e}"));
        }
        let views = read("journal_view");
        assert!(views.len() >= 2);
        for (name, bytes) in views {
            decode_view(&bytes).unwrap_or_else(|e| panic!("journal_view/{name}: {e}"));
        }
    }
}

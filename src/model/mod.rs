//! The pod-status model plegd keeps in its cache, converted once from the CRI's types.

pub mod event;
pub mod identity;
pub mod workload;

use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde::Serialize;

use crate::labels::{Labels, shared};
use crate::proto::{plegd as api, runtime as cri};

pub use crate::host::Namespaces;

/// A container's state, as the CRI reports it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum ContainerState {
    /// Created, not started.
    Created,
    /// Running.
    Running,
    /// Exited.
    Exited,
    /// The runtime does not know.
    #[default]
    Unknown,
}

/// A sandbox's state, as the CRI reports it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum SandboxState {
    /// The sandbox is up.
    Ready,
    /// The sandbox was stopped or failed.
    NotReady,
    /// A state the CRI does not name (a newer runtime, or a broken one).
    #[default]
    Unknown,
}

/// One container of a pod, from `ContainerStatus`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct ContainerStatus {
    /// Runtime container id.
    pub id: String,
    /// Container name within the pod.
    pub name: String,
    /// Restart attempt.
    pub attempt: u32,
    /// State.
    pub state: ContainerState,
    /// Creation time, nanoseconds since the epoch.
    #[serde(serialize_with = "ser_nanos")]
    pub created_at: i64,
    /// Start time, nanoseconds since the epoch (0: not started).
    #[serde(serialize_with = "ser_nanos")]
    pub started_at: i64,
    /// Finish time, nanoseconds since the epoch (0: not finished).
    #[serde(serialize_with = "ser_nanos")]
    pub finished_at: i64,
    /// Exit code, meaningful once finished.
    pub exit_code: i32,
    /// CamelCase reason for the state (`Completed`, `Error`, `OOMKilled`).
    pub reason: String,
    /// Human-readable detail.
    pub message: String,
    /// Image reference. The image's three strings are shared ([`crate::labels::shared`])
    /// with every container of the same image.
    pub image: Arc<str>,
    /// The image in use by digest, as the runtime resolved it.
    pub image_ref: Arc<str>,
    /// The image's id on the node.
    pub image_id: Arc<str>,
    /// Resources the runtime applied, where it reports them.
    pub resources: Option<Resources>,
    /// Its process and cgroup, read once when plegd first sees it running.
    pub process: Option<Process>,
    /// Its log file as the runtime reports it.
    pub log_path: String,
    /// Labels.
    pub labels: Labels,
    /// Annotations.
    pub annotations: Labels,
}

/// A container's Linux resources, as the runtime reports them (0: not set).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Resources {
    /// CPU shares.
    pub cpu_shares: i64,
    /// CFS quota, microseconds per period.
    pub cpu_quota: i64,
    /// CFS period, microseconds.
    pub cpu_period: i64,
    /// Memory limit, bytes.
    pub memory_limit_bytes: i64,
}

/// A container's init process and cgroup, from the runtime's verbose status and the
/// host's `/proc` and cgroupfs. Kept after the container exits: lookups by PID and
/// cgroup id still find it.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Process {
    /// Host PID of the init process (0: the runtime did not say).
    pub pid: u32,
    /// The cgroup path the runtime set.
    pub cgroup_path: String,
    /// The cgroup's id, its directory's inode (0: unknown; see [`crate::host`]).
    pub cgroup_id: u64,
    /// The init process's start time, clock ticks after boot (0: unknown).
    pub start_ticks: u64,
    /// The init process's namespaces, read once while it runs.
    pub namespaces: Namespaces,
}

/// One sandbox of a pod, from `PodSandboxStatus`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct SandboxStatus {
    /// Runtime sandbox id.
    pub id: String,
    /// Sandbox attempt.
    pub attempt: u32,
    /// State.
    pub state: SandboxState,
    /// Creation time, nanoseconds since the epoch.
    #[serde(serialize_with = "ser_nanos")]
    pub created_at: i64,
    /// Primary IP (empty with host networking), kept after the sandbox stops: the
    /// runtime then reports none, and the address is still the one it held.
    pub ip: String,
    /// Further IPs.
    pub additional_ips: Vec<String>,
    /// Runtime handler (empty: the default).
    pub runtime_handler: String,
    /// Host PID of its process, read once when plegd first sees it ready (0: unknown).
    pub pid: u32,
    /// Its network namespace's path.
    pub netns_path: String,
}

/// A pod as plegd's cache holds it: the kubelet's `PodStatus`, built from CRI calls.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct PodStatus {
    /// Pod UID.
    pub uid: String,
    /// Pod name.
    pub name: String,
    /// Pod namespace.
    pub namespace: String,
    /// Labels of the newest sandbox.
    pub labels: Labels,
    /// Annotations of the newest sandbox.
    pub annotations: Labels,
    /// Pod IPs (newest ready sandbox), kept after the pod dies like the kubelet does.
    pub ips: Vec<String>,
    /// Sandboxes, newest first.
    pub sandboxes: Vec<SandboxStatus>,
    /// Containers, newest first. A container unchanged since the pod's previous status
    /// is that status's allocation: the journal keeps a status for every change, and
    /// most changes touch one container of several.
    pub containers: Vec<Arc<ContainerStatus>>,
    /// When plegd read this status.
    #[serde(serialize_with = "ser_time")]
    pub observed_at: SystemTime,
}

impl ContainerState {
    /// From the CRI enum value; unknown values map to `Unknown`.
    pub fn from_cri(v: i32) -> Self {
        match cri::ContainerState::try_from(v) {
            Ok(cri::ContainerState::ContainerCreated) => Self::Created,
            Ok(cri::ContainerState::ContainerRunning) => Self::Running,
            Ok(cri::ContainerState::ContainerExited) => Self::Exited,
            _ => Self::Unknown,
        }
    }

    /// The API enum.
    pub fn to_api(self) -> api::ContainerState {
        match self {
            Self::Created => api::ContainerState::Created,
            Self::Running => api::ContainerState::Running,
            Self::Exited => api::ContainerState::Exited,
            Self::Unknown => api::ContainerState::Unknown,
        }
    }
}

impl SandboxState {
    /// From the CRI enum value; a value the CRI does not name is unknown (the kubelet
    /// maps it to its unknown container state).
    pub fn from_cri(v: i32) -> Self {
        match cri::PodSandboxState::try_from(v) {
            Ok(cri::PodSandboxState::SandboxReady) => Self::Ready,
            Ok(cri::PodSandboxState::SandboxNotready) => Self::NotReady,
            Err(_) => Self::Unknown,
        }
    }
}

impl ContainerStatus {
    /// Converts a CRI `ContainerStatus`.
    pub fn from_cri(s: &cri::ContainerStatus) -> Self {
        let md = s.metadata.clone().unwrap_or_default();
        Self {
            id: s.id.clone(),
            name: md.name,
            attempt: md.attempt,
            state: ContainerState::from_cri(s.state),
            created_at: s.created_at,
            started_at: s.started_at,
            finished_at: s.finished_at,
            exit_code: s.exit_code,
            reason: s.reason.clone(),
            message: s.message.clone(),
            image: shared(s.image.as_ref().map_or("", |i| i.image.as_str())),
            image_ref: shared(&s.image_ref),
            image_id: shared(&s.image_id),
            resources: s.resources.as_ref().and_then(|r| r.linux.as_ref()).map(|l| Resources {
                cpu_shares: l.cpu_shares,
                cpu_quota: l.cpu_quota,
                cpu_period: l.cpu_period,
                memory_limit_bytes: l.memory_limit_in_bytes,
            }),
            process: None,
            log_path: s.log_path.clone(),
            labels: s.labels.iter().collect(),
            annotations: s.annotations.iter().collect(),
        }
    }
}

impl ContainerStatus {
    /// The API message.
    pub fn to_api(&self) -> api::ContainerInfo {
        let process = self.process.clone().unwrap_or_default();
        api::ContainerInfo {
            id: self.id.clone(),
            name: self.name.clone(),
            attempt: self.attempt,
            state: self.state.to_api() as i32,
            created_at: nanos_to_timestamp(self.created_at),
            started_at: nanos_to_timestamp(self.started_at),
            finished_at: nanos_to_timestamp(self.finished_at),
            exit_code: self.exit_code,
            reason: self.reason.clone(),
            message: self.message.clone(),
            image: self.image.to_string(),
            labels: self.labels.to_map(),
            annotations: self.annotations.to_map(),
            pid: if self.state == ContainerState::Running { process.pid } else { 0 },
            cgroup_path: process.cgroup_path,
            cgroup_id: process.cgroup_id,
            image_ref: self.image_ref.to_string(),
            image_id: self.image_id.to_string(),
            resources: self.resources.map(|r| api::ContainerResources {
                cpu_shares: r.cpu_shares,
                cpu_quota: r.cpu_quota,
                cpu_period: r.cpu_period,
                memory_limit_bytes: r.memory_limit_bytes,
            }),
            log_path: self.log_path.clone(),
            namespaces: (process.namespaces != Namespaces::default()).then(|| {
                let n = process.namespaces;
                api::ContainerNamespaces {
                    pid: n.pid,
                    mnt: n.mnt,
                    net: n.net,
                    uts: n.uts,
                    ipc: n.ipc,
                    cgroup: n.cgroup,
                    user: n.user,
                }
            }),
        }
    }
}

impl SandboxStatus {
    /// Converts a CRI `PodSandboxStatus`.
    pub fn from_cri(s: &cri::PodSandboxStatus) -> Self {
        let md = s.metadata.clone().unwrap_or_default();
        let net = s.network.clone().unwrap_or_default();
        Self {
            id: s.id.clone(),
            attempt: md.attempt,
            state: SandboxState::from_cri(s.state),
            created_at: s.created_at,
            ip: net.ip,
            additional_ips: net.additional_ips.into_iter().map(|p| p.ip).collect(),
            runtime_handler: s.runtime_handler.clone(),
            pid: 0,
            netns_path: String::new(),
        }
    }
}

impl PodStatus {
    /// A pod with nothing in it yet, read now (tests and benches build on it).
    pub fn empty(uid: &str, namespace: &str, name: &str) -> Self {
        Self {
            uid: uid.into(),
            name: name.into(),
            namespace: namespace.into(),
            labels: Labels::default(),
            annotations: Labels::default(),
            ips: Vec::new(),
            sandboxes: Vec::new(),
            containers: Vec::new(),
            observed_at: SystemTime::now(),
        }
    }

    /// When the pod was made, as far as plegd can tell: its newest sandbox's creation,
    /// else when plegd read it.
    pub fn made_at(&self) -> SystemTime {
        self.sandboxes.iter().filter_map(|s| nanos_to_system(s.created_at)).max().unwrap_or(self.observed_at)
    }

    /// When its oldest sandbox plegd holds was made, the nearest it knows to the pod's
    /// own creation (steady while that sandbox is kept); `None`: no sandbox read.
    pub fn first_sandbox_made_at(&self) -> Option<SystemTime> {
        self.sandboxes.iter().filter_map(|s| nanos_to_system(s.created_at)).min()
    }

    /// The process this status already holds for container `id`: what plegd reads once
    /// per container, and need not read again.
    pub fn known_process(&self, id: &str) -> Option<&Process> {
        self.containers.iter().find(|c| c.id == id)?.process.as_ref()
    }

    /// Sandbox `id` as this status holds it, when it already holds its process (a PID
    /// or a network namespace): read once per sandbox, not again.
    pub fn known_sandbox_process(&self, id: &str) -> Option<&SandboxStatus> {
        self.sandboxes.iter().find(|s| s.id == id).filter(|s| s.pid != 0 || !s.netns_path.is_empty())
    }

    /// The container or sandbox with this id, as (name, is_sandbox).
    pub fn find(&self, id: &str) -> Option<(&str, bool)> {
        if let Some(c) = self.containers.iter().find(|c| c.id == id) {
            return Some((&c.name, false));
        }
        self.sandboxes.iter().find(|s| s.id == id).map(|_| ("", true))
    }

    /// The API message, with the identity `ids` holds for it.
    pub fn to_api(&self, ids: &identity::Identities, error: Option<&str>) -> api::PodStatus {
        api::PodStatus {
            uid: self.uid.clone(),
            name: self.name.clone(),
            namespace: self.namespace.clone(),
            labels: self.labels.to_map(),
            annotations: self.annotations.to_map(),
            ips: self.ips.clone(),
            sandboxes: self
                .sandboxes
                .iter()
                .map(|s| api::SandboxInfo {
                    id: s.id.clone(),
                    attempt: s.attempt,
                    state: match s.state {
                        SandboxState::Ready => api::SandboxState::Ready,
                        SandboxState::NotReady => api::SandboxState::Notready,
                        SandboxState::Unknown => api::SandboxState::Unspecified,
                    } as i32,
                    created_at: nanos_to_timestamp(s.created_at),
                    ip: s.ip.clone(),
                    additional_ips: s.additional_ips.clone(),
                    runtime_handler: s.runtime_handler.clone(),
                    pid: if s.state == SandboxState::Ready { s.pid } else { 0 },
                    netns_path: s.netns_path.clone(),
                })
                .collect(),
            containers: self.containers.iter().map(|c| c.to_api()).collect(),
            observed_at: Some(system_to_timestamp(self.observed_at)),
            error: error.unwrap_or_default().to_owned(),
            identity: Some(ids.of(self)),
        }
    }
}

/// Nanoseconds since the epoch as a `SystemTime`; `None` for 0 or negative.
pub fn nanos_to_system(ns: i64) -> Option<SystemTime> {
    (ns > 0).then(|| UNIX_EPOCH + Duration::from_nanos(ns as u64))
}

/// A `SystemTime` as nanoseconds since the epoch.
pub fn system_to_nanos(t: SystemTime) -> i64 {
    t.duration_since(UNIX_EPOCH).map(|d| d.as_nanos() as i64).unwrap_or(0)
}

/// Nanoseconds since the epoch as a protobuf timestamp; `None` for 0.
pub fn nanos_to_timestamp(ns: i64) -> Option<prost_types::Timestamp> {
    (ns > 0).then(|| prost_types::Timestamp {
        seconds: ns.div_euclid(1_000_000_000),
        nanos: ns.rem_euclid(1_000_000_000) as i32,
    })
}

/// A `SystemTime` as a protobuf timestamp.
pub fn system_to_timestamp(t: SystemTime) -> prost_types::Timestamp {
    nanos_to_timestamp(system_to_nanos(t)).unwrap_or_default()
}

/// The first 12 bytes of a container or sandbox id, as logs show it; fewer where the
/// 12th byte falls inside a character (ids come from the runtime and are not checked).
pub fn short_id(id: &str) -> &str {
    let mut end = id.len().min(12);
    while !id.is_char_boundary(end) {
        end -= 1;
    }
    &id[..end]
}

/// RFC 3339 with milliseconds, the one time format of plegd's JSON.
pub fn rfc3339(t: SystemTime) -> String {
    humantime::format_rfc3339_millis(t).to_string()
}

fn ser_nanos<S: serde::Serializer>(ns: &i64, s: S) -> Result<S::Ok, S::Error> {
    match nanos_to_system(*ns) {
        Some(t) => s.serialize_str(&humantime::format_rfc3339_nanos(t).to_string()),
        None => s.serialize_none(),
    }
}

fn ser_time<S: serde::Serializer>(t: &SystemTime, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(&rfc3339(*t))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nanos_round_trip_through_timestamp() {
        let ts = nanos_to_timestamp(1_700_000_000_123_456_789).unwrap();
        assert_eq!(ts.seconds, 1_700_000_000);
        assert_eq!(ts.nanos, 123_456_789);
        assert!(nanos_to_timestamp(0).is_none());
    }

    #[test]
    fn a_short_id_never_splits_a_character() {
        assert_eq!(short_id("0123456789abcdef"), "0123456789ab");
        assert_eq!(short_id("abc"), "abc");
        assert_eq!(short_id("0123456789aé"), "0123456789a", "é takes bytes 11 and 12");
        assert_eq!(short_id(""), "");
    }

    #[test]
    fn unknown_cri_state_maps_to_unknown() {
        assert_eq!(ContainerState::from_cri(99), ContainerState::Unknown);
        assert_eq!(ContainerState::from_cri(1), ContainerState::Running);
        assert_eq!(SandboxState::from_cri(0), SandboxState::Ready);
        assert_eq!(SandboxState::from_cri(1), SandboxState::NotReady);
        assert_eq!(SandboxState::from_cri(7), SandboxState::Unknown);
    }

    #[test]
    fn containers_of_one_image_share_its_strings_and_read_as_the_runtime_said() {
        let of = |id: &str, image: &str| cri::ContainerStatus {
            id: id.into(),
            image: Some(cri::ImageSpec { image: image.into(), ..Default::default() }),
            image_ref: format!("{image}@sha256:0a1b"),
            image_id: format!("sha256:{image}"),
            ..Default::default()
        };
        let (a, b) =
            (ContainerStatus::from_cri(&of("a", "busybox:1")), ContainerStatus::from_cri(&of("b", "busybox:1")));
        let other = ContainerStatus::from_cri(&of("c", "nginx:2"));
        assert!(Arc::ptr_eq(&a.image, &b.image) && Arc::ptr_eq(&a.image_ref, &b.image_ref));
        assert!(Arc::ptr_eq(&a.image_id, &b.image_id));
        assert_eq!(
            (&*a.image, &*a.image_ref, &*a.image_id),
            ("busybox:1", "busybox:1@sha256:0a1b", "sha256:busybox:1")
        );
        assert_eq!((&*other.image, &*other.image_id), ("nginx:2", "sha256:nginx:2"));
        let api = a.to_api();
        assert_eq!((api.image.as_str(), api.image_ref.as_str()), ("busybox:1", "busybox:1@sha256:0a1b"));
        let none = ContainerStatus::from_cri(&cri::ContainerStatus { image: None, ..of("d", "x") });
        assert_eq!(&*none.image, "", "no image spec reads as an empty image");
    }
}

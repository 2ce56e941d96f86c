//! Pod lifecycle events: what every producer (the relister, the reconcilers) publishes
//! and every consumer (journal, sync loop, API) reads, and their API form.

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use serde::Serialize;

use crate::model::{PodStatus, system_to_timestamp};
use crate::proto::plegd as api;

/// What a lifecycle event says happened (the kubelet's PLEG types plus reconciler ones).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum EventType {
    /// Now running, was not.
    ContainerStarted,
    /// Now exited.
    ContainerDied,
    /// No longer exists.
    ContainerRemoved,
    /// Now created or unknown.
    ContainerChanged,
    /// The pod was re-inspected without a container transition.
    PodSync,
    /// A container keeps dying.
    CrashLoop,
    /// A crash-looping container has stayed up.
    CrashLoopCleared,
    /// The pod's identity changed.
    PodUpdated,
}

/// Which path noticed a change.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum EventSource {
    /// A full relist.
    Relist,
    /// A targeted relist of one pod.
    PodRelist,
    /// A targeted relist triggered by the CRI event stream.
    CriEvent,
    /// A reconciler.
    Reconciler,
    /// The kubelet's Pods API.
    Kubelet,
    /// A targeted relist triggered by an NRI plugin call from the runtime.
    Nri,
}

impl EventSource {
    /// Whether this source's events are about the pod as the journal holds it (they move
    /// no status: a reconciler's follow-up, the kubelet's word on who the pod is), and
    /// are dropped once the pod is gone.
    pub fn follows_the_view(self) -> bool {
        matches!(self, Self::Reconciler | Self::Kubelet)
    }
}

/// A pod lifecycle event. The pod's uid, name and namespace and the container's name
/// are shared strings ([`crate::labels::shared`]): a pod's events repeat them.
#[derive(Clone, Debug, Serialize)]
pub struct PodLifecycleEvent {
    /// Pod UID.
    pub pod_uid: Arc<str>,
    /// Pod namespace.
    pub pod_namespace: Arc<str>,
    /// Pod name.
    pub pod_name: Arc<str>,
    /// What happened.
    #[serde(rename = "type")]
    pub kind: EventType,
    /// Container or sandbox id (empty for pod-level events).
    pub container_id: String,
    /// Container name (empty for sandboxes).
    pub container_name: Arc<str>,
    /// Whether `container_id` is the pod's sandbox.
    pub is_sandbox: bool,
    /// Which path noticed it.
    pub source: EventSource,
    /// When plegd saw it.
    #[serde(serialize_with = "ser_time")]
    pub observed_at: SystemTime,
    /// The runtime's time of the change, where known.
    #[serde(serialize_with = "ser_opt_time")]
    pub runtime_timestamp: Option<SystemTime>,
    /// The pod's status after the change (absent once the pod is gone).
    pub pod: Option<Arc<PodStatus>>,
    /// Extra words from the producer.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub message: String,
}

impl EventType {
    /// The API enum name.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::ContainerStarted => "CONTAINER_STARTED",
            Self::ContainerDied => "CONTAINER_DIED",
            Self::ContainerRemoved => "CONTAINER_REMOVED",
            Self::ContainerChanged => "CONTAINER_CHANGED",
            Self::PodSync => "POD_SYNC",
            Self::CrashLoop => "CRASH_LOOP",
            Self::CrashLoopCleared => "CRASH_LOOP_CLEARED",
            Self::PodUpdated => "POD_UPDATED",
        }
    }

    /// The API enum.
    pub fn to_api(self) -> api::LifecycleEventType {
        match self {
            Self::ContainerStarted => api::LifecycleEventType::ContainerStarted,
            Self::ContainerDied => api::LifecycleEventType::ContainerDied,
            Self::ContainerRemoved => api::LifecycleEventType::ContainerRemoved,
            Self::ContainerChanged => api::LifecycleEventType::ContainerChanged,
            Self::PodSync => api::LifecycleEventType::PodSync,
            Self::CrashLoop => api::LifecycleEventType::CrashLoop,
            Self::CrashLoopCleared => api::LifecycleEventType::CrashLoopCleared,
            Self::PodUpdated => api::LifecycleEventType::PodUpdated,
        }
    }
}

/// An event type name that does not exist.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("unknown event type {given:?} (one of {known})")]
pub struct UnknownEventType {
    /// What was given.
    pub given: String,
    /// The names that exist.
    pub known: String,
}

impl std::str::FromStr for EventType {
    type Err = UnknownEventType;

    /// Parses the API enum name, in any case.
    fn from_str(s: &str) -> Result<Self, UnknownEventType> {
        let all = [
            Self::ContainerStarted,
            Self::ContainerDied,
            Self::ContainerRemoved,
            Self::ContainerChanged,
            Self::PodSync,
            Self::CrashLoop,
            Self::CrashLoopCleared,
            Self::PodUpdated,
        ];
        all.into_iter().find(|t| t.as_str().eq_ignore_ascii_case(s.trim())).ok_or_else(|| {
            let names: Vec<_> = all.iter().map(|t| t.as_str()).collect();
            UnknownEventType { given: s.to_string(), known: names.join(", ") }
        })
    }
}

impl EventSource {
    /// The API enum name.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Relist => "RELIST",
            Self::PodRelist => "POD_RELIST",
            Self::CriEvent => "CRI_EVENT",
            Self::Reconciler => "RECONCILER",
            Self::Kubelet => "KUBELET",
            Self::Nri => "NRI",
        }
    }

    /// The API enum.
    pub fn to_api(self) -> api::EventSource {
        match self {
            Self::Relist => api::EventSource::Relist,
            Self::PodRelist => api::EventSource::PodRelist,
            Self::CriEvent => api::EventSource::CriEvent,
            Self::Reconciler => api::EventSource::Reconciler,
            Self::Kubelet => api::EventSource::Kubelet,
            Self::Nri => api::EventSource::Nri,
        }
    }
}

impl PodLifecycleEvent {
    /// From the runtime's time of the change to `observed_at`, where known.
    pub fn latency(&self) -> Option<Duration> {
        self.runtime_timestamp.and_then(|t| self.observed_at.duration_since(t).ok())
    }

    /// The API message, with the pod's identity as `ids` holds it.
    pub fn to_api(&self, ids: &crate::model::identity::Identities) -> api::LifecycleEvent {
        api::LifecycleEvent {
            pod_uid: self.pod_uid.to_string(),
            pod_namespace: self.pod_namespace.to_string(),
            pod_name: self.pod_name.to_string(),
            r#type: self.kind.to_api() as i32,
            container_id: self.container_id.clone(),
            container_name: self.container_name.to_string(),
            is_sandbox: self.is_sandbox,
            source: self.source.to_api() as i32,
            observed_at: Some(system_to_timestamp(self.observed_at)),
            runtime_timestamp: self.runtime_timestamp.map(system_to_timestamp),
            pod: self.pod.as_ref().map(|p| p.to_api(ids, None)),
            message: self.message.clone(),
        }
    }
}

fn ser_time<S: serde::Serializer>(t: &SystemTime, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(&crate::model::rfc3339(*t))
}

fn ser_opt_time<S: serde::Serializer>(t: &Option<SystemTime>, s: S) -> Result<S::Ok, S::Error> {
    match t {
        Some(t) => s.serialize_str(&crate::model::rfc3339(*t)),
        None => s.serialize_none(),
    }
}

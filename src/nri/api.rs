//! The messages plegd reads and writes on NRI's socket: ttrpc's envelope
//! (`ttrpc.Request`, `ttrpc.Response` with `google.rpc.Status`) and the subset of
//! `nri.pkg.api.v1alpha1` an observer needs, with their field numbers (containerd/nri's
//! `pkg/api/api.proto`, the same from v0.8 to v0.12).
//!
//! Only the fields plegd uses are declared; every other field is skipped unread — a
//! container's environment (field 8), its mounts, hooks, labels and annotations are
//! never decoded, so they cannot be kept, logged or served.

/// ttrpc's request envelope.
#[derive(Clone, PartialEq, prost::Message)]
pub struct Request {
    /// The service (`nri.pkg.api.v1alpha1.Plugin`).
    #[prost(string, tag = "1")]
    pub service: String,
    /// The method (`StateChange`, …).
    #[prost(string, tag = "2")]
    pub method: String,
    /// The call's message.
    #[prost(bytes = "vec", tag = "3")]
    pub payload: Vec<u8>,
    /// The caller's deadline, in nanoseconds from now (0: none).
    #[prost(int64, tag = "4")]
    pub timeout_nano: i64,
}

/// ttrpc's response envelope.
#[derive(Clone, PartialEq, prost::Message)]
pub struct Response {
    /// The outcome; none or code 0 is success.
    #[prost(message, optional, tag = "1")]
    pub status: Option<Status>,
    /// The answer's message.
    #[prost(bytes = "vec", tag = "2")]
    pub payload: Vec<u8>,
}

/// `google.rpc.Status`, as ttrpc carries it.
#[derive(Clone, PartialEq, prost::Message)]
pub struct Status {
    /// A gRPC code.
    #[prost(int32, tag = "1")]
    pub code: i32,
    /// Why.
    #[prost(string, tag = "2")]
    pub message: String,
}

/// `Runtime.RegisterPlugin`'s request.
#[derive(Clone, PartialEq, prost::Message)]
pub struct RegisterPluginRequest {
    /// The plugin's name.
    #[prost(string, tag = "1")]
    pub plugin_name: String,
    /// Its index: two digits, the order among plugins called for the same event.
    #[prost(string, tag = "2")]
    pub plugin_idx: String,
}

/// `Plugin.Configure`'s request.
#[derive(Clone, PartialEq, prost::Message)]
pub struct ConfigureRequest {
    /// `containerd`, `cri-o`.
    #[prost(string, tag = "2")]
    pub runtime_name: String,
    /// Its version.
    #[prost(string, tag = "3")]
    pub runtime_version: String,
    /// How long the runtime waits for registration, in milliseconds.
    #[prost(int64, tag = "4")]
    pub registration_timeout: i64,
    /// How long it waits for each call, in milliseconds.
    #[prost(int64, tag = "5")]
    pub request_timeout: i64,
}

/// `Plugin.Configure`'s answer: the events subscribed to, one bit each (event `e` is
/// bit `e - 1`).
#[derive(Clone, PartialEq, prost::Message)]
pub struct ConfigureResponse {
    /// The mask.
    #[prost(int32, tag = "2")]
    pub events: i32,
}

/// `Plugin.Synchronize`'s request: the runtime's pods and containers, maybe in parts.
#[derive(Clone, PartialEq, prost::Message)]
pub struct SynchronizeRequest {
    /// Sandboxes.
    #[prost(message, repeated, tag = "1")]
    pub pods: Vec<PodSandbox>,
    /// Containers.
    #[prost(message, repeated, tag = "2")]
    pub containers: Vec<Container>,
    /// More parts follow.
    #[prost(bool, tag = "3")]
    pub more: bool,
}

/// `Plugin.Synchronize`'s request, read for `more` alone (its pods and containers are
/// skipped unread).
#[derive(Clone, PartialEq, prost::Message)]
pub struct SynchronizeParts {
    /// More parts follow.
    #[prost(bool, tag = "3")]
    pub more: bool,
}

/// `Plugin.Synchronize`'s answer: no update; `more` echoes the request's.
#[derive(Clone, PartialEq, prost::Message)]
pub struct SynchronizeResponse {
    /// The request's `more`.
    #[prost(bool, tag = "2")]
    pub more: bool,
}

/// What every container call carries first (`CreateContainerRequest`,
/// `UpdateContainerRequest`, `StopContainerRequest`: the pod at 1, the container at 2).
#[derive(Clone, PartialEq, prost::Message)]
pub struct ContainerCall {
    /// The pod.
    #[prost(message, optional, tag = "1")]
    pub pod: Option<PodSandbox>,
    /// The container.
    #[prost(message, optional, tag = "2")]
    pub container: Option<Container>,
}

/// `Plugin.StateChange`'s request.
#[derive(Clone, PartialEq, prost::Message)]
pub struct StateChangeEvent {
    /// The [`Event`].
    #[prost(int32, tag = "1")]
    pub event: i32,
    /// The pod.
    #[prost(message, optional, tag = "2")]
    pub pod: Option<PodSandbox>,
    /// The container, for a container's event.
    #[prost(message, optional, tag = "3")]
    pub container: Option<Container>,
}

/// A pod sandbox as NRI says it.
#[derive(Clone, PartialEq, prost::Message)]
pub struct PodSandbox {
    /// The sandbox id.
    #[prost(string, tag = "1")]
    pub id: String,
    /// The pod's name.
    #[prost(string, tag = "2")]
    pub name: String,
    /// The pod's uid.
    #[prost(string, tag = "3")]
    pub uid: String,
    /// The pod's namespace.
    #[prost(string, tag = "4")]
    pub namespace: String,
}

/// A container as NRI says it.
#[derive(Clone, PartialEq, prost::Message)]
pub struct Container {
    /// The container id.
    #[prost(string, tag = "1")]
    pub id: String,
    /// Its sandbox.
    #[prost(string, tag = "2")]
    pub pod_sandbox_id: String,
    /// Its name.
    #[prost(string, tag = "3")]
    pub name: String,
    /// Linux specifics.
    #[prost(message, optional, tag = "11")]
    pub linux: Option<LinuxContainer>,
    /// Its process, where the runtime fills it (containerd does once the task exists).
    #[prost(uint32, tag = "12")]
    pub pid: u32,
}

/// A container's Linux specifics.
#[derive(Clone, PartialEq, prost::Message)]
pub struct LinuxContainer {
    /// Its cgroup, as the runtime names it (`parent:prefix:name` under systemd).
    #[prost(string, tag = "5")]
    pub cgroups_path: String,
}

/// NRI's events (`nri.pkg.api.v1alpha1.Event`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(i32)]
pub enum Event {
    /// A sandbox started.
    RunPodSandbox = 1,
    /// A sandbox stopped.
    StopPodSandbox = 2,
    /// A sandbox was removed.
    RemovePodSandbox = 3,
    /// A container was created.
    PostCreateContainer = 5,
    /// A container started.
    PostStartContainer = 7,
    /// A container is being stopped.
    StopContainer = 10,
    /// A container was removed.
    RemoveContainer = 11,
}

impl Event {
    /// Every event plegd subscribes to: each one after a change, none before it (a
    /// container's `CREATE_CONTAINER` and `START_CONTAINER` come before the runtime acts,
    /// and each event subscribed is one more call the runtime waits on). None past
    /// `REMOVE_CONTAINER`: containerd 2.1 (NRI v0.8) refuses a registration that asks
    /// for an event it does not know.
    pub const SUBSCRIBED: [Event; 7] = [
        Self::RunPodSandbox,
        Self::StopPodSandbox,
        Self::RemovePodSandbox,
        Self::PostCreateContainer,
        Self::PostStartContainer,
        Self::StopContainer,
        Self::RemoveContainer,
    ];

    /// The event of number `n`, if plegd subscribes to it.
    pub fn from_i32(n: i32) -> Option<Self> {
        Self::SUBSCRIBED.into_iter().find(|e| *e as i32 == n)
    }

    /// The mask `Configure` answers.
    pub fn mask() -> i32 {
        Self::SUBSCRIBED.iter().fold(0, |m, e| m | 1 << (*e as i32 - 1))
    }

    /// The metric label.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::RunPodSandbox => "RUN_POD_SANDBOX",
            Self::StopPodSandbox => "STOP_POD_SANDBOX",
            Self::RemovePodSandbox => "REMOVE_POD_SANDBOX",
            Self::PostCreateContainer => "POST_CREATE_CONTAINER",
            Self::PostStartContainer => "POST_START_CONTAINER",
            Self::StopContainer => "STOP_CONTAINER",
            Self::RemoveContainer => "REMOVE_CONTAINER",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_subscription_is_every_change_of_a_lifecycle_and_nothing_nri_v0_8_does_not_know() {
        // CREATE_CONTAINER (4) and START_CONTAINER (6) come before the change;
        // UPDATE_CONTAINER (8) and POST_UPDATE_CONTAINER (9) say nothing of a lifecycle;
        // 12 and past are unknown to containerd 2.1.
        assert_eq!(Event::mask(), 0b110_0101_0111);
        assert_eq!(Event::from_i32(4), None);
        assert!(Event::mask() < 1 << 11);
        assert_eq!(Event::from_i32(8), None);
        assert_eq!(Event::from_i32(7), Some(Event::PostStartContainer));
    }
}

//! The PLEG: the kubelet's state table, pod records, pod inspection, PLEG health, the
//! CRI event stream's hints and the GenericPLEG relister (the cache's only writer).
//! It produces [`crate::model::event::PodLifecycleEvent`]s.

mod deleted_sandboxes;
pub mod evented;
mod final_statuses;
pub mod generic;
pub mod health;
pub mod hints;
pub mod inspect;
mod lost_exits;
pub mod metrics;
pub mod records;
mod stream_trust;

use std::sync::Arc;
use std::time::SystemTime;

use crate::labels::shared;
use crate::model::event::{EventSource, EventType, PodLifecycleEvent};
use crate::model::{ContainerState, PodStatus, SandboxState, nanos_to_system};
use records::Transition;

/// The kubelet's internal container states for diffing relists.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum PlegState {
    /// Running (a READY sandbox counts as running).
    Running,
    /// Exited (a NOTREADY sandbox counts as exited).
    Exited,
    /// Created or unknown.
    Unknown,
    /// Not in the listing.
    NonExistent,
}

impl PlegState {
    /// A container's state as the kubelet sees it: Created counts as unknown.
    pub fn of_container(s: ContainerState) -> Self {
        match s {
            ContainerState::Running => Self::Running,
            ContainerState::Exited => Self::Exited,
            ContainerState::Created | ContainerState::Unknown => Self::Unknown,
        }
    }

    /// A sandbox as a pseudo-container, by the kubelet's table: READY is running,
    /// NOTREADY exited, a state the CRI does not name unknown.
    pub fn of_sandbox(s: SandboxState) -> Self {
        match s {
            SandboxState::Ready => Self::Running,
            SandboxState::NotReady => Self::Exited,
            SandboxState::Unknown => Self::Unknown,
        }
    }
}

/// The kubelet's transition table: the events for a container that was `old` at the
/// previous relist and is `new` now. Died comes before Removed.
pub fn transition_events(old: PlegState, new: PlegState) -> &'static [EventType] {
    use EventType::*;
    use PlegState::*;
    if old == new {
        return &[];
    }
    match new {
        Running => &[ContainerStarted],
        Exited => &[ContainerDied],
        Unknown => &[ContainerChanged],
        NonExistent => match old {
            Exited => &[ContainerRemoved],
            _ => &[ContainerDied, ContainerRemoved],
        },
    }
}

/// Whether two statuses say the same, ignoring when they were read.
pub fn same_status(a: &PodStatus, b: &PodStatus) -> bool {
    a.uid == b.uid
        && a.ips == b.ips
        && a.sandboxes == b.sandboxes
        && a.containers == b.containers
        && a.labels == b.labels
        && a.annotations == b.annotations
}

/// Turns a pod's transitions into lifecycle events carrying the pod's fresh status. A
/// pod refreshed without a transition gets one `POD_SYNC` when `sync` is set (it was
/// re-inspected after a failure, or its status changed in another way).
///
/// `final_statuses` holds the final status the runtime's stream carried for containers the
/// fresh status no longer has (removed before plegd read them): their
/// `CONTAINER_DIED` carries the pod with that container as it ended — exit code, reason,
/// finish time — rather than a pod without it.
#[allow(clippy::too_many_arguments)]
pub fn build_events(
    uid: &str,
    namespace: &str,
    name: &str,
    transitions: &[Transition],
    status: Option<Arc<PodStatus>>,
    sync: bool,
    source: EventSource,
    final_statuses: &std::collections::HashMap<String, crate::model::ContainerStatus>,
) -> Vec<PodLifecycleEvent> {
    let observed_at = SystemTime::now();
    let (uid, namespace, name) = (
        shared(uid),
        shared(status.as_ref().map_or(namespace, |s| s.namespace.as_str())),
        shared(status.as_ref().map_or(name, |s| s.name.as_str())),
    );
    let base = |kind, id: &str, cname: &str, is_sandbox, ts| PodLifecycleEvent {
        pod_uid: uid.clone(),
        pod_namespace: namespace.clone(),
        pod_name: name.clone(),
        kind,
        container_id: id.to_owned(),
        container_name: shared(cname),
        is_sandbox,
        source,
        observed_at,
        runtime_timestamp: ts,
        pod: status.clone(),
        message: String::new(),
    };
    if transitions.is_empty() {
        if sync && status.is_some() {
            return vec![base(EventType::PodSync, "", "", false, None)];
        }
        return Vec::new();
    }
    transitions
        .iter()
        .map(|t| {
            let gone = !t.is_sandbox && status.as_deref().is_none_or(|s| s.containers.iter().all(|c| c.id != t.id));
            if t.kind == EventType::ContainerDied
                && gone
                && let Some(last) = final_statuses.get(&t.id)
            {
                let mut pod = status.as_deref().cloned().unwrap_or_else(|| PodStatus::empty(&uid, &namespace, &name));
                pod.containers.insert(0, Arc::new(last.clone()));
                let pod = Arc::new(pod);
                let ts = runtime_time(&pod, t);
                return PodLifecycleEvent { pod: Some(pod), ..base(t.kind, &t.id, &t.name, t.is_sandbox, ts) };
            }
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

#[cfg(test)]
mod tests {
    use super::EventType::*;
    use super::PlegState::*;
    use super::*;

    #[test]
    fn transition_table_matches_the_kubelet() {
        let table: &[(PlegState, PlegState, &[EventType])] = &[
            (Running, Running, &[]),
            (Running, Exited, &[ContainerDied]),
            (Running, Unknown, &[ContainerChanged]),
            (Running, NonExistent, &[ContainerDied, ContainerRemoved]),
            (Exited, Running, &[ContainerStarted]),
            (Exited, Exited, &[]),
            (Exited, Unknown, &[ContainerChanged]),
            (Exited, NonExistent, &[ContainerRemoved]),
            (Unknown, Running, &[ContainerStarted]),
            (Unknown, Exited, &[ContainerDied]),
            (Unknown, Unknown, &[]),
            (Unknown, NonExistent, &[ContainerDied, ContainerRemoved]),
            (NonExistent, Running, &[ContainerStarted]),
            (NonExistent, Exited, &[ContainerDied]),
            (NonExistent, Unknown, &[ContainerChanged]),
            (NonExistent, NonExistent, &[]),
        ];
        for (old, new, want) in table {
            assert_eq!(transition_events(*old, *new), *want, "{old:?} -> {new:?}");
        }
    }

    #[test]
    fn created_containers_are_unknown_and_sandboxes_are_pseudo_containers() {
        assert_eq!(PlegState::of_container(ContainerState::Created), Unknown);
        assert_eq!(PlegState::of_container(ContainerState::Unknown), Unknown);
        assert_eq!(PlegState::of_container(ContainerState::Running), Running);
        assert_eq!(PlegState::of_container(ContainerState::Exited), Exited);
        assert_eq!(PlegState::of_sandbox(SandboxState::Ready), Running);
        assert_eq!(PlegState::of_sandbox(SandboxState::NotReady), Exited);
        assert_eq!(PlegState::of_sandbox(SandboxState::Unknown), Unknown, "the kubelet maps it to unknown");
    }
}

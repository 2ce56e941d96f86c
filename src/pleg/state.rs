//! The kubelet's state table: a container's or sandbox's state as the PLEG diffs it
//! ([`PlegState`]), the events a change of state makes ([`transition_events`], the
//! kubelet's `generateEvents`), and when two statuses of a pod are the same. A leaf:
//! records, inspection and the step build on it; it imports only the model.

use crate::model::event::EventType;
use crate::model::{ContainerState, PodStatus, SandboxState};

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

//! The PLEG: the kubelet's state table, pod records, pod inspection, PLEG health, the
//! CRI event stream's hints, the schedule of reads to come, the pure step from a read to
//! its events, and the GenericPLEG relister (the cache's only writer) that performs it.
//! It produces [`crate::model::event::PodLifecycleEvent`]s.

mod deleted_sandboxes;
pub mod evented;
pub mod final_statuses;
pub mod generic;
pub mod health;
pub mod inbox;
pub mod inspect;
pub mod list;
mod lost_exits;
pub mod metrics;
pub mod records;
pub mod schedule;
pub mod step;
mod stream_trust;

use std::time::Duration;

use crate::model::event::EventType;
use crate::model::{ContainerState, PodStatus, SandboxState};

/// How the PLEG runs.
#[derive(Clone, Debug)]
pub struct PlegConfig {
    /// Whether the CRI event stream is used (`--mode`).
    pub mode: evented::Mode,
    /// Time from the end of one full relist to the start of the next.
    pub relist_period: Duration,
    /// Pods read at once.
    pub concurrency: usize,
    /// Longest time one pod's read may take.
    pub inspect_timeout: Duration,
    /// The safety net: the full-relist period while a complete stream is up.
    pub net_period: Duration,
    /// The longest a trusted stream goes without a full relist (zero: the safety net).
    pub stream_check: Duration,
    /// Health: the longest time without a completed relist.
    pub threshold: Duration,
    /// The event stream's reconnection.
    pub stream: evented::EventedConfig,
}

impl PlegConfig {
    /// The relister's settings; it reads a new container's process and cgroup under
    /// `host` (the lookup's `--host-root`).
    pub fn relist(&self, host: crate::host::Host) -> generic::RelistConfig {
        generic::RelistConfig {
            period: self.relist_period,
            concurrency: self.concurrency,
            inspect_timeout: self.inspect_timeout,
            host,
        }
    }
}

impl Default for PlegConfig {
    fn default() -> Self {
        Self {
            mode: evented::Mode::Auto,
            relist_period: Duration::from_secs(1),
            concurrency: 8,
            inspect_timeout: Duration::from_secs(5),
            net_period: Duration::from_secs(300),
            stream_check: generic::STREAM_CHECK,
            threshold: Duration::from_secs(180),
            stream: evented::EventedConfig::default(),
        }
    }
}

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

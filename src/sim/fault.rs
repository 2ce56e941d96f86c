//! Faults the simulated runtime injects on request: a call that errors, hangs or is slow.

use std::time::Duration;

use tonic::Code;

/// What an injected fault does to a matching call.
#[derive(Clone, Debug)]
pub enum FaultAction {
    /// Answer with this status.
    Error(Code, String),
    /// Never answer (until the caller gives up).
    Hang,
    /// Answer after a delay.
    Delay(Duration),
}

/// The target a `ListPodSandbox` or `ListContainers` call without a filter is about:
/// a fault with this target hits full listings only, not the filtered listings of one
/// pod (a fault with no target hits both).
pub const FULL_LISTING: &str = "<full listing>";

/// A fault injected into the simulated runtime.
#[derive(Clone, Debug)]
pub struct Fault {
    /// CRI method name (`ContainerStatus`, `ListPodSandbox`, …).
    pub method: &'static str,
    /// Only calls about this id (sandbox or container id), if set.
    pub target: Option<String>,
    /// What to do.
    pub action: FaultAction,
    /// How many calls it affects; `None`: until cleared.
    pub times: Option<u32>,
}

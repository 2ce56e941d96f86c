//! The PLEG's settings: [`PlegConfig`], as the command line gives them, and the
//! relister's part of it, [`RelistConfig`]. The defaults are written once, here.

use std::time::Duration;

use super::evented::{EventedConfig, Mode};
use crate::host::Host;

/// The longest a trusted event stream goes unchecked by a full relist, by default: a
/// change a silent stream hides reaches watchers within this and one relist.
pub const STREAM_CHECK: Duration = Duration::from_secs(10);

/// How the PLEG runs.
#[derive(Clone, Debug)]
pub struct PlegConfig {
    /// Whether the CRI event stream is used (`--mode`).
    pub mode: Mode,
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
    pub stream: EventedConfig,
}

impl PlegConfig {
    /// The relister's part; it reads a new container's process and cgroup under `host`
    /// (`--host-root`).
    pub fn relist(&self, host: Host) -> RelistConfig {
        RelistConfig {
            period: self.relist_period,
            concurrency: self.concurrency,
            inspect_timeout: self.inspect_timeout,
            net_period: self.net_period,
            stream_check: self.stream_check,
            host,
        }
    }
}

impl Default for PlegConfig {
    fn default() -> Self {
        Self {
            mode: Mode::Auto,
            relist_period: Duration::from_secs(1),
            concurrency: 8,
            inspect_timeout: Duration::from_secs(5),
            net_period: Duration::from_secs(300),
            stream_check: STREAM_CHECK,
            threshold: Duration::from_secs(180),
            stream: EventedConfig::default(),
        }
    }
}

/// How the relister runs: the relister's part of [`PlegConfig`].
#[derive(Clone, Debug)]
pub struct RelistConfig {
    /// Time from the end of one full relist to the start of the next.
    pub period: Duration,
    /// Pods inspected at once.
    pub concurrency: usize,
    /// Longest time one pod's inspection may take; past it the pod is retried at the
    /// next relist and the relist goes on.
    pub inspect_timeout: Duration,
    /// The safety net: the full-relist period while a complete stream is up.
    pub net_period: Duration,
    /// The longest a trusted stream goes without a full relist (zero: the safety net).
    pub stream_check: Duration,
    /// Where the host's `/proc` and cgroupfs are, for a new container's PID and cgroup.
    pub host: Host,
}

impl Default for RelistConfig {
    fn default() -> Self {
        PlegConfig::default().relist(Host::default())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_relisters_defaults_are_the_pleg_configs() {
        let (pleg, relist) = (PlegConfig::default(), RelistConfig::default());
        assert_eq!(relist.period, pleg.relist_period);
        assert_eq!(relist.concurrency, pleg.concurrency);
        assert_eq!(relist.inspect_timeout, pleg.inspect_timeout);
        assert_eq!(relist.net_period, pleg.net_period);
        assert_eq!(relist.stream_check, pleg.stream_check);
    }
}

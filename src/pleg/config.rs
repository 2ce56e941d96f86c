//! The PLEG's settings: [`PlegConfig`], as the command line gives them. The defaults
//! are written once, here; [`PlegConfig::build`] makes the PLEG from them.

use std::time::Duration;

use super::evented::{EventedConfig, Mode};

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
    /// How long the relist loop may go without a turn before `/livez` fails: a few of
    /// its turns (it turns at least every relist period and every
    /// [`crate::liveness::BEAT_EVERY`], quiet or busy), plus the longest a listing and
    /// one pod read may take while the runtime is slow (`request_timeout` a call), plus
    /// a margin.
    pub fn relist_liveness_limit(&self, request_timeout: Duration) -> Duration {
        self.relist_period.min(crate::liveness::BEAT_EVERY) * 3
            + self.inspect_timeout * 2
            + request_timeout * 4
            + Duration::from_secs(30)
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

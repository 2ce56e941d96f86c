//! Gives the heap a burst freed back to the kernel: the scavenger.
//!
//! glibc's `malloc` keeps freed memory for reuse and returns only the top of each arena
//! to the kernel. After a burst — the first relist of a full node, a snapshot to every
//! watcher, a replay — what the burst freed stays resident: about 3.5 MiB of an idle
//! 1,000-pod node's 27–30 MiB (BENCHMARKS.md, "Idle"). Go's runtime returns such memory
//! in the background; jemalloc's default purges it after 10 s. The scavenger does the
//! same for glibc: every [`ScavengerConfig::period`] it calls `malloc_trim(0)`, which
//! hands whole free pages inside every arena back with `madvise(MADV_DONTNEED)`. A page
//! used again costs one minor fault.
//!
//! Elsewhere (musl, another allocator) it has nothing to do: it logs that at debug level
//! and returns.

use std::time::{Duration, Instant};

use prometheus_client::metrics::counter::Counter;
use tokio_util::sync::CancellationToken;

/// How often freed memory is given back, unless configured otherwise: jemalloc's
/// default decay time.
pub const DEFAULT_PERIOD: Duration = Duration::from_secs(10);

/// The scavenger's configuration.
#[derive(Clone, Debug)]
pub struct ScavengerConfig {
    /// Time between two trims; `Duration::ZERO` turns the scavenger off.
    pub period: Duration,
}

impl Default for ScavengerConfig {
    fn default() -> Self {
        Self { period: DEFAULT_PERIOD }
    }
}

impl ScavengerConfig {
    /// The scavenger, reporting to `metrics`.
    pub fn build(self, metrics: MemoryMetrics) -> Scavenger {
        Scavenger::new(self, metrics)
    }
}

/// The scavenger's metrics.
#[derive(Clone, Debug, Default)]
pub struct MemoryMetrics {
    /// `plegd_memory_trims_total`.
    pub trims: Counter,
    /// `plegd_memory_returned_bytes_total`: resident memory the trims gave back.
    pub returned: Counter,
    /// `plegd_memory_trim_seconds_total`: time spent trimming.
    pub seconds: Counter<f64>,
}

impl MemoryMetrics {
    /// Creates the scavenger's families and registers them in `registry` (the caller
    /// gives it the `memory` prefix).
    pub fn register(registry: &mut crate::metrics::Registry) -> Self {
        let m = Self::default();
        registry.register("trims", "Times freed heap was given back to the kernel", m.trims.clone());
        registry.register("returned_bytes", "Resident memory the trims gave back to the kernel", m.returned.clone());
        registry.register("trim_seconds", "Time spent giving freed heap back", m.seconds.clone());
        m
    }
}

/// Gives freed heap back to the kernel on a period.
#[derive(Debug)]
pub struct Scavenger {
    config: ScavengerConfig,
    metrics: MemoryMetrics,
}

impl Scavenger {
    /// A scavenger reporting to `metrics`.
    pub fn new(config: ScavengerConfig, metrics: MemoryMetrics) -> Self {
        Self { config, metrics }
    }

    /// Trims every period until `shutdown`. Each trim runs on a blocking thread: it holds
    /// each arena's lock while it walks it.
    pub async fn run(self, shutdown: CancellationToken) {
        if self.config.period.is_zero() {
            return;
        }
        if !SUPPORTED {
            tracing::debug!("freed heap is not given back: not glibc's malloc");
            return;
        }
        let mut tick = tokio::time::interval(self.config.period);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        tick.tick().await;
        loop {
            tokio::select! {
                _ = shutdown.cancelled() => return,
                _ = tick.tick() => {}
            }
            match tokio::task::spawn_blocking(trim).await {
                Ok(t) => {
                    self.metrics.trims.inc();
                    self.metrics.returned.inc_by(t.returned);
                    self.metrics.seconds.inc_by(t.took.as_secs_f64());
                    tracing::trace!(returned = t.returned, took = ?t.took, "gave freed heap back");
                }
                Err(e) => tracing::debug!(error = %e, "the trim task failed"),
            }
        }
    }
}

/// What one trim did.
#[derive(Clone, Copy, Debug)]
pub struct Trim {
    /// Resident bytes before less resident bytes after (0 if other threads grew it).
    pub returned: u64,
    /// How long it took.
    pub took: Duration,
}

/// Gives the heap's free pages back to the kernel now. Blocking.
pub fn trim() -> Trim {
    let before = crate::process::rss_bytes() as u64;
    let start = Instant::now();
    sys::trim();
    let took = start.elapsed();
    let after = crate::process::rss_bytes() as u64;
    Trim { returned: before.saturating_sub(after), took }
}

/// Whether this build can give freed heap back.
pub const SUPPORTED: bool = cfg!(all(target_os = "linux", target_env = "gnu"));

/// Sets glibc's `malloc` up for a long-running daemon whose heap is mostly small records
/// that live for minutes (the history, the journal's ring, the tombstones) between
/// short bursts: one arena for every thread ([`ARENAS`]) and no fast bins. glibc gives
/// each thread that allocates while another holds an arena's lock an arena of its own,
/// up to 8 per core, and each arena keeps its own free chunks and slack that
/// `malloc_trim` cannot give back while a live chunk shares their page; fast bins keep
/// freed small chunks unmerged with their neighbours. On the busy node's 10 minutes
/// (`scripts/busy-node-rss.sh 630 90`, the same binary side by side) one arena, no
/// fast bins and no thread caches left 47.4 MiB resident against 51.1 by default, and
/// 0.7 instead of 2.3 MiB of growth over the last 5 minutes; jemalloc left 55.3
/// (BENCHMARKS.md). Thread caches cannot be set through `mallopt`; the other two can.
/// An idle relist holds no listing ([`crate::cri::hashed`] hashes the answers as they
/// arrive); a changed one's listing (about 10 MiB at 20,000 containers) is kept by the
/// one arena for the next rather than mapped afresh. Call it first thing in `main`,
/// before any thread starts; returns whether this build's allocator took the settings
/// (elsewhere than glibc: nothing to set).
pub fn tune() -> bool {
    sys::tune()
}

/// Arenas glibc's `malloc` may make ([`tune`]): plegd's threads are its async runtime's
/// few workers and short blocking tasks, never many allocating at once.
pub const ARENAS: i32 = 1;

#[cfg(all(target_os = "linux", target_env = "gnu"))]
#[allow(unsafe_code)]
mod sys {
    unsafe extern "C" {
        /// glibc: releases free memory from every arena; `pad` bytes stay at each top.
        fn malloc_trim(pad: usize) -> std::ffi::c_int;
    }

    pub fn trim() {
        // SAFETY: `malloc_trim` takes no pointer, is thread-safe (it locks each arena
        // while it walks it) and only releases pages no allocation holds.
        unsafe {
            malloc_trim(0);
        }
    }

    unsafe extern "C" {
        /// glibc: sets a `malloc` parameter; returns 1 on success, 0 on error.
        fn mallopt(param: std::ffi::c_int, value: std::ffi::c_int) -> std::ffi::c_int;
    }

    /// `M_MXFAST` and `M_ARENA_MAX` of glibc's `malloc.h`.
    const M_MXFAST: std::ffi::c_int = 1;
    const M_ARENA_MAX: std::ffi::c_int = -8;

    pub fn tune() -> bool {
        // SAFETY: `mallopt` takes integers only; glibc applies both settings under the
        // main arena's lock, and they are valid at any time.
        unsafe { mallopt(M_ARENA_MAX, super::ARENAS) == 1 && mallopt(M_MXFAST, 0) == 1 }
    }
}

#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
mod sys {
    pub fn trim() {}

    pub fn tune() -> bool {
        false
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_allocator_takes_the_settings_and_still_serves_every_thread() {
        assert_eq!(tune(), SUPPORTED, "glibc takes both settings; elsewhere there is nothing to set");
        // Threads allocating at once share the one arena: all of them are served, and
        // what they freed is reused, not lost.
        let threads: Vec<_> = (0..8)
            .map(|t| {
                std::thread::spawn(move || {
                    let blocks: Vec<Vec<u8>> = (0..2000).map(|i| vec![t as u8; 16 + i % 200]).collect();
                    blocks.iter().enumerate().all(|(i, b)| b.len() == 16 + i % 200 && b.iter().all(|&x| x == t as u8))
                })
            })
            .collect();
        for t in threads {
            assert!(t.join().unwrap());
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_scavenger_with_a_zero_period_returns_at_once() {
        let s = Scavenger::new(ScavengerConfig { period: Duration::ZERO }, MemoryMetrics::default());
        tokio::time::timeout(Duration::from_secs(1), s.run(CancellationToken::new())).await.expect("returns");
    }

    #[tokio::test]
    async fn a_scavenger_trims_on_its_period_and_stops_on_shutdown() {
        let m = MemoryMetrics::default();
        let shutdown = CancellationToken::new();
        let scavenger = Scavenger::new(ScavengerConfig { period: Duration::from_millis(20) }, m.clone());
        if !SUPPORTED {
            tokio::time::timeout(Duration::from_secs(1), scavenger.run(shutdown)).await.expect("nothing to do");
            assert_eq!(m.trims.get(), 0);
            return;
        }
        let task = tokio::spawn(scavenger.run(shutdown.clone()));
        let deadline = Instant::now() + Duration::from_secs(30);
        while m.trims.get() < 3 {
            assert!(Instant::now() < deadline, "3 trims of a 20 ms period within 30 s; had {}", m.trims.get());
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        shutdown.cancel();
        tokio::time::timeout(Duration::from_secs(5), task).await.expect("stops on shutdown").unwrap();
    }
}

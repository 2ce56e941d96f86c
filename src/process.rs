//! Process metrics read from `/proc` at each scrape: resident memory, CPU time, open
//! file descriptors and their limit, and the start time.

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric};
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;

/// Linux's USER_HZ, the unit of `/proc/<pid>/stat` CPU times on every mainstream
/// architecture.
const TICKS_PER_SECOND: f64 = 100.0;

/// The collector.
#[derive(Debug, Default)]
pub struct ProcessCollector;

/// One reading of the process's figures.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct ProcessStats {
    /// Resident set size, bytes.
    pub rss_bytes: f64,
    /// User + system CPU time, seconds.
    pub cpu_seconds: f64,
    /// Open file descriptors.
    pub open_fds: f64,
    /// The soft limit of open file descriptors.
    pub max_fds: f64,
    /// Start time, seconds since the epoch.
    pub start_time: f64,
}

/// The current process's resident set size in bytes (0 if it cannot be read).
pub fn rss_bytes() -> f64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|status| {
            let kb = status.lines().find_map(|l| l.strip_prefix("VmRSS:"))?;
            kb.trim().trim_end_matches("kB").trim().parse::<f64>().ok()
        })
        .map_or(0.0, |kb| kb * 1024.0)
}

/// Reads the current process's figures; fields that cannot be read stay 0.
pub fn read() -> ProcessStats {
    let mut s = ProcessStats { rss_bytes: rss_bytes(), ..Default::default() };
    if let Ok(stat) = std::fs::read_to_string("/proc/self/stat") {
        // Fields after the parenthesised command name, which may contain spaces.
        if let Some(rest) = stat.rsplit_once(')').map(|(_, r)| r) {
            let f: Vec<&str> = rest.split_whitespace().collect();
            // rest[0] is field 3 (state): utime is field 14, stime 15, starttime 22.
            let field = |n: usize| f.get(n - 3).and_then(|v| v.parse::<f64>().ok()).unwrap_or(0.0);
            s.cpu_seconds = (field(14) + field(15)) / TICKS_PER_SECOND;
            let boot = std::fs::read_to_string("/proc/stat")
                .ok()
                .and_then(|p| {
                    p.lines().find_map(|l| l.strip_prefix("btime ")).and_then(|v| v.trim().parse::<f64>().ok())
                })
                .unwrap_or(0.0);
            s.start_time = boot + field(22) / TICKS_PER_SECOND;
        }
    }
    if let Ok(dir) = std::fs::read_dir("/proc/self/fd") {
        s.open_fds = dir.count() as f64;
    }
    if let Ok(limits) = std::fs::read_to_string("/proc/self/limits")
        && let Some(line) = limits.lines().find(|l| l.starts_with("Max open files"))
    {
        s.max_fds = line.split_whitespace().nth(3).and_then(|v| v.parse().ok()).unwrap_or(0.0);
    }
    s
}

impl ProcessCollector {
    /// Registers the process's families in `registry` (the caller gives it the
    /// conventional `process` prefix).
    pub fn register(registry: &mut crate::metrics::Registry) {
        registry.register_collector(Box::new(Self));
    }
}

impl Collector for ProcessCollector {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let s = read();
        let gauges = [
            ("resident_memory_bytes", "Resident memory size in bytes", s.rss_bytes),
            ("open_fds", "Number of open file descriptors", s.open_fds),
            ("max_fds", "Maximum number of open file descriptors", s.max_fds),
            ("start_time_seconds", "Start time of the process since unix epoch in seconds", s.start_time),
        ];
        for (name, help, v) in gauges {
            let g = ConstGauge::new(v);
            g.encode(encoder.encode_descriptor(name, help, None, g.metric_type())?)?;
        }
        let c = ConstCounter::new(s.cpu_seconds);
        c.encode(encoder.encode_descriptor(
            "cpu_seconds",
            "Total user and system CPU time spent in seconds",
            None,
            c.metric_type(),
        )?)?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_plausible_figures_for_this_process() {
        let s = read();
        assert!(s.rss_bytes > 1e5 && s.rss_bytes < 1e11, "{s:?}");
        assert!(s.open_fds >= 3.0, "{s:?}");
        assert!(s.max_fds >= s.open_fds, "{s:?}");
        let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_secs_f64();
        assert!(s.start_time > now - 86400.0 * 365.0 && s.start_time <= now + 1.0, "{s:?}");
    }
}

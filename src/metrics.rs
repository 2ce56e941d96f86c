//! What every subsystem's metrics share: the registry type, histogram buckets, and the
//! two text formats `/metrics` serves. Each subsystem defines its own families and
//! registers them (`…Metrics::register`); `app` makes the one registry.

use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
pub use prometheus_client::registry::Registry;

/// A family of histograms with the same buckets.
pub type HistogramFamily<L> = Family<L, Histogram, fn() -> Histogram>;

/// Buckets for fast things (CRI calls, event latency): 100 µs … ~13 s.
pub fn fast_buckets() -> Histogram {
    Histogram::new(exponential_buckets(0.0001, 2.0, 18))
}

/// Buckets for relist periods and durations: 1 ms … ~524 s.
pub fn relist_buckets() -> Histogram {
    Histogram::new(exponential_buckets(0.001, 2.0, 20))
}

/// The registry in OpenMetrics text format.
pub fn encode(registry: &Registry) -> String {
    let mut out = String::new();
    prometheus_client::encoding::text::encode(&mut out, registry).expect("writing to a String cannot fail");
    out
}

/// The registry in the classic Prometheus text format (0.0.4): counters' HELP and
/// TYPE name the `_total` series, and there are no `# UNIT` or `# EOF` lines.
pub fn encode_text(registry: &Registry) -> String {
    openmetrics_to_text(&encode(registry))
}

/// Rewrites OpenMetrics text as the classic Prometheus text format: a counter's family
/// takes its samples' `_total` name; an info family (which the classic format lacks) is
/// a gauge named as its sample, `_info`.
pub fn openmetrics_to_text(om: &str) -> String {
    let of_type = |t: &'static str| -> std::collections::HashSet<&str> {
        om.lines().filter_map(|l| l.strip_prefix("# TYPE ")).filter_map(|l| l.strip_suffix(t)).collect()
    };
    let (counters, infos) = (of_type(" counter"), of_type(" info"));
    let mut out = String::with_capacity(om.len());
    for line in om.lines() {
        if line == "# EOF" || line.starts_with("# UNIT ") {
            continue;
        }
        let rewritten = ["# HELP ", "# TYPE "].iter().find_map(|p| {
            let rest = line.strip_prefix(p)?;
            let (name, tail) = rest.split_once(' ')?;
            if infos.contains(name) {
                let tail = if *p == "# TYPE " { "gauge" } else { tail };
                return Some(format!("{p}{name}_info {tail}"));
            }
            counters.contains(name).then(|| format!("{p}{name}_total {tail}"))
        });
        out.push_str(rewritten.as_deref().unwrap_or(line));
        out.push('\n');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_classic_text_names_a_counter_by_its_total_and_an_info_as_a_gauge() {
        let om = "# HELP a_b Things.\n# TYPE a_b counter\na_b_total 3\n# HELP p_build Build.\n# TYPE p_build info\np_build_info{version=\"1\"} 1\n# EOF\n";
        assert_eq!(
            openmetrics_to_text(om),
            "# HELP a_b_total Things.\n# TYPE a_b_total counter\na_b_total 3\n# HELP p_build_info Build.\n# TYPE p_build_info gauge\np_build_info{version=\"1\"} 1\n"
        );
    }
}

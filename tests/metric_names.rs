//! Metric names are public surface (CONTRACT.md, "Metrics"): dashboards and alert rules
//! name them. The families every sidecar registers — names, types, units and help — are
//! compared with the list committed beside this file, so a rename in any subsystem (or
//! in how prefixes are given to them) fails here, not on someone's dashboard.
//!
//! After a deliberate change of the surface, regenerate the list with
//! `PLEGD_BLESS_METRIC_NAMES=1 cargo test --test metric_names` and say why in the commit.

use std::path::Path;

/// Every family of a fresh sidecar's metrics, each labelled family with one series so
/// that it shows (a family without series prints nothing, not even its `# TYPE`).
fn every_family() -> plegd::app::Metrics {
    let m = plegd::app::Metrics::new();
    let s = String::from;
    let _ = m.pleg.running_containers.get_or_create(&plegd::pleg::metrics::StateLabel { state: s("running") });
    let _ = m.cri.requests.get_or_create(&plegd::cri::metrics::MethodCode { method: s("Version"), code: s("OK") });
    let _ = m.cri.duration.get_or_create(&plegd::cri::metrics::MethodLabel { method: s("Version") });
    let _ = m.events.total.get_or_create(&plegd::publish::TypeSource { r#type: s("POD_SYNC"), source: s("RELIST") });
    let name = plegd::workqueue::NameLabel { name: s("crashloop") };
    let q = &m.queues;
    let _ = (q.depth.get_or_create(&name), q.adds.get_or_create(&name), q.retries.get_or_create(&name));
    let _ = (q.queue_duration.get_or_create(&name), q.work_duration.get_or_create(&name));
    let _ = (q.unfinished.get_or_create(&name), q.longest.get_or_create(&name));
    let outcome = plegd::reconcile::Outcome { reconciler: s("crashloop"), outcome: s("success") };
    let _ = m.reconcile.total.get_or_create(&outcome);
    let _ = m.reconcile.duration.get_or_create(&plegd::reconcile::ReconcilerLabel { reconciler: s("crashloop") });
    let _ = m.http.refused_on("admin");
    let died = plegd::lookup::TerminationLabels { namespace: s("default"), reason: s("Error") };
    let _ = m.lookup.terminations.get_or_create(&died);
    m
}

/// What of an exposition is public surface, sorted: the `# HELP`, `# TYPE` and `# UNIT`
/// lines, and each series' name with its label names (values and samples vary).
fn surface(exposition: &str) -> Vec<String> {
    let mut lines: Vec<String> = exposition
        .lines()
        .filter(|l| *l != "# EOF")
        .map(|l| {
            if l.starts_with('#') {
                return l.to_owned();
            }
            let series = l.rsplit_once(' ').map_or(l, |(series, _)| series);
            match series.split_once('{') {
                None => series.to_owned(),
                Some((name, labels)) => {
                    let keys: Vec<&str> = labels
                        .trim_end_matches('}')
                        .split("\",")
                        .filter_map(|kv| kv.split_once('='))
                        .map(|(k, _)| k.trim_start_matches(','))
                        .collect();
                    format!("{name}{{{}}}", keys.join(","))
                }
            }
        })
        .collect();
    lines.sort();
    lines.dedup();
    lines
}

#[test]
fn the_exported_metric_families_are_exactly_the_committed_list() {
    let list = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/metric_names.txt");
    let now = surface(&every_family().encode());
    if std::env::var_os("PLEGD_BLESS_METRIC_NAMES").is_some() {
        std::fs::write(&list, now.join("\n") + "\n").unwrap();
    }
    let committed: Vec<String> = std::fs::read_to_string(&list).unwrap().lines().map(str::to_owned).collect();
    let gone: Vec<&String> = committed.iter().filter(|l| !now.contains(l)).collect();
    let new: Vec<&String> = now.iter().filter(|l| !committed.contains(l)).collect();
    assert!(gone.is_empty() && new.is_empty(), "metric families changed\n gone: {gone:#?}\n new: {new:#?}");
}

#[test]
fn the_classic_text_format_names_the_same_families_with_counters_as_total() {
    let m = every_family();
    let names = |text: &str| -> Vec<String> {
        let mut v: Vec<String> = text
            .lines()
            .filter_map(|l| l.strip_prefix("# TYPE "))
            .map(|l| l.split(' ').next().unwrap().to_owned())
            .collect();
        v.sort();
        v
    };
    let om = m.encode();
    let counters: Vec<String> = om
        .lines()
        .filter_map(|l| l.strip_prefix("# TYPE ")?.strip_suffix(" counter").map(|n| format!("{n}_total")))
        .collect();
    let text = names(&m.encode_text());
    assert!(counters.iter().all(|c| text.contains(c)), "{counters:?} not all in {text:?}");
    assert_eq!(text.len(), names(&om).len());
}

fn rust_files(dir: &Path, out: &mut Vec<std::path::PathBuf>) {
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            rust_files(&p, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
}

#[test]
fn the_plegd_prefix_is_written_once_and_every_subsystem_registers_bare_names_under_the_prefix_it_is_given() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    let (mut prefixed, mut roots) = (Vec::new(), Vec::new());
    for f in &files {
        let text = std::fs::read_to_string(f).unwrap();
        for (n, line) in text.lines().enumerate() {
            let at = format!("{}:{}", f.strip_prefix(&src).unwrap().display(), n + 1);
            if line.contains("\"plegd_") {
                prefixed.push(at.clone());
            }
            if line.contains("sub_registry_with_prefix(\"plegd\")") {
                roots.push(at);
            }
        }
    }
    assert!(prefixed.is_empty(), "a hand-written \"plegd_\" prefix: {prefixed:?}");
    assert_eq!(roots.len(), 1, "the `plegd` prefix is given in one place, app.rs: {roots:?}");
    assert!(roots[0].starts_with("app.rs:"), "{roots:?}");
}

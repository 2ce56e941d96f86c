//! Journal: append, and append with fan-out to 1 / 10 / 100 subscribers that drain, in
//! memory; the same appends committed to a state dir (one event per batch, as the
//! evented path makes, and 20, as a relist does); and opening a state dir that holds
//! 100,000 events (what a restart of plegd pays before its first relist).
#![allow(missing_docs)]

use std::sync::Arc;
use std::time::SystemTime;

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use plegd::journal::{Journal, JournalConfig, Since};
use plegd::model::PodStatus;
use plegd::model::event::{EventSource, EventType, PodLifecycleEvent};

fn event(pod: &Arc<PodStatus>) -> PodLifecycleEvent {
    PodLifecycleEvent {
        pod_uid: pod.uid.as_str().into(),
        pod_namespace: pod.namespace.as_str().into(),
        pod_name: pod.name.as_str().into(),
        kind: EventType::ContainerStarted,
        container_id: "c".repeat(64),
        container_name: "app".into(),
        is_sandbox: false,
        source: EventSource::CriEvent,
        observed_at: SystemTime::now(),
        runtime_timestamp: Some(SystemTime::now()),
        pod: Some(pod.clone()),
        message: String::new(),
    }
}

fn fan_out(c: &mut Criterion) {
    let rt = tokio::runtime::Builder::new_current_thread().enable_time().build().unwrap();
    let labels = [("app".to_string(), "web".to_string())].into();
    let pod = Arc::new(PodStatus { labels, ..PodStatus::empty("u", "default", "web") });
    let mut g = c.benchmark_group("journal/append_fanout_1000_events");
    for subs in [0usize, 1, 10, 100] {
        g.throughput(Throughput::Elements(1000));
        g.bench_with_input(BenchmarkId::from_parameter(subs), &subs, |b, &subs| {
            let j = Journal::new(100_000, 4096, None);
            let mut s: Vec<_> = (0..subs).map(|_| j.subscribe(Since::Snapshot, Default::default())).collect();
            b.iter(|| {
                rt.block_on(async {
                    for _ in 0..1000 {
                        j.append(event(&pod));
                    }
                    for sub in &mut s {
                        let mut n = 0;
                        while sub.rx.try_recv().is_ok() {
                            n += 1;
                        }
                        assert_eq!(n, 1000);
                    }
                })
            });
        });
    }
    g.finish();
}

fn pods(n: usize) -> Vec<Arc<PodStatus>> {
    (0..n)
        .map(|i| {
            let labels =
                [("app".to_string(), "web".to_string()), ("io.kubernetes.pod.uid".into(), format!("uid-{i}"))].into();
            Arc::new(PodStatus { labels, ..PodStatus::empty(&format!("uid-{i}"), "default", &format!("web-{i}")) })
        })
        .collect()
}

fn durable(c: &mut Criterion) {
    let pods = pods(200);
    let mut g = c.benchmark_group("journal/append_durable");
    for batch in [1usize, 20] {
        g.throughput(Throughput::Elements(batch as u64));
        g.bench_with_input(BenchmarkId::new("batch", batch), &batch, |b, &batch| {
            let dir = tempfile::tempdir().unwrap();
            let cfg = JournalConfig {
                state_dir: Some(dir.path().into()),
                disk_budget: 256 << 20,
                ..JournalConfig::memory(100_000, 4096)
            };
            let j = Journal::open(&cfg, None).unwrap();
            let mut i = 0;
            b.iter(|| {
                let events = (0..batch).map(|k| event(&pods[(i + k) % pods.len()])).collect();
                i += batch;
                j.append_batch(events)
            });
        });
    }
    g.finish();

    // A state dir with 100,000 events (kept in target/ for the binary's restart
    // measurement in BENCHMARKS.md).
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("target/bench-state-100k");
    let cfg =
        JournalConfig { state_dir: Some(dir.clone()), disk_budget: 256 << 20, ..JournalConfig::memory(100_000, 4096) };
    let filled = Journal::open(&cfg, None).unwrap();
    while filled.revision() < 100_000 {
        let at = filled.revision() as usize;
        filled.append_batch((0..100).map(|k| event(&pods[(at + k) % pods.len()])).collect());
    }
    drop(filled);
    let mut g = c.benchmark_group("journal/open_after_restart");
    g.sample_size(10);
    g.bench_function("100k_events_200_pods", |b| {
        b.iter(|| {
            let j = Journal::open(&cfg, None).unwrap();
            assert!(j.revision() >= 100_000 && j.pods().len() == 200);
            j
        })
    });
    g.finish();
}

criterion_group!(benches, fan_out, durable);
criterion_main!(benches);

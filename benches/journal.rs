//! Journal: append, and append with fan-out to 1 / 10 / 100 subscribers that drain, in
//! memory; the same appends committed to a state dir (one event per batch, as the
//! evented path makes, and 20, as a relist does); and opening a state dir that holds
//! 100,000 events (what a restart of plegd pays before its first relist).
#![allow(missing_docs)]

use std::sync::Arc;
use std::time::SystemTime;

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use futures_util::{FutureExt, StreamExt};
use plegd::journal::{FeedItem, Journal, JournalConfig, Place, Since};
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
            let j = Journal::new(100_000, 4096, plegd::journal::JournalMetrics::register(&mut Default::default()));
            let mut s: Vec<_> =
                (0..subs).map(|_| j.subscribe(Since::Snapshot, Default::default()).into_feed().1).collect();
            b.iter(|| {
                rt.block_on(async {
                    for _ in 0..1000 {
                        j.append(event(&pod));
                    }
                    for sub in &mut s {
                        let mut n = 0;
                        while let Some(Some(FeedItem::Entry(_))) = sub.next().now_or_never() {
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

/// Pods as a kubelet makes them: a sandbox with its IP, three containers with their
/// 64-hex ids, images by digest, and the labels and annotations the kubelet sets (about
/// 1.5 KiB per journaled event, against the few hundred bytes of [`pods`]).
fn realistic_pods(n: usize) -> Vec<Arc<PodStatus>> {
    use plegd::model::{ContainerState, ContainerStatus, SandboxState, SandboxStatus};
    let hex = |i: usize, salt: usize| format!("{:064x}", (i as u128 + 1) * 0x9e37_79b9_7f4a_7c15 + salt as u128);
    (0..n)
        .map(|i| {
            let (uid, name) =
                (format!("8f2c1e4a-{i:04}-4b7e-9a51-3c6d2e0f{i:04}"), format!("checkout-7d9f8b6c5-{i:05}"));
            let containers = ["app", "istio-proxy", "log-shipper"]
                .iter()
                .enumerate()
                .map(|(k, cname)| {
                    Arc::new(ContainerStatus {
                        id: hex(i, k + 1),
                        name: (*cname).into(),
                        attempt: 0,
                        state: ContainerState::Running,
                        created_at: 1_795_000_000_000_000_000,
                        started_at: 1_795_000_000_100_000_000,
                        finished_at: 0,
                        exit_code: 0,
                        reason: String::new(),
                        message: String::new(),
                        image: plegd::labels::shared(&format!(
                            "registry.example.com/shop/{cname}@sha256:{}",
                            hex(k, 99)
                        )),
                        labels: [
                            ("io.kubernetes.container.name", *cname),
                            ("io.kubernetes.pod.name", name.as_str()),
                            ("io.kubernetes.pod.namespace", "shop"),
                            ("io.kubernetes.pod.uid", uid.as_str()),
                        ]
                        .into(),
                        annotations: [
                            ("io.kubernetes.container.hash", "5f1a2b3c"),
                            ("io.kubernetes.container.restartCount", "0"),
                            ("io.kubernetes.container.terminationMessagePath", "/dev/termination-log"),
                            ("io.kubernetes.container.terminationMessagePolicy", "File"),
                            ("io.kubernetes.pod.terminationGracePeriod", "30"),
                        ]
                        .into(),
                        ..Default::default()
                    })
                })
                .collect();
            Arc::new(PodStatus {
                labels: [
                    ("app.kubernetes.io/name", "checkout"),
                    ("app.kubernetes.io/part-of", "shop"),
                    ("pod-template-hash", "7d9f8b6c5"),
                    ("io.kubernetes.pod.name", name.as_str()),
                    ("io.kubernetes.pod.namespace", "shop"),
                    ("io.kubernetes.pod.uid", uid.as_str()),
                ]
                .into(),
                annotations: [
                    ("kubernetes.io/config.seen", "2026-11-23T10:00:00Z"),
                    ("kubernetes.io/config.source", "api"),
                ]
                .into(),
                ips: vec![format!("10.244.{}.{}", i / 250, i % 250 + 2)],
                sandboxes: vec![SandboxStatus {
                    id: hex(i, 0),
                    attempt: 0,
                    state: SandboxState::Ready,
                    created_at: 1_795_000_000_000_000_000,
                    ip: format!("10.244.{}.{}", i / 250, i % 250 + 2),
                    additional_ips: Vec::new(),
                    ..Default::default()
                }],
                containers,
                ..PodStatus::empty(&uid, "shop", &name)
            })
        })
        .collect()
}

/// A state dir under target/ holding 100,000 events of `pods` (kept for the binary's
/// restart measurement in BENCHMARKS.md); filled once.
fn filled_state_dir(name: &str, pods: &[Arc<PodStatus>]) -> (JournalConfig, Place) {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("target").join(name);
    let cfg = JournalConfig { disk_budget: 256 << 20, ..JournalConfig::memory(100_000, 4096) };
    let place = Place::at(&dir);
    let filled =
        Journal::open(&cfg, &place, plegd::journal::JournalMetrics::register(&mut Default::default())).unwrap();
    while filled.revision() < 100_000 {
        let at = filled.revision() as usize;
        filled.append_batch((0..100).map(|k| event(&pods[(at + k) % pods.len()])).collect());
    }
    drop(filled);
    let bytes: u64 = std::fs::read_dir(&dir).unwrap().filter_map(|e| e.ok()?.metadata().ok()).map(|m| m.len()).sum();
    eprintln!(
        "{}: {:.1} MiB on disk, {:.0} bytes per event",
        dir.display(),
        bytes as f64 / (1 << 20) as f64,
        bytes as f64 / 100_000.0
    );
    (cfg, place)
}

fn durable(c: &mut Criterion) {
    let pods = pods(200);
    let mut g = c.benchmark_group("journal/append_durable");
    for batch in [1usize, 20] {
        g.throughput(Throughput::Elements(batch as u64));
        g.bench_with_input(BenchmarkId::new("batch", batch), &batch, |b, &batch| {
            let dir = tempfile::tempdir().unwrap();
            let cfg = JournalConfig { disk_budget: 256 << 20, ..JournalConfig::memory(100_000, 4096) };
            let place = Place::at(dir.path());
            let j =
                Journal::open(&cfg, &place, plegd::journal::JournalMetrics::register(&mut Default::default())).unwrap();
            let mut i = 0;
            b.iter(|| {
                let events = (0..batch).map(|k| event(&pods[(i + k) % pods.len()])).collect();
                i += batch;
                j.append_batch(events)
            });
        });
    }
    g.finish();

    let mut g = c.benchmark_group("journal/open_after_restart");
    g.sample_size(10);
    for (name, pods) in [("100k_events_200_pods", pods), ("100k_realistic_events_200_pods", realistic_pods(200))] {
        let (cfg, place) = filled_state_dir(&format!("bench-state-{name}"), &pods);
        g.bench_function(name, |b| {
            b.iter(|| {
                let j = Journal::open(&cfg, &place, plegd::journal::JournalMetrics::register(&mut Default::default()))
                    .unwrap();
                assert!(j.revision() >= 100_000 && j.pods().len() == 200);
                j
            })
        });
    }
    g.finish();
}

criterion_group!(benches, fan_out, durable);
criterion_main!(benches);

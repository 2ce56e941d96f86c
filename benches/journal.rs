//! Journal: append, and append with fan-out to 1 / 10 / 100 subscribers that drain.
#![allow(missing_docs)]

use std::sync::Arc;
use std::time::SystemTime;

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use plegd::journal::{Journal, Since};
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

criterion_group!(benches, fan_out);
criterion_main!(benches);

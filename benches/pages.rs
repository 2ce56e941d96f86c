//! The pod page of a pod with 10,000 attempts (a container that crash-looped for days,
//! each attempt a start and a death in the journal): building its timeline and rendering
//! it. `cargo bench --bench pages`.
#![allow(missing_docs)]

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use criterion::{Criterion, criterion_group, criterion_main};
use plegd::journal::{Entry, PodMeta};
use plegd::model::event::{EventSource, EventType, PodLifecycleEvent};
use plegd::model::{ContainerState, ContainerStatus, PodStatus};

fn attempts(n: u32) -> Vec<Arc<Entry>> {
    let t0 = SystemTime::UNIX_EPOCH + Duration::from_secs(1_800_000_000);
    let mut out = Vec::new();
    for a in 0..n {
        let id = format!("{a:064x}");
        let started = (i64::from(a) * 10 + 1_800_000_000) * 1_000_000_000;
        for (kind, state) in
            [(EventType::ContainerStarted, ContainerState::Running), (EventType::ContainerDied, ContainerState::Exited)]
        {
            let c = ContainerStatus {
                id: id.clone(),
                name: "app".into(),
                attempt: a,
                state,
                started_at: started,
                finished_at: if state == ContainerState::Exited { started + 5_000_000_000 } else { 0 },
                exit_code: if state == ContainerState::Exited { 1 } else { 0 },
                reason: if state == ContainerState::Exited { "Error".into() } else { String::new() },
                ..Default::default()
            };
            let pod = PodStatus { containers: vec![Arc::new(c)], ..PodStatus::empty("uid-1", "shop", "loop") };
            let event = PodLifecycleEvent {
                pod_uid: "uid-1".into(),
                pod_namespace: "shop".into(),
                pod_name: "loop".into(),
                kind,
                container_id: id.clone(),
                container_name: "app".into(),
                is_sandbox: false,
                source: EventSource::CriEvent,
                observed_at: t0 + Duration::from_secs(u64::from(a) * 10),
                runtime_timestamp: None,
                pod: Some(Arc::new(pod)),
                message: String::new(),
            };
            let revision = out.len() as u64 + 1;
            out.push(Arc::new(Entry {
                revision,
                event: Arc::new(event),
                meta: Arc::new(PodMeta::default()),
                left: None,
                bytes: 0,
            }));
        }
    }
    out
}

fn pod_page(c: &mut Criterion) {
    let entries = attempts(10_000);
    let now = SystemTime::UNIX_EPOCH + Duration::from_secs(1_800_200_000);
    let mut g = c.benchmark_group("pages");
    g.sample_size(10);
    g.bench_function("pod_page/10000_attempts", |b| {
        b.iter(|| {
            let t = plegd::pages::timeline::build(&entries, &[], now);
            plegd::pages::timeline::render("uid-1", 1, &t, "1.1.1", now)
        })
    });
    g.finish();
}

criterion_group!(benches, pod_page);
criterion_main!(benches);

//! Pod-status cache: `get`, `set`, and `get_newer_than` wake-ups for 1 / 100 / 1,000
//! waiters.
#![allow(missing_docs)]

use std::sync::Arc;

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use plegd::cache;
use plegd::model::PodStatus;
use tokio::time::Instant;

fn status(uid: &str) -> Arc<PodStatus> {
    Arc::new(PodStatus::empty(uid, "ns", "p"))
}

fn get_set(c: &mut Criterion) {
    let _rt = tokio::runtime::Builder::new_current_thread().enable_time().build().unwrap();
    let _guard = _rt.enter();
    let (mut w, r) = cache::new();
    let uids: Vec<String> = (0..1000).map(|i| format!("pod-{i}")).collect();
    for u in &uids {
        w.set(u, Some(status(u)), None, Instant::now());
    }
    let mut g = c.benchmark_group("cache");
    g.throughput(Throughput::Elements(1));
    let mut i = 0;
    g.bench_function("get/1000_pods", |b| {
        b.iter(|| {
            i = (i + 1) % uids.len();
            r.get(&uids[i]).unwrap()
        })
    });
    let s = status("pod-1");
    g.bench_function("set/1000_pods", |b| {
        b.iter(|| {
            i = (i + 1) % uids.len();
            w.set(&uids[i], Some(s.clone()), None, Instant::now());
        })
    });
    g.finish();
}

fn wakeups(c: &mut Criterion) {
    let rt = tokio::runtime::Builder::new_current_thread().enable_time().build().unwrap();
    let mut g = c.benchmark_group("cache/get_newer_than_wakeups");
    for n in [1usize, 100, 1000] {
        g.throughput(Throughput::Elements(n as u64));
        g.bench_with_input(BenchmarkId::from_parameter(n), &n, |b, &n| {
            b.iter(|| {
                rt.block_on(async {
                    let (mut w, r) = cache::new();
                    let min = Instant::now();
                    let mut set = tokio::task::JoinSet::new();
                    for i in 0..n {
                        let r = r.clone();
                        let uid = format!("pod-{}", i % 10);
                        set.spawn(async move { r.get_newer_than(&uid, min).await });
                    }
                    tokio::task::yield_now().await;
                    w.update_time(min + std::time::Duration::from_millis(1));
                    while set.join_next().await.is_some() {}
                })
            })
        });
    }
    g.finish();
}

criterion_group!(benches, get_set, wakeups);
criterion_main!(benches);

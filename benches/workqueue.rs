//! Work-queue throughput: add + get + done per key, on one thread and with 4 workers,
//! parametrised by the number of distinct keys.
#![allow(missing_docs)]

use std::time::Duration;

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use plegd::workqueue::{RateLimit, WorkQueue};

fn keys(n: usize) -> Vec<String> {
    (0..n).map(|i| format!("pod-{i:08}")).collect()
}

fn single_threaded(c: &mut Criterion) {
    let mut g = c.benchmark_group("workqueue/add_get_done/1-thread");
    for n in [100usize, 1_000, 10_000] {
        let ks = keys(n);
        g.throughput(Throughput::Elements(n as u64));
        g.bench_with_input(BenchmarkId::from_parameter(n), &ks, |b, ks| {
            let rt = tokio::runtime::Builder::new_current_thread().enable_time().build().unwrap();
            let q: WorkQueue<String> = WorkQueue::new(
                "bench",
                RateLimit::default(),
                plegd::workqueue::QueueMetrics::register(&mut Default::default()),
            );
            b.iter(|| {
                rt.block_on(async {
                    for k in ks {
                        q.add(k.clone());
                    }
                    while let Some(k) = q.try_get() {
                        q.done(&k);
                    }
                })
            });
        });
    }
    g.finish();
}

fn four_workers(c: &mut Criterion) {
    let mut g = c.benchmark_group("workqueue/add_get_done/4-workers");
    g.measurement_time(Duration::from_secs(5));
    for n in [1_000usize, 10_000] {
        let ks = keys(n);
        g.throughput(Throughput::Elements(n as u64));
        g.bench_with_input(BenchmarkId::from_parameter(n), &ks, |b, ks| {
            let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_time().build().unwrap();
            b.iter(|| {
                rt.block_on(async {
                    let q: WorkQueue<String> = WorkQueue::new(
                        "bench",
                        RateLimit::default(),
                        plegd::workqueue::QueueMetrics::register(&mut Default::default()),
                    );
                    let (tx, mut rx) = tokio::sync::mpsc::channel::<()>(ks.len());
                    let mut workers = Vec::new();
                    for _ in 0..4 {
                        let (q, tx) = (q.clone(), tx.clone());
                        workers.push(tokio::spawn(async move {
                            while let Some(k) = q.get().await {
                                q.done(&k);
                                let _ = tx.try_send(());
                            }
                        }));
                    }
                    for k in ks {
                        q.add(k.clone());
                    }
                    for _ in 0..ks.len() {
                        rx.recv().await;
                    }
                    q.shutdown();
                    for w in workers {
                        w.await.unwrap();
                    }
                })
            });
        });
    }
    g.finish();
}

criterion_group!(benches, single_threaded, four_workers);
criterion_main!(benches);

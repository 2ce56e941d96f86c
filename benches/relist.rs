//! Relist cost with no changes, at 100 / 1,000 / 5,000 / 10,000 / 25,000 containers (5 per pod): the
//! diff alone (group + records + transitions), a whole relist against the in-process
//! simulated runtime (its list calls included, no socket), and what a relist does with
//! the listing's bytes (fingerprint, projected decode, full decode).
#![allow(missing_docs)]

use std::time::Duration;

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use plegd::cache;
use plegd::cri::RuntimeService;
use plegd::pleg::PlegConfig;
use plegd::pleg::generic::GenericPleg;
use plegd::pleg::health::PlegHealth;
use plegd::pleg::records::{PodRecords, group_pods};
use plegd::sim::SimRuntime;
use plegd::sim::churn::{Churn, ChurnConfig};

fn populated(rt: &tokio::runtime::Runtime, containers: usize) -> SimRuntime {
    let sim = SimRuntime::new();
    let cfg = ChurnConfig { pods: containers / 5, containers_per_pod: 5, churn_per_sec: 0.0 };
    rt.block_on(Churn::new(sim.clone(), cfg).populate());
    sim
}

fn diff(c: &mut Criterion) {
    let rt = tokio::runtime::Builder::new_current_thread().enable_time().build().unwrap();
    let mut g = c.benchmark_group("relist/diff_no_changes");
    for n in [100usize, 1_000, 5_000, 10_000] {
        let sim = populated(&rt, n);
        let (sandboxes, containers) = rt.block_on(async {
            (sim.list_pod_sandboxes(None).await.unwrap(), sim.list_containers(None).await.unwrap())
        });
        let mut records = PodRecords::default();
        records.set_current(group_pods(sandboxes.clone(), containers.clone()));
        for uid in records.uids() {
            records.commit(&uid);
        }
        g.throughput(Throughput::Elements(n as u64));
        // The listing is cloned outside the measurement: a relist owns what it decoded.
        g.bench_with_input(BenchmarkId::from_parameter(n), &n, |b, _| {
            b.iter_batched(
                || (sandboxes.clone(), containers.clone()),
                |(sb, ct)| {
                    records.set_current(group_pods(sb, ct));
                    let changed = records.changed(&Default::default());
                    assert!(changed.is_empty());
                },
                criterion::BatchSize::LargeInput,
            )
        });
    }
    g.finish();
}

fn whole(c: &mut Criterion) {
    let rt = tokio::runtime::Builder::new_current_thread().enable_time().build().unwrap();
    let mut g = c.benchmark_group("relist/whole_no_changes_in_process");
    g.measurement_time(Duration::from_secs(5));
    for n in [100usize, 1_000, 5_000, 10_000, 25_000] {
        let sim = populated(&rt, n);
        let (writer, _reader) = cache::new();
        let (tx, mut rx) = tokio::sync::mpsc::channel(1_000_000);
        let cfg = PlegConfig {
            relist_period: Duration::from_secs(1),
            concurrency: 8,
            inspect_timeout: Duration::from_secs(30),
            ..Default::default()
        };
        let mut pleg = GenericPleg::new(
            sim.clone(),
            writer,
            tx,
            PlegHealth::new(Duration::from_secs(180)),
            plegd::pleg::metrics::PlegMetrics::register(&mut Default::default()),
            cfg,
            Default::default(),
        );
        rt.block_on(pleg.relist()).unwrap();
        while rx.try_recv().is_ok() {}
        g.throughput(Throughput::Elements(n as u64));
        g.bench_with_input(BenchmarkId::from_parameter(n), &n, |b, _| {
            b.iter(|| {
                let o = rt.block_on(pleg.relist()).unwrap();
                assert_eq!(o.events, 0);
            })
        });
    }
    g.finish();
}

/// What a relist does with the listing's bytes: fingerprint them (all an unchanged
/// listing costs), decode the projection, or decode everything (labels and all).
fn listing(c: &mut Criterion) {
    use plegd::cri::brief::EncodedListing;
    use plegd::proto::runtime as cri;
    use prost::Message;
    let rt = tokio::runtime::Builder::new_current_thread().enable_time().build().unwrap();
    let mut g = c.benchmark_group("relist/listing");
    for n in [100usize, 1_000, 5_000, 10_000, 25_000] {
        let sim = populated(&rt, n);
        let listing = rt.block_on(sim.list_encoded()).unwrap();
        g.throughput(Throughput::Elements(n as u64));
        g.bench_with_input(BenchmarkId::new("fingerprint", n), &listing, |b, l: &EncodedListing| {
            b.iter(|| l.fingerprint(1).unwrap())
        });
        g.bench_with_input(BenchmarkId::new("decode_projected", n), &listing, |b, l: &EncodedListing| {
            b.iter(|| {
                let (sandboxes, containers) = l.decode().unwrap();
                plegd::cri::brief::into_full(sandboxes, containers).unwrap()
            })
        });
        g.bench_with_input(BenchmarkId::new("decode_full", n), &listing, |b, l: &EncodedListing| {
            b.iter(|| {
                let s = cri::ListPodSandboxResponse::decode(&l.sandboxes[..]).unwrap();
                let c = cri::ListContainersResponse::decode(&l.containers[..]).unwrap();
                (s, c)
            })
        });
    }
    g.finish();
}

criterion_group!(benches, diff, whole, listing);
criterion_main!(benches);

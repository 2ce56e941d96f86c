//! What the lookup's tombstones cost in memory against what their byte bound counts, in
//! a process of its own (a test binary with one test, its heap counted by dhat, so no
//! other test's allocations blur the count).

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use plegd::host::Host;
use plegd::lookup::{ContainerLookup, LookupConfig, LookupMetrics};
use plegd::model::event::{EventSource, EventType, PodLifecycleEvent};
use plegd::model::{ContainerState, ContainerStatus, Namespaces, PodStatus, Process, SandboxState, SandboxStatus};

#[global_allocator]
static ALLOC: dhat::Alloc = dhat::Alloc;

/// The bytes allocated and not yet freed.
fn live() -> usize {
    dhat::HeapStats::get().curr_bytes
}

fn hex(seed: u64) -> String {
    (0..4).map(|i| format!("{:016x}", seed.wrapping_mul(0x9e37_79b9_7f4a_7c15).wrapping_add(i))).collect()
}

/// A pod as a busy node's relister reads it: a ready sandbox, `n` containers with
/// their process, log file and image, the kubelet's labels.
fn pod(i: u64, n: u64) -> Arc<PodStatus> {
    let uid = format!("{:08x}-0000-4000-8000-{:012x}", i, i);
    let (ns, name) = ("monitoring", format!("worker-{i}"));
    let labels = [
        ("app", "worker"),
        ("io.kubernetes.pod.name", name.as_str()),
        ("io.kubernetes.pod.namespace", ns),
        ("io.kubernetes.pod.uid", uid.as_str()),
        ("pod-template-hash", "5d8f7c9b6"),
    ];
    let containers = (0..n)
        .map(|c| {
            let id = hex(i * 100 + c);
            let cname = if c == 0 { "worker".to_owned() } else { format!("sidecar-{c}") };
            Arc::new(ContainerStatus {
                log_path: format!("/var/log/pods/{ns}_{name}_{uid}/{cname}/0.log"),
                name: cname,
                state: ContainerState::Exited,
                created_at: 1,
                started_at: 2,
                finished_at: 3,
                reason: "Completed".into(),
                image: plegd::labels::shared("registry.k8s.io/e2e-test-images/busybox:1.36.1-1"),
                image_ref: plegd::labels::shared(&format!("sha256:{}", hex(7))),
                image_id: plegd::labels::shared(&format!("sha256:{}", hex(8))),
                process: Some(Process {
                    pid: 1000 + (i * 10 + c) as u32,
                    cgroup_path: format!("kubepods-besteffort-pod{}.slice:cri-containerd:{id}", uid.replace('-', "_")),
                    cgroup_id: 5000 + i * 10 + c,
                    start_ticks: 77,
                    namespaces: Namespaces {
                        mnt: 4_026_531_000 + i * 10 + c,
                        pid: 4_026_532_000 + i * 10 + c,
                        ..Default::default()
                    },
                }),
                id,
                ..Default::default()
            })
        })
        .collect();
    Arc::new(PodStatus {
        labels: labels.into_iter().collect(),
        ips: vec![format!("10.244.{}.{}", i / 250, i % 250)],
        sandboxes: vec![SandboxStatus {
            id: hex(i * 100 + 99),
            state: SandboxState::Ready,
            ip: format!("10.244.{}.{}", i / 250, i % 250),
            netns_path: format!("/var/run/netns/cni-{}", hex(i)),
            pid: 900,
            ..Default::default()
        }],
        containers,
        ..PodStatus::empty(&uid, ns, &name)
    })
}

fn event(uid: &str, status: Option<Arc<PodStatus>>) -> PodLifecycleEvent {
    PodLifecycleEvent {
        pod_uid: uid.into(),
        pod_namespace: "monitoring".into(),
        pod_name: "".into(),
        kind: EventType::PodSync,
        container_id: String::new(),
        container_name: "".into(),
        is_sandbox: false,
        source: EventSource::Relist,
        observed_at: SystemTime::now(),
        runtime_timestamp: None,
        pod: status,
        message: String::new(),
    }
}

#[test]
fn tombstones_cost_no_more_memory_than_their_byte_bound_counts() {
    let cfg = LookupConfig::in_memory(Duration::from_secs(3600));
    let _profiler = dhat::Profiler::builder().testing().build();
    let (lookup, _) =
        ContainerLookup::open(cfg, Host::new("/nonexistent-host-root"), None, LookupMetrics::default()).unwrap();
    let before = live();
    for i in 0..500 {
        let p = pod(i, 4);
        let uid = p.uid.clone();
        lookup.observe([&event(&uid, Some(p))]);
        lookup.observe([&event(&uid, None)]);
    }
    let held = live() - before;
    let counted = lookup.tombstone_bytes();
    let mib = |b: usize| b as f64 / 1048576.0;
    println!(
        "{} tombstones hold {:.2} MiB ({} bytes each); their bound counts {:.2} MiB ({} each)",
        lookup.tombstones(),
        mib(held),
        held / lookup.tombstones(),
        mib(counted),
        counted / lookup.tombstones()
    );
    assert_eq!(lookup.tombstones(), 2000);
    assert!(held <= counted, "the bound counts less than the tombstones hold: {held} > {counted}");
    assert!(counted <= held * 2, "and not much more: {counted} against {held}");
}

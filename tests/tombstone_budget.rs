//! What the lookup's default tombstone bounds hold: the retention's worth of the worst
//! container churn the kubelet makes at its default pod limit, and never more bytes
//! than the bound, whatever the records weigh.

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use plegd::host::Host;
use plegd::lookup::{Answer, ContainerLookup, LookupConfig, LookupKey, LookupMetrics, MAX_TOMBSTONE_BYTES};
use plegd::model::event::{EventSource, EventType, PodLifecycleEvent};
use plegd::model::{ContainerState, ContainerStatus, Namespaces, PodStatus, Process, SandboxState, SandboxStatus};
use proptest::prelude::*;

fn hex(seed: u64) -> String {
    (0..4).map(|i| format!("{:016x}", seed.wrapping_mul(0x9e37_79b9_7f4a_7c15).wrapping_add(i))).collect()
}

/// Pod `i` as the relister reads it on its `round`th restart: a ready sandbox, `n`
/// containers of attempt `round` with their process, log file and image, the kubelet's
/// labels, and `note` bytes of annotations.
fn pod(i: u64, n: u64, round: u64, note: usize) -> Arc<PodStatus> {
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
            let serial = (round * 1000 + i) * 10 + c;
            let id = hex(serial);
            let cname = if c == 0 { "worker".to_owned() } else { format!("sidecar-{c}") };
            Arc::new(ContainerStatus {
                log_path: format!("/var/log/pods/{ns}_{name}_{uid}/{cname}/{round}.log"),
                name: cname,
                attempt: round as u32,
                state: ContainerState::Exited,
                created_at: 1,
                started_at: 2,
                finished_at: 3,
                exit_code: 1,
                reason: "Error".into(),
                image: plegd::labels::shared("registry.k8s.io/e2e-test-images/busybox:1.36.1-1"),
                image_ref: plegd::labels::shared(&format!("sha256:{}", hex(7))),
                image_id: plegd::labels::shared(&format!("sha256:{}", hex(8))),
                process: Some(Process {
                    pid: 1000 + serial as u32,
                    cgroup_path: format!("kubepods-besteffort-pod{}.slice:cri-containerd:{id}", uid.replace('-', "_")),
                    cgroup_id: 5000 + serial,
                    start_ticks: 77,
                    namespaces: Namespaces {
                        mnt: 4_026_531_000 + serial,
                        pid: 4_026_532_000 + serial,
                        ..Default::default()
                    },
                }),
                id,
                ..Default::default()
            })
        })
        .collect();
    let filler = "x".repeat(note);
    Arc::new(PodStatus {
        labels: labels.into_iter().collect(),
        annotations: [("note", filler.as_str())].into(),
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

fn event(status: &Arc<PodStatus>) -> PodLifecycleEvent {
    PodLifecycleEvent {
        pod_uid: status.uid.as_str().into(),
        pod_namespace: status.namespace.as_str().into(),
        pod_name: status.name.as_str().into(),
        kind: EventType::PodSync,
        container_id: String::new(),
        container_name: "".into(),
        is_sandbox: false,
        source: EventSource::Relist,
        observed_at: SystemTime::now(),
        runtime_timestamp: None,
        pod: Some(status.clone()),
        message: String::new(),
    }
}

fn lookup() -> ContainerLookup {
    let cfg = LookupConfig::in_memory(Duration::from_secs(3600));
    ContainerLookup::open(cfg, Host::new("/nonexistent-host-root"), None, LookupMetrics::default()).unwrap().0
}

#[test]
fn the_default_bounds_hold_an_hour_of_a_crash_looping_node() {
    // The kubelet's default 110 pods, two containers each, every container restarted
    // at CrashLoopBackOff's 5-minute cap (the most the kubelet restarts it), each
    // restart removing the container before it: the retention (1 h) sees 12 rounds.
    let (pods, rounds) = (110u64, 12u64);
    let l = lookup();
    for round in 0..=rounds {
        for i in 0..pods {
            l.observe([&event(&pod(i, 2, round, 0))]);
        }
    }
    assert_eq!(l.tombstones(), (pods * 2 * rounds) as usize, "every removed container is kept");
    assert!(l.tombstone_bytes() <= MAX_TOMBSTONE_BYTES, "{} bytes", l.tombstone_bytes());
    // The oldest is still found.
    let oldest = pod(0, 2, 0, 0);
    match l.find(&LookupKey::Id(oldest.containers[0].id.clone())) {
        Answer::Found(f) => assert!(f.removed_at.is_some()),
        other => panic!("the first removed container is lost: {other:?}"),
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, ..ProptestConfig::default() })]

    /// Whatever the churn and however large the pods' annotations (up to the API
    /// server's 256 KiB), the tombstones never count more than the default byte bound,
    /// and the bound evicts, never empties: the lookup still answers for some.
    #[test]
    fn the_default_byte_bound_holds_whatever_the_records_weigh(
        pods in 1u64..40,
        containers in 1u64..5,
        rounds in 1u64..8,
        note in prop_oneof![Just(0usize), 0usize..4096, Just(256 << 10)],
    ) {
        let l = lookup();
        for round in 0..=rounds {
            for i in 0..pods {
                l.observe([&event(&pod(i, containers, round, note))]);
            }
            prop_assert!(l.tombstone_bytes() <= MAX_TOMBSTONE_BYTES, "{} bytes", l.tombstone_bytes());
        }
        prop_assert!(l.tombstones() >= 1, "the bound keeps what fits");
    }
}

mod resolver;

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use proptest::prelude::*;

use super::*;
use crate::journal::PodMeta;
use crate::journal::record::encode_view;
use crate::model::event::{EventSource, EventType, PodLifecycleEvent};
use crate::model::{ContainerState, ContainerStatus, PodStatus, Process};

/// A container that started `started_at` nanoseconds after this test began (so that
/// plegd sees it running just after its start, and the order of starts is kept).
pub(super) fn container(
    id: &str,
    state: ContainerState,
    pid: u32,
    cgroup_id: u64,
    started_at: i64,
) -> Arc<ContainerStatus> {
    Arc::new(ContainerStatus {
        id: id.into(),
        name: format!("n-{id}"),
        state,
        started_at: crate::model::system_to_nanos(SystemTime::now()) + started_at,
        reason: if state == ContainerState::Exited { "OOMKilled".into() } else { String::new() },
        process: (pid != 0).then(|| Process { pid, cgroup_path: format!("/cg/{id}"), cgroup_id, ..Default::default() }),
        ..Default::default()
    })
}

pub(super) fn pod(uid: &str, containers: Vec<Arc<ContainerStatus>>) -> Arc<PodStatus> {
    Arc::new(PodStatus { containers, ..PodStatus::empty(uid, "ns", &format!("pod-{uid}")) })
}

pub(super) fn event(uid: &str, kind: EventType, id: &str, status: Option<Arc<PodStatus>>) -> PodLifecycleEvent {
    PodLifecycleEvent {
        pod_uid: uid.into(),
        pod_namespace: "ns".into(),
        pod_name: format!("pod-{uid}").into(),
        kind,
        container_id: id.into(),
        container_name: "".into(),
        is_sandbox: false,
        source: EventSource::Relist,
        observed_at: SystemTime::now(),
        runtime_timestamp: None,
        pod: status,
        message: String::new(),
    }
}

/// A host root whose only process is init: any other PID has no process. Its task
/// count (`/proc/stat`) stands still unless a test moves it ([`forks`]).
pub(super) fn empty_host() -> std::path::PathBuf {
    let root = tempfile::tempdir().unwrap().keep();
    std::fs::create_dir_all(root.join("proc/1")).unwrap();
    std::fs::create_dir_all(root.join("proc/sys/kernel")).unwrap();
    std::fs::write(root.join("proc/sys/kernel/pid_max"), "32768\n").unwrap();
    forks(&root, 5000);
    std::fs::write(root.join("proc/1/stat"), "1 (init) S 0 1 1 0 -1 0 0 0 0 0 0 0 0 0 20 0 1 0 1 0 0\n").unwrap();
    std::fs::write(root.join("proc/1/cgroup"), "0::/init.scope\n").unwrap();
    root
}

/// Sets the host's task count since boot.
fn forks(root: &std::path::Path, n: u64) {
    std::fs::write(root.join("proc/stat"), format!("cpu  1 2 3 4\nprocesses {n}\nprocs_running 1\n")).unwrap();
}

pub(super) fn lookup(retention: Duration) -> ContainerLookup {
    let cfg = LookupConfig::in_memory(retention);
    ContainerLookup::open(cfg, Host::new(empty_host()), None, LookupMetrics::default()).unwrap().0
}

fn found(a: Answer) -> Found {
    match a {
        Answer::Found(f) => f,
        other => panic!("expected a container, got {other:?}"),
    }
}

fn not_found(a: Answer) -> String {
    match a {
        Answer::NotFound(why) => why,
        other => panic!("expected not found, got {other:?}"),
    }
}

#[test]
fn a_removed_container_is_found_by_id_cgroup_and_pid_until_the_retention_ends() {
    let l = lookup(Duration::from_secs(3600));
    let running = pod("u", vec![container("c1", ContainerState::Running, 4242, 99, 10)]);
    l.observe([&event("u", EventType::ContainerStarted, "c1", Some(running))]);
    assert!(found(l.find(&LookupKey::Pid(4242))).removed_at.is_none());
    let gone = pod("u", vec![]);
    l.observe([&event("u", EventType::ContainerRemoved, "c1", Some(gone))]);
    for key in [LookupKey::Id("c1".into()), LookupKey::CgroupId(99), LookupKey::Pid(4242)] {
        let f = found(l.find(&key));
        assert_eq!(f.container.id, "c1", "{key:?}");
        assert!(f.removed_at.is_some(), "{key:?}");
        assert_eq!(f.pod.uid, "u");
    }
    assert_eq!(l.tombstones(), 1);

    let short = lookup(Duration::ZERO);
    short.observe([&event(
        "u",
        EventType::ContainerStarted,
        "c1",
        Some(pod("u", vec![container("c1", ContainerState::Running, 1, 2, 1)])),
    )]);
    short.observe([&event("u", EventType::PodSync, "", None)]);
    std::thread::sleep(Duration::from_millis(5));
    short.observe(std::iter::empty());
    let why = not_found(short.find(&LookupKey::Id("c1".into())));
    assert!(why.contains("--tombstone-retention"), "{why}");
}

#[test]
fn a_reused_pid_answers_the_container_that_has_it_now() {
    let l = lookup(Duration::from_secs(3600));
    let a = pod("u1", vec![container("a", ContainerState::Running, 500, 1, 10)]);
    l.observe([&event("u1", EventType::ContainerStarted, "a", Some(a))]);
    l.observe([&event(
        "u1",
        EventType::ContainerDied,
        "a",
        Some(pod("u1", vec![container("a", ContainerState::Exited, 500, 1, 10)])),
    )]);
    let b = pod("u2", vec![container("b", ContainerState::Running, 500, 2, 20)]);
    l.observe([&event("u2", EventType::ContainerStarted, "b", Some(b))]);
    assert_eq!(found(l.find(&LookupKey::Pid(500))).container.id, "b");
    l.observe([&event("u1", EventType::PodSync, "", None)]);
    assert_eq!(found(l.find(&LookupKey::Pid(500))).container.id, "b", "a's tombstone does not take the PID back");
}

#[test]
fn a_live_pid_belongs_to_the_container_its_cgroup_names_never_to_an_earlier_one() {
    let root = empty_host();
    let cfg = LookupConfig::in_memory(Duration::from_secs(3600));
    let (l, _) = ContainerLookup::open(cfg, Host::new(&root), None, LookupMetrics::default()).unwrap();
    let old = "a".repeat(64);
    l.observe([&event(
        "u1",
        EventType::ContainerStarted,
        &old,
        Some(pod("u1", vec![container(&old, ContainerState::Running, 600, 1, 10)])),
    )]);
    l.observe([&event("u1", EventType::PodSync, "", None)]);
    // PID 600 now runs outside any container.
    std::fs::create_dir_all(root.join("proc/600")).unwrap();
    std::fs::write(root.join("proc/600/cgroup"), "0::/user.slice/session-1.scope\n").unwrap();
    let why = not_found(l.find(&LookupKey::Pid(600)));
    assert!(why.contains("user.slice"), "{why}");
    // PID 600 now runs in a container plegd has not published yet.
    let new = "b".repeat(64);
    std::fs::write(root.join("proc/600/cgroup"), format!("0::/kubepods.slice/cri-containerd-{new}.scope\n")).unwrap();
    match l.find(&LookupKey::Pid(600)) {
        Answer::NotYet { id, cgroup } => {
            assert_eq!(id, new);
            assert!(cgroup.ends_with(&format!("cri-containerd-{new}.scope")), "{cgroup}");
        }
        other => panic!("expected to wait for {new}, got {other:?}"),
    }
    // The process is gone. plegd saw other processes hold the PID since the old
    // container had it: the old container does not get it back.
    std::fs::remove_dir_all(root.join("proc/600")).unwrap();
    let why = not_found(l.find(&LookupKey::Pid(600)));
    assert!(why.contains("another process's"), "{why}");
}

#[test]
fn each_death_is_counted_once_with_the_runtimes_reason_and_a_seeded_death_not_again() {
    let l = lookup(Duration::from_secs(3600));
    let died = pod("u", vec![container("c", ContainerState::Exited, 7, 0, 1)]);
    l.seed(&[pod("u", vec![container("old", ContainerState::Exited, 0, 0, 1)])]);
    l.observe([&event(
        "u",
        EventType::ContainerDied,
        "old",
        Some(pod("u", vec![container("old", ContainerState::Exited, 0, 0, 1)])),
    )]);
    l.observe([&event("u", EventType::ContainerDied, "c", Some(died.clone()))]);
    l.observe([&event("u", EventType::ContainerDied, "c", Some(died))]);
    l.count_waiting_deaths();
    let oom = l
        .metrics
        .terminations
        .get_or_create(&TerminationLabels { namespace: "ns".into(), reason: "OOMKilled".into() })
        .get();
    assert_eq!(oom, 1, "c once; old was counted by the plegd that saw it die");
    // A running container that vanishes died with no word from the runtime.
    l.observe([&event(
        "u",
        EventType::ContainerStarted,
        "r",
        Some(pod("u", vec![container("r", ContainerState::Running, 8, 0, 2)])),
    )]);
    l.observe([&event("u", EventType::ContainerDied, "r", None)]);
    l.count_waiting_deaths();
    let unknown = l
        .metrics
        .terminations
        .get_or_create(&TerminationLabels { namespace: "ns".into(), reason: "Unknown".into() })
        .get();
    assert_eq!(unknown, 1);
}

#[test]
fn tombstones_survive_a_restart_through_the_state_dir() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = || LookupConfig::in_memory(Duration::from_secs(3600));
    let host = || Host::new("/nonexistent-host-root");
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    rt.block_on(async {
        let (l, writer) = ContainerLookup::open(cfg(), host(), Some(dir.path()), LookupMetrics::default()).unwrap();
        let shutdown = tokio_util::sync::CancellationToken::new();
        let task = tokio::spawn(writer.unwrap().run(shutdown.clone()));
        l.observe([&event(
            "u",
            EventType::ContainerStarted,
            "c",
            Some(pod("u", vec![container("c", ContainerState::Running, 9, 3, 1)])),
        )]);
        l.observe([&event("u", EventType::PodSync, "", None)]);
        shutdown.cancel();
        task.await.unwrap();
    });
    let (again, _) = ContainerLookup::open(cfg(), host(), Some(dir.path()), LookupMetrics::default()).unwrap();
    let f = found(again.find(&LookupKey::CgroupId(3)));
    assert_eq!((f.container.id.as_str(), f.pod.name.as_str()), ("c", "pod-u"));
    assert!(f.removed_at.is_some());
}

#[test]
fn containers_of_a_pod_deleted_between_reads_keep_their_keys_and_are_counted_once() {
    let l = lookup(Duration::from_secs(3600));
    let c1 = container("c1", ContainerState::Running, 101, 11, 1);
    let c2 = container("c2", ContainerState::Running, 102, 12, 2);
    l.observe([&event("u", EventType::ContainerStarted, "c1", Some(pod("u", vec![c1, c2])))]);
    // The pod is gone before plegd reads it: each death carries only its container.
    let d1 = container("c1", ContainerState::Exited, 101, 11, 1);
    let d2 = container("c2", ContainerState::Exited, 102, 12, 2);
    l.observe([
        &event("u", EventType::ContainerDied, "c1", Some(pod("u", vec![d1]))),
        &event("u", EventType::ContainerDied, "c2", Some(pod("u", vec![d2.clone()]))),
        &event("u", EventType::ContainerRemoved, "c1", Some(pod("u", vec![]))),
        &event("u", EventType::ContainerRemoved, "c2", Some(pod("u", vec![]))),
        &event("u", EventType::PodSync, "", None),
    ]);
    for (key, id) in [
        (LookupKey::Pid(101), "c1"),
        (LookupKey::Pid(102), "c2"),
        (LookupKey::CgroupId(11), "c1"),
        (LookupKey::CgroupId(12), "c2"),
    ] {
        let f = found(l.find(&key));
        assert_eq!((f.container.id.as_str(), f.removed_at.is_some()), (id, true), "{key:?}");
    }
    // The same death heard again (another source) is not counted again.
    l.observe([&event("u", EventType::ContainerDied, "c2", Some(pod("u", vec![d2])))]);
    l.count_waiting_deaths();
    let oom = l
        .metrics
        .terminations
        .get_or_create(&TerminationLabels { namespace: "ns".into(), reason: "OOMKilled".into() })
        .get();
    assert_eq!(oom, 2);
}

#[test]
fn without_the_hosts_processes_a_removed_containers_pid_is_not_claimed() {
    let cfg = LookupConfig::in_memory(Duration::from_secs(3600));
    let (l, _) =
        ContainerLookup::open(cfg, Host::new("/nonexistent-host-root"), None, LookupMetrics::default()).unwrap();
    l.observe([&event(
        "u",
        EventType::ContainerStarted,
        "a",
        Some(pod("u", vec![container("a", ContainerState::Running, 700, 0, 1)])),
    )]);
    assert_eq!(found(l.find(&LookupKey::Pid(700))).container.id, "a", "running: the runtime's word stands");
    l.observe([&event("u", EventType::PodSync, "", None)]);
    let why = not_found(l.find(&LookupKey::Pid(700)));
    assert!(why.contains("reused"), "{why}");
    // By id it is still found, and not shown as running.
    let f = found(l.find(&LookupKey::Id("a".into())));
    assert_ne!(f.container.state, ContainerState::Running);
}

proptest! {
    /// Whatever happens to containers, the tombstones stay within their bounds, every
    /// live container is looked up by id, and an id is never both live and a tombstone.
    #[test]
    fn tombstones_stay_bounded_and_live_containers_are_always_found(
        steps in proptest::collection::vec((0u8..6, 0u8..4, any::<bool>()), 1..120),
        max in 1usize..6,
    ) {
        let mut cfg = LookupConfig::in_memory(Duration::from_secs(3600));
        cfg.max_tombstones = max;
        let (l, _) = ContainerLookup::open(cfg, Host::new("/nonexistent-host-root"), None, LookupMetrics::default()).unwrap();
        let mut pods: std::collections::BTreeMap<u8, Vec<Arc<ContainerStatus>>> = Default::default();
        let mut next = 0u32;
        for (p, action, flag) in steps {
            let uid = format!("u{p}");
            let cs = pods.entry(p).or_default();
            match action {
                0 => { next += 1; cs.push(container(&format!("c{next}"), ContainerState::Running, next % 7 + 1, u64::from(next), i64::from(next))); }
                1 if !cs.is_empty() => {
                    cs.remove(0);
                }
                2 if !cs.is_empty() => {
                    let mut d = ContainerStatus::clone(&cs[0]);
                    d.state = ContainerState::Exited;
                    cs[0] = Arc::new(d);
                }
                _ => {}
            }
            let ev = if action == 3 && flag {
                pods.remove(&p);
                event(&uid, EventType::PodSync, "", None)
            } else {
                event(&uid, EventType::PodSync, "", Some(pod(&uid, pods[&p].clone())))
            };
            l.observe([&ev]);
            let ix = l.lock();
            prop_assert!(ix.tombs.len() <= max);
            prop_assert_eq!(ix.order.len(), ix.tombs.len());
            prop_assert_eq!(ix.pod_tombs.values().map(|s| s.count).sum::<usize>(), ix.tombs.len());
            prop_assert_eq!(ix.pod_tombs.values().map(|s| s.bytes).sum::<usize>(), ix.tomb_bytes);
            for id in ix.tombs.keys() {
                prop_assert!(!ix.live.contains_key(id));
            }
            drop(ix);
            for cs in pods.values() {
                for c in cs {
                    let f = match l.find(&LookupKey::Id(c.id.clone())) { Answer::Found(f) => f, other => panic!("{other:?}") };
                    prop_assert!(f.removed_at.is_none());
                }
            }
        }
    }
}

/// A pod whose containers carry `note` bytes of annotations.
fn heavy_pod(uid: &str, containers: Vec<Arc<ContainerStatus>>, note: usize) -> Arc<PodStatus> {
    let filler = "x".repeat(note);
    Arc::new(PodStatus {
        containers,
        annotations: [("note", filler.as_str())].into(),
        ..PodStatus::empty(uid, "ns", &format!("pod-{uid}"))
    })
}

#[test]
fn one_pods_large_records_evict_its_own_tombstones_never_the_other_pods() {
    let mut cfg = LookupConfig::in_memory(Duration::from_secs(3600));
    cfg.max_bytes = 4 << 20;
    let (l, _) = ContainerLookup::open(cfg, Host::new(empty_host()), None, LookupMetrics::default()).unwrap();
    // Ten ordinary pods lose a container each.
    for i in 0..10 {
        let uid = format!("small{i}");
        let c = container(&format!("s{i}"), ContainerState::Exited, 0, 0, 1);
        l.observe([&event(&uid, EventType::ContainerDied, &c.id, Some(pod(&uid, vec![c.clone()])))]);
        l.observe([&event(&uid, EventType::PodSync, "", None)]);
    }
    // One pod with the API server's largest annotations removes 40 containers.
    let cs: Vec<_> = (0..40).map(|i| container(&format!("h{i}"), ContainerState::Exited, 0, 0, i)).collect();
    l.observe([&event("heavy", EventType::PodSync, "", Some(heavy_pod("heavy", cs, 256 << 10)))]);
    l.observe([&event("heavy", EventType::PodSync, "", None)]);
    for i in 0..10 {
        assert!(found(l.find(&LookupKey::Id(format!("s{i}")))).removed_at.is_some(), "s{i} was evicted");
    }
    let ix = l.lock();
    assert!(ix.tomb_bytes <= 4 << 20, "{} bytes", ix.tomb_bytes);
    let heavy = ix.tombs.keys().filter(|id| id.starts_with('h')).count();
    assert!((1..40).contains(&heavy), "the heavy pod keeps what fits: {heavy}");
    // The newest of the heavy pod's are the ones kept.
    assert!(ix.tombs.contains_key("h39"));
}

#[test]
fn a_restart_reads_no_more_tombstones_than_the_bounds_whatever_the_file_holds() {
    let dir = tempfile::tempdir().unwrap();
    {
        let mut store = tombstones::TombstoneStore::open(dir.path()).unwrap();
        let now = SystemTime::now();
        let ops: Vec<_> = (0..20_000u32)
            .map(|i| {
                let c = container(&format!("t{i}"), ContainerState::Exited, 0, u64::from(i) + 1, 1);
                let p = pod(&format!("u{}", i % 500), vec![c]);
                TombstoneOp::Put {
                    id: format!("t{i}"),
                    removed_at: now - Duration::from_millis(u64::from(20_000 - i)),
                    record: encode_view(&p, &PodMeta::of(&p)),
                    forks_at_start: None,
                }
            })
            .collect();
        store.apply(&ops, std::time::UNIX_EPOCH).unwrap();
    }
    let mut cfg = LookupConfig::in_memory(Duration::from_secs(3600));
    cfg.max_tombstones = 1000;
    let (l, _) =
        ContainerLookup::open(cfg, Host::new(empty_host()), Some(dir.path()), LookupMetrics::default()).unwrap();
    assert_eq!(l.tombstones(), 1000);
    assert!(found(l.find(&LookupKey::Id("t19999".into()))).removed_at.is_some(), "the newest are kept");
    assert!(matches!(l.find(&LookupKey::Id("t0".into())), Answer::NotFound(_)), "the oldest are not");
    // The file was cut down to what was read.
    let left = tombstones::TombstoneStore::open(dir.path()).unwrap().load(std::time::UNIX_EPOCH).unwrap();
    assert!(left.len() <= 1001, "{} rows left in the file", left.len());
}

#[test]
fn a_pid_is_claimed_after_its_container_is_gone_only_until_the_host_could_have_given_it_again() {
    let root = empty_host();
    let cfg = LookupConfig::in_memory(Duration::from_secs(3600));
    let (l, _) = ContainerLookup::open(cfg, Host::new(&root), None, LookupMetrics::default()).unwrap();
    forks(&root, 10_000);
    l.observe([&event(
        "u",
        EventType::ContainerStarted,
        "c",
        Some(pod("u", vec![container("c", ContainerState::Running, 800, 5, 1)])),
    )]);
    l.observe([&event("u", EventType::PodSync, "", None)]);
    // pid_max 32768: within (32768 − 300) / 4 new tasks of its start the PID is still its.
    forks(&root, 10_000 + 8_000);
    assert_eq!(found(l.find(&LookupKey::Pid(800))).container.id, "c");
    forks(&root, 10_000 + 8_117);
    let why = not_found(l.find(&LookupKey::Pid(800)));
    assert!(why.contains("8117 tasks"), "{why}");
    // A reboot starts the count again: nothing from before it is claimed.
    forks(&root, 50);
    assert!(matches!(l.find(&LookupKey::Pid(800)), Answer::NotFound(_)));
    // A container plegd first sees long after its start (a restart of plegd, a missed
    // start) has no count near its start: its PID is not claimed once its process is gone.
    forks(&root, 20_000);
    let late = Arc::new(ContainerStatus {
        started_at: crate::model::system_to_nanos(SystemTime::now() - Duration::from_secs(60)),
        ..ContainerStatus::clone(&container("late", ContainerState::Running, 801, 6, 0))
    });
    l.observe([&event("v", EventType::ContainerStarted, "late", Some(pod("v", vec![late])))]);
    l.observe([&event("v", EventType::PodSync, "", None)]);
    let why = not_found(l.find(&LookupKey::Pid(801)));
    assert!(why.contains("did not see it start"), "{why}");
    // The cgroup id still finds it.
    assert_eq!(found(l.find(&LookupKey::CgroupId(5))).container.id, "c");
}

#[test]
fn a_container_published_before_its_cgroup_was_read_is_left_to_the_runtimes_answer() {
    let root = empty_host();
    let cfg = LookupConfig::in_memory(Duration::from_secs(3600));
    let (l, _) = ContainerLookup::open(cfg, Host::new(&root), None, LookupMetrics::default()).unwrap();
    let id = "c".repeat(64);
    // Created: plegd has not read its process yet.
    let created = Arc::new(ContainerStatus { id: id.clone(), state: ContainerState::Created, ..Default::default() });
    l.observe([&event("u", EventType::PodSync, "", Some(pod("u", vec![created])))]);
    std::fs::create_dir_all(root.join("proc/900")).unwrap();
    std::fs::write(root.join("proc/900/cgroup"), format!("0::/k8s.io/{id}\n")).unwrap();
    match l.find(&LookupKey::Pid(900)) {
        Answer::NotYet { id: named, cgroup } => assert_eq!((named, cgroup), (id.clone(), format!("/k8s.io/{id}"))),
        other => panic!("expected the runtime to be asked, got {other:?}"),
    }
    // What the runtime then says of it places the process.
    let read = ContainerStatus {
        id: id.clone(),
        state: ContainerState::Running,
        process: Some(Process { pid: 900, cgroup_path: format!("/k8s.io/{id}"), ..Default::default() }),
        ..Default::default()
    };
    assert!(ContainerLookup::holds(&read, &format!("/k8s.io/{id}")));
    assert!(!ContainerLookup::holds(&read, &format!("/user.slice/k8s.io/{id}")));
}

#[test]
fn a_pid_namespace_a_pod_shares_is_ambiguous_and_a_mount_namespace_is_not() {
    let l = lookup(Duration::from_secs(3600));
    let with_ns = |id: &str, mnt: u64| {
        let mut c = ContainerStatus::clone(&container(id, ContainerState::Running, 0, 0, 1));
        c.process = Some(Process {
            pid: 0,
            namespaces: crate::model::Namespaces { pid: 77, mnt, ..Default::default() },
            ..Default::default()
        });
        Arc::new(c)
    };
    l.observe([&event("u", EventType::PodSync, "", Some(pod("u", vec![with_ns("a", 100), with_ns("b", 101)])))]);
    match l.find(&LookupKey::PidNs(77)) {
        Answer::Ambiguous(why) => assert!(why.contains("2 containers"), "{why}"),
        other => panic!("expected ambiguous, got {other:?}"),
    }
    assert_eq!(found(l.find(&LookupKey::MntNs(101))).container.id, "b");
}

#[test]
fn log_paths_are_read_in_the_kubelets_forms_rotated_files_included_and_nothing_else() {
    let uid = "0b3c5d7e-1111-4222-8333-444455556666";
    let want = format!("/var/log/pods/ns_web_{uid}/app/3.log");
    for path in ["", ".1", ".20261128-010203", ".20261128-010203.gz"] {
        assert_eq!(log_file(&format!("{want}{path}")), Ok(LogFile::Attempt(want.clone())), "{path}");
    }
    let id = "a".repeat(64);
    assert_eq!(
        log_file(&format!("/var/log/containers/web-7f_ns_app-{id}.log")),
        Ok(LogFile::Link { pod: "web-7f".into(), namespace: "ns".into(), container: "app".into(), id })
    );
    for bad in [
        "",
        "0.log",
        "/var/log/pods/ns_web_u/app/x.log",
        "/var/log/pods/ns_web_u/app/3.txt",
        "/3.log",
        "/var/log/pods/../etc/0.log",
    ] {
        assert!(log_file(bad).is_err(), "{bad}");
    }
}

/// A container of pod `uid` (named `pod-<uid>` in `ns`) whose log file is `path`.
fn logging(id: &str, state: ContainerState, path: &str) -> Arc<ContainerStatus> {
    let mut c = ContainerStatus::clone(&container(id, state, 0, 0, 1));
    c.name = "app".into();
    c.log_path = path.into();
    Arc::new(c)
}

#[test]
fn a_log_path_in_another_pods_directory_is_never_that_pods_and_a_removed_container_never_takes_a_live_ones() {
    let l = lookup(Duration::from_secs(3600));
    let victims = "/var/log/pods/ns_pod-victim_victim/app/0.log";
    l.observe([&event(
        "victim",
        EventType::ContainerStarted,
        "v",
        Some(pod("victim", vec![logging("v", ContainerState::Running, victims)])),
    )]);
    // A sandbox created with the victim's log directory: its container claims the file.
    l.observe([&event(
        "thief",
        EventType::ContainerStarted,
        "t",
        Some(pod("thief", vec![logging("t", ContainerState::Running, victims)])),
    )]);
    let key = LookupKey::LogPath(log_file(victims).unwrap());
    assert_eq!(found(l.find(&key)).container.id, "v", "the file is the victim's while the thief runs");
    // The thief is removed: its tombstone takes nothing either.
    l.observe([&event("thief", EventType::ContainerRemoved, "t", Some(pod("thief", vec![])))]);
    l.observe([&event("thief", EventType::PodSync, "", None)]);
    let f = found(l.find(&key));
    assert_eq!((f.container.id.as_str(), f.removed_at), ("v", None), "and after the thief is gone");
    // The victim's own file under its own name resolves; a path in no pod's form is refused.
    let own = found(l.find(&LookupKey::Id("t".into())));
    assert!(own.removed_at.is_some(), "the thief is still found by its id");
    assert!(!index::owns_log_path(victims, &own.pod, "app"));
    assert!(index::owns_log_path(victims, &found(l.find(&key)).pod, "app"));
    assert!(!index::owns_log_path(victims, &found(l.find(&key)).pod, "sidecar"), "another container's directory");
}

#[tokio::test]
async fn a_removed_containers_namespace_inode_is_not_answered_once_a_live_process_holds_it() {
    let root = empty_host();
    let cfg = LookupConfig::in_memory(Duration::from_secs(3600));
    let l = ContainerLookup::open(cfg, Host::new(root.clone()), None, LookupMetrics::default()).unwrap().0;
    let mut c = ContainerStatus::clone(&container("gone", ContainerState::Running, 0, 0, 1));
    c.process = Some(Process {
        pid: 0,
        namespaces: crate::model::Namespaces { mnt: 4026532901, ..Default::default() },
        ..Default::default()
    });
    l.observe([&event("u", EventType::ContainerStarted, "gone", Some(pod("u", vec![Arc::new(c)])))]);
    l.observe([&event("u", EventType::ContainerRemoved, "gone", Some(pod("u", vec![])))]);
    l.observe([&event("u", EventType::PodSync, "", None)]);
    let key = LookupKey::MntNs(4026532901);
    // Nobody holds the inode: the removed container is the answer.
    let f = found(l.vet(&key, l.find(&key)).await);
    assert_eq!((f.container.id.as_str(), f.removed_at.is_some()), ("gone", true));
    // A host `unshare -m` gets the freed inode.
    std::fs::create_dir_all(root.join("proc/4242/ns")).unwrap();
    std::os::unix::fs::symlink("mnt:[4026532901]", root.join("proc/4242/ns/mnt")).unwrap();
    let why = not_found(l.vet(&key, l.find(&key)).await);
    assert!(why.contains("live process") && why.contains("reuses"), "{why}");
    // A process whose namespaces plegd may not read may hold it: no answer either.
    std::fs::remove_file(root.join("proc/4242/ns/mnt")).unwrap();
    std::fs::create_dir_all(root.join("proc/4243/ns/mnt")).unwrap(); // readlink: not a link (EINVAL)
    let why = not_found(l.vet(&key, l.find(&key)).await);
    assert!(why.contains("cannot read every host process's namespaces"), "{why}");
    std::fs::remove_dir_all(root.join("proc/4243")).unwrap();
    assert_eq!(found(l.vet(&key, l.find(&key)).await).container.id, "gone", "readable again, nobody holds it");
    // Where the host's processes cannot be seen, no removed container is answered.
    std::fs::remove_file(root.join("proc/1/stat")).unwrap();
    let why = not_found(l.vet(&key, l.find(&key)).await);
    assert!(why.contains("cannot read every host process's namespaces"), "{why}");
}

#[test]
fn cgroup_paths_are_read_in_the_forms_collectors_hold_and_nothing_else() {
    let want = "/kubepods.slice/kubepods-pod1.slice/cri-containerd-abc.scope";
    for form in [
        "0::/kubepods.slice/kubepods-pod1.slice/cri-containerd-abc.scope",
        "/kubepods.slice/kubepods-pod1.slice/cri-containerd-abc.scope/",
        "/sys/fs/cgroup/kubepods.slice/kubepods-pod1.slice/cri-containerd-abc.scope",
        " 0::/kubepods.slice//kubepods-pod1.slice/cri-containerd-abc.scope\n",
    ] {
        assert_eq!(cgroup_path(form).as_deref(), Ok(want), "{form:?}");
    }
    for (bad, says) in [
        ("kubepods.slice/x", "not an absolute path"),
        ("4:memory:/kubepods/x", "not a cgroup v2 line"),
        ("/kubepods/../x", ". or .."),
        ("0::/../..", "the cgroup root"),
        ("0::/", "the cgroup root"),
        ("/sys/fs/cgroup", "the cgroup root"),
        ("", "not an absolute path"),
    ] {
        let err = cgroup_path(bad).unwrap_err();
        assert!(err.contains(says), "{bad:?}: {err}");
    }
    // Seen from a cgroup namespace of the reader's own, as /proc/PID/cgroup shows it there.
    assert_eq!(cgroup_path("0::/../../kubepods.slice/x").as_deref(), Ok("/../../kubepods.slice/x"));
    // A directory merely starting with the mount's name is not under it.
    assert_eq!(cgroup_path("/sys/fs/cgroupx/a").as_deref(), Ok("/sys/fs/cgroupx/a"));
}

#[test]
fn a_cgroup_path_finds_its_container_live_or_removed_and_never_one_it_only_names() {
    let l = lookup(Duration::from_secs(3600));
    let id = "c".repeat(64);
    let scope =
        format!("/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod1.slice/cri-containerd-{id}.scope");
    let c = Arc::new(ContainerStatus {
        process: Some(Process {
            pid: 700,
            cgroup_path: format!("kubepods-besteffort-pod1.slice:cri-containerd:{id}"),
            ..Default::default()
        }),
        ..(*container(&id, ContainerState::Running, 700, 5, 10)).clone()
    });
    l.observe([&event("u", EventType::ContainerStarted, &id, Some(pod("u", vec![c])))]);
    let key = |p: &str| LookupKey::CgroupPath(cgroup_path(p).unwrap());
    assert_eq!(found(l.find(&key(&scope))).container.id, id, "the container's own cgroup");
    assert_eq!(found(l.find(&key(&format!("0::{scope}/sub")))).container.id, id, "a cgroup below it");
    // A cgroup named after the container somewhere the runtime did not put it, in either
    // of the names containerd gives it — a user can make any name in a delegated tree.
    for elsewhere in [
        format!("/user.slice/cri-containerd-{id}.scope"),
        format!(
            "/user.slice/user-1000.slice/user@1000.service/app.slice/kubepods-besteffort-pod1.slice:cri-containerd:{id}"
        ),
        format!(
            "/user.slice/user-1000.slice/user@1000.service/kubepods-besteffort-pod1.slice/cri-containerd-{id}.scope"
        ),
    ] {
        let why = not_found(l.find(&key(&elsewhere)));
        assert!(why.contains("not where the runtime put it"), "{elsewhere}: {why}");
    }
    // Seen from inside a cgroup namespace, the same path is the container's.
    let inside = format!("0::/../../kubepods-besteffort-pod1.slice/cri-containerd-{id}.scope");
    assert_eq!(found(l.find(&key(&inside))).container.id, id);
    // A pod's cgroup names no container.
    let why = not_found(l.find(&key("/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod1.slice")));
    assert!(why.contains("names no container"), "{why}");
    // Removed: still answered, as removed, within the retention.
    l.observe([&event("u", EventType::ContainerRemoved, &id, Some(pod("u", vec![])))]);
    assert!(found(l.find(&key(&scope))).removed_at.is_some());
    let other = "d".repeat(64);
    let why = not_found(l.find(&key(&format!("/kubepods.slice/cri-containerd-{other}.scope"))));
    assert!(why.contains("--tombstone-retention") && why.contains(&other), "{why}");
}

#[test]
fn a_process_in_a_users_tree_is_never_a_containers_whatever_its_cgroup_is_named() {
    let root = empty_host();
    let cfg = LookupConfig::in_memory(Duration::from_secs(3600));
    let (l, _) = ContainerLookup::open(cfg, Host::new(&root), None, LookupMetrics::default()).unwrap();
    let id = "e".repeat(64);
    let c = Arc::new(ContainerStatus {
        process: Some(Process {
            pid: 800,
            cgroup_path: format!("kubepods-besteffort-pod1.slice:cri-containerd:{id}"),
            ..Default::default()
        }),
        ..(*container(&id, ContainerState::Running, 800, 6, 10)).clone()
    });
    l.observe([&event("u", EventType::ContainerStarted, &id, Some(pod("u", vec![c])))]);
    // PID 900 is a user's process in a directory the user named as containerd names one.
    std::fs::create_dir_all(root.join("proc/900")).unwrap();
    let forged = format!(
        "0::/user.slice/user-1000.slice/user@1000.service/kubepods-besteffort-pod1.slice:cri-containerd:{id}\n"
    );
    std::fs::write(root.join("proc/900/cgroup"), forged).unwrap();
    let why = not_found(l.find(&LookupKey::Pid(900)));
    assert!(why.contains("not where the runtime put it"), "{why}");
    // The container's own process, where the runtime put it, is the container's.
    std::fs::create_dir_all(root.join("proc/800")).unwrap();
    let real = format!(
        "0::/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod1.slice/cri-containerd-{id}.scope\n"
    );
    std::fs::write(root.join("proc/800/cgroup"), real).unwrap();
    assert_eq!(found(l.find(&LookupKey::Pid(800))).container.id, id);
}

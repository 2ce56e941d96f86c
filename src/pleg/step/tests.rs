use std::time::{Duration, UNIX_EPOCH};

use super::*;
use crate::model::{ContainerState, SandboxState, SandboxStatus};
use EventType::*;

const SECOND: i64 = 1_000_000_000;

fn container(id: &str, state: ContainerState, exit_code: i32) -> Arc<ContainerStatus> {
    Arc::new(ContainerStatus {
        id: id.into(),
        name: format!("{id}-name"),
        state,
        created_at: SECOND,
        started_at: 2 * SECOND,
        finished_at: if state == ContainerState::Exited { 3 * SECOND } else { 0 },
        exit_code,
        ..Default::default()
    })
}

fn pod(containers: &[Arc<ContainerStatus>], sandbox: Option<SandboxState>) -> Arc<PodStatus> {
    let mut p = PodStatus::empty("u", "ns", "web");
    p.containers = containers.to_vec();
    if let Some(state) = sandbox {
        p.sandboxes.push(SandboxStatus { id: "sb".into(), state, created_at: SECOND / 2, ..Default::default() });
    }
    Arc::new(p)
}

fn t(kind: EventType, id: &str) -> Transition {
    Transition {
        id: id.into(),
        name: if id == "sb" { String::new() } else { format!("{id}-name") },
        is_sandbox: id == "sb",
        kind,
    }
}

/// One case: what the read found, and the events it must make — type, id, and what
/// the event's pod holds (`None`: no pod; `Some(ids)`: the pod with these containers).
#[derive(Default)]
struct Case {
    name: &'static str,
    /// The fresh status; none: the pod is gone.
    status: Option<Arc<PodStatus>>,
    transitions: Vec<Transition>,
    unseen: Vec<Transition>,
    final_statuses: Vec<Arc<ContainerStatus>>,
    sync: bool,
    empty_record: bool,
    want: Vec<(EventType, &'static str, Option<Vec<&'static str>>)>,
}

fn cases() -> Vec<Case> {
    let running = container("c1", ContainerState::Running, 0);
    let dead = container("c1", ContainerState::Exited, 137);
    vec![
        Case {
            name: "a start carries the fresh pod",
            status: Some(pod(std::slice::from_ref(&running), Some(SandboxState::Ready))),
            transitions: vec![t(ContainerStarted, "sb"), t(ContainerStarted, "c1")],
            want: vec![(ContainerStarted, "sb", Some(vec!["c1"])), (ContainerStarted, "c1", Some(vec!["c1"]))],
            ..Default::default()
        },
        Case {
            name: "nothing transitioned and nothing asked: no event",
            status: Some(pod(std::slice::from_ref(&running), Some(SandboxState::Ready))),
            ..Default::default()
        },
        Case {
            name: "nothing transitioned after a failed read: one POD_SYNC",
            status: Some(pod(std::slice::from_ref(&running), Some(SandboxState::Ready))),
            sync: true,
            want: vec![(PodSync, "", Some(vec!["c1"]))],
            ..Default::default()
        },
        Case { name: "a sync of a pod that is gone says nothing by itself", sync: true, ..Default::default() },
        Case {
            name: "a container removed before the read dies with the stream's final status",
            status: Some(pod(&[], Some(SandboxState::Ready))),
            transitions: vec![t(ContainerDied, "c1"), t(ContainerRemoved, "c1")],
            final_statuses: vec![dead.clone()],
            want: vec![(ContainerDied, "c1", Some(vec!["c1"])), (ContainerRemoved, "c1", Some(vec![]))],
            ..Default::default()
        },
        Case {
            name: "without its final status the death carries the pod as read",
            status: Some(pod(&[], Some(SandboxState::Ready))),
            transitions: vec![t(ContainerDied, "c1"), t(ContainerRemoved, "c1")],
            want: vec![(ContainerDied, "c1", Some(vec![])), (ContainerRemoved, "c1", Some(vec![]))],
            ..Default::default()
        },
        Case {
            name: "a pod gone: every event with the pod before the first without, removals carry none",
            transitions: vec![
                t(ContainerDied, "sb"),
                t(ContainerRemoved, "sb"),
                t(ContainerDied, "c1"),
                t(ContainerRemoved, "c1"),
            ],
            final_statuses: vec![dead.clone()],
            want: vec![
                (ContainerDied, "c1", Some(vec!["c1"])),
                (ContainerDied, "sb", None),
                (ContainerRemoved, "sb", None),
                (ContainerRemoved, "c1", None),
            ],
            ..Default::default()
        },
        Case {
            name: "a container started, ended and gone with its pod before the read starts before it dies",
            transitions: vec![
                t(ContainerStarted, "c1"),
                t(ContainerDied, "c1"),
                t(ContainerRemoved, "c1"),
                t(ContainerDied, "sb"),
                t(ContainerRemoved, "sb"),
            ],
            final_statuses: vec![dead.clone()],
            want: vec![
                (ContainerStarted, "c1", Some(vec!["c1"])),
                (ContainerDied, "c1", Some(vec!["c1"])),
                (ContainerRemoved, "c1", None),
                (ContainerDied, "sb", None),
                (ContainerRemoved, "sb", None),
            ],
            ..Default::default()
        },
        Case {
            name: "containers no read saw go before the sandbox's own end",
            status: Some(pod(&[], Some(SandboxState::NotReady))),
            transitions: vec![t(ContainerDied, "sb")],
            unseen: vec![t(ContainerDied, "c9"), t(ContainerRemoved, "c9")],
            final_statuses: vec![container("c9", ContainerState::Exited, 1)],
            want: vec![
                (ContainerDied, "c9", Some(vec!["c9"])),
                (ContainerRemoved, "c9", Some(vec![])),
                (ContainerDied, "sb", Some(vec![])),
            ],
            ..Default::default()
        },
        Case {
            name: "a pod seeded with nothing in it and gone ends with a POD_SYNC without a pod",
            empty_record: true,
            want: vec![(PodSync, "", None)],
            ..Default::default()
        },
        Case {
            name: "a pod seeded with nothing in it whose removal says it is gone needs no POD_SYNC",
            empty_record: true,
            transitions: vec![t(ContainerRemoved, "sb")],
            want: vec![(ContainerRemoved, "sb", None)],
            ..Default::default()
        },
        Case {
            name: "a pod gone before any read dies with the container as it ended, and goes without it",
            transitions: vec![t(ContainerDied, "c1"), t(ContainerRemoved, "c1")],
            final_statuses: vec![dead.clone()],
            want: vec![(ContainerDied, "c1", Some(vec!["c1"])), (ContainerRemoved, "c1", None)],
            ..Default::default()
        },
    ]
}

#[test]
fn each_read_makes_the_events_its_table_row_says_in_order() {
    for case in cases() {
        let words: HashMap<String, ContainerStatus> =
            case.final_statuses.iter().map(|c| (c.id.clone(), (**c).clone())).collect();
        let events = events_of(PodRead {
            reworded: &[],
            uid: "u",
            namespace: "ns",
            name: "web",
            identity: None,
            observed_at: std::time::SystemTime::UNIX_EPOCH,
            now: case.status.as_ref().map_or(PodNow::Gone, PodNow::Present),
            transitions: &case.transitions,
            unseen: &case.unseen,
            final_statuses: &words,
            sync: case.sync,
            empty_record: case.empty_record,
            source: EventSource::Relist,
        });
        let got: Vec<(EventType, &str, Option<Vec<&str>>)> = events
            .iter()
            .map(|e| {
                let pod = e.pod.as_ref().map(|p| p.containers.iter().map(|c| c.id.as_str()).collect());
                (e.kind, e.container_id.as_str(), pod)
            })
            .collect();
        assert_eq!(got, case.want, "{}", case.name);
        for e in &events {
            assert_eq!((&*e.pod_uid, &*e.pod_namespace, &*e.pod_name), ("u", "ns", "web"), "{}", case.name);
            assert_eq!(e.source, EventSource::Relist, "{}", case.name);
        }
    }
}

#[test]
fn a_change_carries_the_runtimes_time_of_it() {
    let dead = container("c1", ContainerState::Exited, 137);
    let status = pod(std::slice::from_ref(&dead), Some(SandboxState::Ready));
    let at = |s: i64| Some(UNIX_EPOCH + Duration::from_nanos(s as u64));
    let none = HashMap::new();
    let read = |transitions: &[Transition]| {
        events_of(PodRead {
            reworded: &[],
            uid: "u",
            namespace: "ns",
            name: "web",
            identity: None,
            observed_at: std::time::SystemTime::UNIX_EPOCH,
            now: PodNow::Present(&status),
            transitions,
            unseen: &[],
            final_statuses: &none,
            sync: false,
            empty_record: false,
            source: EventSource::CriEvent,
        })
        .into_iter()
        .map(|e| e.runtime_timestamp)
        .collect::<Vec<_>>()
    };
    assert_eq!(read(&[t(ContainerStarted, "c1")]), [at(2 * SECOND)], "a start: the start time");
    assert_eq!(read(&[t(ContainerDied, "c1")]), [at(3 * SECOND)], "a death: the finish time");
    assert_eq!(read(&[t(ContainerChanged, "c1")]), [at(SECOND)], "a change: the creation time");
    assert_eq!(read(&[t(ContainerStarted, "sb")]), [at(SECOND / 2)], "a sandbox's start: its creation");
    assert_eq!(read(&[t(ContainerRemoved, "c1")]), [None], "a removal: the runtime gives no time");
}

#[test]
fn a_pod_the_records_never_knew_gone_before_it_was_read_is_named_and_labelled_as_the_stream_gave_it() {
    use crate::pleg::final_statuses::PodIdentity;
    let identity = PodIdentity {
        namespace: "team".into(),
        name: "batch".into(),
        labels: HashMap::from([("app".to_owned(), "batch".to_owned())]).iter().collect(),
    };
    let died = |kind| Transition { id: "c1".into(), name: "app".into(), is_sandbox: false, kind };
    let transitions = [died(EventType::ContainerDied), died(EventType::ContainerRemoved)];
    let at = std::time::SystemTime::UNIX_EPOCH + std::time::Duration::from_secs(42);
    let events = events_of(PodRead {
        reworded: &[],
        uid: "u",
        namespace: "",
        name: "",
        identity: Some(&identity),
        observed_at: at,
        now: PodNow::Gone,
        transitions: &transitions,
        unseen: &[],
        final_statuses: &HashMap::new(),
        sync: false,
        empty_record: false,
        source: EventSource::Relist,
    });
    assert_eq!(events.len(), 2);
    assert!(events.iter().all(|e| (&*e.pod_namespace, &*e.pod_name) == ("team", "batch")), "{events:?}");
    assert!(events.iter().all(|e| e.observed_at == at), "the time given, no clock read");
    let carried = events[0].pod.as_ref().expect("the death carries the pod as the stream named it");
    assert_eq!(carried.labels.get("app"), Some("batch"), "a label selector finds it");
    assert!(events[1].pod.is_none(), "the removal of a pod gone carries none");
}

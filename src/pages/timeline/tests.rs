use super::*;
use crate::journal::PodMeta;
use crate::model::event::{EventSource, PodLifecycleEvent};
use crate::model::{ContainerStatus, PodStatus, SandboxStatus};

const T0: i64 = 1_800_000_000_000_000_000;
const SEC: i64 = 1_000_000_000;

fn at(s: i64) -> SystemTime {
    nanos_to_system(T0 + s * SEC).unwrap()
}

/// A container attempt: started at `start`, dead at `end` (seconds after T0) if given.
fn c(id: &str, name: &str, attempt: u32, start: i64, end: Option<(i64, i32, &str)>) -> Arc<ContainerStatus> {
    Arc::new(ContainerStatus {
        id: id.into(),
        name: name.into(),
        attempt,
        state: if end.is_some() { ContainerState::Exited } else { ContainerState::Running },
        created_at: T0 + start * SEC,
        started_at: T0 + start * SEC,
        finished_at: end.map_or(0, |(e, _, _)| T0 + e * SEC),
        exit_code: end.map_or(0, |(_, code, _)| code),
        reason: end.map_or(String::new(), |(_, _, r)| r.to_string()),
        message: String::new(),
        image: "busybox".into(),
        labels: Default::default(),
        annotations: Default::default(),
        ..Default::default()
    })
}

fn status(name: &str, containers: Vec<Arc<ContainerStatus>>) -> Arc<PodStatus> {
    let mut p = PodStatus::empty("uid-1", "shop", name);
    p.sandboxes = vec![SandboxStatus {
        id: "sandbox-1".into(),
        attempt: 0,
        state: SandboxState::Ready,
        created_at: T0,
        ip: String::new(),
        additional_ips: vec![],
        ..Default::default()
    }];
    p.containers = containers;
    Arc::new(p)
}

fn entry(rev: u64, kind: EventType, id: &str, name: &str, when: i64, pod: Option<Arc<PodStatus>>) -> Arc<Entry> {
    let event = PodLifecycleEvent {
        pod_uid: "uid-1".into(),
        pod_namespace: "shop".into(),
        pod_name: pod.as_ref().map_or("checkout".into(), |p| p.name.as_str().into()),
        kind,
        container_id: id.into(),
        container_name: name.into(),
        is_sandbox: id.starts_with("sandbox"),
        source: EventSource::CriEvent,
        observed_at: at(when) + Duration::from_millis(40),
        runtime_timestamp: Some(at(when)),
        pod,
        message: String::new(),
    };
    Arc::new(Entry { revision: rev, event: Arc::new(event), meta: Arc::new(PodMeta::default()), left: None, bytes: 0 })
}

/// Three attempts of `app`: two died with Error, the third was OOM-killed; a sidecar runs.
fn crash_looping() -> Vec<Arc<Entry>> {
    use EventType::*;
    let a0 = c("a0", "app", 0, 1, Some((5, 1, "Error")));
    let a1 = c("a1", "app", 1, 7, Some((11, 1, "Error")));
    let a2 = c("a2", "app", 2, 13, Some((20, 137, "OOMKilled")));
    let side = c("s0", "sidecar", 0, 1, None);
    vec![
        entry(1, ContainerStarted, "sandbox-1", "", 0, Some(status("checkout", vec![]))),
        entry(
            2,
            ContainerStarted,
            "a0",
            "app",
            1,
            Some(status("checkout", vec![c("a0", "app", 0, 1, None), side.clone()])),
        ),
        entry(
            3,
            ContainerStarted,
            "s0",
            "sidecar",
            1,
            Some(status("checkout", vec![c("a0", "app", 0, 1, None), side.clone()])),
        ),
        entry(4, ContainerDied, "a0", "app", 5, Some(status("checkout", vec![a0.clone(), side.clone()]))),
        entry(
            5,
            ContainerStarted,
            "a1",
            "app",
            7,
            Some(status("checkout", vec![c("a1", "app", 1, 7, None), a0.clone(), side.clone()])),
        ),
        entry(6, ContainerDied, "a1", "app", 11, Some(status("checkout", vec![a1.clone(), a0.clone(), side.clone()]))),
        entry(7, ContainerRemoved, "a0", "app", 12, Some(status("checkout", vec![a1.clone(), side.clone()]))),
        entry(
            8,
            ContainerStarted,
            "a2",
            "app",
            13,
            Some(status("checkout", vec![c("a2", "app", 2, 13, None), a1.clone(), side.clone()])),
        ),
        entry(9, ContainerDied, "a2", "app", 20, Some(status("checkout", vec![a2, a1, side]))),
    ]
}

#[test]
fn every_attempt_is_one_bar_on_its_containers_lane() {
    let entries = crash_looping();
    let t = build(&entries, &[], at(25));
    assert_eq!(t.lanes, [SANDBOX_LANE, "app", "sidecar"]);
    let svg = svg(&t, at(25));
    assert_eq!(svg.matches("<g class=\"attempt").count(), 4, "three attempts of app and one of the sidecar");
    assert_eq!(svg.matches("data-lane=\"app\" data-id=").count(), 3);
    assert_eq!(svg.matches("<g class=\"sandbox").count(), 1);
    assert!(svg.contains("<g class=\"attempt running\" data-lane=\"sidecar\""), "the sidecar still runs");
    let a0 = t.attempts.iter().find(|a| a.id == "a0").unwrap();
    assert_eq!((a0.start, a0.end), (Some(at(1)), Some(at(5))), "from the runtime's start to its finish");
}

#[test]
fn each_death_is_marked_with_its_exit_code_and_an_oom_kill_distinctly() {
    let entries = crash_looping();
    let t = build(&entries, &[], at(25));
    let svg = svg(&t, at(25));
    assert_eq!(svg.matches("<g class=\"death\"").count(), 2, "two deaths with Error");
    assert_eq!(svg.matches("<g class=\"death oom\"").count(), 1, "one OOM kill");
    assert!(svg.contains(">1 Error</text>"));
    assert!(svg.contains(">OOM 137</text>"));
    assert!(svg.contains("<g class=\"attempt exited oom\" data-lane=\"app\" data-id=\"a2\" data-attempt=\"2\">"));
}

#[test]
fn a_bars_title_holds_its_events_revision_source_times_and_latency() {
    let entries = crash_looping();
    let t = build(&entries, &[], at(25));
    let svg = svg(&t, at(25));
    let start = svg.find("data-id=\"a1\"").unwrap();
    let title = &svg[start..svg[start..].find("</title>").unwrap() + start];
    for want in [
        "app attempt 1",
        "CONTAINER_STARTED · revision 5 · source CRI_EVENT",
        "CONTAINER_DIED · revision 6",
        "latency 40ms",
        "exit 1 · Error",
        "runtime time 2027-01-15",
    ] {
        assert!(title.contains(want), "{want:?} missing from {title}");
    }
}

#[test]
fn plegd_starts_and_outages_share_the_axis() {
    let entries = crash_looping();
    let mark = |s: i64, kind: MarkKind, d: &str| Mark { at_ns: T0 + s * SEC, kind, detail: d.into() };
    let marks = [
        mark(-100, MarkKind::Start, "plegd 1 pid 1"),
        mark(8, MarkKind::Stop, ""),
        mark(10, MarkKind::Start, "plegd 1 pid 2"),
        mark(14, MarkKind::Stream, "down"),
        mark(16, MarkKind::Stream, "up"),
        mark(17, MarkKind::RuntimeDown, "connection refused"),
    ];
    let t = build(&entries, &marks, at(25));
    assert_eq!(t.starts.len(), 2);
    assert!(t.starts[1].2, "the second start followed a clean stop");
    let classes: Vec<_> = t.windows.iter().map(|w| (w.class, w.to.is_some())).collect();
    assert_eq!(classes, [("plegd-down", true), ("stream-down", true), ("runtime-down", false)]);
    let svg = svg(&t, at(25));
    assert_eq!(svg.matches("<g class=\"plegd-start\">").count(), 1, "the start before the axis is left out");
    assert!(svg.contains("<g class=\"window plegd-down\"><title>plegd not running"));
    assert!(svg.contains("<g class=\"window runtime-down\"><title>relists failing: connection refused"));
    let tables = tables(&t, at(25));
    assert!(tables.contains("plegd started (plegd 1 pid 2)"), "{tables}");
}

#[test]
fn a_start_without_a_stop_before_it_says_the_run_before_ended_otherwise() {
    let mark = |s: i64, kind: MarkKind| Mark { at_ns: T0 + s * SEC, kind, detail: String::new() };
    let (starts, windows) = from_marks(&[mark(0, MarkKind::Start), mark(5, MarkKind::Start)], at(9));
    assert_eq!(starts.iter().map(|s| s.2).collect::<Vec<_>>(), [true, false]);
    assert!(windows.is_empty());
}

#[test]
fn names_and_messages_from_the_runtime_are_escaped_everywhere() {
    let hostile = "<script>alert(1)</script>";
    let mut entries = crash_looping();
    let mut ev = (*entries[1].event).clone();
    ev.container_name = hostile.into();
    ev.message = "\"><img src=x onerror=alert(2)>".into();
    ev.pod_name = hostile.into();
    entries[1] =
        Arc::new(Entry { revision: 2, event: Arc::new(ev), meta: Arc::new(PodMeta::default()), left: None, bytes: 0 });
    let t = build(&entries, &[], at(25));
    let page = render("uid-<1>", 7, &t, "tok\"en", at(25));
    assert!(!page.contains("<script") && !page.contains("<img"), "{page}");
    assert!(page.contains("&lt;script&gt;alert(1)&lt;/script&gt;"));
    assert!(page.contains("uid <code>uid-&lt;1&gt;</code>"));
    assert!(page.contains("data-since=\"tok&quot;en\""));
}

#[test]
fn the_details_table_lists_every_event_newest_first_and_every_attempt() {
    let entries = crash_looping();
    let t = build(&entries, &[], at(25));
    let tables = tables(&t, at(25));
    let revs: Vec<&str> = tables.match_indices("<tr data-revision=\"").map(|(i, _)| &tables[i + 19..i + 20]).collect();
    assert_eq!(revs, ["9", "8", "7", "6", "5", "4", "3", "2", "1"]);
    assert!(tables.contains("exit 137 · OOMKilled <span class=\"mark oom\">OOM-killed</span>"));
    assert_eq!(tables.matches("<tr class=\"failed\">").count(), 2);
}

#[test]
fn a_gone_pods_bars_end_with_it_and_no_now_line_is_drawn() {
    let mut entries = crash_looping();
    entries.push(entry(10, EventType::ContainerRemoved, "s0", "sidecar", 30, None));
    let t = build(&entries, &[], at(100));
    assert!(t.gone);
    let side = t.attempts.iter().find(|a| a.id == "s0").unwrap();
    assert!(!side.running && side.end.is_some());
    assert!(!svg(&t, at(100)).contains("<g class=\"now\">"));
}

//! Evented mode against the simulated runtime over a real socket: the CRI event stream
//! as a fast path, the relist as the truth, and recovery that never gets stuck.

mod support;

use std::time::Duration;

use plegd::cri::spec::{ContainerSpec, PodSpec};
use plegd::model::event::{EventSource, EventType};
use plegd::pleg::evented::{Mode, StreamState};
use plegd::proto::runtime as cri;
use plegd::sim::{EventsMode, Fault, FaultAction};
use support::{SimHarness, replay, start_sidecar, truth_and_cache};
use tokio::time::Instant;

/// Full relists so slow that only the stream can explain a fast event.
const SLOW: Duration = Duration::from_secs(600);

async fn up_sidecar(h: &SimHarness) -> support::Sidecar {
    // Relists rare enough (also in the settle window) that a fast event is the stream's.
    let mut sc = start_sidecar(h.client(), Mode::Auto, Duration::from_secs(10), SLOW).await;
    sc.wait_stream(Duration::from_secs(5), |s| s == StreamState::Up).await;
    // The repair relist that follows the connection.
    sc.until_quiet(Duration::from_millis(300)).await;
    sc
}

/// Every read of the runtime (listings, statuses) answers `d` late, until the faults
/// are cleared: the state it returns is the state after the delay.
fn slow_reads(h: &SimHarness, d: Duration) {
    for method in ["ListPodSandbox", "ListContainers", "PodSandboxStatus", "ContainerStatus"] {
        h.sim.inject(Fault { method, target: None, action: FaultAction::Delay(d), times: None });
    }
}

/// What the stream carries when a pod goes (containerd's order): each container's
/// STOPPED with its last words, then the sandbox's DELETED without a status. Returns the
/// events plegd publishes until it is quiet for 3 s; clears the faults.
async fn tell_the_pods_end(
    h: &SimHarness,
    sc: &mut support::Sidecar,
    words: &[(String, cri::ContainerStatus)],
    sandbox: cri::PodSandboxStatus,
    sid: &str,
) -> Vec<plegd::model::event::PodLifecycleEvent> {
    for (n, (id, last)) in words.iter().enumerate() {
        h.sim.inject_event(cri::ContainerEventResponse {
            container_id: id.clone(),
            container_event_type: cri::ContainerEventType::ContainerStoppedEvent as i32,
            created_at: 1 + n as i64,
            pod_sandbox_status: Some(sandbox.clone()),
            containers_statuses: vec![last.clone()],
        });
    }
    h.sim.inject_event(cri::ContainerEventResponse {
        container_id: sid.to_owned(),
        container_event_type: cri::ContainerEventType::ContainerDeletedEvent as i32,
        created_at: 1 + words.len() as i64,
        pod_sandbox_status: None,
        containers_statuses: vec![],
    });
    let mut got = Vec::new();
    while let Some(e) = sc.next(Duration::from_millis(3000)).await {
        got.push(e);
    }
    h.sim.clear_faults();
    got
}

#[tokio::test]
async fn a_started_container_is_published_from_the_stream_within_milliseconds() {
    let h = SimHarness::start().await;
    let mut sc = up_sidecar(&h).await;
    let pod = PodSpec::new("default", "web");
    assert!(sc.cache.get(&pod.uid).is_none(), "the cache does not know the pod yet");
    let t0 = Instant::now();
    let (_, ids) = h.run_pod(&pod, &[ContainerSpec::new("app")]).await;
    let mut got = Vec::new();
    while !got
        .iter()
        .any(|e: &plegd::model::event::PodLifecycleEvent| e.kind == EventType::ContainerStarted && !e.is_sandbox)
    {
        got.push(sc.next(Duration::from_secs(2)).await.expect("events from the stream"));
    }
    let took = t0.elapsed();
    assert!(took < Duration::from_millis(900), "took {took:?}: faster than any relist could be");
    assert!(got.iter().all(|e| e.source == EventSource::CriEvent), "{got:?}");
    // The CREATED event may make plegd read the pod while the container is only
    // created (CONTAINER_CHANGED), or the read may already see it running: a race with
    // StartContainer that the state table allows either way.
    let kinds: Vec<_> =
        got.iter().filter(|e| e.kind != EventType::ContainerChanged).map(|e| (e.kind, e.is_sandbox)).collect();
    assert_eq!(kinds, [(EventType::ContainerStarted, true), (EventType::ContainerStarted, false)]);
    assert_eq!(got.last().unwrap().container_id, ids[0]);
    replay(&got);
    assert!(sc.cache.get(&pod.uid).is_some());
    sc.stop().await;
}

#[tokio::test]
async fn the_stream_dropping_mid_churn_loses_nothing() {
    let h = SimHarness::start().await;
    let mut sc = up_sidecar(&h).await;
    let mut churn = plegd::sim::churn::Churn::new(
        h.sim.clone(),
        plegd::sim::churn::ChurnConfig { pods: 20, containers_per_pod: 2, churn_per_sec: 0.0 },
    );
    let mut events = Vec::new();
    churn.populate().await;
    for round in 0..6 {
        for _ in 0..15 {
            churn.step().await;
        }
        if round % 2 == 0 {
            h.sim.drop_event_streams();
        }
        // Changes made while the stream is down are only seen by the repair relist.
        for _ in 0..10 {
            churn.step().await;
        }
        events.extend(sc.until_quiet(Duration::from_millis(150)).await);
    }
    sc.wait_stream(Duration::from_secs(5), |s| s == StreamState::Up).await;
    events.extend(sc.until_quiet(Duration::from_millis(1500)).await);
    let model = replay(&events);
    let (truth, cached) = truth_and_cache(&h.sim, &sc.cache).await;
    assert_eq!(cached, truth, "the cache equals the runtime");
    let truth_ids: std::collections::BTreeSet<_> = truth.keys().cloned().collect();
    let model_ids: std::collections::BTreeSet<_> = model.keys().cloned().collect();
    assert_eq!(model_ids, truth_ids, "the events seen add up to the runtime's state");
    let errors = sc.metrics.pleg.evented_connection_errors.get();
    assert!(errors >= 3, "the stream was dropped three times, saw {errors}");
    assert!(sc.metrics.pleg.evented_connections.get() >= 4);
    sc.stop().await;
}

#[tokio::test]
async fn an_unimplemented_stream_falls_back_to_relisting_at_the_relist_period() {
    let h = SimHarness::start().await;
    h.sim.set_events_mode(EventsMode::Unimplemented);
    let mut sc = start_sidecar(h.client(), Mode::Auto, Duration::from_millis(200), SLOW).await;
    sc.wait_stream(Duration::from_secs(5), |s| s == StreamState::NoStream).await;
    let pod = PodSpec::new("default", "web");
    h.run_pod(&pod, &[ContainerSpec::new("app")]).await;
    let ev = sc.next(Duration::from_secs(2)).await.expect("the relist finds it");
    assert_eq!(ev.source, EventSource::Relist);
    let mode = sc.metrics.encode();
    assert!(mode.contains("plegd_pleg_mode{mode=\"generic\"} 1"), "{mode}");
    sc.stop().await;
}

#[tokio::test]
async fn an_empty_ok_stream_counts_as_no_stream() {
    let h = SimHarness::start().await;
    h.sim.set_events_mode(EventsMode::EmptyOk);
    let mut sc = start_sidecar(h.client(), Mode::Auto, Duration::from_millis(200), SLOW).await;
    sc.wait_stream(Duration::from_secs(5), |s| s == StreamState::NoStream).await;
    sc.stop().await;
}

#[tokio::test]
async fn the_sidecar_returns_to_evented_mode_when_the_stream_works_again() {
    let h = SimHarness::start().await;
    h.sim.set_events_mode(EventsMode::Unimplemented);
    let mut sc = start_sidecar(h.client(), Mode::Auto, Duration::from_secs(1), SLOW).await;
    sc.wait_stream(Duration::from_secs(5), |s| s == StreamState::NoStream).await;
    h.sim.set_events_mode(EventsMode::Stream);
    sc.wait_stream(Duration::from_secs(5), |s| s == StreamState::Up).await;
    sc.until_quiet(Duration::from_millis(300)).await;
    h.run_pod(&PodSpec::new("default", "late"), &[ContainerSpec::new("app")]).await;
    let ev = sc.next(Duration::from_millis(900)).await.expect("fast again");
    assert_eq!(ev.source, EventSource::CriEvent);
    assert!(sc.health.threshold() > Duration::from_secs(180), "health allows for the slow safety-net relist");
    sc.stop().await;
}

#[tokio::test]
async fn duplicate_and_out_of_order_events_change_nothing() {
    let h = SimHarness::start().await;
    let mut raw = h.subscribe_events().await;
    let mut sc = up_sidecar(&h).await;
    let pod = PodSpec::new("default", "web");
    let (_, ids) = h.run_pod(&pod, &[ContainerSpec::new("app")]).await;
    let mut first = sc.until_quiet(Duration::from_millis(300)).await;
    h.sim.exit_container(&ids[0], 1, "Error");
    first.extend(sc.until_quiet(Duration::from_millis(300)).await);
    replay(&first);
    assert_eq!(
        first.iter().map(|e| e.kind).filter(|k| *k != EventType::ContainerChanged).collect::<Vec<_>>(),
        [EventType::ContainerStarted, EventType::ContainerStarted, EventType::ContainerDied]
    );
    let before = sc.cache.get(&pod.uid).unwrap();
    // Replay everything the runtime sent, twice, newest first: stale STARTED events for
    // a container that has exited, a CREATED after STOPPED, duplicates.
    let mut seen = Vec::new();
    while let Ok(Some(Ok(ev))) =
        tokio::time::timeout(Duration::from_millis(100), futures_util::StreamExt::next(&mut raw)).await
    {
        seen.push(ev);
    }
    assert!(seen.len() >= 5);
    for ev in seen.iter().rev().chain(seen.iter().rev()) {
        h.sim.inject_event(ev.clone());
    }
    let after_replay = sc.until_quiet(Duration::from_millis(500)).await;
    assert!(after_replay.is_empty(), "stale events are hints only: {after_replay:?}");
    let after = sc.cache.get(&pod.uid).unwrap();
    assert_eq!(after.status.as_ref().unwrap().containers, before.status.as_ref().unwrap().containers);
    assert!(sc.inbox.coalesced() > 0, "a burst of requests for one pod coalesces");
    sc.stop().await;
}

#[tokio::test]
async fn an_event_without_a_sandbox_status_is_traced_through_the_container_id() {
    let h = SimHarness::start().await;
    let mut sc = up_sidecar(&h).await;
    let pod = PodSpec::new("default", "web");
    let (_, ids) = h.run_pod(&pod, &[ContainerSpec::new("app")]).await;
    sc.until_quiet(Duration::from_millis(300)).await;
    // The container dies; the runtime's own event is lost and the one that arrives
    // has no sandbox status (containerd#7785).
    h.sim.mute_events(true);
    h.sim.exit_container(&ids[0], 9, "Error");
    h.sim.mute_events(false);
    h.sim.inject_event(cri::ContainerEventResponse {
        container_id: ids[0].clone(),
        container_event_type: cri::ContainerEventType::ContainerStoppedEvent as i32,
        created_at: 1,
        pod_sandbox_status: None,
        containers_statuses: vec![],
    });
    let died = sc.next(Duration::from_secs(2)).await.expect("died");
    assert_eq!((died.kind, died.source), (EventType::ContainerDied, EventSource::CriEvent));
    sc.stop().await;
}

#[tokio::test]
async fn a_burst_of_thousands_of_events_is_published_exactly_once_each() {
    let h = SimHarness::start().await;
    let mut sc = up_sidecar(&h).await;
    let mut churn = plegd::sim::churn::Churn::new(
        h.sim.clone(),
        plegd::sim::churn::ChurnConfig { pods: 600, containers_per_pod: 2, churn_per_sec: 0.0 },
    );
    churn.populate().await; // 600 × (2 + 2 × 2) = 3,600 runtime events
    let events = sc.until_quiet(Duration::from_millis(1500)).await;
    let model = replay(&events);
    assert_eq!(model.len(), 1800, "every sandbox and container started once");
    let started = events.iter().filter(|e| e.kind == EventType::ContainerStarted).count();
    assert_eq!(started, 1800);
    assert!(events.iter().filter(|e| e.source == EventSource::CriEvent).count() > 1000, "most came from the stream");
    let (truth, cached) = truth_and_cache(&h.sim, &sc.cache).await;
    assert_eq!(cached, truth);
    sc.stop().await;
}

#[tokio::test]
async fn the_runtime_going_away_and_coming_back_reconnects_and_repairs() {
    let h = SimHarness::start().await;
    let mut sc = up_sidecar(&h).await;
    let pod = PodSpec::new("default", "web");
    let (_, ids) = h.run_pod(&pod, &[ContainerSpec::new("app")]).await;
    sc.until_quiet(Duration::from_millis(300)).await;
    h.stop().await;
    sc.wait_stream(Duration::from_secs(5), |s| s != StreamState::Up).await;
    // A container is killed while the runtime is down; nobody sends an event for it.
    h.sim.exit_container(&ids[0], 137, "Error");
    tokio::time::sleep(Duration::from_millis(300)).await;
    let back = SimHarness {
        shutdown: tokio_util::sync::CancellationToken::new(),
        tracker: tokio_util::task::TaskTracker::new(),
        ..h
    };
    back.serve().await;
    sc.wait_stream(Duration::from_secs(10), |s| s == StreamState::Up).await;
    let died = sc.next(Duration::from_secs(5)).await.expect("the repair relist reports the death");
    assert_eq!((died.kind, died.container_id.as_str()), (EventType::ContainerDied, ids[0].as_str()));
    assert_eq!(died.source, EventSource::Relist, "seen by the relist that follows the reconnect");
    back.stop().await;
    sc.stop().await;
}

#[tokio::test]
async fn generic_mode_never_opens_the_stream() {
    let h = SimHarness::start().await;
    let mut sc = start_sidecar(h.client(), Mode::Generic, Duration::from_millis(100), SLOW).await;
    h.run_pod(&PodSpec::new("default", "web"), &[ContainerSpec::new("app")]).await;
    let ev = sc.next(Duration::from_secs(2)).await.unwrap();
    assert_eq!(ev.source, EventSource::Relist);
    assert_eq!(h.sim.event_subscribers(), 0);
    assert_eq!(*sc.stream.borrow(), StreamState::Disabled);
    sc.stop().await;
}

#[tokio::test]
async fn a_change_without_an_event_right_after_a_reconnect_is_found_by_the_settling_relists() {
    let h = SimHarness::start().await;
    let mut sc = start_sidecar(h.client(), Mode::Auto, Duration::from_millis(300), SLOW).await;
    sc.wait_stream(Duration::from_secs(5), |s| s == StreamState::Up).await;
    let pod = PodSpec::new("default", "web");
    let (_, ids) = h.run_pod(&pod, &[ContainerSpec::new("app"), ContainerSpec::new("sidecar")]).await;
    sc.until_quiet(Duration::from_millis(500)).await;
    // Up from the start: no settle window, only the safety net (600 s) relists fully,
    // so a change the runtime sends no event for stays unseen.
    h.sim.mute_events(true);
    h.sim.exit_container(&ids[0], 1, "Error");
    assert!(sc.next(Duration::from_millis(1500)).await.is_none(), "no fast relists while the stream was never down");
    h.sim.mute_events(false);
    // The runtime restarts: the stream drops and comes back; the repair relist finds the
    // death the stream never reported.
    h.sim.drop_event_streams();
    sc.wait_stream(Duration::from_secs(5), |s| s != StreamState::Up).await;
    sc.wait_stream(Duration::from_secs(5), |s| s == StreamState::Up).await;
    let repaired = sc.next(Duration::from_secs(3)).await.expect("the repair relist finds the first death");
    assert_eq!((repaired.kind, repaired.container_id.as_str()), (EventType::ContainerDied, ids[0].as_str()));
    sc.until_quiet(Duration::from_millis(500)).await;
    // The runtime recovers a dead container after the restart but sends no event for it:
    // the settle window's fast relists find it.
    h.sim.mute_events(true);
    h.sim.exit_container(&ids[1], 255, "Unknown");
    let died = sc.next(Duration::from_secs(3)).await.expect("found without an event");
    assert_eq!((died.kind, died.source), (EventType::ContainerDied, EventSource::Relist));
    assert_eq!(died.container_id, ids[1]);
    sc.stop().await;
}

/// A container that exits and is removed before plegd reads its pod must die with its
/// exit code (the pod read no longer has it), and one started, stopped and removed
/// between two reads must die at all. The
/// runtime's STOPPED event carries the container's final status; plegd keeps it until
/// a read settles the pod.
#[tokio::test]
async fn a_container_removed_before_plegd_reads_it_still_dies_with_the_exit_code_the_stream_carried() {
    let h = SimHarness::start().await;
    let mut sc = up_sidecar(&h).await;
    let pod = PodSpec::new("default", "web");
    let (sid, ids) = h.run_pod(&pod, &[ContainerSpec::new("seen")]).await;
    let seen = ids[0].clone();
    sc.until_quiet(Duration::from_millis(300)).await;
    // The runtime's STOPPED reaches plegd before a read finishes (containerd sends it
    // before the removal can happen; a read takes longer than the stream's hop). The
    // reads are slowed so that holds whatever the scheduler does: plegd's stream reader
    // has a thread of its own, so the events and a read started by the first of them
    // race otherwise. (A STOPPED still on its way when a read finds the container gone
    // gives a death without its exit code: docs/pleg-and-stream.md, "A container's last words".)
    slow_reads(&h, Duration::from_millis(400));
    let unseen = h.sim.create_container(pod.create_request(&sid, &ContainerSpec::new("unseen"))).await.unwrap();
    h.sim.start_container(&unseen).await.unwrap();
    assert!(h.sim.exit_container(&seen, 7, "Error"));
    assert!(h.sim.exit_container(&unseen, 3, "OOMKilled"));
    h.sim.remove_container_cri(&seen).await.unwrap();
    h.sim.remove_container_cri(&unseen).await.unwrap();
    let mut got = Vec::new();
    while let Some(e) = sc.next(Duration::from_millis(1500)).await {
        got.push(e);
    }
    h.sim.clear_faults();
    for (id, code, reason) in [(&seen, 7, "Error"), (&unseen, 3, "OOMKilled")] {
        let of = |k: EventType| got.iter().filter(|e| e.kind == k && e.container_id == *id).collect::<Vec<_>>();
        let (died, removed) = (of(EventType::ContainerDied), of(EventType::ContainerRemoved));
        assert_eq!((died.len(), removed.len()), (1, 1), "{id}: one death, one removal: {got:#?}");
        let status = died[0]
            .pod
            .as_ref()
            .unwrap()
            .containers
            .iter()
            .find(|c| c.id == *id)
            .unwrap_or_else(|| panic!("{id}: the pod as it died: {got:#?}"));
        assert_eq!((status.exit_code, status.reason.as_str()), (code, reason), "the runtime's exit code and reason");
        assert!(died[0].runtime_timestamp.is_some(), "when it finished, by the runtime's clock");
        let at = |e: &plegd::model::event::PodLifecycleEvent| got.iter().position(|x| std::ptr::eq(x, e));
        assert!(at(died[0]) < at(removed[0]), "died, then removed");
        let after = removed[0].pod.as_ref().map_or(0, |p| p.containers.iter().filter(|c| c.id == *id).count());
        assert_eq!(after, 0, "the removal carries the pod without it");
    }
    sc.stop().await;
}

/// A pod created, run and removed between two reads of plegd (a kubelet's burst) must
/// report its container's death with the exit code the runtime's stream carried.
#[tokio::test]
async fn a_pod_whose_whole_life_falls_between_two_reads_still_reports_its_containers_death() {
    let h = SimHarness::start().await;
    let mut sc = up_sidecar(&h).await;
    let pod = PodSpec::new("default", "brief");
    // All of it without yielding to plegd.
    let sid = h.sim.run_pod_sandbox(pod.run_request()).await.unwrap();
    let id = h.sim.create_container(pod.create_request(&sid, &ContainerSpec::new("app"))).await.unwrap();
    h.sim.start_container(&id).await.unwrap();
    h.sim.stop_pod_sandbox(&sid).await.unwrap();
    h.sim.remove_pod_sandbox(&sid).await.unwrap();
    let mut got = Vec::new();
    while let Some(e) = sc.next(Duration::from_millis(1500)).await {
        got.push(e);
    }
    let died: Vec<_> = got.iter().filter(|e| e.kind == EventType::ContainerDied && e.container_id == id).collect();
    assert_eq!(died.len(), 1, "{got:#?}");
    assert_eq!(
        (died[0].pod_namespace.as_ref(), died[0].pod_name.as_ref()),
        ("default", "brief"),
        "named as the runtime named it"
    );
    let status = died[0].pod.as_ref().unwrap().containers.iter().find(|c| c.id == id).expect("the pod as it died");
    assert_eq!((status.exit_code, status.reason.as_str()), (137, "Error"));
    assert!(got.iter().any(|e| e.kind == EventType::ContainerRemoved && e.container_id == id), "{got:#?}");
    sc.stop().await;
}

/// The guard beside the last words: events a runtime replays after plegd already
/// reported a container removed (containerd 2.x keeps the events a broken stream missed)
/// must not make it die twice.
#[tokio::test]
async fn a_stopped_event_that_arrives_after_the_removal_was_reported_changes_nothing() {
    let h = SimHarness::start().await;
    let mut sc = up_sidecar(&h).await;
    let pod = PodSpec::new("default", "late");
    let (_, ids) = h.run_pod(&pod, &[ContainerSpec::new("app")]).await;
    sc.until_quiet(Duration::from_millis(300)).await;
    // The stream misses the exit and the removal; a relist reports them.
    h.sim.mute_events(true);
    assert!(h.sim.exit_container(&ids[0], 5, "Error"));
    let last = h.sim.container_status_cri(&ids[0]).await.unwrap();
    let sandbox = h
        .sim
        .list_pod_sandbox(None)
        .await
        .unwrap()
        .into_iter()
        .find(|s| s.metadata.as_ref().unwrap().uid == pod.uid)
        .unwrap();
    let sandbox_status = h.sim.pod_sandbox_status(&sandbox.id).await.unwrap();
    h.sim.remove_container_cri(&ids[0]).await.unwrap();
    h.sim.mute_events(false);
    sc.app.pleg().request_relist();
    let mut got = Vec::new();
    while let Some(e) = sc.next(Duration::from_millis(1000)).await {
        got.push(e);
    }
    // Then the missed STOPPED arrives, late.
    h.sim.inject_event(cri::ContainerEventResponse {
        container_id: ids[0].clone(),
        container_event_type: cri::ContainerEventType::ContainerStoppedEvent as i32,
        created_at: 1,
        pod_sandbox_status: Some(sandbox_status),
        containers_statuses: vec![last],
    });
    while let Some(e) = sc.next(Duration::from_millis(1000)).await {
        got.push(e);
    }
    let died = got.iter().filter(|e| e.kind == EventType::ContainerDied && e.container_id == ids[0]).count();
    let removed = got.iter().filter(|e| e.kind == EventType::ContainerRemoved && e.container_id == ids[0]).count();
    assert_eq!((died, removed), (1, 1), "{got:#?}");
    sc.stop().await;
}

/// The same on the full relist's path (from the adversarial review): containerd sends
/// a sandbox's DELETED without its status, which makes plegd relist everything rather
/// than the pod; the death must come out of that path too, with the pod's labels (a
/// label selector must find it).
#[tokio::test]
async fn a_pod_gone_before_any_read_dies_on_the_full_relists_path_too_with_its_labels() {
    let h = SimHarness::start().await;
    let mut sc = up_sidecar(&h).await;
    let pod = PodSpec::new("default", "brief").label("app", "brief");
    h.sim.mute_events(true);
    let sid = h.sim.run_pod_sandbox(pod.run_request()).await.unwrap();
    let id = h.sim.create_container(pod.create_request(&sid, &ContainerSpec::new("app"))).await.unwrap();
    h.sim.start_container(&id).await.unwrap();
    assert!(h.sim.exit_container(&id, 42, "Error"));
    let last = h.sim.container_status_cri(&id).await.unwrap();
    let sandbox = h.sim.pod_sandbox_status(&sid).await.unwrap();
    h.sim.remove_pod_sandbox(&sid).await.unwrap();
    h.sim.mute_events(false);
    // A full relist under way (slowed) while the two events arrive, so the relister's
    // next turn takes them together whatever the scheduler does (the stream reader has a
    // thread of its own): the death must come out of the full relist's path.
    slow_reads(&h, Duration::from_millis(300));
    sc.app.pleg().request_relist();
    tokio::task::yield_now().await;
    // What the stream carried: the container's STOPPED, then the sandbox's DELETED
    // without a status (containerd's order when a pod goes).
    // Two slowed full relists (each lists sandboxes and containers) come first.
    let got = tell_the_pods_end(&h, &mut sc, &[(id.clone(), last)], sandbox, &sid).await;
    let died: Vec<_> = got.iter().filter(|e| e.kind == EventType::ContainerDied && e.container_id == id).collect();
    assert_eq!(died.len(), 1, "{got:#?}");
    assert_eq!(died[0].source, EventSource::Relist, "from the full relist: {got:#?}");
    let pod_then = died[0].pod.as_ref().unwrap();
    assert_eq!(pod_then.labels.get("app"), Some("brief"), "the pod's labels, for selectors");
    assert_eq!(pod_then.containers.iter().find(|c| c.id == id).map(|c| c.exit_code), Some(42));
    let removed = got.iter().filter(|e| e.kind == EventType::ContainerRemoved && e.container_id == id).count();
    assert_eq!(removed, 1, "{got:#?}");
    // Found by the soak: the pod is gone from plegd's view too (it stayed as an empty
    // ghost in ListPods).
    assert!(
        sc.app.journal().pods().iter().all(|p| *p.uid != *pod.uid),
        "the journal's view lets the pod go: {:?}",
        sc.app.journal().pods().iter().map(|p| p.uid.to_string()).collect::<Vec<_>>()
    );
    sc.stop().await;
}

/// Found by the stock-client tests: a pod of two containers, both created, dead and
/// removed with the pod between two reads, went out as a death carrying the pod, a
/// removal without it, then the next death carrying it again: a client that drops a
/// pod on an event without one saw it go, come back and go.
#[tokio::test]
async fn a_pod_gone_before_any_read_never_comes_back_after_an_event_that_let_it_go() {
    let h = SimHarness::start().await;
    let mut sc = up_sidecar(&h).await;
    let pod = PodSpec::new("default", "pair").label("app", "pair");
    h.sim.mute_events(true);
    let sid = h.sim.run_pod_sandbox(pod.run_request()).await.unwrap();
    let mut words = Vec::new();
    for name in ["a", "b"] {
        let id = h.sim.create_container(pod.create_request(&sid, &ContainerSpec::new(name))).await.unwrap();
        h.sim.start_container(&id).await.unwrap();
        assert!(h.sim.exit_container(&id, 1, "Error"));
        words.push((id.clone(), h.sim.container_status_cri(&id).await.unwrap()));
    }
    let sandbox = h.sim.pod_sandbox_status(&sid).await.unwrap();
    h.sim.remove_pod_sandbox(&sid).await.unwrap();
    h.sim.mute_events(false);
    // A full relist under way (slowed) while the events arrive, so that the relister's
    // next turn takes them together: the events of one read of the pod are what this
    // checks (words split across turns make a second read, told on its own).
    slow_reads(&h, Duration::from_millis(300));
    sc.app.pleg().request_relist();
    tokio::task::yield_now().await;
    let got = tell_the_pods_end(&h, &mut sc, &words, sandbox, &sid).await;
    let mine: Vec<_> = got.iter().filter(|e| *e.pod_uid == *pod.uid).collect();
    let deaths = mine.iter().filter(|e| e.kind == EventType::ContainerDied && !e.is_sandbox).count();
    assert_eq!(deaths, 2, "both deaths are told: {mine:#?}");
    let first_gone = mine.iter().position(|e| e.pod.is_none()).expect("the pod goes");
    assert!(
        mine[first_gone..].iter().all(|e| e.pod.is_none()),
        "after the first event without the pod none carries it: {:?}",
        mine.iter().map(|e| (e.kind, e.pod.is_some())).collect::<Vec<_>>()
    );
    sc.stop().await;
}

/// Found by the hour-long soak on containerd 2.1 (62 violations): a relist can read the
/// pod after the container's removal while the stream's STOPPED for it is still on its
/// way (in the consumer, or in the hints the relist took before it listed). The death
/// then went out without the exit status the stream was about to carry.
#[tokio::test]
async fn a_relist_that_sees_the_removal_before_the_stopped_event_is_read_still_gives_the_exit_code() {
    let h = SimHarness::start().await;
    let mut sc = up_sidecar(&h).await;
    let pod = PodSpec::new("default", "late-words");
    let (sid, ids) = h.run_pod(&pod, &[ContainerSpec::new("app")]).await;
    sc.until_quiet(Duration::from_millis(300)).await;
    h.sim.mute_events(true);
    assert!(h.sim.exit_container(&ids[0], 9, "Error"));
    let last = h.sim.container_status_cri(&ids[0]).await.unwrap();
    let sandbox = h.sim.pod_sandbox_status(&sid).await.unwrap();
    h.sim.remove_container_cri(&ids[0]).await.unwrap();
    h.sim.mute_events(false);
    // The relist takes the hints, then lists (slowly: the STOPPED arrives meanwhile, and
    // waits in the hints it already took); its read finds the container gone.
    h.sim.inject(Fault {
        method: "ListContainers",
        target: None,
        action: FaultAction::Delay(Duration::from_millis(400)),
        times: Some(1),
    });
    sc.app.pleg().request_relist();
    tokio::time::sleep(Duration::from_millis(100)).await;
    h.sim.inject_event(cri::ContainerEventResponse {
        container_id: ids[0].clone(),
        container_event_type: cri::ContainerEventType::ContainerStoppedEvent as i32,
        created_at: 1,
        pod_sandbox_status: Some(sandbox),
        containers_statuses: vec![last],
    });
    let mut got = Vec::new();
    while let Some(e) = sc.next(Duration::from_millis(1000)).await {
        got.push(e);
    }
    let died: Vec<_> = got.iter().filter(|e| e.kind == EventType::ContainerDied && e.container_id == ids[0]).collect();
    assert_eq!(died.len(), 1, "{got:#?}");
    let status = died[0].pod.as_ref().unwrap().containers.iter().find(|c| c.id == ids[0]);
    assert_eq!(
        status.map(|c| (c.exit_code, c.reason.as_str())),
        Some((9, "Error")),
        "the exit status the stream carried: {got:#?}"
    );
    sc.stop().await;
}

/// From the review of that fix: when a read takes one container's words, another
/// container of the pod — created after the read, and already stopped — must not have
/// its words matched against that older read (which does not show it): it would "die
/// and be removed" while it still exists, then die again when read. (This failed
/// against a version that waited for words and took the whole pod's.)
#[tokio::test]
async fn waiting_for_one_containers_words_leaves_a_newer_containers_words_alone() {
    let h = SimHarness::start().await;
    let mut sc = up_sidecar(&h).await;
    let pod = PodSpec::new("default", "two");
    let (sid, ids) = h.run_pod(&pod, &[ContainerSpec::new("a")]).await;
    sc.until_quiet(Duration::from_millis(300)).await;
    // A goes without a word from the stream: the read that finds it gone waits.
    h.sim.mute_events(true);
    assert!(h.sim.exit_container(&ids[0], 1, "Error"));
    h.sim.remove_container_cri(&ids[0]).await.unwrap();
    h.sim.mute_events(false);
    h.sim.inject(Fault {
        method: "ListContainers",
        target: None,
        action: FaultAction::Delay(Duration::from_millis(100)),
        times: Some(1),
    });
    sc.app.pleg().request_relist();
    // During that wait (from the read, ≈ 100 ms, to the turn's 250 ms) B is created,
    // started and stops; the stream carries its words.
    tokio::time::sleep(Duration::from_millis(160)).await;
    let b = h.sim.create_container(pod.create_request(&sid, &ContainerSpec::new("b"))).await.unwrap();
    h.sim.start_container(&b).await.unwrap();
    assert!(h.sim.exit_container(&b, 4, "Error"));
    let mut got = Vec::new();
    while let Some(e) = sc.next(Duration::from_millis(1500)).await {
        got.push(e);
    }
    let of = |id: &str, k: EventType| got.iter().filter(|e| e.kind == k && e.container_id == id).count();
    assert_eq!(of(&b, EventType::ContainerRemoved), 0, "B still exists: {got:#?}");
    assert_eq!(of(&b, EventType::ContainerDied), 1, "B died once: {got:#?}");
    assert_eq!((of(&ids[0], EventType::ContainerDied), of(&ids[0], EventType::ContainerRemoved)), (1, 1));
    sc.stop().await;
}

/// The relister's inbox is bounded: a flood of requests past its capacity is dropped, and
/// what it would have made plegd read is read by the full relist the overflow asks for
/// (here a death the runtime sent no event for, found long before the safety net).
#[tokio::test]
async fn requests_a_full_inbox_drops_are_covered_by_a_full_relist() {
    let h = SimHarness::start().await;
    let mut sc = up_sidecar(&h).await;
    let pod = PodSpec::new("default", "web");
    let (_, ids) = h.run_pod(&pod, &[ContainerSpec::new("app")]).await;
    sc.until_quiet(Duration::from_millis(300)).await;
    h.sim.mute_events(true);
    h.sim.exit_container(&ids[0], 3, "Error");
    assert!(sc.next(Duration::from_millis(1000)).await.is_none(), "no event and no full relist yet");
    for i in 0..plegd::pleg::inbox::CAPACITY + 1000 {
        sc.inbox.waiting(&format!("made-up-{i}"));
    }
    let died = sc.next(Duration::from_secs(3)).await.expect("the overflow's full relist finds the death");
    assert_eq!((died.kind, died.source), (EventType::ContainerDied, EventSource::Relist));
    assert_eq!(died.container_id, ids[0]);
    sc.stop().await;
}

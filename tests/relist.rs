//! The GenericPLEG relister against the simulated runtime over a real unix socket.

mod support;

use std::time::Duration;

use plegd::cri::RuntimeService;
use plegd::cri::spec::{ContainerSpec, PodSpec};
use plegd::model::ContainerState;
use plegd::sim::{Fault, FaultAction};
use support::{SimHarness, exit_code, pleg, summary};
use tokio::time::Instant;

fn s(kind: &'static str, name: &str) -> (&'static str, String) {
    (kind, name.to_string())
}

#[tokio::test]
async fn relist_emits_started_for_a_new_pod_sandbox_first() {
    let h = SimHarness::start().await;
    let mut p = pleg(h.client(), Duration::from_secs(2));
    assert!(p.relist().await.is_empty(), "an empty runtime has no events");
    let pod = PodSpec::new("default", "web").label("app", "web");
    h.run_pod(&pod, &[ContainerSpec::new("app"), ContainerSpec::new("log")]).await;
    let evs = p.relist().await;
    assert_eq!(
        summary(&evs),
        [s("CONTAINER_STARTED", "(sandbox)"), s("CONTAINER_STARTED", "log"), s("CONTAINER_STARTED", "app")]
    );
    let ev = &evs[1];
    assert_eq!(*ev.pod_uid, *pod.uid);
    assert_eq!((&*ev.pod_namespace, &*ev.pod_name), ("default", "web"));
    assert!(ev.runtime_timestamp.is_some(), "started events carry the runtime's start time");
    let cached = p.cache.get(&pod.uid).expect("cached");
    let status = cached.status.as_ref().unwrap();
    assert_eq!(status.containers.len(), 2);
    assert_eq!(status.labels.get("app"), Some("web"));
    assert!(p.relist().await.is_empty(), "nothing changed, nothing emitted");
}

#[tokio::test]
async fn relist_emits_died_with_the_exit_code_for_a_container_that_exits() {
    let h = SimHarness::start().await;
    let mut p = pleg(h.client(), Duration::from_secs(2));
    let pod = PodSpec::new("default", "job");
    let (_, ids) = h.run_pod(&pod, &[ContainerSpec::new("main")]).await;
    p.relist().await;
    assert!(h.sim.exit_container(&ids[0], 3, "Error"));
    let evs = p.relist().await;
    assert_eq!(summary(&evs), [s("CONTAINER_DIED", "main")]);
    assert_eq!(exit_code(&evs[0]), Some(3));
    assert!(evs[0].runtime_timestamp.is_some(), "died events carry the finish time");
}

#[tokio::test]
async fn relist_emits_only_removed_for_an_exited_container_that_is_removed() {
    let h = SimHarness::start().await;
    let mut p = pleg(h.client(), Duration::from_secs(2));
    let pod = PodSpec::new("default", "web");
    let (_, ids) = h.run_pod(&pod, &[ContainerSpec::new("a"), ContainerSpec::new("b")]).await;
    p.relist().await;
    h.remove_container(&ids[0]).await; // running: killed and removed between relists
    h.stop_container(&ids[1]).await;
    p.relist().await;
    h.remove_container(&ids[1]).await; // already exited: only removed
    let evs = p.relist().await;
    assert_eq!(summary(&evs), [s("CONTAINER_REMOVED", "b")]);
    let pod_status = p.cache.get(&pod.uid).unwrap().status.clone().unwrap();
    assert!(pod_status.containers.is_empty());
}

#[tokio::test]
async fn relist_emits_died_then_removed_for_vanished_container() {
    let h = SimHarness::start().await;
    let mut p = pleg(h.client(), Duration::from_secs(2));
    let pod = PodSpec::new("default", "web");
    let (_, ids) = h.run_pod(&pod, &[ContainerSpec::new("a")]).await;
    p.relist().await;
    h.remove_container(&ids[0]).await;
    let evs = p.relist().await;
    assert_eq!(summary(&evs), [s("CONTAINER_DIED", "a"), s("CONTAINER_REMOVED", "a")]);
}

#[tokio::test]
async fn relist_emits_started_for_a_restart_with_a_new_attempt() {
    let h = SimHarness::start().await;
    let mut p = pleg(h.client(), Duration::from_secs(2));
    let pod = PodSpec::new("default", "web");
    let (sid, ids) = h.run_pod(&pod, &[ContainerSpec::new("app")]).await;
    p.relist().await;
    h.sim.exit_container(&ids[0], 1, "Error");
    let next = h.start_container(&pod, &sid, &ContainerSpec::new("app").attempt(1)).await;
    let evs = p.relist().await;
    assert_eq!(summary(&evs), [s("CONTAINER_STARTED", "app"), s("CONTAINER_DIED", "app")]);
    let started = evs.iter().find(|e| e.kind.as_str() == "CONTAINER_STARTED").unwrap();
    assert_eq!(started.container_id, next);
    let status = p.cache.get(&pod.uid).unwrap().status.clone().unwrap();
    assert_eq!(status.containers[0].attempt, 1, "newest attempt first");
    assert_eq!(status.containers[1].state, ContainerState::Exited);
}

#[tokio::test]
async fn sandbox_death_reports_its_containers_then_the_sandbox() {
    let h = SimHarness::start().await;
    let mut p = pleg(h.client(), Duration::from_secs(2));
    let pod = PodSpec::new("default", "web");
    let (sid, _) = h.run_pod(&pod, &[ContainerSpec::new("app")]).await;
    p.relist().await;
    assert!(h.sim.kill_sandbox(&sid));
    let evs = p.relist().await;
    assert_eq!(summary(&evs), [s("CONTAINER_DIED", "app"), s("CONTAINER_DIED", "(sandbox)")]);
    h.remove_pod(&sid).await;
    let evs = p.relist().await;
    assert_eq!(summary(&evs), [s("CONTAINER_REMOVED", "app"), s("CONTAINER_REMOVED", "(sandbox)")]);
    assert!(p.cache.get(&pod.uid).is_none(), "a pod gone from the runtime leaves the cache");
}

#[tokio::test]
async fn an_inspection_failure_holds_the_pods_events_and_stores_the_error_until_it_recovers() {
    let h = SimHarness::start().await;
    let mut p = pleg(h.client(), Duration::from_secs(2));
    let good = PodSpec::new("default", "good");
    let bad = PodSpec::new("default", "bad");
    h.run_pod(&good, &[ContainerSpec::new("app")]).await;
    let (_, bad_ids) = h.run_pod(&bad, &[ContainerSpec::new("app")]).await;
    h.sim.inject(Fault {
        method: "ContainerStatus",
        target: Some(bad_ids[0].clone()),
        action: FaultAction::Error(tonic::Code::Internal, "disk on fire".into()),
        times: Some(1),
    });
    let evs = p.relist().await;
    assert!(evs.iter().all(|e| *e.pod_uid == *good.uid), "the failing pod's events are held back");
    assert_eq!(evs.len(), 2);
    let entry = p.cache.get(&bad.uid).expect("the error is cached");
    assert!(entry.error.as_deref().unwrap().contains("disk on fire"), "{:?}", entry.error);
    assert!(entry.error.as_deref().unwrap().contains("ContainerStatus"), "errors name the call");
    let evs = p.relist().await;
    assert_eq!(summary(&evs), [s("CONTAINER_STARTED", "(sandbox)"), s("CONTAINER_STARTED", "app")]);
    assert!(evs.iter().all(|e| *e.pod_uid == *bad.uid));
    assert!(p.cache.get(&bad.uid).unwrap().error.is_none(), "recovery clears the error");
}

#[tokio::test]
async fn a_hung_inspection_does_not_stall_the_relist() {
    let h = SimHarness::start().await;
    let mut p = pleg(h.client(), Duration::from_millis(300));
    let stuck = PodSpec::new("default", "stuck");
    let (_, stuck_ids) = h.run_pod(&stuck, &[ContainerSpec::new("app")]).await;
    let others: Vec<_> = (0..5).map(|i| PodSpec::new("default", &format!("ok-{i}"))).collect();
    for pod in &others {
        h.run_pod(pod, &[ContainerSpec::new("app")]).await;
    }
    h.sim.inject(Fault {
        method: "ContainerStatus",
        target: Some(stuck_ids[0].clone()),
        action: FaultAction::Hang,
        times: None,
    });
    let started = Instant::now();
    let evs = p.relist().await;
    let took = started.elapsed();
    assert!(took < Duration::from_secs(2), "the relist waited {took:?} on a hung call");
    assert_eq!(evs.len(), 10, "every other pod's sandbox and container started");
    assert!(evs.iter().all(|e| *e.pod_uid != *stuck.uid));
    assert!(p.cache.get(&stuck.uid).unwrap().error.is_some());
    h.sim.clear_faults();
    let evs = p.relist().await;
    assert_eq!(evs.len(), 2);
    assert!(evs.iter().all(|e| *e.pod_uid == *stuck.uid));
}

#[tokio::test]
async fn a_failed_listing_changes_nothing_and_does_not_count_as_activity() {
    let h = SimHarness::start().await;
    let mut p = pleg(h.client(), Duration::from_secs(2));
    let pod = PodSpec::new("default", "web");
    h.run_pod(&pod, &[ContainerSpec::new("app")]).await;
    h.sim.inject(Fault {
        method: "ListContainers",
        target: None,
        action: FaultAction::Error(tonic::Code::Internal, "boom".into()),
        times: Some(1),
    });
    let err = p.pleg.relist().await.unwrap_err().to_string();
    assert!(err.contains("ListContainers") && err.contains(&h.endpoint), "{err}");
    assert!(p.drain().is_empty());
    assert!(p.cache.is_empty());
    assert!(p.cache.global_timestamp().is_none());
    assert!(!p.health.first_relist_done());
    assert_eq!(p.relist().await.len(), 2);
    assert!(p.health.first_relist_done());
}

#[tokio::test]
async fn get_newer_than_is_released_by_the_next_relist() {
    let h = SimHarness::start().await;
    let mut p = pleg(h.client(), Duration::from_secs(2));
    let pod = PodSpec::new("default", "web");
    p.relist().await;
    let min = Instant::now();
    let cache = p.cache.clone();
    let uid = pod.uid.clone();
    let waiter = tokio::spawn(async move { cache.get_newer_than(&uid, min).await });
    tokio::time::sleep(Duration::from_millis(20)).await;
    assert!(!waiter.is_finished());
    h.run_pod(&pod, &[ContainerSpec::new("app")]).await;
    p.relist().await;
    let fresh = tokio::time::timeout(Duration::from_secs(1), waiter).await.unwrap().unwrap();
    assert_eq!(fresh.entry.unwrap().status.as_ref().unwrap().containers.len(), 1);
}

#[tokio::test]
async fn a_runtime_socket_missing_at_start_is_retried_until_it_appears() {
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("late.sock");
    let endpoint = format!("unix://{}", socket.display());
    let client = plegd::cri::client::CriClient::new(
        &endpoint,
        support::fast_client(),
        plegd::cri::metrics::CriMetrics::register(&mut Default::default()),
    )
    .unwrap();
    let mut p = pleg(client, Duration::from_secs(2));
    let err = p.pleg.relist().await.unwrap_err().to_string();
    assert!(err.contains("ListPodSandbox") && err.contains(&endpoint), "{err}");
    // While the runtime is down, calls fail fast instead of dialing every time.
    let err = p.pleg.relist().await.unwrap_err().to_string();
    assert!(err.contains("unreachable"), "{err}");

    let sim = plegd::sim::SimRuntime::new();
    let listener = plegd::uds::bind(&socket, 0o660).await.unwrap();
    let shutdown = tokio_util::sync::CancellationToken::new();
    let server = tokio::spawn(plegd::sim::server::serve(sim.clone(), listener, shutdown.clone()));
    let pod = PodSpec::new("default", "web");
    sim.run_pod_sandbox(pod.run_request()).await.unwrap();
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        match p.pleg.relist().await {
            Ok(o) => {
                assert_eq!(o.pods, 1);
                break;
            }
            Err(e) => assert!(Instant::now() < deadline, "runtime never came back: {e}"),
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(p.drain().len(), 1);
    shutdown.cancel();
    server.await.unwrap().unwrap();
}

#[tokio::test]
async fn the_relister_loop_recovers_after_the_runtime_restarts() {
    let h = SimHarness::start().await;
    let p = pleg(h.client(), Duration::from_secs(2));
    let (mut events, cache) = (p.events, p.cache.clone());
    let shutdown = tokio_util::sync::CancellationToken::new();
    let task = tokio::spawn(p.pleg.run(shutdown.clone()));
    let pod = PodSpec::new("default", "web");
    let (_, ids) = h.run_pod(&pod, &[ContainerSpec::new("app")]).await;
    let first = tokio::time::timeout(Duration::from_secs(3), events.recv()).await.unwrap().unwrap();
    assert_eq!(first[0].kind.as_str(), "CONTAINER_STARTED");
    while tokio::time::timeout(Duration::from_millis(300), events.recv()).await.is_ok() {}

    // The runtime goes away; a container dies while it is down; it comes back.
    h.shutdown.cancel();
    h.tracker.close();
    h.tracker.wait().await;
    h.sim.exit_container(&ids[0], 137, "Error");
    tokio::time::sleep(Duration::from_millis(300)).await;
    let restarted = SimHarness {
        shutdown: tokio_util::sync::CancellationToken::new(),
        tracker: tokio_util::task::TaskTracker::new(),
        ..h
    };
    restarted.serve().await;
    let died = tokio::time::timeout(Duration::from_secs(5), events.recv()).await.expect("died after restart").unwrap();
    let died = &died[0];
    assert_eq!(died.kind.as_str(), "CONTAINER_DIED");
    assert_eq!(died.container_id, ids[0]);
    assert_eq!(cache.get(&pod.uid).unwrap().status.as_ref().unwrap().containers[0].exit_code, 137);
    shutdown.cancel();
    task.await.unwrap();
    restarted.stop().await;
}

#[tokio::test]
async fn a_relist_over_the_socket_handles_thousands_of_pods() {
    let h = SimHarness::start().await;
    let mut churn = plegd::sim::churn::Churn::new(
        h.sim.clone(),
        plegd::sim::churn::ChurnConfig { pods: 2000, containers_per_pod: 2, churn_per_sec: 0.0 },
    );
    churn.populate().await;
    assert_eq!(h.sim.counts().sandboxes, 2000);
    let mut p = pleg(h.client(), Duration::from_secs(10));
    let evs = p.relist().await;
    assert_eq!(evs.len(), 6000, "every sandbox and container started");
    assert_eq!(p.cache.len(), 2000);
    for _ in 0..20 {
        churn.step().await;
    }
    let evs = p.relist().await;
    assert!(!evs.is_empty());
    assert!(p.relist().await.is_empty(), "a quiet runtime gives a quiet relist");
    assert_eq!(p.cache.len(), h.sim.counts().sandboxes);
}

#[tokio::test]
async fn the_projected_listing_over_the_socket_is_the_full_one_without_labels() {
    let h = SimHarness::start().await;
    for i in 0..3 {
        h.run_pod(
            &PodSpec::new("default", &format!("web-{i}")),
            &[ContainerSpec::new("app"), ContainerSpec::new("db")],
        )
        .await;
    }
    let c = h.client();
    let (sandboxes, containers) = plegd::pleg::list::list_everything(&c).await.unwrap();
    let full_sandboxes = c.list_pod_sandboxes(None).await.unwrap();
    let full_containers = c.list_containers(None).await.unwrap();
    assert_eq!((sandboxes.len(), containers.len()), (3, 6));
    assert!(full_containers.iter().all(|c| !c.labels.is_empty()), "the runtime does send labels");
    let stripped: Vec<_> = full_containers
        .into_iter()
        .map(|c| plegd::proto::runtime::Container::from(plegd::cri::brief::BriefContainer::from(c)))
        .collect();
    assert_eq!(containers, stripped);
    let stripped: Vec<_> = full_sandboxes
        .into_iter()
        .map(|s| plegd::proto::runtime::PodSandbox::from(plegd::cri::brief::BriefSandbox::from(s)))
        .collect();
    assert_eq!(sandboxes, stripped);
}

#[tokio::test]
async fn an_unchanged_listing_is_not_diffed_but_still_advances_the_cache_time() {
    let h = SimHarness::start().await;
    let mut p = pleg(h.client(), Duration::from_secs(2));
    let pod = PodSpec::new("default", "web");
    let (_, ids) = h.run_pod(&pod, &[ContainerSpec::new("app")]).await;
    let first = p.pleg.relist().await.unwrap();
    assert!(!first.unchanged && first.events == 2, "{first:?}");
    p.drain();
    let t1 = p.cache.global_timestamp().unwrap();
    let again = p.pleg.relist().await.unwrap();
    assert!(again.unchanged && again.events == 0 && again.inspected == 0, "{again:?}");
    assert_eq!(again.pods, 1);
    assert!(p.cache.global_timestamp().unwrap() > t1, "readers waiting on a newer status still wake");
    // A change in the listing is diffed.
    h.sim.exit_container(&ids[0], 3, "Error");
    let died = p.pleg.relist().await.unwrap();
    assert!(!died.unchanged && died.events == 1, "{died:?}");
    assert_eq!(summary(&p.drain()), [s("CONTAINER_DIED", "app")]);
}

/// Every call the relister makes answers after `rtt`, so virtual time counts round trips.
fn slow_calls(sim: &plegd::sim::SimRuntime, rtt: Duration) {
    for method in ["ListPodSandbox", "ListContainers", "PodSandboxStatus", "ContainerStatus"] {
        sim.inject(Fault { method, target: None, action: FaultAction::Delay(rtt), times: None });
    }
}

#[tokio::test(start_paused = true)]
async fn a_hinted_pod_is_read_in_one_round_trip_when_the_hint_names_what_changed() {
    use plegd::pleg::generic::GenericPleg;
    use plegd::pleg::health::PlegHealth;
    use plegd::pleg::schedule::{Reason, Why};
    use std::collections::BTreeSet;

    let sim = plegd::sim::SimRuntime::new();
    let (writer, cache) = plegd::cache::new();
    let (tx, mut events) = tokio::sync::mpsc::channel(1000);
    let mut pleg = GenericPleg::new(
        sim.clone(),
        writer,
        tx,
        PlegHealth::new(Duration::from_secs(180)),
        plegd::pleg::metrics::PlegMetrics::register(&mut Default::default()),
        Default::default(),
        Default::default(),
    );
    let pod = PodSpec::new("default", "web");
    let sid = sim.run_pod_sandbox(pod.run_request()).await.unwrap();
    let first = sim.create_container(pod.create_request(&sid, &ContainerSpec::new("app"))).await.unwrap();
    sim.start_container(&first).await.unwrap();
    pleg.relist().await.unwrap();
    while events.try_recv().is_ok() {}

    let rtt = Duration::from_millis(10);
    let hint = |containers: &[&str]| Why {
        sandbox_ids: BTreeSet::from([sid.clone()]),
        container_ids: containers.iter().map(|c| c.to_string()).collect(),
        ..Why::because(Reason::StreamEvent, Instant::now())
    };
    let read = async |pleg: &mut GenericPleg<plegd::sim::SimRuntime>, h: Why| {
        let started = Instant::now();
        let outcome = pleg.read_pods(vec![(pod.uid.clone(), h)]).await;
        assert_eq!((outcome.pods, outcome.failed), (1, 0));
        started.elapsed()
    };
    slow_calls(&sim, rtt);

    // A known container exits: its status is read with the listing.
    assert!(sim.exit_container(&first, 1, "Error"));
    assert_eq!(read(&mut pleg, hint(&[&first])).await, rtt, "one round trip");
    let died = events.try_recv().expect("an event").remove(0);
    assert_eq!((died.kind.as_str(), died.container_id.as_str()), ("CONTAINER_DIED", first.as_str()));
    let cached = cache.get(&pod.uid).unwrap().status.clone().unwrap();
    assert_eq!(cached.containers.iter().find(|c| c.id == first).map(|c| c.exit_code), Some(1));

    // A new container the hint names (the runtime's event carries its id): one round trip.
    sim.clear_faults();
    let second = sim.create_container(pod.create_request(&sid, &ContainerSpec::new("side"))).await.unwrap();
    sim.start_container(&second).await.unwrap();
    slow_calls(&sim, rtt);
    assert_eq!(read(&mut pleg, hint(&[&second])).await, rtt, "one round trip");
    assert_eq!(events.try_recv().expect("an event")[0].container_id, second);

    // A new container nobody named is still found, at the cost of a second round trip.
    sim.clear_faults();
    let third = sim.create_container(pod.create_request(&sid, &ContainerSpec::new("late"))).await.unwrap();
    sim.start_container(&third).await.unwrap();
    slow_calls(&sim, rtt);
    assert_eq!(read(&mut pleg, hint(&[])).await, 2 * rtt, "two round trips");
    assert_eq!(events.try_recv().expect("an event")[0].container_id, third);
}

#[tokio::test]
async fn the_events_of_one_pod_read_reach_the_publisher_as_one_message() {
    // The journal commits whole messages: the pod status the events carry (the view
    // that seeds the relister after a restart) never reaches the disk without all of
    // the read's events, so a crash between two of them cannot hide one.
    let h = SimHarness::start().await;
    let mut p = pleg(h.client(), Duration::from_secs(2));
    let pod = PodSpec::new("default", "two");
    let (_, ids) = h.run_pod(&pod, &[ContainerSpec::new("a"), ContainerSpec::new("b")]).await;
    p.pleg.relist().await.unwrap();
    let first = p.events.try_recv().expect("a message");
    assert_eq!(first.len(), 3, "the sandbox and both containers started, in one message: {first:?}");
    assert!(p.events.try_recv().is_err(), "and nothing else");
    h.stop_container(&ids[0]).await;
    h.stop_container(&ids[1]).await;
    p.pleg.relist().await.unwrap();
    let second = p.events.try_recv().expect("a message");
    assert_eq!(second.iter().filter(|e| e.kind.as_str() == "CONTAINER_DIED").count(), 2, "{second:?}");
    h.stop().await;
}

/// Found by the hour-long soak on containerd 2.1, where it left an empty ghost in
/// `ListPods`: a pod listed, then removed while plegd reads its statuses, reads NotFound
/// for every object. Published as a pod with nothing in it, it stayed in the journal's
/// view until a later read found it gone — the next full relist, 300 s away with the
/// event stream up, or never when plegd restarted in between and was seeded with it
/// (3f989ae heals that). Such a read is a pod gone. Each schedule slows the status
/// reads, removes the pod at a different point of one, in `generic` mode (the full
/// relist's read) and `auto` (the stream's targeted read), and in some restarts plegd on
/// its state dir the moment the death is out.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pod_removed_while_plegd_reads_it_leaves_no_ghost_in_the_view_or_list_pods_even_across_a_restart() {
    use api::watch_event::Kind;
    use plegd::pleg::evented::Mode;
    use plegd::proto::plegd as api;
    let mut raced = 0;
    let mut schedules = Vec::new();
    for mode in [Mode::Generic, Mode::Auto] {
        for (ms, restart) in [(50u64, false), (250, false), (450, false), (250, true), (450, true)] {
            schedules.push((mode, ms, restart));
        }
    }
    for (n, (mode, remove_after_ms, restart)) in schedules.into_iter().enumerate() {
        let state = tempfile::tempdir().unwrap();
        let dir = state.path().to_owned();
        let tune = move |c: &mut plegd::config::RunConfig| {
            c.pleg.mode = mode;
            c.state_dir = Some(dir.clone());
        };
        let mut p = support::start_plegd(tune.clone()).await;
        let mut watch = p.client().watch(api::WatchRequest::default()).await.expect("watch").into_inner();
        let pod = PodSpec::new("default", &format!("racy-{n}"));
        let (sid, ids) = p.h.run_pod(&pod, &[ContainerSpec::new("main")]).await;
        let listed = |p: &support::Plegd| p.app.journal().pods().iter().any(|s| *s.uid == *pod.uid);
        let deadline = Instant::now() + Duration::from_secs(10);
        while !listed(&p) {
            assert!(Instant::now() < deadline, "plegd never published the pod");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        // Every status read now takes 500 ms; the listing stays quick.
        for method in ["PodSandboxStatus", "ContainerStatus"] {
            let action = FaultAction::Delay(Duration::from_millis(500));
            p.h.sim.inject(Fault { method, target: None, action, times: None });
        }
        assert!(p.h.sim.exit_container(&ids[0], 0, "Completed"));
        // The next relist (200 ms apart), or the stream's STOPPED, has plegd read the
        // pod, slowly; the pod goes while it does.
        tokio::time::sleep(Duration::from_millis(remove_after_ms)).await;
        p.h.sim.stop_pod_sandbox(&sid).await.unwrap();
        p.h.sim.remove_pod_sandbox(&sid).await.unwrap();
        // What a watcher saw of the pod: (type, whether the event carried a pod, and
        // whether that pod had anything in it).
        let mut seen = Vec::new();
        let mut restarted = false;
        while let Ok(Ok(Some(m))) = tokio::time::timeout(Duration::from_secs(2), watch.message()).await {
            if let Some(Kind::Event(e)) = m.kind
                && e.pod_uid == *pod.uid
            {
                let filled = e.pod.as_ref().map(|s| !s.sandboxes.is_empty() || !s.containers.is_empty());
                seen.push((e.r#type().as_str_name(), filled));
                if restart && e.r#type() == api::LifecycleEventType::ContainerDied {
                    // The worst moment: the death is out, the removal perhaps not.
                    let (_, metrics) = support::http(p.app.admin_addr(), "GET", "/metrics").await;
                    raced += not_found_reads(&metrics);
                    p = support::start_plegd_on(p.stop_plegd().await, tune.clone()).await;
                    restarted = true;
                    break;
                }
            }
        }
        if !restarted {
            let (_, metrics) = support::http(p.app.admin_addr(), "GET", "/metrics").await;
            raced += not_found_reads(&metrics);
        }
        println!("{mode:?}, removed {remove_after_ms} ms into the slowed read, restart {restart}: {seen:?}");
        assert!(
            seen.iter().all(|(_, filled)| *filled != Some(false)),
            "{mode:?}, removed after {remove_after_ms} ms: no event carries a pod with nothing in it: {seen:?}"
        );
        p.h.sim.clear_faults();
        let deadline = Instant::now() + Duration::from_secs(10);
        while listed(&p) || p.app.cache().get(&pod.uid).is_some() {
            assert!(
                Instant::now() < deadline,
                "{mode:?}, removed {remove_after_ms} ms into the read, restarted {restarted}: the pod the runtime no longer has is still in the view ({:?}) or the cache ({:?}); a watcher saw {seen:?}",
                p.app.journal().pods().iter().find(|s| *s.uid == *pod.uid),
                p.app.cache().get(&pod.uid)
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        let pods = p.client().list_pods(api::ListPodsRequest::default()).await.unwrap().into_inner().pods;
        assert!(pods.iter().all(|s| s.uid != *pod.uid), "ListPods lets it go: {pods:?}");
        assert!(p.h.sim.list_pod_sandbox(None).await.unwrap().is_empty(), "the runtime has no pod");
        if !restarted {
            assert!(seen.iter().any(|(_, filled)| filled.is_none()), "an event without a pod lets it go: {seen:?}");
        }
        p.stop().await;
    }
    assert!(raced > 0, "in some schedules a status read found its object removed: the race the test is about");
}

/// Status reads that found their object removed, from plegd's `/metrics`.
fn not_found_reads(metrics: &str) -> u64 {
    metrics
        .lines()
        .filter(|l| l.starts_with("plegd_cri_requests_total{") && l.contains("Status\"") && l.contains("NotFound"))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum::<f64>() as u64
}

/// A runtime that says nothing of its containers' processes in their verbose status
/// (no `info`, as the trait's defaults answer): the simulated runtime's calls, counted
/// by the simulator, with none of its verbose facts.
#[derive(Clone)]
struct NoPids(plegd::sim::SimRuntime);

impl RuntimeService for NoPids {
    fn endpoint(&self) -> &str {
        self.0.endpoint()
    }
    async fn version(&self) -> Result<plegd::proto::runtime::VersionResponse, plegd::cri::CriError> {
        RuntimeService::version(&self.0).await
    }
    async fn list_pod_sandboxes(
        &self,
        filter: Option<plegd::proto::runtime::PodSandboxFilter>,
    ) -> Result<Vec<plegd::proto::runtime::PodSandbox>, plegd::cri::CriError> {
        RuntimeService::list_pod_sandboxes(&self.0, filter).await
    }
    async fn pod_sandbox_status(
        &self,
        id: &str,
    ) -> Result<plegd::proto::runtime::PodSandboxStatus, plegd::cri::CriError> {
        RuntimeService::pod_sandbox_status(&self.0, id).await
    }
    async fn list_containers(
        &self,
        filter: Option<plegd::proto::runtime::ContainerFilter>,
    ) -> Result<Vec<plegd::proto::runtime::Container>, plegd::cri::CriError> {
        RuntimeService::list_containers(&self.0, filter).await
    }
    async fn container_status(&self, id: &str) -> Result<plegd::proto::runtime::ContainerStatus, plegd::cri::CriError> {
        RuntimeService::container_status(&self.0, id).await
    }
    async fn container_events(&self) -> Result<plegd::cri::EventStream, plegd::cri::CriError> {
        RuntimeService::container_events(&self.0).await
    }
    async fn remove_container(&self, id: &str) -> Result<(), plegd::cri::CriError> {
        RuntimeService::remove_container(&self.0, id).await
    }
}

#[tokio::test]
async fn a_runtime_that_names_no_pid_is_asked_one_container_status_per_container_per_read() {
    // The kubelet's TestRelistWithCache and TestRemoveCacheEntry: one ContainerStatus
    // per container per read, whatever the runtime's verbose status holds.
    use plegd::pleg::generic::GenericPleg;
    use plegd::pleg::health::PlegHealth;
    use plegd::pleg::schedule::{Reason, Why};
    use std::collections::BTreeSet;

    let sim = plegd::sim::SimRuntime::new();
    let (writer, _cache) = plegd::cache::new();
    let (tx, mut events) = tokio::sync::mpsc::channel(1000);
    let mut pleg = GenericPleg::new(
        NoPids(sim.clone()),
        writer,
        tx,
        PlegHealth::new(Duration::from_secs(180)),
        plegd::pleg::metrics::PlegMetrics::register(&mut Default::default()),
        Default::default(),
        Default::default(),
    );
    let pod = PodSpec::new("default", "web");
    let sid = sim.run_pod_sandbox(pod.run_request()).await.unwrap();
    for name in ["app", "log"] {
        let id = sim.create_container(pod.create_request(&sid, &ContainerSpec::new(name))).await.unwrap();
        sim.start_container(&id).await.unwrap();
    }
    let statuses = || sim.calls("ContainerStatus");

    let before = statuses();
    pleg.relist().await.unwrap();
    assert_eq!(statuses() - before, 2, "a full relist reads each new container once");
    assert_eq!(events.try_recv().expect("events").len(), 3);

    // A new container the runtime's event names: the pod's read asks each of its three
    // containers once, the new one included.
    let third = sim.create_container(pod.create_request(&sid, &ContainerSpec::new("late"))).await.unwrap();
    sim.start_container(&third).await.unwrap();
    let hint = Why {
        sandbox_ids: BTreeSet::from([sid.clone()]),
        container_ids: BTreeSet::from([third.clone()]),
        ..Why::because(Reason::StreamEvent, Instant::now())
    };
    let before = statuses();
    let outcome = pleg.read_pods(vec![(pod.uid.clone(), hint)]).await;
    assert_eq!((outcome.pods, outcome.failed), (1, 0));
    assert_eq!(statuses() - before, 3, "a targeted read reads each container once");
    assert_eq!(events.try_recv().expect("an event")[0].container_id, third);
}

#[tokio::test]
async fn an_idle_relist_over_the_socket_asks_for_the_listings_hash_and_lists_in_full_only_after_a_change() {
    let h = SimHarness::start().await;
    let mut p = pleg(h.client(), Duration::from_secs(2));
    let pod = PodSpec::new("default", "web");
    let (_, ids) = h.run_pod(&pod, &[ContainerSpec::new("app"), ContainerSpec::new("side")]).await;
    let lists = || (h.sim.calls("ListPodSandbox"), h.sim.calls("ListContainers"));
    assert!(!p.pleg.relist().await.unwrap().unchanged);
    // The first unchanged relist follows a change: it lists in full.
    let before = lists();
    assert!(p.pleg.relist().await.unwrap().unchanged);
    assert_eq!(lists(), (before.0 + 1, before.1 + 1));
    // From then on each relist is one call per answer, hashed as it arrives.
    for _ in 0..3 {
        let before = lists();
        let idle = p.pleg.relist().await.unwrap();
        assert!(idle.unchanged && idle.events == 0, "{idle:?}");
        assert_eq!(lists(), (before.0 + 1, before.1 + 1));
    }
    // A change after idleness costs one more listing, and is diffed as any change.
    h.sim.exit_container(&ids[1], 2, "Error");
    p.drain();
    let before = lists();
    let died = p.pleg.relist().await.unwrap();
    assert!(!died.unchanged && died.events == 1, "{died:?}");
    assert_eq!(summary(&p.drain()), [s("CONTAINER_DIED", "side")]);
    assert_eq!(lists(), (before.0 + 2, before.1 + 2), "the hashes, then the listing");
    // A failing answer fails the relist and is not taken for an unchanged listing.
    assert!(p.pleg.relist().await.unwrap().unchanged);
    h.sim.inject(Fault {
        method: "ListContainers",
        target: None,
        action: FaultAction::Error(tonic::Code::Internal, "boom".into()),
        times: Some(1),
    });
    h.sim.exit_container(&ids[0], 0, "Completed");
    let err = p.pleg.relist().await.unwrap_err().to_string();
    assert!(err.contains("ListContainers") && err.contains("boom"), "{err}");
    let before = lists();
    let after = p.pleg.relist().await.unwrap();
    assert_eq!(lists(), (before.0 + 1, before.1 + 1), "after a failed hashed listing, a full one at once");
    assert!(!after.unchanged && after.events == 1, "{after:?}");
    assert_eq!(summary(&p.drain()), [s("CONTAINER_DIED", "app")]);
}

#[tokio::test]
async fn a_runtime_that_stalls_in_a_hashed_listing_fails_that_relist_at_its_deadline_and_the_next_lists_in_full() {
    let h = SimHarness::start().await;
    let mut p = pleg(h.client(), Duration::from_secs(2));
    let pod = PodSpec::new("default", "web");
    let (_, ids) = h.run_pod(&pod, &[ContainerSpec::new("app")]).await;
    let lists = || h.sim.calls("ListContainers");
    p.pleg.relist().await.unwrap();
    assert!(p.pleg.relist().await.unwrap().unchanged, "idle: the next relist asks for the hash");
    p.drain();
    // The container dies while the runtime's listing never answers.
    h.sim.exit_container(&ids[0], 9, "Error");
    h.sim.inject(Fault { method: "ListContainers", target: None, action: FaultAction::Hang, times: Some(1) });
    let started = std::time::Instant::now();
    let err = p.pleg.relist().await.unwrap_err().to_string();
    assert!(err.contains("ListContainers"), "{err}");
    assert!(started.elapsed() < Duration::from_secs(10), "the call's 500 ms deadline ends it: {:?}", started.elapsed());
    let before = lists();
    let died = p.pleg.relist().await.unwrap();
    assert!(!died.unchanged && died.events == 1, "{died:?}");
    assert_eq!(summary(&p.drain()), [s("CONTAINER_DIED", "app")]);
    assert_eq!(lists(), before + 1, "a full listing at once, not the hash again");
}

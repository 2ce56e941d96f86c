use super::*;
use crate::sim::{Fault, FaultAction};

/// A relister of `sim` with the default configuration, its own cache, sending on `tx`.
fn relister(
    sim: &crate::sim::SimRuntime,
    tx: mpsc::Sender<Vec<PodLifecycleEvent>>,
) -> GenericPleg<crate::sim::SimRuntime> {
    let (writer, _cache) = crate::cache::new();
    let metrics = PlegMetrics::register(&mut Default::default());
    let health = PlegHealth::new(Duration::from_secs(180));
    GenericPleg::new(sim.clone(), writer, tx, health, metrics, PlegConfig::default(), Host::default())
}

/// Every event sent so far.
fn drain(rx: &mut mpsc::Receiver<Vec<PodLifecycleEvent>>) -> Vec<PodLifecycleEvent> {
    let mut events = Vec::new();
    while let Ok(batch) = rx.try_recv() {
        events.extend(batch);
    }
    events
}

/// The kubelet keeps the pods to inspect again at the next relist in a set
/// (`podsToReinspect`); plegd parked them in its schedule an hour ahead, a time
/// standing in for "at the next full relist".
#[tokio::test(start_paused = true)]
async fn a_read_that_fails_while_the_stream_is_down_waits_in_a_set_for_the_next_full_relist() {
    let sim = crate::sim::SimRuntime::new();
    let pod = crate::cri::spec::PodSpec::new("ns", "p");
    let sid = sim.run_pod_sandbox(pod.run_request()).await.unwrap();
    let (writer, _cache) = crate::cache::new();
    let (tx, _rx) = mpsc::channel(64);
    let metrics = PlegMetrics::register(&mut Default::default());
    let health = PlegHealth::new(Duration::from_secs(180));
    let mut pleg = GenericPleg::new(sim.clone(), writer, tx, health, metrics, PlegConfig::default(), Host::default());
    let fails = FaultAction::Error(tonic::Code::Unavailable, "down".into());
    sim.inject(Fault { method: "PodSandboxStatus", target: Some(sid.clone()), action: fails, times: None });
    let outcome = pleg.relist().await.unwrap();
    assert_eq!(outcome.failed, 1, "{outcome:?}");
    assert!(pleg.books.failed.contains(&pod.uid), "waits in the set");
    assert!(!pleg.reads.any(|_, why| why.has(Reason::FailedRead)), "nothing parked in the schedule");
    sim.clear_faults();
    let outcome = pleg.relist().await.unwrap();
    assert_eq!(outcome.failed, 0, "{outcome:?}");
    assert!(pleg.books.failed.is_empty(), "the next full relist read it");
}

/// Found in a soak: a relist decided a container's transitions from its listing and
/// published the status read after it. A container that exited in between was told
/// as started, carrying its exit; the record committed it running while the journal's
/// view held it exited, and a restart seeded from that view never told its death.
/// Now the read is the later word: the death is told in that read, and a restart
/// right after it finds nothing untold.
#[tokio::test(start_paused = true)]
async fn a_container_that_exits_or_goes_between_the_listing_and_its_read_is_told_in_that_read_and_after_a_restart_nothing_is_missing()
 {
    use crate::cri::spec::{ContainerSpec, PodSpec};
    use crate::model::event::EventType::{self, *};
    let sim = crate::sim::SimRuntime::new();
    let pod = PodSpec::new("ns", "p");
    let sid = sim.run_pod_sandbox(pod.run_request()).await.unwrap();
    let (tx, mut rx) = mpsc::channel(64);
    let mut pleg = relister(&sim, tx);
    pleg.relist().await.unwrap();
    let mut view = drain(&mut rx).last().and_then(|e| e.pod.clone()).expect("the pod is published");
    let kinds = |events: &[PodLifecycleEvent], id: &str| -> Vec<EventType> {
        events.iter().filter(|e| e.container_id == id).map(|e| e.kind).collect()
    };
    // `exits` exits after the listing shows it running; `goes` is removed after the
    // listing shows it.
    let mut ids = Vec::new();
    for name in ["exits", "goes"] {
        let id = sim.create_container(pod.create_request(&sid, &ContainerSpec::new(name))).await.unwrap();
        sim.start_container(&id).await.unwrap();
        ids.push(id);
    }
    let (exits, goes) = (ids[0].clone(), ids[1].clone());
    for id in &ids {
        let slow = FaultAction::Delay(Duration::from_millis(100));
        sim.inject(Fault { method: "ContainerStatus", target: Some(id.clone()), action: slow, times: Some(1) });
    }
    let meanwhile = async {
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert!(sim.exit_container(&exits, 3, "Error"));
        sim.stop_container(&goes).await.unwrap();
        sim.remove_container_cri(&goes).await.unwrap();
    };
    let (relisted, ()) = tokio::join!(pleg.relist(), meanwhile);
    relisted.unwrap();
    let events = drain(&mut rx);
    assert_eq!(kinds(&events, &exits), [ContainerStarted, ContainerDied], "{events:#?}");
    assert_eq!(kinds(&events, &goes), [ContainerStarted, ContainerDied, ContainerRemoved], "{events:#?}");
    let died = events.iter().find(|e| e.container_id == exits && e.kind == ContainerDied).unwrap();
    let told = died.pod.as_deref().and_then(|p| p.containers.iter().find(|c| c.id == exits)).unwrap();
    assert_eq!((told.state, told.exit_code), (ContainerState::Exited, 3), "with the runtime's exit code");
    view = events.iter().rev().find_map(|e| e.pod.clone()).unwrap_or(view);
    assert!(pleg.records.old(&pod.uid).is_some_and(|o| o.holds(&view)), "the record commits what was published");

    // plegd restarts at once, seeded from what it published: nothing more to tell.
    let (tx, mut rx) = mpsc::channel(64);
    let mut restarted = relister(&sim, tx).with_seed(vec![view]);
    restarted.relist().await.unwrap();
    let after = drain(&mut rx);
    assert!(after.iter().all(|e| e.container_id != exits && e.container_id != goes), "{after:#?}");
}

/// Found by the review of the intake split: a final status heard after the full
/// relist's listing and before its pod's read began is of a container the listing
/// cannot show. Settled against that read, the container would die and go while it
/// still exists; it waits for a read whose listing can show it.
#[tokio::test(start_paused = true)]
async fn a_final_status_heard_after_the_listing_waits_for_a_read_that_can_show_its_container() {
    use crate::cri::spec::{ContainerSpec, PodSpec};
    use crate::model::event::EventType;
    let sim = crate::sim::SimRuntime::new();
    // Two pods, read one after the other in UID order (one read at a time).
    let (mut a, mut b) = (PodSpec::new("ns", "a"), PodSpec::new("ns", "b"));
    (a.uid, b.uid) = ("0000-a".into(), "0000-b".into());
    let sa = sim.run_pod_sandbox(a.run_request()).await.unwrap();
    let sb = sim.run_pod_sandbox(b.run_request()).await.unwrap();
    let (writer, _cache) = crate::cache::new();
    let (tx, mut rx) = mpsc::channel(64);
    let metrics = PlegMetrics::register(&mut Default::default());
    let health = PlegHealth::new(Duration::from_secs(180));
    let cfg = PlegConfig { concurrency: 1, ..Default::default() };
    let mut pleg = GenericPleg::new(sim.clone(), writer, tx, health, metrics, cfg, Host::default());
    pleg.relist().await.unwrap();
    // Both pods change: the next full relist reads both, a first, slowly.
    for (pod, sid) in [(&a, &sa), (&b, &sb)] {
        let id = sim.create_container(pod.create_request(sid, &ContainerSpec::new("main"))).await.unwrap();
        sim.start_container(&id).await.unwrap();
    }
    while rx.try_recv().is_ok() {}
    let slow = FaultAction::Delay(Duration::from_millis(200));
    sim.inject(Fault { method: "PodSandboxStatus", target: Some(sa.clone()), action: slow, times: Some(1) });
    let inbox = pleg.inbox();
    let late = async {
        // Listed at 0; b's read begins at 200 ms. In between, b gets a container
        // that starts and stops, and the stream's final status for it is heard.
        tokio::time::sleep(Duration::from_millis(100)).await;
        let c = sim.create_container(b.create_request(&sb, &ContainerSpec::new("late"))).await.unwrap();
        sim.start_container(&c).await.unwrap();
        assert!(sim.exit_container(&c, 3, "Error"));
        let ev = crate::proto::runtime::ContainerEventResponse {
            container_id: c.clone(),
            container_event_type: crate::proto::runtime::ContainerEventType::ContainerStoppedEvent as i32,
            created_at: 1,
            pod_sandbox_status: Some(sim.pod_sandbox_status(&sb).await.unwrap()),
            containers_statuses: vec![sim.container_status_cri(&c).await.unwrap()],
        };
        inbox.final_status(super::super::final_statuses::FinalStatus::of_event(&ev).expect("a final status"));
        c
    };
    let (relisted, c) = tokio::join!(pleg.relist(), late);
    relisted.unwrap();
    let mut events = Vec::new();
    while let Ok(batch) = rx.try_recv() {
        events.extend(batch);
    }
    let of = |kind| events.iter().filter(|e| e.container_id == c && e.kind == kind).count();
    assert_eq!((of(EventType::ContainerDied), of(EventType::ContainerRemoved)), (0, 0), "{events:#?}");
    assert!(!pleg.books.final_statuses.lock().is_empty(), "its final status waits");
    // The next full relist lists it, dead: it dies once, with its exit code, and is
    // not removed.
    pleg.relist().await.unwrap();
    let mut events = Vec::new();
    while let Ok(batch) = rx.try_recv() {
        events.extend(batch);
    }
    let died: Vec<_> = events.iter().filter(|e| e.container_id == c && e.kind == EventType::ContainerDied).collect();
    assert_eq!(died.len(), 1, "{events:#?}");
    assert!(events.iter().all(|e| e.container_id != c || e.kind != EventType::ContainerRemoved));
}

/// What an adversarial read of the later word found: late steps keep a pod's story in
/// order (a sandbox's death after its containers' events), and a pod whose every object
/// went between the listing and the read leaves the records with its removals told, so a
/// restart from what was published has nothing left to tell either.
#[tokio::test(start_paused = true)]
async fn a_sandbox_death_stays_after_late_container_deaths_and_a_pod_gone_during_its_read_leaves_nothing_untold() {
    use crate::cri::spec::{ContainerSpec, PodSpec};
    use crate::model::event::EventType::*;
    let sim = crate::sim::SimRuntime::new();
    let pod = PodSpec::new("ns", "p");
    let sid = sim.run_pod_sandbox(pod.run_request()).await.unwrap();
    let c = sim.create_container(pod.create_request(&sid, &ContainerSpec::new("main"))).await.unwrap();
    sim.start_container(&c).await.unwrap();
    let delay = |id: &str| {
        let slow = FaultAction::Delay(Duration::from_millis(100));
        sim.inject(Fault { method: "ContainerStatus", target: Some(id.to_owned()), action: slow, times: Some(1) });
    };
    let (tx, mut rx) = mpsc::channel(64);
    let mut pleg = relister(&sim, tx);
    pleg.relist().await.unwrap();
    drain(&mut rx);

    // The sandbox dies (its container with it) before the listing; the container is
    // removed before the read.
    assert!(sim.kill_sandbox(&sid));
    delay(&c);
    let meanwhile = async {
        tokio::time::sleep(Duration::from_millis(50)).await;
        sim.remove_container_cri(&c).await.unwrap();
    };
    let (relisted, ()) = tokio::join!(pleg.relist(), meanwhile);
    relisted.unwrap();
    let told: Vec<_> = drain(&mut rx).iter().map(|e| (e.container_id.clone(), e.kind)).collect();
    let want = [(c.clone(), ContainerDied), (c.clone(), ContainerRemoved), (sid.clone(), ContainerDied)];
    assert_eq!(told, want, "the sandbox goes last");

    // Another pod: a new container makes it read again; before the read, the pod is
    // taken away.
    let other = PodSpec::new("ns", "other");
    let s2 = sim.run_pod_sandbox(other.run_request()).await.unwrap();
    pleg.relist().await.unwrap();
    drain(&mut rx);
    let late = sim.create_container(other.create_request(&s2, &ContainerSpec::new("late"))).await.unwrap();
    delay(&late);
    let slow = FaultAction::Delay(Duration::from_millis(100));
    sim.inject(Fault { method: "PodSandboxStatus", target: Some(s2.clone()), action: slow, times: Some(1) });
    let meanwhile = async {
        tokio::time::sleep(Duration::from_millis(50)).await;
        sim.remove_pod_sandbox(&s2).await.unwrap();
    };
    let (relisted, ()) = tokio::join!(pleg.relist(), meanwhile);
    relisted.unwrap();
    let events = drain(&mut rx);
    let told: Vec<_> = events.iter().map(|e| (e.container_id.clone(), e.kind)).collect();
    let want = [
        (late.clone(), ContainerChanged),
        (late.clone(), ContainerDied),
        (late.clone(), ContainerRemoved),
        (s2.clone(), ContainerDied),
        (s2.clone(), ContainerRemoved),
    ];
    assert_eq!(told, want, "every removal told in the read that found the pod gone");
    assert!(events.iter().all(|e| e.pod.is_none()), "a pod gone: no event carries it");
    assert!(pleg.records.old(&other.uid).is_none(), "its record is gone with it");

    // Restarted from what was published (the other pod let go): nothing more to tell.
    let view = pleg.cache.reader().get(&pod.uid).and_then(|e| e.status.clone()).expect("the first pod is there");
    let (tx, mut rx) = mpsc::channel(64);
    let mut restarted = relister(&sim, tx).with_seed(vec![view]);
    restarted.relist().await.unwrap();
    assert!(drain(&mut rx).is_empty());
}

/// containerd answers NotFound for a sandbox whose record it lost while it still lists
/// it: the sandbox stays as listed (nothing told of it, and nothing again at the next
/// relist), while a container read NotFound is gone.
#[tokio::test(start_paused = true)]
async fn a_sandbox_read_not_found_while_listed_stays_as_listed_and_is_told_nothing_twice() {
    use crate::cri::spec::{ContainerSpec, PodSpec};
    let sim = crate::sim::SimRuntime::new();
    let pod = PodSpec::new("ns", "p");
    let sid = sim.run_pod_sandbox(pod.run_request()).await.unwrap();
    let (tx, mut rx) = mpsc::channel(64);
    let mut pleg = relister(&sim, tx);
    pleg.relist().await.unwrap();
    let lost = FaultAction::Error(tonic::Code::NotFound, "an error occurred when try to find sandbox".into());
    sim.inject(Fault { method: "PodSandboxStatus", target: Some(sid.clone()), action: lost, times: None });
    // A new container makes the pod read again.
    let c = sim.create_container(pod.create_request(&sid, &ContainerSpec::new("main"))).await.unwrap();
    sim.start_container(&c).await.unwrap();
    while rx.try_recv().is_ok() {}
    for _ in 0..3 {
        pleg.relist().await.unwrap();
    }
    let events = drain(&mut rx);
    let told: Vec<_> = events.iter().map(|e| (e.container_id.clone(), e.kind)).collect();
    assert_eq!(told, [(c.clone(), crate::model::event::EventType::ContainerStarted)], "{events:#?}");
    let record = pleg.records.old(&pod.uid).expect("the pod is held");
    assert!(record.sandboxes.iter().any(|s| s.id == sid), "the sandbox stays as listed");
}

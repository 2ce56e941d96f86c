//! The simulated runtime answers like containerd: call semantics, errors, idempotence
//! and the order of `GetContainerEvents`, all over a real unix socket.

mod support;

use std::time::Duration;

use futures_util::StreamExt;
use plegd::cri::RuntimeService;
use plegd::cri::spec::{ContainerSpec, PodSpec};
use plegd::proto::runtime as cri;
use plegd::sim::EventsMode;
use support::SimHarness;
use tonic::Code;

async fn next_event(s: &mut plegd::cri::EventStream) -> cri::ContainerEventResponse {
    tokio::time::timeout(Duration::from_secs(2), s.next())
        .await
        .expect("event in time")
        .expect("stream open")
        .expect("ok")
}

#[tokio::test]
async fn unknown_ids_answer_not_found_with_containerds_messages() {
    let h = SimHarness::start().await;
    let c = h.client();
    let e = c.container_status("deadbeef").await.unwrap_err();
    assert_eq!(e.code(), Code::NotFound);
    assert!(e.to_string().contains("an error occurred when try to find container \"deadbeef\": not found"), "{e}");
    let e = c.pod_sandbox_status("deadbeef").await.unwrap_err();
    assert_eq!(e.code(), Code::NotFound);
    let mut raw = h.raw();
    let e = raw.start_container(cri::StartContainerRequest { container_id: "nope".into() }).await.unwrap_err();
    assert_eq!(e.code(), Code::NotFound);
    let e = raw.stop_pod_sandbox(cri::StopPodSandboxRequest { pod_sandbox_id: "nope".into() }).await.unwrap_err();
    assert_eq!(e.code(), Code::NotFound);
    // Removal is idempotent: an unknown id is not an error.
    raw.remove_container(cri::RemoveContainerRequest { container_id: "nope".into() }).await.unwrap();
    raw.remove_pod_sandbox(cri::RemovePodSandboxRequest { pod_sandbox_id: "nope".into() }).await.unwrap();
}

#[tokio::test]
async fn stop_is_idempotent_and_start_twice_is_refused() {
    let h = SimHarness::start().await;
    let pod = PodSpec::new("default", "web");
    let (_, ids) = h.run_pod(&pod, &[ContainerSpec::new("app")]).await;
    let mut raw = h.raw();
    let e = raw.start_container(cri::StartContainerRequest { container_id: ids[0].clone() }).await.unwrap_err();
    assert!(e.message().contains("container is in CONTAINER_RUNNING state"), "{}", e.message());
    h.stop_container(&ids[0]).await;
    h.stop_container(&ids[0]).await;
    let st = h.client().container_status(&ids[0]).await.unwrap();
    assert_eq!(st.state, cri::ContainerState::ContainerExited as i32);
    assert_eq!(st.exit_code, 137);
    assert_eq!(st.reason, "Error");
    assert!(st.finished_at >= st.started_at && st.started_at >= st.created_at);
}

#[tokio::test]
async fn names_are_reserved_per_sandbox_and_attempt() {
    let h = SimHarness::start().await;
    let pod = PodSpec::new("default", "web");
    let (sid, _) = h.run_pod(&pod, &[ContainerSpec::new("app")]).await;
    let e = h.raw().create_container(pod.create_request(&sid, &ContainerSpec::new("app"))).await.unwrap_err();
    assert!(e.message().starts_with("failed to reserve container name"), "{}", e.message());
    h.raw().create_container(pod.create_request(&sid, &ContainerSpec::new("app").attempt(1))).await.unwrap();
    let e = h.raw().run_pod_sandbox(pod.run_request()).await.unwrap_err();
    assert!(e.message().starts_with("failed to reserve sandbox name"), "{}", e.message());
}

#[tokio::test]
async fn containers_cannot_be_created_in_a_stopped_sandbox() {
    let h = SimHarness::start().await;
    let pod = PodSpec::new("default", "web");
    let (sid, _) = h.run_pod(&pod, &[]).await;
    h.stop_pod(&sid).await;
    let e = h.raw().create_container(pod.create_request(&sid, &ContainerSpec::new("app"))).await.unwrap_err();
    assert!(e.message().contains("is not running"), "{}", e.message());
}

#[tokio::test]
async fn a_pods_events_come_in_containerds_order() {
    let h = SimHarness::start().await;
    let mut events = h.subscribe_events().await;
    let pod = PodSpec::new("default", "web");
    let (sid, ids) = h.run_pod(&pod, &[ContainerSpec::new("app")]).await;
    h.remove_pod(&sid).await;
    use cri::ContainerEventType::*;
    let want = [
        (&sid, ContainerCreatedEvent),
        (&sid, ContainerStartedEvent),
        (&ids[0], ContainerCreatedEvent),
        (&ids[0], ContainerStartedEvent),
        (&ids[0], ContainerStoppedEvent),
        (&sid, ContainerStoppedEvent),
        (&ids[0], ContainerDeletedEvent),
        (&sid, ContainerDeletedEvent),
    ];
    for (id, kind) in want {
        let ev = next_event(&mut events).await;
        assert_eq!((&ev.container_id, ev.container_event_type), (id, kind as i32));
        assert!(ev.created_at > 0);
        let sb = ev.pod_sandbox_status.expect("events carry the sandbox status");
        assert_eq!(sb.metadata.unwrap().uid, pod.uid);
    }
}

#[tokio::test]
async fn events_carry_the_statuses_of_the_pods_containers() {
    let h = SimHarness::start().await;
    let pod = PodSpec::new("default", "web");
    let (_, ids) = h.run_pod(&pod, &[ContainerSpec::new("a")]).await;
    let mut events = h.subscribe_events().await;
    h.sim.exit_container(&ids[0], 2, "Error");
    let ev = next_event(&mut events).await;
    assert_eq!(ev.container_event_type, cri::ContainerEventType::ContainerStoppedEvent as i32);
    assert_eq!(ev.containers_statuses.len(), 1);
    assert_eq!(ev.containers_statuses[0].exit_code, 2);
}

#[tokio::test]
async fn a_container_annotated_to_exit_does_so_on_schedule() {
    let h = SimHarness::start().await;
    let mut events = h.subscribe_events().await;
    let pod = PodSpec::new("default", "job");
    let (_, ids) = h.run_pod(&pod, &[ContainerSpec::new("once").exits_after(Duration::from_millis(100), 7)]).await;
    let stopped = loop {
        let ev = next_event(&mut events).await;
        if ev.container_event_type == cri::ContainerEventType::ContainerStoppedEvent as i32 {
            break ev;
        }
    };
    assert_eq!(stopped.container_id, ids[0]);
    let st = h.client().container_status(&ids[0]).await.unwrap();
    assert_eq!((st.exit_code, st.reason.as_str()), (7, "Error"));
}

#[tokio::test]
async fn the_events_call_can_be_unimplemented_empty_or_dropped() {
    let h = SimHarness::start().await;
    let c = h.client();
    h.sim.set_events_mode(EventsMode::Unimplemented);
    let mut s = c.container_events().await.unwrap();
    let e = s.next().await.unwrap().unwrap_err();
    assert!(e.is_unimplemented(), "{e}");

    h.sim.set_events_mode(EventsMode::EmptyOk);
    let mut s = c.container_events().await.unwrap();
    assert!(tokio::time::timeout(Duration::from_secs(1), s.next()).await.unwrap().is_none(), "empty OK stream ends");

    h.sim.set_events_mode(EventsMode::Stream);
    let mut s = h.subscribe_events().await;
    h.run_pod(&PodSpec::new("default", "a"), &[]).await;
    next_event(&mut s).await;
    h.sim.drop_event_streams();
    let mut ended = false;
    for _ in 0..3 {
        match tokio::time::timeout(Duration::from_secs(1), s.next()).await.unwrap() {
            Some(Ok(_)) => continue,
            Some(Err(e)) => {
                assert_eq!(e.code(), Code::Unavailable);
                ended = true;
                break;
            }
            None => {
                ended = true;
                break;
            }
        }
    }
    assert!(ended, "a dropped stream ends");
}

#[tokio::test]
async fn list_filters_match_containerd() {
    let h = SimHarness::start().await;
    let a = PodSpec::new("default", "a").label("app", "x");
    let b = PodSpec::new("default", "b").label("app", "y");
    let (sa, ia) = h.run_pod(&a, &[ContainerSpec::new("c")]).await;
    let (sb, _) = h.run_pod(&b, &[ContainerSpec::new("c")]).await;
    h.stop_pod(&sb).await;
    let c = h.client();
    let ready = c
        .list_pod_sandboxes(Some(cri::PodSandboxFilter {
            state: Some(cri::PodSandboxStateValue { state: cri::PodSandboxState::SandboxReady as i32 }),
            ..Default::default()
        }))
        .await
        .unwrap();
    assert_eq!(ready.iter().map(|s| s.id.as_str()).collect::<Vec<_>>(), [sa.as_str()]);
    let by_label = c
        .list_pod_sandboxes(Some(cri::PodSandboxFilter {
            label_selector: [("app".to_string(), "y".to_string())].into(),
            ..Default::default()
        }))
        .await
        .unwrap();
    assert_eq!(by_label.len(), 1);
    assert_eq!(by_label[0].id, sb);
    let by_prefix = c
        .list_containers(Some(cri::ContainerFilter { id: ia[0][..12].to_string(), ..Default::default() }))
        .await
        .unwrap();
    assert_eq!(by_prefix.len(), 1, "ids may be given as unique prefixes");
    let in_a =
        c.list_containers(Some(cri::ContainerFilter { pod_sandbox_id: sa, ..Default::default() })).await.unwrap();
    assert_eq!(in_a.len(), 1);
    let running = c
        .list_containers(Some(cri::ContainerFilter {
            state: Some(cri::ContainerStateValue { state: cri::ContainerState::ContainerRunning as i32 }),
            ..Default::default()
        }))
        .await
        .unwrap();
    assert_eq!(running.len(), 1, "the stopped pod's container was killed");
}

#[tokio::test]
async fn a_hung_call_times_out_at_the_clients_deadline() {
    let h = SimHarness::start().await;
    h.sim.inject(plegd::sim::Fault {
        method: "ListPodSandbox",
        target: None,
        action: plegd::sim::FaultAction::Hang,
        times: Some(1),
    });
    let c = h.client();
    let started = std::time::Instant::now();
    let e = c.list_pod_sandboxes(None).await.unwrap_err();
    assert_eq!(e.code(), Code::DeadlineExceeded, "{e}");
    assert!(started.elapsed() < Duration::from_secs(2));
    c.list_pod_sandboxes(None).await.expect("the next call works");
}

#[tokio::test]
async fn with_containerd_2_delivery_a_subscriber_that_stops_reading_makes_calls_wait_after_its_queue_of_100() {
    let sim = plegd::sim::SimRuntime::new();
    sim.set_blocking_delivery(true);
    let mut stream = sim.container_events().await.expect("events");
    // Each sandbox makes two events (CREATED, STARTED): 50 fill the queue of 100.
    for i in 0..50 {
        let pod = PodSpec::new("default", &format!("p{i}"));
        tokio::time::timeout(Duration::from_secs(1), sim.run_pod_sandbox(pod.run_request()))
            .await
            .expect("a call with room in the queue does not wait")
            .expect("runs");
    }
    let blocked = sim.clone();
    let call =
        tokio::spawn(
            async move { blocked.run_pod_sandbox(PodSpec::new("default", "one-too-many").run_request()).await },
        );
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(!call.is_finished(), "the 101st event must make the call wait for the subscriber");
    // The subscriber reads again: the call completes.
    for _ in 0..2 {
        next_event(&mut stream).await;
    }
    tokio::time::timeout(Duration::from_secs(2), call).await.expect("the call completes").unwrap().expect("runs");
    // A subscriber that goes away releases the runtime at once.
    drop(stream);
    tokio::time::timeout(Duration::from_secs(1), sim.run_pod_sandbox(PodSpec::new("default", "after").run_request()))
        .await
        .expect("no subscriber: no wait")
        .expect("runs");
}

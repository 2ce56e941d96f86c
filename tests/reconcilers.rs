//! The sync loop, work queues and built-in reconcilers end to end: a whole plegd on the
//! simulated runtime over real sockets.

mod support;

use std::time::Duration;

use futures_util::StreamExt;
use plegd::cri::spec::{ContainerSpec, PodSpec};
use plegd::journal::{FeedItem, Since};
use plegd::model::event::{EventSource, EventType};
use plegd::reconcile::GcMode;
use plegd::sim::{Fault, FaultAction};
use support::{http, start_plegd};

/// Kills the newest attempt of `name` and starts the next one, like a kubelet
/// restarting a crashing container.
async fn crash_and_restart(p: &support::Plegd, pod: &PodSpec, sid: &str, id: &str, next: u32) -> String {
    p.h.sim.exit_container(id, 1, "Error");
    tokio::time::sleep(Duration::from_millis(150)).await;
    p.h.start_container(pod, sid, &ContainerSpec::new("app").attempt(next)).await
}

#[tokio::test]
async fn a_crash_looping_container_yields_one_crash_loop_event_then_a_cleared_one() {
    let p = start_plegd(|c| {
        c.sync.crashloop.deaths = 3;
        c.sync.crashloop.window = Duration::from_secs(60);
        c.sync.crashloop.clear_after = Duration::from_secs(1);
    })
    .await;
    let (_, mut sub) = p.app.journal().subscribe(Since::Snapshot, Default::default()).into_feed();
    let pod = PodSpec::new("default", "crashy");
    let (sid, ids) = p.h.run_pod(&pod, &[ContainerSpec::new("app")]).await;
    let mut id = ids[0].clone();
    for attempt in 1..=5 {
        id = crash_and_restart(&p, &pod, &sid, &id, attempt).await;
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    let mut loops = Vec::new();
    let mut cleared = Vec::new();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
    while cleared.is_empty() && tokio::time::Instant::now() < deadline {
        if let Ok(Some(FeedItem::Entry(e))) = tokio::time::timeout(Duration::from_millis(200), sub.next()).await {
            match e.event.kind {
                EventType::CrashLoop => loops.push(e.clone()),
                EventType::CrashLoopCleared => cleared.push(e.clone()),
                _ => {}
            }
        }
    }
    assert_eq!(loops.len(), 1, "five deaths in the window make one CRASH_LOOP, not one per death");
    let ev = &loops[0].event;
    assert_eq!((ev.source, &*ev.container_name), (EventSource::Reconciler, "app"));
    assert!(ev.message.contains("deaths within"), "{}", ev.message);
    assert_eq!(cleared.len(), 1, "the last attempt stayed up past clear-after");
    // The loop recorded the follow-up with its cause.
    let (code, body) = http(p.app.debug_addr(), "GET", "/debug/events").await;
    assert_eq!(code, 200);
    let records: serde_json::Value = serde_json::from_str(&body).unwrap();
    let fu = records.as_array().unwrap().iter().find(|r| r["name"] == "follow-up:CRASH_LOOP").expect("recorded");
    assert!(fu["follow_up_of"].as_u64().is_some(), "{fu}");
    assert_eq!(fu["handlers"][0]["handler"], "publish");
    assert_eq!(records[0]["name"], "resync:startup");
    assert_eq!(records[0]["seq"], 0);
    p.stop().await;
}

#[tokio::test]
async fn gc_removes_exactly_the_dead_containers_beyond_the_policy() {
    let p = start_plegd(|c| {
        c.sync.gc.mode = GcMode::On;
        c.sync.gc.keep = 1;
        c.sync.gc.min_age = Duration::ZERO;
        c.sync.crashloop.deaths = 100;
    })
    .await;
    let pod = PodSpec::new("default", "web");
    let (sid, ids) = p.h.run_pod(&pod, &[ContainerSpec::new("app"), ContainerSpec::new("sidecar")]).await;
    let mut attempts = vec![ids[0].clone()];
    let mut id = ids[0].clone();
    for attempt in 1..=3 {
        id = crash_and_restart(&p, &pod, &sid, &id, attempt).await;
        attempts.push(id.clone());
    }
    p.h.sim.exit_container(&ids[1], 0, "Completed"); // the only dead sidecar: kept
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    loop {
        let left: Vec<String> = p.h.sim.list_containers_cri(None).await.unwrap().into_iter().map(|c| c.id).collect();
        let want = vec![attempts[2].clone(), attempts[3].clone(), ids[1].clone()];
        let mut l = left.clone();
        l.sort();
        let mut w = want.clone();
        w.sort();
        if l == w {
            break;
        }
        assert!(tokio::time::Instant::now() < deadline, "left {left:?}, want {want:?}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // The running attempt was never touched; removals show up as events.
    let st = p.h.sim.container_status_cri(&attempts[3]).await.unwrap();
    assert_eq!(st.state, plegd::proto::runtime::ContainerState::ContainerRunning as i32);
    p.stop().await;
}

#[tokio::test]
async fn a_failing_removal_is_retried_with_backoff() {
    let p = start_plegd(|c| {
        c.sync.gc.mode = GcMode::On;
        c.sync.gc.keep = 0;
        c.sync.gc.min_age = Duration::ZERO;
        c.sync.rate_limit.base = Duration::from_millis(50);
    })
    .await;
    p.h.sim.inject(Fault {
        method: "RemoveContainer",
        target: None,
        action: FaultAction::Error(tonic::Code::Internal, "device busy".into()),
        times: Some(3),
    });
    let pod = PodSpec::new("default", "web");
    let (_, ids) = p.h.run_pod(&pod, &[ContainerSpec::new("app")]).await;
    let t0 = tokio::time::Instant::now();
    p.h.sim.exit_container(&ids[0], 1, "Error");
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while p.h.sim.counts().containers > 0 {
        assert!(tokio::time::Instant::now() < deadline, "never removed");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // Failures back off 50, 100, 200 ms; a lifecycle event for the pod may run the key
    // early (an immediate add does not wait for a pending retry, as in client-go), but
    // nothing changes the pod after the third failure, so its 200 ms always pass
    // before the successful fourth try.
    assert!(t0.elapsed() >= Duration::from_millis(200), "retried too fast: {:?}", t0.elapsed());
    let m = p.app.metrics().encode();
    assert!(m.contains("plegd_reconcile_total{reconciler=\"gc\",outcome=\"error\"} 3"), "{m}");
    assert!(m.contains("workqueue_retries_total{name=\"gc\"}"), "{m}");
    p.stop().await;
}

#[tokio::test]
async fn gc_dry_run_removes_nothing() {
    let p = start_plegd(|c| {
        c.sync.gc.mode = GcMode::DryRun;
        c.sync.gc.keep = 0;
        c.sync.gc.min_age = Duration::ZERO;
    })
    .await;
    let (_, ids) = p.h.run_pod(&PodSpec::new("default", "web"), &[ContainerSpec::new("app")]).await;
    p.h.sim.exit_container(&ids[0], 1, "Error");
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(p.h.sim.counts().containers, 1);
    let m = p.app.metrics().encode();
    assert!(m.contains("plegd_reconcile_total{reconciler=\"gc\",outcome=\"success\"}"), "{m}");
    p.stop().await;
}

#[tokio::test]
async fn the_debug_api_shows_the_history_and_the_queues_and_takes_resyncs() {
    let p = start_plegd(|c| c.sync.gc.mode = GcMode::On).await;
    p.h.run_pod(&PodSpec::new("default", "web"), &[ContainerSpec::new("app")]).await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    let a = p.app.debug_addr();
    let (code, body) = http(a, "POST", "/debug/resync").await;
    assert_eq!(code, 202, "{body}");
    tokio::time::sleep(Duration::from_millis(300)).await;
    let (code, body) = http(a, "GET", "/debug/events?last=50").await;
    assert_eq!(code, 200);
    let v: serde_json::Value = serde_json::from_str(&body).unwrap();
    let names: Vec<&str> = v.as_array().unwrap().iter().map(|r| r["name"].as_str().unwrap()).collect();
    assert!(names.contains(&"resync:on-demand"), "{names:?}");
    assert!(names.contains(&"CONTAINER_STARTED"), "{names:?}");
    let seq = v[1]["seq"].as_u64().unwrap();
    let (_, one) = http(a, "GET", &format!("/debug/events?seq={seq}")).await;
    assert_eq!(serde_json::from_str::<serde_json::Value>(&one).unwrap().as_array().unwrap().len(), 1);
    let (code, text) = http(a, "GET", "/debug/events?format=text&last=3").await;
    assert_eq!(code, 200);
    assert!(text.contains("enqueue:"), "{text}");
    let future = "2099-01-01T00:00:00Z";
    let (_, none) = http(a, "GET", &format!("/debug/events?since={future}")).await;
    assert_eq!(none.trim(), "[]");
    for bad in
        ["/debug/events?since=yesterday", "/debug/events?last=-1", "/debug/events?format=xml", "/debug/events?bogus=1"]
    {
        let (code, body) = http(a, "GET", bad).await;
        assert_eq!(code, 400, "{bad}: {body}");
        assert!(!body.is_empty());
    }
    let (code, body) = http(a, "GET", "/debug/queue").await;
    assert_eq!(code, 200);
    let qs: serde_json::Value = serde_json::from_str(&body).unwrap();
    let names: Vec<&str> = qs.as_array().unwrap().iter().map(|q| q["name"].as_str().unwrap()).collect();
    assert_eq!(names, ["crashloop", "gc"]);
    assert!(qs[0]["depth"].is_u64() && qs[0]["in_flight"].is_array() && qs[0]["waiting"].is_array());
    let m = p.app.metrics().encode();
    for name in [
        "workqueue_adds_total{name=\"crashloop\"}",
        "workqueue_depth{name=\"gc\"}",
        "workqueue_queue_duration_seconds_bucket",
    ] {
        assert!(m.contains(name), "{name} missing");
    }
    p.stop().await;
}

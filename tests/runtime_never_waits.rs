//! plegd never slows the runtime. containerd 2.x gives each event subscriber a queue of
//! 100 events and blocks its own CRI calls while a queue is full, so a plegd that stops
//! reading its stream would freeze pod creation on the node. The simulated runtime
//! here delivers the same way (`set_blocking_delivery`), and plegd runs on a runtime of
//! its own that the test stalls completely — every worker of plegd's blocked, as a
//! starved or wedged process would be — while pods are created.

mod support;

use std::time::Duration;

use plegd::cri::spec::{ContainerSpec, PodSpec};
use support::SimHarness;
use tokio::time::Instant;

/// How long plegd's runtime is stalled.
const STALL: Duration = Duration::from_secs(8);
/// Pods are created at this rate through the stall, 5 CRI calls and 6 events each
/// (sandbox created and started, two containers created and started), each event
/// carrying a sandbox status of about 3 KiB: megabytes more than HTTP/2's windows and
/// the socket buffers hold, and events still arriving after the reader's stall limit.
const PODS_PER_SEC: u64 = 100;

/// A pod whose sandbox status is large (40 labels of 60 characters).
fn heavy_pod(i: usize) -> PodSpec {
    (0..40).fold(PodSpec::new("load", &format!("pod-{i}")), |p, k| p.label(&format!("k{k}"), &"v".repeat(60)))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stalled_plegd_never_makes_the_runtime_wait_and_repairs_what_it_skipped() {
    let h = SimHarness::start().await;
    h.sim.set_blocking_delivery(true);
    h.sim.set_identity("containerd", "v2.1.9");
    let p = support::OwnRuntimePlegd::start(&h.endpoint);

    // plegd is up on the stream (the runtime holds its queue).
    let t0 = Instant::now();
    while h.sim.event_subscribers() == 0 {
        assert!(t0.elapsed() < Duration::from_secs(10), "plegd never opened the event stream");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    tokio::time::sleep(Duration::from_millis(300)).await;

    // Every one of plegd's workers stops: nothing of plegd's runs but its event reader.
    p.stall(STALL);
    let stalled_at = Instant::now();
    let mut slowest = Duration::ZERO;
    let mut raw = h.raw();
    let mut pods = 0;
    let mut pace = tokio::time::interval(Duration::from_millis(1000 / PODS_PER_SEC));
    while stalled_at.elapsed() < STALL - Duration::from_secs(1) {
        pace.tick().await;
        let pod = heavy_pod(pods);
        pods += 1;
        let t = Instant::now();
        let sid = raw.run_pod_sandbox(pod.run_request()).await.expect("run sandbox").into_inner().pod_sandbox_id;
        slowest = slowest.max(t.elapsed());
        for c in [ContainerSpec::new("app"), ContainerSpec::new("sidecar")] {
            let t = Instant::now();
            let id =
                raw.create_container(pod.create_request(&sid, &c)).await.expect("create").into_inner().container_id;
            slowest = slowest.max(t.elapsed());
            let t = Instant::now();
            raw.start_container(plegd::proto::runtime::StartContainerRequest { container_id: id })
                .await
                .expect("start");
            slowest = slowest.max(t.elapsed());
        }
    }
    let created_in = stalled_at.elapsed();
    eprintln!(
        "{pods} pods ({} CRI calls, {} events) created in {created_in:?} while plegd was stalled; slowest call {slowest:?}",
        pods * 5,
        pods * 6
    );
    assert!(
        created_in < STALL,
        "the runtime waited on plegd: {pods} pods took {created_in:?}, plegd was stalled for {STALL:?}"
    );
    assert!(slowest < Duration::from_secs(1), "a CRI call waited {slowest:?} on a stalled plegd");

    // plegd comes back, relists what it skipped and reconnects the stream.
    let t1 = Instant::now();
    while p.cache.len() < pods {
        assert!(t1.elapsed() < STALL + Duration::from_secs(20), "plegd has {} of {pods} pods", p.cache.len());
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let t2 = Instant::now();
    while h.sim.event_subscribers() == 0 {
        assert!(t2.elapsed() < Duration::from_secs(10), "plegd never reopened the event stream");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let closed = p.metric("plegd_evented_connection_errors_total");
    assert!(closed >= 1.0, "plegd kept a stream it had fallen behind on (connection errors {closed})");
    // Pods created after the recovery come through the stream again.
    let (_, ids) = h.run_pod(&heavy_pod(pods), &[ContainerSpec::new("late")]).await;
    let t3 = Instant::now();
    while !p
        .cache
        .snapshot()
        .iter()
        .any(|e| e.status.as_ref().is_some_and(|s| s.containers.iter().any(|c| c.id == ids[0] && c.started_at > 0)))
    {
        assert!(t3.elapsed() < Duration::from_secs(10), "a pod started after the recovery never reached plegd");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

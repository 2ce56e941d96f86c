//! `plegd sim --trouble`: pods in trouble beside the churn, for the pages' browser
//! tests and demos. `shop/checkout`'s `app` container crash-loops (exit 1 `Error` after
//! 3 s, restarted 2 s later, the attempt before the previous one removed as the kubelet
//! does); `batch/indexer`'s `worker` is OOM-killed (exit 137 `OOMKilled`) 4 s after its
//! first start and every 40 s after, restarted 2 s later; `default/hostile` carries
//! markup in its labels and one container's name, as a runtime may report anything.

use std::time::Duration;

use tokio_util::sync::CancellationToken;

use crate::cri::spec::{ContainerSpec, PodSpec};
use crate::proto::runtime::ContainerState;
use crate::sim::SimRuntime;
use crate::sim::churn::{Churn, ChurnConfig};

/// How long a crash-looping attempt runs, and how long the kubelet waits to restart.
const CRASH_AFTER: Duration = Duration::from_secs(3);
const RESTART_AFTER: Duration = Duration::from_secs(2);
/// The first OOM kill, and the ones after it.
const FIRST_OOM: Duration = Duration::from_secs(4);
const OOM_EVERY: Duration = Duration::from_secs(40);

/// Serves the simulated runtime on `listen` with churn and the pods in trouble.
pub async fn serve(
    listen: &str,
    churn: ChurnConfig,
    events: crate::sim::EventsMode,
    tracker: &tokio_util::task::TaskTracker,
    shutdown: CancellationToken,
) -> Result<(), crate::sim::SimError> {
    let path = crate::uds::parse_unix_endpoint(listen)?;
    let listener = crate::uds::bind(&path, 0o660).await?;
    let sim = SimRuntime::new();
    sim.set_events_mode(events);
    tracing::info!(socket = %path.display(), pods = churn.pods, "simulated runtime serving, with pods in trouble");
    tracker.spawn(Churn::new(sim.clone(), churn).run(shutdown.clone()));
    tracker.spawn(run(sim.clone(), shutdown.clone()));
    if let Err(e) = crate::sim::server::serve(sim, listener, shutdown.clone()).await {
        tracing::error!(error = %e, "simulated runtime stopped");
    }
    let _ = std::fs::remove_file(&path);
    Ok(())
}

/// Runs the pods in trouble until shutdown.
pub async fn run(sim: SimRuntime, shutdown: CancellationToken) {
    tokio::select! {
        _ = shutdown.cancelled() => {}
        _ = async { tokio::join!(crash_loop(&sim), oom_kills(&sim), hostile(&sim)) } => {}
    }
}

async fn start(sim: &SimRuntime, pod: &PodSpec, sandbox: &str, c: &ContainerSpec) -> Option<String> {
    let id = sim.create_container(pod.create_request(sandbox, c)).await.ok()?;
    sim.start_container(&id).await.ok()?;
    Some(id)
}

async fn exited(sim: &SimRuntime, id: &str) -> bool {
    sim.container_status_cri(id).await.is_ok_and(|s| s.state == ContainerState::ContainerExited as i32)
}

async fn crash_loop(sim: &SimRuntime) {
    let pod = PodSpec::new("shop", "checkout").label("app", "checkout").label("tier", "web");
    let Ok(sandbox) = sim.run_pod_sandbox(pod.run_request()).await else { return };
    let _ = start(sim, &pod, &sandbox, &ContainerSpec::new("proxy")).await;
    let mut previous: Option<String> = None;
    for attempt in 0.. {
        let spec = ContainerSpec::new("app").attempt(attempt).exits_after(CRASH_AFTER, 1);
        let Some(id) = start(sim, &pod, &sandbox, &spec).await else { return };
        while !exited(sim, &id).await {
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        tokio::time::sleep(RESTART_AFTER).await;
        if let Some(old) = previous.replace(id) {
            let _ = sim.remove_container_cri(&old).await;
        }
    }
}

async fn oom_kills(sim: &SimRuntime) {
    let pod = PodSpec::new("batch", "indexer").label("app", "indexer").label("tier", "batch");
    let Ok(sandbox) = sim.run_pod_sandbox(pod.run_request()).await else { return };
    let mut previous: Option<String> = None;
    for attempt in 0.. {
        let Some(id) = start(sim, &pod, &sandbox, &ContainerSpec::new("worker").attempt(attempt)).await else { return };
        tokio::time::sleep(if attempt == 0 { FIRST_OOM } else { OOM_EVERY }).await;
        sim.exit_container(&id, 137, "OOMKilled");
        tokio::time::sleep(RESTART_AFTER).await;
        if let Some(old) = previous.replace(id) {
            let _ = sim.remove_container_cri(&old).await;
        }
    }
}

async fn hostile(sim: &SimRuntime) {
    let pod = PodSpec::new("default", "hostile")
        .label("app", "hostile")
        .label("note", "\"><script>document.title='pwned'</script><img src=x onerror=\"document.title='pwned'\">");
    let Ok(sandbox) = sim.run_pod_sandbox(pod.run_request()).await else { return };
    let _ = start(sim, &pod, &sandbox, &ContainerSpec::new("<b>bold</b><script>document.title='pwned'</script>")).await;
}

//! A runtime that tells a container's start through NRI before its own status leaves
//! `CREATED` (CRI-O: `POST_START_CONTAINER` is called inside `StartContainer`, and the
//! state is written when the call returns), with no event stream and full relists far
//! apart: the start is told soon after the status shows it, once, whatever the lag —
//! by the re-reads the word prompts, or past them by the next full relist. The relister
//! runs whole, in process, on the simulated runtime, in paused time; the word enters as
//! the NRI plugin hands it (`plegd::nri::hand_event`).

use std::time::Duration;

use plegd::app::Metrics;
use plegd::config::RunConfig;
use plegd::cri::spec::{ContainerSpec, PodSpec};
use plegd::model::event::{EventSource, EventType};
use plegd::nri::api::Event;
use plegd::nri::session::EventHint;
use plegd::pleg::evented::Mode;
use plegd::sim::SimRuntime;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

/// Full relists this far apart: an operator's long period, so that what tells the start
/// sooner is the word's re-reads.
const RELIST: Duration = Duration::from_secs(40);

/// The word's re-reads (`src/pleg/early_words.rs`'s start pace): 10 ms after it, each
/// next one twice as long after the one before, eleven in all — 10, 30, 70 … 20,470 ms.
fn rereads() -> impl Iterator<Item = Duration> {
    (1..=11u32).map(|k| Duration::from_millis(10 * (2u64.pow(k) - 1)))
}

/// The sources of the container's starts told.
fn starts_told(app: &plegd::app::Sidecar, uid: &str, id: &str) -> Vec<EventSource> {
    let timeline = app.journal().timeline(uid).unwrap_or_default();
    timeline
        .iter()
        .filter(|e| e.event.kind == EventType::ContainerStarted && e.event.container_id == id)
        .map(|e| e.event.source)
        .collect()
}

#[tokio::test(start_paused = true)]
async fn a_start_told_before_the_status_leaves_created_is_told_once_soon_after_the_status_shows_it() {
    let lags = [
        Duration::ZERO,
        Duration::from_millis(3),
        Duration::from_millis(25),
        Duration::from_millis(400),
        Duration::from_secs(3),
        Duration::from_secs(15),
        Duration::from_secs(25),
    ];
    for lag in lags {
        let dir = tempfile::tempdir().unwrap();
        let mut cfg = RunConfig::for_endpoint("unix:///run/crio/crio.sock").unwrap();
        cfg.api.socket = dir.path().join("api/plegd.sock");
        cfg.admin.addr = "127.0.0.1:0".parse().unwrap();
        // CRI-O with its event stream off: plegd relists, and hears NRI.
        cfg.pleg.mode = Mode::Generic;
        cfg.pleg.relist_period = RELIST;
        let sim = SimRuntime::new();
        let pod = PodSpec::new("default", "web");
        let sid = sim.run_pod_sandbox(pod.run_request()).await.unwrap();
        let id = sim.create_container(pod.create_request(&sid, &ContainerSpec::new("app"))).await.unwrap();
        let (shutdown, tracker) = (CancellationToken::new(), TaskTracker::new());
        let app = plegd::app::start_on(&cfg, sim.clone(), Metrics::new(), &tracker, &shutdown).await.unwrap();
        let deadline = Instant::now() + Duration::from_secs(30);
        while app.readiness().check().is_err() {
            assert!(Instant::now() < deadline, "never ready: {:?}", app.readiness().check());
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        // Past the first relist's own reads: from here only the word or the next full
        // relist can read the pod.
        tokio::time::sleep(Duration::from_secs(1)).await;
        assert!(starts_told(&app, &pod.uid, &id).is_empty(), "created, not started");

        // Inside StartContainer: the plugin hears the start, with the process.
        let said = Instant::now();
        plegd::nri::hand_event(
            app.inbox(),
            EventHint {
                event: Event::PostStartContainer,
                uid: Some(pod.uid.clone()),
                sandbox: Some(sid.clone()),
                container: Some(id.clone()),
                pid: Some(4242),
                cgroup: Some(format!("/kubepods/pod{}/{id}", pod.uid)),
            },
        );
        // The runtime's status still says CREATED for `lag`: the word alone tells nothing.
        tokio::time::sleep(lag).await;
        assert!(starts_told(&app, &pod.uid, &id).is_empty(), "lag {lag:?}: told before the status said so");
        sim.start_container(&id).await.unwrap();

        // Paused time, a runtime that answers at once: the start is told at the first
        // read at or after the lag — the read the call prompted (at once), a re-read, or
        // past the last re-read the next full relist (40 s after the first relist's end).
        let expected = if lag.is_zero() { Some(Duration::ZERO) } else { rereads().find(|&at| at >= lag) };
        let give_up = said + lag + RELIST + Duration::from_secs(1);
        let told = loop {
            let told = starts_told(&app, &pod.uid, &id);
            if !told.is_empty() {
                break told;
            }
            assert!(Instant::now() <= give_up, "lag {lag:?}: the start never told");
            tokio::time::sleep(Duration::from_millis(1)).await;
        };
        let after = said.elapsed();
        match expected {
            Some(at) => {
                assert!(
                    at <= after && after <= at + Duration::from_millis(2),
                    "lag {lag:?}: told {after:?} after the word, not at the read of {at:?}"
                );
                assert_eq!(told, [EventSource::Nri], "lag {lag:?}: told by what NRI prompted");
            }
            None => {
                assert!(after > lag && after < RELIST, "lag {lag:?}: told {after:?} after the word");
                assert_eq!(told, [EventSource::Relist], "lag {lag:?}: past the re-reads, the full relist tells it");
            }
        }
        // Once, whatever the re-reads left and the full relists that follow find.
        tokio::time::sleep(RELIST * 2).await;
        assert_eq!(starts_told(&app, &pod.uid, &id).len(), 1, "lag {lag:?}: the start is told once");
        let cached = app.cache().get(&pod.uid).and_then(|e| e.status.clone()).expect("the pod is cached");
        let state = cached.containers.iter().find(|c| c.id == id).map(|c| c.state);
        assert_eq!(state, Some(plegd::model::ContainerState::Running), "lag {lag:?}: the cache has it running");
        shutdown.cancel();
        tracker.close();
        tracker.wait().await;
    }
}

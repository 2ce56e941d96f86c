//! Upgrades and downgrades keep the promise. Two builds of plegd take turns on one state
//! dir under churn, as a node rolling its DaemonSet forward and back would run them: this
//! one, and `PLEGD_PREVIOUS_BIN`, the revision before plegd wrote a format number into
//! every file it keeps (`tests/upgrade/build-previous.sh`; docs/state-dir.md). Each turn
//! ends as a rollout ends it (SIGTERM), one with `kill -9`. One watcher resumes through
//! every turn: the same epoch, never a reset, revisions one by one; at the end every
//! revision it was handed is still the same event, every removed container the old build
//! answered for at the end of its turn is still answered under the new one, and the
//! journal's view is the runtime.
//!
//! `bash tests/upgrade/run.sh` builds the previous revision (cached) and runs this.

mod support;

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use plegd::proto::plegd as api;
use plegd::proto::plegd::watch_event::Kind;
use support::binary::{Binary, Stop, churning, open, replay, start, stop, truth, view};
use tokio::time::Instant;

const CURRENT: &str = env!("CARGO_BIN_EXE_plegd");

fn previous() -> &'static str {
    let bin = std::env::var("PLEGD_PREVIOUS_BIN").unwrap_or_else(|_| {
        panic!("PLEGD_PREVIOUS_BIN is not set: bash tests/upgrade/run.sh builds the previous revision and sets it")
    });
    assert!(Path::new(&bin).is_file(), "PLEGD_PREVIOUS_BIN={bin} is not a file");
    Box::leak(bin.into_boxed_str())
}

async fn removed_container(p: &Binary, id: &str) -> Result<api::GetContainerResponse, tonic::Status> {
    let req =
        api::GetContainerRequest { key: Some(api::get_container_request::Key::ContainerId(id.to_owned())), at: None };
    plegd::cli::client::connect(&p.socket).unwrap().get_container(req).await.map(|r| r.into_inner())
}

fn tombstones_format(state: &Path) -> i64 {
    let conn = rusqlite::Connection::open_with_flags(
        state.join("tombstones.sqlite"),
        rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY,
    )
    .expect("tombstones.sqlite");
    conn.query_row("PRAGMA user_version", [], |r| r.get(0)).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs an earlier build of plegd in PLEGD_PREVIOUS_BIN: bash tests/upgrade/run.sh"]
async fn a_watcher_resumes_through_upgrades_and_downgrades_without_a_reset_and_loses_nothing() {
    let old = previous();
    let h = support::SimHarness::start().await;
    let state = tempfile::tempdir().unwrap();
    let (stop_churn, churning) = churning(&h.sim, 10, Duration::from_millis(20)).await;

    // The rollout: the old build, upgraded, downgraded, upgraded again; one turn killed.
    let turns = [(old, Stop::Term), (CURRENT, Stop::Kill), (old, Stop::Term), (CURRENT, Stop::Term)];
    let mut delivered: BTreeMap<u64, api::LifecycleEvent> = BTreeMap::new();
    let mut removed_under_old: Vec<(usize, String)> = Vec::new();
    let (mut known_to_old, mut unknown_to_old) = (Vec::new(), Vec::new());
    let (mut epoch, mut last) = (0u64, 0u64);
    for (turn, (bin, how)) in turns.into_iter().enumerate() {
        let p = start(bin, &h.endpoint, state.path(), h.dir.path()).await;
        if turn > 0 && bin == CURRENT {
            assert_eq!(tombstones_format(state.path()), 1, "this build marks the tombstones with its format");
        }
        let (mut s, started) = open(&p, last, epoch).await;
        if turn == 0 {
            epoch = started.epoch;
        } else {
            assert_eq!(started.epoch, epoch, "turn {turn} ({bin}): the same epoch across the change of build");
            assert!(started.resumed, "turn {turn} ({bin}): the resume from {last} was refused");
        }
        let until = Instant::now() + Duration::from_millis(1500);
        while let Ok(msg) = tokio::time::timeout(until.saturating_duration_since(Instant::now()), s.message()).await {
            let ev = msg.expect("the stream holds").expect("the stream stays open while plegd runs");
            match ev.kind {
                Some(Kind::Event(e)) => {
                    assert_eq!(ev.revision, last + 1, "turn {turn} ({bin}): revisions by one, no gap");
                    last = ev.revision;
                    if bin == old && e.r#type == api::LifecycleEventType::ContainerRemoved as i32 && !e.is_sandbox {
                        removed_under_old.push((turn, e.container_id.clone()));
                    }
                    delivered.insert(ev.revision, e);
                }
                Some(Kind::Reset(r)) => panic!("turn {turn} ({bin}): reset {r:?}"),
                Some(Kind::Synced(_)) if turn == 0 => last = ev.revision,
                _ => {}
            }
        }
        drop(s);
        // What the old build answers for its removals is what the upgrade must keep.
        if bin == old {
            for (t, id) in removed_under_old.iter().filter(|(t, _)| *t == turn) {
                match removed_container(&p, id).await {
                    Ok(r) if r.removed => known_to_old.push((*t, id.clone())),
                    other => unknown_to_old.push(format!("{id}: {other:?}")),
                }
            }
        }
        stop(p, how);
    }
    assert!(delivered.len() > 50, "the churn made events ({} delivered)", delivered.len());
    assert!(!known_to_old.is_empty(), "the churn removed containers under the old build, and it answered for them");

    // The churn stops; this build catches up and replays everything it kept.
    stop_churn.cancel();
    churning.await.unwrap();
    let p = start(CURRENT, &h.endpoint, state.path(), h.dir.path()).await;
    tokio::time::sleep(Duration::from_millis(1500)).await;
    for (turn, id) in &known_to_old {
        let got = removed_container(&p, id).await;
        assert!(
            got.as_ref().is_ok_and(|r| r.removed),
            "container {id}, removed under the old build (turn {turn}), is answered as removed: {got:?}"
        );
    }
    let from = delivered.keys().next().map_or(1, |r| r.saturating_sub(1)).max(1);
    let (mut s, started) = open(&p, from, epoch).await;
    assert!(started.resumed && started.epoch == epoch, "the whole journal is still there: {started:?}");
    let replayed = replay(&mut s).await;
    for (rev, was) in delivered.range(from + 1..) {
        let now = replayed.get(rev).unwrap_or_else(|| panic!("delivered revision {rev} was lost"));
        assert_eq!(
            as_journaled(was),
            as_journaled(now),
            "revision {rev} was delivered as one event and is now another"
        );
    }

    // And the journal's view is the runtime.
    let view = view(&p).await;
    assert_eq!(view, truth(&h.sim).await, "the view after the rollouts is the runtime");
    eprintln!(
        "{} events through 4 turns (old, new, old, new), epoch {epoch}; {} containers the old build removed and \
         answered for, answered under the new one; {} it did not answer for itself {unknown_to_old:?}; the view: {} ids",
        delivered.len(),
        known_to_old.len(),
        unknown_to_old.len(),
        view.len()
    );
    drop(p);
    h.stop().await;
}

/// The event as the journal keeps it: without what a build computes when it serves the
/// pod (its identity, which the previous build does not serve), so the same revision
/// reads the same from both builds.
fn as_journaled(ev: &api::LifecycleEvent) -> api::LifecycleEvent {
    let mut ev = ev.clone();
    if let Some(pod) = ev.pod.as_mut() {
        pod.identity = None;
    }
    ev
}

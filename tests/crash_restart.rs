//! `kill -9` of the real plegd binary at random moments under churn, then a restart on
//! the same state dir, round after round: every client resume continues the same epoch
//! without a reset, no revision is ever reused for a different event, no delivered
//! event is lost, and once the churn stops the journal's view equals the runtime.
//!
//! The runtime is the simulated one, in this process, so it lives through every crash
//! of plegd. `PLEGD_CRASH_SEED` replays a schedule; `PLEGD_CRASH_ROUNDS` sets how many
//! crashes (default 8).

mod support;

use std::collections::BTreeMap;
use std::time::Duration;

use plegd::proto::plegd as api;
use plegd::proto::plegd::watch_event::Kind;
use support::binary::{churning, open, replay, start, truth, view};
use tokio::time::Instant;

const BIN: &str = env!("CARGO_BIN_EXE_plegd");

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill_9_at_random_moments_under_churn_never_reuses_a_revision_nor_loses_a_delivered_event() {
    let seed: u64 =
        std::env::var("PLEGD_CRASH_SEED").ok().and_then(|s| s.parse().ok()).unwrap_or_else(|| fastrand::u64(..));
    let rounds: usize = std::env::var("PLEGD_CRASH_ROUNDS").ok().and_then(|s| s.parse().ok()).unwrap_or(8);
    eprintln!("crash schedule: PLEGD_CRASH_SEED={seed} PLEGD_CRASH_ROUNDS={rounds}");
    let mut rng = fastrand::Rng::with_seed(seed);
    let h = support::SimHarness::start().await;
    let state = tempfile::tempdir().unwrap();
    let (stop_churn, churning) = churning(&h.sim, 12, Duration::from_millis(15)).await;

    // Every event a client was handed: revision → its encoding.
    let mut delivered: BTreeMap<u64, api::LifecycleEvent> = BTreeMap::new();
    let (mut epoch, mut last) = (0u64, 0u64);
    for round in 0..rounds {
        let p = start(BIN, &h.endpoint, state.path(), h.dir.path()).await;
        let (mut s, started) = open(&p, last, epoch).await;
        let mut p = Some(p);
        if round == 0 {
            epoch = started.epoch;
        } else {
            assert_eq!(
                started.epoch, epoch,
                "round {round}: a restart keeping the state dir keeps the epoch (seed {seed})"
            );
            assert!(started.resumed, "round {round}: the resume from {last} was refused (seed {seed})");
        }
        let kill_at = Instant::now() + Duration::from_millis(rng.u64(100..1500));
        let mut killed = false;
        loop {
            let wait = if killed { Duration::from_secs(5) } else { kill_at.saturating_duration_since(Instant::now()) };
            match tokio::time::timeout(wait, s.message()).await {
                Err(_) if !killed => {
                    // kill -9, mid-stream: whatever reached the client before counts.
                    let mut p = p.take().expect("alive until killed");
                    p.child.kill().unwrap();
                    p.child.wait().unwrap();
                    killed = true;
                }
                Err(_) => panic!("the stream did not end after plegd was killed"),
                Ok(Ok(Some(ev))) => match ev.kind {
                    Some(Kind::Event(e)) => {
                        assert_eq!(ev.revision, last + 1, "round {round}: revisions by one, no gap (seed {seed})");
                        last = ev.revision;
                        delivered.insert(ev.revision, e);
                    }
                    Some(Kind::Reset(r)) => panic!("round {round}: reset {r:?} (seed {seed})"),
                    Some(Kind::Snapshot(_)) | Some(Kind::Synced(_)) if round == 0 => {
                        if let Some(Kind::Synced(_)) = ev.kind {
                            last = ev.revision;
                        }
                    }
                    _ => {}
                },
                Ok(_) => break,
            }
            if killed && Instant::now() > kill_at + Duration::from_secs(5) {
                break;
            }
        }
    }
    assert!(delivered.len() > 50, "the churn made events ({} delivered)", delivered.len());

    // The churn stops; one more plegd catches up.
    stop_churn.cancel();
    churning.await.unwrap();
    let p = start(BIN, &h.endpoint, state.path(), h.dir.path()).await;
    tokio::time::sleep(Duration::from_millis(1500)).await;
    // `since_revision = 0` asks for a snapshot: resume from just before the first
    // delivered event instead (revision 1 itself, if delivered, is compared from 2 on).
    let from = delivered.keys().next().map_or(1, |r| r.saturating_sub(1)).max(1);
    let (mut s, started) = open(&p, from, epoch).await;
    assert!(started.resumed && started.epoch == epoch, "the whole journal is still there: {started:?}");
    let replayed = replay(&mut s).await;
    let revs: Vec<u64> = replayed.keys().copied().collect();
    assert_eq!(revs, (from + 1..=from + revs.len() as u64).collect::<Vec<_>>(), "every revision after {from}, once");
    for (rev, was) in delivered.range(from + 1..) {
        let now = replayed.get(rev).unwrap_or_else(|| panic!("delivered revision {rev} was lost (seed {seed})"));
        // Compared decoded: the API's label maps encode in no fixed order.
        if was != now {
            panic!("revision {rev} was delivered as one event and is now another (seed {seed}):\n{was:#?}\n{now:#?}");
        }
    }

    // And the journal's view equals the runtime once the relister has caught up.
    assert_eq!(view(&p).await, truth(&h.sim).await, "the view after the crashes is the runtime (seed {seed})");
    drop(p);
    h.stop().await;
}

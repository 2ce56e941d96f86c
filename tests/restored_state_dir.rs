//! A state dir put back from a copy taken in the same boot (a backup, a volume snapshot
//! rolled back) holds the journal's epoch at an older revision than the one this boot
//! handed out. Its next revisions name other events; a watcher that resumes past them
//! must be told to start over (a new epoch, a fresh snapshot), never `resumed`.

mod support;

use std::time::Duration;

use plegd::cri::spec::{ContainerSpec, PodSpec};
use plegd::proto::plegd as api;
use plegd::proto::plegd::watch_event::Kind;

/// Copies every file of `from` into `to` (replacing what is there), as a backup tool would.
fn copy_dir(from: &std::path::Path, to: &std::path::Path) {
    for e in std::fs::read_dir(to).unwrap() {
        let p = e.unwrap().path();
        if p.is_file() {
            std::fs::remove_file(p).unwrap();
        }
    }
    for e in std::fs::read_dir(from).unwrap() {
        let p = e.unwrap().path();
        if p.is_file() {
            std::fs::copy(&p, to.join(p.file_name().unwrap())).unwrap();
        }
    }
}

async fn start(h: support::SimHarness, state: &std::path::Path) -> support::Plegd {
    let state = state.to_owned();
    support::start_plegd_on(h, move |c| c.state_dir = Some(state)).await
}

/// Opens a Watch and reads to its start: (epoch, resumed) and the stream.
async fn watch(p: &support::Plegd, since: u64, epoch: u64) -> (api::StreamStart, tonic::Streaming<api::WatchEvent>) {
    let mut s = p
        .client()
        .watch(api::WatchRequest { since_revision: since, epoch, ..Default::default() })
        .await
        .expect("watch")
        .into_inner();
    let first = tokio::time::timeout(Duration::from_secs(5), s.message()).await.unwrap().unwrap().unwrap();
    let Some(Kind::Start(start)) = first.kind else { panic!("no start first: {first:?}") };
    (start, s)
}

async fn run_pods(p: &support::Plegd, prefix: &str, n: usize) {
    for i in 0..n {
        p.h.run_pod(&PodSpec::new("default", &format!("{prefix}-{i}")), &[ContainerSpec::new("app")]).await;
    }
    // Until the journal has them.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while p.app.journal().list(&Default::default()).0.iter().filter(|s| s.name.starts_with(prefix)).count() < n {
        assert!(tokio::time::Instant::now() < deadline, "the pods never reached the journal");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_state_dir_restored_from_a_copy_starts_a_new_epoch_and_a_watcher_past_it_is_reset() {
    let state = tempfile::tempdir().unwrap();
    let backup = tempfile::tempdir().unwrap();
    let p = start(support::SimHarness::start().await, state.path()).await;
    run_pods(&p, "first", 3).await;
    let h = p.stop_plegd().await;
    copy_dir(state.path(), backup.path());

    // The same boot goes on: more events, and a watcher that has them all.
    let p = start(h, state.path()).await;
    run_pods(&p, "second", 4).await;
    let (epoch, revision) = (p.app.journal().epoch(), p.app.journal().revision());
    let (resumable, _) = watch(&p, revision, epoch).await;
    assert!(resumable.resumed && resumable.epoch == epoch, "a resume of the live journal is exact: {resumable:?}");
    let h = p.stop_plegd().await;

    // The state dir is put back from the copy; the journal then runs past the watcher's
    // revision again, with other events.
    copy_dir(backup.path(), state.path());
    let p = start(h, state.path()).await;
    run_pods(&p, "third", 6).await;
    assert!(p.app.journal().revision() > revision, "the new history passed the watcher's revision");
    let (began, mut s) = watch(&p, revision, epoch).await;
    assert!(
        !began.resumed && began.epoch != epoch,
        "a journal restored from a copy cannot prove its revisions: a new epoch ({began:?}, was {epoch})"
    );
    // The watcher starts over from a snapshot of every pod.
    let mut names = Vec::new();
    loop {
        let ev = tokio::time::timeout(Duration::from_secs(5), s.message()).await.unwrap().unwrap().unwrap();
        match ev.kind {
            Some(Kind::Snapshot(pod)) => names.push(pod.name),
            Some(Kind::Synced(_)) => break,
            Some(Kind::Reset(_)) => {}
            other => panic!("before the snapshot: {other:?}"),
        }
    }
    assert_eq!(names.len(), 13, "every pod: {names:?}");

    // The next start of the same boot continues the new epoch: a resume is exact again.
    let (epoch, revision) = (p.app.journal().epoch(), p.app.journal().revision());
    let h = p.stop_plegd().await;
    let p = start(h, state.path()).await;
    let (again, _) = watch(&p, revision, epoch).await;
    assert!(again.resumed && again.epoch == epoch, "the new lineage continues: {again:?}");
    p.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_copy_of_an_earlier_journal_put_back_after_a_new_one_began_starts_a_new_epoch() {
    let state = tempfile::tempdir().unwrap();
    let backup = tempfile::tempdir().unwrap();
    let p = start(support::SimHarness::start().await, state.path()).await;
    run_pods(&p, "first", 3).await;
    let (old_epoch, old_revision) = (p.app.journal().epoch(), p.app.journal().revision());
    let h = p.stop_plegd().await;
    copy_dir(state.path(), backup.path());
    // The state dir is wiped: a new journal, a new epoch, which the mark now names.
    std::fs::remove_dir_all(state.path()).unwrap();
    std::fs::create_dir(state.path()).unwrap();
    let p = start(h, state.path()).await;
    assert_ne!(p.app.journal().epoch(), old_epoch);
    let h = p.stop_plegd().await;
    // The earlier journal is put back and runs on past where a watcher of it stopped.
    copy_dir(backup.path(), state.path());
    let p = start(h, state.path()).await;
    run_pods(&p, "later", 4).await;
    let (began, _) = watch(&p, old_revision, old_epoch).await;
    assert!(!began.resumed && began.epoch != old_epoch, "not resumed into a history that forked: {began:?}");
    p.stop().await;
}

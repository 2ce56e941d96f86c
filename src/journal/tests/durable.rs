//! The journal on disk: records read back as delivered, a restart that keeps the state
//! dir keeps the epoch, the revisions and every resume, budgets, compaction, a full disk.

use super::super::*;
use crate::model::event::EventSource;
use futures_util::StreamExt;

pub(super) fn status(uid: &str, app: &str, running: bool) -> Arc<PodStatus> {
    let labels: Labels = [("app", app)].into();
    let container = crate::model::ContainerStatus {
        id: format!("c-{uid}"),
        name: "main".into(),
        attempt: 0,
        state: if running { crate::model::ContainerState::Running } else { crate::model::ContainerState::Exited },
        created_at: 1,
        started_at: 2,
        finished_at: if running { 0 } else { 3 },
        exit_code: if running { 0 } else { 137 },
        reason: String::new(),
        message: String::new(),
        image: "img".into(),
        labels: labels.clone(),
        annotations: Labels::default(),
        ..Default::default()
    };
    let sandbox = crate::model::SandboxStatus {
        id: format!("s-{uid}"),
        attempt: 0,
        state: crate::model::SandboxState::Ready,
        created_at: 1,
        ip: "10.0.0.1".into(),
        additional_ips: vec![],
        ..Default::default()
    };
    Arc::new(PodStatus {
        labels,
        sandboxes: vec![sandbox],
        containers: vec![Arc::new(container)],
        ..PodStatus::empty(uid, "ns", &format!("pod-{uid}"))
    })
}

pub(super) fn event(uid: &str, kind: EventType, pod: Option<Arc<PodStatus>>) -> PodLifecycleEvent {
    PodLifecycleEvent {
        pod_uid: uid.into(),
        pod_namespace: "ns".into(),
        pod_name: format!("pod-{uid}").into(),
        kind,
        container_id: format!("c-{uid}"),
        container_name: "main".into(),
        is_sandbox: false,
        source: EventSource::Relist,
        observed_at: SystemTime::UNIX_EPOCH + Duration::from_secs(1_700_000_000),
        runtime_timestamp: Some(SystemTime::UNIX_EPOCH + Duration::from_secs(1_700_000_001)),
        pod,
        message: String::new(),
    }
}

pub(super) fn cfg() -> JournalConfig {
    JournalConfig { capacity: 100_000, client_buffer: 100_000, memory_budget: 8 << 20, disk_budget: 256 << 20 }
}

/// A journal of `n` events written in `dir` and closed, then `edit` (SQL) run on its
/// file, as another version of plegd would have left it; its epoch.
pub(super) fn written_then_edited(dir: &std::path::Path, n: usize, edit: &str) -> u64 {
    let j = Journal::open(&cfg(), &Place::at(dir), JournalMetrics::throwaway()).unwrap();
    churn(&j, n);
    let epoch = j.epoch();
    drop(j);
    rusqlite::Connection::open(dir.join(store::FILE)).unwrap().execute_batch(edit).unwrap();
    epoch
}

/// Appends `n` events about pods `p0..p9`, alternating starts and deaths.
pub(super) fn churn(j: &Journal, n: usize) {
    for i in 0..n {
        let uid = format!("p{}", i % 10);
        let running = i % 2 == 0;
        let kind = if running { EventType::ContainerStarted } else { EventType::ContainerDied };
        j.append(event(&uid, kind, Some(status(&uid, "web", running)))).expect("appended");
    }
}

/// Every entry a replay gives, disk pages first, then memory.
pub(super) fn replay_all(mut sub: Subscription) -> Vec<Arc<Entry>> {
    let start = std::mem::replace(&mut sub.start, Start::Replay(Replay::default()));
    let Start::Replay(Replay { disk, memory }) = start else { panic!("a replay, not a snapshot") };
    let mut out = Vec::new();
    if let Some(mut d) = disk {
        while let Some(page) = d.next_page().expect("page") {
            out.extend(page);
        }
    }
    out.extend(memory);
    out
}

fn same(a: &Entry, b: &Entry) -> bool {
    a.revision == b.revision
        && record::encode_event(&a.event, &a.meta, a.left.as_deref())
            == record::encode_event(&b.event, &b.meta, b.left.as_deref())
}

#[test]
fn a_record_reads_back_as_the_entry_that_was_delivered() {
    let ev = event("a", EventType::ContainerDied, Some(status("a", "web", false)));
    let meta = PodMeta::of(ev.pod.as_deref().unwrap());
    let body = record::encode_event(&ev, &meta, None);
    let record::DecodedEvent { event: back, meta: back_meta, left } = record::decode_event(&body).unwrap();
    assert_eq!(back_meta, meta);
    assert_eq!(left, None);
    assert_eq!(back.pod.as_deref(), ev.pod.as_deref(), "the pod's status, exit code and times included");
    assert_eq!(
        (back.kind, back.source, back.observed_at, back.runtime_timestamp),
        (ev.kind, ev.source, ev.observed_at, ev.runtime_timestamp)
    );
    assert!(record::decode_event(b"\xff\xff\xff").is_err(), "garbage is an error, not a panic");
}

#[tokio::test]
async fn a_restart_that_keeps_the_state_dir_keeps_the_epoch_the_revisions_and_every_resume() {
    let dir = tempfile::tempdir().unwrap();
    let j = Journal::open(&cfg(), &Place::at(dir.path()), JournalMetrics::throwaway()).unwrap();
    churn(&j, 50);
    let (epoch, before) = (j.epoch(), replay_all(j.subscribe(Since::Revision(0, j.epoch()), Default::default())));
    let view_before: Vec<_> = j.pods();
    drop(j);

    let j = Journal::open(&cfg(), &Place::at(dir.path()), JournalMetrics::throwaway()).unwrap();
    assert_eq!((j.epoch(), j.revision()), (epoch, 50), "the same journal, not a new one");
    assert_eq!(j.pods(), view_before, "the view, which seeds the relister, is what it was");
    for since in [0, 17, 49, 50] {
        let sub = j.subscribe(Since::Revision(since, epoch), Default::default());
        assert_eq!(sub.reset, None, "a resume from {since} needs no reset");
        let got = replay_all(sub);
        assert_eq!(got.len() as u64, 50 - since);
        assert!(
            got.iter().zip(&before[since as usize..]).all(|(a, b)| same(a, b)),
            "the same events under the same revisions"
        );
    }
    // And it continues: the next event is 51, delivered live after the replay.
    let mut feed = super::feed_of(j.subscribe(Since::Revision(50, epoch), Default::default()));
    churn(&j, 1);
    assert_eq!(super::next_entry(&mut feed).await.revision, 51);
}

#[test]
fn a_resume_older_than_memory_reads_the_disk_page_by_page_and_meets_memory_without_gap_or_repeat() {
    let dir = tempfile::tempdir().unwrap();
    let mut c = cfg();
    c.memory_budget = 64 << 10;
    let j = Journal::open(&c, &Place::at(dir.path()), JournalMetrics::throwaway()).unwrap();
    churn(&j, 3000);
    let web = Filter { selector: Selector::parse("app=web").unwrap(), ..Default::default() };
    for (since, filter) in [(0, Filter::default()), (1234, Filter::default()), (7, web)] {
        let sub = j.subscribe(Since::Revision(since, j.epoch()), Arc::new(filter));
        let Start::Replay(Replay { disk, memory }) = &sub.start else { panic!("a replay") };
        assert!(disk.is_some() && !memory.is_empty(), "both parts in play");
        let revs: Vec<u64> = replay_all(sub).iter().map(|e| e.revision).collect();
        assert_eq!(revs, (since + 1..=3000).collect::<Vec<_>>());
    }
    // Memory kept within its budget.
    let inner = j.lock();
    assert!(
        inner.ring_bytes <= 64 << 10 && inner.ring.len() < 3000,
        "{} bytes, {} entries",
        inner.ring_bytes,
        inner.ring.len()
    );
}

#[test]
fn the_disk_keeps_its_byte_budget_and_a_resume_from_a_compacted_revision_is_reset() {
    let dir = tempfile::tempdir().unwrap();
    let mut c = cfg();
    c.memory_budget = 64 << 10;
    c.disk_budget = 256 << 10;
    let j = Journal::open(&c, &Place::at(dir.path()), JournalMetrics::throwaway()).unwrap();
    churn(&j, 5000);
    let kept = match &mut j.lock().disk {
        Disk::Durable(s) => (s.kept_bytes(), s.oldest(), s.used_bytes_now()),
        _ => panic!("durable"),
    };
    assert!(kept.0 <= 256 << 10, "{} bytes kept", kept.0);
    assert!(kept.2 <= 256 << 10, "{} bytes of the file in use", kept.2);
    assert!(kept.1 > 1, "the oldest revisions were compacted away");
    let sub = j.subscribe(Since::Revision(kept.1 - 2, j.epoch()), Default::default());
    assert_eq!(sub.reset, Some(ResetReason::RevisionTooOld));
    let sub = j.subscribe(Since::Revision(kept.1 - 1, j.epoch()), Default::default());
    assert_eq!(sub.reset, None, "the oldest kept revision is still a resume point");
    assert_eq!(replay_all(sub).first().map(|e| e.revision), Some(kept.1));
}

/// Appends `n` events over `pods` pods whose status (a 2,900-byte annotation)
/// encodes to about 3 KiB, a kubelet's pod with a few containers.
fn append_page_sized_pods(j: &Journal, n: usize, pods: usize) {
    let filler = "x".repeat(2900);
    for i in 0..n {
        let uid = format!("p{}", i % pods);
        let mut pod = (*status(&uid, "web", i % 2 == 0)).clone();
        pod.annotations = [("note", filler.as_str())].into();
        j.append(event(&uid, EventType::ContainerStarted, Some(Arc::new(pod)))).expect("appended");
    }
}

#[test]
fn records_that_fill_most_of_a_page_still_keep_the_file_within_its_budget() {
    // A kubelet's pod with a few containers encodes to about 3 KiB: one record per
    // 4 KiB page, a quarter of the file unused. Counting record bytes alone let a
    // 256 MiB budget grow a 351 MiB file (benches/journal.rs, realistic pods).
    let dir = tempfile::tempdir().unwrap();
    let mut c = cfg();
    c.memory_budget = 64 << 10;
    c.disk_budget = 1 << 20;
    let j = Journal::open(&c, &Place::at(dir.path()), JournalMetrics::throwaway()).unwrap();
    append_page_sized_pods(&j, 2000, 10);
    let (kept, used, oldest) = match &mut j.lock().disk {
        Disk::Durable(s) => (s.kept_bytes(), s.used_bytes_now(), s.oldest()),
        _ => panic!("durable"),
    };
    assert!(used <= 1 << 20, "{used} bytes of the file in use for {kept} bytes of records");
    assert!(used >= (1 << 20) * 8 / 10, "and the budget is used, not wasted: {used}");
    assert!(oldest > 1 && kept > 0);
}

#[test]
fn a_view_that_fills_the_disk_budget_still_leaves_the_events_a_quarter_of_it() {
    // Were the view (one record per pod, which compaction cannot shrink) counted in
    // the file's use, a node whose pods alone fill the budget would compact the
    // disk to a single revision: no resume across a restart.
    let dir = tempfile::tempdir().unwrap();
    let mut c = cfg();
    c.memory_budget = 64 << 10;
    c.disk_budget = 1 << 20;
    let j = Journal::open(&c, &Place::at(dir.path()), JournalMetrics::throwaway()).unwrap();
    append_page_sized_pods(&j, 1500, 400);
    let (kept, oldest) = match &j.lock().disk {
        Disk::Durable(s) => (s.kept_bytes(), s.oldest()),
        _ => panic!("durable"),
    };
    assert!(kept >= (1 << 20) / 8, "the events keep a share of the budget: {kept} bytes");
    let latest = j.revision();
    assert!(latest - oldest >= 30, "revisions {oldest}..={latest} kept");
    let sub = j.subscribe(Since::Revision(latest - 20, j.epoch()), Default::default());
    assert_eq!(sub.reset, None, "a recent resume point still works");
}

#[test]
fn a_replay_whose_revisions_are_compacted_under_it_stops_with_an_error_not_a_gap() {
    let dir = tempfile::tempdir().unwrap();
    let mut c = cfg();
    c.memory_budget = 64 << 10;
    c.capacity = 2000;
    let j = Journal::open(&c, &Place::at(dir.path()), JournalMetrics::throwaway()).unwrap();
    churn(&j, 1500);
    let mut sub = j.subscribe(Since::Revision(0, j.epoch()), Default::default());
    let start = std::mem::replace(&mut sub.start, Start::Replay(Replay::default()));
    let Start::Replay(Replay { disk: Some(mut d), .. }) = start else { panic!("a replay from disk") };
    let first = d.next_page().unwrap().unwrap();
    assert_eq!(first.first().unwrap().revision, 1);
    churn(&j, 2000);
    match d.next_page() {
        Err(ReplayError::Compacted(r)) => assert_eq!(r, first.last().unwrap().revision + 1),
        other => panic!("expected a compaction error, got {other:?}"),
    }
}

#[test]
fn a_corrupt_file_is_moved_aside_and_a_new_epoch_begins() {
    let dir = tempfile::tempdir().unwrap();
    let j = Journal::open(&cfg(), &Place::at(dir.path()), JournalMetrics::throwaway()).unwrap();
    churn(&j, 10);
    let epoch = j.epoch();
    drop(j);
    // Wreck it: keep the header, scribble over the pages.
    let path = dir.path().join(store::FILE);
    let _ = store::Reader::checkpoint(&path);
    let mut bytes = std::fs::read(&path).unwrap();
    for b in bytes.iter_mut().skip(100) {
        *b = 0xA5;
    }
    std::fs::write(&path, &bytes).unwrap();
    let _ = std::fs::remove_file(dir.path().join(format!("{}-wal", store::FILE)));

    let j = Journal::open(&cfg(), &Place::at(dir.path()), JournalMetrics::throwaway()).expect("never a crash loop");
    assert_ne!(j.epoch(), epoch, "a new epoch: clients reset");
    assert_eq!((j.revision(), j.pods().len()), (0, 0));
    assert_eq!(j.disk_problem(), None, "the new journal is durable");
    let aside: Vec<_> = std::fs::read_dir(dir.path())
        .unwrap()
        .filter_map(|e| e.ok()?.file_name().into_string().ok())
        .filter(|n| n.starts_with("journal.db.bad-"))
        .collect();
    assert!(!aside.is_empty(), "the old file is kept aside for a post-mortem");
    churn(&j, 3);
    drop(j);
    let j = Journal::open(&cfg(), &Place::at(dir.path()), JournalMetrics::throwaway()).unwrap();
    assert_eq!(j.revision(), 3, "and the new one persists");
}

#[test]
fn a_disk_that_keeps_corrupting_the_journal_leaves_only_the_newest_copies_aside() {
    let dir = tempfile::tempdir().unwrap();
    // Older copies from earlier corruptions (one with its WAL), and a stranger.
    for (name, body) in [
        ("journal.db.bad-100", "old"),
        ("journal.db.bad-100-wal", "old wal"),
        ("journal.db.bad-200", "old"),
        ("journal.db.bad-300", "old"),
        ("journal.db.bad-300-1", "old"),
        ("notes.txt", "not ours"),
    ] {
        std::fs::write(dir.path().join(name), body).unwrap();
    }
    let aside = |dir: &std::path::Path| {
        let mut v: Vec<String> = std::fs::read_dir(dir)
            .unwrap()
            .filter_map(|e| e.ok()?.file_name().into_string().ok())
            .filter(|n| n.starts_with("journal.db.bad-"))
            .collect();
        v.sort();
        v
    };
    for round in 0..3 {
        std::fs::write(dir.path().join(store::FILE), format!("garbage {round}")).unwrap();
        let j = Journal::open(&cfg(), &Place::at(dir.path()), JournalMetrics::throwaway()).expect("never a crash loop");
        assert_eq!(j.disk_problem(), None);
        drop(j);
        let now = aside(dir.path());
        assert!(now.len() <= store::KEEP_ASIDE, "round {round}: {now:?}");
        assert!(!now.iter().any(|n| n.starts_with("journal.db.bad-100")), "the oldest (and its WAL) went: {now:?}");
        let newest =
            now.iter().filter(|n| std::fs::read_to_string(dir.path().join(n)).unwrap() == format!("garbage {round}"));
        assert_eq!(newest.count(), 1, "round {round}: the copy just moved aside is kept: {now:?}");
    }
    assert!(dir.path().join("notes.txt").exists(), "nothing else in the dir is touched");
}

#[test]
fn a_file_that_is_not_a_database_is_moved_aside_too() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join(store::FILE), "hello, I am not SQLite").unwrap();
    let j = Journal::open(&cfg(), &Place::at(dir.path()), JournalMetrics::throwaway()).unwrap();
    assert_eq!(j.disk_problem(), None);
    churn(&j, 2);
    assert_eq!(j.revision(), 2);
}

#[test]
fn a_state_dir_that_cannot_be_created_is_an_error_naming_the_flag() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("a-file");
    std::fs::write(&file, "").unwrap();
    let err =
        Journal::open(&cfg(), &Place::at(file.join("state")), JournalMetrics::throwaway()).err().expect("an error");
    assert!(matches!(err, StoreError::CreateDir { .. }));
    assert!(err.to_string().starts_with("--state-dir: cannot create"), "{err}");
}

#[tokio::test]
async fn a_full_disk_keeps_serving_from_memory_under_a_new_epoch_and_recovers_when_space_returns() {
    let dir = tempfile::tempdir().unwrap();
    let registry = &mut crate::metrics::Registry::default();
    let metrics = JournalMetrics::register(registry);
    let j = Journal::open(&cfg(), &Place::at(dir.path()), metrics.clone()).unwrap();
    churn(&j, 20);
    let durable_epoch = j.epoch();
    let mut watcher = super::feed_of(j.subscribe(Since::Revision(20, durable_epoch), Default::default()));
    // The disk fills: SQLite's own "database or disk is full".
    let pages = match &j.lock().disk {
        Disk::Durable(s) => s.page_count(),
        _ => panic!("durable"),
    };
    j.limit_disk(pages);
    churn(&j, 200);
    assert_eq!(j.revision(), 220, "events still flow");
    assert!(j.disk_problem().is_some_and(|e| e.contains("full")), "{:?}", j.disk_problem());
    assert_eq!(metrics.durable.get(), 0);
    assert!(metrics.write_errors.get() >= 1);
    let memory_epoch = j.epoch();
    assert_ne!(memory_epoch, durable_epoch, "what the disk lacks is never delivered under the durable epoch");
    // The watcher got what was durable, then was told to start over.
    assert!(matches!(watcher.next().await, Some(FeedItem::Overflowed(Dropped::NewEpoch))));
    let resumed = j.subscribe(Since::Revision(20, durable_epoch), Default::default());
    assert_eq!(resumed.reset, Some(ResetReason::RevisionTooOld), "a resume in the old epoch is reset");
    // Space returns; the next batch after the retry period rewrites the disk.
    j.limit_disk(1 << 30);
    j.backdate_disk_retry();
    churn(&j, 1);
    assert_eq!(j.disk_problem(), None);
    assert_eq!(metrics.durable.get(), 1);
    drop((watcher, resumed, j));
    let j = Journal::open(&cfg(), &Place::at(dir.path()), JournalMetrics::throwaway()).unwrap();
    assert_eq!((j.epoch(), j.revision()), (memory_epoch, 221), "the memory epoch became the durable one");
    let sub = j.subscribe(Since::Revision(210, memory_epoch), Default::default());
    assert_eq!(sub.reset, None);
    assert_eq!(replay_all(sub).len(), 11);
}

#[test]
fn a_second_plegd_on_the_same_state_dir_waits_for_the_first_to_exit_and_continues_its_epoch() {
    let dir = tempfile::tempdir().unwrap();
    let first = Journal::open(&cfg(), &Place::at(dir.path()), JournalMetrics::throwaway()).unwrap();
    churn(&first, 10);
    let (epoch, revision) = (first.epoch(), first.revision());
    // The old pod of a rollout exits a moment after the new one starts.
    let exiting = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(300));
        drop(first);
    });
    let (m, wait) = (JournalMetrics::throwaway(), Duration::from_secs(10));
    let second = Journal::open_waiting(&cfg(), &Place::at(dir.path()), m, wait, &Default::default()).unwrap();
    exiting.join().unwrap();
    assert_eq!(second.disk_problem(), None);
    assert_eq!((second.epoch(), second.revision()), (epoch, revision), "the journal passed from one to the other");
}

#[test]
fn a_second_plegd_is_kept_out_even_when_a_lock_file_is_deleted() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = cfg();
    let (first, _) = store::Store::open(store_config(&cfg, dir.path().to_owned(), None), "boot").unwrap();
    // What earlier versions locked, deleted by a cleanup script or a person.
    let _ = std::fs::remove_file(dir.path().join(store::LOCK_FILE));
    match store::Store::open(store_config(&cfg, dir.path().to_owned(), None), "boot") {
        Err(StoreError::Locked { .. }) => {}
        Err(e) => panic!("another error: {e}"),
        Ok(_) => panic!("a second writer opened the journal another holds"),
    }
    drop(first);
    assert!(
        store::Store::open(store_config(&cfg, dir.path().to_owned(), None), "boot").is_ok(),
        "free once the first is gone"
    );
}

#[test]
fn an_older_plegd_holding_its_lock_file_keeps_a_newer_one_out() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = cfg();
    // What earlier versions lock: the file alone.
    let old = std::fs::File::create(dir.path().join(store::LOCK_FILE)).unwrap();
    old.try_lock().unwrap();
    match store::Store::open(store_config(&cfg, dir.path().to_owned(), None), "boot") {
        Err(StoreError::Locked { .. }) => {}
        Err(e) => panic!("another error: {e}"),
        Ok(_) => panic!("a newer plegd opened the journal an older one holds"),
    }
    drop(old);
    assert!(store::Store::open(store_config(&cfg, dir.path().to_owned(), None), "boot").is_ok());
}

#[test]
fn a_state_dir_held_past_the_wait_is_left_alone_and_taken_over_once_free() {
    let dir = tempfile::tempdir().unwrap();
    let first = Journal::open(&cfg(), &Place::at(dir.path()), JournalMetrics::throwaway()).unwrap();
    churn(&first, 10);
    let (m, wait) = (JournalMetrics::throwaway(), Duration::from_millis(200));
    let second = Journal::open_waiting(&cfg(), &Place::at(dir.path()), m, wait, &Default::default()).unwrap();
    let problem = second.disk_problem().expect("not durable while another plegd holds the dir");
    assert!(problem.contains("held by another process"), "{problem}");
    // Neither writes over the other: the first goes on, the second keeps to memory.
    churn(&second, 5);
    second.backdate_disk_retry();
    churn(&second, 1);
    assert!(second.disk_problem().is_some(), "still held");
    churn(&first, 1);
    assert_eq!(first.disk_problem(), None);
    drop(first);
    second.backdate_disk_retry();
    churn(&second, 1);
    assert_eq!(second.disk_problem(), None, "the dir is taken over once free");
    let (epoch, revision) = (second.epoch(), second.revision());
    drop(second);
    let third = Journal::open(&cfg(), &Place::at(dir.path()), JournalMetrics::throwaway()).unwrap();
    assert_eq!((third.epoch(), third.revision()), (epoch, revision));
}

/// A downgrade: an older plegd meets a journal a newer one wrote. It never misreads it
/// and never crashes: it moves it aside, says why, and begins a new epoch, so a watcher
/// that resumes is reset rather than given a gap.
#[test]
fn a_journal_of_a_newer_layout_is_moved_aside_and_a_new_epoch_begins() {
    let dir = tempfile::tempdir().unwrap();
    let newer = format!("UPDATE meta SET value = {} WHERE key = 'schema'", store::SCHEMA + 1);
    let epoch = written_then_edited(dir.path(), 10, &newer);
    let j = Journal::open(&cfg(), &Place::at(dir.path()), JournalMetrics::throwaway()).expect("never a crash loop");
    assert_ne!(j.epoch(), epoch, "a new epoch");
    assert_eq!(j.revision(), 0, "nothing of the newer journal read");
    let resumed = j.subscribe(Since::Revision(10, epoch), Default::default());
    assert_eq!(resumed.reset, Some(ResetReason::RevisionTooOld), "a watcher of the old epoch is reset");
    let aside: Vec<_> = std::fs::read_dir(dir.path())
        .unwrap()
        .filter_map(|e| e.ok()?.file_name().into_string().ok())
        .filter(|n| n.starts_with(&format!("{}.bad-", store::FILE)))
        .collect();
    assert_eq!(aside.len(), 1, "the newer journal is kept, moved aside: {aside:?}");
}

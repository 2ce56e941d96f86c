//! A filtered client that resumes (from memory or from disk) after a pod it held
//! changed its labels and left its selection is reset, never sent a replay that leaves
//! the pod in its copy for good.

use super::super::*;
use super::durable::{cfg, churn, event, replay_all, status, written_then_edited};

/// A filtered client resumes after `r`; the pod it held changed its labels after
/// `r` and left its selection. A replay of the matching entries would say nothing
/// of the pod (its later events no longer match) and the client would keep it for
/// good; it must be reset instead, whether the replay comes from memory or disk.
fn resume_after_a_pod_left(memory_budget: u64) -> (Subscription, Result<Vec<Arc<Entry>>, ReplayError>) {
    let dir = tempfile::tempdir().unwrap();
    let j =
        Journal::open(&JournalConfig { memory_budget, ..cfg() }, &Place::at(dir.path()), JournalMetrics::throwaway())
            .unwrap();
    j.append(event("a", EventType::ContainerStarted, Some(status("a", "web", true)))).unwrap();
    let web = Arc::new(Filter { selector: Selector::parse("app=web").unwrap(), ..Default::default() });
    let (listed, at) = j.list(&web);
    assert_eq!(listed.len(), 1, "ListPods(app=web) holds the pod");
    // Its sandbox recreated with app=db, then some churn of other pods.
    j.append(event("a", EventType::ContainerStarted, Some(status("a", "db", true)))).unwrap();
    churn(&j, 20);
    let mut sub = j.subscribe(Since::Revision(at, j.epoch()), web);
    let replayed = match std::mem::replace(&mut sub.start, Start::Replay(Replay::default())) {
        Start::Replay(Replay { disk, memory }) => {
            let mut out = Vec::new();
            let mut err = None;
            if let Some(mut d) = disk {
                loop {
                    match d.next_page() {
                        Ok(Some(p)) => out.extend(p),
                        Ok(None) => break,
                        Err(e) => {
                            err = Some(e);
                            break;
                        }
                    }
                }
            }
            out.extend(memory);
            match err {
                Some(e) => Err(e),
                None => Ok(out),
            }
        }
        start @ Start::Snapshot { .. } => {
            sub.start = start;
            Ok(Vec::new())
        }
    };
    (sub, replayed)
}

#[test]
fn a_filtered_resume_from_memory_is_reset_when_a_pod_left_the_selection() {
    let (sub, replayed) = resume_after_a_pod_left(8 << 20);
    assert_eq!(sub.reset, Some(ResetReason::RuntimeResync), "not a replay that ends in a bookmark");
    let Start::Snapshot { pods, .. } = &sub.start else { panic!("a fresh snapshot follows the reset") };
    assert!(pods.iter().all(|p| p.uid != "a"), "the snapshot no longer holds the pod");
    assert!(replayed.unwrap().is_empty());
}

#[test]
fn a_filtered_resume_from_disk_stops_with_a_reset_when_a_pod_left_the_selection() {
    // A memory budget of one record: the label change is replayed from disk.
    let (sub, replayed) = resume_after_a_pod_left(1);
    assert_eq!(sub.reset, None, "memory does not hold the change; the disk replay finds it");
    match replayed {
        Err(ReplayError::LeftSelection { uid, revision }) => assert_eq!((uid.as_str(), revision), ("a", 2)),
        other => panic!("the disk replay must stop at the pod's label change, got {other:?}"),
    }
}

#[test]
fn a_resume_whose_filter_still_matches_after_a_label_change_is_a_plain_replay() {
    let dir = tempfile::tempdir().unwrap();
    let j = Journal::open(&cfg(), &Place::at(dir.path()), JournalMetrics::throwaway()).unwrap();
    j.append(event("a", EventType::ContainerStarted, Some(status("a", "web", true)))).unwrap();
    j.append(event("a", EventType::ContainerStarted, Some(status("a", "db", true)))).unwrap();
    // Unfiltered, and a selector both label sets match: nothing left.
    for sel in ["", "app"] {
        let f = Arc::new(Filter { selector: Selector::parse(sel).unwrap(), ..Default::default() });
        let sub = j.subscribe(Since::Revision(1, j.epoch()), f);
        assert_eq!(sub.reset, None, "selector {sel:?}");
        assert_eq!(replay_all(sub).iter().map(|e| e.revision).collect::<Vec<_>>(), [2]);
    }
}

#[test]
fn a_label_change_reads_back_from_disk_with_who_the_pod_was() {
    let ev = event("a", EventType::ContainerStarted, Some(status("a", "db", true)));
    let (meta, was) = (PodMeta::of(&status("a", "db", true)), PodMeta::of(&status("a", "web", true)));
    let back = record::decode_event(&record::encode_event(&ev, &meta, Some(&was))).unwrap();
    assert_eq!((back.meta, back.left), (meta, Some(was)));
}

#[test]
fn a_selectors_resume_into_records_an_earlier_version_wrote_starts_over() {
    let dir = tempfile::tempdir().unwrap();
    // The journal as an earlier version left it: its records say nothing of who a pod
    // was before a label change.
    let epoch = written_then_edited(dir.path(), 10, "DELETE FROM meta WHERE key = 'left_since'");
    let j = Journal::open(&cfg(), &Place::at(dir.path()), JournalMetrics::throwaway()).unwrap();
    assert_eq!(j.epoch(), epoch, "the journal continues");
    churn(&j, 5);
    let web = Arc::new(Filter { selector: Selector::parse("app=web").unwrap(), ..Default::default() });
    let sub = j.subscribe(Since::Revision(3, epoch), web.clone());
    assert_eq!(sub.reset, Some(ResetReason::RuntimeResync), "from before: a pod may have left unseen");
    let sub = j.subscribe(Since::Revision(11, epoch), web);
    assert_eq!(sub.reset, None, "from records that say it: a plain replay");
    let sub = j.subscribe(Since::Revision(3, epoch), Arc::new(Filter::default()));
    assert_eq!(sub.reset, None, "without a selector nothing can leave");
}

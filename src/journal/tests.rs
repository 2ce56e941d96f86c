//! The journal's tests: its guarantees in memory (`basics`, `guarantees`), on disk
//! (`durable`), for filtered resumes when pods leave a selection (`selection`), for
//! subscribers that stop reading (`stalled`), and of the feed (`feed`).

mod durable;
mod feed;
mod selection;
mod stalled;
mod timeline;
mod wal;

use std::sync::Arc;

use futures_util::{FutureExt, StreamExt};

use super::{Dropped, Entry, Feed, FeedItem, Subscription};

/// A subscription's feed, the one way to read it.
fn feed_of(sub: Subscription) -> Feed {
    sub.into_feed().1
}

/// What a feed yields without waiting: the revisions of the entries it has ready, and
/// why the journal dropped it, if it did (nothing follows that).
fn ready(feed: &mut Feed) -> (Vec<u64>, Option<Dropped>) {
    let mut revisions = Vec::new();
    while let Some(Some(item)) = feed.next().now_or_never() {
        match item {
            FeedItem::Entry(e) => revisions.push(e.revision),
            FeedItem::Overflowed(why) => return (revisions, Some(why)),
            FeedItem::ReplayStopped(e) => panic!("a replay from memory stopped: {e}"),
        }
    }
    (revisions, None)
}

/// The feed's next item, which must be an entry.
async fn next_entry(feed: &mut Feed) -> Arc<Entry> {
    match feed.next().await {
        Some(FeedItem::Entry(e)) => e,
        other => panic!("an entry, not {other:?}"),
    }
}

mod basics {
    use super::super::*;
    use crate::model::event::EventSource;
    use futures_util::StreamExt;

    pub(super) fn status(uid: &str, ns: &str, app: &str) -> Arc<PodStatus> {
        let labels = [("app".to_string(), app.to_string())].into();
        Arc::new(PodStatus { labels, ..PodStatus::empty(uid, ns, &format!("pod-{uid}")) })
    }

    pub(super) fn event(uid: &str, kind: EventType, pod: Option<Arc<PodStatus>>) -> PodLifecycleEvent {
        PodLifecycleEvent {
            pod_uid: uid.into(),
            pod_namespace: "ns".into(),
            pod_name: format!("pod-{uid}").into(),
            kind,
            container_id: format!("c-{uid}"),
            container_name: "c".into(),
            is_sandbox: false,
            source: EventSource::Relist,
            observed_at: SystemTime::now(),
            runtime_timestamp: None,
            pod,
            message: String::new(),
        }
    }

    #[tokio::test]
    async fn a_snapshot_and_the_live_entries_meet_without_gap() {
        let j = Journal::new(100, 100, JournalMetrics::throwaway());
        j.append(event("a", EventType::ContainerStarted, Some(status("a", "ns", "web"))));
        j.append(event("b", EventType::ContainerStarted, Some(status("b", "ns", "db"))));
        let sub = j.subscribe(Since::Snapshot, Arc::new(Filter::default()));
        let Start::Snapshot { pods, revision } = &sub.start else { panic!() };
        assert_eq!((pods.len(), *revision), (2, 2));
        let mut feed = super::feed_of(sub);
        j.append(event("a", EventType::ContainerDied, Some(status("a", "ns", "web"))));
        assert_eq!(super::next_entry(&mut feed).await.revision, 3);
    }

    #[tokio::test]
    async fn a_removed_pod_leaves_the_view_but_its_events_still_match_its_labels() {
        let j = Journal::new(100, 100, JournalMetrics::throwaway());
        let filter = Filter { selector: Selector::parse("app=web").unwrap(), ..Default::default() };
        let mut feed = super::feed_of(j.subscribe(Since::Snapshot, Arc::new(filter)));
        j.append(event("a", EventType::ContainerStarted, Some(status("a", "ns", "web"))));
        j.append(event("b", EventType::ContainerStarted, Some(status("b", "ns", "db"))));
        j.append(event("a", EventType::ContainerRemoved, None));
        assert_eq!(super::next_entry(&mut feed).await.revision, 1);
        assert_eq!(super::next_entry(&mut feed).await.revision, 3, "the removal of a web pod matches app=web");
        assert!(j.list(&Filter::default()).0.iter().all(|p| p.uid != "a"));
    }

    #[tokio::test]
    async fn a_full_buffer_marks_the_subscriber_and_never_blocks() {
        let j = Journal::new(100, 2, JournalMetrics::throwaway());
        let mut slow = super::feed_of(j.subscribe(Since::Snapshot, Arc::new(Filter::default())));
        let mut fast = super::feed_of(j.subscribe(Since::Snapshot, Arc::new(Filter::default())));
        for i in 0..5 {
            j.append(event("a", EventType::PodSync, Some(status("a", "ns", "web"))));
            assert_eq!(super::next_entry(&mut fast).await.revision, i + 1);
        }
        assert_eq!(super::ready(&mut slow), (vec![], Some(Dropped::FellBehind)), "dropped: none of its entries follow");
        assert!(slow.next().await.is_none(), "and it ended");
        assert_eq!(j.subscribers(), 1);
    }

    #[tokio::test]
    async fn resuming_too_far_back_or_from_another_epoch_resets() {
        let j = Journal::new(3, 10, JournalMetrics::throwaway());
        for _ in 0..5 {
            j.append(event("a", EventType::PodSync, Some(status("a", "ns", "web"))));
        }
        let f = Arc::new(Filter::default());
        let s = j.subscribe(Since::Revision(1, 0), f.clone());
        assert_eq!(s.reset, Some(ResetReason::RevisionTooOld));
        let s = j.subscribe(Since::Revision(2, j.epoch()), f.clone());
        let Start::Replay(r) = &s.start else { panic!("revision 2 is resumable: 3..5 are kept") };
        assert_eq!(r.memory.iter().map(|e| e.revision).collect::<Vec<_>>(), [3, 4, 5]);
        let s = j.subscribe(Since::Revision(2, j.epoch() + 1), f.clone());
        assert_eq!(s.reset, Some(ResetReason::RevisionTooOld), "another process's revisions mean nothing here");
        let s = j.subscribe(Since::Revision(9, 0), f);
        assert_eq!(s.reset, Some(ResetReason::RevisionTooOld), "a revision from the future");
    }

    proptest::proptest! {
        #[test]
        fn a_resume_from_any_kept_revision_equals_the_continuous_stream(
            n in 1usize..200, cap in 1usize..64, at in 0usize..200, types in 0u8..4,
        ) {
            let rt = tokio::runtime::Builder::new_current_thread().build().unwrap();
            rt.block_on(async {
                let j = Journal::new(cap, 1000, JournalMetrics::throwaway());
                let mut filter = Filter::default();
                if types > 0 {
                    filter.types.insert(EventType::ContainerDied);
                }
                let filter = Arc::new(filter);
                let mut continuous = super::feed_of(j.subscribe(Since::Snapshot, filter.clone()));
                let kinds = [EventType::ContainerStarted, EventType::ContainerDied];
                let at = at.min(n);
                let mut resumed = None;
                let mut since_r = 0;
                for i in 0..n {
                    if i == at {
                        since_r = j.revision().saturating_sub(cap as u64 / 2);
                        resumed = Some(j.subscribe(Since::Revision(since_r, 0), filter.clone()));
                    }
                    j.append(event(&format!("p{}", i % 7), kinds[i % 2], Some(status(&format!("p{}", i % 7), "ns", "x"))));
                }
                let resumed = resumed.unwrap_or_else(|| {
                    since_r = j.revision();
                    j.subscribe(Since::Revision(since_r, 0), filter.clone())
                });
                let (all, _) = super::ready(&mut continuous);
                proptest::prop_assert!(matches!(resumed.start, Start::Replay(_)), "kept revisions resume");
                let (got, dropped) = super::ready(&mut super::feed_of(resumed));
                proptest::prop_assert_eq!(dropped, None);
                let want: Vec<u64> = all.iter().copied().filter(|r| *r > since_r).collect();
                proptest::prop_assert_eq!(&got, &want, "no gap, no repeat");
                let mut sorted = got.clone();
                sorted.dedup();
                proptest::prop_assert_eq!(sorted.len(), got.len());
                Ok(())
            })?;
        }
    }
}

mod guarantees {
    use super::super::*;
    use crate::model::event::EventSource;
    use futures_util::StreamExt;

    /// A pod as the PLEG reads it: with its sandbox, whose labels are the pod's.
    fn pod(uid: &str, app: Option<&str>) -> Arc<PodStatus> {
        let labels = app.map(|a| [("app".to_string(), a.to_string())].into()).unwrap_or_default();
        let sandbox = crate::model::SandboxStatus {
            id: format!("s-{uid}"),
            attempt: 0,
            state: crate::model::SandboxState::Ready,
            created_at: 0,
            ip: String::new(),
            additional_ips: vec![],
            ..Default::default()
        };
        Arc::new(PodStatus { labels, sandboxes: vec![sandbox], ..PodStatus::empty(uid, "ns", &format!("pod-{uid}")) })
    }

    fn ev(uid: &str, kind: EventType, id: &str, p: Option<Arc<PodStatus>>, source: EventSource) -> PodLifecycleEvent {
        PodLifecycleEvent {
            pod_uid: uid.into(),
            pod_namespace: "ns".into(),
            pod_name: format!("pod-{uid}").into(),
            kind,
            container_id: id.into(),
            container_name: "c".into(),
            is_sandbox: id.starts_with('s'),
            source,
            observed_at: SystemTime::now(),
            runtime_timestamp: None,
            pod: p,
            message: String::new(),
        }
    }

    fn drain(feed: &mut Feed) -> Vec<u64> {
        let (revisions, dropped) = super::ready(feed);
        assert_eq!(dropped, None);
        revisions
    }

    #[test]
    fn every_removal_event_of_a_pod_matches_by_the_labels_it_had() {
        let j = Journal::new(100, 100, JournalMetrics::throwaway());
        let web = Filter { selector: Selector::parse("app=web").unwrap(), ..Default::default() };
        let not_app = Filter { selector: Selector::parse("!app").unwrap(), ..Default::default() };
        let mut web_sub = super::feed_of(j.subscribe(Since::Snapshot, Arc::new(web)));
        let mut not_app_sub = super::feed_of(j.subscribe(Since::Snapshot, Arc::new(not_app)));
        j.append(ev("a", EventType::ContainerStarted, "c1", Some(pod("a", Some("web"))), EventSource::Relist));
        // The pod goes: its container's removal, the sandbox's death and removal.
        for (kind, id) in
            [(EventType::ContainerRemoved, "c1"), (EventType::ContainerDied, "s1"), (EventType::ContainerRemoved, "s1")]
        {
            j.append(ev("a", kind, id, None, EventSource::Relist));
        }
        assert_eq!(drain(&mut web_sub), [1, 2, 3, 4], "every event of the web pod, removals included");
        assert!(drain(&mut not_app_sub).is_empty(), "none of a pod that carried app");
        // The identity of gone pods is bounded.
        for i in 0..(GONE_PODS + 10) {
            let uid = format!("g{i}");
            j.append(ev(&uid, EventType::ContainerStarted, "c", Some(pod(&uid, None)), EventSource::Relist));
            j.append(ev(&uid, EventType::ContainerRemoved, "c", None, EventSource::Relist));
        }
        assert_eq!(j.gone_pods(), GONE_PODS);
    }

    #[test]
    fn a_pod_read_after_its_sandbox_went_keeps_matching_by_its_labels() {
        // With the sandbox removed first, the pod's next status has no sandbox and no
        // labels; its later events must still reach the filters it matched.
        let j = Journal::new(100, 100, JournalMetrics::throwaway());
        let web = Filter { selector: Selector::parse("app=web").unwrap(), ..Default::default() };
        let mut sub = super::feed_of(j.subscribe(Since::Snapshot, Arc::new(web.clone())));
        j.append(ev("a", EventType::ContainerStarted, "s1", Some(pod("a", Some("web"))), EventSource::Relist));
        let no_sandbox = Arc::new(PodStatus::empty("a", "ns", "pod-a"));
        j.append(ev("a", EventType::ContainerRemoved, "s1", Some(no_sandbox), EventSource::Relist));
        j.append(ev("a", EventType::ContainerRemoved, "c1", None, EventSource::Relist));
        assert_eq!(drain(&mut sub), [1, 2, 3]);
        assert!(j.list(&web).0.is_empty());
    }

    #[test]
    fn a_reconcilers_event_carries_the_current_view_and_never_brings_a_gone_pod_back() {
        let j = Journal::new(100, 100, JournalMetrics::throwaway());
        let old = pod("a", Some("web"));
        j.append(ev("a", EventType::ContainerStarted, "c1", Some(old.clone()), EventSource::Relist));
        let newer = Arc::new(PodStatus { ips: vec!["10.0.0.9".into()], ..(*pod("a", Some("web"))).clone() });
        j.append(ev("a", EventType::ContainerDied, "c1", Some(newer.clone()), EventSource::Relist));
        // A crash-loop event made from the older status.
        let r = j.append(ev("a", EventType::CrashLoop, "c1", Some(old), EventSource::Reconciler)).unwrap();
        let (view, _) = j.list(&Filter::default());
        assert_eq!(view[0].ips, ["10.0.0.9"], "the view keeps the newer status");
        let tl = j.timeline("a").unwrap();
        let sent = tl.iter().find(|e| e.revision == r).unwrap();
        assert_eq!(sent.event.pod.as_ref().unwrap().ips, ["10.0.0.9"], "the event carries the current status");
        // The pod goes; a late reconciler event about it is not published.
        j.append(ev("a", EventType::ContainerRemoved, "s1", None, EventSource::Relist));
        assert_eq!(j.append(ev("a", EventType::CrashLoopCleared, "c1", Some(newer), EventSource::Reconciler)), None);
        assert!(j.list(&Filter::default()).0.is_empty(), "no ghost");
    }

    #[test]
    fn a_removal_says_the_address_its_pod_last_held_and_a_new_address_is_not_a_new_pod() {
        let j = Journal::new(100, 100, JournalMetrics::throwaway());
        let first = Arc::new(PodStatus { ips: vec!["10.0.0.9".into()], ..(*pod("a", Some("web"))).clone() });
        let started = j.append(ev("a", EventType::ContainerStarted, "s1", Some(first), EventSource::Relist)).unwrap();
        let moved = Arc::new(PodStatus { ips: vec!["10.0.0.12".into()], ..(*pod("a", Some("web"))).clone() });
        let again = j.append(ev("a", EventType::ContainerStarted, "s2", Some(moved), EventSource::Relist)).unwrap();
        let removed = j.append(ev("a", EventType::ContainerRemoved, "s2", None, EventSource::Relist)).unwrap();
        let tl = j.timeline("a").unwrap();
        let at = |r| tl.iter().find(|e| e.revision == r).unwrap();
        assert_eq!(*at(started).meta.ips, ["10.0.0.9"]);
        assert_eq!(*at(again).meta.ips, ["10.0.0.12"]);
        assert!(at(again).left.is_none(), "the same labels: no watcher's selection was left");
        assert_eq!(*at(removed).meta.ips, ["10.0.0.12"], "the removal carries no pod and still names the address");
        // New labels read while no address is: the pod keeps the last it held.
        let held = Arc::new(PodStatus { ips: vec!["10.0.0.5".into()], ..(*pod("b", Some("web"))).clone() });
        j.append(ev("b", EventType::ContainerStarted, "s1", Some(held), EventSource::Relist));
        let relabelled =
            j.append(ev("b", EventType::ContainerDied, "s1", Some(pod("b", Some("api"))), EventSource::Relist));
        let tl = j.timeline("b").unwrap();
        let meta = &tl.iter().find(|e| Some(e.revision) == relabelled).unwrap().meta;
        assert_eq!((meta.labels.get("app"), &*meta.ips), (Some("api"), &["10.0.0.5".to_string()][..]));
    }

    #[tokio::test]
    async fn a_pod_whose_new_labels_leave_a_watchers_selection_resets_that_watcher() {
        // With the pod's later events (its removal too) no longer matching, the
        // watcher's copy would otherwise keep the pod for good.
        let j = Journal::new(100, 100, JournalMetrics::throwaway());
        let web = Filter { selector: Selector::parse("app=web").unwrap(), ..Default::default() };
        let db = Filter { selector: Selector::parse("app=db").unwrap(), ..Default::default() };
        let mut web_sub = super::feed_of(j.subscribe(Since::Snapshot, Arc::new(web)));
        let mut db_sub = super::feed_of(j.subscribe(Since::Snapshot, Arc::new(db)));
        j.append(ev("a", EventType::ContainerStarted, "s1", Some(pod("a", Some("web"))), EventSource::Relist));
        j.append(ev("a", EventType::ContainerStarted, "s2", Some(pod("a", Some("db"))), EventSource::Relist));
        let Some(FeedItem::Overflowed(why)) = web_sub.next().await else {
            panic!("dropped: a reset and a snapshot follow")
        };
        assert_eq!(why.reset_reason(), ResetReason::RuntimeResync);
        assert_eq!(super::next_entry(&mut db_sub).await.revision, 2, "the pod entered this selection with the event");
        assert_eq!(super::ready(&mut db_sub), (vec![], None), "and it was not dropped");
    }

    /// One step of a generated schedule.
    #[derive(Clone, Debug)]
    enum Step {
        /// A pod (0..6) with labels (0: none, 1: app=web, 2: app=db) starts a container.
        Start(u8, u8),
        /// A pod's container dies.
        Die(u8),
        /// A pod goes away: its container's and sandbox's removal events.
        Remove(u8),
        /// A reconciler event about a pod.
        Reconcile(u8),
        /// Subscriber (0..3) reads everything queued.
        Read(u8),
        /// Subscriber (0..3) disconnects and resumes after the last revision it took.
        Resume(u8),
    }

    fn step() -> impl proptest::strategy::Strategy<Value = Step> {
        use proptest::prelude::*;
        prop_oneof![
            4 => (0u8..6, 0u8..3).prop_map(|(p, l)| Step::Start(p, l)),
            3 => (0u8..6).prop_map(Step::Die),
            2 => (0u8..6).prop_map(Step::Remove),
            1 => (0u8..6).prop_map(Step::Reconcile),
            4 => (0u8..3).prop_map(Step::Read),
            1 => (0u8..3).prop_map(Step::Resume),
        ]
    }

    const SELECTORS: [&str; 5] = ["", "app=web", "!app", "app!=web", "app in (web,db)"];

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(256))]
        /// Random churn, random filters (negative selectors too), tiny buffers, stalls,
        /// resumes: each filtered subscriber receives exactly the unfiltered journal
        /// restricted to the pods that matched (by the labels they had), in order, with
        /// no gap and no repeat except across a reset it was told about.
        #[test]
        fn a_filtered_stream_is_the_unfiltered_one_restricted_by_the_filter(
            steps in proptest::collection::vec(step(), 1..150),
            filters in proptest::collection::vec(0usize..SELECTORS.len(), 3),
            buffer in 1usize..6,
        ) {
            let j = Journal::new(1000, buffer, JournalMetrics::throwaway());
            let filters: Vec<Arc<Filter>> = filters
                .iter()
                .map(|i| Arc::new(Filter { selector: Selector::parse(SELECTORS[*i]).unwrap(), ..Default::default() }))
                .collect();
            let mut subs: Vec<Feed> = filters.iter().map(|f| super::feed_of(j.subscribe(Since::Snapshot, f.clone()))).collect();
            // Whether the journal dropped a subscriber its client has not yet reset.
            let mut dropped = [false; 3];
            let mut got: Vec<Vec<u64>> = vec![Vec::new(); 3];
            // Revisions each subscriber was told it may have missed (a reset).
            let mut reset_at: Vec<Option<u64>> = vec![None; 3];
            // Ground truth: each revision and the labels its pod had.
            let mut truth: Vec<(u64, Labels)> = Vec::new();
            let mut labels_of: BTreeMap<u8, Labels> = BTreeMap::new();
            let mut alive: BTreeMap<u8, Arc<PodStatus>> = BTreeMap::new();
            for s in steps {
                match s {
                    Step::Start(p, l) => {
                        let status = alive.entry(p).or_insert_with(|| {
                            pod(&format!("p{p}"), [None, Some("web"), Some("db")][l as usize])
                        }).clone();
                        labels_of.insert(p, status.labels.clone());
                        let r = j.append(ev(&format!("p{p}"), EventType::ContainerStarted, "c", Some(status.clone()), EventSource::Relist)).unwrap();
                        truth.push((r, status.labels.clone()));
                    }
                    Step::Die(p) => if let Some(status) = alive.get(&p) {
                        let r = j.append(ev(&format!("p{p}"), EventType::ContainerDied, "c", Some(status.clone()), EventSource::Relist)).unwrap();
                        truth.push((r, status.labels.clone()));
                    },
                    Step::Remove(p) => if let Some(status) = alive.remove(&p) {
                        for id in ["c", "s"] {
                            let r = j.append(ev(&format!("p{p}"), EventType::ContainerRemoved, id, None, EventSource::Relist)).unwrap();
                            truth.push((r, status.labels.clone()));
                        }
                    },
                    Step::Reconcile(p) => {
                        let appended = j.append(ev(&format!("p{p}"), EventType::CrashLoop, "c", None, EventSource::Reconciler));
                        proptest::prop_assert_eq!(appended.is_some(), alive.contains_key(&p), "reconciler events only about live pods");
                        if let Some(r) = appended {
                            truth.push((r, labels_of[&p].clone()));
                        }
                    }
                    Step::Read(i) => {
                        let i = i as usize;
                        let (revisions, why) = super::ready(&mut subs[i]);
                        got[i].extend(revisions);
                        if dropped[i] || why.is_some() {
                            // A reset: the client starts over from a snapshot.
                            let r = j.revision();
                            reset_at[i] = Some(r);
                            got[i].clear();
                            subs[i] = super::feed_of(j.subscribe(Since::Snapshot, filters[i].clone()));
                            dropped[i] = false;
                        }
                    }
                    Step::Resume(i) => {
                        let i = i as usize;
                        let (revisions, why) = super::ready(&mut subs[i]);
                        got[i].extend(revisions);
                        dropped[i] |= why.is_some();
                        if dropped[i] {
                            continue;
                        }
                        let last = got[i].last().copied().or(reset_at[i]).unwrap_or(0);
                        let resumed = j.subscribe(Since::Revision(last.max(1), j.epoch()), filters[i].clone());
                        if last == 0 || resumed.reset.is_some() {
                            subs[i] = super::feed_of(j.subscribe(Since::Snapshot, filters[i].clone()));
                            reset_at[i] = Some(j.revision());
                            got[i].clear();
                            continue;
                        }
                        proptest::prop_assert!(matches!(resumed.start, Start::Replay(_)), "kept revisions resume");
                        // The feed yields the replay, then the live entries.
                        subs[i] = super::feed_of(resumed);
                    }
                }
            }
            for i in 0..3 {
                let (revisions, why) = super::ready(&mut subs[i]);
                if dropped[i] || why.is_some() {
                    continue;
                }
                got[i].extend(revisions);
                let from = reset_at[i].unwrap_or(0);
                let want: Vec<u64> = truth
                    .iter()
                    .filter(|(r, l)| *r > from && filters[i].selector.matches(l))
                    .map(|(r, _)| *r)
                    .collect();
                proptest::prop_assert_eq!(&got[i], &want, "subscriber {} with {:?}", i, &filters[i].selector);
            }
        }
    }
}

mod unusable {
    use super::super::*;

    #[test]
    fn a_journal_the_process_cannot_open_is_left_in_place_and_the_journal_runs_in_memory() {
        // Not corrupt, just unusable now (here: a directory where the file should be):
        // nothing is moved aside, and the journal says why it is not durable.
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join(store::FILE)).unwrap();
        let cfg = JournalConfig { disk_budget: 1 << 20, ..JournalConfig::memory(100, 100) };
        let j = Journal::open(&cfg, &Place::at(dir.path()), JournalMetrics::throwaway()).expect("never a crash loop");
        assert!(j.disk_problem().is_some());
        assert!(dir.path().join(store::FILE).is_dir(), "left where it was");
        let files: Vec<_> = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .filter(|n| n != store::LOCK_FILE)
            .collect();
        assert_eq!(files, [store::FILE], "nothing moved aside");
    }
}

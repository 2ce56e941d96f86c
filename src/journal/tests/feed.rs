//! The feed's promises: every entry after the start once, in order, across the seams
//! between the disk's part, memory's part and live entries; and when it cannot keep
//! that, an item that says so, never a silent skip.

use std::sync::Arc;
use std::time::Duration;

use futures_util::StreamExt;
use proptest::prelude::*;

use super::super::*;
use super::basics::{event, status};
use super::durable::{cfg, churn};

/// The revisions of the entries a feed yields until it has nothing ready (or ends),
/// and the item that ended it, if one did.
async fn take_ready(feed: &mut Feed) -> (Vec<u64>, Option<FeedItem>) {
    let mut seen = Vec::new();
    loop {
        match tokio::time::timeout(Duration::from_millis(200), feed.next()).await {
            Ok(Some(FeedItem::Entry(e))) => seen.push(e.revision),
            Ok(Some(end)) => return (seen, Some(end)),
            Ok(None) | Err(_) => return (seen, None),
        }
    }
}

fn append_n(j: &Journal, n: usize) {
    for i in 0..n {
        let uid = format!("p{}", i % 5);
        j.append(event(&uid, EventType::ContainerStarted, Some(status(&uid, "ns", "web"))));
    }
}

#[tokio::test]
async fn a_consumer_that_stalls_past_its_buffer_is_told_it_overflowed_and_its_resume_sends_exactly_the_rest() {
    let j = Journal::new(100, 4, crate::journal::JournalMetrics::throwaway());
    let (_, mut feed) = j.subscribe(Since::Snapshot, Arc::new(Filter::default())).into_feed();
    append_n(&j, 2);
    let (seen, end) = take_ready(&mut feed).await;
    assert_eq!((seen, end.is_none()), (vec![1, 2], true));
    // It stops reading while 20 more are published: its buffer holds 4.
    append_n(&j, 20);
    let (seen, end) = take_ready(&mut feed).await;
    assert!(seen.is_empty(), "the entries its buffer held went with it, none is handed out of order: {seen:?}");
    assert!(matches!(end, Some(FeedItem::Overflowed(Dropped::FellBehind))), "{end:?}");
    assert!(feed.next().await.is_none(), "nothing follows the overflow");
    // Starting over from the last entry it took sends exactly what it missed, then live.
    let sub = j.subscribe(Since::Revision(2, j.epoch()), Arc::new(Filter::default()));
    assert_eq!(sub.reset, None);
    let (snapshot, mut feed) = sub.into_feed();
    assert!(snapshot.is_none());
    append_n(&j, 1);
    let (seen, end) = take_ready(&mut feed).await;
    assert_eq!(seen, (3..=23).collect::<Vec<_>>());
    assert!(end.is_none());
}

#[tokio::test]
async fn a_consumer_that_stalls_past_the_memory_ring_is_told_and_its_resume_is_refused_not_shortened() {
    let j = Journal::new(8, 4, crate::journal::JournalMetrics::throwaway());
    let (_, mut feed) = j.subscribe(Since::Snapshot, Arc::new(Filter::default())).into_feed();
    append_n(&j, 2);
    assert_eq!(take_ready(&mut feed).await.0, vec![1, 2]);
    append_n(&j, 20);
    assert!(matches!(feed.next().await, Some(FeedItem::Overflowed(Dropped::FellBehind))));
    let sub = j.subscribe(Since::Revision(2, j.epoch()), Arc::new(Filter::default()));
    assert_eq!(sub.reset, Some(ResetReason::RevisionTooOld), "revisions 3..=14 are gone: a snapshot, said so");
    let (snapshot, _) = sub.into_feed();
    assert_eq!(snapshot.map(|s| s.revision), Some(22));
}

#[tokio::test]
async fn live_entries_that_overflow_during_a_replay_stop_the_replay_at_once() {
    let j = Journal::new(100, 2, crate::journal::JournalMetrics::throwaway());
    append_n(&j, 10);
    let (_, mut feed) = j.subscribe(Since::Revision(0, j.epoch()), Arc::new(Filter::default())).into_feed();
    assert!(matches!(feed.next().await, Some(FeedItem::Entry(e)) if e.revision == 1));
    append_n(&j, 3);
    let (seen, end) = take_ready(&mut feed).await;
    assert!(seen.is_empty(), "the rest of the replay is of no use to a consumer that starts over: {seen:?}");
    assert!(matches!(end, Some(FeedItem::Overflowed(Dropped::FellBehind))), "{end:?}");
}

#[tokio::test]
async fn a_new_epoch_ends_the_feed_with_its_reason() {
    let dir = tempfile::tempdir().unwrap();
    let j = Journal::open(&cfg(), &Place::at(dir.path()), crate::journal::JournalMetrics::throwaway()).unwrap();
    churn(&j, 3);
    let (_, mut feed) = j.subscribe(Since::Snapshot, Arc::new(Filter::default())).into_feed();
    // The disk fills.
    let pages = match &j.lock().disk {
        Disk::Durable(s) => s.page_count(),
        _ => panic!("durable"),
    };
    j.limit_disk(pages);
    churn(&j, 200);
    let (_, end) = take_ready(&mut feed).await;
    let Some(FeedItem::Overflowed(why)) = end else { panic!("{end:?}") };
    assert_eq!((why, why.reset_reason()), (Dropped::NewEpoch, ResetReason::RuntimeResync));
}

#[tokio::test]
async fn a_replay_that_the_disk_cannot_finish_ends_the_feed_with_the_error_as_an_item() {
    let dir = tempfile::tempdir().unwrap();
    let mut c = cfg();
    c.memory_budget = 64 << 10;
    c.capacity = 2000;
    let j = Journal::open(&c, &Place::at(dir.path()), crate::journal::JournalMetrics::throwaway()).unwrap();
    churn(&j, 1500);
    let (_, mut feed) = j.subscribe(Since::Revision(0, j.epoch()), Default::default()).into_feed();
    assert!(matches!(feed.next().await, Some(FeedItem::Entry(e)) if e.revision == 1), "the first page is read");
    // Compaction takes what the replay has yet to read from disk.
    churn(&j, 2000);
    let (seen, end) = take_ready(&mut feed).await;
    let page = seen.len() as u64 + 1;
    assert_eq!(seen, (2..=page).collect::<Vec<_>>(), "the page read before is sent whole, with no gap");
    match end {
        Some(FeedItem::ReplayStopped(FeedError::Replay(ReplayError::Compacted(r)))) => assert_eq!(r, page + 1),
        other => panic!("expected the compaction as an item, got {other:?}"),
    }
    assert!(feed.next().await.is_none(), "nothing follows it");
}

#[tokio::test]
async fn a_replay_reads_the_disk_only_in_a_turn_and_goes_on_when_it_gets_one() {
    let dir = tempfile::tempdir().unwrap();
    let mut c = cfg();
    c.memory_budget = 16 << 10;
    let j = Journal::open(&c, &Place::at(dir.path()), crate::journal::JournalMetrics::throwaway()).unwrap();
    churn(&j, 300);
    let turns = Arc::new(tokio::sync::Semaphore::new(0));
    let (_, feed) = j.subscribe(Since::Revision(0, j.epoch()), Default::default()).into_feed();
    let mut feed = feed.with_turns(turns.clone());
    assert!(feed.is_replaying() && !feed.is_drained());
    let waited = tokio::time::timeout(Duration::from_millis(100), feed.next()).await;
    assert!(waited.is_err(), "no turn, no read");
    turns.add_permits(1);
    let (seen, end) = take_ready(&mut feed).await;
    assert_eq!(seen, (1..=300).collect::<Vec<_>>());
    assert!(end.is_none() && feed.is_drained() && !feed.is_replaying());
    assert_eq!(turns.available_permits(), 1, "each read gave its turn back");
}

/// One case: `n` events, a resume from `cursor` (a revision only the disk holds), and
/// one more event published after each position of `live_at` in what the consumer took.
fn resume_from_disk(n: usize, cursor_share: f64, live_at: Vec<usize>) -> Result<(), TestCaseError> {
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    rt.block_on(async move {
        let dir = tempfile::tempdir().unwrap();
        let mut c = cfg();
        c.memory_budget = 4 << 10;
        let j = Journal::open(&c, &Place::at(dir.path()), crate::journal::JournalMetrics::throwaway()).unwrap();
        let mut published: Vec<(u64, Arc<str>, EventType)> = Vec::new();
        let publish = |j: &Journal, i: usize, published: &mut Vec<_>| {
            let uid = format!("p{}", i % 7);
            let kind = if i.is_multiple_of(3) { EventType::ContainerDied } else { EventType::ContainerStarted };
            let r = j.append(event(&uid, kind, Some(status(&uid, "ns", "web")))).unwrap();
            published.push((r, Arc::<str>::from(uid), kind));
        };
        for i in 0..n {
            publish(&j, i, &mut published);
        }
        let memory_oldest = j.lock().ring.front().unwrap().revision;
        prop_assume!(memory_oldest > 2, "memory holds everything: no disk part");
        let cursor = ((memory_oldest - 2) as f64 * cursor_share) as u64;
        let sub = j.subscribe(Since::Revision(cursor, j.epoch()), Default::default());
        let Start::Replay(Replay { disk, .. }) = &sub.start else { panic!("a kept revision resumes") };
        prop_assert!(disk.is_some(), "revision {cursor} is on disk only");
        let (_, mut feed) = sub.into_feed();
        let mut seen = Vec::new();
        let mut live = live_at.into_iter().peekable();
        while seen.len() < published.len() - cursor as usize {
            while live.next_if(|at| *at <= seen.len()).is_some() {
                publish(&j, published.len(), &mut published);
            }
            match tokio::time::timeout(Duration::from_secs(5), feed.next()).await {
                Ok(Some(FeedItem::Entry(e))) => seen.push((e.revision, e.event.pod_uid.clone(), e.event.kind)),
                Ok(other) => prop_assert!(false, "the feed ended: {other:?}"),
                Err(_) => prop_assert!(false, "the feed stopped short after {} entries", seen.len()),
            }
        }
        prop_assert_eq!(&seen[..], &published[cursor as usize..]);
        let more = tokio::time::timeout(Duration::from_millis(20), feed.next()).await;
        prop_assert!(more.is_err(), "and nothing more: {:?}", more);
        Ok(())
    })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, ..ProptestConfig::default() })]

    #[test]
    fn a_resume_from_a_cursor_only_the_disk_holds_sees_the_journal_from_there_with_no_gap_and_no_repeat(
        n in 40usize..240,
        cursor_share in 0.0f64..1.0,
        mut live_at in proptest::collection::vec(0usize..300, 0..40),
    ) {
        live_at.sort_unstable();
        resume_from_disk(n, cursor_share, live_at)?;
    }
}

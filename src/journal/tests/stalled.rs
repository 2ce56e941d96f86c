//! A subscriber that stops reading: dropped when its queue is full, and from then on it
//! holds nothing of the journal, however long it stalls.

use super::super::*;
use super::basics::{event, status};

#[tokio::test]
async fn a_subscriber_dropped_while_it_stalls_holds_none_of_the_journal() {
    // Memory keeps one entry; the watch buffer is four.
    let j = Journal::new(1, 4, JournalMetrics::throwaway());
    let all = Arc::new(Filter::default());
    let mut stalled = super::feed_of(j.subscribe(Since::Snapshot, all.clone()));
    let mut reader = super::feed_of(j.subscribe(Since::Snapshot, all));
    j.append(event("a", EventType::PodSync, Some(status("a", "ns", "web"))));
    let first = super::next_entry(&mut reader).await;
    for _ in 0..3 {
        j.append(event("a", EventType::PodSync, Some(status("a", "ns", "web"))));
        super::next_entry(&mut reader).await;
    }
    assert_eq!(Arc::strong_count(&first), 2, "the stalled subscriber's queue holds the first entry");
    j.append(event("a", EventType::PodSync, Some(status("a", "ns", "web"))));
    assert_eq!(super::ready(&mut stalled).1, Some(Dropped::FellBehind), "the fifth entry found its queue full");
    assert_eq!(Arc::strong_count(&first), 1, "dropped, it holds nothing while it still stalls");
}

use std::collections::{BTreeSet, HashMap};
use std::time::Duration;

use proptest::prelude::*;

use super::*;

/// A message that is the set of numbers it was given.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Said(BTreeSet<u8>);

impl Merge for Said {
    fn merge(&mut self, other: Self) {
        self.0.extend(other.0);
    }
}

#[derive(Clone, Debug)]
enum Op {
    /// Schedule key `.0` with word `.1`, `.2` ms from the start.
    Schedule(u8, u8, u64),
    /// Take what is due `.0` ms from the start.
    TakeDue(u64),
    /// Take key `.0`.
    Remove(u8),
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => (0u8..6, 0u8..8, 0u64..1000).prop_map(|(k, w, at)| Op::Schedule(k, w, at)),
        2 => (0u64..1200).prop_map(Op::TakeDue),
        1 => (0u8..6).prop_map(Op::Remove),
    ]
}

proptest! {
    /// Against a model (per key: the earliest time asked for and every word said), in
    /// any order of requests, takes and removals: a key is held once, it comes out at the
    /// earliest time asked for with every word said, never before it is due, earliest
    /// first — and nothing asked for is lost.
    #[test]
    fn the_earliest_time_wins_every_reason_is_kept_and_nothing_is_lost(ops in proptest::collection::vec(op(), 1..80)) {
        let start = Instant::now();
        let ms = |n: u64| start + Duration::from_millis(n);
        let mut s: Scheduler<u8, Said> = Scheduler::default();
        let mut model: HashMap<u8, (u64, BTreeSet<u8>)> = HashMap::new();
        for op in ops {
            match op {
                Op::Schedule(k, w, at) => {
                    s.schedule(k, Said(BTreeSet::from([w])), ms(at));
                    let e = model.entry(k).or_insert((at, BTreeSet::new()));
                    e.0 = e.0.min(at);
                    e.1.insert(w);
                }
                Op::TakeDue(now) => {
                    let got = s.take_due(ms(now));
                    prop_assert!(got.windows(2).all(|w| w[0].run_at <= w[1].run_at), "earliest first");
                    let mut want: Vec<u8> = model.iter().filter(|(_, (at, _))| *at <= now).map(|(k, _)| *k).collect();
                    want.sort();
                    let mut keys: Vec<u8> = got.iter().map(|r| r.key).collect();
                    keys.sort();
                    prop_assert_eq!(keys, want, "exactly what is due at {}", now);
                    for r in got {
                        let (at, words) = model.remove(&r.key).expect("modelled");
                        prop_assert_eq!(r.run_at, ms(at));
                        prop_assert_eq!(r.message.0, words);
                    }
                }
                Op::Remove(k) => {
                    let got = s.remove(&k).map(|r| (r.run_at, r.message.0));
                    prop_assert_eq!(got, model.remove(&k).map(|(at, w)| (ms(at), w)));
                }
            }
            prop_assert_eq!(s.len(), model.len());
            prop_assert_eq!(s.next_at(), model.values().map(|(at, _)| ms(*at)).min());
        }
        // Nothing lost: everything left comes out once its time has come.
        let rest = s.take_due(ms(10_000));
        prop_assert_eq!(rest.len(), model.len());
        prop_assert!(s.is_empty() && s.next_at().is_none());
    }
}

#[tokio::test(start_paused = true)]
async fn a_pod_asked_for_by_the_stream_a_reader_and_a_failed_read_is_read_once_at_the_earliest_time() {
    let now = Instant::now();
    let mut s: Scheduler<Read, Why> = Scheduler::default();
    let pod = Read::Pod("p".into());
    s.schedule(pod.clone(), Why::because(Reason::FailedRead, now), now + Duration::from_secs(1));
    let mut hint = Why::because(Reason::StreamEvent, now + Duration::from_millis(5));
    hint.container_ids.insert("c".into());
    s.schedule(pod.clone(), hint, now + Duration::from_millis(5));
    s.schedule(pod.clone(), Why::because(Reason::Waiting, now), now + Duration::from_millis(50));
    s.schedule(
        Read::Status(StatusBook::AmendedExits, "c".into()),
        Why::because(Reason::UnsettledExit, now),
        now + Duration::from_secs(3),
    );
    assert_eq!(s.len(), 2, "one entry per read");
    assert!(s.take_due(now).is_empty(), "nothing before its time");
    let due = s.take_due(now + Duration::from_millis(5));
    assert_eq!(due.len(), 1);
    let why = &due[0].message;
    assert_eq!(due[0].run_at, now + Duration::from_millis(5), "the earliest time asked for");
    assert_eq!(why.reasons, BTreeSet::from([Reason::StreamEvent, Reason::Waiting, Reason::FailedRead]));
    assert_eq!(why.first_seen, now, "the first request's arrival");
    assert_eq!(why.source(), EventSource::CriEvent, "a read the stream asked for is announced");
    assert!(why.container_ids.contains("c"));
    assert_eq!(s.next_at(), Some(now + Duration::from_secs(3)), "the container's re-read is still to come");
}

#[test]
fn a_read_only_readers_and_a_failed_read_ask_for_is_paced_and_one_the_stream_asks_for_is_not() {
    let now = Instant::now();
    let mut w = Why::because(Reason::Waiting, now);
    assert!(w.only_waiting() && w.paced());
    w.merge(Why::because(Reason::FailedRead, now));
    assert!(!w.only_waiting());
    assert!(w.paced(), "a reader cannot read a failing pod faster than the pace by waiting on it");
    assert_eq!(w.source(), EventSource::PodRelist, "not announced by the stream");
    w.merge(Why::because(Reason::StreamEvent, now));
    assert!(!w.paced(), "the stream's read is not a reader's");
    assert!(!Why::because(Reason::FailedRead, now).paced(), "a retry alone is not a reader's read");
}

#[test]
fn a_read_counts_as_the_streams_when_the_stream_asked_else_as_nris_when_nri_did_else_as_a_pod_relist() {
    let now = Instant::now();
    let why = |reasons: &[Reason]| {
        let mut w = Why::because(reasons[0], now);
        for r in &reasons[1..] {
            w.merge(Why::because(*r, now));
        }
        w.source()
    };
    // A re-read that found a change reads the pod for its book's reason too.
    assert_eq!(why(&[Reason::Reread, Reason::SandboxDeleted]), EventSource::CriEvent, "the stream said it deleted");
    assert_eq!(why(&[Reason::Reread, Reason::EarlyWord]), EventSource::Nri, "NRI said it ahead of the status");
    assert_eq!(why(&[Reason::Reread, Reason::UnsettledExit]), EventSource::PodRelist, "plegd's own re-read");
    assert_eq!(why(&[Reason::NriEvent]), EventSource::Nri);
    assert_eq!(why(&[Reason::NriEvent, Reason::StreamEvent]), EventSource::CriEvent, "the stream's word wins");
    assert_eq!(why(&[Reason::Waiting, Reason::NriSynchronized]), EventSource::PodRelist);
}

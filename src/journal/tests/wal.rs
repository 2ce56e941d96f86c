//! The write-ahead log stays small: what a burst (or writes retried against a full
//! disk) grew is given back once checkpointed.

use super::super::*;
use super::durable::churn;
use super::durable::{cfg, event, status};

#[test]
fn a_wal_a_burst_made_large_is_cut_back_once_checkpointed() {
    // On a small state-dir filesystem, a WAL that kept its high-water size kept the
    // space another writer gave back, and the journal never became durable again.
    let dir = tempfile::tempdir().unwrap();
    let j = Journal::open(&cfg(), &Place::at(dir.path()), JournalMetrics::throwaway()).unwrap();
    let wal = dir.path().join(format!("{}-wal", store::FILE));
    let big = "x".repeat(64 << 10);
    for i in 0..200 {
        let uid = format!("p{}", i % 10);
        let mut e = event(&uid, EventType::ContainerStarted, Some(status(&uid, "web", true)));
        e.message = big.clone();
        j.append(e).expect("appended");
    }
    let burst = std::fs::metadata(&wal).unwrap().len();
    assert!(burst > 8 << 20, "the burst grew the WAL: {burst} bytes");
    store::Reader::checkpoint(&dir.path().join(store::FILE)).unwrap();
    churn(&j, 3);
    store::Reader::checkpoint(&dir.path().join(store::FILE)).unwrap();
    let after = std::fs::metadata(&wal).unwrap().len();
    assert!(after <= 4 << 20, "cut back to 4 MiB once checkpointed: {after} bytes (was {burst})");
}

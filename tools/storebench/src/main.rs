//! The journal's write pattern — a batch of events (one, as the evented path makes,
//! or twenty, as a relist does) of about 1 KiB each, the view's rows upserted, the
//! oldest revisions deleted every 100 batches — committed by SQLite (WAL, synchronous
//! NORMAL or FULL; checkpoints on the commit path or off it) and by redb (durable or
//! not). Prints commit latency percentiles, throughput and disk use.

use std::time::Instant;
fn pct(v: &mut Vec<f64>, p: f64) -> f64 { v.sort_by(|a,b| a.partial_cmp(b).unwrap()); v[((v.len() as f64 - 1.0) * p) as usize] }
fn record(n: usize) -> Vec<u8> { (0..n).map(|_| fastrand::u8(..)).collect() }
const EV: redb::TableDefinition<u64, &[u8]> = redb::TableDefinition::new("events");
const PODS: redb::TableDefinition<&str, &[u8]> = redb::TableDefinition::new("pods");
fn main() {
    let dir = std::env::args().nth(1).unwrap_or("/tmp/storebench-data".into());
    let batches: usize = std::env::args().nth(2).map(|s| s.parse().unwrap()).unwrap_or(2000);
    for &batch in &[1usize, 20] {
        for mode in ["sqlite-wal-normal", "sqlite-wal-normal-bgckpt", "sqlite-wal-full", "redb-immediate", "redb-none"] {
            let _ = std::fs::remove_dir_all(&dir); std::fs::create_dir_all(&dir).unwrap();
            let mut lat = Vec::new();
            let mut rev = 0u64;
            let t0 = Instant::now();
            if mode.starts_with("sqlite") {
                let mut c = rusqlite::Connection::open(format!("{dir}/j.db")).unwrap();
                c.pragma_update(None, "journal_mode", "WAL").unwrap();
                c.pragma_update(None, "synchronous", if mode.ends_with("full") {"FULL"} else {"NORMAL"}).unwrap();
                let bg = mode.ends_with("bgckpt"); if bg { c.pragma_update(None, "wal_autocheckpoint", 0).unwrap(); }
                let ck = rusqlite::Connection::open(format!("{dir}/j.db")).unwrap();
                c.execute_batch("CREATE TABLE events(rev INTEGER PRIMARY KEY, uid TEXT NOT NULL, body BLOB NOT NULL); CREATE INDEX ev_uid ON events(uid, rev); CREATE TABLE pods(uid TEXT PRIMARY KEY, body BLOB NOT NULL) WITHOUT ROWID;").unwrap();
                for b in 0..batches {
                    let recs: Vec<_> = (0..batch).map(|_| record(1000)).collect();
                    let t = Instant::now();
                    let tx = c.transaction().unwrap();
                    { let mut ins = tx.prepare_cached("INSERT INTO events(rev, uid, body) VALUES (?1, ?2, ?3)").unwrap();
                      let mut up = tx.prepare_cached("INSERT OR REPLACE INTO pods(uid, body) VALUES (?1, ?2)").unwrap();
                      for r in &recs { rev += 1; let uid = format!("pod-{}", rev % 200); ins.execute((rev, &uid, r)).unwrap(); up.execute((&uid, r)).unwrap(); }
                      if b % 100 == 99 { tx.execute("DELETE FROM events WHERE rev <= ?1", [rev.saturating_sub(10_000)]).unwrap(); }
                    }
                    tx.commit().unwrap();
                    lat.push(t.elapsed().as_secs_f64() * 1e6);
                    if bg && b % 50 == 49 { ck.query_row("PRAGMA wal_checkpoint(PASSIVE)", [], |_| Ok(())).unwrap(); }
                }
            } else {
                let db = redb::Database::create(format!("{dir}/j.redb")).unwrap();
                for b in 0..batches {
                    let recs: Vec<_> = (0..batch).map(|_| record(1000)).collect();
                    let t = Instant::now();
                    let mut tx = db.begin_write().unwrap();
                    if mode.ends_with("none") { tx.set_durability(redb::Durability::None).unwrap(); }
                    { let mut ev = tx.open_table(EV).unwrap(); let mut pods = tx.open_table(PODS).unwrap();
                      for r in &recs { rev += 1; let uid = format!("pod-{}", rev % 200); ev.insert(rev, r.as_slice()).unwrap(); pods.insert(uid.as_str(), r.as_slice()).unwrap(); }
                      if b % 100 == 99 { let cut = rev.saturating_sub(10_000); ev.retain_in(..=cut, |_, _| false).unwrap(); }
                    }
                    tx.commit().unwrap();
                    lat.push(t.elapsed().as_secs_f64() * 1e6);
                }
            }
            let total = t0.elapsed().as_secs_f64();
            let size: u64 = std::fs::read_dir(&dir).unwrap().map(|e| e.unwrap().metadata().unwrap().len()).sum();
            println!("batch={batch:>2} {mode:<18} commit p50={:>8.1}us p99={:>8.1}us  events/s={:>9.0}  disk={:.1}MiB", pct(&mut lat, 0.5), pct(&mut lat, 0.99), (batches*batch) as f64/total, size as f64/1048576.0);
        }
    }
}

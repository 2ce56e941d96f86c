//! Removed containers on disk (`tombstones.sqlite` in the state dir), so a lookup still
//! answers for them after plegd restarts. One row per container: its id, when it was
//! removed, and the pod as it last held it (a journal view record). The in-memory index
//! is the truth while plegd runs; this file follows it, written off the publish path
//! by [`TombstoneWriter::run`].

use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use rusqlite::{Connection, params};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use crate::model::{nanos_to_system, system_to_nanos};

/// File name in the state dir.
pub const FILE: &str = "tombstones.sqlite";

/// The file's format, kept as SQLite's `user_version` (`docs/state-dir.md`). A file at
/// 0 predates the number and is format 1 (an older column is added as it is opened); a
/// file a newer plegd wrote (a downgrade) is set aside and a new one started: never
/// misread.
pub const FORMAT: i64 = 1;

/// Failures of the tombstone file.
#[derive(Debug, thiserror::Error)]
pub enum TombstoneError {
    /// SQLite failed.
    #[error("tombstones {path}: {source}")]
    Sql {
        /// The file.
        path: PathBuf,
        /// What SQLite said.
        source: rusqlite::Error,
    },
}

/// A change of the file.
#[derive(Debug)]
pub enum TombstoneOp {
    /// A container was removed.
    Put {
        /// Container id.
        id: String,
        /// When.
        removed_at: SystemTime,
        /// Its record (`journal::record::encode_view`).
        record: Vec<u8>,
        /// The host's task count when plegd last saw it running (its PID's claim).
        forks_at_start: Option<u64>,
    },
    /// A tombstone left the index (expired or evicted).
    Delete(String),
}

/// A tombstone read back.
#[derive(Debug)]
pub struct StoredTombstone {
    /// Container id.
    pub id: String,
    /// When it was removed.
    pub removed_at: SystemTime,
    /// Its record.
    pub record: Vec<u8>,
    /// The host's task count when plegd last saw it running.
    pub forks_at_start: Option<u64>,
}

/// The open file.
pub struct TombstoneStore {
    conn: Connection,
    path: PathBuf,
}

fn sql(path: &Path) -> impl Fn(rusqlite::Error) -> TombstoneError + '_ {
    move |source| TombstoneError::Sql { path: path.to_owned(), source }
}

impl TombstoneStore {
    /// Opens (or creates) the file in `dir`. A file that does not open as a tombstone
    /// file is set aside (`.corrupt`) and a new one started: tombstones are a
    /// convenience for lookups, never worth refusing to start over.
    pub fn open(dir: &Path) -> Result<Self, TombstoneError> {
        let path = dir.join(FILE);
        match Self::open_at(&path) {
            Ok(s) => Ok(s),
            Err(e) => {
                tracing::warn!(error = %e, "the tombstone file does not open; setting it aside and starting a new one");
                let aside = path.with_extension("sqlite.corrupt");
                let _ = std::fs::rename(&path, &aside);
                for ext in ["sqlite-wal", "sqlite-shm"] {
                    let _ = std::fs::remove_file(path.with_extension(ext));
                }
                Self::open_at(&path)
            }
        }
    }

    fn open_at(path: &Path) -> Result<Self, TombstoneError> {
        let conn = Connection::open(path).map_err(sql(path))?;
        let format: i64 = conn.query_row("PRAGMA user_version", [], |r| r.get(0)).map_err(sql(path))?;
        if format > FORMAT {
            return Err(TombstoneError::Sql {
                path: path.to_owned(),
                source: rusqlite::Error::InvalidParameterName(format!(
                    "written by a newer plegd (format {format}; this plegd reads formats up to {FORMAT})"
                )),
            });
        }
        conn.execute_batch(
            "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL; PRAGMA cache_size=-128; PRAGMA journal_size_limit=1048576;
             CREATE TABLE IF NOT EXISTS tombstones (
                 id TEXT PRIMARY KEY, removed_at INTEGER NOT NULL, record BLOB NOT NULL, forks_at_start INTEGER);
             CREATE INDEX IF NOT EXISTS tombstones_removed ON tombstones (removed_at);",
        )
        .map_err(sql(path))?;
        // A file from before the column: add it (its rows' PIDs then claim nothing).
        let has_column = conn.prepare("SELECT forks_at_start FROM tombstones LIMIT 0").is_ok();
        if !has_column {
            conn.execute_batch("ALTER TABLE tombstones ADD COLUMN forks_at_start INTEGER").map_err(sql(path))?;
        }
        let check: String = conn.query_row("PRAGMA quick_check", [], |r| r.get(0)).map_err(sql(path))?;
        if check != "ok" {
            return Err(TombstoneError::Sql {
                path: path.to_owned(),
                source: rusqlite::Error::InvalidParameterName(format!("quick_check: {check}")),
            });
        }
        conn.execute_batch(&format!("PRAGMA user_version = {FORMAT}")).map_err(sql(path))?;
        Ok(Self { conn, path: path.to_owned() })
    }

    /// The tombstones removed at or after `since`, oldest first.
    pub fn load(&self, since: SystemTime) -> Result<Vec<StoredTombstone>, TombstoneError> {
        self.load_newest(since, usize::MAX, usize::MAX)
    }

    /// The newest tombstones removed at or after `since`, at most `max` of them and
    /// about `max_bytes` of records (rows are read newest first and one at a time, so
    /// a file of any size costs no more than that), oldest first.
    pub fn load_newest(
        &self,
        since: SystemTime,
        max: usize,
        max_bytes: usize,
    ) -> Result<Vec<StoredTombstone>, TombstoneError> {
        let path = &self.path;
        let mut stmt = self
            .conn
            .prepare(
                "SELECT id, removed_at, record, forks_at_start FROM tombstones WHERE removed_at >= ?1 \
                 ORDER BY removed_at DESC LIMIT ?2",
            )
            .map_err(sql(path))?;
        let limit = i64::try_from(max).unwrap_or(i64::MAX);
        let mut rows = stmt.query(params![system_to_nanos(since), limit]).map_err(sql(path))?;
        let (mut out, mut bytes) = (Vec::new(), 0usize);
        while let Some(r) = rows.next().map_err(sql(path))? {
            let t = StoredTombstone {
                id: r.get(0).map_err(sql(path))?,
                removed_at: nanos_to_system(r.get(1).map_err(sql(path))?).unwrap_or(std::time::UNIX_EPOCH),
                record: r.get(2).map_err(sql(path))?,
                forks_at_start: r.get::<_, Option<i64>>(3).map_err(sql(path))?.and_then(|v| u64::try_from(v).ok()),
            };
            bytes += t.record.len();
            if bytes > max_bytes && !out.is_empty() {
                break;
            }
            out.push(t);
        }
        out.reverse();
        Ok(out)
    }

    /// Drops every row removed before `t` (what a bounded load left behind).
    pub fn drop_older_than(&self, t: SystemTime) -> Result<(), TombstoneError> {
        self.conn
            .execute("DELETE FROM tombstones WHERE removed_at < ?1", params![system_to_nanos(t)])
            .map(|_| ())
            .map_err(sql(&self.path))
    }

    /// Applies changes in one transaction, and drops rows removed before `expired`.
    pub fn apply(&mut self, ops: &[TombstoneOp], expired: SystemTime) -> Result<(), TombstoneError> {
        let path = self.path.clone();
        let tx = self.conn.transaction().map_err(sql(&path))?;
        for op in ops {
            match op {
                TombstoneOp::Put { id, removed_at, record, forks_at_start } => tx.execute(
                    "INSERT OR REPLACE INTO tombstones (id, removed_at, record, forks_at_start) VALUES (?1, ?2, ?3, ?4)",
                    params![id, system_to_nanos(*removed_at), record, forks_at_start.and_then(|v| i64::try_from(v).ok())],
                ),
                TombstoneOp::Delete(id) => tx.execute("DELETE FROM tombstones WHERE id = ?1", params![id]),
            }
            .map_err(sql(&path))?;
        }
        tx.execute("DELETE FROM tombstones WHERE removed_at < ?1", params![system_to_nanos(expired)])
            .map_err(sql(&path))?;
        tx.commit().map_err(sql(&path))
    }
}

/// Changes queued for the file at most; beyond, a change is dropped from the file (not
/// from the index) and counted in the log: a disk that slow loses tombstones across a
/// restart, never events or memory.
pub const QUEUE: usize = 4096;

/// Writes the index's changes to the file.
pub struct TombstoneWriter {
    pub(super) store: TombstoneStore,
    pub(super) rx: mpsc::Receiver<TombstoneOp>,
    pub(super) retention: Duration,
}

impl TombstoneWriter {
    /// Writes until shutdown, a batch per wake-up, then what is left.
    pub async fn run(mut self, shutdown: CancellationToken) {
        let mut store = Some(self.store);
        // A full disk fails every write: said once a minute, not at every batch.
        let mut failures = crate::backoff::Repeats::default();
        loop {
            let first = tokio::select! {
                op = self.rx.recv() => op,
                _ = shutdown.cancelled() => None,
            };
            let mut ops: Vec<_> = first.into_iter().collect();
            while let Ok(op) = self.rx.try_recv() {
                ops.push(op);
            }
            if ops.is_empty() {
                break;
            }
            let retention = self.retention;
            let Some(mut s) = store.take() else { break };
            let res = tokio::task::spawn_blocking(move || {
                let expired = SystemTime::now().checked_sub(retention).unwrap_or(std::time::UNIX_EPOCH);
                let r = s.apply(&ops, expired);
                (s, r)
            })
            .await;
            match res {
                Ok((s, r)) => {
                    if let Err(e) = r
                        && let Some(unsaid) = failures.say()
                    {
                        tracing::warn!(error = %e, unsaid, "writing tombstones failed; they stay in memory until plegd stops");
                    }
                    store = Some(s);
                }
                Err(_) => break,
            }
        }
        // Whatever arrived after the shutdown began.
        if let Some(mut s) = store {
            let ops: Vec<_> = std::iter::from_fn(|| self.rx.try_recv().ok()).collect();
            if !ops.is_empty() {
                let expired = SystemTime::now().checked_sub(self.retention).unwrap_or(std::time::UNIX_EPOCH);
                if let Err(e) = s.apply(&ops, expired) {
                    tracing::warn!(error = %e, "writing the last tombstones failed");
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tombstones_come_back_after_a_reopen_and_expired_ones_do_not() {
        let dir = tempfile::tempdir().unwrap();
        let now = SystemTime::now();
        let old = now - Duration::from_secs(7200);
        {
            let mut s = TombstoneStore::open(dir.path()).unwrap();
            let ops = vec![
                TombstoneOp::Put { id: "a".into(), removed_at: old, record: vec![1], forks_at_start: None },
                TombstoneOp::Put { id: "b".into(), removed_at: now, record: vec![2, 3], forks_at_start: Some(7) },
                TombstoneOp::Put { id: "c".into(), removed_at: now, record: vec![4], forks_at_start: None },
                TombstoneOp::Delete("c".into()),
            ];
            s.apply(&ops, std::time::UNIX_EPOCH).unwrap();
        }
        let s = TombstoneStore::open(dir.path()).unwrap();
        let back = s.load(now - Duration::from_secs(3600)).unwrap();
        assert_eq!(back.len(), 1, "a is too old, c was deleted");
        assert_eq!(back[0].id, "b");
        assert_eq!(back[0].record, vec![2, 3]);
        assert_eq!(back[0].forks_at_start, Some(7));
        assert_eq!(s.load(std::time::UNIX_EPOCH).unwrap().len(), 2);
    }

    #[test]
    fn a_file_that_is_not_a_tombstone_file_is_set_aside_and_a_new_one_started() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join(FILE), b"this is not sqlite, not at all, not even close").unwrap();
        let s = TombstoneStore::open(dir.path()).expect("a new file");
        assert!(s.load(std::time::UNIX_EPOCH).unwrap().is_empty());
        assert!(dir.path().join("tombstones.sqlite.corrupt").exists());
    }

    #[test]
    fn a_file_without_a_format_is_the_first_and_one_a_newer_plegd_wrote_is_set_aside_unread() {
        let dir = tempfile::tempdir().unwrap();
        let now = SystemTime::now();
        let put = |id: &str| TombstoneOp::Put { id: id.into(), removed_at: now, record: vec![1], forks_at_start: None };
        TombstoneStore::open(dir.path()).unwrap().apply(&[put("a")], std::time::UNIX_EPOCH).unwrap();
        let version = |path: &Path| -> i64 {
            Connection::open(path).unwrap().query_row("PRAGMA user_version", [], |r| r.get(0)).unwrap()
        };
        let file = dir.path().join(FILE);
        assert_eq!(version(&file), FORMAT, "every file says its format");
        // A file from before the number: read as format 1.
        Connection::open(&file).unwrap().execute_batch("PRAGMA user_version = 0").unwrap();
        assert_eq!(TombstoneStore::open(dir.path()).unwrap().load(std::time::UNIX_EPOCH).unwrap().len(), 1);
        // A newer plegd's file: set aside, and a new one started.
        Connection::open(&file).unwrap().execute_batch(&format!("PRAGMA user_version = {}", FORMAT + 1)).unwrap();
        let s = TombstoneStore::open(dir.path()).unwrap();
        assert!(s.load(std::time::UNIX_EPOCH).unwrap().is_empty(), "never misread");
        assert_eq!(version(&dir.path().join("tombstones.sqlite.corrupt")), FORMAT + 1, "kept, set aside");
    }
}

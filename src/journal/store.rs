//! The journal on disk: one SQLite database under `--state-dir` holding the events
//! (every revision still kept, in order) and the view (every pod as its last event left
//! it), both written in one transaction per batch before any watcher sees the batch.
//!
//! Why SQLite, in WAL mode with `synchronous=NORMAL`: a commit is a `write()` into the
//! WAL, which survives the process being killed (`kill -9`, the OOM killer) — the
//! crashes plegd must survive — at about 30 µs per one-event batch here; `fsync`
//! happens at checkpoints, which a task of their own runs off the write path (see
//! `tools/storebench` and BENCHMARKS.md for the write pattern measured against redb). A
//! power loss may take back the last commits since a checkpoint: the store remembers
//! the boot it was written in, and a store from another boot starts a new epoch, so a
//! revision taken back can never be reused under the name a client holds.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use rusqlite::{Connection, OpenFlags, OptionalExtension, params};

use super::PodMeta;
use super::lineage::{Mark, Marked};
use super::record::{self, RecordError};
use crate::model::PodStatus;
use crate::model::event::PodLifecycleEvent;

/// The database's file name in the state dir.
pub const FILE: &str = "journal.db";
/// A file plegd writes in the state dir as it takes the dir's lock: it shows which
/// dirs a plegd uses, and a dir plegd cannot write to fails here, with the system's
/// words (the lock itself is on the directory).
pub const LOCK_FILE: &str = "plegd.lock";
/// The layout this version writes (`docs/state-dir.md`): an older one is read (a change
/// adds its migration here); a newer one is moved aside, never misread: a new epoch.
pub const SCHEMA: i64 = 1;

/// What went wrong with the journal's file.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// The state dir cannot be created.
    #[error("--state-dir: cannot create {path}: {source}")]
    CreateDir {
        /// The dir.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// The database failed.
    #[error("journal database {path}: {source}")]
    Sql {
        /// The file.
        path: PathBuf,
        /// Why.
        #[source]
        source: rusqlite::Error,
    },
    /// A record did not decode.
    #[error("journal database {path}: {source}")]
    Record {
        /// The file.
        path: PathBuf,
        /// Why.
        #[source]
        source: RecordError,
    },
    /// A file of the state dir cannot be opened.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// Another process (a plegd still running, as in a DaemonSet rollout with a surge)
    /// holds the state dir.
    #[error("{path} is held by another process (is another plegd running on this --state-dir?)")]
    Locked {
        /// The lock file.
        path: PathBuf,
    },
    /// plegd was told to shut down while it waited for another process to let go of
    /// the state dir.
    #[error("shut down while waiting for {path} to be let go")]
    Interrupted {
        /// The lock file.
        path: PathBuf,
    },
    /// The file is not a journal this version can read.
    #[error("journal database {path}: {reason}")]
    Unusable {
        /// The file.
        path: PathBuf,
        /// Why.
        reason: String,
    },
    /// A corrupt file could not be moved aside.
    #[error("cannot move the unusable journal {path} aside: {source}")]
    MoveAside {
        /// The file.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
}

impl StoreError {
    /// Whether the file itself is bad (not a database, corrupt, another layout, a
    /// record that does not decode) rather than the disk or the process unable to use it
    /// now.
    pub fn is_corruption(&self) -> bool {
        use rusqlite::ErrorCode::{DatabaseCorrupt, NotADatabase};
        match self {
            Self::Unusable { .. } | Self::Record { .. } => true,
            Self::Sql { source: rusqlite::Error::SqliteFailure(e, _), .. } => {
                matches!(e.code, DatabaseCorrupt | NotADatabase)
            }
            _ => false,
        }
    }
}

/// The store's budgets.
#[derive(Clone, Debug)]
pub struct StoreConfig {
    /// The state dir.
    pub dir: PathBuf,
    /// Revisions kept at most.
    pub capacity: u64,
    /// Bytes of the database file in use at most (its pages that are not free: event
    /// records, their index, the view, SQLite's own structure); the oldest revisions go
    /// first.
    pub disk_budget: u64,
    /// Bytes of the newest records read back into memory at start.
    pub memory_budget: u64,
    /// The lineage mark, outside the state dir ([`super::lineage`]); none: not kept.
    pub lineage: Option<PathBuf>,
}

/// One stored event as read back.
pub struct Stored {
    /// Its revision.
    pub revision: u64,
    /// The event.
    pub event: PodLifecycleEvent,
    /// The pod, for filters.
    pub meta: PodMeta,
    /// The pod before this event changed its labels, if it did.
    pub left: Option<PodMeta>,
    /// The record's size.
    pub bytes: usize,
}

/// What a store held when it was opened.
pub struct Loaded {
    /// The journal's epoch.
    pub epoch: u64,
    /// Its latest revision (0: none yet).
    pub revision: u64,
    /// Every pod as its last event left it.
    pub view: Vec<(PodStatus, PodMeta)>,
    /// The newest records, oldest first, within the memory budget.
    pub tail: Vec<Stored>,
    /// Why a new epoch began, when it did: `None` when the journal continues.
    pub new_epoch: Option<String>,
    /// The first revision whose record says who its pod was before a label change
    /// (journals written by earlier versions lack it before this one).
    pub left_since: u64,
}

/// The writer's connection.
pub struct Store {
    /// The state dir's lock, held while the store lives: one writer per journal.
    _lock: Option<[std::fs::File; 2]>,
    conn: Connection,
    path: PathBuf,
    cfg: StoreConfig,
    /// Oldest revision kept (the latest + 1 when none is).
    oldest: u64,
    /// Sum of the kept records' sizes.
    kept_bytes: u64,
    /// The file's page size (fixed when the file was made), read once.
    page_size: u64,
    /// Each view record's size, and their sum: the part of the file compaction cannot
    /// shrink.
    view_sizes: std::collections::HashMap<String, u64>,
    view_bytes: u64,
    /// Whether the view's share of the disk budget was reported.
    view_warned: bool,
    /// The epoch on disk and its lineage mark, written after each commit.
    lineage: Marked,
}

/// An event to write: its revision, pod and record.
pub struct Write<'a> {
    /// Revision.
    pub revision: u64,
    /// Pod UID.
    pub uid: &'a str,
    /// The record.
    pub body: &'a [u8],
}

/// A change to the view: a pod's record, or `None` once it is gone.
pub type ViewWrite<'a> = (&'a str, Option<&'a [u8]>);

fn sql(path: &Path) -> impl Fn(rusqlite::Error) -> StoreError + '_ {
    move |source| StoreError::Sql { path: path.to_owned(), source }
}

/// This boot of the machine, so that a store written before a reboot (whose last
/// commits a power loss may have taken back) is not continued.
pub fn boot_id() -> String {
    std::fs::read_to_string("/proc/sys/kernel/random/boot_id").map(|s| s.trim().to_owned()).unwrap_or_default()
}

fn new_epoch() -> u64 {
    crate::model::system_to_nanos(std::time::SystemTime::now()) as u64
}

impl Store {
    /// Opens the journal under `cfg.dir`, creating the dir and the file as needed. A
    /// file that cannot be read, is corrupt or of another layout is moved aside (logged
    /// once) and a new one begins with a new epoch; so does one from another boot.
    /// Fails only when the dir cannot be created, or a bad file cannot be moved aside.
    pub fn open(cfg: StoreConfig, boot: &str) -> Result<(Self, Loaded), StoreError> {
        std::fs::create_dir_all(&cfg.dir).map_err(|source| StoreError::CreateDir { path: cfg.dir.clone(), source })?;
        let lock = Self::lock(&cfg.dir)?;
        let path = cfg.dir.join(FILE);
        let (mut store, loaded) = Self::open_locked(&path, &cfg, boot)?;
        store._lock = Some(lock);
        Ok((store, loaded))
    }

    /// Takes the state dir's lock (`flock` on the directory itself, released by the
    /// kernel when the process ends however it ends), or says it is held. A lock on a
    /// file in the dir could be deleted from under its holder, and a second plegd would
    /// then write the same journal; the directory cannot go while the journal is in it.
    ///
    /// The file `plegd.lock` is locked too, first: that is the lock earlier versions
    /// take, so an upgrade's old and new pods keep each other out.
    fn lock(dir: &Path) -> Result<[std::fs::File; 2], StoreError> {
        let take = |file: std::fs::File, path: PathBuf| match file.try_lock() {
            Ok(()) => Ok(file),
            Err(std::fs::TryLockError::WouldBlock) => Err(StoreError::Locked { path }),
            Err(std::fs::TryLockError::Error(source)) => Err(StoreError::Io { path, source }),
        };
        let marker = dir.join(LOCK_FILE);
        let file = std::fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&marker)
            .map_err(|source| StoreError::Io { path: marker.clone(), source })?;
        let file = take(file, marker)?;
        let path = dir.to_owned();
        let dir_file = std::fs::File::open(dir).map_err(|source| StoreError::Io { path: path.clone(), source })?;
        Ok([file, take(dir_file, path)?])
    }

    fn open_locked(path: &Path, cfg: &StoreConfig, boot: &str) -> Result<(Self, Loaded), StoreError> {
        let (path, cfg) = (path.to_owned(), cfg.clone());
        match Self::open_existing(&path, &cfg, boot) {
            Ok(Some(opened)) => return Ok(opened),
            Ok(None) => {}
            // A busy, unreadable or failing disk is not a corrupt journal: the file
            // stays, and the caller runs in memory and retries.
            Err(e) if !e.is_corruption() => return Err(e),
            Err(e) => {
                let aside = move_aside(&path)?;
                tracing::warn!(
                    error = %e, moved_to = %aside.display(),
                    "the journal on disk is unusable; it was moved aside and a new epoch begins (watchers start over with a snapshot)"
                );
                let (store, mut loaded) = Self::create(&path, &cfg, boot)?;
                loaded.new_epoch = Some(format!("{e}; moved to {}", aside.display()));
                return Ok((store, loaded));
            }
        }
        Self::create(&path, &cfg, boot)
    }

    fn connect(path: &Path) -> Result<Connection, StoreError> {
        let conn = Connection::open_with_flags(
            path,
            OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_CREATE | OpenFlags::SQLITE_OPEN_NO_MUTEX,
        )
        .map_err(sql(path))?;
        conn.busy_timeout(std::time::Duration::from_secs(5)).map_err(sql(path))?;
        let mode: String = conn.query_row("PRAGMA journal_mode=WAL", [], |r| r.get(0)).map_err(sql(path))?;
        if !mode.eq_ignore_ascii_case("wal") {
            return Err(StoreError::Unusable {
                path: path.to_owned(),
                reason: format!("journal mode {mode}, not WAL"),
            });
        }
        // The writer appends at the end of two B-trees: its page cache only needs their
        // right edges, not SQLite's default 2 MiB (which an idle node pays in RSS).
        conn.execute_batch(
            "PRAGMA synchronous=NORMAL; PRAGMA wal_autocheckpoint=0; PRAGMA foreign_keys=OFF; PRAGMA cache_size=-256;
             PRAGMA journal_size_limit=4194304;",
        )
        .map_err(sql(path))?;
        Ok(conn)
    }

    /// `Ok(None)`: no journal there yet.
    fn open_existing(path: &Path, cfg: &StoreConfig, boot: &str) -> Result<Option<(Self, Loaded)>, StoreError> {
        if !path.exists() {
            return Ok(None);
        }
        let conn = Self::connect(path)?;
        let check: String = conn.query_row("PRAGMA quick_check", [], |r| r.get(0)).map_err(sql(path))?;
        if check != "ok" {
            return Err(StoreError::Unusable { path: path.to_owned(), reason: format!("integrity check: {check}") });
        }
        let meta = |key: &str| -> Result<Option<i64>, StoreError> {
            conn.query_row("SELECT value FROM meta WHERE key = ?1", [key], |r| r.get(0)).optional().map_err(sql(path))
        };
        let schema = meta("schema")?;
        if schema != Some(SCHEMA) {
            let newer = if schema.is_some_and(|s| s > SCHEMA) { "written by a newer plegd: " } else { "" };
            let reason = format!("{newer}layout {schema:?}, this plegd reads layouts up to {SCHEMA}");
            return Err(StoreError::Unusable { path: path.to_owned(), reason });
        }
        let epoch =
            meta("epoch")?.ok_or_else(|| StoreError::Unusable { path: path.to_owned(), reason: "no epoch".into() })?;
        let revision = meta("revision")?.unwrap_or(0) as u64;
        let left_since = meta("left_since")?;
        let stored_boot: String = conn
            .query_row("SELECT text FROM meta WHERE key = 'boot'", [], |r| r.get(0))
            .optional()
            .map_err(sql(path))?
            .unwrap_or_default();
        let mut store = Self::new(conn, path, cfg, revision + 1)?;
        let view = store.read_view()?;
        let (mark, held) = Mark::open_kept(cfg.lineage.as_deref());
        store.lineage.mark = mark;
        let rebooted = !boot.is_empty() && stored_boot != boot;
        let restored = !rebooted && held.is_some_and(|m| m.disowns(epoch as u64, revision));
        let (stored_epoch, mut new_epoch_reason) = (epoch as u64, None);
        let epoch = if rebooted || restored {
            // A reboot (a power loss may have taken back commits watchers saw), or a
            // state dir put back from a copy (`lineage`). The pods still seed the
            // relister; the events go.
            let epoch = new_epoch();
            let tx = store.conn.transaction().map_err(sql(path))?;
            tx.execute("DELETE FROM events", []).map_err(sql(path))?;
            tx.execute("UPDATE meta SET value = ?1 WHERE key = 'epoch'", [epoch as i64]).map_err(sql(path))?;
            tx.execute("INSERT OR REPLACE INTO meta(key, value, text) VALUES ('boot', NULL, ?1)", [boot])
                .map_err(sql(path))?;
            tx.commit().map_err(sql(path))?;
            new_epoch_reason = Some(match held.filter(|_| restored) {
                Some(mark) => mark.restored_from_a_copy(stored_epoch, revision),
                None => "the machine rebooted since the journal was written".to_owned(),
            });
            epoch
        } else {
            stored_epoch
        };
        store.lineage.epoch = epoch;
        store.lineage.record(revision);
        let (oldest, kept): (Option<i64>, Option<i64>) = store
            .conn
            .query_row("SELECT MIN(rev), SUM(size) FROM events", [], |r| Ok((r.get(0)?, r.get(1)?)))
            .map_err(sql(path))?;
        store.oldest = oldest.map_or(revision + 1, |o| o as u64);
        store.kept_bytes = kept.unwrap_or(0) as u64;
        let tail = store.read_tail(revision)?;
        let left_since = match left_since {
            Some(r) => r as u64,
            None => {
                // Written by a version whose records do not say who a pod was before
                // its labels changed: from the next revision on they do.
                store
                    .conn
                    .execute("INSERT INTO meta(key, value) VALUES ('left_since', ?1)", [revision as i64 + 1])
                    .map_err(sql(path))?;
                revision + 1
            }
        };
        Ok(Some((store, Loaded { epoch, revision, view, tail, new_epoch: new_epoch_reason, left_since })))
    }

    fn create(path: &Path, cfg: &StoreConfig, boot: &str) -> Result<(Self, Loaded), StoreError> {
        let mut conn = Self::connect(path)?;
        let epoch = new_epoch();
        let tx = conn.transaction().map_err(sql(path))?;
        tx.execute_batch(
            "CREATE TABLE IF NOT EXISTS meta(key TEXT PRIMARY KEY, value INTEGER, text TEXT) WITHOUT ROWID;
             CREATE TABLE IF NOT EXISTS events(rev INTEGER PRIMARY KEY, uid TEXT NOT NULL, size INTEGER NOT NULL, body BLOB NOT NULL);
             CREATE INDEX IF NOT EXISTS events_by_pod ON events(uid, rev);
             CREATE TABLE IF NOT EXISTS pods(uid TEXT PRIMARY KEY, body BLOB NOT NULL) WITHOUT ROWID;
             DELETE FROM meta; DELETE FROM events; DELETE FROM pods;",
        )
        .map_err(sql(path))?;
        tx.execute(
            "INSERT INTO meta(key, value) VALUES ('schema', ?1), ('epoch', ?2), ('revision', 0), ('left_since', 1)",
            params![SCHEMA, epoch as i64],
        )
        .map_err(sql(path))?;
        tx.execute("INSERT INTO meta(key, value, text) VALUES ('boot', NULL, ?1)", [boot]).map_err(sql(path))?;
        tx.commit().map_err(sql(path))?;
        let mut store = Self::new(conn, path, cfg, 1)?;
        store.lineage = Marked { epoch, mark: Mark::open_kept(cfg.lineage.as_deref()).0 };
        store.lineage.record(0);
        Ok((
            store,
            Loaded {
                epoch,
                revision: 0,
                view: Vec::new(),
                tail: Vec::new(),
                new_epoch: Some("no journal on disk yet".into()),
                left_since: 1,
            },
        ))
    }

    fn new(conn: Connection, path: &Path, cfg: &StoreConfig, oldest: u64) -> Result<Self, StoreError> {
        let page_size = conn.query_row("PRAGMA page_size", [], |r| r.get::<_, i64>(0)).map_err(sql(path))? as u64;
        Ok(Self {
            _lock: None,
            conn,
            path: path.to_owned(),
            cfg: cfg.clone(),
            oldest,
            kept_bytes: 0,
            page_size,
            view_sizes: Default::default(),
            view_bytes: 0,
            view_warned: false,
            lineage: Marked::default(),
        })
    }

    fn read_view(&mut self) -> Result<Vec<(PodStatus, PodMeta)>, StoreError> {
        let mut stmt = self.conn.prepare("SELECT uid, body FROM pods").map_err(sql(&self.path))?;
        let rows =
            stmt.query_map([], |r| Ok((r.get::<_, String>(0)?, r.get::<_, Vec<u8>>(1)?))).map_err(sql(&self.path))?;
        let mut view = Vec::new();
        let mut sizes = Vec::new();
        for row in rows {
            let (uid, body) = row.map_err(sql(&self.path))?;
            sizes.push((uid, body.len() as u64));
            view.push(
                record::decode_view(&body).map_err(|source| StoreError::Record { path: self.path.clone(), source })?,
            );
        }
        drop(stmt);
        for (uid, size) in sizes {
            self.sized_view(&uid, Some(size));
        }
        Ok(view)
    }

    /// Keeps the view's size as its records change (`None`: gone).
    fn sized_view(&mut self, uid: &str, size: Option<u64>) {
        let old = match size {
            Some(n) => {
                self.view_bytes += n;
                self.view_sizes.insert(uid.to_owned(), n)
            }
            None => self.view_sizes.remove(uid),
        };
        self.view_bytes -= old.unwrap_or(0);
    }

    /// The newest records within the memory budget, oldest first.
    fn read_tail(&self, revision: u64) -> Result<Vec<Stored>, StoreError> {
        let mut stmt = self.conn.prepare("SELECT rev, body FROM events ORDER BY rev DESC").map_err(sql(&self.path))?;
        let mut rows = stmt.query([]).map_err(sql(&self.path))?;
        let (mut tail, mut bytes) = (Vec::new(), 0u64);
        let mut expect = revision;
        while let Some(row) = rows.next().map_err(sql(&self.path))? {
            let rev: i64 = row.get(0).map_err(sql(&self.path))?;
            let body: Vec<u8> = row.get(1).map_err(sql(&self.path))?;
            if rev as u64 != expect {
                return Err(StoreError::Unusable {
                    path: self.path.clone(),
                    reason: format!("revision {expect} is missing"),
                });
            }
            bytes += body.len() as u64;
            if bytes > self.cfg.memory_budget && !tail.is_empty() {
                break;
            }
            tail.push(decode(&self.path, rev as u64, &body)?);
            expect -= 1;
        }
        tail.reverse();
        Ok(tail)
    }

    /// Writes a batch of events and the view's changes in one transaction, then drops
    /// the oldest revisions beyond the budgets.
    pub fn commit(&mut self, events: &[Write<'_>], view: &[ViewWrite<'_>], revision: u64) -> Result<(), StoreError> {
        let path = self.path.clone();
        let view_bytes = self.view_bytes_after(view);
        let tx = self.conn.transaction().map_err(sql(&path))?;
        Self::write(&tx, &path, events, view, revision)?;
        let added: u64 = events.iter().map(|w| w.body.len() as u64).sum();
        // With nothing kept, `oldest` is already the first revision of this batch.
        let oldest = self.oldest;
        let kept = self.kept_bytes + added;
        let warned = &mut self.view_warned;
        let compacted =
            Self::compact(&tx, &path, &self.cfg, self.page_size, warned, oldest, revision, kept, view_bytes)?;
        tx.commit().map_err(sql(&path))?;
        self.lineage.record(revision);
        for (uid, body) in view {
            self.sized_view(uid, body.map(|b| b.len() as u64));
        }
        self.oldest = oldest;
        self.kept_bytes += added;
        if let Some((oldest, freed)) = compacted {
            self.oldest = oldest;
            self.kept_bytes -= freed;
        }
        Ok(())
    }

    /// The rows of one batch: events, the view's changes, the latest revision.
    fn write(
        tx: &rusqlite::Transaction<'_>,
        path: &Path,
        events: &[Write<'_>],
        view: &[ViewWrite<'_>],
        revision: u64,
    ) -> Result<(), StoreError> {
        let path = path.to_owned();
        {
            let mut ins = tx
                .prepare_cached("INSERT INTO events(rev, uid, size, body) VALUES (?1, ?2, ?3, ?4)")
                .map_err(sql(&path))?;
            for w in events {
                ins.execute(params![w.revision as i64, w.uid, w.body.len() as i64, w.body]).map_err(sql(&path))?;
            }
            let mut put =
                tx.prepare_cached("INSERT OR REPLACE INTO pods(uid, body) VALUES (?1, ?2)").map_err(sql(&path))?;
            let mut del = tx.prepare_cached("DELETE FROM pods WHERE uid = ?1").map_err(sql(&path))?;
            for (uid, body) in view {
                match body {
                    Some(b) => put.execute(params![uid, b]).map_err(sql(&path))?,
                    None => del.execute([uid]).map_err(sql(&path))?,
                };
            }
            tx.prepare_cached("UPDATE meta SET value = ?1 WHERE key = 'revision'")
                .map_err(sql(&path))?
                .execute([revision as i64])
                .map_err(sql(&path))?;
        }
        Ok(())
    }

    /// Bytes of the file's pages in use (not on its free list), this transaction's
    /// writes included.
    fn used_bytes(tx: &rusqlite::Transaction<'_>, path: &Path, page_size: u64) -> Result<u64, StoreError> {
        // Each reads a field of the file's header (cached statements: no parsing).
        let pragma = |q: &str| tx.prepare_cached(q)?.query_row([], |r| r.get::<_, i64>(0));
        let (pages, free) =
            (pragma("PRAGMA page_count").map_err(sql(path))?, pragma("PRAGMA freelist_count").map_err(sql(path))?);
        Ok((pages - free).max(0) as u64 * page_size)
    }

    /// The view's bytes once `changes` are applied.
    fn view_bytes_after(&self, changes: &[ViewWrite<'_>]) -> u64 {
        changes.iter().fold(self.view_bytes, |sum, (uid, body)| {
            sum - self.view_sizes.get(*uid).copied().unwrap_or(0) + body.map_or(0, |b| b.len() as u64)
        })
    }

    /// Drops the oldest revisions while more than the capacity is kept or the file
    /// uses more than the disk budget, down to 95 % of each so that compaction is not
    /// paid on every commit. A record takes more of the file than its bytes (its index
    /// entry, the part of a page it leaves unused: a 3 KiB record fills a 4 KiB page),
    /// so the goal is scaled by how the file holds what it holds now. The view (one
    /// record per pod) cannot be compacted: the events get the budget less the view,
    /// but never less than a quarter of it — a view larger than that lets the file
    /// exceed the budget, and is reported once.
    /// Returns the new oldest revision and the record bytes freed.
    #[allow(clippy::too_many_arguments)]
    fn compact(
        tx: &rusqlite::Transaction<'_>,
        path: &Path,
        cfg: &StoreConfig,
        page_size: u64,
        view_warned: &mut bool,
        oldest: u64,
        revision: u64,
        kept: u64,
        view_bytes: u64,
    ) -> Result<Option<(u64, u64)>, StoreError> {
        let count = (revision + 1).saturating_sub(oldest);
        let used = Self::used_bytes(tx, path, page_size)?;
        if count <= cfg.capacity && kept <= cfg.disk_budget && used <= cfg.disk_budget {
            return Ok(None);
        }
        let count_goal = cfg.capacity - cfg.capacity / 20;
        // File bytes per byte of records (events and view).
        let per_byte = (used as f64 / (kept + view_bytes).max(1) as f64).max(1.0);
        let budget = cfg.disk_budget as f64;
        let room = budget * 0.95 / per_byte - view_bytes as f64;
        let floor = budget / 4.0 / per_byte;
        if room < floor && !*view_warned {
            *view_warned = true;
            tracing::warn!(
                view_bytes,
                budget = cfg.disk_budget,
                "the journal's view of the node's pods takes most of --journal-disk-budget; events keep a quarter of it and the file exceeds it: raise the budget"
            );
        }
        let bytes_goal = room.max(floor) as u64;
        let mut stmt =
            tx.prepare_cached("SELECT rev, size FROM events WHERE rev >= ?1 ORDER BY rev").map_err(sql(path))?;
        let mut rows = stmt.query([oldest as i64]).map_err(sql(path))?;
        let (mut cut, mut freed, mut left) = (oldest, 0u64, count);
        while let Some(row) = rows.next().map_err(sql(path))? {
            if (left <= count_goal && kept - freed <= bytes_goal) || left <= 1 {
                break;
            }
            let (rev, size): (i64, i64) = (row.get(0).map_err(sql(path))?, row.get(1).map_err(sql(path))?);
            cut = rev as u64 + 1;
            freed += size as u64;
            left -= 1;
        }
        drop(rows);
        tx.execute("DELETE FROM events WHERE rev < ?1", [cut as i64]).map_err(sql(path))?;
        Ok(Some((cut, freed)))
    }

    /// Replaces everything on disk with this journal's state: after writes failed and
    /// work again, the store restarts from what memory still holds, under the epoch
    /// the journal moved to when they failed.
    pub fn rewrite(
        &mut self,
        epoch: u64,
        revision: u64,
        events: &[Write<'_>],
        view: &[ViewWrite<'_>],
    ) -> Result<(), StoreError> {
        let path = self.path.clone();
        let tx = self.conn.transaction().map_err(sql(&path))?;
        // One transaction: the file holds the old epoch's journal or the new one, never
        // the new epoch with the old revision and no events.
        tx.execute_batch("DELETE FROM events; DELETE FROM pods;").map_err(sql(&path))?;
        tx.execute("UPDATE meta SET value = ?1 WHERE key = 'epoch'", [epoch as i64]).map_err(sql(&path))?;
        Self::write(&tx, &path, events, view, revision)?;
        let oldest = events.first().map_or(revision + 1, |w| w.revision);
        let kept: u64 = events.iter().map(|w| w.body.len() as u64).sum();
        let view_bytes: u64 = view.iter().filter_map(|(_, b)| b.map(|b| b.len() as u64)).sum();
        let warned = &mut self.view_warned;
        let compacted =
            Self::compact(&tx, &path, &self.cfg, self.page_size, warned, oldest, revision, kept, view_bytes)?;
        tx.commit().map_err(sql(&path))?;
        self.lineage.epoch = epoch;
        self.lineage.record(revision);
        self.view_sizes.clear();
        self.view_bytes = 0;
        for (uid, body) in view {
            self.sized_view(uid, body.map(|b| b.len() as u64));
        }
        self.oldest = oldest;
        self.kept_bytes = kept;
        if let Some((oldest, freed)) = compacted {
            self.oldest = oldest;
            self.kept_bytes -= freed;
        }
        Ok(())
    }

    /// Oldest revision on disk (the latest + 1 when none).
    pub fn oldest(&self) -> u64 {
        self.oldest
    }

    /// Bytes of event records kept.
    pub fn kept_bytes(&self) -> u64 {
        self.kept_bytes
    }

    /// The database file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// A reader of its own, for replays and timelines.
    pub fn reader(&self) -> Result<Reader, StoreError> {
        Reader::open(&self.path)
    }

    /// Limits the file to `pages` pages: writes beyond fail as a full disk does
    /// (SQLite's own "database or disk is full").
    #[cfg(test)]
    pub fn limit_pages(&self, pages: u64) {
        let _: i64 = self.conn.query_row(&format!("PRAGMA max_page_count = {pages}"), [], |r| r.get(0)).unwrap();
    }

    /// Pages the file has.
    #[cfg(test)]
    pub fn page_count(&self) -> u64 {
        self.conn.query_row("PRAGMA page_count", [], |r| r.get::<_, i64>(0)).unwrap() as u64
    }

    /// Bytes of the file's pages in use.
    #[cfg(test)]
    pub fn used_bytes_now(&mut self) -> u64 {
        let tx = self.conn.transaction().unwrap();
        Self::used_bytes(&tx, &self.path, self.page_size).unwrap()
    }
}

fn decode(path: &Path, revision: u64, body: &[u8]) -> Result<Stored, StoreError> {
    let d = record::decode_event(body).map_err(|source| StoreError::Record { path: path.to_owned(), source })?;
    Ok(Stored { revision, event: d.event, meta: d.meta, left: d.left, bytes: body.len() })
}

/// What the statuses of one pod read so far hold, to share with the next one read.
#[derive(Default)]
struct Alike {
    containers: std::collections::HashMap<String, Arc<crate::model::ContainerStatus>>,
    labels: crate::labels::Labels,
    annotations: crate::labels::Labels,
}

impl Alike {
    fn share(&mut self, s: &mut Stored) {
        share_labels(&mut self.labels, &mut s.meta.labels);
        let Some(pod) = s.event.pod.as_mut() else { return };
        let pod = Arc::make_mut(pod);
        for c in &mut pod.containers {
            match self.containers.get(&c.id) {
                Some(seen) if **seen == **c => *c = seen.clone(),
                _ => {
                    self.containers.insert(c.id.clone(), c.clone());
                }
            }
        }
        share_labels(&mut self.labels, &mut pod.labels);
        share_labels(&mut self.annotations, &mut pod.annotations);
    }
}

/// `l` becomes `seen`'s allocation when they hold the same; else `seen` becomes `l`.
fn share_labels(seen: &mut crate::labels::Labels, l: &mut crate::labels::Labels) {
    if *seen == *l {
        *l = seen.clone();
    } else {
        *seen = l.clone();
    }
}

/// Decodes every `(rev, body)` row a statement gives.
fn decode_rows(
    path: &Path,
    stmt: &mut rusqlite::CachedStatement<'_>,
    args: impl rusqlite::Params,
) -> Result<Vec<Stored>, StoreError> {
    let rows = stmt.query_map(args, |r| Ok((r.get::<_, i64>(0)?, r.get::<_, Vec<u8>>(1)?))).map_err(sql(path))?;
    let mut out = Vec::new();
    for row in rows {
        let (rev, body) = row.map_err(sql(path))?;
        out.push(decode(path, rev as u64, &body)?);
    }
    Ok(out)
}

/// How many journals moved aside are kept for a post-mortem; older ones are deleted
/// (a disk that keeps corrupting the file must not fill the state dir with copies).
pub const KEEP_ASIDE: usize = 3;

/// Moves a bad journal (and its WAL) aside: `journal.db.bad-<unix seconds>[-n]`, then
/// deletes all but the newest [`KEEP_ASIDE`] of them.
fn move_aside(path: &Path) -> Result<PathBuf, StoreError> {
    let secs = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs());
    let mut aside = path.with_file_name(format!("{FILE}.bad-{secs}"));
    for n in 1.. {
        if !aside.exists() {
            break;
        }
        aside = path.with_file_name(format!("{FILE}.bad-{secs}-{n}"));
    }
    std::fs::rename(path, &aside).map_err(|source| StoreError::MoveAside { path: path.to_owned(), source })?;
    for ext in ["-wal", "-shm"] {
        let side = PathBuf::from(format!("{}{ext}", path.display()));
        if side.exists() {
            let _ = std::fs::rename(&side, PathBuf::from(format!("{}{ext}", aside.display())));
        }
    }
    if let Some(dir) = path.parent() {
        prune_aside(dir, &aside);
    }
    Ok(aside)
}

/// Deletes all but the newest [`KEEP_ASIDE`] journals moved aside in `dir` (with their
/// WAL and shared-memory files), never `just` (the one just moved aside, whatever the
/// clock said when it was named). Best effort: a failure is logged, never fatal.
fn prune_aside(dir: &Path, just: &Path) {
    let Ok(entries) = std::fs::read_dir(dir) else { return };
    let prefix = format!("{FILE}.bad-");
    // By when they were last written, then by name: a node's clock may have been off
    // when one was named.
    let mut aside: Vec<(std::time::SystemTime, String, PathBuf)> = entries
        .filter_map(|e| {
            let e = e.ok()?;
            let name = e.file_name().into_string().ok()?;
            let stamp = name.strip_prefix(&prefix)?;
            let (secs, n) = stamp.split_once('-').unwrap_or((stamp, "0"));
            secs.parse::<u64>().ok()?;
            n.parse::<u64>().ok()?;
            let path = dir.join(&name);
            (path != just).then_some(())?;
            let written = e.metadata().and_then(|m| m.modified()).unwrap_or(std::time::UNIX_EPOCH);
            Some((written, name, path))
        })
        .collect();
    aside.sort();
    let excess = (aside.len() + 1).saturating_sub(KEEP_ASIDE);
    for (_, _, file) in aside.into_iter().take(excess) {
        for victim in ["", "-wal", "-shm"].map(|ext| PathBuf::from(format!("{}{ext}", file.display()))) {
            match std::fs::remove_file(&victim) {
                Ok(()) => tracing::info!(file = %victim.display(), "deleted an old journal moved aside"),
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => {
                    tracing::warn!(file = %victim.display(), error = %e, "could not delete an old journal moved aside")
                }
            }
        }
    }
}

/// A read-only connection: replays page through it, the timeline reads a pod's events.
pub struct Reader {
    conn: Connection,
    path: PathBuf,
}

/// The page cache of a read-only connection, KiB.
const READER_CACHE_KIB: i64 = 128;

impl Reader {
    /// A read-only connection to the journal at `path`.
    pub fn open(path: &Path) -> Result<Self, StoreError> {
        let conn =
            Connection::open_with_flags(path, OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX)
                .map_err(sql(path))?;
        conn.busy_timeout(std::time::Duration::from_secs(5)).map_err(sql(path))?;
        // A replay reads forward once: a small page cache does (SQLite's default is
        // 2 MiB per connection, and every resuming client had its own).
        conn.pragma_update(None, "cache_size", -READER_CACHE_KIB).map_err(sql(path))?;
        Ok(Self { conn, path: path.to_owned() })
    }

    /// Up to `limit` records after `after`, in order. The first is `after + 1` unless
    /// compaction took it: the caller checks.
    pub fn page(&self, after: u64, before: u64, limit: usize) -> Result<Vec<Stored>, StoreError> {
        let mut stmt = self
            .conn
            .prepare_cached("SELECT rev, body FROM events WHERE rev > ?1 AND rev < ?2 ORDER BY rev LIMIT ?3")
            .map_err(sql(&self.path))?;
        decode_rows(&self.path, &mut stmt, params![after as i64, before as i64, limit as i64])
    }

    /// The newest `limit` events of a pod, oldest first. What consecutive statuses of
    /// the pod hold alike (each container that did not change, the labels) is one
    /// allocation, as in the live journal: a pod of many containers costs a status per
    /// change, not a copy of every container for each of its events.
    pub fn timeline(&self, uid: &str, limit: usize) -> Result<Vec<Stored>, StoreError> {
        let mut stmt = self
            .conn
            .prepare_cached("SELECT rev, body FROM events WHERE uid = ?1 ORDER BY rev DESC LIMIT ?2")
            .map_err(sql(&self.path))?;
        let mut rows = stmt.query(params![uid, limit as i64]).map_err(sql(&self.path))?;
        let (mut out, mut alike) = (Vec::new(), Alike::default());
        while let Some(r) = rows.next().map_err(sql(&self.path))? {
            let rev: i64 = r.get(0).map_err(sql(&self.path))?;
            let body: Vec<u8> = r.get(1).map_err(sql(&self.path))?;
            let mut stored = decode(&self.path, rev as u64, &body)?;
            alike.share(&mut stored);
            out.push(stored);
        }
        out.reverse();
        Ok(out)
    }

    /// Copies the WAL into the database (never waiting on the writer or readers), so
    /// the WAL stays small and what is committed reaches the disk with an `fsync`.
    pub fn checkpoint(path: &Path) -> Result<(), StoreError> {
        let conn =
            Connection::open_with_flags(path, OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_NO_MUTEX)
                .map_err(sql(path))?;
        // A WAL that a burst, or writes retried against a full disk, made large is cut
        // back to 4 MiB (`journal_size_limit`) once checkpointed: on a small filesystem
        // it would otherwise keep the space another writer gave back.
        conn.execute_batch("PRAGMA journal_size_limit=4194304;").map_err(sql(path))?;
        conn.query_row("PRAGMA wal_checkpoint(PASSIVE)", [], |_| Ok(())).map_err(sql(path))
    }
}

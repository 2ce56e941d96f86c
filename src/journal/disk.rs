//! The journal's disk: what state it is in (none, durable, failing), the commit of
//! each batch before delivery, the move to a new epoch in memory when the disk fails
//! and the rewrite when it works again, the replay of old revisions page by page, and
//! the checkpointer that keeps `fsync` off the write path.

use std::collections::HashSet;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use tokio_util::sync::CancellationToken;

use super::store::{self, Reader, Store, StoreConfig, StoreError};
use super::{Dropped, Entry, Filter, Inner, Journal, JournalConfig, RETRY_DISK_EVERY, epoch_now, record};

/// Where the journal's records are, as `/healthz` tells it.
pub(super) enum Disk {
    /// No state dir: memory only, by choice.
    None,
    /// Every batch is on disk before delivery.
    Durable(Store),
    /// The disk failed: memory only until a retry works.
    Failing { store: Option<Store>, error: String, last_try: Instant },
}

/// A replay's part on disk: revisions after `after` and before `before`, read a
/// page at a time through a read-only connection of its own.
pub struct DiskReplay {
    pub(super) reader: Option<Reader>,
    pub(super) path: PathBuf,
    pub(super) after: u64,
    pub(super) before: u64,
    pub(super) filter: Arc<Filter>,
}

impl std::fmt::Debug for DiskReplay {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DiskReplay").field("after", &self.after).field("before", &self.before).finish()
    }
}

/// Records a replay reads from disk at a time (decoded, a page is its own copy, held
/// until the client took it: 64 busy pods' records are ≈ 0.1 MiB).
const REPLAY_PAGE: usize = 64;
/// Records one read scans at most, matching or not.
const SCAN_PER_CALL: usize = REPLAY_PAGE * 8;

/// Why a replay from disk stopped short: the client must start over.
#[derive(Debug, thiserror::Error)]
pub enum ReplayError {
    /// Compaction dropped revisions the replay had yet to send.
    #[error("revision {0} was compacted away during the replay")]
    Compacted(u64),
    /// A pod the client held left its selection (its labels changed): a replay of the
    /// matching entries would never remove it.
    #[error("pod {uid} left the selection at revision {revision}")]
    LeftSelection {
        /// The pod.
        uid: String,
        /// The entry that changed its labels.
        revision: u64,
    },
    /// The disk failed.
    #[error(transparent)]
    Store(#[from] StoreError),
}

impl DiskReplay {
    /// The next page of matching entries, in order (maybe empty: the call scanned its
    /// share of records and none matched); `None` once the part on disk is sent. Blocking: call it off the async threads. The read-only connection lives
    /// for the call only: a client that stalls between pages holds no reader.
    pub fn next_page(&mut self) -> Result<Option<Vec<Arc<Entry>>>, ReplayError> {
        let page = self.read_page();
        self.reader = None;
        page
    }

    fn read_page(&mut self) -> Result<Option<Vec<Arc<Entry>>>, ReplayError> {
        // A filter that matches little would scan the whole range in one call: after
        // this many records the call returns what it has (maybe nothing), so its turn
        // goes to others and a client that left is noticed.
        let mut scanned = 0;
        loop {
            if scanned >= SCAN_PER_CALL {
                return Ok(Some(Vec::new()));
            }
            if self.after + 1 >= self.before {
                return Ok(None);
            }
            let reader = match &mut self.reader {
                Some(r) => r,
                None => self.reader.insert(Reader::open(&self.path)?),
            };
            // Every revision in (after, before) was on disk when the replay began: one
            // that is not any more was compacted away.
            let page = reader.page(self.after, self.before, REPLAY_PAGE)?;
            if page.is_empty() {
                return Err(ReplayError::Compacted(self.after + 1));
            }
            scanned += page.len();
            let mut out = Vec::new();
            for s in page {
                if s.revision != self.after + 1 {
                    return Err(ReplayError::Compacted(self.after + 1));
                }
                self.after = s.revision;
                let entry = Entry::from(s);
                if self.filter.leaves(&entry) {
                    return Err(ReplayError::LeftSelection {
                        uid: entry.event.pod_uid.to_string(),
                        revision: entry.revision,
                    });
                }
                if self.filter.matches(&entry) {
                    out.push(Arc::new(entry));
                }
            }
            if !out.is_empty() {
                return Ok(Some(out));
            }
        }
    }
}

impl Journal {
    /// Writes a batch to disk before it is delivered. When the write fails the journal
    /// moves to a new epoch in memory, and resets every subscriber so that none holds a
    /// revision of the old epoch that the disk lacks; a journal whose disk failed
    /// tries it again every few seconds, writing its memory afresh.
    pub(super) fn commit(
        &self,
        inner: &mut Inner,
        entries: &[(Arc<Entry>, Vec<u8>)],
        moved: &[Arc<str>],
        revision: u64,
    ) {
        let view_writes =
            |inner: &Inner, uids: &mut dyn Iterator<Item = &Arc<str>>| -> Vec<(Arc<str>, Option<Vec<u8>>)> {
                let mut seen = HashSet::new();
                uids.filter(|u| seen.insert(Arc::clone(u)))
                    .map(|u| {
                        let body = inner.view.get(u).zip(inner.metas.get(u)).map(|(p, m)| record::encode_view(p, m));
                        (u.clone(), body)
                    })
                    .collect()
            };
        match &inner.disk {
            Disk::None => return,
            Disk::Failing { last_try, .. } => {
                if last_try.elapsed() >= RETRY_DISK_EVERY {
                    self.retry_disk(inner, entries, revision);
                }
                return;
            }
            Disk::Durable(_) => {}
        }
        let started = Instant::now();
        let view = view_writes(inner, &mut moved.iter());
        let Disk::Durable(store) = &mut inner.disk else { unreachable!("matched above") };
        let writes: Vec<_> = entries
            .iter()
            .map(|(e, body)| store::Write { revision: e.revision, uid: &e.event.pod_uid, body })
            .collect();
        let view_refs: Vec<_> = view.iter().map(|(u, b)| (&**u, b.as_deref())).collect();
        let result = store.commit(&writes, &view_refs, revision);
        self.shared.metrics.commit.observe(started.elapsed().as_secs_f64());
        self.shared.dirty.fetch_add(1, Ordering::Relaxed);
        if let Err(e) = result {
            self.fail_disk(inner, e);
        }
    }

    fn fail_disk(&self, inner: &mut Inner, e: StoreError) {
        let Disk::Durable(store) = std::mem::replace(&mut inner.disk, Disk::None) else { return };
        let epoch = epoch_now().max(inner.epoch + 1);
        tracing::error!(
            error = %e, new_epoch = epoch,
            "the journal cannot write to disk; it goes on in memory under a new epoch (every watcher starts over once) and retries every {:?}",
            RETRY_DISK_EVERY
        );
        let m = &self.shared.metrics;
        m.write_errors.inc();
        m.durable.set(0);
        inner.disk = Disk::Failing { store: Some(store), error: e.to_string(), last_try: Instant::now() };
        self.new_epoch(inner, epoch);
    }

    /// Moves to `epoch`: every subscriber is dropped and told to start over.
    fn new_epoch(&self, inner: &mut Inner, epoch: u64) {
        inner.epoch = epoch;
        self.shared.epoch.store(epoch, Ordering::Release);
        for s in inner.subs.drain(..) {
            s.queue.drop_for(Dropped::NewEpoch);
        }
    }

    /// Tries the disk again: everything memory holds is written afresh under the
    /// current epoch, this batch included.
    fn retry_disk(&self, inner: &mut Inner, batch: &[(Arc<Entry>, Vec<u8>)], revision: u64) {
        let Disk::Failing { store, last_try, error } = &mut inner.disk else { return };
        *last_try = Instant::now();
        let mut store = match store.take() {
            Some(s) => s,
            None => match Store::open(
                self.shared.store_cfg.clone().expect("a journal with a disk has its config"),
                &store::boot_id(),
            ) {
                Ok((s, _)) => s,
                Err(e) => {
                    *error = e.to_string();
                    return;
                }
            },
        };
        let mut bodies: Vec<(u64, Arc<str>, Vec<u8>)> = inner
            .ring
            .iter()
            .map(|e| (e.revision, e.event.pod_uid.clone(), record::encode_event(&e.event, &e.meta, e.left.as_deref())))
            .collect();
        bodies.extend(batch.iter().map(|(e, b)| (e.revision, e.event.pod_uid.clone(), b.clone())));
        let writes: Vec<_> = bodies.iter().map(|(r, u, b)| store::Write { revision: *r, uid: u, body: b }).collect();
        let view: Vec<(Arc<str>, Option<Vec<u8>>)> = inner
            .view
            .iter()
            .filter_map(|(u, p)| inner.metas.get(u).map(|m| (u.clone(), Some(record::encode_view(p, m)))))
            .collect();
        let view_refs: Vec<_> = view.iter().map(|(u, b)| (&**u, b.as_deref())).collect();
        match store.rewrite(inner.epoch, revision, &writes, &view_refs) {
            Ok(()) => {
                tracing::info!(
                    epoch = inner.epoch,
                    "the journal writes to disk again; every event from now on is on disk before delivery"
                );
                self.shared.metrics.durable.set(1);
                inner.disk = Disk::Durable(store);
            }
            Err(e) => {
                self.shared.metrics.write_errors.inc();
                let Disk::Failing { store: slot, error, .. } = &mut inner.disk else { return };
                *error = e.to_string();
                *slot = Some(store);
            }
        }
    }
}

pub(super) fn store_config(cfg: &JournalConfig, dir: PathBuf, lineage: Option<PathBuf>) -> StoreConfig {
    StoreConfig {
        dir,
        capacity: cfg.capacity.max(1) as u64,
        disk_budget: cfg.disk_budget.max(1),
        memory_budget: cfg.memory_budget.max(1),
        lineage,
    }
}

/// Copies the journal's WAL into its database every second while there were commits,
/// so that commits never wait for an `fsync` and the WAL stays small.
pub struct Checkpointer {
    pub(super) journal: Journal,
    pub(super) path: PathBuf,
}

/// How often the WAL is checkpointed.
const CHECKPOINT_EVERY: Duration = Duration::from_secs(1);

impl Checkpointer {
    /// Checkpoints until shutdown, and once more then.
    pub async fn run(self, shutdown: CancellationToken) {
        let mut tick = tokio::time::interval(CHECKPOINT_EVERY);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            let stop = tokio::select! {
                _ = tick.tick() => false,
                _ = shutdown.cancelled() => true,
            };
            if self.journal.shared.dirty.swap(0, Ordering::Relaxed) > 0 || stop {
                let path = self.path.clone();
                match tokio::task::spawn_blocking(move || Reader::checkpoint(&path)).await {
                    Ok(Err(e)) => tracing::debug!(error = %e, "journal checkpoint failed; the next one retries"),
                    Err(e) => tracing::debug!(error = %e, "journal checkpoint task failed"),
                    Ok(Ok(())) => {}
                }
            }
            if stop {
                return;
            }
        }
    }
}

#[cfg(test)]
impl Journal {
    /// Limits the journal's file to `pages` pages (see [`Store::limit_pages`]).
    pub(super) fn limit_disk(&self, pages: u64) {
        match &self.lock().disk {
            Disk::Durable(s) => s.limit_pages(pages),
            Disk::Failing { store: Some(s), .. } => s.limit_pages(pages),
            _ => {}
        }
    }

    /// Makes the next batch try a failing disk again.
    pub(super) fn backdate_disk_retry(&self) {
        if let Disk::Failing { last_try, .. } = &mut self.lock().disk {
            *last_try -= RETRY_DISK_EVERY;
        }
    }
}

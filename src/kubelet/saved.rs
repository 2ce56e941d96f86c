//! What the kubelet said, kept across plegd's restarts: `kubelet-pods.pb` in the state
//! dir, written whole and renamed into place (a crash leaves the old book or the new
//! one, never half of either). It holds only what [`Identities`] holds — each pod's
//! identity fields, whether it is on the host's network, when the kubelet said it was
//! gone — so nothing else of a pod the kubelet sent ever reaches the disk.
//!
//! A restarted plegd answers with the last heard word at once, a removed pod's
//! tombstone keeps its kubelet identity, and the watch's replay, which names every
//! running pod again, changes nothing and so tells no `POD_UPDATED`.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use crate::model::identity::{Identities, KeptBook, KeptPod, KubeletPod};
use crate::proto::plegd as api;

/// File name in the state dir.
pub const FILE: &str = "kubelet-pods.pb";

/// The file's format (`docs/state-dir.md`); a file of a newer format (a downgrade) is
/// not read.
pub const FORMAT: u32 = 1;

/// The file as it is written.
#[derive(Clone, PartialEq, prost::Message)]
struct OnDisk {
    #[prost(uint32, tag = "1")]
    format: u32,
    /// The node's name as the kubelet said it; empty: not said.
    #[prost(string, tag = "2")]
    node: String,
    #[prost(message, repeated, tag = "3")]
    pods: Vec<PodOnDisk>,
}

#[derive(Clone, PartialEq, prost::Message)]
struct PodOnDisk {
    #[prost(string, tag = "1")]
    uid: String,
    #[prost(message, optional, tag = "2")]
    identity: Option<api::PodIdentity>,
    #[prost(bool, tag = "3")]
    host_network: bool,
    /// Milliseconds since the epoch the kubelet said it was gone; 0: running.
    #[prost(uint64, tag = "4")]
    gone_at_ms: u64,
    /// Running as a run before last heard, not heard since: since when (ms); 0: heard.
    #[prost(uint64, tag = "5")]
    restored_at_ms: u64,
}

/// Failures of the kept book.
#[derive(Debug, thiserror::Error)]
pub enum SavedError {
    /// Reading or writing failed.
    #[error("kubelet pods file {path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// What failed.
        source: std::io::Error,
    },
    /// The file does not decode.
    #[error("kubelet pods file {path}: {source}")]
    Decode {
        /// The file.
        path: PathBuf,
        /// What failed.
        source: prost::DecodeError,
    },
    /// No format: empty, or not written by plegd.
    #[error("kubelet pods file {path} names no format: not written by plegd")]
    NoFormat {
        /// The file.
        path: PathBuf,
    },
    /// A newer plegd wrote it.
    #[error("kubelet pods file {path} is of format {format}, newer than this plegd's {FORMAT}")]
    Newer {
        /// The file.
        path: PathBuf,
        /// Its format.
        format: u32,
    },
}

/// The book kept in `dir`, if there is one this plegd can read. One it cannot is
/// reported and set aside: every identity is inferred until the kubelet's watch replays.
pub fn load(dir: &Path) -> Option<KeptBook> {
    match read(dir) {
        Ok(book) => book,
        Err(e) => {
            tracing::warn!(error = %e, "what the kubelet said before this start is not read; identities are inferred until its watch replays");
            None
        }
    }
}

/// Takes what an earlier run kept in `dir` back into `identities`: once, at start, with
/// the state dir locked and before anything serves an identity. Whether there was a
/// book (it is to be written again: it now says since when each pod was restored).
pub fn restore(identities: &Identities, dir: &Path) -> bool {
    let Some(book) = load(dir) else { return false };
    tracing::info!(pods = book.pods.len(), "what the kubelet said before this start stands until its watch replays");
    identities.restore(book, SystemTime::now());
    true
}

/// Removes the book kept in `dir`, if any: the Pods API is not asked any more, and a
/// word kept from when it was would outlive every pod it names.
pub fn discard(dir: &Path) {
    match std::fs::remove_file(dir.join(FILE)) {
        Ok(()) => tracing::info!("the Pods API is not asked: what the kubelet said before is dropped"),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => tracing::warn!(error = %e, "what the kubelet said before was not dropped"),
    }
}

/// The book kept in `dir`; `None` when there is none.
pub fn read(dir: &Path) -> Result<Option<KeptBook>, SavedError> {
    let path = dir.join(FILE);
    let bytes = match std::fs::read(&path) {
        Ok(b) => b,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(source) => return Err(SavedError::Io { path, source }),
    };
    let on_disk = <OnDisk as prost::Message>::decode(bytes.as_slice())
        .map_err(|source| SavedError::Decode { path: path.clone(), source })?;
    if on_disk.format > FORMAT {
        return Err(SavedError::Newer { path, format: on_disk.format });
    }
    if on_disk.format == 0 {
        // Every file plegd writes names its format: an empty or foreign one is not a book.
        return Err(SavedError::NoFormat { path });
    }
    let at = |ms: u64| (ms > 0).then(|| UNIX_EPOCH + Duration::from_millis(ms));
    let pods = on_disk
        .pods
        .into_iter()
        .filter(|p| !p.uid.is_empty())
        .map(|p| KeptPod {
            uid: p.uid,
            pod: Arc::new(KubeletPod::new(p.identity.unwrap_or_default(), p.host_network)),
            gone_at: at(p.gone_at_ms),
            restored_at: at(p.restored_at_ms),
        })
        .collect();
    Ok(Some(KeptBook { node: Some(on_disk.node).filter(|n| !n.is_empty()), pods }))
}

/// The bytes `book` is written as.
pub fn encode(book: &KeptBook) -> Vec<u8> {
    let ms = |t: SystemTime| t.duration_since(UNIX_EPOCH).unwrap_or_default().as_millis().max(1) as u64;
    let on_disk = OnDisk {
        format: FORMAT,
        node: book.node.clone().unwrap_or_default(),
        pods: book
            .pods
            .iter()
            .map(|p| PodOnDisk {
                uid: p.uid.clone(),
                identity: Some(p.pod.identity()),
                host_network: p.pod.host_network(),
                gone_at_ms: p.gone_at.map_or(0, ms),
                restored_at_ms: p.restored_at.map_or(0, ms),
            })
            .collect(),
    };
    prost::Message::encode_to_vec(&on_disk)
}

/// Writes `bytes` (from [`encode`]) to `dir`: a temporary file, synced, renamed over the
/// old one.
pub fn store(dir: &Path, bytes: &[u8]) -> Result<(), SavedError> {
    use std::io::Write;
    let path = dir.join(FILE);
    let tmp = dir.join(format!("{FILE}.tmp"));
    let io = |source| SavedError::Io { path: path.clone(), source };
    let mut f = std::fs::File::create(&tmp).map_err(io)?;
    f.write_all(bytes).map_err(io)?;
    f.sync_all().map_err(io)?;
    std::fs::rename(&tmp, &path).map_err(io)?;
    Ok(())
}

/// A write of the book under way, off the async threads: whoever started it goes on
/// while the disk is slow, and looks at it again later.
pub struct Writing {
    task: tokio::task::JoinHandle<Result<(), SavedError>>,
    /// The [`Identities::changes`] it writes.
    changes: u64,
}

/// Starts writing what `identities` holds to `dir` when it changed since `written` (the
/// [`Identities::changes`] last written); `None` when nothing changed. A node's book is
/// a few hundred pods, at most [`MAX_KUBELET_PODS`] gone ones. One write at a time: the
/// caller starts the next only once [`Writing::finish`] gave this one's result.
///
/// [`MAX_KUBELET_PODS`]: crate::model::identity::MAX_KUBELET_PODS
pub fn start(identities: &Identities, dir: &Path, written: u64) -> Option<Writing> {
    let changes = identities.changes();
    if changes == written {
        return None;
    }
    let bytes = encode(&identities.kept());
    let dir = dir.to_owned();
    Some(Writing { task: tokio::task::spawn_blocking(move || store(&dir, &bytes)), changes })
}

impl Writing {
    /// Whether the write has ended (its result is ready).
    pub fn is_finished(&self) -> bool {
        self.task.is_finished()
    }

    /// Waits at most `limit` (zero: only looks) for the write. `Ok`: it ended, with the
    /// changes now on disk (`written` again when it failed, logged); `Err`: still under
    /// way, handed back.
    pub async fn finish(mut self, written: u64, limit: Duration) -> Result<u64, Writing> {
        match tokio::time::timeout(limit, &mut self.task).await {
            Err(_) => Err(self),
            Ok(Ok(Ok(()))) => Ok(self.changes),
            Ok(Ok(Err(e))) => {
                tracing::warn!(error = %e, "what the kubelet said was not kept; a restart infers until the kubelet's watch replays");
                Ok(written)
            }
            Ok(Err(e)) => {
                tracing::warn!(error = %e, "the write of what the kubelet said ended abnormally; written again at the next upkeep");
                Ok(written)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Writes what `identities` holds to `dir` when it changed since `written`, waiting
    /// for the disk; returns the changes now written.
    async fn keep(identities: &Identities, dir: &Path, written: u64) -> u64 {
        match start(identities, dir, written) {
            Some(w) => w.finish(written, Duration::MAX).await.unwrap_or(written),
            None => written,
        }
    }

    fn pod(uid: &str, workload: &str, gone_at: Option<SystemTime>) -> KeptPod {
        let identity = api::PodIdentity {
            node_name: "node-k".into(),
            workload: Some(api::WorkloadRef { kind: "Deployment".into(), name: workload.into(), uid: String::new() }),
            qos_class: "Burstable".into(),
            priority: 1000,
            pod_ips: vec!["10.244.0.9".into(), "fd00::9".into()],
            source: api::IdentitySource::PodsApi as i32,
            ..Default::default()
        };
        KeptPod { uid: uid.into(), pod: Arc::new(KubeletPod::new(identity, false)), gone_at, restored_at: None }
    }

    #[test]
    fn a_kept_book_comes_back_as_it_was_written_to_the_millisecond() {
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(read(dir.path()).unwrap(), None, "no file: nothing kept");
        let gone = UNIX_EPOCH + Duration::from_millis(1_796_000_000_123);
        let book =
            KeptBook { node: Some("node-k".into()), pods: vec![pod("a", "web", None), pod("b", "db", Some(gone))] };
        store(dir.path(), &encode(&book)).unwrap();
        assert_eq!(read(dir.path()).unwrap(), Some(book));
    }

    #[test]
    fn a_broken_or_newer_file_is_not_read_and_says_why() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join(FILE), [0xff, 0xff, 0xff]).unwrap();
        assert!(matches!(read(dir.path()), Err(SavedError::Decode { .. })));
        std::fs::write(dir.path().join(FILE), []).unwrap();
        assert!(matches!(read(dir.path()), Err(SavedError::NoFormat { .. })), "an empty file is no book");
        assert_eq!(load(dir.path()), None);
        let newer = OnDisk { format: FORMAT + 1, node: "n".into(), pods: vec![] };
        std::fs::write(dir.path().join(FILE), prost::Message::encode_to_vec(&newer)).unwrap();
        let err = read(dir.path()).unwrap_err();
        assert!(err.to_string().contains("newer than this plegd's"), "{err}");
        assert_eq!(load(dir.path()), None, "never misread");
    }

    #[test]
    fn a_restored_pod_no_replay_names_again_is_forgotten_as_a_gone_one_is_across_restarts() {
        use crate::model::identity::GONE_SLACK;
        let keep = Duration::from_secs(60);
        let t0 = UNIX_EPOCH + Duration::from_secs(1_796_000_000);
        let ids = Identities::new("n", keep);
        ids.restore(KeptBook { node: None, pods: vec![pod("a", "web", None), pod("b", "db", None)] }, t0);
        assert!(!ids.said("b", (*pod("b", "db", None).pod).clone()), "the same word again: no change");
        // Restarted again before the kubelet came back: the clock is not reset.
        let again = Identities::new("n", keep);
        again.restore(ids.kept(), t0 + Duration::from_secs(30));
        for book in [&ids, &again] {
            book.prune(t0 + keep + GONE_SLACK - Duration::from_secs(1));
            assert!(book.kubelet_pod("a").is_some(), "within the retention: the last heard stands");
            book.prune(t0 + keep + GONE_SLACK + Duration::from_secs(1));
            assert!(book.kubelet_pod("a").is_none(), "never named again: forgotten");
        }
        assert!(ids.kubelet_pod("b").is_some(), "named again: running, kept");
    }

    #[tokio::test]
    async fn the_book_is_written_only_when_it_changed_and_restores_what_was_held() {
        let dir = tempfile::tempdir().unwrap();
        let ids = Identities::new("flag-node", Duration::from_secs(3600));
        let written = keep(&ids, dir.path(), ids.changes()).await;
        assert!(!dir.path().join(FILE).exists(), "nothing changed: nothing written");
        let p = pod("a", "web", None);
        assert!(ids.said("a", (*p.pod).clone()));
        let written = keep(&ids, dir.path(), written).await;
        assert_eq!(written, ids.changes());
        std::fs::remove_file(dir.path().join(FILE)).unwrap();
        assert_eq!(keep(&ids, dir.path(), written).await, written);
        assert!(!dir.path().join(FILE).exists(), "unchanged since written: not written again");
        ids.gone("a", UNIX_EPOCH + Duration::from_secs(1_796_000_000));
        keep(&ids, dir.path(), written).await;

        let restarted = Identities::new("flag-node", Duration::from_secs(3600));
        restarted.restore(load(dir.path()).expect("kept"), SystemTime::now());
        assert_eq!(restarted.kept(), ids.kept());
        assert_eq!(restarted.node(), "node-k", "the kubelet's node name, not the flag's");
        assert!(!restarted.running("a"), "gone as the kubelet said");
        assert!(!restarted.said("a", (*p.pod).clone()), "the replay of the same word is no change");
    }
}

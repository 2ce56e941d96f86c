//! The journal's lineage mark: the epoch of the journal on disk and the newest revision
//! of it this boot has committed (and so may have handed to a watcher), kept outside the
//! state dir, in a per-boot place: the API socket's directory (`/run/plegd` in the
//! DaemonSet, a tmpfs on the host, which a reboot empties — and a reboot already starts
//! a new epoch by the boot id).
//!
//! A state dir put back from a copy taken in the same boot (a backup, a volume snapshot
//! rolled back) holds an older revision than the mark, of the same epoch or of one the
//! mark has since left. Its next revisions would name other events than the ones
//! watchers were handed under those numbers, and a watcher resuming past them would be
//! told `resumed` and miss them. So a journal on disk that is not the one the mark names
//! starts a new epoch ([`super::store::Store::open`]). Without a mark (the first start
//! of this boot, a plegd whose socket's directory is elsewhere) the journal continues.
//!
//! The mark is one fixed-width line written in place after each commit and before any
//! watcher sees the batch; on a tmpfs that is a memory copy, not a disk write.

use std::io;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

/// The mark's file name, in the API socket's directory.
pub const FILE: &str = "plegd-journal.lineage";

/// An epoch and the newest revision of it committed this boot.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Lineage {
    /// The journal's epoch.
    pub epoch: u64,
    /// Its newest committed revision.
    pub revision: u64,
}

impl Lineage {
    fn encode(self) -> [u8; LINE] {
        let text = format!("plegd-journal epoch={:020} revision={:020}\n", self.epoch, self.revision);
        text.as_bytes().try_into().expect("fixed width")
    }

    /// A mark's contents, if they are one.
    pub fn parse(bytes: &[u8]) -> Option<Self> {
        let text = std::str::from_utf8(bytes.get(..LINE)?).ok()?;
        let rest = text.strip_prefix("plegd-journal epoch=")?.strip_suffix('\n')?;
        let (epoch, revision) = rest.split_once(" revision=")?;
        Some(Self { epoch: epoch.parse().ok()?, revision: revision.parse().ok()? })
    }

    /// Why a journal at `epoch` and `revision` starts a new epoch.
    pub fn restored_from_a_copy(&self, epoch: u64, revision: u64) -> String {
        format!(
            "the state dir holds revision {revision} of epoch {epoch}, but this boot last committed revision {} of \
             epoch {}: it was put back from a copy",
            self.revision, self.epoch
        )
    }

    /// Whether a journal on disk at `epoch` and `revision` is not the one this boot last
    /// committed: another epoch (a copy of an earlier journal put back after a new one
    /// began), or the same epoch at an older revision (a copy of this one). Either way
    /// its next revisions may name other events than watchers were handed.
    pub fn disowns(&self, epoch: u64, revision: u64) -> bool {
        self.epoch != epoch || self.revision > revision
    }
}

/// The length of a mark: the prefix, two 20-digit numbers, the separators.
const LINE: usize = "plegd-journal epoch= revision=\n".len() + 40;

/// A store's epoch and its mark, if one is kept.
#[derive(Debug, Default)]
pub struct Marked {
    /// The epoch on disk.
    pub epoch: u64,
    /// The mark.
    pub mark: Option<Mark>,
}

impl Marked {
    /// Records that `revision` of the epoch is committed; a failed write is logged.
    pub fn record(&self, revision: u64) {
        Mark::record(self.mark.as_ref(), Lineage { epoch: self.epoch, revision });
    }
}

/// The open mark file.
#[derive(Debug)]
pub struct Mark {
    file: std::fs::File,
    path: PathBuf,
}

impl Mark {
    /// Opens (creating) the mark at `path` and reads what it holds.
    pub fn open(path: &Path) -> io::Result<(Self, Option<Lineage>)> {
        if let Some(dir) = path.parent() {
            use std::os::unix::fs::DirBuilderExt;
            // As the API socket's directory is made (`uds::bind`).
            std::fs::DirBuilder::new().recursive(true).mode(0o750).create(dir)?;
        }
        let file = std::fs::OpenOptions::new().read(true).write(true).create(true).truncate(false).open(path)?;
        let mut buf = [0u8; LINE];
        let n = file.read_at(&mut buf, 0)?;
        let held = Lineage::parse(&buf[..n]);
        Ok((Self { file, path: path.to_owned() }, held))
    }

    /// The mark at `path`, if one is kept there, and what it holds; one that cannot be
    /// opened is said once and not kept.
    pub fn open_kept(path: Option<&Path>) -> (Option<Self>, Option<Lineage>) {
        let Some(path) = path else { return (None, None) };
        match Self::open(path) {
            Ok((mark, held)) => (Some(mark), held),
            Err(e) => {
                tracing::warn!(path = %path.display(), error = %e, "the journal's lineage mark cannot be kept; a state dir restored from a copy will not be noticed");
                (None, None)
            }
        }
    }

    /// Records `lineage` in `mark`, if one is kept; a failed write is logged.
    pub fn record(mark: Option<&Self>, lineage: Lineage) {
        if let Some(mark) = mark
            && let Err(e) = mark.write(lineage)
        {
            tracing::debug!(path = %mark.path.display(), error = %e, "the lineage mark was not written");
        }
    }

    /// Records that `lineage` is committed.
    pub fn write(&self, lineage: Lineage) -> io::Result<()> {
        self.file.write_all_at(&lineage.encode(), 0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_mark_reads_back_what_was_written_and_rewrites_in_place() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(FILE);
        let (mark, held) = Mark::open(&path).unwrap();
        assert_eq!(held, None, "a new mark holds nothing");
        mark.write(Lineage { epoch: u64::MAX, revision: 439 }).unwrap();
        mark.write(Lineage { epoch: 7, revision: 12 }).unwrap();
        let (_, held) = Mark::open(&path).unwrap();
        assert_eq!(held, Some(Lineage { epoch: 7, revision: 12 }));
        assert_eq!(std::fs::metadata(&path).unwrap().len(), LINE as u64);
    }

    #[test]
    fn anything_but_a_whole_mark_is_no_mark() {
        for bad in [&b""[..], b"plegd-journal epoch=1 revision=2\n", b"garbage", &[0xff; LINE]] {
            assert_eq!(Lineage::parse(bad), None, "{bad:?}");
        }
        let good = Lineage { epoch: 3, revision: 4 }.encode();
        assert_eq!(Lineage::parse(&good[..LINE - 1]), None, "cut short");
    }

    #[test]
    fn a_journal_is_disowned_unless_it_is_the_marks_epoch_at_its_revision_or_further() {
        let mark = Lineage { epoch: 5, revision: 439 };
        assert!(mark.disowns(5, 241), "a copy of this journal");
        assert!(mark.disowns(4, 878), "a copy of an earlier journal, put back after this one began");
        assert!(!mark.disowns(5, 439) && !mark.disowns(5, 500), "the same journal, as far or further on");
    }
}

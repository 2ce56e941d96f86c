//! Where the exporter is: the last revision (of an epoch) the collector accepted, kept
//! in `otlp-cursor.json` in the state dir, written whole and renamed into place, so a
//! crash leaves the old cursor or the new one, never half of either.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

/// File name in the state dir.
pub const FILE: &str = "otlp-cursor.json";

/// The last revision the collector accepted.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Cursor {
    /// The journal's epoch.
    pub epoch: u64,
    /// The revision.
    pub revision: u64,
}

/// Failures of the cursor file.
#[derive(Debug, thiserror::Error)]
pub enum CursorError {
    /// Reading or writing failed.
    #[error("OTLP cursor {path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// What failed.
        source: std::io::Error,
    },
}

/// The cursor in `dir`, if one was written. A file that does not parse is reported
/// and ignored: the exporter starts from what the journal holds (duplicates, never a
/// gap, and the `log.record.uid` of each lets a backend drop them).
pub fn load(dir: &Path) -> Option<Cursor> {
    let path = dir.join(FILE);
    let bytes = std::fs::read(&path).ok()?;
    match parse(&bytes) {
        Ok(c) => Some(c),
        Err(e) => {
            tracing::warn!(path = %path.display(), error = %e, "the OTLP cursor does not parse; exporting what the journal holds");
            None
        }
    }
}

/// A cursor file's contents, parsed.
pub fn parse(bytes: &[u8]) -> Result<Cursor, serde_json::Error> {
    serde_json::from_slice(bytes)
}

/// Writes `cursor` to `dir`: a temporary file, synced, renamed over the old one.
pub fn store(dir: &Path, cursor: Cursor) -> Result<(), CursorError> {
    use std::io::Write;
    let path = dir.join(FILE);
    let tmp = dir.join(format!("{FILE}.tmp"));
    let io = |source| CursorError::Io { path: path.clone(), source };
    let mut f = std::fs::File::create(&tmp).map_err(io)?;
    f.write_all(serde_json::to_string(&cursor).expect("a cursor serializes").as_bytes()).map_err(io)?;
    f.sync_all().map_err(io)?;
    std::fs::rename(&tmp, &path).map_err(io)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stored_cursor_comes_back_and_a_broken_one_is_ignored() {
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(load(dir.path()), None);
        store(dir.path(), Cursor { epoch: 3, revision: 99 }).unwrap();
        assert_eq!(load(dir.path()), Some(Cursor { epoch: 3, revision: 99 }));
        store(dir.path(), Cursor { epoch: 3, revision: 100 }).unwrap();
        assert_eq!(load(dir.path()), Some(Cursor { epoch: 3, revision: 100 }));
        std::fs::write(dir.path().join(FILE), "{\"epoch\": 3, \"rev").unwrap();
        assert_eq!(load(dir.path()), None);
    }
}

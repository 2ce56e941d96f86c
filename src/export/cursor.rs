//! Where the exporter is: the last revision (of an epoch) the collector accepted, kept
//! in `otlp-cursor.json` in the state dir, written whole and renamed into place, so a
//! crash leaves the old cursor or the new one, never half of either.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

/// File name in the state dir.
pub const FILE: &str = "otlp-cursor.json";

/// The file's format (`docs/state-dir.md`): written in every file; a file without it is
/// format 1; a file of a newer format (a downgrade) is not read.
pub const FORMAT: u32 = 1;

/// The file as it is written.
#[derive(Serialize, Deserialize)]
struct OnDisk {
    #[serde(default = "first_format")]
    format: u32,
    epoch: u64,
    revision: u64,
}

fn first_format() -> u32 {
    1
}

/// The last revision the collector accepted.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
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

/// The cursor in `dir`, if one was written. A file that does not parse, or that a
/// newer plegd wrote, is reported and ignored: the exporter starts from what the
/// journal holds (duplicates, never a gap, and the `log.record.uid` of each lets a
/// backend drop them).
pub fn load(dir: &Path) -> Option<Cursor> {
    let path = dir.join(FILE);
    let bytes = std::fs::read(&path).ok()?;
    match parse(&bytes) {
        Ok(Some(c)) => Some(c),
        Ok(None) => {
            tracing::warn!(path = %path.display(), "the OTLP cursor was written by a newer plegd (format above {FORMAT}); exporting what the journal holds");
            None
        }
        Err(e) => {
            tracing::warn!(path = %path.display(), error = %e, "the OTLP cursor does not parse; exporting what the journal holds");
            None
        }
    }
}

/// A cursor file's contents, parsed; `None` for a newer format than this plegd's.
pub fn parse(bytes: &[u8]) -> Result<Option<Cursor>, serde_json::Error> {
    let OnDisk { format, epoch, revision } = serde_json::from_slice(bytes)?;
    Ok((format <= FORMAT).then_some(Cursor { epoch, revision }))
}

/// Writes `cursor` to `dir`: a temporary file, synced, renamed over the old one.
pub fn store(dir: &Path, cursor: Cursor) -> Result<(), CursorError> {
    use std::io::Write;
    let path = dir.join(FILE);
    let tmp = dir.join(format!("{FILE}.tmp"));
    let io = |source| CursorError::Io { path: path.clone(), source };
    let mut f = std::fs::File::create(&tmp).map_err(io)?;
    let on_disk = OnDisk { format: FORMAT, epoch: cursor.epoch, revision: cursor.revision };
    f.write_all(serde_json::to_string(&on_disk).expect("a cursor serializes").as_bytes()).map_err(io)?;
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

    #[test]
    fn a_cursor_without_a_format_is_the_first_and_one_a_newer_plegd_wrote_is_not_read() {
        let written = String::from_utf8(
            std::fs::read({
                let dir = tempfile::tempdir().unwrap();
                store(dir.path(), Cursor { epoch: 1, revision: 2 }).unwrap();
                dir.keep().join(FILE)
            })
            .unwrap(),
        )
        .unwrap();
        assert!(written.contains(&format!("\"format\":{FORMAT}")), "{written}");
        assert_eq!(parse(b"{\"epoch\": 3, \"revision\": 7}").unwrap(), Some(Cursor { epoch: 3, revision: 7 }));
        let newer = format!("{{\"format\": {}, \"epoch\": 3, \"revision\": 7, \"more\": true}}", FORMAT + 1);
        assert_eq!(parse(newer.as_bytes()).unwrap(), None, "never misread");
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join(FILE), newer).unwrap();
        assert_eq!(load(dir.path()), None, "the exporter starts from what the journal holds");
    }
}

//! plegd's own history, apart from the journal: when it started and stopped, and when
//! the runtime's event stream or the runtime itself was out. One JSON line per mark in
//! `runs.log` in the state dir (appended and synced; the oldest half is dropped when
//! it grows past [`KEEP`] lines), and the same marks in memory for the pages. Without
//! a state dir, or when the file cannot be written, the marks live in memory only.

use std::collections::VecDeque;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// The file's name in the state dir.
pub const FILE: &str = "runs.log";
/// Marks kept (in memory; the file is cut back to half this when it passes it).
pub const KEEP: usize = 2000;

/// What a mark says.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum MarkKind {
    /// plegd started.
    Start,
    /// plegd stopped on a signal (a start with no stop before it: the run before ended
    /// otherwise — killed, crashed, or the node went down).
    Stop,
    /// The runtime's event stream changed state (`detail`: `up`, `down`, `not offered
    /// by the runtime`, `disabled`).
    Stream,
    /// A relist failed: the runtime did not answer (`detail`: the error).
    RuntimeDown,
    /// A relist succeeded again after failures.
    RuntimeUp,
}

/// One mark.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Mark {
    /// When, nanoseconds since the Unix epoch.
    pub at_ns: i64,
    /// What.
    pub kind: MarkKind,
    /// Words: plegd's version and pid for a start, the state or error otherwise.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub detail: String,
}

impl Mark {
    /// A mark made now.
    pub fn now(kind: MarkKind, detail: impl Into<String>) -> Self {
        let at_ns = SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_nanos() as i64).unwrap_or(0);
        Self { at_ns, kind, detail: detail.into() }
    }

    /// When, as a time.
    pub fn at(&self) -> SystemTime {
        UNIX_EPOCH + Duration::from_nanos(self.at_ns.max(0) as u64)
    }
}

struct Inner {
    marks: VecDeque<Mark>,
    /// Marks written to the file since it was last cut back, with those it held.
    lines: usize,
    path: Option<PathBuf>,
    /// Why the file is not written, once it failed.
    broken: Option<String>,
    /// Marks recorded by this process.
    recorded: u64,
}

/// The run log. Cheap to clone. Its writes block (a short append and a sync): async
/// callers run them on a blocking thread.
#[derive(Clone)]
pub struct RunLog {
    inner: Arc<Mutex<Inner>>,
}

impl RunLog {
    /// Memory only.
    pub fn memory() -> Self {
        Self {
            inner: Arc::new(Mutex::new(Inner {
                marks: VecDeque::new(),
                lines: 0,
                path: None,
                broken: None,
                recorded: 0,
            })),
        }
    }

    /// Reads `dir/runs.log` (lines that do not parse are skipped); `None`: memory only.
    pub fn open(dir: Option<&Path>) -> Self {
        let log = Self::memory();
        let Some(dir) = dir else { return log };
        let path = dir.join(FILE);
        let mut inner = log.inner.lock().expect("runlog lock");
        match std::fs::read_to_string(&path) {
            Ok(text) => {
                inner.lines = text.lines().count();
                inner.marks = text.lines().filter_map(|l| serde_json::from_str(l).ok()).collect();
                while inner.marks.len() > KEEP {
                    inner.marks.pop_front();
                }
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => {
                tracing::warn!(error = %e, path = %path.display(), "the run log cannot be read; starting it afresh");
            }
        }
        inner.path = Some(path);
        drop(inner);
        log
    }

    /// Records a mark: in memory, and appended to the file.
    pub fn record(&self, mark: Mark) {
        let mut inner = self.inner.lock().expect("runlog lock");
        inner.recorded += 1;
        inner.marks.push_back(mark.clone());
        while inner.marks.len() > KEEP {
            inner.marks.pop_front();
        }
        let Some(path) = inner.path.clone() else { return };
        let res = if inner.lines >= KEEP { rewrite(&path, &inner.marks) } else { append(&path, &mark) };
        match res {
            Ok(()) => {
                inner.lines = if inner.lines >= KEEP { inner.marks.len() } else { inner.lines + 1 };
                inner.broken = None;
            }
            Err(e) => {
                if inner.broken.is_none() {
                    tracing::warn!(error = %e, path = %path.display(), "writing the run log failed; its marks are kept in memory");
                }
                inner.broken = Some(e.to_string());
            }
        }
    }

    /// Every mark kept, oldest first.
    pub fn marks(&self) -> Vec<Mark> {
        self.inner.lock().expect("runlog lock").marks.iter().cloned().collect()
    }

    /// A number that moves with every mark recorded.
    pub fn version(&self) -> u64 {
        self.inner.lock().expect("runlog lock").recorded
    }

    /// How many marks are kept.
    pub fn len(&self) -> usize {
        self.inner.lock().expect("runlog lock").marks.len()
    }

    /// Whether no mark is kept.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The newest mark.
    pub fn last(&self) -> Option<Mark> {
        self.inner.lock().expect("runlog lock").marks.back().cloned()
    }
}

fn line(mark: &Mark) -> String {
    let mut s = serde_json::to_string(mark).unwrap_or_default();
    s.push('\n');
    s
}

fn append(path: &Path, mark: &Mark) -> std::io::Result<()> {
    let mut f = std::fs::OpenOptions::new().create(true).append(true).open(path)?;
    f.write_all(line(mark).as_bytes())?;
    f.sync_data()
}

/// Writes the newest half of the marks afresh (to a temporary file renamed over the log).
fn rewrite(path: &Path, marks: &VecDeque<Mark>) -> std::io::Result<()> {
    let keep = marks.iter().skip(marks.len().saturating_sub(KEEP / 2));
    let tmp = path.with_extension("log.tmp");
    let mut f = std::fs::File::create(&tmp)?;
    for m in keep {
        f.write_all(line(m).as_bytes())?;
    }
    f.sync_data()?;
    std::fs::rename(&tmp, path)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn marks_survive_a_reopen_of_the_same_dir() {
        let dir = tempfile::tempdir().unwrap();
        let log = RunLog::open(Some(dir.path()));
        log.record(Mark::now(MarkKind::Start, "plegd 1 pid 7"));
        log.record(Mark::now(MarkKind::Stream, "down"));
        let again = RunLog::open(Some(dir.path()));
        let kinds: Vec<_> = again.marks().into_iter().map(|m| m.kind).collect();
        assert_eq!(kinds, [MarkKind::Start, MarkKind::Stream]);
        assert_eq!(again.last().unwrap().detail, "down");
    }

    #[test]
    fn a_line_that_does_not_parse_is_skipped() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join(FILE), "garbage\n{\"at_ns\":5,\"kind\":\"stop\"}\n{\"at_ns\":6,").unwrap();
        let log = RunLog::open(Some(dir.path()));
        assert_eq!(log.marks(), [Mark { at_ns: 5, kind: MarkKind::Stop, detail: String::new() }]);
    }

    #[test]
    fn the_file_is_cut_back_to_the_newest_half_once_it_is_full() {
        let dir = tempfile::tempdir().unwrap();
        let log = RunLog::open(Some(dir.path()));
        for i in 0..KEEP + 10 {
            log.record(Mark { at_ns: i as i64, kind: MarkKind::Stream, detail: String::new() });
        }
        let lines = std::fs::read_to_string(dir.path().join(FILE)).unwrap().lines().count();
        assert!(lines <= KEEP / 2 + 10, "{lines} lines");
        let again = RunLog::open(Some(dir.path()));
        assert_eq!(again.last().unwrap().at_ns, (KEEP + 9) as i64, "the newest mark is kept");
    }

    #[test]
    fn without_a_dir_marks_live_in_memory() {
        let log = RunLog::open(None);
        log.record(Mark::now(MarkKind::Start, ""));
        assert_eq!(log.len(), 1);
    }
}

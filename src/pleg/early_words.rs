//! What the runtime said through NRI ahead of its own status, until a read shows it.
//! NRI tells a plugin of a change from inside the runtime's call, and the runtime's CRI
//! status can lag that word:
//! - containerd tells a container's stop (`STOP_CONTAINER`) as it deletes the dead task,
//!   before its status says `EXITED` (the notification is one of the task's delete
//!   options; the status is written after the delete returns);
//! - containerd 1.7 tells a sandbox's start (`RUN_POD_SANDBOX`) before it adds the
//!   sandbox to the store its CRI listing reads;
//! - containerd tells a container's removal (`REMOVE_CONTAINER`) before it drops the
//!   container from its store, a sandbox's stop while another task writes its status,
//!   and a sandbox's removal before it is gone;
//! - CRI-O tells a container's start (`POST_START_CONTAINER`) before its status leaves
//!   `CREATED` (it writes the state when `StartContainer` returns, after the call).
//!
//! So the read a call prompts can still find the container running, or no sandbox, and
//! no further word comes while the event stream is off or split. Unless a read of its
//! pod shows the word first, the relister reads the object's status again 0.05, 0.15,
//! 0.35 … s after the call (eight reads over about 13 s; a start's eleven from 0.01 s,
//! over about 20 s; a read that fails is retried and not counted), and reads its pod in
//! full once the status agrees. Owned by the relister; bounded by count
//! ([`super::followed`]).

use std::collections::HashMap;
use std::time::Duration;

use futures_util::future::BoxFuture;
use tokio::time::Instant;

use super::followed::Followed;
use super::schedule::{Book, Pace, Reason, Reread};
use crate::cri::{CriError, RuntimeService};
use crate::proto::runtime as cri;

/// The first re-read comes this long after the word; each next one twice as long after
/// the one before.
const FIRST: Duration = Duration::from_millis(50);
/// Re-reads per object.
const READS: u32 = 8;
/// A word not shown this long after it was said is let go (full relists cover it).
const RECENT: Duration = Duration::from_secs(120);

const PACE: Pace = Pace { first: FIRST, reads: READS, max_doubling: 8, recent: RECENT };

/// A start's word is read again sooner: CRI-O's status leaves `CREATED` the moment its
/// `StartContainer` returns, a few milliseconds after the call (10, 30, 70 … ms; eleven
/// reads over about 20 s, as CRI-O first calls every plugin's post-start).
const START_PACE: Pace = Pace { first: Duration::from_millis(10), reads: 11, max_doubling: 10, recent: RECENT };

/// What the runtime said of a container or a sandbox, and so what its status is read
/// for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Word {
    /// A container started (`POST_START_CONTAINER`, told by CRI-O before its status
    /// leaves `CREATED`): read until it has begun (running, or already exited) or is
    /// gone.
    ContainerStarted,
    /// A container stopped (`STOP_CONTAINER`): read until not running.
    ContainerStopped,
    /// A container was removed (`REMOVE_CONTAINER`, told before containerd drops it from
    /// its store): read until not found.
    ContainerRemoved,
    /// A sandbox started (`RUN_POD_SANDBOX`, told by 1.7 before its listing has it):
    /// read until found.
    SandboxStarted,
    /// A sandbox stopped (`STOP_POD_SANDBOX`, told while its status is still being
    /// written): read until not ready.
    SandboxStopped,
    /// A sandbox was removed (`REMOVE_POD_SANDBOX`): read until not found.
    SandboxRemoved,
}

impl Word {
    const ALL: [Word; 6] = [
        Self::ContainerStarted,
        Self::ContainerStopped,
        Self::ContainerRemoved,
        Self::SandboxStarted,
        Self::SandboxStopped,
        Self::SandboxRemoved,
    ];

    fn index(self) -> usize {
        Self::ALL.iter().position(|w| *w == self).expect("every word is in ALL")
    }

    /// Where the word stands in its object's life: a word of an earlier step never
    /// replaces one of a later step (a start told after the stop of the same container,
    /// as containerd may when the container ended at once, is not followed).
    fn step(self) -> u8 {
        match self {
            Self::ContainerStarted | Self::SandboxStarted => 0,
            Self::ContainerStopped | Self::SandboxStopped => 1,
            Self::ContainerRemoved | Self::SandboxRemoved => 2,
        }
    }

    fn of_container(self) -> bool {
        matches!(self, Self::ContainerStarted | Self::ContainerStopped | Self::ContainerRemoved)
    }
}

/// What a pod read shows of an object a word was said of.
pub(super) struct Shown {
    /// The read has it (in the listing or the statuses).
    pub found: bool,
    /// A container it has runs; a sandbox it has is ready.
    pub up: bool,
    /// A container it has has left `CREATED` (runs or has exited); a sandbox: true.
    pub begun: bool,
}

impl Word {
    /// Whether `shown` is what the word said.
    pub(super) fn shown_by(self, shown: &Shown) -> bool {
        match self {
            Self::ContainerStopped | Self::SandboxStopped => !shown.found || !shown.up,
            Self::ContainerRemoved | Self::SandboxRemoved => !shown.found,
            Self::SandboxStarted => shown.found,
            Self::ContainerStarted => !shown.found || shown.begun,
        }
    }

    /// What a status read of the object says of the word: not shown yet (the same),
    /// shown (its pod is to be read in full), or a failed read: `answer` is what the
    /// status said, or NotFound.
    fn reread(self, answer: Result<Shown, CriError>) -> Reread {
        match answer {
            Ok(shown) => {
                if self.shown_by(&shown) {
                    Reread::Changed
                } else {
                    Reread::Same
                }
            }
            Err(e) if e.is_not_found() => {
                if self.shown_by(&Shown { found: false, up: false, begun: false }) {
                    Reread::Changed
                } else {
                    Reread::Same
                }
            }
            Err(_) => Reread::Failed,
        }
    }
}

/// The words said and not yet shown, each followed on its own.
pub(super) struct EarlyWords {
    by_word: [Followed; 6],
    word_of: HashMap<String, Word>,
}

impl Default for EarlyWords {
    fn default() -> Self {
        let pace = |i| if Word::ALL[i] == Word::ContainerStarted { &START_PACE } else { &PACE };
        Self { by_word: std::array::from_fn(|i| Followed::new(pace(i))), word_of: HashMap::new() }
    }
}

impl EarlyWords {
    /// The runtime said `word` of object `id` of pod `uid`: read again [`FIRST`] from now
    /// (the time returned, for an object not followed yet) unless a read of the pod shows
    /// it before. A word of a later step of the same object replaces one of an earlier
    /// step (a container said removed is no longer read for its stop); one of an earlier
    /// step is not taken (a start told after the stop).
    pub fn said(&mut self, word: Word, uid: &str, id: &str) -> Option<Instant> {
        if self.word_of.get(id).is_some_and(|held| held.step() > word.step()) {
            return None;
        }
        match self.word_of.insert(id.to_owned(), word) {
            Some(older) if older != word => self.by_word[older.index()].forget(id),
            _ => {}
        }
        let first = self.by_word[word.index()].said(uid, id);
        let by_word = &self.by_word;
        self.word_of.retain(|id, w| by_word[w.index()].pod_of(id).is_some());
        first
    }

    /// Takes in a read of pod `uid`: what it shows of each object (`shown`, for a
    /// container or a sandbox) lets go each word it shows.
    pub fn note(&mut self, uid: &str, shown: impl Fn(&str, bool) -> Shown) {
        if self.word_of.is_empty() {
            return;
        }
        for word in Word::ALL {
            self.by_word[word.index()].note(uid, |id| !word.shown_by(&shown(id, word.of_container())));
        }
        let by_word = &self.by_word;
        self.word_of.retain(|id, w| by_word[w.index()].pod_of(id).is_some());
    }
}

impl Book for EarlyWords {
    fn reason(&self) -> Reason {
        Reason::EarlyWord
    }

    fn pod_of(&self, id: &str) -> Option<&str> {
        self.word_of.get(id).and_then(|w| self.by_word[w.index()].pod_of(id))
    }

    /// One `ContainerStatus` for a container's word, one `PodSandboxStatus` for a
    /// sandbox's.
    fn reread<R: RuntimeService>(&self, id: &str, runtime: R, timeout: Duration) -> Option<BoxFuture<'static, Reread>> {
        let word = *self.word_of.get(id)?;
        self.pod_of(id)?;
        let id = id.to_owned();
        Some(Box::pin(async move {
            let answer = if word.of_container() {
                let read = tokio::time::timeout(timeout, runtime.container_status(&id)).await;
                read.map(|a| {
                    a.map(|s| Shown {
                        found: true,
                        up: s.state == cri::ContainerState::ContainerRunning as i32,
                        begun: s.state != cri::ContainerState::ContainerCreated as i32,
                    })
                })
            } else {
                let read = tokio::time::timeout(timeout, runtime.pod_sandbox_status(&id)).await;
                read.map(|a| {
                    a.map(|s| Shown {
                        found: true,
                        up: s.state == cri::PodSandboxState::SandboxReady as i32,
                        begun: true,
                    })
                })
            };
            answer.map_or(Reread::Failed, |a| word.reread(a))
        }))
    }

    fn read(&mut self, id: &str, found: Reread) -> Option<Instant> {
        let word = *self.word_of.get(id)?;
        tracing::debug!(id, ?word, ?found, "the runtime's early word, read again");
        let next = self.by_word[word.index()].read(id, found);
        if next.is_none() {
            self.word_of.remove(id);
        }
        next
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pleg::schedule::Scheduler;

    fn say(d: &mut EarlyWords, s: &mut Scheduler<String, ()>, word: Word, id: &str) {
        if let Some(at) = d.said(word, "p", id) {
            s.schedule(id.to_owned(), (), at);
        }
    }

    async fn times(d: &mut EarlyWords, s: &mut Scheduler<String, ()>, answer: impl FnMut(u32) -> Reread) -> Vec<u64> {
        crate::pleg::amended_exits::reread_times(d, s, Duration::from_millis(1), answer).await
    }

    /// A read of pod p showing every object found and up, or none at all.
    fn all_up(_: &str, _: bool) -> Shown {
        Shown { found: true, up: true, begun: true }
    }

    #[tokio::test(start_paused = true)]
    async fn a_word_the_status_does_not_show_yet_is_read_again_until_it_does_and_a_read_showing_it_lets_it_go() {
        let (mut d, mut s) = (EarlyWords::default(), Scheduler::default());
        say(&mut d, &mut s, Word::ContainerStopped, "c");
        d.note("p", all_up);
        assert_eq!(times(&mut d, &mut s, |_| Reread::Same).await, [50, 150, 350, 750, 1550, 3150, 6350, 12750]);
        assert_eq!(d.pod_of("c"), None, "then let go: full relists cover it");
        assert!(d.word_of.is_empty());
        // Shown at the second re-read.
        say(&mut d, &mut s, Word::SandboxStarted, "s");
        let shown = times(&mut d, &mut s, |n| if n == 1 { Reread::Changed } else { Reread::Same }).await;
        assert_eq!(shown, [50, 150]);
        // A start's word is read again sooner (CRI-O's status follows within milliseconds).
        say(&mut d, &mut s, Word::ContainerStarted, "n");
        let started = times(&mut d, &mut s, |_| Reread::Same).await;
        assert_eq!(started, [10, 30, 70, 150, 310, 630, 1270, 2550, 5110, 10230, 20470]);
        // A read of another pod settles nothing of this one's.
        d.said(Word::ContainerRemoved, "p", "c");
        d.note("q", |_, _| Shown { found: false, up: false, begun: false });
        assert_eq!(d.pod_of("c"), Some("p"));
    }

    #[tokio::test(start_paused = true)]
    async fn each_word_is_let_go_by_the_read_that_shows_it_and_a_newer_word_replaces_an_older() {
        let mut d = EarlyWords::default();
        for (word, shows, does_not) in [
            (
                Word::ContainerStarted,
                Shown { found: true, up: false, begun: true },
                Shown { found: true, up: false, begun: false },
            ),
            (
                Word::ContainerStarted,
                Shown { found: false, up: false, begun: false },
                Shown { found: true, up: false, begun: false },
            ),
            (
                Word::ContainerStopped,
                Shown { found: true, up: false, begun: false },
                Shown { found: true, up: true, begun: true },
            ),
            (
                Word::ContainerRemoved,
                Shown { found: false, up: false, begun: false },
                Shown { found: true, up: false, begun: false },
            ),
            (
                Word::SandboxStarted,
                Shown { found: true, up: true, begun: true },
                Shown { found: false, up: false, begun: false },
            ),
            (
                Word::SandboxStopped,
                Shown { found: true, up: false, begun: false },
                Shown { found: true, up: true, begun: true },
            ),
            (
                Word::SandboxRemoved,
                Shown { found: false, up: false, begun: false },
                Shown { found: true, up: false, begun: false },
            ),
        ] {
            d.said(word, "p", "x");
            d.note("p", |_, _| Shown { ..does_not });
            assert_eq!(d.pod_of("x"), Some("p"), "{word:?}: kept while not shown");
            d.note("p", |_, _| Shown { ..shows });
            assert_eq!(d.pod_of("x"), None, "{word:?}: let go once shown");
        }
        // Stopped, then removed: read for the removal only.
        assert!(d.said(Word::ContainerStopped, "p", "c").is_some());
        d.said(Word::ContainerRemoved, "p", "c");
        d.note("p", |_, _| Shown { found: true, up: false, begun: false });
        assert_eq!(d.pod_of("c"), Some("p"), "stopped is shown, removed is not");
        assert_eq!(d.word_of.get("c"), Some(&Word::ContainerRemoved));
        assert_eq!(d.by_word[Word::ContainerStopped.index()].pod_of("c"), None);
        // A start told after the stop (the container ended at once): the stop is followed.
        assert!(d.said(Word::ContainerStopped, "p", "e").is_some());
        assert_eq!(d.said(Word::ContainerStarted, "p", "e"), None);
        assert_eq!(d.word_of.get("e"), Some(&Word::ContainerStopped));
        assert_eq!(d.by_word[Word::ContainerStarted.index()].pod_of("e"), None);
    }

    #[test]
    fn a_status_answer_shows_the_word_not_yet_or_fails() {
        let not_found = || CriError::Call {
            method: "Status",
            endpoint: std::sync::Arc::from("unix:///x"),
            status: tonic::Status::new(tonic::Code::NotFound, "x"),
        };
        let failed = || CriError::Call {
            method: "Status",
            endpoint: std::sync::Arc::from("unix:///x"),
            status: tonic::Status::new(tonic::Code::Unavailable, "x"),
        };
        use Reread::{Changed, Failed, Same};
        // A container's status: running, exited, created; or NotFound; or a failure.
        let running = || Ok(Shown { found: true, up: true, begun: true });
        let exited = || Ok(Shown { found: true, up: false, begun: true });
        let created = || Ok(Shown { found: true, up: false, begun: false });
        assert_eq!(
            [
                Word::ContainerStarted.reread(running()),
                Word::ContainerStarted.reread(exited()),
                Word::ContainerStarted.reread(created()),
                Word::ContainerStarted.reread(Err(not_found())),
            ],
            [Changed, Changed, Same, Changed],
            "CRI-O's POST_START ahead of its status: read until it has left CREATED"
        );
        for (word, up, down, gone) in [
            (Word::ContainerStopped, Same, Changed, Changed),
            (Word::ContainerRemoved, Same, Same, Changed),
            (Word::SandboxStarted, Changed, Changed, Same),
            (Word::SandboxStopped, Same, Changed, Changed),
            (Word::SandboxRemoved, Same, Same, Changed),
        ] {
            assert_eq!(
                [
                    word.reread(running()),
                    word.reread(exited()),
                    word.reread(Err(not_found())),
                    word.reread(Err(failed()))
                ],
                [up, down, gone, Failed],
                "{word:?}"
            );
        }
    }
}

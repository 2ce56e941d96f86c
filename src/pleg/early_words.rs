//! What the runtime said through NRI ahead of its own status, until a read shows it.
//! NRI tells a plugin of a change from inside the runtime's call, and the runtime's CRI
//! status can lag that word:
//! - containerd tells a container's stop (`STOP_CONTAINER`) as it deletes the dead task,
//!   before its status says `EXITED` (the notification is one of the task's delete
//!   options; the status is written after the delete returns);
//! - containerd 1.7 tells a sandbox's start (`RUN_POD_SANDBOX`) before it adds the
//!   sandbox to the store its CRI listing reads.
//!
//! So the read a call prompts can still find the container running, or no sandbox, and
//! no further word comes while the event stream is off or split. Unless a read of its
//! pod shows the word first, the relister reads the object's status again 0.05, 0.15,
//! 0.35 … s after the call (eight reads over about 13 s; a read that fails is retried
//! and not counted), and reads its pod in full once the status agrees. Owned by the
//! relister; bounded by count ([`super::followed`]).

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

/// What a `ContainerStatus` answer says of a container said stopped: still running (the
/// same), stopped or gone (its pod is to be read in full), or a failed read.
pub(super) fn stopped_reread(answer: Result<cri::ContainerStatus, CriError>) -> Reread {
    match answer {
        Ok(s) if s.state == cri::ContainerState::ContainerRunning as i32 => Reread::Same,
        Ok(_) => Reread::Changed,
        Err(e) if e.is_not_found() => Reread::Changed,
        Err(_) => Reread::Failed,
    }
}

/// What a `PodSandboxStatus` answer says of a sandbox said started: not there yet (the
/// same), there (its pod is to be read in full), or a failed read.
pub(super) fn started_reread(answer: Result<cri::PodSandboxStatus, CriError>) -> Reread {
    match answer {
        Ok(_) => Reread::Changed,
        Err(e) if e.is_not_found() => Reread::Same,
        Err(_) => Reread::Failed,
    }
}

/// The containers said stopped and the sandboxes said started, until a read shows it.
pub(super) struct EarlyWords {
    stopped: Followed,
    started: Followed,
}

impl Default for EarlyWords {
    fn default() -> Self {
        Self { stopped: Followed::new(&PACE), started: Followed::new(&PACE) }
    }
}

impl EarlyWords {
    /// The runtime said container `id` of pod `uid` stopped: read again [`FIRST`] from
    /// now (the time returned, for a container not followed yet) unless a read of the
    /// pod finds it not running before.
    pub fn stopped(&mut self, uid: &str, id: &str) -> Option<Instant> {
        self.stopped.said(uid, id)
    }

    /// The runtime said sandbox `id` of pod `uid` started: read again [`FIRST`] from
    /// now unless a read of the pod finds it before.
    pub fn started(&mut self, uid: &str, id: &str) -> Option<Instant> {
        self.started.said(uid, id)
    }

    /// Takes in a read of pod `uid`: a container it finds not running (`running` says
    /// which run) and a sandbox it finds (`found`) are let go.
    pub fn note(&mut self, uid: &str, running: impl Fn(&str) -> bool, found: impl Fn(&str) -> bool) {
        self.stopped.note(uid, running);
        self.started.note(uid, |id| !found(id));
    }
}

impl Book for EarlyWords {
    fn reason(&self) -> Reason {
        Reason::EarlyWord
    }

    fn pod_of(&self, id: &str) -> Option<&str> {
        self.stopped.pod_of(id).or_else(|| self.started.pod_of(id))
    }

    /// One `ContainerStatus` for a container said stopped, one `PodSandboxStatus` for a
    /// sandbox said started.
    fn reread<R: RuntimeService>(&self, id: &str, runtime: R, timeout: Duration) -> Option<BoxFuture<'static, Reread>> {
        let stopped = self.stopped.pod_of(id).is_some();
        let id = self.pod_of(id).map(|_| id.to_owned())?;
        Some(Box::pin(async move {
            let found = if stopped {
                tokio::time::timeout(timeout, runtime.container_status(&id)).await.map(stopped_reread)
            } else {
                tokio::time::timeout(timeout, runtime.pod_sandbox_status(&id)).await.map(started_reread)
            };
            found.unwrap_or(Reread::Failed)
        }))
    }

    fn read(&mut self, id: &str, found: Reread) -> Option<Instant> {
        tracing::debug!(id, ?found, "the runtime's early word, read again");
        if self.stopped.pod_of(id).is_some() { self.stopped.read(id, found) } else { self.started.read(id, found) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pleg::schedule::Scheduler;

    fn say(at: Option<Instant>, s: &mut Scheduler<String, ()>, id: &str) {
        if let Some(at) = at {
            s.schedule(id.to_owned(), (), at);
        }
    }

    async fn times(d: &mut EarlyWords, s: &mut Scheduler<String, ()>, answer: impl FnMut(u32) -> Reread) -> Vec<u64> {
        crate::pleg::amended_exits::reread_times(d, s, Duration::from_millis(1), answer).await
    }

    #[tokio::test(start_paused = true)]
    async fn a_word_the_status_does_not_show_yet_is_read_again_until_it_does_and_a_read_showing_it_lets_it_go() {
        let (mut d, mut s) = (EarlyWords::default(), Scheduler::default());
        let at = d.stopped("p", "c");
        say(at, &mut s, "c");
        d.note("p", |_| true, |_| false);
        assert_eq!(times(&mut d, &mut s, |_| Reread::Same).await, [50, 150, 350, 750, 1550, 3150, 6350, 12750]);
        assert_eq!(d.pod_of("c"), None, "then let go: full relists cover it");
        // Shown at the second re-read.
        let at = d.started("p", "s");
        say(at, &mut s, "s");
        let shown = times(&mut d, &mut s, |n| if n == 1 { Reread::Changed } else { Reread::Same }).await;
        assert_eq!(shown, [50, 150]);
        // The prompted read already shows each: no re-read.
        d.stopped("p", "c");
        d.started("p", "s");
        d.note("p", |_| false, |id| id == "s");
        assert_eq!((d.pod_of("c"), d.pod_of("s")), (None, None));
        // A read of another pod settles nothing of this one's.
        d.stopped("p", "c");
        d.note("q", |_| false, |_| true);
        assert_eq!(d.pod_of("c"), Some("p"));
    }

    #[test]
    fn a_status_answer_shows_the_word_not_yet_or_fails() {
        let state = |s: cri::ContainerState| Ok(cri::ContainerStatus { state: s as i32, ..Default::default() });
        assert_eq!(stopped_reread(state(cri::ContainerState::ContainerRunning)), Reread::Same);
        assert_eq!(stopped_reread(state(cri::ContainerState::ContainerExited)), Reread::Changed);
        let err = |code| CriError::Call {
            method: "Status",
            endpoint: std::sync::Arc::from("unix:///x"),
            status: tonic::Status::new(code, "x"),
        };
        assert_eq!(stopped_reread(Err(err(tonic::Code::NotFound))), Reread::Changed);
        assert_eq!(stopped_reread(Err(err(tonic::Code::Unavailable))), Reread::Failed);
        assert_eq!(started_reread(Ok(cri::PodSandboxStatus::default())), Reread::Changed);
        assert_eq!(started_reread(Err(err(tonic::Code::NotFound))), Reread::Same);
        assert_eq!(started_reread(Err(err(tonic::Code::Unavailable))), Reread::Failed);
    }
}

//! The Watch invariant checker: what a client of `plegd.v1.PodLifecycle/Watch` may rely
//! on, checked message by message. Tests, benches and `plegd watch --verify` use it; it
//! also keeps the client's copy of the pods and the point a client may safely resume
//! from.
//!
//! The invariants:
//! 1. every stream opens with `start` (the journal's epoch) before anything else;
//! 2. a stream that did not resume sends snapshots, then `synced`, before any event;
//!    a `reset` drops the client's copy and is followed by snapshots and `synced`;
//! 3. event revisions strictly increase, and on an unfiltered stream follow each other
//!    with no gap (after `synced` at R the next event is R+1; after a resume from R,
//!    R+1) except across a `reset`;
//! 4. nothing at or below a bookmark's revision arrives after it (on an unfiltered
//!    stream a bookmark names exactly the last revision sent);
//! 5. the epoch changes only with a reset (the `synced` after it names the new one): a
//!    stream never resumes into another journal.

use std::collections::BTreeMap;

use crate::proto::plegd as api;

/// One broken invariant, with the evidence.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("watch invariant broken at message {message}: {what}")]
pub struct Violation {
    /// The message's position in the checked sequence (0-based, across streams).
    pub message: u64,
    /// What was wrong.
    pub what: String,
}

/// Where the client is within a stream.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Phase {
    /// A new stream: `start` comes next.
    Opening,
    /// Snapshots until `synced`.
    Snapshot,
    /// Events and bookmarks.
    Live,
}

/// Checks one client's sequence of Watch messages, across its reconnects.
#[derive(Debug)]
pub struct WatchChecker {
    filtered: bool,
    phase: Phase,
    epoch: Option<u64>,
    /// The next event revision an unfiltered stream must send.
    next: Option<u64>,
    /// The client asked to resume and was answered with a snapshot: a reset must say so.
    expect_reset: bool,
    /// Nothing at or below this may arrive any more.
    floor: u64,
    /// The revision a client may resume after (moves on `synced`, events after it, and
    /// bookmarks); `None` while its copy is incomplete (during a snapshot).
    resume: Option<u64>,
    view: BTreeMap<String, api::PodStatus>,
    building: BTreeMap<String, api::PodStatus>,
    /// The revision ranges the client followed without a break: `(epoch, after, to)`,
    /// one per unbroken run of streams (a resume continues the run it resumes).
    runs: Vec<(u64, u64, u64)>,
    seen: u64,
    /// Events checked.
    pub events: u64,
    /// Resets seen.
    pub resets: u64,
    /// Bookmarks seen.
    pub bookmarks: u64,
}

impl WatchChecker {
    /// A checker for a stream with a filter (`filtered`: gaps between revisions are
    /// expected) or without.
    pub fn new(filtered: bool) -> Self {
        Self {
            filtered,
            phase: Phase::Opening,
            epoch: None,
            next: None,
            expect_reset: false,
            floor: 0,
            resume: None,
            view: BTreeMap::new(),
            building: BTreeMap::new(),
            runs: Vec::new(),
            seen: 0,
            events: 0,
            resets: 0,
            bookmarks: 0,
        }
    }

    /// The client starts by resuming after `revision` of `epoch` (0: unknown).
    pub fn resuming_from(mut self, revision: u64, epoch: u64) -> Self {
        if revision > 0 {
            self.resume = Some(revision);
            self.epoch = (epoch != 0).then_some(epoch);
        }
        self
    }

    /// The client replaced its copy with a `ListPods` answer: `pods` at `revision` of
    /// `epoch`, from which it will watch.
    pub fn listed(&mut self, pods: &[api::PodStatus], revision: u64, epoch: u64) {
        self.drop_copy(Phase::Opening);
        self.view = pods.iter().map(|p| (p.uid.clone(), p.clone())).collect();
        self.resume = Some(revision);
        self.epoch = Some(epoch);
    }

    /// Whether `start` opens a stream that resumed into another journal than the one
    /// the client knows (it resumed without naming its epoch, and plegd lost its
    /// journal): the client must drop its copy and start over with a snapshot.
    pub fn is_foreign(&self, start: &api::StreamStart) -> bool {
        start.resumed && self.epoch.is_some_and(|e| e != start.epoch)
    }

    /// The client drops its copy and will open a stream with a snapshot.
    pub fn start_over(&mut self) {
        self.drop_copy(Phase::Opening);
    }

    /// Drops the client's copy and everything it could resume from.
    fn drop_copy(&mut self, phase: Phase) {
        self.phase = phase;
        self.expect_reset = false;
        self.view.clear();
        self.building.clear();
        self.resume = None;
        self.next = None;
        self.floor = 0;
    }

    /// The client opens a new stream (a reconnect): `start` must come first again.
    pub fn reconnect(&mut self) {
        self.phase = Phase::Opening;
        // What the last stream still owed (a reset after a refused resume) is gone
        // with it: the new stream answers the new request.
        self.expect_reset = false;
    }

    /// Where the client may resume: `(revision, epoch)`; `None` means "take a snapshot"
    /// (its copy is incomplete, or no stream got that far).
    pub fn resume_point(&self) -> Option<(u64, u64)> {
        Some((self.resume?, self.epoch?))
    }

    /// The client's copy of the pods, by UID, as the stream built it.
    pub fn view(&self) -> &BTreeMap<String, api::PodStatus> {
        &self.view
    }

    /// Whether the client followed `revision` of `epoch` as an event stream — the
    /// revision lies after the point one of its unbroken runs of streams began (a
    /// snapshot's `synced`, or a resume) and at or before the last revision that run
    /// received. Every event there that its filter admits must have reached it; a
    /// revision it did not follow reached it, if at all, as snapshot state.
    pub fn followed(&self, epoch: u64, revision: u64) -> bool {
        self.runs.iter().any(|&(e, after, to)| e == epoch && after < revision && revision <= to)
    }

    /// The unbroken runs of revisions the client followed: `(epoch, after, to)`.
    pub fn runs(&self) -> &[(u64, u64, u64)] {
        &self.runs
    }

    /// The journal's epoch as the client's last stream named it.
    pub fn epoch(&self) -> Option<u64> {
        self.epoch
    }

    /// Extends the current run of streams to `revision`.
    fn reach(&mut self, revision: u64) {
        if let Some(run) = self.runs.last_mut() {
            run.2 = run.2.max(revision);
        }
    }

    /// Whether the client's copy is complete (after `synced`).
    pub fn is_synced(&self) -> bool {
        self.phase == Phase::Live
    }

    fn fail(&self, what: String) -> Result<(), Violation> {
        Err(Violation { message: self.seen, what })
    }

    /// Checks the next message; the state moves on even when it breaks an invariant.
    pub fn observe(&mut self, m: &api::WatchEvent) -> Result<(), Violation> {
        use api::watch_event::Kind;
        let res = self.check(m);
        self.seen += 1;
        if let Some(Kind::Event(e)) = &m.kind {
            self.events += 1;
            if self.phase == Phase::Live {
                match &e.pod {
                    Some(p) => {
                        self.view.insert(e.pod_uid.clone(), p.clone());
                    }
                    None => {
                        self.view.remove(&e.pod_uid);
                    }
                }
            }
        }
        res
    }

    fn check(&mut self, m: &api::WatchEvent) -> Result<(), Violation> {
        use api::watch_event::Kind;
        let Some(kind) = &m.kind else { return self.fail("a message with no kind".into()) };
        let r = m.revision;
        if self.phase == Phase::Opening {
            let Kind::Start(s) = kind else {
                return self.fail(format!("the stream did not open with its epoch but with {}", name(kind)));
            };
            return self.opening(s, r);
        }
        if std::mem::take(&mut self.expect_reset) && !matches!(kind, Kind::Reset(_)) {
            return self.fail(format!("a refused resume went on with {} instead of a reset", name(kind)));
        }
        match kind {
            Kind::Start(_) => self.fail("a second start on one stream".into()),
            Kind::Reset(_) => {
                self.resets += 1;
                self.drop_copy(Phase::Snapshot);
                // A reset may start another journal (plegd's disk failed and it went on
                // in memory): the snapshot's `synced` names its epoch.
                self.epoch = None;
                Ok(())
            }
            Kind::Snapshot(p) => {
                if self.phase != Phase::Snapshot {
                    return self.fail(format!("a snapshot of {} outside a snapshot", p.uid));
                }
                self.building.insert(p.uid.clone(), p.clone());
                Ok(())
            }
            Kind::Synced(s) => {
                if self.phase != Phase::Snapshot {
                    return self.fail("synced outside a snapshot".into());
                }
                self.synced(s, r)
            }
            Kind::Event(e) => {
                if self.phase != Phase::Live {
                    return self.fail(format!("event {r} before synced"));
                }
                self.event(e, r)
            }
            Kind::Bookmark(_) => {
                self.bookmarks += 1;
                if self.phase != Phase::Live {
                    return self.fail(format!("bookmark {r} before synced"));
                }
                self.bookmark(r)
            }
        }
    }

    /// The stream's start: a resume goes live at once, where the client asked; a
    /// refused one, or a snapshot, waits for the snapshot's `synced`.
    fn opening(&mut self, s: &api::StreamStart, r: u64) -> Result<(), Violation> {
        let other_journal = self.epoch.is_some_and(|e| e != s.epoch);
        self.epoch = Some(s.epoch);
        if s.resumed {
            self.phase = Phase::Live;
            let asked = self.resume;
            self.next = Some(r + 1);
            self.floor = r;
            if other_journal {
                return self.fail(format!("resumed into another journal (epoch {})", s.epoch));
            }
            if self.runs.last().is_none_or(|&(e, _, to)| (e, to) != (s.epoch, r)) {
                self.runs.push((s.epoch, r, r));
            }
            match asked {
                None => return self.fail(format!("resumed after {r} though the client asked for a snapshot")),
                Some(p) if p != r => {
                    return self.fail(format!("resumed after {r}, not after the client's point {p}"));
                }
                _ => {}
            }
        } else {
            // A resume the client asked for, refused: a reset must come first.
            // (Revision 0 asks for a snapshot.)
            self.expect_reset = self.resume.is_some_and(|p| p > 0);
            // A snapshot follows: until its `synced`, the client has no point to
            // resume from (a break now must not resume the old copy into this
            // journal).
            self.phase = Phase::Snapshot;
            self.building.clear();
            self.resume = None;
            self.next = None;
            self.floor = 0;
        }
        Ok(())
    }

    /// A snapshot's end: the copy built from it becomes the view, and the stream is live.
    fn synced(&mut self, s: &api::Synced, r: u64) -> Result<(), Violation> {
        self.phase = Phase::Live;
        self.view = std::mem::take(&mut self.building);
        let wrong_count = s.pods as usize != self.view.len();
        let wrong_epoch = self.epoch.is_some_and(|e| e != s.epoch);
        self.epoch = Some(s.epoch);
        self.floor = r;
        self.resume = Some(r);
        self.next = Some(r + 1);
        self.runs.push((s.epoch, r, r));
        if wrong_count {
            return self.fail(format!("synced says {} pods after {} snapshots", s.pods, self.view.len()));
        }
        if wrong_epoch {
            return self.fail(format!("synced's epoch {} is not the stream's", s.epoch));
        }
        Ok(())
    }

    /// An event: above every revision passed, and on an unfiltered stream the very next.
    fn event(&mut self, e: &api::LifecycleEvent, r: u64) -> Result<(), Violation> {
        let expected = self.next;
        let floor = self.floor;
        self.floor = r;
        self.resume = Some(r);
        self.next = Some(r + 1);
        self.reach(r);
        if r <= floor {
            return self.fail(format!(
                "event {r} ({} of {}) at or below revision {floor}, already passed",
                e.r#type, e.pod_uid
            ));
        }
        if !self.filtered && expected.is_some_and(|n| n != r) {
            return self.fail(format!("event {r} where {} was due: a gap with no reset", expected.unwrap_or(0)));
        }
        Ok(())
    }

    /// A bookmark: never below a revision passed, and on an unfiltered stream never
    /// ahead of an event still due.
    fn bookmark(&mut self, r: u64) -> Result<(), Violation> {
        let floor = self.floor;
        let expected = self.next;
        self.floor = self.floor.max(r);
        self.resume = Some(self.floor);
        self.reach(r);
        if r < floor {
            return self.fail(format!("bookmark {r} below revision {floor}, already passed"));
        }
        if !self.filtered && expected.is_some_and(|n| r >= n) {
            return self.fail(format!(
                "bookmark {r} on an unfiltered stream whose next event is {}: it overtakes events",
                expected.unwrap_or(0)
            ));
        }
        if r >= floor {
            self.next = Some(r + 1);
        }
        Ok(())
    }
}

fn name(k: &api::watch_event::Kind) -> &'static str {
    use api::watch_event::Kind;
    match k {
        Kind::Snapshot(_) => "a snapshot",
        Kind::Synced(_) => "synced",
        Kind::Event(_) => "an event",
        Kind::Reset(_) => "a reset",
        Kind::Bookmark(_) => "a bookmark",
        Kind::Start(_) => "start",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use api::watch_event::Kind;

    fn msg(revision: u64, kind: Kind) -> api::WatchEvent {
        api::WatchEvent { revision, kind: Some(kind) }
    }
    fn start(epoch: u64, resumed: bool, after: u64) -> api::WatchEvent {
        msg(after, Kind::Start(api::StreamStart { epoch, resumed }))
    }
    fn synced(r: u64, epoch: u64, pods: u32) -> api::WatchEvent {
        msg(r, Kind::Synced(api::Synced { epoch, pods, ..Default::default() }))
    }
    fn event(r: u64, uid: &str) -> api::WatchEvent {
        let pod = api::PodStatus { uid: uid.into(), ..Default::default() };
        msg(r, Kind::Event(api::LifecycleEvent { pod_uid: uid.into(), pod: Some(pod), ..Default::default() }))
    }
    fn bookmark(r: u64) -> api::WatchEvent {
        msg(r, Kind::Bookmark(api::Bookmark {}))
    }

    #[test]
    fn a_well_formed_stream_passes_and_builds_the_view() {
        let mut c = WatchChecker::new(false);
        for m in [start(7, false, 0), synced(4, 7, 0), event(5, "a"), event(6, "b"), bookmark(6), event(7, "a")] {
            c.observe(&m).unwrap();
        }
        assert_eq!(c.view().len(), 2);
        assert_eq!(c.resume_point(), Some((7, 7)));
    }

    #[test]
    fn a_bookmark_that_overtakes_queued_events_is_caught() {
        let mut c = WatchChecker::new(false);
        for m in [start(7, false, 0), synced(4, 7, 0), event(5, "a")] {
            c.observe(&m).unwrap();
        }
        assert!(c.observe(&bookmark(9)).is_err(), "events 6..9 were still to come");
        assert!(c.observe(&event(6, "a")).is_err(), "an event below the bookmark");
    }

    #[test]
    fn a_resume_into_another_journal_and_a_missing_epoch_are_caught() {
        let mut c = WatchChecker::new(false);
        for m in [start(7, false, 0), synced(4, 7, 0), event(5, "a")] {
            c.observe(&m).unwrap();
        }
        c.reconnect();
        assert!(c.observe(&start(8, true, 5)).is_err(), "epoch 8 is another journal");
        let mut c = WatchChecker::new(false);
        assert!(c.observe(&synced(4, 7, 0)).is_err(), "no start first");
    }

    #[test]
    fn the_resume_point_moves_only_where_the_copy_is_complete() {
        let mut c = WatchChecker::new(false);
        c.observe(&start(7, false, 0)).unwrap();
        c.observe(&msg(4, Kind::Snapshot(api::PodStatus { uid: "a".into(), ..Default::default() }))).unwrap();
        assert_eq!(c.resume_point(), None, "mid-snapshot: a break takes a fresh snapshot");
        for m in [synced(4, 7, 1), event(5, "a")] {
            c.observe(&m).unwrap();
        }
        assert_eq!(c.resume_point(), Some((5, 7)));
        c.observe(&msg(9, Kind::Reset(api::Reset::default()))).unwrap();
        assert_eq!(c.resume_point(), None, "after a reset the copy is gone");
        assert!(c.view().is_empty());
    }

    #[test]
    fn a_stream_that_breaks_between_its_start_and_synced_resumes_with_a_snapshot() {
        // A client asks to resume after 3 of a journal that plegd lost; the new plegd
        // opens with a snapshot (resumed false) and the stream breaks before `synced`.
        // Resuming after 3 of the new epoch would be a silent gap.
        let mut c = WatchChecker::new(false);
        for m in [start(7, false, 0), synced(3, 7, 0)] {
            c.observe(&m).unwrap();
        }
        c.reconnect();
        c.observe(&start(8, false, 0)).unwrap();
        assert_eq!(c.resume_point(), None);
    }

    #[test]
    fn a_resume_nobody_asked_for_old_events_after_a_resume_and_a_silent_refusal_are_caught() {
        let mut c = WatchChecker::new(true);
        assert!(c.observe(&start(7, true, 5)).is_err(), "resumed though the client asked for a snapshot");
        let mut c = WatchChecker::new(true).resuming_from(5, 7);
        c.observe(&start(7, true, 5)).unwrap();
        assert!(c.observe(&event(4, "a")).is_err(), "an event at or below the resume point");
        let mut c = WatchChecker::new(false).resuming_from(5, 7);
        c.observe(&start(7, false, 0)).unwrap();
        assert!(c.observe(&synced(9, 7, 0)).is_err(), "a refused resume must say so with a reset");
    }

    #[test]
    fn gaps_need_a_reset_on_unfiltered_streams_only() {
        let mut c = WatchChecker::new(false);
        for m in [start(7, false, 0), synced(4, 7, 0)] {
            c.observe(&m).unwrap();
        }
        assert!(c.observe(&event(6, "a")).is_err());
        let mut f = WatchChecker::new(true);
        for m in [start(7, false, 0), synced(4, 7, 0), event(6, "a"), event(9, "a")] {
            f.observe(&m).unwrap();
        }
        let reset = msg(12, Kind::Reset(api::Reset::default()));
        for m in [reset, synced(12, 7, 0), event(13, "b")] {
            f.observe(&m).unwrap();
        }
        assert_eq!(f.resets, 1);
    }

    #[test]
    fn a_resume_continues_what_the_client_followed_and_a_fresh_start_leaves_a_hole() {
        let mut c = WatchChecker::new(true);
        for m in [start(7, false, 0), synced(4, 7, 0), event(6, "a"), bookmark(8)] {
            c.observe(&m).unwrap();
        }
        assert!(!c.followed(7, 4), "the snapshot carried revision 4");
        assert!(c.followed(7, 5) && c.followed(7, 8), "filtered out or not, 5..=8 were followed");
        assert!(!c.followed(8, 6), "another journal");
        c.reconnect();
        for m in [start(7, true, 8), event(10, "a")] {
            c.observe(&m).unwrap();
        }
        assert!(c.followed(7, 9), "the resume continued the run");
        // The stream breaks after 10; the client starts over and plegd is at 15.
        c.start_over();
        for m in [start(7, false, 0), synced(15, 7, 0), event(16, "b")] {
            c.observe(&m).unwrap();
        }
        assert!(!c.followed(7, 11) && !c.followed(7, 15), "11..=15 reached it as snapshot state");
        assert!(c.followed(7, 16));
        assert_eq!(c.epoch(), Some(7));
    }

    #[test]
    fn a_reset_may_bring_another_journal_and_its_synced_names_it() {
        // The disk filled, plegd went on in a new epoch in memory and told the stream
        // with a reset and a fresh snapshot.
        let mut c = WatchChecker::new(false);
        for m in [start(7, false, 0), synced(4, 7, 0), event(5, "a"), msg(5, Kind::Reset(api::Reset::default()))] {
            c.observe(&m).unwrap();
        }
        c.observe(&synced(6, 8, 0)).unwrap();
        c.observe(&event(7, "b")).unwrap();
        assert_eq!(c.resume_point(), Some((7, 8)));
        assert!(c.followed(8, 7) && !c.followed(7, 6));
        // Without a reset, a synced in another epoch is still caught.
        let mut c = WatchChecker::new(false);
        c.observe(&start(7, false, 0)).unwrap();
        assert!(c.observe(&synced(4, 8, 0)).is_err());
    }
}

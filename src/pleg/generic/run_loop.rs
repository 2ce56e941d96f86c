//! The relister's loop: it drains its [`crate::pleg::inbox`] into its one schedule —
//! the full relist at its period or when asked for (the stream going up or down, a
//! request, a container no record knows), pods the stream named, pods readers wait on —
//! beside what it schedules itself (failed reads to retry, exit statuses the runtime may
//! amend, sandboxes said deleted and not yet found gone), performs the reads as they
//! come due, and beats to show it turns. It sleeps until the schedule's next read, or
//! until a request arrives or the stream's state changes.

use std::collections::BTreeMap;
use std::time::Duration;

use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::GenericPleg;
use crate::cri::RuntimeService;
use crate::liveness::BEAT_EVERY;
use crate::pleg::inbox::{Intake, Request, Teller};
use crate::pleg::schedule::{Merge, Read, Reason, Reread, ScheduleRequest, StatusBook, Why};
use crate::pleg::stream_trust::SETTLE;

/// One re-read of a container's or a sandbox's status.
struct StatusReread {
    book: StatusBook,
    id: String,
    /// The pod it belongs to, read in full when the status changed.
    pod: String,
    found: Reread,
}

impl<R: RuntimeService> GenericPleg<R> {
    /// Takes everything the inbox holds (`first`, then the rest): reads into the
    /// schedule; a container named without its pod as a read of its pod (or, unknown, a
    /// full relist); a sandbox said deleted into its book and its re-reads; an overflow
    /// as a full relist. The pods the stream named settle the changes suspected as its
    /// misses.
    fn drain_inbox(&mut self, first: Option<Intake>) {
        let mut announced = Vec::new();
        let mut next = first.or_else(|| self.inbox_rx.try_recv());
        while let Some(intake) = next {
            let now = Instant::now();
            let request = match intake {
                Intake::Read(request) => Some(request),
                // Container-only events are resolved through the records; an unknown
                // container asks for a full relist.
                Intake::ContainerOnly { id, by } => match self.records.uid_of(&id) {
                    Some(uid) => Some(ScheduleRequest {
                        key: Read::Pod(uid),
                        message: match by {
                            Teller::Stream => Why::stream_event(None, None, now),
                            Teller::Nri => Why::nri_event(None, None, now),
                        },
                        run_at: now,
                    }),
                    None => {
                        self.reads.schedule(Read::Full, Why::because(Reason::UnknownContainer, now), now);
                        None
                    }
                },
                Intake::SandboxDeleted { uid, id } => {
                    if let Some(first) = self.books.deleted_sandboxes.said(&uid, &id) {
                        let read = Read::Status(StatusBook::DeletedSandboxes, id);
                        self.reads.schedule(read, Why::because(Reason::SandboxDeleted, now), first);
                    }
                    None
                }
                Intake::EarlyWord { uid, id, word } => {
                    let uid = uid.or_else(|| self.records.uid_of(&id));
                    let first = uid.and_then(|uid| self.books.early_words.said(word, &uid, &id));
                    if let Some(first) = first {
                        let read = Read::Status(StatusBook::EarlyWords, id);
                        self.reads.schedule(read, Why::because(Reason::EarlyWord, now), first);
                    }
                    None
                }
            };
            if let Some(uid) = request.and_then(|r| self.take_request(r)) {
                announced.push(uid);
            }
            next = self.inbox_rx.try_recv();
        }
        let now = Instant::now();
        if self.inbox_rx.take_overflow() {
            tracing::warn!("the relister's inbox overflowed; relisting fully");
            self.reads.schedule(Read::Full, Why::because(Reason::InboxFull, now), now);
        }
        // The stream announced these pods' removal (a sandbox's CONTAINER_DELETED):
        // whichever read finds them gone, it finds no miss of the stream.
        let deleting: Vec<String> = self.books.deleted_sandboxes.uids().map(str::to_owned).collect();
        for uid in &deleting {
            self.stream.trust.announce(uid);
        }
        self.settle_suspects(&announced);
    }

    /// Takes one read into the schedule; returns the pod it names when the stream named
    /// it.
    fn take_request(&mut self, ScheduleRequest { key, message, run_at }: Request) -> Option<String> {
        if message.has(Reason::StreamRecovered) {
            self.stream.trust.settle_until(Instant::now() + SETTLE);
        }
        let Read::Pod(uid) = &key else {
            self.schedule_counted(key, message, run_at);
            return None;
        };
        if message.only_waiting() {
            self.take_waiting(uid.clone());
            return None;
        }
        let named = message.has(Reason::StreamEvent).then(|| uid.clone());
        self.schedule_counted(key, message, run_at);
        named
    }

    fn schedule_counted(&mut self, key: Read, message: Why, run_at: Instant) {
        if self.reads.schedule(key, message, run_at) {
            self.inbox_rx.count_coalesced();
        }
    }

    /// A reader started waiting on pod `uid`. While full relists are far apart, a pod the
    /// relister knows, or found gone lately, is read now (paced, see
    /// [`GenericPleg::read_due`]); pods it has never seen are left to the next full relist or their own event (a reader cannot
    /// make plegd search the runtime for made-up pods). Otherwise the next full relist,
    /// at most a relist period away, answers it. Either way the read that answers starts
    /// after the waiter came (the cache is told so).
    fn take_waiting(&mut self, uid: String) {
        if !self.cache.cover(&uid) || !self.full_relists_are_slow() {
            return;
        }
        let now = Instant::now();
        let known = self.records.old(&uid).is_some()
            || self.records.current(&uid).is_some()
            || self.books.gone.contains(&uid, now);
        let read = Read::Pod(uid);
        // A pod whose read failed is read again at its own retry, which answers its
        // readers: waiting on it does not bring that read forward.
        let failing = self.reads.get(&read).is_some_and(|why| why.has(Reason::FailedRead))
            || matches!(&read, Read::Pod(uid) if self.books.failed.contains(uid));
        if known && !failing {
            self.schedule_counted(read, Why::because(Reason::Waiting, now), now);
        }
    }

    /// Performs the reads due now: the full relist first (it covers every pod read
    /// asked for before it starts, but the failed reads, which it takes itself), then
    /// pods in one batch (a pod only a reader waits on takes one of
    /// [`super::DEMAND_READS_PER_SEC`] or waits its turn), then the re-reads of lost exit
    /// statuses and sandboxes said deleted.
    async fn read_due(&mut self) {
        if self.reads.at(&Read::Full).is_some_and(|at| at <= Instant::now()) {
            self.reads.remove(&Read::Full);
            self.reads.take_where(|read, why| matches!(read, Read::Pod(_)) && !why.has(Reason::FailedRead));
            self.full_relist_logged().await;
            let now = Instant::now();
            self.reads.schedule(Read::Full, Why::because(Reason::Period, now), now + self.period());
        }
        let now = Instant::now();
        let mut pods = Vec::new();
        let mut rereads = Vec::new();
        for ScheduleRequest { key, message, run_at } in self.reads.take_due(now) {
            match key {
                Read::Pod(uid) if message.paced() && !self.waiting_pace.try_take() => {
                    let turn = self.waiting_pace.next_at();
                    self.reads.schedule(Read::Pod(uid), message, turn);
                }
                Read::Pod(uid) => pods.push((uid, message)),
                // Due again at once (a zero period): the next turn's.
                Read::Full => {
                    self.reads.schedule(key, message, run_at);
                }
                Read::Status(book, id) => rereads.push((book, id)),
            }
        }
        if !pods.is_empty() {
            self.read_pods(pods).await;
        }
        if !rereads.is_empty() {
            self.reread(rereads).await;
        }
    }

    /// Reads again each entry due of the books followed one status at a time (a
    /// container whose exit status the runtime may amend, a sandbox the runtime said
    /// deleted), a few at a time, and schedules the next re-read its book asks for. The
    /// pods of those that changed or are gone are read in full, which sends the amended
    /// status or the removal. An entry its book no longer follows is dropped.
    async fn reread(&mut self, due: Vec<(StatusBook, String)>) {
        let timeout = self.reader.timeout;
        let jobs: Vec<_> = due
            .into_iter()
            .filter_map(|(book, id)| {
                let (pod, read) = self.books.reread(book, &id, self.reader.runtime.clone(), timeout)?;
                Some(async move { StatusReread { book, id, pod, found: read.await } })
            })
            .collect();
        let done = self.reader.concurrently(jobs).await;
        let now = Instant::now();
        // Each changed pod's read gives the books' reasons too: the path that told it.
        let mut changed: BTreeMap<String, Why> = BTreeMap::new();
        for StatusReread { book, id, pod, found } in done {
            let entries = self.books.book_mut(book);
            let reason = entries.reason();
            if let Some(at) = entries.read(&id, found) {
                self.reads.schedule(Read::Status(book, id), Why::because(reason, now), at);
            }
            if found == Reread::Changed {
                let why = changed.entry(pod).or_insert_with(|| Why::because(Reason::Reread, now));
                why.merge(Why::because(reason, now));
            }
        }
        if !changed.is_empty() {
            self.read_pods(changed.into_iter().collect()).await;
        }
    }

    /// Brings the failed reads waiting for the next full relist to the relist period: the
    /// stream came up (full relists may be minutes apart now) or a full relist failed
    /// while it is up.
    fn retry_failed_soon(&mut self) {
        let now = Instant::now();
        let at = now + self.cfg.relist_period;
        for r in self.reads.take_where(|read, why| matches!(read, Read::Pod(_)) && why.has(Reason::FailedRead)) {
            self.reads.schedule(r.key, r.message, r.run_at.min(at));
        }
        for uid in std::mem::take(&mut self.books.failed) {
            self.reads.schedule(Read::Pod(uid), Why::because(Reason::FailedRead, now), at);
        }
    }

    async fn full_relist_logged(&mut self) {
        match self.relist().await {
            Ok(o) => {
                if std::mem::take(&mut self.report.failing) {
                    tracing::info!(pods = o.pods, "relist succeeded again");
                }
                tracing::trace!(?o, "relist done");
            }
            Err(e) => {
                if !self.report.failing {
                    tracing::warn!(error = %e, "relist failed; retrying every period");
                } else {
                    tracing::debug!(error = %e, "relist failed");
                }
                self.report.failing = true;
                if self.stream.state.borrow().is_up() {
                    self.retry_failed_soon();
                }
            }
        }
    }

    /// The stream went up or down. Up: ask the runtime what it is, to know whether its
    /// stream delivers every event (then full relists may slow down to the safety-net
    /// period, and health allows for that) or may split and drop them.
    async fn on_stream_state(&mut self, up: bool) {
        if !up {
            self.stream.trust.went_down();
            self.report.health.set_evented_allowance(Duration::ZERO);
            return;
        }
        let (complete, runtime) = match self.reader.runtime.version().await {
            Ok(v) => (
                crate::pleg::evented::stream_is_complete(&v.runtime_name, &v.runtime_version),
                format!("{} {}", v.runtime_name, v.runtime_version),
            ),
            Err(e) => (false, format!("an unknown runtime ({e})")),
        };
        if complete {
            tracing::info!(%runtime, "the runtime's event stream delivers every event to every subscriber; full relists slow down to the stream check's period");
        } else {
            tracing::info!(%runtime, "this runtime's event stream may split events between subscribers or drop them; full relists keep the relist period and the stream only makes changes show sooner");
        }
        self.stream.trust.came_up(complete, runtime);
        // Full relists run every stream check at least: health allows for that, not
        // for the safety net's period.
        let allowance = if complete { self.cfg.net_period.min(self.stream.check) } else { Duration::ZERO };
        self.report.health.set_evented_allowance(allowance);
    }

    /// Relists fully every period (sliding: from the end of one relist to the start of
    /// the next; the safety-net period while a complete event stream is up), at once when
    /// the stream goes up or down or on request; performs the scheduled reads as they
    /// come due. Beats at least every [`BEAT_EVERY`], quiet or busy.
    pub async fn run(mut self, shutdown: CancellationToken) {
        // Subscribe, then list: give the stream consumer a moment to open its call.
        if *self.stream.state.borrow() == crate::pleg::evented::StreamState::Starting {
            let _ = tokio::time::timeout(
                Duration::from_secs(1),
                self.stream.state.wait_for(|s| *s != crate::pleg::evented::StreamState::Starting),
            )
            .await;
        }
        let mut up = self.stream.state.borrow_and_update().is_up();
        self.on_stream_state(up).await;
        let start = Instant::now();
        self.reads.schedule(Read::Full, Why::because(Reason::Period, start), start);
        // Fast full relists follow a stream that came back after failing (the runtime may
        // have restarted); a stream up from the start needs none.
        self.stream.trust.settle_until(start);
        let mut first = None;
        loop {
            self.report.beat.beat();
            let now_up = self.stream.state.borrow_and_update().is_up();
            if now_up != up {
                up = now_up;
                self.on_stream_state(up).await;
                if up {
                    self.retry_failed_soon();
                }
                // Up: repair what was missed, then slow down. Down: relist now and go
                // back to the relist period.
                let now = Instant::now();
                self.reads.schedule(Read::Full, Why::because(Reason::StreamChanged, now), now);
            }
            self.drain_inbox(first.take());
            // A miss just judged shortens the period: the next full relist moves closer.
            let now = Instant::now();
            self.reads.schedule(Read::Full, Why::because(Reason::Period, now), now + self.period());
            if !self.full_relists_are_slow() {
                // The next full relist, at most a relist period away, answers the readers.
                self.reads.take_where(|read, why| matches!(read, Read::Pod(_)) && why.only_waiting());
            }
            self.read_due().await;
            let beat = Instant::now() + BEAT_EVERY;
            let wake = self.reads.next_at().map_or(beat, |at| at.min(beat));
            tokio::select! {
                _ = shutdown.cancelled() => return,
                _ = tokio::time::sleep_until(wake) => {}
                request = self.inbox_rx.recv() => first = request,
                changed = self.stream.state.changed(), if self.stream.state_open => {
                    self.stream.state_open = changed.is_ok();
                }
            }
        }
    }
}

//! The relister's loop: when to relist fully (the period, the stream going up or down,
//! a request), and the reads its schedule holds (pods the stream named, pods readers
//! wait on, failed reads to retry, exit statuses the runtime may amend, sandboxes said
//! deleted and not yet found gone), and the beat that shows it turns. It sleeps until
//! the next full relist or the schedule's next read, or until woken: by a hint, a
//! reader's demand or the stream's state, all through one `Notify`.

use std::collections::{BTreeSet, HashMap};
use std::time::Duration;

use futures_util::StreamExt;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::GenericPleg;
use crate::cri::RuntimeService;
use crate::liveness::BEAT_EVERY;
use crate::model::event::EventSource;
use crate::pleg::hints::Hint;
use crate::pleg::lost_exits::Reread;
use crate::pleg::schedule::{Read, Reason, ScheduleRequest, Why};
use crate::pleg::stream_trust::SETTLE;

/// One re-read of a container's or a sandbox's status.
struct StatusReread {
    read: Read,
    /// The pod it belongs to, read in full when the status changed.
    pod: String,
    found: Reread,
}

impl<R: RuntimeService> GenericPleg<R> {
    /// Takes what the stream said since the last turn into the schedule and the books:
    /// the pods it named (read now), the final statuses it carried, the sandboxes it said
    /// deleted (read again soon). Returns whether a full relist was asked for (by a
    /// request, the stream's recovery, or a container no record knows).
    fn take_hints(&mut self) -> bool {
        let mut pending = self.stream.hints.take();
        let now = Instant::now();
        self.books.final_statuses.keep(std::mem::take(&mut pending.final_statuses));
        for (uid, id) in std::mem::take(&mut pending.deleted_sandboxes) {
            if let Some(first) = self.books.deleted_sandboxes.said(&uid, &id) {
                self.reads.schedule(Read::DeletedSandbox(id), Why::because(Reason::SandboxDeleted, now), first);
            }
        }
        // The stream announced these pods' removal (a sandbox's CONTAINER_DELETED):
        // whichever read finds them gone, it finds no miss of the stream.
        let deleting: Vec<String> = self.books.deleted_sandboxes.uids().map(str::to_owned).collect();
        for uid in &deleting {
            self.stream.trust.announce(uid);
        }
        if pending.recovered {
            self.stream.trust.settle_until(now + SETTLE);
        }
        // Container-only hints are resolved through the records; an unknown container
        // asks for a full relist.
        let mut full = pending.full;
        let mut pods: HashMap<String, Hint> = pending.pods;
        for (id, at) in pending.containers {
            match self.records.uid_of(&id) {
                Some(uid) => {
                    pods.entry(uid).or_insert(Hint {
                        source: EventSource::CriEvent,
                        first_seen: at,
                        sandbox_ids: Default::default(),
                        container_ids: Default::default(),
                    });
                }
                None => full = true,
            }
        }
        let announced: Vec<String> =
            pods.iter().filter(|(_, h)| h.source == EventSource::CriEvent).map(|(uid, _)| uid.clone()).collect();
        self.settle_suspects(&announced);
        for (uid, hint) in pods {
            self.reads.schedule(Read::Pod(uid), Why::of_hint(hint), now);
        }
        full
    }

    /// Takes the pods readers started waiting on. While full relists are far apart, a
    /// pod the relister knows is read now (paced, see [`GenericPleg::read_due`]); pods it
    /// has never seen are left to the next full relist or their own event (a reader
    /// cannot make plegd search the runtime for made-up pods). Otherwise the next full
    /// relist, at most a relist period away, answers them all.
    fn take_demand(&mut self) {
        let demand = self.cache.take_demand();
        if !self.full_relists_are_slow() {
            self.reads.take_where(|read, why| matches!(read, Read::Pod(_)) && why.only_waiting());
            return;
        }
        let now = Instant::now();
        for uid in demand {
            let known = self.records.old(&uid).is_some() || self.records.current(&uid).is_some();
            let read = Read::Pod(uid);
            // A pod whose read failed is read again at its own retry, which answers its
            // readers: waiting on it does not bring that read forward.
            let failing = self.reads.get(&read).is_some_and(|why| why.has(Reason::FailedRead));
            if known && !failing {
                self.reads.schedule(read, Why::because(Reason::Waiting, now), now);
            }
        }
    }

    /// Performs the reads due now: pods in one batch (a pod only a reader waits on takes
    /// one of [`super::DEMAND_READS_PER_SEC`] or waits its turn), then the re-reads of
    /// lost exit statuses and sandboxes said deleted.
    async fn read_due(&mut self) {
        let now = Instant::now();
        let mut pods = Vec::new();
        let mut rereads = Vec::new();
        for ScheduleRequest { key, message, .. } in self.reads.take_due(now) {
            match key {
                Read::Pod(uid) if message.paced() && !self.waiting_pace.try_take() => {
                    let turn = self.waiting_pace.next_at();
                    self.reads.schedule(Read::Pod(uid), message, turn);
                }
                Read::Pod(uid) => pods.push((uid, message)),
                other => rereads.push(other),
            }
        }
        if !pods.is_empty() {
            self.read_pods(pods).await;
        }
        if !rereads.is_empty() {
            self.reread(rereads).await;
        }
    }

    /// Reads again each container whose exit status the runtime lost (one
    /// `ContainerStatus`) and each sandbox the runtime said deleted (one
    /// `PodSandboxStatus`), a few at a time, and schedules the next re-read its book
    /// asks for. The pods of those that changed or are gone are read in full, which
    /// sends the amended status or the removal. A read its book no longer follows is
    /// dropped.
    async fn reread(&mut self, due: Vec<Read>) {
        let books = &self.books;
        let jobs: Vec<(Read, String)> = due
            .into_iter()
            .filter_map(|read| {
                let pod = match &read {
                    Read::ExitStatus(id) => books.lost_exits.pod_of(id),
                    Read::DeletedSandbox(id) => books.deleted_sandboxes.pod_of(id),
                    Read::Pod(_) => None,
                }?;
                Some((read, pod.to_owned()))
            })
            .collect();
        let timeout = self.cfg.inspect_timeout;
        let done: Vec<StatusReread> = futures_util::stream::iter(jobs)
            .map(|(read, pod)| {
                let runtime = self.runtime.clone();
                async move {
                    let found = match &read {
                        Read::DeletedSandbox(id) => {
                            match tokio::time::timeout(timeout, runtime.pod_sandbox_status(id)).await {
                                Ok(answer) => crate::pleg::deleted_sandboxes::reread_of(answer),
                                Err(_) => Reread::Failed,
                            }
                        }
                        Read::ExitStatus(id) => match tokio::time::timeout(timeout, runtime.container_status(id)).await
                        {
                            Ok(answer) => Reread::of(answer),
                            Err(_) => Reread::Failed,
                        },
                        // Pods are not among the re-reads (`reread` is given none).
                        Read::Pod(_) => Reread::Failed,
                    };
                    StatusReread { read, pod, found }
                }
            })
            .buffer_unordered(self.cfg.concurrency.max(1))
            .inspect(|_| self.report.beat.beat())
            .collect()
            .await;
        let now = Instant::now();
        let mut changed = BTreeSet::new();
        for StatusReread { read, pod, found } in done {
            let next = match &read {
                Read::ExitStatus(id) => self.books.lost_exits.read(id, found).map(|at| (at, Reason::LostExit)),
                Read::DeletedSandbox(id) => {
                    tracing::debug!(sandbox = %id, %pod, ?found, "sandbox said deleted, read again");
                    self.books.deleted_sandboxes.read(id, found).map(|at| (at, Reason::SandboxDeleted))
                }
                Read::Pod(_) => None,
            };
            if let Some((at, reason)) = next {
                self.reads.schedule(read, Why::because(reason, now), at);
            }
            if found == Reread::Changed {
                changed.insert(pod);
            }
        }
        if !changed.is_empty() {
            let batch = changed.into_iter().map(|uid| (uid, Why::because(Reason::Reread, now))).collect();
            self.read_pods(batch).await;
        }
    }

    /// Brings the failed reads parked for the next full relist to the relist period: the
    /// stream came up (full relists may be minutes apart now) or a full relist failed
    /// while it is up.
    fn retry_failed_soon(&mut self) {
        let at = Instant::now() + self.cfg.period;
        for r in self.reads.take_where(|read, why| matches!(read, Read::Pod(_)) && why.has(Reason::FailedRead)) {
            self.reads.schedule(r.key, r.message, r.run_at.min(at));
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
        let (complete, runtime) = match self.runtime.version().await {
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
        self.stream.trust.came_up(complete, runtime, self.stream.net_period);
        // Full relists run every stream check at least: health allows for that, not
        // for the safety net's period.
        let allowance = if complete { self.stream.net_period.min(self.stream.check) } else { Duration::ZERO };
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
        let mut next_full = Instant::now();
        // Fast full relists follow a stream that came back after failing (the runtime may
        // have restarted); a stream up from the start needs none.
        self.stream.trust.settle_until(Instant::now());
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
                next_full = Instant::now();
            }
            let full_asked = self.take_hints();
            // A miss just judged shortens the period: the next full relist moves closer.
            next_full = next_full.min(Instant::now() + self.period());
            self.take_demand();
            if full_asked || Instant::now() >= next_full {
                // What the stream and readers asked for before this relist starts is
                // covered by it; failed reads it takes itself.
                self.reads.take_where(|read, why| matches!(read, Read::Pod(_)) && !why.has(Reason::FailedRead));
                self.full_relist_logged().await;
                next_full = Instant::now() + self.period();
            }
            self.read_due().await;
            let wake = self.reads.next_at().map_or(next_full, |at| at.min(next_full)).min(Instant::now() + BEAT_EVERY);
            tokio::select! {
                _ = shutdown.cancelled() => return,
                _ = tokio::time::sleep_until(wake) => {}
                _ = self.stream.hints.notified() => {}
            }
        }
    }
}

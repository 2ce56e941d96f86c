//! The relister's loop: when to relist fully (the period, the stream going up or down,
//! a request), which pods to read alone (the stream's hints, readers waiting, failed
//! reads to retry, exit statuses the runtime may amend, sandboxes said deleted and not
//! yet found gone), and the beat that shows it turns.

use std::time::Duration;

use futures_util::StreamExt;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::GenericPleg;
use crate::cri::RuntimeService;
use crate::liveness::BEAT_EVERY;
use crate::model::event::EventSource;
use crate::pleg::evented::StreamState;
use crate::pleg::hints::Hint;
use crate::pleg::lost_exits::Reread;
use crate::pleg::stream_trust::SETTLE;

impl<R: RuntimeService> GenericPleg<R> {
    /// Reads again what is due in the relister's two books: each container whose exit
    /// status the runtime lost (one `ContainerStatus`), each sandbox the runtime said
    /// deleted and no read found gone yet (one `PodSandboxStatus`), a few at a time. The
    /// pods of those that changed or are gone are read in full, which sends the amended
    /// status or the removal.
    async fn reread_due(&mut self) {
        let lost = self.lost_exits.due().into_iter().map(|(id, uid)| (false, id, uid));
        let deleted = self.deleted_sandboxes.due().into_iter().map(|(id, uid)| (true, id, uid));
        let timeout = self.cfg.inspect_timeout;
        let reads: Vec<(bool, String, String, Reread)> = futures_util::stream::iter(lost.chain(deleted))
            .map(|(sandbox, id, uid)| {
                let runtime = self.runtime.clone();
                async move {
                    let found = if sandbox {
                        match tokio::time::timeout(timeout, runtime.pod_sandbox_status(&id)).await {
                            Ok(answer) => crate::pleg::deleted_sandboxes::reread_of(answer),
                            Err(_) => Reread::Failed,
                        }
                    } else {
                        match tokio::time::timeout(timeout, runtime.container_status(&id)).await {
                            Ok(answer) => Reread::of(answer),
                            Err(_) => Reread::Failed,
                        }
                    };
                    (sandbox, id, uid, found)
                }
            })
            .buffer_unordered(self.cfg.concurrency.max(1))
            .inspect(|_| self.beat.beat())
            .collect()
            .await;
        let mut pods = std::collections::BTreeSet::new();
        for (sandbox, id, uid, found) in reads {
            if sandbox {
                tracing::debug!(sandbox = %id, pod = %uid, ?found, "sandbox said deleted, read again");
                self.deleted_sandboxes.read(&id, found);
            } else {
                self.lost_exits.read(&id, found);
            }
            if found == Reread::Changed {
                pods.insert(uid);
            }
        }
        if !pods.is_empty() {
            let now = Instant::now();
            self.relist_pods(pods.into_iter().map(|uid| (uid, Hint::pod_relist(now))).collect()).await;
        }
    }

    /// Adds the pods readers wait on to `batch`, paced: pods the relister has never
    /// seen are left to the next full relist or their own event (a reader cannot make
    /// plegd search the runtime for made-up pods), and known ones are read at most
    /// [`DEMAND_READS_PER_SEC`] a second; the rest wait their turn.
    fn admit_demand(&mut self, demand: Vec<String>, batch: &mut Vec<(String, Hint)>) {
        let now = Instant::now();
        let mut wanted = std::mem::take(&mut self.deferred);
        wanted.extend(demand);
        for uid in wanted {
            let known = self.records.old(&uid).is_some() || self.records.current(&uid).is_some();
            if batch.iter().any(|(u, _)| *u == uid) || !known {
                continue;
            }
            if self.demand_reads.try_take() {
                batch.push((uid, Hint::pod_relist(now)));
            } else {
                self.deferred.insert(uid);
            }
        }
    }

    /// When the next re-read of either book is due.
    fn next_reread(&self) -> Option<Instant> {
        [self.lost_exits.next_due(), self.deleted_sandboxes.next_due()].into_iter().flatten().min()
    }

    /// Turns pending hints into a batch of pods; container-only hints are resolved
    /// through the pod records, and an unknown container asks for a full relist.
    fn resolve(&self, pending: crate::pleg::hints::Pending) -> (Vec<(String, Hint)>, bool) {
        let mut pods = pending.pods;
        let mut full = pending.full;
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
        (pods.into_iter().collect(), full)
    }

    async fn full_relist_logged(&mut self) {
        match self.relist().await {
            Ok(o) => {
                if std::mem::take(&mut self.failing) {
                    tracing::info!(pods = o.pods, "relist succeeded again");
                }
                tracing::trace!(?o, "relist done");
            }
            Err(e) => {
                if !self.failing {
                    tracing::warn!(error = %e, "relist failed; retrying every period");
                } else {
                    tracing::debug!(error = %e, "relist failed");
                }
                self.failing = true;
            }
        }
    }

    /// The stream went up or down. Up: ask the runtime what it is, to know whether its
    /// stream delivers every event (then full relists may slow down to the safety-net
    /// period, and health allows for that) or may split and drop them.
    async fn on_stream_state(&mut self, up: bool) {
        if !up {
            self.trust.up_since = None;
            self.health.set_evented_allowance(Duration::ZERO);
            return;
        }
        self.trust.up_since = Some(Instant::now());
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
        self.trust.complete = complete;
        self.trust.runtime = runtime;
        self.trust.net_period = self.evented_period;
        self.trust.missing = false;
        self.trust.last_miss = None;
        // Full relists run every stream check at least: health allows for that, not
        // for the safety net's period.
        let allowance = if complete { self.evented_period.min(self.stream_check) } else { Duration::ZERO };
        self.health.set_evented_allowance(allowance);
    }

    /// Relists fully every period (sliding: from the end of one relist to the start of
    /// the next; the safety-net period while a complete event stream is up), at once when
    /// the stream goes up or down or on request; relists single pods as hints arrive and
    /// as readers wait on them while full relists are far apart. Beats at least every
    /// [`BEAT_EVERY`], quiet or busy.
    pub async fn run(mut self, shutdown: CancellationToken) {
        // Subscribe, then list: give the stream consumer a moment to open its call.
        if *self.stream.borrow() == StreamState::Starting {
            let _ = tokio::time::timeout(Duration::from_secs(1), self.stream.wait_for(|s| *s != StreamState::Starting))
                .await;
        }
        let mut stream_open = true;
        let mut up = self.stream.borrow().is_up();
        self.on_stream_state(up).await;
        let mut next_full = Instant::now();
        let mut next_retry: Option<Instant> = None;
        // Fast full relists follow a stream that came back after failing (the runtime may
        // have restarted); a stream up from the start needs none.
        self.trust.settle_until = Instant::now();
        loop {
            self.beat.beat();
            let mut pending = self.hints.take();
            self.final_statuses.keep(std::mem::take(&mut pending.final_statuses));
            for (uid, id) in std::mem::take(&mut pending.deleted_sandboxes) {
                self.deleted_sandboxes.said(&uid, &id);
            }
            // The stream announced these pods' removal (a sandbox's CONTAINER_DELETED):
            // whichever read finds them gone, it finds no miss of the stream.
            let now = Instant::now();
            for uid in self.deleted_sandboxes.uids() {
                self.trust.announced.insert(uid.to_owned(), now);
            }
            if pending.recovered {
                self.trust.settle_until = Instant::now() + SETTLE;
            }
            let (mut batch, full_hint) = self.resolve(pending);
            self.settle_suspects(&batch);
            // A miss just judged shortens the period: the next full relist moves closer.
            next_full = next_full.min(Instant::now() + self.period());
            let requested = self.requests.try_recv().is_ok();
            let demand = self.cache.take_demand();
            if full_hint || requested || Instant::now() >= next_full {
                // Hints and demand taken before this relist starts are covered by it.
                self.deferred.clear();
                self.full_relist_logged().await;
                next_full = Instant::now() + self.period();
                next_retry = None;
            } else {
                // Pods readers wait on: while full relists are far apart, read them now
                // (one round trip); otherwise the next full relist, at most a relist
                // period away, answers them.
                if self.full_relists_are_slow() {
                    self.admit_demand(demand, &mut batch);
                } else {
                    self.deferred.clear();
                }
                if !batch.is_empty() {
                    self.relist_pods(batch).await;
                }
            }
            // Pods whose targeted relist failed are retried at the relist period, even
            // while full relists are slow.
            if up && !self.reinspect.is_empty() {
                let now = Instant::now();
                match next_retry {
                    Some(at) if at <= now => {
                        let retry: Vec<_> =
                            self.reinspect.iter().map(|uid| (uid.clone(), Hint::pod_relist(now))).collect();
                        self.relist_pods(retry).await;
                        next_retry = None;
                    }
                    None => next_retry = Some(now + self.cfg.period),
                    _ => {}
                }
            }
            if self.reinspect.is_empty() {
                // A pod read again by other means needs no retry: a deadline left in the
                // past would make the loop spin until the next full relist.
                next_retry = None;
            }
            // Containers whose exit status the runtime lost, read again in case it
            // amends it; sandboxes said deleted, until a read finds them gone.
            if self.next_reread().is_some_and(|at| at <= Instant::now()) {
                self.reread_due().await;
            }
            let paced = (!self.deferred.is_empty()).then(|| self.demand_reads.next_at());
            let wake = [next_retry, self.next_reread(), paced]
                .into_iter()
                .flatten()
                .fold(next_full, Instant::min)
                .min(Instant::now() + BEAT_EVERY);
            tokio::select! {
                _ = shutdown.cancelled() => return,
                _ = tokio::time::sleep_until(wake) => {}
                Some(()) = self.requests.recv() => next_full = Instant::now(),
                _ = self.hints.notified() => {}
                _ = self.cache.demanded() => {}
                changed = self.stream.changed(), if stream_open => match changed {
                    Ok(()) => {
                        let now_up = self.stream.borrow().is_up();
                        if now_up != up {
                            up = now_up;
                            self.on_stream_state(up).await;
                            // Up: repair what was missed, then slow down. Down: relist now
                            // and go back to the relist period.
                            next_full = Instant::now();
                        }
                    }
                    Err(_) => stream_open = false,
                },
            }
        }
    }
}

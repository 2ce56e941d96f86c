//! One pod read, whichever path asks for it. A [`ReadJob`] says what is known of the pod
//! before the read — its listing, when the full relist has it; otherwise the pod is listed
//! alone, with the statuses of what it is known to hold read alongside (one round trip
//! unless the listing shows more) — and carries its caller's context (why it was asked
//! for, or the transitions it settles) through to the [`ReadResult`], so nothing is
//! joined back by UID. [`ReadJob::read`] performs it within the inspect timeout; the
//! result says how the pod was listed and what was found, with typed failures. The full
//! relist and a targeted read differ only in how their jobs are made;
//! [`PodReader::concurrently`] is the one place reads run side by side.

use std::collections::BTreeSet;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use futures_util::StreamExt;
use tokio::time::Instant;

use crate::cri::{CriError, RuntimeService};
use crate::host::Host;
use crate::liveness::Beat;
use crate::model::PodStatus;
use crate::pleg::inspect::{Prefetched, inspect_pod, inspect_prefetched};
use crate::pleg::list::list_pod;
use crate::pleg::records::RuntimePod;

/// Why a read found nothing usable.
#[derive(Debug, thiserror::Error)]
pub enum ReadError {
    /// The runtime failed a call.
    #[error(transparent)]
    Runtime(#[from] CriError),
    /// The read took longer than the inspect timeout.
    #[error("reading pod {uid} took longer than {timeout:?}")]
    Timeout {
        /// The pod.
        uid: String,
        /// The inspect timeout.
        timeout: Duration,
    },
}

/// How a job's pod is listed.
pub(super) enum PodListing {
    /// As the full relist listed it (the records hold it already).
    Listed(RuntimePod),
    /// Alone, by its UID; the statuses of these sandboxes and containers are read with
    /// the listing.
    Alone { sandboxes: BTreeSet<String>, containers: BTreeSet<String> },
}

/// One pod to read: what is known of it before the read, and the caller's context `C`,
/// handed back with the result.
pub(super) struct ReadJob<C> {
    pub uid: String,
    pub listing: PodListing,
    /// Its last status (the cache's, or the journal's after a restart): what was read
    /// once of a container (its process) is not read again.
    pub previous: Option<Arc<PodStatus>>,
    pub asked: C,
}

/// What a read of one pod found.
pub(super) enum Found {
    /// The runtime no longer has the pod (not listed, or listed and then every object in
    /// it read NotFound: removed while it was read).
    Gone,
    /// Its fresh status.
    Status(PodStatus),
    /// The pod is there, but its statuses could not be read.
    Failed(ReadError),
}

/// What a read saw once its pod was listed.
pub(super) struct Seen {
    /// The pod as this read's own listing had it (`None`: not listed, or every object in
    /// it gone by the time it was read). A read of a pod the full relist listed has no
    /// listing of its own: the full relist's records hold it, and this is not read.
    pub listed: Option<RuntimePod>,
    pub found: Found,
}

/// One pod's read, with the context its job carried.
pub(super) struct ReadResult<C> {
    pub uid: String,
    /// When the read started.
    pub at: Instant,
    pub took: Duration,
    pub asked: C,
    /// What it saw; an error when the pod could not be listed alone (nothing is known
    /// of it).
    pub seen: Result<Seen, ReadError>,
}

impl<C> ReadResult<C> {
    /// A pod the full relist no longer lists.
    pub fn gone(uid: String, at: Instant, asked: C) -> Self {
        Self { uid, at, took: Duration::ZERO, asked, seen: Ok(Seen { listed: None, found: Found::Gone }) }
    }
}

impl<C> ReadJob<C> {
    /// Reads the pod within `timeout`.
    pub async fn read<R: RuntimeService>(self, runtime: R, host: &Host, timeout: Duration) -> ReadResult<C> {
        let ReadJob { uid, listing, previous, asked } = self;
        let at = Instant::now();
        let alone = matches!(listing, PodListing::Alone { .. });
        let read = async {
            match listing {
                PodListing::Listed(pod) => {
                    let status = inspect_pod(&runtime, Some(host), &pod, previous.as_deref()).await;
                    Ok((Some(pod), Some(status)))
                }
                PodListing::Alone { sandboxes, containers } => {
                    let (listed, prefetched) = futures_util::future::join(
                        list_pod(&runtime, &uid, &sandboxes),
                        Prefetched::read(&runtime, sandboxes.iter().cloned(), containers, previous.as_deref()),
                    )
                    .await;
                    let Some(pod) = listed? else { return Ok((None, None)) };
                    let status = inspect_prefetched(&runtime, Some(host), &pod, previous.as_deref(), prefetched).await;
                    Ok((Some(pod), Some(status)))
                }
            }
        };
        let timed_out = || ReadError::Timeout { uid: uid.clone(), timeout };
        let seen = match tokio::time::timeout(timeout, read).await {
            Err(_) if alone => Err(timed_out()),
            Err(_) => Ok(Seen { listed: None, found: Found::Failed(timed_out()) }),
            Ok(Err(e)) => Err(ReadError::Runtime(e)),
            Ok(Ok((listed, None))) => Ok(Seen { listed, found: Found::Gone }),
            Ok(Ok((listed, Some(Err(e))))) => Ok(Seen { listed, found: Found::Failed(ReadError::Runtime(e)) }),
            // Listed, and every object in it gone since: the pod is gone.
            Ok(Ok((_, Some(Ok(status))))) if vanished(&status) => Ok(Seen { listed: None, found: Found::Gone }),
            Ok(Ok((listed, Some(Ok(status))))) => Ok(Seen { listed, found: Found::Status(status) }),
        };
        ReadResult { uid, at, took: at.elapsed(), asked, seen }
    }
}

/// A pod whose every sandbox and container read NotFound: the runtime lists a pod only while it has a sandbox or a container, so the pod is gone;
/// published as a pod with nothing in it, it would stay in the journal's view (and
/// `ListPods`) until a later read found it gone — 300 s with the event stream up.
fn vanished(status: &PodStatus) -> bool {
    status.sandboxes.is_empty() && status.containers.is_empty()
}

/// The relister's reads of the runtime: pods (and the statuses its books follow) a few
/// side by side, each within the inspect timeout, a new container's process read on
/// the host. It holds what a read needs and nothing of the relister's books.
pub(super) struct PodReader<R> {
    pub runtime: R,
    /// Where the host's `/proc` and cgroupfs are, for a new container's PID and cgroup.
    host: Host,
    /// The longest one read may take.
    pub timeout: Duration,
    /// Reads at once.
    concurrency: usize,
    /// Beaten as each read completes.
    pub beat: Beat,
}

impl<R: RuntimeService> PodReader<R> {
    pub fn new(runtime: R, host: Host, timeout: Duration, concurrency: usize) -> Self {
        Self { runtime, host, timeout, concurrency: concurrency.max(1), beat: Beat::detached("relist") }
    }

    /// Runs `work` at most [`super::PlegConfig::concurrency`] at a time, beating as
    /// each completes; the results come in the order they complete.
    pub async fn concurrently<T>(&self, work: impl IntoIterator<Item = impl Future<Output = T>>) -> Vec<T> {
        futures_util::stream::iter(work)
            .buffer_unordered(self.concurrency)
            .inspect(|_| self.beat.beat())
            .collect()
            .await
    }

    /// Performs `jobs`, a few at a time.
    pub async fn read_many<C>(&self, jobs: Vec<ReadJob<C>>) -> Vec<ReadResult<C>> {
        let (timeout, host) = (self.timeout, &self.host);
        self.concurrently(jobs.into_iter().map(|job| job.read(self.runtime.clone(), host, timeout))).await
    }
}

//! One pod read, whichever path asks for it. A [`ReadJob`] says what is known of the pod
//! before the read — its listing, when the full relist has it; otherwise the pod is listed
//! alone, with the statuses of what it is known to hold read alongside (one round trip
//! unless the listing shows more). [`ReadJob::read`] performs it within the inspect
//! timeout; a [`ReadResult`] says what it found, with typed failures. The full relist and
//! a targeted read differ only in how their jobs are made; [`GenericPleg::concurrently`]
//! is the one place reads run side by side.

use std::collections::BTreeSet;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use futures_util::StreamExt;
use tokio::time::Instant;

use super::GenericPleg;
use crate::cri::{CriError, RuntimeService};
use crate::host::Host;
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

/// One pod to read: what is known of it before the read.
pub(super) struct ReadJob {
    pub uid: String,
    pub listing: PodListing,
    /// Its last status (the cache's, or the journal's after a restart): what was read
    /// once of a container (its process) is not read again.
    pub previous: Option<Arc<PodStatus>>,
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
    /// The pod could not be listed alone: nothing is known of it.
    Unlisted(ReadError),
}

/// One pod's read.
pub(super) struct ReadResult {
    pub uid: String,
    /// When the read started.
    pub at: Instant,
    pub took: Duration,
    /// The pod as it was listed alone (`None` when not found); `None` for a pod the full
    /// relist listed, or one that could not be listed.
    pub listed_alone: Option<Option<RuntimePod>>,
    pub found: Found,
}

impl ReadResult {
    /// A pod the full relist no longer lists.
    pub fn gone(uid: String, at: Instant) -> Self {
        Self { uid, at, took: Duration::ZERO, listed_alone: None, found: Found::Gone }
    }
}

impl ReadJob {
    /// Reads the pod within `timeout`.
    pub async fn read<R: RuntimeService>(self, runtime: R, host: &Host, timeout: Duration) -> ReadResult {
        let ReadJob { uid, listing, previous } = self;
        let at = Instant::now();
        let alone = matches!(listing, PodListing::Alone { .. });
        let read = async {
            match listing {
                PodListing::Listed(pod) => {
                    Ok((None, Some(inspect_pod(&runtime, Some(host), &pod, previous.as_deref()).await)))
                }
                PodListing::Alone { sandboxes, containers } => {
                    let (listed, prefetched) = futures_util::future::join(
                        list_pod(&runtime, &uid, &sandboxes),
                        Prefetched::read(&runtime, sandboxes.iter().cloned(), containers, previous.as_deref()),
                    )
                    .await;
                    let Some(pod) = listed? else { return Ok((Some(None), None)) };
                    let status = inspect_prefetched(&runtime, Some(host), &pod, previous.as_deref(), prefetched).await;
                    Ok((Some(Some(pod)), Some(status)))
                }
            }
        };
        let (listed_alone, found) = match tokio::time::timeout(timeout, read).await {
            Err(_) if alone => (None, Found::Unlisted(ReadError::Timeout { uid: uid.clone(), timeout })),
            Err(_) => (None, Found::Failed(ReadError::Timeout { uid: uid.clone(), timeout })),
            Ok(Err(e)) => (None, Found::Unlisted(ReadError::Runtime(e))),
            Ok(Ok((listed, None))) => (listed, Found::Gone),
            Ok(Ok((listed, Some(Err(e))))) => (listed, Found::Failed(ReadError::Runtime(e))),
            // Listed, and every object in it gone since: the pod is gone.
            Ok(Ok((listed, Some(Ok(status))))) if vanished(&status) => (listed.map(|_| None), Found::Gone),
            Ok(Ok((listed, Some(Ok(status))))) => (listed, Found::Status(status)),
        };
        ReadResult { uid, at, took: at.elapsed(), listed_alone, found }
    }
}

/// A pod whose every sandbox and container read NotFound: the runtime lists a pod only while it has a sandbox or a container, so the pod is gone;
/// published as a pod with nothing in it, it would stay in the journal's view (and
/// `ListPods`) until a later read found it gone — 300 s with the event stream up.
fn vanished(status: &PodStatus) -> bool {
    status.sandboxes.is_empty() && status.containers.is_empty()
}

impl<R: RuntimeService> GenericPleg<R> {
    /// Runs `work` at most [`super::PlegConfig::concurrency`] at a time, beating as
    /// each completes; the results come in the order they complete.
    pub(super) async fn concurrently<T>(&self, work: impl IntoIterator<Item = impl Future<Output = T>>) -> Vec<T> {
        futures_util::stream::iter(work)
            .buffer_unordered(self.cfg.concurrency.max(1))
            .inspect(|_| self.report.beat.beat())
            .collect()
            .await
    }

    /// Performs `jobs`, a few at a time.
    pub(super) async fn read_many(&self, jobs: Vec<ReadJob>) -> Vec<ReadResult> {
        let (timeout, host) = (self.cfg.inspect_timeout, &self.host);
        self.concurrently(jobs.into_iter().map(|job| job.read(self.runtime.clone(), host, timeout))).await
    }
}

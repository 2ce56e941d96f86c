//! `GetContainer`'s rules, apart from any transport: a key resolves to the container
//! it names, live or removed ([`Found`]), or to a [`ResolveError`] whose sentence says
//! why not. The caller maps the two; nothing here knows gRPC.
//!
//! What it promises, within the caller's deadline:
//! - no answer before the first relist is in the journal (until then every container
//!   would be "unknown");
//! - a PID is placed by the kernel first (its process is read off the async threads,
//!   so a host read that blocks holds up this call only);
//! - a container the kernel already runs and plegd has not published yet is read from
//!   the runtime at once — one read per container id however many calls ask, at most
//!   [`DIRECT_READS`] ids at a time — and what the runtime says is checked against the
//!   process's cgroup before it is answered; without a reader the call waits (at most
//!   [`LOOKUP_WAIT`]) for plegd to publish it;
//! - a removed or exited container found by a namespace inode is vetted against the
//!   host ([`ContainerLookup::vet`]).

use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures_util::FutureExt;
use futures_util::future::Shared;
use tokio_util::sync::CancellationToken;

use super::{Answer, ContainerLookup, Found, LookupKey};
use crate::cache::PodCache;
use crate::journal::{Journal, Unprimed};
use crate::model::{ContainerStatus, PodStatus};

/// The longest a `GetContainer` by PID waits for a container the kernel already names
/// and plegd has not published yet (one it is reading right now).
pub const LOOKUP_WAIT: Duration = Duration::from_secs(2);

/// Runtime reads of unpublished containers under way at once.
pub const DIRECT_READS: usize = 4;

/// The longest one such read (its wait for a turn included) runs.
pub const DIRECT_READ_TIMEOUT: Duration = Duration::from_secs(5);

/// Why a key resolves to no container; the sentence is the caller's to pass on.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ResolveError {
    /// No container is (or was, within the retention) what the key names.
    #[error("{0}")]
    NotFound(String),
    /// The key names more than one container.
    #[error("{0}")]
    Ambiguous(String),
    /// plegd cannot answer now (not primed, the host or the runtime did not answer,
    /// shutting down): the caller may try again.
    #[error("{0}")]
    Unavailable(String),
}

/// Reads one container from the runtime at once.
pub type ContainerReader = Arc<dyn Fn(String) -> Pin<Box<dyn Future<Output = DirectRead> + Send>> + Send + Sync>;

/// What the runtime said of a container read at once.
#[derive(Clone, Debug)]
pub enum DirectRead {
    /// A pod's container.
    Found(Box<ReadContainer>),
    /// The runtime does not know it, or not as a pod's container.
    NotAPodsContainer,
    /// The read failed (or did not answer in time): nothing is learned from it.
    Failed(String),
}

/// A container the runtime was asked for directly, with its pod's identity.
#[derive(Clone, Debug)]
pub struct ReadContainer {
    /// The pod (its identity; containers as the read saw them).
    pub pod: PodStatus,
    /// The container.
    pub container: ContainerStatus,
}

/// Resolves `GetContainer` keys. Cheap to clone.
#[derive(Clone)]
pub struct Resolver {
    lookup: ContainerLookup,
    reads: Option<DirectReads>,
    journal: Journal,
    cache: PodCache,
    shutdown: CancellationToken,
}

impl Resolver {
    /// Resolves from `lookup` once `journal` is primed; a container it does not know
    /// yet is read with `reader` (none: waited for). A pod read directly is answered
    /// as `cache` holds it when it does.
    pub fn new(
        lookup: ContainerLookup,
        reader: Option<ContainerReader>,
        journal: Journal,
        cache: PodCache,
        shutdown: CancellationToken,
    ) -> Self {
        Self { lookup, reads: reader.map(DirectReads::new), journal, cache, shutdown }
    }

    /// The container `key` names, waiting at most `deadline`.
    pub async fn resolve(&self, key: &LookupKey, deadline: Duration) -> Result<Found, ResolveError> {
        let primed = self.journal.primed_within(deadline, &self.shutdown).await;
        primed.map_err(|u| ResolveError::Unavailable(u.why().into()))?;
        let wait = deadline.min(LOOKUP_WAIT);
        let until = tokio::time::Instant::now() + wait;
        let (process, clock) = match key {
            &LookupKey::Pid(pid) => self
                .lookup
                .host()
                .off_thread(move |h| (h.process(pid), h.pid_clock()))
                .await
                .map_err(|e| ResolveError::Unavailable(format!("{e}; try again")))?,
            _ => (None, None),
        };
        loop {
            let learned = self.lookup.learned();
            tokio::pin!(learned);
            learned.as_mut().enable();
            let (id, cgroup) = match self.lookup.find_read(key, process.clone(), clock) {
                f @ Answer::Found(_) => return self.lookup.vet(key, f).await.settled(),
                Answer::NotYet { id, cgroup } => (id, cgroup),
                other => return other.settled(),
            };
            // The kernel already runs it: the runtime is asked once rather than waiting
            // for the relister (which a runtime without an event stream leaves to the
            // next relist).
            if let Some(reads) = &self.reads {
                let read = tokio::time::timeout_at(until, reads.read(&id)).await;
                return self.placed(
                    key,
                    &id,
                    &cgroup,
                    read.unwrap_or_else(|_| DirectRead::Failed(format!("no answer within {wait:?}"))),
                );
            }
            tokio::select! {
                _ = &mut learned => {}
                _ = tokio::time::sleep_until(until) => {
                    return Err(ResolveError::NotFound(format!(
                        "the kernel puts {key:?} in container {id}, which plegd has not published within \
                         {wait:?}: a sandbox's pause process, or a container the kubelet did not create"
                    )));
                }
                _ = self.shutdown.cancelled() => {
                    return Err(ResolveError::Unavailable(Unprimed::ShuttingDown.why().into()));
                }
            }
        }
    }

    /// What a direct read of container `id` (which the kernel says holds `key`'s
    /// process, in `cgroup`) answers.
    fn placed(&self, key: &LookupKey, id: &str, cgroup: &str, read: DirectRead) -> Result<Found, ResolveError> {
        let ReadContainer { pod, container } = match read {
            DirectRead::Found(found) => *found,
            DirectRead::Failed(why) => {
                return Err(ResolveError::Unavailable(format!(
                    "the kernel puts {key:?} in container {id}, which plegd has not published, and reading it \
                     from the runtime failed ({why}); try again"
                )));
            }
            DirectRead::NotAPodsContainer => {
                self.lookup.not_a_container(id);
                return Err(ResolveError::NotFound(format!(
                    "the kernel puts {key:?} in container {id}, which the runtime does not know as a pod's \
                     container: a sandbox's pause process, or a container the kubelet did not create"
                )));
            }
        };
        if !ContainerLookup::holds(&container, cgroup) {
            return Err(ResolveError::NotFound(format!(
                "{key:?} is in cgroup {cgroup}, which is named after container {id} but is not where the runtime \
                 put it"
            )));
        }
        let pod = self.cache.get(&pod.uid).and_then(|e| e.status.clone()).unwrap_or_else(|| Arc::new(pod));
        Ok(Found { pod, container: Arc::new(container), removed_at: None })
    }
}

impl Answer {
    /// The container found, or why not.
    fn settled(self) -> Result<Found, ResolveError> {
        match self {
            Answer::Found(f) => Ok(f),
            Answer::Unavailable(why) => Err(ResolveError::Unavailable(why)),
            Answer::Ambiguous(why) => Err(ResolveError::Ambiguous(why)),
            Answer::NotFound(why) => Err(ResolveError::NotFound(why)),
            Answer::NotYet { id, .. } => Err(ResolveError::NotFound(format!("container {id} is not published yet"))),
        }
    }
}

/// The runtime reads for containers plegd has not published: one read per container id
/// however many calls ask for it at the same time, and at most [`DIRECT_READS`] ids
/// read at once (the rest wait their turn, within their deadline). An id the runtime
/// does not know as a pod's container is then answered from the lookup's memory for a
/// while ([`ContainerLookup::not_a_container`]).
#[derive(Clone)]
struct DirectReads {
    reader: ContainerReader,
    inflight: Arc<Mutex<HashMap<String, SharedRead>>>,
    turns: Arc<tokio::sync::Semaphore>,
}

type SharedRead = Shared<Pin<Box<dyn Future<Output = DirectRead> + Send>>>;

impl DirectReads {
    fn new(reader: ContainerReader) -> Self {
        Self { reader, inflight: Arc::default(), turns: Arc::new(tokio::sync::Semaphore::new(DIRECT_READS)) }
    }

    /// The runtime's answer for `id`: the read under way for it, or a new one. A read
    /// runs as a task of its own to its end (at most [`DIRECT_READ_TIMEOUT`]), whether or
    /// not anyone still waits for it, so its turn and its place in the map always return.
    fn read(&self, id: &str) -> SharedRead {
        let mut inflight = self.inflight.lock().expect("direct reads lock");
        if let Some(r) = inflight.get(id) {
            return r.clone();
        }
        let (this, key) = (self.clone(), id.to_owned());
        let task = tokio::spawn(async move {
            let read = async {
                let _turn = this.turns.acquire().await.ok()?;
                Some((this.reader)(key.clone()).await)
            };
            let answer = match tokio::time::timeout(DIRECT_READ_TIMEOUT, read).await {
                Ok(Some(answer)) => answer,
                Ok(None) => DirectRead::Failed("plegd is shutting down".into()),
                Err(_) => DirectRead::Failed(format!("the runtime did not answer within {DIRECT_READ_TIMEOUT:?}")),
            };
            this.inflight.lock().expect("direct reads lock").remove(&key);
            answer
        });
        let read: Pin<Box<dyn Future<Output = DirectRead> + Send>> =
            Box::pin(async move { task.await.unwrap_or_else(|e| DirectRead::Failed(e.to_string())) });
        let shared = read.shared();
        inflight.insert(id.to_owned(), shared.clone());
        shared
    }
}

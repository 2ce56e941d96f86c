//! The CRI seam: the runtime calls plegd makes, as a trait with a tonic implementation
//! ([`client::CriClient`]) and the simulated runtime (`sim::SimRuntime`, above the production layers).

pub mod brief;
pub mod client;
pub mod hashed;
pub mod metrics;
pub mod spec;
pub mod verbose;

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use futures_util::Stream;

use crate::proto::runtime as v1;

/// A stream of CRI container events.
pub type EventStream = Pin<Box<dyn Stream<Item = Result<v1::ContainerEventResponse, CriError>> + Send>>;

/// Errors of CRI calls; each names the runtime endpoint and the call.
#[derive(Debug, thiserror::Error)]
pub enum CriError {
    /// The runtime answered with an error status.
    #[error("cri {method} on {endpoint} failed: {code:?}: {message}", code = status.code(), message = status.message())]
    Call {
        /// CRI method.
        method: &'static str,
        /// Runtime endpoint.
        endpoint: Arc<str>,
        /// The status returned.
        #[source]
        status: tonic::Status,
    },
    /// No answer within the call's deadline.
    #[error("cri {method} on {endpoint} timed out after {timeout:?}")]
    Timeout {
        /// CRI method.
        method: &'static str,
        /// Runtime endpoint.
        endpoint: Arc<str>,
        /// The deadline.
        timeout: Duration,
    },
    /// plegd did not take the runtime's events as fast as they came: the stream was
    /// closed rather than let the runtime wait on plegd (containerd 2.x blocks its own
    /// calls while a subscriber's queue is full); a full relist repairs the gap.
    #[error(
        "cri GetContainerEvents on {endpoint}: plegd fell {queued} events behind the stream and closed it (relisting instead) so the runtime never waits on plegd"
    )]
    FellBehind {
        /// Runtime endpoint.
        endpoint: Arc<str>,
        /// Events read and not yet taken when the stream was closed.
        queued: usize,
    },
    /// The runtime is known to be unreachable; plegd waits before dialing again.
    #[error("cri {method} on {endpoint} skipped: runtime unreachable, next attempt in {retry_in:?}")]
    Unreachable {
        /// CRI method.
        method: &'static str,
        /// Runtime endpoint.
        endpoint: Arc<str>,
        /// Time until the next dial.
        retry_in: Duration,
    },
    /// The runtime answered OK but left out a required field.
    #[error("cri {method} on {endpoint} returned no {field}")]
    Incomplete {
        /// CRI method.
        method: &'static str,
        /// Runtime endpoint.
        endpoint: Arc<str>,
        /// The missing field.
        field: &'static str,
    },
    /// The runtime's answer is not a well-formed message.
    #[error("cri {method} on {endpoint} returned a malformed message")]
    Malformed {
        /// CRI method.
        method: &'static str,
        /// Runtime endpoint.
        endpoint: Arc<str>,
        /// What the decoder found.
        #[source]
        source: prost::DecodeError,
    },
}

impl CriError {
    /// The gRPC code this error stands for.
    pub fn code(&self) -> tonic::Code {
        match self {
            Self::Call { status, .. } => status.code(),
            Self::Timeout { .. } => tonic::Code::DeadlineExceeded,
            Self::Unreachable { .. } => tonic::Code::Unavailable,
            Self::FellBehind { .. } => tonic::Code::ResourceExhausted,
            Self::Incomplete { .. } | Self::Malformed { .. } => tonic::Code::Internal,
        }
    }

    /// Whether the runtime said the object does not exist.
    pub fn is_not_found(&self) -> bool {
        self.code() == tonic::Code::NotFound
    }

    /// Whether the runtime does not implement the call (containerd 1.6's events).
    pub fn is_unimplemented(&self) -> bool {
        self.code() == tonic::Code::Unimplemented
    }
}

/// The runtime calls plegd uses. Implemented over gRPC by [`client::CriClient`] and
/// in-process by the simulated runtime.
pub trait RuntimeService: Clone + Send + Sync + 'static {
    /// The endpoint, for messages.
    fn endpoint(&self) -> &str;
    /// `Version`.
    fn version(&self) -> impl Future<Output = Result<v1::VersionResponse, CriError>> + Send;
    /// `ListPodSandbox` with an optional filter.
    fn list_pod_sandboxes(
        &self,
        filter: Option<v1::PodSandboxFilter>,
    ) -> impl Future<Output = Result<Vec<v1::PodSandbox>, CriError>> + Send;
    /// `PodSandboxStatus` (not verbose).
    fn pod_sandbox_status(&self, id: &str) -> impl Future<Output = Result<v1::PodSandboxStatus, CriError>> + Send;
    /// `ListContainers` with an optional filter.
    fn list_containers(
        &self,
        filter: Option<v1::ContainerFilter>,
    ) -> impl Future<Output = Result<Vec<v1::Container>, CriError>> + Send;
    /// `ListPodSandbox`, then `ListContainers`, without filters, as the runtime encoded
    /// them (a relist fingerprints the bytes and decodes only what it needs).
    fn list_encoded(&self) -> impl Future<Output = Result<brief::EncodedListing, CriError>> + Send {
        async move {
            let sandboxes = self.list_pod_sandboxes(None).await?;
            let containers = self.list_containers(None).await?;
            Ok(brief::EncodedListing::encode(sandboxes, containers))
        }
    }
    /// The listing [`list_encoded`](Self::list_encoded) gives, unless its fingerprint
    /// keyed by `seed` ([`brief::EncodedListing::fingerprint`]) is `unchanged`: then
    /// `None`. A client over a socket hashes the answers as they arrive first and lists
    /// again only when they changed, so an idle node's relist never holds its listing;
    /// one served in-process lists once.
    fn list_if_changed(
        &self,
        seed: u64,
        unchanged: u64,
    ) -> impl Future<Output = Result<Option<brief::EncodedListing>, CriError>> + Send {
        async move {
            let listing = self.list_encoded().await?;
            Ok((listing.fingerprint(seed) != Some(unchanged)).then_some(listing))
        }
    }
    /// `ContainerStatus` (not verbose).
    fn container_status(&self, id: &str) -> impl Future<Output = Result<v1::ContainerStatus, CriError>> + Send;
    /// `ContainerStatus` with `verbose`: the status and what the runtime's verbose
    /// `info` says of its process. A runtime without verbose info answers
    /// [`verbose::ContainerVerbose::default`].
    fn container_status_verbose(
        &self,
        id: &str,
    ) -> impl Future<Output = Result<(v1::ContainerStatus, verbose::ContainerVerbose), CriError>> + Send {
        async move { Ok((self.container_status(id).await?, verbose::ContainerVerbose::default())) }
    }
    /// `PodSandboxStatus` with `verbose`: the status and what the runtime's verbose
    /// `info` says of the sandbox's process and network namespace.
    fn pod_sandbox_status_verbose(
        &self,
        id: &str,
    ) -> impl Future<Output = Result<(v1::PodSandboxStatus, verbose::SandboxVerbose), CriError>> + Send {
        async move { Ok((self.pod_sandbox_status(id).await?, verbose::SandboxVerbose::default())) }
    }
    /// `GetContainerEvents`: resolves once the stream is open.
    fn container_events(&self) -> impl Future<Output = Result<EventStream, CriError>> + Send;
    /// `RemoveContainer`.
    fn remove_container(&self, id: &str) -> impl Future<Output = Result<(), CriError>> + Send;
}

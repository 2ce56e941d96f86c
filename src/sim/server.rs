//! The simulated runtime as a real CRI `RuntimeService` gRPC server on a unix socket.

use std::pin::Pin;

use futures_util::{Stream, StreamExt};
use tokio::net::UnixListener;
use tokio_util::sync::CancellationToken;
use tonic::{Request, Response, Status};

use super::SimRuntime;
use crate::proto::runtime as cri;
use crate::proto::runtime::runtime_service_server::{RuntimeService, RuntimeServiceServer};

/// The gRPC face of a [`SimRuntime`].
#[derive(Clone)]
pub struct SimService {
    sim: SimRuntime,
}

impl SimService {
    /// Wraps a runtime.
    pub fn new(sim: SimRuntime) -> Self {
        Self { sim }
    }
}

/// Serves `sim` on `listener` until `shutdown`; runs the exit reaper alongside.
pub async fn serve(
    sim: SimRuntime,
    listener: UnixListener,
    shutdown: CancellationToken,
) -> Result<(), tonic::transport::Error> {
    let reaper = tokio::spawn(sim.clone().run_reaper(shutdown.clone()));
    let incoming = tokio_stream::wrappers::UnixListenerStream::new(listener);
    let res = tonic::transport::Server::builder()
        .add_service(RuntimeServiceServer::new(SimService::new(sim.clone())))
        .serve_with_incoming_shutdown(incoming, async {
            shutdown.cancelled().await;
            // A stopping runtime ends its event streams; graceful shutdown would
            // otherwise wait for them forever.
            sim.drop_event_streams();
        })
        .await;
    shutdown.cancel();
    let _ = reaper.await;
    res
}

type EventsStream = Pin<Box<dyn Stream<Item = Result<cri::ContainerEventResponse, Status>> + Send>>;

#[tonic::async_trait]
impl RuntimeService for SimService {
    type GetContainerEventsStream = EventsStream;

    async fn version(&self, _: Request<cri::VersionRequest>) -> Result<Response<cri::VersionResponse>, Status> {
        self.sim.version().await.map(Response::new)
    }

    async fn run_pod_sandbox(
        &self,
        r: Request<cri::RunPodSandboxRequest>,
    ) -> Result<Response<cri::RunPodSandboxResponse>, Status> {
        let id = self.sim.run_pod_sandbox(r.into_inner()).await?;
        Ok(Response::new(cri::RunPodSandboxResponse { pod_sandbox_id: id }))
    }

    async fn stop_pod_sandbox(
        &self,
        r: Request<cri::StopPodSandboxRequest>,
    ) -> Result<Response<cri::StopPodSandboxResponse>, Status> {
        self.sim.stop_pod_sandbox(&r.into_inner().pod_sandbox_id).await?;
        Ok(Response::new(cri::StopPodSandboxResponse {}))
    }

    async fn remove_pod_sandbox(
        &self,
        r: Request<cri::RemovePodSandboxRequest>,
    ) -> Result<Response<cri::RemovePodSandboxResponse>, Status> {
        self.sim.remove_pod_sandbox(&r.into_inner().pod_sandbox_id).await?;
        Ok(Response::new(cri::RemovePodSandboxResponse {}))
    }

    async fn pod_sandbox_status(
        &self,
        r: Request<cri::PodSandboxStatusRequest>,
    ) -> Result<Response<cri::PodSandboxStatusResponse>, Status> {
        let r = r.into_inner();
        let (status, info) = self.sim.pod_sandbox_status_verbose(&r.pod_sandbox_id).await?;
        let info = if r.verbose { info } else { Default::default() };
        Ok(Response::new(cri::PodSandboxStatusResponse { status: Some(status), info, ..Default::default() }))
    }

    async fn list_pod_sandbox(
        &self,
        r: Request<cri::ListPodSandboxRequest>,
    ) -> Result<Response<cri::ListPodSandboxResponse>, Status> {
        let items = self.sim.list_pod_sandbox(r.into_inner().filter).await?;
        Ok(Response::new(cri::ListPodSandboxResponse { items }))
    }

    async fn create_container(
        &self,
        r: Request<cri::CreateContainerRequest>,
    ) -> Result<Response<cri::CreateContainerResponse>, Status> {
        let id = self.sim.create_container(r.into_inner()).await?;
        Ok(Response::new(cri::CreateContainerResponse { container_id: id }))
    }

    async fn start_container(
        &self,
        r: Request<cri::StartContainerRequest>,
    ) -> Result<Response<cri::StartContainerResponse>, Status> {
        self.sim.start_container(&r.into_inner().container_id).await?;
        Ok(Response::new(cri::StartContainerResponse {}))
    }

    async fn stop_container(
        &self,
        r: Request<cri::StopContainerRequest>,
    ) -> Result<Response<cri::StopContainerResponse>, Status> {
        self.sim.stop_container(&r.into_inner().container_id).await?;
        Ok(Response::new(cri::StopContainerResponse {}))
    }

    async fn remove_container(
        &self,
        r: Request<cri::RemoveContainerRequest>,
    ) -> Result<Response<cri::RemoveContainerResponse>, Status> {
        self.sim.remove_container_cri(&r.into_inner().container_id).await?;
        Ok(Response::new(cri::RemoveContainerResponse {}))
    }

    async fn list_containers(
        &self,
        r: Request<cri::ListContainersRequest>,
    ) -> Result<Response<cri::ListContainersResponse>, Status> {
        let containers = self.sim.list_containers_cri(r.into_inner().filter).await?;
        Ok(Response::new(cri::ListContainersResponse { containers }))
    }

    async fn container_status(
        &self,
        r: Request<cri::ContainerStatusRequest>,
    ) -> Result<Response<cri::ContainerStatusResponse>, Status> {
        let r = r.into_inner();
        let (status, info) = self.sim.container_status_verbose_cri(&r.container_id).await?;
        let info = if r.verbose { info } else { Default::default() };
        Ok(Response::new(cri::ContainerStatusResponse { status: Some(status), info }))
    }

    async fn status(&self, _: Request<cri::StatusRequest>) -> Result<Response<cri::StatusResponse>, Status> {
        self.sim.status().await.map(Response::new)
    }

    async fn get_container_events(
        &self,
        _: Request<cri::GetEventsRequest>,
    ) -> Result<Response<Self::GetContainerEventsStream>, Status> {
        let s = self.sim.events().await?;
        Ok(Response::new(s.boxed()))
    }
}

/// Errors of `plegd sim`.
#[derive(Debug, thiserror::Error)]
pub enum SimError {
    /// The listen address is unusable.
    #[error("--listen: {0}")]
    Listen(#[from] crate::uds::UdsError),
    /// The Pods API socket cannot be served.
    #[error("--pods-api: {0}")]
    PodsApi(crate::uds::UdsError),
}

/// `plegd sim`: serves the simulated runtime on `listen` with churn until shutdown.
pub async fn serve_cli(
    listen: &str,
    churn: super::churn::ChurnConfig,
    events: super::EventsMode,
    host_root: Option<std::path::PathBuf>,
    pods_api: Option<std::path::PathBuf>,
    tracker: &tokio_util::task::TaskTracker,
    shutdown: CancellationToken,
) -> Result<(), SimError> {
    // Bound first: a file or a live socket at the path is refused before anything serves.
    let kubelet_listener = match &pods_api {
        Some(socket) => Some(crate::uds::bind(socket, 0o660).await.map_err(SimError::PodsApi)?),
        None => None,
    };
    let path = crate::uds::parse_unix_endpoint(listen)?;
    let listener = crate::uds::bind(&path, 0o660).await?;
    let sim = SimRuntime::new();
    sim.set_events_mode(events);
    if let Some(root) = host_root {
        sim.set_host_root(root);
    }
    tracing::info!(socket = %path.display(), pods = churn.pods, churn_per_sec = churn.churn_per_sec, "simulated runtime serving");
    let mut driver = super::churn::Churn::new(sim.clone(), churn);
    if let (Some(socket), Some(listener)) = (pods_api, kubelet_listener) {
        let kubelet = super::kubelet::SimKubelet::default();
        kubelet.set_ready(true);
        kubelet.serve_on(listener, shutdown.clone());
        tracing::info!(socket = %socket.display(), "simulated kubelet Pods API serving");
        driver = driver.with_kubelet(kubelet);
    }
    tracker.spawn(driver.run(shutdown.clone()));
    if let Err(e) = serve(sim, listener, shutdown.clone()).await {
        tracing::error!(error = %e, "simulated runtime stopped");
    }
    let _ = std::fs::remove_file(&path);
    Ok(())
}

//! The simulated runtime as plegd sees any runtime: the `RuntimeService` trait over
//! the simulator's own calls, in process (no socket), for tests that run hours of
//! paused time.

use super::*;

impl RuntimeService for SimRuntime {
    fn endpoint(&self) -> &str {
        IN_PROCESS
    }

    async fn version(&self) -> Result<cri::VersionResponse, CriError> {
        SimRuntime::version(self).await.map_err(call_err("Version"))
    }

    async fn list_pod_sandboxes(
        &self,
        filter: Option<cri::PodSandboxFilter>,
    ) -> Result<Vec<cri::PodSandbox>, CriError> {
        self.list_pod_sandbox(filter).await.map_err(call_err("ListPodSandbox"))
    }

    async fn pod_sandbox_status(&self, id: &str) -> Result<cri::PodSandboxStatus, CriError> {
        SimRuntime::pod_sandbox_status(self, id).await.map_err(call_err("PodSandboxStatus"))
    }

    async fn list_containers(&self, filter: Option<cri::ContainerFilter>) -> Result<Vec<cri::Container>, CriError> {
        self.list_containers_cri(filter).await.map_err(call_err("ListContainers"))
    }

    async fn container_status(&self, id: &str) -> Result<cri::ContainerStatus, CriError> {
        self.container_status_cri(id).await.map_err(call_err("ContainerStatus"))
    }

    async fn container_status_verbose(
        &self,
        id: &str,
    ) -> Result<(cri::ContainerStatus, crate::cri::verbose::ContainerVerbose), CriError> {
        let (status, info) = self.container_status_verbose_cri(id).await.map_err(call_err("ContainerStatus"))?;
        Ok((status, crate::cri::verbose::ContainerVerbose::parse(&info)))
    }

    async fn pod_sandbox_status_verbose(
        &self,
        id: &str,
    ) -> Result<(cri::PodSandboxStatus, crate::cri::verbose::SandboxVerbose), CriError> {
        let (st, info) =
            SimRuntime::pod_sandbox_status_verbose(self, id).await.map_err(call_err("PodSandboxStatus"))?;
        Ok((st, crate::cri::verbose::SandboxVerbose::parse(&info)))
    }

    async fn container_events(&self) -> Result<EventStream, CriError> {
        let s = self.events().await.map_err(call_err("GetContainerEvents"))?;
        Ok(s.map(|r| r.map_err(call_err("GetContainerEvents"))).boxed())
    }

    async fn remove_container(&self, id: &str) -> Result<(), CriError> {
        self.remove_container_cri(id).await.map_err(call_err("RemoveContainer"))
    }
}

//! The runtime's records: a sandbox and a container as containerd keeps them, and
//! what the CRI shows of each (status, listing, verbose info).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use tokio::time::Instant;

use super::{cri, host, now_nanos};

pub(super) struct Sandbox {
    pub(super) seq: u64,
    pub(super) id: String,
    pub(super) metadata: cri::PodSandboxMetadata,
    pub(super) state: cri::PodSandboxState,
    pub(super) created_at: i64,
    pub(super) labels: HashMap<String, String>,
    pub(super) annotations: HashMap<String, String>,
    pub(super) runtime_handler: String,
    pub(super) name: String,
    pub(super) process: host::SimProcess,
    pub(super) cgroups_path: String,
    /// Its pod address while its network is up (empty with host networking).
    pub(super) ip: String,
    pub(super) host: Arc<Mutex<host::SimHost>>,
}

pub(super) struct Container {
    pub(super) seq: u64,
    pub(super) id: String,
    pub(super) sandbox_id: String,
    pub(super) metadata: cri::ContainerMetadata,
    pub(super) image: String,
    pub(super) state: cri::ContainerState,
    pub(super) created_at: i64,
    pub(super) started_at: i64,
    pub(super) finished_at: i64,
    pub(super) exit_code: i32,
    pub(super) reason: String,
    pub(super) labels: HashMap<String, String>,
    pub(super) annotations: HashMap<String, String>,
    pub(super) log_path: String,
    pub(super) name: String,
    pub(super) exit_at: Option<Instant>,
    pub(super) resources: Option<cri::LinuxContainerResources>,
    pub(super) process: host::SimProcess,
    pub(super) cgroups_path: String,
    pub(super) host: Arc<Mutex<host::SimHost>>,
}

impl Sandbox {
    pub(super) fn status(&self) -> cri::PodSandboxStatus {
        cri::PodSandboxStatus {
            id: self.id.clone(),
            metadata: Some(self.metadata.clone()),
            state: self.state as i32,
            created_at: self.created_at,
            network: Some(cri::PodSandboxNetworkStatus { ip: self.ip.clone(), additional_ips: Vec::new() }),
            labels: self.labels.clone(),
            annotations: self.annotations.clone(),
            runtime_handler: self.runtime_handler.clone(),
        }
    }

    /// containerd's verbose `info`: the sandbox's process and network namespace.
    pub(super) fn info(&self) -> HashMap<String, String> {
        let pid = if self.state == cri::PodSandboxState::SandboxReady { self.process.pid } else { 0 };
        let netns = format!("/var/run/netns/cni-{}", &self.id[..8.min(self.id.len())]);
        let info = serde_json::json!({
            "pid": pid,
            "runtimeHandler": self.runtime_handler,
            "runtimeSpec": { "linux": { "cgroupsPath": self.cgroups_path,
                "namespaces": [{ "type": "pid" }, { "type": "network", "path": netns }] } },
        });
        [("info".to_string(), info.to_string())].into()
    }

    pub(super) fn listed(&self) -> cri::PodSandbox {
        cri::PodSandbox {
            id: self.id.clone(),
            metadata: Some(self.metadata.clone()),
            state: self.state as i32,
            created_at: self.created_at,
            labels: self.labels.clone(),
            annotations: self.annotations.clone(),
            runtime_handler: self.runtime_handler.clone(),
        }
    }
}

impl Container {
    pub(super) fn status(&self) -> cri::ContainerStatus {
        cri::ContainerStatus {
            id: self.id.clone(),
            metadata: Some(self.metadata.clone()),
            state: self.state as i32,
            created_at: self.created_at,
            started_at: self.started_at,
            finished_at: self.finished_at,
            exit_code: self.exit_code,
            image: Some(cri::ImageSpec { image: self.image.clone(), ..Default::default() }),
            image_ref: host::image_ref_of(&self.image),
            reason: self.reason.clone(),
            message: String::new(),
            labels: self.labels.clone(),
            annotations: self.annotations.clone(),
            log_path: self.log_path.clone(),
            resources: self.resources.map(|linux| cri::ContainerResources { linux: Some(linux) }),
            image_id: host::image_id_of(&self.image),
        }
    }

    /// containerd's verbose `info`: the init process's PID (kept after it exits, as
    /// containerd keeps it in the container's status), the spec's cgroup.
    pub(super) fn info(&self) -> HashMap<String, String> {
        let pid = self.process.pid;
        let info = serde_json::json!({
            "sandboxID": self.sandbox_id,
            "pid": pid,
            "runtimeSpec": { "linux": { "cgroupsPath": self.cgroups_path } },
        });
        [("info".to_string(), info.to_string())].into()
    }

    pub(super) fn listed(&self) -> cri::Container {
        cri::Container {
            id: self.id.clone(),
            pod_sandbox_id: self.sandbox_id.clone(),
            metadata: Some(self.metadata.clone()),
            image: Some(cri::ImageSpec { image: self.image.clone(), ..Default::default() }),
            image_ref: host::image_ref_of(&self.image),
            state: self.state as i32,
            created_at: self.created_at,
            labels: self.labels.clone(),
            annotations: self.annotations.clone(),
        }
    }

    /// Marks the container exited; returns whether it was running (an event is due).
    /// Its process is gone and its PID free.
    pub(super) fn exit(&mut self, code: i32, reason: &str) -> bool {
        let running =
            matches!(self.state, cri::ContainerState::ContainerRunning | cri::ContainerState::ContainerUnknown);
        if running {
            self.host.lock().expect("sim host lock").exit(&self.process, &self.cgroups_path);
            self.state = cri::ContainerState::ContainerExited;
            self.finished_at = now_nanos();
            self.exit_code = code;
            self.reason = reason.to_owned();
            self.exit_at = None;
        }
        running
    }
}

//! Request builders for pods and containers the way the kubelet fills them in, shared
//! by the churn driver, the tests and the end-to-end harness.

use std::collections::HashMap;

use crate::labels::kubelet::{CONTAINER_NAME, POD_NAME, POD_NAMESPACE, POD_UID};
use crate::proto::runtime as v1;

/// Annotation the simulated runtime honours: the container exits this long after it
/// starts (a humantime duration).
pub const EXIT_AFTER: &str = "plegd.sim/exit-after";
/// Annotation the simulated runtime honours: the exit code it then reports.
pub const EXIT_CODE: &str = "plegd.sim/exit-code";

/// What a pod looks like to the runtime.
#[derive(Clone, Debug)]
pub struct PodSpec {
    /// Namespace.
    pub namespace: String,
    /// Name.
    pub name: String,
    /// UID.
    pub uid: String,
    /// Sandbox attempt.
    pub attempt: u32,
    /// Extra labels on the sandbox (the pod's labels).
    pub labels: HashMap<String, String>,
    /// Host networking (needed on machines with no CNI).
    pub host_network: bool,
    /// Parent cgroup (empty: the runtime's default).
    pub cgroup_parent: String,
    /// The pod's log directory (empty: none, and containers get no log path).
    pub log_directory: String,
}

impl PodSpec {
    /// A pod with a random-looking UID derived from namespace and name.
    pub fn new(namespace: &str, name: &str) -> Self {
        Self {
            namespace: namespace.into(),
            name: name.into(),
            uid: format!(
                "{:08x}-{:04x}-4{:03x}-8{:03x}-{:012x}",
                fastrand::u32(..),
                fastrand::u16(..),
                fastrand::u16(..0xfff),
                fastrand::u16(..0xfff),
                fastrand::u64(..0xffff_ffff_ffff)
            ),
            attempt: 0,
            labels: HashMap::new(),
            host_network: true,
            cgroup_parent: String::new(),
            log_directory: String::new(),
        }
    }

    /// Logs where the kubelet puts them: the pod's directory
    /// `/var/log/pods/<namespace>_<name>_<uid>`, each container's file
    /// `<container>/<attempt>.log` in it.
    pub fn kubelet_logs(mut self) -> Self {
        self.log_directory = format!("/var/log/pods/{}_{}_{}", self.namespace, self.name, self.uid);
        self
    }

    /// Adds a pod label.
    pub fn label(mut self, k: &str, v: &str) -> Self {
        self.labels.insert(k.into(), v.into());
        self
    }

    /// The namespaces the kubelet gives the sandbox and each container: the pod's
    /// network (or the node's), a PID namespace per container, the pod's IPC.
    fn namespaces(&self) -> v1::NamespaceOption {
        v1::NamespaceOption {
            network: if self.host_network { v1::NamespaceMode::Node } else { v1::NamespaceMode::Pod } as i32,
            pid: v1::NamespaceMode::Container as i32,
            ipc: v1::NamespaceMode::Pod as i32,
            target_id: String::new(),
        }
    }

    /// The sandbox config the kubelet would send.
    pub fn sandbox_config(&self) -> v1::PodSandboxConfig {
        let mut labels = self.labels.clone();
        labels.insert(POD_UID.into(), self.uid.clone());
        labels.insert(POD_NAME.into(), self.name.clone());
        labels.insert(POD_NAMESPACE.into(), self.namespace.clone());
        let ns = self.namespaces();
        v1::PodSandboxConfig {
            metadata: Some(v1::PodSandboxMetadata {
                name: self.name.clone(),
                uid: self.uid.clone(),
                namespace: self.namespace.clone(),
                attempt: self.attempt,
            }),
            hostname: String::new(),
            log_directory: self.log_directory.clone(),
            dns_config: None,
            labels,
            annotations: HashMap::new(),
            linux: Some(v1::LinuxPodSandboxConfig {
                cgroup_parent: self.cgroup_parent.clone(),
                security_context: Some(v1::LinuxSandboxSecurityContext {
                    namespace_options: Some(ns),
                    ..Default::default()
                }),
            }),
        }
    }

    /// `RunPodSandboxRequest` for this pod.
    pub fn run_request(&self) -> v1::RunPodSandboxRequest {
        v1::RunPodSandboxRequest { config: Some(self.sandbox_config()), runtime_handler: String::new() }
    }

    /// `CreateContainerRequest` for a container of this pod.
    pub fn create_request(&self, sandbox_id: &str, c: &ContainerSpec) -> v1::CreateContainerRequest {
        let mut labels = HashMap::new();
        labels.insert(POD_UID.into(), self.uid.clone());
        labels.insert(POD_NAME.into(), self.name.clone());
        labels.insert(POD_NAMESPACE.into(), self.namespace.clone());
        labels.insert(CONTAINER_NAME.into(), c.name.clone());
        v1::CreateContainerRequest {
            pod_sandbox_id: sandbox_id.into(),
            config: Some(v1::ContainerConfig {
                metadata: Some(v1::ContainerMetadata { name: c.name.clone(), attempt: c.attempt }),
                image: Some(v1::ImageSpec {
                    image: c.image.clone(),
                    annotations: HashMap::new(),
                    user_specified_image: c.image.clone(),
                }),
                command: c.command.clone(),
                args: Vec::new(),
                working_dir: String::new(),
                envs: Vec::new(),
                mounts: Vec::new(),
                labels,
                annotations: c.annotations.clone(),
                log_path: match c.log_path.as_str() {
                    "" if !self.log_directory.is_empty() => format!("{}/{}.log", c.name, c.attempt),
                    p => p.to_owned(),
                },
                // Always the namespaces, as the kubelet sends them: a runtime takes a
                // context without them as the pod's PID namespace (CRI-O refuses that).
                linux: Some(v1::LinuxContainerConfig {
                    resources: c.resources,
                    security_context: Some(v1::LinuxContainerSecurityContext {
                        namespace_options: Some(self.namespaces()),
                        ..Default::default()
                    }),
                }),
            }),
            sandbox_config: Some(self.sandbox_config()),
        }
    }
}

/// What a container looks like to the runtime.
#[derive(Clone, Debug)]
pub struct ContainerSpec {
    /// Name within the pod.
    pub name: String,
    /// Restart attempt.
    pub attempt: u32,
    /// Image reference.
    pub image: String,
    /// Command.
    pub command: Vec<String>,
    /// Annotations (the simulated runtime reads `plegd.sim/*` here).
    pub annotations: HashMap<String, String>,
    /// Log path relative to the pod's log directory.
    pub log_path: String,
    /// CPU and memory as the kubelet derives them from limits.
    pub resources: Option<v1::LinuxContainerResources>,
}

impl ContainerSpec {
    /// A container that runs until stopped.
    pub fn new(name: &str) -> Self {
        Self {
            name: name.into(),
            attempt: 0,
            image: "docker.io/library/busybox:latest".into(),
            command: vec!["sleep".into(), "3600".into()],
            annotations: HashMap::new(),
            log_path: String::new(),
            resources: None,
        }
    }

    /// CPU and memory limits, turned into CFS shares, quota and period the way the
    /// kubelet does (100 ms period).
    pub fn limits(mut self, cpu_millis: i64, memory_bytes: i64) -> Self {
        self.resources = Some(v1::LinuxContainerResources {
            cpu_period: 100_000,
            cpu_quota: cpu_millis * 100,
            cpu_shares: (cpu_millis * 1024 / 1000).max(2),
            memory_limit_in_bytes: memory_bytes,
            oom_score_adj: 0,
        });
        self
    }

    /// The next restart attempt of the same container.
    pub fn attempt(mut self, attempt: u32) -> Self {
        self.attempt = attempt;
        self
    }

    /// Exits on its own after `after` with `code` (a shell command for real runtimes,
    /// annotations for the simulated one).
    pub fn exits_after(mut self, after: std::time::Duration, code: i32) -> Self {
        let secs = after.as_secs_f64();
        self.command = vec!["sh".into(), "-c".into(), format!("sleep {secs}; exit {code}")];
        self.annotations.insert(EXIT_AFTER.into(), humantime::format_duration(after).to_string());
        self.annotations.insert(EXIT_CODE.into(), code.to_string());
        self
    }
}

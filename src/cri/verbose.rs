//! What a runtime's verbose status says beyond the CRI's fields: the `info` map's
//! `info` key holds JSON (containerd and CRI-O alike) with the process id and the OCI
//! runtime spec the container or sandbox runs with. plegd reads it once per container
//! and sandbox; a runtime that says nothing there leaves the fields empty.

use std::collections::HashMap;

use serde::Deserialize;

/// A container's process, as the verbose status says.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ContainerVerbose {
    /// Host PID of the init process (0: not said, or not running).
    pub pid: u32,
    /// `runtimeSpec.linux.cgroupsPath`.
    pub cgroups_path: String,
}

/// A sandbox's process and network namespace, as the verbose status says.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SandboxVerbose {
    /// Host PID of the sandbox's process.
    pub pid: u32,
    /// The network namespace's path.
    pub netns_path: String,
}

#[derive(Deserialize, Default)]
#[serde(default, rename_all = "camelCase")]
struct Info {
    pid: u32,
    runtime_spec: Spec,
    /// containerd's sandbox metadata, where the spec does not carry the namespace.
    net_namespace_path: String,
}

#[derive(Deserialize, Default)]
#[serde(default)]
struct Spec {
    linux: Linux,
}

#[derive(Deserialize, Default)]
#[serde(default, rename_all = "camelCase")]
struct Linux {
    cgroups_path: String,
    namespaces: Vec<Namespace>,
}

#[derive(Deserialize, Default)]
#[serde(default)]
struct Namespace {
    #[serde(rename = "type")]
    kind: String,
    path: String,
}

fn info(map: &HashMap<String, String>) -> Info {
    map.get("info").and_then(|j| serde_json::from_str(j).ok()).unwrap_or_default()
}

impl ContainerVerbose {
    /// From a `ContainerStatusResponse.info` map.
    pub fn parse(map: &HashMap<String, String>) -> Self {
        let i = info(map);
        Self { pid: i.pid, cgroups_path: i.runtime_spec.linux.cgroups_path }
    }
}

impl SandboxVerbose {
    /// From a `PodSandboxStatusResponse.info` map.
    pub fn parse(map: &HashMap<String, String>) -> Self {
        let i = info(map);
        let from_spec = i
            .runtime_spec
            .linux
            .namespaces
            .into_iter()
            .find(|n| n.kind == "network")
            .map(|n| n.path)
            .unwrap_or_default();
        Self { pid: i.pid, netns_path: if from_spec.is_empty() { i.net_namespace_path } else { from_spec } }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_containerd_verbose_status_gives_the_pid_and_the_cgroups_path() {
        let json = r#"{"sandboxID":"s","pid":4242,"removing":false,"runtimeSpec":{"ociVersion":"1.1.0",
            "linux":{"cgroupsPath":"kubepods-besteffort-pod1.slice:cri-containerd:abc","namespaces":[{"type":"pid"}]}}}"#;
        let v = ContainerVerbose::parse(&[("info".to_string(), json.to_string())].into());
        assert_eq!(
            v,
            ContainerVerbose { pid: 4242, cgroups_path: "kubepods-besteffort-pod1.slice:cri-containerd:abc".into() }
        );
    }

    #[test]
    fn a_sandbox_netns_comes_from_the_spec_or_the_metadata() {
        let spec = r#"{"pid":7,"runtimeSpec":{"linux":{"namespaces":[{"type":"ipc"},{"type":"network","path":"/var/run/netns/cni-1"}]}}}"#;
        let v = SandboxVerbose::parse(&[("info".to_string(), spec.to_string())].into());
        assert_eq!(v, SandboxVerbose { pid: 7, netns_path: "/var/run/netns/cni-1".into() });
        let meta = r#"{"pid":8,"netNamespacePath":"/var/run/netns/cni-2"}"#;
        assert_eq!(
            SandboxVerbose::parse(&[("info".to_string(), meta.to_string())].into()).netns_path,
            "/var/run/netns/cni-2"
        );
    }

    #[test]
    fn missing_or_malformed_info_says_nothing_and_fails_nothing() {
        assert_eq!(ContainerVerbose::parse(&HashMap::new()), ContainerVerbose::default());
        let bad = [("info".to_string(), "{not json".to_string())].into();
        assert_eq!(ContainerVerbose::parse(&bad), ContainerVerbose::default());
        let wrong_types = [("info".to_string(), r#"{"pid":"x"}"#.to_string())].into();
        assert_eq!(SandboxVerbose::parse(&wrong_types), SandboxVerbose::default());
    }
}

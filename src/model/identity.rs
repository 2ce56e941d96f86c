//! Who a pod is, as the API says it (`PodIdentity`): its node, its controllers, its QoS
//! class, its addresses, and where that came from. Without the kubelet's word every
//! part is inferred from what the node holds: the node's name as plegd was given it,
//! the controllers from the names and labels they give their pods ([`super::workload`]),
//! the QoS class from the cgroup the kubelet placed the pod in, the addresses from the
//! runtime's sandbox status.

use super::PodStatus;
use super::workload::{self, Owner, WorkloadKind};
use crate::proto::plegd as api;

/// The QoS class the kubelet's cgroup layout names for a container's cgroup path:
/// `kubepods-burstable-pod<uid>.slice` or `/kubepods/burstable/pod<uid>` (Burstable),
/// the same with `besteffort` (BestEffort), and a pod's cgroup directly under
/// `kubepods` (Guaranteed). `None` for a cgroup the kubelet did not make.
pub fn qos_class(cgroup_path: &str) -> Option<&'static str> {
    let under = |class: &str| {
        cgroup_path.contains(&format!("kubepods-{class}-pod")) || cgroup_path.contains(&format!("kubepods/{class}/pod"))
    };
    if under("burstable") {
        Some("Burstable")
    } else if under("besteffort") {
        Some("BestEffort")
    } else if cgroup_path.contains("kubepods-pod") || cgroup_path.contains("kubepods/pod") {
        Some("Guaranteed")
    } else {
        None
    }
}

fn kind_name(kind: WorkloadKind) -> &'static str {
    match kind {
        WorkloadKind::Deployment => "Deployment",
        WorkloadKind::ReplicaSet => "ReplicaSet",
        WorkloadKind::StatefulSet => "StatefulSet",
        WorkloadKind::DaemonSet => "DaemonSet",
        WorkloadKind::Job => "Job",
        WorkloadKind::CronJob => "CronJob",
    }
}

fn reference(o: &Owner) -> api::WorkloadRef {
    api::WorkloadRef { kind: kind_name(o.kind).into(), name: o.name.clone(), uid: String::new() }
}

impl PodStatus {
    /// The pod's identity as plegd infers it, on node `node`.
    pub fn inferred_identity(&self, node: &str) -> api::PodIdentity {
        let owners = workload::infer(&self.name, &self.labels, self.made_at());
        let qos = self
            .containers
            .iter()
            .filter_map(|c| c.process.as_ref())
            .find_map(|p| qos_class(&p.cgroup_path))
            .unwrap_or_default();
        api::PodIdentity {
            node_name: node.into(),
            controller: owners.as_ref().map(|w| reference(&w.controller)),
            workload: owners.as_ref().map(|w| reference(&w.workload)),
            qos_class: qos.into(),
            pod_ips: self.ips.clone(),
            source: api::IdentitySource::Inferred as i32,
            ..Default::default()
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::model::{ContainerStatus, Process};

    #[test]
    fn the_qos_class_is_the_one_the_kubelets_cgroup_layout_names() {
        let cases = [
            ("kubepods-burstable-pod1a_2b.slice:cri-containerd:abc", Some("Burstable")),
            ("kubepods-besteffort-pod1a_2b.slice:cri-containerd:abc", Some("BestEffort")),
            ("kubepods-pod1a_2b.slice:cri-containerd:abc", Some("Guaranteed")),
            ("/kubepods/burstable/pod1a-2b/abc", Some("Burstable")),
            ("/kubepods/besteffort/pod1a-2b/abc", Some("BestEffort")),
            ("/kubepods/pod1a-2b/abc", Some("Guaranteed")),
            (
                "/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod1a.slice/cri-containerd-abc.scope",
                Some("Burstable"),
            ),
            ("/kubepods.slice/kubepods-pod1a.slice/cri-containerd-abc.scope", Some("Guaranteed")),
            ("system.slice:cri-containerd:abc", None),
            ("", None),
        ];
        for (path, want) in cases {
            assert_eq!(qos_class(path), want, "{path}");
        }
    }

    #[test]
    fn an_inferred_identity_names_the_node_the_workload_the_class_and_the_addresses() {
        let mut pod = PodStatus::empty("u1", "shop", "web-5f7b9c6d48-q2xkz");
        pod.labels = [("pod-template-hash", "5f7b9c6d48")].into();
        pod.ips = vec!["10.244.0.7".into()];
        let process =
            Process { cgroup_path: "kubepods-burstable-podu1.slice:cri-containerd:c1".into(), ..Default::default() };
        pod.containers =
            vec![Arc::new(ContainerStatus { id: "c1".into(), process: Some(process), ..Default::default() })];
        let id = pod.inferred_identity("node-a");
        assert_eq!(id.node_name, "node-a");
        assert_eq!(
            id.controller.as_ref().map(|c| (c.kind.as_str(), c.name.as_str())),
            Some(("ReplicaSet", "web-5f7b9c6d48"))
        );
        assert_eq!(id.workload.as_ref().map(|c| (c.kind.as_str(), c.name.as_str())), Some(("Deployment", "web")));
        assert_eq!(id.qos_class, "Burstable");
        assert_eq!(id.pod_ips, ["10.244.0.7"]);
        assert_eq!(id.source, api::IdentitySource::Inferred as i32);
        // A bare pod: no controller, nothing made up.
        let bare = PodStatus::empty("u2", "shop", "debug").inferred_identity("node-a");
        assert!(bare.controller.is_none() && bare.workload.is_none() && bare.qos_class.is_empty());
        assert_eq!(bare.source, api::IdentitySource::Inferred as i32);
    }
}

//! Generated protobuf and gRPC code for the CRI subset and plegd's API.
// The generated docs are the .proto files' comments, written for readers of the .proto.
#![allow(missing_docs, clippy::all, rustdoc::all)]

/// CRI runtime.v1 (the subset plegd uses).
pub mod runtime {
    tonic::include_proto!("runtime.v1");
}

/// The kubelet's Pods API (KEP-4188).
pub mod kubelet_pods {
    tonic::include_proto!("v1alpha1");
}

/// The parts of a core/v1 Pod plegd decodes (`cri-proto/kubelet/pod_view.proto`).
pub mod pod_view {
    tonic::include_proto!("plegd.kubelet");
}

/// plegd's own API.
pub mod plegd {
    tonic::include_proto!("plegd.v1");
}

/// `plegd.v1`'s file descriptors, with the files they import: what server reflection
/// tells clients.
pub const PLEGD_DESCRIPTOR_SET: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/plegd_descriptor.bin"));

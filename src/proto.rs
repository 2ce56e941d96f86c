//! Generated protobuf and gRPC code for the CRI subset and plegd's API.
#![allow(missing_docs, clippy::all)]

/// CRI runtime.v1 (the subset plegd uses).
pub mod runtime {
    tonic::include_proto!("runtime.v1");
}

/// plegd's own API.
pub mod plegd {
    tonic::include_proto!("plegd.v1");
}

/// `plegd.v1`'s file descriptors, with the files they import: what server reflection
/// tells clients.
pub const PLEGD_DESCRIPTOR_SET: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/plegd_descriptor.bin"));

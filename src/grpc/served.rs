//! plegd's API as the server sends it: the generated `PodLifecycle` server (build.rs
//! writes it to `served/` in `OUT_DIR`) over the messages of [`crate::proto::plegd`],
//! `Watch` yielding [`super::wire::WatchFrame`]. It is this layer's generated code: it
//! names `grpc`'s own types, which the protobuf layer below must not.
#![allow(missing_docs, clippy::all)]

include!(concat!(env!("OUT_DIR"), "/served/plegd.v1.rs"));

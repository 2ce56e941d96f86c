//! plegd: a node-local container lifecycle observer.
pub mod proto;
pub mod backoff;
pub mod cri;
pub mod metrics;
pub mod model;
pub mod sim;
pub mod uds;
pub mod cache;
pub mod pleg;
pub mod admin;
pub mod app;
pub mod config;
pub mod demo;
pub mod publish;
pub mod telemetry;

//! plegd: a node-local container lifecycle observer.
pub mod admin;
pub mod app;
pub mod backoff;
pub mod cache;
pub mod config;
pub mod cri;
pub mod demo;
pub mod metrics;
pub mod model;
pub mod pleg;
pub mod proto;
pub mod publish;
pub mod sim;
pub mod telemetry;
pub mod uds;

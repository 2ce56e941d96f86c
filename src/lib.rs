//! plegd: a node-local container lifecycle observer.
//!
//! The pipeline, from the runtime to the consumers:
//!
//! ```text
//!  CRI runtime ──► cri (client; sim is the in-process stand-in)
//!       │  GetContainerEvents                      ListPodSandbox / ListContainers / *Status
//!       ▼                                          ▲
//!  pleg::evented ── hints ──► pleg::generic (the relister: the cache's only writer)
//!                                 │ writes                    │ lifecycle events
//!                                 ▼                           ▼
//!                        cache (get, get_newer_than)   publish::PublishPath (the one publish path)
//!                                 │ demand (waiters)          │
//!                                 └──────► relister           ▼
//!                                                  journal (revisions, view, fan-out)
//!                                          ┌──────────────┼─────────────────┐
//!                                          ▼              ▼                 ▼
//!                                 api (gRPC Watch,   syncloop ──► reconcile   admin (HTTP: metrics,
//!                                 ListPods, GetPod-   (history)   (workqueue,  livez/healthz/readyz,
//!                                 Status)                         crashloop,   debug)
//!                                                                 gc) ──► PublishPath
//! ```
//!
//! `app` wires these once (`app::start`, `app::start_on` for any runtime);
//! `pleg::health` holds PLEG health and every loop's liveness beat; `watchcheck` is the
//! Watch invariant checker clients, tests and `plegd watch --verify` run.
pub mod admin;
pub mod app;
pub mod backoff;
pub mod cache;
pub mod cli;
pub mod config;
pub mod cri;
pub mod grpc;
pub mod journal;
pub mod labels;
pub mod liveness;
pub mod metrics;
pub mod model;
pub mod pleg;
pub mod process;
pub mod proto;
pub mod publish;
pub mod reconcile;
pub mod selector;
pub mod sim;
pub mod syncloop;
pub mod telemetry;
pub mod uds;
pub mod watchcheck;
pub mod workqueue;

//! plegd: a node-local container lifecycle observer.
//!
//! The pipeline, from the runtime to the consumers (one CRI event, hop by hop):
//!
//! ```text
//!  cri::client ─ GetContainerEvents ─► pleg::evented ─► pleg::hints ─► pleg::generic::run_loop
//!     (the stream is a hint)             (consume)        (coalesce)    (take_hints → schedule
//!                                                                        → read_due)
//!  pleg::generic::read_pods (read the pod via pleg::inspect) ─► apply: cache (write),
//!  pleg::step::events_of (the pure step) ─► publish::PublishPath
//!  ─► journal::Journal::append_batch (revision, encode once, view, fan-out to queues)
//!  ─► grpc::watch (the Watch stream pulls) ─► grpc::wire ─► the socket
//! ```
//!
//! (`docs/architecture.md` lists the sixteen calls.)
//!
//! The same events feed `syncloop` (history, the Contiv/VPP event loop) and, through
//! work queues, `reconcile`, whose events come back through the same publish path.
//!
//! Layers, bottom to top; each module imports only its own layer and those below
//! (`tests/layering.rs`):
//!
//! 1. leaves: [`proto`], [`backoff`], [`clock`] (plegd's wall clock), [`uds`], [`metrics`],
//!    [`process`], [`memory`] (freed heap back to the kernel), [`liveness`], [`labels`],
//!    [`selector`], [`host`] (the node's `/proc` and cgroupfs), [`runlog`] (plegd's own starts
//!    and the outages it saw)
//! 2. [`model`] — pod status and [`model::event`], the lifecycle events
//! 3. [`cri`] — the runtime calls as a trait, and the tonic client
//! 4. stores: [`cache`] (the runtime's latest per pod), [`journal`] (events by revision,
//!    and the pods as of the latest one), [`workqueue`], [`lookup`] (containers by id,
//!    cgroup id and PID, removed ones too)
//! 5. [`pleg`] — the relister (the cache's only writer) with its schedule of reads and
//!    the pure step from a read to its events, the event-stream consumer, health
//! 6. pipeline: [`publish`] (the one publish path), [`syncloop`], [`reconcile`]
//! 7. serving: [`grpc`], [`admin`], [`pages`] (HTML for people, on the debug listener), [`export`]
//!    (OTLP to a collector)
//! 8. [`config`], [`telemetry`]
//! 9. [`app`] — the one builder: production, tests, benches and the demo call it
//! 10. [`cli`], [`sim`] (the simulated runtime), [`watchcheck`] (the Watch checker)
pub mod admin;
pub mod app;
pub mod backoff;
pub mod cache;
pub mod cli;
pub mod clock;
pub mod config;
pub mod cri;
pub mod export;
pub mod grpc;
pub mod host;
pub mod journal;
pub mod labels;
pub mod liveness;
pub mod lookup;
pub mod memory;
pub mod metrics;
pub mod model;
pub mod pages;
pub mod pleg;
pub mod process;
pub mod proto;
pub mod publish;
pub mod reconcile;
pub mod runlog;
pub mod selector;
pub mod sim;
pub mod syncloop;
pub mod telemetry;
pub mod uds;
pub mod watchcheck;
pub mod workqueue;

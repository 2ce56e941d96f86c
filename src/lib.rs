//! plegd: a node-local container lifecycle observer.
//!
//! One CRI event's path, from the runtime to a watcher's socket — a container starts and
//! containerd sends `CONTAINER_STARTED_EVENT`. Each row is one call that passes the event
//! on, in the order the event takes them; the link is checked by `cargo doc`, the file by
//! `tests/layering.rs`, and `docs/architecture.md` holds the same table:
//!
//! | # | call | file | what it does |
//! |---|---|---|---|
//! | 1 | [`EventReader::read`](crate::cri::client) | `cri/client.rs` | the reader thread decodes the stream's message and hands it to an unbounded channel (hand-off 1) |
//! | 2 | [`EventedWatcher::consume`](crate::pleg::evented::EventedWatcher::consume) | `pleg/evented.rs` | takes it off the channel |
//! | 3 | [`EventedWatcher::request`](crate::pleg::evented::EventedWatcher::request) | `pleg/evented.rs` | a stopped container's final status into its book at once (`Inbox::final_status`); the pod and the ids: one `ScheduleRequest` |
//! | 4 | [`Inbox::send`](crate::pleg::inbox::Inbox::send) | `pleg/inbox.rs` | into the relister's one inbox, bounded (hand-off 2) |
//! | 5 | [`GenericPleg::drain_inbox`](crate::pleg::generic::GenericPleg::drain_inbox) | `pleg/generic/run_loop.rs` | the relister wakes and drains the inbox |
//! | 6 | [`Scheduler::schedule`](crate::pleg::schedule::Scheduler::schedule) | `pleg/schedule.rs` | the one coalescing point: one request per read, the earliest time wins |
//! | 7 | [`GenericPleg::read_due`](crate::pleg::generic::GenericPleg::read_due) | `pleg/generic/run_loop.rs` | takes the reads that are due |
//! | 8 | [`GenericPleg::read_pods`](crate::pleg::generic::GenericPleg::read_pods) | `pleg/generic.rs` | one job per pod, read a few at a time |
//! | 9 | [`ReadJob::read`](crate::pleg::generic) | `pleg/generic/read.rs` | lists the pod alone (`list_pod`) with its statuses alongside (`Prefetched::read`): one round trip |
//! | 10 | [`inspect_prefetched`](crate::pleg::inspect::inspect_prefetched) | `pleg/inspect.rs` | the pod's status from the runtime's answers; a new container's process from the host |
//! | 11 | [`GenericPleg::apply_read`](crate::pleg::generic::GenericPleg::apply_read) | `pleg/generic.rs` | the pod's record and its transitions |
//! | 12 | [`GenericPleg::apply`](crate::pleg::generic::GenericPleg::apply) | `pleg/generic.rs` | the effects, in one place: the cache, the books, the publish channel |
//! | 13 | [`events_of`](crate::pleg::step::events_of) | `pleg/step.rs` | the pure step: the read and its transitions → lifecycle events |
//! | 14 | [`Publisher::run`](crate::publish::Publisher::run) | `publish.rs` | takes the pod's events off the bounded channel (hand-off 3) |
//! | 15 | [`PublishPath::publish_batch`](crate::publish::PublishPath::publish_batch) | `publish.rs` | the one publish path: metrics, then the lookup, then the journal |
//! | 16 | [`ContainerLookup::observe`](crate::lookup::ContainerLookup::observe) | `lookup/mod.rs` | learns the container by id, cgroup and PID |
//! | 17 | [`Journal::append_batch`](crate::journal::Journal::append_batch) | `journal/mod.rs` | revisions, the view; the disk record encoded (`record::encode_event`, the first encoding) |
//! | 18 | [`Journal::commit`](crate::journal::Journal::commit) | `journal/disk.rs` | the batch and the view written to SQLite (`Store::commit`) before anyone sees it |
//! | 19 | [`Queue::push`](crate::journal) | `journal/queue.rs` | `fan_out` into each matching subscription's bounded queue (hand-off 4) |
//! | 20 | [`Feed::poll_next`](crate::journal::Feed) | `journal/feed.rs` | the subscription's one feed: disk, then memory, then live |
//! | 21 | [`WatchFeed::next`](crate::grpc::watch) | `grpc/watch.rs` | the Watch stream's framing takes it as the connection has room |
//! | 22 | [`EncodedTail::frame`](crate::grpc::wire::EncodedTail::frame) | `grpc/wire.rs` | the Watch encoding (`PodLifecycleEvent::to_api`, the second encoding), once per event |
//! | 23 | [`WatchFrame::encode_raw`](crate::grpc::wire::WatchFrame) | `grpc/wire.rs` | the bytes onto the socket |
//!
//! 23 calls in 17 files; what the event becomes on the way (its pod's listing and
//! transitions, the kubelet's state table, a new container's process, the final status,
//! the records on disk, the event's two encodings) is built in 8 more: `pleg/list.rs`,
//! `pleg/records.rs`, `pleg/state.rs`, `host.rs`, `pleg/final_statuses.rs`,
//! `journal/record.rs`, `journal/store.rs`, `model/event.rs`.
//!
//! No step calls back into one before it: a step calls the next, returns to the step
//! that calls the next, or leaves its result where the next reads it (the inbox, the
//! schedule, the books, the publish channel, the queue); the relister drains its inbox
//! in one place, its turn (`tests/layering.rs`). Full relists enter at `apply` from
//! `GenericPleg::relist`; reconcilers' events at `publish_batch`.
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
//! 6. pipeline: [`publish`] (the one publish path), [`syncloop`], [`reconcile`], [`kubelet`]
//!    (the kubelet's Pods API: who each pod is), [`nri`] (the runtime's NRI calls as hints)
//! 7. serving: [`grpc`], [`admin`], [`pages`] (HTML for people, on the debug listener), [`export`]
//!    (OTLP to a collector)
//! 8. [`config`], [`telemetry`]
//! 9. [`app`] — the one builder: production, tests, benches and the demo call it
//! 10. [`cli`], [`sim`] (the simulated runtime), [`watchcheck`] (the Watch checker)
// The crate docs describe the inside (`cargo doc --document-private-items`): the
// path above links private steps.
#![allow(rustdoc::private_intra_doc_links)]

/// The revision this binary was built from (`build.rs`): what `plegd --version`, the
/// `plegd_build_info` metric and the image's `org.opencontainers.image.revision` label say.
pub const REVISION: &str = env!("PLEGD_REVISION");

/// `plegd --version`: the version and the revision.
pub const VERSION: &str = concat!(env!("CARGO_PKG_VERSION"), " (", env!("PLEGD_REVISION"), ")");

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
pub mod kubelet;
pub mod labels;
pub mod liveness;
pub mod lookup;
pub mod memory;
pub mod metrics;
pub mod model;
pub mod nri;
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

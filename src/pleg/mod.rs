//! The PLEG: the kubelet's state table ([`state`], a leaf the other parts build on), pod records, pod inspection, PLEG health, the
//! CRI event stream's consumer, the relister's one inbox and schedule of reads to come,
//! the pure step from a read to its events, and the GenericPLEG relister (the cache's
//! only writer) that performs it.
//! It produces [`crate::model::event::PodLifecycleEvent`]s.

mod amended_exits;
mod build;
mod config;
mod deleted_sandboxes;
pub mod early_words;
pub mod evented;
pub mod final_statuses;
mod followed;
pub mod generic;
pub mod health;
pub mod inbox;
pub mod inspect;
pub mod list;
pub mod metrics;
pub mod records;
pub mod schedule;
pub mod state;
pub mod step;
mod stream_trust;

pub use build::{Pleg, PlegDeps};
pub use config::{PlegConfig, STREAM_CHECK};
pub use state::{PlegState, same_status, transition_events};

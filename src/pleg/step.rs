//! The pure step from a read of one pod to its lifecycle events, the kubelet's
//! `computeEvents(old, new)` grown by what plegd knows besides the read: the stream's
//! final statuses of containers the read no longer finds, containers no read ever saw,
//! and a pod gone before any read. [`events_of`] decides; the relister
//! ([`super::generic`]) performs what it returns — writes the cache, commits the records,
//! sends the events — in one place.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::SystemTime;

use super::records::Transition;
use crate::labels::shared;
use crate::model::event::{EventSource, EventType, PodLifecycleEvent};
use crate::model::{ContainerStatus, PodStatus, nanos_to_system};

/// Everything a read of one pod decides its events by.
#[derive(Clone, Copy, Debug)]
pub struct PodRead<'a> {
    /// The pod's UID.
    pub uid: &'a str,
    /// Its namespace and name as the records (or the stream) knew them; the fresh
    /// status's win.
    pub namespace: &'a str,
    /// See `namespace`.
    pub name: &'a str,
    /// The fresh status; for a pod gone, what is known of it (`None`, or its identity as
    /// the stream gave it, so a label selector finds its deaths).
    pub status: Option<&'a Arc<PodStatus>>,
    /// The runtime no longer has the pod.
    pub gone: bool,
    /// The record's transitions since the last read, the kubelet's table applied.
    pub transitions: &'a [Transition],
    /// Deaths and removals of containers no read ever saw (stopped and removed between
    /// two reads; known from the stream's final statuses).
    pub unseen: &'a [Transition],
    /// The stream's final statuses of containers the read no longer finds, by id.
    pub final_statuses: &'a HashMap<String, ContainerStatus>,
    /// Publish a `POD_SYNC` when nothing transitioned (the read followed a failed one,
    /// or the status changed in another way).
    pub sync: bool,
    /// The record held nothing (a pod seeded from the journal with no sandbox and no
    /// container).
    pub empty_record: bool,
    /// Which path read it.
    pub source: EventSource,
}

/// The events a read of one pod makes, in the order they are published.
///
/// - Each transition gives its event carrying the fresh status; a container's death
///   whose container the read no longer finds carries the pod with that container as
///   it ended (the stream's final status), not a pod without it.
/// - Containers no read ever saw die and go before the sandbox's own death and removal:
///   a pod goes last.
/// - A pod gone: its removals carry no pod (so the journal's view lets it go), and every
///   event that carries the pod comes before the first that does not (a client that drops
///   a pod on an event without one never sees it come back). A pod gone with nothing
///   left to name ends with a `POD_SYNC` without a pod.
/// - Nothing transitioned: one `POD_SYNC` when `sync` is set and the pod is there.
pub fn events_of(read: PodRead<'_>) -> Vec<PodLifecycleEvent> {
    let with_unseen;
    let transitions = if read.unseen.is_empty() {
        read.transitions
    } else {
        let (sandbox_end, rest): (Vec<_>, Vec<_>) =
            read.transitions.iter().cloned().partition(|t| {
                t.is_sandbox && matches!(t.kind, EventType::ContainerDied | EventType::ContainerRemoved)
            });
        with_unseen = [rest, read.unseen.to_vec(), sandbox_end].concat();
        &with_unseen[..]
    };
    let status = read.status.cloned();
    let mut events = build_events(&read, transitions, status, read.sync, read.final_statuses);
    if read.gone {
        for e in events.iter_mut().filter(|e| e.kind == EventType::ContainerRemoved) {
            e.pod = None;
        }
        events.sort_by_key(|e| e.pod.is_none());
        if read.empty_record && events.iter().all(|e| e.pod.is_some()) {
            let empty = Some(Arc::new(PodStatus::empty(read.uid, read.namespace, read.name)));
            for mut e in build_events(&read, &[], empty, true, &HashMap::new()) {
                e.pod = None;
                events.push(e);
            }
        }
    }
    events
}

/// Turns transitions into lifecycle events carrying `status`; none, with `sync` set and
/// a status, gives one `POD_SYNC`.
fn build_events(
    read: &PodRead<'_>,
    transitions: &[Transition],
    status: Option<Arc<PodStatus>>,
    sync: bool,
    final_statuses: &HashMap<String, ContainerStatus>,
) -> Vec<PodLifecycleEvent> {
    let observed_at = SystemTime::now();
    let (uid, namespace, name) = (
        shared(read.uid),
        shared(status.as_ref().map_or(read.namespace, |s| s.namespace.as_str())),
        shared(status.as_ref().map_or(read.name, |s| s.name.as_str())),
    );
    let base = |kind, id: &str, cname: &str, is_sandbox, ts| PodLifecycleEvent {
        pod_uid: uid.clone(),
        pod_namespace: namespace.clone(),
        pod_name: name.clone(),
        kind,
        container_id: id.to_owned(),
        container_name: shared(cname),
        is_sandbox,
        source: read.source,
        observed_at,
        runtime_timestamp: ts,
        pod: status.clone(),
        message: String::new(),
    };
    if transitions.is_empty() {
        if sync && status.is_some() {
            return vec![base(EventType::PodSync, "", "", false, None)];
        }
        return Vec::new();
    }
    transitions
        .iter()
        .map(|t| {
            let gone = !t.is_sandbox && status.as_deref().is_none_or(|s| s.containers.iter().all(|c| c.id != t.id));
            if t.kind == EventType::ContainerDied
                && gone
                && let Some(last) = final_statuses.get(&t.id)
            {
                let mut pod = status.as_deref().cloned().unwrap_or_else(|| PodStatus::empty(&uid, &namespace, &name));
                pod.containers.insert(0, Arc::new(last.clone()));
                let pod = Arc::new(pod);
                let ts = runtime_time(&pod, t);
                return PodLifecycleEvent { pod: Some(pod), ..base(t.kind, &t.id, &t.name, t.is_sandbox, ts) };
            }
            let ts = status.as_deref().and_then(|s| runtime_time(s, t));
            base(t.kind, &t.id, &t.name, t.is_sandbox, ts)
        })
        .collect()
}

/// The runtime's time of a transition, from the fresh status.
fn runtime_time(status: &PodStatus, t: &Transition) -> Option<SystemTime> {
    if t.is_sandbox {
        let s = status.sandboxes.iter().find(|s| s.id == t.id)?;
        return match t.kind {
            EventType::ContainerStarted => nanos_to_system(s.created_at),
            _ => None,
        };
    }
    let c = status.containers.iter().find(|c| c.id == t.id)?;
    match t.kind {
        EventType::ContainerStarted => nanos_to_system(c.started_at),
        EventType::ContainerDied => nanos_to_system(c.finished_at),
        EventType::ContainerChanged => nanos_to_system(c.created_at),
        _ => None,
    }
}

#[cfg(test)]
mod tests;

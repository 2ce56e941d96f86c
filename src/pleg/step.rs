//! The pure step from a read of one pod to its lifecycle events, the kubelet's
//! `computeEvents(old, new)` grown by what plegd knows besides the read: the stream's
//! final statuses of containers the read no longer finds, containers no read ever saw,
//! and a pod gone before any read. [`events_of`] decides; the relister
//! ([`super::generic`]) performs what it returns — writes the cache, commits the records,
//! sends the events — in one place.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::SystemTime;

use super::final_statuses::PodIdentity;
use super::records::Transition;
use crate::labels::shared;
use crate::model::event::{EventSource, EventType, PodLifecycleEvent};
use crate::model::{ContainerStatus, PodStatus, nanos_to_system};

/// What a read found of a pod: its fresh status, or that the runtime no longer has it.
#[derive(Clone, Copy, Debug)]
pub enum PodNow<'a> {
    /// The pod is there; its fresh status.
    Present(&'a Arc<PodStatus>),
    /// The runtime no longer has the pod.
    Gone,
}

impl<'a> PodNow<'a> {
    /// The fresh status, if the pod is there.
    pub fn status(self) -> Option<&'a Arc<PodStatus>> {
        match self {
            Self::Present(status) => Some(status),
            Self::Gone => None,
        }
    }

    /// Whether the runtime no longer has the pod.
    pub fn is_gone(self) -> bool {
        matches!(self, Self::Gone)
    }
}

/// Everything a read of one pod decides its events by.
pub struct PodRead<'a> {
    /// The pod's UID.
    pub uid: &'a str,
    /// Its namespace and name as the records knew them (empty for a pod they never
    /// knew); the fresh status's win.
    pub namespace: &'a str,
    /// See `namespace`.
    pub name: &'a str,
    /// The pod's identity as the runtime's event gave it, if the stream spoke of it: a
    /// pod the records never knew, gone before it was read, is named (and labelled) by
    /// it, so a label selector finds its deaths.
    pub identity: Option<&'a PodIdentity>,
    /// When plegd observed what the read found.
    pub observed_at: SystemTime,
    /// What the read found of the pod.
    pub now: PodNow<'a>,
    /// The record's transitions since the last read, the kubelet's table applied.
    pub transitions: &'a [Transition],
    /// Deaths and removals of containers no read ever saw (stopped and removed between
    /// two reads; known from the stream's final statuses).
    pub unseen: &'a [Transition],
    /// The stream's final statuses of containers the read no longer finds, by id.
    pub final_statuses: &'a HashMap<String, ContainerStatus>,
    /// Containers dead before and after this read whose exit code or reason the runtime
    /// changed since the last read (containerd before 2.3 says `Error` first and
    /// `OOMKilled` a moment later): each is a `CONTAINER_CHANGED` of that container.
    pub reworded: &'a [String],
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
/// - A dead container whose exit code or reason the runtime corrected: a
///   `CONTAINER_CHANGED` of it, after the transitions.
/// - Nothing transitioned: one `POD_SYNC` when `sync` is set and the pod is there.
pub fn events_of(read: PodRead<'_>) -> Vec<PodLifecycleEvent> {
    let pod = Pod::of(&read);
    let transitions = in_order(read.transitions, read.unseen);
    let mut events: Vec<PodLifecycleEvent> = transitions.iter().map(|t| pod.transition(&read, t)).collect();
    for id in read.reworded.iter().filter(|id| transitions.iter().all(|t| t.id != **id)) {
        let Some(c) = pod.status.as_deref().and_then(|s| s.containers.iter().find(|c| c.id == *id)) else { continue };
        let t =
            Transition { id: id.clone(), name: c.name.clone(), is_sandbox: false, kind: EventType::ContainerChanged };
        events.push(pod.event(&read, t.kind, Some(&t), pod.status.clone()));
    }
    if events.is_empty() && read.sync && pod.status.is_some() {
        events.push(pod.event(&read, EventType::PodSync, None, pod.status.clone()));
    }
    if read.now.is_gone() {
        // Stable: the events that carry the pod keep their order, before those that do not.
        events.sort_by_key(|e| e.pod.is_none());
        if read.empty_record && events.iter().all(|e| e.pod.is_some()) {
            events.push(pod.event(&read, EventType::PodSync, None, None));
        }
    }
    events
}

/// The transitions in the order they are published: containers no read ever saw die
/// and go before the sandbox's own death and removal.
fn in_order(transitions: &[Transition], unseen: &[Transition]) -> Vec<Transition> {
    if unseen.is_empty() {
        return transitions.to_vec();
    }
    let (sandbox_end, rest): (Vec<_>, Vec<_>) = transitions
        .iter()
        .cloned()
        .partition(|t| t.is_sandbox && matches!(t.kind, EventType::ContainerDied | EventType::ContainerRemoved));
    [rest, unseen.to_vec(), sandbox_end].concat()
}

/// The pod the events are about, decided once for the read.
struct Pod {
    uid: Arc<str>,
    namespace: Arc<str>,
    name: Arc<str>,
    /// What the events carry: the fresh status; for a pod gone, its identity as the
    /// stream gave it, if the records never knew it.
    status: Option<Arc<PodStatus>>,
}

impl Pod {
    fn of(read: &PodRead<'_>) -> Self {
        let (mut namespace, mut name, mut status) = (read.namespace, read.name, read.now.status().cloned());
        if namespace.is_empty()
            && name.is_empty()
            && let Some(known) = read.identity
        {
            (namespace, name) = (&known.namespace, &known.name);
            if status.is_none() {
                let labels = known.labels.clone();
                status = Some(Arc::new(PodStatus { labels, ..PodStatus::empty(read.uid, namespace, name) }));
            }
        }
        let (namespace, name) = match &status {
            Some(s) => (shared(&s.namespace), shared(&s.name)),
            None => (shared(namespace), shared(name)),
        };
        Self { uid: shared(read.uid), namespace, name, status }
    }

    /// An event about the pod, carrying `pod`.
    fn event(
        &self,
        read: &PodRead<'_>,
        kind: EventType,
        t: Option<&Transition>,
        pod: Option<Arc<PodStatus>>,
    ) -> PodLifecycleEvent {
        let runtime_timestamp = t.and_then(|t| pod.as_deref().and_then(|p| runtime_time(p, t)));
        PodLifecycleEvent {
            pod_uid: self.uid.clone(),
            pod_namespace: self.namespace.clone(),
            pod_name: self.name.clone(),
            kind,
            container_id: t.map(|t| t.id.clone()).unwrap_or_default(),
            container_name: shared(t.map_or("", |t| t.name.as_str())),
            is_sandbox: t.is_some_and(|t| t.is_sandbox),
            source: read.source,
            observed_at: read.observed_at,
            runtime_timestamp,
            pod,
            message: String::new(),
        }
    }

    /// The event of transition `t`, carrying the pod it is decided to carry: none for a
    /// removal of a pod gone; the container as it ended for a start, change or death of a
    /// container the read no longer finds (a pod gone puts the events that carry it first:
    /// a start without it would follow its own death); else the fresh status.
    fn transition(&self, read: &PodRead<'_>, t: &Transition) -> PodLifecycleEvent {
        if read.now.is_gone() && t.kind == EventType::ContainerRemoved {
            return self.event(read, t.kind, Some(t), None);
        }
        let gone = !t.is_sandbox && self.status.as_deref().is_none_or(|s| s.containers.iter().all(|c| c.id != t.id));
        if t.kind != EventType::ContainerRemoved
            && gone
            && let Some(last) = read.final_statuses.get(&t.id)
        {
            let mut pod = self
                .status
                .as_deref()
                .cloned()
                .unwrap_or_else(|| PodStatus::empty(&self.uid, &self.namespace, &self.name));
            pod.containers.insert(0, Arc::new(last.clone()));
            return self.event(read, t.kind, Some(t), Some(Arc::new(pod)));
        }
        self.event(read, t.kind, Some(t), self.status.clone())
    }
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

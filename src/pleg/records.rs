//! The runtime's listing grouped into pods, and the pod records a relist diffs: the
//! state committed at the last successful inspection (`old`) against the listing now
//! (`current`).

use std::collections::{BTreeMap, HashMap, HashSet};

use super::state::{PlegState, transition_events};
use crate::labels::kubelet::{CONTAINER_NAME, POD_NAME, POD_NAMESPACE, POD_UID};
use crate::model::event::EventType;
use crate::model::{ContainerState, SandboxState};
use crate::proto::runtime as cri;

/// A container or sandbox as the listing shows it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RuntimeContainer {
    /// Runtime id.
    pub id: String,
    /// Container name (empty for sandboxes).
    pub name: String,
    /// State for diffing.
    pub state: PlegState,
    /// Attempt.
    pub attempt: u32,
    /// Creation time, ns.
    pub created_at: i64,
}

/// A pod as the listing shows it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RuntimePod {
    /// Pod UID.
    pub uid: String,
    /// Pod name.
    pub name: String,
    /// Pod namespace.
    pub namespace: String,
    /// Sandboxes, newest first.
    pub sandboxes: Vec<RuntimeContainer>,
    /// Containers, newest first.
    pub containers: Vec<RuntimeContainer>,
}

/// A pod's record: committed state and the current listing. On an idle node the two
/// are equal for almost every pod, so a listing equal to the committed state is held
/// once ([`Listed::AsCommitted`]).
#[derive(Clone, Debug, Default)]
struct PodRecord {
    old: Option<RuntimePod>,
    current: Listed,
}

/// A record's current listing.
#[derive(Clone, Debug, Default)]
enum Listed {
    /// The runtime no longer lists the pod.
    #[default]
    Absent,
    /// Listed exactly as committed (`old`), not held a second time.
    AsCommitted,
    /// Listed, and different from what is committed.
    Pod(RuntimePod),
}

impl PodRecord {
    fn current(&self) -> Option<&RuntimePod> {
        match &self.current {
            Listed::Absent => None,
            Listed::AsCommitted => self.old.as_ref(),
            Listed::Pod(p) => Some(p),
        }
    }

    fn set_current(&mut self, pod: Option<RuntimePod>) {
        self.current = match pod {
            None => Listed::Absent,
            Some(p) if self.old.as_ref() == Some(&p) => Listed::AsCommitted,
            Some(p) => Listed::Pod(p),
        };
    }
}

/// Pod records by UID.
#[derive(Default)]
pub struct PodRecords {
    records: HashMap<String, PodRecord>,
}

/// One container's change between the committed state and now.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Transition {
    /// Container or sandbox id.
    pub id: String,
    /// Container name (empty for sandboxes).
    pub name: String,
    /// Whether it is the sandbox.
    pub is_sandbox: bool,
    /// Event type.
    pub kind: EventType,
}

impl RuntimePod {
    /// The state of `id` in this pod: containers first, then sandboxes.
    pub fn state_of(&self, id: &str) -> PlegState {
        self.containers.iter().chain(&self.sandboxes).find(|c| c.id == id).map_or(PlegState::NonExistent, |c| c.state)
    }
}

/// Groups a listing into pods by UID: sandboxes by their metadata, containers by their
/// sandbox (or by the kubelet's pod-UID label when the sandbox is not listed).
/// Containers that belong to no pod are left out.
pub fn group_pods(sandboxes: Vec<cri::PodSandbox>, containers: Vec<cri::Container>) -> BTreeMap<String, RuntimePod> {
    let mut pods: HashMap<String, RuntimePod> = HashMap::with_capacity(sandboxes.len());
    // Sandbox id → pod UID; the listing is owned, so strings are moved, not cloned.
    let mut sandbox_pod: HashMap<String, String> = HashMap::with_capacity(sandboxes.len());
    for mut s in sandboxes {
        let md = s.metadata.take().unwrap_or_default();
        let uid = if md.uid.is_empty() { s.labels.remove(POD_UID).unwrap_or_default() } else { md.uid };
        if uid.is_empty() {
            continue;
        }
        let entry = RuntimeContainer {
            id: s.id,
            name: String::new(),
            state: PlegState::of_sandbox(SandboxState::from_cri(s.state)),
            attempt: md.attempt,
            created_at: s.created_at,
        };
        sandbox_pod.insert(entry.id.clone(), uid.clone());
        let pod = pods.entry(uid).or_insert_with_key(|uid| RuntimePod { uid: uid.clone(), ..Default::default() });
        if pod.name.is_empty() {
            pod.name = md.name;
            pod.namespace = md.namespace;
        }
        pod.sandboxes.push(entry);
    }
    for mut c in containers {
        let md = c.metadata.take().unwrap_or_default();
        let name = if md.name.is_empty() { c.labels.remove(CONTAINER_NAME).unwrap_or_default() } else { md.name };
        let entry = RuntimeContainer {
            id: c.id,
            name,
            state: PlegState::of_container(ContainerState::from_cri(c.state)),
            attempt: md.attempt,
            created_at: c.created_at,
        };
        if let Some(pod) = sandbox_pod.get(&c.pod_sandbox_id).and_then(|uid| pods.get_mut(uid)) {
            pod.containers.push(entry);
            continue;
        }
        let Some(uid) = c.labels.remove(POD_UID) else { continue };
        let pod = pods.entry(uid).or_insert_with_key(|uid| RuntimePod {
            uid: uid.clone(),
            name: c.labels.remove(POD_NAME).unwrap_or_default(),
            namespace: c.labels.remove(POD_NAMESPACE).unwrap_or_default(),
            ..Default::default()
        });
        pod.containers.push(entry);
    }
    pods.into_iter()
        .map(|(uid, mut pod)| {
            pod.sandboxes.sort_by(|a, b| b.created_at.cmp(&a.created_at).then_with(|| a.id.cmp(&b.id)));
            pod.containers.sort_by(|a, b| b.created_at.cmp(&a.created_at).then_with(|| a.id.cmp(&b.id)));
            // Records live as long as their pod: no slack from `push`'s doubling (a pod
            // of 5 containers would hold room for 8).
            pod.sandboxes.shrink_to_fit();
            pod.containers.shrink_to_fit();
            (uid, pod)
        })
        .collect()
}

impl RuntimePod {
    /// The pod as a listing would show the status: what a record committed after
    /// reading it holds.
    pub fn of_status(status: &crate::model::PodStatus) -> Self {
        let entry = |id: &str, name: &str, state, attempt, created_at| RuntimeContainer {
            id: id.to_owned(),
            name: name.to_owned(),
            state,
            attempt,
            created_at,
        };
        Self {
            uid: status.uid.clone(),
            name: status.name.clone(),
            namespace: status.namespace.clone(),
            sandboxes: status
                .sandboxes
                .iter()
                .map(|s| entry(&s.id, "", PlegState::of_sandbox(s.state), s.attempt, s.created_at))
                .collect(),
            containers: status
                .containers
                .iter()
                .map(|c| entry(&c.id, &c.name, PlegState::of_container(c.state), c.attempt, c.created_at))
                .collect(),
        }
    }
}

impl RuntimePod {
    /// Whether `status` reads every listed object in the state listed, and has each
    /// container (a sandbox it lacks stays as listed: see [`PodRecords::observe`]).
    fn agrees_with(&self, status: &crate::model::PodStatus) -> bool {
        let sandboxes = self.sandboxes.iter().all(|s| match status.sandboxes.iter().find(|r| r.id == s.id) {
            Some(r) => PlegState::of_sandbox(r.state) == s.state,
            None => true,
        });
        sandboxes
            && self
                .containers
                .iter()
                .all(|c| status.containers.iter().any(|r| r.id == c.id && PlegState::of_container(r.state) == c.state))
    }

    /// The listing as the read found it: states from `status`, containers it lacks
    /// left out.
    fn as_read(&self, status: &crate::model::PodStatus) -> Self {
        let mut pod = self.clone();
        for s in &mut pod.sandboxes {
            if let Some(r) = status.sandboxes.iter().find(|r| r.id == s.id) {
                s.state = PlegState::of_sandbox(r.state);
            }
        }
        pod.containers.retain_mut(|c| match status.containers.iter().find(|r| r.id == c.id) {
            Some(r) => {
                c.state = PlegState::of_container(r.state);
                true
            }
            None => false,
        });
        pod
    }

    /// Whether this pod, committed after a read that found `status`, holds what the
    /// status says: each of its objects in its state, and no other container.
    pub fn holds(&self, status: &crate::model::PodStatus) -> bool {
        self.agrees_with(status)
            && self.containers.len() == status.containers.len()
            && status.sandboxes.iter().all(|r| self.sandboxes.iter().any(|s| s.id == r.id))
    }
}

impl PodRecords {
    /// Records `status` as the pod's committed state, as if plegd had read it: the
    /// next relist's diff against the runtime gives what changed since.
    pub fn seed(&mut self, status: &crate::model::PodStatus) {
        let old = Some(RuntimePod::of_status(status));
        self.records.insert(status.uid.clone(), PodRecord { old, ..Default::default() });
    }

    /// Replaces every record's current listing: pods not in `pods` become absent.
    pub fn set_current(&mut self, mut pods: BTreeMap<String, RuntimePod>) {
        for (uid, rec) in self.records.iter_mut() {
            rec.set_current(pods.remove(uid));
        }
        for (uid, pod) in pods {
            self.records.insert(uid, PodRecord { current: Listed::Pod(pod), ..Default::default() });
        }
    }

    /// Replaces one pod's current listing (a targeted relist).
    pub fn set_current_one(&mut self, uid: &str, pod: Option<RuntimePod>) {
        self.records.entry(uid.to_owned()).or_default().set_current(pod);
    }

    /// UIDs of all records, sorted.
    pub fn uids(&self) -> Vec<String> {
        let mut v: Vec<_> = self.records.keys().cloned().collect();
        v.sort();
        v
    }

    /// The current listing of a pod.
    pub fn current(&self, uid: &str) -> Option<&RuntimePod> {
        self.records.get(uid).and_then(PodRecord::current)
    }

    /// The committed listing of a pod.
    pub fn old(&self, uid: &str) -> Option<&RuntimePod> {
        self.records.get(uid).and_then(|r| r.old.as_ref())
    }

    /// The pod's name and namespace from whichever listing has them.
    pub fn pod_name(&self, uid: &str) -> (String, String) {
        let r = self.records.get(uid);
        let p = r.and_then(|r| r.current().or(r.old.as_ref()));
        p.map(|p| (p.namespace.clone(), p.name.clone())).unwrap_or_default()
    }

    /// The transitions of a pod since its last commit, ordered so that a pod reads
    /// naturally: sandbox starts, then container changes, then sandbox deaths.
    pub fn transitions(&self, uid: &str) -> Vec<Transition> {
        let Some(rec) = self.records.get(uid) else { return Vec::new() };
        transitions_of(rec)
    }

    /// The pods with transitions, or in `also`, sorted, with their transitions. An
    /// unchanged pod costs one comparison and no allocation.
    pub fn changed(&self, also: &std::collections::HashSet<String>) -> BTreeMap<String, Vec<Transition>> {
        self.records
            .iter()
            .filter(|(uid, rec)| rec.old.as_ref() != rec.current() || also.contains(*uid))
            .map(|(uid, rec)| (uid.clone(), transitions_of(rec)))
            .collect()
    }
}

fn transitions_of(rec: &PodRecord) -> Vec<Transition> {
    transitions_between(rec.old.as_ref(), rec.current())
}

/// The kubelet's table applied to every container and sandbox of `old` and `cur`.
fn transitions_between(old: Option<&RuntimePod>, cur: Option<&RuntimePod>) -> Vec<Transition> {
    if old == cur {
        return Vec::new();
    }
    let mut seen = HashSet::new();
    let mut transitions = Vec::new();
    let all = cur.into_iter().chain(old);
    let entries = all
        .clone()
        .flat_map(|p| p.containers.iter().map(|c| (c, false)))
        .chain(all.flat_map(|p| p.sandboxes.iter().map(|c| (c, true))));
    for (c, is_sandbox) in entries {
        if !seen.insert(c.id.as_str()) {
            continue;
        }
        let before = old.map_or(PlegState::NonExistent, |p| p.state_of(&c.id));
        let now = cur.map_or(PlegState::NonExistent, |p| p.state_of(&c.id));
        for &kind in transition_events(before, now) {
            transitions.push(Transition { id: c.id.clone(), name: c.name.clone(), is_sandbox, kind });
        }
    }
    in_story_order(transitions)
}

/// `transitions` ordered so that a pod reads naturally: sandbox starts, then container
/// changes, then sandbox deaths and removals; each kind keeps its order (per object,
/// the kubelet's: Died before Removed).
pub fn in_story_order(mut transitions: Vec<Transition>) -> Vec<Transition> {
    transitions.sort_by_key(|t| match (t.is_sandbox, t.kind) {
        (false, _) => 1,
        (true, EventType::ContainerStarted | EventType::ContainerChanged) => 0,
        (true, _) => 2,
    });
    transitions
}

impl PodRecords {
    /// Commits a pod after a successful inspection: `old = current`; a pod that is
    /// gone loses its record.
    pub fn commit(&mut self, uid: &str) {
        if let Some(rec) = self.records.get_mut(uid) {
            match std::mem::take(&mut rec.current) {
                Listed::Pod(cur) => rec.old = Some(cur),
                Listed::AsCommitted => {}
                Listed::Absent => {
                    self.records.remove(uid);
                }
            }
        }
    }

    /// What a read of the pod saw after its listing, taken as the later word: each listed
    /// sandbox and container takes the state its status was read in, and a container the
    /// read found removed (NotFound: left out of the status) is no longer listed. A
    /// sandbox read NotFound while listed stays as listed (as `deleted_sandboxes` holds
    /// it: the runtime answers NotFound for a sandbox whose record it lost while it still
    /// lists it); a pod `status` says nothing of (`None`: every object read NotFound) is
    /// gone. The record then commits what the events carry — the status — so a restart
    /// seeded from the journal's view diffs against what was committed. Returns the
    /// transitions from the listing to the read (a container that exited between the two
    /// dies now, not at the next read).
    pub fn observe(&mut self, uid: &str, status: Option<&crate::model::PodStatus>) -> Vec<Transition> {
        let Some(rec) = self.records.get_mut(uid) else { return Vec::new() };
        let (read, transitions) = {
            let Some(listed) = rec.current() else { return Vec::new() };
            let read = match status {
                Some(status) if listed.agrees_with(status) => return Vec::new(),
                Some(status) => Some(listed.as_read(status)),
                None => None,
            };
            let transitions = transitions_between(Some(listed), read.as_ref());
            (read, transitions)
        };
        rec.set_current(read);
        transitions
    }

    /// Sandbox ids the records know for a pod (committed or current).
    pub fn sandbox_ids(&self, uid: &str) -> std::collections::BTreeSet<String> {
        let Some(r) = self.records.get(uid) else { return Default::default() };
        r.old.iter().chain(r.current()).flat_map(|p| p.sandboxes.iter().map(|s| s.id.clone())).collect()
    }

    /// Container ids of the pod, committed or listed.
    pub fn container_ids(&self, uid: &str) -> std::collections::BTreeSet<String> {
        let Some(r) = self.records.get(uid) else { return Default::default() };
        r.old.iter().chain(r.current()).flat_map(|p| p.containers.iter().map(|c| c.id.clone())).collect()
    }

    /// The pod that has (or had) a container or sandbox with this id.
    pub fn uid_of(&self, id: &str) -> Option<String> {
        self.records.iter().find_map(|(uid, r)| {
            let has = |p: &RuntimePod| p.containers.iter().chain(&p.sandboxes).any(|c| c.id == id);
            (r.old.as_ref().is_some_and(has) || r.current().is_some_and(has)).then(|| uid.clone())
        })
    }

    /// Number of records.
    pub fn len(&self) -> usize {
        self.records.len()
    }

    /// Whether there are no records.
    pub fn is_empty(&self) -> bool {
        self.records.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sandbox(id: &str, uid: &str, ready: bool, created: i64) -> cri::PodSandbox {
        cri::PodSandbox {
            id: id.into(),
            metadata: Some(cri::PodSandboxMetadata {
                name: "p".into(),
                uid: uid.into(),
                namespace: "ns".into(),
                attempt: 0,
            }),
            state: if ready { 0 } else { 1 },
            created_at: created,
            ..Default::default()
        }
    }

    fn container(id: &str, sandbox: &str, name: &str, state: cri::ContainerState, created: i64) -> cri::Container {
        cri::Container {
            id: id.into(),
            pod_sandbox_id: sandbox.into(),
            metadata: Some(cri::ContainerMetadata { name: name.into(), attempt: 0 }),
            state: state as i32,
            created_at: created,
            ..Default::default()
        }
    }

    #[test]
    fn groups_containers_by_sandbox_and_falls_back_to_the_uid_label() {
        let mut orphan = container("c3", "gone", "x", cri::ContainerState::ContainerExited, 3);
        orphan.labels.insert(POD_UID.into(), "u2".into());
        let stray = container("c4", "gone", "y", cri::ContainerState::ContainerExited, 4);
        let pods = group_pods(
            vec![sandbox("s1", "u1", true, 1)],
            vec![
                container("c1", "s1", "a", cri::ContainerState::ContainerRunning, 1),
                container("c2", "s1", "a", cri::ContainerState::ContainerRunning, 2),
                orphan,
                stray,
            ],
        );
        assert_eq!(pods.len(), 2);
        let ids: Vec<_> = pods["u1"].containers.iter().map(|c| c.id.as_str()).collect();
        assert_eq!(ids, ["c2", "c1"], "newest first");
        assert_eq!(pods["u2"].containers[0].id, "c3");
    }

    #[test]
    fn a_vanished_running_container_gives_died_then_removed_and_sandbox_events_frame_the_pod() {
        let mut recs = PodRecords::default();
        let listing =
            |state| group_pods(vec![sandbox("s1", "u1", true, 1)], vec![container("c1", "s1", "a", state, 1)]);
        recs.set_current(listing(cri::ContainerState::ContainerRunning));
        let kinds: Vec<_> = recs.transitions("u1").into_iter().map(|t| (t.id, t.kind)).collect();
        assert_eq!(kinds, [("s1".into(), EventType::ContainerStarted), ("c1".into(), EventType::ContainerStarted)]);
        recs.commit("u1");
        recs.set_current(BTreeMap::new());
        let kinds: Vec<_> = recs.transitions("u1").into_iter().map(|t| (t.id, t.kind)).collect();
        assert_eq!(
            kinds,
            [
                ("c1".into(), EventType::ContainerDied),
                ("c1".into(), EventType::ContainerRemoved),
                ("s1".into(), EventType::ContainerDied),
                ("s1".into(), EventType::ContainerRemoved),
            ]
        );
        recs.commit("u1");
        assert!(recs.is_empty());
    }

    #[test]
    fn an_uncommitted_pod_keeps_its_transitions() {
        let mut recs = PodRecords::default();
        recs.set_current(group_pods(vec![sandbox("s1", "u1", true, 1)], vec![]));
        assert_eq!(recs.transitions("u1").len(), 1);
        recs.set_current(group_pods(vec![sandbox("s1", "u1", true, 1)], vec![]));
        assert_eq!(recs.transitions("u1").len(), 1, "not committed: the change is still pending");
    }

    #[test]
    fn a_listing_equal_to_the_committed_state_is_held_once_and_reads_as_before() {
        let mut recs = PodRecords::default();
        let ready = || group_pods(vec![sandbox("s1", "u1", true, 1)], vec![]);
        recs.set_current(ready());
        recs.commit("u1");
        recs.set_current(ready());
        let rec = &recs.records["u1"];
        assert!(matches!(rec.current, Listed::AsCommitted), "held once");
        assert!(recs.current("u1").is_some() && recs.current("u1") == recs.old("u1"));
        assert!(recs.transitions("u1").is_empty() && recs.changed(&Default::default()).is_empty());
        assert_eq!(recs.sandbox_ids("u1").len(), 1);
        recs.commit("u1");
        assert_eq!(recs.old("u1"), ready().get("u1"), "a commit of the same listing keeps it");
        // A change is held as itself, and an absence is an absence.
        recs.set_current(group_pods(vec![sandbox("s1", "u1", false, 1)], vec![]));
        assert!(matches!(recs.records["u1"].current, Listed::Pod(_)));
        assert_eq!(recs.transitions("u1").len(), 1);
        recs.set_current(BTreeMap::new());
        assert!(recs.current("u1").is_none() && recs.transitions("u1").len() == 2);
        recs.commit("u1");
        assert!(recs.is_empty());
    }
}

//! Who a pod is, as the API says it (`PodIdentity`): its node, its controllers, its QoS
//! class, its addresses, and where that came from. Without the kubelet's word every
//! part is inferred from what the node holds: the node's name as plegd was given it,
//! the controllers from the names and labels they give their pods ([`super::workload`]),
//! the QoS class from the cgroup the kubelet placed the pod in, the addresses from the
//! runtime's sandbox status.
//!
//! [`Identities`] is the one holder of what the kubelet said: every surface that serves
//! a pod asks it, so the API, the Watch encoding and the records say the same.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, RwLock};
use std::time::{Duration, SystemTime};

use super::PodStatus;
use super::workload::{self, Owner};
use crate::labels::shared;
use crate::proto::plegd as api;

/// The QoS class the kubelet's cgroup layout names for a container's cgroup path:
/// `kubepods-burstable-pod<uid>.slice` or `/kubepods/burstable/pod<uid>` (Burstable),
/// the same with `besteffort` (BestEffort), and a pod's cgroup directly under
/// `kubepods` (Guaranteed). `None` for a cgroup the kubelet did not make.
pub fn qos_class(cgroup_path: &str) -> Option<&'static str> {
    let under = |class: &str| {
        cgroup_path.contains(&format!("kubepods-{class}-pod")) || cgroup_path.contains(&format!("kubepods/{class}/pod"))
    };
    if under("burstable") {
        Some("Burstable")
    } else if under("besteffort") {
        Some("BestEffort")
    } else if cgroup_path.contains("kubepods-pod") || cgroup_path.contains("kubepods/pod") {
        Some("Guaranteed")
    } else {
        None
    }
}

fn reference(o: &Owner) -> api::WorkloadRef {
    api::WorkloadRef { kind: o.kind.name().into(), name: o.name.clone(), uid: String::new() }
}

impl PodStatus {
    /// The pod's identity as plegd infers it, on node `node`.
    pub fn inferred_identity(&self, node: &str) -> api::PodIdentity {
        let owners = workload::infer(&self.name, &self.labels, self.made_at());
        let qos = self
            .containers
            .iter()
            .filter_map(|c| c.process.as_ref())
            .find_map(|p| qos_class(&p.cgroup_path))
            .unwrap_or_default();
        api::PodIdentity {
            node_name: node.into(),
            controller: owners.as_ref().map(|w| reference(&w.controller)),
            workload: owners.as_ref().map(|w| reference(&w.workload)),
            qos_class: qos.into(),
            pod_ips: self.ips.clone(),
            source: api::IdentitySource::Inferred as i32,
            ..Default::default()
        }
    }
}

/// Pods the kubelet's word is kept for at most: running ones always (a node runs a few
/// hundred at most), gone ones while within this.
pub const MAX_KUBELET_PODS: usize = 10_000;

/// How long after the kubelet says a pod is gone its identity outlives the retention:
/// the runtime removes the containers after that, and their tombstones count from then.
pub const GONE_SLACK: Duration = Duration::from_secs(600);

/// Where the kubelet's word stands, as `/readyz` says it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum KubeletSource {
    /// Not asked (`--kubelet-pods-socket ""`).
    Off,
    /// Not heard (yet, or any more): why.
    Waiting(String),
    /// Watching: every pod the kubelet runs is known.
    Up,
}

/// What the kubelet said of one pod, kept while it runs and as long as its tombstones
/// after. What pods share is held once for all that say the same ([`Identities`]
/// interns it): a node's pods share one placement and a few controllers, so a pod costs
/// little more than its own addresses.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct KubeletPod {
    placement: Arc<Placement>,
    /// `None`: no controller.
    owners: Option<Arc<Owners>>,
    pod_ips: Box<[Box<str>]>,
}

/// Where and how a pod runs, the part of its identity a node's pods share.
#[derive(Debug, PartialEq, Eq, Hash)]
struct Placement {
    node_name: Box<str>,
    qos_class: Box<str>,
    priority: i32,
    priority_class_name: Box<str>,
    service_account: Box<str>,
    runtime_class: Box<str>,
    host_ips: Box<[Box<str>]>,
    /// `spec.hostNetwork`: the pod's addresses are the node's.
    host_network: bool,
}

/// A pod's controller and the workload at the top of its chain, shared by the pods of
/// one controller.
#[derive(Debug, PartialEq, Eq, Hash)]
struct Owners {
    controller: Option<Owned>,
    workload: Option<Owned>,
}

/// One owner, as an [`api::WorkloadRef`] names it.
#[derive(Debug, PartialEq, Eq, Hash)]
struct Owned {
    kind: Box<str>,
    name: Box<str>,
    uid: Box<str>,
}

impl Owned {
    fn of(r: api::WorkloadRef) -> Self {
        Self { kind: r.kind.into(), name: r.name.into(), uid: r.uid.into() }
    }

    fn reference(&self) -> api::WorkloadRef {
        api::WorkloadRef { kind: self.kind.to_string(), name: self.name.to_string(), uid: self.uid.to_string() }
    }
}

fn boxed(v: Vec<String>) -> Box<[Box<str>]> {
    v.into_iter().map(String::into_boxed_str).collect()
}

impl KubeletPod {
    /// The kubelet's word `identity` (its source is always `PODS_API`) of a pod whose
    /// network is the host's (`host_network`) or its own.
    pub fn new(identity: api::PodIdentity, host_network: bool) -> Self {
        let api::PodIdentity {
            node_name,
            controller,
            workload,
            qos_class,
            priority,
            priority_class_name,
            service_account,
            runtime_class,
            pod_ips,
            host_ips,
            source: _,
        } = identity;
        let owners = (controller.is_some() || workload.is_some())
            .then(|| Arc::new(Owners { controller: controller.map(Owned::of), workload: workload.map(Owned::of) }));
        let placement = Placement {
            node_name: node_name.into(),
            qos_class: qos_class.into(),
            priority,
            priority_class_name: priority_class_name.into(),
            service_account: service_account.into(),
            runtime_class: runtime_class.into(),
            host_ips: boxed(host_ips),
            host_network,
        };
        Self { placement: Arc::new(placement), owners, pod_ips: boxed(pod_ips) }
    }

    /// The pod's identity as the API serves it (`source: PODS_API`).
    pub fn identity(&self) -> api::PodIdentity {
        let p = &*self.placement;
        let strings = |v: &[Box<str>]| v.iter().map(|s| s.to_string()).collect();
        api::PodIdentity {
            node_name: p.node_name.to_string(),
            controller: self.owners.as_ref().and_then(|o| o.controller.as_ref()).map(Owned::reference),
            workload: self.owners.as_ref().and_then(|o| o.workload.as_ref()).map(Owned::reference),
            qos_class: p.qos_class.to_string(),
            priority: p.priority,
            priority_class_name: p.priority_class_name.to_string(),
            service_account: p.service_account.to_string(),
            runtime_class: p.runtime_class.to_string(),
            pod_ips: strings(&self.pod_ips),
            host_ips: strings(&p.host_ips),
            source: api::IdentitySource::PodsApi as i32,
        }
    }

    /// `spec.hostNetwork`: the pod's addresses are the node's.
    pub fn host_network(&self) -> bool {
        self.placement.host_network
    }

    /// `spec.nodeName`.
    pub fn node_name(&self) -> &str {
        &self.placement.node_name
    }

    /// This word with the workload `held` names above the same controller: for a word
    /// whose creation time was a guess ([`KubeletWord::made_guessed`]: a static pod whose
    /// sandbox plegd has not read yet, as at its start), whose Job's CronJob would be
    /// found from now. Another controller: this word as it is.
    pub fn with_workload_of(mut self, held: &KubeletPod) -> Self {
        fn controller(p: &KubeletPod) -> Option<&Owned> {
            p.owners.as_deref()?.controller.as_ref()
        }
        if controller(&self).is_some() && controller(&self) == controller(held) {
            self.owners = held.owners.clone();
        }
        self
    }

    /// The pod's controller, then the workload at the top of its chain, as (kind, name).
    pub fn owners(&self) -> impl Iterator<Item = (&str, &str)> {
        let o = self.owners.as_deref();
        [o.and_then(|o| o.controller.as_ref()), o.and_then(|o| o.workload.as_ref())]
            .into_iter()
            .flatten()
            .map(|r| (&*r.kind, &*r.name))
    }
}

/// The parts of [`KubeletPod`]s held once for every pod that says the same.
#[derive(Debug, Default)]
struct Interned {
    placements: HashSet<Arc<Placement>>,
    owners: HashSet<Arc<Owners>>,
}

impl Interned {
    /// `pod`, its shared parts the ones already held where equal.
    fn intern(&mut self, mut pod: KubeletPod) -> KubeletPod {
        fn one<T: Eq + std::hash::Hash>(set: &mut HashSet<Arc<T>>, value: &mut Arc<T>) {
            match set.get(&**value) {
                Some(held) => *value = held.clone(),
                None => {
                    set.insert(value.clone());
                }
            }
        }
        one(&mut self.placements, &mut pod.placement);
        if let Some(owners) = &mut pod.owners {
            one(&mut self.owners, owners);
        }
        pod
    }

    /// Forgets the parts no pod holds any more.
    fn forget_unused(&mut self) {
        self.placements.retain(|p| Arc::strong_count(p) > 1);
        self.owners.retain(|o| Arc::strong_count(o) > 1);
    }
}

/// A pod as the kubelet's Pods API sends it, reduced to whose it is.
#[derive(Clone, Debug, PartialEq)]
pub struct KubeletWord {
    /// `metadata.uid`.
    pub uid: String,
    /// `metadata.namespace`.
    pub namespace: String,
    /// `metadata.name`.
    pub name: String,
    /// The rest, as plegd keeps it.
    pub pod: KubeletPod,
    /// The kubelet sent no creation time and the node knew none: the workload above the
    /// controller was found from now ([`KubeletPod::with_workload_of`] keeps the one held).
    pub made_guessed: bool,
}

/// The kubelet's pod bytes would not decode as a pod.
#[derive(Debug, thiserror::Error)]
pub enum KubeletWordError {
    /// Not a protobuf `v1.Pod`.
    #[error("the kubelet's pod does not decode: {0}")]
    Decode(#[from] prost::DecodeError),
    /// No uid.
    #[error("the kubelet's pod has no uid")]
    NoUid,
}

impl KubeletWord {
    /// Decodes a `v1.Pod` the kubelet sent, keeping only whose it is: every other field
    /// (containers, environment values, volumes, …) is skipped unread.
    pub fn decode(bytes: &[u8]) -> Result<Self, KubeletWordError> {
        Self::decode_made(bytes, |_| None)
    }

    /// [`Self::decode`], asking `made_if_unset` when the pod was made, by its uid, where
    /// the kubelet sends no creation time (a static pod): the node's word for it (its
    /// sandbox's creation) is steadier than now, so a Job's CronJob is found alike in
    /// every replay, however long after the pod's start.
    pub fn decode_made(
        bytes: &[u8],
        made_if_unset: impl FnOnce(&str) -> Option<SystemTime>,
    ) -> Result<Self, KubeletWordError> {
        use crate::proto::pod_view;
        let pod = <pod_view::Pod as prost::Message>::decode(bytes)?;
        let meta = pod.metadata.unwrap_or_default();
        let uid = meta.uid.clone().filter(|u| !u.is_empty()).ok_or(KubeletWordError::NoUid)?;
        let spec = pod.spec.unwrap_or_default();
        let status = pod.status.unwrap_or_default();
        let labels: crate::labels::Labels = meta.labels.iter().map(|(k, v)| (k.clone(), v.clone())).collect();
        // A static pod (the kubelet's own, from a manifest file) has no creation time:
        // its bytes carry a zero Time, which is "unknown", not 1970.
        let made = meta
            .creation_timestamp
            .filter(|t| t.seconds() > 0)
            .map(|t| std::time::UNIX_EPOCH + Duration::from_secs(t.seconds() as u64))
            .or_else(|| made_if_unset(&uid));
        let made_guessed = made.is_none();
        let made = made.unwrap_or_else(SystemTime::now);
        let controller = meta.owner_references.iter().find(|o| o.controller()).map(|o| api::WorkloadRef {
            kind: o.kind().into(),
            name: o.name().into(),
            uid: o.uid().into(),
        });
        let workload = controller.as_ref().map(|c| match workload::above(&c.kind, &c.name, &labels, made) {
            Some(top) => reference(&top),
            None => c.clone(),
        });
        let ips = |v: &[pod_view::PodIp]| v.iter().map(|i| i.ip().to_owned()).filter(|i| !i.is_empty()).collect();
        // The kubelet names a host-network pod's addresses as the node's; the pod holds
        // none of its own (a consumer mapping addresses to pods, as k8sattributes does,
        // must never map the node's to it), and the node's are in `host_ips`.
        let pod_ips = if spec.host_network() { Vec::new() } else { ips(&status.pod_i_ps) };
        let identity = api::PodIdentity {
            node_name: spec.node_name().into(),
            controller,
            workload,
            qos_class: status.qos_class().into(),
            priority: spec.priority(),
            priority_class_name: spec.priority_class_name().into(),
            service_account: spec.service_account_name().into(),
            runtime_class: spec.runtime_class_name().into(),
            pod_ips,
            host_ips: ips(&status.host_i_ps),
            source: api::IdentitySource::PodsApi as i32,
        };
        Ok(Self {
            uid,
            namespace: meta.namespace().into(),
            name: meta.name().into(),
            pod: KubeletPod::new(identity, spec.host_network()),
            made_guessed,
        })
    }
}

/// A pod's kubelet word as it is kept across plegd's restarts (the state dir's
/// `kubelet-pods.pb`): what [`Identities::kept`] gives and [`Identities::restore`] takes.
#[derive(Clone, Debug, PartialEq)]
pub struct KeptPod {
    /// `metadata.uid`.
    pub uid: String,
    /// What the kubelet said.
    pub pod: Arc<KubeletPod>,
    /// When the kubelet said it is gone; `None`: running when last heard.
    pub gone_at: Option<SystemTime>,
    /// Running when a run of plegd before this one last heard, and not heard since this
    /// was restored: since when.
    pub restored_at: Option<SystemTime>,
}

/// Everything [`Identities`] holds of the kubelet's word, as it is kept across restarts.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct KeptBook {
    /// The node's name as the kubelet said it.
    pub node: Option<String>,
    /// Every pod the kubelet's word is held for, gone ones included.
    pub pods: Vec<KeptPod>,
}

#[derive(Debug)]
struct Known {
    pod: Arc<KubeletPod>,
    /// When the kubelet said it is gone.
    gone_at: Option<SystemTime>,
    /// Running as an earlier run of plegd last heard, taken back at this start and not
    /// said again since: when. Forgotten as a gone pod is, unless the kubelet names it.
    restored_at: Option<SystemTime>,
}

#[derive(Debug)]
struct Book {
    /// By uid (the one copy events and labels share).
    pods: HashMap<Arc<str>, Known>,
    interned: Interned,
    /// The node name the kubelet's pods say (`spec.nodeName`), which wins over the flag.
    node: Option<String>,
    source: KubeletSource,
}

/// Every pod's identity: the kubelet's word where it gave one, inferred otherwise. Cheap
/// to share (`Arc`); the kubelet's watcher is its only writer.
#[derive(Debug)]
pub struct Identities {
    /// `--node-name`.
    flag_node: String,
    book: RwLock<Book>,
    /// How long a gone pod's identity is kept (the tombstones' retention).
    keep_gone: Duration,
    /// Moves by one at every change of what is held (so a keeper writes only changes).
    changes: AtomicU64,
}

impl Identities {
    /// No kubelet word yet, on node `node` (`--node-name`); a gone pod's identity is kept
    /// `keep_gone`.
    pub fn new(node: &str, keep_gone: Duration) -> Self {
        let book = Book { pods: HashMap::new(), interned: Interned::default(), node: None, source: KubeletSource::Off };
        Self { flag_node: node.to_owned(), book: RwLock::new(book), keep_gone, changes: AtomicU64::new(0) }
    }

    fn read(&self) -> std::sync::RwLockReadGuard<'_, Book> {
        self.book.read().unwrap_or_else(|e| e.into_inner())
    }

    fn write(&self) -> std::sync::RwLockWriteGuard<'_, Book> {
        self.book.write().unwrap_or_else(|e| e.into_inner())
    }

    fn changed(&self) {
        self.changes.fetch_add(1, Ordering::Release);
    }

    /// A number that moves at every change of what is held.
    pub fn changes(&self) -> u64 {
        self.changes.load(Ordering::Acquire)
    }

    /// Everything held of the kubelet's word, to keep across a restart.
    pub fn kept(&self) -> KeptBook {
        let book = self.read();
        let mut pods: Vec<KeptPod> = book
            .pods
            .iter()
            .map(|(uid, k)| KeptPod {
                uid: uid.to_string(),
                pod: k.pod.clone(),
                gone_at: k.gone_at,
                restored_at: k.restored_at,
            })
            .collect();
        pods.sort_by(|a, b| a.uid.cmp(&b.uid));
        KeptBook { node: book.node.clone(), pods }
    }

    /// Takes back what an earlier run of plegd held, at `now` (the last heard, until the
    /// kubelet's watch replays): a pod held already is not replaced. A pod running when
    /// last heard that no replay names again (the kubelet never came back) is forgotten
    /// as a gone pod is, counted from now.
    pub fn restore(&self, kept: KeptBook, now: SystemTime) {
        let keys: Vec<Arc<str>> = kept.pods.iter().map(|p| shared(&p.uid)).collect();
        let mut book = self.write();
        if book.node.is_none() {
            book.node = kept.node;
        }
        for (key, KeptPod { pod, gone_at, restored_at, .. }) in keys.into_iter().zip(kept.pods) {
            if book.pods.contains_key(&key) {
                continue;
            }
            let restored_at = restored_at.or(gone_at.is_none().then_some(now));
            let pod = Arc::new(book.interned.intern(Arc::unwrap_or_clone(pod)));
            book.pods.insert(key, Known { pod, gone_at, restored_at });
        }
        drop(book);
        self.changed();
    }

    /// The node's name: the kubelet's where it said it, else `--node-name`.
    pub fn node(&self) -> String {
        self.read().node.clone().unwrap_or_else(|| self.flag_node.clone())
    }

    /// Pod `pod`'s identity: the kubelet's (its addresses too: a finished pod's are
    /// released, and the kubelet says none), else inferred.
    pub fn of(&self, pod: &PodStatus) -> api::PodIdentity {
        let book = self.read();
        match book.pods.get(&*pod.uid) {
            Some(k) => {
                let mut id = k.pod.identity();
                if id.qos_class.is_empty() {
                    id.qos_class = pod.inferred_identity("").qos_class;
                }
                id
            }
            None => pod.inferred_identity(book.node.as_deref().unwrap_or(&self.flag_node)),
        }
    }

    /// What the kubelet said of pod `uid`, gone or not.
    pub fn kubelet_pod(&self, uid: &str) -> Option<Arc<KubeletPod>> {
        self.read().pods.get(uid).map(|k| k.pod.clone())
    }

    /// Where the kubelet's word stands.
    pub fn source(&self) -> KubeletSource {
        self.read().source.clone()
    }

    /// The kubelet's word stands as `source`.
    pub fn set_source(&self, source: KubeletSource) {
        self.write().source = source;
    }

    /// The kubelet says pod `uid` is `pod`; whether that changed its identity.
    pub fn said(&self, uid: &str, pod: KubeletPod) -> bool {
        // The one copy of the uid, taken before the book's lock: the interner is the
        // relister's too.
        let key = shared(uid);
        let mut book = self.write();
        let mut moved = false;
        if !pod.node_name().is_empty() && book.node.as_deref() != Some(pod.node_name()) {
            book.node = Some(pod.node_name().to_owned());
            moved = true;
        }
        let updated = match book.pods.get_mut(uid) {
            Some(k) if *k.pod == pod => {
                moved |= k.gone_at.take().is_some();
                k.restored_at = None;
                false
            }
            _ => {
                let pod = Arc::new(book.interned.intern(pod));
                book.pods.insert(key, Known { pod, gone_at: None, restored_at: None });
                true
            }
        };
        drop(book);
        if moved || updated {
            self.changed();
        }
        updated
    }

    /// The kubelet says pod `uid` is gone, at `at`: its identity is kept for its
    /// tombstones.
    pub fn gone(&self, uid: &str, at: SystemTime) {
        let newly = match self.write().pods.get_mut(uid) {
            Some(k) if k.gone_at.is_none() => {
                k.gone_at = Some(at);
                true
            }
            _ => false,
        };
        if newly {
            self.changed();
        }
    }

    /// A replay ended having named `seen`: every other pod is gone (deleted while the
    /// watch was away), at `at`. The uids newly gone.
    pub fn replayed(&self, seen: &HashSet<String>, at: SystemTime) -> Vec<String> {
        let mut book = self.write();
        let mut newly = Vec::new();
        for (uid, k) in book.pods.iter_mut() {
            if k.gone_at.is_none() && !seen.contains(&**uid) {
                k.gone_at = Some(at);
                newly.push(uid.to_string());
            }
        }
        drop(book);
        if !newly.is_empty() {
            self.changed();
        }
        newly
    }

    /// Forgets the pods gone longer than their tombstones are kept, as of `now`: the
    /// retention, from the kubelet's word, with [`GONE_SLACK`] for the runtime to remove
    /// the containers after it; and the longest gone past [`MAX_KUBELET_PODS`].
    pub fn prune(&self, now: SystemTime) {
        let keep = self.keep_gone + GONE_SLACK;
        let mut book = self.write();
        let held = book.pods.len();
        let recent = |t: SystemTime| now.duration_since(t).unwrap_or_default() < keep;
        book.pods.retain(|_, k| k.gone_at.or(k.restored_at).is_none_or(recent));
        let over = book.pods.len().saturating_sub(MAX_KUBELET_PODS);
        if over > 0 {
            let mut gone: Vec<(SystemTime, Arc<str>)> =
                book.pods.iter().filter_map(|(uid, k)| Some((k.gone_at?, uid.clone()))).collect();
            gone.sort();
            for (_, uid) in gone.into_iter().take(over) {
                book.pods.remove(&uid);
            }
        }
        let forgot = book.pods.len() != held;
        book.interned.forget_unused();
        drop(book);
        if forgot {
            self.changed();
        }
    }

    /// Whether the kubelet named pod `uid` and has not said it is gone.
    pub fn running(&self, uid: &str) -> bool {
        self.read().pods.get(uid).is_some_and(|k| k.gone_at.is_none())
    }

    /// Pods the kubelet's word is held for, gone ones included.
    pub fn len(&self) -> usize {
        self.read().pods.len()
    }

    /// Whether no kubelet word is held.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::model::{ContainerStatus, Process};

    #[test]
    fn the_qos_class_is_the_one_the_kubelets_cgroup_layout_names() {
        let cases = [
            ("kubepods-burstable-pod1a_2b.slice:cri-containerd:abc", Some("Burstable")),
            ("kubepods-besteffort-pod1a_2b.slice:cri-containerd:abc", Some("BestEffort")),
            ("kubepods-pod1a_2b.slice:cri-containerd:abc", Some("Guaranteed")),
            ("/kubepods/burstable/pod1a-2b/abc", Some("Burstable")),
            ("/kubepods/besteffort/pod1a-2b/abc", Some("BestEffort")),
            ("/kubepods/pod1a-2b/abc", Some("Guaranteed")),
            (
                "/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod1a.slice/cri-containerd-abc.scope",
                Some("Burstable"),
            ),
            ("/kubepods.slice/kubepods-pod1a.slice/cri-containerd-abc.scope", Some("Guaranteed")),
            ("system.slice:cri-containerd:abc", None),
            ("", None),
        ];
        for (path, want) in cases {
            assert_eq!(qos_class(path), want, "{path}");
        }
    }

    #[test]
    fn an_inferred_identity_names_the_node_the_workload_the_class_and_the_addresses() {
        let mut pod = PodStatus::empty("u1", "shop", "web-5f7b9c6d48-q2xkz");
        pod.labels = [("pod-template-hash", "5f7b9c6d48")].into();
        pod.ips = vec!["10.244.0.7".into()];
        let process =
            Process { cgroup_path: "kubepods-burstable-podu1.slice:cri-containerd:c1".into(), ..Default::default() };
        pod.containers =
            vec![Arc::new(ContainerStatus { id: "c1".into(), process: Some(process), ..Default::default() })];
        let id = pod.inferred_identity("node-a");
        assert_eq!(id.node_name, "node-a");
        assert_eq!(
            id.controller.as_ref().map(|c| (c.kind.as_str(), c.name.as_str())),
            Some(("ReplicaSet", "web-5f7b9c6d48"))
        );
        assert_eq!(id.workload.as_ref().map(|c| (c.kind.as_str(), c.name.as_str())), Some(("Deployment", "web")));
        assert_eq!(id.qos_class, "Burstable");
        assert_eq!(id.pod_ips, ["10.244.0.7"]);
        assert_eq!(id.source, api::IdentitySource::Inferred as i32);
        // A bare pod: no controller, nothing made up.
        let bare = PodStatus::empty("u2", "shop", "debug").inferred_identity("node-a");
        assert!(bare.controller.is_none() && bare.workload.is_none() && bare.qos_class.is_empty());
        assert_eq!(bare.source, api::IdentitySource::Inferred as i32);
    }

    fn written(uid: &str, owner: Option<(&str, &str)>, ips: &[&str], secret: &str) -> Vec<u8> {
        use crate::proto::pod_view as v;
        let pod = v::WrittenPod {
            metadata: Some(v::ObjectMeta {
                name: Some("web-5f7b9c6d48-q2xkz".into()),
                namespace: Some("shop".into()),
                uid: (!uid.is_empty()).then(|| uid.into()),
                labels: [("pod-template-hash".to_string(), "5f7b9c6d48".to_string())].into(),
                owner_references: owner
                    .map(|(kind, name)| v::OwnerReference {
                        kind: Some(kind.into()),
                        name: Some(name.into()),
                        controller: Some(true),
                        ..Default::default()
                    })
                    .into_iter()
                    .collect(),
                ..Default::default()
            }),
            spec: Some(v::WrittenPodSpec {
                containers: vec![v::WrittenContainer {
                    name: Some("app".into()),
                    env: vec![v::EnvVar { name: Some("TOKEN".into()), value: Some(secret.into()) }],
                }],
                node_name: Some("node-k".into()),
                ..Default::default()
            }),
            status: Some(v::PodStatus {
                pod_i_ps: ips.iter().map(|i| v::PodIp { ip: Some((*i).into()) }).collect(),
                ..Default::default()
            }),
        };
        prost::Message::encode_to_vec(&pod)
    }

    #[test]
    fn the_kubelets_pod_is_read_for_whose_it_is_and_its_environment_is_never_decoded() {
        use crate::proto::pod_view as v;
        let bytes = written("u1", Some(("ReplicaSet", "web-5f7b9c6d48")), &["10.244.0.9"], "s3cr3t-value");
        assert!(bytes.windows(12).any(|w| w == b"s3cr3t-value"), "the bytes do hold it");
        let word = KubeletWord::decode(&bytes).unwrap();
        assert!(!format!("{word:?}").contains("s3cr3t-value"), "nothing decoded holds it");
        assert_eq!((word.uid.as_str(), word.namespace.as_str()), ("u1", "shop"));
        let id = word.pod.identity();
        assert_eq!(id.workload.as_ref().map(|w| (w.kind.as_str(), w.name.as_str())), Some(("Deployment", "web")));
        assert_eq!((id.node_name.as_str(), id.pod_ips.as_slice()), ("node-k", &["10.244.0.9".to_string()][..]));
        assert_eq!(id.source, api::IdentitySource::PodsApi as i32);
        // A Job's CronJob from the scheduled minute; a kind plegd does not know is its own top.
        let minute = SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_secs() / 60;
        let job = format!("backup-{minute}");
        let cron = KubeletWord::decode(&written("u2", Some(("Job", &job)), &[], "")).unwrap();
        assert_eq!(cron.pod.identity().workload.map(|w| (w.kind, w.name)), Some(("CronJob".into(), "backup".into())));
        // A static pod's zero creation time (the real kubelet sends one) is unknown, not
        // 1970: its CronJob is still found.
        let mut stat =
            <v::WrittenPod as prost::Message>::decode(&written("u5", Some(("Job", &job)), &[], "")[..]).unwrap();
        stat.metadata.as_mut().unwrap().creation_timestamp = Some(v::Time { seconds: Some(0), nanos: Some(0) });
        let stat = prost::Message::encode_to_vec(&stat);
        let decoded = KubeletWord::decode(&stat).unwrap();
        assert_eq!(
            decoded.pod.identity().workload.map(|w| (w.kind, w.name)),
            Some(("CronJob".into(), "backup".into()))
        );
        // Decoded with the node's time for it (its sandbox's creation) that time decides,
        // not now: from a time past the window the scheduled minute is too far behind.
        let later = SystemTime::now() + Duration::from_secs(40 * 24 * 3600);
        let made = SystemTime::now() - Duration::from_secs(60);
        let asked = std::cell::Cell::new(None);
        let replayed = KubeletWord::decode_made(&stat, |uid| {
            asked.set(Some(uid.to_owned()));
            Some(made)
        })
        .unwrap();
        assert_eq!(asked.take().as_deref(), Some("u5"));
        assert_eq!(replayed.pod, decoded.pod);
        assert!(decoded.made_guessed && !replayed.made_guessed);
        let from_later = KubeletWord::decode_made(&stat, |_| Some(later)).unwrap();
        assert_eq!(from_later.pod.identity().workload.map(|w| w.kind), Some("Job".into()), "the window holds");
        // A guess (plegd just started, the sandbox not read yet) keeps the workload held
        // above the same controller, and only the same one's.
        assert_eq!(from_later.pod.clone().with_workload_of(&decoded.pod), decoded.pod);
        let other = KubeletWord::decode(&written("u7", Some(("Job", "backup-1")), &[], "")).unwrap();
        assert_eq!(other.pod.clone().with_workload_of(&decoded.pod), other.pod, "another controller");
        let bare = KubeletWord::decode(&written("u8", None, &[], "")).unwrap();
        assert_eq!(bare.pod.clone().with_workload_of(&decoded.pod), bare.pod, "no controller");
        // A pod that carries its creation time is never asked.
        let mut dated =
            <v::WrittenPod as prost::Message>::decode(&written("u6", Some(("Job", &job)), &[], "")[..]).unwrap();
        let seconds = SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_secs() as i64;
        dated.metadata.as_mut().unwrap().creation_timestamp = Some(v::Time { seconds: Some(seconds), nanos: Some(0) });
        let dated = KubeletWord::decode_made(&prost::Message::encode_to_vec(&dated), |_| panic!("asked")).unwrap();
        assert_eq!(dated.pod.identity().workload.map(|w| w.kind), Some("CronJob".into()));
        assert!(!dated.made_guessed);
        let custom = KubeletWord::decode(&written("u3", Some(("Rollout", "canary")), &[], "")).unwrap();
        assert_eq!(custom.pod.identity().workload.map(|w| (w.kind, w.name)), Some(("Rollout".into(), "canary".into())));
        // A host-network pod: the kubelet names the node's address as the pod's; plegd
        // names it as the host's only.
        let mut host =
            <v::WrittenPod as prost::Message>::decode(&written("u4", None, &["192.168.1.10"], "")[..]).unwrap();
        let spec = host.spec.as_mut().unwrap();
        spec.host_network = Some(true);
        host.status.as_mut().unwrap().host_i_ps = vec![v::PodIp { ip: Some("192.168.1.10".into()) }];
        let host = KubeletWord::decode(&prost::Message::encode_to_vec(&host)).unwrap();
        assert!(host.pod.host_network());
        assert_eq!(host.pod.identity().pod_ips, Vec::<String>::new(), "the node's address is not the pod's");
        assert_eq!(host.pod.identity().host_ips, vec!["192.168.1.10".to_string()]);
        // Bad input: a clear error.
        assert!(matches!(KubeletWord::decode(&written("", None, &[], "")), Err(KubeletWordError::NoUid)));
        assert!(matches!(KubeletWord::decode(&[0xff, 0xff, 0xff]), Err(KubeletWordError::Decode(_))));
    }

    #[test]
    fn pods_that_say_the_same_placement_and_controller_hold_it_once_until_the_last_is_forgotten() {
        let said = |ip: &str, rs: &str| api::PodIdentity {
            node_name: "node-k".into(),
            controller: Some(api::WorkloadRef { kind: "ReplicaSet".into(), name: rs.into(), uid: format!("uid-{rs}") }),
            workload: Some(api::WorkloadRef { kind: "Deployment".into(), name: "web".into(), uid: String::new() }),
            qos_class: "Burstable".into(),
            priority: 1000,
            priority_class_name: "high".into(),
            service_account: "web".into(),
            runtime_class: "gvisor".into(),
            pod_ips: vec![ip.into(), "fd00::9".into()],
            host_ips: vec!["192.168.1.10".into()],
            source: api::IdentitySource::PodsApi as i32,
        };
        // What is held is what was said, every field; and of a pod with no controller.
        assert_eq!(KubeletPod::new(said("10.244.0.9", "web-1"), false).identity(), said("10.244.0.9", "web-1"));
        let bare = api::PodIdentity { controller: None, workload: None, ..said("10.244.0.9", "web-1") };
        assert_eq!(KubeletPod::new(bare.clone(), true).identity(), bare);
        let ids = Identities::new("n", Duration::ZERO);
        assert!(ids.said("a", KubeletPod::new(said("10.244.0.9", "web-1"), false)));
        assert!(ids.said("b", KubeletPod::new(said("10.244.0.10", "web-1"), false)));
        assert!(ids.said("c", KubeletPod::new(said("10.244.0.11", "web-2"), false)));
        assert!(!ids.said("c", KubeletPod::new(said("10.244.0.11", "web-2"), false)), "said again: no change");
        let (a, b, c) = (ids.kubelet_pod("a").unwrap(), ids.kubelet_pod("b").unwrap(), ids.kubelet_pod("c").unwrap());
        assert!(Arc::ptr_eq(&a.placement, &b.placement) && Arc::ptr_eq(&a.placement, &c.placement));
        assert!(Arc::ptr_eq(a.owners.as_ref().unwrap(), b.owners.as_ref().unwrap()));
        assert!(!Arc::ptr_eq(a.owners.as_ref().unwrap(), c.owners.as_ref().unwrap()), "another controller");
        assert_eq!(b.identity(), said("10.244.0.10", "web-1"), "each keeps its own addresses");
        drop((a, b, c));
        let held = |ids: &Identities| {
            let book = ids.read();
            (book.interned.placements.len(), book.interned.owners.len())
        };
        assert_eq!(held(&ids), (1, 2));
        let now = SystemTime::now();
        let forget = |uid: &str| {
            ids.gone(uid, now - GONE_SLACK - Duration::from_secs(1));
            ids.prune(now);
        };
        forget("c");
        assert_eq!(held(&ids), (1, 1), "web-2's pod forgotten, its controller too");
        forget("a");
        assert_eq!(held(&ids), (1, 1), "web-1's other pod still holds it");
        forget("b");
        assert!(ids.is_empty());
        assert_eq!(held(&ids), (0, 0), "nothing is held for pods forgotten");
    }

    #[derive(Clone, Debug)]
    enum Op {
        /// The kubelet says pod `.0` in version `.1` of its identity.
        Said(u8, u8),
        /// The kubelet says pod `.0` is gone.
        Gone(u8),
        /// A watch replays these pods.
        Replay(Vec<u8>),
        /// Time passes past the retention.
        Prune,
    }

    fn op() -> impl proptest::strategy::Strategy<Value = Op> {
        use proptest::prelude::*;
        prop_oneof![
            4 => (0u8..6, 0u8..3).prop_map(|(p, v)| Op::Said(p, v)),
            2 => (0u8..6).prop_map(Op::Gone),
            1 => proptest::collection::vec(0u8..6, 0..6).prop_map(Op::Replay),
            1 => Just(Op::Prune),
        ]
    }

    fn kubelet_pod(version: u8) -> KubeletPod {
        // Each part changes with the version: the placement (priority), the controller
        // (one of two), the pod's own address.
        let controller =
            api::WorkloadRef { kind: "ReplicaSet".into(), name: format!("rs-{}", version % 2), uid: String::new() };
        let identity = api::PodIdentity {
            priority: version as i32,
            controller: Some(controller),
            pod_ips: vec![format!("10.0.0.{version}")],
            source: api::IdentitySource::PodsApi as i32,
            ..Default::default()
        };
        KubeletPod::new(identity, false)
    }

    proptest::proptest! {
        /// Against a model of what the kubelet said: a change is reported exactly when a
        /// pod's identity differs from the one held; a running pod is one said and not
        /// gone since (a replay that leaves it out: gone); a gone pod's identity is kept
        /// until the retention passes, and a running one's always.
        #[test]
        fn the_book_holds_exactly_what_the_kubelet_said(ops in proptest::collection::vec(op(), 1..60)) {
            let ids = Identities::new("n", Duration::from_secs(60));
            let mut now = SystemTime::UNIX_EPOCH + Duration::from_secs(1_000_000);
            // uid -> (version, gone at)
            let mut model: HashMap<String, (u8, Option<SystemTime>)> = HashMap::new();
            for op in ops {
                now += Duration::from_secs(20);
                match op {
                    Op::Said(p, v) => {
                        let uid = format!("u{p}");
                        let changed = ids.said(&uid, kubelet_pod(v));
                        let was = model.insert(uid, (v, None));
                        proptest::prop_assert_eq!(changed, was.is_none_or(|(old, _)| old != v));
                    }
                    Op::Gone(p) => {
                        let uid = format!("u{p}");
                        ids.gone(&uid, now);
                        if let Some(m) = model.get_mut(&uid) {
                            m.1.get_or_insert(now);
                        }
                    }
                    Op::Replay(seen) => {
                        let seen: HashSet<String> = seen.iter().map(|p| format!("u{p}")).collect();
                        for s in &seen {
                            let v = model.get(s).map_or(0, |m| m.0);
                            ids.said(s, kubelet_pod(v));
                            model.insert(s.clone(), (v, None));
                        }
                        let mut newly = ids.replayed(&seen, now);
                        let mut want: Vec<String> = model
                            .iter_mut()
                            .filter(|(uid, m)| m.1.is_none() && !seen.contains(*uid))
                            .map(|(uid, m)| { m.1 = Some(now); uid.clone() })
                            .collect();
                        newly.sort();
                        want.sort();
                        proptest::prop_assert_eq!(newly, want);
                    }
                    Op::Prune => {
                        now += Duration::from_secs(450);
                        ids.prune(now);
                        let keep = Duration::from_secs(60) + GONE_SLACK;
                        model.retain(|_, m| m.1.is_none_or(|t| now.duration_since(t).unwrap() < keep));
                        // Each shared part is held once, and only while a pod holds it.
                        let versions: HashSet<u8> = model.values().map(|m| m.0).collect();
                        let controllers: HashSet<u8> = versions.iter().map(|v| v % 2).collect();
                        let book = ids.read();
                        proptest::prop_assert_eq!(book.interned.placements.len(), versions.len());
                        proptest::prop_assert_eq!(book.interned.owners.len(), controllers.len());
                    }
                }
                for p in 0..6u8 {
                    let uid = format!("u{p}");
                    let held = ids.kubelet_pod(&uid).map(|k| {
                        let id = k.identity();
                        assert_eq!(id, kubelet_pod(id.priority as u8).identity(), "every part as said");
                        id.priority as u8
                    });
                    let m = model.get(&uid);
                    proptest::prop_assert_eq!(held, m.map(|m| m.0), "{}", uid);
                    proptest::prop_assert_eq!(ids.running(&uid), m.is_some_and(|m| m.1.is_none()), "{}", uid);
                }
            }
        }
    }
}

//! Who a pod is, as the API says it (`PodIdentity`): its node, its controllers, its QoS
//! class, its addresses, and where that came from. Without the kubelet's word every
//! part is inferred from what the node holds: the node's name as plegd was given it,
//! the controllers from the names and labels they give their pods ([`super::workload`]),
//! the QoS class from the cgroup the kubelet placed the pod in, the addresses from the
//! runtime's sandbox status.
//!
//! What plegd keeps of each pod the kubelet's Pods API sends is [`kubelet_word`]'s.
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

mod kubelet_word;

use kubelet_word::Interned;
pub use kubelet_word::{KubeletPod, KubeletWord, KubeletWordError};

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

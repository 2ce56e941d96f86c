//! What plegd keeps of a pod the kubelet's Pods API sends ([`KubeletWord`]): whose it
//! is and nothing else, decoded from the whole `v1.Pod` without reading the rest (its
//! environment values included). A pod's [`KubeletPod`] holds its own addresses and two
//! parts many pods share (its placement; its controller and workload), which the book
//! ([`super::Identities`]) holds once for all pods that say the same ([`Interned`]).

use std::collections::HashSet;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use super::reference;
use crate::model::workload;
use crate::proto::plegd as api;

/// What the kubelet said of one pod, kept while it runs and as long as its tombstones
/// after. What pods share is held once for all that say the same ([`super::Identities`]
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
pub(super) struct Placement {
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
pub(super) struct Owners {
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
pub(super) struct Interned {
    pub(super) placements: HashSet<Arc<Placement>>,
    pub(super) owners: HashSet<Arc<Owners>>,
}

impl Interned {
    /// `pod`, its shared parts the ones already held where equal.
    pub(super) fn intern(&mut self, mut pod: KubeletPod) -> KubeletPod {
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
    pub(super) fn forget_unused(&mut self) {
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

#[cfg(test)]
mod tests {
    use super::super::{GONE_SLACK, Identities};
    use super::*;

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
}

//! A simulated kubelet Pods API (KEP-4188), served on a unix socket as the kubelet serves
//! it, with its faults: every call FAILED_PRECONDITION until its sources are ready; a new
//! watch replays every pod as ADDED, then INITIAL_SYNC_COMPLETE; a deletion is a pod with
//! only its name, namespace and uid; a watcher that falls behind is cut off with
//! RESOURCE_EXHAUSTED ([`SimKubelet::cut_off`] does it on demand). Pods are the protobuf
//! bytes of a `v1.Pod`, their containers' environment included.

use std::collections::BTreeMap;
use std::path::Path;
use std::pin::Pin;
use std::sync::{Arc, Mutex};

use futures_util::Stream;
use prost::Message;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use tonic::{Request, Response, Status};

use crate::cri::spec::PodSpec;
use crate::proto::kubelet_pods::pods_server::{Pods, PodsServer};
use crate::proto::kubelet_pods::{
    EventType, GetPodRequest, GetPodResponse, ListPodsRequest, ListPodsResponse, WatchPodsEvent, WatchPodsRequest,
};
use crate::proto::pod_view::{
    EnvVar, ObjectMeta, OwnerReference, PodIp, PodStatus, WrittenContainer, WrittenPod, WrittenPodSpec,
};

/// Events a watcher may have queued before it is cut off (the kubelet's is 100).
const WATCHER_BUFFER: usize = 100;

#[derive(Default)]
struct State {
    ready: bool,
    /// Pods by uid, sorted as the kubelet lists them.
    pods: BTreeMap<String, WrittenPod>,
    watchers: Vec<mpsc::Sender<Result<WatchPodsEvent, Status>>>,
}

/// The simulated kubelet's Pods API. Cheap to clone; clones share the pods.
#[derive(Clone, Default)]
pub struct SimKubelet {
    state: Arc<Mutex<State>>,
}

impl SimKubelet {
    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().expect("sim kubelet lock")
    }

    /// Serves on a new socket at `path` until `shutdown`.
    pub fn serve(&self, path: &Path, shutdown: CancellationToken) -> std::io::Result<tokio::task::JoinHandle<()>> {
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir)?;
        }
        let _ = std::fs::remove_file(path);
        Ok(self.serve_on(tokio::net::UnixListener::bind(path)?, shutdown))
    }

    /// Serves on `listener` until `shutdown`.
    pub fn serve_on(
        &self,
        listener: tokio::net::UnixListener,
        shutdown: CancellationToken,
    ) -> tokio::task::JoinHandle<()> {
        let incoming = tokio_stream::wrappers::UnixListenerStream::new(listener);
        let svc = PodsServer::new(self.clone());
        let me = self.clone();
        // A kubelet that stops ends its watches (the server waits for open streams).
        let stopped = async move {
            shutdown.cancelled().await;
            me.lock().watchers.clear();
        };
        tokio::spawn(async move {
            let _ = tonic::transport::Server::builder()
                .add_service(svc)
                .serve_with_incoming_shutdown(incoming, stopped)
                .await;
        })
    }

    /// Whether the kubelet's sources are ready (before: FAILED_PRECONDITION).
    pub fn set_ready(&self, ready: bool) {
        self.lock().ready = ready;
    }

    /// Adds or changes a pod; watchers get ADDED or MODIFIED.
    pub fn put(&self, pod: WrittenPod) {
        let uid = pod.metadata.as_ref().and_then(|m| m.uid.clone()).unwrap_or_default();
        let mut st = self.lock();
        let kind = if st.pods.contains_key(&uid) { EventType::Modified } else { EventType::Added };
        let bytes = pod.encode_to_vec();
        st.pods.insert(uid, pod);
        Self::send(&mut st, WatchPodsEvent { r#type: kind as i32, pod: bytes });
    }

    /// Deletes a pod; watchers get DELETED with its name, namespace and uid only.
    /// `quietly`: as if the deletion happened while no watch was open (no event).
    pub fn delete(&self, uid: &str, quietly: bool) {
        let mut st = self.lock();
        let Some(pod) = st.pods.remove(uid) else { return };
        if quietly {
            return;
        }
        let m = pod.metadata.unwrap_or_default();
        let minimal = WrittenPod {
            metadata: Some(ObjectMeta { name: m.name, namespace: m.namespace, uid: m.uid, ..Default::default() }),
            ..Default::default()
        };
        Self::send(&mut st, WatchPodsEvent { r#type: EventType::Deleted as i32, pod: minimal.encode_to_vec() });
    }

    /// Cuts every watcher off, as the kubelet does one that fell behind.
    pub fn cut_off(&self) {
        for w in self.lock().watchers.drain(..) {
            let _ = w.try_send(Err(Status::resource_exhausted("watch client channel closed")));
        }
    }

    /// The pods it serves now.
    pub fn pods(&self) -> Vec<WrittenPod> {
        self.lock().pods.values().cloned().collect()
    }

    /// Watches open.
    pub fn watchers(&self) -> usize {
        let mut st = self.lock();
        st.watchers.retain(|w| !w.is_closed());
        st.watchers.len()
    }

    fn send(st: &mut State, ev: WatchPodsEvent) {
        st.watchers.retain(|w| match w.try_send(Ok(ev.clone())) {
            Ok(()) => true,
            Err(mpsc::error::TrySendError::Full(_)) => {
                let _ = w.try_send(Err(Status::resource_exhausted("watch client channel closed")));
                false
            }
            Err(mpsc::error::TrySendError::Closed(_)) => false,
        });
    }

    fn ready(&self) -> Result<(), Status> {
        if self.lock().ready { Ok(()) } else { Err(Status::failed_precondition("Kubelet is initializing")) }
    }
}

/// The node the simulated kubelet names.
pub const SIM_NODE: &str = "sim-node";

/// The kubelet's pod for `spec`, run at `made` with address `ip` (empty: none): its
/// controller where the controllers' naming and labels say one
/// ([`crate::model::workload::infer`]), on [`SIM_NODE`], BestEffort, and each of
/// `containers` with an environment value (the kubelet sends the whole spec; plegd keeps
/// none of it).
pub fn pod_of(spec: &PodSpec, containers: &[&str], ip: &str, made: std::time::SystemTime) -> WrittenPod {
    let labels: crate::labels::Labels = spec.labels.iter().collect();
    let owner = crate::model::workload::infer(&spec.name, &labels, made).map(|w| OwnerReference {
        kind: Some(w.controller.kind.name().into()),
        name: Some(w.controller.name.clone()),
        uid: Some(format!("{}-{}", w.controller.kind.name().to_lowercase(), w.controller.name)),
        api_version: Some(if w.controller.kind.name() == "Job" { "batch/v1" } else { "apps/v1" }.into()),
        controller: Some(true),
    });
    let ips = |ip: &str| if ip.is_empty() { Vec::new() } else { vec![PodIp { ip: Some(ip.into()) }] };
    WrittenPod {
        metadata: Some(ObjectMeta {
            name: Some(spec.name.clone()),
            namespace: Some(spec.namespace.clone()),
            uid: Some(spec.uid.clone()),
            labels: spec.labels.iter().map(|(k, v)| (k.clone(), v.clone())).collect(),
            owner_references: owner.into_iter().collect(),
            ..Default::default()
        }),
        spec: Some(WrittenPodSpec {
            containers: containers
                .iter()
                .map(|c| WrittenContainer {
                    name: Some((*c).into()),
                    env: vec![EnvVar { name: Some("TOKEN".into()), value: Some(format!("sim-secret-{}", spec.uid)) }],
                })
                .collect(),
            service_account_name: Some("default".into()),
            node_name: Some(SIM_NODE.into()),
            host_network: Some(spec.host_network),
            priority_class_name: None,
            priority: Some(0),
            runtime_class_name: None,
        }),
        status: Some(PodStatus {
            qos_class: Some("BestEffort".into()),
            pod_i_ps: if spec.host_network { ips("192.168.0.10") } else { ips(ip) },
            host_i_ps: ips("192.168.0.10"),
        }),
    }
}

type WatchStream = Pin<Box<dyn Stream<Item = Result<WatchPodsEvent, Status>> + Send>>;

#[tonic::async_trait]
impl Pods for SimKubelet {
    type WatchPodsStream = WatchStream;

    async fn watch_pods(&self, _: Request<WatchPodsRequest>) -> Result<Response<WatchStream>, Status> {
        self.ready()?;
        let mut st = self.lock();
        // The replay and the live events share one queue: nothing between them is lost.
        let (tx, rx) = mpsc::channel(WATCHER_BUFFER + st.pods.len() + 1);
        for pod in st.pods.values() {
            let _ = tx.try_send(Ok(WatchPodsEvent { r#type: EventType::Added as i32, pod: pod.encode_to_vec() }));
        }
        let _ = tx.try_send(Ok(WatchPodsEvent { r#type: EventType::InitialSyncComplete as i32, pod: Vec::new() }));
        st.watchers.push(tx);
        Ok(Response::new(Box::pin(tokio_stream::wrappers::ReceiverStream::new(rx))))
    }

    async fn list_pods(&self, _: Request<ListPodsRequest>) -> Result<Response<ListPodsResponse>, Status> {
        self.ready()?;
        Ok(Response::new(ListPodsResponse { pods: self.lock().pods.values().map(|p| p.encode_to_vec()).collect() }))
    }

    async fn get_pod(&self, req: Request<GetPodRequest>) -> Result<Response<GetPodResponse>, Status> {
        self.ready()?;
        let uid = req.into_inner().pod_uid;
        let st = self.lock();
        let pod = st.pods.get(&uid).ok_or_else(|| Status::not_found(format!("pod {uid} not found")))?;
        Ok(Response::new(GetPodResponse { pod: pod.encode_to_vec() }))
    }
}

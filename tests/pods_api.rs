//! Who a pod is, from the kubelet's Pods API: plegd watches a simulated kubelet (its
//! faults: not ready, a watcher cut off, a replay after every reconnect, a deletion
//! while away) and serves the kubelet's word as each pod's identity, tells a change as
//! `POD_UPDATED`, keeps a removed pod's identity, and keeps nothing else of the pod.

mod support;

use std::path::PathBuf;
use std::time::Duration;

use plegd::cri::spec::{ContainerSpec, PodSpec};
use plegd::proto::plegd as api;
use plegd::proto::plegd::watch_event::Kind;
use plegd::proto::pod_view::{
    EnvVar, ObjectMeta, OwnerReference, PodIp, PodStatus, WrittenContainer, WrittenPod, WrittenPodSpec,
};
use plegd::sim::kubelet::SimKubelet;
use support::{Plegd, http, start_plegd_on};
use tokio_util::sync::CancellationToken;

/// A value no surface of plegd may ever hold.
const SECRET: &str = "plegd-planted-secret-5f0c2b7e";

/// The kubelet's pod for `pod`: a Deployment's, on node-k, Burstable, priority 1000,
/// with `ips`, and a container whose environment holds [`SECRET`].
fn kubelet_pod(pod: &PodSpec, ips: &[&str]) -> WrittenPod {
    WrittenPod {
        metadata: Some(ObjectMeta {
            name: Some(pod.name.clone()),
            namespace: Some(pod.namespace.clone()),
            uid: Some(pod.uid.clone()),
            labels: [("pod-template-hash".to_string(), "5f7b9c6d48".to_string())].into(),
            owner_references: vec![OwnerReference {
                kind: Some("ReplicaSet".into()),
                name: Some("web-5f7b9c6d48".into()),
                uid: Some("rs-uid-1".into()),
                api_version: Some("apps/v1".into()),
                controller: Some(true),
            }],
            ..Default::default()
        }),
        spec: Some(WrittenPodSpec {
            containers: vec![WrittenContainer {
                name: Some("app".into()),
                env: vec![EnvVar { name: Some("DB_PASSWORD".into()), value: Some(SECRET.into()) }],
            }],
            service_account_name: Some("web-sa".into()),
            node_name: Some("node-k".into()),
            host_network: Some(false),
            priority_class_name: Some("high".into()),
            priority: Some(1000),
            runtime_class_name: Some("gvisor".into()),
        }),
        status: Some(PodStatus {
            qos_class: Some("Burstable".into()),
            pod_i_ps: ips.iter().map(|ip| PodIp { ip: Some((*ip).into()) }).collect(),
            host_i_ps: vec![PodIp { ip: Some("192.168.1.10".into()) }],
        }),
    }
}

struct Kubelet {
    sim: SimKubelet,
    socket: PathBuf,
    stop: CancellationToken,
}

impl Kubelet {
    fn start(socket: PathBuf, sim: SimKubelet) -> Self {
        let stop = CancellationToken::new();
        sim.serve(&socket, stop.clone()).expect("serve the simulated kubelet");
        Self { sim, socket, stop }
    }

    /// Stops serving; then `restart` serves the same pods again.
    fn stop(&mut self) {
        self.stop.cancel();
    }

    fn restart(&mut self) {
        self.stop = CancellationToken::new();
        self.sim.serve(&self.socket, self.stop.clone()).expect("serve again");
    }
}

async fn pods(p: &Plegd) -> Vec<api::PodStatus> {
    p.client().list_pods(api::ListPodsRequest::default()).await.expect("list").into_inner().pods
}

async fn identity(p: &Plegd, uid: &str) -> api::PodIdentity {
    let pods = pods(p).await;
    let pod = pods.iter().find(|x| x.uid == uid).unwrap_or_else(|| panic!("pod {uid} listed"));
    pod.identity.clone().expect("every pod has an identity")
}

/// The identity of removed container `id`'s pod, as its tombstone keeps it.
async fn tombstone_identity(p: &Plegd, id: &str) -> api::PodIdentity {
    let key = Some(api::get_container_request::Key::ContainerId(id.to_owned()));
    let got = p.client().get_container(api::GetContainerRequest { key, at: None }).await;
    let got = got.expect("a removed container within the retention").into_inner();
    got.pod.and_then(|p| p.identity).expect("the tombstone's pod has its identity")
}

/// Waits until `check` holds, for at most 10 s.
async fn until<F: std::future::Future<Output = bool>>(what: &str, mut check: impl FnMut() -> F) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while !check().await {
        assert!(tokio::time::Instant::now() < deadline, "never: {what}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

fn metric(text: &str, name: &str) -> f64 {
    text.lines()
        .find(|l| l.starts_with(name) && l[name.len()..].starts_with(' '))
        .and_then(|l| l.rsplit(' ').next()?.parse().ok())
        .unwrap_or_else(|| panic!("metric {name} in\n{text}"))
}

/// The events after the journal's first, up to its current revision (the pod's first
/// event is its sandbox's start, never a POD_UPDATED).
async fn events(p: &Plegd) -> Vec<api::LifecycleEvent> {
    let last = p.app.journal().revision();
    let epoch = p.app.journal().epoch();
    let req = api::WatchRequest { since_revision: 1, epoch, ..Default::default() };
    let mut s = p.client().watch(req).await.expect("resume from the first revision").into_inner();
    let mut out = Vec::new();
    let mut at = 1;
    while at < last {
        let m = tokio::time::timeout(Duration::from_secs(10), s.message()).await.expect("in time").unwrap().unwrap();
        if let Some(Kind::Event(e)) = m.kind {
            at = m.revision;
            out.push(e);
        }
    }
    out
}

fn updates(events: &[api::LifecycleEvent], uid: &str) -> usize {
    events
        .iter()
        .filter(|e| e.pod_uid == uid && e.r#type == api::LifecycleEventType::PodUpdated as i32)
        .inspect(|e| assert_eq!(e.source, api::EventSource::Kubelet as i32, "a POD_UPDATED is the kubelet's"))
        .count()
}

#[tokio::test]
async fn each_pods_identity_is_the_kubelets_through_its_faults_and_its_secret_is_nowhere() {
    let h = support::SimHarness::start().await;
    let socket = h.dir.path().join("kubelet/pods-api/pods-api.sock");
    let state_dir = tempfile::tempdir().expect("tempdir");
    let state = state_dir.path().to_path_buf();
    let sim = SimKubelet::default();
    let mut kubelet = Kubelet::start(socket.clone(), sim.clone());
    let p = start_plegd_on(h, |cfg| {
        cfg.kubelet.pods_socket = Some(socket.clone());
        cfg.api.node_name = "flag-node".into();
        cfg.state_dir = Some(state.clone());
    })
    .await;

    // A pod the runtime runs before the kubelet's sources are ready.
    let mut web = PodSpec::new("shop", "web-5f7b9c6d48-q2xkz");
    web.host_network = false;
    let (sid, ids) = p.h.run_pod(&web, &[ContainerSpec::new("app")]).await;
    sim.put(kubelet_pod(&web, &["10.244.0.9"]));
    until("the pod is listed", || async { pods(&p).await.iter().any(|x| x.uid == web.uid) }).await;
    let (_, ready) = http(p.app.admin_addr(), "GET", "/readyz").await;
    assert!(ready.contains("identity: inferred or last heard") && ready.contains("initializing"), "{ready}");
    let before = identity(&p, &web.uid).await;
    assert_eq!(before.source, api::IdentitySource::Inferred as i32, "not ready: inferred");
    assert_eq!(before.node_name, "flag-node");

    // Ready: the kubelet's word, every field, and the node's name from it.
    sim.set_ready(true);
    until("the kubelet's word", || async {
        identity(&p, &web.uid).await.source == api::IdentitySource::PodsApi as i32
    })
    .await;
    let id = identity(&p, &web.uid).await;
    assert_eq!(id.node_name, "node-k");
    let controller = id.controller.clone().expect("controller");
    assert_eq!(
        (controller.kind.as_str(), controller.name.as_str(), controller.uid.as_str()),
        ("ReplicaSet", "web-5f7b9c6d48", "rs-uid-1")
    );
    let workload = id.workload.clone().expect("workload");
    assert_eq!((workload.kind.as_str(), workload.name.as_str()), ("Deployment", "web"));
    assert_eq!((id.qos_class.as_str(), id.priority, id.priority_class_name.as_str()), ("Burstable", 1000, "high"));
    assert_eq!((id.service_account.as_str(), id.runtime_class.as_str()), ("web-sa", "gvisor"));
    assert_eq!(
        (id.pod_ips.clone(), id.host_ips.clone()),
        (vec!["10.244.0.9".to_string()], vec!["192.168.1.10".to_string()])
    );
    let listed = p.client().list_pods(api::ListPodsRequest::default()).await.unwrap().into_inner();
    assert_eq!(listed.node_name, "node-k", "the kubelet's node name wins over --node-name");
    let (_, ready) = http(p.app.admin_addr(), "GET", "/readyz").await;
    assert!(ready.contains("identity: the kubelet's Pods API"), "{ready}");
    let (_, m) = http(p.app.admin_addr(), "GET", "/metrics").await;
    until("the source counted", || async {
        let (_, m) = http(p.app.admin_addr(), "GET", "/metrics").await;
        metric(&m, "plegd_pod_identity_source{source=\"PODS_API\"}") == 1.0
    })
    .await;
    assert_eq!(metric(&m, "plegd_kubelet_pods_api_up"), 1.0);
    // The pod was journaled before the kubelet spoke: its identity changed once.
    until("POD_UPDATED", || async { updates(&events(&p).await, &web.uid) == 1 }).await;

    // A new address: one POD_UPDATED more, with the new identity in the pod it carries.
    sim.put(kubelet_pod(&web, &["10.244.0.9", "fd00::9"]));
    until("the second POD_UPDATED", || async { updates(&events(&p).await, &web.uid) == 2 }).await;
    let last =
        events(&p).await.into_iter().rev().find(|e| e.r#type == api::LifecycleEventType::PodUpdated as i32).unwrap();
    assert_eq!(last.pod.and_then(|p| p.identity).map(|i| i.pod_ips), Some(vec!["10.244.0.9".into(), "fd00::9".into()]));

    // Cut off (a watcher that fell behind), then the kubelet restarted: each time the
    // watch comes back, and the replay changes nothing.
    let revision = p.app.journal().revision();
    let connections = |m: &str| metric(m, "plegd_kubelet_pods_api_connections_total");
    sim.cut_off();
    until("a new watch after the cut", || async {
        let (_, m) = http(p.app.admin_addr(), "GET", "/metrics").await;
        connections(&m) == 2.0 && metric(&m, "plegd_kubelet_pods_api_up") == 1.0
    })
    .await;
    kubelet.stop();
    until("the watch noticed the kubelet gone", || async {
        let (_, m) = http(p.app.admin_addr(), "GET", "/metrics").await;
        metric(&m, "plegd_kubelet_pods_api_up") == 0.0
    })
    .await;
    assert_eq!(identity(&p, &web.uid).await.source, api::IdentitySource::PodsApi as i32, "the last word stands");
    // Deleted while plegd's watch was away: no DELETED will come, the replay tells it.
    sim.delete(&web.uid, true);
    kubelet.restart();
    until("a watch on the restarted kubelet", || async {
        let (_, m) = http(p.app.admin_addr(), "GET", "/metrics").await;
        connections(&m) == 3.0 && metric(&m, "plegd_kubelet_pods_api_up") == 1.0
    })
    .await;
    assert_eq!(p.app.journal().revision(), revision, "a replay that changes nothing makes no event");
    assert_eq!(updates(&events(&p).await, &web.uid), 2);

    // The runtime removes the pod: its tombstone keeps the kubelet's identity.
    p.h.stop_pod(&sid).await;
    p.h.remove_pod(&sid).await;
    until("the pod is gone", || async { !pods(&p).await.iter().any(|x| x.uid == web.uid) }).await;
    let kept = tombstone_identity(&p, &ids[0]).await;
    assert_eq!(kept.source, api::IdentitySource::PodsApi as i32);
    assert_eq!(kept.workload.map(|w| w.name), Some("web".into()));

    // The secret: nowhere plegd served or wrote.
    let mut served = String::new();
    for path in ["/metrics", "/readyz", "/healthz"] {
        served += &http(p.app.admin_addr(), "GET", path).await.1;
    }
    let timeline = format!("/debug/pods/{}/timeline", web.uid);
    for path in ["/debug/pods", "/debug/events", timeline.as_str(), "/", &format!("/pods/{}", web.uid)] {
        served += &http(p.app.debug_addr(), "GET", path).await.1;
    }
    served += &format!("{:?}", events(&p).await);
    served += &format!("{:?}", pods(&p).await);
    assert!(!served.contains(SECRET), "a pod's environment value was served");
    assert!(served.contains("web-sa"), "the search covers what the identity holds");
    p.stop().await;
    let mut files = 0;
    let mut stack = vec![state.clone()];
    while let Some(dir) = stack.pop() {
        for e in std::fs::read_dir(&dir).expect("state dir").flatten() {
            let path = e.path();
            if path.is_dir() {
                stack.push(path);
            } else {
                files += 1;
                let bytes = std::fs::read(&path).expect("read");
                assert!(
                    !bytes.windows(SECRET.len()).any(|w| w == SECRET.as_bytes()),
                    "{} holds the secret",
                    path.display()
                );
            }
        }
    }
    assert!(files > 0, "the state dir was searched");
    kubelet.stop();
}

#[tokio::test]
async fn without_a_kubelet_every_identity_is_inferred_and_the_watcher_says_why() {
    let h = support::SimHarness::start().await;
    let socket = h.dir.path().join("no-kubelet/pods-api.sock");
    let p = start_plegd_on(h, |cfg| cfg.kubelet.pods_socket = Some(socket.clone())).await;
    let mut web = PodSpec::new("shop", "web-5f7b9c6d48-q2xkz").label("pod-template-hash", "5f7b9c6d48");
    web.host_network = false;
    p.h.run_pod(&web, &[ContainerSpec::new("app")]).await;
    until("the pod is listed", || async { pods(&p).await.iter().any(|x| x.uid == web.uid) }).await;
    let id = identity(&p, &web.uid).await;
    assert_eq!(id.source, api::IdentitySource::Inferred as i32);
    assert_eq!(id.workload.map(|w| (w.kind, w.name)), Some(("Deployment".into(), "web".into())));
    let (code, ready) = http(p.app.admin_addr(), "GET", "/readyz").await;
    assert_eq!(code, 200, "no kubelet is no reason to be unready");
    assert!(ready.contains("no Pods API socket at") && ready.contains("no-kubelet"), "{ready}");
    // The socket appears later: the kubelet's word replaces the inferred one.
    let sim = SimKubelet::default();
    sim.set_ready(true);
    sim.put(kubelet_pod(&web, &["10.244.0.3"]));
    let mut kubelet = Kubelet::start(socket.clone(), sim);
    until("the kubelet's word once its socket appears", || async {
        identity(&p, &web.uid).await.source == api::IdentitySource::PodsApi as i32
    })
    .await;
    kubelet.stop();
    p.stop().await;
}

#[tokio::test]
async fn a_restarted_plegd_answers_the_kubelets_last_word_at_once_and_the_replay_tells_no_update() {
    let h = support::SimHarness::start().await;
    let socket = h.dir.path().join("kubelet/pods-api/pods-api.sock");
    let state_dir = tempfile::tempdir().expect("tempdir");
    let state = state_dir.path().to_path_buf();
    let sim = SimKubelet::default();
    sim.set_ready(true);
    let mut kubelet = Kubelet::start(socket.clone(), sim.clone());
    let tune = |cfg: &mut plegd::config::RunConfig| {
        cfg.kubelet.pods_socket = Some(socket.clone());
        cfg.api.node_name = "flag-node".into();
        cfg.state_dir = Some(state.clone());
    };
    let p = start_plegd_on(h, tune).await;
    let mut web = PodSpec::new("shop", "web-5f7b9c6d48-q2xkz");
    web.host_network = false;
    let mut old = PodSpec::new("shop", "web-5f7b9c6d48-zz9p1");
    old.host_network = false;
    sim.put(kubelet_pod(&web, &["10.244.0.9"]));
    sim.put(kubelet_pod(&old, &["10.244.0.8"]));
    p.h.run_pod(&web, &[ContainerSpec::new("app")]).await;
    let (old_sid, old_ids) = p.h.run_pod(&old, &[ContainerSpec::new("app")]).await;
    for uid in [&web.uid, &old.uid] {
        until("the pod is listed", || async { pods(&p).await.iter().any(|x| &x.uid == uid) }).await;
        until("the kubelet's word", || async { identity(&p, uid).await.source == api::IdentitySource::PodsApi as i32 })
            .await;
    }
    // One pod is deleted and removed: its container's tombstone holds the kubelet's word.
    sim.delete(&old.uid, false);
    p.h.stop_pod(&old_sid).await;
    p.h.remove_pod(&old_sid).await;
    until("the pod is gone", || async { !pods(&p).await.iter().any(|x| x.uid == old.uid) }).await;
    let updated_before = updates(&events(&p).await, &web.uid);

    // plegd and the kubelet both stop; plegd comes back first.
    let h = p.stop_plegd().await;
    kubelet.stop();
    let p = start_plegd_on(h, tune).await;
    until("the pod is listed again", || async { pods(&p).await.iter().any(|x| x.uid == web.uid) }).await;
    let id = identity(&p, &web.uid).await;
    assert_eq!(id.source, api::IdentitySource::PodsApi as i32, "the last word heard, before any watch");
    assert_eq!((id.node_name.as_str(), id.pod_ips.clone()), ("node-k", vec!["10.244.0.9".to_string()]));
    let listed = p.client().list_pods(api::ListPodsRequest::default()).await.unwrap().into_inner();
    assert_eq!(listed.node_name, "node-k", "the node's name as the kubelet said it");
    let (_, m) = http(p.app.admin_addr(), "GET", "/metrics").await;
    assert_eq!(metric(&m, "plegd_kubelet_pods_api_up"), 0.0, "no watch yet");
    // The book is written again, saying since when the last heard stands unconfirmed
    // (so a restart before the kubelet returns does not count afresh).
    until("the restored book kept with its time", || async {
        let book = plegd::kubelet::saved::read(&state).ok().flatten();
        book.is_some_and(|b| b.pods.iter().any(|k| k.uid == web.uid && k.restored_at.is_some()))
    })
    .await;
    let kept = tombstone_identity(&p, &old_ids[0]).await;
    assert_eq!(kept.source, api::IdentitySource::PodsApi as i32, "removed before the restart, still the kubelet's");
    assert_eq!(kept.pod_ips, vec!["10.244.0.8".to_string()]);

    // The kubelet comes back: its replay names the running pod again and changes nothing.
    let revision = p.app.journal().revision();
    kubelet.restart();
    until("the watch is back", || async {
        let (_, m) = http(p.app.admin_addr(), "GET", "/metrics").await;
        metric(&m, "plegd_kubelet_pods_api_up") == 1.0
    })
    .await;
    // A POD_UPDATED the replay made would be on its way through the publish path.
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(p.app.journal().revision(), revision, "a replay of what was kept makes no event");
    assert_eq!(updates(&events(&p).await, &web.uid), updated_before);

    // Restarted with the Pods API turned off: every identity inferred, the kept word gone.
    let h = p.stop_plegd().await;
    assert!(state.join(plegd::kubelet::saved::FILE).exists(), "kept at shutdown");
    let p = start_plegd_on(h, |cfg| {
        tune(cfg);
        cfg.kubelet.pods_socket = None;
    })
    .await;
    until("the pod is listed again", || async { pods(&p).await.iter().any(|x| x.uid == web.uid) }).await;
    let id = identity(&p, &web.uid).await;
    assert_eq!((id.source, id.node_name.as_str()), (api::IdentitySource::Inferred as i32, "flag-node"));
    assert!(!state.join(plegd::kubelet::saved::FILE).exists(), "not asked: the kept word is dropped");
    p.stop().await;
    kubelet.stop();
}

/// Opens FIFO `.0` to read, without waiting, when dropped: a write blocked on it ends (a
/// failing test must not leave a blocking thread that the runtime's drop waits for).
struct Unblock(PathBuf);

impl Drop for Unblock {
    fn drop(&mut self) {
        use std::os::unix::fs::OpenOptionsExt;
        const O_NONBLOCK: i32 = 0o4000; // Linux
        let _ = std::fs::OpenOptions::new().read(true).custom_flags(O_NONBLOCK).open(&self.0);
    }
}

/// A state dir whose kept book's temporary file is a FIFO nobody reads: opening it to
/// write blocks, as a write stalled in the kernel does. The guard releases it.
fn hanging_state_dir() -> (tempfile::TempDir, Unblock) {
    let dir = tempfile::tempdir().expect("tempdir");
    let fifo = dir.path().join(format!("{}.tmp", plegd::kubelet::saved::FILE));
    let made = std::process::Command::new("mkfifo").arg(&fifo).status().expect("mkfifo (coreutils)");
    assert!(made.success(), "mkfifo {fifo:?}");
    (dir, Unblock(fifo))
}

/// The state dir's disk hangs: the kept book's temporary file is a FIFO nobody reads, so
/// opening it to write blocks as a write stalled in the kernel does. The kubelet's word
/// goes on reaching every surface, and plegd's shutdown does not wait on the disk.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_state_dir_that_hangs_holds_up_neither_the_kubelets_word_nor_plegds_exit() {
    let h = support::SimHarness::start().await;
    let socket = h.dir.path().join("kubelet/pods-api/pods-api.sock");
    let (state_dir, unblock) = hanging_state_dir();
    let state = state_dir.path().to_path_buf();
    let fifo = unblock.0.clone();
    let sim = SimKubelet::default();
    sim.set_ready(true);
    let mut kubelet = Kubelet::start(socket.clone(), sim.clone());
    let p = start_plegd_on(h, |cfg| {
        cfg.kubelet.pods_socket = Some(socket.clone());
        cfg.state_dir = Some(state.clone());
    })
    .await;
    let mut web = PodSpec::new("shop", "web-5f7b9c6d48-q2xkz");
    web.host_network = false;
    p.h.run_pod(&web, &[ContainerSpec::new("app")]).await;
    let addresses = |ips: &'static [&'static str]| {
        let (p, uid) = (&p, web.uid.clone());
        move || {
            let uid = uid.clone();
            async move {
                let pods = pods(p).await;
                pods.iter().find(|x| x.uid == uid).and_then(|x| x.identity.as_ref()).is_some_and(|i| i.pod_ips == ips)
            }
        }
    };
    sim.put(kubelet_pod(&web, &["10.244.0.9"]));
    until("the kubelet's word", addresses(&["10.244.0.9"])).await;
    // Past an upkeep (5 s): the book changed, and its write now hangs.
    tokio::time::sleep(Duration::from_secs(6)).await;
    let updated = updates(&events(&p).await, &web.uid);
    sim.put(kubelet_pod(&web, &["10.244.0.9", "fd00::9"]));
    until("a change of the kubelet's word while the disk hangs", addresses(&["10.244.0.9", "fd00::9"])).await;
    // Another upkeep finds the write still under way and starts none beside it.
    tokio::time::sleep(Duration::from_secs(5)).await;
    sim.put(kubelet_pod(&web, &["10.244.0.10"]));
    until("another change", addresses(&["10.244.0.10"])).await;
    // Each change told as POD_UPDATED (through the publish path, a moment after the book).
    until("both changes told", || async { updates(&events(&p).await, &web.uid) == updated + 2 }).await;

    let stopping = std::time::Instant::now();
    let h = tokio::time::timeout(Duration::from_secs(15), p.stop_plegd()).await.expect("plegd stops");
    assert!(stopping.elapsed() < Duration::from_secs(10), "shutdown waited {:?} on the disk", stopping.elapsed());
    // The disk comes back: the hung write ends (a FIFO cannot be synced: it fails, and
    // nothing half-written is ever renamed into place).
    let drained = tokio::task::spawn_blocking(move || std::fs::read(&fifo)).await.unwrap().expect("read the FIFO");
    assert!(!drained.is_empty(), "the write under way was the book");
    assert!(plegd::kubelet::saved::read(&state).ok().flatten().is_none(), "no book from a write that failed");
    kubelet.stop();
    h.stop().await;
}

/// The same hanging disk under the plegd binary: SIGTERM ends the process, with status 0,
/// though a write on the disk never returns (the async runtime's drop would wait for its
/// blocking thread forever).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_plegd_process_exits_on_sigterm_though_a_write_to_its_state_dir_never_returns() {
    let h = support::SimHarness::start().await;
    let socket = h.dir.path().join("kubelet/pods-api/pods-api.sock");
    let (state_dir, _unblock) = hanging_state_dir();
    let sim = SimKubelet::default();
    sim.set_ready(true);
    let mut kubelet = Kubelet::start(socket.clone(), sim.clone());
    let kubelet_flag = socket.display().to_string();
    let extra = ["--kubelet-pods-socket", kubelet_flag.as_str()];
    let mut p =
        support::binary::start_with(env!("CARGO_BIN_EXE_plegd"), &h.endpoint, state_dir.path(), h.dir.path(), &extra)
            .await;
    let mut web = PodSpec::new("shop", "web-5f7b9c6d48-q2xkz");
    web.host_network = false;
    sim.put(kubelet_pod(&web, &["10.244.0.9"]));
    until("the kubelet watched", || async {
        let (_, m) = http(p.admin, "GET", "/metrics").await;
        metric(&m, "plegd_kubelet_pods_api_up") == 1.0
    })
    .await;
    // Past an upkeep (5 s): the book changed, and its write now hangs.
    tokio::time::sleep(Duration::from_secs(6)).await;
    let term = std::process::Command::new("kill").args(["-TERM", &p.child.id().to_string()]).status().unwrap();
    assert!(term.success());
    let asked = std::time::Instant::now();
    let status = loop {
        if let Some(status) = p.child.try_wait().unwrap() {
            break status;
        }
        assert!(asked.elapsed() < Duration::from_secs(20), "plegd did not exit within 20 s of SIGTERM");
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert!(status.success(), "plegd ends with status 0: {status}");
    eprintln!("plegd exited {:?} after SIGTERM with a write hung", asked.elapsed());
    kubelet.stop();
}

//! plegd's NRI plugin against a runtime played by the test on a socket of its own, with
//! NRI's wire (`plegd::nri::wire`, `plegd::nri::api`): registration, every call answered
//! at once, what each call hands the relister, bad frames, and coming back. The real
//! runtimes are `tests/e2e_nri.rs`'s (containerd 1.7 and 2.1).

use std::time::Duration;

use plegd::nri::api::{self, Event};
use plegd::nri::session::{PLUGIN_NAME, PLUGIN_SERVICE, RUNTIME_SERVICE};
use plegd::nri::wire::{self, Demux, Message, PLUGIN_CONN, REQUEST, RESPONSE, RUNTIME_CONN};
use plegd::nri::{NriConfig, NriMetrics, NriMode, NriPlugin};
use plegd::pleg::inbox::{InboxRx, Intake, inbox};
use plegd::pleg::schedule::{Read, Reason};
use prost::Message as _;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{UnixListener, UnixStream};
use tokio_util::sync::CancellationToken;

/// The runtime's end of one plugin connection.
struct Runtime {
    stream: UnixStream,
    demux: Demux,
    pending: Vec<Message>,
    next_stream: u32,
}

impl Runtime {
    async fn accept(listener: &UnixListener) -> Self {
        let (stream, _) = tokio::time::timeout(Duration::from_secs(10), listener.accept()).await.unwrap().unwrap();
        Self { stream, demux: Demux::default(), pending: Vec::new(), next_stream: 1 }
    }

    async fn next(&mut self) -> Option<Message> {
        loop {
            if !self.pending.is_empty() {
                return Some(self.pending.remove(0));
            }
            let mut buf = [0u8; 4096];
            let n = tokio::time::timeout(Duration::from_secs(10), self.stream.read(&mut buf)).await.unwrap().ok()?;
            if n == 0 {
                return None;
            }
            self.pending = self.demux.push(&buf[..n]).unwrap();
        }
    }

    /// Takes plegd's registration and answers it.
    async fn registration(&mut self) -> api::RegisterPluginRequest {
        let m = self.next().await.expect("a registration");
        assert_eq!((m.conn, m.kind, m.stream), (RUNTIME_CONN, REQUEST, 1));
        let req = api::Request::decode(&m.payload[..]).unwrap();
        assert_eq!((req.service.as_str(), req.method.as_str()), (RUNTIME_SERVICE, "RegisterPlugin"));
        let answer = api::Response { status: None, payload: Vec::new() }.encode_to_vec();
        self.send(Message { conn: RUNTIME_CONN, stream: 1, kind: RESPONSE, flags: 0, payload: answer }).await;
        api::RegisterPluginRequest::decode(&req.payload[..]).unwrap()
    }

    async fn send(&mut self, m: Message) {
        self.stream.write_all(&wire::encode(&m)).await.unwrap();
    }

    /// Calls the plugin and returns its answer.
    async fn call(&mut self, method: &str, payload: Vec<u8>) -> api::Response {
        let stream = self.next_stream;
        self.next_stream += 2;
        let req = api::Request {
            service: PLUGIN_SERVICE.into(),
            method: method.into(),
            payload,
            timeout_nano: 2_000_000_000,
        };
        self.send(Message { conn: PLUGIN_CONN, stream, kind: REQUEST, flags: 0, payload: req.encode_to_vec() }).await;
        let m = self.next().await.expect("an answer");
        assert_eq!((m.conn, m.kind, m.stream), (PLUGIN_CONN, RESPONSE, stream), "answered on the call's stream");
        api::Response::decode(&m.payload[..]).unwrap()
    }

    async fn configure(&mut self) -> i32 {
        let req = api::ConfigureRequest {
            runtime_name: "test-runtime".into(),
            runtime_version: "1.0".into(),
            registration_timeout: 5000,
            request_timeout: 2000,
        };
        let r = self.call("Configure", req.encode_to_vec()).await;
        assert_eq!(r.status, None);
        api::ConfigureResponse::decode(&r.payload[..]).unwrap().events
    }
}

struct Plugin {
    rx: InboxRx,
    metrics: NriMetrics,
    listener: UnixListener,
    shutdown: CancellationToken,
    task: tokio::task::JoinHandle<()>,
    _dir: tempfile::TempDir,
}

fn plugin() -> Plugin {
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("nri.sock");
    let listener = UnixListener::bind(&socket).unwrap();
    let (tx, rx) = inbox(Default::default());
    let metrics = NriMetrics::register(&mut Default::default());
    let shutdown = CancellationToken::new();
    let cfg = NriConfig { mode: NriMode::On, socket };
    let task = tokio::spawn(NriPlugin::new(cfg, tx, metrics.clone()).run(shutdown.clone()));
    Plugin { rx, metrics, listener, shutdown, task, _dir: dir }
}

fn pod(uid: &str, sandbox: &str) -> api::PodSandbox {
    api::PodSandbox { id: sandbox.into(), name: "web".into(), uid: uid.into(), namespace: "ns".into() }
}

fn container(id: &str, sandbox: &str) -> api::Container {
    api::Container {
        id: id.into(),
        pod_sandbox_id: sandbox.into(),
        name: "app".into(),
        linux: Some(api::LinuxContainer { cgroups_path: format!("/k8s.io/{id}") }),
        pid: 4242,
    }
}

fn state_change(event: Event, pod: api::PodSandbox, container: Option<api::Container>) -> Vec<u8> {
    api::StateChangeEvent { event: event as i32, pod: Some(pod), container }.encode_to_vec()
}

/// Everything in the inbox now.
fn drain(rx: &mut InboxRx) -> Vec<Intake> {
    std::iter::from_fn(|| rx.try_recv()).collect()
}

async fn settle() {
    tokio::time::sleep(Duration::from_millis(50)).await;
}

#[tokio::test]
async fn plegd_registers_answers_every_call_with_success_at_once_and_hands_each_event_to_the_relister() {
    let mut p = plugin();
    let mut rt = Runtime::accept(&p.listener).await;
    let reg = rt.registration().await;
    assert_eq!((reg.plugin_name.as_str(), reg.plugin_idx.as_str()), (PLUGIN_NAME, "99"));
    assert_eq!(rt.configure().await, Event::mask());
    assert_eq!(p.metrics.registered.get(), 1, "registered once configured");
    let sync = api::SynchronizeRequest { pods: vec![pod("u1", "s1")], containers: vec![], more: false };
    let r = rt.call("Synchronize", sync.encode_to_vec()).await;
    assert_eq!(r.status, None);
    settle().await;
    let intakes = drain(&mut p.rx);
    assert!(
        matches!(&intakes[..], [Intake::Read(r)] if r.key == Read::Full && r.message.has(Reason::NriSynchronized)),
        "the synchronization is a full relist: {intakes:?}"
    );
    // Each event: answered with success and nothing else, then its pod read, named.
    for (event, with) in [
        (Event::RunPodSandbox, false),
        (Event::PostCreateContainer, true),
        (Event::PostStartContainer, true),
        (Event::RemoveContainer, true),
        (Event::StopPodSandbox, false),
    ] {
        let r = rt.call("StateChange", state_change(event, pod("u1", "s1"), with.then(|| container("c1", "s1")))).await;
        assert_eq!((r.status, r.payload.len()), (None, 0), "{event:?}: an empty success");
        settle().await;
        let mut intakes = drain(&mut p.rx);
        if event == Event::RunPodSandbox {
            // containerd 1.7 tells it before its listing has the sandbox: read until found.
            assert!(
                matches!(intakes.first(), Some(Intake::SandboxStarted { uid, id }) if uid == "u1" && id == "s1"),
                "{intakes:?}"
            );
            intakes.remove(0);
        }
        let [Intake::Read(read)] = &intakes[..] else { panic!("{event:?}: one read, got {intakes:?}") };
        assert_eq!(read.key, Read::Pod("u1".into()));
        assert_eq!(read.message.source(), plegd::model::event::EventSource::Nri);
        assert_eq!(read.message.container_ids.iter().next().map(String::as_str), with.then_some("c1"));
    }
    // A stop: also the container said stopped (its status lags the word); a sandbox's
    // removal: also said deleted.
    let stop = api::ContainerCall { pod: Some(pod("u1", "s1")), container: Some(container("c1", "s1")) };
    assert_eq!(rt.call("StopContainer", stop.encode_to_vec()).await.status, None);
    rt.call("StateChange", state_change(Event::RemovePodSandbox, pod("u1", "s1"), None)).await;
    settle().await;
    let intakes = drain(&mut p.rx);
    assert!(
        matches!(&intakes[..], [
            Intake::ContainerStopped { uid, id }, Intake::Read(_), Intake::SandboxDeleted { uid: u2, id: s }, Intake::Read(_)
        ] if uid == "u1" && id == "c1" && u2 == "u1" && s == "s1"),
        "{intakes:?}"
    );
    // Calls plegd did not subscribe to, and ones it does not know, still get an answer.
    for method in ["CreateContainer", "UpdateContainer"] {
        assert_eq!(rt.call(method, Vec::new()).await.status, None, "{method}");
    }
    assert_eq!(rt.call("NoSuchMethod", Vec::new()).await.status.map(|s| s.code), Some(12), "Unimplemented");
    let told: u64 = Event::SUBSCRIBED
        .iter()
        .map(|e| p.metrics.events.get_or_create(&plegd::nri::EventLabel { event: e.as_str() }).get())
        .sum();
    assert_eq!(told, 7, "each event counted once");
    p.shutdown.cancel();
    p.task.await.unwrap();
}

#[tokio::test]
async fn a_bad_frame_or_a_runtime_gone_ends_the_connection_and_plegd_registers_again() {
    let mut p = plugin();
    let mut rt = Runtime::accept(&p.listener).await;
    rt.registration().await;
    rt.configure().await;
    // A frame announcing more than any ttrpc message: plegd hangs up.
    let mut bad = PLUGIN_CONN.to_be_bytes().to_vec();
    bad.extend_from_slice(&u32::MAX.to_be_bytes());
    rt.stream.write_all(&bad).await.unwrap();
    assert!(rt.next().await.is_none(), "plegd closed the connection");
    // … and comes back.
    let mut rt = Runtime::accept(&p.listener).await;
    rt.registration().await;
    assert_eq!(p.metrics.registered.get(), 0, "not registered until configured again");
    rt.configure().await;
    assert_eq!(p.metrics.registered.get(), 1);
    // A ttrpc message that is no request nor the registration's answer.
    rt.send(Message { conn: PLUGIN_CONN, stream: 3, kind: RESPONSE, flags: 0, payload: Vec::new() }).await;
    assert!(rt.next().await.is_none(), "plegd closed the connection");
    // The runtime goes away (a restart): plegd registers with the next one.
    let mut rt = Runtime::accept(&p.listener).await;
    rt.registration().await;
    drop(rt);
    let mut rt = Runtime::accept(&p.listener).await;
    rt.registration().await;
    rt.configure().await;
    let r = rt.call("StateChange", state_change(Event::RunPodSandbox, pod("u2", "s2"), None)).await;
    assert_eq!(r.status, None);
    settle().await;
    assert!(drain(&mut p.rx).iter().any(|i| matches!(i, Intake::Read(r) if r.key == Read::Pod("u2".into()))));
    p.shutdown.cancel();
    p.task.await.unwrap();
}

#[tokio::test]
async fn a_relister_that_never_drains_its_inbox_never_makes_the_runtime_wait() {
    let p = plugin();
    let mut rt = Runtime::accept(&p.listener).await;
    rt.registration().await;
    rt.configure().await;
    // Past the inbox's capacity, with nothing drained: every call is still answered.
    let n = plegd::pleg::inbox::CAPACITY + 100;
    for i in 0..n {
        let r = rt.call("StateChange", state_change(Event::RunPodSandbox, pod(&format!("u{i}"), "s"), None)).await;
        assert_eq!(r.status, None);
    }
    assert!(p.rx.take_overflow(), "the dropped hints are reported: the relister relists fully");
    p.shutdown.cancel();
    p.task.await.unwrap();
}

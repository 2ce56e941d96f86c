//! plegd's NRI plugin against a runtime played by the test on a socket of its own, with
//! NRI's wire (`plegd::nri::wire`, `plegd::nri::api`): registration, every call answered
//! at once, what each call hands the relister, bad frames, and coming back. The real
//! runtimes are `tests/e2e_nri.rs`'s (containerd 1.7 and 2.1).

use std::time::Duration;

use plegd::nri::api::{self, Event};
use plegd::nri::session::{PLUGIN_NAME, PLUGIN_SERVICE, RUNTIME_SERVICE};
use plegd::nri::wire::{self, Demux, Message, PLUGIN_CONN, REQUEST, RESPONSE, RUNTIME_CONN};
use plegd::nri::{NriConfig, NriMetrics, NriMode, NriPlugin};
use plegd::pleg::early_words::Word;
use plegd::pleg::inbox::{InboxRx, Intake, Teller, inbox};
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
        self.stream.write_all(&wire::encode(&m).unwrap()).await.unwrap();
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

    /// Configures the plugin and synchronizes with it, as a runtime registers one.
    async fn register_fully(&mut self) {
        assert_eq!(self.configure().await, Event::mask());
        let r = self.call("Synchronize", api::SynchronizeRequest::default().encode_to_vec()).await;
        assert_eq!(r.status, None);
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
    // A synchronization in two parts: each answered, echoing `more`.
    let part = api::SynchronizeRequest { pods: vec![pod("u1", "s1")], containers: vec![], more: true };
    let r = rt.call("Synchronize", part.encode_to_vec()).await;
    assert!(api::SynchronizeResponse::decode(&r.payload[..]).unwrap().more);
    settle().await;
    assert_eq!(p.metrics.registered.get(), 0, "the runtime calls a plugin once its synchronization went through");
    assert!(drain(&mut p.rx).is_empty(), "nothing before the last part");
    let last = api::SynchronizeRequest { pods: vec![], containers: vec![container("c0", "s1")], more: false };
    let r = rt.call("Synchronize", last.encode_to_vec()).await;
    assert_eq!(r.status, None);
    settle().await;
    assert_eq!(p.metrics.registered.get(), 1, "registered once synchronized");
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
        // What the runtime tells ahead of its status is read again until shown.
        let early = match event {
            Event::RunPodSandbox => Some((Word::SandboxStarted, "s1")),
            Event::PostStartContainer => Some((Word::ContainerStarted, "c1")),
            Event::RemoveContainer => Some((Word::ContainerRemoved, "c1")),
            Event::StopPodSandbox => Some((Word::SandboxStopped, "s1")),
            _ => None,
        };
        if let Some((want, on)) = early {
            assert!(
                matches!(intakes.first(), Some(Intake::EarlyWord { uid, id, word })
                    if uid.as_deref() == Some("u1") && id == on && *word == want),
                "{event:?}: {intakes:?}"
            );
            intakes.remove(0);
        }
        let [Intake::Read(read)] = &intakes[..] else { panic!("{event:?}: one read, got {intakes:?}") };
        assert_eq!(read.key, Read::Pod("u1".into()));
        assert_eq!(read.message.source(), plegd::model::event::EventSource::Nri);
        assert_eq!(read.message.container_ids.iter().next().map(String::as_str), with.then_some("c1"));
    }
    // A stop and a sandbox's removal: their words too.
    let stop = api::ContainerCall { pod: Some(pod("u1", "s1")), container: Some(container("c1", "s1")) };
    assert_eq!(rt.call("StopContainer", stop.encode_to_vec()).await.status, None);
    rt.call("StateChange", state_change(Event::RemovePodSandbox, pod("u1", "s1"), None)).await;
    settle().await;
    let intakes = drain(&mut p.rx);
    assert!(
        matches!(&intakes[..], [
            Intake::EarlyWord { id, word: Word::ContainerStopped, .. }, Intake::Read(_),
            Intake::EarlyWord { id: s, word: Word::SandboxRemoved, .. }, Intake::Read(_)
        ] if id == "c1" && s == "s1"),
        "{intakes:?}"
    );
    // NRI v0.12 calls each event by its own method (CRI-O 1.37): answered and handed
    // on the same; a container named without its pod (a sandbox already gone) is found
    // through the relister's records, told as NRI's.
    let call = api::ContainerCall { pod: Some(pod("u3", "s3")), container: Some(container("c3", "s3")) };
    assert_eq!(rt.call("PostStartContainer", call.encode_to_vec()).await.status, None);
    let orphan = api::ContainerCall { pod: Some(pod("", "s4")), container: Some(container("c4", "s4")) };
    assert_eq!(rt.call("RemoveContainer", orphan.encode_to_vec()).await.status, None);
    settle().await;
    let intakes = drain(&mut p.rx);
    assert!(
        matches!(&intakes[..], [
            Intake::EarlyWord { word: Word::ContainerStarted, id: started, .. },
            Intake::Read(r),
            Intake::EarlyWord { uid: None, id: w, word: Word::ContainerRemoved },
            Intake::ContainerOnly { id, by: Teller::Nri },
        ] if started == "c3" && r.key == Read::Pod("u3".into()) && id == "c4" && w == "c4"),
        "{intakes:?}"
    );
    // Calls plegd did not subscribe to, and ones it does not know, still get an answer.
    for method in ["CreateContainer", "UpdateContainer", "StartContainer", "ValidateContainerAdjustment"] {
        assert_eq!(rt.call(method, Vec::new()).await.status, None, "{method}");
    }
    assert_eq!(rt.call("NoSuchMethod", Vec::new()).await.status.map(|s| s.code), Some(12), "Unimplemented");
    let told: u64 = Event::SUBSCRIBED
        .iter()
        .map(|e| p.metrics.events.get_or_create(&plegd::nri::EventLabel { event: e.as_str() }).get())
        .sum();
    assert_eq!(told, 9, "each event counted once");
    p.shutdown.cancel();
    p.task.await.unwrap();
}

/// The runtime's end played by a process of another user (nobody, by `setpriv`): a
/// listener that counts the bytes each connection sent it, one line per connection.
const OTHER_USERS_LISTENER: &str = r#"
import socket, sys
s = socket.socket(socket.AF_UNIX)
s.bind(sys.argv[1])
s.listen(8)
while True:
    c, _ = s.accept()
    n = 0
    while True:
        b = c.recv(4096)
        if not b:
            break
        n += len(b)
    with open(sys.argv[2], "a") as f:
        f.write(f"{n}\n")
"#;

#[tokio::test]
#[ignore = "needs root, to run the socket's other end as another user: .ci/run runs it"]
async fn a_socket_served_by_another_user_than_root_or_plegds_own_is_never_spoken_to() {
    use std::os::unix::fs::{MetadataExt, PermissionsExt};
    // /proc/self belongs to the process's effective user.
    let me = std::fs::metadata("/proc/self").unwrap().uid();
    assert_eq!(me, 0, "*** this test needs root: it runs the socket's other end as nobody ***");
    let dir = tempfile::tempdir().unwrap();
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o777)).unwrap();
    let socket = dir.path().join("nri.sock");
    let heard = dir.path().join("heard");
    let mut other = std::process::Command::new("setpriv")
        // Debian's python: nobody cannot reach a python installed under root's home.
        .args(["--reuid=65534", "--regid=65534", "--clear-groups", "/usr/bin/python3", "-c", OTHER_USERS_LISTENER])
        .arg(&socket)
        .arg(&heard)
        .spawn()
        .expect("setpriv (util-linux) and /usr/bin/python3 run the other user's listener");
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while !socket.exists() {
        assert!(std::time::Instant::now() < deadline, "the other user's listener never bound {socket:?}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let (tx, mut rx) = inbox(Default::default());
    let metrics = NriMetrics::register(&mut Default::default());
    let shutdown = CancellationToken::new();
    let cfg = NriConfig { mode: NriMode::On, socket };
    let task = tokio::spawn(NriPlugin::new(cfg, tx, metrics.clone()).run(shutdown.clone()));
    // plegd tries again with backoff (0.1, 0.2, 0.4 … s): several connections in 2 s.
    tokio::time::sleep(Duration::from_secs(2)).await;
    shutdown.cancel();
    task.await.unwrap();
    other.kill().unwrap();
    other.wait().unwrap();
    let conns: Vec<usize> =
        std::fs::read_to_string(&heard).unwrap_or_default().lines().map(|l| l.parse().unwrap()).collect();
    assert!(conns.len() >= 2, "plegd connected and, refused, tried again: {conns:?}");
    assert!(conns.iter().all(|&n| n == 0), "plegd sent nothing to a peer that is not the runtime: {conns:?}");
    assert_eq!(metrics.registered.get(), 0);
    assert!(drain(&mut rx).is_empty(), "nothing reached the relister");
}

#[tokio::test]
async fn a_bad_frame_or_a_runtime_gone_ends_the_connection_and_plegd_registers_again() {
    let mut p = plugin();
    let mut rt = Runtime::accept(&p.listener).await;
    rt.registration().await;
    rt.register_fully().await;
    // A frame announcing more than any ttrpc message: plegd hangs up.
    let mut bad = PLUGIN_CONN.to_be_bytes().to_vec();
    bad.extend_from_slice(&u32::MAX.to_be_bytes());
    rt.stream.write_all(&bad).await.unwrap();
    assert!(rt.next().await.is_none(), "plegd closed the connection");
    // … and comes back.
    let mut rt = Runtime::accept(&p.listener).await;
    rt.registration().await;
    assert_eq!(p.metrics.registered.get(), 0, "not registered until synchronized again");
    rt.register_fully().await;
    assert_eq!(p.metrics.registered.get(), 1);
    // A call whose names are as long as a ttrpc message allows: answered Unimplemented,
    // the names cut, and the connection goes on.
    let long = "x".repeat(wire::MAX_MESSAGE - 64);
    let req = api::Request { service: PLUGIN_SERVICE.into(), method: long, payload: Vec::new(), timeout_nano: 0 };
    rt.send(Message { conn: PLUGIN_CONN, stream: 101, kind: REQUEST, flags: 0, payload: req.encode_to_vec() }).await;
    let m = rt.next().await.expect("an answer");
    let r = api::Response::decode(&m.payload[..]).unwrap();
    assert_eq!(r.status.as_ref().map(|s| s.code), Some(12));
    assert!(m.payload.len() < 1024, "the answer does not repeat the long name");
    // A ttrpc message that is no request nor the registration's answer.
    rt.send(Message { conn: PLUGIN_CONN, stream: 3, kind: RESPONSE, flags: 0, payload: Vec::new() }).await;
    assert!(rt.next().await.is_none(), "plegd closed the connection");
    // The runtime goes away (a restart): plegd registers with the next one.
    let mut rt = Runtime::accept(&p.listener).await;
    rt.registration().await;
    drop(rt);
    let mut rt = Runtime::accept(&p.listener).await;
    rt.registration().await;
    rt.register_fully().await;
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
    rt.register_fully().await;
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

#[tokio::test]
async fn calls_sent_together_or_before_the_registration_is_answered_are_each_answered() {
    let p = plugin();
    let mut rt = Runtime::accept(&p.listener).await;
    // The runtime configures before it answers the registration, and sends three calls
    // in one write: each answered on its own stream.
    let m = rt.next().await.expect("the registration");
    assert_eq!((m.conn, m.kind), (RUNTIME_CONN, REQUEST));
    let mut bytes = Vec::new();
    for (stream, method, payload) in [
        (1, "Configure", api::ConfigureRequest::default().encode_to_vec()),
        (3, "Synchronize", api::SynchronizeRequest::default().encode_to_vec()),
        (5, "StateChange", state_change(Event::RunPodSandbox, pod("u5", "s5"), None)),
    ] {
        let req = api::Request { service: PLUGIN_SERVICE.into(), method: method.into(), payload, timeout_nano: 0 };
        let frame = Message { conn: PLUGIN_CONN, stream, kind: REQUEST, flags: 0, payload: req.encode_to_vec() };
        bytes.extend(wire::encode(&frame).unwrap());
    }
    rt.stream.write_all(&bytes).await.unwrap();
    let mut streams = Vec::new();
    for _ in 0..3 {
        let m = rt.next().await.expect("an answer");
        assert_eq!((m.conn, m.kind), (PLUGIN_CONN, RESPONSE));
        assert_eq!(api::Response::decode(&m.payload[..]).unwrap().status, None);
        streams.push(m.stream);
    }
    assert_eq!(streams, [1, 3, 5]);
    let answer = api::Response { status: None, payload: Vec::new() }.encode_to_vec();
    rt.send(Message { conn: RUNTIME_CONN, stream: 1, kind: RESPONSE, flags: 0, payload: answer }).await;
    settle().await;
    assert_eq!(p.metrics.registered.get(), 1);
    // A runtime that refuses the registration: plegd hangs up and tries again.
    let mut rt = {
        let refusal =
            api::Response { status: Some(api::Status { code: 3, message: "no".into() }), payload: Vec::new() };
        rt.send(Message { conn: RUNTIME_CONN, stream: 1, kind: RESPONSE, flags: 0, payload: refusal.encode_to_vec() })
            .await;
        assert!(rt.next().await.is_none(), "plegd closed the refused connection");
        Runtime::accept(&p.listener).await
    };
    rt.registration().await;
    p.shutdown.cancel();
    p.task.await.unwrap();
}

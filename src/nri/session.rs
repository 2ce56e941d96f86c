//! One registration with the runtime, from connect to close: plegd registers as
//! `99-plegd`, answers `Configure` with its subscription, and answers every call the
//! moment it is read — success, no adjustment, no update — before anything else is done
//! with it. Only then is what the call said handed on as a [`Hint`]. What a call
//! carries is never needed to answer it: a payload that cannot be decoded is answered
//! the same, and its hint is a full relist.
//!
//! The pure half, [`answer`], turns a request into its answer and hint; [`Session`]
//! does the socket's reads and writes around it.

use std::time::Duration;

use prost::Message as _;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::UnixStream;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::NriError;
use super::api::{self, Event};
use super::wire::{self, Demux, Message, PLUGIN_CONN, REQUEST, RESPONSE, RUNTIME_CONN};
use crate::liveness::{Beat, beat_timer};

/// The plugin's name and index, as the runtime logs them (`99-plegd`): called after
/// every plugin that may adjust a container.
pub const PLUGIN_NAME: &str = "plegd";
/// See [`PLUGIN_NAME`].
pub const PLUGIN_IDX: &str = "99";
/// The plugin service's name.
pub const PLUGIN_SERVICE: &str = "nri.pkg.api.v1alpha1.Plugin";
/// The runtime service's name.
pub const RUNTIME_SERVICE: &str = "nri.pkg.api.v1alpha1.Runtime";
/// How long plegd waits, after registering, for the runtime to configure it.
pub const CONFIGURE_WITHIN: Duration = Duration::from_secs(10);

/// What a call said, for the relister.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Hint {
    /// The runtime configured the plugin: it is registered.
    Configured {
        /// `containerd`, `cri-o`.
        runtime: String,
        /// Its version.
        version: String,
    },
    /// The runtime's synchronization ended (its last part): the plugin is registered,
    /// and a full relist follows.
    Synchronized,
    /// A pod's or container's event.
    Event(EventHint),
    /// A call whose payload could not be decoded: a full relist finds what it was.
    Unreadable {
        /// The method.
        method: String,
    },
    /// The runtime shuts the plugin down.
    Shutdown,
    /// Nothing to hand on.
    None,
}

/// An event, with the ids it named.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EventHint {
    /// The event.
    pub event: Event,
    /// The pod's uid, where given.
    pub uid: Option<String>,
    /// The sandbox id, where given.
    pub sandbox: Option<String>,
    /// The container id, for a container's event.
    pub container: Option<String>,
    /// The container's process, where the runtime filled it.
    pub pid: Option<u32>,
    /// The container's cgroup, where given.
    pub cgroup: Option<String>,
}

impl EventHint {
    fn of(event: Event, pod: Option<&api::PodSandbox>, container: Option<&api::Container>) -> Self {
        let some = |s: &str| (!s.is_empty()).then(|| s.to_owned());
        Self {
            event,
            uid: pod.and_then(|p| some(&p.uid)),
            sandbox: pod.and_then(|p| some(&p.id)).or_else(|| container.and_then(|c| some(&c.pod_sandbox_id))),
            container: container.and_then(|c| some(&c.id)),
            pid: container.map(|c| c.pid).filter(|&p| p != 0),
            cgroup: container.and_then(|c| c.linux.as_ref()).and_then(|l| some(&l.cgroups_path)),
        }
    }
}

/// An answer to a call: its status (none is success) and message.
#[derive(Debug, PartialEq)]
pub struct Answer {
    /// The ttrpc response's payload.
    pub response: Vec<u8>,
    /// What the call said.
    pub hint: Hint,
    /// The method, for logs.
    pub method: String,
}

/// gRPC's `Unimplemented`.
const UNIMPLEMENTED: i32 = 12;

/// The answer to the ttrpc request `payload`. Every method of the plugin service is
/// answered with success and an empty (or echoing) message whatever its payload holds —
/// NRI v0.8's `StateChange` and v0.12's call per event alike; another service or method
/// is `Unimplemented`, as ttrpc's server answers it. Fails only when the envelope itself
/// is not a ttrpc request.
pub fn answer(payload: &[u8]) -> Result<Answer, NriError> {
    let req = api::Request::decode(payload).map_err(|e| NriError::Decode { what: "a ttrpc request", source: e })?;
    let ok = |message: Vec<u8>| api::Response { status: None, payload: message }.encode_to_vec();
    let unreadable = || Hint::Unreadable { method: bounded(&req.method) };
    // A call naming its pod and container (`StopContainer`, and v0.12's call per event).
    let call = |event: Event| match api::ContainerCall::decode(&req.payload[..]) {
        Ok(c) => (ok(Vec::new()), Hint::Event(EventHint::of(event, c.pod.as_ref(), c.container.as_ref()))),
        Err(_) => (ok(Vec::new()), unreadable()),
    };
    let (response, hint) = if req.service != PLUGIN_SERVICE {
        (unimplemented(&req), Hint::None)
    } else {
        match req.method.as_str() {
            // Configured either way: a Configure whose payload is unreadable is answered
            // with the same subscription, and the runtime is named unknown.
            "Configure" => {
                let c = api::ConfigureRequest::decode(&req.payload[..])
                    .unwrap_or_else(|_| api::ConfigureRequest { runtime_name: "unknown".into(), ..Default::default() });
                (
                    ok(api::ConfigureResponse { events: Event::mask() }.encode_to_vec()),
                    Hint::Configured { runtime: c.runtime_name, version: c.runtime_version },
                )
            }
            // Only `more` is read: the parts' pods and containers are the relist's to read.
            "Synchronize" => match api::SynchronizeParts::decode(&req.payload[..]) {
                Ok(s) => {
                    let hint = if s.more { Hint::None } else { Hint::Synchronized };
                    (ok(api::SynchronizeResponse { more: s.more }.encode_to_vec()), hint)
                }
                Err(_) => (ok(Vec::new()), unreadable()),
            },
            "StateChange" => match api::StateChangeEvent::decode(&req.payload[..]) {
                Ok(ev) => {
                    let hint = Event::from_i32(ev.event)
                        .map(|e| Hint::Event(EventHint::of(e, ev.pod.as_ref(), ev.container.as_ref())))
                        .unwrap_or(Hint::None);
                    (ok(Vec::new()), hint)
                }
                Err(_) => (ok(Vec::new()), unreadable()),
            },
            "StopContainer" => call(Event::StopContainer),
            "RunPodSandbox" => call(Event::RunPodSandbox),
            "StopPodSandbox" => call(Event::StopPodSandbox),
            "RemovePodSandbox" => call(Event::RemovePodSandbox),
            "PostCreateContainer" => call(Event::PostCreateContainer),
            "PostStartContainer" => call(Event::PostStartContainer),
            "RemoveContainer" => call(Event::RemoveContainer),
            // Called only when subscribed (plegd subscribes to none of them), answered
            // all the same: no adjustment, no update, no eviction.
            "CreateContainer"
            | "UpdateContainer"
            | "StartContainer"
            | "UpdatePodSandbox"
            | "PostUpdatePodSandbox"
            | "PostUpdateContainer"
            | "ValidateContainerAdjustment" => (ok(Vec::new()), Hint::None),
            "Shutdown" => (ok(Vec::new()), Hint::Shutdown),
            _ => (unimplemented(&req), Hint::None),
        }
    };
    Ok(Answer { response, hint, method: bounded(&req.method) })
}

/// At most this much of a name the runtime sent is repeated or logged.
const NAME_MAX: usize = 128;

fn bounded(name: &str) -> String {
    let mut end = name.len().min(NAME_MAX);
    while !name.is_char_boundary(end) {
        end -= 1;
    }
    name[..end].to_owned()
}

fn unimplemented(req: &api::Request) -> Vec<u8> {
    let message = format!("{}/{} is not served by plegd", bounded(&req.service), bounded(&req.method));
    api::Response { status: Some(api::Status { code: UNIMPLEMENTED, message }), payload: Vec::new() }.encode_to_vec()
}

/// The registration request plegd sends first, on the runtime's connection, stream 1.
pub fn register() -> Message {
    let call = api::RegisterPluginRequest { plugin_name: PLUGIN_NAME.into(), plugin_idx: PLUGIN_IDX.into() };
    let req = api::Request {
        service: RUNTIME_SERVICE.into(),
        method: "RegisterPlugin".into(),
        payload: call.encode_to_vec(),
        timeout_nano: 0,
    };
    Message { conn: RUNTIME_CONN, stream: 1, kind: REQUEST, flags: 0, payload: req.encode_to_vec() }
}

/// How a session ended without an error.
#[derive(Debug, PartialEq, Eq)]
pub enum Ended {
    /// plegd shuts down.
    Shutdown,
    /// The runtime shut the plugin down.
    ByRuntime,
}

/// What a session hands each answered call to.
pub trait Hand {
    /// Takes what an answered call said; `answered_in` is from its read to its answer's
    /// write.
    fn hand(&mut self, method: &str, hint: Hint, answered_in: Duration);
}

/// One connection to the runtime.
pub struct Session {
    stream: UnixStream,
    demux: Demux,
    configured: bool,
}

impl Session {
    /// A session on `stream`, connected to the runtime's NRI socket.
    pub fn new(stream: UnixStream) -> Self {
        Self { stream, demux: Demux::default(), configured: false }
    }

    /// Registers, then answers calls until the runtime closes the connection, shuts the
    /// plugin down, or `shutdown`. Every call a read completes is answered, in one
    /// write, before any is handed on.
    pub async fn run(
        mut self,
        to: &mut impl Hand,
        beat: &Beat,
        shutdown: &CancellationToken,
    ) -> Result<Ended, NriError> {
        self.stream.write_all(&wire::encode(&register())?).await.map_err(NriError::Io)?;
        let configure_by = Instant::now() + CONFIGURE_WITHIN;
        let mut buf = vec![0u8; 64 * 1024];
        let mut tick = beat_timer();
        loop {
            let read = tokio::select! {
                _ = shutdown.cancelled() => return Ok(Ended::Shutdown),
                _ = tick.tick() => { beat.beat(); continue }
                _ = tokio::time::sleep_until(configure_by), if !self.configured => {
                    return Err(NriError::NotConfigured(CONFIGURE_WITHIN));
                }
                read = self.stream.read(&mut buf) => read.map_err(NriError::Io)?,
            };
            let read_at = Instant::now();
            if read == 0 {
                return Err(NriError::Closed);
            }
            let mut out = Vec::new();
            let mut answered = Vec::new();
            // A message plegd cannot take ends the connection, once the calls before it
            // are answered; a frame it cannot read ends it at once.
            let mut bad = None;
            let messages = self.demux.push(&buf[..read])?;
            for message in messages {
                match self.take(message, &mut out) {
                    Ok(Some(a)) => answered.push(a),
                    Ok(None) => {}
                    Err(e) => {
                        bad = Some(e);
                        break;
                    }
                }
            }
            if !out.is_empty() {
                self.stream.write_all(&out).await.map_err(NriError::Io)?;
            }
            if let Some(e) = bad {
                return Err(e);
            }
            let answered_in = read_at.elapsed();
            let mut ended = None;
            for Answer { hint, method, .. } in answered {
                if hint == Hint::Shutdown {
                    ended = Some(Ended::ByRuntime);
                }
                to.hand(&method, hint, answered_in);
            }
            if let Some(ended) = ended {
                return Ok(ended);
            }
        }
    }

    /// Takes one message: a call's answer goes to `out` (and the call is returned, its
    /// answer taken), the registration's answer is checked.
    fn take(&mut self, message: Message, out: &mut Vec<u8>) -> Result<Option<Answer>, NriError> {
        match (message.conn, message.kind) {
            (PLUGIN_CONN, REQUEST) => {
                let mut a = answer(&message.payload)?;
                let response = std::mem::take(&mut a.response);
                let frame =
                    Message { conn: PLUGIN_CONN, stream: message.stream, kind: RESPONSE, flags: 0, payload: response };
                out.extend(wire::encode(&frame)?);
                if matches!(a.hint, Hint::Configured { .. }) {
                    self.configured = true;
                }
                Ok(Some(a))
            }
            (RUNTIME_CONN, RESPONSE) if message.stream == 1 => {
                let resp = api::Response::decode(&message.payload[..])
                    .map_err(|e| NriError::Decode { what: "the registration's answer", source: e })?;
                match resp.status.filter(|s| s.code != 0) {
                    Some(s) => Err(NriError::Refused(bounded(&s.message))),
                    None => Ok(None),
                }
            }
            (conn, kind) => Err(NriError::Unexpected { conn, kind, stream: message.stream }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn call(method: &str, payload: Vec<u8>) -> Vec<u8> {
        api::Request { service: PLUGIN_SERVICE.into(), method: method.into(), payload, timeout_nano: 2_000_000_000 }
            .encode_to_vec()
    }

    fn ok(a: &Answer) -> Vec<u8> {
        let r = api::Response::decode(&a.response[..]).unwrap();
        assert_eq!(r.status, None, "{}: success", a.method);
        r.payload
    }

    #[test]
    fn every_plugin_call_is_answered_with_success_and_no_adjustment_whatever_its_payload() {
        let pod = api::PodSandbox { id: "s1".into(), uid: "u1".into(), name: "web".into(), namespace: "ns".into() };
        let container = api::Container {
            id: "c1".into(),
            pod_sandbox_id: "s1".into(),
            name: "app".into(),
            linux: Some(api::LinuxContainer { cgroups_path: "kubepods-pod.slice:cri-containerd:c1".into() }),
            pid: 4242,
        };
        let ev = api::StateChangeEvent {
            event: Event::PostStartContainer as i32,
            pod: Some(pod.clone()),
            container: Some(container.clone()),
        };
        let a = answer(&call("StateChange", ev.encode_to_vec())).unwrap();
        assert!(ok(&a).is_empty());
        assert_eq!(
            a.hint,
            Hint::Event(EventHint {
                event: Event::PostStartContainer,
                uid: Some("u1".into()),
                sandbox: Some("s1".into()),
                container: Some("c1".into()),
                pid: Some(4242),
                cgroup: Some("kubepods-pod.slice:cri-containerd:c1".into()),
            })
        );
        let a = answer(&call("Configure", api::ConfigureRequest::default().encode_to_vec())).unwrap();
        assert_eq!(api::ConfigureResponse::decode(&ok(&a)[..]).unwrap().events, Event::mask());
        let sync = api::SynchronizeRequest { pods: vec![pod.clone()], containers: vec![container], more: true };
        let a = answer(&call("Synchronize", sync.encode_to_vec())).unwrap();
        assert!(api::SynchronizeResponse::decode(&ok(&a)[..]).unwrap().more, "a part is answered with more");
        assert_eq!(a.hint, Hint::None, "a full relist only after the last part");
        let a = answer(&call("Synchronize", api::SynchronizeRequest::default().encode_to_vec())).unwrap();
        assert_eq!(a.hint, Hint::Synchronized);
        // Garbage inside a well-formed envelope: answered with success all the same.
        for method in ["StateChange", "StopContainer", "Synchronize", "Configure", "CreateContainer", "UpdateContainer"]
        {
            let a = answer(&call(method, vec![0xff, 0xff, 0xff])).unwrap();
            ok(&a);
            assert!(
                matches!(a.hint, Hint::Unreadable { .. } | Hint::None | Hint::Configured { .. }),
                "{method}: {:?}",
                a.hint
            );
        }
    }

    #[test]
    fn another_service_or_method_is_unimplemented_and_a_non_request_is_an_error() {
        for (service, method) in [(RUNTIME_SERVICE, "RegisterPlugin"), (PLUGIN_SERVICE, "Nope")] {
            let req = api::Request { service: service.into(), method: method.into(), ..Default::default() };
            let a = answer(&req.encode_to_vec()).unwrap();
            let r = api::Response::decode(&a.response[..]).unwrap();
            assert_eq!(r.status.map(|s| s.code), Some(UNIMPLEMENTED), "{service}/{method}");
        }
        assert!(matches!(answer(&[0xff, 0xff]), Err(NriError::Decode { .. })));
    }
}

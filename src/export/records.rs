//! A journal entry as an OTLP log record that is an event: `EventName` names the change
//! (`k8s.container.died`), the attributes use the OpenTelemetry semantic conventions
//! where they exist (`k8s.pod.uid`, `container.id`, `k8s.container.restart_count`, the
//! pod's labels as `k8s.pod.label.<key>`, its address as `k8s.pod.ip`, the workload
//! inferred from its name and labels as `k8s.deployment.name` and the like, with
//! `plegd.pod.identity.source` saying it was inferred, …), the record's time is the runtime's time of
//! the change, and `log.record.uid` (node/epoch/revision) lets a backend drop the
//! duplicates at-least-once delivery may send.

use super::otlp::{AnyValue, ArrayValue, KeyValue, LogRecord, any_value::Value};
use crate::journal::Entry;
use crate::model::event::EventType;
use crate::model::identity::Identities;
use crate::model::workload::{self, WorkloadKind};
use crate::model::{ContainerState, system_to_nanos};

/// The event name of a change.
pub fn event_name(kind: EventType, is_sandbox: bool) -> &'static str {
    match (kind, is_sandbox) {
        (EventType::ContainerStarted, false) => "k8s.container.started",
        (EventType::ContainerDied, false) => "k8s.container.died",
        (EventType::ContainerRemoved, false) => "k8s.container.removed",
        (EventType::ContainerChanged, false) => "k8s.container.changed",
        (EventType::ContainerStarted, true) => "k8s.pod.sandbox.started",
        (EventType::ContainerDied, true) => "k8s.pod.sandbox.died",
        (EventType::ContainerRemoved, true) => "k8s.pod.sandbox.removed",
        (EventType::ContainerChanged, true) => "k8s.pod.sandbox.changed",
        (EventType::PodSync, _) => "k8s.pod.synced",
        (EventType::CrashLoop, _) => "k8s.container.crash_loop",
        (EventType::CrashLoopCleared, _) => "k8s.container.crash_loop_cleared",
        (EventType::PodUpdated, _) => "k8s.pod.updated",
    }
}

/// `key` = string.
pub fn kv(key: &str, value: impl Into<String>) -> KeyValue {
    KeyValue { key: key.into(), value: Some(AnyValue { value: Some(Value::StringValue(value.into())) }) }
}

/// `key` = integer.
pub fn kv_int(key: &str, value: i64) -> KeyValue {
    KeyValue { key: key.into(), value: Some(AnyValue { value: Some(Value::IntValue(value)) }) }
}

fn kv_list(key: &str, values: Vec<String>) -> KeyValue {
    let values = values.into_iter().map(|v| AnyValue { value: Some(Value::StringValue(v)) }).collect();
    KeyValue { key: key.into(), value: Some(AnyValue { value: Some(Value::ArrayValue(ArrayValue { values })) }) }
}

/// INFO and WARN, the two severities plegd's events have.
const INFO: (i32, &str) = (9, "INFO");
const WARN: (i32, &str) = (13, "WARN");

/// The record for `entry` of `epoch`, on `node`, its pod's workload as `ids` holds it.
pub fn log_record(entry: &Entry, epoch: u64, node: &str, ids: &Identities) -> LogRecord {
    let ev = &entry.event;
    let container = ev.pod.as_ref().and_then(|p| p.containers.iter().find(|c| c.id == ev.container_id));
    let mut attrs = vec![
        kv("log.record.uid", format!("{node}/{epoch}/{}", entry.revision)),
        kv("k8s.pod.uid", &*ev.pod_uid),
        kv("k8s.pod.name", &*ev.pod_name),
        kv("k8s.namespace.name", &*ev.pod_namespace),
        kv("plegd.event.type", ev.kind.as_str()),
        kv("plegd.source", ev.source.as_str()),
        kv_int("plegd.revision", entry.revision as i64),
        kv_int("plegd.epoch", epoch as i64),
    ];
    if !ev.container_id.is_empty() {
        attrs.push(kv("container.id", &ev.container_id));
    }
    if !ev.container_name.is_empty() {
        attrs.push(kv("k8s.container.name", &*ev.container_name));
    }
    if let Some(ip) = pod_ip(entry) {
        attrs.push(kv("k8s.pod.ip", ip));
    }
    let made = ev.pod.as_ref().map_or(ev.observed_at, |p| p.made_at());
    if let Some(said) = ids.kubelet_pod(&ev.pod_uid) {
        let mut owners: Vec<_> = said.owners().collect();
        owners.dedup();
        for (kind, name) in owners {
            if let Some(kind) = WorkloadKind::of(kind) {
                attrs.push(kv(kind.attribute(), name));
            }
        }
        attrs.push(kv("plegd.pod.identity.source", "PODS_API"));
    } else if let Some(w) = workload::infer(&ev.pod_name, &entry.meta.labels, made) {
        for owner in w.owners() {
            attrs.push(kv(owner.kind.attribute(), &owner.name));
        }
        attrs.push(kv("plegd.pod.identity.source", "INFERRED"));
    }
    for (k, v) in entry.meta.labels.iter() {
        attrs.push(kv(&format!("k8s.pod.label.{k}"), v));
    }
    let mut severity = INFO;
    let mut body = format!("{} {}/{}", ev.kind.as_str(), ev.pod_namespace, ev.pod_name);
    if !ev.container_name.is_empty() {
        body.push_str(&format!(" container {}", ev.container_name));
    }
    if let Some(c) = container {
        attrs.push(kv_int("k8s.container.restart_count", i64::from(c.attempt)));
        if !c.image.is_empty() {
            attrs.push(kv("container.image.name", &*c.image));
        }
        if c.image_ref.contains('@') {
            attrs.push(kv_list("container.image.repo_digests", vec![c.image_ref.to_string()]));
        }
        if !c.image_id.is_empty() {
            attrs.push(kv("container.image.id", &*c.image_id));
        }
        if c.state == ContainerState::Exited && ev.kind == EventType::ContainerDied {
            if !c.reason.is_empty() {
                attrs.push(kv("k8s.container.status.last_terminated_reason", &c.reason));
            }
            attrs.push(kv_int("process.exit.code", i64::from(c.exit_code)));
            body.push_str(&format!(": exit {}", c.exit_code));
            if !c.reason.is_empty() {
                body.push_str(&format!(" ({})", c.reason));
            }
            if c.exit_code != 0 || c.reason == "OOMKilled" {
                severity = WARN;
            }
        }
    }
    if ev.kind == EventType::CrashLoop {
        severity = WARN;
    }
    if !ev.message.is_empty() {
        body.push_str(&format!(" — {}", ev.message));
    }
    let observed = system_to_nanos(ev.observed_at).max(0) as u64;
    LogRecord {
        time_unix_nano: ev.runtime_timestamp.map_or(observed, |t| system_to_nanos(t).max(0) as u64),
        observed_time_unix_nano: observed,
        severity_number: severity.0,
        severity_text: severity.1.into(),
        body: Some(AnyValue { value: Some(Value::StringValue(body)) }),
        attributes: attrs,
        event_name: event_name(ev.kind, ev.is_sandbox).into(),
    }
}

/// The address the record is about. A sandbox's record: that sandbox's own (the one it
/// held, after it stopped too), and none where the status no longer holds the sandbox
/// (the pod's address may be a newer sandbox's). A container's: the pod's, else the
/// last the pod held (a removal carries no pod).
fn pod_ip(entry: &Entry) -> Option<&str> {
    let ev = &entry.event;
    let pod = ev.pod.as_deref();
    let ip = if ev.is_sandbox {
        pod.and_then(|p| p.sandboxes.iter().find(|s| s.id == ev.container_id)).map(|s| s.ip.as_str())
    } else {
        pod.and_then(|p| p.ips.first()).or_else(|| entry.meta.ips.first()).map(String::as_str)
    };
    ip.filter(|ip| !ip.is_empty())
}

/// Revisions the exporter could not send (`from..=to`, or every one from `from` on when
/// the end is unknown): one record that says which and why.
pub fn lost_record(node: &str, epoch: u64, from: u64, to: Option<u64>, why: &str) -> LogRecord {
    let now = system_to_nanos(std::time::SystemTime::now()).max(0) as u64;
    let range = to.map_or_else(|| format!("{from}.."), |to| format!("{from}..={to}"));
    let mut attributes = vec![
        kv("log.record.uid", format!("{node}/{epoch}/lost/{range}")),
        kv_int("plegd.lost.from", from as i64),
        kv_int("plegd.epoch", epoch as i64),
        kv("plegd.lost.reason", why),
    ];
    if let Some(to) = to {
        attributes.push(kv_int("plegd.lost.to", to as i64));
    }
    LogRecord {
        time_unix_nano: now,
        observed_time_unix_nano: now,
        severity_number: WARN.0,
        severity_text: WARN.1.into(),
        body: Some(AnyValue {
            value: Some(Value::StringValue(format!(
                "plegd on {node} could not export revisions {range} of epoch {epoch}: {why}"
            ))),
        }),
        attributes,
        event_name: "plegd.export.lost".into(),
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::time::{Duration, SystemTime};

    use super::*;
    use crate::journal::PodMeta;
    use crate::model::event::{EventSource, PodLifecycleEvent};
    use crate::model::{ContainerStatus, PodStatus};
    use crate::proto::plegd as api;

    fn attr<'a>(r: &'a LogRecord, key: &str) -> Option<&'a Value> {
        r.attributes.iter().find(|a| a.key == key).and_then(|a| a.value.as_ref()?.value.as_ref())
    }

    #[test]
    fn an_oom_kill_is_a_warning_event_with_the_conventions_attributes() {
        let c = ContainerStatus {
            id: "c1".into(),
            name: "app".into(),
            attempt: 3,
            state: ContainerState::Exited,
            exit_code: 137,
            reason: "OOMKilled".into(),
            image: "reg/app:1".into(),
            image_ref: "reg/app@sha256:ab".into(),
            ..Default::default()
        };
        let mut pod = PodStatus::empty("u1", "shop", "web-5f7b9c6d48-q2xkz");
        pod.labels = [("app", "web"), ("pod-template-hash", "5f7b9c6d48")].into();
        pod.ips = vec!["10.244.0.7".into(), "fd00::7".into()];
        pod.containers = vec![Arc::new(c)];
        let when = SystemTime::UNIX_EPOCH + Duration::from_secs(1_800_000_000);
        let ev = PodLifecycleEvent {
            pod_uid: "u1".into(),
            pod_namespace: "shop".into(),
            pod_name: "web-5f7b9c6d48-q2xkz".into(),
            kind: EventType::ContainerDied,
            container_id: "c1".into(),
            container_name: "app".into(),
            is_sandbox: false,
            source: EventSource::CriEvent,
            observed_at: when + Duration::from_millis(3),
            runtime_timestamp: Some(when),
            pod: Some(Arc::new(pod.clone())),
            message: String::new(),
        };
        let entry =
            Entry { revision: 42, event: Arc::new(ev), meta: Arc::new(PodMeta::of(&pod)), left: None, bytes: 0 };
        let r = log_record(&entry, 7, "node-a", &Identities::new("node-a", std::time::Duration::ZERO));
        assert_eq!(r.event_name, "k8s.container.died");
        assert_eq!((r.severity_number, r.severity_text.as_str()), (13, "WARN"));
        assert_eq!(r.time_unix_nano, 1_800_000_000_000_000_000);
        assert_eq!(r.observed_time_unix_nano, 1_800_000_000_003_000_000);
        let s = |k| match attr(&r, k) {
            Some(Value::StringValue(s)) => s.clone(),
            other => panic!("{k}: {other:?}"),
        };
        assert_eq!(s("log.record.uid"), "node-a/7/42");
        assert_eq!(s("k8s.pod.uid"), "u1");
        assert_eq!(s("k8s.namespace.name"), "shop");
        assert_eq!(s("k8s.container.name"), "app");
        assert_eq!(s("container.id"), "c1");
        assert_eq!(s("k8s.container.status.last_terminated_reason"), "OOMKilled");
        assert_eq!(s("k8s.pod.label.app"), "web");
        assert_eq!(s("k8s.pod.ip"), "10.244.0.7", "the primary address");
        assert_eq!(s("k8s.replicaset.name"), "web-5f7b9c6d48");
        assert_eq!(s("k8s.deployment.name"), "web");
        assert_eq!(s("plegd.pod.identity.source"), "INFERRED");
        assert_eq!(attr(&r, "process.exit.code"), Some(&Value::IntValue(137)));
        assert_eq!(attr(&r, "k8s.container.restart_count"), Some(&Value::IntValue(3)));

        // The kubelet said otherwise (adopted by another ReplicaSet, under a Rollout it
        // does not know): its word, and only the kinds OpenTelemetry names.
        let ids = Identities::new("node-a", std::time::Duration::ZERO);
        let controller = api::WorkloadRef { kind: "ReplicaSet".into(), name: "web-abc".into(), uid: "rs".into() };
        let workload = api::WorkloadRef { kind: "Rollout".into(), name: "web".into(), uid: String::new() };
        let identity = api::PodIdentity {
            controller: Some(controller),
            workload: Some(workload),
            source: api::IdentitySource::PodsApi as i32,
            ..Default::default()
        };
        ids.said("u1", crate::model::identity::KubeletPod::new(identity, false));
        let r = log_record(&entry, 7, "node-a", &ids);
        let s = |k| match attr(&r, k) {
            Some(Value::StringValue(s)) => Some(s.clone()),
            _ => None,
        };
        assert_eq!(s("k8s.replicaset.name").as_deref(), Some("web-abc"));
        assert_eq!(s("k8s.deployment.name"), None, "nothing inferred beside the kubelet's word");
        assert_eq!(s("plegd.pod.identity.source").as_deref(), Some("PODS_API"));
    }

    #[test]
    fn a_sandbox_record_names_the_address_that_sandbox_held_and_no_other() {
        use crate::model::SandboxStatus;
        let mut pod = PodStatus::empty("u1", "shop", "web-0");
        pod.ips = vec!["10.244.0.9".into()];
        pod.sandboxes = vec![
            SandboxStatus { id: "s2".into(), ip: "10.244.0.9".into(), ..Default::default() },
            SandboxStatus { id: "s1".into(), ip: "10.244.0.4".into(), ..Default::default() },
            SandboxStatus { id: "host".into(), ..Default::default() },
        ];
        let record_of = |id: &str, kind, pod: Option<&PodStatus>, is_sandbox: bool| {
            let ev = PodLifecycleEvent {
                pod_uid: "u1".into(),
                pod_namespace: "shop".into(),
                pod_name: "web-0".into(),
                kind,
                container_id: id.into(),
                container_name: "".into(),
                is_sandbox,
                source: EventSource::Relist,
                observed_at: SystemTime::now(),
                runtime_timestamp: None,
                pod: pod.map(|p| Arc::new(p.clone())),
                message: String::new(),
            };
            let meta = Arc::new(PodMeta::of(&pod_with_ips()));
            log_record(
                &Entry { revision: 1, event: Arc::new(ev), meta, left: None, bytes: 0 },
                1,
                "n",
                &Identities::new("n", std::time::Duration::ZERO),
            )
        };
        let record = |id: &str, kind, pod: Option<&PodStatus>| record_of(id, kind, pod, true);
        let ip = |r: &LogRecord| match attr(r, "k8s.pod.ip") {
            Some(Value::StringValue(s)) => Some(s.clone()),
            _ => None,
        };
        assert_eq!(ip(&record("s1", EventType::ContainerDied, Some(&pod))).as_deref(), Some("10.244.0.4"));
        assert_eq!(ip(&record("s2", EventType::ContainerStarted, Some(&pod))).as_deref(), Some("10.244.0.9"));
        assert_eq!(ip(&record("host", EventType::ContainerStarted, Some(&pod))), None, "host network: none");
        assert_eq!(ip(&record("gone", EventType::ContainerRemoved, Some(&pod))), None, "not the newer sandbox's");
        assert_eq!(ip(&record("s2", EventType::ContainerRemoved, None)), None, "which sandbox held what is unknown");
        let container_gone = record_of("c1", EventType::ContainerRemoved, None, false);
        assert_eq!(ip(&container_gone).as_deref(), Some("10.244.0.7"), "a container's: the pod's last");
    }

    fn pod_with_ips() -> PodStatus {
        PodStatus { ips: vec!["10.244.0.7".into()], ..PodStatus::empty("u1", "shop", "web-0") }
    }

    #[test]
    fn every_event_type_has_a_name_without_dynamic_parts() {
        for kind in [
            EventType::ContainerStarted,
            EventType::ContainerDied,
            EventType::ContainerRemoved,
            EventType::ContainerChanged,
            EventType::PodSync,
            EventType::CrashLoop,
            EventType::CrashLoopCleared,
        ] {
            for sandbox in [false, true] {
                let n = event_name(kind, sandbox);
                assert!(
                    n.starts_with("k8s.")
                        && n.chars().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '.' || c == '_'),
                    "{n}"
                );
            }
        }
    }
}

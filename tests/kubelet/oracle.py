"""The kubelet's own PLEG as the oracle of plegd's stream.

Pure functions over what a run leaves behind: the kubelet's `-v=4` logs (each
`"GenericPLEG"` line is one transition its relist saw), a `plegd watch -o json`
recording, and the two views of the pods at the end (`/pods` on the kubelet's
read-only port, `plegd pods -o json`). `tests/kubelet/harness.py` drives a run and
calls `check` and `end_states`; `tests/kubelet/oracle_test.py` pins each rule.

The rules (docs/beside-the-kubelet.md says them for users):

* Every transition the kubelet logged is in plegd's stream: the same pod uid, the same
  container or sandbox id, and the event type the kubelet's `generateEvents` gives that
  transition (Died and Removed both for a running object that vanished). An object plegd
  already had when its stream began is in the stream's snapshot instead.
* plegd observed it no later than the kubelet logged it (to plegd's millisecond
  precision), except inside a window the run declares blind for plegd (plegd killed,
  containerd restarting): there it must be found, and its lateness is reported.
* An event of plegd's that matches no kubelet transition is one of the documented
  differences (docs/kubelet-differences.md), and is reported under its name; any other
  is a failure.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
import re
from collections import defaultdict
from typing import Iterable

UTC = dt.timezone.utc
# Plegd's times are RFC 3339 to the millisecond; the kubelet's to the microsecond.
PRECISION = dt.timedelta(milliseconds=1)
# From the runtime's change to plegd's event: the runtime's event, plegd's read of the pod,
# the journal. A kubelet relist that lands inside that time sees the change first; plegd
# is then not late if it was this quick.
STREAM_BUDGET = dt.timedelta(milliseconds=250)
# The runtime's timestamp is not when the change became visible (a start is stamped when
# the process began, and told when StartContainer returns, hundreds of milliseconds later
# on a loaded node), and a removal has none: an event plegd took from the runtime's
# stream, or from its NRI call, and published this soon after the kubelet's relist is
# the same tie.
UNTIMED_TIE = dt.timedelta(milliseconds=50)

GENERIC_PLEG = re.compile(
    r'^[IWEF](?P<mo>\d{2})(?P<d>\d{2}) (?P<h>\d{2}):(?P<mi>\d{2}):(?P<s>\d{2})\.(?P<us>\d{6})\s+\d+ '
    r'\S+\] "GenericPLEG" podUID="(?P<uid>[^"]+)" containerID="(?P<id>[^"]+)" '
    r'oldState="(?P<old>[^"]+)" newState="(?P<new>[^"]+)"'
)

# Types plegd publishes that the kubelet's PLEG has no transition for
# (docs/kubelet-differences.md).
PLEGD_ONLY_TYPES = {
    "POD_SYNC": "a status amended without a transition (a lost exit word read again)",
    "CRASH_LOOP": "plegd's crash-loop signal",
    "CRASH_LOOP_CLEARED": "plegd's crash-loop signal",
    "POD_UPDATED": "the pod's identity changed, as the kubelet's Pods API said",
}
# The order of a container's states as the kubelet's relist can see them.
STATE_OF_TYPE = {"CONTAINER_CHANGED": "unknown", "CONTAINER_STARTED": "running", "CONTAINER_DIED": "exited"}
STATE_RANK = {"unknown": 0, "running": 1, "exited": 2, "non-existent": 3}


@dataclasses.dataclass(frozen=True)
class Transition:
    """One `GenericPLEG` line."""

    at: dt.datetime
    uid: str
    id: str
    old: str
    new: str
    log: str = ""

    def types(self) -> list[str]:
        """The events the kubelet's generateEvents makes of this transition."""
        if self.new == "running":
            return ["CONTAINER_STARTED"]
        if self.new == "exited":
            return ["CONTAINER_DIED"]
        if self.new == "unknown":
            return ["CONTAINER_CHANGED"]
        if self.new == "non-existent":
            return ["CONTAINER_REMOVED"] if self.old == "exited" else ["CONTAINER_DIED", "CONTAINER_REMOVED"]
        raise ValueError(f"unknown kubelet PLEG state {self.new!r}")


@dataclasses.dataclass(frozen=True)
class Event:
    """One event of plegd's stream."""

    at: dt.datetime
    uid: str
    id: str
    type: str
    source: str
    revision: int
    name: str = ""
    is_sandbox: bool = False
    runtime_at: dt.datetime | None = None  # the runtime's time of the change, where known


@dataclasses.dataclass
class Stream:
    """A `plegd watch -o json` recording: its snapshots' objects and its events."""

    snapshot: dict = dataclasses.field(default_factory=dict)  # (uid, id) -> state as the kubelet names it
    events: list = dataclasses.field(default_factory=list)
    resets: int = 0
    begun: dt.datetime | None = None  # first synced seen by the recorder


@dataclasses.dataclass(frozen=True)
class Window:
    """A time the run declares plegd blind in (plegd down, containerd restarting)."""

    start: dt.datetime
    end: dt.datetime
    why: str

    def holds(self, t: dt.datetime) -> bool:
        return self.start <= t <= self.end


@dataclasses.dataclass
class Verdict:
    matched: list = dataclasses.field(default_factory=list)  # (transition, type, lead seconds)
    late_excused: list = dataclasses.field(default_factory=list)  # (transition, type, lead, why)
    tied: list = dataclasses.field(default_factory=list)  # (transition, type, lead, kubelet after change, plegd after change)
    in_snapshot: list = dataclasses.field(default_factory=list)
    missing: list = dataclasses.field(default_factory=list)  # (transition, type)
    late: list = dataclasses.field(default_factory=list)  # (transition, type, lead)
    extra: dict = dataclasses.field(default_factory=lambda: defaultdict(list))  # difference -> [event]
    unexplained: list = dataclasses.field(default_factory=list)
    # Times the kubelet was not relisting: a transition it logged there (its first relist
    # after a restart reporting what was already there) says nothing of plegd's lead.
    kubelet_blind: list = dataclasses.field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not (self.missing or self.late or self.unexplained)

    def leads(self) -> list[float]:
        """plegd's lead over the kubelet, seconds, for every transition both saw as it
        happened (ties within plegd's stream time count with their negative lead)."""
        both = [(t, lead) for t, _, lead in self.matched] + [(t, lead) for t, _, lead, _, _ in self.tied]
        return sorted(lead for t, lead in both if not any(w.holds(t.at) for w in self.kubelet_blind))


def parse_time(s: str) -> dt.datetime:
    return dt.datetime.fromisoformat(s.replace("Z", "+00:00"))


def kubelet_transitions(lines: Iterable[str], year: int, log: str = "") -> list[Transition]:
    """The `GenericPLEG` lines of a kubelet log (klog's time has no year; the kubelet runs
    with TZ=UTC). A line the kubelet logs again for the same transition (its cache update
    failed and the relist regenerated it) counts once."""
    out, seen = [], set()
    for line in lines:
        m = GENERIC_PLEG.match(line)
        if not m:
            continue
        at = dt.datetime(year, int(m["mo"]), int(m["d"]), int(m["h"]), int(m["mi"]), int(m["s"]), int(m["us"]), UTC)
        key = (m["uid"], m["id"], m["old"], m["new"])
        if key in seen:
            continue
        seen.add(key)
        out.append(Transition(at, m["uid"], m["id"], m["old"], m["new"], log))
    return out


PROBE_FAILED = re.compile(
    r'^[IWEF](?P<mo>\d{2})(?P<d>\d{2}) (?P<h>\d{2}):(?P<mi>\d{2}):(?P<s>\d{2})\.(?P<us>\d{6})\s+\d+ '
    r'\S+\] "Probe failed" probeType="(?P<type>[^"]+)" pod="(?P<pod>[^"]+)"'
)


@dataclasses.dataclass
class ProbeFailures:
    """The kubelet's failed probes of one pod, split by whether they count against it."""
    counted: list[str]
    before_listening: list[str]


def probe_failures(lines: Iterable[str], year: int, pod_prefix: str, first_ready: dt.datetime | None) -> ProbeFailures:
    """The kubelet's `Probe failed` lines for pods whose name starts with `pod_prefix`.

    A readiness probe refused a connection before the pod was first seen ready is the
    process not yet listening: every pod's start looks so, and readiness exists to say it.
    Everything else counts: any liveness or startup failure, any readiness failure once
    the pod had been ready, and any readiness failure that is not a refused connection (a
    listener that answered wrongly)."""
    out = ProbeFailures([], [])
    for line in lines:
        m = PROBE_FAILED.match(line)
        if not m or not m["pod"].startswith(pod_prefix):
            continue
        at = dt.datetime(year, int(m["mo"]), int(m["d"]), int(m["h"]), int(m["mi"]), int(m["s"]), int(m["us"]), UTC)
        starting = first_ready is None or at < first_ready
        if m["type"] == "Readiness" and starting and "connection refused" in line:
            out.before_listening.append(line)
        else:
            out.counted.append(line)
    return out


def state_name(state: str) -> str:
    """`CONTAINER_STATE_RUNNING` (the proto's name, as `plegd … -o json` prints it) →
    `CONTAINER_RUNNING`; the short names pass unchanged."""
    return state.replace("_STATE_", "_")


def _kubelet_state(obj: dict, sandbox: bool) -> str:
    state = state_name(obj.get("state", ""))
    if sandbox:
        return "running" if state == "SANDBOX_READY" else "exited"
    return {"CONTAINER_RUNNING": "running", "CONTAINER_EXITED": "exited"}.get(state, "unknown")


def plegd_stream(lines: Iterable[str]) -> Stream:
    """A recording of `plegd watch -o json` (one JSON message per line)."""
    s = Stream()
    for line in lines:
        line = line.strip()
        if not line.startswith("{"):
            continue
        msg = json.loads(line)
        rev = msg.get("revision", 0)
        if "reset" in msg:
            s.resets += 1
        elif "snapshot" in msg:
            pod = msg["snapshot"]
            for sb in pod.get("sandboxes", []):
                s.snapshot[(pod["uid"], sb["id"])] = _kubelet_state(sb, True)
            for c in pod.get("containers", []):
                s.snapshot[(pod["uid"], c["id"])] = _kubelet_state(c, False)
        elif "synced" in msg and s.begun is None:
            s.begun = dt.datetime.now(UTC)
        elif "event" in msg:
            e = msg["event"]
            s.events.append(
                Event(
                    at=parse_time(e["observed_at"]),
                    uid=e["pod_uid"],
                    id=e["container_id"],
                    type=e["type"],
                    source=e["source"],
                    revision=rev,
                    name=e.get("pod_name", ""),
                    is_sandbox=e.get("is_sandbox", False),
                    runtime_at=parse_time(e["runtime_timestamp"]) if e.get("runtime_timestamp") else None,
                )
            )
    return s


def check(
    transitions: list[Transition],
    stream: Stream,
    blind: list[Window],
    until: dt.datetime,
    kubelet_blind: list[Window] = (),
    relist_period: dt.timedelta = dt.timedelta(seconds=1),
    relisting: dt.timedelta | None = None,
) -> Verdict:
    """Compares the kubelet's transitions with plegd's stream.

    `blind`: windows in which plegd could not see (it may be late there, not absent).
    `kubelet_blind`: windows in which the kubelet was not relisting (stopped, restarting).
    `until`: the last moment the kubelet was relisting; plegd's events after it have no
    kubelet transition to meet and are not judged.
    `relisting`: plegd relists like the kubelet (no event stream): it may be later than
    the kubelet by up to this much (a period and a read), reported, not failed."""
    v = Verdict(kubelet_blind=list(kubelet_blind))
    by_key, by_id = defaultdict(list), defaultdict(list)
    for e in stream.events:
        by_key[(e.uid, e.id, e.type)].append(e)
        by_id[(e.uid, e.id)].append(e)
    used = set()
    for t in transitions:
        for ty in t.types():
            found = by_key.get((t.uid, t.id, ty), [])
            if not found:
                state = stream.snapshot.get((t.uid, t.id))
                later = [e for e in by_id.get((t.uid, t.id), ())
                         if STATE_RANK.get(STATE_OF_TYPE.get(e.type, "non-existent"), 3) > STATE_RANK[t.new]]
                if state is not None and (ty == "CONTAINER_REMOVED" or STATE_RANK[state] >= STATE_RANK[t.new]):
                    v.in_snapshot.append((t, ty))
                elif relisting is not None and ty in ("CONTAINER_CHANGED", "CONTAINER_STARTED") and later:
                    v.late_excused.append((t, ty, 0.0, "a state shorter than plegd's own relist period"))
                elif ty in ("CONTAINER_CHANGED", "CONTAINER_STARTED") and any(
                    w.holds(t.at) and any(w.holds(e.at) or e.at > w.end for e in later) for w in blind
                ):
                    # Begun and ended while plegd could not see: like the kubelet after
                    # its own restart, plegd's next read finds the object already past it.
                    v.late_excused.append((t, ty, 0.0, "a state that began and ended while plegd was blind"))
                else:
                    v.missing.append((t, ty))
                continue
            first = min(found, key=lambda e: e.at)
            for e in found:
                used.add(id(e))
            lead = (t.at - first.at).total_seconds()
            if first.at <= t.at + PRECISION:
                v.matched.append((t, ty, lead))
                continue
            why = next((w.why for w in blind if w.holds(t.at) or w.holds(first.at)), None)
            if first.runtime_at is not None and first.at - first.runtime_at <= STREAM_BUDGET and t.at >= first.runtime_at:
                v.tied.append((t, ty, lead, t.at - first.runtime_at, first.at - first.runtime_at))
            elif first.source in ("CRI_EVENT", "NRI") and first.at - t.at <= UNTIMED_TIE:
                v.tied.append((t, ty, lead, None, None))
            elif why:
                v.late_excused.append((t, ty, lead, why))
            elif relisting is not None and -lead <= relisting.total_seconds():
                v.late_excused.append((t, ty, lead, "relisting, as the kubelet does"))
            else:
                v.late.append((t, ty, lead))
    first_seen = {}
    for t in transitions:
        key = (t.uid, t.id)
        if key not in first_seen or t.at < first_seen[key].at:
            first_seen[key] = t
    for e in stream.events:
        if id(e) in used or e.at > until:
            continue
        if e.type in PLEGD_ONLY_TYPES:
            v.extra[f"{e.type}: {PLEGD_ONLY_TYPES[e.type]}"].append(e)
            continue
        seen = first_seen.get((e.uid, e.id))
        state = STATE_OF_TYPE.get(e.type)
        if seen is not None and state is not None and STATE_RANK[seen.new] > STATE_RANK[state]:
            v.extra["a state that ended between two of the kubelet's relists"].append(e)
        elif seen is None and _lived_unseen(e, by_key, kubelet_blind, relist_period * 2):
            v.extra["an object created and removed between two of the kubelet's relists"].append(e)
        else:
            v.unexplained.append(e)
    return v


def _lived_unseen(e: Event, by_key: dict, kubelet_blind: Iterable[Window], span: dt.timedelta) -> bool:
    """An object the kubelet never saw: plegd saw it removed, and its whole life fits
    between two relists of the kubelet or in a time the kubelet was not relisting."""
    removed = by_key.get((e.uid, e.id, "CONTAINER_REMOVED"))
    if not removed:
        return False
    gone = min(r.at for r in removed)
    return gone - e.at <= span or any(w.holds(e.at) and w.holds(gone) for w in kubelet_blind)


def percentile(xs: list[float], p: float) -> float:
    if not xs:
        return float("nan")
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(p / 100 * (len(xs) - 1))))]


def report(name: str, v: Verdict) -> str:
    leads = v.leads()
    out = [
        f"{name}: {len(v.matched) + len(v.tied) + len(v.late_excused) + len(v.in_snapshot) + len(v.missing) + len(v.late)} kubelet "
        f"PLEG events; {len(v.matched)} in plegd's stream no later than the kubelet "
        f"(lead over {len(leads)} seen by both as they happened: p50 {percentile(leads, 50) * 1e3:.0f} ms, p99 {percentile(leads, 99) * 1e3:.0f} ms, "
        f"min {min(leads, default=float('nan')) * 1e3:.0f} ms); {len(v.in_snapshot)} in its snapshot; "
        f"{len(v.tied)} where the kubelet relisted within plegd's stream time of the change; "
        f"{len(v.late_excused)} excused (found after a declared blind window, or plegd only relisting); "
        f"{len(v.missing)} missing; {len(v.late)} late",
    ]
    for t, ty, lead, k_after, p_after in v.tied:
        if k_after is None:
            out.append(f"  plegd's event from the runtime's stream {-lead * 1e3:.0f} ms after the kubelet's relist: "
                       f"{ty} {t.uid[:8]} {t.id[:12]}")
            continue
        out.append(f"  kubelet relisted {k_after.total_seconds() * 1e3:.0f} ms after the change, plegd's event "
                   f"{p_after.total_seconds() * 1e3:.0f} ms after it: {ty} {t.uid[:8]} {t.id[:12]}")
    shown = defaultdict(int)
    for t, ty, lead, why in v.late_excused:
        shown[why] += 1
        if shown[why] <= 5:
            out.append(f"  excused ({why}): {ty} {t.uid[:8]} {t.id[:12]} {-lead * 1e3:.0f} ms after the kubelet")
    for why, n in shown.items():
        if n > 5:
            out.append(f"  excused ({why}): {n} in all")
    for t, ty in v.missing:
        out.append(f"  MISSING {ty} pod {t.uid} id {t.id} ({t.old} -> {t.new} at {t.at.isoformat()}, {t.log})")
    for t, ty, lead in v.late:
        out.append(f"  LATE {ty} pod {t.uid} id {t.id}: {-lead * 1e3:.1f} ms after the kubelet ({t.at.isoformat()})")
    for why, es in sorted(v.extra.items()):
        out.append(f"  plegd only, documented — {why}: {len(es)}")
    for e in v.unexplained:
        out.append(f"  UNEXPLAINED plegd event {e.type} pod {e.uid} ({e.name}) id {e.id} at {e.at.isoformat()} rev {e.revision}")
    return "\n".join(out)


def _latest(containers: list[dict], name: str) -> tuple[dict | None, dict | None]:
    mine = sorted((dict(c, state=state_name(c["state"])) for c in containers if c["name"] == name),
                  key=lambda c: c["attempt"])
    if not mine:
        return None, None
    return mine[-1], (mine[-2] if len(mine) > 1 else None)


def end_states(kubelet_pods: dict, plegd_pods: dict, removed=lambda uid, name, attempt: None) -> list[str]:
    """Differences between the kubelet's `/pods` and plegd's `ListPods` at the same moment:
    for each container the kubelet reports, its restart count, state, and last
    termination's exit code and reason. Empty when they agree.

    The kubelet's last termination can be of an attempt its garbage collector has already
    removed from the runtime: `removed(uid, name, attempt)` then gives plegd's tombstone of
    it (`GetContainer` by pod, name and attempt), or None."""
    by_uid = {p["uid"]: p for p in plegd_pods.get("pods", [])}
    diffs = []
    for pod in kubelet_pods.get("items", []):
        meta, status = pod["metadata"], pod.get("status", {})
        uid, name = meta["uid"], f'{meta.get("namespace")}/{meta["name"]}'
        mine = by_uid.get(uid)
        if mine is None:
            diffs.append(f"{name}: not in plegd's pods")
            continue
        for cs in status.get("initContainerStatuses", []) + status.get("containerStatuses", []):
            cname = cs["name"]
            latest, previous = _latest(mine["containers"], cname)
            where = f"{name} {cname}"
            if latest is None and cs.get("containerID"):
                # Removed from the runtime (a completed init container the kubelet
                # pruned) while the kubelet still reports its status: plegd's tombstone.
                found = removed(uid, cname, cs.get("restartCount", 0))
                latest = dict(found, state=state_name(found["state"])) if found else None
            if latest is None:
                if "waiting" in cs.get("state", {}) and not cs.get("containerID"):
                    continue  # not created yet, for either
                diffs.append(f"{where}: the kubelet has it, plegd has no container of that name")
                continue
            if cs.get("restartCount", 0) != latest["attempt"]:
                diffs.append(f"{where}: restart count {cs.get('restartCount', 0)} (kubelet) vs attempt {latest['attempt']} (plegd)")
            state = cs.get("state", {})
            if "running" in state:
                if latest["state"] != "CONTAINER_RUNNING":
                    diffs.append(f"{where}: running (kubelet) vs {latest['state']} (plegd)")
                last_exited = previous
            elif "terminated" in state:
                term = state["terminated"]
                if latest["state"] != "CONTAINER_EXITED":
                    diffs.append(f"{where}: terminated (kubelet) vs {latest['state']} (plegd)")
                elif (term.get("exitCode"), term.get("reason", "")) != (latest["exit_code"], latest["reason"]):
                    diffs.append(
                        f"{where}: terminated {term.get('exitCode')} {term.get('reason')} (kubelet) vs "
                        f"{latest['exit_code']} {latest['reason']} (plegd)"
                    )
                last_exited = previous
            else:  # waiting: back-off after the latest exit, or created and not started
                if latest["state"] == "CONTAINER_RUNNING":
                    diffs.append(f"{where}: waiting (kubelet) vs running (plegd)")
                last_exited = latest if latest["state"] == "CONTAINER_EXITED" else previous
            last = cs.get("lastState", {}).get("terminated")
            if last and last_exited is None and latest["attempt"] > 0:
                found = removed(uid, cname, latest["attempt"] - 1)
                last_exited = dict(found, state=state_name(found["state"])) if found else None
            if last and last_exited is not None:
                got = (last_exited["exit_code"], last_exited["reason"])
                if (last.get("exitCode"), last.get("reason", "")) != got:
                    diffs.append(
                        f"{where}: last termination {last.get('exitCode')} {last.get('reason')} (kubelet) vs "
                        f"{got[0]} {got[1]} (plegd, attempt {last_exited['attempt']})"
                    )
            elif last and last_exited is None:
                diffs.append(f"{where}: the kubelet has a last termination, plegd no earlier attempt, live or removed")
    return diffs


def kubelet_identity(pod: dict) -> dict:
    """A pod's identity as the kubelet's `/pods` says it, in plegd's JSON shape (`plegd
    pods -o json`): the owner reference with `controller: true`, the node, the QoS class,
    the priority, the service account, the runtime class, the addresses."""
    meta, spec, status = pod["metadata"], pod.get("spec", {}), pod.get("status", {})
    owner = next((o for o in meta.get("ownerReferences", []) if o.get("controller")), None)
    return {
        "node_name": spec.get("nodeName", ""),
        "controller": {"kind": owner["kind"], "name": owner["name"], "uid": owner.get("uid", "")} if owner else None,
        "qos_class": status.get("qosClass", ""),
        "priority": spec.get("priority", 0),
        "priority_class_name": spec.get("priorityClassName", ""),
        "service_account": spec.get("serviceAccountName", ""),
        "runtime_class": spec.get("runtimeClassName", ""),
        # A host-network pod's addresses are the node's: the kubelet names them as the
        # pod's, plegd as the host's only.
        "pod_ips": [] if spec.get("hostNetwork") else [i["ip"] for i in status.get("podIPs", [])],
        "host_ips": [i["ip"] for i in status.get("hostIPs", [])],
    }


# The OpenTelemetry attribute of each controller kind (semantic conventions, k8s.*).
WORKLOAD_ATTRIBUTES = {"Deployment": "k8s.deployment.name", "ReplicaSet": "k8s.replicaset.name",
                       "StatefulSet": "k8s.statefulset.name", "DaemonSet": "k8s.daemonset.name",
                       "Job": "k8s.job.name", "CronJob": "k8s.cronjob.name"}


def workload_attributes(meta: dict, made: dt.datetime) -> dict[str, str]:
    """The workload attributes a record of the pod with metadata `meta`, made at `made`,
    must carry: its controller's (the owner reference with `controller: true`) and the
    workload above it by the controllers' own naming, a ReplicaSet's Deployment
    (`<deployment>-<pod-template-hash>`) and a Job's CronJob (`<cronjob>-<scheduled
    minute>`, a minute at most 35 days before the pod and a day after it, as plegd reads
    it)."""
    owner = next((o for o in meta.get("ownerReferences", []) if o.get("controller")), None)
    if not owner or owner["kind"] not in WORKLOAD_ATTRIBUTES:
        return {}
    kind, name = owner["kind"], owner["name"]
    attrs = {WORKLOAD_ATTRIBUTES[kind]: name}
    h = (meta.get("labels") or {}).get("pod-template-hash", "")
    if kind == "ReplicaSet" and h and name.endswith("-" + h) and len(name) > len(h) + 1:
        attrs["k8s.deployment.name"] = name[:-len(h) - 1]
    m = re.fullmatch(r"(.+)-(\d+)", name)
    if kind == "Job" and m and -35 * 24 * 60 <= int(m[2]) - made.timestamp() / 60 <= 24 * 60:
        attrs["k8s.cronjob.name"] = m[1]
    return attrs


def identity_diffs(kubelet_pods: dict, plegd_pods: dict, source: str = "PODS_API") -> list[str]:
    """Differences between each pod's identity as the kubelet's `/pods` says it and as
    plegd serves it, which must come from `source`. A host-network pod's addresses are
    the node's: plegd names none as the pod's. Empty when they agree."""
    by_uid = {p["uid"]: p for p in plegd_pods.get("pods", [])}
    diffs = []
    for pod in kubelet_pods.get("items", []):
        meta = pod["metadata"]
        name = f'{meta.get("namespace")}/{meta["name"]}'
        mine = by_uid.get(meta["uid"])
        if mine is None:
            if pod.get("status", {}).get("phase") in ("Succeeded", "Failed"):
                continue
            diffs.append(f"{name}: not in plegd's pods")
            continue
        got = mine.get("identity") or {}
        if got.get("source") != source:
            diffs.append(f"{name}: identity from {got.get('source')}, not {source}")
        for field, want in kubelet_identity(pod).items():
            have = got.get(field)
            if field == "controller" and have is not None:
                have = {k: have.get(k, "") for k in ("kind", "name", "uid")}
            if (have or None) != (want or None):
                diffs.append(f"{name} {field}: {want!r} (kubelet) vs {have!r} (plegd)")
    return diffs

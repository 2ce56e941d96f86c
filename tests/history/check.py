"""The cluster-history recipe (docs/cluster-history.md) against records plegd really
exported: the ClickHouse exporter's own otel_logs schema, rendered from its source,
filled with the OTLP records a real collector received from plegd (tests/otlp/run.sh
keeps them), row by row as that exporter maps them; then every query in
docs/history/queries/ run in an embedded ClickHouse (chdb) and compared with the same
answer computed here from the records, independently.

    python check.py RECORDS_DIR EXPORTER_DIR QUERIES_DIR
"""

import collections
import glob
import json
import os
import re
import sys
import tempfile

import chdb
from chdb import session as chs

failures = 0


def check(ok, what):
    global failures
    print(("PASS " if ok else "FAIL ") + what)
    if not ok:
        failures += 1


def as_string(v):
    """pcommon.Value.AsString, as the exporter flattens every attribute value."""
    if v is None:
        return ""
    if "stringValue" in v:
        return v["stringValue"]
    if "intValue" in v:
        return str(int(v["intValue"]))
    if "boolValue" in v:
        return "true" if v["boolValue"] else "false"
    if "doubleValue" in v:
        return repr(float(v["doubleValue"]))
    if "arrayValue" in v:
        return json.dumps([json.loads(json.dumps(as_plain(x))) for x in v["arrayValue"].get("values", [])],
                          separators=(",", ":"))
    return ""


def as_plain(v):
    if "intValue" in v:
        return int(v["intValue"])
    if "boolValue" in v:
        return v["boolValue"]
    return as_string(v)


def attrs(kvs):
    return {a["key"]: as_string(a.get("value")) for a in kvs or []}


def rows_of(records_dir):
    """Every log record the collector wrote, as the exporter's row (with its time in ns)."""
    rows = []
    for path in sorted(glob.glob(os.path.join(records_dir, "*.jsonl"))):
        for line in open(path):
            for rl in json.loads(line).get("resourceLogs", []):
                res = attrs(rl.get("resource", {}).get("attributes"))
                for sl in rl.get("scopeLogs", []):
                    scope = sl.get("scope", {})
                    for r in sl.get("logRecords", []):
                        ts = int(r.get("timeUnixNano") or 0) or int(r.get("observedTimeUnixNano") or 0)
                        rows.append({
                            "ts": ts,
                            "TraceId": r.get("traceId", ""),
                            "SpanId": r.get("spanId", ""),
                            "TraceFlags": int(r.get("flags", 0)),
                            "SeverityText": r.get("severityText", ""),
                            "SeverityNumber": int(r.get("severityNumber", 0) or 0),
                            "ServiceName": res.get("service.name", ""),
                            "Body": as_string(r.get("body")),
                            "ResourceSchemaUrl": rl.get("schemaUrl", ""),
                            "ResourceAttributes": res,
                            "ScopeSchemaUrl": sl.get("schemaUrl", ""),
                            "ScopeName": scope.get("name", ""),
                            "ScopeVersion": scope.get("version", ""),
                            "ScopeAttributes": attrs(scope.get("attributes")),
                            "LogAttributes": attrs(r.get("attributes")),
                            "EventName": r.get("eventName", ""),
                        })
    return rows


def render_ddl(exporter_dir):
    """The exporter's logs table, as it renders it with create_schema, ttl 720h, no cluster."""
    t = open(os.path.join(exporter_dir, "internal/sqltemplates/logs_table.sql")).read()
    t = re.sub(r"\{\{- if \.HasFullTextSearch\}\}.*?\{\{- else\}\}(.*?)\{\{- end\}\}", r"\1", t, flags=re.S)
    t = (t.replace("{{ident .Database}}", "`otel`").replace("{{ident .TableName}}", "`otel_logs`")
          .replace("{{.ClusterString}}", "").replace("{{.Engine}}", "MergeTree()")
          .replace("{{.TTL}}", "TTL toDateTime(Timestamp) + toIntervalDay(30)"))
    assert "{{" not in t, "a template action left unrendered:\n" + t
    return t


COLUMNS = ("TraceId String, SpanId String, TraceFlags UInt8, SeverityText String, SeverityNumber UInt8, "
           "ServiceName String, Body String, ResourceSchemaUrl String, "
           "ResourceAttributes Map(String, String), ScopeSchemaUrl String, ScopeName String, "
           "ScopeVersion String, ScopeAttributes Map(String, String), LogAttributes Map(String, String), "
           "EventName String")
NAMES = re.findall(r"(\w+) (?:Map\(String, String\)|\w+)", COLUMNS)


def q(sess, sql, **params):
    res = sess.query(sql, "JSONEachRow", params={k: str(v) for k, v in params.items()} or None)
    return [json.loads(line) for line in str(res).splitlines() if line.strip()]


def ns_to_ch(ns):
    s, frac = divmod(ns, 1_000_000_000)
    import datetime
    return datetime.datetime.fromtimestamp(s, datetime.timezone.utc).strftime("%Y-%m-%d %H:%M:%S") + f".{frac:09d}"


def ch_to_ns(text):
    import datetime
    whole, _, frac = text.partition(".")
    s = int(datetime.datetime.strptime(whole, "%Y-%m-%d %H:%M:%S").replace(tzinfo=datetime.timezone.utc).timestamp())
    return s * 1_000_000_000 + int((frac + "000000000")[:9])


def workload(a):
    for kind, key in (("Deployment", "k8s.deployment.name"), ("StatefulSet", "k8s.statefulset.name"),
                      ("DaemonSet", "k8s.daemonset.name"), ("CronJob", "k8s.cronjob.name"), ("Job", "k8s.job.name")):
        if a.get(key):
            return kind, a[key]
    return "Pod", a.get("k8s.pod.name", "")


def copy_of(r, **attrs):
    c = json.loads(json.dumps(r))
    c["LogAttributes"].update(attrs)
    return c


def main(records_dir, exporter_dir, queries_dir):
    rows = rows_of(records_dir)
    plegd = [r for r in rows if r["ServiceName"] == "plegd"]
    check(len(plegd) > 0, f"{len(rows)} records from plegd in {records_dir}")
    unique = {}
    for r in plegd:
        unique.setdefault(r["LogAttributes"].get("log.record.uid"), r)
    print(f"# {len(plegd)} records, {len(unique)} after dropping the duplicates by log.record.uid")
    recs = list(unique.values())
    A = lambda r: r["LogAttributes"]  # noqa: E731

    # What a store meets besides plegd's clean stream, each an attack on one query:
    # 1. every fifth record again, in its own insert: a batch the gateway wrote and plegd
    #    sent again because it never heard the answer;
    again = plegd[::5]
    # 2. every container announced again by a plegd started on an empty state dir: a new
    #    epoch, new revisions, the same containers and times;
    epoch2 = [copy_of(r, **{"log.record.uid": A(r)["log.record.uid"].replace("/", "/reborn-", 1)})
              for r in recs if r["EventName"] in ("k8s.container.started", "k8s.container.died")]
    # 3. a sandbox whose death and removal plegd never saw (it was away, and came back on
    #    an empty state dir), its address reused since;
    starts = collections.defaultdict(list)  # (node, ip) -> [(ts, sandbox)]
    for r in recs:
        if r["EventName"] == "k8s.pod.sandbox.started" and A(r).get("k8s.pod.ip"):
            starts[(r["ResourceAttributes"].get("k8s.node.name"), A(r)["k8s.pod.ip"])].append((r["ts"], A(r)["container.id"]))
    reused = {k: sorted(v) for k, v in starts.items() if len({sb for _, sb in v}) >= 2}
    check(len(reused) > 0, f"addresses reused by another pod: {len(reused)} of {len(starts)}")
    unseen_end = sorted(reused.items())[0][1][0][1]
    # 4. a crash-looping pod whose old sandbox the kubelet removed while the pod lives on.
    words = {}
    for r in sorted(recs, key=lambda r: (r["ts"], int(A(r).get("plegd.revision", "0")))):
        if r["EventName"] in ("k8s.container.crash_loop", "k8s.container.crash_loop_cleared"):
            words[(A(r)["k8s.pod.uid"], A(r).get("k8s.container.name"))] = r
    removed_pods = {A(r)["k8s.pod.uid"] for r in recs if r["EventName"] == "k8s.pod.sandbox.removed"}
    looping = [r for r in words.values() if r["EventName"] == "k8s.container.crash_loop"
               and A(r)["k8s.pod.uid"] not in removed_pods]
    check(len(looping) > 0, f"containers crash-looping at the end: {len(looping)}")
    gc_pod = A(looping[0])["k8s.pod.uid"]
    old_sb = "0" * 64
    gc = [copy_of(looping[0], **{"container.id": old_sb, "log.record.uid": "gc/1/1"}),
          copy_of(looping[0], **{"container.id": old_sb, "log.record.uid": "gc/1/2"})]
    gc[0]["EventName"], gc[0]["ts"] = "k8s.pod.sandbox.started", min(r["ts"] for r in recs) - 10**9
    gc[1]["EventName"], gc[1]["ts"] = "k8s.pod.sandbox.removed", max(r["ts"] for r in recs)
    for r in gc:  # it held an address of its own, long given to someone else
        r["LogAttributes"]["k8s.pod.ip"] = "10.244.255.254"
    stored = [r for r in plegd if not (A(r).get("container.id") == unseen_end
                                       and r["EventName"] in ("k8s.pod.sandbox.died", "k8s.pod.sandbox.removed"))]
    batches = (("rows", stored), ("again", again), ("epoch2", epoch2), ("gc", gc))

    tmp = tempfile.mkdtemp()
    sess = chs.Session(os.path.join(tmp, "db"))
    sess.query("SET session_timezone = 'UTC'")
    sess.query("CREATE DATABASE IF NOT EXISTS otel")
    sess.query(render_ddl(exporter_dir))
    check(True, "the ClickHouse exporter's otel_logs DDL (its source, rendered) runs in chdb " + chdb.__version__)
    for name, batch in batches:
        data = os.path.join(tmp, name + ".jsonl")
        with open(data, "w") as f:
            for r in batch:
                f.write(json.dumps(r) + "\n")
        sess.query(f"INSERT INTO otel.otel_logs (Timestamp, {', '.join(NAMES)}) "
                   f"SELECT fromUnixTimestamp64Nano(ts, 'UTC'), {', '.join(NAMES)} "
                   f"FROM file('{data}', JSONEachRow, 'ts Int64, {COLUMNS}')")
    n = q(sess, "SELECT count() AS n FROM otel.otel_logs")[0]["n"]
    total = sum(len(b) for _, b in batches)
    check(int(n) == total, f"every row is in ({n}: {len(again)} sent twice, {len(epoch2)} announced again "
          f"in a new epoch, {len(plegd) - len(stored)} end records of sandbox {unseen_end[:12]} never seen, "
          f"an old sandbox of crash-looping pod {gc_pod[:8]} removed)")

    def query(name):
        return open(os.path.join(queries_dir, name)).read()

    # Restarts and OOM kills by workload: the truth is per container, so each container
    # id started as a later attempt is one restart, each that died OOMKilled one kill.
    lo, hi = min(r["ts"] for r in recs), max(r["ts"] for r in recs) + 1
    got = {(x["namespace"], x["kind"], x["workload"]): (int(x["restarts"]), int(x["oom_kills"]))
           for x in q(sess, query("restarts_by_workload.sql"), **{"from": ns_to_ch(lo), "to": ns_to_ch(hi)})}
    restarted, killed = collections.defaultdict(set), collections.defaultdict(set)
    for r in recs:
        a = A(r)
        key = (a.get("k8s.namespace.name", ""),) + workload(a)
        if r["EventName"] == "k8s.container.started" and int(a.get("k8s.container.restart_count", "0") or 0) > 0:
            restarted[key].add(a["container.id"])
        if r["EventName"] == "k8s.container.died" and a.get("k8s.container.status.last_terminated_reason") == "OOMKilled":
            killed[key].add(a["container.id"])
    expected = {k: (len(restarted[k]), len(killed[k])) for k in set(restarted) | set(killed)}
    check(got == expected, f"restarts_by_workload.sql: {len(got)} workloads, each restart and OOM kill once "
          "(not twice for a resend or a new epoch)"
          + ("" if got == expected else f"\n  query {sorted(got.items())[:6]}\n  truth {sorted(expected.items())[:6]}"))
    kinds = {k[1] for k in got}
    check({"Deployment", "StatefulSet", "CronJob"} <= kinds, f"workloads inferred from names and labels: {sorted(kinds)}")
    check(any(v[1] for v in got.values()), "an OOM kill counted: " + str([k for k, v in got.items() if v[1]]))
    check(q(sess, query("restarts_by_workload.sql"), **{"from": ns_to_ch(lo - 10**12), "to": ns_to_ch(lo)}) == [],
          "restarts_by_workload.sql: a window before the records is empty")

    # Who held an address at a time. The truth: on a node, the holder is the sandbox that
    # started with the address most recently, while it has not been seen to end.
    ended = {}
    for r in stored:
        if r["EventName"] in ("k8s.pod.sandbox.died", "k8s.pod.sandbox.removed"):
            sb = A(r)["container.id"]
            ended[sb] = min(ended.get(sb, r["ts"]), r["ts"])

    def truth(node, ip, at):
        before = [(ts, sb) for ts, sb in starts[(node, ip)] if ts <= at]
        if not before:
            return []
        ts, sb = max(before)
        return [] if ended.get(sb, at + 1) <= at else [sb]

    asked = wrong = several = 0
    handed = 0
    for (node, ip), held in sorted(reused.items())[:25]:
        moments = [held[0][0] - 1]
        for (ts, _), (nxt, _) in zip(held, held[1:] + [(held[-1][0] + 2 * 10**9, None)]):
            moments += [ts, ts + (nxt - ts) // 2, nxt - 1]
        answers = []
        for at in moments:
            got = q(sess, query("pod_by_address.sql"), ip=ip, at=ns_to_ch(at))
            asked += 1
            several += len(got) > 1
            sbs = [x["sandbox_id"] for x in got]
            if sbs != truth(node, ip, at):
                wrong += 1
                if wrong <= 5:
                    check(False, f"pod_by_address.sql {ip} at {ns_to_ch(at)}: {sbs}, truth {truth(node, ip, at)}")
            answers.append(tuple(sbs))
        handed += len({a for a in answers if a}) >= 2
    check(wrong == 0 and asked > 0, f"pod_by_address.sql: {asked} (address, time) questions answered as the truth says")
    check(several == 0, "pod_by_address.sql: never two pods for one address at one moment")
    check(handed > 0, f"one address, moments apart, different pods: {handed} addresses")
    lost_ip = [ip for (node, ip), held in reused.items() if any(sb == unseen_end for _, sb in held)][0]
    after = [ts for ts, sb in reused[next(k for k in reused if k[1] == lost_ip)] if sb != unseen_end]
    got = q(sess, query("pod_by_address.sql"), ip=lost_ip, at=ns_to_ch(max(after) + 1))
    check(len(got) == 1 and got[0]["sandbox_id"] != unseen_end,
          f"pod_by_address.sql: a holder whose end was never seen gives way to the next ({lost_ip})")
    nodes = {r["ResourceAttributes"].get("k8s.node.name") for r in recs}
    check(q(sess, query("pod_by_address.sql"), ip="127.0.0.1", at=ns_to_ch(hi)) == [],
          f"pod_by_address.sql: an address no pod held answers nothing (nodes {sorted(nodes)})")

    # Crash loops now. The truth: the last crash word per container, in pods with a
    # sandbox not removed.
    last = {}
    sandboxes = collections.defaultdict(lambda: [set(), set()])
    for r in stored + gc:
        a = A(r)
        if r["EventName"] == "k8s.pod.sandbox.started":
            sandboxes[a["k8s.pod.uid"]][0].add(a["container.id"])
        if r["EventName"] == "k8s.pod.sandbox.removed":
            sandboxes[a["k8s.pod.uid"]][1].add(a["container.id"])
        if r["EventName"] not in ("k8s.container.crash_loop", "k8s.container.crash_loop_cleared"):
            continue
        key = (a["k8s.pod.uid"], a.get("k8s.container.name", ""))
        order = (r["ts"], int(a.get("plegd.revision", "0")))
        if key not in last or order > last[key][0]:
            last[key] = (order, r["EventName"], a)
    gone = {u for u, (st, rm) in sandboxes.items() if rm and st <= rm}
    expected = sorted((a.get("k8s.pod.name"), k[1]) for k, (_, name, a) in last.items()
                      if name == "k8s.container.crash_loop" and k[0] not in gone)
    got = sorted((x["pod"], x["container"]) for x in q(sess, query("crash_loops_now.sql")))
    check(got == expected and len(got) > 0, f"crash_loops_now.sql: {got[:5]}, as the records say"
          + ("" if got == expected else f" (records: {expected[:5]})"))
    check(any(p == A(looping[0])["k8s.pod.name"] for p, _ in got),
          f"crash_loops_now.sql: {A(looping[0])['k8s.pod.name']}, whose old sandbox was removed, is still looping")
    print(f"{'ok' if failures == 0 else 'FAILED'}: {failures} failed")
    return failures == 0


if __name__ == "__main__":
    sys.exit(0 if main(*sys.argv[1:4]) else 1)

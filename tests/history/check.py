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


def main(records_dir, exporter_dir, queries_dir):
    rows = rows_of(records_dir)
    plegd = [r for r in rows if r["ServiceName"] == "plegd"]
    check(len(plegd) > 0, f"{len(rows)} records from plegd in {records_dir}")
    unique = {}
    for r in plegd:
        unique.setdefault(r["LogAttributes"].get("log.record.uid"), r)
    print(f"# {len(plegd)} records, {len(unique)} after dropping the duplicates by log.record.uid")
    recs = list(unique.values())

    tmp = tempfile.mkdtemp()
    sess = chs.Session(os.path.join(tmp, "db"))
    sess.query("SET session_timezone = 'UTC'")
    sess.query("CREATE DATABASE IF NOT EXISTS otel")
    sess.query(render_ddl(exporter_dir))
    check(True, "the ClickHouse exporter's otel_logs DDL (its source, rendered) runs in chdb " + chdb.__version__)
    # Every fifth record a second time, in its own insert: a batch the gateway wrote and
    # plegd sent again because it never heard the answer. The queries must not count it.
    again = plegd[::5]
    for name, batch in (("rows.jsonl", plegd), ("again.jsonl", again)):
        data = os.path.join(tmp, name)
        with open(data, "w") as f:
            for r in batch:
                f.write(json.dumps(r) + "\n")
        sess.query(f"INSERT INTO otel.otel_logs (Timestamp, {', '.join(NAMES)}) "
                   f"SELECT fromUnixTimestamp64Nano(ts, 'UTC'), {', '.join(NAMES)} "
                   f"FROM file('{data}', JSONEachRow, 'ts Int64, {COLUMNS}')")
    n = q(sess, "SELECT count() AS n FROM otel.otel_logs")[0]["n"]
    check(int(n) == len(plegd) + len(again), f"every record is a row ({n}, {len(again)} of them sent twice)")

    def query(name):
        return open(os.path.join(queries_dir, name)).read()

    # Restarts and OOM kills by workload, over the whole run.
    lo, hi = min(r["ts"] for r in recs), max(r["ts"] for r in recs) + 1
    got = {(x["namespace"], x["kind"], x["workload"]): (int(x["restarts"]), int(x["oom_kills"]))
           for x in q(sess, query("restarts_by_workload.sql"), **{"from": ns_to_ch(lo), "to": ns_to_ch(hi)})}
    want = collections.Counter()
    ooms = collections.Counter()
    for r in recs:
        a = r["LogAttributes"]
        key = (a.get("k8s.namespace.name", ""),) + workload(a)
        if r["EventName"] == "k8s.container.started" and int(a.get("k8s.container.restart_count", "0") or 0) > 0:
            want[key] += 1
        if r["EventName"] == "k8s.container.died" and a.get("k8s.container.status.last_terminated_reason") == "OOMKilled":
            ooms[key] += 1
    expected = {k: (want[k], ooms[k]) for k in set(want) | set(ooms)}
    check(got == expected, f"restarts_by_workload.sql: {len(got)} workloads, as the records count them"
          + ("" if got == expected else f"\n  query {sorted(got.items())[:6]}\n  records {sorted(expected.items())[:6]}"))
    kinds = {k[1] for k in got}
    check({"Deployment", "StatefulSet", "CronJob"} <= kinds, f"workloads inferred from names and labels: {sorted(kinds)}")
    check(any(v[1] for v in got.values()), "an OOM kill counted: " + str([k for k, v in got.items() if v[1]]))
    # A window that ends before the first record counts nothing.
    check(q(sess, query("restarts_by_workload.sql"), **{"from": ns_to_ch(lo - 10**12), "to": ns_to_ch(lo)}) == [],
          "restarts_by_workload.sql: a window before the records is empty")

    # Who held an address at a time.
    held = collections.defaultdict(dict)  # ip -> sandbox -> [start, died]
    for r in recs:
        a = r["LogAttributes"]
        ip = a.get("k8s.pod.ip")
        if not ip or r["EventName"] not in ("k8s.pod.sandbox.started", "k8s.pod.sandbox.died"):
            continue
        span = held[ip].setdefault(a["container.id"], [None, None, a.get("k8s.pod.name")])
        i = 0 if r["EventName"] == "k8s.pod.sandbox.started" else 1
        span[i] = r["ts"] if span[i] is None else min(span[i], r["ts"])
    reused = {ip: s for ip, s in held.items() if sum(1 for v in s.values() if v[0] is not None) >= 2}
    check(len(reused) > 0, f"addresses reused by another pod: {len(reused)} of {len(held)}")

    def oracle(ip, at):
        return sorted(sb for sb, (start, died, _) in held.get(ip, {}).items()
                      if start is not None and start <= at and (died is None or died > at))

    asked = 0
    wrong = 0
    distinct = 0
    for ip, spans in sorted(reused.items())[:20]:
        answers = set()
        for sb, (start, died, _) in spans.items():
            if start is None:
                continue
            for at in (start, start + ((died - start) // 2 if died else 1_000_000), (died - 1) if died else start + 2):
                got_ip = q(sess, query("pod_by_address.sql"), ip=ip, at=ns_to_ch(at))
                got_sb = sorted(x["sandbox_id"] for x in got_ip)
                asked += 1
                if got_sb != oracle(ip, at):
                    wrong += 1
                    check(False, f"pod_by_address.sql {ip} at {ns_to_ch(at)}: {got_sb}, records say {oracle(ip, at)}")
                for x in got_ip:
                    if x["sandbox_id"] == sb and ch_to_ns(x["held_from"]) != start:
                        wrong += 1
                        check(False, f"pod_by_address.sql {ip}: held_from {x['held_from']} for {sb}, records say {ns_to_ch(start)}")
                answers.add(tuple(got_sb))
        first = min(v[0] for v in spans.values() if v[0] is not None)
        if q(sess, query("pod_by_address.sql"), ip=ip, at=ns_to_ch(first - 1)):
            wrong += 1
            check(False, f"pod_by_address.sql {ip}: answered before anyone held it")
        distinct += len([a for a in answers if len(a) == 1]) >= 2
    check(wrong == 0 and asked > 0, f"pod_by_address.sql: {asked} (address, time) questions answered as the records say")
    check(distinct > 0, f"one address, two moments, two different pods: {distinct} addresses")
    nodes = {r["ResourceAttributes"].get("k8s.node.name") for r in recs}
    check(q(sess, query("pod_by_address.sql"), ip="127.0.0.1", at=ns_to_ch(hi)) == [],
          f"pod_by_address.sql: an address no pod held answers nothing (nodes {sorted(nodes)})")

    # Crash loops now.
    last = {}
    removed = {r["LogAttributes"].get("k8s.pod.uid") for r in recs if r["EventName"] == "k8s.pod.sandbox.removed"}
    for r in recs:
        if r["EventName"] not in ("k8s.container.crash_loop", "k8s.container.crash_loop_cleared"):
            continue
        a = r["LogAttributes"]
        key = (a["k8s.pod.uid"], a.get("k8s.container.name", ""))
        order = (r["ts"], int(a.get("plegd.revision", "0")))
        if key not in last or order > last[key][0]:
            last[key] = (order, r["EventName"], a)
    expected = sorted((a.get("k8s.pod.name"), k[1]) for k, (_, name, a) in last.items()
                      if name == "k8s.container.crash_loop" and k[0] not in removed)
    got = sorted((x["pod"], x["container"]) for x in q(sess, query("crash_loops_now.sql")))
    check(got == expected and len(got) > 0, f"crash_loops_now.sql: {got[:5]}, as the records say"
          + ("" if got == expected else f" (records: {expected[:5]})"))
    print(f"{'ok' if failures == 0 else 'FAILED'}: {failures} failed")
    return failures == 0


if __name__ == "__main__":
    sys.exit(0 if main(*sys.argv[1:4]) else 1)

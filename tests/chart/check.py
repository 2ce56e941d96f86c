#!/usr/bin/env python3
"""The chart's checks: `helm lint --strict`, what each `charts/plegd/ci/*-values.yaml`
renders, plegd accepting every rendering's flags (`plegd run --check-config`), and each
wrong value refused with a message naming it.

    python3 tests/chart/check.py HELM PLEGD_BIN
"""
from __future__ import annotations

import json
import os
import pathlib
import re
import shutil
import subprocess
import sys
import tempfile
import tomllib

import yaml

ROOT = pathlib.Path(__file__).resolve().parents[2]
CHART = ROOT / "charts" / "plegd"
HELM, PLEGD = sys.argv[1], sys.argv[2]
SELECTOR = {"app.kubernetes.io/name": "plegd"}
results: list[tuple[bool, str]] = []


def ok(cond: bool, what: str, detail: object = "") -> None:
    results.append((bool(cond), what))
    print(("PASS " if cond else "FAIL ") + what + ("" if cond or detail == "" else f"\n    {detail}"), flush=True)


def helm(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([HELM, *args], capture_output=True, text=True)


def template(values: pathlib.Path | None, extra: str | None = None) -> subprocess.CompletedProcess:
    args = ["template", "plegd", str(CHART), "--namespace", "plegd", "--kube-version", "v1.37.0"]
    if values:
        args += ["-f", str(values)]
    if extra is not None:
        tmp = tempfile.NamedTemporaryFile("w", suffix=".yaml", delete=False)
        tmp.write(extra)
        tmp.close()
        args += ["-f", tmp.name]
    return helm(*args)


def objects(text: str) -> dict[str, dict]:
    out = {}
    for doc in yaml.safe_load_all(text):
        if doc:
            out[f"{doc['kind']}/{doc['metadata']['name']}"] = doc
    return out


def flags(container: dict) -> dict[str, str]:
    out: dict[str, str] = {}
    for a in container["args"][1:]:
        name, _, value = a.partition("=")
        out[name] = value
    return out


def test_ca() -> str:
    path = pathlib.Path(tempfile.gettempdir()) / "plegd-chart-check-ca.crt"
    if not path.exists():
        subprocess.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
                        "-keyout", "/dev/null", "-out", str(path), "-subj", "/CN=plegd chart check", "-days", "1"],
                       check=True, capture_output=True)
    return str(path)


def check_every_rendering(name: str, objs: dict[str, dict]) -> dict:
    ds = objs["DaemonSet/plegd"]
    spec = ds["spec"]["template"]["spec"]
    c = spec["containers"][0]
    f = flags(c)
    ok(ds["spec"]["selector"]["matchLabels"] == SELECTOR, f"{name}: the selector is the name only (immutable, as every earlier manifest had it)")
    ok(SELECTOR.items() <= ds["spec"]["template"]["metadata"]["labels"].items(), f"{name}: the pods carry the selector")
    ok(c["args"][0] == "run" and len(c["args"]) - 1 == len(f), f"{name}: plegd run, no flag given twice", c["args"])
    ok(spec["hostPID"] is True and spec["automountServiceAccountToken"] is False,
       f"{name}: the host's PID namespace, no API server token")
    sc = c["securityContext"]
    ok(sc["readOnlyRootFilesystem"] and sc["allowPrivilegeEscalation"] is False and sc["capabilities"]["drop"] == ["ALL"],
       f"{name}: read-only root, no privilege escalation, no capabilities")
    volumes = {v["name"]: v for v in spec["volumes"]}
    mounts = {m["mountPath"]: m for m in c["volumeMounts"]}
    ok(all(m["name"] in volumes for m in mounts.values()), f"{name}: every mount names a volume")
    ok(all(mounts[p].get("readOnly") for p in ("/host/proc", "/host/sys/fs/cgroup")), f"{name}: /proc and cgroupfs read-only")
    sock = f["--runtime-endpoint"].removeprefix("unix://")
    rt = mounts.get(os.path.dirname(sock))
    ok(rt and volumes[rt["name"]]["hostPath"]["path"] == os.path.dirname(sock),
       f"{name}: the runtime socket's directory is mounted from the host ({os.path.dirname(sock)})")
    api = f["--listen"].removeprefix("unix://")
    am = mounts.get(os.path.dirname(api))
    ok(am and volumes[am["name"]]["hostPath"]["path"] == os.path.dirname(api), f"{name}: the API socket's directory is a host directory")
    sm = mounts.get(f["--state-dir"])
    ok(sm and volumes[sm["name"]]["hostPath"]["path"] == f["--state-dir"], f"{name}: the state dir is on the node's disk")
    pods_api = f["--kubelet-pods-socket"]
    km = mounts.get(os.path.dirname(pods_api)) if pods_api else None
    ok(km and km.get("readOnly") and volumes[km["name"]]["hostPath"] == {"path": os.path.dirname(pods_api), "type": "DirectoryOrCreate"}
       if pods_api else "kubelet-pods-api" not in volumes,
       f"{name}: the kubelet's Pods API directory read-only where --kubelet-pods-socket points ({pods_api!r}), or neither")
    nri = f.get("--nri-socket")
    nm = mounts.get(os.path.dirname(nri)) if nri else None
    ok(f["--nri"] == "on" and nm and nm.get("readOnly") and volumes[nm["name"]]["hostPath"] == {"path": os.path.dirname(nri), "type": "DirectoryOrCreate"}
       if nri else f["--nri"] == "off" and "nri" not in volumes,
       f"{name}: NRI on with its socket's directory read-only where --nri-socket points ({nri!r}), or off and nothing mounted")
    port = c["ports"][0]
    ok(port["name"] == "admin" and f["--admin-addr"] == f"0.0.0.0:{port['containerPort']}"
       and c["livenessProbe"]["httpGet"]["port"] == "admin" and c["readinessProbe"]["httpGet"]["port"] == "admin",
       f"{name}: the probes and the admin port agree ({f['--admin-addr']})")
    # plegd itself accepts the flags, with the environment the kubelet would give it.
    env = {k: v for k, v in os.environ.items() if not k.startswith("PLEGD_") and k != "RUST_LOG"}
    for e in c.get("env", []):
        if "value" in e:
            env[e["name"]] = e["value"]
        elif "secretKeyRef" in e.get("valueFrom", {}):
            env[e["name"]] = "x-api-key=k"
        else:
            env[e["name"]] = "10.0.0.1"
    args = [re.sub(r"\$\((\w+)\)", lambda m: env.get(m[1], m[0]), a) for a in c["args"]]
    # A CA where the Secret would be mounted: plegd reads it at start.
    args = [f"--otlp-ca-file={test_ca()}" if a.startswith("--otlp-ca-file=") else a for a in args]
    run = subprocess.run([PLEGD, *args, "--check-config"], capture_output=True, text=True, env=env)
    ok(run.returncode == 0, f"{name}: plegd run --check-config accepts the rendered flags", run.stderr.strip())
    return {"ds": ds, "spec": spec, "c": c, "flags": f, "volumes": volumes, "mounts": mounts}


def rendered_notes() -> str:
    """NOTES.txt as `helm install` prints it. `helm template` leaves it out and a client-side
    dry run still asks for a cluster, so a copy of the chart renders it as a YAML string."""
    with tempfile.TemporaryDirectory() as tmp:
        copy = pathlib.Path(tmp) / "plegd"
        shutil.copytree(CHART, copy)
        text = (copy / "templates" / "NOTES.txt").read_text()
        (copy / "templates" / "notes.yaml").write_text("notes: |\n" + "".join(f"  {line}\n" for line in text.splitlines()))
        out = helm("template", "plegd", str(copy), "--namespace", "plegd", "--kube-version", "v1.37.0",
                   "--show-only", "templates/notes.yaml")
        return yaml.safe_load(out.stdout)["notes"] if out.returncode == 0 else out.stderr


def main() -> int:
    cargo = tomllib.loads((ROOT / "Cargo.toml").read_text())["package"]["version"]
    chart = yaml.safe_load((CHART / "Chart.yaml").read_text())
    ok(chart["version"] == cargo and chart["appVersion"] == cargo, f"Chart.yaml's version and appVersion are plegd's ({cargo})")

    lint = helm("lint", "--strict", str(CHART), "--kube-version", "v1.37.0")
    ok(lint.returncode == 0, "helm lint --strict", lint.stdout + lint.stderr)
    rendered = {}
    for values in sorted((CHART / "ci").glob("*-values.yaml")):
        name = values.name.removesuffix("-values.yaml")
        lint = helm("lint", "--strict", str(CHART), "-f", str(values), "--kube-version", "v1.37.0")
        ok(lint.returncode == 0, f"{name}: helm lint --strict", lint.stdout + lint.stderr)
        out = template(values)
        ok(out.returncode == 0, f"{name}: helm template", out.stderr)
        if out.returncode == 0:
            rendered[name] = objects(out.stdout)
            rendered[name]["_"] = check_every_rendering(name, rendered[name])

    d = rendered["default"]["_"]
    ok(set(rendered["default"]) == {"DaemonSet/plegd", "_"}, "default: the DaemonSet only, every monitoring part off",
       sorted(rendered["default"]))
    ok(d["c"]["image"] == f"ghcr.io/plegd/plegd:{cargo}", f"default: the image is plegd's release ({d['c']['image']})")
    ok(d["spec"]["priorityClassName"] == "system-node-critical", "default: system-node-critical (never evicted before what it watches)")
    ok(d["ds"]["spec"]["updateStrategy"] == {"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": 1}},
       "default: rolling, one node at a time")
    ok(d["spec"]["tolerations"] == [{"operator": "Exists"}], "default: every taint tolerated")
    ok(d["flags"] == {"--runtime-endpoint": "unix:///run/containerd/containerd.sock", "--listen": "unix:///run/plegd/plegd.sock",
                      "--admin-addr": "0.0.0.0:9477", "--state-dir": "/var/lib/plegd", "--host-root": "/host",
                      "--kubelet-pods-socket": "/var/lib/kubelet/pods-api/pods-api.sock", "--nri": "off", "--log-format": "json"},
       "default: only the flags a pod needs; every other is plegd's default", d["flags"])

    t = rendered["tuned"]["_"]
    want = {"--runtime-request-timeout": "3s", "--mode": "generic", "--relist-period": "2s", "--evented-relist-period": "10m",
            "--relist-threshold": "5m", "--listen": "unix:///var/run/plegd-api/plegd.sock", "--allow-uid": "1000000000,65534",
            "--allow-gid": "2000", "--watch-buffer": "8192", "--max-watch-streams-per-uid": "1000000",
            "--admin-addr": "0.0.0.0:19477", "--state-dir": "/var/lib/plegd-tuned", "--journal-memory-budget": "16MiB",
            "--journal-disk-budget": "1GiB", "--tombstone-retention": "6h", "--history-retention": "48h",
            "--log-format": "text", "--log-level": "plegd=debug,info", "--gc": "dry-run", "--crashloop-deaths": "5",
            "--kubelet-pods-socket": "/var/lib/k8s/kubelet/pods-api/pods-api.sock", "--nri": "on",
            "--nri-socket": "/var/run/nri/nri.sock"}
    ok(want.items() <= t["flags"].items(), "tuned: every value becomes its flag, numbers as integers (1000000, not 1e+06)",
       {k: t["flags"].get(k) for k in want if t["flags"].get(k) != want[k]})
    ok(t["c"]["image"] == "registry.example/plegd@sha256:" + "0123456789abcdef" * 4 and t["c"]["imagePullPolicy"] == "Always",
       "tuned: a digest pins the image")
    ok("priorityClassName" not in t["spec"], "tuned: the priority class opted out")
    ok(t["spec"]["nodeSelector"] == {"kubernetes.io/os": "linux"} and "nodeAffinity" in t["spec"]["affinity"]
       and "tolerations" not in t["spec"] and t["spec"]["imagePullSecrets"] == [{"name": "registry-credentials"}],
       "tuned: node selector, affinity, no tolerations, pull secrets")
    meta = t["ds"]["spec"]["template"]["metadata"]
    ok(meta["labels"]["team"] == "node" and meta["annotations"] == {"example.com/owner": "node-team"}, "tuned: pod labels and annotations")
    ok(t["ds"]["spec"]["updateStrategy"]["rollingUpdate"] == {"maxUnavailable": "20%"} and t["spec"]["terminationGracePeriodSeconds"] == 30,
       "tuned: update strategy and grace period")
    ok({"name": "PLEGD_WORKERS", "value": "8"} in t["c"]["env"] and t["c"]["resources"]["requests"] == {"cpu": "50m", "memory": "64Mi"},
       "tuned: extra environment and resources")

    o = rendered["otlp"]["_"]
    env = {e["name"]: e for e in o["c"]["env"]}
    ok(o["flags"]["--otlp-endpoint"] == "https://$(HOST_IP):4317" and env["HOST_IP"]["valueFrom"]["fieldRef"]["fieldPath"] == "status.hostIP",
       "otlp: the endpoint on the node's address")
    ok(env["PLEGD_OTLP_HEADER"]["valueFrom"]["secretKeyRef"] == {"name": "plegd-otlp", "key": "headers"},
       "otlp: headers from the Secret's key, never in the values")
    ca = o["flags"]["--otlp-ca-file"]
    m = o["mounts"].get(os.path.dirname(ca))
    ok(m and m.get("readOnly") and o["volumes"][m["name"]]["secret"] == {"secretName": "plegd-otlp-ca", "items": [{"key": "ca.crt", "path": "ca.crt"}]},
       f"otlp: the CA from its Secret, mounted read-only where --otlp-ca-file points ({ca})")

    mon = rendered["monitoring"]
    pods = {**SELECTOR}
    pm, pr, cm = mon.get("PodMonitor/plegd"), mon.get("PrometheusRule/plegd"), mon.get("ConfigMap/plegd-dashboard")
    sm = rendered["servicemonitor"]
    svc, smon = sm.get("Service/plegd"), sm.get("ServiceMonitor/plegd")
    ok(pm and pm["spec"]["selector"]["matchLabels"] == pods and pm["spec"]["podMetricsEndpoints"][0] == {"port": "admin", "path": "/metrics", "interval": "30s"}
       and pm["metadata"]["labels"]["release"] == "prometheus", "monitoring: the PodMonitor scrapes the pods' admin port, labelled")
    ok(svc and svc["spec"]["clusterIP"] == "None" and svc["spec"]["selector"] == pods and smon
       and smon["spec"]["selector"]["matchLabels"].items() <= svc["metadata"]["labels"].items()
       and smon["spec"]["endpoints"][0]["port"] == "admin" and "PodMonitor/plegd" not in sm,
       "servicemonitor: a headless Service and the ServiceMonitor selecting it, and no PodMonitor")
    rules = yaml.safe_load((CHART / "rules" / "plegd.yaml").read_text())
    ok(pr and pr["spec"] == rules, "monitoring: the PrometheusRule's spec is rules/plegd.yaml (promtool checks that file)")
    dash = json.loads((CHART / "dashboards" / "plegd.json").read_text())
    ok(cm and json.loads(cm["data"]["plegd.json"]) == dash and cm["metadata"]["labels"]["grafana_dashboard"] == "1",
       "monitoring: the dashboard ConfigMap holds dashboards/plegd.json, labelled for Grafana's sidecar")

    u = rendered["unset"]["_"]
    ok(not {"resources"} & u["c"].keys() and not {"tolerations", "priorityClassName"} & u["spec"].keys(),
       "unset: null drops a default (resources, tolerations, the priority class)")
    ok(u["flags"]["--kubelet-pods-socket"] == "" and "kubelet-pods-api" not in u["volumes"],
       "unset: the Pods API off is the flag turning it off, and no mount")

    cr = rendered["crio"]["_"]
    ok(cr["flags"]["--runtime-endpoint"] == "unix:///var/run/crio/crio.sock" and cr["mounts"].get("/var/run/crio"),
       "crio: CRI-O's socket and its directory")

    notes = rendered_notes()
    ok("exec ds/plegd -- plegd watch --socket unix:///run/plegd/plegd.sock" in notes
       and "port-forward ds/plegd 9477" in notes and "port-forward ds/plegd 9478" in notes,
       "NOTES.txt says how to reach the socket, the metrics and the pages", notes)

    # The schema and plegd agree on what a duration and a size are.
    for flag, key, samples in (
        ("--tombstone-retention", "tombstoneRetention",
         ["1s", "500ms", "1h30m", "1.5h", "2 s", "1sec", "90 minutes", "1d", "2w", "1y", "1M", "10", "0s", "soon",
          "1fortnight", "-1s", "1h 30m", "3m", "1 h"]),
        ("--history-retention", "historyRetention", ["0s", "0", "00m", "1h", "0.0s"]),
        ("--journal-disk-budget", "diskBudget",
         ["256MiB", "1GiB", "1 GiB", "512M", "1G", "900000000", "1TiB", "8mib", "1.5GiB", "-1MiB", "big", "0MiB"]),
    ):
        for sample in samples:
            helm_ok = template(None, yaml.safe_dump({"journal": {key: sample}})).returncode == 0
            plegd_ok = subprocess.run([PLEGD, "run", "--check-config", f"{flag}={sample}"], capture_output=True).returncode == 0
            ok(helm_ok == plegd_ok, f"journal.{key}={sample!r}: the schema {'accepts' if helm_ok else 'refuses'} it as plegd does")

    # Log filters: the same answer, except that the schema also refuses strings plegd's
    # filter parser lets through as odd target names.
    stricter = {"info;rm", "plegd=debug,", "=debug"}
    for sample in ["info", "plegd=debug,info", "plegd=debug,tower=warn", "info,plegd::grpc=trace", "plegd", "DEBUG",
                   "plegd=verbose", "3", *sorted(stricter)]:
        helm_ok = template(None, yaml.safe_dump({"log": {"level": sample}})).returncode == 0
        plegd_ok = subprocess.run([PLEGD, "run", "--check-config", f"--log-level={sample}"], capture_output=True).returncode == 0
        want = False if sample in stricter else plegd_ok
        ok(helm_ok == want, f"log.level={sample!r}: the schema {'accepts' if helm_ok else 'refuses'} it "
                            f"(plegd {'accepts' if plegd_ok else 'refuses'} it)")

    for case in yaml.safe_load((pathlib.Path(__file__).parent / "refused.yaml").read_text()):
        out = template(None, yaml.safe_dump(case["values"]))
        said = out.stderr.strip().splitlines()
        ok(out.returncode != 0 and case["names"] in out.stderr,
           f"refused: {case['what']} (helm names {case['names']!r})", said[-1] if said else "rendered without an error")

    failed = [w for c, w in results if not c]
    print(f"{len(results) - len(failed)} passed, {len(failed)} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""plegd beside a real kubelet: the kubelet's PLEG is the oracle of plegd's stream, and
plegd runs as the kubelet's static pod, generated from manifests/daemonset.yaml.

Run by tests/kubelet/run.sh, which builds the kubelet, starts a private containerd (with
a pod network from the Debian CNI plugins and its gRPC metrics on) and passes:

  harness.py --kubelet BIN --plegd BIN --endpoint unix://… --containerd-dir DIR
             --ctl tests/e2e/containerd.sh --version 2.1 --work DIR [--seconds 300]

What it does, on a timeline from the moment the cases start (t):
  before  plegd (the binary) and its recorder; the kubelet (-v=4) with plegd's static
          pod; once that pod is ready, a recorder on its hostPath socket
  t+0     the cases, as static pods: a crash loop with a new exit code each attempt, a
          pod that completes (restartPolicy Never, exit 0 and 7), an OOM kill under the
          memory limit the kubelet sets, a pod with an init container and two others, a
          liveness probe that starts failing, a pod that will be deleted; and churn: a
          short-lived pod of a CronJob's Job made every 10 s and deleted 20 s later
  t+35    plegd (the binary) killed with -9; t+42 started again on its state dir
  t+60    the doomed pod's manifest removed: the kubelet stops and removes it
  t+80    the kubelet stopped (churn goes on); t+110 started again on its root dir
  t+130   containerd killed (its containers keep running); t+134 started again
  t+S     churn stops; the end states, identities and addresses are compared (and the
          collector processor, in a real collector, places a flow log by address at
          each line's own time); everything stops
Then each plegd's recording is checked against both kubelet logs (oracle.py), and plegd's
pod must have stayed ready, never restarted, under its memory limit.

Prints PASS/FAIL lines and the figures, writes WORK/figures.json, exits 1 on a failure.
"""

from __future__ import annotations

import argparse
import copy
import datetime as dt
import json
import os
import re
import pathlib
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.request

import yaml

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
import oracle  # noqa: E402

NODE = "kt-node"
# The pods' gateway: the bridge's address, the first of tests/kubelet/run.sh's pod subnet
# (10.244.78.0/28; host-local gives a gateway bridge the first address).
POD_GATEWAY = "10.244.78.1"
IMAGE = "docker.io/library/busybox:latest"
ROOT = pathlib.Path(__file__).resolve().parents[2]
UTC = dt.timezone.utc


def now() -> dt.datetime:
    return dt.datetime.now(UTC)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def say(*a):
    print(f"[{now().strftime('%H:%M:%S')}]", *a, flush=True)


# ---------------------------------------------------------------- the static pods


# The host's own, read as they are (the node's /proc and cgroupfs are the test's too).
SHARED_HOST_PATHS = {"/proc", "/sys/fs/cgroup"}


def static_pod(daemonset_yaml: str, host_paths: dict[str, str]) -> dict:
    """The DaemonSet's pod, as a static pod a kubelet runs: its template's metadata and spec,
    each hostPath volume pointed where `host_paths` maps it. A hostPath neither mapped nor
    the host's own is refused: a new mount in the manifest must be given the test's
    directory, not the real node's."""
    ds = next(d for d in yaml.safe_load_all(daemonset_yaml) if d and d.get("kind") == "DaemonSet")
    template = copy.deepcopy(ds["spec"]["template"])
    spec = template["spec"]
    for v in spec.get("volumes", []):
        hp = v.get("hostPath")
        if not hp:
            continue
        if hp["path"] in host_paths:
            hp["path"] = host_paths[hp["path"]]
        elif hp["path"] not in SHARED_HOST_PATHS:
            raise SystemExit(f"manifests/daemonset.yaml mounts hostPath {hp['path']}, which tests/kubelet/harness.py does not map")
    meta = {"name": ds["metadata"]["name"], "namespace": ds["metadata"]["namespace"], "labels": template["metadata"].get("labels", {})}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec}


def owned(obj: dict, kind: str, name: str, labels: dict | None = None, **spec) -> dict:
    """`obj` with a controller's owner reference, the labels that controller sets, and
    `spec` fields (the kubelet serves them as it read them from the manifest)."""
    api = {"Job": "batch/v1"}.get(kind, "apps/v1")
    obj["metadata"]["ownerReferences"] = [{"apiVersion": api, "kind": kind, "name": name, "controller": True,
                                           "uid": f"{kind.lower()}-{name}-uid"}]
    obj["metadata"]["labels"].update(labels or {})
    obj["spec"].update(spec)
    return obj


def pod(name: str, containers: list[dict], *, restart="Always", init=None, volumes=None, grace=1, labels=None) -> dict:
    for c in containers + (init or []):
        c.setdefault("image", IMAGE)
        c.setdefault("imagePullPolicy", "Never")
    spec = {"restartPolicy": restart, "terminationGracePeriodSeconds": grace, "containers": containers}
    if init:
        spec["initContainers"] = init
    if volumes:
        spec["volumes"] = volumes
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "cases", "labels": labels or {"case": name}},
        "spec": spec,
    }


def sh(script: str) -> list[str]:
    return ["sh", "-c", script]


def cases() -> dict[str, dict]:
    """Each case pod, by manifest file name."""
    # Exit 11, 12, 13, … : the attempt is counted in an emptyDir, which outlives the container.
    crash = pod(
        "crash",
        [{"name": "c", "command": sh("n=$(cat /d/n 2>/dev/null || echo 0); n=$((n+1)); echo $n >/d/n; sleep 1; exit $((n+10))"),
          "volumeMounts": [{"name": "d", "mountPath": "/d"}]}],
        volumes=[{"name": "d", "emptyDir": {}}],
    )
    done = pod(
        "done",
        [{"name": "ok", "command": sh("sleep 2; exit 0")}, {"name": "fail", "command": sh("sleep 3; exit 7")}],
        restart="Never",
    )
    oom = pod(
        "oom",
        [{"name": "hog", "command": sh("sleep 2; exec busybox tail /dev/zero"),
          "resources": {"limits": {"memory": "24Mi"}, "requests": {"memory": "24Mi"}}}],
        restart="Never",
    )
    multi = pod(
        "multi",
        [{"name": "a", "command": ["sleep", "3600"]}, {"name": "b", "command": ["sleep", "3600"]}],
        init=[{"name": "setup", "command": sh("sleep 1")}],
    )
    # Healthy for 8 s, then the probe's file goes: the kubelet kills the container (PID 1
    # ignores SIGTERM, so SIGKILL after the 1 s grace: 137) and starts it again.
    probe = pod(
        "probe",
        [{"name": "p", "command": sh("echo ok >/tmp/h; sleep 8; busybox rm /tmp/h; exec sleep 3600"),
          "livenessProbe": {"exec": {"command": ["cat", "/tmp/h"]}, "initialDelaySeconds": 2, "periodSeconds": 2,
                            "failureThreshold": 1}}],
    )
    doomed = pod("doomed", [{"name": "d", "command": ["sleep", "3600"]}])
    # Whose each is: a controller of each built-in kind, a priority, a QoS class of each
    # kind (probe Guaranteed, oom Burstable, the rest BestEffort). done follows the Job
    # controller's labels, so plegd's pod, which has no Pods API, infers the same Job.
    owned(multi, "ReplicaSet", "multi-5f7b9c6d48", {"pod-template-hash": "5f7b9c6d48"}, priority=1000,
          priorityClassName="plegd-test-high")
    owned(probe, "StatefulSet", "probe")
    # On the node's network: the kubelet names the node's address as the pod's; plegd
    # names none as its own, and never answers a pod for the node's address.
    probe["spec"]["hostNetwork"] = True
    probe["spec"]["containers"][0]["resources"] = {"limits": {"cpu": "50m", "memory": "32Mi"},
                                                   "requests": {"cpu": "50m", "memory": "32Mi"}}
    owned(crash, "DaemonSet", "crash", {"controller-revision-hash": "6d4b8c7f9"})
    owned(done, "Job", "done-job", {"batch.kubernetes.io/job-name": "done-job", "job-name": "done-job"})
    return {"crash.yaml": crash, "done.yaml": done, "oom.yaml": oom, "multi.yaml": multi, "probe.yaml": probe,
            "doomed.yaml": doomed}


def churn_pod(i: int) -> dict:
    """A short-lived pod of a CronJob's Job, named as the CronJob controller names its
    Jobs (`<cronjob>-<scheduled minute>`), with the Job controller's labels."""
    job = f"churn-{int(time.time() // 60)}"
    p = pod(f"churn-{i}", [{"name": "c", "command": sh("sleep 3")}], restart="Never", labels={"churn": "yes"})
    return owned(p, "Job", job, {"batch.kubernetes.io/job-name": job, "job-name": job})


# ---------------------------------------------------------------- processes


def pid_rss_mib(pid: int) -> float:
    """A process's resident set now, in MiB (0 when it is gone)."""
    try:
        with open(f"/proc/{pid}/status") as f:
            kib = next(int(line.split()[1]) for line in f if line.startswith("VmRSS:"))
    except (OSError, StopIteration):
        return 0.0
    return round(kib / 1024, 1)


def pid_cpu_seconds(pid: int) -> float:
    """utime + stime of a process so far (0 when it is gone)."""
    try:
        fields = pathlib.Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, IndexError):
        return 0.0


class Proc:
    def __init__(self, name: str, argv: list[str], log: pathlib.Path, env=None, stdout=None, inherit=True):
        """`env` is added to this process's environment (`inherit`), else is the whole of it."""
        self.name, self.argv, self.log = name, argv, log
        self.env = dict(os.environ if inherit else {}, **(env or {}))
        self.stdout = stdout
        self.p: subprocess.Popen | None = None

    def start(self):
        err = open(self.log, "ab")
        out = open(self.stdout, "ab") if self.stdout else err
        self.p = subprocess.Popen(self.argv, stdout=out, stderr=err, env=self.env, start_new_session=True)
        return self

    def cpu_seconds(self) -> float:
        """utime + stime of the process so far."""
        return pid_cpu_seconds(self.p.pid if self.p else 0)

    def stop(self, sig=signal.SIGTERM, wait=20):
        if self.p is None or self.p.poll() is not None:
            return
        self.p.send_signal(sig)
        try:
            self.p.wait(wait)
        except subprocess.TimeoutExpired:
            self.p.kill()
            self.p.wait()


def http_json(url: str, timeout=3):
    with urllib.request.urlopen(url, timeout=timeout) as r:
        return json.load(r)


def wait_for(what: str, cond, timeout=120, every=0.5):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        try:
            v = cond()
            if v:
                return v
        except Exception:  # noqa: BLE001 — polled until it holds
            pass
        time.sleep(every)
    raise SystemExit(f"*** timed out after {timeout} s waiting for {what} ***")


# ---------------------------------------------------------------- the run


class Run:
    def __init__(self, a):
        self.a = a
        self.work = pathlib.Path(a.work)
        self.results: list[tuple[bool, str]] = []
        self.blind_bin: list[oracle.Window] = []
        self.blind_pod: list[oracle.Window] = []
        self.kubelet_blind: list[oracle.Window] = []
        self.kubelet_logs: list[pathlib.Path] = []
        self.kubelets: list[Proc] = []
        self.cpu = {"kubelet": 0.0, "plegd": 0.0, "plegd-pod": 0.0}
        self.pod_samples: list[tuple[str, bool, int]] = []
        # (when, pod uid, pod name, address) of every running pod on the pod network, as
        # the kubelet's /pods said it at each poll: who held which address when.
        self.ip_samples: list[tuple[dt.datetime, str, str, str]] = []
        # Each sampled pod's metadata (its owners and labels), by uid.
        self.sampled: dict[str, dict] = {}
        self.plegd_pod_first_ready: dt.datetime | None = None
        self.stop_polling = threading.Event()
        self.figures: dict = {"containerd": a.version}
        self.pod_gone_at = now() + dt.timedelta(days=1)

    def ok(self, cond, what: str):
        cond = bool(cond)
        self.results.append((cond, what))
        print(("PASS " if cond else "FAIL ") + what, flush=True)

    # -- plegd, the binary beside the kubelet
    def plegd_up(self, pods_api: bool = True):
        """plegd beside the kubelet, watching its Pods API (`pods_api`), else told there is
        none (`--kubelet-pods-socket ""`)."""
        self.bin_admin = getattr(self, "bin_admin", free_port())
        self.bin_sock = f"unix://{self.work}/bin-run/plegd.sock"
        # containerd's NRI socket (tests/e2e/containerd.sh puts it beside its CRI socket):
        # the binary beside the kubelet registers as an NRI plugin, so the oracle checks
        # plegd with the runtime's early word too; plegd's pod stays off NRI (the chart's
        # default), on the event stream alone.
        self.nri_sock = pathlib.Path(self.a.containerd_dir) / "nri.sock"
        nri = ["--nri", "on", "--nri-socket", str(self.nri_sock)] if self.nri_sock.exists() else []
        self.plegd = Proc(
            "plegd",
            [self.a.plegd, "run", "--runtime-endpoint", self.a.endpoint, "--listen", self.bin_sock,
             "--admin-addr", f"127.0.0.1:{self.bin_admin}", "--debug-addr", "127.0.0.1:0",
             "--state-dir", str(self.work / "bin-state"), "--node-name", NODE,
             "--kubelet-pods-socket", str(self.work / "kubelet" / "pods-api" / "pods-api.sock") if pods_api else "",
             *nri],
            self.work / "plegd.log",
        ).start()
        wait_for("plegd's /readyz", lambda: urllib.request.urlopen(f"http://127.0.0.1:{self.bin_admin}/readyz", timeout=1).status == 200)

    def recorder(self, name: str, sock: str) -> Proc:
        self.recorders = getattr(self, "recorders", [])
        self.recorders.append(Proc(f"watch-{name}", [self.a.plegd, "watch", "-o", "json", "--socket", sock],
                    self.work / f"watch-{name}.log", stdout=self.work / f"watch-{name}.jsonl").start())
        return self.recorders[-1]

    # -- the kubelet
    def make_cgroup_root(self):
        """The kubelet's cgroup parent, in every hierarchy it needs (cgroup v1 here, with
        v2 beside it): it refuses a root that does not exist. cpuset children start
        empty, so the parent's CPUs and memory nodes are copied in."""
        self.cgroup_root = f"plegd-kt-{self.a.instance}-{self.a.version}"
        base = pathlib.Path("/sys/fs/cgroup")
        for h in sorted(base.iterdir()):
            if not h.is_dir() or h.name == "unified" and (base / "memory").is_dir():
                continue
            d = h / self.cgroup_root
            d.mkdir(exist_ok=True)
            if h.name.startswith("cpuset"):
                for f in ("cpuset.cpus", "cpuset.mems"):
                    if not (d / f).read_text().strip():
                        (d / f).write_text((h / f).read_text())

    def kubelet_config(self):
        self.make_cgroup_root()
        self.ro_port = free_port()
        cfg = {
            "apiVersion": "kubelet.config.k8s.io/v1beta1",
            "kind": "KubeletConfiguration",
            "staticPodPath": str(self.work / "manifests"),
            "fileCheckFrequency": "1s",
            "containerRuntimeEndpoint": self.a.endpoint,
            "authentication": {"anonymous": {"enabled": True}, "webhook": {"enabled": False}},
            "authorization": {"mode": "AlwaysAllow"},
            "address": "127.0.0.1",
            "readOnlyPort": self.ro_port,
            "port": free_port(),
            "healthzPort": free_port(),
            "cgroupDriver": "cgroupfs",
            "failSwapOn": False,
            "failCgroupV1": False,
            "enforceNodeAllocatable": [],
            "localStorageCapacityIsolation": False,
            "evictionHard": {},
            "imageGCHighThresholdPercent": 100,
            "imageGCLowThresholdPercent": 99,
            "resolvConf": "",
            # Its own cgroup parent: a second kubelet on the machine (another run) would
            # otherwise take this one's pods under /kubepods for orphans and kill them.
            "cgroupRoot": f"/{self.cgroup_root}",
            # The kubelet counts a container's attempts from the files in its log
            # directory; a static pod's UID is a hash of its manifest, the same every
            # run, so the logs are the run's own.
            "podLogsDir": str(self.work / "pod-logs"),
        }
        (self.work / "kubelet.yaml").write_text(yaml.safe_dump(cfg))

    def kubelet_up(self, verbosity: int = 4):
        n = len(self.kubelets) + 1
        log = self.work / f"kubelet-{n}.log"
        self.kubelet_logs.append(log)
        k = Proc("kubelet", [self.a.kubelet, "--config", str(self.work / "kubelet.yaml"), "--root-dir",
                             str(self.work / "kubelet"), "--hostname-override", NODE, f"-v={verbosity}"], log, env={"TZ": "UTC"}).start()
        self.kubelets.append(k)
        wait_for("the kubelet's /pods", lambda: http_json(f"http://127.0.0.1:{self.ro_port}/pods") is not None)

    def kubelet_pods(self) -> dict:
        return http_json(f"http://127.0.0.1:{self.ro_port}/pods")

    def plegd_pod_status(self):
        for p in self.kubelet_pods().get("items", []):
            if p["metadata"]["namespace"] == "plegd":
                return p
        return None

    def poll_plegd_pod(self):
        while not self.stop_polling.wait(1):
            try:
                # A kubelet just started answers `"items": null`.
                items = (self.kubelet_pods() or {}).get("items") or []
            except Exception:  # noqa: BLE001 — the kubelet is restarting
                continue
            at = now()
            for p in items:
                # Running: its sandbox is up (the kubelet writes a terminal phase before it
                # stops the sandbox and frees the address).
                st = p.get("status", {})
                if st.get("phase") == "Running" and st.get("podIP") and not p.get("spec", {}).get("hostNetwork"):
                    self.ip_samples.append((at, p["metadata"]["uid"], p["metadata"]["name"], st["podIP"]))
                    self.sampled[p["metadata"]["uid"]] = p["metadata"]
            p = next((p for p in items if p["metadata"]["namespace"] == "plegd"), None)
            if not p:
                continue
            cs = (p["status"].get("containerStatuses") or [{}])[0]
            self.pod_samples.append((cs.get("containerID", ""), bool(cs.get("ready")), cs.get("restartCount", 0)))
            if cs.get("ready") and self.plegd_pod_first_ready is None:
                self.plegd_pod_first_ready = now()

    # -- the node's parts
    def containerd(self, verb: str):
        env = dict(os.environ, PLEGD_E2E_INSTANCE=self.a.instance)
        subprocess.run(["bash", self.a.ctl, verb, self.a.version], check=True, env=env, stdout=subprocess.DEVNULL)

    def manifest(self, name: str, obj: dict | None):
        path = self.work / "manifests" / name
        if obj is None:
            path.unlink(missing_ok=True)
        else:
            tmp = self.work / f".{name}"
            tmp.write_text(yaml.safe_dump(obj))
            tmp.rename(path)

    def manifest_names(self) -> set[str]:
        return {f.stem for f in (self.work / "manifests").glob("*.yaml")}

    def plegd_pods(self, sock: str) -> dict:
        out = subprocess.run([self.a.plegd, "pods", "-o", "json", "--socket", sock], check=True, capture_output=True, text=True)
        return json.loads(out.stdout)

    def removed(self, sock: str, uid: str, name: str, attempt: int) -> dict | None:
        """plegd's tombstone of a pod's container by name and attempt (GetContainer)."""
        out = subprocess.run([self.a.plegd, "get", "-o", "json", "--socket", sock, "--pod-uid", uid,
                              "--container-name", name, "--attempt", str(attempt)], capture_output=True, text=True)
        return json.loads(out.stdout)["container"] if out.returncode == 0 else None

    def stream_connections(self, admin: str) -> float:
        """How often a plegd has connected to the runtime's event stream (its metric)."""
        text = urllib.request.urlopen(f"http://{admin}/metrics", timeout=2).read().decode()
        return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
                   if line.startswith("plegd_evented_connections_total "))

    def cri_calls(self) -> dict[str, float]:
        """CRI calls containerd has served, by method, from its own gRPC metrics."""
        if not self.a.containerd_metrics:
            return {}
        calls: dict[str, float] = {}
        try:
            text = urllib.request.urlopen(f"http://{self.a.containerd_metrics}/v1/metrics", timeout=3).read().decode()
        except OSError:
            return {}
        for line in text.splitlines():
            if line.startswith("grpc_server_handled_total{") and 'grpc_service="runtime.v1.RuntimeService"' in line:
                method = line.split('grpc_method="', 1)[1].split('"', 1)[0]
                calls[method] = calls.get(method, 0) + float(line.rsplit(" ", 1)[1])
        return calls

    def churn(self, stop: threading.Event):
        i = 0
        while not stop.wait(10):
            self.manifest(f"churn-{i}.yaml", churn_pod(i))
            self.manifest(f"churn-{i - 2}.yaml", None)
            i += 1
        for j in range(max(0, i - 2), i):
            self.manifest(f"churn-{j}.yaml", None)

    def at(self, t0: float, offset: float):
        delay = t0 + offset - time.monotonic()
        if delay > 0:
            time.sleep(delay)

    def go(self):
        a = self.a
        for d in ("manifests", "kubelet", "bin-run", "bin-state", "pod-run", "pod-state", "pod-logs"):
            (self.work / d).mkdir(parents=True, exist_ok=True)
        self.plegd_up()
        rec_bin = self.recorder("bin", self.bin_sock)
        self.kubelet_config()
        ds = (ROOT / "manifests" / "daemonset.yaml").read_text()
        plegd_pod = static_pod(ds, {
            "/run/containerd": a.containerd_dir,
            "/run/plegd": str(self.work / "pod-run"),
            "/var/lib/plegd": str(self.work / "pod-state"),
            # Not the kubelet's: plegd's pod finds no Pods API socket, and infers.
            "/var/lib/kubelet/pods-api": str(self.work / "pod-no-pods-api"),
        })
        if a.pod_mode:
            plegd_pod["spec"]["containers"][0]["args"].append(f"--mode={a.pod_mode}")
        self.manifest("plegd.yaml", plegd_pod)
        say("the kubelet, with plegd's static pod")
        self.kubelet_up()

        def ready():
            p = self.plegd_pod_status()
            return p and any(c["type"] == "Ready" and c["status"] == "True" for c in p["status"].get("conditions", []))

        wait_for("plegd's pod to be ready under the kubelet", ready, timeout=180)
        pod_sock = f"unix://{self.work}/pod-run/plegd.sock"
        rec_pod = self.recorder("pod", pod_sock)
        poller = threading.Thread(target=self.poll_plegd_pod, daemon=True)
        poller.start()
        time.sleep(2)

        say("the cases")
        t0 = time.monotonic()
        started = now()
        cpu0 = {n: p.cpu_seconds() for n, p in (("kubelet", self.kubelets[-1]), ("plegd", self.plegd))}
        pod_pid = self.plegd_pod_pid()
        pod_cpu0 = pid_cpu_seconds(pod_pid)
        for name, obj in cases().items():
            self.manifest(name, obj)
        stop_churn = threading.Event()
        churner = threading.Thread(target=self.churn, args=(stop_churn,), daemon=True)
        churner.start()

        self.at(t0, 35)
        say("kill -9 plegd (the binary)")
        self.cpu["plegd"] += self.plegd.cpu_seconds() - cpu0["plegd"]
        down = now()
        self.plegd.stop(signal.SIGKILL)
        self.at(t0, 42)
        self.plegd_up()
        cpu0["plegd"] = 0.0
        self.blind_bin.append(oracle.Window(down, now() + dt.timedelta(seconds=2), "plegd killed and restarted"))

        self.at(t0, 60)
        self.doomed = next(p for p in self.kubelet_pods()["items"] if p["metadata"]["name"].startswith("doomed"))
        say("the doomed pod's manifest removed")
        self.manifest("doomed.yaml", None)

        self.at(t0, 80)
        say("the kubelet stopped for 30 s (churn goes on: manifests added and removed meanwhile)")
        self.cpu["kubelet"] += self.kubelets[-1].cpu_seconds() - cpu0["kubelet"]
        self.before_outage = {p["metadata"]["uid"]: p for p in self.kubelet_pods().get("items") or []}
        self.manifests_before_outage = self.manifest_names()
        kdown = self.kubelet_down = now()
        self.kubelets[-1].stop()
        self.at(t0, 110)
        self.kubelet_up()
        self.kubelet_back = now()
        self.manifests_after_outage = self.manifest_names()
        cpu0["kubelet"] = 0.0
        self.kubelet_blind.append(oracle.Window(kdown - dt.timedelta(seconds=2), now() + dt.timedelta(seconds=3), "the kubelet restarted"))

        self.at(t0, 130)
        say("containerd killed; its containers keep running")
        pod_admin = f'{self.plegd_pod_status()["status"]["podIP"]}:9477'
        admins = {f"127.0.0.1:{self.bin_admin}": 0.0}
        if self.a.pod_mode != "generic":
            admins[pod_admin] = 0.0
        for adm in admins:
            admins[adm] = self.stream_connections(adm)
        cdown = now()
        self.containerd("kill")
        self.at(t0, 134)
        self.containerd("resume")
        # Each reconnects by itself; until its event stream is back it is blind.
        for adm, before in admins.items():
            wait_for(f"plegd at {adm} back on the event stream", lambda: self.stream_connections(adm) > before)
        w = oracle.Window(cdown, now() + dt.timedelta(seconds=2), "containerd restarted")
        self.blind_bin.append(w)
        self.blind_pod.append(w)
        self.kubelet_blind.append(w)

        self.at(t0, a.seconds)
        say("churn stops")
        stop_churn.set()
        churner.join()
        self.cpu["kubelet"] += self.kubelets[-1].cpu_seconds() - cpu0["kubelet"]
        self.cpu["plegd"] += self.plegd.cpu_seconds() - cpu0["plegd"]
        self.cpu["plegd-pod"] = pid_cpu_seconds(pod_pid) - pod_cpu0
        time.sleep(5)

        self.compare_end_states(pod_sock)
        self.check_identity(pod_sock)
        self.check_addresses()
        self.check_processor()
        self.check_kubelet_outage()
        self.check_plegd_pod(pod_sock)
        self.plegd_pod_stops()

        say("the kubelet stops")
        until = now()
        self.stop_polling.set()
        self.kubelets[-1].stop()
        time.sleep(1)
        for r in (rec_bin, rec_pod):
            r.stop()
        self.plegd.stop()
        self.judge(until, started)
        (self.work / "figures.json").write_text(json.dumps(self.figures, indent=2, default=str))
        return all(ok for ok, _ in self.results)

    def bench(self, pods: int, window: int):
        """What plegd costs beside the kubelet at `pods` pods, nothing changing, over three
        windows of the same length: plegd watching the kubelet's Pods API, plegd told there
        is none, no plegd. The CPU of each, plegd's RSS, and the CRI calls containerd
        served with plegd and without it (its own gRPC metrics), per method."""
        for d in ("manifests", "kubelet", "bin-run", "bin-state", "pod-logs"):
            (self.work / d).mkdir(parents=True, exist_ok=True)
        self.kubelet_config()
        for i in range(pods):
            self.manifest(f"steady-{i}.yaml", pod(f"steady-{i}", [{"name": "c", "command": ["sleep", "36000"]}]))
        say(f"the kubelet, with {pods} pods")
        self.kubelet_up(verbosity=2)

        def all_running():
            items = self.kubelet_pods().get("items", [])
            running = sum(1 for p in items if p["status"].get("phase") == "Running")
            return running == pods and running
        wait_for(f"{pods} pods running", all_running, timeout=900, every=2)
        self.plegd_up()
        say(f"all running; settling, then {window} s with plegd watching the Pods API, {window} s with plegd "
            f"without it, {window} s without plegd")
        time.sleep(20)
        kubelet = self.kubelets[-1]
        c0, k0, p0, t0 = self.cri_calls(), kubelet.cpu_seconds(), self.plegd.cpu_seconds(), time.monotonic()
        time.sleep(window)
        c1, k1, p1, t1 = self.cri_calls(), kubelet.cpu_seconds(), self.plegd.cpu_seconds(), time.monotonic()
        rss_watching = pid_rss_mib(self.plegd.p.pid)
        text = urllib.request.urlopen(f"http://127.0.0.1:{self.bin_admin}/metrics", timeout=2).read().decode()
        self.ok("plegd_kubelet_pods_api_up 1" in text.splitlines(), "plegd watched the Pods API through the first window")
        self.plegd.stop()
        self.plegd_up(pods_api=False)
        time.sleep(20)
        kb0, pb0, tb0 = kubelet.cpu_seconds(), self.plegd.cpu_seconds(), time.monotonic()
        time.sleep(window)
        kb1, pb1, tb1 = kubelet.cpu_seconds(), self.plegd.cpu_seconds(), time.monotonic()
        rss_inferring = pid_rss_mib(self.plegd.p.pid)
        self.plegd.stop()
        time.sleep(10)
        c2, kc0, tc0 = self.cri_calls(), kubelet.cpu_seconds(), time.monotonic()
        time.sleep(window)
        c3, kc1, tc1 = self.cri_calls(), kubelet.cpu_seconds(), time.monotonic()
        with_plegd = {m: c1.get(m, 0) - c0.get(m, 0) for m in c1}
        without = {m: c3.get(m, 0) - c2.get(m, 0) for m in c3}
        methods = sorted(m for m in set(with_plegd) | set(without) if with_plegd.get(m) or without.get(m))
        secs = t1 - t0
        f = {
            "pods": pods, "window_s": round(secs, 1),
            "cpu_percent_of_a_core": {"kubelet": round(100 * (k1 - k0) / secs, 2), "plegd": round(100 * (p1 - p0) / secs, 2)},
            "plegd_cpu_share_of_kubelet_percent": round(100 * (p1 - p0) / max(k1 - k0, 1e-9), 1),
            # The kubelet's CPU in each window: its Pods API watched by plegd, plegd
            # without the watch, no plegd.
            "kubelet_cpu_percent_of_a_core": {
                "plegd_watching_pods_api": round(100 * (k1 - k0) / secs, 2),
                "plegd_without_pods_api": round(100 * (kb1 - kb0) / (tb1 - tb0), 2),
                "no_plegd": round(100 * (kc1 - kc0) / (tc1 - tc0), 2)},
            "plegd_cpu_percent_without_pods_api": round(100 * (pb1 - pb0) / (tb1 - tb0), 2),
            "plegd_rss_mib": {"watching_pods_api": rss_watching, "without_pods_api": rss_inferring},
            "cri_calls_per_minute": {m: {"kubelet_and_plegd": round(with_plegd.get(m, 0) * 60 / secs, 1),
                                         "kubelet_alone": round(without.get(m, 0) * 60 / window, 1)} for m in methods},
        }
        lists = ("ListContainers", "ListPodSandbox")
        k_lists = sum(without.get(m, 0) for m in lists) * 60 / window
        added = sum(with_plegd.get(m, 0) for m in lists) * 60 / secs - k_lists
        f["plegd_added_list_calls_percent_of_kubelets"] = round(100 * added / max(k_lists, 1e-9), 1)
        self.figures["beside_the_kubelet"] = f
        print(json.dumps(f, indent=2), flush=True)
        self.ok(f["plegd_cpu_share_of_kubelet_percent"] <= 10, "plegd's CPU is at most 10 % of the kubelet's")
        self.ok(f["plegd_added_list_calls_percent_of_kubelets"] <= 10,
                "plegd adds at most 10 % to the list calls the kubelet makes")
        (self.work / "figures.json").write_text(json.dumps(self.figures, indent=2))
        self.kubelets[-1].stop()
        return all(ok for ok, _ in self.results)

    def compare_end_states(self, pod_sock: str):
        for which, sock in (("plegd", self.bin_sock), ("plegd's pod", pod_sock)):
            diffs = None
            for _ in range(15):  # the kubelet writes a pod's status after its sync: give it a moment
                before = self.plegd_pods(sock)
                k = self.kubelet_pods()
                after = self.plegd_pods(sock)
                if before["revision"] != after["revision"]:
                    time.sleep(1)
                    continue
                diffs = oracle.end_states(k, after, lambda u, n, at: self.removed(sock, u, n, at))
                tag = "bin" if sock == self.bin_sock else "pod"
                (self.work / f"end-kubelet-{tag}.json").write_text(json.dumps(k, indent=1))
                (self.work / f"end-plegd-{tag}.json").write_text(json.dumps(after, indent=1))
                if not diffs:
                    break
                time.sleep(1)
            n = sum(len(p["status"].get("containerStatuses", [])) + len(p["status"].get("initContainerStatuses", []))
                    for p in k.get("items", []))
            self.ok(diffs == [], f"{which}: end states equal the kubelet's /pods for {len(k.get('items', []))} pods, {n} containers")
            for d in diffs or []:
                print("   ", d)

    def check_identity(self, pod_sock: str):
        """Whose each pod is: plegd beside the kubelet takes it from the kubelet's Pods API,
        equal to the kubelet's `/pods` for every pod, through the kubelet's restart, and
        kept for a deleted pod; plegd's pod has no Pods API socket (the manifest does not
        mount it): it says so and infers."""
        k = self.kubelet_pods()
        diffs = None
        for _ in range(10):  # an address the kubelet has just written reaches plegd a moment later
            diffs = oracle.identity_diffs(k, self.plegd_pods(self.bin_sock))
            if not diffs:
                break
            time.sleep(1)
            k = self.kubelet_pods()
        items = k.get("items", [])
        kinds = sorted({o["kind"] for p in items for o in p["metadata"].get("ownerReferences", [])})
        qos = sorted({p.get("status", {}).get("qosClass", "") for p in items})
        self.ok(diffs == [] and len(kinds) >= 4 and len(qos) >= 3,
                f"plegd: every pod's identity is the kubelet's Pods API's, equal to its /pods ({len(items)} pods; "
                f"controllers {kinds}; QoS {qos}; priority, service account, node, addresses)")
        for d in diffs or []:
            print("   ", d)
        text = urllib.request.urlopen(f"http://127.0.0.1:{self.bin_admin}/metrics", timeout=2).read().decode()
        metric = lambda name: sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines() if line.startswith(name + " "))
        watches, up = metric("plegd_kubelet_pods_api_connections_total"), metric("plegd_kubelet_pods_api_up")
        self.ok(watches >= 2 and up == 1,
                f"plegd watched the Pods API again after the kubelet restarted ({watches:.0f} watches, up {up:.0f})")
        self.figures["pods_api_watches"] = watches
        self.ok(self.nri_sock.exists() or self.a.version == "1.6",
                f"containerd {self.a.version} serves NRI on the run's own socket ({self.nri_sock})")
        if self.nri_sock.exists():
            told = {line.split('"')[1]: float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
                    if line.startswith("plegd_nri_events_total{")}
            self.figures["nri_events"] = told
            self.ok(metric("plegd_nri_registered") == 1 and told.get("POST_START_CONTAINER", 0) > 0,
                    f"plegd beside the kubelet is registered as an NRI plugin and heard the kubelet's pods through it ({told})")
        # The doomed pod, deleted at t+60: its tombstone keeps the kubelet's word.
        d = self.doomed["metadata"]
        out = subprocess.run([self.a.plegd, "get", "-o", "json", "--socket", self.bin_sock, "--pod-uid", d["uid"],
                              "--container-name", "d", "--attempt", "0"], capture_output=True, text=True)
        kept = (json.loads(out.stdout)["pod"].get("identity") or {}) if out.returncode == 0 else {}
        want = oracle.kubelet_identity(self.doomed)
        same = {f: kept.get(f) == want[f] for f in ("node_name", "qos_class", "priority")}
        self.ok(kept.get("source") == "PODS_API" and all(same.values()),
                f"a deleted pod's tombstone keeps the kubelet's identity (source {kept.get('source')}, {same})")
        # plegd's pod: no socket, identities inferred, and the Job named as its controller does.
        pod_admin = f'{self.plegd_pod_status()["status"]["podIP"]}:9477'
        ready = urllib.request.urlopen(f"http://{pod_admin}/readyz", timeout=2).read().decode()
        theirs = {p["uid"]: p.get("identity") or {} for p in self.plegd_pods(pod_sock)["pods"]}
        sources = sorted({i.get("source") for i in theirs.values()})
        job = next(p for p in items if p["metadata"]["name"].startswith("done"))
        inferred = (theirs.get(job["metadata"]["uid"]) or {}).get("controller") or {}
        self.ok("no Pods API socket" in ready and sources == ["INFERRED"]
                and (inferred.get("kind"), inferred.get("name")) == ("Job", "done-job"),
                f"plegd's pod, without the socket, says so in /readyz and infers (sources {sources}; "
                f"the Job pod's controller {inferred.get('kind')}/{inferred.get('name')})")
        with open(self.work / "watch-bin.jsonl") as f:
            updated = sum(1 for e in oracle.plegd_stream(f).events if e.type == "POD_UPDATED" and e.source == "KUBELET")
        self.figures["pod_updated_events"] = updated
        self.ok(updated > 0, f"identity changes reached watchers as POD_UPDATED from the kubelet ({updated})")

    def get(self, *key: str) -> dict | None:
        """`plegd get` on the binary beside the kubelet: the answer, or None for NotFound."""
        out = subprocess.run([self.a.plegd, "get", "-o", "json", "--socket", self.bin_sock, *key],
                             capture_output=True, text=True)
        if out.returncode != 0:
            if "NotFound" not in out.stderr and "not found" not in out.stderr.lower():
                raise RuntimeError(f"plegd get {' '.join(key)}: {out.stderr.strip()}")
            return None
        return json.loads(out.stdout)

    def check_addresses(self):
        """Who held an address when, on the pod network (a /28: the bridge's host-local
        range hands out 13 addresses round-robin, so the churn reuses them within the run).
        Each (address, pod) the kubelet's /pods showed running is asked of plegd at the
        middle of the time it was seen there; the node's address, which the host-network
        pod is given, never names a pod."""
        seen: dict[tuple[str, str], list[dt.datetime]] = {}
        for at, uid, _, ip in self.ip_samples:
            seen.setdefault((ip, uid), []).append(at)
        holders: dict[str, set[str]] = {}
        for ip, uid in seen:
            holders.setdefault(ip, set()).add(uid)
        reused = sorted(ip for ip, uids in holders.items() if len(uids) > 1)
        wrong = []
        self.holdings = {key: times[len(times) // 2] for key, times in sorted(seen.items())}
        self.reused = reused
        for (ip, uid), when in self.holdings.items():
            at = when.strftime("%Y-%m-%dT%H:%M:%S.%fZ")
            got = self.get("--pod-ip", ip, "--at", at)
            got_uid = got["pod"]["uid"] if got else None
            if got_uid != uid:
                wrong.append(f"{ip} at {at}: {got_uid} (plegd) vs {uid} (the kubelet)")
        self.figures["addresses"] = {"holdings": len(seen), "addresses": len(holders), "reused": len(reused)}
        # Reuse depends on the run (13 addresses, round-robin): said, not required.
        self.ok(seen and not wrong,
                f"each address names the pod that held it at the time asked: {len(seen)} holdings of "
                f"{len(holders)} addresses, {len(reused)} reused by a later pod ({reused[:4]})"
                + ("" if reused else " — no address was reused in this run: reuse not covered"))
        for w in wrong[:10]:
            print("   ", w)
        probe = next(p for p in self.kubelet_pods()["items"] if p["metadata"]["name"].startswith("probe"))
        # The kubelet names the node's addresses as a host-network pod's; standalone (no
        # Node object) it knows none, and the node's are the machine's own.
        node_ips = [i["ip"] for i in probe["status"].get("podIPs", [])]
        node_ips = node_ips or subprocess.run(["hostname", "-I"], capture_output=True, text=True).stdout.split()
        mine = next((p for p in self.plegd_pods(self.bin_sock)["pods"] if p["uid"] == probe["metadata"]["uid"]), {})
        ident = mine.get("identity") or {}
        answers = {ip: self.get("--pod-ip", ip) for ip in node_ips}
        self.node_ips = node_ips
        self.ok(node_ips and not any(answers.values()) and not ident.get("pod_ips") and mine,
                f"the host-network pod's address ({node_ips}, the node's as the kubelet names it) names no pod, "
                f"and plegd gives the pod none of its own (pod_ips {ident.get('pod_ips')}, host_ips {ident.get('host_ips')})")

    def check_processor(self):
        """The collector processor in a real collector, placing records by address at their
        own time: a flow log with a line for each holding check_addresses asked (the
        address, the middle of the time the kubelet showed the pod holding it) and one for
        each of the node's addresses, read by filelog (json_parser, the line's time as the
        record's), placed by the plegd processor on plegd beside the kubelet with
        pod_association [k8s.pod.ip] and no node name of its own, written by the file
        exporter. Each holding's line must name the pod the kubelet said held the address
        then, with the workload its owner references name and plegd's node; a node address's
        line no pod. Beside it, a pod on the pod network posts OTLP log records to the
        collector, placed with pod_association [connection]: each must name that pod."""
        if not self.a.collector:
            self.ok(False, "the collector processor by pod address: no --collector "
                           "(tests/otelcol/build-collector.sh builds it; tests/kubelet/run.sh passes it)")
            return
        d = self.work / "collector"
        d.mkdir(exist_ok=True)
        want: dict[str, tuple[str, str] | None] = {}
        lines = []
        for n, ((ip, uid), when) in enumerate(self.holdings.items()):
            want[f"h{n}"] = (ip, uid)
            lines.append({"ts": str(int(when.timestamp() * 1e9)), "k8s.pod.ip": ip, "flow": f"h{n}"})
        for n, ip in enumerate(self.node_ips):
            want[f"node{n}"] = None
            lines.append({"ts": str(time.time_ns()), "k8s.pod.ip": ip, "flow": f"node{n}"})
        (d / "flows.log").write_text("".join(json.dumps(line) + "\n" for line in lines))
        out = d / "out.jsonl"
        # Beside it, records a pod sends over OTLP from its own address, placed by their
        # connection (what k8sattributes users configure for their agents' and apps' data).
        out_sent = d / "sent.jsonl"
        otlp_port = free_port()
        processor = {"endpoint": self.bin_sock, "wait_for_sync": "5s", "lookup_timeout": "2s"}
        config = {
            "receivers": {"filelog": {"include": [str(d / "flows.log")], "start_at": "beginning", "poll_interval": "100ms",
                                      "operators": [{"type": "json_parser", "timestamp": {
                                          "parse_from": "attributes.ts", "layout_type": "epoch", "layout": "ns"}}]},
                          "otlp": {"protocols": {"http": {"endpoint": f"0.0.0.0:{otlp_port}"}}}},
            "processors": {"plegd": {**processor, "pod_association": ["k8s.pod.ip"]},
                           "plegd/connection": {**processor, "pod_association": ["connection"]}},
            "exporters": {"file": {"path": str(out)}, "file/sent": {"path": str(out_sent)}},
            "service": {"telemetry": {"metrics": {"level": "none"}},
                        "pipelines": {"logs": {"receivers": ["filelog"], "processors": ["plegd"], "exporters": ["file"]},
                                      "logs/sent": {"receivers": ["otlp"], "processors": ["plegd/connection"],
                                                    "exporters": ["file/sent"]}}},
        }
        (d / "collector.yaml").write_text(json.dumps(config, indent=1))  # YAML is a superset of JSON
        env = {k: v for k, v in os.environ.items() if k not in ("K8S_NODE_NAME", "NODE_NAME")}
        collector = Proc("collector", [self.a.collector, f"--config={d / 'collector.yaml'}"], d / "collector.log", env=env, inherit=False).start()

        def records(path=out) -> dict[str, list[dict]]:
            got: dict[str, list[dict]] = {}
            if not path.exists():
                return got
            for line in path.read_text().splitlines():
                for rl in json.loads(line).get("resourceLogs", []):
                    res = {a["key"]: a["value"].get("stringValue") for a in rl.get("resource", {}).get("attributes", [])}
                    for sl in rl.get("scopeLogs", []):
                        for r in sl.get("logRecords", []):
                            attrs = {a["key"]: a["value"].get("stringValue") for a in r.get("attributes", [])}
                            got.setdefault(attrs.get("flow", ""), []).append({**attrs, **res})
            return got

        # A pod on the pod network posts a log record each second to the collector on the
        # bridge's address (the pods' gateway), stamped with its own clock. busybox's date
        # tells whole seconds: each record is stamped at the end of its second, not at its
        # start, which for the first record can come before the pod held its address.
        record = ('{"resourceLogs":[{"scopeLogs":[{"logRecords":[{"timeUnixNano":"\'$(date +%s)999000000\'",'
                  '"body":{"stringValue":"sent"},"attributes":[{"key":"flow","value":{"stringValue":"sent"}}]}]}]}]}')
        sender = pod("sender", [{"name": "s", "command": sh(
            f"while true; do wget -q -O /dev/null --header 'Content-Type: application/json' "
            f"--post-data '{record}' http://{POD_GATEWAY}:{otlp_port}/v1/logs; sleep 1; done")}])
        try:
            wait_for("the collector's output of every flow line", lambda: len(records()) >= len(want), timeout=60)
            self.manifest("sender.yaml", sender)
            wait_for("three records the sender pod posted", lambda: len(records(out_sent).get("sent", [])) >= 3, timeout=90)
            uid = next((p["metadata"]["uid"] for p in self.kubelet_pods().get("items", [])
                        if p["metadata"]["name"] == f"sender-{NODE}"), None)
        finally:
            self.manifest("sender.yaml", None)
            collector.stop()
        sent = records(out_sent).get("sent", [])
        placed = {(r.get("k8s.pod.uid"), r.get("k8s.pod.name"), r.get("k8s.namespace.name"), r.get("k8s.node.name"))
                  for r in sent}
        self.ok(uid and placed == {(uid, f"sender-{NODE}", "cases", NODE)},
                f"the collector processor places a pod's own OTLP records by their connection: {len(sent)} records "
                f"from the sender pod, each on it ({placed} vs {uid})")
        got = records()
        wrong = []
        kinds: set[str] = set()
        for flow, held in want.items():
            recs = got.get(flow, [])
            if len(recs) != 1:
                wrong.append(f"{flow}: came out {len(recs)} times")
                continue
            r = recs[0]
            if held is None:
                if r.get("k8s.pod.uid"):
                    wrong.append(f"{flow} (the node's {r.get('k8s.pod.ip')}): placed on pod {r.get('k8s.pod.uid')}")
                continue
            ip, uid = held
            meta = self.sampled[uid]
            expect = {"k8s.pod.uid": uid, "k8s.pod.name": meta["name"], "k8s.namespace.name": meta["namespace"],
                      "k8s.node.name": NODE,
                      **oracle.workload_attributes(meta, self.holdings[(ip, uid)])}
            kinds |= {k for k in expect if k in oracle.WORKLOAD_ATTRIBUTES.values()}
            have = {k: r.get(k) for k in expect}
            extra = {k: r[k] for k in oracle.WORKLOAD_ATTRIBUTES.values() if k in r and k not in expect}
            if have != expect or extra:
                wrong.append(f"{flow} {ip} at {self.holdings[(ip, uid)]}: {have} {extra or ''} vs {expect}")
        self.ok(got and not wrong and len(kinds) >= 4,
                f"the collector processor places records by address at their own time, as the kubelet held them: "
                f"{len(self.holdings)} holdings ({len(self.reused)} addresses reused), with node and workload "
                f"({sorted(kinds)}); the node's {len(self.node_ips)} addresses on no pod")
        for w in wrong[:10]:
            print("   ", w)

    def check_kubelet_outage(self):
        """The kubelet stopped for 30 s while manifests came and went: its watch came
        back, the replay told no change of a pod that ran throughout, and the pods deleted
        meanwhile, which the replay leaves out, were noticed gone and keep the kubelet's
        identity."""
        # A static pod is named after its manifest and the node.
        of = lambda p: p["metadata"]["name"].removesuffix(f"-{NODE}")
        removed = self.manifests_before_outage - self.manifests_after_outage
        deleted = {u: p for u, p in self.before_outage.items() if of(p) in removed}
        # The case pods that ran before and after (a churn pod may end meanwhile).
        through = {u for u, p in self.before_outage.items() if p["status"].get("phase") == "Running"
                   and of(p) in self.manifests_after_outage and "churn" not in p["metadata"].get("labels", {})}
        down, back = self.kubelet_down, self.kubelet_back
        with open(self.work / "watch-bin.jsonl") as f:
            told = [e for e in oracle.plegd_stream(f).events
                    if e.type == "POD_UPDATED" and e.uid in through and down <= e.at <= back + dt.timedelta(seconds=20)]
        # Only the watches after the kubelet stopped (plegd's own restart earlier also
        # finds pods deleted while it was down).
        noticed = []
        for line in (self.work / "plegd.log").read_text(errors="replace").splitlines():
            m = re.match(r"(\S+Z)\s.*the kubelet's Pods API is watched pods=\d+ gone=(\d+)", line)
            if m and oracle.parse_time(m.group(1)) > down:
                noticed.append(int(m.group(2)))
        kept = {}
        for uid, p in deleted.items():
            c = p["spec"]["containers"][0]["name"]
            got = self.get("--pod-uid", uid, "--container-name", c, "--attempt", "0") or {}
            kept[p["metadata"]["name"]] = (got.get("pod", {}).get("identity") or {}).get("source")
        self.figures["kubelet_outage"] = {"through": len(through), "deleted": sorted(kept), "replay_updates": len(told)}
        self.ok(through and not told,
                f"after 30 s away the kubelet's replay told no change of the {len(through)} pods that ran throughout "
                f"({len(told)} POD_UPDATED within 20 s of its return)")
        self.ok(deleted and max(noticed, default=0) >= 1 and all(s == "PODS_API" for s in kept.values()),
                f"pods deleted while the kubelet was away were noticed gone at its replay (gone= {noticed}) and keep "
                f"its identity ({kept})")

    def check_plegd_pod(self, pod_sock: str):
        p = self.plegd_pod_status()
        cs = p["status"]["containerStatuses"][0]
        seen = {(cid, r) for cid, _, r in self.pod_samples if cid}
        self.ok(cs.get("restartCount", 0) == 0 and seen == {(cs.get("containerID"), 0)},
                f"plegd's pod was never restarted by the kubelet: one container, restart count 0, in "
                f"{len(self.pod_samples)} samples of /pods ({sorted(seen)})")
        failed, starting = [], []
        for log in self.kubelet_logs:
            lines = log.read_text(errors="replace").splitlines()
            got = oracle.probe_failures(lines, now().year, "plegd/", self.plegd_pod_first_ready)
            failed += got.counted
            starting += got.before_listening
        self.ok(not failed and cs.get("ready"), f"plegd's pod: every probe the kubelet ran passed once plegd listened, "
                                                 f"ready at the end ({len(failed)} failed probes; {len(starting)} "
                                                 f"readiness probes refused while it started)")
        for line in failed[:5]:
            print("   ", line[:300])
        pods = self.plegd_pods(pod_sock)
        pid = self.plegd_pod_pid()
        status = pathlib.Path(f"/proc/{pid}/status").read_text() if pid else ""
        hwm = next((int(line.split()[1]) for line in status.splitlines() if line.startswith("VmHWM:")), 0) / 1024
        limit = 128
        self.figures["plegd_pod_peak_rss_mib"] = round(hwm, 1)
        self.ok(0 < hwm < limit, f"plegd's pod peak RSS {hwm:.1f} MiB, under its {limit} Mi limit (requests 48 Mi)")
        self.ok(bool(pods["pods"]), f"plegd's pod served the harness over its hostPath socket ({len(pods['pods'])} pods)")

    def plegd_pod_pid(self) -> int:
        """The host PID of plegd in its pod, as the plegd beside the kubelet reports it."""
        pods = self.plegd_pods(self.bin_sock)
        return next((c["pid"] for q in pods["pods"] if q["namespace"] == "plegd" for c in q["containers"]
                     if oracle.state_name(c["state"]) == "CONTAINER_RUNNING"), 0)

    def plegd_pod_stops(self):
        """The manifest removed: the kubelet stops plegd's pod with its grace period, and
        plegd ends on SIGTERM with exit code 0 (as the plegd beside it saw)."""
        grace = yaml.safe_load((self.work / "manifests" / "plegd.yaml").read_text())["spec"]["terminationGracePeriodSeconds"]
        removed = time.monotonic()
        self.pod_gone_at = now()
        self.manifest("plegd.yaml", None)

        def exited():
            for q in self.plegd_pods(self.bin_sock)["pods"]:
                for c in q["containers"] if q["namespace"] == "plegd" else []:
                    if oracle.state_name(c["state"]) == "CONTAINER_EXITED":
                        return c
            # The kubelet may remove the dead container before a poll sees it (containerd
            # 1.7: 0.4 s after its death): its death is in the stream of the plegd beside it.
            with open(self.work / "watch-bin.jsonl") as f:
                for line in f:
                    try:
                        e = json.loads(line).get("event") or {}
                    except ValueError:
                        continue
                    if e.get("pod_namespace") != "plegd" or e.get("type") != "CONTAINER_DIED":
                        continue
                    for c in (e.get("pod") or {}).get("containers", []):
                        if c.get("id") == e.get("container_id") and oracle.state_name(c["state"]) == "CONTAINER_EXITED":
                            return c
            return None
        c = wait_for("plegd's pod to stop", exited, timeout=grace + 30)
        took = time.monotonic() - removed
        self.ok(c["exit_code"] == 0 and took < grace,
                f"plegd's pod stopped by the kubelet ends on SIGTERM with exit code {c['exit_code']} after {took:.1f} s "
                f"(grace {grace} s)")

    def judge(self, until: dt.datetime, started: dt.datetime):
        year = now().year
        transitions = []
        for log in self.kubelet_logs:
            with open(log, errors="replace") as f:
                transitions += oracle.kubelet_transitions(f, year, log.name)
        for name, blind in (("bin", self.blind_bin), ("pod", self.blind_pod)):
            with open(self.work / f"watch-{name}.jsonl") as f:
                stream = oracle.plegd_stream(f)
            who = "plegd" if name == "bin" else "plegd's pod"
            # plegd's pod began after the kubelet: its own objects are in its snapshot.
            # A change in plegd's stream within the kubelet's last period before it stopped
            # had no relist of the kubelet left to meet it. plegd's pod is judged until
            # the kubelet began to stop it.
            end = until if name == "bin" else min(until, self.pod_gone_at)
            relisting = dt.timedelta(seconds=1.5) if name == "pod" and self.a.pod_mode == "generic" else None
            # A plegd that only relists sees a change a period and a read after it: the
            # changes in that span before it was stopped had no relist of its own left.
            cut = end - relisting if relisting else end
            mine = [t for t in transitions if t.at < cut]
            # plegd's events are judged up to the kubelet's relist period and a read before
            # that cut: a change plegd told earlier than the kubelet has its transition up
            # to that much later (a removal plegd's pod told 0.9 s before the kubelet's
            # relist, whose transition fell past the cut, was counted unexplained).
            v = oracle.check(mine, stream, blind, cut - dt.timedelta(seconds=2), self.kubelet_blind, relisting=relisting)
            print(oracle.report(who, v), flush=True)
            self.ok(v.ok and stream.resets == 0 and len(transitions) > 0,
                    f"{who}: every kubelet PLEG transition in the stream, none later ({len(transitions)} transitions, "
                    f"{stream.resets} resets)")
            leads = v.leads()
            self.figures[f"{who} lead_ms"] = {
                "n": len(leads), "p50": round(oracle.percentile(leads, 50) * 1e3, 1),
                "p99": round(oracle.percentile(leads, 99) * 1e3, 1),
            }
        types = {ty for t in transitions for ty in t.types()}
        self.ok({"CONTAINER_STARTED", "CONTAINER_DIED", "CONTAINER_REMOVED"} <= types,
                f"the kubelet saw starts, deaths and removals ({sorted(types)})")
        self.figures["cpu_seconds"] = {k: round(v, 2) for k, v in self.cpu.items()}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--kubelet", required=True)
    ap.add_argument("--plegd", required=True)
    ap.add_argument("--endpoint", required=True)
    ap.add_argument("--containerd-dir", required=True, help="the directory holding containerd.sock (the pod's /run/containerd)")
    ap.add_argument("--ctl", required=True)
    ap.add_argument("--version", required=True)
    ap.add_argument("--instance", default="kubelet")
    ap.add_argument("--work", required=True)
    ap.add_argument("--seconds", type=int, default=300)
    ap.add_argument("--containerd-metrics", default="", help="host:port of containerd's metrics listener")
    ap.add_argument("--pod-mode", default="", help="plegd's pod's --mode (containerd 1.7 splits its event stream "
                                                 "between subscribers: one plegd on the stream there)")
    ap.add_argument("--bench", type=int, default=0, metavar="PODS",
                    help="instead of the cases: what plegd costs beside the kubelet at PODS steady pods")
    ap.add_argument("--bench-window", type=int, default=60)
    ap.add_argument("--collector", default="", help="an OpenTelemetry Collector with the plegd processor, filelog "
                                                  "and the file exporter (tests/otelcol/build-collector.sh)")
    a = ap.parse_args()
    if a.seconds < 150:
        ap.error("--seconds: at least 150 (the last fault is at t+134)")
    run = Run(a)
    try:
        good = run.bench(a.bench, a.bench_window) if a.bench else run.go()
    finally:
        run.stop_polling.set()
        for p in run.kubelets + [getattr(run, "plegd", None)] + getattr(run, "recorders", []):
            if p:
                p.stop(signal.SIGKILL, wait=5)
    passed = sum(ok for ok, _ in run.results)
    print(f"{passed} passed, {len(run.results) - passed} failed")
    sys.exit(0 if good else 1)


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""A stock grpcio (grpc-core) client with DEFAULT channel options against plegd's unix socket.

grpc-core sends the socket path as :authority; plegd must accept that. No
grpc.default_authority override, no channel options at all.

Usage: stock_client.py unix:///path/to/plegd.sock
Stubs are generated at run time from cri-proto with grpc_tools.protoc into a temp dir.
Exits 0 when every check passes, non-zero (with the reason) otherwise.
"""
import atexit
import os
import shutil
import sys
import tempfile
import time

import grpc
from grpc_tools import protoc
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection_pb2, reflection_pb2_grpc

target = sys.argv[1]
assert target.startswith("unix:"), f"want a unix: target, got {target!r}"

root = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "..", "cri-proto")
out = tempfile.mkdtemp(prefix="plegd-py-stubs.")
atexit.register(shutil.rmtree, out, ignore_errors=True)
include = os.path.join(os.path.dirname(protoc.__file__), "_proto")
rc = protoc.main(["protoc", f"-I{root}", f"-I{include}", f"--python_out={out}",
                  f"--grpc_python_out={out}", "plegd/v1/plegd.proto"])
assert rc == 0, "protoc failed"
sys.path.insert(0, out)
from plegd.v1 import plegd_pb2, plegd_pb2_grpc  # noqa: E402


def step(name):
    print(f"python: {name}", flush=True)


channel = grpc.insecure_channel(target)  # defaults only
stub = plegd_pb2_grpc.PodLifecycleStub(channel)

# Health: SERVING (for the whole server and for the service by name).
health = health_pb2_grpc.HealthStub(channel)
for service in ("", "plegd.v1.PodLifecycle"):
    resp = health.Check(health_pb2.HealthCheckRequest(service=service), timeout=10)
    assert resp.status == health_pb2.HealthCheckResponse.SERVING, f"health({service!r}) = {resp}"
step("health Check SERVING ('' and plegd.v1.PodLifecycle)")

# ListPods
pods = stub.ListPods(plegd_pb2.ListPodsRequest(), timeout=10)
assert pods.pods, "ListPods returned no pods (the sim keeps 5)"
assert pods.revision > 0 and pods.epoch > 0, f"revision={pods.revision} epoch={pods.epoch}"
for p in pods.pods:
    assert p.uid and p.name and p.namespace, f"pod without identity: {p}"
step(f"ListPods: {len(pods.pods)} pods at revision {pods.revision}, epoch {pods.epoch}")

# GetPodStatus for a listed pod. The runtime churns: a pod removed since the listing
# answers not_found, and the next listed one is asked.
got = None
for pod in pods.pods:
    got = stub.GetPodStatus(plegd_pb2.GetPodStatusRequest(pod_uid=pod.uid), timeout=10)
    if not got.not_found:
        break
assert not got.not_found, f"every one of the {len(pods.pods)} listed pods answered not_found"
assert got.HasField("pod") and got.pod.uid == pod.uid, f"GetPodStatus({pod.uid}) = {got}"
step(f"GetPodStatus({pod.uid}): {got.pod.namespace}/{got.pod.name}, {len(got.pod.containers)} containers")

# Watch from a snapshot: start, snapshots, synced, then >= 3 live events in increasing revision.
kinds, snapshots, synced, events, last_rev = [], 0, None, [], 0
deadline = time.monotonic() + 60
call = stub.Watch(plegd_pb2.WatchRequest(since_revision=0), timeout=60)
for msg in call:
    kind = msg.WhichOneof("kind")
    kinds.append(kind)
    if kind == "snapshot":
        assert synced is None, "snapshot after synced without a reset"
        snapshots += 1
    elif kind == "synced":
        synced = msg
        assert msg.synced.pods == snapshots, f"synced.pods={msg.synced.pods}, saw {snapshots} snapshots"
        assert msg.synced.epoch == pods.epoch, f"synced epoch {msg.synced.epoch} != ListPods epoch {pods.epoch}"
    elif kind == "event":
        assert synced is not None, "event before synced"
        assert msg.revision > last_rev, f"revision {msg.revision} after {last_rev}"
        last_rev = msg.revision
        events.append(msg)
        if len(events) >= 3:
            break
    elif kind == "reset":
        raise AssertionError(f"unexpected reset: {msg.reset}")
    assert time.monotonic() < deadline, "Watch took over 60 s"
call.cancel()
assert kinds[0] == "start", f"first message is {kinds[0]!r}, not start"
assert synced is not None and len(events) >= 3, f"kinds={kinds}"
assert events[0].revision > synced.revision, "first live event not after synced revision"
names = [plegd_pb2.LifecycleEventType.Name(e.event.type) for e in events]
step(f"Watch: start, {snapshots} snapshots, synced@{synced.revision}, events {[e.revision for e in events]} {names}")

# Reflection: list_services contains plegd.v1.PodLifecycle (v1alpha stub; v1 is checked below).
refl = reflection_pb2_grpc.ServerReflectionStub(channel)
responses = refl.ServerReflectionInfo(iter([reflection_pb2.ServerReflectionRequest(list_services="")]), timeout=10)
services = sorted(s.name for r in responses for s in r.list_services_response.service)
assert "plegd.v1.PodLifecycle" in services, f"reflection v1alpha services: {services}"
try:
    from grpc_reflection.v1 import reflection_pb2 as r1, reflection_pb2_grpc as r1g  # grpcio-reflection >= 1.62
except ImportError:
    r1 = None
if r1 is not None:
    responses = r1g.ServerReflectionStub(channel).ServerReflectionInfo(
        iter([r1.ServerReflectionRequest(list_services="")]), timeout=10)
    v1 = sorted(s.name for r in responses for s in r.list_services_response.service)
    assert "plegd.v1.PodLifecycle" in v1, f"reflection v1 services: {v1}"
step(f"reflection list_services: {services}")

channel.close()
print("python: OK", flush=True)

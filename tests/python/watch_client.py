#!/usr/bin/env python3
"""A plegd client in another language: compiles plegd.v1's proto with grpcio-tools,
watches the socket given as argv[1] until it has seen `synced` and N lifecycle events,
resumes from a revision, lists pods, and prints one JSON summary line."""
import json
import os
import sys
import tempfile

from grpc_tools import protoc
import grpc

socket, want = sys.argv[1], int(sys.argv[2])
root = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "cri-proto")
out = tempfile.mkdtemp()
include = os.path.join(os.path.dirname(protoc.__file__), "_proto")
rc = protoc.main(["protoc", f"-I{root}", f"-I{include}", f"--python_out={out}", f"--grpc_python_out={out}", "plegd/v1/plegd.proto"])
assert rc == 0, "protoc failed"
sys.path.insert(0, out)
from plegd.v1 import plegd_pb2, plegd_pb2_grpc  # noqa: E402

# Default options: grpc-core sends the socket's path as :authority, which plegd accepts.
channel = grpc.insecure_channel(f"unix://{socket}")
stub = plegd_pb2_grpc.PodLifecycleStub(channel)

snapshot, events, epoch, synced_rev, revisions = 0, [], 0, 0, []
for msg in stub.Watch(plegd_pb2.WatchRequest(since_revision=0), timeout=60):
    kind = msg.WhichOneof("kind")
    if kind == "snapshot":
        snapshot += 1
    elif kind == "synced":
        epoch, synced_rev = msg.synced.epoch, msg.revision
    elif kind == "event":
        events.append(plegd_pb2.LifecycleEventType.Name(msg.event.type))
        revisions.append(msg.revision)
        if len(events) >= want:
            break

# Resume after the first event: the second one comes next.
resumed = next(
    m for m in stub.Watch(plegd_pb2.WatchRequest(since_revision=revisions[0], epoch=epoch), timeout=30)
    if m.WhichOneof("kind") == "event"
)
pods = stub.ListPods(plegd_pb2.ListPodsRequest(), timeout=10)
try:
    stub.ListPods(plegd_pb2.ListPodsRequest(filter=plegd_pb2.PodFilter(label_selector="a in b")), timeout=10)
    bad = "accepted"
except grpc.RpcError as e:
    bad = e.code().name

print(json.dumps({
    "snapshot": snapshot, "synced_revision": synced_rev, "epoch": epoch, "events": events,
    "revisions": revisions, "resumed_revision": resumed.revision, "pods": len(pods.pods),
    "bad_selector": bad,
}))

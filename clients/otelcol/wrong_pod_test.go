package plegdprocessor

// Records are never given another pod's or container's attributes: a PID or a log file
// reused by another container, a resource that already names another pod, an SDK's
// in-container PID; and records of a pod that left the informer's copy keep theirs.

import (
	"fmt"
	"strings"
	"testing"
	"time"
)

// A PID answer holds only while the informer's copy has not changed. Container db
// (pid 1004) dies and is removed; a new container of another pod gets pid 1004; once
// the informer has seen both changes, the records of pid 1004 go to the new container.
func TestAReusedPIDIsPlacedOnItsNewContainerOnceTheInformerSawTheChange(t *testing.T) {
	n := newNode(t)
	h := newHarness(t, n.f.endpoint(), nil)
	pid := rec{res: map[string]any{"process.pid": int64(n.dbc.Pid)}}
	wantPlaced(t, h.consume(makeLogs(pid))["record 0"], n.db, n.dbc)

	// db goes away; its PID is no longer its own.
	n.f.removePod("uid-db")
	n.f.mu.Lock()
	delete(n.f.byKey, "p:1004")
	n.f.mu.Unlock()
	// A container of another pod now has PID 1004.
	nc := testContainer("cache", "redis", "uid-redis", "redis", 0, cid(50), n.dbc.Pid)
	redis := testPod("cache", "redis", "uid-redis", nc)
	n.f.addPod(redis)
	eventually(t, "the informer sees db go and redis come", 5*time.Second, func() bool {
		_, gone := h.resolver().inf.Get("uid-db")
		_, there := h.resolver().inf.Get("uid-redis")
		return !gone && there
	})
	got := h.consume(makeLogs(pid))["record 0"]
	if got["k8s.pod.uid"] != "uid-redis" {
		t.Errorf("a record of PID %d, after the informer learnt that PID 1004 is now redis's, was placed on %v/%v (container %v): a stale PID answer",
			n.dbc.Pid, got["k8s.namespace.name"], got["k8s.pod.name"], got["container.id"])
	}
}

// The resource already says k8s.pod.uid = web (an SDK's OTEL_RESOURCE_ATTRIBUTES, or
// an earlier processor), and carries the container.id of a container of another pod
// (db). Existing values are kept, so placing it on db would leave it naming two pods:
// it is left unplaced and counted as a conflict. The same within a pod, with
// k8s.container.name of one container and the container.id of another.
func TestARecordWhoseResourceNamesOnePodIsNotGivenAnotherPodsContainer(t *testing.T) {
	n := newNode(t)
	h := newHarness(t, n.f.endpoint(), nil)
	got := h.consume(makeLogs(rec{res: map[string]any{
		"k8s.pod.uid":  "uid-web",
		"container.id": n.dbc.Id,
	}}))["record 0"]
	if name, ok := got["k8s.pod.name"]; ok && name != "web" {
		t.Errorf("one resource now names two pods: k8s.pod.uid=%v (web) but k8s.pod.name=%v, k8s.namespace.name=%v, k8s.container.name=%v",
			got["k8s.pod.uid"], name, got["k8s.namespace.name"], got["k8s.container.name"])
	}

	// The same within a pod: the record's resource names container "app" and carries
	// the sidecar's id.
	got = h.consume(makeLogs(rec{res: map[string]any{
		"k8s.container.name": "app",
		"container.id":       n.side.Id,
	}}))["record 0"]
	if got["k8s.container.name"] == "app" && got["container.image.name"] != nil {
		// container.image.* etc. came from the sidecar while the name says app.
		t.Errorf("k8s.container.name=app kept next to the sidecar's container.id/image: %v", got)
	}
	if got := h.counter("otelcol_processor_plegd_records_unplaced", map[string]string{"reason": "conflict"}); got != 2 {
		t.Errorf("unplaced conflict = %d, want 2", got)
	}

	// k8s.pod.name and namespace of another pod; and, with k8s.pod.uid tried first, a
	// container.id of another pod on the resource.
	got = h.consume(makeLogs(rec{res: map[string]any{"k8s.pod.name": "web", "k8s.namespace.name": "shop", "container.id": n.dbc.Id}}))["record 0"]
	if got["k8s.pod.uid"] != nil || got["k8s.container.name"] != nil {
		t.Errorf("k8s.pod.name=web given db's container: %v", got)
	}
	h2 := newHarness(t, n.f.endpoint(), func(c *Config) { c.PodAssociation = []string{KeyPodUID, KeyContainerID} })
	got = h2.consume(makeLogs(rec{res: map[string]any{"k8s.pod.uid": "uid-web", "container.id": n.dbc.Id}}))["record 0"]
	if got["k8s.pod.name"] != nil {
		t.Errorf("container.id of db's container given pod web: %v", got)
	}
	if got := h2.counter("otelcol_processor_plegd_records_unplaced", map[string]string{"reason": "conflict"}); got != 1 {
		t.Errorf("unplaced conflict = %d, want 1", got)
	}

	// What agrees is no conflict: the same pod and container, or a namespace alone.
	got = h.consume(makeLogs(rec{res: map[string]any{"k8s.pod.uid": "uid-db", "k8s.pod.name": "db", "k8s.container.name": "pg", "container.id": n.dbc.Id}}))["record 0"]
	wantPlaced(t, got, n.db, n.dbc)
}

// A pod deleted after the processor saw it; its last records carry what the
// downward API gives an SDK (OTEL_RESOURCE_ATTRIBUTES=k8s.pod.uid=…,k8s.container.name=…)
// but no restart count. They keep their attributes after the pod left the informer's
// copy ("a container removed before its last records pass still gets its
// attributes", issue 42): the pod as the copy last held it, and the newest attempt of
// the container named.
func TestRecordsOfADeletedPodByUIDAndContainerNameKeepTheirAttributes(t *testing.T) {
	n := newNode(t)
	h := newHarness(t, n.f.endpoint(), nil)
	byName := rec{res: map[string]any{"k8s.pod.uid": "uid-db", "k8s.container.name": "pg"}}
	byUID := rec{res: map[string]any{"k8s.pod.uid": "uid-db"}}
	out := h.consume(makeLogs(byName, byUID))
	wantPlaced(t, out["record 0"], n.db, n.dbc)
	wantPlaced(t, out["record 1"], n.db, nil)

	n.f.removePod("uid-db")
	eventually(t, "the informer sees the pod go", 5*time.Second, func() bool {
		_, ok := h.resolver().inf.Get("uid-db")
		return !ok
	})
	out = h.consume(makeLogs(byName, byUID))
	if out["record 0"]["k8s.pod.name"] != "db" {
		t.Errorf("a deleted pod's record (k8s.pod.uid + k8s.container.name) lost its attributes: %v", out["record 0"])
	}
	if out["record 1"]["k8s.pod.name"] != "db" {
		t.Errorf("a deleted pod's record (k8s.pod.uid) lost its attributes: %v", out["record 1"])
	}
	wantPlaced(t, out["record 0"], n.db, n.dbc)
	wantPlaced(t, out["record 1"], n.db, nil)
	if got := h.counter("otelcol_processor_plegd_records_unplaced", map[string]string{"reason": "not_found"}); got != 0 {
		t.Errorf("unplaced not_found: %d", got)
	}

	// A pod no record named before it was deleted: the informer's deletion is kept.
	c := testContainer("batch", "job", "uid-job", "run", 2, cid(40), 0)
	job := testPod("batch", "job", "uid-job", c, testContainer("batch", "job", "uid-job", "run", 1, cid(41), 0))
	n.f.addPod(job)
	eventually(t, "the informer sees the job", 5*time.Second, func() bool {
		_, ok := h.resolver().inf.Get("uid-job")
		return ok
	})
	n.f.removePod("uid-job")
	eventually(t, "the informer sees the job go", 5*time.Second, func() bool {
		_, ok := h.resolver().inf.Get("uid-job")
		return !ok
	})
	// (The informer's handlers may run a moment after its copy changed.)
	eventually(t, "the deleted job's records placed on its newest attempt", 5*time.Second, func() bool {
		got := h.consume(makeLogs(rec{res: map[string]any{"k8s.pod.uid": "uid-job", "k8s.container.name": "run"}}))["record 0"]
		return got["container.id"] == c.Id
	})
}

// A static pod is deleted and created again from the same manifest: same uid, same
// name, so the new container writes the same /var/log/pods/<ns>_<pod>_<uid>/<c>/0.log.
// Once the informer has seen the old container go and the new one start, the file's
// lines are placed on the new one (the informer's copy answers log paths first).
func TestALogFileOfARecreatedStaticPodIsPlacedOnItsNewContainer(t *testing.T) {
	n := newNode(t)
	h := newHarness(t, n.f.endpoint(), nil)
	old := testContainer("kube-system", "etcd-node-1", "uid-static", "etcd", 0, cid(70), 0)
	pod := testPod("kube-system", "etcd-node-1", "uid-static", old)
	n.f.addPod(pod)
	path := rec{rec: map[string]any{"log.file.path": old.LogPath}}
	wantPlaced(t, h.consume(makeLogs(path))["record 0"], pod, old)

	n.f.removePod("uid-static")
	nc := testContainer("kube-system", "etcd-node-1", "uid-static", "etcd", 0, cid(71), 0)
	nc.Image = "registry.k8s.io/etcd:3.6.0"
	n.f.addPod(testPod("kube-system", "etcd-node-1", "uid-static", nc)) // re-indexes l:<path> → the new container
	eventually(t, "the informer holds the new container", 5*time.Second, func() bool {
		p, ok := h.resolver().inf.GetByContainerID(nc.Id)
		return ok && p != nil
	})
	got := h.consume(makeLogs(path))["record 0"]
	if got["container.id"] != nc.Id {
		t.Errorf("the recreated pod's log line was placed on the old container %v (image %v), want %s: a stale log-path answer",
			got["container.id"], got["container.image.name"], nc.Id)
	}
}

// The same when GetContainer answered the path (the container was not in the copy):
// the cached answer is asked again once the copy has changed.
func TestACachedLogFileAnswerIsAskedAgainOnceTheInformerSawAChange(t *testing.T) {
	n := newNode(t)
	h := newHarness(t, n.f.endpoint(), nil)
	old := testContainer("kube-system", "etcd-node-1", "uid-static", "etcd", 0, cid(70), 0)
	pod := testPod("kube-system", "etcd-node-1", "uid-static", old)
	n.f.tombstone(pod, old) // plegd knows it; the informer never saw it
	path := rec{rec: map[string]any{"log.file.path": old.LogPath}}
	wantPlaced(t, h.consume(makeLogs(path))["record 0"], pod, old)
	before := n.f.rpcs.Load()
	wantPlaced(t, h.consume(makeLogs(path))["record 0"], pod, old)
	if got := n.f.rpcs.Load() - before; got != 0 {
		t.Errorf("an unchanged copy: %d calls, want the cached answer", got)
	}

	nc := testContainer("kube-system", "etcd-node-1", "uid-static", "etcd", 0, cid(71), 0)
	n.f.tombstone(pod, nc) // plegd's answer for the path is now the new container
	n.f.addPod(testPod("shop", "other", "uid-other", testContainer("shop", "other", "uid-other", "c", 0, cid(72), 0)))
	eventually(t, "the informer sees a change", 5*time.Second, func() bool {
		_, ok := h.resolver().inf.Get("uid-other")
		return ok
	})
	if got := h.consume(makeLogs(path))["record 0"]; got["container.id"] != nc.Id {
		t.Errorf("after a change of the copy the path is still on %v, want %s", got["container.id"], nc.Id)
	}

	// plegd away: the answer it gave last stands (better than none).
	n.f.mu.Lock()
	n.f.delay = time.Hour
	n.f.mu.Unlock()
	n.f.addPod(testPod("shop", "other2", "uid-other2"))
	eventually(t, "the informer sees another change", 5*time.Second, func() bool {
		_, ok := h.resolver().inf.Get("uid-other2")
		return ok
	})
	if got := h.consume(makeLogs(path))["record 0"]; got["container.id"] != nc.Id {
		t.Errorf("plegd not answering: the path lost its last answer: %v", got)
	}
}

// The informer's copy answers each form of a log file path plegd takes — the
// kubelet's file, its rotated files, the /var/log/containers link — with no call.
func TestALogFileIsPlacedFromTheInformersCopyInEveryFormPlegdTakes(t *testing.T) {
	n := newNode(t)
	h := newHarness(t, n.f.endpoint(), nil)
	before := n.f.rpcs.Load()
	link := fmt.Sprintf("/var/log/containers/web_shop_sidecar-%s.log", n.side.Id)
	out := h.consume(makeLogs(
		rec{rec: map[string]any{"log.file.path": n.app1.LogPath}},
		rec{rec: map[string]any{"log.file.path": n.app1.LogPath + ".20260101-120000"}},
		rec{rec: map[string]any{"log.file.path": n.app0.LogPath + ".20260101-120000.gz"}},
		rec{rec: map[string]any{"log.file.path": n.app0.LogPath + ".1"}},
		rec{rec: map[string]any{"log.file.path": link}},
		rec{rec: map[string]any{"log.file.path": strings.Replace(n.dbc.LogPath, "/pods/", "//pods/", 1)}},
	))
	wantPlaced(t, out["record 0"], n.web, n.app1)
	wantPlaced(t, out["record 1"], n.web, n.app1)
	wantPlaced(t, out["record 2"], n.web, n.app0)
	wantPlaced(t, out["record 3"], n.web, n.app0)
	wantPlaced(t, out["record 4"], n.web, n.side)
	wantPlaced(t, out["record 5"], n.db, n.dbc)
	if got := n.f.rpcs.Load() - before; got != 0 {
		t.Errorf("%d GetContainer calls for files of containers in the copy", got)
	}
	// A link whose names do not match the container its id names is left to plegd
	// (the fake knows no such path: not found).
	bad := fmt.Sprintf("/var/log/containers/web_shop_app-%s.log", n.side.Id)
	if got := h.consume(makeLogs(rec{rec: map[string]any{"log.file.path": bad}}))["record 0"]; len(got) != 0 {
		t.Errorf("a link naming another container was placed: %v", got)
	}
}

func TestLogFilePathsAreReadAsPlegdReadsThem(t *testing.T) {
	id := strings.Repeat("ab", 32)
	for path, want := range map[string]logFile{
		"/var/log/pods/ns_pod_uid-1/c/0.log":                     {key: "/var/log/pods/ns_pod_uid-1/c/0.log", uid: "uid-1"},
		"/var/log/pods/ns_pod_uid-1/c/12.log.20260101-120000.gz": {key: "/var/log/pods/ns_pod_uid-1/c/12.log", uid: "uid-1"},
		"/var/log/pods/ns_pod_uid-1/c/3.log.1":                   {key: "/var/log/pods/ns_pod_uid-1/c/3.log", uid: "uid-1"},
		"//var/log//pods/ns_pod_uid-1/c/0.log":                   {key: "/var/log/pods/ns_pod_uid-1/c/0.log", uid: "uid-1"},
		"/var/log/containers/pod_ns_c-" + id + ".log":            {linkID: id, linkPod: "pod", linkNamespace: "ns", linkContainer: "c"},
	} {
		got, ok := parseLogFile(path)
		if !ok || got != want {
			t.Errorf("parseLogFile(%q) = %+v, %v; want %+v", path, got, ok, want)
		}
	}
	for _, path := range []string{
		"", "var/log/pods/ns_pod_uid/c/0.log", "/var/log/pods/ns_pod_uid/c/x.log", "/var/log/pods/ns_pod/c/0.log",
		"/var/log/pods/ns_pod_uid/c/0.txt", "/var/log/pods/ns_pod_uid/../c/0.log", "/0.log",
		"/var/log/containers/pod_ns_c-abc.log",
	} {
		if got, ok := parseLogFile(path); ok {
			t.Errorf("parseLogFile(%q) = %+v, want refused", path, got)
		}
	}
}

// process.pid is a host PID to plegd. An OpenTelemetry SDK's resource (telemetry.sdk.*)
// carries the PID the process sees in its container's PID namespace — 1, or a host PID
// of some other process — so it is not used as a key; the hostmetrics process
// scraper's resources (host PIDs) are.
func TestAnSDKResourcesProcessPIDIsNotTakenForAHostPID(t *testing.T) {
	n := newNode(t)
	h := newHarness(t, n.f.endpoint(), nil)
	sdk := map[string]any{"process.pid": int64(n.dbc.Pid), "telemetry.sdk.name": "opentelemetry", "telemetry.sdk.language": "go", "service.name": "x"}
	out := h.consume(makeLogs(
		rec{res: sdk},
		rec{res: map[string]any{"process.pid": int64(n.dbc.Pid), "process.executable.name": "postgres"}},
		rec{res: map[string]any{"process.pid": int64(1), "telemetry.sdk.language": "java", "container.id": n.side.Id}},
	))
	if _, ok := out["record 0"]["k8s.pod.name"]; ok {
		t.Errorf("an SDK's process.pid was taken for a host PID: %v", out["record 0"])
	}
	wantPlaced(t, out["record 1"], n.db, n.dbc)
	wantPlaced(t, out["record 2"], n.web, n.side)
	if got := h.counter("otelcol_processor_plegd_records_unplaced", map[string]string{"reason": "no_key"}); got != 1 {
		t.Errorf("unplaced no_key = %d, want 1 (the SDK's record has no key plegd can use)", got)
	}
	if got := h.counter("otelcol_processor_plegd_records_unplaced", map[string]string{"reason": "not_found"}); got != 0 {
		t.Errorf("unplaced not_found = %d, want 0", got)
	}
}

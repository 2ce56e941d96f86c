package plegdprocessor

import (
	"context"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/collector/client"
	"go.opentelemetry.io/collector/component"
	"go.opentelemetry.io/collector/component/componenttest"
	"go.opentelemetry.io/collector/confmap"
	"go.opentelemetry.io/collector/consumer/consumertest"
	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/plog"
	"go.opentelemetry.io/collector/pdata/pmetric"
	"go.opentelemetry.io/collector/pdata/pprofile"
	"go.opentelemetry.io/collector/pdata/ptrace"
	"go.opentelemetry.io/collector/processor"
	"go.opentelemetry.io/collector/processor/processortest"
	"go.opentelemetry.io/collector/processor/xprocessor"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/plegd/plegd/clients/go/plegdv1"
)

// --- pods -------------------------------------------------------------------------

func testPod(ns, name, uid string, containers ...*plegdv1.ContainerInfo) *plegdv1.PodStatus {
	return &plegdv1.PodStatus{
		Uid: uid, Name: name, Namespace: ns,
		Labels: map[string]string{
			"app": name, "tier": "backend",
			"io.kubernetes.pod.uid": uid, "io.kubernetes.pod.name": name, "io.kubernetes.pod.namespace": ns,
		},
		Annotations: map[string]string{"team": "core", "kubernetes.io/config.source": "api"},
		Containers:  containers,
	}
}

func testContainer(ns, pod, uid, name string, attempt uint32, id string, pid uint32) *plegdv1.ContainerInfo {
	return &plegdv1.ContainerInfo{
		Id: id, Name: name, Attempt: attempt, Pid: pid,
		Image:    "docker.io/library/busybox:latest",
		ImageRef: "docker.io/library/busybox@sha256:" + strings.Repeat("ab", 32),
		LogPath:  fmt.Sprintf("/var/log/pods/%s_%s_%s/%s/%d.log", ns, pod, uid, name, attempt),
	}
}

func cid(n int) string { return fmt.Sprintf("%064x", n) }

// --- the processor under test ----------------------------------------------------

type harness struct {
	t    *testing.T
	tel  *componenttest.Telemetry
	logs *consumertest.LogsSink
	lp   processor.Logs
	tr   *consumertest.TracesSink
	tp   processor.Traces
	ms   *consumertest.MetricsSink
	mp   processor.Metrics
	cfg  *Config
}

func newHarness(t *testing.T, endpoint string, mod func(*Config)) *harness {
	t.Helper()
	cfg := createDefaultConfig()
	cfg.Endpoint = endpoint
	cfg.WaitForSync = 5 * time.Second
	cfg.NodeName = "node-1"
	cfg.Labels = []string{"app"}
	if mod != nil {
		mod(cfg)
	}
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	h := &harness{t: t, tel: componenttest.NewTelemetry(), logs: new(consumertest.LogsSink),
		tr: new(consumertest.TracesSink), ms: new(consumertest.MetricsSink), cfg: cfg}
	set := processortest.NewNopSettings(componentType)
	set.TelemetrySettings = h.tel.NewTelemetrySettings()
	f := NewFactory()
	var err error
	if h.lp, err = f.CreateLogs(context.Background(), set, cfg, h.logs); err != nil {
		t.Fatal(err)
	}
	if h.tp, err = f.CreateTraces(context.Background(), set, cfg, h.tr); err != nil {
		t.Fatal(err)
	}
	if h.mp, err = f.CreateMetrics(context.Background(), set, cfg, h.ms); err != nil {
		t.Fatal(err)
	}
	for _, c := range []component.Component{h.lp, h.tp, h.mp} {
		if err := c.Start(context.Background(), componenttest.NewNopHost()); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() {
		for _, c := range []component.Component{h.lp, h.tp, h.mp} {
			_ = c.Shutdown(context.Background())
		}
		_ = h.tel.Shutdown(context.Background())
	})
	return h
}

func (h *harness) resolver() *resolver {
	sharedMu.Lock()
	defer sharedMu.Unlock()
	return shared[h.cfg].r
}

// rec is one log record: its resource's attributes and its own.
type rec struct {
	res map[string]any
	rec map[string]any
	at  time.Time // the record's timestamp; zero: none
}

func makeLogs(recs ...rec) plog.Logs {
	ld := plog.NewLogs()
	for i, r := range recs {
		rl := ld.ResourceLogs().AppendEmpty()
		_ = rl.Resource().Attributes().FromRaw(r.res)
		lr := rl.ScopeLogs().AppendEmpty().LogRecords().AppendEmpty()
		_ = lr.Attributes().FromRaw(r.rec)
		if !r.at.IsZero() {
			lr.SetTimestamp(pcommon.NewTimestampFromTime(r.at))
		}
		lr.Body().SetStr(fmt.Sprint("record ", i))
	}
	return ld
}

// consume sends ld and returns the resource attributes of each record, by body.
func (h *harness) consume(ld plog.Logs) map[string]map[string]any {
	h.t.Helper()
	return h.consumeFrom(context.Background(), ld)
}

// consumeFrom is consume with the receiver's context (its client's address).
func (h *harness) consumeFrom(ctx context.Context, ld plog.Logs) map[string]map[string]any {
	h.t.Helper()
	h.logs.Reset()
	if err := h.lp.ConsumeLogs(ctx, ld); err != nil {
		h.t.Fatal(err)
	}
	out := map[string]map[string]any{}
	for _, l := range h.logs.AllLogs() {
		for i := 0; i < l.ResourceLogs().Len(); i++ {
			rl := l.ResourceLogs().At(i)
			for j := 0; j < rl.ScopeLogs().Len(); j++ {
				lrs := rl.ScopeLogs().At(j).LogRecords()
				for k := 0; k < lrs.Len(); k++ {
					out[lrs.At(k).Body().Str()] = rl.Resource().Attributes().AsRaw()
				}
			}
		}
	}
	return out
}

func (h *harness) counter(name string, attrs map[string]string) int64 {
	h.t.Helper()
	m, err := h.tel.GetMetric(name)
	if err != nil {
		return 0
	}
	var n int64
	for _, dp := range m.Data.(metricdata.Sum[int64]).DataPoints {
		match := true
		for k, v := range attrs {
			got, ok := dp.Attributes.Value(attribute.Key(k))
			match = match && ok && got.AsString() == v
		}
		if match {
			n += dp.Value
		}
	}
	return n
}

func eventually(t *testing.T, what string, d time.Duration, f func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !f() {
		if time.Now().After(deadline) {
			t.Fatalf("not within %s: %s", d, what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func wantPlaced(t *testing.T, got map[string]any, pod *plegdv1.PodStatus, c *plegdv1.ContainerInfo) {
	t.Helper()
	want := map[string]any{
		"k8s.pod.uid": pod.Uid, "k8s.pod.name": pod.Name, "k8s.namespace.name": pod.Namespace,
		"k8s.node.name": "node-1", "k8s.pod.label.app": pod.Labels["app"],
	}
	if c != nil {
		want["k8s.container.name"] = c.Name
		want["k8s.container.restart_count"] = int64(c.Attempt)
		want["container.id"] = c.Id
		want["container.image.name"] = "docker.io/library/busybox"
		want["container.image.repo_digests"] = []any{c.ImageRef}
	}
	for k, v := range want {
		if fmt.Sprint(got[k]) != fmt.Sprint(v) {
			t.Errorf("%s = %v, want %v (all: %v)", k, got[k], v, got)
		}
	}
	if _, ok := got["k8s.pod.label.tier"]; ok {
		t.Errorf("a label that was not chosen was copied: %v", got)
	}
}

// --- tests ------------------------------------------------------------------------

// A node: pod web (containers app attempt 0 and 1 — a restart — and sidecar), pod db.
type node struct {
	f                *fakePlegd
	web, db          *plegdv1.PodStatus
	app0, app1, side *plegdv1.ContainerInfo
	dbc              *plegdv1.ContainerInfo
}

func newNode(t *testing.T) *node {
	n := &node{f: newFakePlegd(t)}
	n.app1 = testContainer("shop", "web", "uid-web", "app", 1, cid(1), 1001)
	n.app0 = testContainer("shop", "web", "uid-web", "app", 0, cid(2), 0)
	n.side = testContainer("shop", "web", "uid-web", "sidecar", 0, cid(3), 1003)
	n.web = testPod("shop", "web", "uid-web", n.app1, n.app0, n.side)
	n.dbc = testContainer("data", "db", "uid-db", "pg", 0, cid(4), 1004)
	n.db = testPod("data", "db", "uid-db", n.dbc)
	n.f.addPod(n.web)
	n.f.addPod(n.db)
	n.f.serve(t)
	return n
}

func TestEachAssociationKey(t *testing.T) {
	n := newNode(t)
	h := newHarness(t, n.f.endpoint(), nil)
	out := h.consume(makeLogs(
		rec{res: map[string]any{"container.id": n.side.Id}},                                                               // record 0
		rec{res: map[string]any{"k8s.pod.uid": "uid-db"}},                                                                 // record 1: the pod only
		rec{res: map[string]any{"k8s.pod.uid": "uid-web", "k8s.container.name": "app"}},                                   // record 2: newest attempt
		rec{res: map[string]any{"k8s.pod.uid": "uid-web", "k8s.container.name": "app", "k8s.container.restart_count": 0}}, // record 3
		rec{rec: map[string]any{"log.file.path": n.app0.LogPath}},                                                         // record 4: on the record
		rec{rec: map[string]any{"log.file.path": n.app1.LogPath + ".20260101-120000.gz"}},                                 // record 5: rotated
		rec{res: map[string]any{"process.pid": int64(1004)}},                                                              // record 6
		rec{res: map[string]any{"service.name": "x"}},                                                                     // record 7: no key
		rec{rec: map[string]any{"log.file.path": "/var/log/pods/shop_web_uid-web/app/7.log"}},                             // record 8: no such attempt
	))
	wantPlaced(t, out["record 0"], n.web, n.side)
	wantPlaced(t, out["record 1"], n.db, nil)
	if _, ok := out["record 1"]["k8s.container.name"]; ok {
		t.Errorf("k8s.pod.uid alone named a container: %v", out["record 1"])
	}
	wantPlaced(t, out["record 2"], n.web, n.app1)
	wantPlaced(t, out["record 3"], n.web, n.app0)
	wantPlaced(t, out["record 4"], n.web, n.app0)
	wantPlaced(t, out["record 5"], n.web, n.app1)
	if _, ok := out["record 8"]["k8s.pod.uid"]; ok {
		t.Errorf("an unknown path was placed: %v", out["record 8"])
	}
	wantPlaced(t, out["record 6"], n.db, n.dbc)
	if len(out["record 7"]) != 1 {
		t.Errorf("a record without a key changed: %v", out["record 7"])
	}
	if got := h.counter("otelcol_processor_plegd_records_placed", map[string]string{"otel.signal": "logs"}); got != 7 {
		t.Errorf("placed = %d, want 7", got)
	}
	if got := h.counter("otelcol_processor_plegd_records_unplaced", map[string]string{"reason": "no_key"}); got != 1 {
		t.Errorf("unplaced no_key = %d, want 1", got)
	}
	if got := h.counter("otelcol_processor_plegd_records_unplaced", map[string]string{"reason": "not_found"}); got != 1 {
		t.Errorf("unplaced not_found = %d, want 1", got)
	}
}

func TestTheWorkloadAndTheAddressComeFromThePodsIdentity(t *testing.T) {
	n := newNode(t)
	n.web.Ips = []string{"10.244.0.7"}
	n.web.Identity = &plegdv1.PodIdentity{
		NodeName:   "node-of-the-pod",
		Controller: &plegdv1.WorkloadRef{Kind: "ReplicaSet", Name: "web-5f7b9c6d48"},
		Workload:   &plegdv1.WorkloadRef{Kind: "Deployment", Name: "web"},
		Source:     plegdv1.IdentitySource_INFERRED,
	}
	n.db.Identity = &plegdv1.PodIdentity{
		Controller: &plegdv1.WorkloadRef{Kind: "StatefulSet", Name: "db"},
		Workload:   &plegdv1.WorkloadRef{Kind: "StatefulSet", Name: "db"},
	}
	n.f.addPod(n.web)
	n.f.addPod(n.db)
	h := newHarness(t, n.f.endpoint(), nil)
	out := h.consume(makeLogs(
		rec{res: map[string]any{"container.id": n.app1.Id}},
		rec{res: map[string]any{"container.id": n.dbc.Id}},
	))
	web, db := out["record 0"], out["record 1"]
	for k, v := range map[string]any{"k8s.replicaset.name": "web-5f7b9c6d48", "k8s.deployment.name": "web", "k8s.pod.ip": "10.244.0.7"} {
		if web[k] != v {
			t.Errorf("%s = %v, want %v (all: %v)", k, web[k], v, web)
		}
	}
	if web["k8s.node.name"] != "node-1" {
		t.Errorf("the node the collector was given wins over the pod's: %v", web["k8s.node.name"])
	}
	if db["k8s.statefulset.name"] != "db" {
		t.Errorf("k8s.statefulset.name = %v (all: %v)", db["k8s.statefulset.name"], db)
	}
	for _, k := range []string{"k8s.deployment.name", "k8s.replicaset.name", "k8s.pod.ip"} {
		if _, ok := db[k]; ok {
			t.Errorf("%s set for a pod without one: %v", k, db)
		}
	}
}

func TestAPodAddressIsPlacedAtTheRecordsOwnTimeAcrossItsReuse(t *testing.T) {
	n := newNode(t)
	reused := time.Now().Add(-time.Minute).Truncate(time.Second)
	n.f.hold("10.244.0.9", n.web, reused.Add(-time.Hour), reused)
	n.f.hold("10.244.0.9", n.db, reused, time.Time{})
	h := newHarness(t, n.f.endpoint(), func(c *Config) { c.PodAssociation = []string{KeyPodIP, KeyConnection} })
	before, after := reused.Add(-10*time.Second), reused.Add(10*time.Second)
	out := h.consume(makeLogs(
		rec{res: map[string]any{"k8s.pod.ip": "10.244.0.9"}, at: before},                               // record 0: the earlier holder
		rec{res: map[string]any{"k8s.pod.ip": "10.244.0.9"}, at: after},                                // record 1: the later one
		rec{rec: map[string]any{"k8s.pod.ip": "10.244.0.9"}},                                           // record 2: no time: now
		rec{res: map[string]any{"k8s.pod.ip": "10.244.0.77"}, at: after},                               // record 3: nobody's
		rec{res: map[string]any{"k8s.pod.ip": "not-an-address"}, at: after},                            // record 4
		rec{res: map[string]any{"k8s.pod.ip": "10.244.0.9"}, at: reused.Add(-time.Hour - time.Second)}, // record 5: before anyone
	))
	wantPlaced(t, out["record 0"], n.web, nil)
	wantPlaced(t, out["record 1"], n.db, nil)
	wantPlaced(t, out["record 2"], n.db, nil)
	for _, r := range []string{"record 0", "record 1"} {
		if _, ok := out[r]["container.id"]; ok {
			t.Errorf("%s: an address named a container: %v", r, out[r])
		}
	}
	for _, r := range []string{"record 3", "record 4", "record 5"} {
		if _, ok := out[r]["k8s.pod.uid"]; ok {
			t.Errorf("%s was placed: %v", r, out[r])
		}
	}
	// The connection: the records' sender, at each record's time.
	ctx := client.NewContext(context.Background(), client.Info{Addr: &net.TCPAddr{IP: net.ParseIP("10.244.0.9"), Port: 43122}})
	out = h.consumeFrom(ctx, makeLogs(rec{res: map[string]any{"service.name": "a"}, at: before}, rec{res: map[string]any{"service.name": "b"}, at: after}))
	wantPlaced(t, out["record 0"], n.web, nil)
	wantPlaced(t, out["record 1"], n.db, nil)
}

func TestAssociationOrder(t *testing.T) {
	n := newNode(t)
	both := rec{res: map[string]any{"process.pid": int64(n.dbc.Pid)}, rec: map[string]any{"log.file.path": n.side.LogPath}}
	h := newHarness(t, n.f.endpoint(), func(c *Config) { c.PodAssociation = []string{KeyLogFilePath, KeyProcessPID} })
	wantPlaced(t, h.consume(makeLogs(both))["record 0"], n.web, n.side)

	h2 := newHarness(t, n.f.endpoint(), func(c *Config) { c.PodAssociation = []string{KeyProcessPID, KeyLogFilePath} })
	wantPlaced(t, h2.consume(makeLogs(both))["record 0"], n.db, n.dbc)

	// A key that finds nothing gives way to the next.
	h3 := newHarness(t, n.f.endpoint(), func(c *Config) { c.PodAssociation = []string{KeyContainerID, KeyLogFilePath} })
	miss := rec{rec: map[string]any{"container.id": cid(99), "log.file.path": n.side.LogPath}}
	wantPlaced(t, h3.consume(makeLogs(miss))["record 0"], n.web, n.side)

	// k8s.pod.uid (the pod only) first: a later key names the container in that pod.
	h4 := newHarness(t, n.f.endpoint(), func(c *Config) { c.PodAssociation = []string{KeyPodUID, KeyLogFilePath} })
	pod := rec{res: map[string]any{"k8s.pod.uid": "uid-web"}, rec: map[string]any{"log.file.path": n.side.LogPath}}
	wantPlaced(t, h4.consume(makeLogs(pod))["record 0"], n.web, n.side)
	// ... but not a container of another pod.
	other := rec{res: map[string]any{"k8s.pod.uid": "uid-db"}, rec: map[string]any{"log.file.path": n.side.LogPath}}
	got := h4.consume(makeLogs(other))["record 0"]
	wantPlaced(t, got, n.db, nil)
	if _, ok := got["container.id"]; ok {
		t.Errorf("placed in another pod's container: %v", got)
	}
}

func TestRecordsOfSeveralContainersInOneResourceAreSplit(t *testing.T) {
	n := newNode(t)
	h := newHarness(t, n.f.endpoint(), nil)
	ld := plog.NewLogs()
	rl := ld.ResourceLogs().AppendEmpty()
	rl.Resource().Attributes().PutStr("host.name", "n1")
	sl := rl.ScopeLogs().AppendEmpty()
	sl.Scope().SetName("filelog")
	for i, path := range []string{n.app0.LogPath, n.side.LogPath, "/var/log/pods/x_y_z/c/0.log", n.app0.LogPath, n.dbc.LogPath} {
		lr := sl.LogRecords().AppendEmpty()
		lr.Body().SetStr(fmt.Sprint("record ", i))
		lr.Attributes().PutStr("log.file.path", path)
	}
	out := h.consume(ld)
	if len(out) != 5 {
		t.Fatalf("records lost or duplicated: %v", out)
	}
	wantPlaced(t, out["record 0"], n.web, n.app0)
	wantPlaced(t, out["record 3"], n.web, n.app0)
	wantPlaced(t, out["record 1"], n.web, n.side)
	wantPlaced(t, out["record 4"], n.db, n.dbc)
	if len(out["record 2"]) != 1 || out["record 2"]["host.name"] != "n1" {
		t.Errorf("the unknown file's record changed: %v", out["record 2"])
	}
	for k, v := range out {
		if v["host.name"] != "n1" {
			t.Errorf("%s lost its resource attributes: %v", k, v)
		}
	}
	got := h.logs.AllLogs()[0]
	if got.ResourceLogs().Len() != 4 {
		t.Errorf("want 4 resources (3 containers, 1 unplaced), got %d", got.ResourceLogs().Len())
	}
	for i := 0; i < got.ResourceLogs().Len(); i++ {
		s := got.ResourceLogs().At(i).ScopeLogs()
		if s.Len() != 1 || s.At(0).Scope().Name() != "filelog" {
			t.Errorf("resource %d: scopes not kept: %d", i, s.Len())
		}
	}
}

func TestRemovedContainerIsStillPlaced(t *testing.T) {
	n := newNode(t)
	h := newHarness(t, n.f.endpoint(), nil)
	// A pod deleted after the processor saw it: its records arrive afterwards.
	n.f.removePod("uid-db")
	eventually(t, "the informer sees the pod go", 5*time.Second, func() bool {
		_, ok := h.resolver().inf.Get("uid-db")
		return !ok
	})
	out := h.consume(makeLogs(
		rec{res: map[string]any{"container.id": n.dbc.Id}},
		rec{rec: map[string]any{"log.file.path": n.dbc.LogPath}},
	))
	wantPlaced(t, out["record 0"], n.db, n.dbc)
	wantPlaced(t, out["record 1"], n.db, n.dbc)

	// A container that came and went before the processor ever saw it.
	ghost := testContainer("batch", "job", "uid-job", "run", 0, cid(5), 0)
	job := testPod("batch", "job", "uid-job", ghost)
	n.f.tombstone(job, ghost)
	out = h.consume(makeLogs(rec{rec: map[string]any{"log.file.path": ghost.LogPath}}, rec{res: map[string]any{"container.id": ghost.Id}}))
	wantPlaced(t, out["record 0"], job, ghost)
	wantPlaced(t, out["record 1"], job, ghost)
}

func TestPlegdAwayRecordsPassAndAreCounted(t *testing.T) {
	f := newFakePlegd(t) // never served: no socket
	start := time.Now()
	h := newHarness(t, f.endpoint(), func(c *Config) {
		c.WaitForSync = 300 * time.Millisecond
		c.LookupTimeout = 50 * time.Millisecond
	})
	if d := time.Since(start); d > 2*time.Second {
		t.Errorf("start waited %s with wait_for_sync 300ms (3 pipelines)", d)
	}
	for i := 0; i < 3; i++ {
		start = time.Now()
		out := h.consume(makeLogs(
			rec{res: map[string]any{"container.id": cid(1)}},
			rec{rec: map[string]any{"log.file.path": "/var/log/pods/a_b_c/d/0.log"}},
			rec{res: map[string]any{"process.pid": 42}},
			rec{res: map[string]any{"k8s.pod.uid": "uid-web"}},
		))
		if d := time.Since(start); d > 500*time.Millisecond {
			t.Errorf("a batch was held %s with plegd away (lookup_timeout 50ms)", d)
		}
		if len(out) != 4 {
			t.Fatalf("records lost: %v", out)
		}
		for k, v := range out {
			if _, ok := v["k8s.pod.name"]; ok || len(v) > 1 {
				t.Errorf("%s changed with plegd away: %v", k, v)
			}
		}
	}
	if got := h.counter("otelcol_processor_plegd_records_unplaced", map[string]string{"reason": "unavailable"}); got != 12 {
		t.Errorf("unplaced unavailable = %d, want 12", got)
	}
}

func TestSlowPlegdNeverHoldsABatchPastTheLookupTimeout(t *testing.T) {
	n := newNode(t)
	h := newHarness(t, n.f.endpoint(), func(c *Config) { c.LookupTimeout = 100 * time.Millisecond })
	n.f.mu.Lock()
	n.f.delay = 3 * time.Second
	n.f.mu.Unlock()
	var recs []rec
	for i := 0; i < 20; i++ { // 20 distinct keys, each an RPC
		recs = append(recs, rec{rec: map[string]any{"log.file.path": fmt.Sprintf("/var/log/pods/a_b_c/d/%d.log", i)}})
	}
	start := time.Now()
	out := h.consume(makeLogs(recs...))
	if d := time.Since(start); d > 600*time.Millisecond {
		t.Errorf("a batch was held %s (lookup_timeout 100ms)", d)
	}
	if len(out) != 20 {
		t.Fatalf("records lost")
	}
	// The informer's copy still answers at once.
	start = time.Now()
	wantPlaced(t, h.consume(makeLogs(rec{res: map[string]any{"container.id": n.side.Id}}))["record 0"], n.web, n.side)
	if d := time.Since(start); d > 50*time.Millisecond {
		t.Errorf("an informer answer took %s", d)
	}
}

func TestReconnectsWhenPlegdComesBack(t *testing.T) {
	f := newFakePlegd(t)
	c := testContainer("shop", "web", "uid-web", "app", 0, cid(1), 0)
	web := testPod("shop", "web", "uid-web", c)
	f.addPod(web)
	h := newHarness(t, f.endpoint(), func(cfg *Config) { cfg.WaitForSync = 100 * time.Millisecond })
	r := rec{res: map[string]any{"container.id": c.Id}}
	if got := h.consume(makeLogs(r))["record 0"]; len(got) != 1 {
		t.Fatalf("placed before plegd was there: %v", got)
	}
	f.serve(t)
	eventually(t, "placed once plegd is up", 15*time.Second, func() bool {
		return h.consume(makeLogs(r))["record 0"]["k8s.pod.name"] == "web"
	})
	// plegd restarts (a new journal) with a new pod while away.
	f.down()
	c2 := testContainer("shop", "api", "uid-api", "srv", 0, cid(9), 0)
	f.mu.Lock()
	f.epoch++
	f.mu.Unlock()
	f.addPod(testPod("shop", "api", "uid-api", c2))
	f.serve(t)
	eventually(t, "a pod plegd learned while the processor was cut off", 15*time.Second, func() bool {
		return h.consume(makeLogs(rec{res: map[string]any{"container.id": c2.Id}}))["record 0"]["k8s.pod.name"] == "api"
	})
}

func TestLabelsAndAnnotations(t *testing.T) {
	n := newNode(t)
	h := newHarness(t, n.f.endpoint(), func(c *Config) { c.Labels = []string{"*"}; c.Annotations = []string{"team", "absent"} })
	got := h.consume(makeLogs(rec{res: map[string]any{"container.id": n.dbc.Id}}))["record 0"]
	for k, v := range map[string]any{"k8s.pod.label.app": "db", "k8s.pod.label.tier": "backend", "k8s.pod.annotation.team": "core"} {
		if got[k] != v {
			t.Errorf("%s = %v, want %v", k, got[k], v)
		}
	}
	for k := range got {
		if strings.HasPrefix(k, "k8s.pod.label.io.kubernetes.") || k == "k8s.pod.annotation.kubernetes.io/config.source" || k == "k8s.pod.annotation.absent" {
			t.Errorf("%s copied", k)
		}
	}
	h2 := newHarness(t, n.f.endpoint(), func(c *Config) { c.Labels = nil; c.Annotations = []string{"*"} })
	got = h2.consume(makeLogs(rec{res: map[string]any{"container.id": n.dbc.Id}}))["record 0"]
	if _, ok := got["k8s.pod.label.app"]; ok {
		t.Errorf("labels: [] copied a label: %v", got)
	}
	if got["k8s.pod.annotation.kubernetes.io/config.source"] != "api" {
		t.Errorf("annotations * did not copy all: %v", got)
	}
}

func TestExistingAttributesWin(t *testing.T) {
	n := newNode(t)
	h := newHarness(t, n.f.endpoint(), nil)
	got := h.consume(makeLogs(rec{res: map[string]any{"container.id": n.dbc.Id, "k8s.namespace.name": "set-by-user"}}))["record 0"]
	if got["k8s.namespace.name"] != "set-by-user" || got["k8s.pod.name"] != "db" {
		t.Errorf("got %v", got)
	}
}

func TestLookupsAreCached(t *testing.T) {
	n := newNode(t)
	h := newHarness(t, n.f.endpoint(), nil)
	// A file of a container in the informer's copy: no call at all.
	before := n.f.rpcs.Load()
	for b := 0; b < 10; b++ {
		var recs []rec
		for i := 0; i < 1000; i++ {
			recs = append(recs, rec{rec: map[string]any{"log.file.path": n.side.LogPath}})
		}
		h.consume(makeLogs(recs...))
	}
	if got := n.f.rpcs.Load() - before; got != 0 {
		t.Errorf("10,000 records of a file the informer's copy knows made %d GetContainer calls, want 0", got)
	}
	// A file only plegd knows (a container the copy never held): one call.
	ghost := testContainer("batch", "job", "uid-job", "run", 0, cid(5), 0)
	n.f.tombstone(testPod("batch", "job", "uid-job", ghost), ghost)
	before = n.f.rpcs.Load()
	for b := 0; b < 10; b++ {
		var recs []rec
		for i := 0; i < 1000; i++ {
			recs = append(recs, rec{rec: map[string]any{"log.file.path": ghost.LogPath}})
		}
		h.consume(makeLogs(recs...))
	}
	if got := n.f.rpcs.Load() - before; got != 1 {
		t.Errorf("10,000 records of one file made %d GetContainer calls, want 1", got)
	}
	// Not found is cached too, briefly, and dropped when the node changes.
	path := "/var/log/pods/shop_new_uid-new/c/0.log"
	before = n.f.rpcs.Load()
	for i := 0; i < 5; i++ {
		h.consume(makeLogs(rec{rec: map[string]any{"log.file.path": path}}))
	}
	if got := n.f.rpcs.Load() - before; got != 1 {
		t.Errorf("5 batches of an unknown file made %d calls, want 1", got)
	}
	c := testContainer("shop", "new", "uid-new", "c", 0, cid(77), 0)
	n.f.addPod(testPod("shop", "new", "uid-new", c))
	eventually(t, "the new container's file is placed (the negative answer dropped)", 5*time.Second, func() bool {
		return h.consume(makeLogs(rec{rec: map[string]any{"log.file.path": path}}))["record 0"]["k8s.pod.name"] == "new"
	})
}

func TestCacheIsBounded(t *testing.T) {
	n := newNode(t)
	h := newHarness(t, n.f.endpoint(), func(c *Config) { c.CacheSize = 16 })
	for i := 0; i < 200; i++ {
		h.consume(makeLogs(rec{rec: map[string]any{"log.file.path": fmt.Sprintf("/var/log/pods/a_b_c/d/%d.log", i)}}))
	}
	r := h.resolver()
	if l := r.cache.len(); l > 16 {
		t.Errorf("cache holds %d entries, bound 16", l)
	}
	if l := r.memo.len(); l > 16 {
		t.Errorf("memo holds %d entries, bound 16", l)
	}
}

func TestLRU(t *testing.T) {
	now := time.Unix(0, 0)
	c := newLRU[int](2, func() time.Time { return now })
	c.put("a", 1, time.Minute)
	c.put("b", 2, time.Minute)
	c.get("a")
	c.put("c", 3, time.Minute) // evicts b, the least recently used
	if _, ok := c.get("b"); ok {
		t.Error("b not evicted")
	}
	if v, ok := c.get("a"); !ok || v != 1 {
		t.Error("a lost")
	}
	now = now.Add(2 * time.Minute)
	if _, ok := c.get("a"); ok {
		t.Error("a did not expire")
	}
	if c.len() != 1 {
		t.Errorf("len %d", c.len())
	}
}

func TestTracesAndMetrics(t *testing.T) {
	n := newNode(t)
	h := newHarness(t, n.f.endpoint(), nil)
	td := ptrace.NewTraces()
	rs := td.ResourceSpans().AppendEmpty()
	rs.Resource().Attributes().PutInt("process.pid", 1003)
	rs.ScopeSpans().AppendEmpty().Spans().AppendEmpty().SetName("s")
	ss := td.ResourceSpans().AppendEmpty().ScopeSpans().AppendEmpty().Spans()
	for i, id := range []string{n.dbc.Id, n.side.Id} {
		sp := ss.AppendEmpty()
		sp.SetName(fmt.Sprint("span ", i))
		sp.Attributes().PutStr("container.id", id)
	}
	if err := h.tp.ConsumeTraces(context.Background(), td); err != nil {
		t.Fatal(err)
	}
	got := h.tr.AllTraces()[0]
	names := map[string]map[string]any{}
	for i := 0; i < got.ResourceSpans().Len(); i++ {
		r := got.ResourceSpans().At(i)
		sps := r.ScopeSpans().At(0).Spans()
		for k := 0; k < sps.Len(); k++ {
			names[sps.At(k).Name()] = r.Resource().Attributes().AsRaw()
		}
	}
	wantPlaced(t, names["s"], n.web, n.side)
	wantPlaced(t, names["span 0"], n.db, n.dbc)
	wantPlaced(t, names["span 1"], n.web, n.side)

	md := pmetric.NewMetrics()
	rm := md.ResourceMetrics().AppendEmpty()
	rm.Resource().Attributes().PutStr("container.id", n.app1.Id)
	g := rm.ScopeMetrics().AppendEmpty().Metrics().AppendEmpty().SetEmptyGauge()
	g.DataPoints().AppendEmpty().SetIntValue(1)
	g.DataPoints().AppendEmpty().SetIntValue(2)
	if err := h.mp.ConsumeMetrics(context.Background(), md); err != nil {
		t.Fatal(err)
	}
	wantPlaced(t, h.ms.AllMetrics()[0].ResourceMetrics().At(0).Resource().Attributes().AsRaw(), n.web, n.app1)
	if got := h.counter("otelcol_processor_plegd_records_placed", map[string]string{"otel.signal": "metrics"}); got != 2 {
		t.Errorf("metrics placed = %d, want 2 data points", got)
	}
	if got := h.counter("otelcol_processor_plegd_records_placed", map[string]string{"otel.signal": "traces"}); got != 3 {
		t.Errorf("traces placed = %d, want 3", got)
	}
}

func TestSplitImage(t *testing.T) {
	for in, want := range map[string][2]string{
		"docker.io/library/busybox:latest": {"docker.io/library/busybox", "latest"},
		"localhost:5000/app":               {"localhost:5000/app", ""},
		"localhost:5000/app:v1":            {"localhost:5000/app", "v1"},
		"repo/app@sha256:abcd":             {"repo/app", ""},
		"repo/app:v2@sha256:abcd":          {"repo/app", ""},
		"sha256:0123":                      {"", ""},
	} {
		n, tag := splitImage(in)
		if n != want[0] || tag != want[1] {
			t.Errorf("splitImage(%q) = %q, %q; want %q", in, n, tag, want)
		}
	}
}

// --- configuration ------------------------------------------------------------------

func TestConfigValidation(t *testing.T) {
	for _, tc := range []struct {
		name string
		mod  func(*Config)
		want string // "" valid
	}{
		{"defaults", func(*Config) {}, ""},
		{"path endpoint", func(c *Config) { c.Endpoint = "/run/plegd/plegd.sock" }, ""},
		{"tcp endpoint", func(c *Config) { c.Endpoint = "tcp://127.0.0.1:1" }, "endpoint: \"tcp://127.0.0.1:1\" is not a unix socket"},
		{"relative unix endpoint", func(c *Config) { c.Endpoint = "unix://run/plegd.sock" }, "endpoint: \"unix://run/plegd.sock\": unix:// needs an absolute path"},
		{"empty endpoint", func(c *Config) { c.Endpoint = "" }, "endpoint: empty"},
		{"unknown key", func(c *Config) { c.PodAssociation = []string{"container.id", "k8s.pod.name"} }, "pod_association: unknown key \"k8s.pod.name\""},
		{"twice", func(c *Config) { c.PodAssociation = []string{"container.id", "container.id"} }, "pod_association: \"container.id\" is listed twice"},
		{"no keys", func(c *Config) { c.PodAssociation = nil }, "pod_association: empty"},
		{"negative wait", func(c *Config) { c.WaitForSync = -time.Second }, "wait_for_sync: must not be negative"},
		{"negative ttl", func(c *Config) { c.NegativeCacheTTL = -time.Second }, "negative_cache_ttl: must not be negative"},
		{"zero lookup timeout", func(c *Config) { c.LookupTimeout = 0 }, "lookup_timeout: must be above 0"},
		{"cache size", func(c *Config) { c.CacheSize = 0 }, "cache_size: must be above 0"},
		{"star and more", func(c *Config) { c.Labels = []string{"*", "app"} }, "labels: \"*\" (all) must be the only entry"},
		{"pattern", func(c *Config) { c.Annotations = []string{"app.*"} }, "annotations: \"app.*\": only \"*\" alone"},
		{"empty label", func(c *Config) { c.Labels = []string{""} }, "labels: an empty key"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := createDefaultConfig()
			tc.mod(c)
			err := c.Validate()
			switch {
			case tc.want == "" && err != nil:
				t.Errorf("unexpected error: %v", err)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
				t.Errorf("error %v, want one containing %q", err, tc.want)
			}
		})
	}
}

func TestConfigFromYAMLMap(t *testing.T) {
	cm := confmap.NewFromStringMap(map[string]any{
		"endpoint":        "unix:///run/plegd/plegd.sock",
		"pod_association": []any{"log.file.path", "container.id"},
		"labels":          []any{"app"},
		"wait_for_sync":   "2s",
		"lookup_timeout":  "250ms",
	})
	cfg := NewFactory().CreateDefaultConfig().(*Config)
	if err := cm.Unmarshal(cfg); err != nil {
		t.Fatal(err)
	}
	if cfg.WaitForSync != 2*time.Second || cfg.LookupTimeout != 250*time.Millisecond || cfg.PodAssociation[0] != "log.file.path" || cfg.CacheSize != 10000 {
		t.Errorf("got %+v", cfg)
	}
	if err := cfg.Validate(); err != nil {
		t.Error(err)
	}
	bad := confmap.NewFromStringMap(map[string]any{"endpoint": "unix:///x", "pod_asociation": []any{"x"}})
	if err := bad.Unmarshal(NewFactory().CreateDefaultConfig()); err == nil || !strings.Contains(err.Error(), "pod_asociation") {
		t.Errorf("a misspelt field: %v", err)
	}
}

var _ = pcommon.NewMap

func TestProfilesAreEachPlacedByTheirResourcesContainer(t *testing.T) {
	n := newNode(t)
	cfg := createDefaultConfig()
	cfg.Endpoint, cfg.NodeName, cfg.Labels = n.f.endpoint(), "node-1", []string{"app"}
	set := processortest.NewNopSettings(componentType)
	tel := componenttest.NewTelemetry()
	set.TelemetrySettings = tel.NewTelemetrySettings()
	f, ok := NewFactory().(xprocessor.Factory)
	if !ok {
		t.Fatal("the factory is not an xprocessor.Factory: profiles pipelines would not find it")
	}
	sink := new(consumertest.ProfilesSink)
	pp, err := f.CreateProfiles(context.Background(), set, cfg, sink)
	if err != nil {
		t.Fatal(err)
	}
	if err := pp.Start(context.Background(), componenttest.NewNopHost()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = pp.Shutdown(context.Background()); _ = tel.Shutdown(context.Background()) })
	pd := pprofile.NewProfiles()
	for _, id := range []string{n.app1.Id, n.dbc.Id, "no-such-container"} {
		rp := pd.ResourceProfiles().AppendEmpty()
		rp.Resource().Attributes().PutStr("container.id", id)
		rp.ScopeProfiles().AppendEmpty().Profiles().AppendEmpty()
	}
	if err := pp.ConsumeProfiles(context.Background(), pd); err != nil {
		t.Fatal(err)
	}
	got := sink.AllProfiles()
	if len(got) != 1 || got[0].ResourceProfiles().Len() != 3 {
		t.Fatalf("the batch was not handed on whole: %d batches", len(got))
	}
	res := func(i int) map[string]any { return got[0].ResourceProfiles().At(i).Resource().Attributes().AsRaw() }
	wantPlaced(t, res(0), n.web, n.app1)
	wantPlaced(t, res(1), n.db, n.dbc)
	if _, ok := res(2)["k8s.pod.uid"]; ok {
		t.Errorf("an unknown container was placed: %v", res(2))
	}
}

package plegdprocessor

// plegd away, hung, slow or answering oddly: records pass, are counted for what
// happened, and nothing blocks or piles up.

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"sync"
	"testing"
	"time"

	"go.opentelemetry.io/collector/component"
	"go.opentelemetry.io/collector/component/componenttest"
	"go.opentelemetry.io/collector/consumer/consumertest"
	"go.opentelemetry.io/collector/processor"
	"go.opentelemetry.io/collector/processor/processortest"

	"github.com/plegd/plegd/clients/go/plegdv1"
)

// plegd stops after the copy was synced. Records keyed by a pod uid the (stale) copy
// does not hold are counted unavailable while plegd is away — not not_found, which
// says plegd knows no such pod. Once plegd is back, they are not_found again.
func TestRecordsOfAnUnknownPodAreCountedUnavailableWhilePlegdIsAway(t *testing.T) {
	n := newNode(t)
	h := newHarness(t, n.f.endpoint(), func(c *Config) { c.LookupTimeout = 50 * time.Millisecond })
	n.f.down()
	deadline := time.Now().Add(2 * time.Second)
	for time.Now().Before(deadline) {
		h.consume(makeLogs(rec{res: map[string]any{"k8s.pod.uid": "uid-unknown"}}))
		time.Sleep(20 * time.Millisecond)
	}
	nf := h.counter("otelcol_processor_plegd_records_unplaced", map[string]string{"reason": "not_found"})
	un := h.counter("otelcol_processor_plegd_records_unplaced", map[string]string{"reason": "unavailable"})
	t.Logf("with plegd down for 2s: not_found %d, unavailable %d", nf, un)
	if nf > 0 {
		t.Errorf("%d records counted not_found while plegd was down (unavailable: %d)", nf, un)
	}
	if un == 0 {
		t.Errorf("no record counted unavailable while plegd was down")
	}
	n.f.serve(t)
	eventually(t, "plegd is back: an unknown pod is not_found again", 15*time.Second, func() bool {
		h.consume(makeLogs(rec{res: map[string]any{"k8s.pod.uid": "uid-unknown"}}))
		return h.counter("otelcol_processor_plegd_records_unplaced", map[string]string{"reason": "not_found"}) > 0
	})
}

// A pod plegd knows that the informer's copy does not hold yet is placed (plegd is
// asked), as a pod only.
func TestAPodTheCopyHasNotCaughtUpWithIsAskedOfPlegd(t *testing.T) {
	n := newNode(t)
	h := newHarness(t, n.f.endpoint(), nil)
	// In plegd's cache, with no event to the watchers yet.
	c := testContainer("shop", "new", "uid-new", "c", 0, cid(80), 0)
	pod := testPod("shop", "new", "uid-new", c)
	n.f.mu.Lock()
	n.f.pods["uid-new"] = pod
	n.f.mu.Unlock()
	got := h.consume(makeLogs(rec{res: map[string]any{"k8s.pod.uid": "uid-new"}}))["record 0"]
	wantPlaced(t, got, pod, nil)
	if _, ok := got["k8s.container.name"]; ok {
		t.Errorf("a pod-only answer named a container: %v", got)
	}
}

// Odd answers: a pod with no labels, no name, no namespace; a removed container
// without a sandbox; an answer with a pod but no container; an empty pod. Nothing
// panics, and nothing is placed without a pod uid and a container id: such answers
// are counted not_found.
func TestAnswersWithoutAPodUIDOrContainerIDPlaceNothing(t *testing.T) {
	n := newNode(t)
	h := newHarness(t, n.f.endpoint(), func(c *Config) { c.Labels = []string{"*"}; c.Annotations = []string{"*"} })
	n.f.mu.Lock()
	n.f.byKey["c:"+cid(60)] = &plegdv1.GetContainerResponse{Pod: &plegdv1.PodStatus{Uid: "uid-bare"}, Container: &plegdv1.ContainerInfo{Id: cid(60), Name: "x"}, Removed: true}
	n.f.byKey["c:"+cid(61)] = &plegdv1.GetContainerResponse{Pod: &plegdv1.PodStatus{Uid: "uid-nocontainer", Name: "p", Namespace: "ns"}}
	n.f.byKey["c:"+cid(62)] = &plegdv1.GetContainerResponse{Pod: &plegdv1.PodStatus{}, Container: &plegdv1.ContainerInfo{}}
	n.f.byKey["c:"+cid(63)] = &plegdv1.GetContainerResponse{}
	n.f.mu.Unlock()
	out := h.consume(makeLogs(
		rec{res: map[string]any{"container.id": cid(60)}},
		rec{res: map[string]any{"container.id": cid(61)}},
		rec{res: map[string]any{"container.id": cid(62)}},
		rec{res: map[string]any{"container.id": cid(63)}},
	))
	if out["record 0"]["k8s.pod.uid"] != "uid-bare" || out["record 0"]["k8s.container.name"] != "x" {
		t.Errorf("bare tombstone: %v", out["record 0"])
	}
	if len(out["record 1"]) != 1 {
		t.Errorf("an answer without a container placed the record: %v", out["record 1"])
	}
	if v, ok := out["record 2"]["k8s.container.restart_count"]; ok {
		t.Errorf("an answer with an empty pod and container placed the record: %v (restart_count %v)", out["record 2"], v)
	}
	if len(out["record 3"]) != 1 {
		t.Errorf("an empty answer placed the record: %v", out["record 3"])
	}
	if got := h.counter("otelcol_processor_plegd_records_placed", nil); got != 1 {
		t.Errorf("placed = %d, want 1", got)
	}
	if got := h.counter("otelcol_processor_plegd_records_unplaced", map[string]string{"reason": "not_found"}); got != 3 {
		t.Errorf("unplaced not_found = %d, want 3", got)
	}
}

// hungPlegd accepts connections on a unix socket and never says a word (a plegd
// stuck before its gRPC server answers).
func hungPlegd(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "plegdhung")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	sock := filepath.Join(dir, "plegd.sock")
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var conns []net.Conn
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		l.Close()
		mu.Lock()
		for _, c := range conns {
			c.Close()
		}
		mu.Unlock()
	})
	return "unix://" + sock
}

func startProcs(t *testing.T, cfg *Config) (time.Duration, []component.Component, *consumertest.LogsSink) {
	t.Helper()
	set := processortest.NewNopSettings(componentType)
	f := NewFactory()
	sink := new(consumertest.LogsSink)
	lp, err := f.CreateLogs(context.Background(), set, cfg, sink)
	if err != nil {
		t.Fatal(err)
	}
	tp, err := f.CreateTraces(context.Background(), set, cfg, new(consumertest.TracesSink))
	if err != nil {
		t.Fatal(err)
	}
	mp, err := f.CreateMetrics(context.Background(), set, cfg, new(consumertest.MetricsSink))
	if err != nil {
		t.Fatal(err)
	}
	cs := []component.Component{lp, tp, mp}
	start := time.Now()
	for _, c := range cs {
		if err := c.Start(context.Background(), componenttest.NewNopHost()); err != nil {
			t.Fatal(err)
		}
	}
	return time.Since(start), cs, sink
}

// plegd hung: Start returns within wait_for_sync, a batch of 2,000 distinct keys is
// held no longer than lookup_timeout, Shutdown returns, and no goroutine is left.
func TestAHungPlegdHoldsNeitherStartNorBatchesNorShutdown(t *testing.T) {
	ep := hungPlegd(t)
	before := runtime.NumGoroutine()
	cfg := createDefaultConfig()
	cfg.Endpoint = ep
	cfg.WaitForSync = 300 * time.Millisecond
	cfg.LookupTimeout = 100 * time.Millisecond
	d, cs, sink := startProcs(t, cfg)
	if d > time.Second {
		t.Errorf("Start (3 pipelines) took %s with wait_for_sync 300ms", d)
	}
	var recs []rec
	for i := 0; i < 2000; i++ {
		recs = append(recs, rec{rec: map[string]any{"log.file.path": fmt.Sprintf("/var/log/pods/a_b_c/d/%d.log", i)}})
	}
	peak := 0
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			select {
			case <-stop:
				return
			default:
			}
			if g := runtime.NumGoroutine(); g > peak {
				peak = g
			}
			time.Sleep(2 * time.Millisecond)
		}
	}()
	for b := 0; b < 3; b++ {
		start := time.Now()
		if err := h2logs(cs[0]).ConsumeLogs(context.Background(), makeLogs(recs...)); err != nil {
			t.Fatal(err)
		}
		if d := time.Since(start); d > 600*time.Millisecond {
			t.Errorf("batch %d held %s with plegd hung (lookup_timeout 100ms)", b, d)
		}
	}
	close(stop)
	wg.Wait()
	t.Logf("goroutines: %d before, peak %d during 3 batches of 2,000 distinct keys", before, peak)
	if sink.LogRecordCount() != 6000 {
		t.Errorf("records lost: %d of 6000", sink.LogRecordCount())
	}
	start := time.Now()
	for _, c := range cs {
		if err := c.Shutdown(context.Background()); err != nil {
			t.Error(err)
		}
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Errorf("Shutdown took %s with plegd hung", d)
	}
	eventually(t, "goroutines back to where they were", 5*time.Second, func() bool {
		return runtime.NumGoroutine() <= before+2
	})
}

// The GetContainer calls in flight are bounded: one batch of N distinct keys that plegd
// is slow to answer starts no call once the batch's deadline has passed, and never
// more than maxInFlight at once (across batches); the records left without a call
// are counted unavailable.
func TestGetContainerCallsInFlightAreBounded(t *testing.T) {
	n := newNode(t)
	h := newHarness(t, n.f.endpoint(), func(c *Config) { c.LookupTimeout = 200 * time.Millisecond })
	n.f.mu.Lock()
	n.f.delay = 10 * time.Second
	n.f.mu.Unlock()
	var recs []rec
	for i := 0; i < 3000; i++ {
		recs = append(recs, rec{res: map[string]any{"process.pid": int64(20000 + i)}})
	}
	before := n.f.rpcs.Load()
	h.consume(makeLogs(recs...))
	r := h.resolver()
	r.flightMu.Lock()
	inflight := len(r.flight)
	r.flightMu.Unlock()
	calls := n.f.rpcs.Load() - before
	t.Logf("after one batch: %d calls in flight, %d reached plegd", inflight, calls)
	if inflight > 256 {
		t.Errorf("one batch left %d GetContainer calls in flight against a slow plegd (no bound; most started after the batch's deadline had passed)", inflight)
	}
	if got := h.counter("otelcol_processor_plegd_records_unplaced", map[string]string{"reason": "unavailable"}); got != 3000 {
		t.Errorf("unplaced unavailable = %d, want 3000", got)
	}
	// Concurrent batches, each with a long deadline, share the bound.
	h2 := newHarness(t, n.f.endpoint(), func(c *Config) { c.LookupTimeout = 2 * time.Second })
	var wg sync.WaitGroup
	for b := 0; b < 8; b++ {
		wg.Add(1)
		go func(b int) {
			defer wg.Done()
			var recs []rec
			for i := 0; i < 100; i++ {
				recs = append(recs, rec{res: map[string]any{"process.pid": int64(40000 + 100*b + i)}})
			}
			_ = h2.lp.ConsumeLogs(context.Background(), makeLogs(recs...))
		}(b)
	}
	peak := 0
	for i := 0; i < 50; i++ {
		r2 := h2.resolver()
		r2.flightMu.Lock()
		peak = max(peak, len(r2.flight))
		r2.flightMu.Unlock()
		time.Sleep(5 * time.Millisecond)
	}
	wg.Wait()
	if peak > maxInFlight {
		t.Errorf("%d calls in flight at once, bound %d", peak, maxInFlight)
	}
	t.Logf("8 concurrent batches: peak %d calls in flight", peak)
}

func h2logs(c component.Component) processor.Logs { return c.(processor.Logs) }

// GetContainer very slow server-side: the client's deadline ends the batch, and the
// informer's copy still answers container.id at once. (The log file is of a container
// the copy never held, so only GetContainer can answer it.)
func TestAGetContainerThatNeverReturnsEndsWithTheBatch(t *testing.T) {
	n := newNode(t) // serves the informer
	h := newHarness(t, n.f.endpoint(), func(c *Config) { c.LookupTimeout = 100 * time.Millisecond })
	ghost := testContainer("batch", "job", "uid-job", "run", 0, cid(5), 0)
	n.f.tombstone(testPod("batch", "job", "uid-job", ghost), ghost)
	n.f.mu.Lock()
	n.f.delay = time.Hour // the fake's handler honours ctx; the client deadline is what ends it
	n.f.mu.Unlock()
	start := time.Now()
	out := h.consume(makeLogs(rec{rec: map[string]any{"log.file.path": ghost.LogPath}}, rec{res: map[string]any{"container.id": n.dbc.Id}}))
	if d := time.Since(start); d > 500*time.Millisecond {
		t.Errorf("batch held %s", d)
	}
	wantPlaced(t, out["record 1"], n.db, n.dbc)
	if _, ok := out["record 0"]["k8s.pod.name"]; ok {
		t.Errorf("placed without an answer")
	}
}

// The process resources of one batch (the hostmetrics process scraper's shape: one
// resource per process) are looked up at once, not one after another within the
// batch's lookup_timeout: with plegd answering each call in 50 ms and a 100 ms
// budget, one after another would start two or three calls; at once starts as many as
// the prefetch's share of the bound (three quarters) lets in, at the batch's start. (A serial batch placed 397 of 1,200, and the
// same tail went unplaced at every scrape.)
func TestTheDistinctPIDsOfABatchAreLookedUpAtOnce(t *testing.T) {
	n := newNode(t)
	h := newHarness(t, n.f.endpoint(), func(c *Config) { c.LookupTimeout = 100 * time.Millisecond })
	n.f.mu.Lock()
	n.f.delay = 50 * time.Millisecond
	n.f.mu.Unlock()
	var recs []rec
	for i := 0; i < 1200; i++ {
		recs = append(recs, rec{res: map[string]any{"process.pid": int64(60000 + i%600)}})
	}
	before := n.f.rpcs.Load()
	h.consume(makeLogs(recs...))
	calls := n.f.rpcs.Load() - before
	t.Logf("one batch of 1,200 process resources (600 PIDs): %d calls reached plegd", calls)
	if calls < maxInFlight*3/4 {
		t.Errorf("%d GetContainer calls reached plegd within the batch; want the prefetch's share, %d, started at once", calls, maxInFlight*3/4)
	}
	if calls > 600 {
		t.Errorf("%d calls for 600 distinct PIDs: a key was asked twice", calls)
	}
	// Those answered within the budget are placed or not_found; none waited its turn
	// behind another's answer.
	notFound := h.counter("otelcol_processor_plegd_records_unplaced", map[string]string{"reason": "not_found"})
	t.Logf("not_found %d of 1,200 within the budget", notFound)
	if notFound < int64(maxInFlight*3/4) {
		t.Errorf("only %d records answered within the budget; the calls did not overlap", notFound)
	}
}

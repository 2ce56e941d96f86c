package plegdprocessor

// Splitting one resource's records between containers (logs, traces); metrics, which
// are not split.

import (
	"context"
	"fmt"
	"math/rand"
	"testing"
	"time"

	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/plog"
	"go.opentelemetry.io/collector/pdata/pmetric"
	"go.opentelemetry.io/collector/pdata/ptrace"

	"github.com/plegd/plegd/clients/go/plegdv1"
)

type splitCase struct {
	resID  *plegdv1.ContainerInfo // container.id on the resource (nil: none)
	recs   []splitRec
	scopes int
}

type splitRec struct {
	scope int
	id    *plegdv1.ContainerInfo // container.id on the record
	path  *plegdv1.ContainerInfo // log.file.path on the record
	bogus bool                   // an unknown log.file.path
}

// want is the container a record must end up with (nil: unplaced, resource unchanged).
func (c splitCase) want(r splitRec) *plegdv1.ContainerInfo {
	switch {
	case c.resID != nil:
		return c.resID
	case r.id != nil:
		return r.id
	case r.path != nil:
		return r.path
	}
	return nil
}

func randomSplitCases(rnd *rand.Rand, cs []*plegdv1.ContainerInfo) []splitCase {
	var out []splitCase
	for i := 0; i < 1+rnd.Intn(4); i++ {
		c := splitCase{scopes: 1 + rnd.Intn(3)}
		if rnd.Intn(5) == 0 {
			c.resID = cs[rnd.Intn(len(cs))]
		}
		for k := 0; k < rnd.Intn(12); k++ {
			r := splitRec{scope: rnd.Intn(c.scopes)}
			switch rnd.Intn(5) {
			case 0:
				r.id = cs[rnd.Intn(len(cs))]
			case 1, 2:
				r.path = cs[rnd.Intn(len(cs))]
			case 3:
				r.bogus = true
			}
			c.recs = append(c.recs, r)
		}
		out = append(out, c)
	}
	return out
}

func checkSplitRecord(t *testing.T, what string, res, attrs pcommon.Map, scope string, want *plegdv1.ContainerInfo, wantScope string, wantRecAttrs map[string]any) {
	t.Helper()
	if v, _ := res.Get("host.name"); v.Str() != "n1" {
		t.Errorf("%s: lost its resource's own attributes: %v", what, res.AsRaw())
	}
	if scope != wantScope {
		t.Errorf("%s: scope %q, want %q", what, scope, wantScope)
	}
	if fmt.Sprint(attrs.AsRaw()) != fmt.Sprint(wantRecAttrs) {
		t.Errorf("%s: record attributes changed: %v, want %v", what, attrs.AsRaw(), wantRecAttrs)
	}
	id, _ := res.Get("container.id")
	if want == nil {
		if _, ok := res.Get("k8s.pod.name"); ok {
			t.Errorf("%s: unplaceable record got attributes: %v", what, res.AsRaw())
		}
		return
	}
	name, _ := res.Get("k8s.container.name")
	if id.Str() != want.Id || name.Str() != want.Name {
		t.Errorf("%s: on container %q (%s), want %q (%s)", what, name.Str(), id.Str(), want.Name, want.Id)
	}
}

// Random resources, scopes and records (container.id on the resource or the record,
// log.file.path known or not, no key): every record comes out exactly once, in its
// scope, unchanged, with its own container's attributes.
func TestSplittingKeepsEveryRecordOnceInItsScopeWithItsOwnContainer(t *testing.T) {
	n := newNode(t)
	h := newHarness(t, n.f.endpoint(), func(c *Config) { c.LookupTimeout = 3 * time.Second })
	cs := []*plegdv1.ContainerInfo{n.app0, n.app1, n.side, n.dbc}
	rnd := rand.New(rand.NewSource(42))
	for iter := 0; iter < 150; iter++ {
		cases := randomSplitCases(rnd, cs)
		type exp struct {
			c     *plegdv1.ContainerInfo
			scope string
			attrs map[string]any
		}
		want := map[string]exp{}
		ld := plog.NewLogs()
		td := ptrace.NewTraces()
		total := 0
		for ri, c := range cases {
			rl := ld.ResourceLogs().AppendEmpty()
			rs := td.ResourceSpans().AppendEmpty()
			for _, m := range []pcommon.Map{rl.Resource().Attributes(), rs.Resource().Attributes()} {
				m.PutStr("host.name", "n1")
				if c.resID != nil {
					m.PutStr("container.id", c.resID.Id)
				}
			}
			var sls []plog.ScopeLogs
			var sss []ptrace.ScopeSpans
			for s := 0; s < c.scopes; s++ {
				sl := rl.ScopeLogs().AppendEmpty()
				sl.Scope().SetName(fmt.Sprintf("scope-%d-%d", ri, s))
				sls = append(sls, sl)
				ss := rs.ScopeSpans().AppendEmpty()
				ss.Scope().SetName(fmt.Sprintf("scope-%d-%d", ri, s))
				sss = append(sss, ss)
			}
			for k, r := range c.recs {
				body := fmt.Sprintf("r%d-%d", ri, k)
				attrs := map[string]any{"seq": int64(total)}
				if r.id != nil {
					attrs["container.id"] = r.id.Id
				}
				if r.path != nil {
					attrs["log.file.path"] = r.path.LogPath
				}
				if r.bogus {
					attrs["log.file.path"] = fmt.Sprintf("/var/log/pods/x_y_z%d/c/0.log", rnd.Intn(3))
				}
				lr := sls[r.scope].LogRecords().AppendEmpty()
				lr.Body().SetStr(body)
				_ = lr.Attributes().FromRaw(attrs)
				sp := sss[r.scope].Spans().AppendEmpty()
				sp.SetName(body)
				_ = sp.Attributes().FromRaw(attrs)
				want[body] = exp{c: c.want(r), scope: fmt.Sprintf("scope-%d-%d", ri, r.scope), attrs: attrs}
				total++
			}
		}
		h.logs.Reset()
		if err := h.lp.ConsumeLogs(context.Background(), ld); err != nil {
			t.Fatal(err)
		}
		h.tr.Reset()
		if err := h.tp.ConsumeTraces(context.Background(), td); err != nil {
			t.Fatal(err)
		}
		seenL := map[string]int{}
		for _, l := range h.logs.AllLogs() {
			for i := 0; i < l.ResourceLogs().Len(); i++ {
				rl := l.ResourceLogs().At(i)
				for j := 0; j < rl.ScopeLogs().Len(); j++ {
					sl := rl.ScopeLogs().At(j)
					for k := 0; k < sl.LogRecords().Len(); k++ {
						lr := sl.LogRecords().At(k)
						b := lr.Body().Str()
						seenL[b]++
						e := want[b]
						checkSplitRecord(t, "log "+b, rl.Resource().Attributes(), lr.Attributes(), sl.Scope().Name(), e.c, e.scope, e.attrs)
					}
				}
			}
		}
		seenT := map[string]int{}
		for _, tr := range h.tr.AllTraces() {
			for i := 0; i < tr.ResourceSpans().Len(); i++ {
				rs := tr.ResourceSpans().At(i)
				for j := 0; j < rs.ScopeSpans().Len(); j++ {
					ss := rs.ScopeSpans().At(j)
					for k := 0; k < ss.Spans().Len(); k++ {
						sp := ss.Spans().At(k)
						seenT[sp.Name()]++
						e := want[sp.Name()]
						checkSplitRecord(t, "span "+sp.Name(), rs.Resource().Attributes(), sp.Attributes(), ss.Scope().Name(), e.c, e.scope, e.attrs)
					}
				}
			}
		}
		for b := range want {
			if seenL[b] != 1 || seenT[b] != 1 {
				t.Errorf("iteration %d: %s came out %d times (logs), %d times (traces)", iter, b, seenL[b], seenT[b])
			}
		}
		if len(seenL) != len(want) || len(seenT) != len(want) {
			t.Errorf("iteration %d: %d records in, %d log / %d span bodies out", iter, len(want), len(seenL), len(seenT))
		}
		if t.Failed() {
			t.Fatalf("iteration %d failed", iter)
		}
	}
}

// Two records of the same container, one found by its container.id, the other by its
// log file: they are one container's records, under one resource (the groups are told
// apart by pod and container, not by how each was found).
func TestRecordsOfOneContainerFoundByTwoKeysStayUnderOneResource(t *testing.T) {
	n := newNode(t)
	h := newHarness(t, n.f.endpoint(), func(c *Config) { c.LookupTimeout = 3 * time.Second })
	ld := plog.NewLogs()
	rl := ld.ResourceLogs().AppendEmpty()
	rl.Resource().Attributes().PutStr("host.name", "n1")
	lrs := rl.ScopeLogs().AppendEmpty().LogRecords()
	a := lrs.AppendEmpty()
	a.Body().SetStr("record 0")
	a.Attributes().PutStr("container.id", n.side.Id)
	b := lrs.AppendEmpty()
	b.Body().SetStr("record 1")
	b.Attributes().PutStr("log.file.path", n.side.LogPath)
	c := lrs.AppendEmpty()
	c.Body().SetStr("record 2")
	c.Attributes().PutInt("process.pid", int64(n.side.Pid)) // a GetContainer answer: another *placement
	out := h.consume(ld)
	wantPlaced(t, out["record 0"], n.web, n.side)
	wantPlaced(t, out["record 1"], n.web, n.side)
	wantPlaced(t, out["record 2"], n.web, n.side)
	if got := h.logs.AllLogs()[0].ResourceLogs().Len(); got != 1 {
		t.Errorf("records of one container came out under %d resources", got)
	}
}

// The same with metrics: the data points of one resource, all of one container (one
// found by container.id, one by process.pid), are one container's; the resource is
// placed and both points are counted placed.
func TestMetricsOfOneContainerFoundByTwoKeysArePlaced(t *testing.T) {
	n := newNode(t)
	h := newHarness(t, n.f.endpoint(), func(c *Config) { c.LookupTimeout = 3 * time.Second })
	md := pmetric.NewMetrics()
	rm := md.ResourceMetrics().AppendEmpty()
	g := rm.ScopeMetrics().AppendEmpty().Metrics().AppendEmpty().SetEmptyGauge()
	p1 := g.DataPoints().AppendEmpty()
	p1.SetIntValue(1)
	p1.Attributes().PutStr("container.id", n.dbc.Id)
	p2 := g.DataPoints().AppendEmpty()
	p2.SetIntValue(2)
	p2.Attributes().PutInt("process.pid", int64(n.dbc.Pid))
	if err := h.mp.ConsumeMetrics(context.Background(), md); err != nil {
		t.Fatal(err)
	}
	res := h.ms.AllMetrics()[0].ResourceMetrics().At(0).Resource().Attributes().AsRaw()
	if res["k8s.pod.name"] != "db" {
		t.Errorf("points all of container pg were left unplaced: %v (not_found counted: %d)", res,
			h.counter("otelcol_processor_plegd_records_unplaced", map[string]string{"otel.signal": "metrics", "reason": "not_found"}))
	}
	wantPlaced(t, res, n.db, n.dbc)
	if got := h.counter("otelcol_processor_plegd_records_placed", map[string]string{"otel.signal": "metrics"}); got != 2 {
		t.Errorf("metrics placed = %d, want 2", got)
	}
}

// Points of one resource: one of a container, one with no key at all. The resource is
// left alone (the keyless point is not the container's); each point keeps its own
// reason: no_key for the keyless one, mixed for the found one. Points of two
// containers are mixed too.
func TestPointsOfAResourceLeftUnplacedKeepTheirOwnReason(t *testing.T) {
	n := newNode(t)
	h := newHarness(t, n.f.endpoint(), nil)
	md := pmetric.NewMetrics()
	rm := md.ResourceMetrics().AppendEmpty()
	g := rm.ScopeMetrics().AppendEmpty().Metrics().AppendEmpty().SetEmptySum()
	p1 := g.DataPoints().AppendEmpty()
	p1.Attributes().PutStr("container.id", n.dbc.Id)
	g.DataPoints().AppendEmpty() // no key
	if err := h.mp.ConsumeMetrics(context.Background(), md); err != nil {
		t.Fatal(err)
	}
	if got := h.counter("otelcol_processor_plegd_records_unplaced", map[string]string{"otel.signal": "metrics", "reason": "no_key"}); got != 1 {
		t.Errorf("a point without any key counted as no_key %d times, want 1 (not_found: %d)", got,
			h.counter("otelcol_processor_plegd_records_unplaced", map[string]string{"otel.signal": "metrics", "reason": "not_found"}))
	}
	if got := h.counter("otelcol_processor_plegd_records_unplaced", map[string]string{"otel.signal": "metrics", "reason": "mixed"}); got != 1 {
		t.Errorf("the found point of the mixed resource counted mixed %d times, want 1", got)
	}
	if res := h.ms.AllMetrics()[0].ResourceMetrics().At(0).Resource().Attributes(); res.Len() != 0 {
		t.Errorf("a mixed resource was changed: %v", res.AsRaw())
	}

	// Two containers, and an unknown container.
	md = pmetric.NewMetrics()
	g = md.ResourceMetrics().AppendEmpty().ScopeMetrics().AppendEmpty().Metrics().AppendEmpty().SetEmptySum()
	for _, id := range []string{n.dbc.Id, n.side.Id, cid(99)} {
		g.DataPoints().AppendEmpty().Attributes().PutStr("container.id", id)
	}
	if err := h.mp.ConsumeMetrics(context.Background(), md); err != nil {
		t.Fatal(err)
	}
	if got := h.counter("otelcol_processor_plegd_records_unplaced", map[string]string{"otel.signal": "metrics", "reason": "mixed"}); got != 3 {
		t.Errorf("mixed = %d, want 3", got)
	}
	if got := h.counter("otelcol_processor_plegd_records_unplaced", map[string]string{"otel.signal": "metrics", "reason": "not_found"}); got != 1 {
		t.Errorf("not_found = %d, want 1", got)
	}
	if got := h.counter("otelcol_processor_plegd_records_placed", map[string]string{"otel.signal": "metrics"}); got != 0 {
		t.Errorf("placed = %d, want 0", got)
	}
}

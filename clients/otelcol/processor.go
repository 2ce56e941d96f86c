package plegdprocessor

import (
	"context"
	"net"
	"strconv"
	"strings"
	"time"

	"go.opentelemetry.io/collector/client"

	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/plog"
	"go.opentelemetry.io/collector/pdata/pmetric"
	"go.opentelemetry.io/collector/pdata/pprofile"
	"go.opentelemetry.io/collector/pdata/ptrace"
)

type assocKey uint8

const (
	assocContainerID assocKey = iota
	assocPodUID
	assocLogFilePath
	assocProcessPID
	assocPodIP
	assocConnection
)

func assocKeyOf(name string) assocKey {
	switch name {
	case KeyContainerID:
		return assocContainerID
	case KeyPodUID:
		return assocPodUID
	case KeyLogFilePath:
		return assocLogFilePath
	case KeyPodIP:
		return assocPodIP
	case KeyConnection:
		return assocConnection
	default:
		return assocProcessPID
	}
}

// memoKey names a lookup within one batch.
type memoKey struct {
	k    assocKey
	s, c string
	i    int64
}

// batch resolves the records of one ConsumeX call: every distinct key once, and
// every GetContainer call within one lookup_timeout.
type batch struct {
	p      *plegdProcessor
	ctx    context.Context
	cancel context.CancelFunc
	memo   map[memoKey]answer
	// scratch for the grouping of one resource's records
	groups  []*placement
	groupOf map[*placement]int // each placement's group, found once per resource
	// whether each placement conflicts with the resource's attributes
	conflictOf map[*placement]bool
	assign     []int
	// sdk: whether the current resource is an OpenTelemetry SDK's (0: not looked yet,
	// 1: no, 2: yes).
	sdk uint8
	// the calls to start before the records are resolved, each key once
	prefetch []lookupReq
	wanted   map[string]struct{}
	// at is the time of the record being resolved (0: none): a pod address is looked
	// up as of then.
	at pcommon.Timestamp
}

func (p *plegdProcessor) newBatch(ctx context.Context) *batch {
	bctx, cancel := context.WithTimeout(ctx, p.cfg.LookupTimeout)
	return &batch{p: p, ctx: bctx, cancel: cancel, memo: make(map[memoKey]answer, 8)}
}

func get(res, rec pcommon.Map, name string) (pcommon.Value, bool) {
	if v, ok := res.Get(name); ok {
		return v, true
	}
	if rec == (pcommon.Map{}) {
		return pcommon.Value{}, false
	}
	return rec.Get(name)
}

func getStr(res, rec pcommon.Map, name string) string {
	v, ok := get(res, rec, name)
	if !ok {
		return ""
	}
	if v.Type() == pcommon.ValueTypeStr {
		return v.Str()
	}
	return v.AsString()
}

func getInt(res, rec pcommon.Map, name string) (int64, bool) {
	v, ok := get(res, rec, name)
	if !ok {
		return 0, false
	}
	switch v.Type() {
	case pcommon.ValueTypeInt:
		return v.Int(), true
	case pcommon.ValueTypeDouble:
		return int64(v.Double()), true
	case pcommon.ValueTypeStr:
		n, err := strconv.ParseInt(v.Str(), 10, 64)
		return n, err == nil
	}
	return 0, false
}

// lookup answers one association key of a record; present is false when neither the
// resource nor the record carries it.
func (b *batch) lookup(k assocKey, res, rec pcommon.Map) (a answer, present bool) {
	var mk memoKey
	switch k {
	case assocContainerID:
		mk.s = getStr(res, rec, KeyContainerID)
	case assocPodUID:
		mk.s = getStr(res, rec, KeyPodUID)
		if mk.s != "" {
			mk.c = getStr(res, rec, attrContainerName)
			mk.i = -1
			if n, ok := getInt(res, rec, attrRestartCount); ok && mk.c != "" {
				mk.i = n
			}
		}
	case assocLogFilePath:
		mk.s = getStr(res, rec, KeyLogFilePath)
	case assocPodIP, assocConnection:
		if k == assocPodIP {
			mk.s = getStr(res, rec, KeyPodIP)
		} else {
			mk.s = peerIP(b.ctx)
		}
		// Records of one millisecond share an answer: an address is reused within a
		// second, and the moment decides whose it was.
		mk.i = int64(b.at / pcommon.Timestamp(time.Millisecond))
	case assocProcessPID:
		// plegd knows host PIDs. An SDK's resource carries the process's PID in its
		// own PID namespace — in a container, another process's host PID, if any.
		if b.sdkResource(res) {
			return answer{}, false
		}
		n, ok := getInt(res, rec, KeyProcessPID)
		if !ok {
			return answer{}, false
		}
		mk.i = n
	}
	if mk.s == "" && k != assocProcessPID {
		return answer{}, false
	}
	mk.k = k
	if a, ok := b.memo[mk]; ok {
		return a, true
	}
	r := b.p.r
	switch k {
	case assocContainerID:
		a = r.byContainerID(b.ctx, mk.s)
	case assocPodUID:
		a = r.byPodUID(b.ctx, mk.s, mk.c, mk.i)
	case assocLogFilePath:
		a = r.byLogPath(b.ctx, mk.s)
	case assocProcessPID:
		a = r.byPID(b.ctx, mk.i)
	case assocPodIP, assocConnection:
		a = r.byPodIP(b.ctx, mk.s, mk.i)
	}
	b.memo[mk] = a
	return a, true
}

// peerIP is the address the batch came from (the receiver's client info), or "".
func peerIP(ctx context.Context) string {
	addr := client.FromContext(ctx).Addr
	if addr == nil {
		return ""
	}
	s := addr.String()
	if host, _, err := net.SplitHostPort(s); err == nil {
		return host
	}
	return s
}

// want notes a record's keys that only a call to plegd answers (a host PID), so that
// the batch starts every such call at once before it resolves its records one by one.
func (b *batch) want(res, rec pcommon.Map) {
	if !b.p.wantsPID || b.sdkResource(res) {
		return
	}
	n, ok := getInt(res, rec, KeyProcessPID)
	if !ok {
		return
	}
	q, ok := pidReq(n)
	if !ok {
		return
	}
	if b.wanted == nil {
		b.wanted = make(map[string]struct{}, 64)
	}
	if _, seen := b.wanted[q.key]; !seen {
		b.wanted[q.key] = struct{}{}
		b.prefetch = append(b.prefetch, q)
	}
}

// startPrefetch starts the calls want noted.
func (b *batch) startPrefetch() {
	b.p.r.prefetch(b.ctx, b.prefetch)
	b.prefetch, b.wanted = nil, nil
}

// sdkResource says whether res is an OpenTelemetry SDK's resource (it carries
// telemetry.sdk.* attributes).
func (b *batch) sdkResource(res pcommon.Map) bool {
	if b.sdk == 0 {
		b.sdk = 1
		res.Range(func(k string, _ pcommon.Value) bool {
			if strings.HasPrefix(k, "telemetry.sdk.") {
				b.sdk = 2
				return false
			}
			return true
		})
	}
	return b.sdk == 2
}

// resolve places one record: the keys in the configured order, each read from the
// resource, then from the record. A key that finds only a pod (k8s.pod.uid without
// the container's name) is kept while later keys may still name the container in
// that pod. A record whose resource already names another pod or container than
// the one found is not placed (conflict).
func (b *batch) resolve(res, rec pcommon.Map) answer {
	a := b.find(res, rec)
	if a.p == nil {
		return a
	}
	c, ok := b.conflictOf[a.p]
	if !ok {
		c = a.p.conflicts(res)
		if b.conflictOf == nil {
			b.conflictOf = make(map[*placement]bool, 8)
		}
		b.conflictOf[a.p] = c
	}
	if c {
		return answer{why: reasonConflict}
	}
	return a
}

func (b *batch) find(res, rec pcommon.Map) answer {
	var podOnly *placement
	why := reasonNoKey
	for _, k := range b.p.keys {
		a, present := b.lookup(k, res, rec)
		if !present {
			continue
		}
		if a.p == nil {
			why = max(why, a.why)
			continue
		}
		if a.p.containerID == "" {
			if podOnly == nil {
				podOnly = a.p
			}
			continue
		}
		if podOnly != nil && podOnly.podUID != a.p.podUID {
			if _, onRes := res.Get(KeyContainerID); onRes && k == assocContainerID {
				// The resource's container.id is another pod's container: whichever
				// pod it is given, it would name two.
				return answer{why: reasonConflict}
			}
			break // an earlier key named another pod: it wins
		}
		return a
	}
	if podOnly != nil {
		return answer{p: podOnly}
	}
	return answer{why: why}
}

// group adds a record's placement to the resource's groups and returns its index:
// the records of one container make one group, whichever keys found them.
func (b *batch) group(p *placement) int {
	if i, ok := b.groupOf[p]; ok {
		return i
	}
	i := 0
	for ; i < len(b.groups) && !sameTarget(b.groups[i], p); i++ {
	}
	if i == len(b.groups) {
		b.groups = append(b.groups, p)
	}
	if b.groupOf == nil {
		b.groupOf = make(map[*placement]int, 8)
	}
	b.groupOf[p] = i
	return i
}

// reset starts a new resource.
func (b *batch) reset() {
	b.groups = b.groups[:0]
	b.assign = b.assign[:0]
	clear(b.groupOf)
	clear(b.conflictOf)
	b.sdk = 0
}

func (p *plegdProcessor) processLogs(ctx context.Context, ld plog.Logs) (plog.Logs, error) {
	split(ctx, p, signalLogs, ld.ResourceLogs(), &logsShape)
	return ld, nil
}

// processProfiles places each resource by its own attributes: a profile's samples
// carry their attributes in the batch's dictionary, not as a map, and the eBPF
// profiler puts container.id on the resource. A profile has no one time to look a pod
// address up at: its resource is placed as of now.
func (p *plegdProcessor) processProfiles(ctx context.Context, pd pprofile.Profiles) {
	b := p.newBatch(ctx)
	defer b.cancel()
	var c counts
	rps := pd.ResourceProfiles()
	for i := 0; i < rps.Len(); i++ {
		res := rps.At(i).Resource().Attributes()
		b.reset()
		b.at = 0
		a := b.resolve(res, pcommon.Map{})
		c[a.why]++
		if a.p != nil {
			a.p.apply(res)
		}
	}
	p.r.tel.record(ctx, signalProfiles, &c)
}

func (p *plegdProcessor) processTraces(ctx context.Context, td ptrace.Traces) (ptrace.Traces, error) {
	split(ctx, p, signalTraces, td.ResourceSpans(), &tracesShape)
	return td, nil
}

// pdataSlice is what the split uses of a pdata slice.
type pdataSlice[T any] interface {
	Len() int
	At(int) T
	AppendEmpty() T
	RemoveIf(func(T) bool)
}

// shape is one signal's three levels as the split sees them: resources (R) holding
// scopes (S, in a slice SS) holding items (I, in a slice IS) — log records or spans.
type shape[R, S, I any, SS pdataSlice[S], IS pdataSlice[I]] struct {
	resource       func(R) pcommon.Resource
	resourceSchema func(R) string
	setResSchema   func(R, string)
	scopes         func(R) SS
	scope          func(S) pcommon.InstrumentationScope
	scopeSchema    func(S) string
	setScopeSchema func(S, string)
	items          func(S) IS
	attributes     func(I) pcommon.Map
	// time is the item's own time, which a pod address is looked up at.
	time   func(I) pcommon.Timestamp
	moveTo func(I, I)
}

var logsShape = shape[plog.ResourceLogs, plog.ScopeLogs, plog.LogRecord, plog.ScopeLogsSlice, plog.LogRecordSlice]{
	resource:       plog.ResourceLogs.Resource,
	resourceSchema: plog.ResourceLogs.SchemaUrl,
	setResSchema:   plog.ResourceLogs.SetSchemaUrl,
	scopes:         plog.ResourceLogs.ScopeLogs,
	scope:          plog.ScopeLogs.Scope,
	scopeSchema:    plog.ScopeLogs.SchemaUrl,
	setScopeSchema: plog.ScopeLogs.SetSchemaUrl,
	items:          plog.ScopeLogs.LogRecords,
	attributes:     plog.LogRecord.Attributes,
	time: func(l plog.LogRecord) pcommon.Timestamp {
		if t := l.Timestamp(); t != 0 {
			return t
		}
		return l.ObservedTimestamp()
	},
	moveTo: plog.LogRecord.MoveTo,
}

var tracesShape = shape[ptrace.ResourceSpans, ptrace.ScopeSpans, ptrace.Span, ptrace.ScopeSpansSlice, ptrace.SpanSlice]{
	resource:       ptrace.ResourceSpans.Resource,
	resourceSchema: ptrace.ResourceSpans.SchemaUrl,
	setResSchema:   ptrace.ResourceSpans.SetSchemaUrl,
	scopes:         ptrace.ResourceSpans.ScopeSpans,
	scope:          ptrace.ScopeSpans.Scope,
	scopeSchema:    ptrace.ScopeSpans.SchemaUrl,
	setScopeSchema: ptrace.ScopeSpans.SetSchemaUrl,
	items:          ptrace.ScopeSpans.Spans,
	attributes:     ptrace.Span.Attributes,
	time:           ptrace.Span.StartTimestamp,
	moveTo:         ptrace.Span.MoveTo,
}

// split places each item of rs (log records, spans) by its resource's and its own
// attributes. A resource whose items all belong to one container gets that
// container's attributes; one whose items belong to several is split: the first group
// stays, each other gets a copy of the resource and scopes, and its items move there.
func split[R, S, I any, RS pdataSlice[R], SS pdataSlice[S], IS pdataSlice[I]](
	ctx context.Context, p *plegdProcessor, sig signal, rs RS, sh *shape[R, S, I, SS, IS],
) {
	b := p.newBatch(ctx)
	defer b.cancel()
	var c counts
	n := rs.Len()
	if p.wantsPID {
		for i := 0; i < n; i++ {
			res := sh.resource(rs.At(i)).Attributes()
			b.reset()
			b.want(res, pcommon.Map{})
			forEachItem(rs.At(i), sh, func(item I) { b.want(res, sh.attributes(item)) })
		}
		b.startPrefetch()
	}
	for i := 0; i < n; i++ {
		r := rs.At(i)
		res := sh.resource(r).Attributes()
		b.reset()
		scopes := sh.scopes(r)
		for j := 0; j < scopes.Len(); j++ {
			items := sh.items(scopes.At(j))
			for k := 0; k < items.Len(); k++ {
				b.at = sh.time(items.At(k))
				a := b.resolve(res, sh.attributes(items.At(k)))
				c[a.why]++
				b.assign = append(b.assign, b.group(a.p))
			}
		}
		if len(b.groups) <= 1 {
			if len(b.groups) == 1 && b.groups[0] != nil {
				b.groups[0].apply(res)
			}
			continue
		}
		out := make([]R, len(b.groups))
		out[0] = r
		for g := 1; g < len(b.groups); g++ {
			out[g] = rs.AppendEmpty()
			sh.resource(r).CopyTo(sh.resource(out[g]))
			sh.setResSchema(out[g], sh.resourceSchema(r))
		}
		moveGroups(b, r, out, sh)
		for g, pl := range b.groups {
			if pl != nil {
				pl.apply(sh.resource(out[g]).Attributes())
			}
		}
	}
	p.r.tel.record(ctx, sig, &c)
}

// forEachItem calls fn with each item of resource r, scope by scope.
func forEachItem[R, S, I any, SS pdataSlice[S], IS pdataSlice[I]](r R, sh *shape[R, S, I, SS, IS], fn func(I)) {
	scopes := sh.scopes(r)
	for j := 0; j < scopes.Len(); j++ {
		items := sh.items(scopes.At(j))
		for k := 0; k < items.Len(); k++ {
			fn(items.At(k))
		}
	}
}

// moveGroups moves each item of r whose group (b.assign, in item order) is not the
// first into a copy of its scope under out[group], and drops the scopes left empty.
func moveGroups[R, S, I any, SS pdataSlice[S], IS pdataSlice[I]](b *batch, r R, out []R, sh *shape[R, S, I, SS, IS]) {
	scopes := sh.scopes(r)
	idx := 0
	for j := 0; j < scopes.Len(); j++ {
		sc := scopes.At(j)
		items := sh.items(sc)
		targets := make([]IS, len(b.groups))
		made := make([]bool, len(b.groups))
		for k := 0; k < items.Len(); k++ {
			g := b.assign[idx+k]
			if g == 0 {
				continue
			}
			if !made[g] {
				t := sh.scopes(out[g]).AppendEmpty()
				sh.scope(sc).CopyTo(sh.scope(t))
				sh.setScopeSchema(t, sh.scopeSchema(sc))
				targets[g], made[g] = sh.items(t), true
			}
			sh.moveTo(items.At(k), targets[g].AppendEmpty())
		}
		k := 0
		items.RemoveIf(func(I) bool {
			g := b.assign[idx+k]
			k++
			return g != 0
		})
		idx += k
	}
	scopes.RemoveIf(func(sc S) bool { return sh.items(sc).Len() == 0 })
}

// processMetrics places each resource by its attributes, then by its data points'
// attributes. Metrics are not split: when the data points of one resource belong to
// several containers (or some to none), the resource is left as it is; its points
// that were found are counted as unplaced (mixed), the others keep their own reason.
func (p *plegdProcessor) processMetrics(ctx context.Context, md pmetric.Metrics) (pmetric.Metrics, error) {
	b := p.newBatch(ctx)
	defer b.cancel()
	var c counts
	rms := md.ResourceMetrics()
	if p.wantsPID {
		for i := 0; i < rms.Len(); i++ {
			rm := rms.At(i)
			b.reset()
			b.want(rm.Resource().Attributes(), pcommon.Map{})
			sms := rm.ScopeMetrics()
			for j := 0; j < sms.Len(); j++ {
				ms := sms.At(j).Metrics()
				for k := 0; k < ms.Len(); k++ {
					forEachPoint(ms.At(k), func(attrs pcommon.Map, _ pcommon.Timestamp) { b.want(rm.Resource().Attributes(), attrs) })
				}
			}
		}
		b.startPrefetch()
	}
	for i := 0; i < rms.Len(); i++ {
		rm := rms.At(i)
		res := rm.Resource().Attributes()
		b.reset()
		var rc counts
		sms := rm.ScopeMetrics()
		for j := 0; j < sms.Len(); j++ {
			ms := sms.At(j).Metrics()
			for k := 0; k < ms.Len(); k++ {
				forEachPoint(ms.At(k), func(attrs pcommon.Map, t pcommon.Timestamp) {
					b.at = t
					a := b.resolve(res, attrs)
					rc[a.why]++
					b.group(a.p)
				})
			}
		}
		switch {
		case len(b.groups) == 1 && b.groups[0] != nil:
			b.groups[0].apply(res)
		case len(b.groups) > 1:
			rc[reasonMixed] += rc[placed]
			rc[placed] = 0
		}
		for r := range c {
			c[r] += rc[r]
		}
	}
	p.r.tel.record(ctx, signalMetrics, &c)
	return md, nil
}

func forEachPoint(m pmetric.Metric, fn func(pcommon.Map, pcommon.Timestamp)) {
	switch m.Type() {
	case pmetric.MetricTypeGauge:
		dps := m.Gauge().DataPoints()
		for i := 0; i < dps.Len(); i++ {
			fn(dps.At(i).Attributes(), dps.At(i).Timestamp())
		}
	case pmetric.MetricTypeSum:
		dps := m.Sum().DataPoints()
		for i := 0; i < dps.Len(); i++ {
			fn(dps.At(i).Attributes(), dps.At(i).Timestamp())
		}
	case pmetric.MetricTypeHistogram:
		dps := m.Histogram().DataPoints()
		for i := 0; i < dps.Len(); i++ {
			fn(dps.At(i).Attributes(), dps.At(i).Timestamp())
		}
	case pmetric.MetricTypeExponentialHistogram:
		dps := m.ExponentialHistogram().DataPoints()
		for i := 0; i < dps.Len(); i++ {
			fn(dps.At(i).Attributes(), dps.At(i).Timestamp())
		}
	case pmetric.MetricTypeSummary:
		dps := m.Summary().DataPoints()
		for i := 0; i < dps.Len(); i++ {
			fn(dps.At(i).Attributes(), dps.At(i).Timestamp())
		}
	}
}

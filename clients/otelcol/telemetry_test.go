package plegdprocessor

// The processor's own telemetry, and its life as a component: shared by pipelines,
// started and stopped.

import (
	"context"
	"slices"
	"testing"

	"go.opentelemetry.io/collector/component"
	"go.opentelemetry.io/collector/component/componenttest"
	"go.opentelemetry.io/collector/consumer/consumertest"
	"go.opentelemetry.io/collector/pdata/ptrace"
	"go.opentelemetry.io/collector/processor/processortest"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"
)

// Two plegd processors (plegd and plegd/files) in one collector: their points are told
// apart by processor=<id>, and carry otel.signal, as processorhelper's own metrics do;
// units are {record} and {lookup}.
func TestTheMetricsOfTwoPlegdProcessorsNameTheirProcessor(t *testing.T) {
	n := newNode(t)
	tel := componenttest.NewTelemetry()
	t.Cleanup(func() { _ = tel.Shutdown(context.Background()) })
	for _, name := range []string{"", "files"} {
		cfg := createDefaultConfig()
		cfg.Endpoint = n.f.endpoint()
		cfg.NodeName = "node-1"
		set := processortest.NewNopSettings(componentType)
		set.ID = component.NewIDWithName(componentType, name)
		set.TelemetrySettings = tel.NewTelemetrySettings()
		sink := new(consumertest.LogsSink)
		lp, err := NewFactory().CreateLogs(context.Background(), set, cfg, sink)
		if err != nil {
			t.Fatal(err)
		}
		if err := lp.Start(context.Background(), componenttest.NewNopHost()); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = lp.Shutdown(context.Background()) })
		if err := lp.ConsumeLogs(context.Background(), makeLogs(rec{res: map[string]any{"container.id": n.dbc.Id}})); err != nil {
			t.Fatal(err)
		}
	}
	m, err := tel.GetMetric("otelcol_processor_plegd_records_placed")
	if err != nil {
		t.Fatal(err)
	}
	dps := m.Data.(metricdata.Sum[int64]).DataPoints
	t.Logf("records_placed points: %d; unit %q", len(dps), m.Unit)
	for _, dp := range dps {
		t.Logf("  %v = %d", dp.Attributes.ToSlice(), dp.Value)
	}
	if len(dps) < 2 {
		t.Errorf("two processors' placements are one point (%d points): no attribute names the processor", len(dps))
	}
	procs := map[string]bool{}
	for _, dp := range dps {
		p, _ := dp.Attributes.Value("processor")
		s, _ := dp.Attributes.Value("otel.signal")
		procs[p.AsString()] = true
		if s.AsString() != "logs" || dp.Value != 1 {
			t.Errorf("point %v = %d, want otel.signal=logs, 1", dp.Attributes.ToSlice(), dp.Value)
		}
	}
	if !procs["plegd"] || !procs["plegd/files"] {
		t.Errorf("processors named: %v, want plegd and plegd/files", procs)
	}
	if m.Unit != "{record}" {
		t.Errorf("records_placed unit %q, want {record}", m.Unit)
	}
	l, err := tel.GetMetric("otelcol_processor_plegd_lookups")
	if err == nil && l.Unit != "{lookup}" {
		t.Errorf("lookups unit %q, want {lookup}", l.Unit)
	}
}

// A meter provider and a logger core that inject a pipeline's attributes, as the
// collector's service does for each component of each pipeline.
type injectingMeterProvider struct {
	metric.MeterProvider
	dropped *[]string
}

func (p injectingMeterProvider) DropInjectedAttributes(attrs ...string) metric.MeterProvider {
	*p.dropped = append(*p.dropped, attrs...)
	return p.MeterProvider
}

type injectingCore struct {
	zapcore.Core
	dropped *[]string
}

func (c injectingCore) With(f []zapcore.Field) zapcore.Core {
	return injectingCore{Core: c.Core.With(f), dropped: c.dropped}
}

func (c injectingCore) DropInjectedAttributes(attrs ...string) zapcore.Core {
	*c.dropped = append(*c.dropped, attrs...)
	return c.Core
}

// The resolver is shared by the pipelines a processor is in: its logger and meter are
// asked to drop the attributes the collector injected for the first pipeline that
// created it (otelcol.pipeline.id, otelcol.signal), keeping the component's.
func TestTheSharedResolversTelemetryIsPipelineNeutral(t *testing.T) {
	n := newNode(t)
	tel := componenttest.NewTelemetry()
	t.Cleanup(func() { _ = tel.Shutdown(context.Background()) })
	var meterDropped, logDropped []string
	set := processortest.NewNopSettings(componentType)
	set.TelemetrySettings = tel.NewTelemetrySettings()
	set.MeterProvider = injectingMeterProvider{MeterProvider: set.MeterProvider, dropped: &meterDropped}
	set.Logger = zap.New(injectingCore{Core: zapcore.NewNopCore(), dropped: &logDropped})
	cfg := createDefaultConfig()
	cfg.Endpoint = n.f.endpoint()
	cfg.NodeName = "node-1"
	lp, err := NewFactory().CreateLogs(context.Background(), set, cfg, new(consumertest.LogsSink))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = lp.Shutdown(context.Background()) })
	for what, got := range map[string][]string{"meter provider": meterDropped, "logger": logDropped} {
		if !slices.Contains(got, "otelcol.pipeline.id") || !slices.Contains(got, "otelcol.signal") {
			t.Errorf("%s: dropped %v, want otelcol.pipeline.id and otelcol.signal", what, got)
		}
		if slices.Contains(got, "otelcol.component.id") {
			t.Errorf("%s: the component's id was dropped too", what)
		}
	}
}

// A Start that fails (here: its context already ended) does not count as started: the
// next pipeline's Start starts the shared resolver instead of taking it for running.
func TestAFailedStartIsNotHiddenFromTheOtherPipelines(t *testing.T) {
	n := newNode(t)
	cfg := createDefaultConfig()
	cfg.Endpoint = n.f.endpoint()
	cfg.NodeName = "node-1"
	set := processortest.NewNopSettings(componentType)
	lp, err := NewFactory().CreateLogs(context.Background(), set, cfg, new(consumertest.LogsSink))
	if err != nil {
		t.Fatal(err)
	}
	sink := new(consumertest.TracesSink)
	tp, err := NewFactory().CreateTraces(context.Background(), set, cfg, sink)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = lp.Shutdown(context.Background())
		_ = tp.Shutdown(context.Background())
	})
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := lp.Start(ctx, componenttest.NewNopHost()); err == nil {
		t.Fatal("Start with an ended context succeeded")
	}
	if err := tp.Start(context.Background(), componenttest.NewNopHost()); err != nil {
		t.Fatal(err)
	}
	td := ptrace.NewTraces()
	rs := td.ResourceSpans().AppendEmpty()
	rs.Resource().Attributes().PutStr("container.id", n.dbc.Id)
	rs.ScopeSpans().AppendEmpty().Spans().AppendEmpty().SetName("s")
	if err := tp.ConsumeTraces(context.Background(), td); err != nil {
		t.Fatal(err)
	}
	got := sink.AllTraces()[0].ResourceSpans().At(0).Resource().Attributes().AsRaw()
	if got["k8s.pod.name"] != "db" {
		t.Errorf("the second pipeline runs on a resolver that never started: %v", got)
	}
}

// Without node_name, $K8S_NODE_NAME or $NODE_NAME, k8s.node.name is the node plegd
// names in its snapshot (never the host name: that is the collector pod's name unless
// it runs on the host's network), and the log says so, once.
func TestWithoutANodeNameK8sNodeNameIsPlegdsNode(t *testing.T) {
	n := newNode(t)
	t.Setenv("K8S_NODE_NAME", "")
	t.Setenv("NODE_NAME", "")
	core, logs := observer.New(zapcore.InfoLevel)
	set := processortest.NewNopSettings(componentType)
	set.Logger = zap.New(core)
	cfg := createDefaultConfig()
	cfg.Endpoint = n.f.endpoint()
	f := NewFactory()
	sink := new(consumertest.LogsSink)
	lp, err := f.CreateLogs(context.Background(), set, cfg, sink)
	if err != nil {
		t.Fatal(err)
	}
	mp, err := f.CreateMetrics(context.Background(), set, cfg, new(consumertest.MetricsSink))
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []component.Component{lp, mp} {
		if err := c.Start(context.Background(), componenttest.NewNopHost()); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = c.Shutdown(context.Background()) })
	}
	if err := lp.ConsumeLogs(context.Background(), makeLogs(rec{res: map[string]any{"container.id": n.dbc.Id}})); err != nil {
		t.Fatal(err)
	}
	got := sink.AllLogs()[0].ResourceLogs().At(0).Resource().Attributes().AsRaw()
	if got["k8s.pod.name"] != "db" {
		t.Errorf("not placed: %v", got)
	}
	if v := got["k8s.node.name"]; v != "plegds-node" {
		t.Errorf("k8s.node.name = %v without a node name configured, not plegd's node", v)
	}
	if w := logs.FilterMessageSnippet("k8s.node.name comes from plegd").Len(); w != 1 {
		t.Errorf("%d log lines about k8s.node.name, want 1", w)
	}

	t.Setenv("NODE_NAME", "node-9")
	cfg2 := createDefaultConfig()
	cfg2.Endpoint = n.f.endpoint()
	if r := newResolver(cfg2, zap.NewNop(), nil); r.nodeName != "node-9" {
		t.Errorf("$NODE_NAME: node name %q", r.nodeName)
	}
}

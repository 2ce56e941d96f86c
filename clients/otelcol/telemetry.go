package plegdprocessor

import (
	"context"
	"log/slog"
	"time"

	"go.opentelemetry.io/collector/component"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
)

const scopeName = "github.com/plegd/plegd/clients/otelcol"

// The signal a batch of records belongs to (the otel.signal attribute).
type signal uint8

const (
	signalLogs signal = iota
	signalMetrics
	signalTraces
	signalProfiles
	numSignals
)

func (s signal) String() string {
	return [...]string{"logs", "metrics", "traces", "profiles"}[s]
}

// Sources of a lookup's answer (the source attribute of the lookups metric).
const (
	sourceRPC   = "rpc"   // a GetContainer call to plegd
	sourceCache = "cache" // an answer kept from one
	sourceLimit = "limit" // no call made: maxInFlight calls were already in flight
)

// telemetry is the processor's own metrics, on the collector's MeterProvider (shown
// by the collector's Prometheus endpoint as otelcol_processor_plegd_*). Every point
// carries processor=<component id>, as processorhelper's own metrics do; the records
// metrics carry otel.signal too.
type telemetry struct {
	placed   metric.Int64Counter
	unplaced metric.Int64Counter
	lookups  metric.Int64Counter
	duration metric.Float64Histogram
	// Pre-built attribute sets, so counting costs no allocation.
	placedSets   [numSignals]metric.MeasurementOption
	unplacedSets [numSignals][numReasons]metric.MeasurementOption
	lookupSets   map[string]*[numReasons]metric.MeasurementOption
	rpcSets      *[numReasons]metric.MeasurementOption
	durationSet  metric.MeasurementOption
}

// Attribute keys, as processorhelper's own metrics name them.
const (
	attrKeyProcessor = "processor"
	attrKeySignal    = "otel.signal"
)

// pipelineNeutral returns set without the attributes the collector injects for one
// pipeline (otelcol.pipeline.id, otelcol.signal) into the logger, meter and tracer
// providers it gives a component: the resolver is shared by the pipelines one
// processor is in, and its logs and metrics are the component's, not its first
// pipeline's. It uses the same duck-typed DropInjectedAttributes the collector's
// shared receivers use (go.opentelemetry.io/collector/internal/telemetry, which
// cannot be imported from outside the collector); providers without it are kept.
func pipelineNeutral(set component.TelemetrySettings) component.TelemetrySettings {
	drop := []string{"otelcol.pipeline.id", "otelcol.signal"}
	set.Logger = set.Logger.WithOptions(zap.WrapCore(func(c zapcore.Core) zapcore.Core {
		if ic, ok := c.(interface {
			DropInjectedAttributes(...string) zapcore.Core
		}); ok {
			return ic.DropInjectedAttributes(drop...)
		}
		return c
	}))
	if im, ok := set.MeterProvider.(interface {
		DropInjectedAttributes(...string) metric.MeterProvider
	}); ok {
		set.MeterProvider = im.DropInjectedAttributes(drop...)
	}
	if it, ok := set.TracerProvider.(interface {
		DropInjectedAttributes(...string) trace.TracerProvider
	}); ok {
		set.TracerProvider = it.DropInjectedAttributes(drop...)
	}
	return set
}

func newTelemetry(set component.TelemetrySettings, id component.ID) (*telemetry, error) {
	m := set.MeterProvider.Meter(scopeName)
	proc := attribute.String(attrKeyProcessor, id.String())
	t := &telemetry{lookupSets: map[string]*[numReasons]metric.MeasurementOption{}}
	var err error
	if t.placed, err = m.Int64Counter("otelcol_processor_plegd_records_placed",
		metric.WithDescription("Records (log records, spans, metric data points) given their pod's and container's attributes"),
		metric.WithUnit("{record}")); err != nil {
		return nil, err
	}
	if t.unplaced, err = m.Int64Counter("otelcol_processor_plegd_records_unplaced",
		metric.WithDescription("Records passed on unchanged, by reason: no_key (no association key on the record), "+
			"not_found (plegd knows no such container), invalid_key (plegd refused the key), "+
			"unavailable (plegd did not answer in time or is away), conflict (the record's own k8s/container "+
			"attributes name another pod or container than its key found), mixed (metrics: a found data point "+
			"of a resource whose points belong to several containers)"),
		metric.WithUnit("{record}")); err != nil {
		return nil, err
	}
	if t.lookups, err = m.Int64Counter("otelcol_processor_plegd_lookups",
		metric.WithDescription("GetContainer lookups, by source (rpc: a call to plegd; cache: an answer kept from one; "+
			"limit: no call made, too many in flight) and result"),
		metric.WithUnit("{lookup}")); err != nil {
		return nil, err
	}
	if t.duration, err = m.Float64Histogram("otelcol_processor_plegd_lookup_duration",
		metric.WithDescription("Duration of GetContainer calls to plegd"),
		metric.WithUnit("s"),
		metric.WithExplicitBucketBoundaries(0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1)); err != nil {
		return nil, err
	}
	for sig := signal(0); sig < numSignals; sig++ {
		s := attribute.String(attrKeySignal, sig.String())
		t.placedSets[sig] = metric.WithAttributeSet(attribute.NewSet(proc, s))
		for r := reason(1); r < numReasons; r++ {
			t.unplacedSets[sig][r] = metric.WithAttributeSet(attribute.NewSet(proc, s, attribute.String("reason", r.String())))
		}
	}
	for _, src := range []string{sourceRPC, sourceCache, sourceLimit} {
		var l [numReasons]metric.MeasurementOption
		for r := reason(0); r < numReasons; r++ {
			res := r.String()
			if r == placed {
				res = "found"
			}
			l[r] = metric.WithAttributeSet(attribute.NewSet(proc, attribute.String("source", src), attribute.String("result", res)))
		}
		t.lookupSets[src] = &l
	}
	t.rpcSets = t.lookupSets[sourceRPC]
	t.durationSet = metric.WithAttributeSet(attribute.NewSet(proc))
	return t, nil
}

// counts are one batch's records by outcome.
type counts [numReasons]int64

func (t *telemetry) record(ctx context.Context, sig signal, c *counts) {
	if c[placed] > 0 {
		t.placed.Add(ctx, c[placed], t.placedSets[sig])
	}
	for r := reason(1); r < numReasons; r++ {
		if c[r] > 0 {
			t.unplaced.Add(ctx, c[r], t.unplacedSets[sig][r])
		}
	}
}

func (t *telemetry) lookup(ctx context.Context, source string, why reason) {
	t.lookups.Add(ctx, 1, t.lookupSets[source][why])
}

func (t *telemetry) rpcDone(d time.Duration, why reason) {
	ctx := context.Background()
	t.lookups.Add(ctx, 1, t.rpcSets[why])
	t.duration.Record(ctx, d.Seconds(), t.durationSet)
}

// zapSlog hands the informer's reports (broken streams, resets, resyncs) to the
// collector's logger.
func zapSlog(l *zap.Logger) *slog.Logger { return slog.New(&zapHandler{l: l}) }

type zapHandler struct {
	l     *zap.Logger
	attrs []zap.Field
}

func (h *zapHandler) Enabled(_ context.Context, lv slog.Level) bool {
	return h.l.Core().Enabled(zapLevel(lv))
}

func (h *zapHandler) Handle(_ context.Context, rec slog.Record) error {
	fields := append([]zap.Field{}, h.attrs...)
	rec.Attrs(func(a slog.Attr) bool {
		fields = append(fields, zap.Any(a.Key, a.Value.Any()))
		return true
	})
	if ce := h.l.Check(zapLevel(rec.Level), "plegd informer: "+rec.Message); ce != nil {
		ce.Write(fields...)
	}
	return nil
}

func (h *zapHandler) WithAttrs(as []slog.Attr) slog.Handler {
	n := &zapHandler{l: h.l, attrs: append([]zap.Field{}, h.attrs...)}
	for _, a := range as {
		n.attrs = append(n.attrs, zap.Any(a.Key, a.Value.Any()))
	}
	return n
}

func (h *zapHandler) WithGroup(string) slog.Handler { return h }

func zapLevel(lv slog.Level) zapcore.Level {
	switch {
	case lv >= slog.LevelError:
		return zapcore.ErrorLevel
	case lv >= slog.LevelWarn:
		return zapcore.WarnLevel
	case lv >= slog.LevelInfo:
		return zapcore.InfoLevel
	default:
		return zapcore.DebugLevel
	}
}

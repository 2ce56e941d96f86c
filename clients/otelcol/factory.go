package plegdprocessor

import (
	"context"
	"sync"

	"go.opentelemetry.io/collector/component"
	"go.opentelemetry.io/collector/consumer"
	"go.opentelemetry.io/collector/consumer/xconsumer"
	"go.opentelemetry.io/collector/pdata/pprofile"
	"go.opentelemetry.io/collector/processor"
	"go.opentelemetry.io/collector/processor/processorhelper"
	"go.opentelemetry.io/collector/processor/xprocessor"
)

// TypeStr is the component type: processors: plegd: …
const TypeStr = "plegd"

var componentType = component.MustNewType(TypeStr)

// NewFactory returns the factory of the plegd processor, for logs, metrics, traces
// and profiles (an xprocessor.Factory: the collector's profiles pipelines find it).
func NewFactory() processor.Factory {
	return xprocessor.NewFactory(
		componentType,
		func() component.Config { return createDefaultConfig() },
		xprocessor.WithLogs(createLogs, component.StabilityLevelAlpha),
		xprocessor.WithMetrics(createMetrics, component.StabilityLevelAlpha),
		xprocessor.WithTraces(createTraces, component.StabilityLevelAlpha),
		xprocessor.WithProfiles(createProfiles, component.StabilityLevelDevelopment),
	)
}

// One resolver (one connection to plegd, one informer, one cache) per configured
// processor, shared by the pipelines it is in.
var (
	sharedMu sync.Mutex
	shared   = map[*Config]*sharedResolver{}
)

type sharedResolver struct {
	r       *resolver
	refs    int // processors created on it
	started int // processors started
}

func acquire(cfg *Config, set processor.Settings) (*sharedResolver, error) {
	sharedMu.Lock()
	defer sharedMu.Unlock()
	if s, ok := shared[cfg]; ok {
		s.refs++
		return s, nil
	}
	// The resolver serves every pipeline this processor is in: its logs and metrics
	// name the processor, not the pipeline that happened to create it first.
	ts := pipelineNeutral(set.TelemetrySettings)
	tel, err := newTelemetry(ts, set.ID)
	if err != nil {
		return nil, err
	}
	s := &sharedResolver{r: newResolver(cfg, ts.Logger, tel), refs: 1}
	shared[cfg] = s
	return s, nil
}

// start starts the resolver for the first of its processors to start. A failed start
// is not counted: the next processor's Start tries again (and fails the same way,
// rather than succeeding on a resolver that never started).
func (s *sharedResolver) start(ctx context.Context, cfg *Config) error {
	sharedMu.Lock()
	defer sharedMu.Unlock()
	if s.started == 0 {
		if err := s.r.start(ctx); err != nil {
			return err
		}
	}
	s.started++
	return nil
}

func (s *sharedResolver) stop(cfg *Config) {
	sharedMu.Lock()
	defer sharedMu.Unlock()
	s.refs--
	if s.refs > 0 {
		return
	}
	if shared[cfg] == s {
		delete(shared, cfg)
	}
	s.r.shutdown()
}

type plegdProcessor struct {
	cfg    *Config
	shared *sharedResolver
	r      *resolver
	keys   []assocKey
	// wantsPID: process.pid is among the keys (its calls are started ahead).
	wantsPID bool
}

func newProcessor(cfg *Config, set processor.Settings) (*plegdProcessor, error) {
	s, err := acquire(cfg, set)
	if err != nil {
		return nil, err
	}
	p := &plegdProcessor{cfg: cfg, shared: s, r: s.r}
	for _, k := range cfg.PodAssociation {
		p.keys = append(p.keys, assocKeyOf(k))
		p.wantsPID = p.wantsPID || assocKeyOf(k) == assocProcessPID
	}
	return p, nil
}

func (p *plegdProcessor) start(ctx context.Context, _ component.Host) error {
	return p.shared.start(ctx, p.cfg)
}

func (p *plegdProcessor) shutdown(context.Context) error {
	p.shared.stop(p.cfg)
	return nil
}

func options(p *plegdProcessor) []processorhelper.Option {
	return []processorhelper.Option{
		processorhelper.WithCapabilities(consumer.Capabilities{MutatesData: true}),
		processorhelper.WithStart(p.start),
		processorhelper.WithShutdown(p.shutdown),
	}
}

func createLogs(ctx context.Context, set processor.Settings, cfg component.Config, next consumer.Logs) (processor.Logs, error) {
	p, err := newProcessor(cfg.(*Config), set)
	if err != nil {
		return nil, err
	}
	return processorhelper.NewLogs(ctx, set, cfg, next, p.processLogs, options(p)...)
}

func createMetrics(ctx context.Context, set processor.Settings, cfg component.Config, next consumer.Metrics) (processor.Metrics, error) {
	p, err := newProcessor(cfg.(*Config), set)
	if err != nil {
		return nil, err
	}
	return processorhelper.NewMetrics(ctx, set, cfg, next, p.processMetrics, options(p)...)
}

// profilesProcessor places each resource of a profiles batch (the eBPF profiler's
// resources carry container.id), then hands the batch on.
type profilesProcessor struct {
	p    *plegdProcessor
	next xconsumer.Profiles
}

func (pp *profilesProcessor) Start(ctx context.Context, host component.Host) error {
	return pp.p.start(ctx, host)
}

func (pp *profilesProcessor) Shutdown(ctx context.Context) error { return pp.p.shutdown(ctx) }

func (pp *profilesProcessor) Capabilities() consumer.Capabilities {
	return consumer.Capabilities{MutatesData: true}
}

func (pp *profilesProcessor) ConsumeProfiles(ctx context.Context, pd pprofile.Profiles) error {
	pp.p.processProfiles(ctx, pd)
	return pp.next.ConsumeProfiles(ctx, pd)
}

func createProfiles(_ context.Context, set processor.Settings, cfg component.Config, next xconsumer.Profiles) (xprocessor.Profiles, error) {
	p, err := newProcessor(cfg.(*Config), set)
	if err != nil {
		return nil, err
	}
	return &profilesProcessor{p: p, next: next}, nil
}

func createTraces(ctx context.Context, set processor.Settings, cfg component.Config, next consumer.Traces) (processor.Traces, error) {
	p, err := newProcessor(cfg.(*Config), set)
	if err != nil {
		return nil, err
	}
	return processorhelper.NewTraces(ctx, set, cfg, next, p.processTraces, options(p)...)
}

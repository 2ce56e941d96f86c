package plegd

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/plegd/plegd/clients/go/plegdv1"
)

// InformerOptions configures an [Informer]. The zero value watches every pod and
// every event type with the default backoff.
type InformerOptions struct {
	// Filter selects the pods the informer holds (namespace, pod UID, pod name,
	// Kubernetes label selector over the sandbox labels); nil or empty: every pod.
	// plegd applies it, so pods outside it cost nothing on the wire.
	Filter *plegdv1.PodFilter
	// Types restricts the live events the informer receives; empty: all. The
	// snapshot is not restricted, but the copy only follows the events named: with
	// Types set, a pod can go stale between resyncs (and a pod whose removal event is
	// not among them stays in the copy until the next resync). Leave it empty unless
	// the handlers only care about the events named.
	Types []plegdv1.LifecycleEventType
	// ResyncBackoff is how long the informer waits before it opens a new stream after
	// one broke (plegd restarting, a refused connection); zero fields take the values
	// of [DefaultBackoff].
	ResyncBackoff Backoff
	// Logger receives the informer's reports: broken streams, resets, resyncs;
	// nil: slog.Default().
	Logger *slog.Logger
}

// Informer keeps a local copy of plegd's pods, kept current by plegd's Watch stream,
// and tells registered handlers about every change. It is plegd's counterpart of
// client-go's SharedIndexInformer, with an index by container ID.
//
// [Informer.Run] takes a snapshot, then follows the live events. When the stream
// breaks it reconnects with backoff and resumes after the last revision it applied,
// within the same epoch (plegd's journal), so that a restart of plegd that keeps its
// state dir loses nothing and repeats nothing. When plegd cannot resume it (a reset:
// the informer was too slow, its revision is no longer kept, plegd rebuilt its view)
// or when plegd came back with another journal (a different epoch), the informer
// takes a fresh snapshot and diffs it against its copy: pods that appeared are added,
// changed pods updated with a nil event, and pods gone are deleted with
// finalStateUnknown set.
//
// All methods are safe for concurrent use.
type Informer struct {
	client  plegdv1.PodLifecycleClient
	filter  *plegdv1.PodFilter
	types   []plegdv1.LifecycleEventType
	backoff Backoff
	log     *slog.Logger

	running atomic.Bool
	synced  atomic.Bool

	// dispatchMu makes every change to the copy and its notifications one step, so
	// that handlers run one at a time, and a handler added meanwhile sees each pod
	// once: either in the replay AddEventHandler gives it, or in a notification.
	dispatchMu sync.Mutex
	handlers   []ResourceEventHandler

	// mu guards the copy. Handlers are called without it, so they may read the copy.
	mu          sync.RWMutex
	pods        map[string]*plegdv1.PodStatus
	byContainer map[string]string
	epoch       uint64
	revision    uint64

	// resumable says the copy is complete at (epoch, revision) and a new stream may
	// resume after it; false while a snapshot is due. Only Run's goroutine uses it.
	resumable bool
}

// NewInformer returns an informer over plegd's PodLifecycle service on conn (see
// [Dial]). It does nothing until [Informer.Run] is called.
func NewInformer(conn grpc.ClientConnInterface, opts InformerOptions) *Informer {
	log := opts.Logger
	if log == nil {
		log = slog.Default()
	}
	var filter *plegdv1.PodFilter
	if opts.Filter != nil {
		filter = proto.Clone(opts.Filter).(*plegdv1.PodFilter)
	}
	return &Informer{
		client:      plegdv1.NewPodLifecycleClient(conn),
		filter:      filter,
		types:       append([]plegdv1.LifecycleEventType(nil), opts.Types...),
		backoff:     opts.ResyncBackoff.withDefaults(),
		log:         log.With("component", "plegd-informer"),
		pods:        map[string]*plegdv1.PodStatus{},
		byContainer: map[string]string{},
	}
}

// AddEventHandler registers a handler. It is first told about every pod the copy
// already holds (OnAdd, on the caller's goroutine), then about every later change
// (on the goroutine of Run). Handlers may be added before or while Run runs, but not
// from inside a handler (that deadlocks).
func (i *Informer) AddEventHandler(handler ResourceEventHandler) {
	i.dispatchMu.Lock()
	defer i.dispatchMu.Unlock()
	for _, p := range i.List() {
		handler.OnAdd(p)
	}
	i.handlers = append(i.handlers, handler)
}

// HasSynced reports whether the copy has been complete at least once: the first
// snapshot has arrived. It stays true afterwards, while the informer reconnects or
// resyncs.
func (i *Informer) HasSynced() bool {
	return i.synced.Load()
}

// List returns the pods of the copy, in no particular order. The pods are shared
// with the informer: do not modify them.
func (i *Informer) List() []*plegdv1.PodStatus {
	i.mu.RLock()
	defer i.mu.RUnlock()
	out := make([]*plegdv1.PodStatus, 0, len(i.pods))
	for _, p := range i.pods {
		out = append(out, p)
	}
	return out
}

// Get returns the pod with the given UID, if the copy holds it. The pod is shared
// with the informer: do not modify it.
func (i *Informer) Get(uid string) (*plegdv1.PodStatus, bool) {
	i.mu.RLock()
	defer i.mu.RUnlock()
	p, ok := i.pods[uid]
	return p, ok
}

// GetByContainerID returns the pod that holds the container or sandbox with the
// given ID (the full ID, as the runtime reports it), if the copy holds it. The pod
// is shared with the informer: do not modify it.
func (i *Informer) GetByContainerID(id string) (*plegdv1.PodStatus, bool) {
	i.mu.RLock()
	defer i.mu.RUnlock()
	uid, ok := i.byContainer[id]
	if !ok {
		return nil, false
	}
	p, ok := i.pods[uid]
	return p, ok
}

// Revision returns the point the copy is current to: plegd's journal epoch and the
// revision within it (the last event applied, snapshot taken or bookmark received).
// Both are 0 before the first snapshot. Revisions compare only within one epoch.
func (i *Informer) Revision() (epoch, rev uint64) {
	i.mu.RLock()
	defer i.mu.RUnlock()
	return i.epoch, i.revision
}

// Run follows plegd's Watch stream and keeps the copy current until ctx ends,
// reconnecting, resuming and resyncing by itself; it returns when ctx is done. The
// handlers run on Run's goroutine. A second Run while one is running returns at
// once; a Run after an earlier one returned carries on from the copy it left.
func (i *Informer) Run(ctx context.Context) {
	if !i.running.CompareAndSwap(false, true) {
		i.log.Warn("Run called while the informer is already running; ignored")
		return
	}
	defer i.running.Store(false)
	b := newBackoffState(i.backoff)
	for ctx.Err() == nil {
		live, err := i.watch(ctx)
		if ctx.Err() != nil {
			return
		}
		if live {
			b.reset()
		}
		var foreign *foreignEpochError
		if errors.As(err, &foreign) {
			// A snapshot of the new journal is due; no reason to wait for it.
			i.log.Info("plegd's journal changed; taking a fresh snapshot", "known_epoch", foreign.known, "epoch", foreign.got)
			continue
		}
		delay := b.delay()
		switch {
		case status.Code(err) == codes.InvalidArgument:
			i.log.Error("plegd refused the watch request; retrying", "error", err, "retry_in", delay)
		case status.Code(err) == codes.ResourceExhausted:
			i.log.Error("plegd refused another Watch stream for this uid (--max-watch-streams-per-uid); retrying", "error", err, "retry_in", delay)
		case errors.Is(err, errProtocol):
			i.log.Error("plegd's stream broke the Watch protocol; starting over with a snapshot", "error", err, "retry_in", delay)
		default:
			epoch, rev := i.Revision()
			i.log.Info("watch stream ended; reconnecting", "error", err, "retry_in", delay,
				"resume", i.resumable, "epoch", epoch, "revision", rev)
		}
		t := time.NewTimer(delay)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
	}
}

// errProtocol marks a stream that broke the Watch protocol (a plegd bug): the
// informer drops it and starts over with a snapshot.
var errProtocol = errors.New("protocol violation")

func protocolError(format string, args ...any) error {
	return fmt.Errorf("%w: %s", errProtocol, fmt.Sprintf(format, args...))
}

// foreignEpochError: plegd resumed the stream in another journal than the copy's.
type foreignEpochError struct{ known, got uint64 }

func (e *foreignEpochError) Error() string {
	return fmt.Sprintf("plegd resumed in epoch %d, not the copy's epoch %d", e.got, e.known)
}

// The phases of one stream.
type phase int

const (
	phaseOpening  phase = iota // start comes next
	phaseSnapshot              // snapshots until synced
	phaseLive                  // events and bookmarks
)

// watch opens one stream and follows it until it breaks or ctx ends. It reports
// whether the stream got as far as live events, and why it ended.
func (i *Informer) watch(ctx context.Context) (live bool, err error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	req := &plegdv1.WatchRequest{Filter: i.filter, Types: i.types}
	if i.resumable {
		req.Epoch, req.SinceRevision = i.Revision()
	}
	stream, err := i.client.Watch(ctx, req)
	if err != nil {
		return false, err
	}
	ph := phaseOpening
	var building map[string]*plegdv1.PodStatus
	// Until the stream proves otherwise, the copy must be rebuilt from a snapshot.
	fresh := func() {
		i.resumable = false
		ph = phaseSnapshot
		building = map[string]*plegdv1.PodStatus{}
	}
	for {
		m, err := stream.Recv()
		if err != nil {
			if err == io.EOF {
				err = errors.New("plegd ended the stream")
			}
			return live, err
		}
		switch k := m.GetKind().(type) {
		case *plegdv1.WatchEvent_Start:
			if ph != phaseOpening {
				i.resumable = false
				return live, protocolError("a second start on one stream")
			}
			if !k.Start.GetResumed() {
				fresh()
				continue
			}
			epoch, rev := i.Revision()
			switch {
			case !i.resumable:
				return live, protocolError("resumed after %d though the informer asked for a snapshot", m.GetRevision())
			case k.Start.GetEpoch() != epoch:
				i.resumable = false
				return live, &foreignEpochError{known: epoch, got: k.Start.GetEpoch()}
			case m.GetRevision() != rev:
				i.resumable = false
				return live, protocolError("resumed after %d, not after the informer's revision %d", m.GetRevision(), rev)
			}
			ph, live = phaseLive, true
		case *plegdv1.WatchEvent_Reset_:
			if ph == phaseOpening {
				i.resumable = false
				return live, protocolError("a reset before start")
			}
			i.log.Info("plegd reset the stream; taking a fresh snapshot",
				"reason", k.Reset_.GetReason().String(), "message", k.Reset_.GetMessage())
			fresh()
		case *plegdv1.WatchEvent_Snapshot:
			if ph != phaseSnapshot {
				i.resumable = false
				return live, protocolError("a snapshot outside a snapshot")
			}
			if p := k.Snapshot; p != nil {
				building[p.GetUid()] = p
			}
		case *plegdv1.WatchEvent_Synced:
			if ph != phaseSnapshot {
				i.resumable = false
				return live, protocolError("synced outside a snapshot")
			}
			if n := int(k.Synced.GetPods()); n != len(building) {
				i.resumable = false
				return live, protocolError("synced says %d pods after %d snapshots", n, len(building))
			}
			i.replace(building, k.Synced.GetEpoch(), m.GetRevision())
			building = nil
			i.resumable = true
			i.synced.Store(true)
			ph, live = phaseLive, true
		case *plegdv1.WatchEvent_Event:
			if ph != phaseLive {
				i.resumable = false
				return live, protocolError("event %d before synced", m.GetRevision())
			}
			i.apply(m.GetRevision(), k.Event)
		case *plegdv1.WatchEvent_Bookmark:
			if ph != phaseLive {
				i.resumable = false
				return live, protocolError("bookmark %d before synced", m.GetRevision())
			}
			i.mu.Lock()
			if m.GetRevision() > i.revision {
				i.revision = m.GetRevision()
			}
			i.mu.Unlock()
		default:
			// A kind this client does not know (a newer plegd): nothing to do.
		}
	}
}

// apply applies one live event at rev and tells the handlers.
func (i *Informer) apply(rev uint64, ev *plegdv1.LifecycleEvent) {
	i.dispatchMu.Lock()
	defer i.dispatchMu.Unlock()
	i.mu.Lock()
	if rev <= i.revision {
		// Already applied (or passed by a bookmark or snapshot): never twice.
		i.mu.Unlock()
		i.log.Debug("skipping an event at or below the copy's revision", "revision", rev, "copy", i.revision)
		return
	}
	i.revision = rev
	uid := ev.GetPodUid()
	if p := ev.GetPod(); p != nil && p.GetUid() != "" {
		uid = p.GetUid()
	}
	old, had := i.pods[uid]
	pod := ev.GetPod()
	switch {
	case pod != nil:
		i.storeLocked(uid, old, pod)
	case had:
		i.deleteLocked(uid, old)
	}
	i.mu.Unlock()
	for _, h := range i.handlers {
		switch {
		case pod != nil && had:
			h.OnUpdate(old, pod, ev)
		case pod != nil:
			h.OnAdd(pod)
		case had:
			h.OnDelete(old, false)
		}
	}
}

// replace makes pods (a complete snapshot at rev of epoch) the copy and tells the
// handlers the difference: deletions first, then additions and updates, each in
// UID order.
func (i *Informer) replace(pods map[string]*plegdv1.PodStatus, epoch, rev uint64) {
	i.dispatchMu.Lock()
	defer i.dispatchMu.Unlock()
	i.mu.Lock()
	old := i.pods
	i.pods = pods
	i.byContainer = make(map[string]string, len(pods)*3)
	for uid, p := range pods {
		i.indexLocked(uid, p)
	}
	i.epoch, i.revision = epoch, rev
	i.mu.Unlock()

	var gone, seen []string
	for uid := range old {
		if _, ok := pods[uid]; !ok {
			gone = append(gone, uid)
		}
	}
	for uid := range pods {
		seen = append(seen, uid)
	}
	sort.Strings(gone)
	sort.Strings(seen)
	added, updated := 0, 0
	for _, uid := range gone {
		for _, h := range i.handlers {
			h.OnDelete(old[uid], true)
		}
	}
	for _, uid := range seen {
		p, prev := pods[uid], old[uid]
		switch {
		case prev == nil:
			added++
			for _, h := range i.handlers {
				h.OnAdd(p)
			}
		case !proto.Equal(prev, p):
			updated++
			for _, h := range i.handlers {
				h.OnUpdate(prev, p, nil)
			}
		}
	}
	i.log.Info("synced with plegd", "epoch", epoch, "revision", rev, "pods", len(pods),
		"added", added, "updated", updated, "deleted", len(gone))
}

// storeLocked puts pod in the copy in place of old (nil: none). i.mu must be held.
func (i *Informer) storeLocked(uid string, old, pod *plegdv1.PodStatus) {
	if old != nil {
		i.unindexLocked(uid, old)
	}
	i.pods[uid] = pod
	i.indexLocked(uid, pod)
}

// deleteLocked removes pod from the copy. i.mu must be held.
func (i *Informer) deleteLocked(uid string, pod *plegdv1.PodStatus) {
	i.unindexLocked(uid, pod)
	delete(i.pods, uid)
}

func (i *Informer) indexLocked(uid string, p *plegdv1.PodStatus) {
	for _, c := range p.GetContainers() {
		if c.GetId() != "" {
			i.byContainer[c.GetId()] = uid
		}
	}
	for _, s := range p.GetSandboxes() {
		if s.GetId() != "" {
			i.byContainer[s.GetId()] = uid
		}
	}
}

func (i *Informer) unindexLocked(uid string, p *plegdv1.PodStatus) {
	drop := func(id string) {
		if i.byContainer[id] == uid {
			delete(i.byContainer, id)
		}
	}
	for _, c := range p.GetContainers() {
		drop(c.GetId())
	}
	for _, s := range p.GetSandboxes() {
		drop(s.GetId())
	}
}

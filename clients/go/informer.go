package plegd

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/connectivity"
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
// the informer read too slowly, its revision is no longer kept, plegd rebuilt its view)
// or when plegd came back with another journal (a different epoch), the informer
// takes a fresh snapshot and diffs it against its copy: pods that appeared are added,
// changed pods updated with a nil event, and pods gone are deleted with
// finalStateUnknown set.
//
// Each handler added by [Informer.AddEventHandler] is a [Registration] with its own
// buffer and goroutine, as client-go's processorListener: the stream reader applies
// a change to the copy and appends its notification to every registration's buffer,
// without waiting for any handler. A slow handler holds up neither the stream nor the
// other registrations; its notifications wait in memory (the buffer grows without
// bound; each growth past 1024 is logged).
//
// An informer runs once: Run may be called once, and when it has returned the
// informer is stopped for good.
//
// All methods are safe for concurrent use.
type Informer struct {
	client  plegdv1.PodLifecycleClient
	conn    interface{ GetState() connectivity.State } // nil unless conn reports its state
	filter  *plegdv1.PodFilter
	types   []plegdv1.LifecycleEventType
	backoff Backoff
	log     *slog.Logger

	synced atomic.Bool
	// live says the current stream follows plegd's events (what step's phase is).
	live atomic.Bool

	// dispatchMu makes every change to the copy and its hand-off to the registrations
	// one step (the hand-off never waits for a handler), so that a registration added
	// meanwhile sees each pod once: either in the replay AddEventHandler gives it, or
	// in a notification. It also guards the registrations and the informer's state.
	dispatchMu sync.Mutex
	regs       []*registration
	state      runState

	// mu guards the copy. Handlers are called without it, so they may read the copy.
	mu          sync.RWMutex
	pods        map[string]*plegdv1.PodStatus
	byContainer map[string]string
	epoch       uint64
	revision    uint64
	nodeName    string

	// resumable says the copy is complete at (epoch, revision) and a new stream may
	// resume after it; false while a snapshot is due. Only Run's goroutine uses it.
	resumable bool

	// beforeNotify, set by the tests only, is called on a registration's goroutine
	// before each handler call with the point of the copy the notification belongs to.
	beforeNotify func(h ResourceEventHandler, epoch, rev uint64)
}

// runState is where an informer is in its one run.
type runState uint8

const (
	notStarted runState = iota
	running
	stopped
)

var (
	// ErrInformerStarted is returned by a second call of [Informer.Run] (or Start): an
	// informer runs once.
	ErrInformerStarted = errors.New("plegd: the informer was already started (Run may be called once)")
	// ErrInformerStopped is returned by [Informer.AddEventHandler] once Run has
	// returned.
	ErrInformerStopped = errors.New("plegd: the informer has stopped")
	// ErrConnClosed is returned by [Informer.Run] when the gRPC connection it was
	// given has been closed: it can never watch again.
	ErrConnClosed = errors.New("plegd: the informer's gRPC connection is closed")
)

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
	i := &Informer{
		client:      plegdv1.NewPodLifecycleClient(conn),
		filter:      filter,
		types:       append([]plegdv1.LifecycleEventType(nil), opts.Types...),
		backoff:     opts.ResyncBackoff.withDefaults(),
		log:         log.With("component", "plegd-informer"),
		pods:        map[string]*plegdv1.PodStatus{},
		byContainer: map[string]string{},
	}
	if c, ok := conn.(interface{ GetState() connectivity.State }); ok {
		i.conn = c
	}
	return i
}

// AddEventHandler registers handler and returns its [Registration]. The handler is
// first told about every pod the copy already holds (OnAdd, in UID order), then about
// every later change, on the registration's own goroutine, one call at a time (see
// [ResourceEventHandler]). It may be called before Run, while Run runs, and from
// inside a handler; once Run has returned it fails with [ErrInformerStopped].
func (i *Informer) AddEventHandler(handler ResourceEventHandler) (Registration, error) {
	if handler == nil {
		return nil, errors.New("plegd: AddEventHandler: nil handler")
	}
	i.dispatchMu.Lock()
	defer i.dispatchMu.Unlock()
	if i.state == stopped {
		return nil, ErrInformerStopped
	}
	r := newRegistration(i, handler)
	i.mu.RLock()
	epoch, rev := i.epoch, i.revision
	uids := make([]string, 0, len(i.pods))
	for uid := range i.pods {
		uids = append(uids, uid)
	}
	sort.Strings(uids)
	for _, uid := range uids {
		r.push(notification{kind: noteAdd, pod: i.pods[uid], epoch: epoch, rev: rev})
	}
	i.mu.RUnlock()
	if i.synced.Load() {
		// The copy is complete: what it holds is this registration's initial list.
		r.push(notification{kind: noteSynced})
		r.markerSent = true
	}
	i.regs = append(i.regs, r)
	if i.state == running {
		r.start()
	}
	return r, nil
}

// RemoveEventHandler removes a registration of this informer, as client-go's does:
// at once, from any goroutine (the registration's own handler included), never
// waiting. After it returns no handler call begins, and the notifications still
// buffered are dropped; a call already running goes on, and the registration's Done
// channel is closed when it has returned. Removing a registration twice, or after Run
// has returned, is allowed and does nothing more; a registration of another informer
// is an error.
func (i *Informer) RemoveEventHandler(reg Registration) error {
	r, ok := reg.(*registration)
	if !ok || r == nil {
		return fmt.Errorf("plegd: RemoveEventHandler: %T is not a registration made by AddEventHandler", reg)
	}
	if r.inf != i {
		return errors.New("plegd: RemoveEventHandler: the registration belongs to another informer")
	}
	i.dispatchMu.Lock()
	i.regs = slices.DeleteFunc(i.regs, func(x *registration) bool { return x == r })
	r.halt()
	i.dispatchMu.Unlock()
	return nil
}

// HasSynced reports whether the copy has been complete at least once: the first
// snapshot has arrived. It stays true afterwards, while the informer reconnects or
// resyncs. The handlers may not have been told yet: [Registration.HasSynced] says
// that.
func (i *Informer) HasSynced() bool {
	return i.synced.Load()
}

// Live reports whether the informer's stream is live now: it follows plegd's events,
// after a resumed start or a completed snapshot. It is false while the informer
// connects, while a snapshot is under way (the first, or one after a reset), and from
// the moment a stream breaks until the next one is live. [Informer.HasSynced] says the
// copy was complete once; Live says it is current now — a pod missing from the copy
// while Live is true is one plegd does not have.
func (i *Informer) Live() bool {
	return i.live.Load()
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

// NodeName is the name of the node plegd runs on, as its last snapshot said it; empty
// until [Informer.HasSynced], and from a plegd too old to say it. A stream that resumes
// sends no snapshot, so after plegd is upgraded to one that says it, the name comes
// with the next snapshot (a reset or a new epoch); ListPods says it at any time.
func (i *Informer) NodeName() string {
	i.mu.RLock()
	defer i.mu.RUnlock()
	return i.nodeName
}

// Run follows plegd's Watch stream and keeps the copy current until ctx ends,
// reconnecting, resuming and resyncing by itself, and returns nil when ctx ends.
// Every failure of the stream (plegd down or restarting, a refused request, a
// protocol violation) is retried with backoff. Run returns an error only for what it
// cannot retry:
//   - [ErrInformerStarted], at once, when Run was called before on this informer
//     (it is still running, or has returned): an informer runs once;
//   - [ErrConnClosed] (wrapping the stream's error) when conn, a *grpc.ClientConn,
//     was closed.
//
// Before it returns, Run stops every registration: notifications still buffered are
// dropped, and handler calls in flight are waited for. Afterwards the copy stays
// readable, and AddEventHandler fails with [ErrInformerStopped].
func (i *Informer) Run(ctx context.Context) error {
	if err := i.begin(); err != nil {
		return err
	}
	defer i.end()
	b := newBackoffState(i.backoff)
	for ctx.Err() == nil {
		live, err := i.watch(ctx)
		if ctx.Err() != nil {
			return nil
		}
		if i.conn != nil && i.conn.GetState() == connectivity.Shutdown {
			i.log.Error("the gRPC connection was closed; the informer stops", "error", err)
			return fmt.Errorf("%w: %w", ErrConnClosed, err)
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
			// A cap (--max-watch-streams-per-uid), or a stream plegd ended because its
			// connection held messages unread for 10 s: the error says which.
			i.log.Error("plegd refused or ended the Watch stream; resuming", "error", err, "retry_in", delay)
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
			return nil
		case <-t.C:
		}
	}
	return nil
}

// Start is Run, in the shape of controller-runtime's Runnable (mgr.Add(inf)).
func (i *Informer) Start(ctx context.Context) error {
	return i.Run(ctx)
}

// begin marks the informer running and starts the registrations added before.
func (i *Informer) begin() error {
	i.dispatchMu.Lock()
	defer i.dispatchMu.Unlock()
	if i.state != notStarted {
		return ErrInformerStarted
	}
	i.state = running
	for _, r := range i.regs {
		r.start()
	}
	return nil
}

// end marks the informer stopped, stops every registration and waits for them.
func (i *Informer) end() {
	i.dispatchMu.Lock()
	i.state = stopped
	regs := slices.Clone(i.regs)
	for _, r := range regs {
		r.halt()
	}
	i.dispatchMu.Unlock()
	for _, r := range regs {
		<-r.done
	}
}

// watch opens one stream and follows it until it breaks or ctx ends. It reports
// whether the stream got as far as live events, and why it ended.
func (i *Informer) watch(ctx context.Context) (live bool, err error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	// Not live until this stream is, and not once it ends.
	i.live.Store(false)
	defer i.live.Store(false)
	s := &stream{resume: i.resumable}
	req := &plegdv1.WatchRequest{Filter: i.filter, Types: i.types}
	if s.resume {
		s.epoch, s.rev = i.Revision()
		req.Epoch, req.SinceRevision = s.epoch, s.rev
	}
	w, err := i.client.Watch(ctx, req)
	if err != nil {
		return false, err
	}
	for {
		m, err := w.Recv()
		if err != nil {
			if err == io.EOF {
				err = errors.New("plegd ended the stream")
			}
			// A broken stream leaves the copy as resumable as it was.
			return s.live, err
		}
		act, err := s.step(m)
		if err != nil || act == actRebuild {
			// The one place the copy stops being resumable: a snapshot is due, on this
			// stream (a start without resume, a reset) or, after a protocol violation
			// or a foreign epoch, on the next.
			i.resumable = false
		}
		if err != nil {
			return s.live, err
		}
		switch act {
		case actRebuild:
			if r := m.GetReset_(); r != nil {
				i.log.Info("plegd reset the stream; taking a fresh snapshot",
					"reason", r.GetReason().String(), "message", r.GetMessage())
			}
		case actReplace:
			i.replace(s.takeSnapshot(), m.GetSynced().GetEpoch(), m.GetRevision(), m.GetSynced().GetNodeName())
			i.resumable = true
		case actApply:
			i.apply(m.GetRevision(), m.GetEvent())
		case actAdvance:
			i.mu.Lock()
			if m.GetRevision() > i.revision {
				i.revision = m.GetRevision()
			}
			i.mu.Unlock()
		}
		// After the copy took the message in: live once it is current.
		i.live.Store(s.ph == phaseLive)
	}
}

// notifyLocked hands n to every registration. i.dispatchMu must be held.
func (i *Informer) notifyLocked(n notification) {
	for _, r := range i.regs {
		r.push(n)
	}
}

// apply applies one live event at rev and hands its notification to the
// registrations.
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
	epoch := i.epoch
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
	n := notification{epoch: epoch, rev: rev}
	switch {
	case pod != nil && had:
		n.kind, n.old, n.pod, n.ev = noteUpdate, old, pod, ev
	case pod != nil:
		n.kind, n.pod = noteAdd, pod
	case had:
		n.kind, n.pod = noteDelete, old
	default:
		return
	}
	i.notifyLocked(n)
}

// replace makes pods (a complete snapshot at rev of epoch) the copy and hands the
// registrations the difference: deletions first, then additions and updates, each in
// UID order. The first time, it also ends the initial list of every registration.
func (i *Informer) replace(pods map[string]*plegdv1.PodStatus, epoch, rev uint64, nodeName string) {
	i.dispatchMu.Lock()
	defer i.dispatchMu.Unlock()
	i.mu.Lock()
	old := i.pods
	i.pods = pods
	i.byContainer = make(map[string]string, len(pods)*3)
	for uid, p := range pods {
		i.indexLocked(uid, p)
	}
	i.epoch, i.revision, i.nodeName = epoch, rev, nodeName
	i.mu.Unlock()
	i.synced.Store(true)

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
		i.notifyLocked(notification{kind: noteDelete, pod: old[uid], unknown: true, epoch: epoch, rev: rev})
	}
	for _, uid := range seen {
		p, prev := pods[uid], old[uid]
		switch {
		case prev == nil:
			added++
			i.notifyLocked(notification{kind: noteAdd, pod: p, epoch: epoch, rev: rev})
		case !proto.Equal(prev, p):
			updated++
			i.notifyLocked(notification{kind: noteUpdate, old: prev, pod: p, epoch: epoch, rev: rev})
		}
	}
	for _, r := range i.regs {
		if !r.markerSent {
			r.push(notification{kind: noteSynced})
			r.markerSent = true
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

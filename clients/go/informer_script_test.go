package plegd_test

// The informer against a scripted server: the paths a correct plegd rarely or never
// takes (a duplicate revision, a resume into another journal, a broken protocol) are
// played here message by message.

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"

	plegd "github.com/plegd/plegd/clients/go"
	"github.com/plegd/plegd/clients/go/plegdv1"
)

// scripted serves Watch calls the test plays by hand.
type scripted struct {
	plegdv1.UnimplementedPodLifecycleServer
	calls chan *watchCall
}

type watchCall struct {
	req  *plegdv1.WatchRequest
	msgs chan *plegdv1.WatchEvent
	end  chan struct{}
}

func (s *scripted) Watch(req *plegdv1.WatchRequest, stream grpc.ServerStreamingServer[plegdv1.WatchEvent]) error {
	c := &watchCall{req: req, msgs: make(chan *plegdv1.WatchEvent, 64), end: make(chan struct{})}
	select {
	case s.calls <- c:
	case <-stream.Context().Done():
		return stream.Context().Err()
	}
	for {
		select {
		case m := <-c.msgs:
			if err := stream.Send(m); err != nil {
				return err
			}
		case <-c.end:
			// Drain what was scripted before the end.
			for {
				select {
				case m := <-c.msgs:
					if err := stream.Send(m); err != nil {
						return err
					}
				default:
					return nil
				}
			}
		case <-stream.Context().Done():
			return stream.Context().Err()
		}
	}
}

func (c *watchCall) send(ms ...*plegdv1.WatchEvent) {
	for _, m := range ms {
		c.msgs <- m
	}
}

func (c *watchCall) close() { close(c.end) }

func (s *scripted) next(t *testing.T) *watchCall {
	t.Helper()
	select {
	case c := <-s.calls:
		return c
	case <-time.After(10 * time.Second):
		t.Fatal("the informer did not open a Watch stream")
		return nil
	}
}

// Messages.
func startMsg(epoch uint64, resumed bool, after uint64) *plegdv1.WatchEvent {
	return &plegdv1.WatchEvent{Revision: after, Kind: &plegdv1.WatchEvent_Start{Start: &plegdv1.StreamStart{Epoch: epoch, Resumed: resumed}}}
}

func snap(rev uint64, p *plegdv1.PodStatus) *plegdv1.WatchEvent {
	return &plegdv1.WatchEvent{Revision: rev, Kind: &plegdv1.WatchEvent_Snapshot{Snapshot: p}}
}

func synced(rev, epoch uint64, pods uint32) *plegdv1.WatchEvent {
	return &plegdv1.WatchEvent{Revision: rev, Kind: &plegdv1.WatchEvent_Synced{Synced: &plegdv1.Synced{Epoch: epoch, Pods: pods}}}
}

func event(rev uint64, uid string, p *plegdv1.PodStatus) *plegdv1.WatchEvent {
	return &plegdv1.WatchEvent{Revision: rev, Kind: &plegdv1.WatchEvent_Event{Event: &plegdv1.LifecycleEvent{
		PodUid: uid, Type: plegdv1.LifecycleEventType_CONTAINER_STARTED, Pod: p,
	}}}
}

func bookmark(rev uint64) *plegdv1.WatchEvent {
	return &plegdv1.WatchEvent{Revision: rev, Kind: &plegdv1.WatchEvent_Bookmark{Bookmark: &plegdv1.Bookmark{}}}
}

func reset(rev uint64) *plegdv1.WatchEvent {
	return &plegdv1.WatchEvent{Revision: rev, Kind: &plegdv1.WatchEvent_Reset_{Reset_: &plegdv1.Reset{Reason: plegdv1.ResetReason_SLOW_CONSUMER}}}
}

// pod is a pod with one container whose ID and state tell its version.
func pod(uid, container string, state plegdv1.ContainerState) *plegdv1.PodStatus {
	return &plegdv1.PodStatus{Uid: uid, Name: uid, Namespace: "ns",
		Sandboxes:  []*plegdv1.SandboxInfo{{Id: "sb-" + uid, State: plegdv1.SandboxState_SANDBOX_STATE_READY}},
		Containers: []*plegdv1.ContainerInfo{{Id: container, Name: "c", State: state}},
	}
}

const running, exited = plegdv1.ContainerState_CONTAINER_STATE_RUNNING, plegdv1.ContainerState_CONTAINER_STATE_EXITED

// journal writes the handler calls as lines.
type journal struct {
	mu    sync.Mutex
	lines []string
}

func (j *journal) add(format string, args ...any) {
	j.mu.Lock()
	j.lines = append(j.lines, fmt.Sprintf(format, args...))
	j.mu.Unlock()
}

func (j *journal) take() []string {
	j.mu.Lock()
	defer j.mu.Unlock()
	out := j.lines
	j.lines = nil
	return out
}

func (j *journal) handler() plegd.ResourceEventHandler {
	return plegd.EventHandlerFuncs{
		AddFunc: func(p *plegdv1.PodStatus) { j.add("add %s", p.GetUid()) },
		UpdateFunc: func(old, p *plegdv1.PodStatus, ev *plegdv1.LifecycleEvent) {
			if ev == nil {
				j.add("update %s resync", p.GetUid())
				return
			}
			j.add("update %s %s->%s", p.GetUid(), old.GetContainers()[0].GetId(), p.GetContainers()[0].GetId())
		},
		DeleteFunc: func(p *plegdv1.PodStatus, unknown bool) { j.add("delete %s unknown=%v", p.GetUid(), unknown) },
	}
}

func serveScripted(t *testing.T) (*scripted, *grpc.ClientConn) {
	t.Helper()
	sock := filepath.Join(t.TempDir(), "s.sock")
	lis, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	s := &scripted{calls: make(chan *watchCall)}
	plegdv1.RegisterPodLifecycleServer(srv, s)
	go func() { _ = srv.Serve(lis) }()
	t.Cleanup(srv.Stop)
	conn, err := plegd.Dial(context.Background(), "unix://"+sock)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return s, conn
}

// expect waits until the informer is at revision rev of epoch and reg's handler has
// been told everything up to there, then checks the calls the journal got.
func expect(t *testing.T, j *journal, reg plegd.Registration, inf *plegd.Informer, epoch, rev uint64, want ...string) {
	t.Helper()
	waitFor(t, 5*time.Second, fmt.Sprintf("revision %d of epoch %d", rev, epoch), func() bool {
		e, r := inf.Revision()
		return e == epoch && r == rev
	})
	waitFor(t, 5*time.Second, "the handler to be told everything", func() bool { return drained(reg) })
	got := j.take()
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("handler calls:\n  %s\nwant:\n  %s", strings.Join(got, "\n  "), strings.Join(want, "\n  "))
	}
}

func expectRequest(t *testing.T, c *watchCall, since, epoch uint64) {
	t.Helper()
	if c.req.GetSinceRevision() != since || c.req.GetEpoch() != epoch {
		t.Fatalf("Watch asked since=%d epoch=%d, want since=%d epoch=%d",
			c.req.GetSinceRevision(), c.req.GetEpoch(), since, epoch)
	}
}

func TestInformerScripted(t *testing.T) {
	s, conn := serveScripted(t)
	l := &logs{}
	inf := plegd.NewInformer(conn, plegd.InformerOptions{
		Filter:        &plegdv1.PodFilter{Namespace: "ns"},
		ResyncBackoff: plegd.Backoff{Duration: 10 * time.Millisecond, Cap: 50 * time.Millisecond},
		Logger:        slog.New(l),
	})
	j := &journal{}
	reg, err := inf.AddEventHandler(j.handler())
	if err != nil {
		t.Fatal(err)
	}
	stop := runScripted(t, inf)
	defer stop()
	defer func() {
		if t.Failed() {
			t.Logf("informer log:\n%s", l)
		}
	}()
	const E, F = 1 << 60, 7

	// A snapshot, then events with a duplicate and a stale revision among them.
	c := s.next(t)
	expectRequest(t, c, 0, 0)
	if c.req.GetFilter().GetNamespace() != "ns" {
		t.Fatalf("the filter did not reach plegd: %v", c.req.GetFilter())
	}
	c.send(startMsg(E, false, 0), snap(5, pod("a", "a1", running)), snap(5, pod("d", "d1", running)), synced(5, E, 2))
	expect(t, j, reg, inf, E, 5, "add a", "add d")
	if !inf.HasSynced() {
		t.Fatal("not synced after synced")
	}
	c.send(event(6, "a", pod("a", "a2", running)), event(6, "a", pod("a", "a3", running)),
		event(4, "a", pod("a", "a4", running)), event(7, "b", pod("b", "b1", running)), event(8, "zz", nil))
	expect(t, j, reg, inf, E, 8, "update a a1->a2", "add b")
	if p, ok := inf.GetByContainerID("a2"); !ok || p.GetUid() != "a" {
		t.Fatal("GetByContainerID(a2) does not find pod a")
	}
	if _, ok := inf.GetByContainerID("a1"); ok {
		t.Fatal("GetByContainerID finds the replaced container a1")
	}
	if p, ok := inf.GetByContainerID("sb-b"); !ok || p.GetUid() != "b" {
		t.Fatal("GetByContainerID(sb-b) does not find pod b by its sandbox")
	}
	// A bookmark moves the resume point; the stream breaks.
	c.send(bookmark(11))
	expect(t, j, reg, inf, E, 11)
	c.close()

	// The resume asks for 11 of E and carries on; a delete told by plegd.
	c = s.next(t)
	expectRequest(t, c, 11, E)
	c.send(startMsg(E, true, 11), event(12, "b", nil), event(12, "d", nil))
	expect(t, j, reg, inf, E, 12, "delete b unknown=false")
	c.close()

	// plegd lost its journal and, not knowing the epoch, resumed into another one:
	// the informer must not take it, and starts over with a snapshot it diffs.
	c = s.next(t)
	expectRequest(t, c, 12, E)
	c.send(startMsg(F, true, 12), event(13, "a", pod("a", "WRONG", running)))
	c = s.next(t)
	expectRequest(t, c, 0, 0)
	c.send(startMsg(F, false, 0), snap(3, pod("a", "a9", exited)), snap(3, pod("c", "c1", running)), synced(3, F, 2))
	expect(t, j, reg, inf, F, 3, "delete d unknown=true", "update a resync", "add c")

	// A reset mid-stream: the snapshot that follows is diffed too; an unchanged pod
	// is not told again. Events of the new snapshot's revision or below are skipped.
	c.send(event(4, "c", pod("c", "c2", running)), reset(4), snap(9, pod("a", "a9", exited)), synced(9, F, 1),
		event(9, "a", pod("a", "STALE", running)), event(10, "a", pod("a", "a10", running)))
	expect(t, j, reg, inf, F, 10, "update c c1->c2", "delete c unknown=true", "update a a9->a10")

	// A stream that breaks the protocol (an event before synced) is dropped, and the
	// informer starts over with a snapshot.
	c.close()
	c = s.next(t)
	expectRequest(t, c, 10, F)
	c.send(startMsg(F, false, 0), event(11, "a", pod("a", "WRONG", running)))
	c = s.next(t)
	expectRequest(t, c, 0, 0)
	c.send(startMsg(F, false, 0), snap(11, pod("a", "a10", running)), synced(11, F, 1))
	expect(t, j, reg, inf, F, 11)

	// A handler added late is told about the pods already there, then follows.
	late := &journal{}
	lateReg, err := inf.AddEventHandler(late.handler())
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, 5*time.Second, "the late registration to sync", lateReg.HasSynced)
	if got := late.take(); strings.Join(got, ",") != "add a" {
		t.Fatalf("a late handler was told %v", got)
	}
	if n := len(inf.List()); n != 1 {
		t.Fatalf("List has %d pods, want 1", n)
	}
	c.send(event(12, "a", pod("a", "a12", running)))
	expect(t, j, reg, inf, F, 12, "update a a10->a12")
	expect(t, late, lateReg, inf, F, 12, "update a a10->a12")
}

// runScripted runs inf until the returned stop is called (or the test ends); stop
// checks that Run returned nil.
func runScripted(t *testing.T, inf *plegd.Informer) (stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- inf.Run(ctx) }()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			select {
			case err := <-done:
				if err != nil {
					t.Errorf("Run returned %v when its context ended, want nil", err)
				}
			case <-time.After(5 * time.Second):
				t.Errorf("Run did not return within 5s of its context's end")
			}
		})
	}
	t.Cleanup(stop)
	return stop
}

// counter is a handler that counts its calls, optionally taking its time or waiting
// for a gate in each, and notes any call made after it was marked removed.
type counter struct {
	calls   atomic.Int64
	delay   time.Duration
	gate    chan struct{} // if set, each call waits until it is closed
	removed atomic.Bool
	late    atomic.Int64 // calls begun after removed was set
}

func (c *counter) call() {
	if c.removed.Load() {
		c.late.Add(1)
	}
	c.calls.Add(1)
	if c.gate != nil {
		<-c.gate
	}
	time.Sleep(c.delay)
}

func (c *counter) OnAdd(*plegdv1.PodStatus)                                    { c.call() }
func (c *counter) OnUpdate(_, _ *plegdv1.PodStatus, _ *plegdv1.LifecycleEvent) { c.call() }
func (c *counter) OnDelete(*plegdv1.PodStatus, bool)                           { c.call() }

func newScriptedInformer(t *testing.T, conn *grpc.ClientConn) (*plegd.Informer, *logs) {
	l := &logs{}
	inf := plegd.NewInformer(conn, plegd.InformerOptions{
		ResyncBackoff: plegd.Backoff{Duration: 10 * time.Millisecond, Cap: 50 * time.Millisecond},
		Logger:        slog.New(l),
	})
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("informer log:\n%s", l)
		}
	})
	return inf, l
}

func mustAdd(t *testing.T, inf *plegd.Informer, h plegd.ResourceEventHandler) plegd.Registration {
	t.Helper()
	reg, err := inf.AddEventHandler(h)
	if err != nil {
		t.Fatalf("AddEventHandler: %v", err)
	}
	return reg
}

// TestSlowRegistrationScripted: one registration's handler takes 200ms a call; a
// burst of 300 events must reach the other registration at once, the stream must go
// on being read (the informer's revision follows the server), and when Run returns
// no handler is called any more.
func TestSlowRegistrationScripted(t *testing.T) {
	s, conn := serveScripted(t)
	inf, _ := newScriptedInformer(t, conn)
	fast, slow := &counter{}, &counter{delay: 200 * time.Millisecond}
	fastReg := mustAdd(t, inf, fast)
	slowReg := mustAdd(t, inf, slow)
	stop := runScripted(t, inf)
	const E, n = 3, 300
	c := s.next(t)
	c.send(startMsg(E, false, 0), synced(1, E, 0))
	waitFor(t, 5*time.Second, "both registrations to sync", func() bool { return fastReg.HasSynced() && slowReg.HasSynced() })
	began := time.Now()
	go func() {
		for k := 0; k < n; k++ {
			uid := fmt.Sprintf("p%03d", k)
			c.send(event(uint64(2+k), uid, pod(uid, uid+"-1", running)))
		}
	}()
	waitFor(t, 5*time.Second, "the informer to read the whole burst", func() bool {
		_, r := inf.Revision()
		return r == 1+n
	})
	waitFor(t, 5*time.Second, "the fast registration to be told the whole burst", func() bool {
		return fast.calls.Load() == n && drained(fastReg)
	})
	took := time.Since(began)
	sc := slow.calls.Load()
	waiting, _ := plegd.Backlog(slowReg)
	t.Logf("burst of %d read and told to the fast registration in %v; the slow one made %d calls, %d wait", n, took, sc, waiting)
	if sc > n/4 {
		t.Errorf("the slow registration made %d of %d calls in %v: its handler does not take 200ms?", sc, n, took)
	}
	if got := int(sc) + waiting; got != n {
		t.Errorf("the slow registration made %d calls and has %d waiting, want %d in all", sc, waiting, n)
	}
	// Run returns once the slow call in flight is done; the rest is dropped, and no
	// call begins afterwards.
	stop()
	slow.removed.Store(true)
	if waiting, busy := plegd.Backlog(slowReg); waiting != 0 || busy {
		t.Errorf("after Run returned, the slow registration has %d notifications waiting (in a call: %v)", waiting, busy)
	}
	if got := slow.calls.Load(); got >= n {
		t.Errorf("the slow registration was told everything (%d calls) before Run returned", got)
	}
	if _, err := inf.AddEventHandler(&counter{}); !errors.Is(err, plegd.ErrInformerStopped) {
		t.Errorf("AddEventHandler after Run returned gave %v, want ErrInformerStopped", err)
	}
	if late := slow.late.Load(); late != 0 {
		t.Errorf("the slow registration was called %d times after Run returned", late)
	}
}

// TestRemoveEventHandler removes a registration whose handler is in a call with more
// waiting: RemoveEventHandler returns at once, the registration's Done closes when that
// call ends, and the handler is never called again, while the other registration
// carries on.
func TestRemoveEventHandler(t *testing.T) {
	s, conn := serveScripted(t)
	inf, _ := newScriptedInformer(t, conn)
	j := &journal{}
	keep := mustAdd(t, inf, j.handler())
	gone := &counter{gate: make(chan struct{})}
	goneReg := mustAdd(t, inf, gone)
	never := &counter{}
	neverReg := mustAdd(t, inf, never)
	if err := inf.RemoveEventHandler(neverReg); err != nil {
		t.Fatalf("removing a registration before Run: %v", err)
	}
	runScripted(t, inf)
	const E = 5
	c := s.next(t)
	c.send(startMsg(E, false, 0), snap(1, pod("a", "a1", running)), synced(1, E, 1),
		event(2, "a", pod("a", "a2", running)), event(3, "a", pod("a", "a3", running)))
	expect(t, j, keep, inf, E, 3, "add a", "update a a1->a2", "update a a2->a3")
	// gone's handler is stuck in its first call (the add), two more wait.
	waitFor(t, 5*time.Second, "the removed handler to be in its first call", func() bool {
		waiting, busy := plegd.Backlog(goneReg)
		return busy && waiting >= 2
	})
	if err := inf.RemoveEventHandler(goneReg); err != nil {
		t.Fatalf("RemoveEventHandler: %v", err)
	}
	gone.removed.Store(true)
	select {
	case <-goneReg.Done():
		t.Fatal("Done closed while the handler was still in a call")
	default:
	}
	close(gone.gate)
	select {
	case <-goneReg.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("Done did not close after the handler's call ended")
	}
	c.send(event(4, "a", pod("a", "a4", running)), event(5, "b", pod("b", "b1", running)))
	expect(t, j, keep, inf, E, 5, "update a a3->a4", "add b")
	if n := gone.calls.Load(); n != 1 {
		t.Errorf("the removed handler made %d calls, want only the one in flight", n)
	}
	if n := gone.late.Load(); n != 0 {
		t.Errorf("the removed handler was called %d times after RemoveEventHandler returned", n)
	}
	if n := never.calls.Load(); n != 0 {
		t.Errorf("a registration removed before Run was called %d times", n)
	}
	if err := inf.RemoveEventHandler(goneReg); err != nil {
		t.Errorf("removing a registration twice: %v", err)
	}
	if err := inf.RemoveEventHandler(nil); err == nil {
		t.Error("RemoveEventHandler(nil) succeeded")
	}
	other, _ := newScriptedInformer(t, conn)
	if err := other.RemoveEventHandler(keep); err == nil {
		t.Error("an informer removed another informer's registration")
	}
}

// selfRemover removes its own registration from inside its first call.
type selfRemover struct {
	inf   *plegd.Informer
	reg   chan plegd.Registration
	err   chan error
	calls atomic.Int32
}

func (h *selfRemover) OnAdd(*plegdv1.PodStatus) {
	if h.calls.Add(1) == 1 {
		h.err <- h.inf.RemoveEventHandler(<-h.reg)
	}
}
func (h *selfRemover) OnUpdate(_, _ *plegdv1.PodStatus, _ *plegdv1.LifecycleEvent) { h.calls.Add(1) }
func (h *selfRemover) OnDelete(*plegdv1.PodStatus, bool)                           { h.calls.Add(1) }

// TestAHandlerThatRemovesItselfDoesNotHang: client-go's RemoveEventHandler may be called
// from the handler; it returns, the call ends, Done closes, and no call follows.
func TestAHandlerThatRemovesItselfDoesNotHang(t *testing.T) {
	s, conn := serveScripted(t)
	inf, _ := newScriptedInformer(t, conn)
	h := &selfRemover{inf: inf, reg: make(chan plegd.Registration, 1), err: make(chan error, 1)}
	reg := mustAdd(t, inf, h)
	h.reg <- reg
	runScripted(t, inf)
	c := s.next(t)
	c.send(startMsg(7, false, 0), snap(1, pod("a", "a1", running)), snap(1, pod("b", "b1", running)), synced(1, 7, 2),
		event(2, "a", pod("a", "a2", running)))
	select {
	case err := <-h.err:
		if err != nil {
			t.Fatalf("RemoveEventHandler from the handler: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("RemoveEventHandler called from its own handler did not return")
	}
	select {
	case <-reg.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("Done did not close after the handler's last call")
	}
	if n := h.calls.Load(); n != 1 {
		t.Errorf("the handler was called %d times; want the one that removed it", n)
	}
}

// TestRegistrationHasSynced: a registration has synced once its handler has returned
// from the OnAdd of every pod of its initial list: the first snapshot, or for one
// added later, the copy it was added to.
func TestRegistrationHasSynced(t *testing.T) {
	s, conn := serveScripted(t)
	inf, _ := newScriptedInformer(t, conn)
	early := &counter{gate: make(chan struct{})}
	earlyReg := mustAdd(t, inf, early)
	if earlyReg.HasSynced() {
		t.Fatal("a registration has synced before Run")
	}
	runScripted(t, inf)
	const E = 9
	c := s.next(t)
	c.send(startMsg(E, false, 0), snap(4, pod("a", "a1", running)), snap(4, pod("b", "b1", running)),
		snap(4, pod("c", "c1", running)), synced(4, E, 3))
	waitFor(t, 5*time.Second, "the informer to sync", inf.HasSynced)
	if earlyReg.HasSynced() {
		t.Fatal("the registration has synced while its handler is stuck in the first OnAdd")
	}
	close(early.gate)
	waitFor(t, 5*time.Second, "the registration to sync", earlyReg.HasSynced)
	if n := early.calls.Load(); n != 3 {
		t.Errorf("the registration synced after %d calls, want the 3 adds", n)
	}

	late := &counter{gate: make(chan struct{})}
	lateReg := mustAdd(t, inf, late)
	if lateReg.HasSynced() {
		t.Fatal("a registration added after sync has synced before its handler was told the copy")
	}
	close(late.gate)
	waitFor(t, 5*time.Second, "the late registration to sync", lateReg.HasSynced)
	if n := late.calls.Load(); n != 3 {
		t.Errorf("the late registration synced after %d calls, want the 3 adds of the copy", n)
	}
	if !plegd.WaitForCacheSync(context.Background(), inf.HasSynced, earlyReg.HasSynced, lateReg.HasSynced) {
		t.Error("WaitForCacheSync over the registrations failed")
	}
}

// TestRunOnce: Run returns nil when its context ends, and an error at once when it
// was called before; a stopped informer takes no handler.
func TestRunOnce(t *testing.T) {
	s, conn := serveScripted(t)
	inf, _ := newScriptedInformer(t, conn)
	reg := mustAdd(t, inf, &counter{})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- inf.Run(ctx) }()
	s.next(t) // Run is running
	if err := inf.Run(context.Background()); !errors.Is(err, plegd.ErrInformerStarted) {
		t.Errorf("a second Run while the first runs returned %v, want ErrInformerStarted", err)
	}
	if err := inf.Start(context.Background()); !errors.Is(err, plegd.ErrInformerStarted) {
		t.Errorf("Start while Run runs returned %v, want ErrInformerStarted", err)
	}
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("Run returned %v when its context ended, want nil", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Run did not return within 5s of its context's end")
	}
	if err := inf.Run(context.Background()); !errors.Is(err, plegd.ErrInformerStarted) {
		t.Errorf("Run after Run returned gave %v, want ErrInformerStarted", err)
	}
	if _, err := inf.AddEventHandler(&counter{}); !errors.Is(err, plegd.ErrInformerStopped) {
		t.Errorf("AddEventHandler after Run returned gave %v, want ErrInformerStopped", err)
	}
	if err := inf.RemoveEventHandler(reg); err != nil {
		t.Errorf("RemoveEventHandler after Run returned: %v", err)
	}
	if _, err := inf.AddEventHandler(nil); err == nil {
		t.Error("AddEventHandler(nil) succeeded")
	}

	// A context already ended: nil at once.
	idle, _ := newScriptedInformer(t, conn)
	ended, end := context.WithCancel(context.Background())
	end()
	if err := idle.Start(ended); err != nil {
		t.Errorf("Start with an ended context returned %v, want nil", err)
	}
}

// TestRunConnClosed: a closed connection is the one stream failure Run cannot retry.
func TestRunConnClosed(t *testing.T) {
	s, conn := serveScripted(t)
	inf, _ := newScriptedInformer(t, conn)
	done := make(chan error, 1)
	go func() { done <- inf.Run(context.Background()) }()
	c := s.next(t)
	c.send(startMsg(1, false, 0), synced(1, 1, 0))
	waitFor(t, 5*time.Second, "the informer to sync", inf.HasSynced)
	conn.Close()
	select {
	case err := <-done:
		if !errors.Is(err, plegd.ErrConnClosed) {
			t.Errorf("Run on a closed connection returned %v, want ErrConnClosed", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Run did not return within 5s of its connection's close")
	}
}

func TestDialTargets(t *testing.T) {
	ctx := context.Background()
	for _, ok := range []string{"unix:///run/plegd/plegd.sock", "/run/plegd/plegd.sock", "unix:rel.sock"} {
		conn, err := plegd.Dial(ctx, ok)
		if err != nil {
			t.Errorf("Dial(%q): %v", ok, err)
			continue
		}
		conn.Close()
	}
	for _, bad := range []string{"localhost:9477", "dns:///x", "unix://", "unix://rel.sock", "unix:", ""} {
		if conn, err := plegd.Dial(ctx, bad); err == nil {
			conn.Close()
			t.Errorf("Dial(%q) did not refuse a target that is not a unix socket", bad)
		}
	}
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := plegd.Dial(cctx, "unix:///x"); err == nil {
		t.Error("Dial with a cancelled context succeeded")
	}
}

// TestLiveFollowsTheStream: Live is true exactly while the stream follows plegd's
// events — not before the first snapshot completes, not from a reset until the new
// snapshot is complete, not once the stream breaks — and true again on a resume.
func TestLiveFollowsTheStream(t *testing.T) {
	s, conn := serveScripted(t)
	inf, _ := newScriptedInformer(t, conn)
	if inf.Live() {
		t.Fatal("live before Run")
	}
	stop := runScripted(t, inf)
	defer stop()
	const E = 3

	c := s.next(t)
	c.send(startMsg(E, false, 0), snap(5, pod("a", "a1", running)))
	if inf.Live() {
		t.Fatal("live before the snapshot is complete")
	}
	c.send(synced(5, E, 1))
	waitFor(t, 5*time.Second, "live after synced", inf.Live)
	if e, r := inf.Revision(); e != E || r != 5 {
		t.Fatalf("live before the copy took the snapshot: at %d/%d", e, r)
	}

	// A reset: not live until the new snapshot is complete.
	c.send(reset(6))
	waitFor(t, 5*time.Second, "not live after a reset", func() bool { return !inf.Live() })
	c.send(snap(7, pod("a", "a2", running)), synced(7, E, 1))
	waitFor(t, 5*time.Second, "live after the new snapshot", inf.Live)

	// The stream breaks: not live until the next one resumes.
	c.close()
	waitFor(t, 5*time.Second, "not live after the stream broke", func() bool { return !inf.Live() })
	c = s.next(t)
	expectRequest(t, c, 7, E)
	c.send(startMsg(E, true, 7))
	waitFor(t, 5*time.Second, "live after a resume", inf.Live)
}

package plegd_test

// The informer against a scripted server: the paths a correct plegd rarely or never
// takes (a duplicate revision, a resume into another journal, a broken protocol) are
// played here message by message.

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"path/filepath"
	"strings"
	"sync"
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

func expect(t *testing.T, j *journal, inf *plegd.Informer, epoch, rev uint64, want ...string) {
	t.Helper()
	waitFor(t, 5*time.Second, fmt.Sprintf("revision %d of epoch %d", rev, epoch), func() bool {
		e, r := inf.Revision()
		return e == epoch && r == rev
	})
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
	inf.AddEventHandler(j.handler())
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { inf.Run(ctx); close(done) }()
	defer func() { cancel(); <-done }()
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
	expect(t, j, inf, E, 5, "add a", "add d")
	if !inf.HasSynced() {
		t.Fatal("not synced after synced")
	}
	c.send(event(6, "a", pod("a", "a2", running)), event(6, "a", pod("a", "a3", running)),
		event(4, "a", pod("a", "a4", running)), event(7, "b", pod("b", "b1", running)), event(8, "zz", nil))
	expect(t, j, inf, E, 8, "update a a1->a2", "add b")
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
	expect(t, j, inf, E, 11)
	c.close()

	// The resume asks for 11 of E and carries on; a delete told by plegd.
	c = s.next(t)
	expectRequest(t, c, 11, E)
	c.send(startMsg(E, true, 11), event(12, "b", nil), event(12, "d", nil))
	expect(t, j, inf, E, 12, "delete b unknown=false")
	c.close()

	// plegd lost its journal and, not knowing the epoch, resumed into another one:
	// the informer must not take it, and starts over with a snapshot it diffs.
	c = s.next(t)
	expectRequest(t, c, 12, E)
	c.send(startMsg(F, true, 12), event(13, "a", pod("a", "WRONG", running)))
	c = s.next(t)
	expectRequest(t, c, 0, 0)
	c.send(startMsg(F, false, 0), snap(3, pod("a", "a9", exited)), snap(3, pod("c", "c1", running)), synced(3, F, 2))
	expect(t, j, inf, F, 3, "delete d unknown=true", "update a resync", "add c")

	// A reset mid-stream: the snapshot that follows is diffed too; an unchanged pod
	// is not told again. Events of the new snapshot's revision or below are skipped.
	c.send(event(4, "c", pod("c", "c2", running)), reset(4), snap(9, pod("a", "a9", exited)), synced(9, F, 1),
		event(9, "a", pod("a", "STALE", running)), event(10, "a", pod("a", "a10", running)))
	expect(t, j, inf, F, 10, "update c c1->c2", "delete c unknown=true", "update a a9->a10")

	// A stream that breaks the protocol (an event before synced) is dropped, and the
	// informer starts over with a snapshot.
	c.close()
	c = s.next(t)
	expectRequest(t, c, 10, F)
	c.send(startMsg(F, false, 0), event(11, "a", pod("a", "WRONG", running)))
	c = s.next(t)
	expectRequest(t, c, 0, 0)
	c.send(startMsg(F, false, 0), snap(11, pod("a", "a10", running)), synced(11, F, 1))
	expect(t, j, inf, F, 11)
	if l.count("protocol") == 0 {
		t.Error("the protocol violation was not logged")
	}

	// A handler added late is told about the pods already there.
	late := &journal{}
	inf.AddEventHandler(late.handler())
	if got := late.take(); strings.Join(got, ",") != "add a" {
		t.Fatalf("a late handler was told %v", got)
	}
	if n := len(inf.List()); n != 1 {
		t.Fatalf("List has %d pods, want 1", n)
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

package plegd_test

// These tests run the informer against a real plegd: `plegd sim` serves a simulated
// CRI runtime with pod churn, `plegd run` watches it, and the tests kill, restart and
// starve plegd while informers follow it. The plegd binary comes from PLEGD_BIN, or
// from the repository's target directory; without one the tests fail (build it with
// `cargo build` in the repository root).

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"

	plegd "github.com/plegd/plegd/clients/go"
	"github.com/plegd/plegd/clients/go/plegdv1"
)

// --- the plegd binary and its processes -------------------------------------------

var (
	binOnce sync.Once
	binPath string
	binErr  error
	binHelp string
)

// plegdBinary finds the plegd binary, failing the test loudly without one.
func plegdBinary(t *testing.T) string {
	t.Helper()
	binOnce.Do(func() {
		candidates := []string{os.Getenv("PLEGD_BIN")}
		if candidates[0] == "" {
			candidates = []string{"../../target/debug/plegd", "../../target/release/plegd"}
		}
		for _, c := range candidates {
			if st, err := os.Stat(c); err == nil && !st.IsDir() {
				binPath, _ = filepath.Abs(c)
				break
			}
		}
		if binPath == "" {
			binErr = fmt.Errorf("no plegd binary (looked at %s): set PLEGD_BIN=/path/to/plegd, or build it with "+
				"`cargo build` in the repository root (it lands in target/debug/plegd)", strings.Join(candidates, ", "))
			return
		}
		out, err := exec.Command(binPath, "run", "--help").CombinedOutput()
		if err != nil {
			binErr = fmt.Errorf("%s run --help: %v\n%s", binPath, err, out)
		}
		binHelp = string(out)
	})
	if binErr != nil {
		t.Fatalf("cannot run the tests against a real plegd: %v", binErr)
	}
	return binPath
}

// proc is a child process whose output goes to a file.
type proc struct {
	name string
	cmd  *exec.Cmd
	log  string
	done chan struct{}
}

func start(t *testing.T, name, logPath, bin string, args ...string) *proc {
	t.Helper()
	f, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	fmt.Fprintf(f, "=== %s %s\n", bin, strings.Join(args, " "))
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = f, f
	if err := cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", name, err)
	}
	p := &proc{name: name, cmd: cmd, log: logPath, done: make(chan struct{})}
	go func() { _ = cmd.Wait(); close(p.done) }()
	t.Cleanup(func() { p.kill() })
	return p
}

// kill ends the process with SIGKILL and waits for it.
func (p *proc) kill() {
	select {
	case <-p.done:
		return
	default:
	}
	_ = p.cmd.Process.Signal(syscall.SIGKILL)
	<-p.done
}

func (p *proc) signal(t *testing.T, s syscall.Signal) {
	t.Helper()
	if err := p.cmd.Process.Signal(s); err != nil {
		t.Fatalf("signal %s: %v", p.name, err)
	}
}

// cluster is one simulated runtime and the plegd watching it.
type cluster struct {
	t       *testing.T
	bin     string
	dir     string
	criSock string
	apiSock string
	sim     *proc
	plegd   *proc
	runs    int
	conn    *grpc.ClientConn
	client  plegdv1.PodLifecycleClient
}

func newCluster(t *testing.T, pods, churnPerSec int) *cluster {
	bin := plegdBinary(t)
	dir := t.TempDir()
	c := &cluster{t: t, bin: bin, dir: dir, criSock: filepath.Join(dir, "cri.sock"), apiSock: filepath.Join(dir, "plegd.sock")}
	c.sim = start(t, "plegd sim", filepath.Join(dir, "sim.log"), bin, "sim", "--log-level", "plegd::sim=debug",
		"--listen", "unix://"+c.criSock, "--pods", fmt.Sprint(pods), "--churn-per-sec", fmt.Sprint(churnPerSec))
	waitFor(t, 10*time.Second, "the simulated runtime's socket", func() bool {
		_, err := os.Stat(c.criSock)
		return err == nil
	})
	conn, err := plegd.Dial(context.Background(), "unix://"+c.apiSock)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	c.conn, c.client = conn, plegdv1.NewPodLifecycleClient(conn)
	t.Cleanup(func() {
		if t.Failed() {
			for _, l := range []string{"sim.log", "plegd.log"} {
				b, _ := os.ReadFile(filepath.Join(dir, l))
				if len(b) > 6000 {
					b = b[len(b)-6000:]
				}
				t.Logf("--- tail of %s:\n%s", l, b)
			}
		}
	})
	return c
}

// replaced counts the pods the simulated runtime's churn has replaced so far (its log
// says each).
func (c *cluster) replaced() int {
	b, _ := os.ReadFile(filepath.Join(c.dir, "sim.log"))
	return bytes.Count(b, []byte("churn replaced a pod"))
}

// churnWhileAway waits until the runtime has replaced n more pods: changes plegd,
// killed, must report as events once it is back.
func (c *cluster) churnWhileAway(n int) {
	c.t.Helper()
	from := c.replaced()
	waitFor(c.t, 20*time.Second, fmt.Sprintf("the runtime to replace %d pods", n), func() bool {
		return c.replaced() >= from+n
	})
}

// startPlegd runs plegd on stateDir (relative to the cluster's directory) and waits
// until it serves the first relist's pods.
func (c *cluster) startPlegd(stateDir string, extra ...string) {
	t := c.t
	t.Helper()
	c.runs++
	args := []string{"run",
		"--runtime-endpoint", "unix://" + c.criSock,
		"--listen", "unix://" + c.apiSock,
		"--admin-addr", "127.0.0.1:0",
		"--state-dir", filepath.Join(c.dir, stateDir),
		"--relist-period", "100ms",
	}
	if strings.Contains(binHelp, "--debug-addr") {
		args = append(args, "--debug-addr", "127.0.0.1:0")
	}
	args = append(args, extra...)
	c.plegd = start(t, "plegd run", filepath.Join(c.dir, "plegd.log"), c.bin, args...)
	waitFor(t, 20*time.Second, "plegd to serve its first relist", func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		r, err := c.client.ListPods(ctx, &plegdv1.ListPodsRequest{})
		return err == nil && len(r.GetPods()) > 0
	})
}

func (c *cluster) listPods(filter *plegdv1.PodFilter) *plegdv1.ListPodsResponse {
	c.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	r, err := c.client.ListPods(ctx, &plegdv1.ListPodsRequest{Filter: filter})
	if err != nil {
		c.t.Fatalf("ListPods: %v", err)
	}
	return r
}

// quiesce stops the churn (the simulated runtime is frozen with SIGSTOP) and waits
// until plegd's revision has stood still for a while.
func (c *cluster) quiesce() {
	t := c.t
	t.Helper()
	c.sim.signal(t, syscall.SIGSTOP)
	last, since := uint64(0), time.Now()
	waitFor(t, 30*time.Second, "plegd to go quiet", func() bool {
		r := c.listPods(nil).GetRevision()
		if r != last {
			last, since = r, time.Now()
		}
		return time.Since(since) > 1500*time.Millisecond
	})
}

func waitFor(t *testing.T, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", timeout, what)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// --- a recording handler ------------------------------------------------------------

// recorder is an event handler that rebuilds the pods from its notifications alone
// and checks each notification against what came before. The informer's test hook
// (plegd.SetNotifyHook) tells it, before each call, the revision the call belongs to.
type recorder struct {
	name  string
	stall func(n int) time.Duration // how long to block in the n-th notification

	busy atomic.Int32

	mu             sync.Mutex
	epoch, rev     uint64 // of the call in progress, from the hook
	pods           map[string]*plegdv1.PodStatus
	calls          int
	adds           int
	updates        int
	resyncUpdates  int
	deletes        int
	unknownDeletes int
	lastLive       map[uint64]uint64 // epoch → revision of the last event-driven call
	lastAny        map[uint64]uint64 // epoch → revision of the last call of any kind
	died           int
	seq            []string // every call, in order: kind, pod, revision
	errs           []string
}

func newRecorder(name string) *recorder {
	return &recorder{name: name, pods: map[string]*plegdv1.PodStatus{}, lastLive: map[uint64]uint64{}, lastAny: map[uint64]uint64{}}
}

// notifyHook passes the revision of each notification to the recorder it is for.
func notifyHook(h plegd.ResourceEventHandler, epoch, rev uint64) {
	if r, ok := h.(*recorder); ok {
		r.mu.Lock()
		r.epoch, r.rev = epoch, rev
		r.mu.Unlock()
	}
}

func (r *recorder) failf(format string, args ...any) {
	if len(r.errs) < 20 {
		r.errs = append(r.errs, fmt.Sprintf(format, args...))
	}
}

// enter checks that notifications never overlap and applies the stall.
func (r *recorder) enter() func() {
	if n := r.busy.Add(1); n != 1 {
		r.mu.Lock()
		r.failf("%d notifications at once", n)
		r.mu.Unlock()
	}
	r.mu.Lock()
	r.calls++
	n := r.calls
	r.mu.Unlock()
	if r.stall != nil {
		if d := r.stall(n); d > 0 {
			time.Sleep(d)
		}
	}
	return func() { r.busy.Add(-1) }
}

// revision checks the order of notifications: in one epoch they never go back, and
// those that carry an event (live: an update with its event, a delete told by plegd)
// each come at a revision of their own. r.mu must be held.
func (r *recorder) revision(live bool, what string) {
	epoch, rev := r.epoch, r.rev
	r.seq = append(r.seq, fmt.Sprintf("%s @%d/%d", what, epoch, rev))
	if rev < r.lastAny[epoch] {
		r.failf("%s at revision %d after a notification at %d (epoch %d)", what, rev, r.lastAny[epoch], epoch)
	}
	r.lastAny[epoch] = rev
	if live {
		if rev <= r.lastLive[epoch] {
			r.failf("%s at revision %d, not after the last event at %d (epoch %d): a revision twice", what, rev, r.lastLive[epoch], epoch)
		}
		r.lastLive[epoch] = rev
	}
}

func (r *recorder) OnAdd(pod *plegdv1.PodStatus) {
	defer r.enter()()
	r.mu.Lock()
	defer r.mu.Unlock()
	r.adds++
	r.revision(false, "OnAdd "+pod.GetUid())
	if _, ok := r.pods[pod.GetUid()]; ok {
		r.failf("OnAdd of %s, which was already added", pod.GetUid())
	}
	r.pods[pod.GetUid()] = pod
}

func (r *recorder) OnUpdate(old, pod *plegdv1.PodStatus, ev *plegdv1.LifecycleEvent) {
	defer r.enter()()
	r.mu.Lock()
	defer r.mu.Unlock()
	r.updates++
	if ev == nil {
		r.resyncUpdates++
	} else {
		if ev.GetPod() != pod || ev.GetPodUid() != pod.GetUid() {
			r.failf("OnUpdate of %s with an event about %s", pod.GetUid(), ev.GetPodUid())
		}
		if ev.GetType() == plegdv1.LifecycleEventType_CONTAINER_DIED {
			r.died++
		}
	}
	r.revision(ev != nil, "OnUpdate "+pod.GetUid())
	prev, ok := r.pods[pod.GetUid()]
	switch {
	case !ok:
		r.failf("OnUpdate of %s, which was never added", pod.GetUid())
	case prev != old && !proto.Equal(prev, old):
		r.failf("OnUpdate of %s: old is not the state last told", pod.GetUid())
	}
	if old.GetUid() != pod.GetUid() {
		r.failf("OnUpdate from %s to %s", old.GetUid(), pod.GetUid())
	}
	r.pods[pod.GetUid()] = pod
}

func (r *recorder) OnDelete(pod *plegdv1.PodStatus, finalStateUnknown bool) {
	defer r.enter()()
	r.mu.Lock()
	defer r.mu.Unlock()
	r.deletes++
	if finalStateUnknown {
		r.unknownDeletes++
	}
	r.revision(!finalStateUnknown, "OnDelete "+pod.GetUid())
	if _, ok := r.pods[pod.GetUid()]; !ok {
		r.failf("OnDelete of %s, which was never added", pod.GetUid())
	}
	delete(r.pods, pod.GetUid())
}

type counts struct{ calls, adds, updates, resyncUpdates, deletes, unknownDeletes, died int }

// live is how many calls carried an event of their own.
func (n counts) live() int { return n.updates - n.resyncUpdates + n.deletes - n.unknownDeletes }

func (r *recorder) counts() counts {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.countsLocked()
}

func (r *recorder) countsLocked() counts {
	return counts{r.calls, r.adds, r.updates, r.resyncUpdates, r.deletes, r.unknownDeletes, r.died}
}

// --- a spy on the Watch streams of a connection -------------------------------------

// watchSpy is a gRPC client interceptor that counts what goes over the Watch streams
// of its connection: the calls, those that asked for a snapshot instead of a resume,
// the snapshots plegd completed (synced) and the resets it sent. stall, if set, blocks the n-th receive (so the informer
// stops reading its stream) for the duration it returns.
type watchSpy struct {
	stall         func(n int64) time.Duration
	recvs         atomic.Int64
	calls         atomic.Int64
	snapshotAsks  atomic.Int64
	synceds       atomic.Int64
	resets        atomic.Int64
	slowConsumers atomic.Int64
}

func (s *watchSpy) interceptor(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string,
	streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
	cs, err := streamer(ctx, desc, cc, method, opts...)
	if err != nil || method != plegdv1.PodLifecycle_Watch_FullMethodName {
		return cs, err
	}
	return &spiedStream{ClientStream: cs, spy: s}, nil
}

type spiedStream struct {
	grpc.ClientStream
	spy *watchSpy
}

func (w *spiedStream) SendMsg(m any) error {
	if r, ok := m.(*plegdv1.WatchRequest); ok {
		w.spy.calls.Add(1)
		if r.GetSinceRevision() == 0 {
			w.spy.snapshotAsks.Add(1)
		}
	}
	return w.ClientStream.SendMsg(m)
}

func (w *spiedStream) RecvMsg(m any) error {
	n := w.spy.recvs.Add(1)
	if w.spy.stall != nil {
		if d := w.spy.stall(n); d > 0 {
			time.Sleep(d)
		}
	}
	err := w.ClientStream.RecvMsg(m)
	if e, ok := m.(*plegdv1.WatchEvent); ok && err == nil && e.GetSynced() != nil {
		w.spy.synceds.Add(1)
	}
	if e, ok := m.(*plegdv1.WatchEvent); ok && err == nil && e.GetReset_() != nil {
		w.spy.resets.Add(1)
		if e.GetReset_().GetReason() == plegdv1.ResetReason_SLOW_CONSUMER {
			w.spy.slowConsumers.Add(1)
		}
	}
	return err
}

// --- log capture --------------------------------------------------------------------

// logs collects an informer's log records, to show when a test fails.
type logs struct {
	mu   sync.Mutex
	recs []string
}

func (l *logs) Enabled(context.Context, slog.Level) bool { return true }
func (l *logs) WithAttrs([]slog.Attr) slog.Handler       { return l }
func (l *logs) WithGroup(string) slog.Handler            { return l }
func (l *logs) Handle(_ context.Context, r slog.Record) error {
	var b bytes.Buffer
	fmt.Fprintf(&b, "%s %s %s", r.Time.Format("15:04:05.000"), r.Level, r.Message)
	r.Attrs(func(a slog.Attr) bool { fmt.Fprintf(&b, " %s=%v", a.Key, a.Value); return true })
	l.mu.Lock()
	l.recs = append(l.recs, b.String())
	l.mu.Unlock()
	return nil
}

func (l *logs) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return strings.Join(l.recs, "\n")
}

// --- a running informer -------------------------------------------------------------

// subject is an informer under test, on a connection of its own with a watchSpy,
// and the recorder of its first registration.
type subject struct {
	t      *testing.T
	name   string
	filter *plegdv1.PodFilter
	inf    *plegd.Informer
	spy    *watchSpy
	rec    *recorder
	reg    plegd.Registration
	logs   *logs
	cancel context.CancelFunc
	done   chan struct{}
	runErr error
}

// informer makes an informer (not running yet) whose stream stalls as spy.stall says.
func (c *cluster) informer(name string, filter *plegdv1.PodFilter, stall func(int64) time.Duration) *subject {
	t := c.t
	spy := &watchSpy{stall: stall}
	conn, err := plegd.Dial(context.Background(), "unix://"+c.apiSock, grpc.WithStreamInterceptor(spy.interceptor))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	l := &logs{}
	inf := plegd.NewInformer(conn, plegd.InformerOptions{
		Filter:        filter,
		ResyncBackoff: plegd.Backoff{Duration: 50 * time.Millisecond, Cap: time.Second},
		Logger:        slog.New(l),
	})
	plegd.SetNotifyHook(inf, notifyHook)
	s := &subject{t: t, name: name, filter: filter, inf: inf, spy: spy, logs: l, done: make(chan struct{})}
	t.Cleanup(func() {
		if t.Failed() || os.Getenv("PLEGD_TEST_LOGS") != "" {
			t.Logf("--- informer %s log:\n%s", name, l)
		}
	})
	return s
}

// handle registers rec; the first one registered is the subject's.
func (s *subject) handle(rec *recorder) plegd.Registration {
	reg, err := s.inf.AddEventHandler(rec)
	if err != nil {
		s.t.Fatalf("AddEventHandler: %v", err)
	}
	if s.rec == nil {
		s.rec, s.reg = rec, reg
	}
	return reg
}

// run starts the informer and waits until its first registration has synced.
func (s *subject) run() {
	t := s.t
	ctx, cancel := context.WithCancel(context.Background())
	s.cancel = cancel
	go func() { s.runErr = s.inf.Run(ctx); close(s.done) }()
	t.Cleanup(s.stop)
	waitFor(t, 20*time.Second, "informer "+s.name+" and its handler to sync", func() bool {
		return s.inf.HasSynced() && s.reg.HasSynced()
	})
}

// stop ends Run and checks that it returned nil.
func (s *subject) stop() {
	s.cancel()
	select {
	case <-s.done:
	case <-time.After(10 * time.Second):
		s.t.Fatalf("informer %s: Run did not return within 10s of its context's end", s.name)
	}
	if s.runErr != nil {
		s.t.Errorf("informer %s: Run returned %v when its context ended, want nil", s.name, s.runErr)
	}
}

// drained reports whether reg's handler has been told everything the informer has
// applied so far.
func drained(reg plegd.Registration) bool {
	waiting, busy := plegd.Backlog(reg)
	return waiting == 0 && !busy
}

// runInformer starts an informer with one recording handler and waits until it has
// synced.
func (c *cluster) runInformer(name string, filter *plegdv1.PodFilter, stall func(int) time.Duration) *subject {
	s := c.informer(name, filter, nil)
	rec := newRecorder(name)
	rec.stall = stall
	s.handle(rec)
	s.run()
	return s
}

// reached waits until the informer's copy is current to the revision plegd is at
// now (bookmarks bring a filtered informer there too).
func (c *cluster) reached(s *subject, timeout time.Duration) {
	c.t.Helper()
	lp := c.listPods(nil)
	waitFor(c.t, timeout, fmt.Sprintf("informer %s to reach revision %d of epoch %d", s.name, lp.GetRevision(), lp.GetEpoch()), func() bool {
		e, r := s.inf.Revision()
		return e == lp.GetEpoch() && r >= lp.GetRevision()
	})
}

// containerStates sums up a pod for comparison: its containers and sandboxes with
// their states.
func containerStates(p *plegdv1.PodStatus) string {
	var parts []string
	for _, c := range p.GetContainers() {
		parts = append(parts, fmt.Sprintf("%s:%s", c.GetId(), c.GetState()))
	}
	for _, s := range p.GetSandboxes() {
		parts = append(parts, fmt.Sprintf("sandbox %s:%s", s.GetId(), s.GetState()))
	}
	sort.Strings(parts)
	return strings.Join(parts, " ")
}

// diffPods compares two sets of pods by UID and container states; "" when equal.
func diffPods(what string, got, want map[string]*plegdv1.PodStatus) string {
	var out []string
	for uid, w := range want {
		g, ok := got[uid]
		switch {
		case !ok:
			out = append(out, fmt.Sprintf("%s lacks pod %s (%s/%s)", what, uid, w.GetNamespace(), w.GetName()))
		case containerStates(g) != containerStates(w):
			out = append(out, fmt.Sprintf("%s: pod %s (%s/%s) has\n    %s\n  instead of\n    %s",
				what, uid, w.GetNamespace(), w.GetName(), containerStates(g), containerStates(w)))
		}
	}
	for uid, g := range got {
		if _, ok := want[uid]; !ok {
			out = append(out, fmt.Sprintf("%s has pod %s (%s/%s) too many", what, uid, g.GetNamespace(), g.GetName()))
		}
	}
	sort.Strings(out)
	return strings.Join(out, "\n")
}

func byUID(pods []*plegdv1.PodStatus) map[string]*plegdv1.PodStatus {
	m := make(map[string]*plegdv1.PodStatus, len(pods))
	for _, p := range pods {
		m[p.GetUid()] = p
	}
	return m
}

// verify checks, once plegd is quiet, that the informer's copy is plegd's (ListPods
// with the same filter), that its first registration has been told everything and
// the copy that handler rebuilt is the informer's, that the container index finds
// every pod, and that no handler check failed. It stops the informer.
func (c *cluster) verify(s *subject) {
	t := c.t
	t.Helper()
	var last string
	deadline := time.Now().Add(15 * time.Second)
	for {
		lp := c.listPods(s.filter)
		epoch, _ := s.inf.Revision()
		last = diffPods("informer "+s.name, byUID(s.inf.List()), byUID(lp.GetPods()))
		if epoch != lp.GetEpoch() {
			last = fmt.Sprintf("informer %s is in epoch %d, plegd in %d\n%s", s.name, epoch, lp.GetEpoch(), last)
		}
		if last == "" && !drained(s.reg) {
			waiting, busy := plegd.Backlog(s.reg)
			last = fmt.Sprintf("informer %s's handler has %d notifications waiting (in a call: %v)", s.name, waiting, busy)
		}
		if last == "" {
			// The cache and the copy should agree on more than container states.
			for _, p := range lp.GetPods() {
				if g, _ := s.inf.Get(p.GetUid()); !proto.Equal(g, p) {
					t.Errorf("informer %s: pod %s differs from ListPods beyond container states:\n  informer %v\n  plegd    %v",
						s.name, p.GetUid(), g, p)
				}
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the informer's copy does not match plegd's ListPods:\n%s", last)
		}
		time.Sleep(200 * time.Millisecond)
	}
	s.stop()
	s.rec.mu.Lock()
	defer s.rec.mu.Unlock()
	for _, e := range s.rec.errs {
		t.Errorf("informer %s handler: %s", s.name, e)
	}
	if d := diffPods("handler-built copy of "+s.name, s.rec.pods, byUID(s.inf.List())); d != "" {
		t.Errorf("the copy rebuilt from the handler calls is not the informer's:\n%s", d)
	}
	for uid, p := range s.rec.pods {
		if g, ok := s.inf.Get(uid); !ok || g != p && !proto.Equal(g, p) {
			t.Errorf("informer %s: the handler's last state of %s is not the informer's", s.name, uid)
		}
	}
	for _, p := range s.inf.List() {
		for _, ct := range p.GetContainers() {
			if g, ok := s.inf.GetByContainerID(ct.GetId()); !ok || g.GetUid() != p.GetUid() {
				t.Errorf("informer %s: GetByContainerID(%s) does not find pod %s", s.name, ct.GetId(), p.GetUid())
			}
		}
		for _, sb := range p.GetSandboxes() {
			if g, ok := s.inf.GetByContainerID(sb.GetId()); !ok || g.GetUid() != p.GetUid() {
				t.Errorf("informer %s: GetByContainerID(sandbox %s) does not find pod %s", s.name, sb.GetId(), p.GetUid())
			}
		}
	}
	if _, ok := s.inf.GetByContainerID("no-such-container"); ok {
		t.Errorf("informer %s: GetByContainerID finds a container that does not exist", s.name)
	}
	t.Logf("informer %s: %d pods; %+v; watch calls %d (snapshots asked %d), snapshots %d, resets %d",
		s.name, len(s.rec.pods), s.rec.countsLocked(), s.spy.calls.Load(), s.spy.snapshotAsks.Load(),
		s.spy.synceds.Load(), s.spy.resets.Load())
}

// webAndAPI selects about half of the simulated pods (the simulator's apps are web,
// api, cache and worker).
var webAndAPI = &plegdv1.PodFilter{LabelSelector: "app in (web,api)"}

// churned waits until every subject's handler has been told at least n more events
// than it had been when churned was called.
func churned(t *testing.T, n int, subjects ...*subject) {
	t.Helper()
	base := make([]int, len(subjects))
	for k, s := range subjects {
		base[k] = s.rec.counts().live()
	}
	waitFor(t, 30*time.Second, fmt.Sprintf("%d events of churn", n), func() bool {
		for k, s := range subjects {
			if s.rec.counts().live() < base[k]+n {
				return false
			}
		}
		return true
	})
}

// --- the attacks --------------------------------------------------------------------

// TestResumeAcrossKill9 kills plegd with SIGKILL mid-stream, twice, and restarts it on
// the same state dir while the pods churn on: the informers must carry on exactly
// where they were, with no resync and no revision twice.
func TestResumeAcrossKill9(t *testing.T) {
	c := newCluster(t, 30, 25)
	c.startPlegd("state", "--bookmark-interval", "300ms")
	epoch := c.listPods(nil).GetEpoch()
	all := c.runInformer("all", nil, nil)
	web := c.runInformer("web+api", webAndAPI, nil)
	churned(t, 20, all, web)
	for round := 0; round < 2; round++ {
		c.plegd.kill()
		// The pods change while plegd is down; the restarted plegd must report those
		// changes as events.
		c.churnWhileAway(3)
		c.startPlegd("state", "--bookmark-interval", "300ms")
		if e := c.listPods(nil).GetEpoch(); e != epoch {
			t.Fatalf("plegd restarted on its state dir in epoch %d, not %d", e, epoch)
		}
		for _, s := range []*subject{all, web} {
			c.reached(s, 20*time.Second)
		}
		churned(t, 20, all, web)
	}
	c.quiesce()
	for _, s := range []*subject{all, web} {
		c.verify(s)
		n := s.rec.counts()
		if n.resyncUpdates != 0 || n.unknownDeletes != 0 {
			t.Errorf("informer %s resynced across restarts with the state dir: %+v", s.name, n)
		}
		if r := s.spy.resets.Load(); r != 0 {
			t.Errorf("informer %s got %d resets across restarts with the state dir", s.name, r)
		}
		if a, g := s.spy.snapshotAsks.Load(), s.spy.synceds.Load(); a != 1 || g != 1 {
			t.Errorf("informer %s asked for %d snapshots and got %d, not just the first", s.name, a, g)
		}
		if w := s.spy.calls.Load(); w < 3 {
			t.Errorf("informer %s opened %d Watch streams, expected one more after each of the 2 kills", s.name, w)
		}
		if n.updates-n.resyncUpdates == 0 || n.deletes == 0 {
			t.Errorf("informer %s saw too little churn to mean anything: %+v", s.name, n)
		}
	}
}

// TestResyncOnForeignEpoch restarts plegd on a new state dir: its journal is another
// (a new epoch), so the informers cannot resume and must repair their copies with a
// fresh snapshot, diffed against what they hold.
func TestResyncOnForeignEpoch(t *testing.T) {
	c := newCluster(t, 30, 25)
	c.startPlegd("state-1", "--bookmark-interval", "300ms", "--node-name", "node-a")
	first := c.listPods(nil).GetEpoch()
	all := c.runInformer("all", nil, nil)
	web := c.runInformer("web+api", webAndAPI, nil)
	churned(t, 10, all, web)
	for _, s := range []*subject{all, web} {
		if n := s.inf.NodeName(); n != "node-a" {
			t.Errorf("informer %s names node %q, not plegd's node-a", s.name, n)
		}
	}
	c.plegd.kill()
	// Some pods are replaced while plegd is down.
	c.churnWhileAway(5)
	c.startPlegd("state-2", "--bookmark-interval", "300ms", "--node-name", "node-b")
	second := c.listPods(nil).GetEpoch()
	if second == first {
		t.Fatalf("plegd kept epoch %d on a new state dir", first)
	}
	for _, s := range []*subject{all, web} {
		waitFor(t, 20*time.Second, "informer "+s.name+" to move to the new epoch", func() bool {
			e, _ := s.inf.Revision()
			return e == second
		})
	}
	churned(t, 10, all, web)
	c.quiesce()
	for _, s := range []*subject{all, web} {
		c.verify(s)
		if e, _ := s.inf.Revision(); e != second {
			t.Errorf("informer %s is in epoch %d, not plegd's new %d", s.name, e, second)
		}
		if n := s.inf.NodeName(); n != "node-b" {
			t.Errorf("informer %s names node %q after the new snapshot, not node-b", s.name, n)
		}
		if g := s.spy.synceds.Load(); g < 2 {
			t.Errorf("informer %s got %d snapshots; the new epoch needs a second", s.name, g)
		}
		n := s.rec.counts()
		if n.unknownDeletes == 0 {
			t.Errorf("informer %s: no pod was found gone by the resync (finalStateUnknown): %+v", s.name, n)
		}
	}
}

// TestResetRepairs stops the informer reading its stream (the connection's
// interceptor stalls a receive) past the bookmark interval and past plegd's
// slow-consumer limit (--watch-buffer 8), twice: plegd resets the stream and the
// informer repairs its copy by the resync diff, while a filtered informer follows the
// same plegd.
func TestResetRepairs(t *testing.T) {
	c := newCluster(t, 40, 40)
	c.startPlegd("state", "--watch-buffer", "8", "--bookmark-interval", "200ms")
	var stalls atomic.Int32
	stall := func(n int64) time.Duration {
		// Stall twice, a while after the first snapshot: long enough for the journal
		// to drop this subscriber, and for bookmarks to come due meanwhile.
		if n == 150 || n == 400 {
			stalls.Add(1)
			return 4 * time.Second
		}
		return 0
	}
	slow := c.informer("stalled", nil, stall)
	slow.handle(newRecorder("stalled"))
	slow.run()
	web := c.runInformer("web+api", webAndAPI, nil)
	waitFor(t, 60*time.Second, "the stream to stall twice and be reset", func() bool {
		return stalls.Load() == 2 && slow.spy.slowConsumers.Load() >= 1
	})
	c.reached(slow, 20*time.Second)
	c.quiesce()
	c.verify(slow)
	c.verify(web)
	n := slow.rec.counts()
	if n.resyncUpdates == 0 && n.unknownDeletes == 0 {
		t.Errorf("the resyncs after the stalls repaired nothing: %+v", n)
	}
}

// TestSlowRegistration attacks the informer with a slow handler: two registrations
// on one informer, one taking 200ms per call, under a burst of events. The fast
// registration must keep up with plegd, the slow one must fall far behind without
// losing anything, and the stream must never be reset or resynced. plegd's buffer per
// watcher (--watch-buffer 256) holds any burst of the churn for a client that reads
// on, but not the backlog of a stream whose reader waits 200ms per event.
func TestSlowRegistration(t *testing.T) {
	c := newCluster(t, 40, 40)
	c.startPlegd("state", "--watch-buffer", "256", "--bookmark-interval", "200ms")
	s := c.informer("shared", nil, nil)
	fast, slow := newRecorder("fast"), newRecorder("slow")
	slow.stall = func(int) time.Duration { return 200 * time.Millisecond }
	s.handle(fast)
	slowReg := s.handle(slow)
	s.run()
	// The burst: the slow handler alone would need 20s for these events.
	churned(t, 100, s)
	c.quiesce()
	// plegd is quiet: the fast registration must have been told everything within a
	// bounded time, while the slow one is still far behind.
	c.reached(s, 5*time.Second)
	waitFor(t, 5*time.Second, "the fast registration to be told everything", func() bool { return drained(s.reg) })
	total := fast.counts().calls
	sc := slow.counts().calls
	waiting, _ := plegd.Backlog(slowReg)
	t.Logf("fast registration: %d calls, all told; slow registration: %d calls, %d waiting", total, sc, waiting)
	if sc > total/2 {
		t.Errorf("the slow registration made %d calls of %d: not held back by its 200ms handler?", sc, total)
	}
	// Nothing of the slow registration's is lost: what it has not been told yet waits
	// (its end-of-initial-list mark may wait too).
	if got := sc + waiting; got != total && got != total+1 {
		t.Errorf("the slow registration has %d calls made and %d waiting; the fast one made %d", sc, waiting, total)
	}
	if r := s.spy.resets.Load(); r != 0 {
		t.Errorf("the stream was reset %d times: the slow handler held up the stream", r)
	}
	if w := s.spy.calls.Load(); w != 1 {
		t.Errorf("%d Watch streams were opened, not one", w)
	}
	if s.reg.HasSynced() != true {
		t.Error("the fast registration has not synced")
	}
	c.verify(s) // stops the informer, with the slow registration still behind
	for _, r := range []*recorder{fast, slow} {
		n := r.counts()
		if n.resyncUpdates != 0 || n.unknownDeletes != 0 {
			t.Errorf("registration %s was told of a resync: %+v", r.name, n)
		}
	}
	// The slow registration was told the same calls as the fast one, in the same
	// order, as far as it got.
	fast.mu.Lock()
	slow.mu.Lock()
	defer fast.mu.Unlock()
	defer slow.mu.Unlock()
	for _, e := range slow.errs {
		t.Errorf("registration slow: %s", e)
	}
	if len(slow.seq) > len(fast.seq) {
		t.Fatalf("the slow registration was told %d calls, the fast one %d", len(slow.seq), len(fast.seq))
	}
	for k := range slow.seq {
		if slow.seq[k] != fast.seq[k] {
			t.Fatalf("call %d: the slow registration was told %q, the fast one %q", k, slow.seq[k], fast.seq[k])
		}
	}
}

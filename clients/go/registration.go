package plegd

import (
	"sync"
	"sync/atomic"

	"github.com/plegd/plegd/clients/go/plegdv1"
)

// Registration is a handler added to an [Informer] by [Informer.AddEventHandler]:
// pass it to [Informer.RemoveEventHandler] to remove the handler.
type Registration interface {
	// HasSynced reports whether the registration's handler has been told the
	// informer's initial list and has returned from every call of it: for a
	// registration added before the informer's first complete snapshot, the OnAdd of
	// each pod of that snapshot; for one added later, the OnAdd of each pod the copy
	// held when it was added. It stays true afterwards. As client-go's
	// ResourceEventHandlerRegistration.HasSynced; [Informer.HasSynced] only says that
	// the copy is complete.
	HasSynced() bool
	// Done is closed once the registration is removed (or its informer's Run has
	// returned) and its handler has returned from its last call: after
	// [Informer.RemoveEventHandler], wait on it (never from the handler itself) to know
	// that no call is running any more.
	Done() <-chan struct{}
}

// The kinds of notification.
type noteKind uint8

const (
	noteAdd    noteKind = iota
	noteUpdate          // old → pod, ev (nil after a resync)
	noteDelete          // pod, unknown (finalStateUnknown)
	noteSynced          // the end of the registration's initial list; no handler call
)

// notification is one handler call waiting in a registration's buffer, with the
// point of the copy it belongs to.
type notification struct {
	kind       noteKind
	unknown    bool
	old, pod   *plegdv1.PodStatus
	ev         *plegdv1.LifecycleEvent
	epoch, rev uint64
}

// registration delivers the informer's notifications to one handler: the informer
// puts them in its buffer (push, which never blocks), and the registration's own
// goroutine (run) takes them out one at a time and calls the handler. As client-go's
// processorListener, with one goroutine.
type registration struct {
	inf     *Informer
	handler ResourceEventHandler
	synced  atomic.Bool
	done    chan struct{} // closed when run has returned (or, never started, when halted)

	// Guarded by inf.dispatchMu.
	started    bool // run was started
	markerSent bool // noteSynced is in the buffer, or was

	mu      sync.Mutex
	wake    sync.Cond // signalled on push and on halt
	queue   ring
	stopped bool // halted: no handler call begins any more
	busy    bool // run has taken a notification and not yet come back for the next
}

func newRegistration(inf *Informer, h ResourceEventHandler) *registration {
	r := &registration{inf: inf, handler: h, done: make(chan struct{})}
	r.wake.L = &r.mu
	return r
}

// HasSynced implements [Registration].
func (r *registration) HasSynced() bool { return r.synced.Load() }

// Done implements [Registration].
func (r *registration) Done() <-chan struct{} { return r.done }

// push appends n to the buffer; it never waits for the handler. inf.dispatchMu must be
// held.
func (r *registration) push(n notification) {
	r.mu.Lock()
	if r.stopped {
		r.mu.Unlock()
		return
	}
	grew := r.queue.push(n)
	backlog := r.queue.n
	r.wake.Signal()
	r.mu.Unlock()
	if grew && backlog >= slowBacklog {
		r.inf.log.Warn("an event handler is falling behind; its notifications wait in memory", "backlog", backlog)
	}
}

// start starts r's goroutine. inf.dispatchMu must be held.
func (r *registration) start() {
	r.started = true
	go r.run()
}

// halt stops r: no handler call begins after halt has returned, and the notifications
// still buffered are dropped. A call already running goes on; r.done is closed once
// it has returned. inf.dispatchMu must be held.
func (r *registration) halt() {
	r.mu.Lock()
	was := r.stopped
	r.stopped = true
	r.queue = ring{}
	r.wake.Broadcast()
	r.mu.Unlock()
	if !was && !r.started {
		close(r.done)
	}
}

// next waits for the next notification; false once r is halted.
func (r *registration) next() (notification, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.busy = false
	for r.queue.n == 0 && !r.stopped {
		r.wake.Wait()
	}
	if r.stopped {
		return notification{}, false
	}
	n := r.queue.pop()
	r.busy = true
	return n, true
}

// run calls the handler for each notification, in the order they were pushed.
func (r *registration) run() {
	defer close(r.done)
	for {
		n, ok := r.next()
		if !ok {
			return
		}
		if n.kind == noteSynced {
			r.synced.Store(true)
			continue
		}
		if hook := r.inf.beforeNotify; hook != nil {
			hook(r.handler, n.epoch, n.rev)
		}
		switch n.kind {
		case noteAdd:
			r.handler.OnAdd(n.pod)
		case noteUpdate:
			r.handler.OnUpdate(n.old, n.pod, n.ev)
		case noteDelete:
			r.handler.OnDelete(n.pod, n.unknown)
		}
	}
}

// ringMin is a ring's first size; slowBacklog the backlog from which each growth of
// a ring is logged (client-go traces a listener whose buffer passes 1024).
const (
	ringMin     = 16
	slowBacklog = 1024
)

// ring is a growing FIFO of notifications (client-go's RingGrowing). It shrinks back
// when it empties, so that a handler that once fell far behind does not keep the
// memory.
type ring struct {
	buf     []notification
	head, n int
}

// push appends x and reports whether the ring had to grow.
func (q *ring) push(x notification) (grew bool) {
	if q.n == len(q.buf) {
		size := 2 * len(q.buf)
		if size < ringMin {
			size = ringMin
		}
		buf := make([]notification, size)
		for k := 0; k < q.n; k++ {
			buf[k] = q.buf[(q.head+k)%len(q.buf)]
		}
		q.buf, q.head, grew = buf, 0, true
	}
	q.buf[(q.head+q.n)%len(q.buf)] = x
	q.n++
	return grew
}

// pop takes the oldest notification; the ring must not be empty.
func (q *ring) pop() notification {
	x := q.buf[q.head]
	q.buf[q.head] = notification{}
	q.head = (q.head + 1) % len(q.buf)
	q.n--
	if q.n == 0 && len(q.buf) > slowBacklog {
		q.buf, q.head = nil, 0
	}
	return x
}

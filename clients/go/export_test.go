package plegd

// Test hooks, compiled into the package for its tests only.

// SetNotifyHook makes inf call f on a registration's goroutine just before each of
// its handler calls, with the epoch and revision the notification belongs to (a live
// event's, a snapshot's, or for a replay the copy's at AddEventHandler). Set it
// before AddEventHandler and Run.
func SetNotifyHook(inf *Informer, f func(h ResourceEventHandler, epoch, rev uint64)) {
	inf.beforeNotify = f
}

// Backlog returns how many notifications wait in reg's buffer, and whether its
// handler is in a call. The informer's last change has been handed out when it
// returns, so Backlog(reg) == 0, false after Revision() showed a change means the
// handler was told about it.
func Backlog(reg Registration) (waiting int, busy bool) {
	r := reg.(*registration)
	r.inf.dispatchMu.Lock()
	defer r.inf.dispatchMu.Unlock()
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.queue.n, r.busy
}

package plegd

import (
	"errors"
	"fmt"

	"github.com/plegd/plegd/clients/go/plegdv1"
)

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

// action is what a message of the stream asks of the informer's copy.
type action int

const (
	actNone    action = iota // nothing (a snapshot pod, kept in the stream; a kind this client does not know)
	actRebuild               // a snapshot follows (start without resume, or a reset): the copy cannot be resumed until it is complete
	actResumed               // the stream carries on after the copy's revision
	actReplace               // the snapshot is complete: it (takeSnapshot) becomes the copy
	actApply                 // a live event
	actAdvance               // a bookmark: the copy is current up to the message's revision
)

// stream is the informer's side of one Watch stream: what it asked for, where the
// protocol stands, and the snapshot being received. step takes the stream's messages
// one at a time; it checks the protocol and says what to do with each, and does
// nothing else to the informer.
type stream struct {
	// The request: resume after (epoch, rev), or (resume false) a snapshot.
	resume     bool
	epoch, rev uint64

	ph       phase
	building map[string]*plegdv1.PodStatus
	// live says the stream got as far as live events (a resumed start, or synced).
	live bool
}

// step takes the stream's next message. An error ends the stream: a protocol
// violation (errProtocol) or a resume into another journal (*foreignEpochError).
func (s *stream) step(m *plegdv1.WatchEvent) (action, error) {
	switch k := m.GetKind().(type) {
	case *plegdv1.WatchEvent_Start:
		if s.ph != phaseOpening {
			return actNone, protocolError("a second start on one stream")
		}
		if !k.Start.GetResumed() {
			s.rebuild()
			return actRebuild, nil
		}
		switch {
		case !s.resume:
			return actNone, protocolError("resumed after %d though the informer asked for a snapshot", m.GetRevision())
		case k.Start.GetEpoch() != s.epoch:
			return actNone, &foreignEpochError{known: s.epoch, got: k.Start.GetEpoch()}
		case m.GetRevision() != s.rev:
			return actNone, protocolError("resumed after %d, not after the informer's revision %d", m.GetRevision(), s.rev)
		}
		s.ph, s.live = phaseLive, true
		return actResumed, nil
	case *plegdv1.WatchEvent_Reset_:
		if s.ph == phaseOpening {
			return actNone, protocolError("a reset before start")
		}
		s.rebuild()
		return actRebuild, nil
	case *plegdv1.WatchEvent_Snapshot:
		if s.ph != phaseSnapshot {
			return actNone, protocolError("a snapshot outside a snapshot")
		}
		if p := k.Snapshot; p != nil {
			s.building[p.GetUid()] = p
		}
		return actNone, nil
	case *plegdv1.WatchEvent_Synced:
		if s.ph != phaseSnapshot {
			return actNone, protocolError("synced outside a snapshot")
		}
		if n := int(k.Synced.GetPods()); n != len(s.building) {
			return actNone, protocolError("synced says %d pods after %d snapshots", n, len(s.building))
		}
		s.ph, s.live = phaseLive, true
		return actReplace, nil
	case *plegdv1.WatchEvent_Event:
		if s.ph != phaseLive {
			return actNone, protocolError("event %d before synced", m.GetRevision())
		}
		return actApply, nil
	case *plegdv1.WatchEvent_Bookmark:
		if s.ph != phaseLive {
			return actNone, protocolError("bookmark %d before synced", m.GetRevision())
		}
		return actAdvance, nil
	default:
		// A kind this client does not know (a newer plegd): nothing to do.
		return actNone, nil
	}
}

// rebuild starts receiving a snapshot.
func (s *stream) rebuild() {
	s.ph = phaseSnapshot
	s.building = map[string]*plegdv1.PodStatus{}
}

// takeSnapshot hands over the snapshot completed by synced (actReplace).
func (s *stream) takeSnapshot() map[string]*plegdv1.PodStatus {
	b := s.building
	s.building = nil
	return b
}

package plegd

import (
	"math/rand/v2"
	"time"
)

// Backoff is how long an [Informer] waits before it opens a new Watch stream after
// one broke: Duration at first, multiplied by Factor after every failed attempt up
// to Cap, each wait lengthened by a random fraction up to Jitter of itself so that
// the agents of a node do not all come back at once when plegd restarts. A stream
// that got as far as live events starts the sequence over. Zero fields take the
// defaults of [DefaultBackoff].
type Backoff struct {
	// Duration is the first wait.
	Duration time.Duration
	// Factor multiplies the wait after each failed attempt (at least 1).
	Factor float64
	// Jitter lengthens each wait by up to this fraction of it (0.5: up to 50%).
	Jitter float64
	// Cap is the longest wait, before jitter.
	Cap time.Duration
}

// DefaultBackoff is the backoff an [Informer] uses for the fields its options leave
// zero.
var DefaultBackoff = Backoff{Duration: 200 * time.Millisecond, Factor: 2, Jitter: 0.5, Cap: 10 * time.Second}

// withDefaults fills the zero fields from DefaultBackoff.
func (b Backoff) withDefaults() Backoff {
	if b.Duration <= 0 {
		b.Duration = DefaultBackoff.Duration
	}
	if b.Factor < 1 {
		b.Factor = DefaultBackoff.Factor
	}
	if b.Jitter <= 0 {
		b.Jitter = DefaultBackoff.Jitter
	}
	if b.Cap <= 0 {
		b.Cap = DefaultBackoff.Cap
	}
	if b.Cap < b.Duration {
		b.Cap = b.Duration
	}
	return b
}

// backoffState steps through a Backoff.
type backoffState struct {
	b    Backoff
	next time.Duration
}

func newBackoffState(b Backoff) *backoffState {
	b = b.withDefaults()
	return &backoffState{b: b, next: b.Duration}
}

// delay returns the next wait and moves on.
func (s *backoffState) delay() time.Duration {
	d := s.next
	grown := time.Duration(float64(s.next) * s.b.Factor)
	if grown > s.b.Cap || grown < s.next {
		grown = s.b.Cap
	}
	s.next = grown
	return d + time.Duration(rand.Float64()*s.b.Jitter*float64(d))
}

// reset starts the sequence over.
func (s *backoffState) reset() {
	s.next = s.b.Duration
}

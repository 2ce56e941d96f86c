package plegd

import (
	"context"
	"time"

	"github.com/plegd/plegd/clients/go/plegdv1"
)

// ResourceEventHandler is told about the changes to an [Informer]'s copy of the
// pods. Each handler added by [Informer.AddEventHandler] is a [Registration] with its
// own buffer and goroutine: the informer calls one method of it at a time, on that
// goroutine, in revision order, and never twice for one revision. Handlers of
// different registrations run concurrently, each at its own pace.
//
// The copy already reflects the change when the method runs, and may be ahead of it:
// List, Get and Revision can show later changes whose calls are still waiting in the
// buffer. The pods passed in are the informer's own: read them, do not modify them.
//
// A handler that is slow holds up only its own registration: the stream goes on
// being read, the copy stays current and the other registrations are told at their
// own pace, while this one's notifications wait in memory, in a buffer that grows as
// long as the handler lags (each growth past 1024 waiting calls is logged). Hand long
// work to a queue all the same.
type ResourceEventHandler interface {
	// OnAdd is called when a pod enters the copy: a pod of the first snapshot, a pod
	// a resync found, or a live event about a pod the copy did not hold; and, for a
	// registration added after the first snapshot, for each pod the copy held then.
	OnAdd(pod *plegdv1.PodStatus)
	// OnUpdate is called when a pod of the copy changes. ev is the lifecycle event
	// that changed it (its Pod is newPod), or nil when a resync found the pod changed
	// and the events in between are unknown.
	OnUpdate(oldPod, newPod *plegdv1.PodStatus, ev *plegdv1.LifecycleEvent)
	// OnDelete is called when a pod leaves the copy, with its last known state.
	// finalStateUnknown is false when plegd's event told the removal, and true when a
	// resync (a reset, or a restarted plegd with another journal) found the pod gone
	// without its removal event: pod may then be out of date, as client-go's
	// DeletedFinalStateUnknown.
	OnDelete(pod *plegdv1.PodStatus, finalStateUnknown bool)
}

// EventHandlerFuncs is an adaptor that lets functions be a [ResourceEventHandler].
// A nil function ignores its notification.
type EventHandlerFuncs struct {
	// AddFunc is called by OnAdd.
	AddFunc func(pod *plegdv1.PodStatus)
	// UpdateFunc is called by OnUpdate.
	UpdateFunc func(oldPod, newPod *plegdv1.PodStatus, ev *plegdv1.LifecycleEvent)
	// DeleteFunc is called by OnDelete.
	DeleteFunc func(pod *plegdv1.PodStatus, finalStateUnknown bool)
}

// OnAdd calls AddFunc if it is not nil.
func (f EventHandlerFuncs) OnAdd(pod *plegdv1.PodStatus) {
	if f.AddFunc != nil {
		f.AddFunc(pod)
	}
}

// OnUpdate calls UpdateFunc if it is not nil.
func (f EventHandlerFuncs) OnUpdate(oldPod, newPod *plegdv1.PodStatus, ev *plegdv1.LifecycleEvent) {
	if f.UpdateFunc != nil {
		f.UpdateFunc(oldPod, newPod, ev)
	}
}

// OnDelete calls DeleteFunc if it is not nil.
func (f EventHandlerFuncs) OnDelete(pod *plegdv1.PodStatus, finalStateUnknown bool) {
	if f.DeleteFunc != nil {
		f.DeleteFunc(pod, finalStateUnknown)
	}
}

// InformerSynced reports whether an informer or a registration has synced;
// [Informer.HasSynced] and [Registration.HasSynced] are ones.
type InformerSynced func() bool

// WaitForCacheSync waits until every cacheSynced reports true, polling every 100ms,
// and reports whether they all did before ctx ended. As client-go's function of the
// same name, for a controller that must not act on an empty copy.
func WaitForCacheSync(ctx context.Context, cacheSynced ...InformerSynced) bool {
	t := time.NewTicker(100 * time.Millisecond)
	defer t.Stop()
	for {
		all := true
		for _, s := range cacheSynced {
			if !s() {
				all = false
				break
			}
		}
		if all {
			return true
		}
		select {
		case <-ctx.Done():
			return false
		case <-t.C:
		}
	}
}

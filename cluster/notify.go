package cluster

import (
	"sync"

	"github.com/raftlock/raftlock/fsm"
)

// notifier wakes blocked acquires (registered by a blockedAcquire, acquire_wait.go) and
// blocking queries as the state machine applies the log.
type notifier struct {
	mu        sync.Mutex
	grants    map[waitKey]map[*grantWait]struct{}
	bySession map[fsm.SessionID]map[*grantWait]struct{}
	removing  map[waitKey]chan struct{} // queue entries being taken away; closed when done
	watches   map[string]chan struct{}  // closed on the next change of the lock
	anyChange chan struct{}             // closed on the next change of any lock
	closed    bool
}

func newNotifier() *notifier {
	return &notifier{
		grants:    make(map[waitKey]map[*grantWait]struct{}),
		bySession: make(map[fsm.SessionID]map[*grantWait]struct{}),
		removing:  make(map[waitKey]chan struct{}),
		watches:   make(map[string]chan struct{}),
		anyChange: make(chan struct{}),
	}
}

// watchLock returns a channel closed at the next change of the named lock.
func (nt *notifier) watchLock(name string) <-chan struct{} {
	nt.mu.Lock()
	defer nt.mu.Unlock()
	ch, ok := nt.watches[name]
	if !ok {
		ch = make(chan struct{})
		if nt.closed {
			close(ch)
		}
		nt.watches[name] = ch
	}
	return ch
}

// watchAny returns a channel closed at the next change of any lock.
func (nt *notifier) watchAny() <-chan struct{} {
	nt.mu.Lock()
	defer nt.mu.Unlock()
	return nt.anyChange
}

func (nt *notifier) observe(events []fsm.Event) {
	nt.mu.Lock()
	defer nt.mu.Unlock()
	changed := false
	for i := range events {
		e := &events[i]
		switch e.Kind {
		case fsm.EventGranted:
			for w := range nt.grants[waitKey{e.Lock, e.Session}] {
				select {
				case w.granted <- e.Token:
				default:
				}
			}
		case fsm.EventLockChanged:
			changed = true
			if ch, ok := nt.watches[e.Lock]; ok {
				close(ch)
				delete(nt.watches, e.Lock)
			}
		case fsm.EventSessionEnded:
			for w := range nt.bySession[e.Session] {
				closeOnce(w.ended)
			}
		case fsm.EventWaitDropped:
			// The queue entry is gone (its token was deleted): the wait cannot be granted.
			for w := range nt.grants[waitKey{e.Lock, e.Session}] {
				closeOnce(w.ended)
			}
		case fsm.EventRestored:
			changed = true
			nt.wakeAllLocked()
		}
	}
	if changed {
		close(nt.anyChange)
		nt.anyChange = make(chan struct{})
	}
}

// wakeAllLocked wakes every blocking query and every blocked acquire (which then re-reads the
// state); used when the whole state was replaced.
func (nt *notifier) wakeAllLocked() {
	for name, ch := range nt.watches {
		close(ch)
		delete(nt.watches, name)
	}
	for _, set := range nt.bySession {
		for w := range set {
			closeOnce(w.ended)
		}
	}
}

// closeAll wakes everything for good; used when the node closes.
func (nt *notifier) closeAll() {
	nt.mu.Lock()
	defer nt.mu.Unlock()
	nt.closed = true
	nt.wakeAllLocked()
	close(nt.anyChange)
	nt.anyChange = make(chan struct{})
}

func closeOnce(ch chan struct{}) {
	select {
	case <-ch:
	default:
		close(ch)
	}
}

func addTo[K comparable](m map[K]map[*grantWait]struct{}, k K, w *grantWait) {
	set := m[k]
	if set == nil {
		set = make(map[*grantWait]struct{})
		m[k] = set
	}
	set[w] = struct{}{}
}

func removeFrom[K comparable](m map[K]map[*grantWait]struct{}, k K, w *grantWait) {
	if set := m[k]; set != nil {
		delete(set, w)
		if len(set) == 0 {
			delete(m, k)
		}
	}
}

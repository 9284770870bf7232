package fsm

// describeChanges leaves one EventLockChanged per lock among the events the current command
// emitted (those from index from on), the first, and gives it the lock's state after the
// command: a change feed can then tell what each command did to each lock, even when one batch
// applies several commands before the observer runs.
func (a *applier) describeChanges(from int) {
	n := 0
	for i := from; i < len(a.events); i++ {
		if a.events[i].Kind == EventLockChanged {
			n++
		}
	}
	if n == 0 {
		return
	}
	var seen map[string]struct{}
	if n > 1 {
		seen = make(map[string]struct{}, n)
	}
	out := from
	for i := from; i < len(a.events); i++ {
		e := a.events[i]
		if e.Kind == EventLockChanged {
			if seen != nil {
				if _, dup := seen[e.Lock]; dup {
					continue
				}
				seen[e.Lock] = struct{}{}
			}
			e.State = LockView{LockInfo: a.st.lockInfo(e.Lock)}
			if e.State.Limit > 0 || e.State.Shared { // only these list their holders
				e.State = a.st.lockView(e.Lock)
			}
			e.State.ModifyIndex = a.index
		}
		a.events[out] = e
		out++
	}
	clear(a.events[out:]) // drop the references the removed duplicates held
	a.events = a.events[:out]
}

// lastChange is the highest index at which a lock of the state changed: every change of a
// lock up to the state's index left that lock's entry with a modify index at least as high,
// or removed it at an index at least as high (freedIndex).
func (s *state) lastChange() uint64 {
	last := s.freedIndex
	for _, l := range s.locks {
		last = max(last, l.modifyIndex)
	}
	return last
}

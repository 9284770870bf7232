package checker

import (
	"encoding/binary"
	"fmt"
	"sort"
	"strings"

	"github.com/anishathalye/porcupine"

	"github.com/raftlock/raftlock/jepsen/history"
)

// outcome is what a lock operation answered, as far as the model cares.
type outcome uint8

const (
	outOK        outcome = iota
	outHeld              // 409 lock_held
	outDelayed           // 409 lock_delayed
	outNoSession         // 404 session_not_found
	outNotHolder         // 409 not_holder
	outUnknown           // info: may have taken effect, or not
)

// lockInput is one operation on one lock partition. Sessions are small numbers; 0 is none.
type lockInput struct {
	lock    string
	segment int    // the lock's history is cut where no op is pending; see segmentOps
	fresh   bool   // the segment starts the lock's history: the lock is free
	floor   uint64 // the lowest token a grant in this segment may carry
	call    int64  // invocation time, to forget sessions that have no op left
	kind    history.Kind
	session uint32
	token   uint64
	attempt uint32 // the acquire's or cancel's attempt, numbered densely; 0 is none
}

// lockOutput is the observed answer.
type lockOutput struct {
	out    outcome
	held   bool
	holder uint32 // for reads and lock_held; 0 when the answer did not name one
	token  uint64
}

// anyHolder is the holder of a lock at the start of a segment cut from the middle of its
// history: free, or held by some session under some token, until an op pins it.
const anyHolder = ^uint32(0)

// foreignBit marks the number of a foreign session: one created through the Go client, whose
// requests are not recorded. A free lock may be taken by a foreign session at any moment, with
// any token from the next one on, and a foreign holder may leave at any moment (the model
// already lets any holder expire). The model learns of a foreign holder only when an op names
// it, and then checks it like any other: one holder at a time, tokens that only grow.
const foreignBit = uint32(1) << 31

// isForeign reports whether a session number is a foreign session's.
func isForeign(id uint32) bool { return id&foreignBit != 0 && id != anyHolder }

// lockState is the model of one lock: its holder and token, the lower bound on the next grant's
// token, the sessions known to have ended and the attempts cancelled. A holder's token is 0
// when it was granted by an operation whose answer was lost; tokLB is then a lower bound until
// an observation pins it.
type lockState struct {
	holder  uint32
	token   uint64
	tokLB   uint64
	minNext uint64
	dead    idSet // sessions
	fenced  idSet // attempts
}

// idSet is a set of numbers: sorted 4-byte big-endian encodings in a string, so that a state
// stays comparable with == and string order is numeric order.
type idSet string

// idKey encodes a number as it is stored in an idSet.
func idKey(id uint32) string {
	var b [4]byte
	binary.BigEndian.PutUint32(b[:], id)
	return string(b[:])
}

// index is the byte offset at which key is, or would be inserted.
func (set idSet) index(key string) int {
	n := len(set) / 4
	return 4 * sort.Search(n, func(i int) bool { return string(set[4*i:4*i+4]) >= key })
}

func (set idSet) has(id uint32) bool {
	key := idKey(id)
	i := set.index(key)
	return i < len(set) && string(set[i:i+4]) == key
}

func (set idSet) add(id uint32) idSet {
	if set.has(id) {
		return set
	}
	key := idKey(id)
	i := set.index(key)
	return set[:i] + idSet(key) + set[i:]
}

// forget removes the numbers whose ops all returned before now.
func (set idSet) forget(lastReturn map[uint32]int64, now int64) idSet {
	keep := -1 // index of the first entry to drop, if any
	for i := 0; i+4 <= len(set); i += 4 {
		if lastReturn[set.at(i)] < now {
			keep = i
			break
		}
	}
	if keep < 0 {
		return set
	}
	b := []byte(set[:keep])
	for i := keep; i+4 <= len(set); i += 4 {
		if lastReturn[set.at(i)] >= now {
			b = append(b, set[i:i+4]...)
		}
	}
	return idSet(b)
}

// at is the number at byte offset i.
func (set idSet) at(i int) uint32 { return binary.BigEndian.Uint32([]byte(set[i : i+4])) }

func (s lockState) isDead(id uint32) bool { return s.dead.has(id) }

// kill marks a session ended and, if it held the lock, frees the lock.
func (s lockState) kill(id uint32) lockState {
	s.dead = s.dead.add(id)
	if s.holder == id {
		s.holder, s.token, s.tokLB = 0, 0, 0
	}
	return s
}

// forget removes from the dead set the sessions whose ops all returned before now, and from
// the fenced set the attempts whose ops all did.
func (s lockState) forget(lastReturn, attemptReturn map[uint32]int64, now int64) lockState {
	if lastReturn != nil {
		s.dead = s.dead.forget(lastReturn, now)
	}
	s.fenced = s.fenced.forget(attemptReturn, now)
	return s
}

// pin checks that the holder is (h, t), learning the token if it was unknown.
func (s lockState) pin(h uint32, t uint64) (lockState, bool) {
	if s.holder == anyHolder && h != 0 {
		s.holder, s.token, s.tokLB = h, t, 0
		s.minNext = max(s.minNext, t+1)
		return s, true
	}
	if s.holder == 0 && isForeign(h) && t >= s.minNext {
		// A foreign session took the free lock, unrecorded.
		s.holder, s.token, s.tokLB, s.minNext = h, t, 0, t+1
		return s, true
	}
	if s.holder == 0 || s.holder != h {
		return s, false
	}
	if s.token != 0 {
		return s, s.token == t
	}
	if t < s.tokLB {
		return s, false
	}
	s.token, s.tokLB = t, 0
	if t+1 > s.minNext {
		s.minNext = t + 1
	}
	return s, true
}

// preStates are the states the lock may be in just before an op by session id: sessions can
// expire at any moment, and only the holder's and the op's own expiry can change the op's result.
func preStates(s lockState, id uint32) []lockState {
	states := []lockState{s}
	if s.holder != 0 && s.holder != anyHolder {
		states = append(states, s.kill(s.holder))
	}
	if id != 0 && id != s.holder && !s.isDead(id) {
		for _, st := range states {
			states = append(states, st.kill(id))
		}
	}
	return states
}

// step returns every state the op can lead to from s; none means the op is impossible.
func step(s lockState, in lockInput, out lockOutput) []lockState {
	switch in.kind {
	case history.Acquire:
		return stepAcquire(s, in, out)
	case history.Release:
		return stepRelease(s, in, out)
	case history.Cancel:
		return stepCancel(s, in, out)
	case history.Read:
		if !out.held {
			s2 := s
			s2.holder = 0
			return when(s2, s.holder == 0 || s.holder == anyHolder)
		}
		n, ok := s.pin(out.holder, out.token)
		return when(n, ok)
	case history.Renew:
		return stepSessionLiveness(s, in, out)
	case history.Destroy:
		switch out.out {
		case outOK:
			return when(s.kill(in.session), !s.isDead(in.session))
		case outUnknown:
			return []lockState{s, s.kill(in.session)}
		}
		return stepSessionLiveness(s, in, out)
	}
	return nil
}

// stepSessionLiveness handles answers that only say whether the session was alive.
func stepSessionLiveness(s lockState, in lockInput, out lockOutput) []lockState {
	switch out.out {
	case outOK:
		return when(s, !s.isDead(in.session))
	case outNoSession:
		return when(s, s.isDead(in.session))
	}
	return []lockState{s}
}

func stepAcquire(s lockState, in lockInput, out lockOutput) []lockState {
	me := in.session
	alive := !s.isDead(me)
	if in.attempt != 0 && s.fenced.has(in.attempt) {
		// After its cancel, an attempt is refused (attempt_cancelled) and changes nothing.
		return when(s, out.out == outUnknown)
	}
	switch out.out {
	case outOK:
		if !alive {
			return nil
		}
		if s.holder == me {
			n, ok := s.pin(me, out.token)
			return when(n, ok)
		}
		if s.holder == anyHolder {
			// It was free, or held by this session already (then the token may be older).
			s.holder, s.token, s.tokLB, s.minNext = me, out.token, 0, max(s.minNext, out.token+1)
			return []lockState{s}
		}
		if s.holder != 0 || out.token < s.minNext {
			return nil
		}
		s.holder, s.token, s.tokLB, s.minNext = me, out.token, 0, out.token+1
		return []lockState{s}
	case outHeld:
		if !alive || s.holder == me || out.holder == me || s.holder == 0 && !isForeign(out.holder) {
			return nil
		}
		if out.holder == 0 {
			return []lockState{s}
		}
		n, ok := s.pin(out.holder, out.token)
		return when(n, ok)
	case outDelayed:
		// Lock-delay follows expiries the model cannot time; it is only possible while free.
		return when(s, alive && (s.holder == 0 || s.holder == anyHolder))
	case outNoSession:
		return when(s, !alive)
	case outUnknown:
		states := []lockState{s} // with anyHolder, that covers a grant too
		if alive && s.holder == 0 {
			g := s
			g.holder, g.token, g.tokLB = me, 0, s.minNext
			states = append(states, g)
		}
		return states
	}
	return nil
}

// stepCancel checks a cancel's report: the session holds the lock under the token it names
// (a grant that came first), or does not hold it. It records the attempt as cancelled, so that
// stepAcquire lets the attempt's acquire take no effect after this point; the acquire's return
// time (the cancel's completion) only bounds how long porcupine keeps it open. Cancels whose
// outcome is unknown never get here (modelOutput drops them).
func stepCancel(s lockState, in lockInput, out lockOutput) []lockState {
	me := in.session
	if in.attempt != 0 {
		s.fenced = s.fenced.add(in.attempt)
	}
	switch out.out {
	case outOK:
		if s.isDead(me) {
			return nil
		}
		if out.held {
			n, ok := s.pin(me, out.token)
			return when(n, ok)
		}
		return when(s, s.holder != me)
	case outNoSession:
		return when(s, s.isDead(me))
	}
	return nil
}

func stepRelease(s lockState, in lockInput, out lockOutput) []lockState {
	me := in.session
	alive := !s.isDead(me)
	released := func() (lockState, bool) {
		n, ok := s.pin(me, in.token)
		n.holder, n.token, n.tokLB = 0, 0, 0
		return n, ok && alive
	}
	switch out.out {
	case outOK:
		return when(released())
	case outNotHolder:
		// A holder whose token is still unknown may hold under another token; the model cannot
		// express "not t", so that case is allowed.
		holds := s.holder == me && s.token == in.token
		return when(s, alive && !holds)
	case outNoSession:
		return when(s, !alive)
	case outUnknown:
		states := []lockState{s}
		if n, ok := released(); ok {
			states = append(states, n)
		}
		return states
	}
	return nil
}

func when(s lockState, ok bool) []lockState {
	if ok {
		return []lockState{s}
	}
	return nil
}

// lockModel is the porcupine model of one lock per partition. Its state is the set of
// lockStates the lock may be in, kept canonical (sorted, without duplicates) and small: a state
// that only adds expiries to another state of the set is dropped, since expiries can always
// happen later, right before the op that needs them.
//
// lastReturn gives, per lock and session, the latest return time of the session's ops in that
// lock's partition. Once an op invoked after it is linearized, every op of the session already
// is, so whether the session has ended no longer matters and it leaves the dead set: the set
// then holds only sessions with ops still to come, which keeps states small and alike.
// attemptReturn does the same for attempts and the fenced set.
func lockModel(names func(uint32) string, lastReturn map[string]map[uint32]int64, attemptReturn map[uint32]int64) porcupine.Model {
	return porcupine.Model{
		Partition: partitionByLock,
		Init:      func() any { return stateSet(nil) }, // set by the segment's first op
		Step: func(state, input, output any) (bool, any) {
			set, in, out := state.(stateSet), input.(lockInput), output.(lockOutput)
			if len(set) == 0 {
				set = stateSet{{holder: anyHolder, minNext: in.floor}}
				if in.fresh {
					set = stateSet{{minNext: 1}}
				}
			}
			var next stateSet
			for _, s := range set {
				for _, pre := range preStates(s, in.session) {
					next = append(next, step(pre, in, out)...)
				}
			}
			last := lastReturn[in.lock]
			for i := range next {
				next[i] = next[i].forget(last, attemptReturn, in.call)
			}
			next = next.canonical()
			return len(next) > 0, next
		},
		Equal: func(a, b any) bool { return a.(stateSet).equal(b.(stateSet)) },
		Hash:  func(state any) uint64 { return state.(stateSet).hash() },
		DescribeOperation: func(input, output any) string {
			return describeOp(input.(lockInput), output.(lockOutput), names)
		},
		DescribeState: func(state any) string {
			var parts []string
			for _, s := range state.(stateSet) {
				parts = append(parts, describeState(s, names))
			}
			return strings.Join(parts, " | ")
		},
		DescribeOperationMetadata: func(info any) string {
			if info == nil {
				return ""
			}
			return info.(history.Op).String()
		},
	}
}

// partitionByLock makes one partition per segment of each lock's history.
func partitionByLock(ops []porcupine.Operation) [][]porcupine.Operation {
	byLock := map[string][]porcupine.Operation{}
	for _, op := range ops {
		in := op.Input.(lockInput)
		l := fmt.Sprintf("%s\x00%08d", in.lock, in.segment)
		byLock[l] = append(byLock[l], op)
	}
	out := make([][]porcupine.Operation, 0, len(byLock))
	for _, l := range sortedKeys(byLock) {
		out = append(out, byLock[l])
	}
	return out
}

func describeOp(in lockInput, out lockOutput, names func(uint32) string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s(%s", in.kind, names(in.session))
	if in.token != 0 {
		fmt.Fprintf(&b, ", %d", in.token)
	}
	b.WriteString(") -> ")
	switch out.out {
	case outOK:
		switch {
		case in.kind == history.Read && out.held:
			fmt.Fprintf(&b, "held by %s/%d", names(out.holder), out.token)
		case in.kind == history.Read:
			b.WriteString("free")
		case in.kind == history.Cancel && out.held:
			fmt.Fprintf(&b, "held, token %d", out.token)
		case in.kind == history.Cancel:
			b.WriteString("not held")
		case in.kind == history.Acquire:
			fmt.Fprintf(&b, "token %d", out.token)
		default:
			b.WriteString("ok")
		}
	case outHeld:
		fmt.Fprintf(&b, "lock_held by %s/%d", names(out.holder), out.token)
	case outDelayed:
		b.WriteString("lock_delayed")
	case outNoSession:
		b.WriteString("session_not_found")
	case outNotHolder:
		b.WriteString("not_holder")
	case outUnknown:
		b.WriteString("unknown")
	}
	return b.String()
}

func describeState(s lockState, names func(uint32) string) string {
	var b strings.Builder
	switch {
	case s.holder == 0:
		b.WriteString("free")
	case s.holder == anyHolder:
		b.WriteString("free or held (segment start)")
	case s.token == 0:
		fmt.Fprintf(&b, "held by %s/token>=%d", names(s.holder), s.tokLB)
	default:
		fmt.Fprintf(&b, "held by %s/%d", names(s.holder), s.token)
	}
	fmt.Fprintf(&b, ", next token>=%d", s.minNext)
	if len(s.dead) > 0 {
		var dead []string
		for i := 0; i+4 <= len(s.dead); i += 4 {
			dead = append(dead, names(s.dead.at(i)))
		}
		fmt.Fprintf(&b, ", ended: %s", strings.Join(dead, " "))
	}
	if len(s.fenced) > 0 {
		fmt.Fprintf(&b, ", %d attempts cancelled", len(s.fenced)/4)
	}
	return b.String()
}

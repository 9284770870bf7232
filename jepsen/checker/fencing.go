package checker

import (
	"fmt"
	"sort"

	"github.com/raftlock/raftlock/jepsen/history"
)

// CheckFencing judges the fenced resource. Write ops are recorded by the resource itself in the
// order it handled them (ascending ID); ok means accepted, fail means rejected as stale.
//
//   - The resource never accepted a lower token after a higher one for the same lock.
//   - Every accepted token was granted to the writer (an ok acquire, or a read or refusal
//     naming the writer as holder under that token).
//   - No two sessions had writes accepted under the same token.
//
// It counts the stale writes rejected; with ExpectStaleWrites, none is a failure. Writes to a
// resource that does not check tokens (Unchecked, by some Go-client workers) are left to the
// belief checker. A Go-client worker's grant is known from its belief (history.Believe).
func CheckFencing(ops []history.Op, cfg Config) Result {
	res := newResult("fencing")
	type grant struct {
		lock, session string
		token         uint64
	}
	granted := map[grant]bool{} // every (lock, session, token) seen granted
	for _, op := range ops {
		if s, t, ok := holderSeen(op); ok {
			granted[grant{op.Lock, s, t}] = true
		}
		if op.Kind == history.Believe {
			granted[grant{op.Lock, op.Session, op.OutToken}] = true
		}
	}
	var writes []history.Op
	unchecked := 0
	for _, op := range ops {
		switch {
		case op.Kind == history.Write && op.Unchecked:
			unchecked++
		case op.Kind == history.Write:
			writes = append(writes, op)
		}
	}
	sort.Slice(writes, func(i, j int) bool { return writes[i].ID < writes[j].ID })

	highest := map[string]history.Op{}       // lock -> accepted write with the highest token
	writer := map[string]map[uint64]string{} // lock -> token -> session whose write was accepted
	accepted, rejected := 0, 0
	for _, w := range writes {
		if w.Type != history.OK {
			rejected++
			continue
		}
		accepted++
		if h, ok := highest[w.Lock]; ok && w.Token < h.Token {
			res.violate("lock %q: resource accepted token %d after token %d:\n%s\nafter\n%s", w.Lock, w.Token, h.Token, w, h)
		}
		if h, ok := highest[w.Lock]; !ok || w.Token > h.Token {
			highest[w.Lock] = w
		}
		if !granted[grant{w.Lock, w.Session, w.Token}] {
			res.violate("lock %q: accepted write under token %d by session %s, which was never seen holding it:\n%s",
				w.Lock, w.Token, shortID(w.Session), w)
		}
		if writer[w.Lock] == nil {
			writer[w.Lock] = map[uint64]string{}
		}
		if s, ok := writer[w.Lock][w.Token]; ok && s != w.Session {
			res.violate("lock %q: sessions %s and %s both wrote under token %d:\n%s",
				w.Lock, shortID(s), shortID(w.Session), w.Token, w)
		}
		writer[w.Lock][w.Token] = w.Session
	}
	res.Figures = fmt.Sprintf("%d writes: %d accepted, %d stale rejected", len(writes), accepted, rejected)
	if unchecked > 0 {
		res.Figures += fmt.Sprintf(" (and %d to resources that do not check tokens, not judged here)", unchecked)
	}
	if cfg.ExpectStaleWrites && rejected == 0 {
		res.violate("the schedule paused lock holders but the resource rejected no stale write")
	}
	return res
}

// holderSeen returns the (session, token) an op shows holding its lock: server answers only,
// including those the Go client relayed (its reads, and the leaders Observe reported), but not
// the client's own claims (its grants and beliefs).
func holderSeen(op history.Op) (string, uint64, bool) {
	switch {
	case op.Kind == history.Observe && op.Type == history.OK && op.OutSession != "":
		return op.OutSession, op.OutToken, true
	case op.Kind == history.Acquire && op.Type == history.OK:
		s := op.OutSession
		if s == "" {
			s = op.Session
		}
		return s, op.OutToken, true
	case op.Kind == history.Read && op.Type == history.OK && op.Held:
		return op.OutSession, op.OutToken, true
	case op.Kind == history.Acquire && op.Type == history.Fail && op.Code == "lock_held" && op.OutSession != "":
		return op.OutSession, op.OutToken, true
	}
	return "", 0, false
}

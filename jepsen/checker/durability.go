package checker

import (
	"fmt"

	"github.com/raftlock/raftlock/api"
	"github.com/raftlock/raftlock/jepsen/history"
)

// CheckDurability checks that nothing acknowledged is undone later:
//
//   - after an acknowledged release of (session, token), no op invoked later sees that session
//     holding the lock under that token;
//   - after an acknowledged destroy, or a definite session_not_found, no op invoked later
//     succeeds for that session or sees it holding a lock (a lost session is never revived);
//   - after each power loss, the state the cluster holds keeps everything acknowledged (see
//     checkPowerLosses).
func CheckDurability(ops []history.Op, cfg Config) Result {
	res := newResult("durability")
	type key struct {
		lock, session string
		token         uint64
	}
	released := map[key]history.Op{} // earliest-completing acknowledged release
	ended := map[string]history.Op{} // earliest-completing proof that a session ended
	releases, ends := 0, 0
	for _, op := range ops {
		switch {
		case op.Kind == history.Release && op.Type == history.OK:
			releases++
			k := key{op.Lock, op.Session, op.Token}
			if prev, ok := released[k]; !ok || op.Complete < prev.Complete {
				released[k] = op
			}
		case op.Session != "" && provesEnd(op):
			ends++
			if prev, ok := ended[op.Session]; !ok || op.Complete < prev.Complete {
				ended[op.Session] = op
			}
		}
	}
	for _, op := range ops {
		if s, t, ok := holderSeen(op); ok {
			if r, ok := released[key{op.Lock, s, t}]; ok && op.Invoke > r.Complete {
				res.violate("lock %q: release of token %d by %s was acknowledged, then undone:\n%s\nthen\n%s",
					op.Lock, t, shortID(s), r, op)
			}
			if e, ok := ended[s]; ok && op.Invoke > e.Complete {
				res.violate("session %s ended, then was seen holding lock %q:\n%s\nthen\n%s", shortID(s), op.Lock, e, op)
			}
		}
		if op.Session == "" || op.Type != history.OK || !sessionOp(op.Kind) {
			continue
		}
		if e, ok := ended[op.Session]; ok && op.Invoke > e.Complete {
			res.violate("session %s ended, then an op on it succeeded:\n%s\nthen\n%s", shortID(op.Session), e, op)
		}
	}
	res.Figures = fmt.Sprintf("%d acknowledged releases, %d session ends (destroy or %s)", releases, ends, api.CodeSessionNotFound)
	res.Figures += checkPowerLosses(&res, ops, cfg)
	return res
}

// sessionOp reports whether an op's success needs its session alive.
func sessionOp(k history.Kind) bool {
	switch k {
	case history.Renew, history.Destroy, history.Acquire, history.Release:
		return true
	}
	return false
}

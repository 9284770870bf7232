package checker

import (
	"sort"
	"strings"
)

// stateSet is the set of states a lock may be in.
type stateSet []lockState

func (a lockState) less(b lockState) bool {
	switch {
	case a.holder != b.holder:
		return a.holder < b.holder
	case a.token != b.token:
		return a.token < b.token
	case a.tokLB != b.tokLB:
		return a.tokLB < b.tokLB
	case a.minNext != b.minNext:
		return a.minNext < b.minNext
	case a.dead != b.dead:
		return a.dead < b.dead
	}
	return a.fenced < b.fenced
}

// canonical sorts the set, removes duplicates and drops subsumed states.
func (ss stateSet) canonical() stateSet {
	sort.Slice(ss, func(i, j int) bool { return ss[i].less(ss[j]) })
	var uniq stateSet
	for i, s := range ss {
		if i == 0 || s != ss[i-1] {
			uniq = append(uniq, s)
		}
	}
	out := uniq[:0:0]
	for i, x := range uniq {
		dropped := false
		for j, y := range uniq {
			if i != j && subsumes(y, x) {
				dropped = true
				break
			}
		}
		if !dropped {
			out = append(out, x)
		}
	}
	return out
}

// hash is FNV-1a over the states' fields; it is called for every cache lookup, so it avoids
// formatting and allocation.
func (ss stateSet) hash() uint64 {
	const prime = 1099511628211
	h := uint64(14695981039346656037)
	mix := func(v uint64) {
		for i := 0; i < 8; i++ {
			h ^= v & 0xff
			h *= prime
			v >>= 8
		}
	}
	for _, s := range ss {
		mix(uint64(s.holder))
		mix(s.token)
		mix(s.tokLB)
		mix(s.minNext)
		for i := 0; i < len(s.dead); i++ {
			h ^= uint64(s.dead[i])
			h *= prime
		}
		mix(0xfe)
		for i := 0; i < len(s.fenced); i++ {
			h ^= uint64(s.fenced[i])
			h *= prime
		}
		mix(0xff)
	}
	return h
}

func (ss stateSet) equal(o stateSet) bool {
	if len(ss) != len(o) {
		return false
	}
	for i := range ss {
		if ss[i] != o[i] {
			return false
		}
	}
	return true
}

// subsumes reports whether x is y with some more sessions expired: everything x can still do,
// y can do too, by expiring those sessions when it matters. Dead sets are sorted big-endian
// numbers, so string order is numeric order.
func subsumes(y, x lockState) bool {
	if x.minNext != y.minNext || x.fenced != y.fenced || len(x.dead) <= len(y.dead) {
		return false
	}
	if x.holder != 0 {
		if y.holder != x.holder || y.token != x.token || y.tokLB != x.tokLB {
			return false
		}
	} else if y.holder != 0 && !x.isDead(y.holder) {
		return false
	}
	i, j := 0, 0
	for i < len(y.dead) {
		if j >= len(x.dead) {
			return false
		}
		switch c := strings.Compare(string(y.dead[i:i+4]), string(x.dead[j:j+4])); {
		case c == 0:
			i, j = i+4, j+4
		case c > 0:
			j += 4
		default:
			return false
		}
	}
	return true
}

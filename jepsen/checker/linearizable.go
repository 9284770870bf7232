package checker

import (
	"fmt"
	"sort"

	"github.com/anishathalye/porcupine"

	"github.com/raftlock/raftlock/api"
	"github.com/raftlock/raftlock/jepsen/history"
)

// Linearizability is the outcome of the porcupine check, kept to draw its visualisation.
type Linearizability struct {
	// Result is the verdict.
	Result Result
	model  porcupine.Model
	info   porcupine.LinearizationInfo
}

// sessionNames numbers session ids densely for the model; 0 stays "none". Sessions of the Go
// client (foreign: their requests are not recorded) get numbers with foreignBit set.
type sessionNames struct {
	ids     map[string]uint32
	names   []string
	foreign map[string]bool
}

func newSessionNames(ops []history.Op) *sessionNames {
	return &sessionNames{ids: map[string]uint32{}, foreign: clientSessions(ops)}
}

// clientSessions are the sessions created through the Go client.
func clientSessions(ops []history.Op) map[string]bool {
	out := map[string]bool{}
	for _, op := range ops {
		if (op.Kind == history.ClientSession || op.Kind == history.Believe) && op.Session != "" {
			out[op.Session] = true
		}
	}
	return out
}

func (n *sessionNames) id(s string) uint32 {
	if s == "" {
		return 0
	}
	if id, ok := n.ids[s]; ok {
		return id
	}
	n.names = append(n.names, s)
	id := uint32(len(n.names))
	if n.foreign[s] {
		id |= foreignBit
	}
	n.ids[s] = id
	return id
}

func (n *sessionNames) name(id uint32) string {
	k := int(id &^ foreignBit)
	if id == 0 || id == anyHolder || k > len(n.names) {
		return "-"
	}
	if isForeign(id) {
		return "client:" + shortID(n.names[k-1])
	}
	return shortID(n.names[k-1])
}

// CheckLinearizable checks lock operations with porcupine, one partition per lock. Destroys of
// every session that touched a lock, and its renewals while it may have held the lock, are
// copied into that lock's partition, since they say whether the session was alive. An op with
// an unknown outcome may take effect until the session is proven ended (a later 404 or an
// acknowledged destroy), or, for an acquire, until a cancel of its attempt was acknowledged;
// after that it cannot.
func CheckLinearizable(ops []history.Op, cfg Config) *Linearizability {
	res := newResult("linearizable")
	names := newSessionNames(ops)
	pops := toPorcupine(ops, names, cfg)
	model := lockModel(names.name, lastReturns(pops), attemptReturns(pops))
	l := &Linearizability{model: model}
	if len(pops) == 0 {
		res.Figures = "no lock operations"
		l.Result = res
		return l
	}
	verdict, info := porcupine.CheckOperationsVerbose(model, pops, cfg.LinearizabilityTimeout)
	l.info = info
	parts := partitionByLock(pops)
	unknown := 0
	for _, p := range pops {
		if p.Output.(lockOutput).out == outUnknown {
			unknown++
		}
	}
	reads, atFollowers := 0, 0
	for _, p := range pops {
		if op := p.Metadata.(history.Op); op.Kind == history.Read && op.Type == history.OK {
			reads++
			if op.AtFollower {
				atFollowers++
			}
		}
	}
	res.Figures = fmt.Sprintf("%d ops in %d segments of %d locks (%d unknown outcomes; %d reads, %d at followers): %s",
		len(pops), len(parts), len(lastReturns(pops)), unknown, reads, atFollowers, verdict)
	switch verdict {
	case porcupine.Unknown:
		res.violate("porcupine timed out after %s: inconclusive", cfg.LinearizabilityTimeout)
	case porcupine.Illegal:
		reportIllegal(&res, parts, info.PartialLinearizationsOperations())
	}
	l.Result = res
	return l
}

// reportIllegal names each lock whose partition is not linearizable and the first op that no
// linearization could place.
func reportIllegal(res *Result, parts [][]porcupine.Operation, partials [][][]porcupine.Operation) {
	for i, part := range parts {
		best := 0
		placed := map[int]bool{}
		for _, lin := range partials[i] {
			if len(lin) > best {
				best = len(lin)
				placed = map[int]bool{}
				for _, op := range lin {
					placed[op.Metadata.(history.Op).ID] = true
				}
			}
		}
		if best == len(part) {
			continue
		}
		lock := part[0].Input.(lockInput).lock
		var stuck []history.Op
		for _, op := range part {
			if h := op.Metadata.(history.Op); !placed[h.ID] {
				stuck = append(stuck, h)
			}
		}
		sort.Slice(stuck, func(a, b int) bool { return stuck[a].Invoke < stuck[b].Invoke })
		msg := fmt.Sprintf("lock %q is not linearizable in %s..%s: the longest linearization places %d of %d ops; first op it cannot place:\n%s",
			lock, secs(part[0].Call), secs(part[len(part)-1].Return), best, len(part), stuck[0])
		res.violate("%s", msg)
	}
}

// toPorcupine converts the history to porcupine operations.
func toPorcupine(ops []history.Op, names *sessionNames, cfg Config) []porcupine.Operation {
	waited := waitedReads(ops, cfg)
	var horizon int64
	sessionsOf := map[string]map[string]bool{} // lock -> sessions that acted on it
	deaths := map[string][]int64{}             // session -> completion times proving its end
	cancels := map[[2]string]int64{}           // session, attempt -> first acknowledged cancel
	clients := map[int]int{}
	for _, op := range ops {
		if op.Complete > horizon {
			horizon = op.Complete
		}
		if op.Kind == history.Cancel && op.Type == history.OK && op.Attempt != "" {
			k := [2]string{op.Session, op.Attempt}
			if c, ok := cancels[k]; !ok || op.Complete < c {
				cancels[k] = op.Complete
			}
		}
		if (op.Kind == history.Acquire || op.Kind == history.Release || op.Kind == history.Cancel) && op.Session != "" {
			if sessionsOf[op.Lock] == nil {
				sessionsOf[op.Lock] = map[string]bool{}
			}
			sessionsOf[op.Lock][op.Session] = true
		}
		if op.Session != "" && provesEnd(op) {
			deaths[op.Session] = append(deaths[op.Session], op.Complete)
		}
		if _, ok := clients[op.Process]; !ok && op.Kind != history.Nemesis {
			clients[op.Process] = len(clients)
		}
	}
	for _, d := range deaths {
		sort.Slice(d, func(i, j int) bool { return d[i] < d[j] })
	}
	ret := func(op history.Op, out lockOutput) int64 {
		if out.out != outUnknown {
			return op.Complete
		}
		d := deaths[op.Session]
		if len(d) > 0 && d[0] < op.Invoke {
			return op.Invoke // the session had already ended: no effect possible
		}
		end := horizon + 1
		if k := sort.Search(len(d), func(i int) bool { return d[i] >= op.Invoke }); k < len(d) {
			end = d[k]
		}
		if c, ok := cancels[[2]string{op.Session, op.Attempt}]; ok && op.Kind == history.Acquire && op.Attempt != "" && c >= op.Invoke {
			end = min(end, c)
		}
		return end
	}
	windows := newHoldWindows(ops)
	attempts := map[[2]string]uint32{} // session, attempt -> number
	attemptID := func(op history.Op) uint32 {
		if op.Attempt == "" || (op.Kind != history.Acquire && op.Kind != history.Cancel) {
			return 0
		}
		k := [2]string{op.Session, op.Attempt}
		if _, ok := attempts[k]; !ok {
			attempts[k] = uint32(len(attempts) + 1)
		}
		return attempts[k]
	}
	var out []porcupine.Operation
	add := func(op history.Op, lock string, o lockOutput) {
		call := op.Invoke
		if t, ok := waited[op.ID]; ok {
			call = t
		}
		out = append(out, porcupine.Operation{
			ClientId: clients[op.Process],
			Input: lockInput{lock: lock, call: call, kind: op.Kind, session: names.id(op.Session), token: op.Token,
				attempt: attemptID(op)},
			Call:     call,
			Output:   o,
			Return:   ret(op, o),
			Metadata: op,
		})
	}
	for _, op := range ops {
		o, ok := modelOutput(op, names)
		if !ok {
			continue
		}
		switch op.Kind {
		case history.Acquire, history.Release, history.Read, history.Cancel:
			add(op, op.Lock, o)
		case history.Destroy:
			for _, lock := range sortedKeys(sessionsOf) {
				if sessionsOf[lock][op.Session] {
					add(op, lock, o)
				}
			}
		case history.Renew:
			for _, lock := range sortedKeys(sessionsOf) {
				if windows.covers(lock, op.Session, op.Invoke, op.Complete) {
					add(op, lock, o)
				}
			}
		}
	}
	segmentOps(out)
	return out
}

// waitedReads returns, by op ID, the earliest instant at which each blocking read that waited
// its whole wait can have been answered. A blocking read is a read whose linearization point
// lies between its invocation and its completion; one that found no change (its modify_index
// not above its index) was held by the server until the wait elapsed, on the server's clock,
// which began after the invocation: its answer is the lock's state at or after invocation +
// wait·(1 − ClockRateError). That is what catches a node that answers a long wait from a state
// it stopped applying when it was deposed. A node that stops gracefully ends waits early, so
// reads that meet a restart or restart-all fault keep the plain interval, as do reads answered
// before the wait could have elapsed.
func waitedReads(ops []history.Op, cfg Config) map[int]int64 {
	var stops []history.Interval
	for _, f := range history.Faults(ops) {
		if f.Fault == FaultRestart || f.Fault == FaultRestartAll {
			stops = append(stops, f)
		}
	}
	out := map[int]int64{}
	for _, op := range ops {
		if op.Kind != history.Read || op.Type != history.OK || op.WaitNS <= 0 || op.OutIndex > op.Index {
			continue
		}
		at := op.Invoke + int64(float64(op.WaitNS)*(1-cfg.ClockRateError))
		if at > op.Complete {
			continue
		}
		near := false
		for _, f := range stops {
			near = near || f.Start <= op.Complete && op.Invoke <= f.End
		}
		if !near {
			out[op.ID] = at
		}
	}
	return out
}

// segmentMin is the fewest ops a segment of a lock's history holds before it may be cut.
const segmentMin = 1000

// segmentOps cuts each lock's ops where none is pending (every earlier op returned before the
// next is invoked), once the segment holds segmentMin ops. No linearization crosses such a cut,
// so each segment is checked alone, from a lock that is free or held by anyone, with the lowest
// next token that the earlier segments showed. That check can only be weaker than one over the
// whole history, never stricter, and its cost grows with the segments rather than the history.
// What crosses a cut (an acknowledged release undone, a session revived, a second grant while
// the holder renews) is what the durability and expiry checkers look for.
func segmentOps(ops []porcupine.Operation) {
	byLock := map[string][]int{}
	for i, op := range ops {
		l := op.Input.(lockInput).lock
		byLock[l] = append(byLock[l], i)
	}
	for _, idx := range byLock {
		sort.SliceStable(idx, func(a, b int) bool { return ops[idx[a]].Call < ops[idx[b]].Call })
		seg, size, fresh := 0, 0, true
		var maxReturn int64
		var maxToken, floor uint64
		for _, i := range idx {
			op := ops[i]
			if size >= segmentMin && maxReturn < op.Call {
				seg, size, fresh, floor = seg+1, 0, false, maxToken+1
			}
			in := op.Input.(lockInput)
			in.segment, in.fresh, in.floor = seg, fresh, floor
			ops[i].Input = in
			size++
			maxReturn = max(maxReturn, op.Return)
			if o := op.Output.(lockOutput); o.out == outOK || o.out == outHeld {
				maxToken = max(maxToken, o.token)
			}
		}
	}
}

// lastReturns indexes, per lock and session, the latest return of the session's ops.
func lastReturns(pops []porcupine.Operation) map[string]map[uint32]int64 {
	out := map[string]map[uint32]int64{}
	for _, p := range pops {
		in := p.Input.(lockInput)
		if in.session == 0 {
			continue
		}
		if out[in.lock] == nil {
			out[in.lock] = map[uint32]int64{}
		}
		if p.Return > out[in.lock][in.session] {
			out[in.lock][in.session] = p.Return
		}
	}
	return out
}

// attemptReturns indexes, per attempt, the latest return of its ops.
func attemptReturns(pops []porcupine.Operation) map[uint32]int64 {
	out := map[uint32]int64{}
	for _, p := range pops {
		if in := p.Input.(lockInput); in.attempt != 0 && p.Return > out[in.attempt] {
			out[in.attempt] = p.Return
		}
	}
	return out
}

// provesEnd reports whether a definite answer shows the session had ended by its completion.
func provesEnd(op history.Op) bool {
	if op.Kind == history.Destroy && op.Type == history.OK {
		return true
	}
	return op.Type == history.Fail && op.Code == api.CodeSessionNotFound
}

// modelOutput maps an op's outcome to the model; false drops an op that says nothing about the
// lock (a refusal that applied nothing, a lost read or renewal).
func modelOutput(op history.Op, names *sessionNames) (lockOutput, bool) {
	switch op.Kind {
	case history.Acquire, history.Release, history.Read, history.Renew, history.Destroy, history.Cancel:
	default:
		return lockOutput{}, false
	}
	switch op.Type {
	case history.OK:
		o := lockOutput{out: outOK, token: op.OutToken}
		if op.Kind == history.Read || op.Kind == history.Cancel {
			o.held = op.Held
			o.holder = names.id(op.OutSession)
		}
		return o, true
	case history.Info:
		// A lost cancel may or may not have fenced its attempt: it bounds nothing, and says
		// nothing else.
		if op.Kind == history.Read || op.Kind == history.Renew || op.Kind == history.Cancel {
			return lockOutput{}, false
		}
		return lockOutput{out: outUnknown}, true
	}
	switch op.Code {
	case api.CodeLockHeld:
		if op.Kind != history.Acquire {
			return lockOutput{}, false
		}
		return lockOutput{out: outHeld, held: true, holder: names.id(op.OutSession), token: op.OutToken}, true
	case api.CodeLockDelayed:
		return lockOutput{out: outDelayed}, op.Kind == history.Acquire
	case api.CodeNotHolder:
		return lockOutput{out: outNotHolder}, op.Kind == history.Release
	case api.CodeSessionNotFound:
		return lockOutput{out: outNoSession}, op.Kind != history.Read
	}
	return lockOutput{}, false
}

// WriteHTML writes porcupine's visualisation of the check, with each fault interval drawn as an
// annotation.
func (l *Linearizability) WriteHTML(path string, faults []history.Interval) error {
	var ann []porcupine.Annotation
	for _, f := range faults {
		color := "#f9d6d5"
		if !clusterFault(f.Fault) {
			color = "#d5e8f9"
		}
		ann = append(ann, porcupine.Annotation{
			Tag:             "nemesis: " + f.Fault,
			Start:           f.Start,
			End:             f.End,
			Description:     fmt.Sprintf("%s %s", f.Fault, f.Detail),
			Details:         fmt.Sprintf("fault %d: %s %s from %s to %s", f.FaultID, f.Fault, f.Detail, secs(f.Start), secs(f.End)),
			BackgroundColor: color,
		})
	}
	l.info.AddAnnotations(ann)
	if err := porcupine.VisualizePath(l.model, l.info, path); err != nil {
		return fmt.Errorf("checker: write visualisation: %w", err)
	}
	return nil
}

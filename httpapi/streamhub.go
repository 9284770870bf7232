package httpapi

import (
	"net"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/raftlock/raftlock/api"
	"github.com/raftlock/raftlock/fsm"
)

// streamHub hands the changes this node applies to its open streams. One goroutine, the pump,
// reads the node's change log after the index it reached (never holding up the apply loop: it
// reads what the log already has) and, for each command's changes, looks up the topics (the
// distinct prefixes watched) that each changed lock falls under by the lengths in use, encodes
// each topic's event once per ACL view (once in all without ACLs), and appends it to each
// subscriber's bounded queue. A subscriber whose queue is full is dropped with a reset rather
// than slow the others; its client resumes from the last event it got. The pump also sends
// the progress events, tells every stream when the node has heard from no leader for longer
// than an election timeout, and ends them if the silence lasts (streamEndSilences). A stream
// costs its subscriber (a few hundred bytes) and its connection; a prefix watched, an entry in
// one topic's set.
type streamHub struct {
	s        *Server
	buffer   int           // events a subscriber may have queued
	progress time.Duration // between progress events

	mu      sync.Mutex
	topics  map[string]*topic
	lengths map[int]int // how many topics have each prefix length
	subs    map[*subscriber]struct{}
	cursor  uint64 // every change up to cursor was handed to the subscribers
	running bool   // the pump runs (while there are subscribers)
	// heard is when the node last heard from a leader, as the pump's ticks saw it; silent that
	// the streams were told it has been longer than an election timeout.
	heard  time.Time
	silent bool

	dropped prometheus.Counter // streams dropped for reading too slowly
	writers detachedWriters    // write the detached streams (streamconn.go)
}

// topic is one prefix some stream watches, with its subscribers.
type topic struct {
	prefix string
	subs   map[*subscriber]struct{}
}

// subscriber is one open stream as the hub sees it.
type subscriber struct {
	set    *prefixSet
	secret string // its token, resolved again for each event under ACL
	after  uint64 // it read the changes up to after itself: the hub sends only later ones
	wake   chan struct{}

	// conn is a detached stream's connection (streamconn.go), written by the hub's writers;
	// release frees its place among its client's blocking queries when it ends. Nil for a
	// stream its handler's goroutine writes.
	conn    net.Conn
	release func()

	mu        sync.Mutex
	queue     [][]byte // events to write, shared with the other subscribers of the same view
	last      uint64   // the index of the last change queued
	end       []byte   // set once: the last event, after which the stream ends
	scheduled bool     // a detached stream on the writers' ready list, or being written
	closed    bool     // a detached stream whose connection is closed
}

func newStreamHub(s *Server) *streamHub {
	h := &streamHub{s: s, buffer: s.cfg.StreamBuffer, progress: s.cfg.StreamProgress,
		topics: map[string]*topic{}, lengths: map[int]int{}, subs: map[*subscriber]struct{}{}}
	h.writers.h = h
	if h.buffer <= 0 {
		h.buffer = defaultStreamBuffer
	}
	if h.progress <= 0 {
		h.progress = defaultStreamProgress
	}
	h.dropped = prometheus.NewCounter(prometheus.CounterOpts{Name: "raftlock_watch_streams_dropped_total",
		Help: "Streamed watches dropped with a reset because their client read more slowly than changes came."})
	s.metrics.reg.MustRegister(h.dropped, prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "raftlock_watch_streams",
		Help: "Streamed watches open on this node (each holds a connection)."}, func() float64 { return float64(h.count()) }))
	return h
}

// register hands sub to the hub, to get every change after after, unless the hub has already
// handed on changes after it: then it returns false, and the stream reads on from the change
// log itself first.
func (h *streamHub) register(sub *subscriber, after uint64) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	if !h.running {
		// The pump starts where the change log is now; every later change goes through it.
		h.cursor = h.s.node.Changes("", 0, 0).Next
		h.heard, h.silent = h.s.node.LeaderContact(), false
		h.running = true
		go h.pump()
	}
	if after < h.cursor {
		return false
	}
	sub.after, sub.last = after, after
	h.subs[sub] = struct{}{}
	for _, p := range sub.set.list {
		t := h.topics[p]
		if t == nil {
			t = &topic{prefix: p, subs: map[*subscriber]struct{}{}}
			h.topics[p] = t
			h.lengths[len(p)]++
		}
		t.subs[sub] = struct{}{}
	}
	return true
}

// remove takes sub out of the hub (it may be out already).
func (h *streamHub) remove(sub *subscriber) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.removeLocked(sub)
}

func (h *streamHub) removeLocked(sub *subscriber) {
	if _, ok := h.subs[sub]; !ok {
		return
	}
	delete(h.subs, sub)
	for _, p := range sub.set.list {
		t := h.topics[p]
		if t == nil {
			continue
		}
		delete(t.subs, sub)
		if len(t.subs) == 0 {
			delete(h.topics, p)
			if h.lengths[len(p)]--; h.lengths[len(p)] == 0 {
				delete(h.lengths, len(p))
			}
		}
	}
}

// count returns how many streams are open.
func (h *streamHub) count() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.subs)
}

// pump hands every change to the subscribers, until there are none or the server closes.
func (h *streamHub) pump() {
	tick := time.NewTicker(min(time.Second, max(h.s.node.ElectionTimeout()/2, 10*time.Millisecond), h.progress))
	defer tick.Stop()
	lastProgress := time.Now()
	for {
		wake := h.s.node.WatchPrefix("") // taken before the read, so no change is missed
		h.mu.Lock()
		if len(h.subs) == 0 || h.s.closing.Err() != nil {
			h.running = false
			h.mu.Unlock()
			return
		}
		ch := h.s.node.Changes("", h.cursor, maxWatchChanges)
		if ch.Reset {
			// A restore, or changes evicted before the pump read them: no stream can be
			// told every change, so each ends and resumes from its last id.
			h.endAllLocked(sseJSON(api.EventReset, 0, false, streamEnding{Index: h.cursor, Reason: api.ResetRestored}))
		} else {
			h.dispatchLocked(ch.Locks)
		}
		h.cursor = max(h.cursor, ch.Next)
		h.mu.Unlock()
		if len(ch.Locks) > 0 {
			continue // there may be more: read on before waiting
		}
		select {
		case <-wake:
		case now := <-tick.C:
			h.tick(now, &lastProgress)
		case <-h.s.closing.Done():
			// The streams' own goroutines tell their clients; the detached ones are told
			// here.
			h.mu.Lock()
			h.running = false
			var detached []*subscriber
			for sub := range h.subs {
				if sub.conn != nil {
					detached = append(detached, sub)
				}
			}
			h.mu.Unlock()
			h.writers.stopAll()
			end := endFrame(noLeader("the node is shutting down: resume through another node from the last event id"))
			for _, sub := range detached {
				_ = writeConn(sub.conn, 100*time.Millisecond, [][]byte{end})
				h.closeDetached(sub)
			}
			return
		}
	}
}

// streamEndSilences is how many election timeouts without a word from a leader a node waits
// before it ends its streams; after one it tells them at once (a progress event with
// leader_silent_ms). A late heartbeat on a busy machine thus costs a progress event, not every
// stream's end and reconnection at once.
const streamEndSilences = 3

// tick tells every stream when the node has heard from no leader for longer than an election
// timeout, and ends them after streamEndSilences of them; ends under ACL the streams whose
// token is gone; and sends the progress events.
func (h *streamHub) tick(now time.Time, lastProgress *time.Time) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if contact := h.s.node.LeaderContact(); contact.After(h.heard) {
		h.heard = contact
	}
	silence, timeout := now.Sub(h.heard), h.s.node.ElectionTimeout()
	switch {
	case silence > streamEndSilences*timeout:
		h.endAllLocked(endFrame(noLeader("this node has heard from no leader for %s; its changes may be behind: resume through another node from the last event id", silence.Round(time.Millisecond))))
		return
	case silence > timeout && !h.silent:
		h.silent = true
		*lastProgress = time.Time{} // a progress event now, saying so
	case silence <= timeout:
		h.silent = false
	}
	if h.s.cfg.ACL {
		known := map[string]bool{}
		for sub := range h.subs {
			ok, seen := known[sub.secret]
			if !seen {
				_, err := h.s.identityOf(sub.secret)
				ok = err == nil
				known[sub.secret] = ok
			}
			if !ok {
				h.endLocked(sub, endFrame(unauthorized("the stream's token no longer exists: the stream ends")))
			}
		}
	}
	if now.Sub(*lastProgress) < h.progress {
		return
	}
	*lastProgress = now
	p := api.StreamProgress{Index: h.cursor, AppliedIndex: h.s.node.AppliedIndex()}
	if h.silent {
		// Rounded up: a silence just past a timeout of whole milliseconds must not read as
		// equal to it.
		p.LeaderSilentMs = int64((silence + time.Millisecond - 1) / time.Millisecond)
	}
	f := sseJSON(api.EventProgress, h.cursor, true, p)
	for sub := range h.subs {
		if sub.after <= h.cursor {
			h.pushLocked(sub, h.cursor, f)
		}
	}
}

// endAllLocked ends every stream with the event end.
func (h *streamHub) endAllLocked(end []byte) {
	for sub := range h.subs {
		h.endLocked(sub, end)
	}
}

// endLocked ends sub's stream after what it has queued, with the event end.
func (h *streamHub) endLocked(sub *subscriber, end []byte) {
	sub.mu.Lock()
	if sub.end == nil {
		sub.end = end
	}
	sub.mu.Unlock()
	h.removeLocked(sub)
	h.notify(sub)
}

// pushLocked queues the event f, of index, for sub; a full queue drops sub with a reset.
func (h *streamHub) pushLocked(sub *subscriber, index uint64, f []byte) {
	sub.mu.Lock()
	if sub.end != nil {
		sub.mu.Unlock()
		return
	}
	if len(sub.queue) >= h.buffer {
		sub.end = sseJSON(api.EventReset, 0, false, streamEnding{Index: sub.last, Reason: api.ResetBehind})
		sub.mu.Unlock()
		h.dropped.Inc()
		h.removeLocked(sub)
		h.notify(sub)
		return
	}
	sub.queue = append(sub.queue, f)
	sub.last = max(sub.last, index)
	sub.mu.Unlock()
	h.notify(sub)
}

// take returns the events queued (appended to buf) and, once, the stream's last event.
func (sub *subscriber) take(buf [][]byte) ([][]byte, []byte) {
	sub.mu.Lock()
	defer sub.mu.Unlock()
	buf = append(buf, sub.queue...)
	clear(sub.queue)
	sub.queue = sub.queue[:0]
	if cap(sub.queue) > 64 {
		sub.queue = nil // a burst's queue is not kept by a stream that waits again
	}
	end := sub.end
	if end != nil {
		sub.end = []byte{} // taken
	}
	if len(end) == 0 {
		end = nil
	}
	return buf, end
}

// notify wakes whoever writes sub's stream: its handler's goroutine, or for a detached one
// the hub's writers.
func (h *streamHub) notify(sub *subscriber) {
	if sub.conn != nil {
		h.writers.schedule(sub)
		return
	}
	signal(sub.wake)
}

func signal(ch chan struct{}) {
	select {
	case ch <- struct{}{}:
	default:
	}
}

// frameKey names an event shared by the subscribers of one topic with one view (token).
type frameKey struct {
	t      *topic
	secret string
}

// view is a token's identity as resolved for one command's events.
type view struct {
	id  *identity
	err *apiError
}

// dispatchLocked hands the changes (in log order) to the subscribers, one command at a time.
func (h *streamHub) dispatchLocked(locks []fsm.LockView) {
	for i := 0; i < len(locks); {
		j := i
		for j < len(locks) && locks[j].ModifyIndex == locks[i].ModifyIndex {
			j++
		}
		h.dispatchIndex(locks[i].ModifyIndex, locks[i:j])
		i = j
	}
}

// multiHit gathers the changes of one command under the several prefixes of one stream.
type multiHit struct {
	first  *topic
	topics int
	picks  []int
}

// dispatchIndex hands the changes of the command at index to the subscribers of the topics
// they fall under: each topic's event is encoded once per view and shared; a stream of several
// prefixes that more than one of them matched gets one event of its own.
func (h *streamHub) dispatchIndex(index uint64, batch []fsm.LockView) {
	hits := map[*topic][]int{}
	for k := range batch {
		name := batch[k].Name
		for n := range h.lengths {
			if n > len(name) {
				continue
			}
			if t := h.topics[name[:n]]; t != nil {
				hits[t] = append(hits[t], k)
			}
		}
	}
	if len(hits) == 0 {
		return
	}
	views := map[string]view{}
	frames := map[frameKey][]byte{}
	viewOf := func(secret string) view {
		v, ok := views[secret]
		if !ok {
			id, err := h.s.identityOf(secret)
			v = view{id: id, err: err}
			views[secret] = v
		}
		return v
	}
	shared := func(sub *subscriber, t *topic, picks []int) {
		v := viewOf(sub.secret)
		if v.err != nil {
			h.endLocked(sub, endFrame(v.err))
			return
		}
		key := frameKey{t, sub.secret}
		f, ok := frames[key]
		if !ok {
			f = h.s.changeFrame(v.id, nil, index, batch, picks)
			frames[key] = f
		}
		if f != nil {
			h.pushLocked(sub, index, f)
		}
	}
	var multi map[*subscriber]*multiHit
	for t, picks := range hits {
		for sub := range t.subs {
			if sub.after >= index {
				continue
			}
			if sub.set.m == nil {
				shared(sub, t, picks)
				continue
			}
			if multi == nil {
				multi = map[*subscriber]*multiHit{}
			}
			m := multi[sub]
			if m == nil {
				m = &multiHit{first: t}
				multi[sub] = m
			}
			m.topics++
			m.picks = append(m.picks, picks...)
		}
	}
	for sub, m := range multi {
		if m.topics == 1 {
			shared(sub, m.first, m.picks)
			continue
		}
		v := viewOf(sub.secret)
		if v.err != nil {
			h.endLocked(sub, endFrame(v.err))
			continue
		}
		// Each change once, in the command's order, however many prefixes it fell under.
		picks := make([]int, 0, len(batch))
		for k := range batch {
			if sub.set.match(batch[k].Name) {
				picks = append(picks, k)
			}
		}
		if f := h.s.changeFrame(v.id, nil, index, batch, picks); f != nil {
			h.pushLocked(sub, index, f)
		}
	}
}

// identityOf resolves a stream's token now: nil without ACLs; 401 for a token gone.
func (s *Server) identityOf(secret string) (*identity, *apiError) {
	if !s.cfg.ACL {
		return nil, nil
	}
	tok, authz, ok := s.node.ResolveToken(secret)
	if !ok {
		return nil, unauthorized("the stream's token no longer exists: the stream ends")
	}
	return &identity{token: tok, authz: authz}, nil
}

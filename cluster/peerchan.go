package cluster

import (
	"bufio"
	"context"
	"crypto/tls"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/raftlock/raftlock/fsm"
)

// The peer channel is a persistent, multiplexed connection from one node to another on the
// Raft port (a connection whose first byte is channelMarker; see portMux), under the port's
// mutual TLS when it is on. A node opens at most one to each peer and sends every request to
// that peer over it: each request is a frame with an id, a kind, the caller's deadline and a
// payload, and each answer a frame with the same id, so many requests are in flight at once
// and their answers come back in any order. One writer goroutine per connection drains a queue
// and flushes once per batch, so requests (and answers) that arrive together share a write.
// The payload's meaning is the kind's: the channel only carries bytes. A caller that gives up
// sends a cancel frame, which ends the handler's context on the other side, as a closed HTTP
// connection would; a connection lost with requests in flight fails those that were written
// with ErrUnknownOutcome (they may have been acted on) and those that were not with
// ErrChannelUnavailable (nothing was sent). A lost connection is dialled again on the next
// request, with backoff after failed dials.
//
// Adding another kind of request: add a ChannelKind constant below (never reuse a number),
// register its handler on every node with Node.HandleChannel (a func of the request's context
// and payload that returns the answer's payload), and send with Node.CallLeader (or CallPeer).
// A peer of a version that does not know the kind answers ErrChannelUnknownKind, with nothing
// done: fall back to what that version understands. A kind whose requests are not safe to
// repeat must treat ErrUnknownOutcome as the HTTP forward treats a broken connection.

// channelMarker is the first byte of a peer channel connection: not a Raft RPC type (below
// 0x20), not the first letter of an HTTP method (A-Z), and not a TLS record type.
const channelMarker byte = 0xC7

// channelVersion is the version of the framing, sent after the marker; the server answers
// with the marker when it speaks it, and closes the connection otherwise.
const channelVersion byte = 1

// ChannelKind says what a channel request's payload is, and which handler serves it.
type ChannelKind uint8

const (
	// channelCancel ends the request of the frame's id: its caller gave up.
	channelCancel ChannelKind = 0
	// ChannelHTTP is an HTTP request a follower passes to the leader, answered with the
	// leader's HTTP answer (see httpapi).
	ChannelHTTP ChannelKind = 1
)

// The status of an answer frame.
const (
	chanOK          byte = 0
	chanUnknownKind byte = 1
)

var (
	// ErrChannelUnavailable means the request was not sent over the peer channel (the
	// cluster has not enabled it, no leader is known, the peer cannot be reached right now,
	// or the connection broke before the request was written): nothing was done, and the
	// caller may send it another way.
	ErrChannelUnavailable = errors.New("cluster: the peer channel is not available; nothing was sent")
	// ErrChannelUnknownKind means the peer does not serve this kind of request (it runs a
	// version without it, or is shutting down its handler); nothing was done.
	ErrChannelUnknownKind = errors.New("cluster: the peer does not serve this kind of channel request; nothing was done")
)

// ChannelRequest is a request that arrived over the peer channel.
type ChannelRequest struct {
	// Remote is the address of the peer's connection.
	Remote net.Addr
	// TLS is the connection's TLS state (its client certificate was verified by the Raft
	// port's TLS), nil without TLS.
	TLS *tls.ConnectionState
	// Payload is the request's payload; the handler may keep it.
	Payload []byte
}

// ChannelHandler serves one kind of channel request. ctx carries the caller's deadline and
// ends when the caller gives up or the connection is lost; the returned payload is the answer.
type ChannelHandler func(ctx context.Context, req ChannelRequest) []byte

// maxChannelFrame bounds a frame's size (a request's body is bounded far below it).
const maxChannelFrame = 64 << 20

// channelDialTimeout bounds the dial, TLS handshake and hello of a channel connection.
const channelDialTimeout = 2 * time.Second

// channelWriteTimeout bounds one batch's write: a peer that stops reading loses the connection.
const channelWriteTimeout = 10 * time.Second

// Backoff between failed dials to one peer.
const (
	channelMinBackoff = 50 * time.Millisecond
	channelMaxBackoff = 2 * time.Second
)

// peerChannels is a node's side of the peer channel: the handlers it serves, the connections
// it accepted and those it opened.
type peerChannels struct {
	n *Node
	// serves says that this node serves the channel (it knows FeaturePeerChannel and shares
	// its Raft port); only then does it send over it too.
	serves bool

	// work hands a request to an idle worker (serveLoop); with none idle, a new one starts.
	// Workers outlive their request, so their stacks, grown by the handler's deep call chain
	// once, serve the next request without growing again (a new goroutine per request spent
	// a tenth of the leader's CPU copying stacks).
	work chan func()

	mu       sync.Mutex
	handlers map[ChannelKind]*ChannelHandler // a pointer for each registration, which its stop compares
	clients  map[string]*chanClient          // by peer address
	accepted map[*chanConn]struct{}
	closed   bool
	wg       sync.WaitGroup
}

func newPeerChannels(n *Node) *peerChannels {
	return &peerChannels{n: n, work: make(chan func()), handlers: make(map[ChannelKind]*ChannelHandler),
		clients: make(map[string]*chanClient), accepted: make(map[*chanConn]struct{}),
		serves: n.cfg.APIOnRaftPort && slices.Contains(n.fsm.KnownFeatures(), fsm.FeaturePeerChannel)}
}

// HandleChannel makes h serve the requests of kind that arrive over the peer channel, unless
// a handler serves kind already (a second server on one node: the first keeps the channel),
// which ok reports. stop ends h's serving; requests of kind are then answered
// ErrChannelUnknownKind.
func (n *Node) HandleChannel(kind ChannelKind, h ChannelHandler) (stop func(), ok bool) {
	pc := n.chans
	pc.mu.Lock()
	defer pc.mu.Unlock()
	if pc.handlers[kind] != nil {
		return func() {}, false
	}
	own := &h
	pc.handlers[kind] = own
	return func() {
		pc.mu.Lock()
		defer pc.mu.Unlock()
		if pc.handlers[kind] == own {
			delete(pc.handlers, kind)
		}
	}, true
}

// ChannelEnabled reports whether this node sends requests to its peers over the peer channel:
// it serves the channel, and the cluster enabled FeaturePeerChannel (every member serves it).
func (n *Node) ChannelEnabled() bool {
	return n.chans.serves && n.fsm.FeatureEnabled(fsm.FeaturePeerChannel)
}

// CallLeader sends a request of kind to the leader over the peer channel and returns its
// answer, and the id of the leader it asked. An error wrapping ErrChannelUnavailable or
// ErrChannelUnknownKind means nothing was done; one wrapping ErrUnknownOutcome that the
// request was sent and its connection was lost before the answer came; ctx's end returns its
// cause (wrapped with ErrUnknownOutcome if the request was sent).
func (n *Node) CallLeader(ctx context.Context, kind ChannelKind, payload []byte) (string, []byte, error) {
	addr, id := n.raft.LeaderWithID()
	if id == "" || string(id) == n.cfg.ID {
		return string(id), nil, fmt.Errorf("%w: no other node is known to lead", ErrChannelUnavailable)
	}
	out, err := n.callPeer(ctx, string(id), string(addr), kind, payload)
	return string(id), out, err
}

// CallPeer sends a request of kind to the member id at its Raft address addr over the peer
// channel; its answer and errors are CallLeader's.
func (n *Node) CallPeer(ctx context.Context, id, addr string, kind ChannelKind, payload []byte) ([]byte, error) {
	return n.callPeer(ctx, id, addr, kind, payload)
}

func (n *Node) callPeer(ctx context.Context, id, addr string, kind ChannelKind, payload []byte) ([]byte, error) {
	if !n.ChannelEnabled() {
		return nil, fmt.Errorf("%w: the cluster has not enabled it", ErrChannelUnavailable)
	}
	if a, ok := n.cfg.PeerAddrs[id]; ok {
		addr = a
	}
	if addr == "" {
		return nil, fmt.Errorf("%w: no address for %q", ErrChannelUnavailable, id)
	}
	cl := n.chans.client(addr)
	if cl == nil {
		return nil, fmt.Errorf("%w: the node is closing", ErrChannelUnavailable)
	}
	conn, err := cl.get(ctx)
	if err != nil {
		return nil, err
	}
	return conn.call(ctx, kind, payload)
}

// client returns the channel client of addr, nil once the node closes.
func (pc *peerChannels) client(addr string) *chanClient {
	pc.mu.Lock()
	defer pc.mu.Unlock()
	if pc.closed {
		return nil
	}
	cl := pc.clients[addr]
	if cl == nil {
		cl = &chanClient{pc: pc, addr: addr}
		pc.clients[addr] = cl
	}
	return cl
}

// close closes every channel connection, and waits for the goroutines serving accepted ones
// (the port must be closed, or closing, for the accepting one to end).
func (pc *peerChannels) close() {
	pc.shut()
	pc.wg.Wait()
}

// shut closes every channel connection, failing the calls in flight on them, and refuses new
// ones: a node that closes answers nothing more, as its HTTP server's connections close.
func (pc *peerChannels) shut() {
	pc.mu.Lock()
	pc.closed = true
	var conns []*chanConn
	for c := range pc.accepted {
		conns = append(conns, c)
	}
	for _, cl := range pc.clients {
		cl.mu.Lock()
		if cl.conn != nil {
			conns = append(conns, cl.conn)
		}
		cl.mu.Unlock()
	}
	pc.mu.Unlock()
	for _, c := range conns {
		c.fail(net.ErrClosed)
	}
}

// channelWorkerIdle is how long a worker waits for another request before it ends.
const channelWorkerIdle = 10 * time.Second

// run runs job on an idle worker, or on a new one.
func (pc *peerChannels) run(job func()) {
	select {
	case pc.work <- job:
	default:
		go pc.serveLoop(job)
	}
}

// serveLoop runs job, then the jobs handed to it, until it has been idle for
// channelWorkerIdle or the node closes.
func (pc *peerChannels) serveLoop(job func()) {
	idle := time.NewTimer(channelWorkerIdle)
	defer idle.Stop()
	for {
		job()
		idle.Reset(channelWorkerIdle)
		select {
		case job = <-pc.work:
		case <-idle.C:
			return
		case <-pc.n.stop:
			return
		}
	}
}

// chanClient keeps this node's connection to one peer: one at a time, dialled again when lost.
type chanClient struct {
	pc   *peerChannels
	addr string

	mu      sync.Mutex
	conn    *chanConn
	dialing chan struct{} // closed when the dial under way ends
	retryAt time.Time     // no dial before, after a failed one
	backoff time.Duration
}

// get returns a live connection to the peer, dialling one if needed.
func (cl *chanClient) get(ctx context.Context) (*chanConn, error) {
	cl.mu.Lock()
	for {
		if cl.conn != nil && !cl.conn.isDead() {
			c := cl.conn
			cl.mu.Unlock()
			return c, nil
		}
		if time.Now().Before(cl.retryAt) {
			cl.mu.Unlock()
			return nil, fmt.Errorf("%w: %s could not be reached a moment ago", ErrChannelUnavailable, cl.addr)
		}
		if ch := cl.dialing; ch != nil {
			cl.mu.Unlock()
			select {
			case <-ch:
			case <-ctx.Done():
				return nil, fmt.Errorf("%w: %w", ErrChannelUnavailable, context.Cause(ctx))
			}
			cl.mu.Lock()
			continue
		}
		ch := make(chan struct{})
		cl.dialing = ch
		cl.mu.Unlock()
		c, err := cl.pc.dial(cl.addr)
		cl.mu.Lock()
		cl.dialing = nil
		close(ch)
		if err != nil {
			cl.backoff = min(max(2*cl.backoff, channelMinBackoff), channelMaxBackoff)
			cl.retryAt = time.Now().Add(cl.backoff)
			cl.mu.Unlock()
			cl.pc.n.log.Debug("peer channel: dial failed", "addr", cl.addr, "retry_in", cl.backoff, "error", err)
			return nil, fmt.Errorf("%w: %w", ErrChannelUnavailable, err)
		}
		cl.backoff, cl.retryAt = 0, time.Time{}
		cl.conn = c
	}
}

// dial opens a channel connection to addr: TCP, TLS as Raft's when on, then the marker and
// version, answered by the marker of a node that serves the channel.
func (pc *peerChannels) dial(addr string) (*chanConn, error) {
	d := &net.Dialer{Timeout: channelDialTimeout}
	var c net.Conn
	var err error
	if cfg := pc.n.cfg.TLS.RaftClient; cfg != nil {
		c, err = tls.DialWithDialer(d, "tcp", addr, cfg)
	} else {
		c, err = d.Dial("tcp", addr)
	}
	if err != nil {
		return nil, err
	}
	_ = c.SetDeadline(time.Now().Add(channelDialTimeout))
	var hello [1]byte
	if _, err := c.Write([]byte{channelMarker, channelVersion}); err != nil {
		c.Close()
		return nil, err
	}
	if _, err := io.ReadFull(c, hello[:]); err != nil || hello[0] != channelMarker {
		c.Close()
		return nil, fmt.Errorf("the peer does not serve the channel (hello: %v)", err)
	}
	_ = c.SetDeadline(time.Time{})
	cc := newChanConn(pc, c, true)
	pc.mu.Lock()
	closed := pc.closed
	pc.mu.Unlock()
	if closed {
		c.Close()
		return nil, net.ErrClosed
	}
	cc.start()
	return cc, nil
}

// serve serves a connection the port handed over as a channel connection (its marker not yet
// read), until it or the node closes.
func (pc *peerChannels) serve(c net.Conn) {
	var hello [2]byte
	_ = c.SetReadDeadline(time.Now().Add(channelDialTimeout))
	if _, err := io.ReadFull(c, hello[:]); err != nil || hello[0] != channelMarker || hello[1] != channelVersion {
		c.Close()
		return
	}
	_ = c.SetReadDeadline(time.Time{})
	_ = c.SetWriteDeadline(time.Now().Add(channelDialTimeout))
	if _, err := c.Write([]byte{channelMarker}); err != nil {
		c.Close()
		return
	}
	_ = c.SetWriteDeadline(time.Time{})
	cc := newChanConn(pc, c, false)
	pc.mu.Lock()
	if pc.closed {
		pc.mu.Unlock()
		c.Close()
		return
	}
	pc.accepted[cc] = struct{}{}
	pc.mu.Unlock()
	cc.start()
	<-cc.dead
	cc.wg.Wait()
	pc.mu.Lock()
	delete(pc.accepted, cc)
	pc.mu.Unlock()
}

// accept serves the channel connections of ln until it closes.
func (pc *peerChannels) accept(ln net.Listener) {
	defer pc.wg.Done()
	for {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		pc.wg.Add(1)
		go func() {
			defer pc.wg.Done()
			pc.serve(c)
		}()
	}
}

// chanConn is one channel connection, of either side.
type chanConn struct {
	pc     *peerChannels
	c      net.Conn
	client bool
	tls    *tls.ConnectionState

	mu      sync.Mutex
	out     []outFrame // frames waiting for the writer
	pending map[uint64]*chanCall
	running map[uint64]context.CancelFunc // the server side's handlers in flight
	err     error
	nextID  uint64

	wake     chan struct{} // the writer has frames to write
	dead     chan struct{} // closed when the connection fails
	deadOnce sync.Once
	wg       sync.WaitGroup
}

// The states of a chanCall.
const (
	callQueued int32 = iota
	callSent
	callDropped
)

// outFrame is a frame queued for the writer; call, on the client side, is marked sent once
// the writer takes it.
type outFrame struct {
	b    []byte
	call *chanCall
}

// chanCall is a request in flight on the client side.
type chanCall struct {
	id uint64
	// state is callQueued until the writer takes the call (callSent) or its caller or the
	// connection's failure gives it up first (callDropped): a dropped call is never written.
	state   atomic.Int32
	done    chan struct{}
	status  byte
	payload []byte
	err     error
}

func newChanConn(pc *peerChannels, c net.Conn, client bool) *chanConn {
	cc := &chanConn{pc: pc, c: c, client: client, wake: make(chan struct{}, 1), dead: make(chan struct{})}
	if client {
		cc.pending = make(map[uint64]*chanCall)
	} else {
		cc.running = make(map[uint64]context.CancelFunc)
	}
	if t, ok := c.(interface{ ConnectionState() tls.ConnectionState }); ok {
		st := t.ConnectionState()
		cc.tls = &st
	}
	return cc
}

func (cc *chanConn) start() {
	cc.wg.Add(2)
	go cc.writeLoop()
	go cc.readLoop()
}

func (cc *chanConn) isDead() bool {
	select {
	case <-cc.dead:
		return true
	default:
		return false
	}
}

// fail closes the connection once, fails the client's calls in flight and cancels the
// server's handlers.
func (cc *chanConn) fail(err error) {
	cc.deadOnce.Do(func() {
		_ = cc.c.Close()
		cc.mu.Lock()
		cc.err = err
		pending, running := cc.pending, cc.running
		cc.pending, cc.running, cc.out = nil, nil, nil
		cc.mu.Unlock()
		close(cc.dead)
		for _, call := range pending {
			if !call.state.CompareAndSwap(callQueued, callDropped) {
				call.err = fmt.Errorf("%w: the channel to the leader broke mid-request: %w", ErrUnknownOutcome, err)
			} else {
				call.err = fmt.Errorf("%w: the channel broke before the request was written: %w", ErrChannelUnavailable, err)
			}
			close(call.done)
		}
		for _, cancel := range running {
			cancel()
		}
	})
}

// enqueue queues a frame for the writer; false if the connection is dead.
func (cc *chanConn) enqueue(f outFrame) bool {
	cc.mu.Lock()
	if cc.err != nil {
		cc.mu.Unlock()
		return false
	}
	cc.out = append(cc.out, f)
	cc.mu.Unlock()
	select {
	case cc.wake <- struct{}{}:
	default:
	}
	return true
}

// writeLoop writes the queued frames, all that are waiting in one flush.
func (cc *chanConn) writeLoop() {
	defer cc.wg.Done()
	bw := bufio.NewWriterSize(cc.c, 64<<10)
	var batch []outFrame
	for {
		select {
		case <-cc.wake:
		case <-cc.dead:
			return
		}
		cc.mu.Lock()
		batch, cc.out = cc.out, batch[:0]
		cc.mu.Unlock()
		if len(batch) == 0 {
			continue
		}
		_ = cc.c.SetWriteDeadline(time.Now().Add(channelWriteTimeout))
		var err error
		for i, f := range batch {
			if err == nil && (f.call == nil || f.call.state.CompareAndSwap(callQueued, callSent)) {
				_, err = bw.Write(f.b)
			}
			batch[i] = outFrame{}
		}
		if err == nil {
			err = bw.Flush()
		}
		if err != nil {
			cc.fail(err)
			return
		}
	}
}

// readLoop reads frames: answers on the client side, requests and cancels on the server side.
func (cc *chanConn) readLoop() {
	defer cc.wg.Done()
	br := bufio.NewReaderSize(cc.c, 64<<10)
	var hdr [4]byte
	for {
		if _, err := io.ReadFull(br, hdr[:]); err != nil {
			cc.fail(err)
			return
		}
		size := binary.BigEndian.Uint32(hdr[:])
		if size < 9 || size > maxChannelFrame {
			cc.fail(fmt.Errorf("cluster: peer channel frame of %d bytes", size))
			return
		}
		frame := make([]byte, size)
		if _, err := io.ReadFull(br, frame); err != nil {
			cc.fail(err)
			return
		}
		id := binary.BigEndian.Uint64(frame)
		if cc.client {
			cc.answered(id, frame[8], frame[9:])
			continue
		}
		if err := cc.request(id, frame[8:]); err != nil {
			cc.fail(err)
			return
		}
	}
}

// answered hands an answer to its call.
func (cc *chanConn) answered(id uint64, status byte, payload []byte) {
	cc.mu.Lock()
	call := cc.pending[id]
	delete(cc.pending, id)
	cc.mu.Unlock()
	if call == nil {
		return // its caller gave up
	}
	call.status, call.payload = status, payload
	close(call.done)
}

// request serves a request frame's rest: kind, deadline (Unix nanoseconds, 0 for none) and
// payload, on its own goroutine; or a cancel.
func (cc *chanConn) request(id uint64, rest []byte) error {
	if len(rest) < 9 {
		return fmt.Errorf("cluster: peer channel request of %d bytes", len(rest))
	}
	kind := ChannelKind(rest[0])
	deadline := int64(binary.BigEndian.Uint64(rest[1:9]))
	payload := rest[9:]
	if kind == channelCancel {
		cc.mu.Lock()
		cancel := cc.running[id]
		delete(cc.running, id)
		cc.mu.Unlock()
		if cancel != nil {
			cancel()
		}
		return nil
	}
	cc.pc.mu.Lock()
	hp := cc.pc.handlers[kind]
	cc.pc.mu.Unlock()
	if hp == nil {
		cc.enqueue(outFrame{b: answerFrame(id, chanUnknownKind, nil)})
		return nil
	}
	ctx, cancel := context.WithCancel(cc.pc.n.loops)
	if deadline != 0 {
		ctx, cancel = withDeadline(ctx, cancel, time.Unix(0, deadline))
	}
	cc.mu.Lock()
	if cc.running == nil {
		cc.mu.Unlock()
		cancel()
		return nil
	}
	cc.running[id] = cancel
	cc.mu.Unlock()
	h := *hp
	cc.pc.run(func() {
		out := h(ctx, ChannelRequest{Remote: cc.c.RemoteAddr(), TLS: cc.tls, Payload: payload})
		cc.mu.Lock()
		_, live := cc.running[id]
		delete(cc.running, id)
		cc.mu.Unlock()
		cancel()
		if live {
			cc.enqueue(outFrame{b: answerFrame(id, chanOK, out)})
		}
	})
	return nil
}

// withDeadline adds a deadline to ctx, whose cancel is cancel; the returned cancel ends both.
func withDeadline(ctx context.Context, cancel context.CancelFunc, d time.Time) (context.Context, context.CancelFunc) {
	dctx, dcancel := context.WithDeadline(ctx, d)
	return dctx, func() { dcancel(); cancel() }
}

// call sends a request and waits for its answer (see CallLeader).
func (cc *chanConn) call(ctx context.Context, kind ChannelKind, payload []byte) ([]byte, error) {
	call := &chanCall{done: make(chan struct{})}
	cc.mu.Lock()
	if cc.err != nil {
		cc.mu.Unlock()
		return nil, fmt.Errorf("%w: %w", ErrChannelUnavailable, cc.err)
	}
	cc.nextID++
	call.id = cc.nextID
	cc.pending[call.id] = call
	cc.mu.Unlock()
	var deadline int64
	if d, ok := ctx.Deadline(); ok {
		deadline = d.UnixNano()
	}
	if !cc.enqueue(outFrame{b: requestFrame(call.id, kind, deadline, payload), call: call}) {
		<-call.done // failed by fail, which took the pending calls
		return nil, call.err
	}
	select {
	case <-call.done:
	case <-ctx.Done():
		cc.mu.Lock()
		_, waiting := cc.pending[call.id]
		delete(cc.pending, call.id)
		cc.mu.Unlock()
		if !waiting {
			<-call.done // answered or failed meanwhile
			break
		}
		if call.state.CompareAndSwap(callQueued, callDropped) {
			return nil, fmt.Errorf("%w: %w", ErrChannelUnavailable, context.Cause(ctx))
		}
		cc.enqueue(outFrame{b: requestFrame(call.id, channelCancel, 0, nil)})
		return nil, fmt.Errorf("%w: %w", ErrUnknownOutcome, context.Cause(ctx))
	}
	if call.err != nil {
		return nil, call.err
	}
	if call.status == chanUnknownKind {
		return nil, ErrChannelUnknownKind
	}
	return call.payload, nil
}

// requestFrame encodes a request: length, id, kind, deadline, payload.
func requestFrame(id uint64, kind ChannelKind, deadline int64, payload []byte) []byte {
	b := make([]byte, 4+8+1+8+len(payload))
	binary.BigEndian.PutUint32(b, uint32(len(b)-4))
	binary.BigEndian.PutUint64(b[4:], id)
	b[12] = byte(kind)
	binary.BigEndian.PutUint64(b[13:], uint64(deadline))
	copy(b[21:], payload)
	return b
}

// answerFrame encodes an answer: length, id, status, payload.
func answerFrame(id uint64, status byte, payload []byte) []byte {
	b := make([]byte, 4+8+1+len(payload))
	binary.BigEndian.PutUint32(b, uint32(len(b)-4))
	binary.BigEndian.PutUint64(b[4:], id)
	b[12] = status
	copy(b[13:], payload)
	return b
}

package client_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/raftlock/raftlock/agent"
	"github.com/raftlock/raftlock/api"
	"github.com/raftlock/raftlock/client"
)

// The client's behaviour tests run over each way a client reaches a node: HTTP over the
// network, and in memory, as the client of an embedded node does (package embed hands its
// requests to the node's API handler, httpapi.Server.Transport; here, to a dev cluster's
// agent's). What a test needs of the network between its client and the cluster — cutting it,
// holding requests back to deliver them late — each transport provides in its own way, so that
// one test body with every assertion serves both.

// transport is a way for a test's clients to reach a dev cluster.
type transport struct {
	name string
	// client returns a client of dev, closed at the end of the test.
	client func(t *testing.T, dev *agent.Dev, opts ...client.Option) *client.Client
	// cuttable returns a client of dev whose link to the cluster the test can cut.
	cuttable func(t *testing.T, dev *agent.Dev, opts ...client.Option) (link, *client.Client)
	// holding returns a client of one node of dev whose requests the test can hold back.
	holding func(t *testing.T, dev *agent.Dev, opts ...client.Option) (holder, *client.Client)
}

// link is the network between a test's client and the cluster.
type link interface {
	// Cut drops the requests in flight (the server notices) and refuses new ones.
	Cut()
	// Strand drops the client's side of the requests in flight but lets the server go on with
	// them, unaware, and refuses new ones: a network that loses a connection silently.
	Strand()
	// Heal passes new requests again; stranded ones stay stranded.
	Heal()
}

// holder holds back the requests sent while it holds, as a network that delays them until
// their client gave up would, and delivers the one that carries an attempt late.
type holder interface {
	Hold()
	Pass()
	// Arrived is closed once a held request carries an attempt.
	Arrived() <-chan struct{}
	// Deliver sends the held request with an attempt to the node and returns its answer.
	Deliver(ctx context.Context) (status int, body string, err error)
}

// transports are the transports every behaviour test runs over.
var transports = []transport{
	{name: "http", client: httpClient, cuttable: httpCuttable, holding: httpHolding},
	{name: "in-process", client: inProcessClient, cuttable: inProcessCuttable, holding: inProcessHolding},
}

// eachTransport runs test once per transport, as a subtest named after it.
func eachTransport(t *testing.T, test func(t *testing.T, tr transport)) {
	for _, tr := range transports {
		t.Run(tr.name, func(t *testing.T) { test(t, tr) })
	}
}

func httpClient(t *testing.T, dev *agent.Dev, opts ...client.Option) *client.Client {
	return newClient(t, dev.Endpoints(), opts...)
}

func httpCuttable(t *testing.T, dev *agent.Dev, opts ...client.Option) (link, *client.Client) {
	proxies, eps := proxiedEndpoints(t, dev)
	return proxies, newClient(t, eps, opts...)
}

func httpHolding(t *testing.T, dev *agent.Dev, opts ...client.Option) (holder, *client.Client) {
	return holdingClient(t, dev.Endpoints()[0], opts...)
}

// inProcessNode returns the index of the node an in-process client of dev is bound to: a
// follower, whose node forwards to the leader what the leader must do.
func inProcessNode(t *testing.T, dev *agent.Dev) int {
	t.Helper()
	leader, err := dev.WaitLeader(testCtx(t, 15*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	for i := range dev.Size() {
		if i != leader && dev.Agent(i) != nil {
			return i
		}
	}
	t.Fatal("no running follower")
	return -1
}

// inProcessWith returns a client whose requests go through rt to node i of dev in memory.
func inProcessWith(t *testing.T, i int, rt http.RoundTripper, opts ...client.Option) *client.Client {
	ep := fmt.Sprintf("http://n%d.in-process", i+1)
	return newClient(t, []string{ep}, append([]client.Option{client.WithTransport(rt)}, opts...)...)
}

func inProcessClient(t *testing.T, dev *agent.Dev, opts ...client.Option) *client.Client {
	i := inProcessNode(t, dev)
	return inProcessWith(t, i, dev.Agent(i).Transport(), opts...)
}

func inProcessCuttable(t *testing.T, dev *agent.Dev, opts ...client.Option) (link, *client.Client) {
	i := inProcessNode(t, dev)
	l := newMemLink(t, dev.Agent(i).Transport())
	return l, inProcessWith(t, i, l, opts...)
}

func inProcessHolding(t *testing.T, dev *agent.Dev, opts ...client.Option) (holder, *client.Client) {
	l := newMemLink(t, dev.Agent(0).Transport())
	return l, inProcessWith(t, 0, l, opts...)
}

// proxySet is the link of a client that reaches every node through a cutProxy of its own.
type proxySet []*cutProxy

func (ps proxySet) Cut() {
	for _, p := range ps {
		p.Cut()
	}
}

func (ps proxySet) Strand() {
	for _, p := range ps {
		p.Strand()
	}
}

func (ps proxySet) Heal() {
	for _, p := range ps {
		p.Heal()
	}
}

// memLink is a link in memory, in front of a node's in-process transport: a RoundTripper that
// can cut, strand or hold back the requests that pass through it. A request passes with a
// context of the link's own, which the caller's ending cancels, except once stranded.
type memLink struct {
	inner http.RoundTripper
	bg    context.Context // parent of the requests' contexts; ends with the test

	mu       sync.Mutex
	cut      bool
	holding  bool
	inFlight map[*flight]struct{}
	held     []heldRequest
	arrived  chan struct{}
}

// flight is a request on its way through a memLink.
type flight struct {
	cancel context.CancelFunc
	drop   chan error // gets why the link dropped the request
}

// heldRequest is a request a memLink held back.
type heldRequest struct {
	method, url string
	header      http.Header
	body        []byte
}

// errLinkDown is what a client sees of a request dropped by a cut or strand: the connection
// broke after the request went out.
var errLinkDown = errors.New("memlink: connection reset")

// attemptMark marks the requests that carry an attempt (the ones a holder delivers late): a
// numbered one ("attempt_seq") or, before the client knows that the cluster numbers
// attempts, a string one ("attempt": "~N").
const attemptMark = `"attempt`

func newMemLink(t *testing.T, inner http.RoundTripper) *memLink {
	bg, stop := context.WithCancel(context.Background())
	t.Cleanup(stop) // ends the requests stranded in the node
	return &memLink{inner: inner, bg: bg, inFlight: map[*flight]struct{}{}, arrived: make(chan struct{})}
}

// RoundTrip passes req on, unless the link is cut or holds.
func (l *memLink) RoundTrip(req *http.Request) (*http.Response, error) {
	body, err := readBody(req)
	if err != nil {
		return nil, err
	}
	l.mu.Lock()
	if l.cut {
		l.mu.Unlock()
		return nil, &net.OpError{Op: "dial", Net: "memlink", Err: errors.New("link cut")}
	}
	if l.holding {
		l.hold(req, body)
		l.mu.Unlock()
		<-req.Context().Done()
		return nil, req.Context().Err()
	}
	ctx, cancel := context.WithCancel(l.bg)
	f := &flight{cancel: cancel, drop: make(chan error, 1)}
	l.inFlight[f] = struct{}{}
	l.mu.Unlock()
	defer l.forget(f)
	out := req.Clone(ctx)
	out.Body = io.NopCloser(bytes.NewReader(body))
	type answer struct {
		res *http.Response
		err error
	}
	ch := make(chan answer, 1)
	go func() {
		res, err := l.inner.RoundTrip(out)
		ch <- answer{res, err}
	}()
	select {
	case a := <-ch:
		if a.err != nil {
			cancel()
			return nil, a.err
		}
		a.res.Body = &cancelOnClose{ReadCloser: a.res.Body, cancel: cancel}
		return a.res, nil
	case <-req.Context().Done():
		cancel()
		return nil, req.Context().Err()
	case err := <-f.drop:
		return nil, err
	}
}

// hold records a held request; under l.mu.
func (l *memLink) hold(req *http.Request, body []byte) {
	l.held = append(l.held, heldRequest{method: req.Method, url: req.URL.String(), header: req.Header.Clone(), body: body})
	if bytes.Contains(body, []byte(attemptMark)) {
		select {
		case <-l.arrived:
		default:
			close(l.arrived)
		}
	}
}

func (l *memLink) forget(f *flight) {
	l.mu.Lock()
	defer l.mu.Unlock()
	delete(l.inFlight, f)
}

// Cut drops the requests in flight, which ends them in the node too, and refuses new ones.
func (l *memLink) Cut() { l.down(true) }

// Strand drops the requests in flight for their callers only, and refuses new ones.
func (l *memLink) Strand() { l.down(false) }

func (l *memLink) down(cancel bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.cut = true
	for f := range l.inFlight {
		if cancel {
			f.cancel()
		}
		f.drop <- errLinkDown
		delete(l.inFlight, f)
	}
}

// Heal passes new requests again.
func (l *memLink) Heal() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.cut = false
}

// Hold holds back the requests sent from now on; Pass lets them through again.
func (l *memLink) Hold() { l.setHolding(true) }

// Pass lets the requests sent from now on through.
func (l *memLink) Pass() { l.setHolding(false) }

func (l *memLink) setHolding(on bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.holding = on
}

// Arrived is closed once a held request carries an attempt.
func (l *memLink) Arrived() <-chan struct{} { return l.arrived }

// Deliver sends the last held request that carries an attempt to the node.
func (l *memLink) Deliver(ctx context.Context) (int, string, error) {
	l.mu.Lock()
	var h *heldRequest
	for i := range l.held {
		if bytes.Contains(l.held[i].body, []byte(attemptMark)) {
			h = &l.held[i]
		}
	}
	l.mu.Unlock()
	if h == nil {
		return 0, "", errors.New("memlink: no held request carries an attempt")
	}
	req, err := http.NewRequestWithContext(ctx, h.method, h.url, bytes.NewReader(h.body))
	if err != nil {
		return 0, "", err
	}
	req.Header = h.header.Clone()
	res, err := l.inner.RoundTrip(req)
	if err != nil {
		return 0, "", err
	}
	defer res.Body.Close()
	data, err := io.ReadAll(res.Body)
	return res.StatusCode, string(data), err
}

// readBody reads a request's body whole, so that the link can pass it on or keep it.
func readBody(req *http.Request) ([]byte, error) {
	if req.Body == nil || req.Body == http.NoBody {
		return nil, nil
	}
	defer req.Body.Close()
	return io.ReadAll(req.Body)
}

// cancelOnClose ends a request's context when its answer's body is closed.
type cancelOnClose struct {
	io.ReadCloser
	cancel context.CancelFunc
}

func (c *cancelOnClose) Close() error {
	err := c.ReadCloser.Close()
	c.cancel()
	return err
}

// giveUpWhileHeld runs call with a context it cancels once h holds call's request with an
// attempt (later requests pass), and checks that call gave up.
func giveUpWhileHeld(ctx context.Context, t *testing.T, h holder, call func(context.Context) error) {
	t.Helper()
	h.Hold()
	cctx, giveUp := context.WithCancel(ctx)
	defer giveUp()
	done := make(chan error, 1)
	go func() { done <- call(cctx) }()
	select {
	case <-h.Arrived():
	case <-ctx.Done():
		t.Fatal("no request with an attempt was held")
	}
	h.Pass()
	giveUp()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("given up: %v, want context.Canceled", err)
	}
}

// lateRequestChangesNothing delivers the held request late (see deliverLate) and checks that
// the lock name is left free and unawaited.
func lateRequestChangesNothing(ctx context.Context, t *testing.T, h holder, c *client.Client, name string) {
	t.Helper()
	deliverLate(ctx, t, h)
	if l, err := c.GetLock(ctx, name); err != nil || l.Held || l.Waiters != 0 {
		t.Fatalf("after the late acquire, lock %+v (%v): want free and unawaited", l, err)
	}
}

// deliverLate delivers the held request and checks that the node refused it as the request of
// a cancelled attempt.
func deliverLate(ctx context.Context, t *testing.T, h holder) {
	t.Helper()
	status, body, err := h.Deliver(ctx)
	if err != nil {
		t.Fatalf("delivering the late request: %v", err)
	}
	if status != http.StatusConflict || !strings.Contains(body, api.CodeAttemptCancelled) {
		t.Fatalf("the late request of a try given up was answered %d %s", status, body)
	}
}

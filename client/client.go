package client

import (
	"crypto/tls"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"
)

// Defaults of the client options.
const (
	// DefaultRequestTimeout bounds one attempt of a request (plus the wait of a long poll).
	DefaultRequestTimeout = 10 * time.Second
	// DefaultRetryTimeout bounds how long a request keeps retrying on other endpoints.
	DefaultRetryTimeout = 15 * time.Second
	// leaderLookupTimeout bounds a lookup of the leader's endpoint.
	leaderLookupTimeout = 2 * time.Second
)

// Client talks to a raftlock cluster through any of its endpoints. It is safe for concurrent
// use; create one per process and share it, so that HTTP connections are reused.
type Client struct {
	endpoints      []string
	cur            atomic.Uint64 // index of the endpoint tried first; leader routing moves it
	staleCur       atomic.Uint64 // index of the endpoint a stale read tries first (see Stale)
	hc             *http.Client
	ownTransport   *http.Transport // closed by Close; nil with WithTransport
	requestTimeout time.Duration
	retryTimeout   time.Duration
	backoffMin     time.Duration
	backoffMax     time.Duration
	logger         hclog.Logger
	renewer        *renewer // batches the renewals of this client's sessions
	token          string   // sent as X-Raftlock-Token when set (WithToken)
	// features are the cluster's enabled features, learned once (see supports).
	features features
	// router moves requests to the leader's endpoint; nil with WithoutLeaderRouting or a
	// single endpoint.
	router *leaderRouter
	raw    Raw // the HTTP API on this client (Raw)
}

// Option configures a Client.
type Option func(*clientOptions)

type clientOptions struct {
	requestTimeout time.Duration
	retryTimeout   time.Duration
	tlsConfig      *tls.Config
	transport      http.RoundTripper
	logger         hclog.Logger
	token          string
	noLeaderRoute  bool
}

// WithRequestTimeout bounds each attempt of a request; long polls get their wait on top.
func WithRequestTimeout(d time.Duration) Option {
	return func(o *clientOptions) { o.requestTimeout = d }
}

// WithRetryTimeout bounds how long a request keeps trying other endpoints after connection
// errors, 503 no_leader, 503 timeout (when retrying is safe) and 429. Zero means no retries.
func WithRetryTimeout(d time.Duration) Option {
	return func(o *clientOptions) { o.retryTimeout = d }
}

// WithTLSConfig sets the TLS configuration used for https endpoints. The client keeps its own
// copy, so one configuration may serve many clients.
func WithTLSConfig(cfg *tls.Config) Option {
	return func(o *clientOptions) { o.tlsConfig = cfg.Clone() }
}

// WithTransport sends every request of the client (sessions' renewals, long polls and leader
// lookups included) through rt instead of the client's own transport, e.g. to reach a node in
// the same process without a network connection, or to count or delay requests in a test.
// rt owns connections and TLS, so WithTLSConfig cannot go with it; it must not time requests
// out, since long polls stay open for minutes. Close leaves rt's connections alone.
func WithTransport(rt http.RoundTripper) Option {
	return func(o *clientOptions) { o.transport = rt }
}

// WithLogger sets a logger for failover and keepalive messages (default: discard).
func WithLogger(l hclog.Logger) Option {
	return func(o *clientOptions) { o.logger = l }
}

// WithoutLeaderRouting keeps requests on the endpoints in the order given. By default the
// client moves to the leader's endpoint once an answer names a leader it has not seen (it
// asks each endpoint which node it is), so that followers need not forward its requests.
func WithoutLeaderRouting() Option {
	return func(o *clientOptions) { o.noLeaderRoute = true }
}

// New returns a Client for the given endpoints, e.g. "http://127.0.0.1:7001". An endpoint
// without a scheme gets http:// (https:// with WithTLSConfig). It does not contact the cluster.
func New(endpoints []string, opts ...Option) (*Client, error) {
	o := clientOptions{requestTimeout: DefaultRequestTimeout, retryTimeout: DefaultRetryTimeout}
	for _, opt := range opts {
		opt(&o)
	}
	if o.requestTimeout <= 0 || o.retryTimeout < 0 {
		return nil, errorf("%w: timeouts must be positive", ErrInvalidArgument)
	}
	if o.transport != nil && o.tlsConfig != nil {
		return nil, errorf("%w: WithTLSConfig and WithTransport: the transport owns TLS", ErrInvalidArgument)
	}
	scheme := "http://"
	if o.tlsConfig != nil {
		scheme = "https://"
	}
	var eps []string
	for _, ep := range endpoints {
		ep = strings.TrimRight(strings.TrimSpace(ep), "/")
		if ep == "" {
			continue
		}
		if !strings.Contains(ep, "://") {
			ep = scheme + ep
		}
		u, err := url.Parse(ep)
		if err != nil || u.Host == "" || (u.Scheme != "http" && u.Scheme != "https") {
			return nil, errorf("%w: bad endpoint %q", ErrInvalidArgument, ep)
		}
		eps = append(eps, ep)
	}
	if len(eps) == 0 {
		return nil, errorf("%w: no endpoints", ErrInvalidArgument)
	}
	c := &Client{
		endpoints:      eps,
		requestTimeout: o.requestTimeout,
		retryTimeout:   o.retryTimeout,
		backoffMin:     25 * time.Millisecond,
		backoffMax:     time.Second,
		logger:         o.logger,
		token:          o.token,
	}
	if c.logger == nil {
		c.logger = hclog.NewNullLogger()
	}
	if !o.noLeaderRoute && len(eps) > 1 {
		c.router = newLeaderRouter(c)
	}
	c.renewer = &renewer{c: c}
	c.raw.c = c
	rt := o.transport
	if rt == nil {
		c.ownTransport = newTransport(o.tlsConfig)
		rt = c.ownTransport
	}
	c.hc = &http.Client{Transport: rt}
	return c, nil
}

// newTransport returns a transport that keeps many idle connections per node, since sessions,
// mutexes and long polls of one process all talk to the same few hosts.
func newTransport(tlsConfig *tls.Config) *http.Transport {
	d := &net.Dialer{Timeout: 3 * time.Second, KeepAlive: 15 * time.Second}
	return &http.Transport{
		DialContext:           d.DialContext,
		TLSClientConfig:       tlsConfig,
		TLSHandshakeTimeout:   5 * time.Second,
		MaxIdleConns:          256,
		MaxIdleConnsPerHost:   128,
		IdleConnTimeout:       90 * time.Second,
		ExpectContinueTimeout: time.Second,
		ForceAttemptHTTP2:     true,
	}
}

// Raw returns the HTTP API of the cluster, one method per endpoint, on this client's
// connections. Nothing made through it is managed: see Raw.
func (c *Client) Raw() *Raw { return &c.raw }

// Endpoints returns the endpoints of the client, normalised.
func (c *Client) Endpoints() []string {
	return append([]string(nil), c.endpoints...)
}

// Close releases idle connections. Sessions of the client should be closed first.
func (c *Client) Close() error {
	if c.router != nil {
		c.router.close()
	}
	if c.ownTransport != nil {
		c.ownTransport.CloseIdleConnections()
	}
	return nil
}

// current returns the index of the endpoint to try first.
func (c *Client) current() int { return c.at(&c.cur) }

// cursor returns the cursor of the endpoint cl tries first.
func (c *Client) cursor(cl *call) *atomic.Uint64 {
	if cl.stale {
		return &c.staleCur
	}
	return &c.cur
}

// at returns the endpoint index that cursor points to.
func (c *Client) at(cursor *atomic.Uint64) int {
	return int(cursor.Load() % uint64(len(c.endpoints)))
}

// rotate moves cursor past endpoint idx, unless another request already did.
func (c *Client) rotate(cursor *atomic.Uint64, idx int) {
	n := uint64(len(c.endpoints))
	cursor.CompareAndSwap(uint64(idx), (uint64(idx)+1)%n)
}

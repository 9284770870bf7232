package client

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/raftlock/raftlock/api"
)

// maxResponseBytes bounds a response body; lists of locks and sessions are the largest.
const maxResponseBytes = 64 << 20

// call describes one API request.
type call struct {
	method string
	path   string // unescaped, e.g. "/v1/locks/jobs/a/acquire"
	query  url.Values
	body   any
	out    any
	// wait is how long the server may hold the request (long poll); it extends the attempt timeout.
	wait time.Duration
	// attemptTimeout overrides the client's request timeout for each attempt.
	attemptTimeout time.Duration
	// endpoint pins the request to one endpoint, without failover or retries.
	endpoint string
	// stale marks a read any node may answer: it starts at the client's stale-read endpoint,
	// not the leader's.
	stale bool
	// noRetryUnknown returns 503 timeout to the caller instead of asking again, for requests
	// that are not safe to repeat blindly (release).
	noRetryUnknown bool
	// upload, if set, gives the request body afresh for each attempt, sent as is (a backup
	// file) instead of body's JSON.
	upload func() (io.Reader, error)
	// download, if set, receives the body of a successful answer as is, however long; an
	// answer cut off while it is copied is not asked again.
	download io.Writer
}

// streamError is a failure of a streamed body: reading call.upload for a request, or copying
// an answer to call.download, part of which may be written. The request is not retried.
type streamError struct {
	what string
	err  error
}

func (e *streamError) Error() string { return "raftlock: " + e.what + ": " + e.err.Error() }

func (e *streamError) Unwrap() error { return e.err }

// outcome tells the caller what happened on the way to the answer.
type outcome struct {
	// ambiguous is set when an earlier attempt may have been applied by the server.
	ambiguous bool
	// endpoint answered the last attempt.
	endpoint string
	// sends counts the attempts that may have reached a server.
	sends int
}

// transportError is a failure to get any HTTP answer from an endpoint. It matches ErrUnavailable.
type transportError struct {
	endpoint string
	err      error
	sent     bool // the request may have reached the server
}

// Error implements error.
func (e *transportError) Error() string { return errPrefix + e.text() }

func (e *transportError) text() string { return e.endpoint + ": " + textOf(e.err) }

// Unwrap returns the network error.
func (e *transportError) Unwrap() error { return e.err }

// Is makes every transport error match ErrUnavailable.
func (e *transportError) Is(target error) bool { return target == ErrUnavailable }

// do sends c and decodes the answer into c.out. It moves to the next endpoint and tries again
// after connection errors, 503 no_leader and (unless noRetryUnknown) 503 timeout, and waits
// and tries again after 429, with jittered exponential backoff, for at most the retry timeout.
func (c *Client) do(ctx context.Context, cl *call) (outcome, error) {
	var body []byte
	if cl.body != nil {
		b, err := json.Marshal(cl.body)
		if err != nil {
			return outcome{}, errorf("encoding request: %w", err)
		}
		body = b
	}
	start := time.Now()
	cursor := c.cursor(cl)
	var out outcome
	var refusedTLS map[int]bool // endpoints (by index) whose TLS failed in a way no retry mends
	for attempt := 0; ; attempt++ {
		idx, ep := -1, cl.endpoint
		if ep == "" {
			idx = c.at(cursor)
			ep = c.endpoints[idx]
		}
		out.endpoint = ep
		err := c.attempt(ctx, ep, cl, body)
		var te *transportError
		if !errors.As(err, &te) || te.sent {
			out.sends++
		}
		if err == nil {
			return out, nil
		}
		if ctx.Err() != nil {
			return out, errorf("%s %s: %w", cl.method, cl.path, context.Cause(ctx))
		}
		retry, rotate, applied := classify(err, cl)
		if applied {
			out.ambiguous = true
		}
		if !retry || cl.endpoint != "" {
			return out, err
		}
		if TLSPermanent(err) {
			// The next endpoint may hold another certificate, but once every endpoint has
			// refused, waiting changes nothing: say so now, not after the retry timeout.
			if refusedTLS == nil {
				refusedTLS = map[int]bool{}
			}
			if refusedTLS[idx] = true; len(refusedTLS) >= len(c.endpoints) {
				return out, err
			}
		}
		if time.Since(start) >= c.retryTimeout {
			return out, errorf("%w (gave up after %d attempts in %s)", err, attempt+1,
				time.Since(start).Round(time.Millisecond))
		}
		if rotate && idx >= 0 {
			c.rotate(cursor, idx)
		}
		delay := c.backoff(attempt)
		var ae *APIError
		if errors.As(err, &ae) && ae.RetryAfter > delay {
			delay = min(ae.RetryAfter, c.backoffMax*5)
		}
		c.logger.Debug("retrying request", "method", cl.method, "path", cl.path, "endpoint", ep,
			"error", err, "delay", delay)
		if !sleepCtx(ctx, delay) {
			return out, errorf("%s %s: %w (last error: %v)", cl.method, cl.path,
				context.Cause(ctx), err)
		}
	}
}

// classify says whether err is worth another attempt, whether to move to another endpoint
// first, and whether the failed attempt may nevertheless have been applied.
func classify(err error, cl *call) (retry, rotate, applied bool) {
	var te *transportError
	if errors.As(err, &te) {
		return true, true, te.sent
	}
	var ae *APIError
	if !errors.As(err, &ae) {
		return false, false, false
	}
	switch ae.Code {
	case api.CodeNoLeader:
		return true, true, false
	case api.CodeTimeout:
		return !cl.noRetryUnknown, true, true
	case api.CodeTooManyRequests:
		return true, false, false
	}
	return false, false, false
}

// backoff returns a jittered delay that doubles with every attempt up to backoffMax.
func (c *Client) backoff(attempt int) time.Duration {
	d := c.backoffMin << min(attempt, 10)
	if d > c.backoffMax || d <= 0 {
		d = c.backoffMax
	}
	return d/2 + rand.N(d/2+1)
}

// attempt sends one request to one endpoint.
func (c *Client) attempt(ctx context.Context, ep string, cl *call, body []byte) error {
	timeout := cl.attemptTimeout
	if timeout <= 0 {
		timeout = c.requestTimeout
	}
	actx, cancel := context.WithTimeout(ctx, timeout+cl.wait)
	defer cancel()
	u := ep + (&url.URL{Path: cl.path}).EscapedPath()
	if len(cl.query) > 0 {
		u += "?" + cl.query.Encode()
	}
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	if cl.upload != nil {
		var err error
		if rd, err = cl.upload(); err != nil {
			return &streamError{what: "reading the request body", err: err}
		}
	}
	req, err := http.NewRequestWithContext(actx, cl.method, u, rd)
	if err != nil {
		return errorf("%w: %v", ErrInvalidArgument, err)
	}
	req.Header.Set("Accept", "application/json")
	if c.token != "" {
		req.Header.Set(api.HeaderToken, c.token)
	}
	switch {
	case body != nil:
		req.Header.Set("Content-Type", "application/json")
	case cl.upload != nil:
		req.Header.Set("Content-Type", "application/octet-stream")
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		return c.transportErr(ctx, ep, err, timeout+cl.wait)
	}
	defer resp.Body.Close()
	if id := resp.Header.Get(api.HeaderLeader); id != "" && c.router != nil && knowsLeader(cl, resp.StatusCode) {
		c.router.saw(id)
	}
	c.sawFeatures(resp.Header.Get(api.HeaderFeatures))
	if cl.download != nil && resp.StatusCode >= 200 && resp.StatusCode < 300 {
		if _, err := io.Copy(cl.download, resp.Body); err != nil {
			return &streamError{what: "reading the answer", err: err}
		}
		return nil
	}
	data, err := io.ReadAll(io.LimitReader(resp.Body, maxResponseBytes))
	if err != nil {
		return c.transportErr(ctx, ep, err, timeout+cl.wait)
	}
	if resp.StatusCode >= 200 && resp.StatusCode < 300 {
		if cl.out == nil || len(bytes.TrimSpace(data)) == 0 {
			return nil
		}
		if err := json.Unmarshal(data, cl.out); err != nil {
			return errorf("decoding answer of %s: %w", ep, err)
		}
		return nil
	}
	return parseAPIError(ep, resp, data)
}

// knowsLeader says whether an answer's X-Raftlock-Leader comes from a node that could know who
// leads: one that executed the request as the confirmed leader (a write it applied, a
// linearizable read, a 409 decided against the leader's state), or a follower passing such an
// answer on. A stale read, or an error a node gives before reaching the leader, names only what
// the answering node believes, which may be a deposed leader.
func knowsLeader(cl *call, status int) bool {
	return !cl.stale && (status >= 200 && status < 300 || status == http.StatusConflict)
}

// transportErr wraps a failure to get an answer. A timeout of the attempt (not of the
// caller's context) is reported as a plain message, so that errors.Is(err,
// context.DeadlineExceeded) keeps meaning "the caller's deadline passed".
func (c *Client) transportErr(ctx context.Context, ep string, err error, timeout time.Duration) error {
	if ctx.Err() != nil {
		return context.Cause(ctx)
	}
	sent := true
	var op *net.OpError
	if errors.As(err, &op) && op.Op == "dial" {
		sent = false
	}
	if errors.Is(err, context.DeadlineExceeded) {
		err = errorf("no answer within %s", timeout)
	}
	return &transportError{endpoint: ep, err: err, sent: sent}
}

// parseAPIError builds the APIError of a non-2xx answer, also when the body is not ours.
func parseAPIError(ep string, resp *http.Response, data []byte) error {
	ae := &APIError{StatusCode: resp.StatusCode, Endpoint: ep}
	var eb api.ErrorBody
	if err := json.Unmarshal(data, &eb); err == nil && eb.Error.Code != "" {
		ae.Code, ae.Message, ae.Holder, ae.Limit = eb.Error.Code, eb.Error.Message, eb.Holder, eb.Limit
		if eb.AvailableIn != "" {
			ae.AvailableIn, _ = time.ParseDuration(eb.AvailableIn)
		}
	} else {
		ae.Code = codeOfStatus(resp.StatusCode)
		ae.Message = http.StatusText(resp.StatusCode)
	}
	if ra := resp.Header.Get("Retry-After"); ra != "" {
		if secs, err := strconv.Atoi(ra); err == nil && secs >= 0 {
			ae.RetryAfter = time.Duration(secs) * time.Second
		}
	}
	return ae
}

// codeOfStatus guesses an error code for an answer without our error body (e.g. from a proxy).
func codeOfStatus(status int) string {
	switch {
	case status == http.StatusBadRequest:
		return api.CodeInvalidArgument
	case status == http.StatusUnauthorized:
		return api.CodeUnauthorized
	case status == http.StatusForbidden:
		return api.CodeForbidden
	case status == http.StatusNotFound:
		return api.CodeNotFound
	case status == http.StatusTooManyRequests:
		return api.CodeTooManyRequests
	case status == http.StatusServiceUnavailable:
		return api.CodeNoLeader
	case status == http.StatusBadGateway || status == http.StatusGatewayTimeout:
		return api.CodeTimeout // the request may have reached the cluster
	}
	return api.CodeInternal
}

// sleepCtx waits for d, or returns false at once when ctx ends.
func sleepCtx(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

// TLSPermanent reports whether err is a TLS failure that trying again cannot mend: the
// server's certificate does not verify (unknown authority, wrong name, expired), or the server
// refused this client's certificate or its absence (a "certificate required" or "bad
// certificate" alert). Only configuration fixes these: the CA, the client certificate.
func TLSPermanent(err error) bool {
	var cve *tls.CertificateVerificationError
	var ua x509.UnknownAuthorityError
	var he x509.HostnameError
	var ci x509.CertificateInvalidError
	if errors.As(err, &cve) || errors.As(err, &ua) || errors.As(err, &he) || errors.As(err, &ci) {
		return true
	}
	var op *net.OpError
	if errors.As(err, &op) && op.Op == "remote error" {
		msg := op.Err.Error()
		return strings.Contains(msg, "certificate") || strings.Contains(msg, "unknown certificate authority")
	}
	return false
}

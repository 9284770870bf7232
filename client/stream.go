package client

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"mime"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/raftlock/raftlock/api"
)

// Streamed watches: one request that the server answers with every change as Server-Sent
// Events (docs/api.md, "Streamed watches"), served by whichever node the client asks, follower
// or leader. WatchPrefix, WatchPrefixes and Observe use them, and fall back to the long poll
// against a server without them.

// streamIdle is how long a stream may stay silent before the client takes it for lost and
// reconnects: the server sends a progress event every 5 seconds even on a quiet prefix.
const streamIdle = 20 * time.Second

// errNoStreams says that the node asked answers no streamed watch (a version before them).
var errNoStreams = errorf("the node answers no streamed watch")

// errStopped says that the watch's reader went away (its context ended).
var errStopped = errorf("the watcher stopped")

// errStreamReset says that the server ended the stream with a reset ("restored", "behind"):
// the client resumes at once from the last index it handled.
var errStreamReset = errorf("the stream was reset")

// LongPoll makes WatchPrefix (and WatchPrefixFrom) use the long poll, one request per answer,
// even against a cluster with streamed watches.
func LongPoll() ReadOption { return func(o *readOptions) { o.longPoll = true } }

// WatchPrefixes follows every lock whose name starts with one of prefixes (at most
// api.MaxWatchPrefixes) over one streamed watch, like WatchPrefixFrom (index 0: a resync
// first): one connection, however many prefixes. A lock under several of them comes once. It
// needs a cluster with streamed watches: against one without, its only event carries an error
// (ErrNotFound).
func (c *Client) WatchPrefixes(ctx context.Context, prefixes []string, index uint64, opts ...ReadOption) <-chan WatchEvent {
	ch := make(chan WatchEvent)
	o := readOptionsOf(opts)
	go func() {
		defer close(ch)
		send := sender(ctx, ch)
		if len(prefixes) == 0 {
			send(WatchEvent{Err: errorf("%w: a watch needs at least one prefix", ErrInvalidArgument)})
			return
		}
		if _, err := c.followStream(ctx, prefixes, index, o, send); errors.Is(err, errNoStreams) {
			send(WatchEvent{Index: index, Err: errorf("%w: the cluster answers no streamed watch (a version before them?)", ErrNotFound)})
		}
	}()
	return ch
}

func sender(ctx context.Context, ch chan<- WatchEvent) func(WatchEvent) bool {
	return func(ev WatchEvent) bool {
		select {
		case ch <- ev:
			return true
		case <-ctx.Done():
			return false
		}
	}
}

func readOptionsOf(opts []ReadOption) readOptions {
	var o readOptions
	for _, opt := range opts {
		opt(&o)
	}
	return o
}

// followStream delivers through send the changes under prefixes after index, stream after
// stream, through any node (starting at the one stale reads use, moving on when one fails),
// until ctx ends, send refuses, or the cluster answers an error no retry mends (delivered as
// an event with Err). It returns the index reached and errNoStreams, without delivering it,
// when the node asked has no streamed watches.
func (c *Client) followStream(ctx context.Context, prefixes []string, index uint64, o readOptions, send func(WatchEvent) bool) (uint64, error) {
	for attempt := 0; ctx.Err() == nil; {
		idx, ep := -1, o.endpoint
		if ep == "" {
			idx = c.at(&c.staleCur)
			ep = c.endpoints[idx]
		}
		before := index
		err := c.streamOnce(ctx, ep, prefixes, &index, o.stale, send)
		switch {
		case errors.Is(err, errStopped) || ctx.Err() != nil:
			return index, nil
		case errors.Is(err, errNoStreams):
			return index, err
		case errors.Is(err, errStreamReset):
			attempt = 0
			continue
		case err != nil && !isTransient(err):
			send(WatchEvent{Index: index, Err: err})
			return index, err
		}
		c.logger.Debug("stream ended; resuming", "endpoint", ep, "index", index, "error", err)
		if idx >= 0 {
			c.rotate(&c.staleCur, idx)
		}
		if index > before {
			attempt = 0
		}
		if !sleepCtx(ctx, c.backoff(attempt)) {
			return index, nil
		}
		attempt++
	}
	return index, nil
}

// streamOnce opens one stream at ep and delivers its events until it ends; *index follows the
// events delivered. A nil error means the stream ended without a word (a cut connection).
func (c *Client) streamOnce(ctx context.Context, ep string, prefixes []string, index *uint64, stale bool, send func(WatchEvent) bool) error {
	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	q := url.Values{}
	if stale {
		q.Set("consistency", "stale")
	}
	var req *http.Request
	var err error
	if len(prefixes) == 1 {
		// wait=0s: a node without streams answers this as a long poll, at once, in JSON.
		q.Set("prefix", prefixes[0])
		q.Set("index", strconv.FormatUint(*index, 10))
		q.Set("wait", "0s")
		q.Set("stream", "1")
		req, err = http.NewRequestWithContext(sctx, http.MethodGet, ep+"/v1/locks?"+q.Encode(), http.NoBody)
	} else {
		body, _ := json.Marshal(api.WatchRequest{Prefixes: prefixes, Index: *index})
		u := ep + "/v1/watch"
		if len(q) > 0 {
			u += "?" + q.Encode()
		}
		req, err = http.NewRequestWithContext(sctx, http.MethodPost, u, bytes.NewReader(body))
		if req != nil {
			req.Header.Set("Content-Type", "application/json")
		}
	}
	if err != nil {
		return errorf("%w: %v", ErrInvalidArgument, err)
	}
	req.Header.Set("Accept", "text/event-stream")
	if c.token != "" {
		req.Header.Set(api.HeaderToken, c.token)
	}
	// The answer's headers come once the stream's starting point is confirmed: within the
	// request timeout. After them, progress events every few seconds keep it alive.
	watchdog := time.AfterFunc(c.requestTimeout, cancel)
	defer watchdog.Stop()
	resp, err := c.hc.Do(req)
	if err != nil {
		return c.transportErr(ctx, ep, err, c.requestTimeout)
	}
	defer resp.Body.Close()
	c.sawFeatures(resp.Header.Get(api.HeaderFeatures))
	mt, _, _ := mime.ParseMediaType(resp.Header.Get("Content-Type"))
	switch {
	case resp.StatusCode == http.StatusOK && mt == "text/event-stream":
	case resp.StatusCode == http.StatusOK,
		resp.StatusCode == http.StatusNotFound && req.Method == http.MethodPost:
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, maxResponseBytes))
		return errNoStreams
	default:
		data, _ := io.ReadAll(io.LimitReader(resp.Body, maxResponseBytes))
		return parseAPIError(ep, resp, data)
	}
	watchdog.Reset(streamIdle)
	return readEvents(resp.Body, func(name string, data []byte) error {
		watchdog.Reset(streamIdle)
		return c.streamEvent(ep, name, data, index, send)
	})
}

// streamEvent handles one event of a stream.
func (c *Client) streamEvent(ep, name string, data []byte, index *uint64, send func(WatchEvent) bool) error {
	switch name {
	case api.EventReset:
		var r api.StreamReset
		if err := json.Unmarshal(data, &r); err != nil {
			return errorf("decoding a stream's reset from %s: %w", ep, err)
		}
		if r.Locks == nil {
			c.logger.Debug("the stream was reset; resuming", "endpoint", ep, "reason", r.Reason, "index", *index)
			return errStreamReset
		}
		if !send(WatchEvent{Resync: true, Locks: r.Locks, Index: r.Index}) {
			return errStopped
		}
		*index = r.Index
	case api.EventChange:
		var ch api.StreamChange
		if err := json.Unmarshal(data, &ch); err != nil {
			return errorf("decoding a stream's change from %s: %w", ep, err)
		}
		for _, l := range ch.Locks {
			if !send(WatchEvent{Lock: l, Index: ch.Index}) {
				return errStopped
			}
		}
		*index = max(*index, ch.Index)
	case api.EventProgress:
		var p api.StreamProgress
		if err := json.Unmarshal(data, &p); err != nil {
			return errorf("decoding a stream's progress from %s: %w", ep, err)
		}
		// Every change up to p.Index was sent: a later stream may start there.
		*index = max(*index, p.Index)
	case api.EventEnd:
		var eb api.ErrorBody
		if err := json.Unmarshal(data, &eb); err != nil || eb.Error.Code == "" {
			return errorf("%w: the stream from %s ended: %s", ErrUnavailable, ep, data)
		}
		status := http.StatusServiceUnavailable
		switch eb.Error.Code {
		case api.CodeUnauthorized:
			status = http.StatusUnauthorized
		case api.CodeForbidden:
			status = http.StatusForbidden
		}
		return &APIError{StatusCode: status, Code: eb.Error.Code, Message: eb.Error.Message, Endpoint: ep}
	}
	return nil
}

// readEvents parses Server-Sent Events from r and hands each (its name and data) to handle,
// until r ends (nil) or handle fails.
func readEvents(r io.Reader, handle func(name string, data []byte) error) error {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 4096), maxResponseBytes)
	var name string
	var data []byte
	for sc.Scan() {
		line := sc.Bytes()
		if len(line) == 0 {
			if name != "" || data != nil {
				if err := handle(name, data); err != nil {
					return err
				}
			}
			name, data = "", nil
			continue
		}
		field, value, _ := strings.Cut(string(line), ":")
		value = strings.TrimPrefix(value, " ")
		switch field {
		case "event":
			name = value
		case "data":
			if data != nil {
				data = append(data, '\n')
			}
			data = append(data, value...)
		}
	}
	return nil
}

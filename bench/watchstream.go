package bench

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/url"
	"time"

	"github.com/raftlock/raftlock/api"
)

// Watch modes (Options.WatchModes).
const (
	WatchPoll   = "poll"
	WatchStream = "stream"
)

// streamEvent is what the workload reads of a stream's change or reset event.
type streamEvent struct {
	Index  uint64 `json:"index"`
	Reason string `json:"reason"`
	Locks  []struct {
		ModifyIndex uint64 `json:"modify_index"`
	} `json:"locks"`
}

// streamer follows the prefixes from index from over one stream on one node (Server-Sent
// Events: GET /v1/locks?prefix=P for one prefix, POST /v1/watch for more), recording when each
// change arrives; a stream that ends is opened again from the last index it reported.
func (wr *watchRun) streamer(ctx context.Context, w int, from uint64) {
	node := wr.nodes[w%len(wr.nodes)]
	st := &streamState{index: from}
	counted := false
	failures := 0
	for ctx.Err() == nil {
		// At most maxOpening streams are being opened at once, as clients that start over
		// time would: ten thousand at the same instant measure the start, not the watch.
		select {
		case wr.opening <- struct{}{}:
		case <-ctx.Done():
			return
		}
		held := true
		err := wr.readStream(ctx, node, w, st, func() {
			<-wr.opening
			held = false
			failures = 0
			if !counted {
				counted = true
				wr.asking.Add(1)
			}
		})
		if held {
			<-wr.opening
		}
		if ctx.Err() != nil {
			return
		}
		if err != nil {
			wr.fail(err)
			failures++
		}
		// Open it again after a pause that doubles with each failure in a row (100 ms to
		// 5 s), jittered, so that a node that refused many does not see them all come back at
		// once.
		pause := min(100*time.Millisecond<<min(failures, 6), 5*time.Second)
		sleep(ctx, pause/2+rand.N(pause/2+1))
	}
}

// maxOpening is how many streams the workload opens at once.
const maxOpening = 256

// streamState is what a streamer knows across its streams.
type streamState struct {
	index, lastIndex uint64
	seen             int
}

// readStream opens one stream from st.index and reads it until it ends; opened is called once
// the node answered with the stream's headers.
func (wr *watchRun) readStream(ctx context.Context, node string, w int, st *streamState, opened func()) error {
	var req *http.Request
	var err error
	if len(wr.prefixes) == 1 {
		u := fmt.Sprintf("%s/v1/locks?prefix=%s&index=%d%s", node, url.QueryEscape(wr.prefixes[0]), st.index, wr.query)
		req, err = http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	} else {
		body, _ := json.Marshal(map[string]any{"prefixes": wr.prefixes, "index": st.index})
		u := node + "/v1/watch"
		if wr.query != "" {
			u += "?" + wr.query[1:]
		}
		req, err = http.NewRequestWithContext(ctx, http.MethodPost, u, bytes.NewReader(body))
		if err == nil {
			req.Header.Set("Content-Type", "application/json")
		}
	}
	if err != nil {
		return err
	}
	req.Header.Set("Accept", "text/event-stream")
	if wr.r.opts.Token != "" {
		req.Header.Set(api.HeaderToken, wr.r.opts.Token)
	}
	resp, err := wr.hc.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
		return fmt.Errorf("%s %s: %s: %s", req.Method, req.URL.Path, resp.Status, bytes.TrimSpace(b))
	}
	opened()
	rd := bufio.NewReaderSize(resp.Body, 4096)
	var name string
	for {
		line, err := rd.ReadSlice('\n')
		if err != nil {
			if errors.Is(err, io.EOF) || ctx.Err() != nil {
				return nil
			}
			if errors.Is(err, bufio.ErrBufferFull) {
				return fmt.Errorf("bench: watch: a stream line longer than %d bytes", rd.Size())
			}
			return err
		}
		line = bytes.TrimRight(line, "\r\n")
		switch {
		case bytes.HasPrefix(line, []byte("event: ")):
			name = string(line[len("event: "):])
		case bytes.HasPrefix(line, []byte("data: ")):
			if stop, err := wr.streamData(w, st, name, line[len("data: "):]); stop || err != nil {
				return err
			}
		}
	}
}

// streamData handles one event's data; stop says the stream ends after it.
func (wr *watchRun) streamData(w int, st *streamState, name string, data []byte) (stop bool, err error) {
	now := int64(time.Since(wr.start))
	switch name {
	case "change":
		var e streamEvent
		if err := json.Unmarshal(data, &e); err != nil {
			return true, fmt.Errorf("bench: watch: a change event %q: %w", data, err)
		}
		for _, l := range e.Locks {
			if l.ModifyIndex <= st.lastIndex {
				wr.outOfOrder.Add(1)
			}
			st.lastIndex = l.ModifyIndex
			if st.seen < wr.changes {
				wr.told[st.seen][w] = now
				if wr.count[st.seen].Add(1) == int64(len(wr.told[st.seen])) {
					close(wr.done[st.seen])
				}
			}
			st.seen++
		}
		st.index = e.Index
	case "reset":
		var e streamEvent
		if err := json.Unmarshal(data, &e); err != nil {
			return true, fmt.Errorf("bench: watch: a reset event %q: %w", data, err)
		}
		if e.Locks == nil {
			wr.dropped.Add(1) // ended by the node (behind, or restored): resume from st.index
			return true, nil
		}
		wr.resets.Add(1) // its count of changes is no longer sound: stop counting
		st.seen = wr.changes
		st.index = e.Index
	case "progress":
		var e streamEvent
		if json.Unmarshal(data, &e) == nil && e.Index > st.index {
			st.index = e.Index
		}
	case "end":
		return true, fmt.Errorf("bench: watch: the stream ended: %s", data)
	}
	return false, nil
}

// acquireRate is one client's uncontended acquire+release rate over the workload's duration.
func (r *runner) acquireRate(ctx context.Context) (*float64, error) {
	res, err := r.uncontended(ctx, 1)
	if err != nil {
		return nil, err
	}
	v := res.OpsPerSec
	return &v, nil
}

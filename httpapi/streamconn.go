package httpapi

import (
	"net"
	"net/http"
	"runtime"
	"strconv"
	"sync"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/raftlock/raftlock/api"
)

// Detached streams. net/http holds, for each request in flight, the goroutine that runs its
// handler, a second one that watches the connection for the client's leaving, and their
// buffers: about 30 KiB for a stream that only waits. So once a stream (over HTTP/1.1) is open
// and registered with the hub, its handler takes the connection over (Hijack) and returns:
// the stream is then the connection and its subscriber, and a few writer goroutines of the hub
// write the events of every such stream as they are queued, each write bounded in time. A
// client that left is noticed at the next write that fails (the progress events see to one
// every few seconds). A stream over the in-process transport or HTTP/2, whose connection cannot
// be taken, is served by its handler's goroutine instead.

// detachedWriteTimeout bounds a hub writer's write to one detached stream: a client that takes
// no more for that long (its socket's buffers full) is cut off, so that it holds up the writer
// for no longer.
const detachedWriteTimeout = 2 * time.Second

// streamDetach takes the request's connection over and writes the answer's status line and
// headers itself (Connection: close, the events following until the connection closes), or
// returns nil when the connection cannot be taken.
func (s *Server) streamDetach(c echo.Context) net.Conn {
	req := c.Request()
	if req.ProtoMajor != 1 || req.ProtoMinor < 1 {
		return nil
	}
	conn, _, err := http.NewResponseController(c.Response().Writer).Hijack()
	if err != nil {
		return nil
	}
	head := make([]byte, 0, 512)
	head = append(head, "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nCache-Control: no-cache\r\nConnection: close\r\n"...)
	head = append(head, "Date: "+time.Now().UTC().Format(http.TimeFormat)+"\r\n"...)
	head = append(head, api.HeaderIndex+": "+strconv.FormatUint(s.node.AppliedIndex(), 10)+"\r\n"...)
	if id, _ := s.node.Leader(); id != "" {
		head = append(head, api.HeaderLeader+": "+id+"\r\n"...)
	}
	head = append(head, api.HeaderFeatures+": "+strconv.Itoa(s.node.FSM().FeatureCount())+"\r\n\r\n"...)
	_ = conn.SetWriteDeadline(time.Now().Add(streamWriteTimeout))
	if _, err := conn.Write(head); err != nil {
		conn.Close()
		return nil
	}
	return conn
}

// writeConn writes frames to a detached stream's connection in one call, within timeout.
func writeConn(conn net.Conn, timeout time.Duration, frames [][]byte) error {
	if len(frames) == 0 {
		return nil
	}
	_ = conn.SetWriteDeadline(time.Now().Add(timeout))
	bufs := net.Buffers(frames)
	_, err := bufs.WriteTo(conn)
	return err
}

// detachedWriters writes the events of detached streams: notify puts a stream whose queue got
// events on the ready list, at most once, and a writer writes its queue out.
type detachedWriters struct {
	h     *streamHub
	start sync.Once

	mu    sync.Mutex
	cond  *sync.Cond
	ready []*subscriber
	stop  bool
}

// schedule puts sub on the ready list unless it is there, or being written, already.
func (dw *detachedWriters) schedule(sub *subscriber) {
	sub.mu.Lock()
	if sub.scheduled || sub.closed {
		sub.mu.Unlock()
		return
	}
	sub.scheduled = true
	sub.mu.Unlock()
	dw.start.Do(func() {
		dw.mu.Lock()
		dw.cond = sync.NewCond(&dw.mu)
		dw.mu.Unlock()
		for range 2 * runtime.GOMAXPROCS(0) {
			go dw.run()
		}
	})
	dw.mu.Lock()
	dw.ready = append(dw.ready, sub)
	dw.mu.Unlock()
	dw.cond.Signal()
}

func (dw *detachedWriters) run() {
	var buf [][]byte
	for {
		dw.mu.Lock()
		for len(dw.ready) == 0 && !dw.stop {
			dw.cond.Wait()
		}
		if dw.stop {
			dw.mu.Unlock()
			return
		}
		sub := dw.ready[0]
		dw.ready[0] = nil
		dw.ready = dw.ready[1:]
		if len(dw.ready) == 0 {
			dw.ready = nil // let a burst's list go
		}
		dw.mu.Unlock()
		buf = dw.write(sub, buf[:0])
		clear(buf)
	}
}

// write writes out sub's queue, and its last event once there is one; it takes sub off the
// ready list when its queue is empty.
func (dw *detachedWriters) write(sub *subscriber, buf [][]byte) [][]byte {
	for {
		sub.mu.Lock()
		if len(sub.queue) == 0 && len(sub.end) == 0 || sub.closed {
			sub.scheduled = false
			sub.mu.Unlock()
			return buf
		}
		sub.mu.Unlock()
		var end []byte
		buf, end = sub.take(buf[:0])
		err := writeConn(sub.conn, detachedWriteTimeout, buf)
		if err == nil && end != nil {
			_ = writeConn(sub.conn, detachedWriteTimeout, [][]byte{end})
		}
		if err != nil || end != nil {
			dw.h.closeDetached(sub)
			return buf
		}
		clear(buf)
		buf = buf[:0]
	}
}

// stopAll stops the writers (those started later stop at once).
func (dw *detachedWriters) stopAll() {
	dw.mu.Lock()
	dw.stop = true
	cond := dw.cond
	dw.mu.Unlock()
	if cond != nil {
		cond.Broadcast()
	}
}

// closeDetached ends a detached stream: out of the hub, its connection closed, its place among
// its client's blocking queries freed.
func (h *streamHub) closeDetached(sub *subscriber) {
	h.remove(sub)
	sub.mu.Lock()
	already := sub.closed
	sub.closed = true
	sub.mu.Unlock()
	if already {
		return
	}
	sub.conn.Close()
	if sub.release != nil {
		sub.release()
	}
}

package httpapi

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/raftlock/raftlock/api"
)

// AuditEntry is one line of the audit log: a state-changing request as the node that received
// it answered it. It never holds a secret or a request body.
type AuditEntry struct {
	Time       string `json:"time"`
	Node       string `json:"node"`
	Remote     string `json:"remote"`
	AccessorID string `json:"accessor_id"`
	Method     string `json:"method"`
	Path       string `json:"path"`
	Lock       string `json:"lock,omitempty"`
	Status     int    `json:"status"`
	// Truncated says that the method, path or lock was cut to its bound (see clipEntry).
	Truncated bool `json:"truncated,omitempty"`
}

// Bounds on what a client puts into an audit entry or a log line. A path is cut at the name
// limit plus maxPathOverhead (no valid path is longer), a lock name at the name limit, a
// method at maxAuditMethod bytes; the HTTP server's header limit bounds them before that.
const (
	maxPathOverhead = 64
	maxAuditMethod  = 16
	maxLoggedPath   = 512
)

// clip returns s cut to at most n bytes.
func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n]
}

// AuditLog appends audit entries as JSON lines to a file and syncs it at least once a second.
type AuditLog struct {
	mu     sync.Mutex
	f      *os.File
	w      *bufio.Writer
	dirty  bool
	err    error // the first write or sync error, reported by Close
	stop   chan struct{}
	done   chan struct{}
	closed bool
}

// auditSyncInterval is how often buffered entries are written and fsynced.
const auditSyncInterval = time.Second

// OpenAuditLog opens (or creates, mode 0600) path for appending audit entries. A new file's
// directory is fsynced, or a power cut could take the whole file, synced lines and all.
func OpenAuditLog(path string) (*AuditLog, error) {
	_, statErr := os.Stat(path)
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("httpapi: audit log: %w", err)
	}
	if errors.Is(statErr, os.ErrNotExist) {
		if err := syncDir(filepath.Dir(path)); err != nil {
			f.Close()
			return nil, fmt.Errorf("httpapi: audit log: %w", err)
		}
	}
	l := &AuditLog{f: f, w: bufio.NewWriter(f), stop: make(chan struct{}), done: make(chan struct{})}
	go l.syncLoop()
	return l, nil
}

// syncDir fsyncs a directory, making the entries created in it durable.
func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	err = d.Sync()
	return errors.Join(err, d.Close())
}

// Write appends one entry; it reaches the disk within auditSyncInterval.
func (l *AuditLog) Write(e AuditEntry) {
	b, err := json.Marshal(e)
	if err != nil {
		return // every field is a string or an int
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return
	}
	b = append(b, '\n')
	if _, err := l.w.Write(b); err != nil && l.err == nil {
		l.err = err
	}
	l.dirty = true
}

func (l *AuditLog) syncLoop() {
	defer close(l.done)
	t := time.NewTicker(auditSyncInterval)
	defer t.Stop()
	for {
		select {
		case <-l.stop:
			return
		case <-t.C:
			l.mu.Lock()
			l.syncLocked()
			l.mu.Unlock()
		}
	}
}

// syncLocked writes the buffered entries and fsyncs the file if anything was written.
func (l *AuditLog) syncLocked() {
	if !l.dirty {
		return
	}
	l.dirty = false
	err := l.w.Flush()
	if err == nil {
		err = l.f.Sync()
	}
	if err != nil && l.err == nil {
		l.err = err
	}
}

// Close writes and syncs what is buffered and closes the file.
func (l *AuditLog) Close() error {
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		return nil
	}
	l.closed = true
	l.mu.Unlock()
	close(l.stop)
	<-l.done
	l.mu.Lock()
	defer l.mu.Unlock()
	l.dirty = true
	l.syncLocked()
	return errors.Join(l.err, l.f.Close())
}

// audit records every state-changing request this node received from a client (not one
// forwarded by another node, which recorded it), with the status it was answered.
func (s *Server) audit(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		req := c.Request()
		if (req.Method == http.MethodGet || req.Method == http.MethodHead || req.Method == http.MethodOptions) && !auditedRead(req) ||
			req.Header.Get(api.HeaderForwarded) != "" {
			return next(c)
		}
		err := next(c)
		if err != nil {
			c.Error(err) // answer now, so that the entry has the status the client got
		}
		e := AuditEntry{
			Time:   time.Now().UTC().Format(time.RFC3339),
			Node:   s.node.ID(),
			Remote: remoteHost(req),
			// Resolved by identify under ACL from this node's state, or, for a request this
			// node forwarded, by the leader (see headerAccessor).
			AccessorID: accessorOf(c),
			Method:     req.Method,
			Path:       req.URL.Path,
			Status:     c.Response().Status,
		}
		if p, ok := strings.CutPrefix(req.URL.EscapedPath(), "/v1/locks/"); ok && p != "" {
			if name, perr := lockPath(req); perr == nil {
				e.Lock, _ = splitAction(name)
			}
		}
		s.clipEntry(&e)
		s.cfg.AuditLog.Write(e)
		return nil
	}
}

// clipEntry cuts what the client chose in an entry (method, path and lock) to its bound, and
// marks the entry if it did: an entry holds at most a few hundred bytes of client input, so
// the audit log grows by a bounded amount per request.
func (s *Server) clipEntry(e *AuditEntry) {
	maxName := s.cfg.Limits.MaxNameBytes
	method, path, lock := clip(e.Method, maxAuditMethod), clip(e.Path, maxName+maxPathOverhead), clip(e.Lock, maxName)
	e.Truncated = len(method) < len(e.Method) || len(path) < len(e.Path) || len(lock) < len(e.Lock)
	e.Method, e.Path, e.Lock = method, path, lock
}

// remoteHost is the client's address as the connection shows it; headers such as
// X-Forwarded-For, which a client may set freely, are not believed.
func remoteHost(r *http.Request) string {
	if h, _, err := net.SplitHostPort(r.RemoteAddr); err == nil {
		return h
	}
	return r.RemoteAddr
}

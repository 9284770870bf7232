package cluster

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strconv"

	"github.com/raftlock/raftlock/api"
	"github.com/raftlock/raftlock/jepsen/faultfs"
)

// mountDisk gives the node a fault-injecting file system: its data directory becomes the
// mount point of a backing directory beside it (see package faultfs).
func (n *Node) mountDisk(dir string) error {
	d, err := faultfs.New(filepath.Join(dir, n.ID, "disk"), n.DataDir)
	if err != nil {
		return err
	}
	if err := d.Mount(); err != nil {
		return err
	}
	n.Disk = d
	return nil
}

// PowerCut kills the node (SIGKILL, if it runs) and makes its disk lose every write and
// directory change it had not made durable, as a power cut would. It does not restart it.
func (n *Node) PowerCut(ctx context.Context) (faultfs.CutReport, error) {
	if n.Disk == nil {
		return faultfs.CutReport{}, errors.New("cluster: the node's data dir is not on a fault-injecting file system")
	}
	if n.State() != Stopped {
		if err := n.Kill(ctx); err != nil && !errors.Is(err, ErrNotRunning) {
			return faultfs.CutReport{}, err
		}
	}
	return n.Disk.PowerCut()
}

// unmountDisks unmounts every node's fault-injecting file system; the nodes must have stopped.
func (c *Cluster) unmountDisks() error {
	var errs []error
	for _, n := range c.Nodes {
		if n.Disk != nil {
			errs = append(errs, n.Disk.Unmount())
		}
	}
	return errors.Join(errs...)
}

// Outcome is the outcome class of a control request: OK (2xx), Fail (a refusal: 4xx, or a
// connection refused before anything was sent), or Unknown.
type Outcome int

// Outcomes.
const (
	Unknown Outcome = iota
	OK
	Fail
)

// outcome classifies a control request's status and error.
func outcome(status int, err error) Outcome {
	switch {
	case err == nil:
		return OK
	case status >= 400 && status < 500:
		return Fail
	}
	return Unknown
}

// CreateSession creates a session with the TTL through node n.
func (c *Cluster) CreateSession(ctx context.Context, n *Node, name, ttl string) (api.Session, Outcome, error) {
	var s api.Session
	status, err := c.call(ctx, n, http.MethodPost, "/v1/sessions", api.CreateSessionRequest{TTL: ttl, Name: name}, &s)
	return s, outcome(status, err), err
}

// Acquire tries (without waiting) to take the lock for the session through node n.
func (c *Cluster) Acquire(ctx context.Context, n *Node, lock, session string) (uint64, Outcome, error) {
	var out api.AcquireResponse
	status, err := c.call(ctx, n, http.MethodPost, "/v1/locks/"+url.PathEscape(lock)+"/acquire", api.AcquireRequest{Session: session}, &out)
	return out.Token, outcome(status, err), err
}

// Release gives the lock held by the session under token back through node n.
func (c *Cluster) Release(ctx context.Context, n *Node, lock, session string, token uint64) (Outcome, error) {
	status, err := c.call(ctx, n, http.MethodPost, "/v1/locks/"+url.PathEscape(lock)+"/release", api.ReleaseRequest{Session: session, Token: &token}, nil)
	return outcome(status, err), err
}

// DestroySession ends the session through node n.
func (c *Cluster) DestroySession(ctx context.Context, n *Node, session string) error {
	_, err := c.call(ctx, n, http.MethodDelete, "/v1/sessions/"+url.PathEscape(session), nil, nil)
	return err
}

// Snapshot is the cluster's state as a linearizable read sees it: every lock and session, and
// the applied index of the node that answered the lock read.
type Snapshot struct {
	Locks    []api.Lock
	Sessions []api.SessionInfo
	Index    uint64
}

// ReadAll reads every lock and every session, linearizably, through node n.
func (c *Cluster) ReadAll(ctx context.Context, n *Node) (Snapshot, error) {
	var s Snapshot
	var locks api.LockList
	h, err := c.callHeader(ctx, n, http.MethodGet, "/v1/locks", &locks)
	if err != nil {
		return s, err
	}
	if s.Index, err = strconv.ParseUint(h.Get(api.HeaderIndex), 10, 64); err != nil {
		return s, fmt.Errorf("cluster: %s header of %s: %w", api.HeaderIndex, n.ID, err)
	}
	var sessions api.SessionList
	if _, err := c.callHeader(ctx, n, http.MethodGet, "/v1/sessions", &sessions); err != nil {
		return s, err
	}
	s.Locks, s.Sessions = locks.Locks, sessions.Sessions
	return s, nil
}

// callHeader is a GET through call that also returns the response headers.
func (c *Cluster) callHeader(ctx context.Context, n *Node, method, path string, out any) (http.Header, error) {
	var h http.Header
	_, err := c.callWith(ctx, n, method, path, nil, out, &h)
	return h, err
}

// ReadLock reads one lock, linearizably, through node n.
func (c *Cluster) ReadLock(ctx context.Context, n *Node, name string) (api.Lock, error) {
	var l api.Lock
	_, err := c.call(ctx, n, http.MethodGet, "/v1/locks/"+url.PathEscape(name), nil, &l)
	return l, err
}

// LogSince returns what the node logged from byte offset off of its log file on.
func (n *Node) LogSince(off int64) (string, error) {
	b, err := os.ReadFile(n.LogPath)
	if err != nil {
		return "", err
	}
	if off > int64(len(b)) {
		off = 0
	}
	return string(b[off:]), nil
}

// LogSize is the current size of the node's log file.
func (n *Node) LogSize() int64 {
	st, err := os.Stat(n.LogPath)
	if err != nil {
		return 0
	}
	return st.Size()
}

// CreatePolicy creates an ACL policy (reading the locks named after it) through node n.
func (c *Cluster) CreatePolicy(ctx context.Context, n *Node, name string) (api.Policy, Outcome, error) {
	var out api.Policy
	status, err := c.call(ctx, n, http.MethodPost, "/v1/acl/policies",
		api.Policy{Name: name, Locks: []api.LockRule{{Prefix: name, Access: "read"}}, Operator: "none"}, &out)
	return out, outcome(status, err), err
}

// Policies lists the ACL policies, linearizably, through node n.
func (c *Cluster) Policies(ctx context.Context, n *Node) ([]api.Policy, error) {
	var out api.PolicyList
	_, err := c.call(ctx, n, http.MethodGet, "/v1/acl/policies", nil, &out)
	return out.Policies, err
}

// DeletePolicy deletes an ACL policy through node n.
func (c *Cluster) DeletePolicy(ctx context.Context, n *Node, name string) error {
	_, err := c.call(ctx, n, http.MethodDelete, "/v1/acl/policies/"+url.PathEscape(name), nil, nil)
	return err
}

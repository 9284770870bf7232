package httpapi

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"strconv"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/raftlock/raftlock/api"
	"github.com/raftlock/raftlock/backup"
	"github.com/raftlock/raftlock/cluster"
)

// snapshotPath is the backup endpoint: GET saves, PUT restores (docs/api.md).
const snapshotPath = "/v1/snapshot"

// saveSnapshot streams a backup file of the cluster's state (GET /v1/snapshot): the leader's
// state after a read barrier, so that it holds everything acknowledged before the request;
// with ?consistency=stale, the answering node's. It needs the management policy under ACL:
// the file holds every session id and every token's secret hash.
func (s *Server) saveSnapshot(c echo.Context) error {
	return s.readAsManagement(c, func() error {
		res := c.Response()
		res.Header().Set(echo.HeaderContentType, echo.MIMEOctetStream)
		res.Header().Set(echo.HeaderContentDisposition, `attachment; filename="raftlock.snap"`)
		if _, err := s.node.WriteBackup(c.Request().Context(), res); err != nil {
			if res.Committed {
				// Part of the file is out: the client finds it short of its trailer.
				s.log.Warn("backup cut off", "error", err)
				return nil
			}
			return fromClusterError(err)
		}
		return nil
	})
}

// restoreSnapshot replaces the cluster's state with the backup file in the body (PUT
// /v1/snapshot), on the leader; ?index_gap=N sets how far past every known index the log
// moves (default cluster.DefaultIndexGap), ?acl=keep|replace whose ACL state the cluster
// keeps (see cluster.RestoreOptions). It needs the management policy under ACL.
func (s *Server) restoreSnapshot(c echo.Context) error {
	gap := uint64(cluster.DefaultIndexGap)
	if v := c.QueryParam("index_gap"); v != "" {
		n, err := strconv.ParseUint(v, 10, 64)
		if err != nil || n > 1<<62 {
			return invalid("index_gap %q is not a whole number from 0 to 2^62", v)
		}
		gap = n
	}
	acl := cluster.ACLRestore(c.QueryParam("acl"))
	if acl != cluster.ACLDefault && acl != cluster.ACLKeep && acl != cluster.ACLReplace {
		return invalid("acl %q is neither keep nor replace", string(acl))
	}
	return s.asManagement(c, func() error {
		res, err := s.node.RestoreBackup(c.Request().Context(), c.Request().Body, cluster.RestoreOptions{IndexGap: gap, ACL: acl})
		if err != nil {
			return s.restoreError(c, err)
		}
		return c.JSON(http.StatusOK, api.RestoreResponse{
			Index:         res.Index,
			BackupIndex:   res.Header.Index,
			BackupNode:    res.Header.Node,
			BackupCreated: res.Header.Created.Format(time.RFC3339),
			Sessions:      res.State.Sessions,
			Locks:         res.State.Locks,
			ACLTokens:     res.State.ACLTokens,
		})
	})
}

// restoreError is the answer to a restore that failed with err, on the leader or, reading the
// backup's header before it passes the file on, on a follower.
func (s *Server) restoreError(c echo.Context, err error) error {
	var tooLarge *http.MaxBytesError
	switch {
	case errors.Is(err, os.ErrDeadlineExceeded) || restoreTooSlow(c):
		return s.errRestoreTooSlow()
	case errors.As(err, &tooLarge):
		return newError(http.StatusRequestEntityTooLarge, api.CodePayloadTooLarge, "the backup is larger than %d bytes (--max-snapshot-bytes); nothing was changed", s.cfg.MaxSnapshotBytes)
	case errors.Is(err, cluster.ErrInvalidBackup):
		return invalid("%v; nothing was changed", err)
	case errors.Is(err, cluster.ErrBackupWithoutACL):
		return invalid("%v", err)
	}
	return fromClusterError(err)
}

// forwardedBackup is the body of a restore this follower passes on to the leader. When the
// caller may restore as far as this node knows (no ACLs, or a management token here too), it
// reads and checks the backup's header first: a file that is not a backup is refused here,
// before anything reaches the leader. (Refused there instead, the leader's answer can lose the
// race with the follower's write of the rest of the body, which the leader no longer reads,
// and the client would hear "outcome unknown" for garbage.) Any other caller's body is not read
// here: the leader judges the token before it reads a byte of it.
func (s *Server) forwardedBackup(c echo.Context) (io.Reader, error) {
	if s.cfg.ACL && s.callerManagement(c) != nil {
		return c.Request().Body, nil
	}
	_, body, err := backup.CheckHeader(c.Request().Body)
	if err != nil {
		return nil, s.restoreError(c, fmt.Errorf("%w: %w", cluster.ErrInvalidBackup, err))
	}
	return body, nil
}

// unlimitedBody says whether a request's body is exempt from the body limit: a backup file
// to restore, which streams to disk on the leader.
func unlimitedBody(c echo.Context) bool {
	r := c.Request()
	return r.Method == http.MethodPut && r.URL.Path == snapshotPath
}

// auditedRead says whether a read is audited like a state-changing request: a backup, which
// carries every session id and token hash out of the cluster.
func auditedRead(r *http.Request) bool {
	return r.Method == http.MethodGet && r.URL.Path == snapshotPath
}

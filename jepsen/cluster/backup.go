package cluster

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/raftlock/raftlock/api"
)

// backupTimeout bounds a backup's save or restore: longer than a control request, since a
// restore waits for every follower to install the restored state.
const backupTimeout = 30 * time.Second

// SaveBackup saves a backup file of the cluster's state through n (GET /v1/snapshot, the
// leader's state after a read barrier), with the harness's management token under --acl.
func (c *Cluster) SaveBackup(ctx context.Context, n *Node) ([]byte, error) {
	status, body, err := c.backupCall(ctx, n, http.MethodGet, "/v1/snapshot", nil)
	if err != nil {
		return nil, err
	}
	if status != http.StatusOK {
		return nil, fmt.Errorf("cluster: GET /v1/snapshot on %s: %d %s", n.ID, status, strings.TrimSpace(string(body)))
	}
	return body, nil
}

// RestoreBackup restores a backup file through n (PUT /v1/snapshot) with acl=keep: the cluster
// keeps its own ACL tokens, so that the workers' tokens made after the backup still work.
func (c *Cluster) RestoreBackup(ctx context.Context, n *Node, file []byte) (api.RestoreResponse, error) {
	var res api.RestoreResponse
	status, body, err := c.backupCall(ctx, n, http.MethodPut, "/v1/snapshot?acl=keep", file)
	if err != nil {
		return res, err
	}
	if status != http.StatusOK {
		return res, fmt.Errorf("cluster: PUT /v1/snapshot on %s: %d %s", n.ID, status, strings.TrimSpace(string(body)))
	}
	if err := json.Unmarshal(body, &res); err != nil {
		return res, fmt.Errorf("cluster: decode the restore's answer on %s: %w", n.ID, err)
	}
	return res, nil
}

// backupCall makes one backup request and returns the status and the whole body.
func (c *Cluster) backupCall(ctx context.Context, n *Node, method, path string, body []byte) (int, []byte, error) {
	ctx, cancel := context.WithTimeout(ctx, backupTimeout)
	defer cancel()
	status, _, b, err := c.send(ctx, n, method, path, body, "application/octet-stream")
	return status, b, err
}

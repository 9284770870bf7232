package cluster

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
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
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, c.Scheme()+"://"+n.HTTPAddr+path, rd)
	if err != nil {
		return 0, nil, fmt.Errorf("cluster: %w", err)
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/octet-stream")
	}
	if c.token != "" {
		req.Header.Set(api.HeaderToken, c.token)
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		return 0, nil, fmt.Errorf("cluster: %s %s on %s: %w", method, path, n.ID, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return resp.StatusCode, nil, fmt.Errorf("cluster: read %s on %s: %w", path, n.ID, err)
	}
	return resp.StatusCode, b, nil
}

package agent_test

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"io"
	"net/http"
	"testing"
	"time"

	"github.com/raftlock/raftlock/agent"
	"github.com/raftlock/raftlock/api"
)

// With TLS and --acl, a member's one-time publication of its HTTP address needs no token but a
// node certificate of the cluster's CA: a client certificate gets 401 like any request without
// a token, so no client learns from the answer whether an (id, Raft address, HTTP address)
// triple is a member's. A node gets 200 and nothing else: no member list.
func TestPublicationWithoutATokenNeedsANodeCertificate(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	dev, err := agent.StartDev(ctx, agent.DevOptions{TLS: true, ACL: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { dev.Close() })
	files, _ := dev.TLSFiles()
	leader, err := dev.WaitLeader(ctx)
	if err != nil {
		t.Fatal(err)
	}
	f := (leader + 1) % dev.Size()
	st, err := dev.Agent(leader).Node().Status()
	if err != nil {
		t.Fatal(err)
	}
	var pub api.AddMemberRequest
	for _, m := range st.Members {
		if m.ID == dev.Agent(f).Node().ID() {
			pub = api.AddMemberRequest{ID: m.ID, RaftAddr: m.RaftAddr, HTTPAddr: m.HTTPAddr}
		}
	}
	if pub.HTTPAddr == "" {
		t.Fatalf("the follower's record: %+v", st.Members)
	}
	body, _ := json.Marshal(pub)
	send := func(cert tls.Certificate, ep string) (int, []byte) {
		t.Helper()
		cfg := tlsConfig(t, files, false)
		cfg.Certificates = []tls.Certificate{cert}
		hc := httpsClient(cfg)
		defer hc.CloseIdleConnections()
		res, err := hc.Post(ep+"/v1/cluster/members", "application/json", bytes.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		b, _ := io.ReadAll(res.Body)
		return res.StatusCode, b
	}
	client, err := tls.LoadX509KeyPair(files.ClientCertFile, files.ClientKeyFile)
	if err != nil {
		t.Fatal(err)
	}
	nodeCert, nodeKey := files.NodeFiles(pub.ID)
	node, err := tls.LoadX509KeyPair(nodeCert, nodeKey)
	if err != nil {
		t.Fatal(err)
	}
	for _, ep := range []string{dev.Endpoints()[leader], dev.Endpoints()[f]} {
		if status, b := send(client, ep); status != http.StatusUnauthorized {
			t.Fatalf("a publication from a client certificate through %s: %d %s", ep, status, b)
		}
		if status, b := send(node, ep); status != http.StatusOK || len(b) != 0 {
			t.Fatalf("a publication from a node certificate through %s: %d %q; want 200 and no body", ep, status, b)
		}
	}
}

package client_test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/raftlock/raftlock/agent"
	"github.com/raftlock/raftlock/api"
	"github.com/raftlock/raftlock/client"
	"github.com/raftlock/raftlock/config"
)

// A client WithToken works against a cluster started with --acl, within what the token's
// policies allow; the ACL methods manage policies and tokens.
func TestWithTokenAgainstAnACLCluster(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	dev, err := agent.StartDev(ctx, agent.DevOptions{Tune: func(c *config.Config) { c.ACL = true }})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { dev.Close() })
	eps := dev.Endpoints()

	anon := newClient(t, eps, client.WithRetryTimeout(0))
	if _, err := anon.Raw().Locks(ctx, ""); !errors.Is(err, client.ErrUnauthorized) {
		t.Fatalf("a client without a token: %v", err)
	}
	boot, err := anon.Raw().ACLBootstrap(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := anon.Raw().ACLBootstrap(ctx); !errors.Is(err, client.ErrForbidden) {
		t.Fatalf("second bootstrap: %v", err)
	}
	admin := newClient(t, eps, client.WithToken(boot.SecretID))
	if _, err := admin.Raw().CreatePolicy(ctx, api.Policy{Name: "jobs", Locks: []api.LockRule{{Prefix: "jobs/", Access: "write"}}}); err != nil {
		t.Fatal(err)
	}
	if _, err := admin.Raw().CreatePolicy(ctx, api.Policy{Name: "jobs"}); !errors.Is(err, client.ErrAlreadyExists) {
		t.Fatalf("second create: %v", err)
	}
	if p, err := admin.Raw().PutPolicy(ctx, api.Policy{Name: "jobs", Locks: []api.LockRule{{Prefix: "jobs/", Access: "write"}, {Prefix: "", Access: "read"}}}); err != nil || len(p.Locks) != 2 {
		t.Fatalf("put: %+v %v", p, err)
	}
	if ps, err := admin.Raw().Policies(ctx); err != nil || len(ps) != 2 {
		t.Fatalf("policies %+v %v", ps, err)
	}
	tok, err := admin.Raw().CreateToken(ctx, api.CreateTokenRequest{Description: "worker", Policies: []string{"jobs"}})
	if err != nil {
		t.Fatal(err)
	}
	worker := newClient(t, eps, client.WithToken(tok.SecretID))
	m := lockedMutex(ctx, t, worker, "jobs/a")
	if self, err := worker.Raw().TokenSelf(ctx); err != nil || self.AccessorID != tok.AccessorID {
		t.Fatalf("self %+v %v", self, err)
	}
	s := newSession(t, worker)
	if err := client.NewMutex(s, "db/a").TryLock(ctx); !errors.Is(err, client.ErrForbidden) {
		t.Fatalf("a lock outside the policy: %v", err)
	}

	// Another token sees the holder without its session, in reads and in a refused acquire.
	other, err := admin.Raw().CreateToken(ctx, api.CreateTokenRequest{Policies: []string{"jobs"}})
	if err != nil {
		t.Fatal(err)
	}
	rival := newClient(t, eps, client.WithToken(other.SecretID))
	l, err := rival.GetLock(ctx, "jobs/a")
	if err != nil || !l.Held || l.Session != "" || l.Token != m.Token() {
		t.Fatalf("lock as another token sees it: %+v %v", l, err)
	}
	err = client.NewMutex(newSession(t, rival), "jobs/a").TryLock(ctx)
	var ae *client.APIError
	if !errors.As(err, &ae) || ae.Holder == nil || ae.Holder.Session != "" || !strings.Contains(err.Error(), "held with token") {
		t.Fatalf("try-lock of a held lock as another token: %v", err)
	}

	if err := admin.Raw().DeleteToken(ctx, tok.AccessorID); err != nil {
		t.Fatal(err)
	}
	if _, err := worker.Raw().TokenSelf(ctx); !errors.Is(err, client.ErrUnauthorized) {
		t.Fatalf("a deleted token: %v", err)
	}
	if _, err := admin.Raw().Token(ctx, tok.AccessorID); !errors.Is(err, client.ErrNotFound) {
		t.Fatalf("get of a deleted token: %v", err)
	}
	if err := admin.Raw().DeletePolicy(ctx, "jobs"); err != nil {
		t.Fatal(err)
	}
	if _, err := admin.Raw().Policy(ctx, "jobs"); !errors.Is(err, client.ErrNotFound) {
		t.Fatalf("get of a deleted policy: %v", err)
	}
	if toks, err := admin.Raw().Tokens(ctx); err != nil || len(toks) != 2 {
		t.Fatalf("tokens %+v %v", toks, err)
	}
}

// The same over TLS: a cluster started with TLS and --acl, clients with a CA and a token, the
// requests spread over every node (followers forward them over mutual TLS, with the token).
func TestWithTokenOverTLS(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	dev, err := agent.StartDev(ctx, agent.DevOptions{TLS: true, Tune: func(c *config.Config) { c.ACL = true }})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { dev.Close() })
	files, ok := dev.TLSFiles()
	if !ok {
		t.Fatal("no TLS files")
	}
	pem, err := os.ReadFile(files.CAFile)
	if err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(pem)
	tlsCfg := &tls.Config{RootCAs: roots, MinVersion: tls.VersionTLS12}
	eps := dev.Endpoints()

	boot, err := newClient(t, eps[1:], client.WithTLSConfig(tlsCfg)).Raw().ACLBootstrap(ctx)
	if err != nil {
		t.Fatal(err)
	}
	admin := newClient(t, eps, client.WithTLSConfig(tlsCfg), client.WithToken(boot.SecretID))
	if _, err := admin.Raw().CreatePolicy(ctx, api.Policy{Name: "jobs", Locks: []api.LockRule{{Prefix: "jobs/", Access: "write"}}}); err != nil {
		t.Fatal(err)
	}
	tok, err := admin.Raw().CreateToken(ctx, api.CreateTokenRequest{Policies: []string{"jobs"}})
	if err != nil {
		t.Fatal(err)
	}
	// One tls.Config serves many clients at once: each takes its own copy (net/http writes
	// into the configuration of a transport as it first uses it, which -race reports).
	var wg sync.WaitGroup
	for _, ep := range eps {
		c := newClient(t, []string{ep}, client.WithTLSConfig(tlsCfg), client.WithToken(tok.SecretID))
		wg.Go(func() {
			if _, err := c.Raw().TokenSelf(ctx); err != nil {
				t.Errorf("token self through %s: %v", ep, err)
			}
		})
	}
	wg.Wait()
	for i, ep := range eps {
		worker := newClient(t, []string{ep}, client.WithTLSConfig(tlsCfg), client.WithToken(tok.SecretID))
		m := lockedMutex(ctx, t, worker, fmt.Sprintf("jobs/tls-%d", i))
		if l, err := admin.GetLock(ctx, m.Key(), client.AtEndpoint(ep)); err != nil || !l.Held || l.Token != m.Token() {
			t.Fatalf("through %s: %+v %v", ep, l, err)
		}
		if _, err := worker.Raw().Cluster(ctx); !errors.Is(err, client.ErrForbidden) {
			t.Fatalf("cluster without operator: %v", err)
		}
	}
	if err := admin.Raw().DeleteToken(ctx, tok.AccessorID); err != nil {
		t.Fatal(err)
	}
	for _, ep := range eps {
		worker := newClient(t, []string{ep}, client.WithTLSConfig(tlsCfg), client.WithToken(tok.SecretID), client.WithRetryTimeout(0))
		if _, err := worker.Raw().TokenSelf(ctx); !errors.Is(err, client.ErrUnauthorized) {
			t.Fatalf("a deleted token through %s: %v", ep, err)
		}
	}
}

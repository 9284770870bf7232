package cluster

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"

	"github.com/raftlock/raftlock/api"
	"github.com/raftlock/raftlock/tlsutil"
)

// secureSetup writes a CA and a certificate per node into dir and returns the agent flags of
// each node (TLS for the API and Raft, and --acl), the TLS configuration of the harness's
// clients, which trust that CA, and the CA itself.
func secureSetup(dir string, ids []string) (map[string][]string, *tls.Config, *tlsutil.CA, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, nil, nil, fmt.Errorf("cluster: %w", err)
	}
	ca, err := tlsutil.NewCA("raftlock jepsen CA", 0)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("cluster: %w", err)
	}
	caFile := filepath.Join(dir, "ca.pem")
	if err := os.WriteFile(caFile, ca.CertPEM(), 0o600); err != nil {
		return nil, nil, nil, fmt.Errorf("cluster: %w", err)
	}
	args := map[string][]string{}
	for _, id := range ids {
		cert, key, err := ca.Issue(tlsutil.CertRequest{Name: id, IPs: []net.IP{net.IPv4(127, 0, 0, 1)}})
		if err != nil {
			return nil, nil, nil, fmt.Errorf("cluster: %w", err)
		}
		certFile, keyFile := filepath.Join(dir, id+".pem"), filepath.Join(dir, id+"-key.pem")
		if err := tlsutil.WriteFiles(certFile, cert, keyFile, key, true); err != nil {
			return nil, nil, nil, fmt.Errorf("cluster: %w", err)
		}
		args[id] = []string{"--tls-cert-file", certFile, "--tls-key-file", keyFile, "--tls-ca-file", caFile, "--acl"}
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(ca.CertPEM())
	return args, &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}, ca, nil
}

// ProxyTLS is the server TLS configuration of the harness's HTTP proxies in front of the nodes
// (see proxy.HTTPProxy): a certificate of the cluster's CA for 127.0.0.1, which the clients
// already trust. It is nil for a cluster without TLS.
func (c *Cluster) ProxyTLS() (*tls.Config, error) {
	if c.ca == nil {
		return nil, nil
	}
	certPEM, keyPEM, err := c.ca.Issue(tlsutil.CertRequest{Name: "jepsen-client-proxy", IPs: []net.IP{net.IPv4(127, 0, 0, 1)}})
	if err != nil {
		return nil, fmt.Errorf("cluster: proxy certificate: %w", err)
	}
	cert, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		return nil, fmt.Errorf("cluster: proxy certificate: %w", err)
	}
	return &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}, nil
}

// Secure reports whether the cluster runs with TLS and ACLs (Options.Secure).
func (c *Cluster) Secure() bool { return c.tls != nil }

// TLSConfig is the client TLS configuration that trusts the cluster's CA, or nil.
func (c *Cluster) TLSConfig() *tls.Config { return c.tls }

// Scheme is "https" for a secure cluster and "http" otherwise.
func (c *Cluster) Scheme() string {
	if c.tls != nil {
		return "https"
	}
	return "http"
}

// workerPolicy is the policy of the workers' tokens: write on every lock, and operator read,
// so that their reads show every holder's session, which the checkers compare.
const workerPolicy = "jepsen-worker"

// bootstrap creates the management token the harness uses for its own requests, and the
// workers' policy. It asks one node after another until one answers.
func (c *Cluster) bootstrap(ctx context.Context) error {
	return poll(ctx, func() error {
		var lastErr error
		for _, n := range c.Nodes {
			var b api.BootstrapResponse
			if _, err := c.call(ctx, n, http.MethodPost, "/v1/acl/bootstrap", nil, &b); err != nil {
				lastErr = err
				continue
			}
			c.token = b.SecretID
			p := api.Policy{Name: workerPolicy, Locks: []api.LockRule{{Prefix: "", Access: "write"}}, Operator: "read"}
			if _, err := c.call(ctx, n, http.MethodPut, "/v1/acl/policies/"+workerPolicy, p, nil); err != nil {
				return fmt.Errorf("cluster: bootstrapped, but the workers' policy: %w", err)
			}
			return nil
		}
		return lastErr
	})
}

// NewToken creates a token of the workers' policy and returns its secret; on a cluster
// without ACLs it returns "".
func (c *Cluster) NewToken(ctx context.Context, description string) (string, error) {
	if c.tls == nil {
		return "", nil
	}
	var out api.NewToken
	err := poll(ctx, func() error {
		n, _, err := c.Leader(ctx)
		if err != nil {
			return err
		}
		_, err = c.call(ctx, n, http.MethodPost, "/v1/acl/tokens", api.CreateTokenRequest{Description: description, Policies: []string{workerPolicy}}, &out)
		return err
	})
	return out.SecretID, err
}

package agent_test

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/raftlock/raftlock/agent"
	"github.com/raftlock/raftlock/api"
	"github.com/raftlock/raftlock/client"
	"github.com/raftlock/raftlock/config"
	"github.com/raftlock/raftlock/internal/testkit"
	"github.com/raftlock/raftlock/tlsutil"
)

// startTLSDev starts a three-node development cluster with TLS; tune adjusts each node.
func startTLSDev(t *testing.T, tune func(*config.Config)) (*agent.Dev, agent.DevTLSFiles) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	dev, err := agent.StartDev(ctx, agent.DevOptions{TLS: true, Tune: tune})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { dev.Close() })
	files, ok := dev.TLSFiles()
	if !ok {
		t.Fatal("a TLS dev cluster reports no TLS files")
	}
	return dev, files
}

// tlsConfig trusts the dev CA and, with withCert, presents the dev client certificate.
func tlsConfig(t *testing.T, files agent.DevTLSFiles, withCert bool) *tls.Config {
	t.Helper()
	cfg, err := files.ClientConfig()
	if err != nil {
		t.Fatal(err)
	}
	if !withCert {
		cfg.Certificates = nil
	}
	return cfg
}

func httpsClient(cfg *tls.Config) *http.Client {
	return &http.Client{Timeout: 15 * time.Second, Transport: &http.Transport{TLSClientConfig: cfg}}
}

// post sends body as JSON and decodes a 2xx answer into out.
func post(t *testing.T, hc *http.Client, url string, body, out any) *http.Response {
	t.Helper()
	b, err := json.Marshal(body)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := hc.Post(url, "application/json", bytes.NewReader(b))
	if err != nil {
		t.Fatalf("POST %s: %v", url, err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	if resp.StatusCode/100 != 2 {
		t.Fatalf("POST %s: %s %s", url, resp.Status, raw)
	}
	if err := json.Unmarshal(raw, out); err != nil {
		t.Fatalf("POST %s: %v in %s", url, err, raw)
	}
	return resp
}

// follower returns the index of a node that does not lead.
func follower(t *testing.T, dev *agent.Dev) int {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	leader, err := dev.WaitLeader(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return (leader + 1) % dev.Size()
}

func TestTLSClusterServesLocksThroughAFollower(t *testing.T) {
	dev, files := startTLSDev(t, nil)
	f := follower(t, dev)
	ep := dev.Endpoints()[f]
	if !strings.HasPrefix(ep, "https://") {
		t.Fatalf("endpoint %q of a TLS node", ep)
	}
	hc := httpsClient(tlsConfig(t, files, false))
	var s api.Session
	resp := post(t, hc, ep+"/v1/sessions", api.CreateSessionRequest{TTL: "30s", Name: "tls"}, &s)
	if id := resp.Header.Get(api.HeaderLeader); id == "" || id == dev.Agent(f).Node().ID() {
		t.Fatalf("the follower's answer names leader %q", id)
	}
	var got api.AcquireResponse
	post(t, hc, ep+"/v1/locks/jobs/tls/acquire", api.AcquireRequest{Session: s.ID}, &got)
	if got.Token == 0 || got.Session != s.ID {
		t.Fatalf("acquire through the follower: %+v", got)
	}

	// The Go client with a TLS configuration, on the follower alone.
	c, err := client.New([]string{ep}, client.WithTLSConfig(tlsConfig(t, files, false)))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	l, err := c.GetLock(ctx, "jobs/tls")
	if err != nil {
		t.Fatal(err)
	}
	if !l.Held || l.Token != got.Token {
		t.Fatalf("lock read through the client: %+v", l)
	}
}

func TestTLSPortGivesPlainHTTPNoAnswer(t *testing.T) {
	dev, _ := startTLSDev(t, nil)
	addr := dev.Agent(0).HTTPAddr()
	resp, err := (&http.Client{Timeout: 10 * time.Second}).Get("http://" + addr + "/v1/health")
	if err == nil {
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		t.Fatalf("plain HTTP to a TLS port answered %s %q", resp.Status, body)
	}
	// At the socket: the request is read as a broken handshake and the connection closed
	// without a byte in answer.
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := io.WriteString(conn, "GET /v1/health HTTP/1.1\r\nHost: x\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	_ = conn.SetReadDeadline(time.Now().Add(10 * time.Second))
	b, err := io.ReadAll(conn)
	var ne net.Error
	if len(b) != 0 || errors.As(err, &ne) && ne.Timeout() {
		t.Fatalf("plain HTTP got %q (%v); want the connection closed unanswered", b, err)
	}
}

func TestVerifyClientsRefusesAClientWithoutCertificate(t *testing.T) {
	dev, files := startTLSDev(t, func(c *config.Config) { c.TLSVerifyClients = true })
	f := follower(t, dev)
	ep := dev.Endpoints()[f]
	if resp, err := httpsClient(tlsConfig(t, files, false)).Get(ep + "/v1/health"); err == nil {
		resp.Body.Close()
		t.Fatalf("a client without a certificate got %s", resp.Status)
	}
	// Another CA's client certificate is refused too.
	other, err := tlsutil.NewCA("other", 0)
	if err != nil {
		t.Fatal(err)
	}
	cp, kp, err := other.Issue(tlsutil.CertRequest{Name: "stranger", Client: true})
	if err != nil {
		t.Fatal(err)
	}
	pair, err := tls.X509KeyPair(cp, kp)
	if err != nil {
		t.Fatal(err)
	}
	stranger := tlsConfig(t, files, false)
	stranger.Certificates = []tls.Certificate{pair}
	if resp, err := httpsClient(stranger).Get(ep + "/v1/health"); err == nil {
		resp.Body.Close()
		t.Fatalf("a client of another CA got %s", resp.Status)
	}
	// The CA's client certificate is served, and a write through the follower is forwarded
	// (the follower presents its node certificate to the leader).
	var s api.Session
	post(t, httpsClient(tlsConfig(t, files, true)), ep+"/v1/sessions", api.CreateSessionRequest{TTL: "30s"}, &s)
	if s.ID == "" {
		t.Fatal("no session id")
	}
}

// serial returns the serial number of the certificate the API at addr presents now.
func serial(t *testing.T, addr string, files agent.DevTLSFiles) string {
	t.Helper()
	cfg := tlsConfig(t, files, false)
	cfg.ServerName = "localhost"
	c, err := tls.DialWithDialer(&net.Dialer{Timeout: 10 * time.Second}, "tcp", addr, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	return c.ConnectionState().PeerCertificates[0].SerialNumber.String()
}

func TestReloadTakesANewCertificateForNewConnections(t *testing.T) {
	dev, files := startTLSDev(t, nil)
	a := dev.Agent(0)
	before := serial(t, a.HTTPAddr(), files)

	ca, err := tlsutil.LoadCA(files.CAFile, files.CAKeyFile)
	if err != nil {
		t.Fatal(err)
	}
	cert, key, err := ca.Issue(tlsutil.CertRequest{Name: "n1", DNSNames: []string{"localhost"}, IPs: []net.IP{net.IPv4(127, 0, 0, 1)}})
	if err != nil {
		t.Fatal(err)
	}
	certFile, keyFile := files.NodeFiles("n1")
	if err := tlsutil.WriteFiles(certFile, cert, keyFile, key, true); err != nil {
		t.Fatal(err)
	}
	if got := serial(t, a.HTTPAddr(), files); got != before {
		t.Fatal("the new certificate was served before the reload")
	}
	if err := a.Reload(); err != nil {
		t.Fatal(err)
	}
	after := serial(t, a.HTTPAddr(), files)
	if after == before {
		t.Fatal("the reload did not take the new certificate")
	}

	// A broken file keeps the certificate in use, and the error says so.
	if err := os.WriteFile(certFile, []byte("garbage"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := a.Reload(); err == nil {
		t.Fatal("reloading a broken certificate reported no error")
	}
	if got := serial(t, a.HTTPAddr(), files); got != after {
		t.Fatal("a failed reload changed the certificate")
	}
	// The node still serves (and, with its new certificate, talks to the others).
	var s api.Session
	post(t, httpsClient(tlsConfig(t, files, false)), dev.Endpoints()[0]+"/v1/sessions", api.CreateSessionRequest{TTL: "30s"}, &s)
}

func TestJoinOverHTTPS(t *testing.T) {
	dev, files := startTLSDev(t, func(c *config.Config) { c.TLSVerifyClients = true })
	ca, err := tlsutil.LoadCA(files.CAFile, files.CAKeyFile)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	write := func(ca *tlsutil.CA, name string) (string, string) {
		cert, key, err := ca.Issue(tlsutil.CertRequest{Name: name, IPs: []net.IP{net.IPv4(127, 0, 0, 1)}})
		if err != nil {
			t.Fatal(err)
		}
		c, k := filepath.Join(dir, name+".pem"), filepath.Join(dir, name+"-key.pem")
		if err := tlsutil.WriteFiles(c, cert, k, key, false); err != nil {
			t.Fatal(err)
		}
		return c, k
	}
	newcomer := func(id, certFile, keyFile, caFile string) config.Config {
		cfg := config.Default()
		cfg.ID = id
		cfg.DataDir = filepath.Join(dir, id)
		cfg.HTTPAddr, cfg.RaftAddr = "127.0.0.1:0", "127.0.0.1:0"
		cfg.TLSCertFile, cfg.TLSKeyFile, cfg.TLSCAFile = certFile, keyFile, caFile
		cfg.Join = []string{strings.TrimPrefix(dev.Endpoints()[1], "https://")} // no scheme: https
		return cfg
	}

	// A node of another CA cannot even reach the API to ask.
	other, err := tlsutil.NewCA("other", 0)
	if err != nil {
		t.Fatal(err)
	}
	otherKey, _ := other.KeyPEM()
	otherCA := filepath.Join(dir, "other-ca.pem")
	if err := tlsutil.WriteFiles(otherCA, other.CertPEM(), filepath.Join(dir, "other-ca-key.pem"), otherKey, false); err != nil {
		t.Fatal(err)
	}
	rc, rk := write(other, "rogue")
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	if a, err := agent.Start(ctx, newcomer("rogue", rc, rk, otherCA), nil, agent.Listeners{}); err == nil {
		a.Kill()
		t.Fatal("a node of another CA joined")
	}
	cancel()

	c, k := write(ca, "n4")
	ctx, cancel = context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cfg := newcomer("n4", c, k, files.CAFile)
	cfg.LeaveOnShutdown = true
	n4, err := agent.Start(ctx, cfg, nil, agent.Listeners{})
	if err != nil {
		t.Fatalf("join over HTTPS: %v", err)
	}
	defer n4.Kill()
	hc := httpsClient(tlsConfig(t, files, true))
	member := func() (m api.Member, present bool) {
		// present is true while unknown, so that waiting for n4 to be gone asks again.
		resp, err := hc.Get(dev.Endpoints()[0] + "/v1/cluster")
		if err != nil {
			return api.Member{}, true
		}
		defer resp.Body.Close()
		var cl api.Cluster
		if json.NewDecoder(resp.Body).Decode(&cl) != nil || cl.Leader == "" {
			return api.Member{}, true
		}
		for _, m := range cl.Members {
			if m.ID == "n4" {
				return m, true
			}
		}
		return api.Member{}, false
	}
	testkit.Eventually(t, 15*time.Second, "n4 to be a voter with its HTTP address", func() bool {
		m, _ := member()
		return m.Suffrage == "voter" && m.HTTPAddr == n4.HTTPAddr()
	})
	var s api.Session
	post(t, hc, n4.Endpoint()+"/v1/sessions", api.CreateSessionRequest{TTL: "30s"}, &s)

	// Leaving asks the leader over HTTPS too.
	if err := n4.Shutdown(ctx); err != nil {
		t.Fatalf("shutdown with leave: %v", err)
	}
	testkit.Eventually(t, 15*time.Second, "n4 to leave the configuration", func() bool {
		_, present := member()
		return !present
	})
}

func TestStartRefusesUnreadableTLSFiles(t *testing.T) {
	dir := t.TempDir()
	missing := filepath.Join(dir, "missing.pem")
	cfg := config.Default()
	cfg.DataDir = filepath.Join(dir, "data")
	cfg.HTTPAddr, cfg.RaftAddr = "127.0.0.1:0", "127.0.0.1:0"
	cfg.TLSCertFile, cfg.TLSKeyFile, cfg.TLSCAFile = missing, missing, missing
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if a, err := agent.Start(ctx, cfg, nil, agent.Listeners{}); err == nil {
		a.Kill()
		t.Fatal("Start with missing TLS files succeeded")
	} else if !strings.Contains(err.Error(), "missing.pem") {
		t.Fatalf("the error does not name the file: %v", err)
	}
}

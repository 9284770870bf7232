package tlsutil_test

import (
	"bufio"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/raftlock/raftlock/tlsutil"
)

// pki is a CA with files in a directory, issuing certificates there.
type pki struct {
	t   *testing.T
	dir string
	ca  *tlsutil.CA
}

func newPKI(t *testing.T, name string) *pki {
	t.Helper()
	ca, err := tlsutil.NewCA(name, 0)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	key, err := ca.KeyPEM()
	if err != nil {
		t.Fatal(err)
	}
	if err := tlsutil.WriteFiles(filepath.Join(dir, "ca.pem"), ca.CertPEM(), filepath.Join(dir, "ca-key.pem"), key, false); err != nil {
		t.Fatal(err)
	}
	return &pki{t: t, dir: dir, ca: ca}
}

func (p *pki) caFile() string { return filepath.Join(p.dir, "ca.pem") }

// issue writes name.pem and name-key.pem and returns their paths.
func (p *pki) issue(name string, client bool) (certFile, keyFile string) {
	p.t.Helper()
	c, k, err := p.ca.Issue(tlsutil.CertRequest{Name: name, IPs: []net.IP{net.IPv4(127, 0, 0, 1)}, DNSNames: []string{"localhost"}, Client: client})
	if err != nil {
		p.t.Fatal(err)
	}
	certFile, keyFile = filepath.Join(p.dir, name+".pem"), filepath.Join(p.dir, name+"-key.pem")
	if err := tlsutil.WriteFiles(certFile, c, keyFile, k, true); err != nil {
		p.t.Fatal(err)
	}
	return certFile, keyFile
}

func (p *pki) store(name string) *tlsutil.Store {
	p.t.Helper()
	cert, key := p.issue(name, false)
	s, err := tlsutil.New(tlsutil.Files{CertFile: cert, KeyFile: key, CAFile: p.caFile()}, 0, nil)
	if err != nil {
		p.t.Fatal(err)
	}
	return s
}

// serve accepts TLS connections on a Listener with cfg and answers "ok\n" on each; it returns
// the address and a channel of refusals.
func serve(t *testing.T, cfg *tls.Config) (string, <-chan error) {
	t.Helper()
	inner, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	refused := make(chan error, 16)
	ln := tlsutil.NewListener(inner, cfg, tlsutil.ListenerOptions{OnRefused: func(_ net.Addr, err error) { refused <- err }})
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			if _, ok := c.(*tls.Conn); !ok {
				t.Errorf("Accept returned a %T", c)
			}
			_, _ = c.Write([]byte("ok\n"))
			c.Close()
		}
	}()
	return inner.Addr().String(), refused
}

// dial connects with cfg and reads the server's line; it returns the handshake's error or
// what the server wrote.
func dial(addr string, cfg *tls.Config) (string, error) {
	c, err := tls.DialWithDialer(&net.Dialer{Timeout: 5 * time.Second}, "tcp", addr, cfg)
	if err != nil {
		return "", err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	line, err := bufio.NewReader(c).ReadString('\n')
	return line, err
}

func TestPeersAcceptNodeCertificatesOfTheirCA(t *testing.T) {
	p := newPKI(t, "cluster")
	a, b := p.store("n1"), p.store("n2")
	addr, _ := serve(t, a.PeerServerConfig())
	if got, err := dial(addr, b.PeerClientConfig()); err != nil || got != "ok\n" {
		t.Fatalf("node to node: %q, %v", got, err)
	}
	if a.MinVersion() != tls.VersionTLS12 {
		t.Fatalf("default minimum version %#x", a.MinVersion())
	}
}

func TestPeerServerRefusesStrangers(t *testing.T) {
	p := newPKI(t, "cluster")
	other := newPKI(t, "other")
	node := p.store("n1")
	addr, refused := serve(t, node.PeerServerConfig())

	pair := func(p *pki, name string, client bool) tls.Certificate {
		cert, key := p.issue(name, client)
		kp, err := tls.LoadX509KeyPair(cert, key)
		if err != nil {
			t.Fatal(err)
		}
		return kp
	}
	// The strangers skip their own check of the server, so that the server's check decides.
	cases := []struct {
		name  string
		certs []tls.Certificate
		want  error
	}{
		{"no certificate", nil, nil},
		{"a node certificate of another CA", []tls.Certificate{pair(other, "n9", false)}, tlsutil.ErrUntrusted},
		{"a client-only certificate of the CA", []tls.Certificate{pair(p, "app", true)}, tlsutil.ErrUntrusted},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			cfg := &tls.Config{InsecureSkipVerify: true, Certificates: tc.certs}
			if got, err := dial(addr, cfg); err == nil {
				t.Fatalf("connected and read %q", got)
			}
			select {
			case err := <-refused:
				if tc.want != nil && !errors.Is(err, tc.want) {
					t.Fatalf("refused with %v, want %v", err, tc.want)
				}
			case <-time.After(10 * time.Second):
				t.Fatal("the server never reported a refusal")
			}
		})
	}
}

func TestPeerClientRefusesAServerOfAnotherCA(t *testing.T) {
	p := newPKI(t, "cluster")
	other := newPKI(t, "other")
	addr, _ := serve(t, other.store("rogue").PeerServerConfig())
	_, err := dial(addr, p.store("n1").PeerClientConfig())
	if !errors.Is(err, tlsutil.ErrUntrusted) {
		t.Fatalf("dialling a server of another CA: %v, want ErrUntrusted", err)
	}
}

func TestAPIServerVerifiesClientsOnlyWhenAsked(t *testing.T) {
	p := newPKI(t, "cluster")
	node := p.store("n1")
	pool, err := tlsutil.LoadCAPool(p.caFile())
	if err != nil {
		t.Fatal(err)
	}
	anonymous := &tls.Config{RootCAs: pool, ServerName: "localhost"}

	open, _ := serve(t, node.APIServerConfig(false))
	if got, err := dial(open, anonymous); err != nil || got != "ok\n" {
		t.Fatalf("API without client verification, anonymous client: %q, %v", got, err)
	}

	strict, refused := serve(t, node.APIServerConfig(true))
	if got, err := dial(strict, anonymous); err == nil {
		t.Fatalf("API with client verification answered a client without a certificate: %q", got)
	}
	if err := <-refused; err == nil {
		t.Fatal("no refusal reported")
	}
	cert, key := p.issue("app", true)
	pair, err := tls.LoadX509KeyPair(cert, key)
	if err != nil {
		t.Fatal(err)
	}
	withCert := &tls.Config{RootCAs: pool, ServerName: "localhost", Certificates: []tls.Certificate{pair}}
	if got, err := dial(strict, withCert); err != nil || got != "ok\n" {
		t.Fatalf("API with client verification, client certificate of the CA: %q, %v", got, err)
	}
	// A client that checks host names as usual accepts the node certificate for 127.0.0.1.
	withCert.ServerName = ""
	if got, err := dial(strict, withCert); err != nil || got != "ok\n" {
		t.Fatalf("dialling by IP: %q, %v", got, err)
	}
}

func TestListenerDropsPlainTextUnanswered(t *testing.T) {
	p := newPKI(t, "cluster")
	addr, refused := serve(t, p.store("n1").APIServerConfig(false))
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := io.WriteString(c, "GET /v1/health HTTP/1.1\r\nHost: x\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
	got, err := io.ReadAll(c)
	if len(got) != 0 {
		t.Fatalf("a plain-text request got %q", got)
	}
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		t.Fatal("the connection was left open instead of closed")
	}
	if err := <-refused; err == nil {
		t.Fatal("no refusal reported")
	}
}

func TestReloadUsesNewFilesForNewConnections(t *testing.T) {
	p := newPKI(t, "cluster")
	certFile, keyFile := p.issue("n1", false)
	s, err := tlsutil.New(tlsutil.Files{CertFile: certFile, KeyFile: keyFile, CAFile: p.caFile()}, tls.VersionTLS13, nil)
	if err != nil {
		t.Fatal(err)
	}
	addr, _ := serve(t, s.APIServerConfig(false))
	serial := func() string {
		pool, _ := tlsutil.LoadCAPool(p.caFile())
		c, err := tls.Dial("tcp", addr, &tls.Config{RootCAs: pool, ServerName: "localhost"})
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		if v := c.ConnectionState().Version; v != tls.VersionTLS13 {
			t.Fatalf("negotiated %#x with minimum 1.3", v)
		}
		return c.ConnectionState().PeerCertificates[0].SerialNumber.String()
	}
	before := serial()
	p.issue("n1", false) // replaces the files
	if got := serial(); got != before {
		t.Fatal("a new certificate was used before Reload")
	}
	if err := s.Reload(); err != nil {
		t.Fatal(err)
	}
	after := serial()
	if after == before {
		t.Fatal("Reload did not take the new certificate")
	}

	// A broken key keeps the loaded pair.
	if err := os.WriteFile(keyFile, []byte("not a key"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := s.Reload(); err == nil {
		t.Fatal("Reload of a broken key reported no error")
	}
	if got := serial(); got != after {
		t.Fatal("a failed Reload changed the certificate in use")
	}
}

func TestReloadTakesANewCABundle(t *testing.T) {
	p := newPKI(t, "cluster")
	next := newPKI(t, "next")
	server := p.store("n1")
	addr, _ := serve(t, server.PeerServerConfig())
	newcomer := next.store("n2")
	if _, err := dial(addr, newcomer.PeerClientConfig()); err == nil {
		t.Fatal("a node of the next CA was accepted before the bundle named it")
	}
	// Rotation: the bundle holds both CAs; the server re-reads it.
	both := append(p.ca.CertPEM(), next.ca.CertPEM()...)
	if err := os.WriteFile(p.caFile(), both, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := server.Reload(); err != nil {
		t.Fatal(err)
	}
	// newcomer still trusts only its own CA, and n1's certificate is of the old one.
	if _, err := dial(addr, newcomer.PeerClientConfig()); !errors.Is(err, tlsutil.ErrUntrusted) {
		t.Fatalf("newcomer dialling a server of a CA it does not trust: %v", err)
	}
	trustingBoth := next.store("n3")
	if err := os.WriteFile(next.caFile(), both, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := trustingBoth.Reload(); err != nil {
		t.Fatal(err)
	}
	if got, err := dial(addr, trustingBoth.PeerClientConfig()); err != nil || got != "ok\n" {
		t.Fatalf("after both sides reloaded the bundle: %q, %v", got, err)
	}
}

func TestCARoundTripsThroughFiles(t *testing.T) {
	p := newPKI(t, "cluster")
	ca, err := tlsutil.LoadCA(p.caFile(), filepath.Join(p.dir, "ca-key.pem"))
	if err != nil {
		t.Fatal(err)
	}
	c, _, err := ca.Issue(tlsutil.CertRequest{Name: "n1", DNSNames: []string{"localhost"}})
	if err != nil {
		t.Fatal(err)
	}
	pool, _ := tlsutil.LoadCAPool(p.caFile())
	block, _ := pemDecode(c)
	cert, err := x509.ParseCertificate(block)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cert.Verify(x509.VerifyOptions{Roots: pool, DNSName: "localhost"}); err != nil {
		t.Fatalf("a certificate issued by the reloaded CA does not verify: %v", err)
	}
	if _, err := tlsutil.LoadCA(p.caFile(), filepath.Join(p.dir, "missing.pem")); err == nil {
		t.Fatal("LoadCA without its key succeeded")
	}
	if err := tlsutil.WriteFiles(p.caFile(), c, filepath.Join(p.dir, "x-key.pem"), c, false); err == nil {
		t.Fatal("WriteFiles replaced an existing file without overwrite")
	}
}

func TestParseMinVersion(t *testing.T) {
	for in, want := range map[string]uint16{"": tls.VersionTLS12, "1.2": tls.VersionTLS12, "1.3": tls.VersionTLS13} {
		if got, err := tlsutil.ParseMinVersion(in); err != nil || got != want {
			t.Errorf("ParseMinVersion(%q) = %#x, %v", in, got, err)
		}
	}
	for _, in := range []string{"1.1", "1.0", "tls1.3", "2"} {
		if _, err := tlsutil.ParseMinVersion(in); err == nil {
			t.Errorf("ParseMinVersion(%q) accepted", in)
		}
	}
}

// IsNode accepts only node certificates (server and client authentication) of the store's CA.
func TestIsNodeTellsNodeCertificatesOfTheCA(t *testing.T) {
	p := newPKI(t, "cluster")
	s := p.store("n1")
	state := func(certFile string) *tls.ConnectionState {
		t.Helper()
		pair, err := tls.LoadX509KeyPair(certFile, strings.TrimSuffix(certFile, ".pem")+"-key.pem")
		if err != nil {
			t.Fatal(err)
		}
		leaf, err := x509.ParseCertificate(pair.Certificate[0])
		if err != nil {
			t.Fatal(err)
		}
		return &tls.ConnectionState{PeerCertificates: []*x509.Certificate{leaf}}
	}
	node, _ := p.issue("n2", false)
	app, _ := p.issue("app", true)
	stranger, _ := newPKI(t, "other").issue("n2", false)
	for _, c := range []struct {
		name string
		cs   *tls.ConnectionState
		want bool
	}{
		{"node certificate of the CA", state(node), true},
		{"client certificate of the CA", state(app), false},
		{"node certificate of another CA", state(stranger), false},
		{"no certificate", &tls.ConnectionState{}, false},
		{"no TLS", nil, false},
	} {
		if got := s.IsNode(c.cs); got != c.want {
			t.Errorf("%s: IsNode = %v, want %v", c.name, got, c.want)
		}
	}
}

package tlsutil_test

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/asn1"
	"errors"
	"math/big"
	"net"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/raftlock/raftlock/tlsutil"
)

// custom issues a certificate of the CA with the given extended key usages (and unknown ones)
// and common name, bypassing CA.Issue, as another tool or a shared CA would.
func (p *pki) custom(name string, usages []x509.ExtKeyUsage, unknown []asn1OID) tls.Certificate {
	p.t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		p.t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:       big.NewInt(time.Now().UnixNano()),
		Subject:            pkix.Name{CommonName: name},
		NotBefore:          time.Now().Add(-time.Minute),
		NotAfter:           time.Now().Add(time.Hour),
		KeyUsage:           x509.KeyUsageDigitalSignature,
		ExtKeyUsage:        usages,
		UnknownExtKeyUsage: unknown,
		IPAddresses:        []net.IP{net.IPv4(127, 0, 0, 1)},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, p.ca.Cert, &key.PublicKey, p.ca.Key)
	if err != nil {
		p.t.Fatal(err)
	}
	leaf, err := x509.ParseCertificate(der)
	if err != nil {
		p.t.Fatal(err)
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key, Leaf: leaf}
}

type asn1OID = asn1.ObjectIdentifier

// A certificate of the cluster's CA is a node's only if its extended key usages are exactly
// server and client authentication: crypto/x509 takes none, or "any", as every usage, and such
// a certificate must not pass as a node on the Raft port, when dialling a node, or for the
// forwarded mark (IsNode).
func TestNodeCertificateNeedsExactlyServerAndClientAuth(t *testing.T) {
	p := newPKI(t, "cluster")
	node := p.store("n1")
	addr, refused := serve(t, node.PeerServerConfig())
	server, client, any := x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth, x509.ExtKeyUsageAny
	cases := []struct {
		name    string
		usages  []x509.ExtKeyUsage
		unknown []asn1OID
		want    bool
	}{
		{"server and client", []x509.ExtKeyUsage{server, client}, nil, true},
		{"client and server", []x509.ExtKeyUsage{client, server}, nil, true},
		{"no extended key usage", nil, nil, false},
		{"any", []x509.ExtKeyUsage{any}, nil, false},
		{"any, server and client", []x509.ExtKeyUsage{any, server, client}, nil, false},
		{"server, client and code signing", []x509.ExtKeyUsage{server, client, x509.ExtKeyUsageCodeSigning}, nil, false},
		{"server, client and an unknown usage", []x509.ExtKeyUsage{server, client}, []asn1OID{{1, 2, 3, 4}}, false},
		{"server only", []x509.ExtKeyUsage{server}, nil, false},
		{"client only", []x509.ExtKeyUsage{client}, nil, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			cert := p.custom("n9", tc.usages, tc.unknown)
			cs := &tls.ConnectionState{PeerCertificates: []*x509.Certificate{cert.Leaf}}
			if got := node.IsNode(cs); got != tc.want {
				t.Errorf("IsNode = %v, want %v", got, tc.want)
			}
			// On the Raft port (PeerServerConfig), the stranger skips its own check of the server.
			got, err := dial(addr, &tls.Config{InsecureSkipVerify: true, Certificates: []tls.Certificate{cert}})
			if tc.want != (err == nil && got == "ok\n") {
				t.Errorf("handshake with the node's peer port: %q, %v; want accepted=%v", got, err, tc.want)
			}
			if !tc.want {
				select {
				case err := <-refused:
					if !errors.Is(err, tlsutil.ErrUntrusted) {
						t.Errorf("refused with %v, want ErrUntrusted", err)
					}
				case <-time.After(10 * time.Second):
					t.Fatal("the server never reported a refusal")
				}
			}
			// And as a server that a node dials (PeerClientConfig).
			srv := &tls.Config{Certificates: []tls.Certificate{cert}, ClientAuth: tls.RequireAnyClientCert}
			saddr, _ := serve(t, srv)
			if got, err := dial(saddr, node.PeerClientConfig()); tc.want != (err == nil && got == "ok\n") {
				t.Errorf("a node dialling it: %q, %v; want accepted=%v", got, err, tc.want)
			}
		})
	}
}

// `raftlock tls cert create` (CA.Issue) writes node certificates with exactly server and
// client authentication, and client certificates with client authentication only.
func TestIssuedCertificatesHaveTheirUsages(t *testing.T) {
	p := newPKI(t, "cluster")
	for _, c := range []struct {
		client bool
		want   []x509.ExtKeyUsage
	}{
		{false, []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth}},
		{true, []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}},
	} {
		certPEM, _, err := p.ca.Issue(tlsutil.CertRequest{Name: "x", Client: c.client})
		if err != nil {
			t.Fatal(err)
		}
		der, _ := pemDecode(certPEM)
		cert, err := x509.ParseCertificate(der)
		if err != nil {
			t.Fatal(err)
		}
		if len(cert.ExtKeyUsage) != len(c.want) || len(cert.UnknownExtKeyUsage) != 0 {
			t.Fatalf("client=%v: extended key usages %v (unknown %v), want %v", c.client, cert.ExtKeyUsage, cert.UnknownExtKeyUsage, c.want)
		}
		for i := range c.want {
			if cert.ExtKeyUsage[i] != c.want[i] {
				t.Fatalf("client=%v: extended key usages %v, want %v", c.client, cert.ExtKeyUsage, c.want)
			}
		}
	}
}

// lockedBuffer is a log sink the listener's goroutines may write to while the test reads.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// A refused handshake is logged with a bounded, printable part of the peer's identity, and
// the lines are rate-limited: a peer whose certificate has a 60 KB common name cannot fill the
// log by connecting again and again.
func TestRefusalLogIsBoundedAndRateLimited(t *testing.T) {
	p := newPKI(t, "cluster")
	node := p.store("n1")
	var out lockedBuffer
	log := tlsutil.NewRefusalLog(hclog.New(&hclog.LoggerOptions{Output: &out, Level: hclog.Info}), hclog.Warn, "refused")
	inner, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	count := 0
	ln := tlsutil.NewListener(inner, node.PeerServerConfig(), tlsutil.ListenerOptions{OnRefused: func(a net.Addr, err error) {
		mu.Lock()
		count++
		mu.Unlock()
		log.Log(a, err)
	}})
	t.Cleanup(func() { ln.Close() })

	long := strings.Repeat("\x1bN", 30<<10) // 60 KB, with terminal escapes
	certs := []tls.Certificate{
		p.custom(long, []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}, nil),                                              // of the CA, not a node's
		newPKI(t, "other").custom(long, []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth}, nil), // another CA
	}
	const tries = 100
	for i := range tries {
		_, _ = dial(inner.Addr().String(), &tls.Config{InsecureSkipVerify: true, Certificates: []tls.Certificate{certs[i%2]}})
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		mu.Lock()
		n := count
		mu.Unlock()
		if n == tries {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d refusals reported", n, tries)
		}
		time.Sleep(10 * time.Millisecond)
	}
	text := out.String()
	lines := strings.Count(text, "\n")
	// A burst of 5, then one a second: the dials above took a few seconds at most.
	if lines < 1 || lines > tlsutil.RefusalBurst+10 {
		t.Fatalf("%d refusals logged %d lines, want at least 1 and at most %d", tries, lines, tlsutil.RefusalBurst+10)
	}
	if len(text) > lines*(tlsutil.MaxLoggedError+300) {
		t.Fatalf("%d lines hold %d bytes: a line holds more than the bounded error", lines, len(text))
	}
	if strings.Contains(text, "\x1b") {
		t.Fatal("the log holds a terminal escape from the peer's certificate")
	}
}

// A Listener bounds the handshakes in progress, in all and from one address: a connection over
// either bound is closed at once, before its handshake, and reported; connections whose
// handshake is done do not count, and once the silent ones go, handshakes pass again.
func TestListenerBoundsHandshakesInProgress(t *testing.T) {
	p := newPKI(t, "cluster")
	node := p.store("n1")
	for _, opts := range []tlsutil.ListenerOptions{{MaxHandshakes: 4}, {MaxHandshakesPerHost: 4}} {
		inner, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		refused := make(chan error, 64)
		opts.OnRefused = func(_ net.Addr, err error) { refused <- err }
		ln := tlsutil.NewListener(inner, node.PeerServerConfig(), opts)
		go func() {
			for {
				c, err := ln.Accept()
				if err != nil {
					return
				}
				_, _ = c.Write([]byte("ok\n"))
				c.Close()
			}
		}()
		addr := inner.Addr().String()
		// A node that has finished its handshake does not count.
		if got, err := dial(addr, p.store("n2").PeerClientConfig()); err != nil || got != "ok\n" {
			t.Fatalf("%+v: a node's handshake: %q, %v", opts, got, err)
		}
		var silent []net.Conn
		for range 4 {
			c, err := net.Dial("tcp", addr)
			if err != nil {
				t.Fatal(err)
			}
			silent = append(silent, c)
		}
		over, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		_ = over.SetReadDeadline(time.Now().Add(5 * time.Second))
		if _, err := over.Read(make([]byte, 1)); err == nil || errors.Is(err, os.ErrDeadlineExceeded) {
			t.Fatalf("%+v: a fifth silent connection was not closed at once: %v", opts, err)
		}
		select {
		case err := <-refused:
			if !errors.Is(err, tlsutil.ErrTooManyHandshakes) {
				t.Fatalf("%+v: refused with %v", opts, err)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("%+v: no refusal reported", opts)
		}
		for _, c := range silent {
			c.Close()
		}
		eventuallyOK := time.Now().Add(5 * time.Second)
		for {
			got, err := dial(addr, p.store("n3").PeerClientConfig())
			if err == nil && got == "ok\n" {
				break
			}
			if time.Now().After(eventuallyOK) {
				t.Fatalf("%+v: after the silent connections closed: %q, %v", opts, got, err)
			}
			time.Sleep(20 * time.Millisecond)
		}
		ln.Close()
	}
}

package agent_test

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"math/big"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/raftlock/raftlock/agent"
	"github.com/raftlock/raftlock/tlsutil"
)

// syncLog is a node log the test reads while the nodes write to it.
type syncLog struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *syncLog) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *syncLog) Len() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Len()
}

func (l *syncLog) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// devCertificate issues a certificate of the dev cluster's CA with the common name and
// extended key usages given, as a shared CA or another tool might.
func devCertificate(t *testing.T, files agent.DevTLSFiles, name string, usages []x509.ExtKeyUsage) tls.Certificate {
	t.Helper()
	ca, err := tlsutil.LoadCA(files.CAFile, files.CAKeyFile)
	if err != nil {
		t.Fatal(err)
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(time.Now().UnixNano()),
		Subject:      pkix.Name{CommonName: name},
		NotBefore:    time.Now().Add(-time.Minute),
		NotAfter:     time.Now().Add(time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  usages,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.Cert, &key.PublicKey, ca.Key)
	if err != nil {
		t.Fatal(err)
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}
}

// Refused Raft handshakes from a certificate of the cluster's CA with a 60 KB common name,
// over and over, keep the node log small (a bounded part of the name, rate-limited lines);
// every one is still counted. A certificate of the CA without extended key usages, which
// crypto/x509 takes as allowing every usage, is refused on the Raft port like a client's.
func TestRefusedRaftHandshakesKeepTheLogSmall(t *testing.T) {
	var out syncLog
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	dev, err := agent.StartDev(ctx, agent.DevOptions{TLS: true,
		Logger: hclog.New(&hclog.LoggerOptions{Output: &out, Level: hclog.Info})})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { dev.Close() })
	files, _ := dev.TLSFiles()
	st, err := dev.Agent(0).Node().Status()
	if err != nil {
		t.Fatal(err)
	}
	raftAddr := ""
	for _, m := range st.Members {
		if m.ID == dev.Agent(0).Node().ID() {
			raftAddr = m.RaftAddr
		}
	}
	long := strings.Repeat("N", 60<<10)
	client := devCertificate(t, files, long, []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth})
	noUsage := devCertificate(t, files, "no-usage", nil)

	// accepted says whether the Raft port kept a connection with the certificate open. With
	// TLS 1.3 the client's handshake ends before the server has checked its certificate: a
	// refusal shows as the connection closed on the first read, an acceptance as Raft waiting
	// for a request (the read times out).
	accepted := func(cert tls.Certificate, wait time.Duration) bool {
		c, err := tls.DialWithDialer(&net.Dialer{Timeout: 5 * time.Second}, "tcp", raftAddr,
			&tls.Config{InsecureSkipVerify: true, Certificates: []tls.Certificate{cert}})
		if err != nil {
			return false
		}
		defer c.Close()
		_ = c.SetReadDeadline(time.Now().Add(wait))
		_, err = c.Read(make([]byte, 1))
		var ne net.Error
		return errors.As(err, &ne) && ne.Timeout()
	}
	if accepted(noUsage, 2*time.Second) {
		t.Fatal("a certificate of the CA without extended key usages was accepted on the Raft port")
	}
	handshake := func(cert tls.Certificate) { accepted(cert, 5*time.Second) }
	before := out.Len()
	refusedBefore := dev.Agent(0).Node().Counters().RaftTLSRefused
	const tries = 300
	start := time.Now()
	for range tries {
		handshake(client)
	}
	deadline := time.Now().Add(20 * time.Second)
	for dev.Agent(0).Node().Counters().RaftTLSRefused < refusedBefore+tries {
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d refusals counted", dev.Agent(0).Node().Counters().RaftTLSRefused-refusedBefore, tries)
		}
		time.Sleep(10 * time.Millisecond)
	}
	elapsed := time.Since(start)
	// What the node promises (tlsutil.RefusalLog), whatever the machine's speed: a burst of
	// RefusalBurst lines, then one per RefusalEvery, each with at most MaxLoggedError bytes of
	// the error. The other lines of the three nodes (elections on a loaded machine) are not
	// the refusals' doing.
	var lines []string
	for _, line := range strings.Split(out.String()[before:], "\n") {
		if strings.Contains(line, "refused a Raft connection") {
			lines = append(lines, line)
		}
	}
	allowed := tlsutil.RefusalBurst + int(elapsed/tlsutil.RefusalEvery) + 1
	if len(lines) > allowed {
		t.Fatalf("%d refused handshakes in %v logged %d lines, more than the %d the rate limit allows", tries, elapsed, len(lines), allowed)
	}
	if len(lines) == 0 {
		t.Fatal("no refusal was logged")
	}
	for _, line := range lines {
		// The error's bytes, the remote address, the count of refusals not logged, hclog's own.
		if len(line) > tlsutil.MaxLoggedError+512 {
			t.Fatalf("a refusal's line has %d bytes: %.300s...", len(line), line)
		}
	}
	t.Logf("%d refused handshakes in %v: %d lines logged, the node log grew by %d bytes", tries, elapsed.Round(time.Millisecond), len(lines), out.Len()-before)
	if strings.Contains(out.String(), strings.Repeat("N", 1024)) {
		t.Fatal("the node log holds a kilobyte of a peer's common name")
	}
}

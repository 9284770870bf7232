//go:build unix

package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/raftlock/raftlock/client"
	"github.com/raftlock/raftlock/internal/testkit"
)

// runTLSCLI runs the binary with extra environment variables, without the shared cluster's
// endpoints.
func runTLSCLI(t *testing.T, env []string, args ...string) cliResult {
	t.Helper()
	cmd := exec.Command(cliEnv.bin, args...)
	cmd.Env = append(os.Environ(), env...)
	var stdout, stderr syncBuffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	return finish(t, cmd, &stdout, &stderr, 30*time.Second)
}

// mustRunTLS runs the binary and fails the test unless it exits 0.
func mustRunTLS(t *testing.T, env []string, args ...string) cliResult {
	t.Helper()
	r := runTLSCLI(t, env, args...)
	if r.code != 0 {
		t.Fatalf("raftlock %s: exit %d\n%s%s", strings.Join(args, " "), r.code, r.stdout, r.stderr)
	}
	return r
}

// freePorts returns n ports free on 127.0.0.1 right now.
func freePorts(t *testing.T, n int) []int {
	t.Helper()
	var lns []net.Listener
	var ports []int
	for range n {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		lns = append(lns, ln)
		ports = append(ports, ln.Addr().(*net.TCPAddr).Port)
	}
	for _, ln := range lns {
		ln.Close()
	}
	return ports
}

// servedSerial returns the serial of the certificate the API at addr serves to a new connection.
func servedSerial(t *testing.T, addr string, pool *x509.CertPool) string {
	t.Helper()
	c, err := tls.DialWithDialer(&net.Dialer{Timeout: 5 * time.Second}, "tcp", addr, &tls.Config{RootCAs: pool})
	if err != nil {
		return "unreachable: " + err.Error()
	}
	defer c.Close()
	return c.ConnectionState().PeerCertificates[0].SerialNumber.String()
}

// TestTLSCommandsMakeCertificatesAClusterAccepts makes a CA and certificates with the tls
// commands, runs three agent processes on them with client verification, uses the CLI through
// them, and rotates one node's certificate with SIGHUP.
func TestTLSCommandsMakeCertificatesAClusterAccepts(t *testing.T) {
	dir := t.TempDir()
	mustRunTLS(t, nil, "tls", "ca", "create", "--dir", dir)
	for _, id := range []string{"n1", "n2", "n3"} {
		mustRunTLS(t, nil, "tls", "cert", "create", "--dir", dir, "--node", id, "--ip", "127.0.0.1", "--dns", "localhost")
	}
	mustRunTLS(t, nil, "tls", "cert", "create", "--dir", dir, "--client")
	if r := runTLSCLI(t, nil, "tls", "cert", "create", "--dir", dir, "--client"); r.code == 0 || !strings.Contains(r.stderr, "--force") {
		t.Fatalf("creating an existing certificate again: exit %d, %s", r.code, r.stderr)
	}
	for _, f := range []string{"ca-key.pem", "n1-key.pem", "client-key.pem"} {
		if fi, err := os.Stat(filepath.Join(dir, f)); err != nil || fi.Mode().Perm() != 0o600 {
			t.Fatalf("%s: %v, mode %v", f, err, fi.Mode())
		}
	}

	ports := freePorts(t, 6)
	var initial, endpoints []string
	for i := range 3 {
		initial = append(initial, fmt.Sprintf("n%d=127.0.0.1:%d", i+1, ports[3+i]))
		endpoints = append(endpoints, fmt.Sprintf("https://127.0.0.1:%d", ports[i]))
	}
	procs := make([]*exec.Cmd, 3)
	logs := make([]*syncBuffer, 3)
	for i := range 3 {
		id := fmt.Sprintf("n%d", i+1)
		cmd := exec.Command(cliEnv.bin, "agent", "--id", id, "--data-dir", filepath.Join(dir, "data", id),
			"--http-addr", fmt.Sprintf("127.0.0.1:%d", ports[i]), "--raft-addr", fmt.Sprintf("127.0.0.1:%d", ports[3+i]),
			"--initial-cluster", strings.Join(initial, ","), "--log-level", "info",
			"--tls-cert-file", filepath.Join(dir, id+".pem"), "--tls-key-file", filepath.Join(dir, id+"-key.pem"),
			"--tls-ca-file", filepath.Join(dir, "ca.pem"), "--tls-verify-clients")
		logs[i] = &syncBuffer{}
		cmd.Stdout, cmd.Stderr = logs[i], logs[i]
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		procs[i] = cmd
		t.Cleanup(func() {
			_ = cmd.Process.Signal(syscall.SIGTERM)
			done := make(chan struct{})
			go func() { _ = cmd.Wait(); close(done) }()
			select {
			case <-done:
			case <-time.After(15 * time.Second):
				_ = cmd.Process.Kill()
				<-done
			}
			if t.Failed() {
				t.Logf("%s's log:\n%s", id, logs[i])
			}
		})
	}

	env := []string{
		endpointsEnv + "=" + strings.Join(endpoints, ","),
		caFileEnv + "=" + filepath.Join(dir, "ca.pem"),
		certFileEnv + "=" + filepath.Join(dir, "client.pem"),
		keyFileEnv + "=" + filepath.Join(dir, "client-key.pem"),
	}
	pool := x509.NewCertPool()
	caPEM, err := os.ReadFile(filepath.Join(dir, "ca.pem"))
	if err != nil || !pool.AppendCertsFromPEM(caPEM) {
		t.Fatalf("reading the CA: %v", err)
	}
	pair, err := tls.LoadX509KeyPair(filepath.Join(dir, "client.pem"), filepath.Join(dir, "client-key.pem"))
	if err != nil {
		t.Fatal(err)
	}
	c, err := client.New(endpoints, client.WithTLSConfig(&tls.Config{RootCAs: pool, Certificates: []tls.Certificate{pair}}))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	var leader string
	testkit.Eventually(t, 30*time.Second, "a leader with every member published", func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		cl, err := c.Raw().Cluster(ctx)
		if err != nil || cl.Leader == "" || len(cl.Members) != 3 {
			return false
		}
		for _, m := range cl.Members {
			if m.HTTPAddr == "" {
				return false
			}
		}
		leader = cl.Leader
		return true
	})

	// The CLI through a follower, with the TLS files from the environment.
	follower := 0
	if leader == "n1" {
		follower = 1
	}
	lock := testLock(t)
	mustRunTLS(t, env, "lock", "--endpoints", endpoints[follower], lock, "--", "true")
	if r := mustRunTLS(t, env, "status"); !strings.Contains(r.stdout, "leader: "+leader) || strings.Contains(r.stdout, "unreachable") {
		t.Fatalf("status:\n%s", r.stdout)
	}
	// Flags work as the environment does, and without the client certificate the cluster
	// refuses the client.
	noCert := []string{endpointsEnv + "=" + endpoints[follower]}
	mustRunTLS(t, noCert, "locks", "--ca-file", filepath.Join(dir, "ca.pem"),
		"--cert-file", filepath.Join(dir, "client.pem"), "--key-file", filepath.Join(dir, "client-key.pem"))
	if r := runTLSCLI(t, noCert, "locks", "--ca-file", filepath.Join(dir, "ca.pem"), "--retry-timeout", "0s"); r.code != exitFailure {
		t.Fatalf("locks without a client certificate: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}

	// Rotation: a new certificate for n1, picked up on SIGHUP for new connections.
	n1 := strings.TrimPrefix(endpoints[0], "https://")
	before := servedSerial(t, n1, pool)
	mustRunTLS(t, nil, "tls", "cert", "create", "--dir", dir, "--node", "n1", "--ip", "127.0.0.1", "--force")
	if err := procs[0].Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, 15*time.Second, "n1 to serve its new certificate", func() bool {
		s := servedSerial(t, n1, pool)
		return s != before && !strings.HasPrefix(s, "unreachable")
	})
	// The node logs the reload just after it swaps the certificate, and its output reaches
	// the buffer through a pipe: wait for the line rather than read it once.
	testkit.Eventually(t, 15*time.Second, "n1 to log the reload", func() bool {
		return strings.Contains(logs[0].String(), "TLS files reloaded")
	})
	// n1 still works with the cluster after its rotation.
	mustRunTLS(t, env, "lock", "--endpoints", endpoints[0], lock, "--", "true")
}

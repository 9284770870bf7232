package main

import (
	"context"
	"net"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/raftlock/raftlock/agent"
	"github.com/raftlock/raftlock/config"
)

// runHealth runs `raftlock health` with only env added to this process's environment (no
// RAFTLOCK_ENDPOINTS unless env sets it).
func runHealth(t *testing.T, env []string, args ...string) cliResult {
	t.Helper()
	cmd := exec.Command(cliEnv.bin, append([]string{"health"}, args...)...)
	cmd.Env = append(os.Environ(), env...)
	var stdout, stderr syncBuffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	return finish(t, cmd, &stdout, &stderr, 30*time.Second)
}

// hostPort strips the scheme of an endpoint.
func hostPort(endpoint string) string {
	return endpoint[strings.Index(endpoint, "://")+3:]
}

func TestHealthAnswersForAServingReadyNode(t *testing.T) {
	addr := hostPort(cliEnv.dev.Endpoints()[0])
	for _, args := range [][]string{{"--http-addr", addr}, {"--http-addr", addr, "--ready"}} {
		r := runHealth(t, nil, args...)
		if r.code != 0 || !strings.Contains(r.stdout, "200 OK") {
			t.Fatalf("health %v: exit %d, stdout %q, stderr %q; want 0 and 200 OK", args, r.code, r.stdout, r.stderr)
		}
	}
	// The agent's own variable finds it too, and a wildcard bind is probed on 127.0.0.1.
	_, port, _ := net.SplitHostPort(addr)
	if r := runHealth(t, []string{"RAFTLOCK_HTTP_ADDR=0.0.0.0:" + port}, "--ready"); r.code != 0 {
		t.Fatalf("health --ready with RAFTLOCK_HTTP_ADDR=0.0.0.0:%s: exit %d, %s", port, r.code, r.stderr)
	}
}

// Without an agent address (flag, RAFTLOCK_HTTP_ADDR, config file), health asks the first
// endpoint of RAFTLOCK_ENDPOINTS or --endpoints, as every other command reads them; an agent
// address still comes first.
func TestHealthFollowsTheEndpoints(t *testing.T) {
	eps := cliEnv.dev.Endpoints()
	env := []string{"RAFTLOCK_HTTP_ADDR=", endpointsEnv + "=" + eps[1] + "," + eps[2]}
	if r := runHealth(t, env, "--ready"); r.code != 0 || !strings.HasPrefix(r.stdout, eps[1]+"/v1/ready: 200 OK") {
		t.Fatalf("health --ready with %s: exit %d, stdout %q, stderr %q", env[1], r.code, r.stdout, r.stderr)
	}
	if r := runHealth(t, []string{"RAFTLOCK_HTTP_ADDR="}, "--endpoints", eps[2]); r.code != 0 || !strings.HasPrefix(r.stdout, eps[2]+"/v1/health: 200 OK") {
		t.Fatalf("health --endpoints %s: exit %d, stdout %q, stderr %q", eps[2], r.code, r.stdout, r.stderr)
	}
	if r := runHealth(t, env, "--http-addr", hostPort(eps[0])); r.code != 0 || !strings.Contains(r.stdout, hostPort(eps[0])+"/v1/health") {
		t.Fatalf("health --http-addr beside RAFTLOCK_ENDPOINTS: exit %d, stdout %q, stderr %q", r.code, r.stdout, r.stderr)
	}
}

// TestHealthReadyFailsWithoutALeader runs a node whose two peers never start: it serves
// (/v1/health 200) but can never be ready (/v1/ready 503), and the two checks must differ.
func TestHealthReadyFailsWithoutALeader(t *testing.T) {
	httpLn, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	raftLn, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	cfg := config.Default()
	cfg.ID, cfg.DataDir = "n1", t.TempDir()
	cfg.HTTPAddr, cfg.RaftAddr = httpLn.Addr().String(), raftLn.Addr().String()
	// Ports 1 and 2 on loopback refuse at once: the peers are down for good.
	cfg.InitialCluster = map[string]string{"n1": cfg.RaftAddr, "n2": "127.0.0.1:1", "n3": "127.0.0.1:2"}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	a, err := agent.Start(ctx, cfg, nil, agent.Listeners{HTTP: httpLn, Raft: raftLn})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Kill()

	if r := runHealth(t, nil, "--http-addr", cfg.HTTPAddr); r.code != 0 {
		t.Fatalf("health of a serving node: exit %d, %s", r.code, r.stderr)
	}
	r := runHealth(t, nil, "--http-addr", cfg.HTTPAddr, "--ready")
	if r.code != exitFailure || !strings.Contains(r.stderr, "503") {
		t.Fatalf("health --ready of a node without a leader: exit %d, stderr %q; want 1 and the 503", r.code, r.stderr)
	}
	// Nothing listening: not healthy either.
	a.Kill()
	if r := runHealth(t, nil, "--http-addr", cfg.HTTPAddr); r.code != exitFailure {
		t.Fatalf("health of a stopped node: exit %d; want 1", r.code)
	}
}

// TestHealthUsesTheAgentsTLSSettings probes a cluster that requires client certificates with
// only the node's own RAFTLOCK_TLS_* variables, as a container health check does.
func TestHealthUsesTheAgentsTLSSettings(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	dev, err := agent.StartDev(ctx, agent.DevOptions{TLS: true,
		Tune: func(c *config.Config) { c.TLSVerifyClients = true }})
	if err != nil {
		t.Fatal(err)
	}
	defer dev.Close()
	files, _ := dev.TLSFiles()
	cert, key := files.NodeFiles("n2")
	_, port, _ := net.SplitHostPort(hostPort(dev.Endpoints()[1]))
	env := []string{"RAFTLOCK_HTTP_ADDR=0.0.0.0:" + port, "RAFTLOCK_TLS_CA_FILE=" + files.CAFile,
		"RAFTLOCK_TLS_CERT_FILE=" + cert, "RAFTLOCK_TLS_KEY_FILE=" + key}

	if r := runHealth(t, env, "--ready"); r.code != 0 || !strings.Contains(r.stdout, "https://") {
		t.Fatalf("health --ready over TLS: exit %d, stdout %q, stderr %q", r.code, r.stdout, r.stderr)
	}
	// The advertised host is the name checked: one the certificate names passes, another fails.
	if r := runHealth(t, append(env, "RAFTLOCK_ADVERTISE_HTTP=localhost:"+port), "--ready"); r.code != 0 {
		t.Fatalf("health --ready, advertised as localhost: exit %d, %s", r.code, r.stderr)
	}
	if r := runHealth(t, append(env, "RAFTLOCK_ADVERTISE_HTTP=elsewhere.invalid:"+port), "--ready"); r.code != exitFailure ||
		!strings.Contains(r.stderr, "elsewhere.invalid") {
		t.Fatalf("health --ready, advertised under a name the certificate lacks: exit %d, stderr %q; want 1", r.code, r.stderr)
	}
	// Without the agent's certificate the probe speaks plain HTTP, which a TLS agent never answers.
	if r := runHealth(t, env[:1]); r.code != exitFailure {
		t.Fatalf("health without the TLS settings: exit %d; want 1", r.code)
	}
	// The same settings from the agent's config file.
	file := t.TempDir() + "/agent.yaml"
	yaml := "http-addr: 127.0.0.1:" + port + "\ntls-ca-file: " + files.CAFile + "\ntls-cert-file: " + cert + "\ntls-key-file: " + key + "\ndata-dir: /unused\n"
	if err := os.WriteFile(file, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	if r := runHealth(t, []string{"RAFTLOCK_CONFIG=" + file}, "--ready"); r.code != 0 {
		t.Fatalf("health --ready with RAFTLOCK_CONFIG: exit %d, %s", r.code, r.stderr)
	}
}

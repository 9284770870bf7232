//go:build unix

package main

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/raftlock/raftlock/agent"
	"github.com/raftlock/raftlock/config"
)

// bench against a cluster with TLS and ACLs: the token comes from $RAFTLOCK_TOKEN (or
// --token), and without one the run is refused; --dev --secure measures such a cluster itself.
func TestBenchSecureCluster(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	d, err := agent.StartDev(ctx, agent.DevOptions{TLS: true, ACL: true, Tune: func(c *config.Config) { c.TLSVerifyClients = true }})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	files, _ := d.TLSFiles()
	args := []string{"bench", "--endpoints", strings.Join(d.Endpoints(), ","), "--workload", "uncontended",
		"--clients", "2", "--duration", "300ms", "--warmup", "100ms"}
	env := []string{caFileEnv + "=" + files.CAFile, certFileEnv + "=" + files.ClientCertFile, keyFileEnv + "=" + files.ClientKeyFile}

	if r := runTLSCLI(t, append(env, tokenEnv+"="), args...); r.code == 0 || !strings.Contains(r.stderr, "token") {
		t.Fatalf("bench without a token: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	r := mustRunTLS(t, append(env, tokenEnv+"="+d.ManagementToken()), args...)
	if !strings.Contains(r.stdout, "TLS, ACL token") || !strings.Contains(r.stdout, "uncontended") {
		t.Fatalf("bench with $%s:\n%s", tokenEnv, r.stdout)
	}
	mustRunTLS(t, append(env, tokenEnv+"="), append(args, "--token", d.ManagementToken())...)

	r = mustRunTLS(t, []string{tokenEnv + "="}, "bench", "--dev", "--secure", "--workload", "uncontended",
		"--clients", "2", "--duration", "300ms", "--warmup", "100ms")
	if !strings.Contains(r.stdout, "TLS, ACL token") {
		t.Fatalf("bench --dev --secure:\n%s", r.stdout)
	}
}

package config_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/spf13/pflag"

	"github.com/raftlock/raftlock/config"
)

func load(t *testing.T, args ...string) (config.Config, error) {
	t.Helper()
	fs := pflag.NewFlagSet("test", pflag.ContinueOnError)
	config.AddFlags(fs)
	if err := fs.Parse(args); err != nil {
		t.Fatalf("parse %v: %v", args, err)
	}
	return config.Load(fs)
}

func TestFlagBeatsEnvironmentBeatsFile(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "raftlock.yaml")
	body := "id: from-file\ndata-dir: /file\nlog-level: debug\nelection-timeout: 2s\nheartbeat-timeout: 2s\n"
	if err := os.WriteFile(file, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("RAFTLOCK_DATA_DIR", "/env")
	t.Setenv("RAFTLOCK_LOG_LEVEL", "warn")
	c, err := load(t, "--config", file, "--log-level", "error")
	if err != nil {
		t.Fatal(err)
	}
	if c.ID != "from-file" || c.DataDir != "/env" || c.LogLevel != "error" || c.ElectionTimeout != 2*time.Second {
		t.Fatalf("got id=%q data-dir=%q log-level=%q election=%v; want from-file, /env, error, 2s",
			c.ID, c.DataDir, c.LogLevel, c.ElectionTimeout)
	}
}

func TestUnknownFileKeyIsRefused(t *testing.T) {
	file := filepath.Join(t.TempDir(), "c.toml")
	if err := os.WriteFile(file, []byte("data-dir = \"/x\"\ndata-dri = \"/typo\"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	_, err := load(t, "--config", file)
	if err == nil || !strings.Contains(err.Error(), "data-dri") {
		t.Fatalf("want an error naming the unknown key data-dri, got %v", err)
	}
}

func TestInitialClusterIsParsed(t *testing.T) {
	c, err := load(t, "--data-dir", "/d", "--id", "n2",
		"--initial-cluster", "n1=127.0.0.1:7101, n2=127.0.0.1:7102,n3=127.0.0.1:7103")
	if err != nil {
		t.Fatal(err)
	}
	if len(c.InitialCluster) != 3 || c.InitialCluster["n2"] != "127.0.0.1:7102" {
		t.Fatalf("initial cluster = %v", c.InitialCluster)
	}
}

func TestValidationNamesTheSetting(t *testing.T) {
	cases := []struct {
		args []string
		want string
	}{
		{nil, "--data-dir is required"},
		{[]string{"--data-dir", "/d", "--initial-cluster", "n2=127.0.0.1:1"}, "does not list this node"},
		{[]string{"--data-dir", "/d", "--initial-cluster", "n1"}, "is not id=host:port"},
		{[]string{"--data-dir", "/d", "--initial-cluster", "n1=a:1,n1=b:2"}, "appears twice"},
		{[]string{"--data-dir", "/d", "--log-level", "loud"}, "--log-level"},
		{[]string{"--data-dir", "/d", "--log-format", "xml"}, "--log-format"},
		{[]string{"--data-dir", "/d", "--log-store", "leveldb"}, "--log-store"},
		{[]string{"--data-dir", "/d", "--http-addr", "nonsense"}, "--http-addr"},
		{[]string{"--data-dir", "/d", "--http-addr", "0.0.0.0:7001"}, "--advertise-http"},
		{[]string{"--data-dir", "/d", "--advertise-raft", "0.0.0.0:7101"}, "wildcard"},
		{[]string{"--data-dir", "/d", "--join", "http://a:1", "--initial-cluster", "n1=a:2"}, "not both"},
		{[]string{"--data-dir", "/d", "--leader-lease-timeout", "2s"}, "--leader-lease-timeout"},
		{[]string{"--data-dir", "/d", "--max-body-bytes", "10"}, "--max-body-bytes"},
		{[]string{"--data-dir", "/d", "--tls-cert-file", "c.pem", "--tls-ca-file", "ca.pem"}, "--tls-cert-file and --tls-key-file go together"},
		{[]string{"--data-dir", "/d", "--tls-key-file", "k.pem", "--tls-ca-file", "ca.pem"}, "--tls-cert-file and --tls-key-file go together"},
		{[]string{"--data-dir", "/d", "--tls-cert-file", "c.pem", "--tls-key-file", "k.pem"}, "--tls-ca-file is required"},
		{[]string{"--data-dir", "/d", "--tls-ca-file", "ca.pem"}, "--tls-ca-file needs --tls-cert-file"},
		{[]string{"--data-dir", "/d", "--tls-verify-clients"}, "--tls-verify-clients needs"},
		{[]string{"--data-dir", "/d", "--tls-min-version", "1.1"}, "--tls-min-version"},
		{[]string{"--data-dir", "/d", "--tls-cert-file", "c.pem", "--tls-key-file", "k.pem", "--tls-ca-file", "ca.pem",
			"--join", "http://127.0.0.1:7001"}, "over HTTPS"},
		{[]string{"--data-dir", "/d", "--rate-limit", "-1"}, "--rate-limit"},
		{[]string{"--data-dir", "/d", "--max-header-bytes", "512"}, "--max-header-bytes"},
		{[]string{"--data-dir", "/d", "--max-connections", "8"}, "--max-connections"},
		{[]string{"--data-dir", "/d", "--max-connections", "-1"}, "--max-connections"},
		{[]string{"--data-dir", "/d", "--header-read-timeout", "0s"}, "--header-read-timeout"},
		{[]string{"--data-dir", "/d", "--body-read-timeout", "1h"}, "--body-read-timeout"},
		{[]string{"--data-dir", "/d", "--max-raft-handshakes", "4"}, "--max-raft-handshakes"},
	}
	for _, tc := range cases {
		_, err := load(t, tc.args...)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("args %v: want an error containing %q, got %v", tc.args, tc.want, err)
		}
	}
}

func TestTLSSettingsLoadTogether(t *testing.T) {
	c, err := load(t, "--data-dir", "/d", "--tls-cert-file", "c.pem", "--tls-key-file", "k.pem",
		"--tls-ca-file", "ca.pem", "--tls-verify-clients", "--tls-min-version", "1.3", "--join", "https://a:1,b:2")
	if err != nil {
		t.Fatal(err)
	}
	if !c.TLS() || c.TLSCertFile != "c.pem" || c.TLSKeyFile != "k.pem" || c.TLSCAFile != "ca.pem" || !c.TLSVerifyClients || c.TLSMinVersion != "1.3" {
		t.Fatalf("TLS settings: %+v", c)
	}
	if d, err := load(t, "--data-dir", "/d"); err != nil || d.TLS() || d.TLSMinVersion != "1.2" {
		t.Fatalf("defaults: TLS %v, minimum version %q, %v", d.TLS(), d.TLSMinVersion, err)
	}
}

func TestDefaultsAreValid(t *testing.T) {
	c, err := load(t, "--data-dir", "/d")
	if err != nil {
		t.Fatal(err)
	}
	if c.HTTPAddr != "127.0.0.1:7001" || c.RaftAddr != "127.0.0.1:7101" || c.AdvertisedHTTP() != "127.0.0.1:7001" {
		t.Fatalf("defaults: %+v", c)
	}
}

func TestACLSettingsComeFromFlagsAndEnvironment(t *testing.T) {
	c, err := load(t, "--data-dir", "/d")
	if err != nil || c.ACL || c.MaxSessionsPerToken != 0 || c.AgentToken != "" {
		t.Fatalf("defaults: %+v, %v", c, err)
	}
	t.Setenv("RAFTLOCK_ACL", "true")
	t.Setenv("RAFTLOCK_AGENT_TOKEN", "from-env")
	c, err = load(t, "--data-dir", "/d", "--max-sessions-per-token", "5")
	if err != nil || !c.ACL || c.MaxSessionsPerToken != 5 || c.AgentToken != "from-env" {
		t.Fatalf("from the environment and flags: acl=%v max=%d token=%q, %v", c.ACL, c.MaxSessionsPerToken, c.AgentToken, err)
	}
	if _, err := load(t, "--data-dir", "/d", "--max-sessions-per-token", "-1"); err == nil || !strings.Contains(err.Error(), "max-sessions-per-token") {
		t.Fatalf("negative --max-sessions-per-token: %v", err)
	}
	if c, err := load(t, "--data-dir", "/d"); err != nil || c.MaxWatchesPerToken != 256 || c.MaxWatchesPerAddr != 1024 {
		t.Fatalf("default watch bounds: %d per token, %d per address, %v", c.MaxWatchesPerToken, c.MaxWatchesPerAddr, err)
	}
	t.Setenv("RAFTLOCK_MAX_WATCHES_PER_ADDRESS", "7")
	if c, err := load(t, "--data-dir", "/d", "--max-watches-per-token", "3"); err != nil || c.MaxWatchesPerToken != 3 || c.MaxWatchesPerAddr != 7 {
		t.Fatalf("watch bounds from a flag and the environment: %d per token, %d per address, %v", c.MaxWatchesPerToken, c.MaxWatchesPerAddr, err)
	}
	if _, err := load(t, "--data-dir", "/d", "--max-watches-per-token", "-1"); err == nil || !strings.Contains(err.Error(), "max-watches-per-token") {
		t.Fatalf("negative --max-watches-per-token: %v", err)
	}
}

// The bounds on what an unauthenticated client can cost have defaults, and come from flags,
// the environment and the config file like every setting.
func TestEdgeLimitsLoadFromEverySource(t *testing.T) {
	c, err := load(t, "--data-dir", "/d")
	if err != nil {
		t.Fatal(err)
	}
	if c.MaxHeaderBytes != 8<<10 || c.MaxConnections != 4096 || c.HeaderReadTimeout != 10*time.Second ||
		c.BodyReadTimeout != 10*time.Second || c.MaxRaftHandshakes != 256 {
		t.Fatalf("defaults: headers %d, connections %d, header timeout %v, body timeout %v, raft handshakes %d",
			c.MaxHeaderBytes, c.MaxConnections, c.HeaderReadTimeout, c.BodyReadTimeout, c.MaxRaftHandshakes)
	}
	file := filepath.Join(t.TempDir(), "c.yaml")
	if err := os.WriteFile(file, []byte("body-read-timeout: 3s\nmax-raft-handshakes: 0\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("RAFTLOCK_MAX_CONNECTIONS", "0")
	t.Setenv("RAFTLOCK_HEADER_READ_TIMEOUT", "2s")
	c, err = load(t, "--data-dir", "/d", "--config", file, "--max-header-bytes", "4096")
	if err != nil {
		t.Fatal(err)
	}
	if c.MaxHeaderBytes != 4096 || c.MaxConnections != 0 || c.HeaderReadTimeout != 2*time.Second ||
		c.BodyReadTimeout != 3*time.Second || c.MaxRaftHandshakes != 0 {
		t.Fatalf("from flag, environment and file: headers %d, connections %d, header timeout %v, body timeout %v, raft handshakes %d",
			c.MaxHeaderBytes, c.MaxConnections, c.HeaderReadTimeout, c.BodyReadTimeout, c.MaxRaftHandshakes)
	}
}

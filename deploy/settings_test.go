package deploy

import (
	"fmt"
	"os"
	osexec "os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/spf13/pflag"

	"github.com/raftlock/raftlock/agent"
	"github.com/raftlock/raftlock/config"
)

// TestYAMLFilesParse decodes every document of every YAML file under deploy/.
func TestYAMLFilesParse(t *testing.T) {
	n := 0
	err := filepath.WalkDir(".", func(path string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() || !(strings.HasSuffix(path, ".yaml") || strings.HasSuffix(path, ".yml")) {
			return err
		}
		for _, doc := range yamlDocs(t, path) {
			n++
			if strings.HasPrefix(path, "kubernetes/") && (str(doc["apiVersion"]) == "" || str(doc["kind"]) == "") {
				t.Errorf("%s: a document without apiVersion or kind", path)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if n < 10 {
		t.Fatalf("only %d YAML documents under deploy/", n)
	}
}

// agentSettings is what one packaged agent is started with: the command's arguments, its
// RAFTLOCK_* environment, and its --config file's content if any.
type agentSettings struct {
	where  string
	args   []string
	env    map[string]string
	config string
}

// validate loads s as `raftlock agent` does (config.Load on the agent's flags, environment and
// config file) and fails the test with the agent's own error if the agent would refuse it.
func validate(t *testing.T, s agentSettings) config.Config {
	t.Helper()
	for _, kv := range os.Environ() {
		if k, _, _ := strings.Cut(kv, "="); strings.HasPrefix(k, "RAFTLOCK_") {
			t.Setenv(k, "") // viper takes an empty variable for an unset one
		}
	}
	for k, v := range s.env {
		t.Setenv(k, v)
	}
	if s.config != "" {
		file := filepath.Join(t.TempDir(), "agent.yaml")
		if err := os.WriteFile(file, []byte(s.config), 0o600); err != nil {
			t.Fatal(err)
		}
		t.Setenv("RAFTLOCK_CONFIG", file)
	}
	fs := pflag.NewFlagSet("agent", pflag.ContinueOnError)
	config.AddFlags(fs)
	args := s.args
	if len(args) > 0 && args[0] == "agent" {
		args = args[1:]
	}
	if err := fs.Parse(args); err != nil {
		t.Fatalf("%s: %v", s.where, err)
	}
	c, err := config.Load(fs)
	if err != nil {
		t.Fatalf("%s: the agent refuses these settings: %v", s.where, err)
	}
	return c
}

func merge(base, over map[string]string) map[string]string {
	out := map[string]string{}
	for k, v := range base {
		out[k] = v
	}
	for k, v := range over {
		out[k] = v
	}
	return out
}

// imageEnv is the ENV of the Dockerfile's runtime image, under every container's own.
func imageEnv(t *testing.T) map[string]string {
	t.Helper()
	df, err := parseDockerfile("docker/Dockerfile")
	if err != nil {
		t.Fatal(err)
	}
	return df.final().env()
}

// composeServices returns the services of compose.yaml.
func composeServices(t *testing.T) map[string]any {
	t.Helper()
	docs := yamlDocs(t, "compose/compose.yaml")
	s, _ := docs[0]["services"].(map[string]any)
	if len(s) == 0 {
		t.Fatal("compose.yaml: no services")
	}
	return s
}

// composeAgents returns the settings of the compose services that run `raftlock agent`.
func composeAgents(t *testing.T) map[string]agentSettings {
	t.Helper()
	out := map[string]agentSettings{}
	for name, svc := range composeServices(t) {
		args := strs(get(svc, "command"))
		if len(args) == 0 || args[0] != "agent" {
			continue
		}
		env := map[string]string{}
		for k, v := range get(svc, "environment").(map[string]any) {
			env[k] = str(v)
		}
		out[name] = agentSettings{where: "compose service " + name, args: args, env: env}
	}
	return out
}

func TestComposeFile(t *testing.T) {
	services := composeServices(t)
	agents := composeAgents(t)
	if len(agents) < 3 {
		t.Fatalf("compose.yaml runs %d agents; want at least three", len(agents))
	}
	for name, a := range agents {
		checkAgentVars(t, a.where, keys(a.env))
		checkCommand(t, a.where, append([]string{"raftlock"}, a.args...))
		if a.env["RAFTLOCK_ACL"] != "true" || a.env["RAFTLOCK_TLS_CERT_FILE"] == "" || a.env["RAFTLOCK_TLS_VERIFY_CLIENTS"] != "true" {
			t.Errorf("%s: TLS (with client certificates) and ACLs must be on", a.where)
		}
		svc := services[name]
		// A restart cannot cure some stops (agent.ExitStorageFailure, agent.ExitRefused), and
		// Compose cannot tell them apart: a bounded number of restarts, and none after exit 0.
		if r := str(get(svc, "restart")); !strings.HasPrefix(r, "on-failure:") {
			t.Errorf("%s: restart %q; want on-failure:N, so that a node that keeps stopping stays stopped", a.where, r)
		}
		if get(svc, "volumes") == nil || !strings.Contains(strings.Join(strs(get(svc, "volumes")), " "), ":"+imageEnv(t)["RAFTLOCK_DATA_DIR"]) {
			t.Errorf("%s: no volume on the data dir %s", a.where, imageEnv(t)["RAFTLOCK_DATA_DIR"])
		}
		// The config file is the one init.sh leaves until acl-bootstrap.sh fills it in.
		a.env = merge(imageEnv(t), a.env)
		delete(a.env, "RAFTLOCK_CONFIG")
		a.config = "# agent-token: written here by acl-bootstrap.sh\n"
		c := validate(t, a)
		if c.ID != name {
			t.Errorf("%s: --id %q; want the service name", a.where, c.ID)
		}
	}
	// The client-side variables of the admin service are the CLI's.
	cli := helpOf(t, "status")
	for k := range get(services["admin"], "environment").(map[string]any) {
		if !strings.Contains(cli, "$"+k) {
			t.Errorf("compose service admin: %s is not a variable `raftlock status --help` reads", k)
		}
	}
}

// unitFile reads a systemd unit into section -> key -> values (a key may repeat).
func unitFile(t *testing.T, path string) map[string]map[string][]string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]map[string][]string{}
	var sec string
	for _, line := range strings.Split(string(b), "\n") {
		line = strings.TrimSpace(line)
		switch {
		case line == "" || strings.HasPrefix(line, "#"):
		case strings.HasPrefix(line, "["):
			sec = strings.Trim(line, "[]")
			out[sec] = map[string][]string{}
		default:
			k, v, _ := strings.Cut(line, "=")
			out[sec][k] = append(out[sec][k], v)
		}
	}
	return out
}

var envRef = regexp.MustCompile(`RAFTLOCK_[A-Z0-9_]+`)

func TestSystemdUnit(t *testing.T) {
	unit := unitFile(t, "systemd/raftlock.service")
	svc := unit["Service"]
	one := func(k string) string {
		if v := svc[k]; len(v) > 0 {
			return v[len(v)-1]
		}
		return ""
	}
	want := map[string]string{"Restart": "on-failure", "KillSignal": "SIGTERM", "ProtectSystem": "strict",
		"NoNewPrivileges": "yes", "PrivateTmp": "yes", "ProtectHome": "yes", "CapabilityBoundingSet": "",
		"AmbientCapabilities": "", "EnvironmentFile": "/etc/raftlock/raftlock.env"}
	for k, v := range want {
		if _, ok := svc[k]; !ok || one(k) != v {
			t.Errorf("[Service] %s=%q; want %q", k, one(k), v)
		}
	}
	// Not restarted after a stop that a restart cannot cure.
	prevent := strings.Fields(strings.Join(svc["RestartPreventExitStatus"], " "))
	for _, code := range []int{agent.ExitStorageFailure, agent.ExitRefused} {
		if !slices.Contains(prevent, strconv.Itoa(code)) {
			t.Errorf("[Service] RestartPreventExitStatus=%v; want it to hold %d", prevent, code)
		}
	}
	env := envFile(t, "systemd/raftlock.env")
	checkAgentVars(t, "systemd/raftlock.env", keys(env))
	b, _ := os.ReadFile("systemd/raftlock.env")
	checkAgentVars(t, "systemd/raftlock.env (commented out)", envRef.FindAllString(string(b), -1))
	start := shellFields(one("ExecStart"))
	checkCommand(t, "raftlock.service ExecStart", start)
	c := validate(t, agentSettings{where: "raftlock.service with raftlock.env", args: start[1:], env: env})
	if !strings.Contains(" "+one("ReadWritePaths")+" ", " "+c.DataDir+" ") {
		t.Errorf("ReadWritePaths=%q does not hold the data dir %s", one("ReadWritePaths"), c.DataDir)
	}
	if !strings.Contains(one("ReadWritePaths"), "/var/log/raftlock") || !strings.Contains(string(b), "/var/log/raftlock/") {
		t.Errorf("the audit log's directory /var/log/raftlock must be writable and named in the env file")
	}
	stop, err := parseSystemdSeconds(one("TimeoutStopSec"))
	if err != nil || stop <= c.ShutdownTimeout.Seconds() {
		t.Errorf("TimeoutStopSec=%s must exceed the agent's --shutdown-timeout %v (%v)", one("TimeoutStopSec"), c.ShutdownTimeout, err)
	}
}

var systemdTime = regexp.MustCompile(`^([0-9]+)(s|min)?$`)

// parseSystemdSeconds reads a time span of the forms "30", "30s" and "2min".
func parseSystemdSeconds(s string) (float64, error) {
	m := systemdTime.FindStringSubmatch(s)
	if m == nil {
		return 0, fmt.Errorf("time span %q: want N, Ns or Nmin", s)
	}
	n, _ := strconv.ParseFloat(m[1], 64)
	if m[2] == "min" {
		n *= 60
	}
	return n, nil
}

// TestSystemdAnalyzeVerify runs `systemd-analyze verify` on the unit. It checks that the
// unit's executables exist, so the copy it checks runs the binary built here instead of
// /usr/local/bin/raftlock; nothing else is changed. verify exits 0 even for an unknown key or
// a bad value, only printing a warning, so any output fails the test.
func TestSystemdAnalyzeVerify(t *testing.T) {
	analyze, err := osexec.LookPath("systemd-analyze")
	if err != nil {
		t.Skip("systemd-analyze is not installed (apt-get install systemd): the unit is not verified")
	}
	b, err := os.ReadFile("systemd/raftlock.service")
	if err != nil {
		t.Fatal(err)
	}
	const path = "/usr/local/bin/raftlock "
	if !strings.Contains(string(b), "ExecStart="+path) {
		t.Fatalf("ExecStart does not run %s", path)
	}
	unit := filepath.Join(t.TempDir(), "raftlock.service")
	if err := os.WriteFile(unit, []byte(strings.ReplaceAll(string(b), path, bin+" ")), 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := osexec.Command(analyze, "verify", unit).CombinedOutput()
	if err != nil || len(strings.TrimSpace(string(out))) > 0 {
		t.Fatalf("systemd-analyze verify: %v\n%s", err, out)
	}
}

// TestShellScripts runs shellcheck on the setup scripts where it is installed.
func TestShellScripts(t *testing.T) {
	sc, err := osexec.LookPath("shellcheck")
	if err != nil {
		t.Skip("shellcheck is not installed (apt-get install shellcheck): the scripts are not linted")
	}
	scripts, _ := filepath.Glob("*/*.sh")
	if len(scripts) < 3 {
		t.Fatalf("scripts %v: want compose's two and tls-secret.sh", scripts)
	}
	if out, err := osexec.Command(sc, append([]string{"--shell=sh"}, scripts...)...).CombinedOutput(); err != nil {
		t.Fatalf("shellcheck: %v\n%s", err, out)
	}
}

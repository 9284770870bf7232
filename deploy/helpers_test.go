package deploy

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"

	"github.com/raftlock/raftlock/internal/testkit"
)

// bin is the raftlock binary, built by TestMain with the Dockerfile's own build command.
var bin string

func TestMain(m *testing.M) {
	os.Exit(run(m))
}

func run(m *testing.M) int {
	dir, err := os.MkdirTemp("", "raftlock-deploy-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	bin = filepath.Join(dir, "raftlock")
	if err := buildLikeDockerfile(bin); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return testkit.Main(m)
}

// buildLikeDockerfile runs the Dockerfile's `go build` (its flags, CGO_ENABLED=0, the host's
// platform) from the repository root, writing the binary to out.
func buildLikeDockerfile(out string) error {
	df, err := parseDockerfile("docker/Dockerfile")
	if err != nil {
		return err
	}
	line, ok := df.buildCommand()
	if !ok {
		return errors.New("docker/Dockerfile: no RUN with `go build` in the build stage")
	}
	args, env := goBuildArgs(line, map[string]string{"VERSION": "deploy-test"})
	for i, a := range args {
		if a == "-o" && i+1 < len(args) {
			args[i+1] = out
		}
	}
	cmd := exec.Command("go", args...)
	cmd.Dir = ".."
	cmd.Env = append(os.Environ(), env...)
	if b, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("go %s: %w\n%s", strings.Join(args, " "), err, b)
	}
	return nil
}

// goBuildArgs splits `VAR=x ... go build ARGS` of a RUN line into go's arguments and the
// environment, expanding ${NAME} from vars (unset TARGETOS/TARGETARCH: the host's).
func goBuildArgs(line string, vars map[string]string) (args, env []string) {
	line = os.Expand(line, func(k string) string { return vars[k] })
	fields := shellFields(line[strings.Index(line, "CGO_ENABLED"):])
	for len(fields) > 0 && strings.Contains(fields[0], "=") {
		if kv := fields[0]; !strings.HasSuffix(kv, "=") {
			env = append(env, kv)
		}
		fields = fields[1:]
	}
	if len(fields) > 0 && fields[0] == "go" {
		fields = fields[1:]
	}
	for i, f := range fields {
		if f == "&&" {
			fields = fields[:i]
			break
		}
	}
	return fields, env
}

// shellFields splits a command line into words, honouring double and single quotes (enough
// for the lines of these files; no expansion).
func shellFields(s string) []string {
	var out []string
	var cur strings.Builder
	in, quote := false, rune(0)
	for _, r := range s {
		switch {
		case quote != 0 && r == quote:
			quote = 0
		case quote != 0:
			cur.WriteRune(r)
		case r == '"' || r == '\'':
			quote, in = r, true
		case r == ' ' || r == '\t' || r == '\n':
			if in {
				out = append(out, cur.String())
				cur.Reset()
				in = false
			}
		default:
			cur.WriteRune(r)
			in = true
		}
	}
	if in {
		out = append(out, cur.String())
	}
	return out
}

// helpOf runs `raftlock ARGS... --help` and returns its output.
func helpOf(t *testing.T, args ...string) string {
	t.Helper()
	out, err := exec.Command(bin, append(args, "--help")...).CombinedOutput()
	if err != nil {
		t.Fatalf("raftlock %s --help: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

var flagLine = regexp.MustCompile(`(?m)^\s+(?:-\w, )?--([a-z0-9-]+)`)

// flagsOf returns the flags `raftlock ARGS... --help` lists (hidden ones are not listed).
func flagsOf(t *testing.T, args ...string) map[string]bool {
	t.Helper()
	out := map[string]bool{}
	for _, m := range flagLine.FindAllStringSubmatch(helpOf(t, args...), -1) {
		out[m[1]] = true
	}
	if len(out) == 0 {
		t.Fatalf("raftlock %s --help lists no flags", strings.Join(args, " "))
	}
	return out
}

// agentEnv maps each agent flag to its RAFTLOCK_* variable, from `raftlock agent --help`.
func agentEnv(t *testing.T) map[string]string {
	t.Helper()
	out := map[string]string{}
	for f := range flagsOf(t, "agent") {
		if f != "help" {
			out["RAFTLOCK_"+strings.ToUpper(strings.ReplaceAll(f, "-", "_"))] = f
		}
	}
	return out
}

// checkCommand fails the test unless args (argv[0] the raftlock binary, or a subcommand when
// the entrypoint is raftlock) name a real raftlock subcommand and only flags it lists.
func checkCommand(t *testing.T, where string, args []string) {
	t.Helper()
	if len(args) > 0 && filepath.Base(args[0]) == "raftlock" {
		args = args[1:]
	}
	var sub []string
	for len(args) > 0 && !strings.HasPrefix(args[0], "-") {
		sub, args = append(sub, args[0]), args[1:]
	}
	if len(sub) == 0 {
		t.Errorf("%s: no raftlock subcommand in %q", where, args)
		return
	}
	help := helpOf(t, sub...)
	if !strings.Contains(help, "raftlock "+strings.Join(sub, " ")+" [") && !strings.Contains(help, "raftlock "+strings.Join(sub, " ")+"\n") {
		t.Errorf("%s: `raftlock %s` is not a command (its help: %.200q)", where, strings.Join(sub, " "), help)
		return
	}
	known := flagsOf(t, sub...)
	for _, a := range args {
		if name, ok := strings.CutPrefix(a, "--"); ok {
			name, _, _ = strings.Cut(name, "=")
			if !known[name] {
				t.Errorf("%s: `raftlock %s` has no flag --%s", where, strings.Join(sub, " "), name)
			}
		}
	}
}

// checkAgentVars fails the test for every RAFTLOCK_* name in vars that is not an agent flag's.
func checkAgentVars(t *testing.T, where string, vars []string) {
	t.Helper()
	known := agentEnv(t)
	for _, v := range vars {
		if _, ok := known[v]; !ok {
			t.Errorf("%s: %s is not the variable of any flag of `raftlock agent --help`", where, v)
		}
	}
}

// yamlDocs decodes every document of a YAML file.
func yamlDocs(t *testing.T, path string) []map[string]any {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var docs []map[string]any
	dec := yaml.NewDecoder(bytes.NewReader(b))
	for {
		var d map[string]any
		err := dec.Decode(&d)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		if d != nil {
			docs = append(docs, d)
		}
	}
	return docs
}

// get walks nested maps and lists: get(doc, "spec", "template", "spec", "containers", 0).
func get(v any, path ...any) any {
	for _, p := range path {
		switch k := p.(type) {
		case string:
			m, _ := v.(map[string]any)
			v = m[k]
		case int:
			l, _ := v.([]any)
			if k >= len(l) {
				return nil
			}
			v = l[k]
		}
	}
	return v
}

func str(v any) string {
	if v == nil {
		return ""
	}
	return fmt.Sprint(v)
}

func strs(v any) []string {
	var out []string
	l, _ := v.([]any)
	for _, x := range l {
		out = append(out, str(x))
	}
	return out
}

// envFile reads KEY=VALUE lines (systemd EnvironmentFile syntax, without quotes).
func envFile(t *testing.T, path string) map[string]string {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	out := map[string]string{}
	s := bufio.NewScanner(f)
	for s.Scan() {
		line := strings.TrimSpace(s.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		k, v, ok := strings.Cut(line, "=")
		if !ok {
			t.Fatalf("%s: %q is not KEY=VALUE", path, line)
		}
		out[k] = v
	}
	return out
}

func keys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

package deploy

import (
	"debug/elf"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"strings"
	"testing"
)

// instruction is one Dockerfile instruction, its continuation lines joined.
type instruction struct {
	cmd  string // upper case: FROM, RUN, ...
	args string
	line int
}

// stage is one FROM and the instructions under it.
type stage struct {
	from, name string
	ins        []instruction
}

type dockerfile struct{ stages []stage }

// parseDockerfile reads a Dockerfile into stages: enough of the syntax (comments, line
// continuations, FROM ... AS name) for the checks below; no BuildKit heredocs.
func parseDockerfile(path string) (*dockerfile, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	df := &dockerfile{}
	var cur strings.Builder
	start := 0
	for i, raw := range strings.Split(string(b), "\n") {
		line := strings.TrimSpace(raw)
		if strings.HasPrefix(line, "#") || (line == "" && cur.Len() == 0) {
			continue
		}
		if cur.Len() == 0 {
			start = i + 1
		}
		if body, cont := strings.CutSuffix(line, `\`); cont {
			cur.WriteString(body + " ")
			continue
		}
		cur.WriteString(line)
		full := cur.String()
		cur.Reset()
		cmd, args, _ := strings.Cut(full, " ")
		in := instruction{cmd: strings.ToUpper(cmd), args: strings.TrimSpace(args), line: start}
		if in.cmd == "FROM" {
			f := strings.Fields(in.args)
			var from, name string
			for j := 0; j < len(f); j++ {
				switch {
				case strings.HasPrefix(f[j], "--"):
				case strings.EqualFold(f[j], "AS") && j+1 < len(f):
					name = f[j+1]
					j++
				default:
					from = f[j]
				}
			}
			df.stages = append(df.stages, stage{from: from, name: name})
			continue
		}
		if len(df.stages) == 0 {
			if in.cmd != "ARG" {
				return nil, fmt.Errorf("%s:%d: %s before the first FROM", path, in.line, in.cmd)
			}
			continue
		}
		s := &df.stages[len(df.stages)-1]
		s.ins = append(s.ins, in)
	}
	return df, nil
}

// final is the stage `docker build` builds without --target.
func (d *dockerfile) final() stage { return d.stages[len(d.stages)-1] }

func (d *dockerfile) stage(name string) (stage, bool) {
	for _, s := range d.stages {
		if s.name == name {
			return s, true
		}
	}
	return stage{}, false
}

// all returns the stage's instructions named cmd.
func (s stage) all(cmd string) []instruction {
	var out []instruction
	for _, in := range s.ins {
		if in.cmd == cmd {
			out = append(out, in)
		}
	}
	return out
}

// last returns the stage's last instruction named cmd (the one that takes effect).
func (s stage) last(cmd string) (instruction, bool) {
	all := s.all(cmd)
	if len(all) == 0 {
		return instruction{}, false
	}
	return all[len(all)-1], true
}

// buildCommand returns the RUN line of the build stage that runs `go build`.
func (d *dockerfile) buildCommand() (string, bool) {
	for _, s := range d.stages {
		for _, in := range s.all("RUN") {
			if strings.Contains(in.args, "go build") {
				return in.args, true
			}
		}
	}
	return "", false
}

// env returns the stage's ENV settings (KEY=VALUE form).
func (s stage) env() map[string]string {
	out := map[string]string{}
	for _, in := range s.all("ENV") {
		for _, kv := range shellFields(in.args) {
			if k, v, ok := strings.Cut(kv, "="); ok {
				out[k] = v
			}
		}
	}
	return out
}

// execForm parses a JSON exec form (["a", "b"]).
func execForm(t *testing.T, in instruction) []string {
	t.Helper()
	var out []string
	if err := json.Unmarshal([]byte(in.args), &out); err != nil {
		t.Fatalf("Dockerfile:%d: %s %s is not the exec (JSON) form: %v", in.line, in.cmd, in.args, err)
	}
	return out
}

func TestDockerfile(t *testing.T) {
	df, err := parseDockerfile("docker/Dockerfile")
	if err != nil {
		t.Fatal(err)
	}
	if len(df.stages) < 2 {
		t.Fatalf("Dockerfile has %d stage(s); want a build stage and a runtime stage", len(df.stages))
	}
	build, _ := df.buildCommand()
	for _, want := range []string{"CGO_ENABLED=0", "-trimpath", "github.com/raftlock/raftlock/internal/version.Version=", "./cmd/raftlock"} {
		if !strings.Contains(build, want) {
			t.Errorf("the go build of the Dockerfile lacks %q: %s", want, build)
		}
	}
	fin := df.final()
	if strings.HasPrefix(fin.from, "golang") || fin.name == "build" {
		t.Errorf("the final stage is %s %s: the runtime image must not be the build stage", fin.from, fin.name)
	}
	user, ok := fin.last("USER")
	if u, _, _ := strings.Cut(user.args, ":"); !ok || u == "0" || u == "root" || u == "" {
		t.Errorf("the final stage runs as %q; want a non-root USER", user.args)
	}
	env := fin.env()
	checkAgentVars(t, "Dockerfile ENV", keys(env))
	vol, ok := fin.last("VOLUME")
	if !ok || !strings.Contains(vol.args, env["RAFTLOCK_DATA_DIR"]) || env["RAFTLOCK_DATA_DIR"] == "" {
		t.Errorf("VOLUME %q does not hold RAFTLOCK_DATA_DIR %q", vol.args, env["RAFTLOCK_DATA_DIR"])
	}
	var exposed []string
	for _, in := range fin.all("EXPOSE") {
		exposed = append(exposed, strings.Fields(in.args)...)
	}
	for _, k := range []string{"RAFTLOCK_HTTP_ADDR", "RAFTLOCK_RAFT_ADDR"} {
		_, port, err := net.SplitHostPort(env[k])
		if err != nil || !strings.Contains(" "+strings.Join(exposed, " ")+" ", " "+port+" ") {
			t.Errorf("%s=%q: its port is not in EXPOSE %v", k, env[k], exposed)
		}
	}
	if s, _ := fin.last("STOPSIGNAL"); s.args != "SIGTERM" {
		t.Errorf("STOPSIGNAL %q; want SIGTERM, which stops the agent gracefully", s.args)
	}

	// The entrypoint is the binary the build stage made, and the default command a real one.
	entry, ok := fin.last("ENTRYPOINT")
	if !ok {
		t.Fatal("no ENTRYPOINT")
	}
	ep := execForm(t, entry)
	copied := false
	for _, c := range fin.all("COPY") {
		f := strings.Fields(c.args)
		copied = copied || strings.Contains(c.args, "--from=") && f[len(f)-1] == ep[0] && strings.HasSuffix(f[len(f)-2], "/raftlock")
	}
	if !copied {
		t.Errorf("ENTRYPOINT %v: no COPY --from=<build stage> puts raftlock there", ep)
	}
	cmd, _ := fin.last("CMD")
	checkCommand(t, "Dockerfile ENTRYPOINT+CMD", append(ep, execForm(t, cmd)...))

	hc, ok := fin.last("HEALTHCHECK")
	if !ok {
		t.Fatal("no HEALTHCHECK")
	}
	_, hcCmd, found := strings.Cut(hc.args, "CMD ")
	if !found {
		t.Fatalf("HEALTHCHECK %s has no CMD", hc.args)
	}
	probe := execForm(t, instruction{cmd: "HEALTHCHECK", args: hcCmd, line: hc.line})
	if probe[0] != ep[0] || len(probe) < 3 || probe[1] != "health" || !strings.Contains(strings.Join(probe, " "), "--ready") {
		t.Errorf("HEALTHCHECK runs %v; want %s health --ready (GET /v1/ready)", probe, ep[0])
	}
	checkCommand(t, "Dockerfile HEALTHCHECK", probe)

	if _, ok := df.stage("tools"); !ok {
		t.Error("no stage `tools` (the binary with a shell, for compose's one-shot jobs)")
	}
}

// TestBinaryIsStatic checks that the Dockerfile's build makes a binary with no dynamic loader
// and no shared library, which is what lets it run on distroless/static and busybox.
func TestBinaryIsStatic(t *testing.T) {
	f, err := elf.Open(bin)
	if err != nil {
		t.Skipf("not an ELF binary on this platform: %v", err)
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			t.Error("the binary asks for a dynamic loader (PT_INTERP): not static")
		}
	}
	if libs, _ := f.ImportedLibraries(); len(libs) > 0 {
		t.Errorf("the binary needs shared libraries %v: not static", libs)
	}
}

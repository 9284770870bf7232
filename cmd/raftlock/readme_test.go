//go:build unix

package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"mvdan.cc/sh/v3/syntax"

	"github.com/raftlock/raftlock/api"
)

// readmeBlock is one fenced code block of README.md.
type readmeBlock struct {
	lang string
	text string
	line int    // of the opening fence
	skip string // why the block is not run: the HTML comment on the line above, if any
}

// skipMarker is the comment that keeps the next block from being run, with the reason.
var skipMarker = regexp.MustCompile(`^<!-- not run by TestReadmeCommandBlocks: (.+) -->$`)

// readmeBlocks returns the fenced code blocks of the repository's README.md.
func readmeBlocks(t *testing.T) []readmeBlock {
	t.Helper()
	f, err := os.Open("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var blocks []readmeBlock
	var cur *readmeBlock
	var prev string
	sc := bufio.NewScanner(f)
	for n := 1; sc.Scan(); n++ {
		line := sc.Text()
		switch {
		case cur == nil && strings.HasPrefix(line, "```"):
			cur = &readmeBlock{lang: strings.TrimPrefix(line, "```"), line: n}
			if m := skipMarker.FindStringSubmatch(prev); m != nil {
				cur.skip = m[1]
			}
		case cur != nil && line == "```":
			blocks = append(blocks, *cur)
			cur = nil
		case cur != nil:
			cur.text += line + "\n"
		}
		prev = line
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return blocks
}

// words returns the words of a command as the shell would pass them, with "X" for what only
// running it would tell (command substitutions, variables).
func words(args []*syntax.Word) []string {
	out := make([]string, len(args))
	for i, w := range args {
		var b strings.Builder
		var part func(p syntax.WordPart)
		part = func(p syntax.WordPart) {
			switch p := p.(type) {
			case *syntax.Lit:
				b.WriteString(p.Value)
			case *syntax.SglQuoted:
				b.WriteString(p.Value)
			case *syntax.DblQuoted:
				for _, q := range p.Parts {
					part(q)
				}
			default:
				b.WriteString("X")
			}
		}
		for _, p := range w.Parts {
			part(p)
		}
		out[i] = b.String()
	}
	return out
}

// checkRaftlockArgs fails the test unless args, a raftlock command line without the program
// name, names a command whose flags all exist and parse.
func checkRaftlockArgs(t *testing.T, where string, args []string) {
	t.Helper()
	root := newRootCmd()
	cmd, rest, err := root.Find(args)
	if err != nil || cmd == root {
		t.Errorf("%s: raftlock %s: no such command (%v)", where, strings.Join(args, " "), err)
		return
	}
	if err := cmd.ParseFlags(rest); err != nil {
		t.Errorf("%s: raftlock %s: %v", where, strings.Join(args, " "), err)
		return
	}
	if cmd.Name() == "lock" || cmd.Name() == "elect" {
		if _, _, err := splitCommand(cmd, cmd.Flags().Args()); err != nil {
			t.Errorf("%s: raftlock %s: %v", where, strings.Join(args, " "), err)
		}
	}
}

// TestReadmeCommandBlocks runs README's shell blocks as a reader pastes them, against the test
// cluster, and checks the commands of those it cannot run (servers that run until stopped,
// soaks): every block parses, and every raftlock command line in it names a command and flags
// that exist. A block runs with sh -eu, so a failing command fails it, and its answers may
// hold only the API errors that the block itself shows the reader. Two things differ from a
// reader's terminal, both of them the test's surroundings: the dev cluster's addresses
// (127.0.0.1:7001-7003, which a developer's own `raftlock dev` may hold) stand for the test
// cluster's, also in RAFTLOCK_ENDPOINTS; and `go build ./cmd/raftlock`, which would write into
// the repository, is the build this package's tests made of the same command.
func TestReadmeCommandBlocks(t *testing.T) {
	dir := t.TempDir()
	if err := os.Symlink(cliEnv.bin, filepath.Join(dir, "raftlock")); err != nil {
		t.Fatal(err)
	}
	eps := cliEnv.dev.Endpoints()
	addrs := make([]string, 0, 2*len(eps))
	for i, ep := range eps {
		addrs = append(addrs, fmt.Sprintf("127.0.0.1:%d", 7001+i), strings.TrimPrefix(ep, "http://"))
	}
	mapAddrs := strings.NewReplacer(addrs...)
	ran := 0
	for _, b := range readmeBlocks(t) {
		if b.lang != "sh" {
			continue
		}
		where := fmt.Sprintf("README.md:%d", b.line)
		file, err := syntax.NewParser().Parse(strings.NewReader(b.text), where)
		if err != nil {
			t.Errorf("%s: %v", where, err)
			continue
		}
		var drop []uint // lines of the block that the test stands in for
		syntax.Walk(file, func(n syntax.Node) bool {
			call, ok := n.(*syntax.CallExpr)
			if !ok || len(call.Args) == 0 {
				return true
			}
			args := words(call.Args)
			switch {
			case path.Base(args[0]) == "raftlock":
				checkRaftlockArgs(t, where, args[1:])
			case len(args) > 2 && args[0] == "go" && args[1] == "run" && args[2] == "./cmd/raftlock":
				checkRaftlockArgs(t, where, args[3:])
			}
			if b.skip == "" && args[0] == "go" {
				if !slices.Equal(args, []string{"go", "build", "./cmd/raftlock"}) {
					t.Errorf("%s: %q in a block that is run: only `go build ./cmd/raftlock` can be", where, args)
				}
				drop = append(drop, call.Pos().Line())
			}
			return true
		})
		if b.skip != "" {
			t.Logf("%s: not run: %s", where, b.skip)
			continue
		}
		lines := strings.Split(b.text, "\n")
		for _, l := range drop {
			lines[l-1] = ""
		}
		script := mapAddrs.Replace(strings.Join(lines, "\n"))
		out := runReadmeBlock(t, where, dir, script)
		for _, m := range regexp.MustCompile(`"code":"([a-z_]+)"`).FindAllStringSubmatch(out, -1) {
			if !strings.Contains(b.text, m[0]) {
				t.Errorf("%s: an answer the block does not show: %s\n%s", where, m[0], out)
			}
		}
		ran++
	}
	if ran < 2 {
		t.Fatalf("ran %d blocks of README.md; the curl walkthrough and the CLI lines should run", ran)
	}
}

// runReadmeBlock runs script with sh -eu in dir, with the test cluster's endpoints, and returns
// its output. The script runs in a process group of its own, killed when it ends, so that
// nothing it left in the background (a waiting curl of a block that failed halfway) lives on.
func runReadmeBlock(t *testing.T, where, dir, script string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "sh", "-eu", "-c", script)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), endpointsEnv+"="+strings.Join(cliEnv.dev.Endpoints(), ","))
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = 5 * time.Second
	out, err := cmd.CombinedOutput()
	if cmd.Process != nil {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
	}
	if err != nil {
		t.Errorf("%s: %v; output:\n%s", where, err, out)
	}
	t.Logf("%s:\n%s", where, out)
	return string(out)
}

// TestReadmeGoProgram builds README's Go program and runs it: against the test cluster it takes
// the lock and reports its token; against a cluster that refuses it (401, as under --acl
// without a token) it reports the error and exits 1, without a panic.
func TestReadmeGoProgram(t *testing.T) {
	var program string
	for _, b := range readmeBlocks(t) {
		if b.lang == "go" {
			program = b.text
		}
	}
	if program == "" {
		t.Fatal("README.md has no go block")
	}
	bin := buildReadmeProgram(t, program)

	run := func(endpoints string) (string, error) {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		cmd := exec.CommandContext(ctx, bin)
		cmd.Env = append(os.Environ(), endpointsEnv+"="+endpoints)
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	out, err := run(strings.Join(cliEnv.dev.Endpoints(), ","))
	if err != nil || !regexp.MustCompile(`^holding jobs/nightly with fencing token [1-9][0-9]*\n$`).MatchString(out) {
		t.Fatalf("against the cluster: %v, output %q", err, out)
	}
	refusing := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusUnauthorized)
		_ = json.NewEncoder(w).Encode(api.ErrorBody{Error: api.ErrorDetail{Code: api.CodeUnauthorized, Message: "no token"}})
	}))
	defer refusing.Close()
	out, err = run(refusing.URL)
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 1 || strings.Contains(out, "panic") || !strings.Contains(out, "raftlock: ") {
		t.Fatalf("against a cluster that refuses it: %v, output %q; want its error and exit 1", err, out)
	}
}

// buildReadmeProgram builds program as a package of the module (an overlay, so that nothing
// is written into the repository) and returns the binary.
func buildReadmeProgram(t *testing.T, program string) string {
	t.Helper()
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	src := filepath.Join(dir, "main.go")
	if err := os.WriteFile(src, []byte(program), 0o644); err != nil {
		t.Fatal(err)
	}
	pkg := filepath.Join(root, "internal", "readmeprogram")
	overlay, _ := json.Marshal(map[string]any{"Replace": map[string]string{filepath.Join(pkg, "main.go"): src}})
	overlayFile := filepath.Join(dir, "overlay.json")
	if err := os.WriteFile(overlayFile, overlay, 0o644); err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(dir, "program")
	build := exec.Command("go", "build", "-overlay", overlayFile, "-o", bin, "./internal/readmeprogram")
	build.Dir = root
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("README's Go program does not build: %v\n%s", err, out)
	}
	return bin
}

// What README's commands leave in the working tree, the binary of `go build ./cmd/raftlock`
// and a --data-dir under the repository (which holds a CA key and the management token), is
// ignored by git, so that nobody commits it by mistake.
func TestReadmeOutputsAreIgnoredByGit(t *testing.T) {
	if _, err := exec.LookPath("git"); err != nil {
		t.Skip("no git")
	}
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	if err := exec.Command("git", "-C", root, "rev-parse", "--git-dir").Run(); err != nil {
		t.Skip("not a git work tree")
	}
	readme, err := os.ReadFile(filepath.Join(root, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	paths := []string{"raftlock"}
	for _, m := range regexp.MustCompile("--data-dir (\\./[^\\s`]+)").FindAllStringSubmatch(string(readme), -1) {
		paths = append(paths, filepath.Join(m[1], "management-token"))
	}
	if len(paths) < 2 {
		t.Fatal("README.md names no --data-dir under the repository; this test looks for the secure dev cluster's")
	}
	for _, p := range paths {
		if err := exec.Command("git", "-C", root, "check-ignore", "-q", "--no-index", p).Run(); err != nil {
			t.Errorf("git does not ignore %s, which README's commands write into the repository", p)
		}
	}
}

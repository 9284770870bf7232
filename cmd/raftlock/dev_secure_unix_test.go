//go:build unix

package main

import (
	"encoding/json"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/raftlock/raftlock/api"
)

// devProc is a `raftlock dev` process and the banner it printed.
type devProc struct {
	cmd            *exec.Cmd
	stdout, stderr *syncBuffer
	exited         chan struct{} // closed once cmd.Wait returned
}

// startDevProc runs `raftlock dev` with args until its banner is out; it is stopped when the
// test ends if stop was not called.
func startDevProc(t *testing.T, args ...string) *devProc {
	t.Helper()
	p := &devProc{cmd: exec.Command(cliEnv.bin, append([]string{"dev"}, args...)...),
		stdout: &syncBuffer{}, stderr: &syncBuffer{}, exited: make(chan struct{})}
	p.cmd.Stdout, p.cmd.Stderr = p.stdout, p.stderr
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := p.exited
	go func() { _ = p.cmd.Wait(); close(exited) }()
	t.Cleanup(func() {
		_ = p.cmd.Process.Kill()
		<-exited
	})
	deadline := time.After(30 * time.Second)
	for !strings.Contains(p.stdout.String(), "Press Ctrl-C") {
		select {
		case <-exited:
			t.Fatalf("raftlock dev %q exited before its banner:\n%s%s", args, p.stdout, p.stderr)
		case <-deadline:
			t.Fatalf("raftlock dev %q printed no banner:\n%s%s", args, p.stdout, p.stderr)
		case <-time.After(20 * time.Millisecond):
		}
	}
	return p
}

// stop interrupts the process as Ctrl-C does and waits for it to exit 0.
func (p *devProc) stop(t *testing.T) {
	t.Helper()
	if err := p.cmd.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	select {
	case <-p.exited:
	case <-time.After(30 * time.Second):
		t.Fatalf("raftlock dev did not exit on SIGINT:\n%s", p.stderr)
	}
	if code := p.cmd.ProcessState.ExitCode(); code != 0 {
		t.Fatalf("raftlock dev exited %d:\n%s", code, p.stderr)
	}
}

// bannerLines returns the banner's indented lines that start with prefix after the indent.
func (p *devProc) bannerLines(prefix string) []string {
	var out []string
	for _, l := range strings.Split(p.stdout.String(), "\n") {
		if strings.HasPrefix(l, "  ") && strings.HasPrefix(strings.TrimSpace(l), prefix) {
			l = strings.TrimSpace(l)
			out = append(out, l)
		}
	}
	return out
}

// shell runs script with sh, the raftlock binary first in PATH and no RAFTLOCK_* variables
// but those the script sets.
func shell(t *testing.T, script string) cliResult {
	t.Helper()
	cmd := exec.Command("sh", "-c", script)
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "RAFTLOCK_") && !strings.HasPrefix(kv, "PATH=") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	cmd.Env = append(cmd.Env, "PATH="+filepath.Dir(cliEnv.bin)+string(os.PathListSeparator)+os.Getenv("PATH"))
	var stdout, stderr syncBuffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	return finish(t, cmd, &stdout, &stderr, 30*time.Second)
}

// `raftlock dev --secure` prints export, CLI and curl lines that work against it as printed,
// keeps its secret out of the banner and in a 0600 file, and bootstraps only once: started
// again on the same data dir it reuses the token.
func TestDevSecureBannerLinesWork(t *testing.T) {
	dir := t.TempDir()
	// Fixed ports: Raft keeps its members' addresses, so a restart needs the same ones.
	base := strconv.Itoa(freeBasePort(t))
	p := startDevProc(t, "--secure", "--data-dir", dir, "--base-port", base)
	exports := strings.Join(p.bannerLines("export "), "\n")
	if !strings.Contains(exports, tokenEnv+"=") || !strings.Contains(exports, endpointsEnv+"=https://") {
		t.Fatalf("the banner exports no token or endpoints:\n%s", p.stdout)
	}
	tokenFile := filepath.Join(dir, "management-token")
	st, err := os.Stat(tokenFile)
	if err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("token file: %v %v", st, err)
	}
	secretBytes, err := os.ReadFile(tokenFile)
	if err != nil {
		t.Fatal(err)
	}
	secret := strings.TrimSpace(string(secretBytes))
	if secret == "" || strings.Contains(p.stdout.String()+p.stderr.String(), secret) {
		t.Fatalf("the secret %q is empty or printed:\n%s%s", secret, p.stdout, p.stderr)
	}

	run := func(line string) cliResult {
		t.Helper()
		r := shell(t, exports+"\n"+line)
		if r.code != 0 {
			t.Fatalf("%s: exit %d\n%s%s", line, r.code, r.stdout, r.stderr)
		}
		return r
	}
	cli := p.bannerLines("raftlock ")
	if len(cli) == 0 {
		t.Fatalf("no CLI line in the banner:\n%s", p.stdout)
	}
	for _, line := range cli {
		run(line)
	}
	if r := run("raftlock status"); !strings.Contains(r.stdout, "leader") {
		t.Fatalf("status:\n%s", r.stdout)
	}
	// Without the token the same cluster refuses the CLI: ACLs are on.
	if r := shell(t, exports+"\nunset "+tokenEnv+"\nraftlock locks"); r.code != exitFailure || !strings.Contains(r.stderr, "token") {
		t.Fatalf("locks without a token: exit %d, %s", r.code, r.stderr)
	}

	// The curl lines, as printed, with <SID> and N filled in from the answers before.
	curl := p.bannerLines("curl ")
	if len(curl) != 6 {
		t.Fatalf("want 6 curl lines:\n%s", p.stdout)
	}
	var sess api.Session
	if err := json.Unmarshal([]byte(run(curl[0]).stdout), &sess); err != nil || sess.ID == "" {
		t.Fatalf("create session: %+v %v", sess, err)
	}
	var acq api.AcquireResponse
	if out := run(strings.ReplaceAll(curl[1], "<SID>", sess.ID)).stdout; json.Unmarshal([]byte(out), &acq) != nil || acq.Token == 0 {
		t.Fatalf("acquire: %s", out)
	}
	if out := run(curl[2]).stdout; !strings.Contains(out, `"held":true`) {
		t.Fatalf("get lock: %s", out)
	}
	tok := regexp.MustCompile(`"token":N`).ReplaceAllString(strings.ReplaceAll(curl[3], "<SID>", sess.ID), `"token":`+jsonInt(acq.Token))
	if out := run(tok).stdout; strings.Contains(out, `"error"`) {
		t.Fatalf("release: %s", out)
	}
	if out := run(strings.ReplaceAll(curl[4], "<SID>", sess.ID)).stdout; strings.Contains(out, `"error"`) {
		t.Fatalf("renew: %s", out)
	}
	if out := run(curl[5]).stdout; !strings.Contains(out, `"leader"`) {
		t.Fatalf("cluster: %s", out)
	}
	p.stop(t)

	// Again on the same data dir: the same token works, and there is still one.
	p = startDevProc(t, "--secure", "--data-dir", dir, "--base-port", base)
	if again, err := os.ReadFile(tokenFile); err != nil || string(again) != string(secretBytes) {
		t.Fatalf("the token file changed on restart: %v", err)
	}
	exports = strings.Join(p.bannerLines("export "), "\n")
	var list struct{ Tokens []api.Token }
	if out := run("raftlock acl token list -o json").stdout; json.Unmarshal([]byte(out), &list) != nil || len(list.Tokens) != 1 {
		t.Fatalf("tokens after the restart:\n%s", out)
	}
	if out := run(p.bannerLines("curl ")[5]).stdout; !strings.Contains(out, `"leader"`) {
		t.Fatalf("cluster after the restart: %s", out)
	}
	p.stop(t)
}

// freeBasePort returns a port P such that P..P+2 and P+100..P+102 are free on 127.0.0.1 now.
func freeBasePort(t *testing.T) int {
	t.Helper()
	for range 100 {
		base := 20000 + rand.IntN(20000)
		var lns []net.Listener
		for _, port := range []int{base, base + 1, base + 2, base + 100, base + 101, base + 102} {
			ln, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(port))
			if err != nil {
				break
			}
			lns = append(lns, ln)
		}
		for _, ln := range lns {
			ln.Close()
		}
		if len(lns) == 6 {
			return base
		}
	}
	t.Fatal("no free base port")
	return 0
}

func jsonInt(v uint64) string {
	b, _ := json.Marshal(v)
	return string(b)
}

package main

import (
	"bufio"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/raftlock/raftlock/internal/testkit"
)

// envMain makes the test binary run the command instead of the tests: the test starts three
// replicas as three processes of itself.
const envMain = "EMBEDDED_ELECTION_RUN_MAIN"

func TestMain(m *testing.M) {
	if os.Getenv(envMain) == "1" {
		main()
		os.Exit(0)
	}
	os.Exit(testkit.Main(m))
}

// moveBound is how soon after the leader's death another replica must run the job.
const moveBound = 2 * time.Second

// The example as three processes: one leader at a time runs the job, each period once; when
// the leader is killed another process runs the job within moveBound and goes on; the tokens
// on the shared file only grow.
func TestReplicasElectOneJobRunnerAndSurviveItsDeath(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "jobs.log")
	ids := []string{"n1", "n2", "n3"}
	var peers []string
	for _, id := range ids {
		peers = append(peers, id+"="+freeAddr(t))
	}
	procs := map[string]*exec.Cmd{}
	for _, id := range ids {
		procs[id] = startReplica(t, dir, id, strings.Join(peers, ","), file)
	}
	lines := waitLines(t, file, "the first jobs", func(ls []jobLine) bool { return len(ls) >= 5 })
	leader := lines[len(lines)-1].id
	killed := time.Now()
	if err := procs[leader].Process.Kill(); err != nil {
		t.Fatal(err)
	}
	_ = procs[leader].Wait()
	delete(procs, leader)
	lines = waitLines(t, file, "a job by another replica, and five more", func(ls []jobLine) bool {
		return len(after(ls, leader, killed)) >= 6
	})
	first := after(lines, leader, killed)[0]
	if moved := first.at.Sub(killed); moved > moveBound {
		t.Errorf("the job moved %s after the leader was killed, want within %s", moved, moveBound)
	} else {
		t.Logf("the job moved from %s to %s %s after the kill", leader, first.id, moved.Round(time.Millisecond))
	}
	for _, p := range procs { // as an orchestrator stops a service: every replica at once
		if err := p.Process.Signal(syscall.SIGTERM); err != nil {
			t.Fatal(err)
		}
	}
	for id, p := range procs {
		if err := p.Wait(); err != nil {
			t.Errorf("%s after SIGTERM: %v", id, err)
		}
	}
	checkJobs(t, readLines(t, file))
}

// checkJobs checks the shared file: tokens that never go down, each token written by one
// replica, and each period's job run once.
func checkJobs(t *testing.T, lines []jobLine) {
	t.Helper()
	owner := map[uint64]string{}
	for i, l := range lines {
		if id, ok := owner[l.token]; ok && id != l.id {
			t.Errorf("line %d: token %d written by %s and %s", i+1, l.token, id, l.id)
		}
		owner[l.token] = l.id
		if i == 0 {
			continue
		}
		prev := lines[i-1]
		if l.token < prev.token {
			t.Errorf("line %d: token %d after %d", i+1, l.token, prev.token)
		}
		if l.slot <= prev.slot {
			t.Errorf("line %d: period %d run by %s after period %d by %s: a period ran twice or out of order", i+1, l.slot, l.id, prev.slot, prev.id)
		}
	}
	t.Logf("%d jobs, %d leaderships", len(lines), len(owner))
}

// jobLine is a line of the shared file.
type jobLine struct {
	slot, token uint64
	id          string
	at          time.Time
}

func readLines(t *testing.T, file string) []jobLine {
	t.Helper()
	f, err := os.Open(file)
	if os.IsNotExist(err) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []jobLine
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		var l jobLine
		var at int64
		if _, err := fmt.Sscanf(sc.Text(), "slot=%d token=%d id=%s at=%d", &l.slot, &l.token, &l.id, &at); err != nil {
			t.Fatalf("line %q: %v", sc.Text(), err)
		}
		l.at = time.Unix(0, at)
		out = append(out, l)
	}
	return out
}

// after returns the lines of replicas other than id written after t.
func after(lines []jobLine, id string, t time.Time) []jobLine {
	var out []jobLine
	for _, l := range lines {
		if l.id != id && l.at.After(t) {
			out = append(out, l)
		}
	}
	return out
}

// waitLines polls the file until cond holds of its lines, and returns them.
func waitLines(t *testing.T, file, what string, cond func([]jobLine) bool) []jobLine {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		ls := readLines(t, file)
		if cond(ls) {
			return ls
		}
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s (%d lines)", what, len(ls))
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// startReplica starts the example as replica id, stopped (killed) at the end of the test.
func startReplica(t *testing.T, dir, id, peers, file string) *exec.Cmd {
	t.Helper()
	cmd := exec.Command(os.Args[0], "--id", id, "--peers", peers, "--file", file, "--data-dir", filepath.Join(dir, id))
	cmd.Env = append(os.Environ(), envMain+"=1")
	out, err := os.Create(filepath.Join(dir, id+".log"))
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if cmd.ProcessState == nil {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
		}
		out.Close()
		if t.Failed() {
			log, _ := os.ReadFile(out.Name())
			t.Logf("%s's output:\n%s", id, log)
		}
	})
	return cmd
}

// freeAddr returns a loopback address with a port the system just handed out.
func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

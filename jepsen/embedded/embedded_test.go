package embedded

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/raftlock/raftlock/internal/testkit"
	"github.com/raftlock/raftlock/jepsen/checker"
	"github.com/raftlock/raftlock/jepsen/history"
)

func TestMain(m *testing.M) {
	if os.Getenv(envWorker) != "" {
		workerMain()
		os.Exit(0)
	}
	os.Exit(testkit.Main(m))
}

// runTime is how long the workload runs under faults.
const runTime = 15 * time.Second

// Three processes, each an embedded node with workers holding locks through its in-process
// client, while processes are killed (and started again) and paused past the TTL: no two
// workers ever believe they hold a lock at once, and none believes past the hand-off of its
// lock, by the belief checker of the jepsen harness.
func TestEmbeddedWorkersUnderKillAndPause(t *testing.T) {
	ops := runWorkload(t, false)
	res := checker.CheckBelief(ops, checker.DefaultConfig(ttl))
	t.Logf("%s %s", res.Name, res.Figures)
	if !res.Valid {
		t.Errorf("belief failed: %d violation(s)\n%s", res.Violations, strings.Join(res.Examples, "\n"))
	}
	var beliefs, lost, killed int
	for _, op := range ops {
		if op.Kind == history.Believe {
			beliefs++
			switch {
			case strings.HasPrefix(op.Detail, "context done"):
				lost++
			case op.Detail == detailKilled:
				killed++
			}
		}
	}
	t.Logf("%d beliefs, %d ended by a lost hold, %d by a kill", beliefs, lost, killed)
	if beliefs < 20 || lost == 0 {
		t.Errorf("too little happened to judge: %d beliefs, %d ended by a lost hold", beliefs, lost)
	}
}

// envSelfTest runs TestNaiveWorkersFailBelief, which takes as long as the run above.
const envSelfTest = "RAFTLOCK_EMBEDDED_SELF_TEST"

// The same run with workers that trust the hold's Context alone, as a program that never
// pauses may: a process resumed from a pause past its TTL finds it not done yet (its timers
// and its next renewal's answer have not run), acts on a lock handed on meanwhile, and the
// belief checker must say so. It shows why the workers (and docs/embedding.md) check the
// session's Deadline too. Run with RAFTLOCK_EMBEDDED_SELF_TEST=1.
func TestNaiveWorkersFailBelief(t *testing.T) {
	if os.Getenv(envSelfTest) == "" {
		t.Skipf("a self-test of the checker; set %s=1 to run it", envSelfTest)
	}
	res := checker.CheckBelief(runWorkload(t, true), checker.DefaultConfig(ttl))
	t.Logf("%s %s", res.Name, res.Figures)
	if res.Valid {
		t.Fatal("belief passed workers that act on a hold after a pause past their session's deadline")
	}
	t.Logf("belief failed as it must: %d violation(s), e.g.\n%s", res.Violations, res.Examples[0])
}

// runWorkload runs the workload under faults for runTime and returns the merged history.
func runWorkload(t *testing.T, naive bool) []history.Op {
	r := startRun(t, naive)
	r.nemesis(runTime)
	ops := r.finish()
	t.Logf("faults: %s", strings.Join(r.faults, ", "))
	return ops
}

// detailKilled ends the beliefs of a process killed while it held them.
const detailKilled = "process killed"

// run is one run: the processes, their history files, and the faults injected.
type run struct {
	t      *testing.T
	dir    string
	ids    []string
	peers  string
	naive  bool
	procs  map[string]*proc
	starts int
	files  []string
	faults []string
	rng    *rand.Rand
}

// proc is a running worker process.
type proc struct {
	cmd  *exec.Cmd
	done chan struct{} // closed when it has exited
}

func startRun(t *testing.T, naive bool) *run {
	r := &run{t: t, dir: t.TempDir(), ids: []string{"n1", "n2", "n3"}, naive: naive, procs: map[string]*proc{},
		rng: rand.New(rand.NewPCG(1, uint64(time.Now().UnixNano())))}
	var peers []string
	for _, id := range r.ids {
		peers = append(peers, id+"="+freeAddr(t))
	}
	r.peers = strings.Join(peers, ",")
	t.Cleanup(r.killAll)
	for _, id := range r.ids {
		r.start(id)
	}
	return r
}

// start starts the worker process of node id (again, after a kill: same data directory).
func (r *run) start(id string) {
	r.t.Helper()
	r.starts++
	hist := filepath.Join(r.dir, fmt.Sprintf("history-%s-%d.jsonl", id, r.starts))
	r.files = append(r.files, hist)
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), envWorker+"=1", envID+"="+id, envPeers+"="+r.peers,
		envDir+"="+filepath.Join(r.dir, id), envHistory+"="+hist, fmt.Sprintf("%s=%d", envProcess, r.starts*100))
	if r.naive {
		cmd.Env = append(cmd.Env, envNaive+"=1")
	}
	out, err := os.OpenFile(filepath.Join(r.dir, id+".log"), os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
	if err != nil {
		r.t.Fatal(err)
	}
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		r.t.Fatal(err)
	}
	p := &proc{cmd: cmd, done: make(chan struct{})}
	go func() { _ = cmd.Wait(); out.Close(); close(p.done) }()
	r.procs[id] = p
}

// nemesis injects faults for d: after a quiet second or two each time, it kills a process and
// starts it again 1–2 s later, or stops one (SIGSTOP) for longer than the TTL and the election
// timeout, then lets it go on (SIGCONT); one at a time, alternately. Both strike a process
// whose workers hold a lock when they can, so that holds outlive what they believe.
func (r *run) nemesis(d time.Duration) {
	r.t.Helper()
	end := time.Now().Add(d)
	for i := 0; time.Now().Before(end); i++ {
		time.Sleep(time.Second + time.Duration(r.rng.IntN(1000))*time.Millisecond)
		id := r.holder()
		p := r.procs[id]
		if i%2 == 0 {
			r.faults = append(r.faults, "kill "+id)
			_ = p.cmd.Process.Signal(syscall.SIGKILL)
			<-p.done
			time.Sleep(time.Second + time.Duration(r.rng.IntN(1000))*time.Millisecond)
			r.start(id)
			continue
		}
		r.faults = append(r.faults, "pause "+id)
		_ = p.cmd.Process.Signal(syscall.SIGSTOP)
		time.Sleep(ttl + time.Second + time.Duration(r.rng.IntN(1000))*time.Millisecond)
		_ = p.cmd.Process.Signal(syscall.SIGCONT)
	}
}

// holder returns a process whose workers believe they hold a lock, waiting up to 5 s for one
// (holds last 50–500 ms, and a process just started may hold none yet), else any: a fault
// that strikes no holder tests nothing.
func (r *run) holder() string {
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		for _, i := range r.rng.Perm(len(r.ids)) {
			id := r.ids[i]
			if hist := r.current(id); hist != "" && openBeliefs(r.t, hist) > 0 {
				return id
			}
		}
		time.Sleep(5 * time.Millisecond)
	}
	return r.ids[r.rng.IntN(len(r.ids))]
}

// current returns the history file of node id's running process.
func (r *run) current(id string) string {
	prefix := filepath.Join(r.dir, "history-"+id+"-")
	last := ""
	for _, f := range r.files {
		if strings.HasPrefix(f, prefix) {
			last = f
		}
	}
	return last
}

// openBeliefs counts the beliefs of a history file that have not ended; none before its
// process has created the file.
func openBeliefs(t *testing.T, name string) int {
	if _, err := os.Stat(name); errors.Is(err, fs.ErrNotExist) {
		return 0
	}
	n := 0
	for _, op := range readHistory(t, name) {
		if op.Kind == history.Believe && op.Detail == detailKilled {
			n++
		}
	}
	return n
}

// finish stops every process gracefully and returns the merged history.
func (r *run) finish() []history.Op {
	r.t.Helper()
	for _, p := range r.procs {
		_ = p.cmd.Process.Signal(syscall.SIGTERM)
	}
	for id, p := range r.procs {
		select {
		case <-p.done:
		case <-time.After(30 * time.Second):
			r.t.Errorf("%s did not stop within 30s of SIGTERM", id)
		}
	}
	var ops []history.Op
	for _, f := range r.files {
		if _, err := os.Stat(f); errors.Is(err, fs.ErrNotExist) {
			continue // a process stopped before it created its history file did nothing
		}
		ops = append(ops, readHistory(r.t, f)...)
	}
	sort.SliceStable(ops, func(i, j int) bool { return ops[i].Complete < ops[j].Complete })
	start := ops[0].Invoke
	for i := range ops {
		ops[i].ID = i
		ops[i].Invoke -= start
		ops[i].Complete -= start
	}
	return ops
}

// readHistory reads a process's history file: its ops, and its beliefs, each ending at its
// last confirmation (a belief of a process killed while it held it ends at the last one
// written before the kill).
func readHistory(t *testing.T, name string) []history.Op {
	t.Helper()
	f, err := os.Open(name)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var ops []history.Op
	beliefs := map[string]*history.Op{}
	var order []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		var e event
		if err := json.Unmarshal(sc.Bytes(), &e); err != nil {
			break // the last line of a killed process may be cut short
		}
		switch {
		case e.Belief == "":
			ops = append(ops, *e.Op)
		case e.Op != nil:
			op := *e.Op
			op.Detail = detailKilled
			beliefs[e.Belief] = &op
			order = append(order, e.Belief)
		default:
			b := beliefs[e.Belief]
			b.Complete = e.Until
			if e.End {
				b.Detail = e.Detail
			}
		}
	}
	for _, id := range order {
		ops = append(ops, *beliefs[id])
	}
	return ops
}

// killAll kills the processes still running, at the end of the test.
func (r *run) killAll() {
	for _, p := range r.procs {
		_ = p.cmd.Process.Signal(syscall.SIGCONT)
		_ = p.cmd.Process.Kill()
		<-p.done
	}
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

//go:build linux

package bench

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/prometheus/procfs"

	"github.com/raftlock/raftlock/api"
	"github.com/raftlock/raftlock/client"
)

// tcpListen is the state of a listening socket in /proc/net/tcp.
const tcpListen = 0x0a

// procNodes are the nodes of a cluster that runs as processes on this machine. A node's
// process is the one that listens on both its HTTP and its Raft address.
type procNodes struct {
	fs         procfs.FS
	members    []api.Member
	eps        []string
	supervised bool
	killed     map[int]procSpec // how to start each killed node again
}

// procSpec is how a process was started: enough to start it again the same way.
type procSpec struct {
	exe, dir    string
	args, env   []string
	output      string // the regular file its standard output went to, if any
	errorOutput string // the same for standard error
}

// findProcNodes reads the cluster's members and finds each one's process. skip says why the
// failover workload cannot run against this cluster.
func findProcNodes(ctx context.Context, endpoints []string, supervised bool, copts ...client.Option) (p *procNodes, skip string, err error) {
	fs, err := procfs.NewDefaultFS()
	if err != nil {
		return nil, fmt.Sprintf("it finds the leader's process in /proc, which is not readable here (%v)", err), nil
	}
	probe, err := client.New(endpoints, copts...)
	if err != nil {
		return nil, "", fmt.Errorf("bench: %w", err)
	}
	defer probe.Close()
	cl, err := publishedMembers(ctx, probe)
	if err != nil {
		return nil, "", err
	}
	scheme := "http"
	if u, err := url.Parse(endpoints[0]); err == nil && u.Scheme != "" {
		scheme = u.Scheme
	}
	p = &procNodes{fs: fs, members: cl.Members, supervised: supervised, killed: map[int]procSpec{}}
	for _, m := range cl.Members {
		p.eps = append(p.eps, scheme+"://"+m.HTTPAddr)
	}
	pids := make([]int, len(cl.Members))
	byPID := map[int]string{}
	for i, m := range cl.Members {
		pid, err := p.find(i)
		switch {
		case err != nil:
			skip = fmt.Sprintf("it kills the leader's process, which it cannot find for %s: %v (run it where the nodes run, as their user, or use --dev)", m.ID, err)
		case pid == os.Getpid():
			skip = fmt.Sprintf("%s runs in this process; use --dev to kill and restart nodes in it", m.ID)
		case byPID[pid] != "":
			skip = fmt.Sprintf("%s and %s run in the same process (%d, a `raftlock dev`?): killing one would kill both; use --dev", byPID[pid], m.ID, pid)
		}
		if skip != "" {
			return nil, skip, nil
		}
		pids[i], byPID[pid] = pid, m.ID
	}
	if !supervised { // else a supervisor starts them again, not the bench
		for i, pid := range pids {
			if err := p.restartable(pid); err != nil {
				return nil, fmt.Sprintf("it starts a killed node again, but cannot start %s: %v", cl.Members[i].ID, err), nil
			}
		}
	}
	return p, "", nil
}

// publishedMembers reads the cluster once every member's HTTP address is known: a follower
// publishes its own a moment after it starts.
func publishedMembers(ctx context.Context, c *client.Client) (*api.Cluster, error) {
	ctx, cancel := context.WithTimeout(ctx, failoverLimit)
	defer cancel()
	for {
		cl, err := c.Raw().Cluster(ctx)
		if err == nil && !slices.ContainsFunc(cl.Members, func(m api.Member) bool { return m.HTTPAddr == "" }) {
			return cl, nil
		}
		if !sleep(ctx, 20*time.Millisecond) {
			if err == nil {
				err = errors.New("a member's HTTP address is still unknown")
			}
			return nil, fmt.Errorf("bench: failover: reading the cluster: %w", err)
		}
	}
}

func (p *procNodes) endpoints() []string { return p.eps }

func (p *procNodes) ids() []string {
	ids := make([]string, len(p.members))
	for i, m := range p.members {
		ids[i] = m.ID
	}
	return ids
}

// leader waits until a node names a leader that answers ready.
func (p *procNodes) leader(ctx context.Context, clients []*client.Client) (int, error) {
	ids := p.ids()
	for {
		for _, c := range clients {
			cl, err := c.Raw().Cluster(ctx, client.Stale()) // that node's own view
			if err != nil || cl.Leader == "" {
				continue
			}
			if j := slices.Index(ids, cl.Leader); j >= 0 && clients[j].Raw().Ready(ctx, p.eps[j]) == nil {
				return j, nil
			}
		}
		if !sleep(ctx, failoverPoll) {
			return -1, fmt.Errorf("no node leads: %w", ctx.Err())
		}
	}
}

// kill SIGKILLs node i's process and waits until it is gone, having read how to start it
// again. It returns the time of the signal.
func (p *procNodes) kill(i int, tr *FailoverTrial) (time.Time, error) {
	pid, err := p.find(i)
	if err != nil {
		return time.Time{}, err
	}
	spec, err := p.spec(pid)
	if err != nil {
		return time.Time{}, err
	}
	at := time.Now()
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		return time.Time{}, fmt.Errorf("kill process %d: %w", pid, err)
	}
	tr.KilledPID = pid
	p.killed[i] = spec
	for p.alive(pid) {
		if time.Since(at) > 5*time.Second {
			return at, fmt.Errorf("process %d still runs 5s after SIGKILL", pid)
		}
		time.Sleep(failoverPoll)
	}
	return at, nil
}

// alive reports whether the process runs (a zombie, which has closed its sockets, does not).
func (p *procNodes) alive(pid int) bool {
	proc, err := p.fs.Proc(pid)
	if err != nil {
		return false
	}
	st, err := proc.Stat()
	return err == nil && st.State != "Z" && st.State != "X"
}

// restart starts node i's process again as it was started, unless one already listens on its
// addresses; a supervised cluster waits for its supervisor to do that instead.
func (p *procNodes) restart(ctx context.Context, i int, tr *FailoverTrial) error {
	if p.supervised {
		ctx, cancel := context.WithTimeout(ctx, failoverLimit)
		defer cancel()
		for {
			if _, err := p.find(i); err == nil {
				return nil
			}
			if !sleep(ctx, 20*time.Millisecond) {
				return fmt.Errorf("no process of %s listens again %s after the kill; without --supervised the bench starts it itself",
					p.members[i].ID, failoverLimit)
			}
		}
	}
	if _, err := p.find(i); err == nil {
		return nil // something else restarted it already
	}
	spec, ok := p.killed[i]
	if !ok {
		return fmt.Errorf("%s was not killed by the bench", p.members[i].ID)
	}
	pid, logPath, err := spec.start(p.members[i].ID)
	if err != nil {
		return err
	}
	tr.RestartedPID, tr.RestartLog = pid, logPath
	delete(p.killed, i)
	return nil
}

// find returns the process that listens on both of node i's addresses.
func (p *procNodes) find(i int) (int, error) {
	m := p.members[i]
	addrs := []string{m.HTTPAddr, m.RaftAddr}
	pids, err := p.listeners(addrs)
	if err != nil {
		return 0, err
	}
	if pids[0] != pids[1] {
		return 0, fmt.Errorf("its HTTP address %s and Raft address %s belong to different processes (%d and %d)",
			m.HTTPAddr, m.RaftAddr, pids[0], pids[1])
	}
	if pids[0] == 1 { // init holding the sockets for the node (socket activation): never kill it
		return 0, errors.New("its sockets belong to process 1")
	}
	return pids[0], nil
}

// listeners returns the process that listens on each of addrs, host:ports of this machine,
// reading the socket tables and the processes' descriptors once.
func (p *procNodes) listeners(addrs []string) ([]int, error) {
	var tables procfs.NetTCP
	for _, read := range []func() (procfs.NetTCP, error){p.fs.NetTCP, p.fs.NetTCP6} {
		lines, err := read()
		if err != nil && !errors.Is(err, os.ErrNotExist) { // no tcp6 without IPv6
			return nil, fmt.Errorf("read listening sockets: %w", err)
		}
		tables = append(tables, lines...)
	}
	owner := map[string]int{} // "socket:[inode]" of a listener of addrs[i] -> i
	for i, addr := range addrs {
		ta, err := net.ResolveTCPAddr("tcp", addr)
		if err != nil {
			return nil, err
		}
		local, err := isLocalIP(ta.IP)
		if err != nil {
			return nil, err
		}
		if !local {
			return nil, fmt.Errorf("address %s: %s is not an address of this machine", addr, ta.IP)
		}
		n := len(owner)
		for _, l := range tables {
			if l.St == tcpListen && l.LocalPort == uint64(ta.Port) && (l.LocalAddr.Equal(ta.IP) || l.LocalAddr.IsUnspecified()) {
				owner["socket:["+strconv.FormatUint(l.Inode, 10)+"]"] = i
			}
		}
		if len(owner) == n {
			return nil, fmt.Errorf("address %s: nothing listens there", addr)
		}
	}
	procs, err := p.fs.AllProcs()
	if err != nil {
		return nil, fmt.Errorf("list processes: %w", err)
	}
	pids := make([]int, len(addrs))
	for _, proc := range procs {
		targets, err := proc.FileDescriptorTargets()
		if err != nil {
			continue // gone, or another user's
		}
		for _, t := range targets {
			if i, ok := owner[t]; ok && pids[i] == 0 {
				pids[i] = proc.PID
			}
		}
	}
	for i, pid := range pids {
		if pid == 0 {
			return nil, fmt.Errorf("address %s: a socket listens there, but no process this user can see owns it", addrs[i])
		}
	}
	return pids, nil
}

// isLocalIP reports whether ip is an address of this machine.
func isLocalIP(ip net.IP) (bool, error) {
	if ip.IsLoopback() {
		return true, nil
	}
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		return false, fmt.Errorf("list this machine's addresses: %w", err)
	}
	for _, a := range addrs {
		if n, ok := a.(*net.IPNet); ok && n.IP.Equal(ip) {
			return true, nil
		}
	}
	return false, nil
}

// restartable checks that the bench can start process pid again once it has killed it.
func (p *procNodes) restartable(pid int) error {
	s, err := p.spec(pid)
	if err != nil {
		return err
	}
	if strings.Contains(s.exe, string(filepath.Separator)+"go-build") {
		return fmt.Errorf("it runs %s, a binary of `go run` that goes away with it; start the nodes from a built binary, or restart them with a supervisor (--supervised)", s.exe)
	}
	if _, err := os.Stat(s.exe); err != nil {
		return fmt.Errorf("its binary: %w", err)
	}
	return nil
}

// spec reads how process pid was started.
func (p *procNodes) spec(pid int) (procSpec, error) {
	proc, err := p.fs.Proc(pid)
	if err != nil {
		return procSpec{}, fmt.Errorf("process %d: %w", pid, err)
	}
	var s procSpec
	cmdline, err := proc.CmdLine()
	if err == nil {
		s.exe, err = proc.Executable()
	}
	if err == nil {
		s.dir, err = proc.Cwd()
	}
	if err == nil {
		s.env, err = proc.Environ()
	}
	if err != nil {
		return procSpec{}, fmt.Errorf("how process %d was started: %w", pid, err)
	}
	if len(cmdline) > 0 {
		s.args = cmdline[1:]
	}
	// A binary replaced while it ran (a rebuild) shows as "path (deleted)"; start the new one.
	s.exe = strings.TrimSuffix(s.exe, " (deleted)")
	s.output = regularFile(proc, 1)
	s.errorOutput = regularFile(proc, 2)
	return s, nil
}

// regularFile returns the path of the regular file open as fd in proc, or "".
func regularFile(proc procfs.Proc, fd int) string {
	target, err := os.Readlink(filepath.Join("/proc", strconv.Itoa(proc.PID), "fd", strconv.Itoa(fd)))
	if err != nil || !filepath.IsAbs(target) {
		return ""
	}
	if st, err := os.Stat(target); err != nil || !st.Mode().IsRegular() {
		return ""
	}
	return target
}

// start starts the process again in its own session, so that it outlives the bench, with its
// output appended to the files it wrote to, or else to a new file in the temporary directory.
// It returns the new process's pid and that file.
func (s procSpec) start(id string) (pid int, logPath string, err error) {
	logPath = s.output
	if logPath == "" {
		logPath = filepath.Join(os.TempDir(), fmt.Sprintf("raftlock-bench-%s-%d.log", id, time.Now().UnixNano()))
	}
	out, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return 0, "", fmt.Errorf("output of the restarted node: %w", err)
	}
	defer out.Close()
	errOut := out
	if s.errorOutput != "" && s.errorOutput != logPath {
		if errOut, err = os.OpenFile(s.errorOutput, os.O_WRONLY|os.O_APPEND, 0); err != nil {
			return 0, "", fmt.Errorf("error output of the restarted node: %w", err)
		}
		defer errOut.Close()
	}
	cmd := exec.Command(s.exe, s.args...)
	cmd.Dir, cmd.Env, cmd.Stdout, cmd.Stderr = s.dir, s.env, out, errOut
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		return 0, "", fmt.Errorf("restart %s: %w", id, err)
	}
	go cmd.Wait() // reaps it should it end while the bench runs
	return cmd.Process.Pid, logPath, nil
}

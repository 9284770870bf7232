package deploy

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// TestComposeClusterOnLoopback runs what compose.yaml runs, without containers: init.sh, the
// agents n1-n3 with the image's and their services' settings, the image's health check until
// they are healthy, acl-bootstrap.sh, then n4 of the `scale` profile, which joins with the
// agent token acl-bootstrap.sh wrote. Only what a container gives is replaced: each node's
// addresses by ports on 127.0.0.1 (the services' names by localhost), and the volumes'
// paths by directories of the test.
func TestComposeClusterOnLoopback(t *testing.T) {
	if testing.Short() {
		t.Skip("starts four agents")
	}
	c := newComposeRig(t)
	runScript(t, "compose/init.sh", append(c.scriptEnv(), "NODES=n1 n2 n3 n4"))
	if _, err := os.Stat(filepath.Join(c.etc, "tls", "ca-key.pem")); err == nil {
		t.Error("init.sh put the CA key where the agents read")
	}
	var nodes []*agentProc
	for i, n := range []string{"n1", "n2", "n3"} {
		nodes = append(nodes, startAgent(t, n, c.nodeEnv(n, i)))
	}
	for _, a := range nodes {
		waitHealthy(t, a)
	}
	token := c.bootstrapACL()

	n4 := startAgent(t, "n4", c.nodeEnv("n4", 3))
	waitHealthy(t, n4)
	if m := c.members(); len(m) != 4 {
		t.Fatalf("members after n4 joined: %v; want n1-n4", m)
	}

	// Replace n2, whose data is lost, as docs/operations.md does: remove the member, then
	// start it on an empty volume with the override's --join instead of --initial-cluster.
	_ = nodes[1].cmd.Process.Kill()
	<-nodes[1].exited
	deleteMember(t, fmt.Sprintf("https://localhost:%d", c.ports[0]), filepath.Join(c.etc, "tls"), token, "n2")
	if err := os.RemoveAll(filepath.Join(c.tmp, "n2")); err != nil {
		t.Fatal(err)
	}
	r := strings.NewReplacer(c.repl...)
	n2 := startAgent(t, "n2 (replaced)", append(c.nodeEnv("n2", 1), "RAFTLOCK_INITIAL_CLUSTER=", "RAFTLOCK_JOIN="+r.Replace("n1:7001,n3:7001")))
	waitHealthy(t, n2)
	if m := c.members(); len(m) != 4 {
		t.Fatalf("members after n2 was replaced: %v; want n1-n4", m)
	}
	for _, a := range []*agentProc{nodes[0], n2, nodes[2], n4} {
		a.stop(t)
	}
}

// composeRig maps compose.yaml's world onto this machine: its volumes onto directories, its
// nodes' addresses onto ports on 127.0.0.1 (repl lists each compose address and its stand-in).
type composeRig struct {
	t                     *testing.T
	tmp, etc, admin, path string
	ports                 []int // HTTP of n1-n4, then Raft of n1-n4
	repl                  []string
	agents                map[string]agentSettings
}

func newComposeRig(t *testing.T) *composeRig {
	tmp := t.TempDir()
	c := &composeRig{t: t, tmp: tmp, etc: filepath.Join(tmp, "etc"), admin: filepath.Join(tmp, "admin"),
		path: filepath.Join(tmp, "bin"), ports: freePorts(t, 8), agents: composeAgents(t)}
	if err := os.MkdirAll(c.path, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(bin, filepath.Join(c.path, "raftlock")); err != nil {
		t.Fatal(err)
	}
	for i, n := range []string{"n1", "n2", "n3", "n4"} {
		c.repl = append(c.repl, fmt.Sprintf("172.30.71.%d:7101", 11+i), fmt.Sprintf("127.0.0.1:%d", c.ports[4+i]),
			n+":7001", fmt.Sprintf("localhost:%d", c.ports[i]))
	}
	c.repl = append(c.repl, "/etc/raftlock", c.etc)
	return c
}

// scriptEnv is the environment of the setup scripts: the volumes and the binary.
func (c *composeRig) scriptEnv() []string {
	return []string{"ETC=" + c.etc, "ADMIN=" + c.admin, fmt.Sprintf("OWNER=%d:%d", os.Getuid(), os.Getgid()),
		"PATH=" + c.path + ":" + os.Getenv("PATH")}
}

// nodeEnv is the environment of compose service name, the i-th node: the image's and the
// service's settings, its addresses and data dir mapped.
func (c *composeRig) nodeEnv(name string, i int) []string {
	a, ok := c.agents[name]
	if !ok {
		c.t.Fatalf("compose.yaml has no agent %s", name)
	}
	env := merge(imageEnv(c.t), a.env)
	env["RAFTLOCK_HTTP_ADDR"] = fmt.Sprintf("127.0.0.1:%d", c.ports[i])
	env["RAFTLOCK_RAFT_ADDR"] = fmt.Sprintf("127.0.0.1:%d", c.ports[4+i])
	env["RAFTLOCK_DATA_DIR"] = filepath.Join(c.tmp, name)
	r := strings.NewReplacer(c.repl...)
	var out []string
	for k, v := range env {
		out = append(out, k+"="+r.Replace(v))
	}
	return out
}

// bootstrapACL runs acl-bootstrap.sh twice (the second must change nothing), checks that ACLs
// are on, and returns the management token.
func (c *composeRig) bootstrapACL() string {
	t := c.t
	endpoints := fmt.Sprintf("RAFTLOCK_ENDPOINTS=https://localhost:%d,https://localhost:%d,https://localhost:%d", c.ports[0], c.ports[1], c.ports[2])
	runScript(t, "compose/acl-bootstrap.sh", append(c.scriptEnv(), endpoints))
	agentYAML, _ := os.ReadFile(filepath.Join(c.etc, "agent.yaml"))
	token, _ := os.ReadFile(filepath.Join(c.admin, "management-token"))
	if !strings.HasPrefix(string(agentYAML), "agent-token: ") || len(bytes.TrimSpace(token)) == 0 {
		t.Fatalf("after acl-bootstrap.sh: agent.yaml %q, management token %d bytes", agentYAML, len(token))
	}
	runScript(t, "compose/acl-bootstrap.sh", append(c.scriptEnv(), endpoints))
	if again, _ := os.ReadFile(filepath.Join(c.etc, "agent.yaml")); !bytes.Equal(again, agentYAML) {
		t.Error("a second acl-bootstrap.sh replaced the agent token")
	}
	tlsDir := filepath.Join(c.etc, "tls")
	cli := []string{endpoints, "RAFTLOCK_CA_FILE=" + filepath.Join(tlsDir, "ca.pem"),
		"RAFTLOCK_CERT_FILE=" + filepath.Join(tlsDir, "client.pem"), "RAFTLOCK_KEY_FILE=" + filepath.Join(tlsDir, "client-key.pem")}
	if out, err := runBin(cli, "status"); err == nil {
		t.Fatalf("status without a token succeeded: ACLs are off\n%s", out)
	}
	return strings.TrimSpace(string(token))
}

// members returns the member ids `status -o json` lists, run through the admin service.
func (c *composeRig) members() []string {
	out := runAdmin(c.t, strings.NewReplacer(append(c.repl, "/admin", c.admin)...), c.path, "status", "-o", "json")
	var st struct{ Members []struct{ ID string } }
	if err := json.Unmarshal(out, &st); err != nil {
		c.t.Fatalf("status -o json: %v\n%s", err, out)
	}
	var ids []string
	for _, m := range st.Members {
		ids = append(ids, m.ID)
	}
	return ids
}

// deleteMember removes a member as the documented curl line does: DELETE
// /v1/cluster/members/ID with the client certificate of dir and the token.
func deleteMember(t *testing.T, endpoint, dir, token, id string) {
	t.Helper()
	pool := x509.NewCertPool()
	ca, err := os.ReadFile(filepath.Join(dir, "ca.pem"))
	if err != nil || !pool.AppendCertsFromPEM(ca) {
		t.Fatalf("reading the CA: %v", err)
	}
	pair, err := tls.LoadX509KeyPair(filepath.Join(dir, "client.pem"), filepath.Join(dir, "client-key.pem"))
	if err != nil {
		t.Fatal(err)
	}
	hc := &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{
		TLSClientConfig: &tls.Config{RootCAs: pool, Certificates: []tls.Certificate{pair}}}}
	defer hc.CloseIdleConnections()
	// The node removed may have been the leader: until another leads, the answer is 503.
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(200 * time.Millisecond) {
		req, err := http.NewRequest(http.MethodDelete, endpoint+"/v1/cluster/members/"+id, nil)
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("X-Raftlock-Token", token)
		resp, err := hc.Do(req)
		if err != nil {
			t.Fatalf("removing %s: %v", id, err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		switch {
		case resp.StatusCode == http.StatusOK:
			return
		case resp.StatusCode != http.StatusServiceUnavailable || time.Now().After(deadline):
			t.Fatalf("removing %s: %s %s", id, resp.Status, body)
		}
	}
}

func runScript(t *testing.T, script string, env []string) {
	t.Helper()
	cmd := exec.Command("sh", script)
	cmd.Env = append(os.Environ(), env...)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("%s: %v\n%s", script, err, out)
	}
}

// runAdmin runs compose's admin service (its entrypoint, with compose's $$ unescaped, and its
// environment, with paths and addresses mapped by r) with args as its command.
func runAdmin(t *testing.T, r *strings.Replacer, path string, args ...string) []byte {
	t.Helper()
	svc := composeServices(t)["admin"]
	entry := strs(get(svc, "entrypoint"))
	for i := range entry {
		entry[i] = r.Replace(strings.ReplaceAll(entry[i], "$$", "$"))
	}
	env := []string{"PATH=" + path + ":" + os.Getenv("PATH")}
	for k, v := range get(svc, "environment").(map[string]any) {
		env = append(env, k+"="+r.Replace(str(v)))
	}
	cmd := exec.Command(entry[0], append(entry[1:], args...)...)
	cmd.Env = append(withoutRaftlockEnv(), env...)
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("admin %v: %v", args, err)
	}
	return out
}

// runBin runs the raftlock binary with env added to a RAFTLOCK_*-free environment.
func runBin(env []string, args ...string) ([]byte, error) {
	cmd := exec.Command(bin, args...)
	cmd.Env = append(withoutRaftlockEnv(), env...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	if err != nil {
		return append(stdout.Bytes(), stderr.Bytes()...), err
	}
	return stdout.Bytes(), nil
}

func withoutRaftlockEnv() []string {
	var out []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "RAFTLOCK_") {
			out = append(out, kv)
		}
	}
	return out
}

// agentProc is a running `raftlock agent` process and its environment.
type agentProc struct {
	name   string
	env    []string
	cmd    *exec.Cmd
	log    *lockedBuffer
	exited chan struct{} // closed once the process has ended; err is then set
	err    error
}

type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// startAgent runs the image's default command, `raftlock agent`, with env; killed when the test ends.
func startAgent(t *testing.T, name string, env []string) *agentProc {
	t.Helper()
	a := &agentProc{name: name, env: env, log: &lockedBuffer{}, exited: make(chan struct{})}
	a.cmd = exec.Command(bin, "agent")
	a.cmd.Env = append(withoutRaftlockEnv(), env...)
	a.cmd.Stdout, a.cmd.Stderr = a.log, a.log
	if err := a.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		a.err = a.cmd.Wait()
		close(a.exited)
	}()
	t.Cleanup(func() {
		select {
		case <-a.exited:
		default:
			_ = a.cmd.Process.Kill()
			<-a.exited
		}
		if t.Failed() {
			t.Logf("%s's log:\n%s", name, a.log)
		}
	})
	return a
}

// waitHealthy runs the image's HEALTHCHECK command in the agent's environment until it passes.
func waitHealthy(t *testing.T, a *agentProc) {
	t.Helper()
	df, err := parseDockerfile("docker/Dockerfile")
	if err != nil {
		t.Fatal(err)
	}
	hc, _ := df.final().last("HEALTHCHECK")
	_, probe, _ := strings.Cut(hc.args, "CMD ")
	waitProbe(t, a, a.env, execForm(t, instruction{cmd: "HEALTHCHECK", args: probe}))
}

// waitProbe runs probe (argv[0] the raftlock binary of an image) with env until it passes,
// failing the test if the agent exits first or 30s pass.
func waitProbe(t *testing.T, a *agentProc, env, probe []string) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		out, err := runBin(env, probe[1:]...)
		if err == nil {
			return
		}
		select {
		case <-a.exited:
			t.Fatalf("%s exited (%v) before %v passed: %s", a.name, a.err, probe[1:], out)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: %v never passed: %v\n%s", a.name, probe[1:], err, out)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// stop sends SIGTERM, as docker stop and the kubelet do, and waits for a clean exit.
func (a *agentProc) stop(t *testing.T) {
	t.Helper()
	_ = a.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-a.exited:
		if a.err != nil {
			t.Errorf("%s exited after SIGTERM with %v", a.name, a.err)
		}
	case <-time.After(30 * time.Second):
		t.Errorf("%s did not stop within 30s of SIGTERM", a.name)
		_ = a.cmd.Process.Kill()
		<-a.exited
	}
}

// freePorts returns n ports free on 127.0.0.1 right now.
func freePorts(t *testing.T, n int) []int {
	t.Helper()
	var lns []net.Listener
	var ports []int
	for range n {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		lns = append(lns, ln)
		ports = append(ports, ln.Addr().(*net.TCPAddr).Port)
	}
	for _, ln := range lns {
		ln.Close()
	}
	return ports
}

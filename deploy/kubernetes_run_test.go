package deploy

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/raftlock/raftlock/internal/testkit"
)

// TestKubernetesPodsOnLoopback runs the pods of kubernetes/five as processes, as
// docs/operations.md walks through: the certificates of tls-secret.sh, raftlock-0..2 with the
// StatefulSet's environment and their members.yaml files, the readiness probe until they are
// ready, the ACL bootstrap through raftlock-0's node certificate, the agent token, a rolling
// restart that gives it to them, then raftlock-3 and raftlock-4, which join. Only what the
// cluster gives is replaced: Service addresses by ports on 127.0.0.1, mounts by directories.
// The probes keep the pod's own --advertise-http, so they check the certificate for the name
// of the pod's Service, as in a pod. (Here every name becomes an IP address before the agent
// sees it, so the followers can record their HTTP addresses before they have the agent token,
// which they cannot in a real cluster: that part of the walk-through is not shown.)
func TestKubernetesPodsOnLoopback(t *testing.T) {
	if testing.Short() {
		t.Skip("starts five agents")
	}
	objs := kustomized(t, "kubernetes/five") // skips without kubectl, which tls-secret.sh needs too
	tmp := t.TempDir()
	certs := filepath.Join(tmp, "certs")
	script := exec.Command("sh", "kubernetes/tls-secret.sh", certs, "ns1", "5")
	script.Env = append(os.Environ(), "RAFTLOCK="+bin)
	if out, err := script.CombinedOutput(); err != nil {
		t.Fatalf("tls-secret.sh: %v\n%s", err, out)
	}

	sts := objs["StatefulSet/raftlock"]
	c := get(sts, "spec", "template", "spec", "containers", 0)
	members := get(objs["ConfigMap/raftlock-members"], "data").(map[string]any)
	tokenVar := secretVar(c, "raftlock-agent-token")
	ports := freePorts(t, 10)
	repl := []string{"/etc/raftlock/tls", certs}
	for i := range 5 {
		pod := fmt.Sprintf("raftlock-%d", i)
		http, raft := fmt.Sprintf("127.0.0.1:%d", ports[i]), fmt.Sprintf("127.0.0.1:%d", ports[5+i])
		repl = append(repl, pod+".ns1.svc:7001", http, pod+".ns1.svc:7101", raft, pod+":7101", raft)
	}
	repl = append(repl, "raftlock:7001", fmt.Sprintf("127.0.0.1:%d", ports[0])) // the client Service
	r := strings.NewReplacer(repl...)
	// settings is pod i's environment; probe's keeps the pod's --advertise-http.
	settings := func(i int, agentToken string) (agent, probe []string) {
		pod := fmt.Sprintf("raftlock-%d", i)
		conf := filepath.Join(tmp, pod+".yaml")
		if err := os.WriteFile(conf, []byte(r.Replace(str(members[pod+".yaml"]))), 0o600); err != nil {
			t.Fatal(err)
		}
		env := merge(imageEnv(t), podEnv(t, c, pod, "ns1"))
		env["RAFTLOCK_CONFIG"] = conf
		env["RAFTLOCK_DATA_DIR"] = filepath.Join(tmp, pod)
		env["RAFTLOCK_HTTP_ADDR"] = fmt.Sprintf("127.0.0.1:%d", ports[i])
		env["RAFTLOCK_RAFT_ADDR"] = fmt.Sprintf("127.0.0.1:%d", ports[5+i])
		if agentToken != "" {
			env[tokenVar] = agentToken // from the Secret raftlock-agent-token
		}
		for k, v := range env {
			agent = append(agent, k+"="+r.Replace(v))
			if k != "RAFTLOCK_ADVERTISE_HTTP" {
				v = r.Replace(v)
			}
			probe = append(probe, k+"="+v)
		}
		return agent, probe
	}
	ready := strs(get(c, "readinessProbe", "exec", "command"))
	pods := make([]*agentProc, 5)
	start := func(i int, token string) {
		agent, probe := settings(i, token)
		pods[i] = startAgent(t, fmt.Sprintf("raftlock-%d", i), agent)
		waitProbe(t, pods[i], probe, ready)
	}
	for i := range 3 {
		agent, _ := settings(i, "")
		pods[i] = startAgent(t, fmt.Sprintf("raftlock-%d", i), agent)
	}
	for i := range 3 {
		_, probe := settings(i, "")
		waitProbe(t, pods[i], probe, ready)
	}

	cli, agentToken := bootstrapThroughPod(t, certs, ports[0])

	// `kubectl rollout restart`: one pod at a time, highest ordinal first, each once ready.
	for i := 2; i >= 0; i-- {
		pods[i].stop(t)
		start(i, agentToken)
	}
	// Grown to five: the overlay's two pods join through the client Service.
	start(3, agentToken)
	start(4, agentToken)

	checkFiveReady(t, cli, r)
	for _, p := range pods {
		p.stop(t)
	}
}

// bootstrapThroughPod bootstraps the ACLs as `kubectl exec raftlock-0 -- raftlock acl
// bootstrap` does, with the pod's node certificate, then makes the agent token from outside
// with the client certificate; it returns the CLI's environment (management token included)
// and the agent token's secret.
func bootstrapThroughPod(t *testing.T, certs string, port int) (cli []string, agentToken string) {
	t.Helper()
	node := func(f string) string { return filepath.Join(certs, f) }
	out, err := runBin(nil, "acl", "bootstrap", "-o", "json", "--endpoints", fmt.Sprintf("https://localhost:%d", port),
		"--ca-file", node("ca.pem"), "--cert-file", node("raftlock-0.pem"), "--key-file", node("raftlock-0-key.pem"))
	if err != nil {
		t.Fatalf("acl bootstrap: %v\n%s", err, out)
	}
	var boot struct {
		SecretID string `json:"secret_id"`
	}
	if err := json.Unmarshal(out, &boot); err != nil || boot.SecretID == "" {
		t.Fatalf("acl bootstrap -o json: %s (%v)", out, err)
	}
	cli = []string{fmt.Sprintf("RAFTLOCK_ENDPOINTS=https://localhost:%d", port), "RAFTLOCK_CA_FILE=" + node("ca.pem"),
		"RAFTLOCK_CERT_FILE=" + node("client.pem"), "RAFTLOCK_KEY_FILE=" + node("client-key.pem"), "RAFTLOCK_TOKEN=" + boot.SecretID}
	if out, err := runBin(cli, "acl", "policy", "create", "agent", "--operator", "write"); err != nil {
		t.Fatalf("acl policy create: %v\n%s", err, out)
	}
	out, err = runBin(cli, "acl", "token", "create", "--policy", "agent", "--description", "raftlock agents", "-o", "json")
	var agent struct {
		SecretID string `json:"secret_id"`
	}
	if err != nil || json.Unmarshal(out, &agent) != nil || agent.SecretID == "" {
		t.Fatalf("acl token create: %v\n%s", err, out)
	}
	return cli, agent.SecretID
}

// checkFiveReady checks that the cluster has five ready voters, each of which recorded the
// HTTP address it advertises (mapped by r).
func checkFiveReady(t *testing.T, cli []string, r *strings.Replacer) {
	t.Helper()
	// A joined pod is ready as a non-voter first; the leader promotes it once it has caught
	// up, asynchronously (its promotion loop asks every second), so wait for that.
	testkit.Until(t, 30*time.Second, "five ready voters", func() error {
		out, err := runBin(cli, "status", "-o", "json")
		var st struct {
			Members []struct {
				ID, Health, Suffrage string
				HTTPAddr             string `json:"http_addr"`
			}
		}
		if err != nil || json.Unmarshal(out, &st) != nil {
			return fmt.Errorf("status: %v\n%s", err, out)
		}
		if len(st.Members) != 5 {
			return fmt.Errorf("members: %+v; want raftlock-0..4", st.Members)
		}
		for _, m := range st.Members {
			if want := r.Replace(m.ID + ".ns1.svc:7001"); m.Suffrage != "voter" || m.Health != "ready" || m.HTTPAddr != want {
				return fmt.Errorf("member %+v: want a ready voter that published %s (its Service's address, here)", m, want)
			}
		}
		return nil
	})
}

// secretVar returns the name of the container's variable that comes from the Secret secret.
func secretVar(c any, secret string) string {
	for _, e := range get(c, "env").([]any) {
		if str(get(e, "valueFrom", "secretKeyRef", "name")) == secret {
			return str(get(e, "name"))
		}
	}
	return ""
}

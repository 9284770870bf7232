package deploy

import (
	"crypto/x509"
	"encoding/base64"
	"encoding/pem"
	"fmt"
	"maps"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"
)

// k8sObjects returns every object of the base manifests, by kind and name, as the files hold
// them (no kustomize needed).
func k8sObjects(t *testing.T) map[string]map[string]any {
	t.Helper()
	kust := yamlDocs(t, "kubernetes/base/kustomization.yaml")[0]
	out := map[string]map[string]any{}
	files, _ := filepath.Glob("kubernetes/base/*.yaml")
	for _, f := range files {
		if filepath.Base(f) == "kustomization.yaml" {
			continue
		}
		if !slices.Contains(strs(kust["resources"]), filepath.Base(f)) {
			t.Errorf("%s is not in kustomization.yaml's resources", f)
		}
		for _, d := range yamlDocs(t, f) {
			out[str(d["kind"])+"/"+str(get(d, "metadata", "name"))] = d
		}
	}
	return out
}

// kustomized renders a kustomization with `kubectl kustomize`, by kind and name.
func kustomized(t *testing.T, dir string) map[string]map[string]any {
	t.Helper()
	kubectl, err := exec.LookPath("kubectl")
	if err != nil {
		t.Skipf("kubectl is not installed: %s is not rendered", dir)
	}
	b, err := exec.Command(kubectl, "kustomize", dir).Output()
	if err != nil {
		t.Fatalf("kubectl kustomize %s: %v", dir, err)
	}
	file := filepath.Join(t.TempDir(), "rendered.yaml")
	if err := os.WriteFile(file, b, 0o600); err != nil {
		t.Fatal(err)
	}
	out := map[string]map[string]any{}
	for _, d := range yamlDocs(t, file) {
		out[str(d["kind"])+"/"+str(get(d, "metadata", "name"))] = d
	}
	return out
}

func TestKubernetesManifests(t *testing.T) { checkManifests(t, k8sObjects(t), true) }

func TestKubernetesKustomized(t *testing.T) {
	checkManifests(t, kustomized(t, "kubernetes/base"), false)
	five := kustomized(t, "kubernetes/five")
	if n := get(five["StatefulSet/raftlock"], "spec", "replicas"); n != 5 {
		t.Fatalf("kubernetes/five: %v replicas; want 5", n)
	}
	checkManifests(t, five, false)
}

// The one-machine overlay only prefers one pod per machine (a trial on kind or minikube); the
// base and five require it (checkContainer).
func TestKubernetesOneMachineOverlay(t *testing.T) {
	sts := kustomized(t, "kubernetes/one-machine")["StatefulSet/raftlock"]
	anti := get(sts, "spec", "template", "spec", "affinity", "podAntiAffinity")
	if get(anti, "requiredDuringSchedulingIgnoredDuringExecution") != nil {
		t.Fatalf("the one-machine overlay still requires one pod per machine: %v", anti)
	}
	pref, _ := get(anti, "preferredDuringSchedulingIgnoredDuringExecution").([]any)
	if len(pref) != 1 || str(get(pref[0], "podAffinityTerm", "topologyKey")) != "kubernetes.io/hostname" {
		t.Fatalf("the one-machine overlay does not prefer one pod per machine: %v", anti)
	}
}

var k8sVarRef = regexp.MustCompile(`\$\(([A-Za-z_][A-Za-z0-9_]*)\)`)

// podEnv resolves a container's env for one pod as the kubelet does: $(VAR) of a variable
// defined earlier is replaced; fieldRefs give the pod's name and namespace; secrets are left out.
func podEnv(t *testing.T, c any, pod, ns string) map[string]string {
	t.Helper()
	env := map[string]string{}
	for _, e := range get(c, "env").([]any) {
		name := str(get(e, "name"))
		switch field := str(get(e, "valueFrom", "fieldRef", "fieldPath")); {
		case field == "metadata.name":
			env[name] = pod
		case field == "metadata.namespace":
			env[name] = ns
		case get(e, "valueFrom", "secretKeyRef") != nil:
		case get(e, "valueFrom", "resourceFieldRef") != nil:
			env[name] = resourceField(t, c, get(e, "valueFrom", "resourceFieldRef"))
		default:
			env[name] = k8sVarRef.ReplaceAllStringFunc(str(get(e, "value")), func(ref string) string {
				if v, ok := env[ref[2:len(ref)-1]]; ok {
					return v
				}
				return ref
			})
		}
	}
	return env
}

// quantity returns a Kubernetes memory quantity (plain bytes, or Ki, Mi, Gi) in bytes.
func quantity(t *testing.T, q string) int64 {
	t.Helper()
	mult := int64(1)
	for suffix, m := range map[string]int64{"Ki": 1 << 10, "Mi": 1 << 20, "Gi": 1 << 30} {
		if strings.HasSuffix(q, suffix) {
			q, mult = strings.TrimSuffix(q, suffix), m
		}
	}
	n, err := strconv.ParseInt(q, 10, 64)
	if err != nil {
		t.Fatalf("memory quantity %q: %v", q, err)
	}
	return n * mult
}

// resourceField resolves a downward API resourceFieldRef of container c as the kubelet does
// for a memory resource: the container's value divided by the divisor, rounded up.
func resourceField(t *testing.T, c, ref any) string {
	t.Helper()
	if n := str(get(ref, "containerName")); n != "" && n != str(get(c, "name")) {
		t.Fatalf("resourceFieldRef names container %q, not %q", n, get(c, "name"))
	}
	res := str(get(ref, "resource"))
	kind, what, _ := strings.Cut(res, ".")
	q := str(get(c, "resources", kind, what))
	if q == "" {
		t.Fatalf("resourceFieldRef %s: the container sets no %s", res, res)
	}
	div := int64(1)
	if d := str(get(ref, "divisor")); d != "" {
		div = quantity(t, d)
	}
	v := quantity(t, q)
	return strconv.FormatInt((v+div-1)/div, 10)
}

// goMemLimit matches what the Go runtime takes as GOMEMLIMIT: a number of bytes with an
// optional unit.
var goMemLimit = regexp.MustCompile(`^[0-9]+(B|KiB|MiB|GiB|TiB)?$`)

// checkManifests checks a cluster's objects; withSecret also runs tls-secret.sh for it.
func checkManifests(t *testing.T, objs map[string]map[string]any, withSecret bool) {
	t.Helper()
	sts, ok := objs["StatefulSet/raftlock"]
	if !ok {
		t.Fatalf("no StatefulSet raftlock among %v", keys(objs))
	}
	checkSet(t, objs, sts)
	c := get(sts, "spec", "template", "spec", "containers", 0)
	checkContainer(t, sts, c)
	checkPods(t, objs, sts, c, withSecret)
}

// checkSet checks the objects around the StatefulSet: selectors, Services, the budget.
func checkSet(t *testing.T, objs map[string]map[string]any, sts map[string]any) {
	t.Helper()
	labels := get(sts, "spec", "template", "metadata", "labels").(map[string]any)
	matches := func(sel any) bool {
		m, _ := sel.(map[string]any)
		for k, v := range m {
			if k != "statefulset.kubernetes.io/pod-name" && labels[k] != v {
				return false
			}
		}
		return len(m) > 0
	}
	if !matches(get(sts, "spec", "selector", "matchLabels")) {
		t.Error("the StatefulSet's selector does not match its pods' labels")
	}
	headless := objs["Service/"+str(get(sts, "spec", "serviceName"))]
	if str(get(headless, "spec", "clusterIP")) != "None" || get(headless, "spec", "publishNotReadyAddresses") != true {
		t.Errorf("serviceName %q: want a headless Service that publishes pods before they are ready", get(sts, "spec", "serviceName"))
	}
	if p := str(get(sts, "spec", "podManagementPolicy")); p != "Parallel" {
		t.Errorf("podManagementPolicy %q: an ordered start waits forever for a first pod that cannot be ready alone", p)
	}
	pdb := objs["PodDisruptionBudget/raftlock"]
	if str(get(pdb, "spec", "maxUnavailable")) != "1" || !matches(get(pdb, "spec", "selector", "matchLabels")) {
		t.Errorf("the PodDisruptionBudget must allow one pod down (maxUnavailable 1) and select the pods")
	}
	if !matches(get(objs["Service/raftlock"], "spec", "selector")) || get(objs["Service/raftlock"], "spec", "publishNotReadyAddresses") == true {
		t.Error("the client Service raftlock must select the pods, and only ready ones")
	}
}

// checkContainer checks the agent container: its command, probes, variables and secrets.
func checkContainer(t *testing.T, sts map[string]any, c any) {
	t.Helper()
	args := strs(get(c, "args"))
	checkCommand(t, "StatefulSet args", append([]string{"raftlock"}, args...))
	for probe, want := range map[string]string{"readinessProbe": "/v1/ready", "livenessProbe": "/v1/health", "startupProbe": "/v1/health"} {
		cmd := strs(get(c, probe, "exec", "command"))
		checkCommand(t, "StatefulSet "+probe, cmd)
		if ready := slices.Contains(cmd, "--ready"); ready != (want == "/v1/ready") || len(cmd) < 2 || cmd[1] != "health" {
			t.Errorf("%s runs %v; want raftlock health (%s)", probe, cmd, want)
		}
	}
	var vars []string
	secrets := map[string]bool{}
	for _, e := range get(c, "env").([]any) {
		if n := str(get(e, "name")); strings.HasPrefix(n, "RAFTLOCK_") {
			vars = append(vars, n)
		}
		if s := str(get(e, "valueFrom", "secretKeyRef", "name")); s != "" {
			secrets[s] = true
		}
	}
	checkAgentVars(t, "StatefulSet env", vars)
	// The Go runtime's memory limit follows the container's (downward API).
	env := podEnv(t, c, "raftlock-0", "ns1")
	limit := str(get(c, "resources", "limits", "memory"))
	if m := env["GOMEMLIMIT"]; !goMemLimit.MatchString(m) || limit == "" || !strings.HasSuffix(m, "MiB") ||
		quantity(t, strings.TrimSuffix(m, "B")) != quantity(t, limit) {
		t.Errorf("GOMEMLIMIT is %q for a container limit of %q; want the limit, as the Go runtime reads it", m, limit)
	}
	// One pod per machine, required: two of three pods on one machine lose the quorum with it.
	anti := get(sts, "spec", "template", "spec", "affinity", "podAntiAffinity", "requiredDuringSchedulingIgnoredDuringExecution")
	if terms, _ := anti.([]any); len(terms) != 1 || str(get(terms[0], "topologyKey")) != "kubernetes.io/hostname" ||
		str(get(terms[0], "labelSelector", "matchLabels", "app.kubernetes.io/name")) != "raftlock" {
		t.Errorf("the pods' anti-affinity by kubernetes.io/hostname is not required: %v", get(sts, "spec", "template", "spec", "affinity"))
	}
	// A stop a restart cannot cure (agent.ExitStorageFailure, agent.ExitRefused) says why in
	// the pod's status, not only in logs that the restart rotates.
	if p := str(get(c, "terminationMessagePolicy")); p != "FallbackToLogsOnError" {
		t.Errorf("terminationMessagePolicy %q; want FallbackToLogsOnError", p)
	}
	for _, v := range get(sts, "spec", "template", "spec", "volumes").([]any) {
		if s := str(get(v, "secret", "secretName")); s != "" {
			secrets[s] = true
		}
	}
	if !secrets["raftlock-tls"] || !secrets["raftlock-agent-token"] {
		t.Errorf("secrets used %v; want raftlock-tls (TLS files) and raftlock-agent-token", keys(secrets))
	}
}

// checkPods checks each pod's settings as the agent loads them, with its members file.
func checkPods(t *testing.T, objs map[string]map[string]any, sts map[string]any, c any, withSecret bool) {
	t.Helper()
	args := strs(get(c, "args"))
	members := get(objs["ConfigMap/raftlock-members"], "data").(map[string]any)
	replicas := get(sts, "spec", "replicas").(int)
	grace := get(sts, "spec", "template", "spec", "terminationGracePeriodSeconds").(int)
	var bootstrap map[string]string
	for i := range replicas {
		pod := fmt.Sprintf("raftlock-%d", i)
		svc := objs["Service/"+pod]
		if get(svc, "spec", "publishNotReadyAddresses") != true || str(get(svc, "spec", "selector", "statefulset.kubernetes.io/pod-name")) != pod {
			t.Errorf("Service %s: want one that selects pod %s, ready or not", pod, pod)
		}
		env := merge(imageEnv(t), podEnv(t, c, pod, "ns1"))
		delete(env, "RAFTLOCK_CONFIG")
		cfg := validate(t, agentSettings{where: "pod " + pod, args: args, env: env, config: str(members[pod+".yaml"])})
		if cfg.ID != pod {
			t.Errorf("pod %s: --id %q; want the pod's name", pod, cfg.ID)
		}
		for name, adv := range map[string]string{"raft": cfg.AdvertiseRaft, "http": cfg.AdvertiseHTTP} {
			host, port, _ := net.SplitHostPort(adv)
			if host != pod+".ns1.svc" || !servesPort(svc, name, port) || !servesPort(c, name, port) {
				t.Errorf("pod %s: advertises %s %s; want its own Service's, whose %s port the container serves", pod, name, adv, name)
			}
		}
		for id, addr := range cfg.InitialCluster {
			host, port, _ := net.SplitHostPort(addr)
			ord, err := strconv.Atoi(strings.TrimPrefix(id, "raftlock-"))
			if host != id || !servesPort(objs["Service/"+host], "raft", port) || err != nil || ord >= replicas {
				t.Errorf("pod %s: --initial-cluster %s=%s is not the Service of a pod of the set", pod, id, addr)
			}
		}
		for _, j := range cfg.Join {
			if host, port, _ := net.SplitHostPort(j); !servesPort(objs["Service/"+host], "http", port) {
				t.Errorf("pod %s: --join %s is not a Service's API port", pod, j)
			}
		}
		if len(cfg.InitialCluster) > 0 {
			if bootstrap == nil {
				bootstrap = cfg.InitialCluster
			} else if !maps.Equal(bootstrap, cfg.InitialCluster) {
				t.Errorf("pod %s: --initial-cluster %v differs from another pod's %v", pod, cfg.InitialCluster, bootstrap)
			}
		}
		if len(cfg.InitialCluster) == 0 && len(cfg.Join) == 0 {
			t.Errorf("pod %s: neither --initial-cluster nor --join", pod)
		}
		if float64(grace) <= cfg.ShutdownTimeout.Seconds() {
			t.Errorf("terminationGracePeriodSeconds %d must exceed --shutdown-timeout %v", grace, cfg.ShutdownTimeout)
		}
		if i == 0 {
			mountsDataDir := false
			claim := str(get(sts, "spec", "volumeClaimTemplates", 0, "metadata", "name"))
			for _, m := range get(c, "volumeMounts").([]any) {
				mountsDataDir = mountsDataDir || str(get(m, "name")) == claim && strings.HasPrefix(cfg.DataDir, str(get(m, "mountPath")))
			}
			if !mountsDataDir {
				t.Errorf("the data dir %s is not on the volume claim %q", cfg.DataDir, claim)
			}
			if withSecret {
				checkTLSSecret(t, replicas, env)
			}
		}
	}
}

// checkTLSSecret runs tls-secret.sh for namespace ns1 and checks that the Secret holds every file
// the pods name, without the CA key, and that each node certificate is valid for the names
// clients and the probes check.
func checkTLSSecret(t *testing.T, replicas int, env map[string]string) {
	t.Helper()
	if _, err := exec.LookPath("kubectl"); err != nil {
		t.Log("kubectl is not installed: tls-secret.sh is not run")
		return
	}
	dir := t.TempDir()
	cmd := exec.Command("sh", "kubernetes/tls-secret.sh", dir, "ns1", fmt.Sprint(replicas))
	cmd.Env = append(os.Environ(), "RAFTLOCK="+bin)
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("tls-secret.sh: %v", err)
	}
	var secret struct {
		Kind string
		Data map[string]string
	}
	if err := yaml.Unmarshal(out, &secret); err != nil || secret.Kind != "Secret" {
		t.Fatalf("tls-secret.sh printed no Secret (%v):\n%s", err, out)
	}
	file := func(name string) []byte {
		b, err := base64.StdEncoding.DecodeString(secret.Data[name])
		if err != nil || len(b) == 0 {
			t.Fatalf("the Secret has no %s", name)
		}
		return b
	}
	if _, ok := secret.Data["ca-key.pem"]; ok {
		t.Error("the Secret holds the CA's key")
	}
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(file(filepath.Base(env["RAFTLOCK_TLS_CA_FILE"])))
	for i := range replicas {
		pod := fmt.Sprintf("raftlock-%d", i)
		block, _ := pem.Decode(file(pod + ".pem"))
		file(pod + "-key.pem")
		if block == nil {
			t.Fatalf("%s.pem holds no PEM", pod)
		}
		cert, err := x509.ParseCertificate(block.Bytes)
		if err != nil {
			t.Fatal(err)
		}
		for _, name := range []string{pod + ".ns1.svc", "raftlock.ns1.svc", "raftlock", "localhost"} {
			if _, err := cert.Verify(x509.VerifyOptions{DNSName: name, Roots: roots, CurrentTime: time.Now(),
				KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth}}); err != nil {
				t.Errorf("%s's certificate for %s: %v", pod, name, err)
			}
		}
	}
}

// servesPort reports whether a Service (ports[].port) or a container (ports[].containerPort)
// has a port of that name and number.
func servesPort(obj any, name, port string) bool {
	list := get(obj, "spec", "ports")
	if list == nil {
		list = get(obj, "ports")
	}
	l, _ := list.([]any)
	for _, p := range l {
		n := get(p, "port")
		if n == nil {
			n = get(p, "containerPort")
		}
		if str(get(p, "name")) == name && str(n) == port {
			return true
		}
	}
	return false
}

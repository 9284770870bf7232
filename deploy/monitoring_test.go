package deploy

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"go.yaml.in/yaml/v3"

	"github.com/raftlock/raftlock/internal/testkit"
)

const (
	alertsFile    = "monitoring/alerts.yml"
	alertTests    = "monitoring/tests"
	dashboardFile = "monitoring/grafana-dashboard.json"
)

// ruleFile is the part of a Prometheus rule file the tests read.
type ruleFile struct {
	Groups []struct {
		Name  string `yaml:"name"`
		Rules []struct {
			Alert  string `yaml:"alert"`
			Record string `yaml:"record"`
			Expr   string `yaml:"expr"`
		} `yaml:"rules"`
	} `yaml:"groups"`
}

func readRules(t *testing.T) ruleFile {
	t.Helper()
	b, err := os.ReadFile(alertsFile)
	if err != nil {
		t.Fatal(err)
	}
	var rf ruleFile
	if err := yaml.Unmarshal(b, &rf); err != nil {
		t.Fatalf("%s: %v", alertsFile, err)
	}
	return rf
}

// unitTestFile is the part of a promtool unit test file the tests read.
type unitTestFile struct {
	RuleFiles []string `yaml:"rule_files"`
	Tests     []struct {
		Name  string `yaml:"name"`
		Cases []struct {
			Alert  string `yaml:"alertname"`
			Alerts []any  `yaml:"exp_alerts"`
		} `yaml:"alert_rule_test"`
	} `yaml:"tests"`
}

func alertTestFiles(t *testing.T) []string {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(alertTests, "*.yml"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no promtool test files in %s: %v", alertTests, err)
	}
	return files
}

// Every alert of deploy/monitoring/alerts.yml has a promtool test where it fires and one
// where, on healthy series, it stays quiet; every test names an alert that exists.
func TestEveryAlertIsShownToFireAndStayQuiet(t *testing.T) {
	alerts := map[string]bool{}
	for _, g := range readRules(t).Groups {
		for _, r := range g.Rules {
			if r.Alert != "" {
				alerts[r.Alert] = true
			}
		}
	}
	if len(alerts) == 0 {
		t.Fatalf("%s has no alerts", alertsFile)
	}
	fires, quiet := map[string]bool{}, map[string]bool{}
	for _, f := range alertTestFiles(t) {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		var ut unitTestFile
		if err := yaml.Unmarshal(b, &ut); err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		for _, tc := range ut.Tests {
			for _, c := range tc.Cases {
				if !alerts[c.Alert] {
					t.Errorf("%s: test %q names alert %q, which %s lacks", f, tc.Name, c.Alert, alertsFile)
				}
				if len(c.Alerts) > 0 {
					fires[c.Alert] = true
				} else {
					quiet[c.Alert] = true
				}
			}
		}
	}
	for a := range alerts {
		if !fires[a] {
			t.Errorf("alert %s is never shown to fire", a)
		}
		if !quiet[a] {
			t.Errorf("alert %s is never shown to stay quiet", a)
		}
	}
}

// promtool checks the rules and runs their unit tests (Prometheus's own `promtool test
// rules`). Without promtool the test is skipped, unless RAFTLOCK_TEST_PROMTOOL=1 (CI, which
// installs it) makes that a failure.
func TestAlertRulesPassPromtool(t *testing.T) {
	promtool, err := exec.LookPath("promtool")
	if err != nil {
		if os.Getenv("RAFTLOCK_TEST_PROMTOOL") == "1" {
			t.Fatalf("RAFTLOCK_TEST_PROMTOOL=1 but promtool is missing (Debian: apt-get install prometheus): %v", err)
		}
		t.Skip("promtool not installed (Debian: apt-get install prometheus); RAFTLOCK_TEST_PROMTOOL=1 makes this a failure")
	}
	for _, args := range [][]string{
		{"check", "rules", alertsFile},
		append([]string{"test", "rules"}, alertTestFiles(t)...),
	} {
		out, err := exec.Command(promtool, args...).CombinedOutput()
		if err != nil {
			t.Errorf("promtool %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
}

// Every metric that an expression of the Grafana dashboard or of an alert names is one a
// real node exports: a `raftlock dev --tls` process (three nodes, with TLS so that the
// certificate's expiry is exported too) is scraped, on every node (some series exist only on
// the leader), and each name must be among what they export (a histogram's _bucket, _sum and
// _count included), or Prometheus's own `up`.
func TestDashboardAndAlertsNameExportedMetrics(t *testing.T) {
	exported := scrapeDevCluster(t)
	exported["up"] = true

	check := func(where, expr string) {
		names := metricNames(expr)
		if len(names) == 0 {
			t.Errorf("%s: no metric found in %q", where, expr)
		}
		for _, n := range names {
			if !exported[n] {
				t.Errorf("%s names %s, which no node exports (expr %q)", where, n, expr)
			}
		}
	}
	for _, g := range readRules(t).Groups {
		for _, r := range g.Rules {
			check(alertsFile+" "+r.Alert+r.Record, r.Expr)
		}
	}
	exprs := dashboardExprs(t)
	if len(exprs) < 10 {
		t.Fatalf("%s: only %d queries found", dashboardFile, len(exprs))
	}
	for _, e := range exprs {
		check(dashboardFile+" "+e.where, e.expr)
	}
}

type dashboardExpr struct{ where, expr string }

// labelValuesRe is a Grafana variable query label_values(selector, label).
var labelValuesRe = regexp.MustCompile(`^\s*label_values\((.*),\s*[A-Za-z_][A-Za-z0-9_]*\s*\)\s*$`)

// dashboardExprs returns every PromQL query of the dashboard: each panel's targets (rows'
// panels included) and each variable's query.
func dashboardExprs(t *testing.T) []dashboardExpr {
	t.Helper()
	b, err := os.ReadFile(dashboardFile)
	if err != nil {
		t.Fatal(err)
	}
	type panel struct {
		Title   string `json:"title"`
		Targets []struct {
			Expr string `json:"expr"`
		} `json:"targets"`
		Panels []json.RawMessage `json:"panels"`
	}
	var d struct {
		Panels     []json.RawMessage `json:"panels"`
		Templating struct {
			List []struct {
				Name  string          `json:"name"`
				Type  string          `json:"type"`
				Query json.RawMessage `json:"query"`
			} `json:"list"`
		} `json:"templating"`
	}
	if err := json.Unmarshal(b, &d); err != nil {
		t.Fatalf("%s: %v", dashboardFile, err)
	}
	var out []dashboardExpr
	var walk func([]json.RawMessage)
	walk = func(ps []json.RawMessage) {
		for _, raw := range ps {
			var p panel
			if err := json.Unmarshal(raw, &p); err != nil {
				t.Fatalf("%s: a panel: %v", dashboardFile, err)
			}
			for _, tg := range p.Targets {
				if strings.TrimSpace(tg.Expr) == "" {
					t.Errorf("%s: panel %q has a target without a query", dashboardFile, p.Title)
					continue
				}
				out = append(out, dashboardExpr{"panel " + p.Title, tg.Expr})
			}
			walk(p.Panels)
		}
	}
	walk(d.Panels)
	for _, v := range d.Templating.List {
		if v.Type != "query" {
			continue
		}
		var q struct {
			Query string `json:"query"`
		}
		if err := json.Unmarshal(v.Query, &q); err != nil {
			_ = json.Unmarshal(v.Query, &q.Query) // older dashboards: the query is a string
		}
		m := labelValuesRe.FindStringSubmatch(q.Query)
		if m == nil {
			t.Errorf("%s: variable %s: query %q is not label_values(selector, label)", dashboardFile, v.Name, q.Query)
			continue
		}
		out = append(out, dashboardExpr{"variable " + v.Name, m[1]})
	}
	return out
}

var (
	// PromQL parts that name no metric: strings, label matchers, ranges and subqueries, and
	// the label lists of grouping and vector matching.
	stringRe   = regexp.MustCompile("\"(?:[^\"\\\\]|\\\\.)*\"|'(?:[^'\\\\]|\\\\.)*'|`[^`]*`")
	matchersRe = regexp.MustCompile(`\{[^}]*\}|\[[^\]]*\]`)
	groupingRe = regexp.MustCompile(`\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)`)
	identRe    = regexp.MustCompile(`[A-Za-z_:][A-Za-z0-9_:]*`)
	keywords   = map[string]bool{"and": true, "or": true, "unless": true, "by": true, "without": true, "on": true,
		"ignoring": true, "group_left": true, "group_right": true, "bool": true, "offset": true, "inf": true, "nan": true}
)

// metricNames returns the metric names a PromQL expression selects: every identifier that is
// not a function or aggregation (followed by "("), a keyword, a label, a number's exponent,
// a duration or a Grafana variable.
func metricNames(expr string) []string {
	e := stringRe.ReplaceAllString(expr, `""`)
	e = matchersRe.ReplaceAllString(e, " ")
	e = groupingRe.ReplaceAllString(e, " ")
	seen := map[string]bool{}
	var names []string
	for _, loc := range identRe.FindAllStringIndex(e, -1) {
		word := e[loc[0]:loc[1]]
		if loc[0] > 0 && strings.ContainsAny(e[loc[0]-1:loc[0]], "$0123456789.") {
			continue // a variable, or part of a number or duration
		}
		if rest := strings.TrimLeft(e[loc[1]:], " \t\n"); strings.HasPrefix(rest, "(") || keywords[strings.ToLower(word)] {
			continue
		}
		if !seen[word] {
			seen[word] = true
			names = append(names, word)
		}
	}
	sort.Strings(names)
	return names
}

// The metric name extraction finds what the expressions select, and nothing else.
func TestMetricNames(t *testing.T) {
	for expr, want := range map[string]string{
		`up{job="raftlock"} == 0`: "up",
		`histogram_quantile(0.99, sum by (job, instance, le) (rate(raftlock_log_fsync_duration_seconds_bucket[5m]))) > 0.1`: "raftlock_log_fsync_duration_seconds_bucket",
		`(time() - a_seconds > 6 * 3600) and (b_index - c_index > 1e3)`:                                                     "a_seconds b_index c_index",
		`sum by (limit) (rate(x_total{job="$job", instance=~"$instance"}[$__rate_interval])) / on (job) group_left y_info`:  "x_total y_info",
		`label_replace(z, "dst", "$1", "src", "(.*)") offset 5m`:                                                            "z",
	} {
		if got := strings.Join(metricNames(expr), " "); got != want {
			t.Errorf("metricNames(%q) = %q, want %q", expr, got, want)
		}
	}
}

// scrapeDevCluster runs `raftlock dev --tls` and returns every series name its three nodes
// export once one of them leads (so that the leader-only series are there).
func scrapeDevCluster(t *testing.T) map[string]bool {
	t.Helper()
	dir := t.TempDir()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, "dev", "--tls", "--base-port", "0", "--data-dir", dir, "--log-level", "error")
	cmd.Env = withoutRaftlockEnv()
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	log := &lockedBuffer{}
	cmd.Stderr = log
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		cancel()
		_ = cmd.Wait()
		if t.Failed() {
			t.Logf("raftlock dev's log:\n%s", log)
		}
	}()
	endpoints := make(chan []string, 1)
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			if _, after, ok := strings.Cut(sc.Text(), "dev cluster is up: "); ok {
				endpoints <- strings.Fields(after)
			}
		}
		_, _ = io.Copy(io.Discard, out)
	}()
	var eps []string
	select {
	case eps = <-endpoints:
	case <-time.After(60 * time.Second):
		t.Fatal("raftlock dev --tls did not print its endpoints within 60s")
	}
	hc := devTLSClient(t, filepath.Join(dir, "tls"))
	defer hc.CloseIdleConnections()

	exported := map[string]bool{}
	testkit.Until(t, 30*time.Second, "a leader's metrics", func() error {
		clear(exported)
		for _, ep := range eps {
			fams, err := scrapeFamilies(hc, ep)
			if err != nil {
				return err
			}
			for name, f := range fams {
				exported[name] = true
				switch f.GetType() {
				case dto.MetricType_HISTOGRAM:
					exported[name+"_bucket"], exported[name+"_sum"], exported[name+"_count"] = true, true, true
				case dto.MetricType_SUMMARY:
					exported[name+"_sum"], exported[name+"_count"] = true, true
				}
			}
		}
		if !exported["raftlock_raft_follower_lag_entries"] {
			return fmt.Errorf("no node reports follower lag yet (no leader)")
		}
		return nil
	})
	return exported
}

// devTLSClient is an HTTPS client with the dev cluster's CA and client certificate.
func devTLSClient(t *testing.T, dir string) *http.Client {
	t.Helper()
	pem, err := os.ReadFile(filepath.Join(dir, "ca.pem"))
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		t.Fatal("the dev CA does not parse")
	}
	cert, err := tls.LoadX509KeyPair(filepath.Join(dir, "client.pem"), filepath.Join(dir, "client-key.pem"))
	if err != nil {
		t.Fatal(err)
	}
	return &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{
		TLSClientConfig: &tls.Config{RootCAs: pool, Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}}}
}

func scrapeFamilies(hc *http.Client, ep string) (map[string]*dto.MetricFamily, error) {
	res, err := hc.Get(ep + "/metrics")
	if err != nil {
		return nil, err
	}
	defer res.Body.Close()
	if res.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("%s/metrics: %s", ep, res.Status)
	}
	parser := expfmt.NewTextParser(model.UTF8Validation)
	return parser.TextToMetricFamilies(res.Body)
}

package archtest

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// Every package with tests runs them through testkit.Main, which fails the run on a leaked
// goroutine; testkit itself tests that check directly.
func TestEveryPackageChecksForLeakedGoroutines(t *testing.T) {
	out, err := exec.Command("go", "list", "-f", `{{.ImportPath}} {{.Dir}} {{join .TestGoFiles ","}},{{join .XTestGoFiles ","}}`, module+"...").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	checked := 0
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		fields := strings.Fields(line)
		if len(fields) < 3 || fields[2] == "," || fields[0] == module+"internal/testkit" {
			continue
		}
		found := false
		for _, f := range strings.Split(fields[2], ",") {
			if f == "" {
				continue
			}
			b, err := os.ReadFile(filepath.Join(fields[1], f))
			if err != nil {
				t.Fatal(err)
			}
			if strings.Contains(string(b), "func TestMain(") && strings.Contains(string(b), "testkit.Main(") {
				found = true
			}
		}
		if !found {
			t.Errorf("%s has tests but no TestMain that runs them through testkit.Main", fields[0])
		}
		checked++
	}
	if checked < 15 {
		t.Fatalf("only %d packages with tests found:\n%s", checked, out)
	}
}

//go:build linux

package bench

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/prometheus/procfs"
)

// TestRestartable checks which processes the failover workload may kill, because it can start
// them again: not one that runs a binary of `go run`, nor one whose binary is gone.
func TestRestartable(t *testing.T) {
	sleep, err := exec.LookPath("sleep")
	if err != nil {
		t.Fatal(err)
	}
	fs, err := procfs.NewDefaultFS()
	if err != nil {
		t.Fatal(err)
	}
	p := &procNodes{fs: fs}
	for _, tc := range []struct {
		dir, want string
		remove    bool
	}{
		{dir: "bin"},
		{dir: "go-build123/b001/exe", want: "a binary of `go run`"},
		{dir: "gone", remove: true, want: "its binary"},
	} {
		bin := filepath.Join(t.TempDir(), tc.dir, "sleeper")
		copyFile(t, sleep, bin)
		cmd := exec.Command(bin, "60")
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
		if tc.remove {
			if err := os.Remove(bin); err != nil {
				t.Fatal(err)
			}
		}
		err := p.restartable(cmd.Process.Pid)
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("%s: %v", tc.dir, err)
		case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("%s: got %v, want an error saying %q", tc.dir, err, tc.want)
		}
	}
}

func copyFile(t *testing.T, from, to string) {
	t.Helper()
	b, err := os.ReadFile(from)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Dir(to), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(to, b, 0o755); err != nil {
		t.Fatal(err)
	}
}

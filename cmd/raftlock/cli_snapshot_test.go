package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// snapshot inspect of a damaged file says first what is wrong, exits 1, and shows no state
// format or empty checksum it did not read (before: "format: 1 (state format 0)" and
// "checksum ok: false (sha256 )").
func TestSnapshotInspectOfADamagedFileSaysWhatIsWrong(t *testing.T) {
	dir := t.TempDir()
	good := filepath.Join(dir, "good.snap")
	if r := runCLI(t, "snapshot", "save", good); r.code != 0 {
		t.Fatalf("snapshot save: exit %d: %s", r.code, r.stderr)
	}
	data, err := os.ReadFile(good)
	if err != nil {
		t.Fatal(err)
	}
	flipped := append([]byte(nil), data...)
	flipped[len(flipped)/2] ^= 1
	for _, tc := range []struct {
		name, want string
		data       []byte
	}{
		{"flipped", "checksum mismatch", flipped},
		{"truncated", "truncated", data[:len(data)*2/3]},
	} {
		bad := filepath.Join(dir, tc.name+".snap")
		if err := os.WriteFile(bad, tc.data, 0o600); err != nil {
			t.Fatal(err)
		}
		r := runCLI(t, "snapshot", "inspect", bad)
		if r.code != exitFailure {
			t.Fatalf("%s: exit %d, want %d", tc.name, r.code, exitFailure)
		}
		lines := strings.Split(r.stdout, "\n")
		if len(lines) < 2 || !strings.HasPrefix(lines[1], "DAMAGED:") || !strings.Contains(lines[1], tc.want) {
			t.Fatalf("%s: the second line does not say what is wrong (%q):\n%s", tc.name, tc.want, r.stdout)
		}
		for _, bogus := range []string{"state format 0", "(sha256 )", "sessions:"} {
			if strings.Contains(r.stdout, bogus) {
				t.Fatalf("%s: inspect shows %q, which it did not read:\n%s", tc.name, bogus, r.stdout)
			}
		}
	}
}

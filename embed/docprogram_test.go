package embed_test

import (
	"bufio"
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"
)

// The complete program of docs/embedding.md builds and runs as pasted: alone in its cluster it leads, a second
// copy on its data directory is refused with a clear error, and Ctrl-C stops it cleanly.
func TestEmbeddingPageProgram(t *testing.T) {
	bin := buildReadmeEmbedding(t)
	dir := t.TempDir()
	peers := "n1=" + freeAddr(t)
	first := exec.Command(bin, "--id", "n1", "--peers", peers)
	first.Dir = dir
	out, err := first.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := first.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = first.Process.Kill(); _ = first.Wait() })
	led := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			if regexp.MustCompile(`n1 leads with token [1-9]`).MatchString(sc.Text()) {
				led <- sc.Text()
			}
		}
	}()
	select {
	case <-led:
	case <-time.After(testTimeout):
		t.Fatal("docs/embedding.md's program did not lead within 30s")
	}
	second := exec.Command(bin, "--id", "n1", "--peers", "n1="+freeAddr(t))
	second.Dir = dir
	msg, err := second.CombinedOutput()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || !strings.Contains(string(msg), "data dir is in use") {
		t.Fatalf("a second copy on the same data directory: %v, %s", err, msg)
	}
	if err := first.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	if err := first.Wait(); err != nil {
		t.Fatalf("after Ctrl-C: %v", err)
	}
}

// buildReadmeEmbedding builds the Go block of docs/embedding.md that calls package main as a
// service's module would: a module of its own that depends on raftlock through the page's
// `go mod edit ... -replace` line, pointed at this repository. The module cache stands in for
// the network (GOPROXY=off, the repository's go.sum), so the build adds only what it needs
// (-mod=mod) where the page's `go mod tidy` would look dependencies up.
func buildReadmeEmbedding(t *testing.T) string {
	t.Helper()
	page, err := os.ReadFile("../docs/embedding.md")
	if err != nil {
		t.Fatal(err)
	}
	var program, modEdit string
	for _, block := range strings.Split(string(page), "```go\n")[1:] {
		if code, _, _ := strings.Cut(block, "\n```"); strings.HasPrefix(code, "package main") && strings.Contains(code, "embed.Start(") {
			program = code + "\n"
		}
	}
	for _, line := range strings.Split(string(page), "\n") {
		if strings.HasPrefix(line, "go mod edit ") && strings.Contains(line, "-replace=github.com/raftlock/raftlock=../raftlock") {
			modEdit = line
		}
	}
	if program == "" {
		t.Fatal("docs/embedding.md has no Go program that calls embed.Start")
	}
	if modEdit == "" {
		t.Fatal("docs/embedding.md does not say how to depend on a clone (go mod edit ... -replace=github.com/raftlock/raftlock=../raftlock)")
	}
	// Every Close of the program is bounded: unbounded, a replica whose peers are gone waits
	// for the client's retries (15 s) before it exits.
	if regexp.MustCompile(`\.Close\(context\.Background\(\)\)`).MatchString(program) {
		t.Fatal("docs/embedding.md's program closes with context.Background(): bound its Close calls")
	}
	root, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "main.go"), []byte(program), 0o644); err != nil {
		t.Fatal(err)
	}
	sum, err := os.ReadFile(filepath.Join(root, "go.sum"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "go.sum"), sum, 0o644); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	bin := filepath.Join(dir, "program")
	edit := strings.Fields(strings.ReplaceAll(modEdit, "=../raftlock", "="+root))
	for _, args := range [][]string{{"go", "mod", "init", "example.com/service"}, edit, {"go", "build", "-o", bin, "."}} {
		cmd := exec.CommandContext(ctx, args[0], args[1:]...)
		cmd.Dir = dir
		cmd.Env = append(os.Environ(), "GOPROXY=off", "GOFLAGS=-mod=mod", "GOWORK=off")
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("docs/embedding.md's program, as a module of its own: %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
	return bin
}

package embed_test

import (
	"bufio"
	"context"
	"encoding/json"
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

// buildReadmeEmbedding builds the Go block of docs/embedding.md that calls package main, as a package of
// the module (an overlay, so that nothing is written into the repository).
func buildReadmeEmbedding(t *testing.T) string {
	t.Helper()
	readme, err := os.ReadFile("../docs/embedding.md")
	if err != nil {
		t.Fatal(err)
	}
	var program string
	for _, block := range strings.Split(string(readme), "```go\n")[1:] {
		if code, _, _ := strings.Cut(block, "\n```"); strings.HasPrefix(code, "package main") && strings.Contains(code, "embed.Start(") {
			program = code + "\n"
		}
	}
	if program == "" {
		t.Fatal("docs/embedding.md has no Go program that calls embed.Start")
	}
	root, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	src := filepath.Join(dir, "main.go")
	if err := os.WriteFile(src, []byte(program), 0o644); err != nil {
		t.Fatal(err)
	}
	overlay, _ := json.Marshal(map[string]any{"Replace": map[string]string{filepath.Join(root, "internal", "readmeembedding", "main.go"): src}})
	overlayFile := filepath.Join(dir, "overlay.json")
	if err := os.WriteFile(overlayFile, overlay, 0o644); err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(dir, "program")
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	build := exec.CommandContext(ctx, "go", "build", "-overlay", overlayFile, "-o", bin, "./internal/readmeembedding")
	build.Dir = root
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("docs/embedding.md's program does not build: %v\n%s", err, out)
	}
	return bin
}

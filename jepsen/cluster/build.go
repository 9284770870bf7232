package cluster

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
)

// MainPackage is the import path of the raftlock command.
const MainPackage = "github.com/raftlock/raftlock/cmd/raftlock"

// Build compiles the raftlock binary into dir (without the race detector, for speed) and returns
// its path. It must run inside the module, as tests and `go run ./cmd/jepsen` do.
func Build(ctx context.Context, dir string) (string, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", fmt.Errorf("cluster: build: %w", err)
	}
	out := filepath.Join(dir, "raftlock")
	cmd := exec.CommandContext(ctx, "go", "build", "-o", out, MainPackage)
	if b, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("cluster: go build %s: %w\n%s", MainPackage, err, b)
	}
	return out, nil
}

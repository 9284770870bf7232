package checker

import (
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/raftlock/raftlock/jepsen/history"
)

func TestScratchRecheck(t *testing.T) {
	path := os.Getenv("HIST")
	if path == "" {
		t.Skip()
	}
	ops, err := history.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	until, _ := strconv.ParseFloat(os.Getenv("UNTIL"), 64)
	lock := os.Getenv("LOCK")
	var sel []history.Op
	for _, op := range ops {
		if until > 0 && float64(op.Invoke)/1e9 > until {
			continue
		}
		if lock != "" && op.Lock != "" && op.Lock != lock {
			continue
		}
		sel = append(sel, op)
	}
	cfg := DefaultConfig(2 * time.Second)
	cfg.LinearizabilityTimeout = time.Minute
	start := time.Now()
	l := CheckLinearizable(sel, cfg)
	t.Logf("%d ops, %s: %s", len(sel), time.Since(start), l.Result)
}

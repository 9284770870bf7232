package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/raftlock/raftlock/jepsen"
	"github.com/raftlock/raftlock/jepsen/history"
	"github.com/raftlock/raftlock/jepsen/nemesis"
)

func TestParseFlags(t *testing.T) {
	o, err := parse([]string{"--nodes", "5", "--time", "30m", "--nemesis", "kill,partition", "--seed", "9", "--dir", t.TempDir()}, &bytes.Buffer{})
	if err != nil {
		t.Fatal(err)
	}
	if o.cfg.Nodes != 5 || o.cfg.Time != 30*time.Minute || o.cfg.Seed != 9 || strings.Join(o.cfg.Faults, ",") != "kill,partition" {
		t.Fatalf("parsed %+v", o.cfg)
	}
	o, err = parse([]string{"--dir", t.TempDir()}, &bytes.Buffer{})
	if err != nil || o.cfg.Seed == 0 || !slices.Equal(o.cfg.Faults, nemesis.Without(nemesis.All, nemesis.Upgrade)) || o.cfg.Workload != jepsen.WorkloadAll {
		t.Fatalf("defaults: every fault but upgrade (no --old-binary), a derived seed and both kinds of workers, got %+v %v", o.cfg, err)
	}
	old := filepath.Join(t.TempDir(), "raftlock-old")
	if err := os.WriteFile(old, nil, 0o755); err != nil {
		t.Fatal(err)
	}
	if o, err := parse([]string{"--old-binary", old, "--dir", t.TempDir()}, &bytes.Buffer{}); err != nil || !slices.Equal(o.cfg.Faults, nemesis.All) {
		t.Fatalf("with --old-binary, all includes upgrade: %v %v", o.cfg.Faults, err)
	}
	if o.cfg.ClientWorkers() != o.cfg.Workers/2 {
		t.Fatalf("--workload all runs half the workers through the Go client, got %d of %d", o.cfg.ClientWorkers(), o.cfg.Workers)
	}
	if o.cfg.CycleWorkers() != 1 {
		t.Fatalf("by default a quarter of the 4 client workers cycle, got %d", o.cfg.CycleWorkers())
	}
	o, err = parse([]string{"--workload", "client", "--cyclers", "3", "--dir", t.TempDir()}, &bytes.Buffer{})
	if err != nil || o.cfg.CycleWorkers() != 3 {
		t.Fatalf("--cyclers 3: %d cyclers, %v", o.cfg.CycleWorkers(), err)
	}
	o, err = parse([]string{"--workload", "raw", "--cyclers", "3", "--dir", t.TempDir()}, &bytes.Buffer{})
	if err != nil || o.cfg.CycleWorkers() != 0 {
		t.Fatalf("cyclers are client workers: a raw workload has none, got %d, %v", o.cfg.CycleWorkers(), err)
	}
}

func TestBadArgumentsExitWithTwo(t *testing.T) {
	var out, errs bytes.Buffer
	for _, args := range [][]string{{"--nemesis", "meteor"}, {"--ttl", "1s", "--dir", t.TempDir()}, {"stray"},
		{"--workload", "meteor", "--dir", t.TempDir()}, {"--workload", "raw", "--ignore-done", "--dir", t.TempDir()},
		{"--nemesis", "upgrade", "--dir", t.TempDir()}, {"--nemesis", "upgrade", "--old-binary", "/nonexistent/raftlock", "--dir", t.TempDir()}} {
		errs.Reset()
		if code := run(context.Background(), args, &out, &errs); code != exitError {
			t.Errorf("%v: exit %d, want %d (%s)", args, code, exitError, errs.String())
		}
	}
}

func TestRecheckFlagsABrokenHistory(t *testing.T) {
	dir := t.TempDir()
	write := func(name string, ops []history.Op) string {
		path := filepath.Join(dir, name)
		f, err := os.Create(path)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		if err := history.WriteJSONL(f, ops); err != nil {
			t.Fatal(err)
		}
		return path
	}
	ms := func(v int64) int64 { return v * int64(time.Millisecond) }
	good := []history.Op{
		{ID: 0, Kind: history.Acquire, Type: history.OK, Session: "s1", Lock: "a", OutSession: "s1", OutToken: 5, Invoke: ms(0), Complete: ms(10)},
		{ID: 1, Kind: history.Release, Type: history.OK, Session: "s1", Lock: "a", Token: 5, Invoke: ms(20), Complete: ms(30)},
		{ID: 2, Kind: history.Acquire, Type: history.OK, Session: "p", Lock: "a", OutSession: "p", OutToken: 9, Phase: history.PhaseFinal, Invoke: ms(40), Complete: ms(50)},
	}
	bad := append([]history.Op(nil), good...)
	bad = append(bad, history.Op{ID: 3, Kind: history.Read, Type: history.OK, Lock: "a", Held: true, OutSession: "s1", OutToken: 5, Invoke: ms(60), Complete: ms(70)})
	var out, errs bytes.Buffer
	if code := run(context.Background(), []string{"--check", write("good.jsonl", good)}, &out, &errs); code != exitOK {
		t.Fatalf("good history: exit %d\n%s%s", code, out.String(), errs.String())
	}
	out.Reset()
	if code := run(context.Background(), []string{"--check", write("bad.jsonl", bad)}, &out, &errs); code != exitViolation {
		t.Fatalf("a released lock seen held again: exit %d\n%s", code, out.String())
	}
	if !strings.HasSuffix(strings.TrimSpace(out.String()), "failed") {
		t.Fatalf("last line must be the tally:\n%s", out.String())
	}
}

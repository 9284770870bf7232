package main

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"
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
	if err != nil || o.cfg.Seed == 0 || len(o.cfg.Faults) != 5 {
		t.Fatalf("defaults: every fault and a derived seed, got %+v %v", o.cfg, err)
	}
}

func TestBadArgumentsExitWithTwo(t *testing.T) {
	var out, errs bytes.Buffer
	for _, args := range [][]string{{"--nemesis", "meteor"}, {"--ttl", "1s", "--dir", t.TempDir()}, {"stray"}} {
		errs.Reset()
		if code := run(context.Background(), args, &out, &errs); code != exitError {
			t.Errorf("%v: exit %d, want %d (%s)", args, code, exitError, errs.String())
		}
	}
}

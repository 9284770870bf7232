package nemesis

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand"
	"slices"
	"strings"
	"time"

	"github.com/raftlock/raftlock/jepsen/cluster"
	"github.com/raftlock/raftlock/jepsen/history"
	"github.com/raftlock/raftlock/jepsen/workload"
)

// Fault names.
const (
	Kill        = "kill"
	Restart     = "restart"
	RestartAll  = "restart-all"
	Pause       = "pause"
	Partition   = "partition"
	ClientPause = workload.FaultClientPause
	Churn       = "churn"
	Clock       = "clock"
	DelayDup    = "delay-dup"
	// The faults of the nodes' disks, which need their data dirs on package faultfs.
	PowerLoss    = "power-loss"
	PowerLossAll = "power-loss-all"
	DiskEIO      = "disk-eio"
	DiskSlow     = "disk-slow"
	DiskFull     = "disk-full"
	// DiskLoss wipes a node's data dir and starts it with its usual flags (see diskLoss).
	DiskLoss = "disk-loss"
	// Restore saves a backup during the run and restores it later (restore.go).
	Restore = "restore"
	// Membership adds, promotes, removes and replaces members and moves leadership
	// (membership.go).
	Membership = "membership"
	// Upgrade rolls the nodes between an old build and the new one (upgrade.go); it needs
	// Config.OldBinary.
	Upgrade = "upgrade"
)

// All lists every fault, in the order "all" expands to.
var All = []string{Kill, Restart, RestartAll, Pause, Partition, ClientPause, Churn, Clock, DelayDup,
	PowerLoss, PowerLossAll, DiskEIO, DiskSlow, DiskFull, DiskLoss, Restore, Membership, Upgrade}

// Disk lists the faults that need the nodes' data dirs on a fault-injecting file system.
var Disk = []string{PowerLoss, PowerLossAll, DiskEIO, DiskSlow, DiskFull}

// NeedsDisk reports whether any of the faults needs a fault-injecting file system.
func NeedsDisk(faults []string) bool {
	for _, f := range faults {
		for _, d := range Disk {
			if f == d {
				return true
			}
		}
	}
	return false
}

// WithoutDisk returns the faults less those of the disks.
func WithoutDisk(faults []string) []string {
	var out []string
	for _, f := range faults {
		if !NeedsDisk([]string{f}) {
			out = append(out, f)
		}
	}
	return out
}

// Without returns the faults less the named ones.
func Without(faults []string, names ...string) []string {
	var out []string
	for _, f := range faults {
		if !slices.Contains(names, f) {
			out = append(out, f)
		}
	}
	return out
}

// ErrUnknownFault is returned for a fault name that is not in All.
var ErrUnknownFault = errors.New("nemesis: unknown fault")

// ParseFaults turns "all", "none" or a comma-separated list into fault names.
func ParseFaults(s string) ([]string, error) {
	switch strings.TrimSpace(s) {
	case "all":
		return append([]string(nil), All...), nil
	case "", "none":
		return nil, nil
	}
	var out []string
	for _, f := range strings.Split(s, ",") {
		f = strings.TrimSpace(f)
		known := false
		for _, a := range All {
			known = known || a == f
		}
		if !known {
			return nil, fmt.Errorf("%w: %q (want %s or all)", ErrUnknownFault, f, strings.Join(All, ", "))
		}
		out = append(out, f)
	}
	return out, nil
}

// Config shapes the schedule.
type Config struct {
	// Faults are the faults to draw from.
	Faults []string
	// Quiet is the mean time between one fault's end and the next one's start.
	Quiet time.Duration
	// TTL is the workers' session TTL; pauses last longer than it.
	TTL time.Duration
	// ElectionTimeout is the cluster's; pauses last longer than it.
	ElectionTimeout time.Duration
	// TargetLeader makes kill and pause always hit the leader.
	TargetLeader bool
	// Locks are the workload's locks, which the audit after a power loss reads.
	Locks []string
	// OldBinary and NewBinary are the builds the upgrade fault rolls the nodes between; the
	// cluster starts on OldBinary in an upgrade run. Without OldBinary, upgrade is skipped.
	OldBinary, NewBinary string
	// Seed makes the schedule reproducible.
	Seed int64
	// Log receives one line per fault action; may be nil.
	Log io.Writer
}

// Nemesis injects faults into a cluster.
type Nemesis struct {
	cfg Config
	c   *cluster.Cluster
	wl  *workload.Workload
	rec *history.Recorder
	rng *rand.Rand
}

// New returns a nemesis for the cluster, which can also pause the workload's lock holders.
func New(cfg Config, c *cluster.Cluster, wl *workload.Workload, rec *history.Recorder) *Nemesis {
	return &Nemesis{cfg: cfg, c: c, wl: wl, rec: rec, rng: rand.New(rand.NewSource(cfg.Seed))}
}

// logf writes one line of the nemesis log.
func (n *Nemesis) logf(format string, args ...any) {
	if n.cfg.Log != nil {
		fmt.Fprintf(n.cfg.Log, "%8.3fs nemesis: %s\n", float64(n.rec.Now())/1e9, fmt.Sprintf(format, args...))
	}
}

// record adds a nemesis op spanning [inv, now].
func (n *Nemesis) record(fault, action string, id int, inv int64, detail string, err error) {
	op := history.Op{Process: -1, Kind: history.Nemesis, Type: history.OK, Fault: fault, Action: action,
		FaultID: id, Detail: detail, Invoke: inv}
	if err != nil {
		op.Type, op.Error = history.Info, err.Error()
	}
	n.rec.Add(op)
	if err != nil {
		n.logf("%s %s (fault %d) %s: %v", fault, action, id, detail, err)
	} else {
		n.logf("%s %s (fault %d) %s", fault, action, id, detail)
	}
}

// sleep waits d or until stop closes; false means stop closed.
func sleep(stop <-chan struct{}, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-stop:
		return false
	case <-t.C:
		return true
	}
}

// between draws a duration in [lo, hi).
func (n *Nemesis) between(lo, hi time.Duration) time.Duration {
	if hi <= lo {
		return lo
	}
	return lo + time.Duration(n.rng.Int63n(int64(hi-lo)))
}

// Run injects faults until stop closes, one at a time, and heals everything before returning:
// every node runs, none is paused, every link passes traffic.
func (n *Nemesis) Run(ctx context.Context, stop <-chan struct{}) {
	defer n.HealAll(ctx)
	if len(n.cfg.Faults) == 0 {
		<-stop
		return
	}
	for {
		if !sleep(stop, n.between(n.cfg.Quiet/2, n.cfg.Quiet*3/2)) || ctx.Err() != nil {
			return
		}
		fault := n.cfg.Faults[n.rng.Intn(len(n.cfg.Faults))]
		n.inject(ctx, stop, fault)
	}
}

// inject runs one fault from start to stop. A fault's hold is not cut short by stop, so every
// fault lasts as long as it was drawn.
func (n *Nemesis) inject(ctx context.Context, stop <-chan struct{}, fault string) {
	if (fault == DiskLoss || fault == Restore || fault == Membership) && n.oldRuns() {
		// The earlier builds an upgrade starts from lack what these faults check: a wiped node
		// asks the others whether it is counted (GET /v1/health?member=), and a restore ends
		// every session. A mixed cluster would fail them for the old build's sake. A node of
		// the earlier builds that replaces a member (--join) under an id used before can stay
		// a non-voter for good: it stops asking for its promotion as soon as entries from
		// before its removal name it a voter (fixed in this build's promoteLoop), so
		// membership waits for a cluster of one build too.
		n.logf("%s: skipped while a node runs the old build", fault)
		return
	}
	switch fault {
	case Kill:
		n.kill(ctx)
	case Restart:
		n.restart(ctx)
	case RestartAll:
		n.restartAll(ctx)
	case Pause:
		n.pause(ctx)
	case Partition:
		n.partition(ctx)
	case ClientPause:
		n.clientPause(stop)
	case Churn:
		n.churn(ctx)
	case Clock:
		n.clock(ctx)
	case DelayDup:
		n.delayDup(ctx)
	case PowerLoss:
		n.powerLoss(ctx, false)
	case PowerLossAll:
		n.powerLoss(ctx, true)
	case DiskEIO:
		n.diskEIO(ctx)
	case DiskSlow:
		n.diskSlow(ctx)
	case DiskFull:
		n.diskFull(ctx)
	case DiskLoss:
		n.diskLoss(ctx)
	case Restore:
		n.restore(ctx)
	case Membership:
		n.membership(ctx)
	case Upgrade:
		n.upgrade(ctx)
	}
}

// oldRuns reports whether a member's next start runs the old build.
func (n *Nemesis) oldRuns() bool {
	for _, node := range n.c.Nodes {
		if n.cfg.OldBinary != "" && node.Binary() == n.cfg.OldBinary {
			return true
		}
	}
	return false
}

// HealAll resumes paused nodes, restarts stopped ones, heals every disk and every link, and
// records it.
func (n *Nemesis) HealAll(ctx context.Context) {
	inv := n.rec.Now()
	var done []string
	var errs []error
	for _, node := range n.c.Nodes {
		if node.Disk != nil {
			node.Disk.Heal()
		}
		switch node.State() {
		case cluster.Paused:
			errs = append(errs, node.Resume())
			done = append(done, "resumed "+node.ID)
		case cluster.Stopped:
			errs = append(errs, node.Start())
			done = append(done, "restarted "+node.ID)
		}
	}
	if len(n.c.Mesh.Cut()) > 0 {
		done = append(done, "healed links")
	}
	n.c.Mesh.HealAll()
	if len(done) > 0 {
		n.record("heal", history.ActionEvent, n.rec.NewFaultID(), inv, strings.Join(done, ", "), errors.Join(errs...))
	}
}

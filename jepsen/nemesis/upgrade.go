package nemesis

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/raftlock/raftlock/jepsen/cluster"
	"github.com/raftlock/raftlock/jepsen/history"
)

// upgrade rolls the cluster between the old build (Config.OldBinary) and the new one
// (Config.NewBinary) the way docs/operations.md says an operator upgrades: one node at a time,
// a graceful stop (SIGTERM), the other build started on the same data dir with the same flags,
// and on to the next node once it is ready. While some node runs the old build it rolls every
// old node to the new build, going back once: the node it upgraded last before the last old
// one is taken back to the old build (allowed: the new features are not enabled while a
// member lacks them) and upgraded again. After each step it reads the features every running
// member has enabled (recorded with Op.Features, judged by the operator checker: none that
// only the new build supports may be enabled while a member runs the old build), and once the
// last node runs the new build it waits until they are enabled everywhere. Once every node
// runs the new build it starts a node on the old build again, which must refuse (exit with a
// non-zero status, saying that it needs a newer raftlock or naming the feature) rather than
// serve on data whose features it lacks, and starts it on the new build again.
func (n *Nemesis) upgrade(ctx context.Context) {
	if n.cfg.OldBinary == "" || n.cfg.NewBinary == "" {
		n.logf("%s: no old build given (--old-binary)", Upgrade)
		return
	}
	id := n.rec.NewFaultID()
	var old []*cluster.Node
	for _, node := range n.c.Nodes {
		if n.build(node) == history.BuildOld {
			old = append(old, node)
		}
	}
	inv := n.rec.Now()
	if len(old) == 0 {
		n.record(Upgrade, history.ActionStart, id, inv, "every node runs the new build: start one on the old build, which must refuse", nil)
		n.noteBuilds(id)
		err := n.refusedDowngrade(ctx, id)
		n.record(Upgrade, history.ActionStop, id, n.rec.Now(), "every node on the new build", err)
		return
	}
	n.rng.Shuffle(len(old), func(i, j int) { old[i], old[j] = old[j], old[i] })
	n.record(Upgrade, history.ActionStart, id, inv, fmt.Sprintf("roll %s from the old build to the new one, one at a time (SIGTERM, the same data dir), one of them back to the old build and forward again before the last",
		ids(old)), nil)
	n.noteBuilds(id)
	var errs []error
	var newOnly []string
	type step struct {
		node  *cluster.Node
		build string
	}
	var steps []step
	for i, node := range old {
		steps = append(steps, step{node, history.BuildNew})
		if i == len(old)-2 { // back and forth before the last old node
			steps = append(steps, step{node, history.BuildOld}, step{node, history.BuildNew})
		}
	}
	for _, s := range steps {
		if err := n.restartOn(ctx, id, s.node, s.build); err != nil {
			errs = append(errs, err)
			break
		}
		if newOnly == nil {
			newOnly = n.noteNewFeatures(ctx, id)
		}
		n.observeFeatures(ctx, id, nil)
	}
	if len(errs) == 0 {
		inv := n.rec.Now()
		err := n.waitFeatures(ctx, id, newOnly)
		n.record(Upgrade, history.ActionEvent, id, inv, fmt.Sprintf("the features only the new build supports (%s) enabled on every node once the last one ran it",
			strings.Join(newOnly, ",")), err)
		errs = append(errs, err)
	}
	if len(errs) == 0 || errs[len(errs)-1] == nil {
		errs = append(errs, n.refusedDowngrade(ctx, id))
	}
	n.record(Upgrade, history.ActionStop, id, n.rec.Now(), "builds now: "+n.builds(), errors.Join(errs...))
}

// build is the build the node's next start runs.
func (n *Nemesis) build(node *cluster.Node) string {
	if node.Binary() == n.cfg.OldBinary {
		return history.BuildOld
	}
	return history.BuildNew
}

// builds renders every member's build.
func (n *Nemesis) builds() string {
	var out []string
	for _, node := range n.c.Nodes {
		out = append(out, node.ID+"="+n.build(node))
	}
	return strings.Join(out, " ")
}

// noteBuilds records the build of every member, for the operator checker.
func (n *Nemesis) noteBuilds(id int) {
	for _, node := range n.c.Nodes {
		op := history.Op{Process: -1, Kind: history.Nemesis, Type: history.OK, Fault: Upgrade, Action: history.ActionEvent,
			FaultID: id, Node: node.ID, Build: n.build(node), Detail: node.ID + " runs the " + n.build(node) + " build", Invoke: n.rec.Now()}
		n.rec.Add(op)
	}
}

// restartOn stops the node gracefully, starts it on the build on the same data dir, and
// waits until it is ready; the step is recorded with the node's build.
func (n *Nemesis) restartOn(ctx context.Context, id int, node *cluster.Node, build string) error {
	inv := n.rec.Now()
	from := n.build(node)
	bin := n.cfg.NewBinary
	if build == history.BuildOld {
		bin = n.cfg.OldBinary
	}
	err := n.stopGracefully(ctx, node)
	if err == nil {
		node.SetBinary(bin)
		err = n.startReady(ctx, node)
	}
	op := history.Op{Process: -1, Kind: history.Nemesis, Type: history.OK, Fault: Upgrade, Action: history.ActionEvent,
		FaultID: id, Node: node.ID, Build: build, Invoke: inv,
		Detail: fmt.Sprintf("%s: %s build → %s build (SIGTERM, started on the same data dir, ready)", node.ID, from, build)}
	if err != nil {
		op.Type, op.Error = history.Info, err.Error()
	}
	n.rec.Add(op)
	n.logf("%s event (fault %d) %s%s", Upgrade, id, op.Detail, errSuffix(err))
	return err
}

// errSuffix renders an error for the nemesis log, "" for none.
func errSuffix(err error) string {
	if err == nil {
		return ""
	}
	return ": " + err.Error()
}

// stopGracefully sends SIGTERM and waits for the node to exit; a node that had to be killed
// is an error.
func (n *Nemesis) stopGracefully(ctx context.Context, node *cluster.Node) error {
	sctx, cancel := context.WithTimeout(ctx, restartWait)
	defer cancel()
	if err := node.Stop(sctx); err != nil && !errors.Is(err, cluster.ErrNotRunning) {
		return err
	}
	return nil
}

// startReady starts the stopped node and waits until it answers /v1/ready.
func (n *Nemesis) startReady(ctx context.Context, node *cluster.Node) error {
	if err := node.Start(); err != nil {
		return err
	}
	wctx, cancel := context.WithTimeout(ctx, memberWait)
	defer cancel()
	return cluster.Poll(wctx, 100*time.Millisecond, func() error {
		if node.State() == cluster.Stopped {
			return fmt.Errorf("%s exited with status %d", node.ID, node.ExitCode())
		}
		if !n.c.Ready(wctx, node) {
			return fmt.Errorf("%s is not ready", node.ID)
		}
		return nil
	})
}

// noteNewFeatures records the features a node on the new build supports and a node on the
// old one does not (from each one's /v1/health), once both builds run; nil until then.
func (n *Nemesis) noteNewFeatures(ctx context.Context, id int) []string {
	var oldF, newF []string
	var haveOld, haveNew bool
	for _, node := range n.running(nil) {
		h, err := n.c.Health(ctx, node)
		if err != nil {
			continue
		}
		switch n.build(node) {
		case history.BuildOld:
			oldF, haveOld = h.Features, true
		default:
			newF, haveNew = h.Features, true
		}
	}
	if !haveOld || !haveNew {
		return nil
	}
	newOnly := []string{}
	for _, f := range newF {
		if !slices.Contains(oldF, f) {
			newOnly = append(newOnly, f)
		}
	}
	detail := "features only the new build supports: " + strings.Join(newOnly, ",")
	if len(newOnly) == 0 {
		detail = "the old build supports every feature of the new one: the feature gate is not exercised"
	}
	n.rec.Add(history.Op{Process: -1, Kind: history.Nemesis, Type: history.OK, Fault: Upgrade, Action: history.ActionEvent,
		FaultID: id, NewFeatures: strings.Join(newOnly, ","), Detail: detail, Invoke: n.rec.Now()})
	n.logf("%s event (fault %d) %s", Upgrade, id, detail)
	return newOnly
}

// observeFeatures records, for every running member, the features the cluster had enabled as
// that member applied the log (GET /v1/cluster?consistency=stale). When want is not nil it
// returns an error unless every member has enabled all of want.
func (n *Nemesis) observeFeatures(ctx context.Context, id int, want []string) error {
	var errs []error
	for _, node := range n.running(nil) {
		inv := n.rec.Now()
		info, err := n.c.Info(ctx, node)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		features := info.Features
		list := strings.Join(features, ",")
		if list == "" {
			list = "-"
		}
		n.rec.Add(history.Op{Process: -1, Kind: history.Nemesis, Type: history.OK, Fault: Upgrade, Action: history.ActionEvent,
			FaultID: id, Node: node.ID, Features: list, Invoke: inv,
			Detail: fmt.Sprintf("%s (%s build) has enabled %s", node.ID, n.build(node), strings.Join(features, ","))})
		for _, f := range want {
			if !slices.Contains(features, f) {
				errs = append(errs, fmt.Errorf("%s has not enabled %s", node.ID, f))
			}
		}
	}
	return errors.Join(errs...)
}

// waitFeatures waits until every running member has enabled the features only the new build
// supports, observing them as it goes.
func (n *Nemesis) waitFeatures(ctx context.Context, id int, newOnly []string) error {
	wctx, cancel := context.WithTimeout(ctx, memberWait)
	defer cancel()
	return cluster.Poll(wctx, 500*time.Millisecond, func() error {
		return n.observeFeatures(wctx, id, newOnly)
	})
}

// downgradeRefusals are what an older build logs when it refuses data that needs a newer one.
var downgradeRefusals = []string{"needs a newer raftlock", "newer format", "unknown feature", "unknown snapshot version"}

// refusedDowngrade starts a node on the old build after the new features were enabled: it must
// refuse to serve (stop with a non-zero status, saying why) within refusalWait. Then it is
// started on the new build again and must get ready. Both are recorded as events.
func (n *Nemesis) refusedDowngrade(ctx context.Context, id int) error {
	nodes := n.running(nil)
	if len(nodes) == 0 {
		return errors.New("nemesis: no running node")
	}
	node := nodes[n.rng.Intn(len(nodes))]
	inv := n.rec.Now()
	err := n.stopGracefully(ctx, node)
	var detail string
	if err == nil {
		node.SetBinary(n.cfg.OldBinary)
		off := node.LogSize()
		if err = node.Start(); err == nil {
			detail, err = n.expectDowngradeRefusal(ctx, node, off)
		}
	}
	node.SetBinary(n.cfg.NewBinary)
	n.record(Upgrade, history.ActionEvent, id, inv, node.ID+" started on the old build after the new features were enabled: "+detail, err)
	if node.State() != cluster.Stopped {
		return err
	}
	inv = n.rec.Now()
	serr := n.startReady(ctx, node)
	n.record(Upgrade, history.ActionEvent, id, inv, node.ID+" started on the new build again: ready", serr)
	return errors.Join(err, serr)
}

// expectDowngradeRefusal waits for a node started on the old build to stop, and checks its
// status and its log from byte off on. A node that still serves is killed after the error.
func (n *Nemesis) expectDowngradeRefusal(ctx context.Context, node *cluster.Node, off int64) (string, error) {
	deadline := time.Now().Add(refusalWait)
	for node.State() != cluster.Stopped && time.Now().Before(deadline) && ctx.Err() == nil {
		hold(ctx, 50*time.Millisecond)
	}
	if node.State() != cluster.Stopped {
		kctx, cancel := context.WithTimeout(ctx, restartWait)
		_ = node.Kill(kctx)
		cancel()
		return "it served", fmt.Errorf("%s serves on the old build %s after features it lacks were enabled", node.ID, refusalWait)
	}
	log, _ := node.LogSince(off)
	var line string
	for _, l := range strings.Split(log, "\n") {
		for _, m := range downgradeRefusals {
			if line == "" && strings.Contains(l, m) {
				line = strings.TrimSpace(l)
			}
		}
	}
	code := node.ExitCode()
	detail := fmt.Sprintf("refused with status %d: %s", code, line)
	if code == 0 || line == "" {
		return fmt.Sprintf("stopped with status %d", code), fmt.Errorf("%s on the old build stopped with status %d without saying it needs a newer raftlock (%q)",
			node.ID, code, strings.Join(downgradeRefusals, `" or "`))
	}
	return detail, nil
}

package cluster

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"github.com/hashicorp/raft"

	"github.com/raftlock/raftlock/backup"
	"github.com/raftlock/raftlock/fsm"
)

// ErrInvalidBackup means a backup file to restore is not one, is damaged, or holds a snapshot
// this node cannot read; nothing was changed.
var ErrInvalidBackup = errors.New("cluster: invalid backup file")

// DefaultIndexGap is how far a restore (and `raftlock recover`) moves the log index past every
// index known to have been used, so that every fencing token issued afterwards is greater
// than any issued before: also than the tokens a lost cluster issued after the backup was
// taken (or that a recovered survivor never received), up to this many entries of them.
const DefaultIndexGap = 1_000_000_000

// IndexHeadroom is how many log indexes a restore or a recovery must leave unused above the
// index it moves the log to: fencing tokens are log indexes, and a log at the top of uint64
// can commit nothing more. Every addition to an index is checked against it.
const IndexHeadroom = 1 << 62

// ErrNoIndexHeadroom means a restore or a recovery would move the log index so far that fewer
// than IndexHeadroom indexes are left (or past the top of uint64); nothing was changed.
var ErrNoIndexHeadroom = errors.New("cluster: the log index would leave too little headroom")

// indexAfterGap returns top+gap, or ErrNoIndexHeadroom when that leaves fewer than
// IndexHeadroom indexes above it (which it also does for a sum that overflows).
func indexAfterGap(top, gap uint64) (uint64, error) {
	const ceiling = math.MaxUint64 - IndexHeadroom
	if top > ceiling || gap > ceiling-top {
		return 0, fmt.Errorf("%w: index %d plus a gap of %d is past %d, which leaves fewer than 2^62 indexes; nothing was changed",
			ErrNoIndexHeadroom, top, gap, uint64(ceiling))
	}
	return top + gap, nil
}

// transferPattern names the temporary files of backups and restores in the data directory.
const transferPattern = ".transfer-*.tmp"

// removeTransferFiles removes what a backup or restore cut off by a crash left behind.
func removeTransferFiles(dir string) {
	if names, err := filepath.Glob(filepath.Join(dir, transferPattern)); err == nil {
		for _, n := range names {
			_ = os.Remove(n)
		}
	}
}

// tempFile creates a temporary file in the data directory, removed by the returned function.
func (n *Node) tempFile() (*os.File, func(), error) {
	f, err := os.CreateTemp(n.cfg.DataDir, transferPattern)
	if err != nil {
		return nil, nil, fmt.Errorf("cluster: temporary file: %w", err)
	}
	return f, func() { f.Close(); os.Remove(f.Name()) }, nil
}

// WriteBackup captures the state this node has applied and writes it to w as a backup file
// (package backup). For a backup of everything acknowledged so far, call it on the leader
// after a read barrier. The state is written to a temporary file in the data directory
// first, so that the header can give its size; w gets the whole file.
func (n *Node) WriteBackup(ctx context.Context, w io.Writer) (backup.Header, error) {
	capture := n.fsm.Capture()
	created := time.Now().UTC()
	tmp, done, err := n.tempFile()
	if err != nil {
		return backup.Header{}, err
	}
	defer done()
	bw := bufio.NewWriterSize(tmp, 256<<10)
	size, err := capture.WriteTo(bw)
	if err == nil {
		err = bw.Flush()
	}
	if err != nil {
		return backup.Header{}, fmt.Errorf("cluster: write snapshot: %w", err)
	}
	if _, err := tmp.Seek(0, io.SeekStart); err != nil {
		return backup.Header{}, err
	}
	if err := ctx.Err(); err != nil {
		return backup.Header{}, err
	}
	h := backup.Header{Index: capture.Index, Term: capture.Term, Size: size, Node: n.cfg.ID,
		RaftlockVersion: n.cfg.Version, Created: created}
	if _, err := backup.Write(w, h, bufio.NewReaderSize(tmp, 256<<10)); err != nil {
		return h, err
	}
	n.log.Info("backup written", "index", h.Index, "term", h.Term, "bytes", size)
	return h, nil
}

// RestoreOptions tune RestoreBackup.
type RestoreOptions struct {
	// IndexGap is added to the highest log index known (the backup's, any token in it, and
	// this cluster's last), to give the restored state's index; see DefaultIndexGap. 0 adds
	// nothing beyond the one raft adds.
	IndexGap uint64
	// ACL says whose ACL state the restored state has: the backup's (ACLDefault and
	// ACLReplace) or this cluster's (ACLKeep). ACLDefault refuses (ErrBackupWithoutACL) a
	// backup without ACL state when this cluster's ACLs are bootstrapped.
	ACL ACLRestore
}

// ACLRestore says whose ACL state a restore installs.
type ACLRestore string

// The ACL choices of a restore.
const (
	// ACLDefault installs the backup's ACL state, but refuses a backup whose ACLs were never
	// bootstrapped into a cluster whose ACLs are: that would un-bootstrap them, and the next
	// tokenless POST /v1/acl/bootstrap would take the cluster.
	ACLDefault ACLRestore = ""
	// ACLKeep keeps this cluster's ACL state (tokens and policies) instead of the backup's.
	ACLKeep ACLRestore = "keep"
	// ACLReplace installs the backup's ACL state, whatever it is.
	ACLReplace ACLRestore = "replace"
)

// ErrBackupWithoutACL means a restore of a backup without ACL state into a cluster whose ACLs
// are bootstrapped was refused, for want of ACLKeep or ACLReplace; nothing was changed.
var ErrBackupWithoutACL = errors.New("cluster: the backup has no ACL state and this cluster's ACLs are bootstrapped")

// RestoreResult says what a restore installed.
type RestoreResult struct {
	// Header is the backup file's header.
	Header backup.Header
	// Index is the log index of the restored state: every token issued after the restore is
	// greater.
	Index uint64
	// State describes the restored state (with this cluster's members and features).
	State fsm.SnapshotSummary
}

// restoreWait bounds how long a restore may wait for the followers to install it.
const restoreWait = 10 * time.Minute

// RestoreBackup replaces the cluster's whole state with the backup file read from r, through
// raft's user-snapshot restore, on the leader. The file is read and checked completely first
// (checksum, format, every record), so a bad file changes nothing. What is installed is the
// backup's state with this cluster's member metadata and every feature this cluster enabled
// (a feature is never turned off); the backup's features must be ones every member supports.
// Its log index is at least the highest index known plus opts.IndexGap, so fencing tokens go
// on growing. It ends every session, the backup's and this cluster's (their clients cannot be
// told what it changed), and puts every lock held in either under a lock-delay of its
// holder's TTL plus lock-delay (see fsm.RestoreRewrite); lock-delays run again in full.
// Requests in flight when it runs end with an unknown outcome.
func (n *Node) RestoreBackup(ctx context.Context, r io.Reader, opts RestoreOptions) (RestoreResult, error) {
	if err := n.leaderOnly(); err != nil {
		return RestoreResult{}, err
	}
	start := time.Now()
	body, doneBody, h, err := n.receiveBackup(r)
	if err != nil {
		return RestoreResult{}, err
	}
	defer doneBody()
	// The backup's highest index, read first so that a restore past the headroom is refused
	// before anything enters the log.
	inBackup, err := fsm.InspectSnapshot(bufio.NewReaderSize(body, 256<<10))
	if err != nil {
		return RestoreResult{}, fmt.Errorf("%w: the snapshot in it does not read: %w", ErrInvalidBackup, err)
	}
	if _, err := body.Seek(0, io.SeekStart); err != nil {
		return RestoreResult{}, err
	}
	if _, err := restoredIndex(h.Index, inBackup.MaxIndex, n.raft.LastIndex(), opts.IndexGap); err != nil {
		return RestoreResult{}, err
	}
	switch opts.ACL {
	case ACLDefault, ACLReplace, ACLKeep:
	default:
		return RestoreResult{}, fmt.Errorf("cluster: restore: unknown ACL choice %q (keep or replace)", opts.ACL)
	}
	if opts.ACL == ACLDefault && !inBackup.ACLBootstrapped && n.fsm.ACLBootstrapped() {
		return RestoreResult{}, fmt.Errorf("%w: restoring it would remove every token and let anyone bootstrap the ACLs again; "+
			"keep this cluster's ACL state (acl=keep) or replace it with the backup's, none (acl=replace); nothing was changed", ErrBackupWithoutACL)
	}
	if err := n.checkRestoredFeatures(ctx, inBackup.Features); err != nil {
		return RestoreResult{}, err
	}
	state, doneState, err := n.tempFile()
	if err != nil {
		return RestoreResult{}, err
	}
	defer doneState()
	// From here until raft has installed the restored state, nothing enters the log: the holds
	// read after the barrier are every hold a client can have been told of, and each is held
	// back by a lock-delay in the restored state, since the restore ends every session.
	n.proposals.Lock()
	installing := false
	defer func() {
		if !installing {
			n.proposals.Unlock()
		}
	}()
	if err := n.raft.Barrier(n.cfg.ApplyTimeout).Error(); err != nil {
		return RestoreResult{}, fmt.Errorf("cluster: restore: %w", applyError(err))
	}
	index, err := restoredIndex(h.Index, inBackup.MaxIndex, n.raft.LastIndex(), opts.IndexGap)
	if err != nil {
		return RestoreResult{}, err
	}
	rw := fsm.RestoreRewrite{Members: n.fsm.Members(), Features: n.fsm.Features(),
		KeepSessions: n.cfg.UnsafeRestoreKeepsSessions, Now: time.Now().UnixNano(), Index: index}
	if opts.ACL == ACLKeep {
		rw.ACL = n.fsm.CaptureACL()
	}
	if !rw.KeepSessions {
		rw.Live = n.fsm.LiveHolds()
	}
	bw := bufio.NewWriterSize(state, 256<<10)
	sum, err := fsm.RewriteSnapshot(bufio.NewReader(body), bw, rw)
	if err == nil {
		err = bw.Flush()
	}
	if err != nil {
		return RestoreResult{}, fmt.Errorf("%w: the snapshot in it does not read: %w", ErrInvalidBackup, err)
	}
	size, err := state.Seek(0, io.SeekEnd)
	if err != nil {
		return RestoreResult{}, err
	}
	if _, err := state.Seek(0, io.SeekStart); err != nil {
		return RestoreResult{}, err
	}
	// At least index: the new lock-delays' names may add a few above the backup's own.
	index, err = restoredIndex(h.Index, sum.MaxIndex, n.raft.LastIndex(), opts.IndexGap)
	if err != nil {
		return RestoreResult{}, err
	}
	meta := &raft.SnapshotMeta{Version: raft.SnapshotVersionMax, Index: index, Term: h.Term, Size: size}
	installing = true
	if err := n.installRestore(ctx, meta, state, n.proposals.Unlock); err != nil {
		return RestoreResult{}, err
	}
	res := RestoreResult{Header: h, Index: n.lastSnapshotIndex(), State: sum}
	n.metrics.restored(size, time.Since(start))
	n.log.Info("restored a backup", "backup_index", h.Index, "backup_node", h.Node, "index", res.Index,
		"sessions", sum.Sessions, "locks", sum.Locks)
	return res, nil
}

// receiveBackup reads the backup file r into a temporary file and checks it, returning the
// body (at its start) and the header.
func (n *Node) receiveBackup(r io.Reader) (*os.File, func(), backup.Header, error) {
	rd, err := backup.NewReader(r)
	if err != nil {
		return nil, nil, backup.Header{}, fmt.Errorf("%w: %w", ErrInvalidBackup, err)
	}
	f, done, err := n.tempFile()
	if err != nil {
		return nil, nil, backup.Header{}, err
	}
	bw := bufio.NewWriterSize(f, 256<<10)
	_, err = io.Copy(bw, rd.Body())
	if err == nil {
		err = bw.Flush()
	}
	if err == nil {
		if err = rd.Verify(); err != nil {
			err = fmt.Errorf("%w: %w", ErrInvalidBackup, err)
		}
	}
	if err == nil {
		_, err = f.Seek(0, io.SeekStart)
	}
	if err != nil {
		done()
		return nil, nil, backup.Header{}, err
	}
	return f, done, rd.Header(), nil
}

// restoredIndex is the index a restored state must get: past the backup's own, every index in
// it (the header might understate it), and this cluster's log, by gap.
func restoredIndex(backupIndex, maxInState, last, gap uint64) (uint64, error) {
	index, err := indexAfterGap(max(backupIndex, maxInState, last), gap)
	if err != nil {
		return 0, fmt.Errorf("%w: %w", ErrInvalidBackup, err)
	}
	return index, nil
}

// checkRestoredFeatures refuses a restored state whose features some member may not support:
// it could not install the snapshot. The features must be enabled in the cluster (so every
// member supports them); one that every member supports but the leader has not enabled yet (a
// new cluster, restored into as soon as it answers) is waited for, briefly (awaitFeatures).
func (n *Node) checkRestoredFeatures(ctx context.Context, features []fsm.Feature) error {
	if err := n.awaitFeatures(ctx, features); err != nil {
		return fmt.Errorf("the backup uses features this cluster has not enabled: %w", err)
	}
	return nil
}

// installRestore hands the state to raft and waits for the followers to install it too.
// The leader's timers stop meanwhile (renewals are refused as by a node that does not lead,
// and clients retry), and restart from the restored state: every session gets a full TTL
// from now, every lock-delay its full length. It calls done once raft has returned, even
// if it gave up waiting for it before.
func (n *Node) installRestore(ctx context.Context, meta *raft.SnapshotMeta, state io.Reader, done func()) error {
	term := n.readyTerm.Load()
	if term == 0 {
		done()
		return ErrNotLeader
	}
	n.timers.deactivate()
	defer func() {
		if n.readyTerm.Load() == term && n.raft.State() == raft.Leader && n.raft.CurrentTerm() == term {
			n.timers.activate(term)
		}
	}()
	ch := make(chan error, 1)
	go func() {
		// Never beside a snapshot this node asked for (see userSnapshot). The token is
		// given back once raft answered, even after the wait below gave up.
		select {
		case n.snapshotting <- struct{}{}:
		case <-n.stop:
			done()
			ch <- raft.ErrRaftShutdown
			return
		}
		err := n.raft.Restore(meta, state, n.cfg.ApplyTimeout)
		<-n.snapshotting
		// Proposals open again before the restore answers: a write its caller sends next
		// must not meet "a restore is being installed".
		done()
		ch <- err
	}()
	wait, cancel := context.WithTimeout(ctx, restoreWait)
	defer cancel()
	select {
	case err := <-ch:
		if err != nil {
			return fmt.Errorf("cluster: restore: %w", applyError(err))
		}
		return nil
	case <-wait.Done():
		return fmt.Errorf("%w: the restore did not finish in time: %w", ErrUnknownOutcome, wait.Err())
	case <-n.stop:
		return fmt.Errorf("%w: %w", ErrUnknownOutcome, ErrShutdown)
	}
}

// lastSnapshotIndex is the index of raft's newest snapshot: right after a restore, the
// restored state's (or a later one's).
func (n *Node) lastSnapshotIndex() uint64 {
	i, _ := strconv.ParseUint(n.raft.Stats()["last_snapshot_index"], 10, 64)
	return i
}

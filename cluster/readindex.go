package cluster

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"sync"
	"time"

	"github.com/hashicorp/raft"
)

// Linearizable reads on followers (the Raft thesis, section 6.4; etcd's ReadIndex). A follower
// asks the leader for a read index at a moment after the read arrived; the leader takes its
// commit index, confirms that it still led when the question arrived as for its own
// linearizable reads (confirmer), counting the asker, whose term shows it had voted in no
// later one (readIndexFor), and answers the index; the follower waits until its state
// machine has applied everything up to that index and reads its own state. The argument is
// in docs/safety.md ("Linearizable reads on followers").

// ReadIndex answers, on the ready leader, a read index for a linearizable read that arrived at
// another node before this call began: an index such that a state machine that has applied
// every entry up to it holds every write acknowledged, and every entry any node had applied,
// before the call began. It confirms the leadership with a majority of voters that accepted
// this node's term in messages sent after the call began (as ReadBarrier does), so a node
// deposed without knowing it answers an error, never an index that misses a newer leader's
// writes. ErrNotLeader when this node is not the ready leader.
func (n *Node) ReadIndex(ctx context.Context) (uint64, error) {
	return n.readIndexFor(ctx, raft.Server{}, 0)
}

// readIndexFor is ReadIndex for a question that asker (zero: none named) sent in askerTerm,
// its own term read after the read arrived. A member that was in a term then had voted in no
// later one (a node takes a newer term before it votes in it), so when askerTerm is this
// leader's term and asker is a voter of its configuration, asker counts towards the majority
// that confirms the leadership, as a voter that accepted an AppendEntries sent after the read
// arrived does: with three voters the leader and the asker are that majority, and no round of
// heartbeats is needed; with five, one more voter's acknowledgment is.
func (n *Node) readIndexFor(ctx context.Context, asker raft.Server, askerTerm uint64) (uint64, error) {
	arrived := time.Now()
	term, err := n.admit()
	if err != nil {
		return 0, err
	}
	// Taken after the arrival: every entry acknowledged (or applied by any node) before the
	// call began was committed by then, by this leader or, before its Barrier, by an earlier
	// one; a ready leader's commit index covers both.
	commit := n.raft.CommitIndex()
	if askerTerm != term || !n.isVoter(asker) {
		asker = raft.Server{}
	}
	if err := n.verify.confirmWith(ctx, arrived, term, asker); err != nil {
		return 0, err
	}
	if asker.ID != "" {
		n.metrics.readIndexesByAsker.Add(1)
	} else {
		n.metrics.readIndexesByAcks.Add(1)
	}
	return n.visibleIndex(commit), nil
}

// visibleIndex returns the index of the last entry at or below index that the state machine
// applies (a command or a configuration): raft keeps its no-op and barrier entries to itself,
// so a state machine's applied index never reaches one of those, and a wait for it would last
// until the next command. If the log no longer holds an entry on the way down (it was
// compacted into a snapshot), the index where the search stopped is answered: a state
// machine restored from a snapshot at or after it has applied everything below.
func (n *Node) visibleIndex(index uint64) uint64 {
	logs := n.readLogs
	if logs == nil {
		return index
	}
	var l raft.Log
	for i := index; i > 0; i-- {
		if err := logs.GetLog(i, &l); err != nil {
			return i
		}
		if l.Type == raft.LogCommand || l.Type == raft.LogConfiguration {
			return i
		}
	}
	return 0
}

// WaitApplied returns once this node's state machine has applied every entry up to index that
// it applies (see visibleIndex), or with ctx's error, or ErrShutdown when the node closes.
func (n *Node) WaitApplied(ctx context.Context, index uint64) error {
	for {
		woken := n.applyWake.wait()
		if n.fsm.AppliedIndex() >= index {
			return nil
		}
		select {
		case <-woken:
		case <-ctx.Done():
			return fmt.Errorf("cluster: waiting for this node to apply index %d (applied %d): %w",
				index, n.fsm.AppliedIndex(), ctx.Err())
		case <-n.stop:
			return ErrShutdown
		}
	}
}

// applyWatch wakes the waits of WaitApplied each time the state machine applies a batch or
// restores a snapshot. It makes a channel only while someone waits.
type applyWatch struct {
	mu sync.Mutex
	ch chan struct{}
}

func newApplyWatch() *applyWatch { return &applyWatch{} }

// wait returns a channel closed at the next apply.
func (w *applyWatch) wait() <-chan struct{} {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.ch == nil {
		w.ch = make(chan struct{})
	}
	return w.ch
}

// applied wakes every wait.
func (w *applyWatch) applied() {
	w.mu.Lock()
	if w.ch != nil {
		close(w.ch)
		w.ch = nil
	}
	w.mu.Unlock()
}

// wakingFSM is the state machine raft applies to, waking the waits of WaitApplied after each
// batch and each restore.
type wakingFSM struct {
	raft.BatchingFSM
	w *applyWatch
}

// Apply applies l and wakes the waits.
func (f wakingFSM) Apply(l *raft.Log) interface{} {
	return f.ApplyBatch([]*raft.Log{l})[0]
}

// ApplyBatch applies logs and wakes the waits.
func (f wakingFSM) ApplyBatch(logs []*raft.Log) []interface{} {
	out := f.BatchingFSM.ApplyBatch(logs)
	f.w.applied()
	return out
}

// Restore restores a snapshot and wakes the waits.
func (f wakingFSM) Restore(rc io.ReadCloser) error {
	err := f.BatchingFSM.Restore(rc)
	f.w.applied()
	return err
}

// ChannelReadIndex asks the leader for a read index over the peer channel (LeaderReadIndex),
// without an HTTP request inside. The payload names the asker: its term (8 bytes,
// big-endian), then its id (a uvarint length, then the bytes) and its Raft address (the
// rest); an empty payload, as members of an earlier version send, names nobody. The answer
// is a status byte and, when it is readIndexOK, the index in 8 bytes, big-endian. (A number
// far from the channel's other kinds, which are numbered from 1 up.)
const ChannelReadIndex ChannelKind = 64

// askerPayload encodes a ChannelReadIndex question's payload.
func askerPayload(term uint64, id, addr string) []byte {
	b := binary.BigEndian.AppendUint64(make([]byte, 0, 8+binary.MaxVarintLen64+len(id)+len(addr)), term)
	b = binary.AppendUvarint(b, uint64(len(id)))
	b = append(b, id...)
	return append(b, addr...)
}

// isVoter reports whether s (id and address) is a voter of this node's latest configuration.
func (n *Node) isVoter(s raft.Server) bool {
	f := n.raft.GetConfiguration()
	if s.ID == "" || f.Error() != nil {
		return false
	}
	for _, v := range f.Configuration().Servers {
		if v.ID == s.ID && v.Address == s.Address && v.Suffrage == raft.Voter {
			return true
		}
	}
	return false
}

// asker returns the payload of this node's ChannelReadIndex question: its term, read now
// (after the reads the question is for arrived), with its id and its address as its own view
// of the configuration has them, so that the leader may count it towards its confirmation
// (readIndexFor); nil, naming nobody, when this node is not a voter in that view. The
// address is the configuration's, not this process's word for itself: a stale process of a
// member removed and added again elsewhere under the same id names the old address, which
// the leader's configuration no longer has.
func (n *Node) asker() []byte {
	term := n.raft.CurrentTerm()
	f := n.raft.GetConfiguration()
	if f.Error() != nil {
		return nil
	}
	for _, s := range f.Configuration().Servers {
		if string(s.ID) == n.cfg.ID && s.Suffrage == raft.Voter {
			return askerPayload(term, n.cfg.ID, string(s.Address))
		}
	}
	return nil
}

// parseAsker decodes a ChannelReadIndex question's payload; the zero server when it names
// nobody or is malformed (the question is then confirmed by heartbeats alone).
func parseAsker(p []byte) (raft.Server, uint64) {
	if len(p) < 8 {
		return raft.Server{}, 0
	}
	term := binary.BigEndian.Uint64(p)
	n, w := binary.Uvarint(p[8:])
	if w <= 0 || n == 0 || n > uint64(len(p)-8-w) {
		return raft.Server{}, 0
	}
	rest := p[8+w:]
	return raft.Server{ID: raft.ServerID(rest[:n]), Address: raft.ServerAddress(rest[n:])}, term
}

// The status byte of a ChannelReadIndex answer.
const (
	readIndexOK        byte = 0
	readIndexNotLeader byte = 1 // not the ready leader, or its leadership was not confirmed
	readIndexTimeout   byte = 2 // the confirmation did not end in time
)

// serveReadIndex answers a member's ChannelReadIndex request.
func (n *Node) serveReadIndex(ctx context.Context, req ChannelRequest) []byte {
	asker, term := parseAsker(req.Payload)
	index, err := n.readIndexFor(ctx, asker, term)
	switch {
	case err == nil:
		return binary.BigEndian.AppendUint64([]byte{readIndexOK}, index)
	case errors.Is(err, ErrNotLeader), errors.Is(err, ErrNoLeader), errors.Is(err, ErrShutdown):
		return []byte{readIndexNotLeader}
	}
	return []byte{readIndexTimeout}
}

// LeaderReadIndex asks the leader for a read index over the peer channel (see ReadIndex),
// naming this node and its term, so that the leader may count it as one of the majority that
// confirms its leadership (readIndexFor). An error wraps ErrChannelUnavailable or
// ErrChannelUnknownKind when nothing was asked (the channel is not enabled, or the leader is
// of a version without this kind); ErrNotLeader when the leader could not confirm its
// leadership; otherwise the outcome is unknown.
func (n *Node) LeaderReadIndex(ctx context.Context) (uint64, error) {
	_, out, err := n.CallLeader(ctx, ChannelReadIndex, n.asker())
	if err != nil {
		return 0, err
	}
	if len(out) == 9 && out[0] == readIndexOK {
		return binary.BigEndian.Uint64(out[1:]), nil
	}
	if len(out) == 1 && out[0] == readIndexNotLeader {
		return 0, fmt.Errorf("%w: the leader could not confirm its leadership for a read index", ErrNotLeader)
	}
	return 0, fmt.Errorf("%w: no read index from the leader", ErrUnknownOutcome)
}

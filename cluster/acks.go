package cluster

import (
	"sync"
	"time"

	"github.com/hashicorp/raft"
)

// ackTransport is raft's network transport that also records, for each peer, when the newest
// AppendEntries that the peer accepted was sent, and in which term.
//
// A leadership confirmation must rest on replies to messages sent after the request it
// confirms arrived: only then does a majority prove that no newer leader had been elected by
// that moment (each of them accepted this leader's term after it, so none had yet voted in a
// later term, and every later election needs one of their votes). raft's VerifyLeader is
// weaker: it also counts the reply to a heartbeat that was already in flight when it began,
// which may have been sent up to the transport's timeout earlier, and it counts non-voters.
// So the confirmer checks this record after a VerifyLeader round, and runs another round
// until a majority of voters acknowledged messages sent after the request arrived.
type ackTransport struct {
	*raft.NetworkTransport

	mu   sync.Mutex
	acks map[raft.ServerID]peerAck
	// seen records, per peer, what the metrics show: when it last answered an append in any
	// term, and the newest log index it accepted (progress).
	seen map[raft.ServerID]peerProgress
}

// peerProgress is what a peer last showed of its log, for the metrics.
type peerProgress struct {
	term, match uint64
	answered    time.Time
}

// peerAck is the newest accepted AppendEntries sent to one peer.
type peerAck struct {
	term uint64
	sent time.Time
}

func newAckTransport(t *raft.NetworkTransport) *ackTransport {
	return &ackTransport{NetworkTransport: t, acks: make(map[raft.ServerID]peerAck), seen: make(map[raft.ServerID]peerProgress)}
}

// AppendEntries sends the request and records its send time if the peer accepted it in the
// request's term (heartbeats, and appends whose log matched).
func (t *ackTransport) AppendEntries(id raft.ServerID, target raft.ServerAddress, args *raft.AppendEntriesRequest, resp *raft.AppendEntriesResponse) error {
	sent := time.Now()
	err := t.NetworkTransport.AppendEntries(id, target, args, resp)
	if err == nil {
		t.mu.Lock()
		p := t.seen[id]
		p.answered = time.Now()
		// A heartbeat names no entry, so it tells nothing of the peer's log. An append
		// accepted in a newer term may follow a truncation of the peer's log, so its match
		// counts even if lower.
		heartbeat := args.PrevLogEntry == 0 && len(args.Entries) == 0
		if match := args.PrevLogEntry + uint64(len(args.Entries)); resp.Success && resp.Term == args.Term && !heartbeat &&
			(args.Term > p.term || match > p.match) {
			p.term, p.match = args.Term, match
		}
		t.seen[id] = p
		if resp.Success && resp.Term == args.Term {
			if a := t.acks[id]; args.Term > a.term || args.Term == a.term && sent.After(a.sent) {
				t.acks[id] = peerAck{term: args.Term, sent: sent}
			}
		}
		t.mu.Unlock()
	}
	return err
}

// AppendEntriesPipeline refuses pipelining, so that every append passes through
// AppendEntries and is recorded. (The transport is configured with one RPC in flight, which
// turns pipelining off anyway; see Node.open.)
func (t *ackTransport) AppendEntriesPipeline(raft.ServerID, raft.ServerAddress) (raft.AppendPipeline, error) {
	return nil, raft.ErrPipelineReplicationNotSupported
}

// progress returns the newest log index the peer accepted and when it last answered an
// append (zero if never).
func (t *ackTransport) progress(id raft.ServerID) (match uint64, answered time.Time) {
	t.mu.Lock()
	defer t.mu.Unlock()
	p := t.seen[id]
	return p.match, p.answered
}

// quorumSince reports whether a majority of the voters of cfg, counting self, accepted in
// term an AppendEntries sent at or after since. asker, when not zero, is a voter (same id and
// address in cfg) whose own word shows that it had voted in no later term at a moment after
// the request arrived (see Node.readIndexFor): it counts as well.
func (t *ackTransport) quorumSince(cfg raft.Configuration, self raft.ServerID, asker raft.Server, term uint64, since time.Time) bool {
	voters, acked := 0, 0
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, s := range cfg.Servers {
		if s.Suffrage != raft.Voter {
			continue
		}
		voters++
		if s.ID == self || asker.ID != "" && s.ID == asker.ID && s.Address == asker.Address {
			acked++
			continue
		}
		if a, ok := t.acks[s.ID]; ok && a.term == term && !a.sent.Before(since) {
			acked++
		}
	}
	return voters > 0 && acked >= voters/2+1
}

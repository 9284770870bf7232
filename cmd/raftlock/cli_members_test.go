package main

import (
	"strings"
	"testing"
	"time"

	"github.com/raftlock/raftlock/api"
	"github.com/raftlock/raftlock/internal/testkit"
)

// raftlock leader transfer moves the leadership to the member named, and members list shows
// the new leader with every member's suffrage and lag.
func TestLeaderTransferAndMembersList(t *testing.T) {
	var before api.MembersResponse
	decodeRun(t, &before, "members", "list", "-o", "json")
	target := ""
	for _, m := range before.Members {
		if !m.Leader {
			target = m.ID
		}
	}
	if target == "" {
		t.Fatalf("no follower in %+v", before.Members)
	}
	out := mustRun(t, "leader", "transfer", target)
	if strings.TrimSpace(out) != "leader: "+target {
		t.Fatalf("leader transfer printed %q, want the leader %s", out, target)
	}
	testkit.Eventually(t, 20*time.Second, "the members list to show the new leader with every lag", func() bool {
		var after api.MembersResponse
		decodeRun(t, &after, "members", "-o", "json")
		for _, m := range after.Members {
			if m.Suffrage != api.SuffrageVoter || m.Leader != (m.ID == target) || m.Lag == nil {
				return false
			}
		}
		return len(after.Members) == 3
	})
	if r := runCLI(t, "members", "promote", "nobody"); r.code != 1 || !strings.Contains(r.stderr, "not_found") {
		t.Fatalf("promote of an unknown member: exit %d, %s", r.code, r.stderr)
	}
}

// raftlock members add with an existing member's id and other addresses, or with an existing
// member's Raft address under a new id, fails with member_conflict and changes nothing (it
// used to exit 0 having moved the voter).
func TestMembersAddConflictFails(t *testing.T) {
	var before api.MembersResponse
	decodeRun(t, &before, "members", "list", "-o", "json")
	m := before.Members[1]
	for _, args := range [][]string{
		{"members", "add", m.ID, "127.0.0.1:1", "127.0.0.1:2"},
		{"members", "add", "n9", m.RaftAddr, "127.0.0.1:2"},
	} {
		if r := runCLI(t, args...); r.code != 1 || !strings.Contains(r.stderr, "member_conflict") {
			t.Fatalf("%v: exit %d, %s", args, r.code, r.stderr)
		}
	}
	var after api.MembersResponse
	decodeRun(t, &after, "members", "list", "-o", "json")
	for i, a := range after.Members {
		if b := before.Members[i]; len(after.Members) != len(before.Members) || a.ID != b.ID || a.RaftAddr != b.RaftAddr || a.Suffrage != b.Suffrage {
			t.Fatalf("members after refused adds %+v, before %+v", after.Members, before.Members)
		}
	}
}

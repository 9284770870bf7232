package client_test

import (
	"errors"
	"testing"
	"time"

	"github.com/raftlock/raftlock/client"
)

// An operator's forced release is fail-safe: the holder's client stops believing it holds the
// lock (its Context ends) before another session is granted it, even when the holder is cut
// off from the cluster and learns nothing but what its own lease tells it. The next holder's
// token is newer, so a resource that fences refuses the old one once it has seen the new.
func TestForceReleaseEndsTheHoldersBeliefBeforeTheNextGrant(t *testing.T) {
	dev := sharedCluster(t)
	ctx := testCtx(t, 60*time.Second)
	name := lockName(t, "m")
	ps, eps := proxiedEndpoints(t, dev)
	holder := lockedMutex(ctx, t, newClient(t, eps), name, client.WithTTL(3*time.Second))
	old := holder.Token()

	c := newClient(t, dev.Endpoints())
	next := client.NewMutex(newSession(t, c), name)
	type grant struct {
		err            error
		holderBelieved bool
	}
	granted := make(chan grant, 1)
	go func() {
		err := next.Lock(ctx)
		// The grant came before Lock returned: if the holder's Context had not ended by now,
		// it had not ended at the grant either.
		granted <- grant{err, holder.Context().Err() == nil}
	}()
	waitWaiters(ctx, t, c, name, 1)

	ps.Cut() // the holder hears nothing more: not even that its session is gone
	res, err := c.Raw().ForceRelease(ctx, name, old)
	if err != nil {
		t.Fatal(err)
	}
	if !res.Released || res.EndedSession != holder.Session().ID() || len(res.HeldBack) != 1 || res.HeldBack[0] != name || res.AvailableIn == "" {
		t.Fatalf("forced release answered %+v", res)
	}
	g := <-granted
	if g.err != nil {
		t.Fatal(g.err)
	}
	if g.holderBelieved {
		t.Fatal("another session was granted the lock while the holder's client still believed it held it")
	}
	if next.Token() <= old {
		t.Fatalf("the next grant's token %d is not above the old holder's %d", next.Token(), old)
	}
	if chk, err := c.Raw().CheckToken(ctx, name, old); err != nil || chk.Current {
		t.Fatalf("the old token checks as %+v, %v: want not current", chk, err)
	}
	// Forcing it again with the old token finds no such grant.
	if _, err := c.Raw().ForceRelease(ctx, name, old); !errors.Is(err, client.ErrNotHolder) {
		t.Fatalf("a second forced release under the old token: %v, want ErrNotHolder", err)
	}
}

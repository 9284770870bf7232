package client_test

import (
	"bytes"
	"errors"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/raftlock/raftlock/agent"
	"github.com/raftlock/raftlock/client"
	"github.com/raftlock/raftlock/internal/testkit"
)

// A restore (PUT /v1/snapshot) changes what live sessions hold without their clients asking:
// a lock taken after the backup, by a session in the backup (a) or by one created after it
// (c), is gone from the restored state, and a lock released after the backup (b) is in it
// again. No other session may take such a lock while the client that was told it holds it may
// still believe so (its Mutex's Context ends first), and no session may go on holding a lock
// that its client released (another takes it within a few TTLs).
func TestRestoreEndsEveryHoldItChangesBeforeAnotherIsGranted(t *testing.T) {
	const ttl = 3 * time.Second
	dev := ownCluster(t)
	c := newClient(t, dev.Endpoints())
	ctx := testCtx(t, 60*time.Second)

	a := newSession(t, c, client.WithTTL(ttl))
	released := client.NewMutex(a, "restore/b")
	if err := released.Lock(ctx); err != nil {
		t.Fatal(err)
	}
	var backup bytes.Buffer
	if err := c.Raw().SaveSnapshot(ctx, &backup); err != nil {
		t.Fatal(err)
	}
	takenAfter := client.NewMutex(a, "restore/a")
	if err := takenAfter.Lock(ctx); err != nil {
		t.Fatal(err)
	}
	if err := released.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	newer := lockedMutex(ctx, t, c, "restore/c", client.WithTTL(ttl))

	if _, err := c.Raw().RestoreSnapshot(ctx, bytes.NewReader(backup.Bytes()), client.RestoreOptions{}); err != nil {
		t.Fatalf("restore: %v", err)
	}

	other := newSession(t, c, client.WithTTL(ttl))
	for name, believer := range map[string]*client.Mutex{"restore/a": takenAfter, "restore/b": nil, "restore/c": newer} {
		m := client.NewMutex(other, name)
		// 2.5 TTLs is longer than any belief of a client told before the restore can last, and
		// than a session of the backup that nobody renews can live.
		testkit.Eventually(t, ttl*5/2+5*time.Second, "another session to take "+name, func() bool {
			err := m.TryLock(ctx)
			if err != nil {
				if !errors.Is(err, client.ErrLockHeld) && !errors.Is(err, client.ErrLockDelayed) {
					t.Fatalf("TryLock %s: %v", name, err)
				}
				return false
			}
			if believer != nil && believer.Context().Err() == nil {
				t.Fatalf("%s granted to another session while the client told it held it still believes so", name)
			}
			return true
		})
	}
}

// The disaster-recovery path of the issue: a backup restored into a brand-new `raftlock dev`
// cluster as soon as one node answers /v1/ready, on every attempt; before, 3 restores in 4
// were refused ("the backup uses feature attempt-numbers, which not every member supports
// yet") while every member ran the same build. The server now waits for a feature every
// member supports, and readiness waits for the leader to enable them.
func TestRestoreIntoANewDevClusterAsSoonAsItIsReady(t *testing.T) {
	ctx := testCtx(t, 3*time.Minute)
	src := newClient(t, sharedCluster(t).Endpoints())
	var file bytes.Buffer
	if err := src.Raw().SaveSnapshot(ctx, &file); err != nil {
		t.Fatal(err)
	}
	for attempt := range 3 {
		dev, err := agent.StartDev(ctx, agent.DevOptions{ReturnWhenReady: true})
		if err != nil {
			t.Fatal(err)
		}
		c := newClient(t, dev.Endpoints())
		_, err = c.Raw().RestoreSnapshot(ctx, bytes.NewReader(file.Bytes()), client.RestoreOptions{})
		dev.Close()
		if err != nil {
			t.Fatalf("restore %d into a new cluster as soon as it was ready: %v", attempt+1, err)
		}
	}
}

// A restore from a file goes on through the next node when an attempt fails before the
// backup reached a node (here, an endpoint nobody listens on): the file is read again from its
// start, not closed by the first attempt's transport.
func TestRestoreFromAFileOutlivesAFailedAttempt(t *testing.T) {
	dev := ownCluster(t)
	ctx := testCtx(t, 60*time.Second)
	c := newClient(t, dev.Endpoints())
	path := filepath.Join(t.TempDir(), "backup.snap")
	out, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Raw().SaveSnapshot(ctx, out); err != nil {
		t.Fatal(err)
	}
	if err := out.Close(); err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := "http://" + ln.Addr().String()
	ln.Close() // nobody listens there: the first attempt fails at its dial
	viaDead := newClient(t, append([]string{dead}, dev.Endpoints()...))
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	res, err := viaDead.Raw().RestoreSnapshot(ctx, f, client.RestoreOptions{})
	if err != nil {
		t.Fatalf("restore from a file, the first endpoint down: %v", err)
	}
	if res.BackupIndex == 0 || res.Index <= res.BackupIndex {
		t.Fatalf("the restore answered %+v, want the backup restored at an index past it", res)
	}
}

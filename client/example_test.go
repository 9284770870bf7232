package client_test

import (
	"context"
	"fmt"
	"log"
	"net/http"
	"net/http/httptest"
	"strings"
	"time"

	"github.com/raftlock/raftlock/client"
)

// A protected resource keeps the highest token it has seen and refuses older ones, so a
// holder that was paused past its lease cannot overwrite a newer holder's work.
func ExampleFence() {
	fence := client.NewFence()
	var stored string
	resource := fence.Handler("reports/daily", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		stored = r.URL.Query().Get("data")
	}))
	srv := httptest.NewServer(resource)
	defer srv.Close()

	write := func(token uint64, data string) {
		req, _ := http.NewRequest(http.MethodPut, srv.URL+"/?data="+data, nil)
		client.SetToken(req.Header, token) // the holder sends its fencing token along
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			log.Fatal(err)
		}
		resp.Body.Close()
		fmt.Printf("write %q with token %d: %d\n", data, token, resp.StatusCode)
	}
	write(41, "from-new-holder")
	write(17, "from-paused-old-holder")
	fmt.Println("stored:", stored)
	// Output:
	// write "from-new-holder" with token 41: 200
	// write "from-paused-old-holder" with token 17: 409
	// stored: from-new-holder
}

// Fence.Check is the same rule without HTTP.
func ExampleFence_Check() {
	fence := client.NewFence()
	fmt.Println(fence.Check("jobs/nightly", 12))
	fmt.Println(fence.Check("jobs/nightly", 9))
	// Output:
	// <nil>
	// raftlock: stale fencing token 9 for lock "jobs/nightly": token 12 was already accepted
}

// Run a job under a lock, stop it if the lock is lost, and pass the fencing token to the
// resource. Needs a running cluster (raftlock dev).
func ExampleMutex() {
	ctx := context.Background()
	c, err := client.New([]string{"http://127.0.0.1:7001", "http://127.0.0.1:7002", "http://127.0.0.1:7003"})
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
	s, err := c.NewSession(ctx, client.WithTTL(15*time.Second))
	if err != nil {
		log.Fatal(err)
	}
	defer s.Close(context.Background())

	m := client.NewMutex(s, "jobs/nightly")
	if err := m.Lock(ctx); err != nil {
		log.Fatal(err)
	}
	// Work under the lock: stop when m.Context() is done, send m.Token() with every write.
	req, _ := http.NewRequestWithContext(m.Context(), http.MethodPost, "http://storage.internal/report",
		strings.NewReader("..."))
	client.SetToken(req.Header, m.Token())
	if resp, err := http.DefaultClient.Do(req); err == nil {
		resp.Body.Close()
	}
	if err := m.Unlock(context.Background()); err != nil {
		log.Printf("the lock was lost while working: %v", err)
	}
}

// Elect a leader among instances of a service and follow who leads. Needs a running cluster.
func ExampleElection() {
	ctx := context.Background()
	c, err := client.New([]string{"http://127.0.0.1:7001", "http://127.0.0.1:7002", "http://127.0.0.1:7003"})
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
	s, err := c.NewSession(ctx)
	if err != nil {
		log.Fatal(err)
	}
	defer s.Close(context.Background())

	e := client.NewElection(s, "services/scheduler")
	go func() {
		for leader := range e.Observe(ctx) {
			if !leader.Held {
				log.Printf("nobody leads")
				continue
			}
			log.Printf("leader is now %s (token %d)", leader.Value, leader.Token)
		}
	}()
	if err := e.Campaign(ctx, "10.0.0.5:8080"); err != nil {
		log.Fatal(err)
	}
	// Lead until e.Context() is done; e.Token() fences what the leader writes.
	log.Printf("leading with token %d", e.Token())
	<-e.Context().Done()
}

// Let at most three workers run a job at once, each with its own fencing token. Needs a
// running cluster.
func ExampleSemaphore() {
	ctx := context.Background()
	c, err := client.New([]string{"http://127.0.0.1:7001", "http://127.0.0.1:7002", "http://127.0.0.1:7003"})
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
	s, err := c.NewSession(ctx)
	if err != nil {
		log.Fatal(err)
	}
	defer s.Close(context.Background())

	sem := client.NewSemaphore(s, "jobs/reindex", 3)
	if err := sem.Acquire(ctx); err != nil {
		log.Fatal(err)
	}
	defer sem.Release(context.Background())
	log.Printf("one of at most 3 workers, token %d", sem.Token()) // stop when sem.Context() is done
}

// Many readers or one writer of a shared document. Needs a running cluster.
func ExampleRWMutex() {
	ctx := context.Background()
	c, err := client.New([]string{"http://127.0.0.1:7001", "http://127.0.0.1:7002", "http://127.0.0.1:7003"})
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
	s, err := c.NewSession(ctx)
	if err != nil {
		log.Fatal(err)
	}
	defer s.Close(context.Background())

	rw := client.NewRWMutex(s, "docs/handbook")
	if err := rw.RLock(ctx); err != nil { // readers share it; a waiting writer goes first
		log.Fatal(err)
	}
	log.Printf("reading under token %d", rw.Token())
	if err := rw.RUnlock(ctx); err != nil {
		log.Fatal(err)
	}
	if err := rw.Lock(ctx); err != nil { // alone: no reader, no other writer
		log.Fatal(err)
	}
	log.Printf("writing under token %d", rw.Token())
	if err := rw.Unlock(ctx); err != nil {
		log.Fatal(err)
	}
}

package workload

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/raftlock/raftlock/jepsen/history"
)

// One table read is one read per lock of the run: a listed lock as listed, a lock the table
// leaves out free, all with the request's interval.
func TestReadTableRecordsEveryLock(t *testing.T) {
	ep := endpointOf(t, func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/v1/locks" || r.URL.RawQuery != "" {
			http.Error(w, "want a linearizable GET /v1/locks", http.StatusBadRequest)
			return
		}
		w.Write([]byte(`{"locks":[{"name":"a","held":true,"session":"s1","token":7,"modify_index":9},
			{"name":"b","held":false,"waiters":1,"modify_index":11},{"name":"zz","held":true,"session":"s2","token":3}]}`))
	})
	rec := history.NewRecorder(nil)
	cl := NewClient(rec, nil, Config{OpTimeout: time.Second})
	ops := cl.ReadTable(context.Background(), ep, 42, []string{"a", "b", "c"})
	if len(ops) != 3 || len(rec.Ops()) != 3 {
		t.Fatalf("want one op per lock, got %d (%d recorded)", len(ops), len(rec.Ops()))
	}
	a, b, c := ops[0], ops[1], ops[2]
	if a.Kind != history.Read || a.Type != history.OK || a.Lock != "a" || !a.Held || a.OutSession != "s1" || a.OutToken != 7 || a.OutIndex != 9 {
		t.Errorf("held lock: %s", a)
	}
	if b.Lock != "b" || b.Held || b.OutSession != "" || b.OutIndex != 11 {
		t.Errorf("awaited lock: %s", b)
	}
	if c.Lock != "c" || c.Held || c.Type != history.OK {
		t.Errorf("a lock the table leaves out is free: %s", c)
	}
	if a.Invoke != c.Invoke || a.Complete != c.Complete || a.Process != 42 || a.Node != "n1" {
		t.Errorf("every op has the request's interval, process and node: %s / %s", a, c)
	}
}

func TestIsAcquire(t *testing.T) {
	for _, c := range []struct {
		method, path string
		want         bool
	}{
		{http.MethodPost, "/v1/locks/jobs/a/acquire", true},
		{http.MethodDelete, "/v1/locks/a/acquire", false}, // a cancel
		{http.MethodPost, "/v1/locks/a/release", false},
		{http.MethodPut, "/v1/sessions/x/renew", false},
		{http.MethodGet, "/v1/locks/a", false},
	} {
		r, _ := http.NewRequest(c.method, "http://n"+c.path, nil)
		if got := IsAcquire(r); got != c.want {
			t.Errorf("%s %s: %v, want %v", c.method, c.path, got, c.want)
		}
	}
}

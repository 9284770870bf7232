package workload

import (
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/raftlock/raftlock/api"
	"github.com/raftlock/raftlock/jepsen/history"
)

func endpointOf(t *testing.T, h http.HandlerFunc) Endpoint {
	t.Helper()
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return Endpoint{ID: "n1", Addr: strings.TrimPrefix(srv.URL, "http://")}
}

func errorReply(status int, code string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(status)
		body := `{"error":{"code":"` + code + `","message":"m"}`
		if code == api.CodeLockHeld {
			body += `,"holder":{"session":"abc","token":7}`
		}
		w.Write([]byte(body + "}"))
	}
}

// Each outcome is classified by what it proves about the request's effect.
func TestOutcomeClassification(t *testing.T) {
	cases := []struct {
		name     string
		handler  http.HandlerFunc
		typ      history.Type
		code     string
		holder   string
		holderTo uint64
	}{
		{"granted", func(w http.ResponseWriter, r *http.Request) {
			w.Write([]byte(`{"name":"l","session":"s","token":42,"value":""}`))
		}, history.OK, "", "s", 42},
		{"lock held names the holder", errorReply(409, api.CodeLockHeld), history.Fail, api.CodeLockHeld, "abc", 7},
		{"session gone", errorReply(404, api.CodeSessionNotFound), history.Fail, api.CodeSessionNotFound, "", 0},
		{"bad request", errorReply(400, api.CodeInvalidArgument), history.Fail, api.CodeInvalidArgument, "", 0},
		{"no leader applied nothing", errorReply(503, api.CodeNoLeader), history.Fail, api.CodeNoLeader, "", 0},
		{"timeout is unknown", errorReply(503, api.CodeTimeout), history.Info, api.CodeTimeout, "", 0},
		{"internal error is unknown", errorReply(500, api.CodeInternal), history.Info, api.CodeInternal, "", 0},
		{"garbled success is unknown", func(w http.ResponseWriter, r *http.Request) { w.Write([]byte(`{"token":`)) },
			history.Info, "", "", 0},
		{"connection cut after the request is unknown", func(w http.ResponseWriter, r *http.Request) {
			c, _, err := w.(http.Hijacker).Hijack()
			if err == nil {
				c.Close()
			}
		}, history.Info, "", "", 0},
		{"client timeout is unknown", func(w http.ResponseWriter, r *http.Request) {
			io.ReadAll(r.Body) // then the server notices the client leaving
			select {
			case <-r.Context().Done():
			case <-time.After(5 * time.Second):
			}
		}, history.Info, "", "", 0},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			rec := history.NewRecorder(nil)
			cl := NewClient(rec, nil, Config{OpTimeout: 300 * time.Millisecond})
			op := cl.Acquire(context.Background(), endpointOf(t, c.handler), 0, "l", "s", "", 0, "")
			if op.Type != c.typ || op.Code != c.code || op.OutSession != c.holder || op.OutToken != c.holderTo {
				t.Fatalf("got %s", op)
			}
			if op.Complete < op.Invoke || op.Node != "n1" {
				t.Fatalf("times or node wrong: %s", op)
			}
			if got := rec.Ops(); len(got) != 1 {
				t.Fatalf("one request must be one op, got %d", len(got))
			}
		})
	}
}

func TestUnreachableNodeIsADefiniteFailure(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close() // nothing listens here now
	cl := NewClient(history.NewRecorder(nil), nil, Config{OpTimeout: time.Second})
	op := cl.Release(context.Background(), Endpoint{ID: "n9", Addr: addr}, 0, "l", "s", 3)
	if op.Type != history.Fail || !strings.HasPrefix(op.Error, "not sent") {
		t.Fatalf("a request that was never sent must fail definitely: %s", op)
	}
}

func TestResourceRejectsStaleTokens(t *testing.T) {
	rec := history.NewRecorder(nil)
	r := NewResource(rec, false)
	if !r.Write(0, "a", "s1", 5, "x") || !r.Write(1, "a", "s2", 9, "y") || !r.Write(1, "a", "s2", 9, "z") {
		t.Fatal("writes with non-decreasing tokens must be accepted")
	}
	if r.Write(0, "a", "s1", 5, "late") {
		t.Fatal("a stale token must be rejected")
	}
	if !r.Write(0, "b", "s1", 1, "x") {
		t.Fatal("locks are independent")
	}
	ops := rec.Ops()
	if ops[3].Type != history.Fail || ops[3].OutToken != 9 {
		t.Fatalf("the rejected write must be recorded as fail with the highest token: %s", ops[3])
	}

	ignoring := NewResource(history.NewRecorder(nil), true)
	ignoring.Write(0, "a", "s2", 9, "y")
	if !ignoring.Write(0, "a", "s1", 5, "late") {
		t.Fatal("the token-ignoring resource accepts everything")
	}
}

func TestUncheckedRegisterAcceptsEverythingApart(t *testing.T) {
	rec := history.NewRecorder(nil)
	r := NewResource(rec, false)
	r.Write(0, "a", "s2", 9, "y")
	if !r.WriteAt(1, "a", "s1", 5, "late", true, -1) {
		t.Fatal("a register that does not check tokens accepts a stale token")
	}
	if r.Write(0, "a", "s1", 5, "late") {
		t.Fatal("the checked register still rejects it")
	}
	if !r.WriteAt(1, "a", "s3", 11, "z", true, 3) || !r.Write(0, "a", "s2", 10, "ok") {
		t.Fatal("an unchecked write must not raise the checked register's highest token")
	}
	ops := rec.Ops()
	if !ops[1].Unchecked || ops[1].Type != history.OK || ops[3].Invoke != 3 {
		t.Fatalf("unchecked writes are recorded as such, at the time the writer decided: %s / %s", ops[1], ops[3])
	}
}

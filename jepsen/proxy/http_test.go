package proxy

import (
	"context"
	"crypto/tls"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/raftlock/raftlock/internal/testkit"
)

// target is an HTTP server that records the requests it receives.
type target struct {
	mu   sync.Mutex
	seen []seenRequest
}

type seenRequest struct {
	body, remote string
	at           time.Time
}

func (tg *target) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	b, _ := io.ReadAll(r.Body)
	tg.mu.Lock()
	tg.seen = append(tg.seen, seenRequest{body: string(b), remote: r.RemoteAddr, at: time.Now()})
	tg.mu.Unlock()
	w.Header().Set("X-Seen", "yes")
	io.WriteString(w, "echo:"+string(b))
}

func (tg *target) requests() []seenRequest {
	tg.mu.Lock()
	defer tg.mu.Unlock()
	return append([]seenRequest(nil), tg.seen...)
}

func newHTTPProxy(t *testing.T, serverTLS, targetTLS *tls.Config, addr string) *HTTPProxy {
	t.Helper()
	p, err := ListenHTTP(addr, serverTLS, targetTLS)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	return p
}

func post(ctx context.Context, hc *http.Client, url, body string) (string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, strings.NewReader(body))
	if err != nil {
		return "", err
	}
	resp, err := hc.Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return string(b), err
}

func TestHTTPProxyForwardsCutsAndHeals(t *testing.T) {
	tg := &target{}
	ts := httptest.NewServer(tg)
	defer ts.Close()
	p := newHTTPProxy(t, nil, nil, ts.Listener.Addr().String())
	hc := &http.Client{Timeout: 500 * time.Millisecond}
	if got, err := post(context.Background(), hc, "http://"+p.Addr()+"/x", "a"); err != nil || got != "echo:a" {
		t.Fatalf("pass: %q %v", got, err)
	}
	p.SetMode(Blackhole)
	if _, err := post(context.Background(), hc, "http://"+p.Addr()+"/x", "b"); err == nil {
		t.Fatal("a request went through a black-holed proxy")
	}
	p.SetMode(Refuse)
	if _, err := post(context.Background(), hc, "http://"+p.Addr()+"/x", "c"); err == nil {
		t.Fatal("a request went through a refusing proxy")
	}
	p.SetMode(Pass)
	if got, err := post(context.Background(), hc, "http://"+p.Addr()+"/x", "d"); err != nil || got != "echo:d" {
		t.Fatalf("healed: %q %v", got, err)
	}
	if n := len(tg.requests()); n != 2 {
		t.Fatalf("the target saw %d requests, want the 2 that passed", n)
	}
}

// A request held back arrives late; its client gets the answer if it still waits, and the
// request arrives on its own if the client gave up.
func TestHTTPProxyHoldsRequestsBack(t *testing.T) {
	tg := &target{}
	ts := httptest.NewServer(tg)
	defer ts.Close()
	p := newHTTPProxy(t, nil, nil, ts.Listener.Addr().String())
	f := NewRequestFault(FaultConfig{Delay: 1, Min: 300 * time.Millisecond, Max: 300 * time.Millisecond, Seed: 1,
		Match: func(r *http.Request) bool { return r.URL.Path == "/acquire" }})
	p.SetFault(f)
	hc := &http.Client{}
	start := time.Now()
	if got, err := post(context.Background(), hc, "http://"+p.Addr()+"/acquire", "a"); err != nil || got != "echo:a" {
		t.Fatalf("held: %q %v", got, err)
	}
	if took := time.Since(start); took < 300*time.Millisecond {
		t.Fatalf("a held request was answered after %s, before its delay", took)
	}
	if got, err := post(context.Background(), hc, "http://"+p.Addr()+"/other", "b"); err != nil || got != "echo:b" {
		t.Fatalf("a request the fault does not match: %q %v", got, err)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if _, err := post(ctx, hc, "http://"+p.Addr()+"/acquire", "late"); err == nil {
		t.Fatal("the client got an answer before the delay")
	}
	if n := len(tg.requests()); n != 2 {
		t.Fatalf("the target saw %d requests before the delay ran out, want 2", n)
	}
	testkit.Eventually(t, 2*time.Second, "the held request", func() bool { return len(tg.requests()) == 3 })
	if got := tg.requests()[2].body; got != "late" {
		t.Fatalf("late request body %q", got)
	}
	testkit.Eventually(t, time.Second, "the count", func() bool { return f.Counts().Late == 1 })
	if c := f.Counts(); c.Delayed != 2 || c.Duplicated != 0 || c.Lost != 0 {
		t.Fatalf("counts %+v", c)
	}
}

// A duplicated request reaches the target at once, its answer is lost, and a copy arrives later
// on a new connection; a cut in between loses the copy.
func TestHTTPProxyDuplicatesRequests(t *testing.T) {
	tg := &target{}
	ts := httptest.NewServer(tg)
	defer ts.Close()
	p := newHTTPProxy(t, nil, nil, ts.Listener.Addr().String())
	f := NewRequestFault(FaultConfig{Duplicate: 1, Min: 200 * time.Millisecond, Max: 200 * time.Millisecond, Seed: 1})
	p.SetFault(f)
	hc := &http.Client{}
	if _, err := post(context.Background(), hc, "http://"+p.Addr()+"/acquire", "a"); err == nil {
		t.Fatal("the answer of a duplicated request reached the client")
	}
	if n := len(tg.requests()); n != 1 {
		t.Fatalf("the target saw %d requests, want the original", n)
	}
	testkit.Eventually(t, 2*time.Second, "the copy", func() bool { return len(tg.requests()) == 2 })
	seen := tg.requests()
	if seen[1].body != "a" || seen[1].at.Sub(seen[0].at) < 150*time.Millisecond || seen[1].remote == seen[0].remote {
		t.Fatalf("copy %+v after original %+v: want the same body, later, on another connection", seen[1], seen[0])
	}
	testkit.Eventually(t, time.Second, "the count", func() bool { return f.Counts().Late == 1 })

	cut := NewRequestFault(FaultConfig{Duplicate: 1, Min: 300 * time.Millisecond, Max: 300 * time.Millisecond})
	p.SetFault(cut)
	post(context.Background(), hc, "http://"+p.Addr()+"/acquire", "b")
	p.SetMode(Blackhole)
	p.SetMode(Pass)
	testkit.Eventually(t, 2*time.Second, "the copy's loss", func() bool { return cut.Counts().Lost == 1 })
	if n := len(tg.requests()); n != 3 {
		t.Fatalf("the target saw %d requests, want 3: a cut must lose the copy in flight", n)
	}
}

// Over TLS the proxy terminates the client's HTTPS (HTTP/2 included) with its own certificate
// and speaks HTTPS to the target.
func TestHTTPProxyOverTLS(t *testing.T) {
	tg := &target{}
	ts := httptest.NewUnstartedServer(tg)
	ts.EnableHTTP2 = true
	ts.StartTLS()
	defer ts.Close()
	clientTLS := ts.Client().Transport.(*http.Transport).TLSClientConfig
	p := newHTTPProxy(t, &tls.Config{Certificates: ts.TLS.Certificates}, clientTLS, ts.Listener.Addr().String())
	p.SetFault(NewRequestFault(FaultConfig{Delay: 1, Min: 100 * time.Millisecond, Max: 100 * time.Millisecond}))
	hc := ts.Client()
	req, _ := http.NewRequest(http.MethodPost, "https://"+p.Addr()+"/acquire", strings.NewReader("s"))
	resp, err := hc.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if string(b) != "echo:s" || resp.ProtoMajor != 2 || resp.Header.Get("X-Seen") != "yes" {
		t.Fatalf("got %q over HTTP/%d, headers %v", b, resp.ProtoMajor, resp.Header)
	}
}

//go:build linux

package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/raftlock/raftlock/api"
	"github.com/raftlock/raftlock/internal/testkit"
)

// These tests run `raftlock agent` processes and measure what a client that is not
// authenticated can make one spend: its memory (VmHWM, the peak resident set, from
// /proc/PID/status) and its open files (/proc/PID/fd). docs/security.md lists the bounds.

// agentProc is one running agent process.
type agentProc struct {
	cmd  *exec.Cmd
	id   string
	addr string // HTTP host:port
	log  *syncBuffer
}

func (p *agentProc) url() string { return "http://" + p.addr }

// startAgents starts a cluster of n agent processes with the extra flags, and waits until
// every node is ready and knows the leader's HTTP address.
func startAgents(t *testing.T, n int, extra ...string) []*agentProc {
	t.Helper()
	dir := t.TempDir()
	ports := freePorts(t, 2*n)
	var initial []string
	for i := range n {
		initial = append(initial, fmt.Sprintf("n%d=127.0.0.1:%d", i+1, ports[n+i]))
	}
	procs := make([]*agentProc, n)
	for i := range n {
		id := fmt.Sprintf("n%d", i+1)
		p := &agentProc{id: id, addr: fmt.Sprintf("127.0.0.1:%d", ports[i]), log: &syncBuffer{}}
		args := append([]string{"agent", "--id", id, "--data-dir", filepath.Join(dir, id),
			"--http-addr", p.addr, "--raft-addr", fmt.Sprintf("127.0.0.1:%d", ports[n+i]),
			"--initial-cluster", strings.Join(initial, ","), "--log-level", "warn"}, extra...)
		p.cmd = exec.Command(cliEnv.bin, args...)
		p.cmd.Stdout, p.cmd.Stderr = p.log, p.log
		if err := p.cmd.Start(); err != nil {
			t.Fatal(err)
		}
		procs[i] = p
		t.Cleanup(func() {
			_ = p.cmd.Process.Signal(syscall.SIGTERM)
			done := make(chan struct{})
			go func() { _ = p.cmd.Wait(); close(done) }()
			select {
			case <-done:
			case <-time.After(15 * time.Second):
				_ = p.cmd.Process.Kill()
				<-done
			}
		})
	}
	hc := &http.Client{Timeout: 2 * time.Second}
	defer hc.CloseIdleConnections()
	testkit.Eventually(t, 30*time.Second, "every agent ready", func() bool {
		for _, p := range procs {
			res, err := hc.Get(p.url() + "/v1/ready")
			if err != nil {
				return false
			}
			res.Body.Close()
			if res.StatusCode != http.StatusOK {
				return false
			}
		}
		return true
	})
	return procs
}

// leaderAndFollower returns the index of the leader and of a follower that can forward to it
// (it knows the leader's HTTP address: a write through it is answered by the leader).
func leaderAndFollower(t *testing.T, procs []*agentProc, hdr http.Header) (leader, follower int) {
	t.Helper()
	hc := &http.Client{Timeout: 5 * time.Second}
	defer hc.CloseIdleConnections()
	testkit.Eventually(t, 30*time.Second, "a follower that forwards to the leader", func() bool {
		res, err := hc.Get(procs[0].url() + "/v1/health")
		if err != nil {
			return false
		}
		res.Body.Close()
		lid := res.Header.Get(api.HeaderLeader)
		leader, follower = -1, -1
		for i, p := range procs {
			if p.id == lid {
				leader = i
			} else if follower < 0 {
				follower = i
			}
		}
		if leader < 0 || follower < 0 {
			return false
		}
		req, _ := http.NewRequest(http.MethodPost, procs[follower].url()+"/v1/sessions", strings.NewReader(`{"ttl":"10s"}`))
		for k, v := range hdr {
			req.Header[k] = v
		}
		res, err = hc.Do(req)
		if err != nil {
			return false
		}
		res.Body.Close()
		return res.StatusCode == http.StatusCreated || hdr == nil && res.StatusCode == http.StatusUnauthorized
	})
	return leader, follower
}

// procKB reads a field (VmRSS, VmHWM) of /proc/PID/status, in kB.
func procKB(t *testing.T, pid int, field string) int64 {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, field+":"); ok {
			kb, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(rest), "kB")), 10, 64)
			if err != nil {
				t.Fatal(err)
			}
			return kb
		}
	}
	t.Fatalf("no %s in /proc/%d/status", field, pid)
	return 0
}

// openFiles counts the process's open file descriptors.
func openFiles(t *testing.T, pid int) int {
	t.Helper()
	fds, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
	if err != nil {
		t.Fatal(err)
	}
	return len(fds)
}

// zeros is an endless reader of zero bytes.
type zeros struct{}

func (zeros) Read(p []byte) (int, error) { clear(p); return len(p), nil }

// sendHuge sends a POST /v1/sessions with a body of size bytes, declared with Content-Length
// or chunked, and returns the status it was answered (0 if none came).
func sendHuge(t *testing.T, addr string, size int64, chunked bool, token string) int {
	t.Helper()
	return sendHugeTo(t, addr, "POST /v1/sessions", size, chunked, token)
}

// sendHugeTo is sendHuge with another request line's method and path.
func sendHugeTo(t *testing.T, addr, request string, size int64, chunked bool, token string) int {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	head := request + " HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
	if token != "" {
		head += api.HeaderToken + ": " + token + "\r\n"
	}
	if chunked {
		head += "Transfer-Encoding: chunked\r\n\r\n"
	} else {
		head += fmt.Sprintf("Content-Length: %d\r\n\r\n", size)
	}
	if _, err := io.WriteString(c, head); err != nil {
		t.Fatal(err)
	}
	go func() { // the body, until it is all sent or the node closes the connection
		w := bufio.NewWriterSize(c, 64<<10)
		if chunked {
			chunk := make([]byte, 32<<10)
			hdr := fmt.Sprintf("%x\r\n", len(chunk))
			for sent := int64(0); sent < size; sent += int64(len(chunk)) {
				if _, err := io.WriteString(w, hdr); err != nil {
					return
				}
				if _, err := w.Write(chunk); err != nil {
					return
				}
				if _, err := io.WriteString(w, "\r\n"); err != nil {
					return
				}
			}
			_, _ = io.WriteString(w, "0\r\n\r\n")
		} else {
			_, _ = io.CopyN(w, zeros{}, size)
		}
		_ = w.Flush()
	}()
	_ = c.SetReadDeadline(time.Now().Add(2 * time.Minute))
	res, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Logf("no answer to a body of %d bytes (chunked %v): %v", size, chunked, err)
		return 0
	}
	defer res.Body.Close()
	if res.StatusCode >= 500 {
		body, _ := io.ReadAll(io.LimitReader(res.Body, 4<<10))
		t.Logf("%s with %d bytes (chunked %v): %d %s", request, size, chunked, res.StatusCode, body)
	}
	return res.StatusCode
}

// A body far over the limit, sent to a follower (chunked, or with its Content-Length), does not
// raise the follower's peak memory, with or without --acl, with a token or an unknown one: it is
// refused before it is read, or as soon as it passes the limit.
func TestHugeBodyThroughAFollowerKeepsItsMemory(t *testing.T) {
	for _, acl := range []bool{false, true} {
		t.Run(fmt.Sprintf("acl=%v", acl), func(t *testing.T) {
			var procs []*agentProc
			var tokens []string
			if acl {
				procs = startAgents(t, 3, "--acl")
				secret := bootstrapACL(t, procs[0])
				tokens = []string{"x", secret}
				leaderAndFollower(t, procs, http.Header{api.HeaderToken: {secret}})
			} else {
				procs = startAgents(t, 3)
				tokens = []string{""}
			}
			_, f := leaderAndFollower(t, procs, http.Header{api.HeaderToken: {tokens[len(tokens)-1]}})
			pid := procs[f].cmd.Process.Pid
			before := procKB(t, pid, "VmHWM")
			for _, token := range tokens {
				for _, c := range []struct {
					size    int64
					chunked bool
				}{{600 << 20, true}, {1536 << 20, false}} {
					status := sendHuge(t, procs[f].addr, c.size, c.chunked, token)
					want := http.StatusRequestEntityTooLarge
					if token == "x" && c.chunked {
						want = http.StatusUnauthorized // judged from the headers, before any body
					}
					if status != want {
						t.Errorf("%d bytes (chunked %v, token %q) to a follower: answered %d, want %d", c.size, c.chunked, token, status, want)
					}
				}
			}
			after := procKB(t, pid, "VmHWM")
			t.Logf("follower %s: VmHWM %d kB before, %d kB after", procs[f].id, before, after)
			if after-before > 64<<10 {
				t.Fatalf("600 MB and 1.5 GB bodies through the follower raised its peak memory by %d MB", (after-before)>>10)
			}
		})
	}
}

// A restore's body, a backup file, is exempt from --max-body-bytes but not from its own limit,
// and streams through a follower to the leader: neither holds it whole. 600 MB of garbage, the
// most a backup may be here, is refused (it is no backup) without raising either node's peak
// memory; 1.5 GB declared is refused before it is read.
func TestHugeRestoreBodyStreamsThroughAFollower(t *testing.T) {
	procs := startAgents(t, 3, "--max-snapshot-bytes", strconv.Itoa(700<<20))
	l, f := leaderAndFollower(t, procs, nil)
	before := []int64{procKB(t, procs[l].cmd.Process.Pid, "VmHWM"), procKB(t, procs[f].cmd.Process.Pid, "VmHWM")}
	if status := sendHugeTo(t, procs[f].addr, "PUT /v1/snapshot", 600<<20, true, ""); status != http.StatusBadRequest && status != http.StatusRequestEntityTooLarge {
		t.Errorf("600 MB of garbage to restore: answered %d, want 400 (not a backup)", status)
	}
	if status := sendHugeTo(t, procs[f].addr, "PUT /v1/snapshot", 1536<<20, false, ""); status != http.StatusRequestEntityTooLarge {
		t.Errorf("1.5 GB declared to restore: answered %d, want 413", status)
	}
	for i, p := range []int{l, f} {
		after := procKB(t, procs[p].cmd.Process.Pid, "VmHWM")
		t.Logf("%s: VmHWM %d kB before, %d kB after", procs[p].id, before[i], after)
		if after-before[i] > 64<<10 {
			t.Errorf("%s: a restore body raised its peak memory by %d MB", procs[p].id, (after-before[i])>>10)
		}
	}
}

// Connections that send headers of a megabyte, or their headers or body a byte at a time, do
// not take the node's memory up, nor its open files beyond --max-connections: headers are cut
// at --max-header-bytes (431), slow ones at --header-read-timeout, slow bodies at
// --body-read-timeout (400), and connections over the limit wait in the kernel's queue.
func TestSlowAndLargeClientsAreBounded(t *testing.T) {
	const limit = 100
	procs := startAgents(t, 1, "--max-connections", strconv.Itoa(limit),
		"--header-read-timeout", "2s", "--body-read-timeout", "1s")
	p := procs[0]
	pid := p.cmd.Process.Pid
	baseFiles := openFiles(t, pid)
	baseHWM := procKB(t, pid, "VmHWM")

	// maxFiles samples the open files until stop closes, and returns the most seen.
	sample := func(stop <-chan struct{}) <-chan int {
		out := make(chan int, 1)
		go func() {
			most := 0
			for {
				if fds, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid)); err == nil && len(fds) > most {
					most = len(fds)
				}
				select {
				case <-stop:
					out <- most
					return
				case <-time.After(20 * time.Millisecond):
				}
			}
		}()
		return out
	}
	run := func(what string, n int, conn func(c net.Conn)) {
		t.Helper()
		stop := make(chan struct{})
		most := sample(stop)
		var wg sync.WaitGroup
		for range n {
			c, err := net.DialTimeout("tcp", p.addr, 5*time.Second)
			if err != nil {
				t.Fatal(err)
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer c.Close()
				conn(c)
			}()
		}
		wg.Wait()
		close(stop)
		files := <-most
		hwm := procKB(t, pid, "VmHWM")
		t.Logf("%d connections %s: at most %d open files (%d before), VmHWM %d kB (%d before)", n, what, files, baseFiles, hwm, baseHWM)
		if files > baseFiles+limit+10 {
			t.Errorf("%s: %d open files, over the %d before and the limit of %d connections", what, files, baseFiles, limit)
		}
		if hwm-baseHWM > 100<<10 {
			t.Errorf("%s: peak memory rose by %d MB", what, (hwm-baseHWM)>>10)
		}
	}
	// Read what the node answers until it closes the connection; a connection the node has
	// not closed within a minute fails the test.
	drain := func(c net.Conn) string {
		_ = c.SetReadDeadline(time.Now().Add(time.Minute))
		b, err := io.ReadAll(c)
		if errors.Is(err, os.ErrDeadlineExceeded) {
			t.Errorf("the node kept a connection open for a minute; it had answered %q", clipTo(string(b), 80))
		}
		return string(b)
	}

	run("sending a megabyte of headers", 300, func(c net.Conn) {
		go func() {
			_, _ = io.WriteString(c, "GET /v1/health HTTP/1.1\r\nHost: x\r\nX-Big: ")
			_, _ = io.CopyN(c, strings.NewReader(strings.Repeat("a", 1<<20)), 1<<20)
		}()
		// 431 with the API's JSON error body, or nothing when the node's close reset the
		// connection before the client, still sending, read the answer.
		if got := drain(c); got != "" && (!strings.HasPrefix(got, "HTTP/1.1 431") ||
			strings.Contains(got, "\r\n\r\n") && !strings.Contains(got, `"code":"header_too_large"`)) {
			t.Errorf("a megabyte of headers answered %q", clipTo(got, 200))
		}
	})
	run("sending their headers a byte a second", 300, func(c net.Conn) {
		_, _ = io.WriteString(c, "GET /v1/health HTTP/1.1\r\nHost: x\r\n")
		done := make(chan string, 1)
		go func() { done <- drain(c) }()
		for {
			select {
			case got := <-done:
				// Cut off with nothing or a bare 400 (net/http's answer to what arrived).
				if got != "" && !strings.HasPrefix(got, "HTTP/1.1 400 ") {
					t.Errorf("slow headers answered %q", clipTo(got, 80))
				}
				return
			case <-time.After(time.Second):
				if _, err := io.WriteString(c, "X"); err != nil {
					<-done
					return
				}
			}
		}
	})
	run("sending their body a byte every 200ms", 300, func(c net.Conn) {
		_, _ = io.WriteString(c, "POST /v1/sessions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 1000\r\n\r\n{")
		done := make(chan string, 1)
		go func() { done <- drain(c) }()
		for {
			select {
			case got := <-done:
				if !strings.HasPrefix(got, "HTTP/1.1 400") || !strings.Contains(got, "did not arrive within 1s") {
					t.Errorf("a slow body answered %q", clipTo(got, 200))
				}
				return
			case <-time.After(200 * time.Millisecond):
				_, _ = io.WriteString(c, " ")
			}
		}
	})
	// The node still serves.
	res, err := http.Get(p.url() + "/v1/health")
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != http.StatusOK {
		t.Fatalf("health after the slow clients: %s", res.Status)
	}
}

// bootstrapACL bootstraps the ACLs of p's cluster and returns the management token's secret.
func bootstrapACL(t *testing.T, p *agentProc) string {
	t.Helper()
	r, err := http.Post(p.url()+"/v1/acl/bootstrap", "application/json", nil)
	if err != nil {
		t.Fatal(err)
	}
	var b api.BootstrapResponse
	err = json.NewDecoder(r.Body).Decode(&b)
	r.Body.Close()
	if err != nil || b.SecretID == "" {
		t.Fatalf("bootstrap: %v %+v", err, b)
	}
	return b.SecretID
}

func clipTo(s string, n int) string {
	if len(s) > n {
		return s[:n] + "..."
	}
	return s
}

// What a client without a token can make an agent process keep: a series of /metrics per
// invented method, or a connection per restore whose body trickles in. Neither grows: the
// method label takes only the API's methods (others are "other"), and a refused restore's
// connection closes as soon as it is answered, whatever is left of its body.
func TestTokenlessClientsLeaveNoMetricsOrRestoreConnections(t *testing.T) {
	procs := startAgents(t, 1, "--acl")
	p := procs[0]
	secret := bootstrapACL(t, p)
	metricsSize := func() int {
		t.Helper()
		req, _ := http.NewRequest(http.MethodGet, p.url()+"/metrics", nil)
		req.Header.Set(api.HeaderToken, secret)
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		b, err := io.ReadAll(res.Body)
		if err != nil || res.StatusCode != http.StatusOK {
			t.Fatalf("/metrics: %v %s", err, res.Status)
		}
		return len(b)
	}

	before := metricsSize()
	for i := range 300 {
		method := fmt.Sprintf("M%d%s", i, strings.Repeat("X", 4000))
		req, err := http.NewRequest(method, fmt.Sprintf("%s/v1/invented/%d", p.url(), i), nil)
		if err != nil {
			t.Fatal(err)
		}
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, res.Body)
		res.Body.Close()
	}
	// One new series of the histogram ("other") is a few kilobytes; one per method was 1.2 MB
	// of labels alone here.
	if after := metricsSize(); after-before > 64<<10 {
		t.Errorf("/metrics grew from %d to %d bytes after 300 tokenless requests with invented methods", before, after)
	}

	pid := p.cmd.Process.Pid
	baseFiles := openFiles(t, pid)
	var wg sync.WaitGroup
	for range 200 {
		c, err := net.DialTimeout("tcp", p.addr, 5*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer c.Close()
			_, _ = io.WriteString(c, "PUT /v1/snapshot HTTP/1.1\r\nHost: x\r\nContent-Type: application/octet-stream\r\nTransfer-Encoding: chunked\r\n\r\n1\r\nx\r\n")
			stop := make(chan struct{})
			defer close(stop)
			go func() { // a byte every 200ms, for as long as the node reads
				for {
					select {
					case <-stop:
						return
					case <-time.After(200 * time.Millisecond):
						if _, err := io.WriteString(c, "1\r\nx\r\n"); err != nil {
							return
						}
					}
				}
			}()
			_ = c.SetReadDeadline(time.Now().Add(time.Minute))
			got, err := io.ReadAll(c)
			if errors.Is(err, os.ErrDeadlineExceeded) {
				t.Errorf("a tokenless restore's connection stayed open for a minute; answered %q", clipTo(string(got), 120))
				return
			}
			if !strings.HasPrefix(string(got), "HTTP/1.1 401") {
				t.Errorf("a tokenless restore answered %q", clipTo(string(got), 120))
			}
		}()
	}
	wg.Wait()
	testkit.Eventually(t, 10*time.Second, "the refused restores' connections closed on the node", func() bool {
		return openFiles(t, pid) <= baseFiles+5
	})
}

// An agent process holds at most --max-watches-per-address blocking queries of one client
// address; the next is answered 429 with Retry-After and the API's error body, and an ended
// watch gives its place back.
func TestBlockingQueriesOfOneAddressAreBoundedOnAnAgent(t *testing.T) {
	const limit = 5
	procs := startAgents(t, 1, "--max-watches-per-address", strconv.Itoa(limit))
	p := procs[0]
	watch := func(ctx context.Context, index string) (*http.Response, error) {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, p.url()+"/v1/locks?prefix=w/&wait=1m&index="+index, nil)
		return http.DefaultClient.Do(req)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var wg sync.WaitGroup
	for range limit {
		wg.Add(1)
		go func() { // one watch waiting at a time, from the index of the last answer
			defer wg.Done()
			for index := "1"; ; {
				res, err := watch(ctx, index)
				if err != nil {
					return
				}
				res.Body.Close()
				if res.StatusCode == http.StatusOK {
					index = res.Header.Get(api.HeaderIndex)
				}
			}
		}()
	}
	var got *http.Response
	testkit.Eventually(t, 20*time.Second, "a watch over the bound refused", func() bool {
		short, stop := context.WithTimeout(context.Background(), 200*time.Millisecond)
		defer stop()
		res, err := watch(short, "1000000")
		if err != nil || res.StatusCode != http.StatusTooManyRequests {
			if err == nil {
				res.Body.Close()
			}
			return false // admitted: the others are not all waiting yet
		}
		got = res
		return true
	})
	var body api.ErrorBody
	_ = json.NewDecoder(got.Body).Decode(&body)
	got.Body.Close()
	if got.Header.Get("Retry-After") == "" || body.Error.Code != api.CodeTooManyRequests {
		t.Fatalf("watch %d answered %s, Retry-After %q, code %q", limit+1, got.Status, got.Header.Get("Retry-After"), body.Error.Code)
	}
	cancel()
	wg.Wait()
	testkit.Eventually(t, 10*time.Second, "an ended watch's place given back", func() bool {
		short, stop := context.WithTimeout(context.Background(), 500*time.Millisecond)
		defer stop()
		res, err := watch(short, "1000000")
		if err == nil {
			res.Body.Close()
		}
		return errors.Is(err, context.DeadlineExceeded) // it waited: admitted
	})
}

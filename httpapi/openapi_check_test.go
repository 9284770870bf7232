package httpapi_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"sort"
	"strings"
	"sync"

	"github.com/pb33f/libopenapi"
	validator "github.com/pb33f/libopenapi-validator"
	"github.com/pb33f/libopenapi-validator/config"
	"github.com/pb33f/libopenapi-validator/paths"
	v3 "github.com/pb33f/libopenapi/datamodel/high/v3"

	"github.com/raftlock/raftlock/api"
	"github.com/raftlock/raftlock/docs"
	"github.com/raftlock/raftlock/httpapi"
)

// Every request the tests of this package send with the suite's HTTP clients, and every
// answer, is checked against docs/openapi.yaml by a transport (specTransport) under those
// clients: an answer must be one the spec lists for its operation and status, with the
// headers and body it describes and nothing it does not (strict mode: an undeclared field or
// header is a mismatch), and a request the server accepted (2xx) must be one the spec allows.
// A request to a path or method the spec lacks must be answered 404 or 405. Requests the tests
// send malformed on purpose are refused (4xx), so only their answers are checked. TestMain
// fails the run on any mismatch.

// specChecker validates exchanges against the spec and keeps the mismatches.
type specChecker struct {
	v     validator.Validator
	model *v3.Document

	mu        sync.Mutex
	problems  map[string]int  // mismatch -> how often
	exercised map[string]bool // "METHOD template status"
}

// spec checks every exchange of the suite's clients.
var spec = newSpecChecker()

func newSpecChecker() *specChecker {
	doc, err := libopenapi.NewDocument(docs.OpenAPI())
	if err != nil {
		panic(fmt.Sprintf("docs/openapi.yaml: %v", err))
	}
	m, err := doc.BuildV3Model()
	if err != nil {
		panic(fmt.Sprintf("docs/openapi.yaml: %v", err))
	}
	// Sec-Fetch-Mode is set by every fetch() (the TypeScript client's), like User-Agent by Go's.
	v, verrs := validator.NewValidator(doc, config.WithStrictMode(), config.WithStrictIgnoredHeadersExtra("Sec-Fetch-Mode"))
	if len(verrs) > 0 {
		panic(fmt.Sprintf("docs/openapi.yaml: %v", verrs))
	}
	if ok, errs := v.ValidateDocument(); !ok {
		panic(fmt.Sprintf("docs/openapi.yaml is not a valid OpenAPI document: %v", errs))
	}
	return &specChecker{v: v, model: &m.Model, problems: map[string]int{}, exercised: map[string]bool{}}
}

func (s *specChecker) problem(format string, args ...any) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.problems[fmt.Sprintf(format, args...)]++
}

// report returns the mismatches seen so far, one a line, most frequent first.
func (s *specChecker) report() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]string, 0, len(s.problems))
	for p, n := range s.problems {
		out = append(out, fmt.Sprintf("%5d× %s", n, p))
	}
	sort.Sort(sort.Reverse(sort.StringSlice(out)))
	return out
}

// canonical returns the request as the spec names its path: a lock name's slashes
// percent-encoded, as a generated client sends them (the server takes both forms alike).
func canonical(req *http.Request, body []byte) *http.Request {
	r := req.Clone(req.Context())
	r.Body = io.NopCloser(bytes.NewReader(body))
	r.ContentLength = int64(len(body))
	esc, ok := strings.CutPrefix(req.URL.EscapedPath(), "/v1/locks/")
	if !ok {
		return r
	}
	p, err := url.PathUnescape(esc)
	if err != nil {
		return r
	}
	name, action := p, ""
	if i := strings.LastIndexByte(p, '/'); i >= 0 && httpapi.ReservedActions[p[i+1:]] {
		name, action = p[:i], p[i:]
	}
	u := *r.URL
	u.Path = "/v1/locks/" + name + action
	u.RawPath = "/v1/locks/" + url.PathEscape(name) + action
	r.URL = &u
	return r
}

// check validates one exchange whose bodies were read in full.
func (s *specChecker) check(req *http.Request, reqBody []byte, resp *http.Response, respBody []byte) {
	if resp.StatusCode == http.StatusRequestHeaderFieldsTooLarge {
		return // net/http's own answer before any route; the spec says so in its description
	}
	vreq := canonical(req, reqBody)
	what := req.Method + " " + vreq.URL.EscapedPath()
	item, errs, tmpl := paths.FindPath(vreq, s.model, nil)
	var eb api.ErrorBody
	_ = json.Unmarshal(respBody, &eb)
	code := eb.Error.Code
	// No route matched: the server's 404, or under ACL its 401, which refuses a request
	// without a token before any route is chosen.
	noRoute := resp.StatusCode == http.StatusNotFound && code == api.CodeNotFound && strings.HasPrefix(eb.Error.Message, "no such route") ||
		resp.StatusCode == http.StatusUnauthorized && code == api.CodeUnauthorized
	switch {
	case item == nil && resp.StatusCode == http.StatusNotFound && code == api.CodeNotFound:
		return // a path the spec does not name, such as /v1/acl/tokens/%2e%2e, is not found
	case item == nil:
		// A lock path the spec's paths cannot even match (an empty or dot segment) is a bad name.
		badName := strings.HasPrefix(req.URL.Path, "/v1/locks/") && resp.StatusCode == http.StatusBadRequest && code == api.CodeInvalidArgument
		if !noRoute && !badName {
			s.problem("%s: no such path in the spec, but answered %d %s", what, resp.StatusCode, code)
		}
		return
	case len(errs) > 0:
		// A HEAD's answer has no body to carry the code.
		wrongMethod := resp.StatusCode == http.StatusMethodNotAllowed && (code == api.CodeMethodNotAllowed || req.Method == http.MethodHead)
		if !noRoute && !wrongMethod {
			s.problem("%s: the spec has no such operation on %s, but it answered %d %s", what, tmpl, resp.StatusCode, code)
		}
		return
	case noRoute && resp.StatusCode == http.StatusNotFound && requires(item, req.Method) != "":
		return // the operation exists only with an agent flag this node runs without
	case req.Method == http.MethodPost && tmpl == "/v1/cluster/members" && resp.StatusCode == http.StatusOK && len(respBody) == 0:
		return // a member's publication of its own address, answered with its status alone (see the spec)
	}
	s.mu.Lock()
	s.exercised[fmt.Sprintf("%s %s %d", req.Method, tmpl, resp.StatusCode)] = true
	s.mu.Unlock()
	if resp.StatusCode/100 == 2 {
		if ok, errs := s.v.ValidateHttpRequestSync(vreq); !ok {
			for _, e := range errs {
				s.problem("%s %s: request accepted (%d) but not valid: %s", req.Method, tmpl, resp.StatusCode, describe(e.Message, e.Reason, e.SchemaValidationErrors))
			}
		}
	}
	vresp := *resp
	vresp.Body = io.NopCloser(bytes.NewReader(respBody))
	vresp.Request = vreq
	if ok, errs := s.v.ValidateHttpResponse(canonical(req, reqBody), &vresp); !ok {
		for _, e := range errs {
			s.problem("%s %s → %d: answer not valid: %s", req.Method, tmpl, resp.StatusCode, describe(e.Message, e.Reason, e.SchemaValidationErrors))
		}
	}
}

// requires returns the agent flag an operation needs (its x-raftlock-requires), or "".
func requires(item *v3.PathItem, method string) string {
	op, ok := item.GetOperations().Get(strings.ToLower(method))
	if !ok || op.Extensions == nil {
		return ""
	}
	if n, ok := op.Extensions.Get("x-raftlock-requires"); ok && n != nil {
		return n.Value
	}
	return ""
}

func describe(msg, reason string, details any) string {
	out := msg
	if reason != "" {
		out += ": " + reason
	}
	if d := fmt.Sprint(details); d != "[]" {
		out += " " + d
	}
	return out
}

// specTransport checks every exchange that goes through it: the request body as it is sent,
// and the answer once its body has been read to the end (an answer cut short is not checked).
type specTransport struct {
	next  http.RoundTripper
	check *specChecker
}

func (t specTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	sent := &lockedBuffer{}
	if req.Body != nil && req.Body != http.NoBody {
		req = req.Clone(req.Context())
		req.Body = teeCloser{Reader: io.TeeReader(req.Body, sent), Closer: req.Body}
	}
	resp, err := t.next.RoundTrip(req)
	if err != nil {
		return resp, err
	}
	resp.Body = &checkedBody{body: resp.Body, done: func(got []byte) { t.check.check(req, sent.Bytes(), resp, got) }}
	return resp, nil
}

// CloseIdleConnections closes the idle connections of the transport below.
func (t specTransport) CloseIdleConnections() {
	if c, ok := t.next.(interface{ CloseIdleConnections() }); ok {
		c.CloseIdleConnections()
	}
}

type teeCloser struct {
	io.Reader
	io.Closer
}

// lockedBuffer is written by the transport's writer and read after the answer.
type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) Bytes() []byte {
	b.mu.Lock()
	defer b.mu.Unlock()
	return bytes.Clone(b.buf.Bytes())
}

// checkedBody hands the whole body to done once it has been read to its end.
type checkedBody struct {
	body io.ReadCloser
	buf  bytes.Buffer
	done func([]byte)
	once sync.Once
}

func (c *checkedBody) Read(p []byte) (int, error) {
	n, err := c.body.Read(p)
	c.buf.Write(p[:n])
	if err == io.EOF {
		c.once.Do(func() { c.done(c.buf.Bytes()) })
	}
	return n, err
}

func (c *checkedBody) Close() error { return c.body.Close() }

// checking returns a client whose exchanges are checked against the spec.
func checking(hc *http.Client) *http.Client {
	next := hc.Transport
	if next == nil {
		next = http.DefaultTransport
	}
	out := *hc
	out.Transport = specTransport{next: next, check: spec}
	return &out
}

// specMain fails the run, after the tests, if any exchange did not match the spec.
func specMain(code int) int {
	problems := spec.report()
	if len(problems) == 0 {
		return code
	}
	fmt.Fprintf(os.Stderr, "FAIL: %d kinds of exchange do not match docs/openapi.yaml:\n%s\n", len(problems), strings.Join(problems, "\n"))
	return 1
}

package httpapi

import (
	"bytes"
	"encoding/json"
	"io"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/labstack/echo/v4"

	"github.com/raftlock/raftlock/cluster"
	"github.com/raftlock/raftlock/fsm"
)

// Limits are the edge validation limits of the API; the zero value of a field takes the default.
type Limits struct {
	MaxNameBytes      int           // lock name length; default 256
	MaxValueBytes     int           // lock value size; default 4 KiB
	MinTTL, MaxTTL    time.Duration // session TTL range; default 2s–24h
	MaxLockDelay      time.Duration // default 60s
	MaxWait           time.Duration // acquires and blocking queries; default 10m
	MaxSessions       int           // 0: unlimited
	MaxWaitersPerLock int           // 0: unlimited
	// MaxSessionsPerToken bounds the sessions one token owns at once, under ACL; 0: unlimited.
	MaxSessionsPerToken int
	MaxRenewBatch       int // session ids in one POST /v1/sessions/renew; default 1000
	// MaxBlockingPerToken bounds the blocking queries (watches) one token has waiting on the
	// node that received them, under ACL; MaxBlockingPerAddress those of one IP address, for
	// requests without a token this node knows. 0: unlimited.
	MaxBlockingPerToken, MaxBlockingPerAddress int
}

func (l *Limits) setDefaults() {
	if l.MaxNameBytes == 0 {
		l.MaxNameBytes = 256
	}
	if l.MaxValueBytes == 0 {
		l.MaxValueBytes = 4096
	}
	if l.MinTTL == 0 {
		l.MinTTL = 2 * time.Second
	}
	if l.MaxTTL == 0 {
		l.MaxTTL = 24 * time.Hour
	}
	if l.MaxLockDelay == 0 {
		l.MaxLockDelay = 60 * time.Second
	}
	if l.MaxWait == 0 {
		l.MaxWait = 10 * time.Minute
	}
	if l.MaxRenewBatch == 0 {
		l.MaxRenewBatch = 1000
	}
}

// maxAttemptBytes bounds an attempt: a client names its tries with random ids, not data.
const maxAttemptBytes = 64

// attempt checks an attempt, which is optional: up to maxAttemptBytes of letters, digits and
// "-._~", the characters that need no escaping in a URL.
func attempt(a string) error {
	if len(a) > maxAttemptBytes {
		return invalid("attempt is longer than %d bytes", maxAttemptBytes)
	}
	for _, r := range a {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("-._~", r)) {
			return invalid("attempt may hold only letters, digits and -._~")
		}
	}
	return nil
}

// numberedAttempt returns the attempt of a request from its fields, checking the string one.
// An acquire (forAcquire) may not carry a floor above its own number: the floor says every
// attempt below it has ended, which would refuse the acquire itself.
func numberedAttempt(id string, seq, floor uint64, forAcquire bool) (cluster.Attempt, error) {
	if err := attempt(id); err != nil {
		return cluster.Attempt{}, err
	}
	const max = 1<<63 - 1 // numbers a JSON client in any language can carry
	switch {
	case seq > max || floor > max:
		return cluster.Attempt{}, invalid("attempt_seq and attempt_floor are at most %d", uint64(max))
	case forAcquire && seq != 0 && floor > seq:
		return cluster.Attempt{}, invalid("attempt_floor %d is above attempt_seq %d: the floor says every attempt below it has ended", floor, seq)
	}
	return cluster.Attempt{ID: id, Seq: seq, Floor: floor}, nil
}

// reservedActions are the last path segments that route to actions and so cannot end a name.
var reservedActions = map[string]bool{"acquire": true, "release": true, "check": true}

func (l *Limits) lockName(name string) error {
	if name == "" {
		return invalid("lock name is empty")
	}
	if len(name) > l.MaxNameBytes {
		return invalid("lock name is %d bytes; the limit is %d", len(name), l.MaxNameBytes)
	}
	for i := 0; i < len(name); i++ {
		if !nameByte(name[i]) {
			return invalid("lock name %q has a character outside [A-Za-z0-9._:/-] at byte %d", name, i)
		}
	}
	// Names are matched byte for byte, by policies too; an empty, "." or ".." segment is one
	// that a proxy or client library cleaning paths would change, so it is refused.
	for seg := range strings.SplitSeq(name, "/") {
		if seg == "" || seg == "." || seg == ".." {
			return invalid("lock name %q has an empty, \".\" or \"..\" segment; names are never normalised", name)
		}
	}
	last := name[strings.LastIndexByte(name, '/')+1:]
	if reservedActions[last] {
		return invalid("lock name %q ends in the reserved segment %q", name, last)
	}
	return nil
}

func nameByte(b byte) bool {
	return 'a' <= b && b <= 'z' || 'A' <= b && b <= 'Z' || '0' <= b && b <= '9' ||
		b == '.' || b == '_' || b == ':' || b == '/' || b == '-'
}

// duration parses a Go duration string and checks it lies in [lo, hi]. An empty string is 0.
func duration(field, s string, lo, hi time.Duration) (time.Duration, error) {
	if s == "" {
		if lo > 0 {
			return 0, invalid("%s is required (between %v and %v)", field, lo, hi)
		}
		return 0, nil
	}
	d, err := time.ParseDuration(s)
	if err != nil {
		return 0, invalid("%s %q is not a duration such as \"10s\" or \"1500ms\"", field, s)
	}
	if d < lo || d > hi {
		return 0, invalid("%s %v is out of range: it must be between %v and %v", field, d, lo, hi)
	}
	return d, nil
}

func (l *Limits) value(v string) error {
	if len(v) > l.MaxValueBytes {
		return invalid("value is %d bytes; the limit is %d", len(v), l.MaxValueBytes)
	}
	return nil
}

func sessionName(n string) error {
	if len(n) > 256 {
		return invalid("session name is %d bytes; the limit is 256", len(n))
	}
	if !utf8.ValidString(n) {
		return invalid("session name is not valid UTF-8")
	}
	return nil
}

// sessionID parses a session id; a malformed one names no session.
func sessionID(s string) (fsm.SessionID, error) {
	if s == "" {
		return fsm.SessionID{}, invalid("session is required")
	}
	id, err := fsm.ParseSessionID(s)
	if err != nil {
		return id, sessionNotFound(s)
	}
	return id, nil
}

// decodeBody reads a JSON object strictly into dst: unknown fields, trailing data and malformed
// JSON are refused. An empty body is accepted only when emptyOK. The body is read by readBody,
// bounded in size and time, and stays available to a follower that forwards the request.
func (s *Server) decodeBody(c echo.Context, dst any, emptyOK bool) error {
	data, err := s.readBody(c)
	if err != nil {
		return err
	}
	if len(bytes.TrimSpace(data)) == 0 {
		if emptyOK {
			return nil
		}
		return invalid("a JSON request body is required")
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(dst); err != nil {
		return invalid("malformed request body: %s", strings.TrimPrefix(err.Error(), "json: "))
	}
	if _, err := dec.Token(); err != io.EOF {
		return invalid("malformed request body: data after the JSON object")
	}
	return nil
}

// query holds the parsed common query parameters of a GET.
type query struct {
	stale bool
	index uint64
	block bool
	wait  time.Duration
	// here marks a linearizable watch that a follower answers itself (see linearize): a
	// change of leader does not end its wait.
	here bool
}

// defaultBlockingWait is the wait of a blocking query that gives an index but no wait.
const defaultBlockingWait = 5 * time.Minute

// queryNumber returns the query parameter name as a non-negative integer, 0 when absent.
func queryNumber(c echo.Context, name string) (uint64, error) {
	v := c.QueryParam(name)
	if v == "" {
		return 0, nil
	}
	i, err := strconv.ParseUint(v, 10, 64)
	if err != nil {
		return 0, invalid("%s %q is not a non-negative integer", name, v)
	}
	return i, nil
}

func (l *Limits) readQuery(c echo.Context) (query, error) {
	var q query
	switch v := c.QueryParam("consistency"); v {
	case "", "linearizable", "default":
	case "stale":
		q.stale = true
	default:
		return q, invalid("consistency %q is not one of \"stale\" or \"linearizable\"", v)
	}
	if v := c.QueryParam("index"); v != "" {
		i, err := queryNumber(c, "index")
		if err != nil {
			return q, err
		}
		q.index, q.block = i, true
		q.wait = defaultBlockingWait
	}
	if v := c.QueryParam("wait"); v != "" {
		d, err := duration("wait", v, 0, l.MaxWait)
		if err != nil {
			return q, err
		}
		q.wait = d
	}
	return q, nil
}

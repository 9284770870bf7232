package tlsutil

import (
	"net"
	"strings"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"
	"golang.org/x/time/rate"
)

// RefusalLog logs refused TLS handshakes. Anyone who can reach a port can cause one, with an
// error text of their making (a certificate's names, a list of protocols), so a line holds at
// most MaxLoggedError bytes of the error, escaped to printable ASCII, and the lines are
// rate-limited: a burst of RefusalBurst, then one per RefusalEvery, each saying how many
// refusals were not logged since the line before.
type RefusalLog struct {
	log     hclog.Logger
	level   hclog.Level
	msg     string
	lim     *rate.Limiter
	dropped atomic.Uint64
}

// Bounds of a RefusalLog.
const (
	MaxLoggedError = 256
	RefusalBurst   = 5
	RefusalEvery   = time.Second
)

// NewRefusalLog returns a log of refusals that writes msg at level to log.
func NewRefusalLog(log hclog.Logger, level hclog.Level, msg string) *RefusalLog {
	return &RefusalLog{log: log, level: level, msg: msg, lim: rate.NewLimiter(rate.Every(RefusalEvery), RefusalBurst)}
}

// Log records one refused handshake from remote; it fits ListenerOptions.OnRefused.
func (r *RefusalLog) Log(remote net.Addr, err error) {
	if r.log.GetLevel() > r.level {
		return
	}
	if !r.lim.Allow() {
		r.dropped.Add(1)
		return
	}
	args := []any{"remote", remote.String(), "error", Printable(err.Error(), MaxLoggedError)}
	if n := r.dropped.Swap(0); n > 0 {
		args = append(args, "not_logged_before", n)
	}
	r.log.Log(r.level, r.msg, args...)
}

// Printable returns s with every byte outside printable ASCII replaced by '?', cut to n bytes
// (with "..." after a cut).
func Printable(s string, n int) string {
	cut := len(s) > n
	if cut {
		s = s[:n]
	}
	s = strings.Map(func(r rune) rune {
		if r < ' ' || r > '~' {
			return '?'
		}
		return r
	}, s)
	if cut {
		s += "..."
	}
	return s
}

package httpapi

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"

	"github.com/raftlock/raftlock/api"
	"github.com/raftlock/raftlock/cluster"
)

// A follower's own requests to the leader (a read index, a batch of renewals) go over the peer
// channel when the cluster serves it, and as HTTP requests otherwise, or while the channel
// cannot take them (nothing was sent then).

// errNotSent says that a member's request never reached the leader: nothing was done.
var errNotSent = errors.New("httpapi: the request did not reach the leader")

// memberRequest sends a request of this node's own, marked as forwarded, to the leader with
// id and HTTP address addr: over the peer channel if the cluster serves it, else over HTTP.
// It returns the leader's status and body, and the way it took (viaChannel or viaHTTP); an
// error wraps errNotSent when the request never reached the leader, and is an unknown outcome
// otherwise. A 401 from a node that no longer names itself leader comes back as 503 no_leader
// (see notLeaderRefusal).
func (s *Server) memberRequest(ctx context.Context, id, addr, method, uri string, hdr http.Header, body []byte) (status int, data []byte, via string, err error) {
	if hdr == nil {
		hdr = http.Header{}
	}
	hdr.Set(api.HeaderForwarded, s.node.ID())
	if body != nil {
		hdr.Set("Content-Type", "application/json")
	}
	if s.node.ChannelEnabled() {
		lid, out, err := s.node.CallLeader(ctx, cluster.ChannelHTTP, encodeChannelRequest(method, uri, hdr, body))
		switch {
		case errors.Is(err, cluster.ErrChannelUnavailable), errors.Is(err, cluster.ErrChannelUnknownKind):
			// Nothing was sent: over HTTP below.
		case err != nil:
			return 0, nil, viaChannel, err
		case len(out) == 0:
			return 0, nil, viaChannel, errUnknownForward
		default:
			status, rh, data, err := decodeChannelAnswer(out)
			if err != nil {
				return 0, nil, viaChannel, fmt.Errorf("%w: a malformed answer over the peer channel: %w", errUnknownForward, err)
			}
			if e := notLeaderRefusal(status, rh, lid); e != nil {
				return e.status, e.encoded(), viaChannel, nil
			}
			return status, data, viaChannel, nil
		}
	}
	target := s.fwd.scheme + "://" + addr
	if strings.Contains(addr, "://") {
		target = strings.TrimSuffix(addr, "/")
	}
	var rd io.Reader = http.NoBody
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, target+uri, rd)
	if err != nil {
		return 0, nil, viaHTTP, fmt.Errorf("%w: %w", errNotSent, err)
	}
	req.Header = hdr
	res, err := s.fwd.transport.RoundTrip(req)
	if err != nil {
		var op *net.OpError
		if errors.As(err, &op) && op.Op == "dial" || tlsRefused(err) {
			return 0, nil, viaHTTP, fmt.Errorf("%w: %w", errNotSent, err)
		}
		return 0, nil, viaHTTP, err
	}
	defer res.Body.Close()
	data, err = io.ReadAll(io.LimitReader(res.Body, 4<<20))
	if err != nil {
		return 0, nil, viaHTTP, err
	}
	if e := notLeaderRefusal(res.StatusCode, res.Header, id); e != nil {
		return e.status, e.encoded(), viaHTTP, nil
	}
	return res.StatusCode, data, viaHTTP, nil
}

// notLeaderRefusal turns a 401 from the node a request was forwarded to as leader into 503
// no_leader when that node's answer does not name it leader: it has stopped leading, and may
// not have applied the token's creation yet (restarted, and replaying its log, while the
// others still took it for the leader; a node of a version before this one judges the token
// before it looks at its role). A 401 is answered before anything is done, so nothing was;
// the client asks again, and the leader judges the token. nil for any other answer.
func notLeaderRefusal(status int, h http.Header, leader string) *apiError {
	if status != http.StatusUnauthorized || h.Get(api.HeaderLeader) == leader && leader != "" {
		return nil
	}
	return noLeader("the node this request was forwarded to (%q) refused its token but no longer leads; nothing was applied: ask again", leader)
}

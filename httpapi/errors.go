package httpapi

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"

	"github.com/labstack/echo/v4"

	"github.com/raftlock/raftlock/api"
	"github.com/raftlock/raftlock/cluster"
	"github.com/raftlock/raftlock/fsm"
)

// apiError is a failure to be answered with the API's error body.
type apiError struct {
	status      int
	body        api.ErrorBody
	retryAfter  string
	internalErr error
}

// encoded returns the error's JSON body.
func (e *apiError) encoded() []byte {
	b, _ := json.Marshal(e.body) // a struct of strings: it cannot fail
	return b
}

func (e *apiError) Error() string {
	if e.internalErr != nil {
		return fmt.Sprintf("%s: %s: %v", e.body.Error.Code, e.body.Error.Message, e.internalErr)
	}
	return e.body.Error.Code + ": " + e.body.Error.Message
}

func newError(status int, code, format string, args ...any) *apiError {
	return &apiError{status: status, body: api.ErrorBody{Error: api.ErrorDetail{Code: code, Message: fmt.Sprintf(format, args...)}}}
}

func invalid(format string, args ...any) *apiError {
	return newError(http.StatusBadRequest, api.CodeInvalidArgument, format, args...)
}

func sessionNotFound(id string) *apiError {
	return newError(http.StatusNotFound, api.CodeSessionNotFound, "session %q does not exist or has expired", id)
}

func noLeader(format string, args ...any) *apiError {
	e := newError(http.StatusServiceUnavailable, api.CodeNoLeader, format, args...)
	e.retryAfter = "1"
	return e
}

func unauthorized(format string, args ...any) *apiError {
	return newError(http.StatusUnauthorized, api.CodeUnauthorized, format, args...)
}

func forbidden(format string, args ...any) *apiError {
	return newError(http.StatusForbidden, api.CodeForbidden, format, args...)
}

func tooMany(format string, args ...any) *apiError {
	e := newError(http.StatusTooManyRequests, api.CodeTooManyRequests, format, args...)
	e.retryAfter = "1"
	return e
}

// fromClusterError maps an error of the cluster node to the API's codes.
func fromClusterError(err error) *apiError {
	var ae *apiError
	switch {
	case errors.As(err, &ae):
		return ae
	case errors.Is(err, cluster.ErrSessionNotFound):
		return newError(http.StatusNotFound, api.CodeSessionNotFound, "the session does not exist or has expired")
	case errors.Is(err, cluster.ErrUnknownMember):
		return newError(http.StatusNotFound, api.CodeNotFound, "%v", err)
	case errors.Is(err, cluster.ErrACLBootstrapped):
		return forbidden("the cluster's ACLs are already bootstrapped: bootstrap works once per cluster")
	case errors.Is(err, cluster.ErrBuiltinPolicy):
		return forbidden("the built-in policy %s cannot be changed or deleted", fsm.ManagementPolicy)
	case errors.Is(err, cluster.ErrLastManagementToken):
		return forbidden("this is the last token with the %s policy: create another one before deleting it", fsm.ManagementPolicy)
	case errors.Is(err, cluster.ErrPolicyExists):
		return newError(http.StatusConflict, api.CodeAlreadyExists, "a policy with that name exists: change it with PUT /v1/acl/policies/{name}")
	case errors.Is(err, cluster.ErrPolicyNotFound):
		return newError(http.StatusNotFound, api.CodeNotFound, "no such policy")
	case errors.Is(err, cluster.ErrTokenNotFound):
		return newError(http.StatusNotFound, api.CodeNotFound, "no such token")
	case errors.Is(err, cluster.ErrFeatureNotEnabled):
		// The message says which: not enabled yet (every member supports it: ask again), or a
		// member lacks it (upgrade every member, or ask without it).
		return newError(http.StatusConflict, api.CodeFeatureNotEnabled, "%v", err)
	case errors.Is(err, cluster.ErrMembershipRefused):
		return newError(http.StatusConflict, api.CodeMembershipRefused, "%v; nothing was changed", err)
	case errors.Is(err, cluster.ErrMemberConflict):
		return newError(http.StatusConflict, api.CodeMemberConflict, "%v", err)
	case errors.Is(err, cluster.ErrIncompatible):
		return newError(http.StatusConflict, api.CodeIncompatible, "%v", err)
	case errors.Is(err, cluster.ErrInvalidACL):
		return invalid("the policy or token is not valid (an empty name, a repeated prefix or policy)")
	case errors.Is(err, cluster.ErrNotProposed):
		// Its client left or its time ran out before the command was proposed: nothing was
		// applied, and nobody may be left to read the answer.
		e := newError(http.StatusServiceUnavailable, api.CodeTimeout,
			"the request ended before its command was proposed; nothing was applied")
		e.retryAfter = "1"
		e.internalErr = err
		return e
	// Unknown before not-leader: an unknown outcome may have a not-leader cause, and saying
	// "nothing was applied" about it would be a lie.
	case errors.Is(err, cluster.ErrUnknownOutcome), errors.Is(err, context.DeadlineExceeded):
		e := newError(http.StatusServiceUnavailable, api.CodeTimeout,
			"the command was submitted but its outcome is unknown; read the lock or session before retrying")
		e.retryAfter = "1"
		e.internalErr = err
		return e
	case errors.Is(err, cluster.ErrNotLeader), errors.Is(err, cluster.ErrNoLeader):
		e := noLeader("the cluster has no leader right now; nothing was applied")
		e.internalErr = err
		return e
	}
	e := newError(http.StatusInternalServerError, api.CodeInternal, "internal error")
	e.internalErr = err
	return e
}

// errorHandler renders every error, including echo's own (unknown route, wrong method, body
// too large, recovered panics), as the API's error body.
func (s *Server) errorHandler(err error, c echo.Context) {
	if c.Response().Committed {
		return
	}
	var ae *apiError
	var he *echo.HTTPError
	switch {
	case errors.As(err, &ae):
	case errors.As(err, &he):
		switch he.Code {
		case http.StatusNotFound:
			ae = newError(he.Code, api.CodeNotFound, "no such route: %s %s", clip(c.Request().Method, maxAuditMethod), clip(c.Request().URL.Path, maxLoggedPath))
		case http.StatusMethodNotAllowed:
			ae = newError(he.Code, api.CodeMethodNotAllowed, "method %s is not allowed on %s", clip(c.Request().Method, maxAuditMethod), clip(c.Request().URL.Path, maxLoggedPath))
		case http.StatusRequestEntityTooLarge:
			ae = newError(he.Code, api.CodePayloadTooLarge, "request body is larger than %d bytes", s.cfg.MaxBodyBytes)
		case http.StatusBadRequest:
			ae = invalid("%v", he.Message)
		default:
			ae = newError(http.StatusInternalServerError, api.CodeInternal, "internal error")
			ae.internalErr = err
		}
	default:
		ae = fromClusterError(err)
	}
	s.metrics.counted(ae.body.Error.Code)
	if ae.status >= 500 {
		s.log.Warn("request failed", "method", clip(c.Request().Method, maxAuditMethod), "path", clip(c.Request().URL.Path, maxLoggedPath), "code", ae.body.Error.Code, "error", ae)
	}
	if ae.retryAfter != "" {
		c.Response().Header().Set("Retry-After", ae.retryAfter)
	}
	if err := c.JSON(ae.status, ae.body); err != nil {
		s.log.Debug("writing error response failed", "error", err)
	}
}

"""Typed errors of the raftlock client.

Every error of the package is a RaftlockError whose message starts with "raftlock: ". Each error
code of the HTTP API (docs/api.md) has a class (LockHeldError for 409 lock_held, ...); an error
the server answered is also an APIError, which carries the fields of the API's error body. So
``except LockHeldError`` catches the server's refusal, and ``isinstance(e, APIError)`` tells it
from one the client found itself, as errors.Is and errors.As do for the Go client.

An error may be of several kinds at once (a Mutex's unlock after its session was lost is a
LockLostError and a SessionNotFoundError): such an error is an instance of every class it
matches, and keeps the error it wraps as ``__cause__``.
"""

import threading

PREFIX = "raftlock: "


class RaftlockError(Exception):
    """The base of every error of the package."""

    def __init__(self, message=""):
        text = message if message.startswith(PREFIX) else PREFIX + message
        super().__init__(text)
        self.message = message[len(PREFIX):] if message.startswith(PREFIX) else message

    def __str__(self):
        return self.args[0] if self.args else PREFIX


# Kinds named by the API's error codes.
class InvalidArgumentError(RaftlockError):
    """400 invalid_argument, or a request refused locally."""


class UnauthorizedError(RaftlockError):
    """401 unauthorized: ACLs are on and the request had no token, or an unknown one."""


class ForbiddenError(RaftlockError):
    """403 forbidden: the token lacks the permission for that name."""


class SessionNotFoundError(RaftlockError):
    """404 session_not_found: the session expired or was destroyed."""


class NotFoundError(RaftlockError):
    """404 not_found or 405 method_not_allowed: no such route, member, policy or token."""


class LockHeldError(RaftlockError):
    """409 lock_held: another session holds the lock (APIError.holder names it)."""


class LockDelayedError(RaftlockError):
    """409 lock_delayed: the lock is free but inside a lock-delay (APIError.available_in)."""


class AttemptCancelledError(RaftlockError):
    """409 attempt_cancelled: an acquire carried an attempt that its session had ended."""


class NotHolderError(RaftlockError):
    """409 not_holder, or an unlock of a Mutex that is not locked."""


class LimitMismatchError(RaftlockError):
    """409 limit_mismatch: the lock is used with another limit (APIError.limit)."""


class ModeMismatchError(RaftlockError):
    """409 mode_mismatch: the session holds or awaits the lock in the other mode."""


class AlreadyExistsError(RaftlockError):
    """409 already_exists: a policy with that name exists."""


class FeatureNotEnabledError(RaftlockError):
    """409 feature_not_enabled: the request needs a feature some member lacks yet."""


class IncompatibleError(RaftlockError):
    """409 incompatible: a joining node lacks a feature the cluster has enabled."""


class NotCaughtUpError(RaftlockError):
    """409 not_caught_up: a non-voter to promote has not caught up yet."""


class MemberConflictError(RaftlockError):
    """409 member_conflict: a member to add clashes with an existing one."""


class PayloadTooLargeError(RaftlockError):
    """413 payload_too_large."""


class TooManyRequestsError(RaftlockError):
    """429 too_many_requests (APIError.retry_after)."""


class HeaderTooLargeError(RaftlockError):
    """431 header_too_large."""


class NoLeaderError(RaftlockError):
    """503 no_leader: the cluster has no leader right now; nothing was applied."""


class OutcomeUnknownError(RaftlockError):
    """503 timeout: the command was submitted but its outcome is unknown."""


class RemovedError(RaftlockError):
    """503 removed: the node was removed from its cluster."""


class InternalError(RaftlockError):
    """500 internal, or any other server error."""


# Kinds the client finds itself.
class UnavailableError(RaftlockError):
    """No endpoint could be reached."""


class SessionDeadlineError(RaftlockError):
    """The session's local deadline passed without an acknowledged renewal."""


class SessionClosedError(RaftlockError):
    """The session was closed (Session.close, or Client.close)."""


class LockLostError(RaftlockError):
    """A lock held by a Mutex, Semaphore, RWMutex or Election was lost with its session."""


class ElectionNoLeaderError(RaftlockError):
    """Nobody leads the election."""


class NotLeaderError(RaftlockError):
    """Proclaim by a candidate that does not lead."""


class StaleTokenError(RaftlockError):
    """A Fence refused a token lower than one it already accepted."""

    def __init__(self, lock, token, highest):
        super().__init__("stale fencing token %d for lock %r: token %d was already accepted"
                         % (token, lock, highest))
        self.lock, self.token, self.highest = lock, token, highest


class CancelledError(RaftlockError):
    """The caller's Context was cancelled."""


class DeadlineExceededError(CancelledError, TimeoutError):
    """The caller's timeout passed (Mutex.lock(timeout=...), a Context's deadline)."""


class APIError(RaftlockError):
    """An error answered by the server, with the fields of the API's error body."""

    status = 0           # HTTP status
    code = ""            # API error code, e.g. "lock_held"
    holder = None        # {"session": ..., "token": ...} for lock_held
    available_in = 0.0   # seconds a lock_delayed lock stays unavailable
    limit = 0            # the lock's limit for limit_mismatch
    retry_after = 0.0    # the server's Retry-After hint, seconds
    endpoint = ""        # the endpoint that answered


_CODES = {
    "invalid_argument": InvalidArgumentError,
    "unauthorized": UnauthorizedError,
    "forbidden": ForbiddenError,
    "session_not_found": SessionNotFoundError,
    "not_found": NotFoundError,
    "method_not_allowed": NotFoundError,
    "lock_held": LockHeldError,
    "lock_delayed": LockDelayedError,
    "attempt_cancelled": AttemptCancelledError,
    "not_holder": NotHolderError,
    "limit_mismatch": LimitMismatchError,
    "mode_mismatch": ModeMismatchError,
    "already_exists": AlreadyExistsError,
    "feature_not_enabled": FeatureNotEnabledError,
    "incompatible": IncompatibleError,
    "not_caught_up": NotCaughtUpError,
    "member_conflict": MemberConflictError,
    "payload_too_large": PayloadTooLargeError,
    "too_many_requests": TooManyRequestsError,
    "header_too_large": HeaderTooLargeError,
    "no_leader": NoLeaderError,
    "timeout": OutcomeUnknownError,
    "removed": RemovedError,
    "internal": InternalError,
}

_compound_lock = threading.Lock()
_compounds = {}


def compound(*kinds):
    """Returns a class that is every one of kinds (most specific first), made once."""
    flat = []
    kinds = list(kinds)
    while any("__init__" in vars(k) and k is not RaftlockError for k in kinds):
        # A class with fields of its own (a transport error, StaleTokenError): its kinds.
        kinds = [b for k in kinds for b in (k.__bases__ if "__init__" in vars(k) and k is not RaftlockError else (k,))]
    for k in kinds:
        for b in (k.__mro__ if getattr(k, "_compound", False) else (k,)):
            if (isinstance(b, type) and issubclass(b, RaftlockError) and b is not RaftlockError
                    and not getattr(b, "_compound", False) and b not in flat):
                flat.append(b)
    # Leave out the classes another one derives from, most derived first: a consistent MRO.
    flat = [c for c in flat if not any(o is not c and issubclass(o, c) for o in flat)]
    flat.sort(key=lambda c: -len(c.__mro__))
    key = tuple(flat)
    if not key:
        return RaftlockError
    if len(key) == 1:
        return key[0]
    with _compound_lock:
        cls = _compounds.get(key)
        if cls is None:
            cls = type("_".join(c.__name__ for c in key), key, {"_compound": True})
            _compounds[key] = cls
        return cls


def kind_of_code(code, status):
    """The kind of an API error code (APIError only for an unknown code below 500)."""
    k = _CODES.get(code)
    if k is None and status >= 500:
        k = InternalError
    return k


def api_error(status, code, message, endpoint="", holder=None, available_in=0.0, limit=0,
              retry_after=0.0):
    """Builds the APIError of an answer: an instance of APIError and of its code's kind."""
    k = kind_of_code(code, status)
    cls = compound(APIError, k) if k else APIError
    text = "%s (%d %s)" % (message, status, code)
    if holder:
        if holder.get("session"):
            text += ": held by session %s with token %d" % (holder["session"], holder.get("token", 0))
        else:
            text += ": held with token %d" % holder.get("token", 0)
    if available_in:
        text += ": available in %gs" % available_in
    if limit:
        text += ": its limit is %d" % limit
    e = cls(text)
    e.status, e.code, e.holder, e.available_in = status, code, holder, available_in
    e.limit, e.retry_after, e.endpoint = limit, retry_after, endpoint
    return e


def wrap(message, *kinds, cause=None):
    """An error of every kind given and of every kind of cause, which it keeps as __cause__;
    its message is message, then ": " and the cause's message."""
    all_kinds = list(kinds)
    if isinstance(cause, RaftlockError):
        all_kinds.append(type(cause))
    cls = compound(*all_kinds) if all_kinds else RaftlockError
    text = message
    if cause is not None:
        text += ": " + (cause.message if isinstance(cause, RaftlockError) else str(cause))
    e = cls(text)
    if isinstance(cause, APIError):
        for f in ("status", "code", "holder", "available_in", "limit", "retry_after", "endpoint"):
            setattr(e, f, getattr(cause, f))
    e.__cause__ = cause
    return e


TRANSIENT = (UnavailableError, NoLeaderError, OutcomeUnknownError, TooManyRequestsError,
             InternalError, FeatureNotEnabledError)


def is_transient(err):
    """Whether err is worth asking again: the cluster may answer later."""
    return isinstance(err, TRANSIENT)


__all__ = [n for n, v in list(globals().items())
           if isinstance(v, type) and issubclass(v, RaftlockError)] + ["is_transient"]

"""Fence: the protected resource's side of fencing."""

import threading

from . import errors

HEADER_TOKEN = "X-Raftlock-Token"


class Fence:
    """Remembers, per lock, the highest token it has accepted, and refuses operations that carry
    a lower one (StaleTokenError). A holder whose lease ran out while it was paused still
    believes it holds the lock; its stale token is what stops it. Safe for concurrent use."""

    def __init__(self):
        self._mu = threading.Lock()
        self._locks = {}

    def _entry(self, lock):
        with self._mu:
            e = self._locks.get(lock)
            if e is None:
                e = self._locks[lock] = _Entry()
            return e

    def check(self, lock, token):
        """Accepts token for lock if it is at least the highest accepted so far (the same holder
        sends the same token many times), and remembers it."""
        self.do(lock, token, None)

    def do(self, lock, token, fn):
        """check, then fn() with no other check or do on the same lock in between, so that a
        newer holder's operation cannot be overtaken by an older one that passed the check
        first. Returns fn's result; fn may be None."""
        if not token:
            raise errors.InvalidArgumentError("invalid argument: missing fencing token for lock %r" % lock)
        e = self._entry(lock)
        with e.mu:
            if token < e.highest:
                raise errors.StaleTokenError(lock, token, e.highest)
            e.highest = token
            return fn() if fn is not None else None

    def highest(self, lock):
        """The highest token accepted for lock, 0 if none."""
        e = self._entry(lock)
        with e.mu:
            return e.highest


class _Entry:
    def __init__(self):
        self.mu = threading.Lock()
        self.highest = 0


def set_token(headers, token):
    """Puts a fencing token into a dict of headers of a request to a protected resource."""
    headers[HEADER_TOKEN] = str(token)


def token_from_headers(headers):
    """Reads the fencing token set by set_token (headers: any mapping with .get)."""
    v = headers.get(HEADER_TOKEN)
    if not v:
        raise errors.InvalidArgumentError("invalid argument: no %s header" % HEADER_TOKEN)
    if not v.isdigit() or int(v) == 0:
        raise errors.InvalidArgumentError("invalid argument: bad %s header %r" % (HEADER_TOKEN, v))
    return int(v)

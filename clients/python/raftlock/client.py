"""Client: endpoints, retries, leader routing, features and batched renewals."""

import http.client
import json
import logging
import random
import re
import socket
import ssl
import threading
import time
import urllib.parse

from . import errors
from .context import BACKGROUND, Context

DEFAULT_REQUEST_TIMEOUT = 10.0  # one attempt of a request (plus the wait of a long poll)
DEFAULT_RETRY_TIMEOUT = 15.0    # how long a request keeps retrying on other endpoints
LEADER_LOOKUP_TIMEOUT = 2.0
MAX_RENEW_BATCH = 1000          # session ids one POST /v1/sessions/renew carries
RENEW_LINGER = 0.020            # least time between two renewal batches of a client
FEATURE_RECHECK = 30.0          # how long a list of features lacking one is trusted
IDLE_CONN_TIMEOUT = 30.0        # idle connections older than this are not reused

HEADER_TOKEN = "X-Raftlock-Token"
HEADER_LEADER = "X-Raftlock-Leader"
HEADER_FEATURES = "X-Raftlock-Features"

FEATURE_ATTEMPT_NUMBERS = "attempt-numbers"

log = logging.getLogger("raftlock")

_DUR = re.compile(r"([0-9]*\.?[0-9]+)(ns|us|µs|μs|ms|s|m|h)")
_UNITS = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "μs": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0}


def parse_duration(s):
    """Seconds of a Go duration string ("1m30s", "2.1s", "500ms")."""
    s = s.strip()
    if s in ("0", ""):
        return 0.0
    neg = s.startswith("-")
    s = s.lstrip("+-")
    pos, total = 0, 0.0
    for m in _DUR.finditer(s):
        if m.start() != pos:
            raise ValueError("bad duration %r" % s)
        total += float(m.group(1)) * _UNITS[m.group(2)]
        pos = m.end()
    if pos != len(s):
        raise ValueError("bad duration %r" % s)
    return -total if neg else total


def format_duration(seconds):
    """A Go duration string of seconds, exact to the millisecond (at least 1ms when positive)."""
    if seconds <= 0:
        return "0s"
    ms = max(1, int(round(seconds * 1000)))
    if ms % 1000 == 0:
        return "%ds" % (ms // 1000)
    return "%dms" % ms


class _TransportError(errors.UnavailableError):
    """No HTTP answer from an endpoint; sent says whether the request may have reached it."""

    def __init__(self, endpoint, cause, sent):
        super().__init__("%s: %s" % (endpoint, cause))
        self.endpoint, self.sent = endpoint, sent


class _Call:
    """One API request (see Client._do)."""

    def __init__(self, method, path, query=None, body=None, wait=0.0, attempt_timeout=None,
                 endpoint=None, stale=False, no_retry_unknown=False):
        self.method, self.path, self.query, self.body = method, path, query or {}, body
        self.wait, self.attempt_timeout, self.endpoint = wait, attempt_timeout, endpoint
        self.stale, self.no_retry_unknown = stale, no_retry_unknown


class Outcome:
    """What happened on the way to an answer: ambiguous is set when an earlier attempt may
    have been applied; sends counts the attempts that may have reached a server."""

    def __init__(self):
        self.ambiguous, self.endpoint, self.sends = False, "", 0


class _Pool:
    """Idle connections to one endpoint."""

    def __init__(self, endpoint, ssl_context):
        u = urllib.parse.urlsplit(endpoint)
        self.https = u.scheme == "https"
        self.host, self.port = u.hostname, u.port or (443 if self.https else 80)
        self.ssl_context = ssl_context
        self.lock = threading.Lock()
        self.idle = []  # (conn, since)

    def get(self):
        now = time.monotonic()
        with self.lock:
            while self.idle:
                conn, since = self.idle.pop()
                if now - since < IDLE_CONN_TIMEOUT:
                    return conn, True
                conn.close()
        if self.https:
            return http.client.HTTPSConnection(self.host, self.port, context=self.ssl_context), False
        return http.client.HTTPConnection(self.host, self.port), False

    def put(self, conn):
        with self.lock:
            if len(self.idle) < 64:
                self.idle.append((conn, time.monotonic()))
                return
        conn.close()

    def close(self):
        with self.lock:
            idle, self.idle = self.idle, []
        for conn, _ in idle:
            conn.close()


_STALE_CONN = (http.client.RemoteDisconnected, ConnectionResetError, BrokenPipeError,
               ConnectionAbortedError, http.client.BadStatusLine)


class Client:
    """Talks to a raftlock cluster through any of its endpoints; safe for concurrent use.

    Create one per process and share it. An endpoint without a scheme gets http:// (https://
    with TLS). TLS: pass an ssl.SSLContext, or ca_file (and cert_file/key_file for a client
    certificate). token is sent as X-Raftlock-Token. By default the client moves its requests
    to the leader's endpoint once an answer names a leader (leader_routing=False keeps the
    order given).
    """

    def __init__(self, endpoints, *, token=None, ssl_context=None, ca_file=None, cert_file=None,
                 key_file=None, request_timeout=DEFAULT_REQUEST_TIMEOUT,
                 retry_timeout=DEFAULT_RETRY_TIMEOUT, leader_routing=True):
        if isinstance(endpoints, str):
            endpoints = endpoints.split(",")
        if request_timeout <= 0 or retry_timeout < 0:
            raise errors.InvalidArgumentError("invalid argument: timeouts must be positive")
        if ssl_context is None and (ca_file or cert_file):
            ssl_context = ssl.create_default_context(cafile=ca_file)
            if cert_file:
                ssl_context.load_cert_chain(cert_file, key_file)
        scheme = "https://" if ssl_context is not None else "http://"
        eps = []
        for ep in endpoints:
            ep = ep.strip().rstrip("/")
            if not ep:
                continue
            if "://" not in ep:
                ep = scheme + ep
            u = urllib.parse.urlsplit(ep)
            if u.scheme not in ("http", "https") or not u.hostname:
                raise errors.InvalidArgumentError("invalid argument: bad endpoint %r" % ep)
            eps.append(ep)
        if not eps:
            raise errors.InvalidArgumentError("invalid argument: no endpoints")
        self._endpoints = eps
        self._pools = {ep: _Pool(ep, ssl_context) for ep in eps}
        self._token = token
        self.request_timeout, self.retry_timeout = request_timeout, retry_timeout
        self.backoff_min, self.backoff_max = 0.025, 1.0
        self._cur_lock = threading.Lock()
        self._cur = 0        # index of the endpoint tried first; leader routing moves it
        self._stale_cur = 0  # the one a stale read tries first
        self._router = _LeaderRouter(self) if leader_routing and len(eps) > 1 else None
        self._features = _Features()
        self._renewer = _Renewer(self)
        self.closed = Context()  # cancelled by close
        self._sessions_lock = threading.Lock()
        self._sessions = set()

    @property
    def endpoints(self):
        """The endpoints of the client, normalised."""
        return list(self._endpoints)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def close(self):
        """Ends the client: its live sessions stop renewing and count as lost with
        SessionClosedError (on the server they end when their TTL runs out: close each session
        first to release at once), and idle connections are closed."""
        self.closed.cancel(errors.SessionClosedError("session closed: its client was closed"))
        with self._sessions_lock:
            live = list(self._sessions)
        for s in live:
            s._end(errors.SessionClosedError("session closed: its client was closed"))
        if self._router:
            self._router.close()
        for p in self._pools.values():
            p.close()

    # ---- sessions and locks (see session.py) ----

    def session(self, ttl=15.0, *, name="", lock_delay=0.0, safety_margin=None, on_danger=None,
                ctx=None):
        """Creates a session and starts keeping it alive (Session); close it when done."""
        from .session import Session
        return Session._create(self, ttl, name, lock_delay, safety_margin, on_danger, ctx)

    # ---- endpoint cursor ----

    def _current(self, stale=False):
        with self._cur_lock:
            return self._stale_cur if stale else self._cur

    def _rotate(self, stale, idx):
        n = len(self._endpoints)
        with self._cur_lock:
            if stale:
                if self._stale_cur == idx:
                    self._stale_cur = (idx + 1) % n
            elif self._cur == idx:
                self._cur = (idx + 1) % n

    def _set_current(self, idx):
        with self._cur_lock:
            self._cur = idx

    def _backoff(self, attempt):
        d = self.backoff_min * (1 << min(attempt, 10))
        d = min(d, self.backoff_max)
        return d / 2 + random.uniform(0, d / 2)

    # ---- requests ----

    def _do(self, ctx, call):
        """Sends call and returns (decoded answer, Outcome). It moves to the next endpoint and
        tries again after connection errors, 503 no_leader and (unless no_retry_unknown) 503
        timeout, and waits and tries again after 429, with jittered exponential backoff, for at
        most the retry timeout."""
        ctx = ctx or BACKGROUND
        body = None if call.body is None else json.dumps(call.body).encode()
        start = time.monotonic()
        out = Outcome()
        attempt = 0
        while True:
            idx, ep = -1, call.endpoint
            if not ep:
                idx = self._current(call.stale)
                ep = self._endpoints[idx]
            out.endpoint = ep
            try:
                data, sends = self._attempt(ctx, ep, call, body)
                out.sends += sends
                if sends > 1:
                    out.ambiguous = True  # a copy on a stale pooled connection may have been applied
                return data, out
            except _TransportError as e:
                out.sends += 1 if e.sent else 0
                out.sends += getattr(e, "sends", 0)
                err = e
            except errors.APIError as e:
                out.sends += 1 + getattr(e, "sends", 0)
                if getattr(e, "sends", 0):
                    out.ambiguous = True
                err = e
            except errors.CancelledError as e:
                out.sends += getattr(e, "sends", 0)
                raise _with_outcome(e, out)
            if ctx.done():
                raise _with_outcome(errors.wrap("%s %s" % (call.method, call.path), errors.CancelledError, cause=ctx.err), out) from err
            retry, rotate, applied = _classify(err, call)
            if applied:
                out.ambiguous = True
            err.outcome = out
            if not retry or call.endpoint:
                raise err
            elapsed = time.monotonic() - start
            if elapsed >= self.retry_timeout:
                raise _with_outcome(errors.wrap("gave up after %d attempts in %.3fs" % (attempt + 1, elapsed),
                                                cause=err), out) from err
            if rotate and idx >= 0:
                self._rotate(call.stale, idx)
            delay = self._backoff(attempt)
            ra = getattr(err, "retry_after", 0) or 0
            if ra > delay:
                delay = min(ra, self.backoff_max * 5)
            log.debug("retrying %s %s at %s after %s (in %.3fs)", call.method, call.path, ep, err, delay)
            attempt += 1
            if not ctx.sleep(delay):
                raise _with_outcome(errors.wrap("%s %s" % (call.method, call.path), errors.CancelledError, cause=ctx.err), out) from err

    def _attempt(self, ctx, ep, call, body):
        """Sends one request to one endpoint; returns (decoded answer, sends)."""
        timeout = (call.attempt_timeout or self.request_timeout) + call.wait
        path = urllib.parse.quote(call.path, safe="/:@-._~")
        if call.query:
            path += "?" + urllib.parse.urlencode(call.query)
        headers = {"Accept": "application/json"}
        if self._token:
            headers[HEADER_TOKEN] = self._token
        if body is not None:
            headers["Content-Type"] = "application/json"
        pool = self._pools[ep]
        sends = 0
        for fresh_try in range(2):
            if ctx.done():
                raise _aborted(ctx, sends)
            conn, reused = pool.get()
            rem = ctx.remaining()
            t = timeout if rem is None else max(0.001, min(timeout, rem))

            def cut(_reason, conn=conn):
                sock = conn.sock
                if sock is not None:
                    try:
                        sock.shutdown(socket.SHUT_RDWR)
                    except OSError:
                        pass
            unregister = ctx.on_done(cut)
            try:
                if conn.sock is None:
                    conn.timeout = t
                    try:
                        conn.connect()
                    except (OSError, ssl.SSLError) as e:
                        conn.close()
                        if ctx.done():
                            raise _aborted(ctx, sends)
                        raise _earlier(_TransportError(ep, e, sent=False), sends)
                    if ctx.done():  # cancelled while connecting: nothing was sent
                        conn.close()
                        raise _aborted(ctx, sends)
                else:
                    conn.sock.settimeout(t)
                try:
                    conn.request(call.method, path, body=body, headers=headers)
                    resp = conn.getresponse()
                    data = resp.read()
                except _STALE_CONN as e:
                    conn.close()
                    if ctx.done():
                        raise _aborted(ctx, sends + 1)
                    if reused and fresh_try == 0:
                        # A pooled connection the server had closed: once more on a new one.
                        # The request may have reached the server (it counts as sent).
                        sends += 1
                        continue
                    raise _earlier(_TransportError(ep, e, sent=True), sends)
                except (OSError, http.client.HTTPException) as e:
                    conn.close()
                    if ctx.done():
                        raise _aborted(ctx, sends + 1)
                    if isinstance(e, socket.timeout):
                        e = "no answer within %.3fs" % t
                    raise _earlier(_TransportError(ep, e, sent=True), sends)
            finally:
                unregister()
            if resp.will_close:
                conn.close()
            else:
                pool.put(conn)
            try:
                return self._answer(ep, call, resp, data), sends + 1
            except errors.APIError as e:
                raise _earlier(e, sends)

    def _answer(self, ep, call, resp, data):
        leader = resp.getheader(HEADER_LEADER)
        if leader and self._router and not call.stale and (200 <= resp.status < 300 or resp.status == 409):
            self._router.saw(leader)
        self._features.saw(resp.getheader(HEADER_FEATURES))
        if 200 <= resp.status < 300:
            if not data.strip():
                return None
            try:
                return json.loads(data)
            except ValueError as e:
                raise errors.RaftlockError("decoding answer of %s: %s" % (ep, e))
        raise _parse_api_error(ep, resp, data)

    # ---- the API's calls the primitives use ----

    def _create_session(self, ctx, req):
        return self._do(ctx, _Call("POST", "/v1/sessions", body=req))[0]

    def _renew_sessions(self, ctx, ids, attempt_timeout):
        return self._do(ctx, _Call("POST", "/v1/sessions/renew", body={"ids": ids},
                                   attempt_timeout=attempt_timeout))[0]

    def _renew_one(self, ctx, sid, attempt_timeout):
        return self._do(ctx, _Call("PUT", "/v1/sessions/%s/renew" % _seg(sid),
                                   attempt_timeout=attempt_timeout))[0]

    def _destroy_session(self, ctx, sid):
        return self._do(ctx, _Call("DELETE", "/v1/sessions/%s" % _seg(sid)))[0]

    def _acquire(self, ctx, name, req):
        """One acquire (with its retries); returns (answer, Outcome)."""
        wait = parse_duration(req["wait"]) if req.get("wait") else 0.0
        call = _Call("POST", _lock_path(name, "acquire"), body=req, wait=wait)
        return self._do(ctx, call)

    def _cancel_acquire(self, ctx, name, sid, fields):
        q = {"session": sid}
        if fields.get("attempt"):
            q["attempt"] = fields["attempt"]
        if fields.get("attempt_seq"):
            q["attempt_seq"] = str(fields["attempt_seq"])
        if fields.get("attempt_floor"):
            q["attempt_floor"] = str(fields["attempt_floor"])
        return self._do(ctx, _Call("DELETE", _lock_path(name, "acquire"), query=q))[0]

    def _release(self, ctx, name, sid, token, fields=None):
        """Releases; when the outcome of an attempt is unknown, reads the lock to learn it and
        asks again only if the lock is still held under that token."""
        req = {"session": sid, "token": token}
        req.update({k: v for k, v in (fields or {}).items() if v})
        path = _lock_path(name, "release")
        rnd = 0
        while True:
            try:
                self._do(ctx, _Call("POST", path, body=req, no_retry_unknown=True))
                return
            except errors.RaftlockError as e:
                out = getattr(e, "outcome", None)
                unknown = isinstance(e, errors.OutcomeUnknownError) or (
                    out is not None and out.ambiguous and isinstance(e, errors.NotHolderError))
                if not unknown or rnd >= 4:
                    raise
                lk = self.get_lock(name, ctx=ctx)
                if not _held_under(lk, sid, token):
                    return
            rnd += 1

    # ---- reads ----

    def get_lock(self, name, *, stale=False, ctx=None):
        """The state of a lock (GET /v1/locks/{name}), as a dict: name, held, session, token,
        value, waiters, modify_index (and limit, holders). Linearizable unless stale."""
        return self._watch_lock(ctx, name, 0, 0.0, stale)

    def _watch_lock(self, ctx, name, index, wait, stale=False):
        q = {}
        if stale:
            q["consistency"] = "stale"
        if index > 0:
            q["index"] = str(index)
            q["wait"] = format_duration(wait)
        return self._do(ctx, _Call("GET", _lock_path(name, ""), query=q, stale=stale,
                                   wait=wait if index > 0 else 0.0))[0]

    def locks(self, prefix="", *, ctx=None):
        """The held or awaited locks whose names start with prefix (GET /v1/locks)."""
        q = {"prefix": prefix} if prefix else {}
        return self._do(ctx, _Call("GET", "/v1/locks", query=q))[0].get("locks") or []

    def cluster(self, *, ctx=None):
        """GET /v1/cluster: leader, term, indexes, members, features."""
        return self._do(ctx, _Call("GET", "/v1/cluster"))[0]

    def request(self, method, path, body=None, *, query=None, ctx=None):
        """Any call of the HTTP API (docs/api.md) on the client's endpoints, retries and token:
        the raw API. Nothing made through it is managed (renewed, withdrawn, released)."""
        return self._do(ctx, _Call(method, path, query=query, body=body))[0]

    def observe(self, name, ctx=None, wait=60.0):
        """Yields the leaders of election name (the holders of lock name) as they change: the
        state as it stands, then each new leader or value, and each vacancy (held False). It
        uses blocking queries; it ends when ctx is done."""
        ctx = ctx or BACKGROUND
        index, last, attempt = 0, None, 0
        while not ctx.done():
            try:
                lk = self._watch_lock(ctx, name, index, wait)
            except errors.RaftlockError as e:
                if ctx.done():
                    return
                log.debug("observe of %s failed; asking again: %s", name, e)
                if not ctx.sleep(self._backoff(attempt)):
                    return
                attempt += 1
                continue
            attempt = 0
            index = max(lk.get("modify_index", 0), 1)
            if last is not None and _same_leader(last, lk):
                continue
            last = lk
            yield lk

    # ---- features ----

    def _supports(self, ctx, feature):
        f = self._features
        with f.lock:
            at, enabled, stale = f.at, list(f.enabled), f.stale
        if feature in enabled:
            return True
        if at is not None and not stale and time.monotonic() - at < FEATURE_RECHECK:
            return False
        try:
            read = self._cluster_features(ctx)
        except errors.RaftlockError as e:
            log.debug("could not learn the cluster's features: %s", e)
            return False
        with f.lock:
            f.enabled = sorted(set(f.enabled) | set(read))
            f.at, f.stale = time.monotonic(), False
            return feature in f.enabled

    def _cluster_features(self, ctx):
        try:
            return self.cluster(ctx=ctx).get("features") or []
        except (errors.ForbiddenError, errors.UnauthorizedError):
            h = self._do(ctx, _Call("GET", "/v1/health"))[0]
            return h.get("cluster_features") or []

    def _forget_features(self):
        with self._features.lock:
            self._features.at, self._features.enabled, self._features.stale = None, [], False


def _earlier(err, sends):
    """Marks err with the copies of its request sent before on stale pooled connections."""
    err.sends = sends
    return err


def _aborted(ctx, sends):
    """The error of a request cut off by ctx; sends counts its attempts that may have been sent."""
    e = errors.wrap("request given up", errors.CancelledError, cause=ctx.err)
    e.sends = sends
    return e


def _with_outcome(err, out):
    err.outcome = out
    return err


def _seg(s):
    if not s:
        raise errors.InvalidArgumentError("invalid argument: empty session id")
    return urllib.parse.quote(s, safe="")


def _lock_path(name, action):
    if not name:
        raise errors.InvalidArgumentError("invalid argument: empty lock name")
    return "/v1/locks/" + name + ("/" + action if action else "")


def _held_under(lk, sid, token):
    if not lk.get("held"):
        return False
    for h in lk.get("holders") or []:
        if h.get("session") == sid and h.get("token") == token:
            return True
    return lk.get("session") == sid and lk.get("token") == token


def _same_leader(a, b):
    if not a.get("held") or not b.get("held"):
        return bool(a.get("held")) == bool(b.get("held"))
    return (a.get("session"), a.get("token"), a.get("value")) == (b.get("session"), b.get("token"), b.get("value"))


def _classify(err, call):
    """(retry, rotate, applied) of a failed attempt."""
    if isinstance(err, _TransportError):
        return True, True, err.sent
    if not isinstance(err, errors.APIError):
        return False, False, False
    if err.code == "no_leader":
        return True, True, False
    if err.code == "timeout":
        return not call.no_retry_unknown, True, True
    if err.code == "too_many_requests":
        return True, False, False
    return False, False, False


_STATUS_CODES = {400: "invalid_argument", 401: "unauthorized", 403: "forbidden", 404: "not_found",
                 429: "too_many_requests", 503: "no_leader", 502: "timeout", 504: "timeout"}


def _parse_api_error(ep, resp, data):
    code, message, holder, avail, limit = "", "", None, 0.0, 0
    try:
        b = json.loads(data)
        e = b.get("error") or {}
        code, message = e.get("code", ""), e.get("message", "")
        holder, limit = b.get("holder"), b.get("limit") or 0
        if b.get("available_in"):
            try:
                avail = parse_duration(b["available_in"])
            except ValueError:
                pass
    except (ValueError, AttributeError):
        pass
    if not code:
        # An answer without our error body (a proxy's).
        code = _STATUS_CODES.get(resp.status, "internal")
        message = resp.reason or "HTTP %d" % resp.status
    ra = 0.0
    h = resp.getheader("Retry-After")
    if h and h.isdigit():
        ra = float(h)
    return errors.api_error(resp.status, code, message, ep, holder, avail, limit, ra)


class _LeaderRouter:
    """Moves a client's requests to the endpoint of the leader: when an answer names a leader
    it has not looked up, it asks every endpoint which node it is (GET /v1/health), in the
    background, and makes the leader's the endpoint tried first."""

    def __init__(self, c):
        self.c = c
        self.lock = threading.Lock()
        self.seen = None
        self.looking = False
        self.ctx = Context()
        self.threads = []

    def saw(self, leader):
        if self.seen == leader:
            return
        with self.lock:
            if self.ctx.done() or self.looking:
                return
            self.looking = True
            t = threading.Thread(target=self._lookup, args=(leader,), daemon=True,
                                 name="raftlock-leader-lookup")
            self.threads = [x for x in self.threads if x.is_alive()] + [t]
            t.start()

    def _lookup(self, leader):
        idx = self._find(leader)
        with self.lock:
            self.looking = False
            if self.ctx.done():
                return
            self.seen = leader  # also when no endpoint is the leader: do not ask again
            if idx >= 0 and self.c._current() != idx:
                log.debug("moving to the leader's endpoint %s", self.c._endpoints[idx])
                self.c._set_current(idx)

    def _find(self, leader):
        ctx = Context(self.ctx, timeout=LEADER_LOOKUP_TIMEOUT)
        eps = self.c._endpoints
        ids = [None] * len(eps)

        def ask(i, ep):
            try:
                h, _ = self.c._attempt(ctx, ep, _Call("GET", "/v1/health"), None)
                ids[i] = (h or {}).get("id")
            except errors.RaftlockError as e:
                log.debug("asking %s which node it is: %s", ep, e)
        ts = [threading.Thread(target=ask, args=(i, ep), daemon=True) for i, ep in enumerate(eps)]
        for t in ts:
            t.start()
        for t in ts:
            t.join()
        ctx.close()
        for i, got in enumerate(ids):
            if got == leader:
                return i
        return -1

    def close(self):
        self.ctx.cancel()
        for t in list(self.threads):
            t.join()


class _Features:
    """What the client learned of the features the cluster has enabled."""

    def __init__(self):
        self.lock = threading.Lock()
        self.at = None       # when they were last read (monotonic); None while never read
        self.enabled = []    # a feature once seen enabled stays
        self.stale = False   # an answer showed more features enabled than enabled holds

    def saw(self, header):
        if not header or not header.isdigit():
            return
        with self.lock:
            if self.at is not None and int(header) > len(self.enabled):
                self.stale = True


class _RenewCall:
    def __init__(self, sid, deadline, attempt_timeout, done):
        self.sid, self.deadline, self.attempt_timeout, self.done = sid, deadline, attempt_timeout, done


class _Renewer:
    """Sends the renewals of a client's sessions together, as Nagle's algorithm does with small
    writes: a renewal goes out at once unless a batch left less than RENEW_LINGER ago, and then
    it waits for the next batch (POST /v1/sessions/renew, up to 1000 ids). Against a server
    without that route (404/405) it renews one by one (PUT /v1/sessions/{id}/renew)."""

    def __init__(self, c):
        self.c = c
        self.single = False
        self.lock = threading.Lock()
        self.queue = []
        self.scheduled = False
        self.last_flush = 0.0

    def renew(self, sid, deadline, attempt_timeout, done):
        """Renews session sid through the next batch; done(err) is called with None when the
        server renewed it, a SessionNotFoundError when it does not know it, another error when
        the outcome is not known. The answer is useless after deadline (monotonic)."""
        call = _RenewCall(sid, deadline, attempt_timeout, done)
        if self.single:
            threading.Thread(target=self._one, args=(call,), daemon=True).start()
            return
        with self.lock:
            self.queue.append(call)
            if self.scheduled:
                return
            self.scheduled = True
            wait = self.last_flush + RENEW_LINGER - time.monotonic()
        if wait > 0:
            t = threading.Timer(wait, self._flush)
            t.daemon = True
            t.start()
        else:
            threading.Thread(target=self._flush, daemon=True).start()

    def _flush(self):
        with self.lock:
            queue, self.queue = self.queue, []
            self.scheduled = False
            self.last_flush = time.monotonic()
        while queue:
            batch, queue = queue[:MAX_RENEW_BATCH], queue[MAX_RENEW_BATCH:]
            threading.Thread(target=self._send, args=(batch,), daemon=True).start()

    def _one(self, call):
        ctx = Context(self.c.closed, deadline=call.deadline)
        try:
            self.c._renew_one(ctx, call.sid, call.attempt_timeout)
            err = None
        except errors.RaftlockError as e:
            err = e
        ctx.close()
        call.done(err)

    def _send(self, batch):
        now = time.monotonic()
        live = []
        for call in batch:
            if now >= call.deadline:
                call.done(errors.DeadlineExceededError("renewal: the session's deadline passed"))
            else:
                live.append(call)
        if not live:
            return
        ctx = Context(self.c.closed, deadline=max(x.deadline for x in live))
        try:
            resp = self.c._renew_sessions(ctx, [x.sid for x in live], min(x.attempt_timeout for x in live))
        except errors.RaftlockError as e:
            ctx.close()
            if isinstance(e, errors.APIError) and e.code in ("not_found", "method_not_allowed"):
                self.single = True
                for call in live:
                    threading.Thread(target=self._one, args=(call,), daemon=True).start()
                return
            for call in live:
                call.done(e)
            return
        ctx.close()
        outcome = {}
        for r in resp.get("renewed") or []:
            outcome[r["id"]] = None
        for sid in resp.get("not_found") or []:
            outcome[sid] = errors.api_error(404, "session_not_found",
                                            "the session does not exist or has expired")
        for sid in resp.get("unknown") or []:
            outcome[sid] = errors.api_error(503, "timeout",
                                            "the session's expiry is being committed; its outcome is unknown")
        for call in live:
            call.done(outcome.get(call.sid, errors.api_error(
                500, "internal", "the server's batch renewal answer left this session out")))

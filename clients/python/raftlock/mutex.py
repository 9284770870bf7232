"""Mutex, Semaphore, RWMutex and Election: locks held by a Session, with numbered attempts."""

import contextlib
import queue
import threading
import time

from . import errors
from .client import format_duration, log
from .context import BACKGROUND, Context

DEFAULT_WAIT_CHUNK = 60.0  # how long one long-poll acquire of lock() waits at most
MAX_LIMIT = 1000


def _chunk_lead(chunk):
    """How long before a wait chunk elapses lock() sends the next one."""
    return min(chunk / 4, 10.0)


def _ctx_of(ctx, timeout):
    return Context(ctx or BACKGROUND, timeout=timeout)


class _Hold:
    """One grant of the lock to a Mutex."""

    def __init__(self, token, shared, attempt):
        self.token, self.shared, self.attempt = token, shared, attempt
        self.context = Context()
        self.stop = None


class Mutex:
    """A distributed FIFO lock held by a Session.

    ``with m:`` locks (waiting as long as it takes) and unlocks; ``m.lock(timeout=...)`` waits
    at most that long, ``m.try_lock()`` fails at once with LockHeldError (naming the holder)
    when another session holds it. Work under the lock should stop when ``m.context`` is done
    and pass ``m.token`` to the protected resource.

    A session holds a lock at most once: a second Mutex (or Election) of the session for the
    same lock is refused while the first tries for it or holds it. Once the session is lost,
    the Mutex forgets its hold before Session.done is set: token is 0, context is done (its
    err is a LockLostError) and lock() fails with the session's error.

    Every lock() or try_lock() call is one attempt on the server. An attempt that fails or is
    given up while a request of it may still reach the server is withdrawn in the background
    (DELETE /v1/locks/{name}/acquire with the attempt, and a release of a grant that came
    first), retrying while the session lives; unlock() releases naming the attempt that won.
    The server then refuses every later request of the attempt, so no request delayed in the
    network can queue the session or grant it the lock after the call that sent it ended.
    """

    def __init__(self, session, name, *, value=None, wait_chunk=DEFAULT_WAIT_CHUNK):
        self.session = session
        self.name = name
        self._value = value
        self._chunk = wait_chunk
        self._limit = None
        self._calls = threading.Lock()  # lock() calls run one at a time
        self._mu = threading.Lock()
        self._hold = None
        self._lost = None   # the last hold, if it ended without unlock
        self._floor = 0     # the highest token of a hold that ended

    # ---- state ----

    @property
    def token(self):
        """The fencing token of the current hold, or 0 (also once the session's loss is known)."""
        with self._mu:
            if self._hold is None or self.session.err is not None:
                return 0
            return self._hold.token

    @property
    def held(self):
        """Whether this Mutex believes it holds the lock."""
        return self._current() is not None

    @property
    def context(self):
        """A Context cancelled when the hold ends: on unlock, or when the session is lost (err
        then is a LockLostError), before Session.done is set. Done already when not held."""
        with self._mu:
            h = self._hold or self._lost
            if h is not None:
                return h.context
        c = Context()
        c.cancel(errors.NotHolderError("mutex %r is not locked" % self.name))
        return c

    def _current(self):
        with self._mu:
            if self.session.err is not None:
                return None
            return self._hold

    def _highest(self):
        with self._mu:
            f = self._floor
            if self._hold is not None:
                f = max(f, self._hold.token)
            return f

    # ---- taking ----

    def lock(self, timeout=None, *, ctx=None):
        """Blocks until the lock is granted (returns its token), timeout seconds pass
        (DeadlineExceededError), ctx is done or the session is lost. Waiters are granted in
        arrival order. If it gives up, it withdraws its attempt in the background."""
        return self._lock(_ctx_of(ctx, timeout), True, False)

    def try_lock(self, *, ctx=None):
        """Takes the lock if it is free, else fails at once with LockHeldError (or
        LockDelayedError); returns the token."""
        return self._lock(_ctx_of(ctx, None), False, False)

    def __enter__(self):
        self.lock()
        return self

    def __exit__(self, exc_type, exc, tb):
        try:
            self.unlock()
        except errors.RaftlockError:
            if exc_type is None:
                raise

    @contextlib.contextmanager
    def locked(self, timeout=None):
        """``with m.locked(timeout=5):`` locks, waiting at most timeout seconds, and unlocks."""
        self.lock(timeout)
        try:
            yield self
        finally:
            self.unlock()

    def _lock(self, ctx, wait, shared):
        try:
            while not self._calls.acquire(timeout=0.05):
                if ctx.done():
                    raise errors.wrap("lock %r" % self.name, errors.CancelledError, cause=ctx.err)
            try:
                return self._lock_once(ctx, wait, shared)
            finally:
                self._calls.release()
        finally:
            ctx.close()

    def _lock_once(self, ctx, wait, shared):
        s = self.session
        err = s.err
        if err is not None:
            raise errors.wrap("lock %r" % self.name, cause=err)
        with self._mu:
            h, value = self._hold, self._value
        if h is not None and h.shared != shared:
            raise errors.ModeMismatchError("lock %r: this RWMutex holds it %s" % (self.name, _mode(h.shared)))
        if h is not None:
            return h.token
        try:
            s._use(ctx, self.name, self)
        except errors.RaftlockError as e:
            raise errors.wrap("lock %r" % self.name, cause=e) from e
        t = s._new_attempt(ctx)
        req = {"session": s.id}
        if value is not None:
            req["value"] = value
        if self._limit is not None:
            req["limit"] = self._limit
        if shared:
            req["mode"] = "shared"
        token, clean, err = self._try(ctx, req, t, wait)
        if err is None:
            err = self._granted(token, t, shared)
            if err is None:
                s._end_attempt(t)  # its grant is the hold, which unlock fences
                return token
        if s.err is not None:
            s._end_use(self.name, self)
        elif clean:
            s._end_attempt(t)
            s._end_use(self.name, self)
        else:
            self._withdraw(t, token)
        raise err

    def _try(self, ctx, req, t, wait):
        """Runs one attempt: one acquire, or with wait as many long polls as it takes. Returns
        (token, clean, err); clean says the attempt sent one request, answered without a grant
        or a queue place, so that it leaves nothing to withdraw."""
        if wait:
            req["wait"] = format_duration(self._chunk)
        a = _Acquirer(self, req, t, wait, ctx)
        try:
            return a.run()
        finally:
            a.finish()

    def _acquire(self, ctx, req):
        """One acquire (with its retries), cut short when the session is lost."""
        rctx = Context(ctx)
        unreg = self.session.context.on_done(lambda _r: rctx.cancel(errors.CancelledError("session lost")))
        try:
            return self.session.client._acquire(rctx, self.name, req)
        finally:
            unreg()
            rctx.close()

    def _granted(self, token, t, shared):
        """Records a grant, unless the session was lost meanwhile or the token is not above one
        of a hold that ended (an old hold the server still has, not this attempt's)."""
        with self._mu:
            if token <= self._floor:
                return errors.InternalError("lock %r: granted token %d is not above %d, the token of "
                                            "a hold that ended" % (self.name, token, self._floor))
            h = _Hold(token, shared, t)
            stop = self.session._on_loss(lambda reason: self._lose(h, reason))
            if stop is None:
                err = errors.wrap("lock %r: granted as the session ended" % self.name, cause=self.session.err)
                h.context.cancel(err)
                return err
            h.stop = stop
            self._hold, self._lost = h, None
            return None

    def _lose(self, h, reason):
        """Ends hold h, if it is still the current one, without a release."""
        with self._mu:
            if self._hold is not h:
                return False
            self._hold, self._lost = None, h
            self._floor = max(self._floor, h.token)
        h.stop()
        h.context.cancel(errors.wrap("lock lost: %r" % self.name, errors.LockLostError, cause=reason))
        return True

    # ---- releasing ----

    def unlock(self, *, ctx=None):
        """Releases the lock, naming the attempt that won it. context is cancelled first, so
        work under the lock stops before another holder can start. Raises LockLostError if the
        lock had already been lost, and another error if the cluster could not be reached: the
        release then goes on in the background while the session lives."""
        return self._unlock(ctx or BACKGROUND, False)

    def _unlock(self, ctx, shared):
        s, c = self.session, self.session.client
        with self._mu:
            h, lost = self._hold, self._lost
            cur = h or lost
            if cur is not None and cur.shared != shared:
                raise errors.NotHolderError("unlock %r: this RWMutex holds it %s" % (self.name, _mode(cur.shared)))
            self._hold, self._lost = None, None
            if h is not None:
                self._floor = max(self._floor, h.token)
        if h is None and lost is None:
            raise errors.NotHolderError("unlock %r: mutex is not locked" % self.name)
        if h is None:
            # Lost before: if only this process gave the session up, the server may still hold
            # the lock for it; release it so that others need not wait for the expiry.
            try:
                c._release(ctx, self.name, s.id, lost.token, s._fields(lost.attempt))
            except errors.RaftlockError:
                pass
            raise errors.wrap("unlock %r" % self.name, cause=lost.context.err)
        h.stop()
        lost_err = s.err
        h.context.cancel(errors.CancelledError("mutex %r unlocked" % self.name))
        err = None
        try:
            s._settled(ctx, self.name)
            c._release(ctx, self.name, s.id, h.token, s._fields(h.attempt))
        except errors.RaftlockError as e:
            err = e
            s._gone(e)
        if lost_err is not None:
            s._end_use(self.name, self)
            raise errors.wrap("unlock %r: lock lost" % self.name, errors.LockLostError, cause=lost_err)
        if err is None:
            s._end_use(self.name, self)
            return
        if isinstance(err, errors.SessionNotFoundError):
            s._end_use(self.name, self)
            raise errors.wrap("unlock %r: lock lost" % self.name, errors.LockLostError, cause=err)
        if isinstance(err, errors.NotHolderError):
            # Someone released it with this session's id and token; a request of the attempt
            # that slipped in before may have taken it anew.
            self._withdraw(h.attempt, 0)
            raise errors.wrap("unlock %r: lock lost" % self.name, errors.LockLostError, cause=err)
        self._withdraw(h.attempt, h.token)
        raise errors.wrap("unlock %r (releasing in the background while the session lives)" % self.name,
                          cause=err)

    # ---- withdrawal ----

    def _withdraw(self, t, token):
        """Ends this Mutex's use of the lock with a background withdrawal of attempt t."""
        done = self.session._start_withdrawal(self.name)  # before end_use: no try starts between
        self.session._end_use(self.name, self)
        threading.Thread(target=self._run_withdrawal, args=(done, t, token, 0), daemon=True,
                         name="raftlock-withdraw").start()

    def _run_withdrawal_later(self, t, keep):
        done = self.session._start_withdrawal(self.name)
        threading.Thread(target=self._run_withdrawal, args=(done, t, 0, keep), daemon=True,
                         name="raftlock-withdraw").start()

    def _run_withdrawal(self, done, t, token, keep):
        """Cancels attempt t (which takes the session out of the queue, refuses the attempt's
        requests still on their way, and reports a grant that came first) and releases the
        grant (token, if known, else the one reported, unless it is keep), asking again while
        the session lives. Then done()."""
        s = self.session
        ctx = s.context
        try:
            i = 0
            while True:
                try:
                    token = self._withdraw_once(ctx, t, token, keep)
                    s._end_attempt(t)  # the server refuses the attempt's late requests now
                    return
                except errors.RaftlockError as e:
                    if ctx.done():
                        return
                    s._gone(e)
                    if not errors.is_transient(e):
                        log.warning("could not withdraw an attempt for lock %s; the session may hold "
                                    "it until it ends: %s", self.name, e)
                        return
                    log.debug("withdrawing an attempt for %s failed; asking again: %s", self.name, e)
                    if not ctx.sleep(s.client._backoff(i)):
                        return
                    i += 1
        finally:
            done()

    def _withdraw_once(self, ctx, t, token, keep):
        s, c = self.session, self.session.client
        if token == 0:
            r = c._cancel_acquire(ctx, self.name, s.id, s._fields(t))
            if not r.get("held") or r.get("token") == keep:
                return 0
            token = r["token"]
        try:
            c._release(ctx, self.name, s.id, token, s._fields(t))
        except errors.NotHolderError:
            pass
        return token


def _mode(shared):
    return "shared" if shared else "exclusively"


class _Acquirer:
    """The acquire requests of one lock() call: one at a time, two while a wait chunk hands
    over to the next, so that the server always has a request of the session waiting."""

    def __init__(self, m, req, t, wait, ctx):
        self.m, self.req, self.t, self.wait, self.ctx = m, req, t, wait, ctx
        self.actx = Context(ctx)  # ends every request when lock() returns
        self.results = queue.Queue()
        self.in_flight = 0
        self.requests = 0
        self.sends = 0
        self.overlap_at = None
        self.overdue = False
        wake = lambda _r: self.results.put(("wake",))
        self.unreg = [ctx.on_done(wake), m.session.context.on_done(wake)]

    def finish(self):
        self.actx.cancel()
        for u in self.unreg:
            u()

    def send(self):
        self.in_flight += 1
        self.requests += 1
        self.overdue = False
        req = dict(self.req)
        req.update(self.m.session._fields(self.t))  # with the session's floor as of now

        def run():
            try:
                resp, out = self.m._acquire(self.actx, req)
                self.results.put(("result", resp, out.sends, None))
            except errors.RaftlockError as e:
                out = getattr(e, "outcome", None)
                self.results.put(("result", None, out.sends if out else 1, e))
        threading.Thread(target=run, daemon=True, name="raftlock-acquire").start()
        if self.wait:
            self.overlap_at = time.monotonic() + self.m._chunk - _chunk_lead(self.m._chunk)

    def drain(self):
        """Cuts off the requests in flight and waits for their answers."""
        self.actx.cancel()
        while self.in_flight > 0:
            r = self.results.get()
            if r[0] == "result":
                self.in_flight -= 1

    def give_up(self):
        self.drain()
        m = self.m
        err = m.session.err
        if err is not None:
            return 0, False, errors.wrap("lock %r" % m.name, cause=err)
        return 0, False, errors.wrap("lock %r" % m.name, errors.CancelledError, cause=self.ctx.err)

    def run(self):
        m, s = self.m, self.m.session
        self.send()
        retry_at = None
        attempt = 0
        while True:
            if self.ctx.done() or s.err is not None:
                return self.give_up()
            now = time.monotonic()
            wake = [x for x in (self.overlap_at, retry_at) if x is not None]
            rem = self.ctx.remaining()
            timeout = None
            if wake:
                timeout = max(0.0, min(wake) - now)
            if rem is not None:
                timeout = rem if timeout is None else min(timeout, rem)
            try:
                r = self.results.get(timeout=timeout)
            except queue.Empty:
                now = time.monotonic()
                if self.overlap_at is not None and now >= self.overlap_at:
                    self.overlap_at = None
                    if self.in_flight == 1:
                        self.send()
                    elif self.in_flight >= 2:
                        self.overdue = True  # send when the older one answers
                if retry_at is not None and now >= retry_at:
                    retry_at = None
                    self.send()
                continue
            if r[0] == "wake":
                continue
            _, resp, sends, err = r
            self.in_flight -= 1
            self.sends += sends
            if err is None:
                self.drain()
                return resp["token"], False, None
            s._gone(err)
            if self.ctx.done() or s.err is not None:
                return self.give_up()
            if isinstance(err, errors.FeatureNotEnabledError):
                s.client._forget_features()
            elapsed = isinstance(err, (errors.LockHeldError, errors.LockDelayedError))  # a wait chunk
            if not self.wait and isinstance(err, errors.AttemptCancelledError):
                # An earlier copy of this try, whose answer was lost, was refused for good.
                err = errors.wrap("an earlier request of this try was refused and its answer lost",
                                  errors.LockHeldError, cause=err)
            if not self.wait or (not elapsed and not errors.is_transient(err)):
                self.drain()
                clean = (self.requests == 1 and self.sends == 1 and isinstance(err, errors.APIError)
                         and err.status < 500)
                return 0, clean, errors.wrap("lock %r" % m.name, cause=err)
            if elapsed:
                attempt = 0
            else:
                log.debug("acquire of %s failed; asking again: %s", m.name, err)
            if self.in_flight > 0 and self.overdue:
                self.send()
            elif self.in_flight > 0:
                pass  # the other request still holds the session's place
            elif elapsed:
                self.send()
            else:
                retry_at = time.monotonic() + s.client._backoff(attempt)
                attempt += 1


class Semaphore:
    """Up to limit sessions hold it at once, each under a fencing token of its own; the others
    wait in arrival order. It behaves as a Mutex does in everything else."""

    def __init__(self, session, name, limit, *, value=None, wait_chunk=DEFAULT_WAIT_CHUNK):
        self._m = Mutex(session, name, value=value, wait_chunk=wait_chunk)
        self._m._limit = limit
        self.limit = limit
        self.name, self.session = name, session

    def _check(self):
        if not 1 <= self.limit <= MAX_LIMIT:
            raise errors.InvalidArgumentError("semaphore %r: invalid argument: limit %d is not between 1 and %d"
                                              % (self.name, self.limit, MAX_LIMIT))

    def acquire(self, timeout=None, *, ctx=None):
        """Blocks until a permit is granted; returns its token (as Mutex.lock)."""
        self._check()
        return self._m.lock(timeout, ctx=ctx)

    def try_acquire(self, *, ctx=None):
        """Takes a permit if one is free and nobody waits, else LockHeldError (as Mutex.try_lock)."""
        self._check()
        return self._m.try_lock(ctx=ctx)

    def release(self, *, ctx=None):
        """Gives the permit back (as Mutex.unlock)."""
        return self._m.unlock(ctx=ctx)

    @property
    def token(self):
        return self._m.token

    @property
    def context(self):
        return self._m.context

    def __enter__(self):
        self.acquire()
        return self

    def __exit__(self, exc_type, exc, tb):
        return self._m.__exit__(exc_type, exc, tb)


class RWMutex:
    """A read/write lock: sessions share it (rlock) or one holds it alone (lock), in arrival
    order, so a waiting writer is never overtaken by later readers. Every grant has a token."""

    def __init__(self, session, name, *, value=None, wait_chunk=DEFAULT_WAIT_CHUNK):
        self._m = Mutex(session, name, value=value, wait_chunk=wait_chunk)
        self.name, self.session = name, session

    def rlock(self, timeout=None, *, ctx=None):
        return self._m._lock(_ctx_of(ctx, timeout), True, True)

    def try_rlock(self, *, ctx=None):
        return self._m._lock(_ctx_of(ctx, None), False, True)

    def runlock(self, *, ctx=None):
        return self._m._unlock(ctx or BACKGROUND, True)

    def lock(self, timeout=None, *, ctx=None):
        return self._m._lock(_ctx_of(ctx, timeout), True, False)

    def try_lock(self, *, ctx=None):
        return self._m._lock(_ctx_of(ctx, None), False, False)

    def unlock(self, *, ctx=None):
        return self._m._unlock(ctx or BACKGROUND, False)

    @property
    def token(self):
        return self._m.token

    @property
    def shared(self):
        h = self._m._current()
        return h is not None and h.shared

    @property
    def context(self):
        return self._m.context

    @contextlib.contextmanager
    def read_locked(self, timeout=None):
        self.rlock(timeout)
        try:
            yield self
        finally:
            self.runlock()

    @contextlib.contextmanager
    def write_locked(self, timeout=None):
        self.lock(timeout)
        try:
            yield self
        finally:
            self.unlock()


class Election:
    """Elects one leader among the candidates that campaign on the same name: a Mutex whose
    value is the leader's announcement. campaign() blocks until this candidate leads; anyone
    can read (leader()) or observe (observe()) who leads."""

    def __init__(self, session, name):
        self.session, self.name = session, name
        self._mu = threading.Lock()
        self._m = None

    def _cur(self):
        with self._mu:
            return self._m

    @property
    def is_leader(self):
        m = self._cur()
        return m is not None and m._current() is not None

    @property
    def token(self):
        m = self._cur()
        return m.token if m else 0

    @property
    def context(self):
        m = self._cur()
        return m.context if m else Mutex(self.session, self.name).context

    def campaign(self, value, timeout=None, *, ctx=None):
        """Blocks until this candidate leads with value; returns the leadership's token. A
        leader that campaigns again proclaims the new value."""
        if self.is_leader:
            self.proclaim(value, ctx=ctx)
            return self.token
        m = Mutex(self.session, self.name, value=value)
        prev = self._cur()
        if prev is not None:
            m._floor = prev._highest()  # a new leadership's token is above every earlier one's
        try:
            token = m.lock(timeout, ctx=ctx)
        except errors.RaftlockError as e:
            raise errors.wrap("campaign", cause=e) from e
        with self._mu:
            self._m = m
        return token

    def proclaim(self, value, *, ctx=None):
        """Replaces the leader's value without giving up leadership. NotLeaderError when this
        candidate does not lead; NotLeaderError and LockLostError when it finds the leadership
        lost (the leadership then ends)."""
        ctx = ctx or BACKGROUND
        m = self._cur()
        h = m._current() if m is not None else None
        if h is None:
            raise errors.NotLeaderError("proclaim on %r: not the election leader" % self.name)
        s = self.session
        t = s._new_attempt(ctx)
        req = {"session": s.id, "value": value}
        req.update(s._fields(t))
        resp, err, sends = None, None, 0
        try:
            resp, out = s.client._acquire(ctx, self.name, req)
            sends = out.sends
        except errors.RaftlockError as e:
            err = e
            out = getattr(e, "outcome", None)
            sends = out.sends if out else 2
        if sends != 1 or (err is not None and (not isinstance(err, errors.APIError) or err.status >= 500)):
            # A request of it may still be on its way: cancel the attempt, and give back a
            # grant other than the leadership's.
            m._run_withdrawal_later(t, h.token)
        else:
            s._end_attempt(t)
        if err is not None:
            s._gone(err)
            if isinstance(err, (errors.LockHeldError, errors.LockDelayedError, errors.AttemptCancelledError)):
                raise self._lost(m, h, err)
            raise errors.wrap("proclaim on %r" % self.name, cause=err)
        if resp["token"] != h.token:
            raise self._lost(m, h, errors.RaftlockError("the lock was granted anew under token %d" % resp["token"]))
        with m._mu:
            if m._hold is h:
                m._value = value

    def _lost(self, m, h, cause):
        err = errors.wrap("proclaim on %r: not the leader: lock lost" % self.name,
                          errors.NotLeaderError, errors.LockLostError, cause=cause)
        if m._lose(h, errors.wrap("leadership lost while the session lives", cause=cause)):
            m._withdraw(h.attempt, 0)
        return err

    def resign(self, *, ctx=None):
        """Gives up leadership so that the next candidate is elected; a no-op when not leading."""
        m = self._cur()
        if m is None:
            return
        try:
            m.unlock(ctx=ctx)
        except (errors.LockLostError, errors.NotHolderError):
            pass
        except errors.RaftlockError as e:
            raise errors.wrap("resign", cause=e) from e

    def leader(self, *, ctx=None):
        """The current leader's lock state (session, token, value); ElectionNoLeaderError when
        nobody leads."""
        lk = self.session.client.get_lock(self.name, ctx=ctx)
        if not lk.get("held"):
            raise errors.ElectionNoLeaderError("%r: election has no leader" % self.name)
        return lk

    def observe(self, ctx=None):
        """Yields who leads as it changes (see Client.observe)."""
        return self.session.client.observe(self.name, ctx)

"""Session: a lease renewed in the background, with a conservative local deadline."""

import random
import threading
import time

from . import errors
from .client import FEATURE_ATTEMPT_NUMBERS, format_duration, log, parse_duration
from .context import BACKGROUND, Context

DEFAULT_TTL = 15.0


class Session:
    """A lease on the cluster, renewed in the background about every TTL/3 (batched with the
    client's other sessions). Its locks live and die with it.

    It keeps a conservative local deadline: the moment the last acknowledged renewal was sent,
    plus the TTL, minus a safety margin (default TTL/5; it must be under TTL/2), on the
    monotonic clock. The server frees the session's locks no earlier than TTL after the leader
    received that renewal, so ``done`` is set before anyone else can be granted them (unless
    this process is paused at that very moment, which is what fencing tokens are for).

    When the session is lost, ``err`` is set first, then every Mutex of the session forgets
    its hold, then the callbacks of ``on_lost`` run and ``done`` (a threading.Event) is set.
    """

    @classmethod
    def _create(cls, c, ttl, name, lock_delay, margin, on_danger, ctx):
        ctx = ctx or BACKGROUND
        if not margin or margin <= 0:
            margin = ttl / 5
        if ttl <= 0 or margin >= ttl / 2:
            raise errors.InvalidArgumentError("invalid argument: session ttl %gs with safety margin %gs"
                                              % (ttl, margin))
        if c.closed.done():
            raise errors.SessionClosedError("creating session: session closed: the client was closed")
        req = {"ttl": format_duration(ttl)}
        if name:
            req["name"] = name
        if lock_delay and lock_delay > 0:
            req["lock_delay"] = format_duration(lock_delay)
        sent = time.monotonic()
        try:
            info = c._create_session(ctx, req)
        except errors.RaftlockError as e:
            raise errors.wrap("creating session", cause=e) from e
        # Should the server report a shorter TTL than asked, the local deadline follows it.
        try:
            got = parse_duration(info.get("ttl", ""))
            if 0 < got < ttl:
                margin, ttl = margin * got / ttl, got
        except ValueError:
            pass
        s = cls(c, info, ttl, margin, on_danger, sent)
        # Learn now, not in the middle of a lock, whether the cluster numbers attempts.
        c._supports(ctx, FEATURE_ATTEMPT_NUMBERS)
        with c._sessions_lock:
            closed = c.closed.done()
            if not closed:
                c._sessions.add(s)
        if closed:
            s._lose(errors.SessionClosedError("session closed: its client was closed"))
            try:
                c._destroy_session(ctx, s.id)
            except errors.RaftlockError:
                pass
            raise errors.SessionClosedError("creating session: session closed: the client was closed")
        s._thread.start()
        return s

    def __init__(self, c, info, ttl, margin, on_danger, sent):
        self.client = c
        self.info = info
        self.id = info["id"]
        self.ttl = ttl
        self.safety_margin = margin
        self._on_danger = on_danger
        self.context = Context()  # cancelled, with the reason, when the session is lost
        self.done = self.context._event
        self._mu = threading.Condition()
        self._last_ack = sent
        self._err = None
        self._hooks = {}
        self._hook_seq = 0
        self._uses = {}
        # Attempts: numbers of the session's tries, and those not ended yet.
        self._att_lock = threading.Lock()
        self._att_last = 0
        self._att_open = set()
        # Keepalive.
        self._kc = threading.Condition()
        self._stopped = False
        self._result = None
        self._thread = threading.Thread(target=self._keepalive, daemon=True,
                                        name="raftlock-session-%s" % self.id[:8])

    # ---- what users see ----

    @property
    def err(self):
        """None while the session lives; then why it was lost: a SessionNotFoundError (the server
        reported it gone; the message says whether it was destroyed or may have expired), a
        SessionDeadlineError (the local deadline passed without a renewal) or a
        SessionClosedError."""
        with self._mu:
            return self._err

    @property
    def deadline(self):
        """The local deadline, on time.monotonic()'s clock."""
        with self._mu:
            return self._last_ack + self.ttl - self.safety_margin

    def on_lost(self, fn):
        """Calls fn(reason) when the session is lost (at once if it is), after its Mutexes
        forgot their holds and just before done is set; returns a function that unregisters it."""
        return self.context.on_done(fn)

    def wait(self, timeout=None):
        """Waits until the session is lost; returns whether it is."""
        return self.done.wait(timeout)

    def close(self, ctx=None):
        """Stops the keepalive and destroys the session on the server, which releases its locks.
        done is set first, so that work under the session's locks stops before they are
        released. A session the server no longer knows is not an error."""
        self._end(errors.SessionClosedError("session closed"))
        try:
            self.client._destroy_session(ctx, self.id)
        except errors.SessionNotFoundError:
            pass
        except errors.RaftlockError as e:
            raise errors.wrap("destroying session %s" % self.id, cause=e) from e

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    # ---- loss ----

    def _end(self, reason):
        self._lose(reason)
        with self._kc:
            self._stopped = True
            self._kc.notify_all()
        if self._thread.is_alive() and threading.current_thread() is not self._thread:
            self._thread.join()

    def _lose(self, reason):
        """Marks the session lost for reason; only the first reason counts. err is set first,
        then the loss hooks run (Mutexes forget their holds), and only then done is set."""
        with self._mu:
            if self._err is not None:
                return
            self._err = reason
            fns = [self._hooks[k] for k in sorted(self._hooks)]
            self._hooks = {}
            self._mu.notify_all()
        for fn in fns:
            fn(reason)
        self.context.cancel(reason)
        with self._kc:
            self._kc.notify_all()

    def _on_loss(self, fn):
        """Registers fn(reason) to run when the session is lost, before done is set; returns
        an unregister function, or None if the session is already lost."""
        with self._mu:
            if self._err is not None:
                return None
            self._hook_seq += 1
            k = self._hook_seq
            self._hooks[k] = fn

        def stop():
            with self._mu:
                self._hooks.pop(k, None)
        return stop

    def _gone(self, err):
        """Marks the session lost if err says the server no longer knows it."""
        if isinstance(err, errors.SessionNotFoundError):
            self._lose(self._ended(err))

    def _ended(self, answer):
        """The reason of the loss once the server answered that it does not know the session:
        before the local deadline it cannot have expired, so it was destroyed."""
        left = self.deadline - time.monotonic()
        if left > 0:
            msg = ("session %s was destroyed (the server no longer knows it, and it could not have "
                   "expired for at least another %.3fs)" % (self.id, left))
        else:
            msg = "session %s ended on the server: it expired or was destroyed" % self.id
        e = errors.compound(errors.SessionNotFoundError)(msg)
        e.__cause__ = answer
        return e

    # ---- keepalive ----

    def _keepalive(self):
        try:
            self._run()
        finally:
            with self.client._sessions_lock:
                self.client._sessions.discard(self)

    def _run(self):
        with self._mu:
            last = self._last_ack
        deadline = last + self.ttl - self.safety_margin
        danger_at = last + self.ttl / 2
        renew_at = last + self.ttl / 3
        danger_fired = False
        inflight = False
        while True:
            action = None
            with self._kc:
                while True:
                    if self._stopped or self.context.done():
                        return
                    now = time.monotonic()
                    if self._result is not None:
                        action, self._result = ("result",) + self._result, None
                        break
                    if now >= deadline:
                        action = ("deadline",)
                        break
                    if not danger_fired and now >= danger_at:
                        danger_fired = True
                        action = ("danger",)
                        break
                    if not inflight and now >= renew_at:
                        action = ("renew",)
                        break
                    wake = deadline
                    if not danger_fired:
                        wake = min(wake, danger_at)
                    if not inflight:
                        wake = min(wake, renew_at)
                    self._kc.wait(max(0.0, wake - now))
            if action[0] == "deadline":
                log.warning("session %s: deadline passed without renewal", self.id)
                self._lose(errors.SessionDeadlineError(
                    "session deadline passed without renewal: session %s may have expired on the "
                    "server (ttl %gs, safety margin %gs)" % (self.id, self.ttl, self.safety_margin)))
                return
            if action[0] == "danger":
                if self._on_danger:
                    threading.Thread(target=self._on_danger, args=(deadline - time.monotonic(),),
                                     daemon=True).start()
                continue
            if action[0] == "renew":
                inflight = True
                sent = time.monotonic()  # before it joins its batch: the deadline only gets earlier

                def done(err, sent=sent):
                    with self._kc:
                        self._result = (sent, err)
                        self._kc.notify_all()
                # Short attempts: a node that does not answer within TTL/6 is left for another.
                self.client._renewer.renew(self.id, deadline, max(self.ttl / 6, 0.2), done)
                continue
            _, sent, err = action
            inflight = False
            if err is None:
                with self._mu:
                    if sent > self._last_ack:
                        self._last_ack = sent
                    last = self._last_ack
                deadline = last + self.ttl - self.safety_margin
                danger_at = last + self.ttl / 2
                renew_at = last + self.ttl / 3
                danger_fired = False
                continue
            if isinstance(err, errors.SessionNotFoundError):
                reason = self._ended(err)
                log.warning("session %s ended on the server: %s", self.id, reason)
                self._lose(reason)
                return
            log.debug("session %s: renewal failed: %s", self.id, err)
            d = max(self.ttl / 20, 0.05)
            renew_at = time.monotonic() + d / 2 + random.uniform(0, d / 2)

    # ---- attempts ----

    def _new_attempt(self, ctx):
        """Starts a try for a lock: numbered ({"attempt_seq": N}) once the client knows that
        the cluster numbers attempts, else as the string "~N"."""
        numbered = self.client._supports(ctx, FEATURE_ATTEMPT_NUMBERS)
        with self._att_lock:
            self._att_last += 1
            n = self._att_last
            self._att_open.add(n)
        return _Attempt(n, numbered)

    def _end_attempt(self, t):
        with self._att_lock:
            self._att_open.discard(t.n)

    def _floor(self):
        with self._att_lock:
            return min(self._att_open, default=self._att_last + 1)

    def _fields(self, t):
        """The attempt fields of an acquire, release or cancel of try t, with the floor now."""
        if t.numbered:
            return {"attempt_seq": t.n, "attempt_floor": self._floor()}
        return {"attempt": "~%d" % t.n}

    # ---- lock uses: at most one Mutex of the session tries for or holds a lock ----

    def _use(self, ctx, name, m):
        """Makes m the session's user of lock name once earlier tries' withdrawals ended."""
        unreg = ctx.on_done(lambda _r: self._notify())
        try:
            with self._mu:
                while True:
                    if self._err is not None:
                        raise self._err
                    u = self._uses.setdefault(name, _LockUse())
                    if u.m is not None and u.m is not m:
                        raise errors.InvalidArgumentError(
                            "invalid argument: another Mutex or Election of session %s uses lock %r "
                            "(a session holds a lock at most once)" % (self.id, name))
                    if u.pending == 0:
                        u.m = m
                        return
                    if ctx.done():
                        raise errors.wrap("waiting for an earlier try's withdrawal", cause=ctx.err)
                    self._mu.wait(0.5)
        finally:
            unreg()

    def _settled(self, ctx, name):
        """Waits until no withdrawal from lock name runs, or the session is lost."""
        unreg = ctx.on_done(lambda _r: self._notify())
        try:
            with self._mu:
                while True:
                    u = self._uses.get(name)
                    if self._err is not None or u is None or u.pending == 0:
                        return
                    if ctx.done():
                        raise ctx.err
                    self._mu.wait(0.5)
        finally:
            unreg()

    def _notify(self):
        with self._mu:
            self._mu.notify_all()

    def _end_use(self, name, m):
        with self._mu:
            u = self._uses.get(name)
            if u is not None and u.m is m:
                u.m = None
                self._idle(name, u)

    def _start_withdrawal(self, name):
        """Records a withdrawal from lock name; new tries for it wait until done() is called."""
        with self._mu:
            u = self._uses.setdefault(name, _LockUse())
            u.pending += 1
        once = []

        def done():
            with self._mu:
                if once:
                    return
                once.append(True)
                u.pending -= 1
                self._idle(name, u)
        return done

    def _idle(self, name, u):
        if u.m is None and u.pending == 0 and self._uses.get(name) is u:
            del self._uses[name]
        self._mu.notify_all()


class _LockUse:
    def __init__(self):
        self.m = None
        self.pending = 0


class _Attempt:
    def __init__(self, n, numbered):
        self.n, self.numbered = n, numbered

"""Mutex, fencing and attempts against real agent processes (the Go client's behaviour table)."""

import threading
import time

import pytest

import raftlock
from conftest import eventually
from proxy import Proxy


@pytest.fixture
def client(cluster):
    c = raftlock.Client(cluster.endpoints)
    yield c
    c.close()


def test_lock_and_unlock(client, name):
    with client.session(ttl=10) as s:
        m = raftlock.Mutex(s, name, value="worker-1")
        token = m.lock()
        assert token > 0 and m.token == token and m.held
        assert not m.context.done()
        lk = client.get_lock(name)
        assert lk["held"] and lk["session"] == s.id and lk["token"] == token and lk["value"] == "worker-1"
        assert m.lock() == token  # a Mutex that holds returns at once
        m.unlock()
        assert m.token == 0 and m.context.done()
        assert not client.get_lock(name)["held"]
        with pytest.raises(raftlock.NotHolderError):
            m.unlock()


def test_context_manager(client, name):
    with client.session(ttl=10) as s:
        with raftlock.Mutex(s, name) as m:
            assert client.get_lock(name)["token"] == m.token
        assert not client.get_lock(name)["held"]
        with raftlock.Mutex(s, name).locked(timeout=5) as m:
            assert m.held


def test_try_lock_fails_when_held_and_names_the_holder(client, name):
    with client.session(ttl=10) as a, client.session(ttl=10) as b:
        held = raftlock.Mutex(a, name)
        token = held.lock()
        with pytest.raises(raftlock.LockHeldError) as ei:
            raftlock.Mutex(b, name).try_lock()
        e = ei.value
        assert isinstance(e, raftlock.APIError) and e.status == 409 and e.code == "lock_held"
        assert e.holder == {"session": a.id, "token": token}
        assert str(e).startswith("raftlock: ") and str(e).count("raftlock: ") == 1
        # The refused try left nothing behind.
        assert client.get_lock(name)["waiters"] == 0


def test_second_mutex_of_a_session_is_refused(client, name):
    with client.session(ttl=10) as s:
        raftlock.Mutex(s, name).lock()
        with pytest.raises(raftlock.InvalidArgumentError):
            raftlock.Mutex(s, name).try_lock()


def test_lock_waits_and_is_granted_in_arrival_order_with_increasing_tokens(client, name):
    sessions = [client.session(ttl=10) for _ in range(3)]
    try:
        first = raftlock.Mutex(sessions[0], name)
        t0 = first.lock()
        order, tokens = [], {}
        waiters = []
        for i in (1, 2):
            m = raftlock.Mutex(sessions[i], name)

            def run(i=i, m=m):
                tokens[i] = m.lock(timeout=20)
                order.append(i)
                m.unlock()
            th = threading.Thread(target=run)
            th.start()
            waiters.append(th)
            eventually("waiter %d queued" % i, lambda i=i: client.get_lock(name)["waiters"] == i)
        first.unlock()
        for th in waiters:
            th.join(20)
        assert order == [1, 2]
        assert t0 < tokens[1] < tokens[2]
    finally:
        for s in sessions:
            s.close()


def test_lock_with_timeout_gives_up_and_leaves_nothing(client, name):
    with client.session(ttl=10) as a, client.session(ttl=10) as b:
        holder = raftlock.Mutex(a, name)
        holder.lock()
        waiter = raftlock.Mutex(b, name)
        with pytest.raises(raftlock.DeadlineExceededError):
            waiter.lock(timeout=0.5)
        assert not waiter.held
        # Its attempt is withdrawn in the background: the lock is left to nobody.
        eventually("the waiter's queue place withdrawn", lambda: client.get_lock(name)["waiters"] == 0)
        holder.unlock()
        lk = client.get_lock(name)
        assert not lk["held"] and lk["waiters"] == 0
        # The Mutex can try again afterwards.
        assert waiter.try_lock() > 0


def test_fence_rejects_the_token_of_a_previous_holder(client, name):
    fence = raftlock.Fence()
    with client.session(ttl=10) as a, client.session(ttl=10) as b:
        m1 = raftlock.Mutex(a, name)
        t1 = m1.lock()
        fence.check(name, t1)
        m1.unlock()
        m2 = raftlock.Mutex(b, name)
        t2 = m2.lock()
        assert t2 > t1
        assert fence.do(name, t2, lambda: "written") == "written"
        with pytest.raises(raftlock.StaleTokenError) as ei:
            fence.do(name, t1, lambda: pytest.fail("a stale holder's write ran"))
        assert ei.value.highest == t2
        fence.check(name, t2)  # the same holder again
        assert fence.highest(name) == t2
        with pytest.raises(raftlock.InvalidArgumentError):
            fence.check(name, 0)
        h = {}
        raftlock.set_token(h, t2)
        assert raftlock.token_from_headers(h) == t2


def test_session_loss_signals_done_before_another_holder_is_granted(cluster, client, name):
    proxy = Proxy(cluster.endpoints[0])
    cut_client = raftlock.Client([proxy.url], retry_timeout=1.0)
    try:
        s = cut_client.session(ttl=2)
        holder = raftlock.Mutex(s, name)
        holder.lock()
        lost_at = []
        s.on_lost(lambda reason: lost_at.append((time.monotonic(), holder.token, holder.context.done())))
        with client.session(ttl=10) as ws:
            waiter = raftlock.Mutex(ws, name)
            granted = []
            th = threading.Thread(target=lambda: granted.append((waiter.lock(timeout=20), time.monotonic())))
            th.start()
            eventually("the waiter queued", lambda: client.get_lock(name)["waiters"] == 1)
            proxy.set_cut(True)
            assert s.wait(10), "the cut-off holder never gave the lock up"
            th.join(20)
            assert granted, "the waiter was never granted the lock"
            done_at, token_then, ctx_done_then = lost_at[0]
            grant_at = granted[0][1]
            assert done_at < grant_at
            # The Mutex forgot its hold before the session's callbacks and done.
            assert token_then == 0 and ctx_done_then
            assert isinstance(s.err, raftlock.SessionDeadlineError)
            assert isinstance(holder.context.err, raftlock.LockLostError)
            with pytest.raises(raftlock.SessionDeadlineError):
                holder.lock()
            waiter.unlock()
    finally:
        proxy.set_cut(False)
        cut_client.close()
        proxy.close()


def test_session_destroyed_elsewhere_sets_done(client, name):
    s = client.session(ttl=3)
    m = raftlock.Mutex(s, name)
    m.lock()
    with raftlock.Client(client.endpoints) as other:
        other.request("DELETE", "/v1/sessions/" + s.id)
    assert s.wait(10)
    assert isinstance(s.err, raftlock.SessionNotFoundError) and "destroyed" in str(s.err)
    assert m.token == 0 and isinstance(m.context.err, raftlock.LockLostError)
    with pytest.raises(raftlock.LockLostError):
        m.unlock()


def test_a_late_request_of_a_withdrawn_attempt_grants_nobody(cluster, client, name):
    proxy = Proxy(cluster.endpoints[0])
    late_client = raftlock.Client([proxy.url])
    try:
        with client.session(ttl=10) as hs:
            holder = raftlock.Mutex(hs, name)
            holder.lock()
            s = late_client.session(ttl=30)
            waiter = raftlock.Mutex(s, name)
            proxy.hold_next_acquire()
            errs = []
            th = threading.Thread(target=lambda: errs.append(_raises(lambda: waiter.lock(timeout=1.5))))
            th.start()
            assert proxy.arrived.wait(10), "no acquire with an attempt was held"
            th.join(10)
            assert isinstance(errs[0], raftlock.DeadlineExceededError)
            # The withdrawal runs in the background (a new try of the session would wait for
            # it, and its own end would fence the older attempt too, so none is made here).
            s._settled(raftlock.Context(timeout=10), name)
            holder.unlock()  # the lock is free when the late request arrives
            status, body = proxy.deliver()
            assert status == 409 and body["error"]["code"] == "attempt_cancelled", (status, body)
            lk = client.get_lock(name)
            assert not lk["held"] and lk["waiters"] == 0
            s.close()
    finally:
        late_client.close()
        proxy.close()


def _raises(fn):
    try:
        fn()
    except Exception as e:  # noqa: BLE001 (the test inspects it)
        return e
    return None


def test_unlock_fences_the_attempt_that_won(cluster, client, name):
    """A copy of the winning acquire delivered after unlock is refused, not granted."""
    proxy = Proxy(cluster.endpoints[0])
    pc = raftlock.Client([proxy.url])
    try:
        with pc.session(ttl=10) as s:
            m = raftlock.Mutex(s, name)
            m.lock()
            method, path, body = [x for x in proxy.seen if x[1].endswith("/acquire")][-1]
            proxy.held = (method, path, {"Content-Type": "application/json"}, body)
            m.unlock()
            status, answer = proxy.deliver()
            assert status == 409 and answer["error"]["code"] == "attempt_cancelled", (status, answer)
            assert not client.get_lock(name)["held"]
    finally:
        pc.close()
        proxy.close()


def test_session_close_destroys_it_and_sets_done_first(client, name):
    s = client.session(ttl=10)
    m = raftlock.Mutex(s, name)
    m.lock()
    order = []
    s.on_lost(lambda reason: order.append(("lost", m.token, client.get_lock(name)["held"])))
    s.close()
    # The callbacks ran before the session was destroyed on the server: the lock was still held.
    assert order == [("lost", 0, True)]
    assert s.done.is_set() and isinstance(s.err, raftlock.SessionClosedError)
    assert not client.get_lock(name)["held"]
    with pytest.raises(raftlock.SessionNotFoundError):
        client.request("PUT", "/v1/sessions/%s/renew" % s.id)


def test_closing_the_client_ends_its_sessions(cluster, name):
    c = raftlock.Client(cluster.endpoints)
    s = c.session(ttl=10)
    m = raftlock.Mutex(s, name)
    m.lock()
    c.close()
    assert s.done.is_set() and isinstance(s.err, raftlock.SessionClosedError)
    assert m.token == 0 and isinstance(m.context.err, raftlock.LockLostError)
    with pytest.raises(raftlock.SessionClosedError):
        c.session(ttl=10)

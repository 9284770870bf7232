"""Election, Semaphore, RWMutex, typed errors, leader routing, batched renewals and a TLS +
ACL cluster, against real agent processes."""

import json
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


def test_election_campaign_observe_resign(client, name):
    a, b = client.session(ttl=10), client.session(ttl=10)
    stop = raftlock.Context()
    try:
        seen = []
        changed = threading.Condition()

        def watch():
            for lk in client.observe(name, stop):
                with changed:
                    seen.append(lk)
                    changed.notify_all()
        watcher = threading.Thread(target=watch)
        watcher.start()

        def saw(pred):
            with changed:
                return changed.wait_for(lambda: any(pred(x) for x in seen), timeout=10)
        assert saw(lambda x: not x["held"])  # the state as it stands: nobody leads
        ea, eb = raftlock.Election(a, name), raftlock.Election(b, name)
        with pytest.raises(raftlock.ElectionNoLeaderError):
            ea.leader()
        ta = ea.campaign("host-a:80")
        assert ea.is_leader and ea.token == ta
        assert saw(lambda x: x["held"] and x["value"] == "host-a:80" and x["session"] == a.id)
        ea.proclaim("host-a:81")
        assert ea.leader()["value"] == "host-a:81" and ea.token == ta
        assert saw(lambda x: x["held"] and x["value"] == "host-a:81")
        with pytest.raises(raftlock.NotLeaderError):
            eb.proclaim("host-b:80")
        got = []
        tb = threading.Thread(target=lambda: got.append(eb.campaign("host-b:80", timeout=20)))
        tb.start()
        eventually("b waiting", lambda: client.get_lock(name)["waiters"] == 1)
        ea.resign()
        tb.join(20)
        assert got and got[0] > ta and eb.is_leader and not ea.is_leader
        assert saw(lambda x: x["held"] and x["value"] == "host-b:80" and x["session"] == b.id)
        eb.resign()
        with changed:
            n = len(seen)
        assert saw(lambda x: not x["held"]) and len(seen) >= n
    finally:
        stop.cancel()
        a.close()
        b.close()
        watcher.join(10)


def test_semaphore_holds_at_most_limit(client, name):
    ss = [client.session(ttl=10) for _ in range(4)]
    try:
        sems = [raftlock.Semaphore(s, name, 2) for s in ss]
        t0, t1 = sems[0].acquire(timeout=5), sems[1].acquire(timeout=5)
        assert t0 != t1 and t0 > 0 and t1 > 0
        with pytest.raises(raftlock.LockHeldError):
            sems[2].try_acquire()
        lk = client.get_lock(name)
        assert lk["limit"] == 2 and sorted(h["token"] for h in lk["holders"]) == sorted([t0, t1])
        with pytest.raises(raftlock.LimitMismatchError) as ei:
            raftlock.Semaphore(ss[3], name, 3).try_acquire()
        assert ei.value.limit == 2
        with pytest.raises(raftlock.LimitMismatchError):
            raftlock.Mutex(ss[3], name).try_lock()
        got = []
        th = threading.Thread(target=lambda: got.append(sems[2].acquire(timeout=20)))
        th.start()
        eventually("a waiter", lambda: client.get_lock(name)["waiters"] == 1)
        sems[0].release()
        th.join(20)
        assert got and got[0] > max(t0, t1)
        with pytest.raises(raftlock.InvalidArgumentError):
            raftlock.Semaphore(ss[3], name, 0).acquire()
    finally:
        for s in ss:
            s.close()


def test_rwmutex_readers_share_and_writers_exclude(client, name):
    r1, r2, w = client.session(ttl=10), client.session(ttl=10), client.session(ttl=10)
    try:
        a, b, writer = raftlock.RWMutex(r1, name), raftlock.RWMutex(r2, name), raftlock.RWMutex(w, name)
        ta, tb = a.rlock(timeout=5), b.rlock(timeout=5)
        assert ta != tb and a.shared and b.shared
        with pytest.raises(raftlock.LockHeldError):
            writer.try_lock()
        with pytest.raises(raftlock.ModeMismatchError):
            a.lock(timeout=5)  # no upgrade in place
        got = []
        th = threading.Thread(target=lambda: got.append(writer.lock(timeout=20)))
        th.start()
        eventually("the writer waiting", lambda: client.get_lock(name)["waiters"] == 1)
        # A reader that comes after a waiting writer does not overtake it.
        with pytest.raises(raftlock.LockHeldError):
            raftlock.Mutex(client.session(ttl=5), name).try_lock()
        a.runlock()
        assert not got
        b.runlock()
        th.join(20)
        assert got and got[0] > max(ta, tb) and not writer.shared
        with pytest.raises(raftlock.NotHolderError):
            writer.runlock()
        writer.unlock()
    finally:
        for s in (r1, r2, w):
            s.close()


def test_typed_errors_from_the_api_codes(client, name):
    with pytest.raises(raftlock.InvalidArgumentError) as ei:
        client.request("POST", "/v1/locks/a//b/acquire", {"ttl": "10s"})
    assert isinstance(ei.value, raftlock.APIError) and ei.value.status == 400
    with pytest.raises(raftlock.SessionNotFoundError):
        client.request("PUT", "/v1/sessions/%s/renew" % ("0" * 32))
    with pytest.raises(raftlock.NotFoundError):
        client.request("GET", "/v1/nothing-here")
    with client.session(ttl=10) as s:
        m = raftlock.Mutex(s, name)
        token = m.lock()
        with pytest.raises(raftlock.NotHolderError) as ei:
            client.request("POST", "/v1/locks/%s/release" % name, {"session": s.id, "token": token + 1})
        assert ei.value.code == "not_holder"
        with pytest.raises(raftlock.InvalidArgumentError):
            raftlock.Client([])
        with pytest.raises(raftlock.InvalidArgumentError):
            client.session(ttl=10, safety_margin=6)
    with pytest.raises(raftlock.UnavailableError):
        raftlock.Client(["127.0.0.1:1"], retry_timeout=0.2).get_lock(name)


def test_a_follower_endpoint_works_and_the_client_moves_to_the_leader(cluster, name):
    leader = cluster.leader_id()
    followers = [i for i in cluster.ids if i != leader]
    # Through one follower only: it forwards.
    with raftlock.Client([cluster.endpoint_of(followers[0])]) as c:
        with c.session(ttl=10) as s:
            m = raftlock.Mutex(s, name)
            assert m.lock(timeout=10) > 0
            m.unlock()
    # Through every endpoint, the leader's last: the client moves to it.
    eps = [cluster.endpoint_of(i) for i in followers + [leader]]
    with raftlock.Client(eps) as c:
        c.get_lock(name)
        eventually("the client to move to the leader's endpoint", lambda: c._current() == 2)
        with c.session(ttl=10) as s:
            raftlock.Mutex(s, name).try_lock()
    with raftlock.Client(eps, leader_routing=False) as c:
        c.get_lock(name)
        assert c._current() == 0


def test_sessions_of_one_client_renew_in_batches(cluster, name):
    proxy = Proxy(cluster.endpoints[0])
    try:
        with raftlock.Client([proxy.url]) as c:
            sessions, lock = [], threading.Lock()

            def make(k):
                for _ in range(k):
                    s = c.session(ttl=2)
                    with lock:
                        sessions.append(s)
            makers = [threading.Thread(target=make, args=(15,)) for _ in range(10)]
            for t in makers:
                t.start()
            for t in makers:
                t.join()
            assert len(sessions) == 150

            def renewals():
                with proxy.lock:
                    return [json.loads(b)["ids"] for m, p, b in proxy.seen if p == "/v1/sessions/renew"]
            before = len(renewals())
            time.sleep(4)  # the sessions must outlive their TTL twice over; nothing to await
            batches = renewals()[before:]
            with proxy.lock:
                singles = [p for m, p, b in proxy.seen if m == "PUT"]
            assert not singles
            ids = sum(len(b) for b in batches)
            # Each session renews about every TTL/3: some 900 renewals in 4 s, 225 a second, over
            # 4 a batching window; batched, a request carries three or more on average.
            assert ids >= 150 * 3 and len(batches) * 3 <= ids, (len(batches), ids)
            assert not [s for s in sessions if s.done.is_set()]
            closers = [threading.Thread(target=lambda k=k: [s.close() for s in sessions[k::10]]) for k in range(10)]
            for t in closers:
                t.start()
            for t in closers:
                t.join()
    finally:
        proxy.close()


def test_secure_cluster_with_tls_and_a_token(secure_cluster, name):
    c = secure_cluster
    ca = c.tls_dir + "/ca.pem"
    cert, key = c.tls_dir + "/client.pem", c.tls_dir + "/client-key.pem"
    hosts = [c.http[i] for i in c.ids]  # without a scheme: https, since TLS is given
    with raftlock.Client(hosts, ca_file=ca, cert_file=cert, key_file=key, retry_timeout=2) as anon:
        with pytest.raises(raftlock.UnauthorizedError):
            anon.get_lock(name)
    with raftlock.Client(hosts, ca_file=ca, cert_file=cert, key_file=key, token=c.token) as cl:
        assert cl.endpoints[0].startswith("https://")
        with cl.session(ttl=10) as s:
            with raftlock.Mutex(s, name) as m:
                assert m.token > 0
                assert cl.get_lock(name)["session"] == s.id
        assert not cl.get_lock(name)["held"]
    # Without the client certificate the TLS handshake is refused.
    with raftlock.Client(hosts, ca_file=ca, token=c.token, retry_timeout=0.5) as nocert:
        with pytest.raises(raftlock.UnavailableError):
            nocert.get_lock(name)


def test_proclaim_reports_leadership_lost_while_the_session_lives(client, name):
    with client.session(ttl=10) as s:
        e = raftlock.Election(s, name)
        token = e.campaign("host-a:80", timeout=10)
        # Someone releases the lock with the session's id and token (an operator, a bug).
        client.request("POST", "/v1/locks/%s/release" % name, {"session": s.id, "token": token})
        with pytest.raises(raftlock.NotLeaderError) as ei:
            e.proclaim("host-a:81")
        assert isinstance(ei.value, raftlock.LockLostError)
        assert not e.is_leader and e.token == 0 and e.context.done()
        assert not s.done.is_set()
        # The leadership's attempt was withdrawn: nothing of it holds or waits.
        eventually("nothing held or awaited", lambda: not client.get_lock(name)["held"]
                   and client.get_lock(name)["waiters"] == 0)
        assert e.campaign("host-a:82", timeout=10) > token


def test_semaphore_permit_lost_with_the_session(client, name):
    s = client.session(ttl=3)
    sem = raftlock.Semaphore(s, name, 2)
    sem.acquire(timeout=5)
    with raftlock.Client(client.endpoints) as other:
        other.request("DELETE", "/v1/sessions/" + s.id)
    assert s.wait(10)
    assert sem.token == 0 and isinstance(sem.context.err, raftlock.LockLostError)

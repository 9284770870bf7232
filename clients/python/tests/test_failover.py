"""A cluster of its own whose leader is killed: the client moves on, the session and its lock
survive (a new leader restarts every session timer at the full TTL)."""

import signal
import os
import tempfile

import pytest

import raftlock
from conftest import Cluster, eventually


@pytest.fixture
def own_cluster(binary):
    c = Cluster(binary, tempfile.mkdtemp(prefix="raftlock-py-failover-"))
    try:
        c.wait_ready()
        yield c
    finally:
        c.stop()


def test_mutex_and_session_survive_a_leader_crash(own_cluster, name):
    c = own_cluster
    leader = c.leader_id()
    with raftlock.Client(c.endpoints) as cl:
        cl.get_lock(name)
        eventually("the client at the leader", lambda: cl._current() == c.ids.index(leader))
        s = cl.session(ttl=10)
        m = raftlock.Mutex(s, name)
        token = m.lock(timeout=10)
        os.kill(c.procs[leader].pid, signal.SIGKILL)
        c.procs[leader].wait()
        others = [i for i in c.ids if i != leader]
        eventually("a new leader", lambda: any(
            (c.get(c.endpoint_of(i), "/v1/cluster")[1] or {}).get("leader") in others for i in others), timeout=30)
        # Through the survivors: the lock is still this session's, under the same token.
        lk = cl.get_lock(name)
        assert lk["held"] and lk["session"] == s.id and lk["token"] == token
        assert m.token == token and not s.done.is_set()
        with cl.session(ttl=10) as other:
            with pytest.raises(raftlock.LockHeldError):
                raftlock.Mutex(other, name).try_lock()
            m.unlock()
            assert raftlock.Mutex(other, name).lock(timeout=10) > token
        s.close()

"""Python workers contend for locks while a nemesis cuts some of them off from the cluster; the
history of what they believed is written in the jepsen harness's format (jepsen/history.Op),
which clients/python/python_test.go judges with jepsen's belief checker (checker.CheckBelief):
no two beliefs overlap, no server answer contradicts one, and a belief ends before any higher
token is known to have been granted. RAFTLOCK_BELIEF_OUT names the file; without it the history
goes to a temporary file and only the overlap rule is checked here.
"""

import json
import os
import random
import threading
import time

import raftlock
from proxy import Proxy

DURATION = 10.0
TTL = 2.0
LOCKS = ["py/belief/a", "py/belief/b"]


def now():
    return time.monotonic_ns()


class History:
    def __init__(self):
        self.lock = threading.Lock()
        self.ops = []

    def add(self, **op):
        with self.lock:
            self.ops.append(op)

    def dump(self, path):
        with self.lock:
            ops = sorted(self.ops, key=lambda o: (o["invoke_ns"], o["complete_ns"]))
        for i, o in enumerate(ops):
            o["id"] = i + 1
        with open(path, "w") as f:
            json.dump(ops, f)
        return ops


def worker(p, c, lock, h, stop, holding, long_holds):
    rnd = random.Random(p)
    while not stop.is_set():
        try:
            s = c.session(ttl=TTL)
        except raftlock.RaftlockError:
            stop.wait(0.1)
            continue
        while not stop.is_set() and not s.done.is_set():
            m = raftlock.Mutex(s, lock)
            api = "lock" if rnd.random() < 0.8 else "trylock"
            inv = now()
            try:
                tok = m.lock(timeout=1.5) if api == "lock" else m.try_lock()
            except raftlock.LockHeldError as e:
                holder = e.holder or {}
                h.add(process=p, kind="client_acquire", type="fail", invoke_ns=inv, complete_ns=now(),
                      session=s.id, lock=lock, api=api, code=getattr(e, "code", ""),
                      out_session=holder.get("session", ""), out_token=holder.get("token", 0))
                continue
            except raftlock.RaftlockError as e:
                h.add(process=p, kind="client_acquire", type="info", invoke_ns=inv, complete_ns=now(),
                      session=s.id, lock=lock, api=api, error=str(e))
                continue
            start = now()
            h.add(process=p, kind="client_acquire", type="ok", invoke_ns=inv, complete_ns=start,
                  session=s.id, lock=lock, api=api, out_token=tok)
            ended = []
            m.context.on_done(lambda _r: ended.append(now()))
            holding.set()
            hold_for = rnd.uniform(1.0, 3.0) if long_holds else rnd.uniform(0.02, 0.3)
            lost = m.context.wait(hold_for)
            holding.clear()
            if lost:
                h.add(process=p, kind="believe", type="ok", invoke_ns=start, complete_ns=ended[0],
                      session=s.id, lock=lock, api=api, out_token=tok, detail="context done: " + str(m.context.err))
                break
            end = now()
            h.add(process=p, kind="believe", type="ok", invoke_ns=start, complete_ns=end,
                  session=s.id, lock=lock, api=api, out_token=tok, detail="unlock")
            try:
                m.unlock()
                h.add(process=p, kind="client_release", type="ok", invoke_ns=end, complete_ns=now(),
                      session=s.id, lock=lock, api=api, token=tok)
            except raftlock.RaftlockError as e:
                h.add(process=p, kind="client_release", type="info", invoke_ns=end, complete_ns=now(),
                      session=s.id, lock=lock, api=api, token=tok, error=str(e))
        try:
            s.close()
        except raftlock.RaftlockError:
            pass


def reader(p, c, lock, h, stop):
    while not stop.is_set():
        inv = now()
        try:
            lk = c.get_lock(lock)
        except raftlock.RaftlockError:
            continue
        h.add(process=p, kind="read", type="ok", invoke_ns=inv, complete_ns=now(), lock=lock,
              held=bool(lk["held"]), out_session=lk.get("session", ""), out_token=lk.get("token", 0),
              out_index=lk.get("modify_index", 0))
        stop.wait(0.02)


def nemesis(proxies, holdings, stop, cuts):
    """Cuts a worker off while it holds its lock, long enough for its session to be lost."""
    while not stop.is_set():
        for px, holding in zip(proxies, holdings):
            if stop.is_set():
                return
            if not holding.wait(2.0):
                continue
            px.set_cut(True)
            cuts.append(now())
            stop.wait(TTL + 0.8)
            px.set_cut(False)
            stop.wait(0.5)


def test_python_workers_beliefs(cluster, tmp_path):
    out = os.environ.get("RAFTLOCK_BELIEF_OUT") or str(tmp_path / "history.json")
    h, stop = History(), threading.Event()
    proxies = [Proxy(cluster.endpoints[i % 3]) for i in range(2)]
    clients = [raftlock.Client([px.url], retry_timeout=1.0) for px in proxies]
    clients += [raftlock.Client(cluster.endpoints) for _ in range(4)]
    holdings = [threading.Event() for _ in clients]
    cuts = []
    threads = []
    for p, c in enumerate(clients):
        lock = LOCKS[p % 2]
        threads.append(threading.Thread(target=worker, args=(p, c, lock, h, stop, holdings[p], p < 2)))
    readers = raftlock.Client(cluster.endpoints)
    for i, lock in enumerate(LOCKS):
        threads.append(threading.Thread(target=reader, args=(100 + i, readers, lock, h, stop)))
    threads.append(threading.Thread(target=nemesis, args=(proxies, holdings[:2], stop, cuts)))
    for t in threads:
        t.start()
    time.sleep(DURATION)  # the length of the run, not a wait for an event
    stop.set()
    for t in threads:
        t.join(30)
    for c in clients + [readers]:
        c.close()
    for px in proxies:
        px.close()
    ops = h.dump(out)
    beliefs = [o for o in ops if o["kind"] == "believe"]
    lost = [b for b in beliefs if b["detail"].startswith("context done")]
    assert len(beliefs) >= 10 and cuts, (len(beliefs), cuts)
    assert lost, "no hold was lost to a cut: the nemesis did not bite"
    for lock in LOCKS:
        mine = sorted((b for b in beliefs if b["lock"] == lock), key=lambda b: b["invoke_ns"])
        last = None
        for b in mine:
            assert last is None or last["complete_ns"] <= b["invoke_ns"], ("overlapping beliefs", last, b)
            if last is None or b["complete_ns"] > last["complete_ns"]:
                last = b

"""Real `raftlock agent` processes for the tests: a plain 3-node cluster and a TLS + ACL one.

The binary is RAFTLOCK_BIN if set, else built with `go build` from this repository. Every
process is started here and stopped by its pid when the session ends.
"""

import json
import os
import signal
import socket
import ssl
import subprocess
import sys
import tempfile
import time
import urllib.request

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
REPO = os.path.abspath(os.path.join(HERE, "..", "..", ".."))


def eventually(what, fn, timeout=15.0, every=0.02):
    """Waits until fn() is true (a condition polled, as internal/testkit.Eventually)."""
    end = time.monotonic() + timeout
    while True:
        v = fn()
        if v:
            return v
        if time.monotonic() > end:
            raise AssertionError("timed out waiting for " + what)
        time.sleep(every)


def free_ports(n):
    socks, ports = [], []
    for _ in range(n):
        s = socket.socket()
        s.bind(("127.0.0.1", 0))
        socks.append(s)
        ports.append(s.getsockname()[1])
    for s in socks:
        s.close()
    return ports


def _die_with_parent():
    """In the agent's process before exec: on Linux, SIGTERM when pytest dies, so that an
    interrupted run leaves no agent behind."""
    if sys.platform.startswith("linux"):
        import ctypes
        try:
            ctypes.CDLL(None).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
        except (OSError, AttributeError):
            pass


@pytest.fixture(scope="session")
def binary(tmp_path_factory):
    b = os.environ.get("RAFTLOCK_BIN")
    if b:
        return b
    out = str(tmp_path_factory.mktemp("bin") / "raftlock")
    subprocess.run(["go", "build", "-o", out, "./cmd/raftlock"], cwd=REPO, check=True)
    return out


class Cluster:
    """Three agent processes on 127.0.0.1."""

    def __init__(self, binary, base, extra=None, scheme="http", ssl_context=None):
        self.binary, self.base, self.scheme = binary, base, scheme
        self.ssl_context = ssl_context
        ports = free_ports(6)
        self.ids = ["n1", "n2", "n3"]
        self.http = {i: "127.0.0.1:%d" % ports[k] for k, i in enumerate(self.ids)}
        self.raft = {i: "127.0.0.1:%d" % ports[3 + k] for k, i in enumerate(self.ids)}
        initial = ",".join("%s=%s" % (i, self.raft[i]) for i in self.ids)
        self.procs, self.logs = {}, {}
        for i in self.ids:
            log = open(os.path.join(base, i + ".log"), "wb")
            args = [binary, "agent", "--id", i, "--data-dir", os.path.join(base, i),
                    "--http-addr", self.http[i], "--raft-addr", self.raft[i],
                    "--initial-cluster", initial, "--log-level", "info"] + (extra(i) if extra else [])
            self.procs[i] = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT,
                                             preexec_fn=_die_with_parent)
            self.logs[i] = log
        self.endpoints = ["%s://%s" % (scheme, self.http[i]) for i in self.ids]

    def get(self, ep, path, token=None):
        req = urllib.request.Request(ep + path)
        if token:
            req.add_header("X-Raftlock-Token", token)
        try:
            with urllib.request.urlopen(req, timeout=5, context=self.ssl_context) as r:
                return r.status, json.loads(r.read() or b"null")
        except urllib.error.HTTPError as e:
            return e.code, None
        except OSError:
            return 0, None

    def wait_ready(self):
        eventually("every node ready", lambda: all(self.get(ep, "/v1/ready")[0] == 200 for ep in self.endpoints),
                   timeout=30)

    def leader_id(self, token=None):
        def read():
            st, body = self.get(self.endpoints[0], "/v1/cluster", token)
            return body["leader"] if st == 200 and body.get("leader") else None
        return eventually("a leader", read)

    def endpoint_of(self, node):
        return "%s://%s" % (self.scheme, self.http[node])

    def stop(self):
        for i, p in self.procs.items():
            if p.poll() is None:
                os.kill(p.pid, signal.SIGTERM)
        for i, p in self.procs.items():
            try:
                p.wait(timeout=15)
            except subprocess.TimeoutExpired:
                os.kill(p.pid, signal.SIGKILL)
                p.wait()
            self.logs[i].close()


@pytest.fixture(scope="session")
def cluster(binary):
    base = tempfile.mkdtemp(prefix="raftlock-py-")
    c = Cluster(binary, base)
    try:
        c.wait_ready()
        yield c
    finally:
        c.stop()


@pytest.fixture(scope="session")
def secure_cluster(binary):
    """TLS with client certificates required, and --acl, bootstrapped: its management token."""
    base = tempfile.mkdtemp(prefix="raftlock-py-tls-")
    tls = os.path.join(base, "tls")
    run = lambda *a: subprocess.run([binary] + list(a), check=True, capture_output=True)
    run("tls", "ca", "create", "--dir", tls)
    for i in ("n1", "n2", "n3"):
        run("tls", "cert", "create", "--dir", tls, "--node", i, "--ip", "127.0.0.1", "--dns", "localhost")
    run("tls", "cert", "create", "--dir", tls, "--client")
    ctx = ssl.create_default_context(cafile=os.path.join(tls, "ca.pem"))
    ctx.load_cert_chain(os.path.join(tls, "client.pem"), os.path.join(tls, "client-key.pem"))

    def extra(i):
        return ["--acl", "--tls-cert-file", os.path.join(tls, i + ".pem"),
                "--tls-key-file", os.path.join(tls, i + "-key.pem"),
                "--tls-ca-file", os.path.join(tls, "ca.pem"), "--tls-verify-clients"]
    c = Cluster(binary, base, extra, scheme="https", ssl_context=ctx)
    c.tls_dir = tls
    try:
        c.wait_ready()
        req = urllib.request.Request(c.endpoints[0] + "/v1/acl/bootstrap", method="POST")
        with urllib.request.urlopen(req, timeout=10, context=ctx) as r:
            c.token = json.loads(r.read())["secret_id"]
        yield c
    finally:
        c.stop()


_names = [0]


@pytest.fixture
def name(request):
    """A lock name of its own for each test."""
    _names[0] += 1
    return "py/%s/%d" % (request.node.name.replace("[", "-").replace("]", ""), _names[0])

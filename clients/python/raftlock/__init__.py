"""raftlock: the Python client of raftlock, a distributed lock service.

Standard library only. The same semantics as the Go client (package client):

    import raftlock
    with raftlock.Client(["127.0.0.1:7001", "127.0.0.1:7002", "127.0.0.1:7003"]) as c:
        with c.session(ttl=15) as s:
            with raftlock.Mutex(s, "jobs/nightly") as m:
                do_work(m.context, m.token)  # stop when m.context is done; send the token along
"""

from .client import Client, format_duration, parse_duration
from .context import Context
from .errors import *  # noqa: F401,F403 (the typed errors)
from .errors import APIError, RaftlockError
from .fence import HEADER_TOKEN, Fence, set_token, token_from_headers
from .mutex import Election, Mutex, RWMutex, Semaphore
from .session import Session

__version__ = "0.1.0"

"""Context: cancellation with a reason and an optional deadline, as Go's context package.

A Context is done once it is cancelled (with an error, its reason) or once its deadline on the
monotonic clock passed. Children end with their parent. Callbacks registered with on_done run
once, when it is cancelled (a deadline is noticed by whoever waits: wait() and remaining()).
"""

import threading
import time

from . import errors


class Context:
    """A cancellation signal with a reason, an optional deadline and children."""

    def __init__(self, parent=None, timeout=None, deadline=None):
        self._lock = threading.Lock()
        self._event = threading.Event()
        self._err = None
        self._callbacks = {}
        self._seq = 0
        self._deadline = deadline
        if timeout is not None:
            d = time.monotonic() + timeout
            self._deadline = d if self._deadline is None else min(self._deadline, d)
        if parent is BACKGROUND:
            parent = None  # never cancelled: nothing to link to
        self._parent = parent
        self._unlink = None
        if parent is not None:
            pd = parent.deadline
            if pd is not None:
                self._deadline = pd if self._deadline is None else min(self._deadline, pd)
            self._unlink = parent.on_done(self.cancel)

    @property
    def deadline(self):
        """The deadline (time.monotonic()), or None."""
        return self._deadline

    def remaining(self):
        """Seconds left before the deadline (None without one); 0 once done."""
        if self.done():
            return 0.0
        if self._deadline is None:
            return None
        return max(0.0, self._deadline - time.monotonic())

    def done(self):
        """Whether the context is cancelled or its deadline passed."""
        if self._event.is_set():
            return True
        if self._deadline is not None and time.monotonic() >= self._deadline:
            self.cancel(errors.DeadlineExceededError("deadline exceeded"))
            return True
        return False

    @property
    def err(self):
        """None while live; then the reason it ended."""
        self.done()
        with self._lock:
            return self._err

    def wait(self, timeout=None):
        """Waits until done or timeout seconds; returns whether it is done."""
        rem = self.remaining()
        if rem is not None and (timeout is None or rem < timeout):
            timeout = rem
        self._event.wait(timeout)
        return self.done()

    def sleep(self, seconds):
        """Sleeps; returns False at once when the context ends first."""
        return not self.wait(seconds)

    def cancel(self, reason=None):
        """Ends the context with reason (CancelledError by default); only the first counts."""
        with self._lock:
            if self._err is not None:
                return
            self._err = reason if reason is not None else errors.CancelledError("context cancelled")
            fns = [self._callbacks[k] for k in sorted(self._callbacks)]
            self._callbacks = {}
            unlink, self._unlink = self._unlink, None
        for fn in fns:
            fn(self._err)
        self._event.set()
        if unlink:
            unlink()

    def on_done(self, fn):
        """Registers fn(reason) to run when the context is cancelled (at once if it is);
        returns a function that unregisters it."""
        with self._lock:
            if self._err is None:
                self._seq += 1
                k = self._seq
                self._callbacks[k] = fn
                return lambda: self._forget(k)
            err = self._err
        fn(err)
        return lambda: None

    def _forget(self, k):
        with self._lock:
            self._callbacks.pop(k, None)

    def close(self):
        """Detaches the context from its parent (a finished child)."""
        with self._lock:
            unlink, self._unlink = self._unlink, None
        if unlink:
            unlink()


BACKGROUND = None
BACKGROUND = Context()  # never cancelled; the parent of contexts made without one

"""An HTTP proxy in front of one node, for the tests: it can cut every request off (a network
partition of the client), hold back an acquire to deliver it late, and count what passes."""

import http.client
import http.server
import json
import threading
import urllib.parse


class Proxy:
    def __init__(self, target):
        u = urllib.parse.urlsplit(target)
        self.host, self.port = u.hostname, u.port
        self.lock = threading.Lock()
        self.cut = False
        self.hold_armed = False
        self.held = None               # (method, path, headers, body) of the held acquire
        self.arrived = threading.Event()
        self.released = threading.Event()
        self.seen = []                 # (method, path, body) of every request forwarded
        proxy = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *a):
                pass

            def handle_one(self):
                n = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(n) if n else b""
                with proxy.lock:
                    cut = proxy.cut
                    hold = (proxy.hold_armed and self.command == "POST" and self.path.endswith("/acquire")
                            and (b"attempt" in body))
                    if hold:
                        proxy.hold_armed = False
                        proxy.held = (self.command, self.path, {k: v for k, v in self.headers.items()}, body)
                if cut:
                    self.close_connection = True
                    return
                if hold:
                    proxy.arrived.set()
                    proxy.released.wait()
                    self.close_connection = True
                    return
                with proxy.lock:
                    proxy.seen.append((self.command, self.path, body))
                headers = {k: v for k, v in self.headers.items() if k.lower() not in ("host", "connection")}
                conn = http.client.HTTPConnection(proxy.host, proxy.port, timeout=700)
                try:
                    conn.request(self.command, self.path, body=body or None, headers=headers)
                    resp = conn.getresponse()
                    data = resp.read()
                except OSError:
                    self.close_connection = True
                    return
                finally:
                    conn.close()
                with proxy.lock:
                    if proxy.cut:  # cut while the request was on its way: no answer
                        self.close_connection = True
                        return
                self.send_response(resp.status)
                for k, v in resp.getheaders():
                    if k.lower() not in ("content-length", "connection", "transfer-encoding", "date", "server"):
                        self.send_header(k, v)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            do_GET = do_POST = do_PUT = do_DELETE = handle_one

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = "http://127.0.0.1:%d" % self.server.server_address[1]
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def set_cut(self, cut):
        with self.lock:
            self.cut = cut

    def hold_next_acquire(self):
        """Holds back the next acquire that carries an attempt, without answering it."""
        with self.lock:
            self.hold_armed = True
        self.arrived.clear()

    def deliver(self):
        """Sends the held acquire to the node now; returns (status, body)."""
        method, path, headers, body = self.held
        headers = {k: v for k, v in headers.items() if k.lower() not in ("host", "connection")}
        conn = http.client.HTTPConnection(self.host, self.port, timeout=30)
        try:
            conn.request(method, path, body=body, headers=headers)
            resp = conn.getresponse()
            return resp.status, json.loads(resp.read() or b"null")
        finally:
            conn.close()

    def close(self):
        self.released.set()
        self.server.shutdown()
        self.server.server_close()

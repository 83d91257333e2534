#!/usr/bin/env python3
"""Slow, silent and lying HTTP clients get a prompt answer (issue 9, item 3).

    python3 tests/e2e/test_http_limits.py --slimserve build/bin/slimserve \\
        --workdir /tmp/e2e-http-limits

A one-model repository; the server runs with --body-timeout 2
--idle-timeout 3 --max-request-bytes 65536. Every case talks over a raw
socket and measures how long the answer took:

  * a body shorter than its Content-Length, one trickled a byte every
    0.25 s, a chunk of 0xffffffffffffffff bytes, a stall after
    "100 Continue": 408 between 1.5 and 8 s (libmicrohttpd alone would
    close them, silently, only after its own 13 s), and the server closes
    the connection; a slow body that completes in time: 200
  * a connection that sends nothing, half a request line, garbage that
    starts with NUL, or stays open after a reply: closed between 2.5 and 10 s
  * the server lets go of every connection it timed out, although the
    clients keep theirs open (slim_http_connections falls back to 1), and
    slim_http_timeouts_total counts them
  * garbage request lines: 400 (or 505), or the connection closed, in 2 s
  * Content-Length over --max-request-bytes: 413 before the body is sent
  * two Content-Length, Content-Length with chunked, two
    Inference-Header-Content-Length, a header folded onto a second line:
    400; Transfer-Encoding gzip: 501
  * a second server with the default limits: 1,010 half-sent connections
    from 127.0.0.2 leave at most 128 open (the rest are closed at once), and
    /v2/health/ready, /v2/health/live and /metrics from 127.0.0.1 answer
    within 3 s while they are held

Ends with "N passed, N failed"; exits non-zero on any failure.
"""

import argparse
import json
import os
import re
import resource
import shutil
import socket
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from test_server import (HOST, Runner, Server, add_const_model, check,  # noqa: E402
                         parse_raw_reply, raw_exchange)

BODY_TIMEOUT = 2
IDLE_TIMEOUT = 3
# The 408 must come from our deadline: after it (less a margin for clocks)
# and well before libmicrohttpd's own timeout (the longer one + 10 s).
LATE = 8.0
MAX_BYTES = 65536
FLOOD = 1010
PER_CLIENT = 128  # slimserve's default --max-connections-per-client

INFER = b"POST /v2/models/add/infer HTTP/1.1\r\nHost: t\r\n"
BODY = json.dumps({"inputs": [{"name": "x", "shape": [1, 4], "datatype": "FP32",
                               "data": [1, 2, 3, 4]}]}).encode()


def strip_continue(data):
    """The reply after any "100 Continue" interim response."""
    while data.startswith(b"HTTP/1.1 100"):
        data = data.partition(b"\r\n\r\n")[2]
    return data


def expect_408(t, data, how, what):
    check(data, f"{what}: no reply in {t:.1f}s (the read ended: {how})")
    status, headers, body = parse_raw_reply(strip_continue(data))
    check(status == 408, f"{what}: HTTP {status}, expected 408: {data[:300]!r}")
    check("--body-timeout" in json.loads(body)["error"], f"{what}: 408 body {body!r}")
    check(headers.get("connection") == "close", f"{what}: 408 without Connection: close")
    check(how == "closed", f"{what}: the connection was not closed after the 408 ({how})")
    check(1.5 <= t <= LATE, f"{what}: 408 after {t:.2f}s, expected {BODY_TIMEOUT}s")


def metrics(srv):
    text = srv.http.request("GET", "/metrics")[2].decode()

    def value(name, labels=""):
        m = re.search(rf"^{re.escape(name + labels)} (\S+)$", text, re.M)
        check(m, f"/metrics has no {name}{labels}")
        return float(m.group(1))
    return value


class Limits:
    def __init__(self, srv):
        self.srv = srv
        self.port = srv.port
        self.body_timeouts = 0   # 408s this test provoked
        self.idle_closes = 0     # connections it left idle past the deadline

    # -- the body deadline -----------------------------------------------------

    def t_short_body(self):
        head = INFER + b"Content-Length: 100\r\n\r\n"
        expect_408(*raw_exchange(self.port, head + b"{}", timeout=15), "Content-Length 100, 2 sent")
        self.body_timeouts += 1

    def t_trickle(self):
        """A byte every 0.25 s keeps the connection busy, never idle: the
        deadline counts from the headers, not from the last byte."""
        s = socket.create_connection((HOST, self.port))
        stop = threading.Event()

        def trickle():
            try:
                while not stop.is_set():
                    s.send(b" ")
                    time.sleep(0.25)
            except OSError:
                pass
        try:
            s.sendall(INFER + b"Content-Length: 1000\r\n\r\n")
            t0 = time.monotonic()
            sender = threading.Thread(target=trickle)
            sender.start()
            data, how = b"", "closed"
            s.settimeout(15)
            try:
                while True:
                    b = s.recv(65536)
                    if not b:
                        break
                    data += b
            except socket.timeout:
                how = "timeout"
            except ConnectionResetError:
                how = "reset" if not data else "closed"
            t = time.monotonic() - t0
        finally:
            stop.set()
            sender.join()
            s.close()
        expect_408(t, data, how, "a byte every 0.25 s")
        self.body_timeouts += 1

    def t_huge_chunk(self):
        head = INFER + b"Transfer-Encoding: chunked\r\n\r\n"
        expect_408(*raw_exchange(self.port, head + b"ffffffffffffffff\r\nabc", timeout=15),
                   "chunk size ffffffffffffffff")
        expect_408(*raw_exchange(self.port, head + b"4\r\nabcd\r\n", timeout=15),
                   "chunked body with no last chunk")
        self.body_timeouts += 2

    def t_expect_continue(self):
        head = INFER + b"Content-Length: 10\r\nExpect: 100-continue\r\n\r\n"
        t, data, how = raw_exchange(self.port, head, timeout=15)
        check(data.startswith(b"HTTP/1.1 100"), f"no 100 Continue first: {data[:100]!r}")
        expect_408(t, data, how, "nothing sent after 100 Continue")
        self.body_timeouts += 1

    def t_slow_but_in_time(self):
        s = socket.create_connection((HOST, self.port), timeout=15)
        try:
            s.sendall(INFER + b"Content-Length: %d\r\nConnection: close\r\n\r\n" % len(BODY))
            for i in range(0, len(BODY), len(BODY) // 3 + 1):
                time.sleep(0.2)
                s.sendall(BODY[i:i + len(BODY) // 3 + 1])
            data = b""
            while True:
                b = s.recv(65536)
                if not b:
                    break
                data += b
        finally:
            s.close()
        status, _, body = parse_raw_reply(data)
        check(status == 200, f"a body sent over 0.6 s: HTTP {status} {body[:200]!r}")
        check(json.loads(body)["outputs"][0]["data"] == [11, 12, 13, 14], f"outputs {body!r}")

    # -- idle connections --------------------------------------------------------

    def t_idle(self):
        for what, data in (("nothing sent", b""), ("half a request line", b"GET /v2/hea"),
                           ("a request line with no end", b"GARBAGE"),
                           # libmicrohttpd 0.9.75 reads a line that starts
                           # with NUL as a blank line, and waits for more
                           ("garbage that starts with NUL", b"\x00\x01\x02\xff\r\n\r\n")):
            t, reply, how = raw_exchange(self.port, data, timeout=15)
            check(how == "closed" and reply == b"", f"{what}: {how} with {reply[:100]!r}")
            check(IDLE_TIMEOUT - 0.5 <= t <= 10, f"{what}: closed after {t:.2f}s, "
                  f"expected {IDLE_TIMEOUT}s")
            self.idle_closes += 1
        # kept alive after a reply: the idle deadline starts over
        s = socket.create_connection((HOST, self.port), timeout=15)
        try:
            s.sendall(b"GET /v2/health/live HTTP/1.1\r\nHost: t\r\n\r\n")
            first = s.recv(65536)
            check(first.startswith(b"HTTP/1.1 200"), f"keep-alive request: {first[:100]!r}")
            t0 = time.monotonic()
            rest = s.recv(65536)
            t = time.monotonic() - t0
        finally:
            s.close()
        check(rest == b"", f"after a reply: {rest[:100]!r}")
        check(IDLE_TIMEOUT - 0.5 <= t <= 10, f"kept-alive connection closed after {t:.2f}s")
        self.idle_closes += 1

    def t_released(self):
        """Connections timed out while their clients hold them open are
        released by the server at once, not at libmicrohttpd's timeout."""
        socks = []
        try:
            for data in (INFER + b"Content-Length: 50\r\n\r\n{", b"", b"GET /"):
                s = socket.create_connection((HOST, self.port))
                s.sendall(data)
                socks.append(s)
            self.body_timeouts += 1
            self.idle_closes += 2
            t0 = time.monotonic()
            # first the server has them (accepted: a loaded machine may lag) ...
            while metrics(self.srv)("slim_http_connections") < 1 + len(socks):
                check(time.monotonic() - t0 < 20, "the server never counted the connections")
                time.sleep(0.05)
            # ... then it lets them go; 1 is the /metrics request's own
            while True:
                n = metrics(self.srv)("slim_http_connections")
                t = time.monotonic() - t0
                if n == 1:
                    break
                check(t < LATE, f"{n:.0f} connections still open after {LATE}s while their "
                      f"deadlines were {BODY_TIMEOUT}s and {IDLE_TIMEOUT}s")
                time.sleep(0.25)
            check(t >= 1.5, f"released after {t:.2f}s, before their deadlines")
        finally:
            for s in socks:
                s.close()
        value = metrics(self.srv)
        body = value("slim_http_timeouts_total", '{phase="body"}')
        idle = value("slim_http_timeouts_total", '{phase="idle"}')
        check(body == self.body_timeouts, f"body timeouts {body:.0f}, provoked {self.body_timeouts}")
        check(idle >= self.idle_closes, f"idle closes {idle:.0f}, provoked {self.idle_closes}")

    # -- refused at once ---------------------------------------------------------

    def t_garbage_request_lines(self):
        """Answered by libmicrohttpd itself: sooner than the idle timeout."""
        for data in (b"GARBAGE\r\n\r\n", b"FOO BAR BAZ\r\n\r\n", b"GET / HTTP/9.9\r\n\r\n",
                     b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03" + bytes(32) + b"\r\n\r\n"):
            t, reply, how = raw_exchange(self.port, data, timeout=15)
            check(t < IDLE_TIMEOUT - 1, f"{data[:20]!r}: {t:.1f}s before a reply or close")
            check(how in ("closed", "reset"), f"{data[:20]!r}: connection still open ({how})")
            if reply:
                status = parse_raw_reply(reply)[0]
                check(status in (400, 505), f"{data[:20]!r}: HTTP {status}")

    def t_too_large_at_once(self):
        for expect in (b"", b"Expect: 100-continue\r\n"):
            head = INFER + b"Content-Length: %d\r\n%s\r\n" % (MAX_BYTES + 1, expect)
            t, reply, how = raw_exchange(self.port, head, timeout=15)
            status, _, body = parse_raw_reply(reply)
            check(status == 413 and "--max-request-bytes" in json.loads(body)["error"],
                  f"declared {MAX_BYTES + 1} bytes: HTTP {status} {body!r}")
            check(t < 5 and how == "closed", f"413 after {t:.1f}s, then {how}")

    def t_framing(self):
        cases = [
            (b"Content-Length: 2\r\nContent-Length: 5\r\n\r\n{}abc", 400, "Content-Length"),
            (b"Content-Length: 2\r\ncontent-length: 2\r\n\r\n{}", 400, "Content-Length"),
            (b"Content-Length: 7\r\nTransfer-Encoding: chunked\r\n\r\n2\r\n{}\r\n0\r\n\r\n", 400,
             "Transfer-Encoding"),
            (b"Transfer-Encoding: gzip\r\n\r\n{}", 501, "gzip"),
            (b"Transfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n", 400,
             "Transfer-Encoding"),
            (b"Content-Length: 2\r\nInference-Header-Content-Length: 2\r\n"
             b"Inference-Header-Content-Length: 2\r\n\r\n{}", 400, "given 2 times"),
            (b"Content-Length: 2\r\nInference-Header-Content-Length: 2 \r\n\r\n{}", 400,
             "digits"),
            (b"Content-Length: 2\r\nInference-Header-Content-Length: +2\r\n\r\n{}", 400,
             "digits"),
        ]
        for headers, code, word in cases:
            t, reply, _ = raw_exchange(self.port, INFER + headers, timeout=15)
            check(reply, f"{headers!r}: no reply ({t:.1f}s)")
            status, _, body = parse_raw_reply(reply)
            msg = json.loads(body)["error"]
            check(status == code and word in msg, f"{headers!r}: HTTP {status} {msg!r}")
            check(t < 5, f"{headers!r}: {t:.1f}s")
        check(self.srv.http.request("GET", "/v2/health/ready")[0] == 200, "not ready afterwards")


# ---- many connections from one address ----------------------------------------

def raise_fd_limit(want):
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < want:
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(want, hard), hard))
    return resource.getrlimit(resource.RLIMIT_NOFILE)[0] >= want


def still_open(socks):
    """The sockets the server has not closed."""
    n = 0
    for s in socks:
        try:
            if s.recv(1, socket.MSG_PEEK | socket.MSG_DONTWAIT) == b"":
                continue
        except BlockingIOError:
            n += 1
        except OSError:
            continue
    return n


def t_flood(srv):
    if not raise_fd_limit(FLOOD + 200):
        print(f"SKIP flood: fewer than {FLOOD + 200} file descriptors (ulimit -n)", flush=True)
        return
    socks = []
    try:
        probe = socket.socket()
        try:
            probe.bind(("127.0.0.2", 0))
        except OSError as e:
            print(f"SKIP flood: cannot send from 127.0.0.2 ({e})", flush=True)
            return
        finally:
            probe.close()
        for _ in range(FLOOD):
            s = socket.socket()
            s.bind(("127.0.0.2", 0))
            s.settimeout(10)
            s.connect((HOST, srv.port))
            try:
                s.send(INFER + b"Content-Le")  # half-sent headers
            except OSError:
                pass  # closed by the server before the send
            s.setblocking(False)
            socks.append(s)
        t0 = time.monotonic()
        while still_open(socks) > PER_CLIENT and time.monotonic() - t0 < 10:
            time.sleep(0.2)
        n_open = still_open(socks)
        print(f"  {n_open} of {FLOOD} connections from 127.0.0.2 held open", flush=True)
        check(n_open <= PER_CLIENT, f"{n_open} of {FLOOD} connections from one address open, "
              f"limit {PER_CLIENT}")
        check(n_open >= PER_CLIENT // 2, f"only {n_open} connections from 127.0.0.2 accepted")
        for path in ("/v2/health/ready", "/v2/health/live", "/metrics"):
            t = time.monotonic()
            status = srv.http.request("GET", path, timeout=10)[0]
            t = time.monotonic() - t
            check(status == 200 and t < 3, f"GET {path} from {HOST} while 127.0.0.2 holds "
                  f"{n_open} connections: HTTP {status} after {t:.2f}s")
        n = metrics(srv)("slim_http_connections")
        check(n <= PER_CLIENT + 2, f"slim_http_connections {n:.0f}")
        # one more from the same address is refused at once
        t, reply, how = raw_exchange(srv.port, b"GET /v2/health/live HTTP/1.1\r\nHost: t\r\n\r\n",
                                     timeout=10, source="127.0.0.2")
        check(reply == b"" and how in ("closed", "reset") and t < 5,
              f"a connection past the per-address limit: {how} after {t:.1f}s, {reply[:80]!r}")
    finally:
        for s in socks:
            s.close()


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--slimserve", required=True)
    ap.add_argument("--workdir", required=True)
    args = ap.parse_args()
    args.slimserve = os.path.abspath(args.slimserve)
    repo = os.path.join(args.workdir, "repo")
    if os.path.exists(repo):
        shutil.rmtree(repo)
    add_const_model(os.path.join(repo, "add", "1", "model.onnx"), 10)

    r = Runner()
    srv = Server(args.slimserve, repo, os.path.join(args.workdir, "server.log"),
                 "--body-timeout", str(BODY_TIMEOUT), "--idle-timeout", str(IDLE_TIMEOUT),
                 "--max-request-bytes", str(MAX_BYTES))
    try:
        lim = Limits(srv)
        r.case("Content-Length longer than the body: 408", lim.t_short_body)
        r.case("a body trickled past the deadline: 408", lim.t_trickle)
        r.case("a huge or endless chunk: 408", lim.t_huge_chunk)
        r.case("silence after 100 Continue: 408", lim.t_expect_continue)
        r.case("a slow body complete in time: 200", lim.t_slow_but_in_time)
        r.case("idle connections closed", lim.t_idle)
        r.case("timed-out connections released, and counted", lim.t_released)
        r.case("garbage request lines: answered or closed at once", lim.t_garbage_request_lines)
        r.case("Content-Length over the limit: 413 before the body", lim.t_too_large_at_once)
        r.case("ambiguous framing headers: 400/501", lim.t_framing)
    finally:
        code = srv.stop()
    r.case("server exits 0 on SIGTERM", lambda: check(code == 0, f"exit code {code}"))

    srv = Server(args.slimserve, repo, os.path.join(args.workdir, "server-flood.log"))
    try:
        r.case(f"{FLOOD} half-sent connections from one address; health still answers",
               t_flood, srv)
    finally:
        code = srv.stop()
    r.case("flooded server exits 0 on SIGTERM", lambda: check(code == 0, f"exit code {code}"))
    print(f"{r.passed} passed, {r.failed} failed")
    return 1 if r.failed else 0


if __name__ == "__main__":
    sys.exit(main())

"""slimserve as a child process of an end-to-end test: started on a loopback
port of the kernel's choosing (--http-port 0, the port read from the line
"listening on http://HOST:PORT" it writes), waited for until
/v2/health/ready answers 200, stopped with SIGTERM (killed if it hangs), its
stdout and stderr kept in one log file.

    srv = ServerProcess(binary, repo, os.path.join(workdir, "server.log"), "--workers", "1")
    try:
        ... requests to HOST:srv.port ...
    finally:
        rc = srv.stop()              # the exit status: 0 after a clean SIGTERM
    check("loaded" in srv.logged(), ...)

The tests' own Server classes subclass it and add their way of sending
requests (test_server.Http, urllib, ...); the start, the wait and the stop
are the same for all of them, so they live here once.

Ports that the server cannot pick itself (--grpc-port, --metrics-port: 0
turns those off) are named in `ports`: each gets a free port, and a start
that fails because another process took one in between (tests run side by
side) is retried with new ones, so no test fails on that race.
"""
import http.client
import re
import socket
import subprocess
import time

HOST = "127.0.0.1"
# main.c's line once it serves, in the text log and in the JSON one alike.
LISTENING = re.compile(r"listening on http://\S+?:(\d+)\b")
# A port that could not be had (http.c, metrics_port.c, grpc_server.c).
PORT_TAKEN = re.compile(r"could not listen on|cannot listen on")


def free_port():
    """A port nothing listens on now (the kernel's pick for port 0). Another
    process may take it before the server binds it: ServerProcess retries
    such a start (its `ports`); other callers must too, or bind port 0."""
    with socket.socket() as s:
        s.bind((HOST, 0))
        return s.getsockname()[1]


class PortTaken(RuntimeError):
    """The server exited at start because a port given to it was taken."""


class ServerProcess:
    """slimserve --model-repository repo on HOST:self.port, plus extra
    arguments. ports: flags that take a port (e.g. "--grpc-port"), each
    given a free one, in self.ports[flag]; a start that loses one of them to
    another process is retried (tries times in all). wait: return only when
    it is ready (RuntimeError naming the log when it exits first or does not
    get ready within ready_s); False leaves self.proc to the caller (a server
    expected to refuse to start; self.port is None until it listens).
    env: the child's environment (None: this one's). stop_s: how long
    stop() waits after SIGTERM before it kills."""

    def __init__(self, binary, repo, logpath, *extra, env=None, wait=True, ready_s=120,
                 stop_s=60, ports=(), tries=5):
        self.logpath = logpath
        self.stop_s = stop_s
        for attempt in range(tries):
            self.ports = {flag: free_port() for flag in ports}
            named = [a for flag, port in self.ports.items() for a in (flag, str(port))]
            self._port = None
            self.log = open(logpath, "w")
            self.proc = subprocess.Popen([binary, "--model-repository", repo, "--host", HOST,
                                          "--http-port", "0", *named, *extra],
                                         stdout=self.log, stderr=subprocess.STDOUT, env=env)
            if not wait:
                return
            try:
                self.wait_ready(ready_s)
                return
            except PortTaken:
                self.log.close()
                if attempt == tries - 1:
                    raise

    @property
    def port(self):
        """The HTTP port, as the server wrote it (None until it has)."""
        if self._port is None:
            m = LISTENING.search(self.logged())
            if m:
                self._port = int(m.group(1))
        return self._port

    def is_ready(self):
        """One probe: /v2/health/ready answers 200 (an error: not yet)."""
        if self.port is None:
            return False
        conn = http.client.HTTPConnection(HOST, self.port, timeout=2)
        try:
            conn.request("GET", "/v2/health/ready")
            return conn.getresponse().status == 200
        except (OSError, http.client.HTTPException):
            return False
        finally:
            conn.close()

    def wait_ready(self, seconds):
        deadline = time.time() + seconds
        while time.time() < deadline:
            if self.proc.poll() is not None:
                if self.ports and PORT_TAKEN.search(self.logged()):
                    raise PortTaken(f"slimserve lost one of its ports {self.ports}; "
                                    f"see {self.logpath}")
                raise RuntimeError(f"slimserve exited with {self.proc.returncode}; "
                                   f"see {self.logpath}")
            if self.is_ready():
                return
            time.sleep(0.1)
        raise RuntimeError(f"slimserve did not become ready within {seconds} s; "
                           f"see {self.logpath}")

    def logged(self):
        """What the server has written so far."""
        if not self.log.closed:
            self.log.flush()
        with open(self.logpath) as f:
            return f.read()

    def stop(self):
        """SIGTERM (unless it has exited already), then the exit status."""
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=self.stop_s)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.log.close()
        return self.proc.returncode

"""slimserve as a child process of an end-to-end test: started on a free
loopback port, waited for until /v2/health/ready answers 200, stopped with
SIGTERM (killed if it hangs), its stdout and stderr kept in one log file.

    srv = ServerProcess(binary, repo, os.path.join(workdir, "server.log"), "--workers", "1")
    try:
        ... requests to HOST:srv.port ...
    finally:
        rc = srv.stop()              # the exit status: 0 after a clean SIGTERM
    check("loaded" in srv.logged(), ...)

The tests' own Server classes subclass it and add their way of sending
requests (test_server.Http, urllib, ...); the start, the wait and the stop
are the same for all of them, so they live here once.
"""
import http.client
import socket
import subprocess
import time

HOST = "127.0.0.1"


def free_port():
    """A port nothing listens on now (the kernel's pick for port 0). Another
    process may take it before the server binds it; the server then fails
    to start, and the test says so, rather than talking to a stranger."""
    with socket.socket() as s:
        s.bind((HOST, 0))
        return s.getsockname()[1]


class ServerProcess:
    """slimserve --model-repository repo on HOST:self.port, plus extra
    arguments. wait: return only when it is ready (RuntimeError naming the
    log when it exits first or does not get ready within ready_s); False
    leaves self.proc to the caller (a server expected to refuse to start).
    env: the child's environment (None: this one's). stop_s: how long
    stop() waits after SIGTERM before it kills."""

    def __init__(self, binary, repo, logpath, *extra, env=None, wait=True, ready_s=120,
                 stop_s=60):
        self.port = free_port()
        self.logpath = logpath
        self.stop_s = stop_s
        self.log = open(logpath, "w")
        self.proc = subprocess.Popen([binary, "--model-repository", repo, "--host", HOST,
                                      "--http-port", str(self.port), *extra],
                                     stdout=self.log, stderr=subprocess.STDOUT, env=env)
        if wait:
            self.wait_ready(ready_s)

    def is_ready(self):
        """One probe: /v2/health/ready answers 200 (an error: not yet)."""
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
                raise RuntimeError(f"slimserve exited with {self.proc.returncode}; "
                                   f"see {self.logpath}")
            if self.is_ready():
                return
            time.sleep(0.1)
        raise RuntimeError(f"slimserve did not become ready; see {self.logpath}")

    def logged(self):
        """What the server has written so far."""
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

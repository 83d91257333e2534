#!/usr/bin/env python3
"""End-to-end test of Triton's logging and trace extensions in slimserve.

    python3 tests/e2e/test_log_trace.py --slimserve build/bin/slimserve --workdir /tmp/e2e-lt

Through tritonclient.http and tritonclient.grpc:
  * server metadata lists "logging" and "trace" on both protocols, alike
  * log settings round-trip (get, update, get), switch at run time (log_info
    off drops access lines, ISO8601 lines, log_file inside --log-dir and back
    to stderr), and bad values are refused (400 / INVALID_ARGUMENT) naming
    the field, all or nothing
  * trace settings round-trip, global and per model; a model's field
    overrides the global one and clearing it falls back
  * with TIMESTAMPS on, sampled requests write JSON lines whose seven
    timestamps are ordered and within the wall-clock time of the requests;
    trace_rate samples, trace_count bounds, log_frequency splits files,
    --trace-max-bytes caps a file (with a warning), a model whose own level
    is OFF writes none
  * trace_file and log_file stay inside --trace-dir / --log-dir (paths,
    "..", symbolic links out); without --trace-dir none may be set; the
    endpoints need the API key when one is set

Exits 77 (CTest: skipped) when slimserve was built without gRPC or
tritonclient[grpc] is missing. Ends with "N passed, N failed".
"""

import json
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from test_grpc import (HOST, SKIP, Failure, Runner, Server, as_dict, check,  # noqa: E402
                       fresh_args, tg, th, without_grpc, InferenceServerException)
from test_server import Http, add_const_model, error_of  # noqa: E402

CAP = 4000  # --trace-max-bytes: about nine trace lines
NAMES = ["REQUEST_START", "QUEUE_START", "COMPUTE_START", "COMPUTE_INPUT_END",
         "COMPUTE_OUTPUT_START", "COMPUTE_END", "REQUEST_END"]


def grpc_error(fn, code, *words):
    try:
        fn()
    except InferenceServerException as e:
        check(e.status() == f"StatusCode.{code}", f"expected {code}, got {e.status()}: {e}")
        for w in words:
            check(w in e.message(), f"error {e.message()!r} does not mention {w!r}")
        return
    raise Failure(f"expected {code}, the call succeeded")


def trace_lines(path):
    if not os.path.exists(path):
        return []
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]


def settings_of(resp):
    """gRPC TraceSettingResponse -> {key: [values]}; HTTP dict -> the same shape."""
    d = as_dict(resp)
    if "settings" in d:
        return {k: v.get("value", []) for k, v in d["settings"].items()}
    return {k: v if isinstance(v, list) else [v] for k, v in d.items()}


def log_of(resp):
    d = as_dict(resp)
    if "settings" in d:
        return {k: next(iter(v.values())) for k, v in d["settings"].items()}
    return d


def wait_logged(read, text, seconds=20):
    """read() once it holds text (an access line is written a moment after
    the answer; a loaded machine's moment is longer), or as it is after
    `seconds`: the caller's check says what is missing."""
    deadline = time.monotonic() + seconds
    got = read()
    while text not in got and time.monotonic() < deadline:
        time.sleep(0.05)
        got = read()
    return got


def read_text(path):
    with open(path) as f:
        return f.read()


class Tests:
    def __init__(self, srv, workdir):
        self.srv, self.workdir = srv, workdir
        self.trace_dir = os.path.join(workdir, "traces")
        self.log_dir = os.path.join(workdir, "logs")
        self.raw = Http(srv.port)
        self.http = th.InferenceServerClient(f"{HOST}:{srv.port}")
        self.grpc = tg.InferenceServerClient(f"{HOST}:{srv.grpc_port}")

    def infer_http(self, model, rid):
        i = th.InferInput("x", [1, 4], "FP32")
        i.set_data_from_numpy(np.ones((1, 4), np.float32), binary_data=True)
        self.http.infer(model, [i], request_id=rid)

    def infer_grpc(self, model, rid):
        i = tg.InferInput("x", [1, 4], "FP32")
        i.set_data_from_numpy(np.ones((1, 4), np.float32))
        self.grpc.infer(model, [i], request_id=rid)

    def set_global(self, **kw):
        status, body = self.raw.json("POST", "/v2/trace/setting", kw)
        check(status == 200, f"POST /v2/trace/setting {kw}: {status} {body}")
        return body

    # ---- metadata ---------------------------------------------------------

    def t_extensions(self):
        h = self.http.get_server_metadata()["extensions"]
        g = list(self.grpc.get_server_metadata().extensions)
        check("logging" in h and "trace" in h, f"http extensions {h}")
        check(sorted(h) == sorted(g), f"http {h} != grpc {g}")
        check(len(set(h)) == len(h), f"an extension listed twice: {h}")

    # ---- logging ----------------------------------------------------------

    def t_log_round_trip(self):
        got = self.http.get_log_settings()
        check(got == {"log_file": "", "log_info": True, "log_warnings": True, "log_errors": True,
                      "log_verbose_level": 0, "log_format": "default"}, f"defaults {got}")
        up = self.http.update_log_settings({"log_verbose_level": 2, "log_format": "ISO8601"})
        check(up["log_verbose_level"] == 2 and up["log_format"] == "ISO8601", f"update {up}")
        check(self.http.get_log_settings() == up, "GET after POST differs")
        g = log_of(self.grpc.get_log_settings())
        check(g == up, f"grpc {g} != http {up}")
        g = log_of(self.grpc.update_log_settings({"log_warnings": False, "log_verbose_level": 0,
                                                  "log_format": "default"}))
        check(g["log_warnings"] is False and g["log_verbose_level"] == 0, f"grpc update {g}")
        h = self.http.get_log_settings()
        check(h == g, f"http {h} != grpc {g}")
        self.http.update_log_settings({"log_warnings": True})

    def t_log_switches(self):
        # log_info off: no access line; on again: there is one
        self.http.update_log_settings({"log_info": False})
        self.infer_http("a", "quiet-1")
        self.http.update_log_settings({"log_info": True, "log_format": "ISO8601"})
        self.infer_http("a", "loud-1")
        text = wait_logged(lambda: self.srv.log_text(), "loud-1")
        check("quiet-1" not in text, "an access line was written with log_info off")
        lines = [ln for ln in text.splitlines() if "/v2/models/a/infer" in ln]
        check(lines and lines[-1][:4].isdigit() and "T" in lines[-1][:11] and
              lines[-1][19:23] == "Z I ", f"not an ISO8601 line: {lines[-1:]}")
        # log_file inside --log-dir, then back to stderr
        up = self.http.update_log_settings({"log_file": "server.log", "log_format": "default"})
        path = os.path.join(self.log_dir, "server.log")
        check(up["log_file"] == path, f"log_file reported {up['log_file']!r}")
        self.raw.request("GET", "/v2/models/a", headers={"X-Request-ID": "to-file-1"})
        log_of(self.grpc.update_log_settings({"log_file": ""}))
        self.raw.request("GET", "/v2/models/a", headers={"X-Request-ID": "to-stderr-1"})
        text = wait_logged(lambda: self.srv.log_text(), "to-stderr-1")
        in_file = wait_logged(lambda: read_text(path), "to-file-1")
        check("to-file-1" in in_file and "to-file-1" not in text, "line not in log_file alone")
        check("to-stderr-1" in text and "to-stderr-1" not in in_file, "not back on stderr")
        check(self.http.get_log_settings()["log_file"] == "", "log_file not cleared")

    def t_log_bad_values(self):
        before = self.http.get_log_settings()
        for body, word in (({"log_verbose_level": -1}, "log_verbose_level"),
                           ({"log_verbose_level": 1.5}, "log_verbose_level"),
                           ({"log_format": "xml"}, "log_format"),
                           ({"log_info": "yes"}, "log_info"),
                           ({"log_errors": 1}, "log_errors"),
                           ({"log_file": "../escape.log"}, "log_file"),
                           ({"log_file": "/tmp/escape.log"}, "log_file"),
                           ({"log_file": "sub/x.log"}, "log_file"),
                           ({"nope": True}, "nope"),
                           ({"log_verbose_level": 3, "log_format": "xml"}, "log_format"),
                           ({"log_file": "never.log", "log_format": "xml"}, "log_format")):
            error_of(*self.raw.json("POST", "/v2/logging", body), 400, word)
        error_of(*self.raw.json("POST", "/v2/logging", b"[1]"), 400, "object")
        error_of(*self.raw.json("POST", "/v2/logging", b"{"), 400)
        error_of(*self.raw.json("PUT", "/v2/logging", {}), 405)
        grpc_error(lambda: self.grpc.update_log_settings({"log_format": "xml"}),
                   "INVALID_ARGUMENT", "log_format")
        grpc_error(lambda: self.grpc.update_log_settings({"log_file": "/etc/x"}),
                   "INVALID_ARGUMENT", "log_file")
        check(self.http.get_log_settings() == before, "a refused update changed something")
        check(not os.path.exists(os.path.join(self.workdir, "escape.log")), "wrote outside")
        check(not os.path.exists(os.path.join(self.log_dir, "never.log")),
              "a refused update created its log_file")

    # ---- trace settings ---------------------------------------------------

    def t_trace_round_trip(self):
        g = self.http.get_trace_settings()
        check(g == {"trace_level": ["OFF"], "trace_rate": "1000", "trace_count": "-1",
                    "log_frequency": "0", "trace_file": ""}, f"defaults {g}")
        up = self.http.update_trace_settings(settings={"trace_file": "rt.jsonl",
                                                       "trace_rate": "5"})
        check(up["trace_file"] == os.path.join(self.trace_dir, "rt.jsonl") and
              up["trace_rate"] == "5", f"global update {up}")
        check(settings_of(self.grpc.get_trace_settings()) == settings_of(up), "grpc global get")
        # a model's own field overrides; the others follow the global ones
        m = self.http.update_trace_settings("a", {"trace_rate": "2"})
        check(m["trace_rate"] == "2" and m["trace_file"] == up["trace_file"], f"model a {m}")
        check(self.http.get_trace_settings()["trace_rate"] == "5", "global changed by model")
        self.http.update_trace_settings(settings={"trace_count": "7"})
        check(self.http.get_trace_settings("a")["trace_count"] == "7", "a does not follow global")
        # clearing a model's field falls back to the global one
        m = self.http.update_trace_settings("a", {"trace_rate": None})
        check(m["trace_rate"] == "5", f"cleared trace_rate {m}")
        # gRPC, per model
        g = settings_of(self.grpc.update_trace_settings("b", {"trace_count": "3",
                                                               "trace_level": ["OFF"]}))
        check(g["trace_count"] == ["3"] and g["trace_level"] == ["OFF"], f"grpc b {g}")
        check(settings_of(self.http.get_trace_settings("b")) == g, "http b != grpc b")
        check(settings_of(self.grpc.get_trace_settings("b")) == g, "grpc get b (a get "
              "must not clear)")
        g = settings_of(self.grpc.update_trace_settings("b", {"trace_count": None}))
        check(g["trace_count"] == ["7"], f"grpc clear b {g}")
        # POST {} for a model drops all of its own
        self.http.update_trace_settings("a", {"trace_rate": "9"})
        status, body = self.raw.json("POST", "/v2/models/a/trace/setting", {})
        check(status == 200 and body["trace_rate"] == "5", f"POST {{}} {status} {body}")
        # a model of the repository that is not loaded may have settings
        self.http.unload_model("b")
        m = self.http.update_trace_settings("b", {"trace_rate": "4"})
        check(m["trace_rate"] == "4", f"unloaded b {m}")
        g = settings_of(self.grpc.update_trace_settings("b", {"trace_rate": "6"}))
        check(g["trace_rate"] == ["6"], f"unloaded b over grpc {g}")
        self.http.load_model("b")
        self.raw.json("POST", "/v2/models/b/trace/setting", {})
        self.set_global(trace_rate=None, trace_count=None, trace_file=None)
        check(self.http.get_trace_settings()["trace_rate"] == "1000", "global clear: default")

    def t_trace_bad_values(self):
        before = self.http.get_trace_settings()
        for body, word in (({"trace_rate": "0"}, "trace_rate"),
                           ({"trace_rate": "abc"}, "trace_rate"),
                           ({"trace_count": "-2"}, "trace_count"),
                           ({"log_frequency": "-1"}, "log_frequency"),
                           ({"trace_level": ["TENSORS"]}, "TENSORS"),
                           ({"trace_level": ["OFF", "TIMESTAMPS"]}, "trace_level"),
                           ({"trace_level": [1]}, "trace_level"),
                           ({"trace_level": ["TIMESTAMPS"]}, "trace_file"),
                           ({"trace_file": "/etc/passwd"}, "trace_file"),
                           ({"trace_file": "../up.jsonl"}, "trace_file"),
                           ({"trace_file": ".."}, "trace_file"),
                           ({"trace_rate": "2", "trace_file": "a/b"}, "trace_file"),
                           ({"trace_rate": {"x": 1}}, "trace_rate"),
                           ({"what": "1"}, "what")):
            error_of(*self.raw.json("POST", "/v2/trace/setting", body), 400, word)
        error_of(*self.raw.json("POST", "/v2/models/nosuch/trace/setting", {}), 404, "nosuch")
        error_of(*self.raw.json("GET", "/v2/models/nosuch/trace/setting"), 404, "nosuch")
        grpc_error(lambda: self.grpc.update_trace_settings(settings={"trace_rate": "x"}),
                   "INVALID_ARGUMENT", "trace_rate")
        grpc_error(lambda: self.grpc.update_trace_settings("nosuch", {"trace_rate": "2"}),
                   "NOT_FOUND", "nosuch")
        check(self.http.get_trace_settings() == before, "a refused update changed something")

    # ---- trace lines ------------------------------------------------------

    def check_line(self, ln, model, t0, t1):
        check(ln["model_name"] == model and ln["model_version"] == 1, f"line {ln}")
        names = [t["name"] for t in ln["timestamps"]]
        check(names == NAMES, f"timestamps {names}")
        ns = [t["ns"] for t in ln["timestamps"]]
        check(ns == sorted(ns), f"timestamps out of order: {ns}")
        check(t0 <= ns[0] and ns[-1] <= t1, f"timestamps {ns} outside [{t0}, {t1}]")

    def t_timestamps_http(self):
        self.set_global(trace_level=["TIMESTAMPS"], trace_rate="1", trace_count="5",
                        trace_file="http.jsonl")
        t0 = time.time_ns()
        for k in range(8):
            self.infer_http("a", f"h-{k}")
        t1 = time.time_ns()
        lines = trace_lines(os.path.join(self.trace_dir, "http.jsonl"))
        check(len(lines) == 5, f"trace_count 5: {len(lines)} lines")
        check([ln["request_id"] for ln in lines] == [f"h-{k}" for k in range(5)],
              f"request ids {[ln['request_id'] for ln in lines]}")
        for ln in lines:
            self.check_line(ln, "a", t0, t1)
        check(self.http.get_trace_settings()["trace_count"] == "0", "trace_count not spent")

    def t_timestamps_grpc(self):
        self.set_global(trace_level=["TIMESTAMPS"], trace_rate="2", trace_count="3",
                        trace_file="grpc.jsonl")
        # b's own level is OFF: none of its requests are traced
        self.http.update_trace_settings("b", {"trace_level": ["OFF"]})
        t0 = time.time_ns()
        for k in range(1, 9):
            self.infer_grpc("a", f"g-{k}")
            self.infer_grpc("b", f"gb-{k}")
        t1 = time.time_ns()
        lines = trace_lines(os.path.join(self.trace_dir, "grpc.jsonl"))
        check([ln["request_id"] for ln in lines] == ["g-2", "g-4", "g-6"],
              f"rate 2, count 3: {[ln['request_id'] for ln in lines]}")
        for ln in lines:
            self.check_line(ln, "a", t0, t1)
        self.raw.json("POST", "/v2/models/b/trace/setting", {})

    def t_log_frequency(self):
        self.set_global(trace_level=["TIMESTAMPS"], trace_rate="1", trace_count="-1",
                        trace_file="lf.jsonl", log_frequency="2")
        for k in range(5):
            self.infer_http("a", f"lf-{k}")
        base = os.path.join(self.trace_dir, "lf.jsonl")
        got = [len(trace_lines(f"{base}.{i}")) for i in range(4)]
        check(got == [2, 2, 1, 0], f"lines per file {got}")
        check(not os.path.exists(base), "log_frequency 2 wrote the base file")
        self.set_global(log_frequency="0")

    def t_size_cap(self):
        self.set_global(trace_level=["TIMESTAMPS"], trace_rate="1", trace_count="-1",
                        trace_file="cap.jsonl")
        for k in range(14):
            self.infer_http("a", f"cap-{k}")
        path = os.path.join(self.trace_dir, "cap.jsonl")
        n, size = len(trace_lines(path)), os.path.getsize(path)
        check(0 < n < 14 and size <= CAP, f"{n} lines, {size} bytes over --trace-max-bytes {CAP}")
        check("--trace-max-bytes" in wait_logged(lambda: self.srv.log_text(), "--trace-max-bytes"),
              "no warning at the cap")
        self.set_global(trace_file="cap.jsonl")  # set again: goes on
        self.infer_http("a", "cap-again")
        check(len(trace_lines(path)) == n + 1, "trace_file set again did not resume")

    def t_symlink_out(self):
        outside = os.path.join(self.workdir, "outside.jsonl")
        open(outside, "w").close()
        os.symlink(outside, os.path.join(self.trace_dir, "link.jsonl"))
        self.set_global(trace_level=["TIMESTAMPS"], trace_rate="1", trace_count="-1",
                        trace_file="link.jsonl")
        self.infer_http("a", "sym-1")
        check(os.path.getsize(outside) == 0, "a trace was written through a symbolic link")
        os.symlink(outside, os.path.join(self.log_dir, "link.log"))
        error_of(*self.raw.json("POST", "/v2/logging", {"log_file": "link.log"}), 400,
                 "symbolic link")
        self.set_global(trace_level=["OFF"])


def t_no_dir_and_key(args, repo):
    """Without --trace-dir/--log-dir no file may be named; with --api-key the
    endpoints need it."""
    srv = Server(args.slimserve, repo, os.path.join(args.workdir, "key.log"),
                 "--api-key", "s3cret")
    try:
        raw = Http(srv.port)
        error_of(*raw.json("GET", "/v2/logging"), 401)
        error_of(*raw.json("POST", "/v2/trace/setting", {"trace_rate": "1"}), 401)
        error_of(*raw.json("GET", "/v2/models/a/trace/setting"), 401)
        g = tg.InferenceServerClient(f"{HOST}:{srv.grpc_port}")
        grpc_error(lambda: g.get_log_settings(), "UNAUTHENTICATED")
        grpc_error(lambda: g.update_trace_settings(settings={"trace_rate": "1"}),
                   "UNAUTHENTICATED")
        key = {"Authorization": "Bearer s3cret"}
        error_of(*raw.json("POST", "/v2/trace/setting", {"trace_file": "t.jsonl"}, key), 400,
                 "--trace-dir")
        error_of(*raw.json("POST", "/v2/logging", {"log_file": "l.log"}, key), 400, "--log-dir")
        status, body = raw.json("POST", "/v2/logging", {"log_verbose_level": 1}, key)
        check(status == 200 and body["log_verbose_level"] == 1, f"with the key: {status} {body}")
    finally:
        check(srv.stop() == 0, "exit code after SIGTERM")


def main():
    args = fresh_args()
    repo = os.path.join(args.workdir, "models")
    for name, k in (("a", 1), ("b", 2)):
        add_const_model(os.path.join(repo, name, "1", "model.onnx"), k)
    for d in ("traces", "logs"):
        os.makedirs(os.path.join(args.workdir, d))
    srv = Server(args.slimserve, repo, os.path.join(args.workdir, "server.log"),
                 "--trace-dir", os.path.join(args.workdir, "traces"),
                 "--log-dir", os.path.join(args.workdir, "logs"),
                 "--trace-max-bytes", str(CAP))
    if without_grpc(srv):
        return SKIP
    r = Runner()
    try:
        t = Tests(srv, args.workdir)
        r.case("extensions", t.t_extensions)
        r.case("log_round_trip", t.t_log_round_trip)
        r.case("log_switches", t.t_log_switches)
        r.case("log_bad_values", t.t_log_bad_values)
        r.case("trace_round_trip", t.t_trace_round_trip)
        r.case("trace_bad_values", t.t_trace_bad_values)
        r.case("timestamps_http", t.t_timestamps_http)
        r.case("timestamps_grpc", t.t_timestamps_grpc)
        r.case("log_frequency", t.t_log_frequency)
        r.case("size_cap", t.t_size_cap)
        r.case("symlink_out", t.t_symlink_out)
    finally:
        code = srv.stop()
    r.case("sigterm_exit_0", lambda: check(code == 0, f"exit code {code}"))
    r.case("no_dir_and_api_key", t_no_dir_and_key, args, repo)
    print(f"{r.passed} passed, {r.failed} failed")
    return 1 if r.failed else 0


if __name__ == "__main__":
    sys.exit(main())

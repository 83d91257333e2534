#!/usr/bin/env python3
"""End-to-end test of slimserve's deployment features:

    python3 tests/e2e/test_server_extensions.py --slimserve build/bin/slimserve \\
        --workdir /tmp/e2e-extensions

  * Triton's statistics extension through tritonclient's
    get_inference_statistics(): counts equal to the requests and rows sent,
    a bad request counted as a failure, one batch_stats entry per batch size
  * config.json version_policy: the default (latest 1), latest N, all,
    specific; versions left out are UNAVAILABLE in the index, answered 404
    and hold no memory; bad policies fail with the field named
  * --api-key: 401 without or with a wrong key, 200 with either header form,
    health checks (and /metrics unless --api-key-metrics) exempt, the 401s
    counted; SLIMSERVE_API_KEY from the environment
  * --log-format json: every line of the server's log is a JSON object, and
    a request's X-Request-ID is echoed and found in its access line

The repository is made here (small Add models, several versions). Only
127.0.0.1 is contacted. Ends with "N passed, N failed"; exits non-zero on
any failure.
"""

import argparse
import json
import os
import re
import shutil
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from test_server import (Failure, Runner, Server, add_const_model, check,  # noqa: E402
                         error_of, write_json)

HOST = "127.0.0.1"
KEY = "s3cret-key_0123"


# ---- the repository ------------------------------------------------------

POLICIES = {  # model -> (version_policy or None, folders, versions that must load)
    "latest_default": (None, (1, 2, 3), (3,)),
    "latest_two": ({"latest": {"num_versions": 2}}, (1, 2, 3), (2, 3)),
    "every": ({"all": {}}, (1, 2, 3), (1, 2, 3)),
    "specific": ({"specific": {"versions": [3, 1]}}, (1, 2, 3), (1, 3)),
    "specific_missing": ({"specific": {"versions": [1, 5]}}, (1, 2), (1,)),
}

BAD_POLICIES = {  # model -> (version_policy, words its reason must hold)
    "bad_zero": ({"latest": {"num_versions": 0}}, ["version_policy.latest.num_versions"]),
    "bad_kind": ({"newest": {}}, ["version_policy", "newest"]),
    "bad_empty": ({"specific": {"versions": []}}, ["version_policy.specific.versions"]),
    "bad_two": ({"all": {}, "latest": {}}, ["version_policy", "one key"]),
    "bad_all": ({"all": {"x": 1}}, ["version_policy.all"]),
    "bad_dup": ({"specific": {"versions": [2, 2]}}, ["version_policy.specific.versions", "twice"]),
}


def build_repository(root):
    if os.path.exists(root):
        shutil.rmtree(root)
    os.makedirs(root)
    # y = x + 1 on [n, 4]; batches up to 8, each request runs alone
    add_const_model(os.path.join(root, "stat", "1", "model.onnx"), 1)
    write_json(os.path.join(root, "stat", "config.json"), {"name": "stat", "max_batch_size": 8})
    for name, (policy, folders, _) in POLICIES.items():
        for v in folders:  # y = x + version, so an answer says which version ran
            add_const_model(os.path.join(root, name, str(v), "model.onnx"), v)
        cfg = {"name": name}
        if policy is not None:
            cfg["version_policy"] = policy
        write_json(os.path.join(root, name, "config.json"), cfg)
    for name, (policy, _) in BAD_POLICIES.items():
        add_const_model(os.path.join(root, name, "1", "model.onnx"), 1)
        add_const_model(os.path.join(root, name, "2", "model.onnx"), 2)
        write_json(os.path.join(root, name, "config.json"),
                   {"name": name, "version_policy": policy})


def infer_body(rows, k=0.0, dtype="FP32"):
    x = (np.arange(rows * 4, dtype=np.float32) + k).reshape(rows, 4)
    return {"inputs": [{"name": "x", "datatype": dtype, "shape": [rows, 4],
                        "data": x.flatten().tolist()}]}, x


def client(port):
    import tritonclient.http as th
    return th.InferenceServerClient(f"{HOST}:{port}")


def metric(http, name, headers=None):
    status, _, data = http.request("GET", "/metrics", headers=headers)
    check(status == 200, f"/metrics: {status}")
    m = re.search(rf"^{re.escape(name)} (\d+)$", data.decode(), re.M)
    return int(m.group(1)) if m else None


# ---- statistics ------------------------------------------------------------

def t_statistics(srv):
    import tritonclient.http as th
    c = client(srv.port)
    t0_ms = int(time.time() * 1000)
    rows_sent = 0
    for rows in (1, 2, 3, 2):  # through tritonclient, binary data
        x = np.full((rows, 4), 0.5, dtype=np.float32)
        inp = th.InferInput("x", [rows, 4], "FP32")
        inp.set_data_from_numpy(x)
        y = c.infer("stat", [inp]).as_numpy("y")
        check(np.array_equal(y, x + 1), f"stat answered {y}")
        rows_sent += rows
    # a bad request (wrong datatype) is a failure of this model
    body, _ = infer_body(1, dtype="INT32")
    error_of(*srv.http.json("POST", "/v2/models/stat/infer", body), 400, "data-type")
    t1_ms = int(time.time() * 1000) + 1

    st = c.get_inference_statistics("stat")
    check(list(st) == ["model_stats"] and len(st["model_stats"]) == 1, f"stats {st}")
    s = st["model_stats"][0]
    check(s["name"] == "stat" and s["version"] == "1", f"name/version {s}")
    check(s["inference_count"] == rows_sent, f"inference_count {s['inference_count']}, "
          f"sent {rows_sent} rows")
    check(s["execution_count"] == 4, f"execution_count {s['execution_count']}, 4 runs")
    check(t0_ms <= s["last_inference"] <= t1_ms,
          f"last_inference {s['last_inference']} not within [{t0_ms}, {t1_ms}]")
    inf = s["inference_stats"]
    want = {"success": 4, "fail": 1, "queue": 4, "compute_input": 4, "compute_infer": 4,
            "compute_output": 4}
    for k, n in want.items():
        check(inf[k]["count"] == n, f"inference_stats.{k}.count {inf[k]['count']}, expected {n}")
        check(isinstance(inf[k]["ns"], int) and inf[k]["ns"] >= 0, f"{k}.ns {inf[k]['ns']}")
    check(inf["compute_infer"]["ns"] > 0 and inf["success"]["ns"] > 0, f"no time: {inf}")
    # time within a request is part of the request
    check(inf["success"]["ns"] >= inf["compute_infer"]["ns"], f"infer longer than request {inf}")
    bs = s["batch_stats"]
    check([b["batch_size"] for b in bs] == [1, 2, 3], f"batch sizes {bs}")
    check([b["compute_infer"]["count"] for b in bs] == [1, 2, 1], f"runs per batch size {bs}")
    for b in bs:
        check(b["compute_input"]["count"] == b["compute_output"]["count"] ==
              b["compute_infer"]["count"], f"batch stat {b}")
    check(sum(b["compute_infer"]["ns"] for b in bs) == inf["compute_infer"]["ns"],
          f"per-size infer time does not add up: {bs} vs {inf['compute_infer']}")

    # every model, a version, and the errors
    every = c.get_inference_statistics()["model_stats"]
    names = {(m["name"], m["version"]) for m in every}
    check(("stat", "1") in names and ("latest_default", "3") in names, f"all stats {names}")
    check(("latest_default", "1") not in names, f"a version left out has stats: {names}")
    one = c.get_inference_statistics("every", "2")["model_stats"]
    check([(m["name"], m["version"]) for m in one] == [("every", "2")], f"every v2 {one}")
    error_of(*srv.http.json("GET", "/v2/models/nosuch/stats"), 404, "nosuch")
    error_of(*srv.http.json("GET", "/v2/models/latest_default/versions/1/stats"), 404,
             "version policy")
    status, body = srv.http.json("GET", "/v2")
    check("statistics" in body["extensions"], f"extensions {body}")
    error_of(*srv.http.json("POST", "/v2/models/stats"), 405)


# ---- version policy -------------------------------------------------------------

def t_version_policy(srv):
    status, index = srv.http.json("POST", "/v2/repository/index")
    check(status == 200, f"index {status}")
    by = {}
    for e in index:
        by.setdefault(e["name"], {})[e.get("version")] = e
    for name, (_, folders, loaded) in POLICIES.items():
        listed = set(by.get(name, {}))
        want = {str(v) for v in folders} | {str(v) for v in loaded}
        if name == "specific_missing":
            want.add("5")
        check(listed == want, f"{name}: index lists versions {sorted(listed)}, expected {sorted(want)}")
        for v, e in by[name].items():
            ready = int(v) in loaded
            check(e["state"] == ("READY" if ready else "UNAVAILABLE"), f"{name} v{v}: {e}")
            if not ready and v != "5":
                check("version policy" in e["reason"], f"{name} v{v} reason {e['reason']!r}")
        # the highest loaded version answers by default; each loaded one by number
        body, x = infer_body(1)
        status, out = srv.http.json("POST", f"/v2/models/{name}/infer", body)
        check(status == 200 and out["model_version"] == str(max(loaded)) and
              np.allclose(out["outputs"][0]["data"], (x + max(loaded)).flatten()),
              f"{name} default version: {status} {out}")
        for v in folders:
            status, out = srv.http.json("POST", f"/v2/models/{name}/versions/{v}/infer", body)
            if v in loaded:
                check(status == 200 and np.allclose(out["outputs"][0]["data"], (x + v).flatten()),
                      f"{name} v{v}: {status} {out}")
            else:
                error_of(status, out, 404, name, str(v), "version policy")
        status, meta = srv.http.json("GET", f"/v2/models/{name}")
        check(meta["versions"] == [str(v) for v in loaded], f"{name} metadata {meta}")
    missing = by["specific_missing"]["5"]
    check(missing["state"] == "UNAVAILABLE" and "no folder" in missing["reason"], f"{missing}")
    # versions left out hold no memory: no weights are counted for them
    _, _, text = srv.http.request("GET", "/metrics")
    weights = set(re.findall(r'^slim_model_weight_bytes\{model="latest_default",version="(\d+)"\}',
                             text.decode(), re.M))
    check(weights == {"3"}, f"latest_default weights held for versions {weights}")
    # the policy in /config, and kept across a reload
    status, cfg = srv.http.json("GET", "/v2/models/specific/config")
    check(cfg["version_policy"] == {"specific": {"versions": [1, 3]}}, f"config {cfg}")
    status, cfg = srv.http.json("GET", "/v2/models/latest_default/config")
    check(cfg["version_policy"] == {"latest": {"num_versions": 1}}, f"default policy {cfg}")
    status, _, _ = srv.http.request("POST", "/v2/repository/models/latest_two/load")
    check(status == 200, f"reload {status}")
    status, meta = srv.http.json("GET", "/v2/models/latest_two")
    check(meta["versions"] == ["2", "3"], f"after reload {meta}")
    # bad policies: the model does not load, and the reason names the field
    for name, (_, words) in BAD_POLICIES.items():
        entries = [e for e in index if e["name"] == name]
        check(entries and all(e["state"] == "UNAVAILABLE" for e in entries), f"{name}: {entries}")
        for w in words:
            check(all(w in e["reason"] for e in entries), f"{name}: {entries} lacks {w!r}")
        error_of(*srv.http.json("POST", f"/v2/repository/models/{name}/load"), 400, words[0])


# ---- JSON logs and request ids -------------------------------------------------

def t_request_ids(srv):
    status, headers, _ = srv.http.request("GET", "/v2/models/stat",
                                          headers={"X-Request-ID": "test-req-42"})
    check(status == 200 and headers.get("X-Request-ID") == "test-req-42", f"echo {headers}")
    body, _ = infer_body(2)
    status, headers, _ = srv.http.request("POST", "/v2/models/stat/infer", body,
                                          headers={"X-Request-ID": "infer-7 with space"})
    check(status == 200 and headers.get("X-Request-ID") == "infer-7 with space", f"{headers}")
    for bad in ("x" * 129, "tab\there"):
        status, headers, _ = srv.http.request("GET", "/v2/health/live",
                                              headers={"X-Request-ID": bad})
        got = headers.get("X-Request-ID", "")
        check(re.fullmatch(r"[0-9a-f]{32}", got), f"id {bad[:20]!r} not replaced: {got!r}")
    # a long path with bytes that are not UTF-8 and a newline: its access
    # line must still be one line of valid JSON (check_json_log)
    status, headers, _ = srv.http.request("GET", "/v2/models/" + "a" * 3000 + "%ff%0a",
                                          headers={"X-Request-ID": "long-path"})
    check(status == 404 and headers.get("X-Request-ID") == "long-path", f"long path {status}")
    status, _, _ = srv.http.request("GET", "/v2/x%0ay%ff", headers={"X-Request-ID": "odd-path"})
    check(status == 404, f"odd path {status}")
    ids = set()
    for _ in range(5):
        ids.add(srv.http.request("GET", "/v2/health/ready")[1].get("X-Request-ID"))
    check(len(ids) == 5, f"made-up ids repeat: {ids}")


def check_json_log(path):
    lines = open(path, encoding="utf-8").read().splitlines()
    check(lines, "empty log")
    records = []
    for i, line in enumerate(lines):
        try:
            rec = json.loads(line)
        except ValueError:
            raise Failure(f"log line {i + 1} is not JSON: {line!r}")
        check(isinstance(rec, dict), f"line {i + 1} is not an object: {line!r}")
        check(re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z", rec.get("ts", "")),
              f"line {i + 1}: ts {rec.get('ts')!r}")
        check(rec.get("level") in ("debug", "info", "warn", "error"), f"line {i + 1}: {rec}")
        check(isinstance(rec.get("msg"), str), f"line {i + 1}: msg {rec}")
        records.append(rec)
    access = [r for r in records if r["msg"] == "request"]
    mine = [r for r in access if r.get("request_id") == "test-req-42"]
    check(len(mine) == 1, f"access lines for test-req-42: {mine}")
    r = mine[0]
    check(r["method"] == "GET" and r["path"] == "/v2/models/stat" and r["status"] == 200 and
          r["level"] == "info" and r["bytes"] > 0 and 0 <= r["duration_ms"] < 60000,
          f"access line {r}")
    inf = [r for r in access if r.get("request_id") == "infer-7 with space"]
    check(len(inf) == 1 and inf[0]["method"] == "POST" and inf[0]["status"] == 200, f"{inf}")
    check(all("request_id" in r for r in access), "an access line without request_id")
    odd = [r["path"] for r in access if r.get("request_id") == "odd-path"]
    check(odd == ["/v2/x\ny\ufffd"], f"odd path logged as {odd}")
    long = [r for r in access if r.get("request_id") == "long-path"]
    check(len(long) == 1 and long[0]["status"] == 404 and
          long[0]["path"].startswith("/v2/models/aaaa") and len(long[0]["path"]) < 1100,
          f"long path not cut to its budget: {str(long)[:300]}")
    bad = [r for r in records if r["level"] == "error" and "bad_zero" in r["msg"]]
    check(bad and "version_policy" in bad[0]["msg"], "the bad policy's load error is not logged")
    check(any("listening on" in r["msg"] for r in records), "no 'listening on' line")
    check(any(r["msg"] == "stopped" for r in records), "no 'stopped' line")


# ---- API key ---------------------------------------------------------------------

def t_api_key(srv):
    import tritonclient.http as th
    from tritonclient.utils import InferenceServerException
    http = srv.http
    before = metric(http, "slim_http_unauthorized_total")
    check(before == 0, f"unauthorized_total starts at {before}")
    denied = 0
    for headers in ({}, {"Authorization": f"Bearer {KEY}x"}, {"X-API-Key": KEY[:-1]},
                    {"Authorization": KEY}, {"Authorization": f"Basic {KEY}"}):
        status, hdrs, data = http.request("GET", "/v2/models/stat", headers=headers)
        check(status == 401, f"{headers}: {status}")
        check(hdrs.get("WWW-Authenticate") == "Bearer", f"{headers}: headers {hdrs}")
        check("error" in json.loads(data), f"401 body {data!r}")
        denied += 1
    for headers in ({"Authorization": f"Bearer {KEY}"}, {"authorization": f"bearer {KEY}"},
                    {"X-API-Key": KEY}):
        status, _, _ = http.request("GET", "/v2/models/stat", headers=headers)
        check(status == 200, f"{headers}: {status}")
    # every other endpoint too, POST with a body included: refused before it is read
    body, _ = infer_body(1)
    for method, path, b in (("GET", "/v2", None), ("POST", "/v2/models/stat/infer", body),
                            ("POST", "/v2/repository/index", None), ("GET", "/v2/models/stats", None),
                            ("GET", "/v2/debug/memory", None), ("GET", "/nosuch", None)):
        status, _, _ = http.request(method, path, b)
        check(status == 401, f"{method} {path} without a key: {status}")
        denied += 1
        status, _, _ = http.request(method, path, b, headers={"X-API-Key": KEY})
        check(status == (404 if path == "/nosuch" else 200), f"{method} {path} with key: {status}")
    for path in ("/v2/health/live", "/v2/health/ready", "/metrics"):
        status, _, _ = http.request("GET", path)
        check(status == 200, f"{path} is exempt, got {status}")
    check(metric(http, "slim_http_unauthorized_total") == denied,
          f"slim_http_unauthorized_total {metric(http, 'slim_http_unauthorized_total')}, "
          f"denied {denied}")
    # tritonclient with headers=
    c = client(srv.port)
    x = np.ones((1, 4), dtype=np.float32)
    inp = th.InferInput("x", [1, 4], "FP32")
    inp.set_data_from_numpy(x)
    y = c.infer("stat", [inp], headers={"Authorization": f"Bearer {KEY}"}).as_numpy("y")
    check(np.array_equal(y, x + 1), f"tritonclient with key: {y}")
    try:
        c.infer("stat", [inp])
        raise Failure("tritonclient without a key was answered")
    except InferenceServerException as e:
        check("401" in str(e) or "API key" in str(e), f"tritonclient error {e}")


def t_api_key_env_metrics(args, repo):
    """SLIMSERVE_API_KEY from the environment, and --api-key-metrics."""
    os.environ["SLIMSERVE_API_KEY"] = KEY
    try:
        srv = Server(args.slimserve, repo, os.path.join(args.workdir, "server-env.log"),
                     "--api-key-metrics")
    finally:
        del os.environ["SLIMSERVE_API_KEY"]
    try:
        check(srv.http.request("GET", "/v2/models/stat")[0] == 401, "env key not applied")
        check(srv.http.request("GET", "/v2/models/stat", headers={"X-API-Key": KEY})[0] == 200,
              "env key refused")
        check(srv.http.request("GET", "/metrics")[0] == 401, "/metrics open under --api-key-metrics")
        check(metric(srv.http, "slim_http_unauthorized_total",
                     {"Authorization": f"Bearer {KEY}"}) == 2, "401s not counted")
        check(srv.http.request("GET", "/v2/health/ready")[0] == 200, "health needs the key")
    finally:
        check(srv.stop() == 0, "exit code")


def t_text_log_unchanged(path):
    text = open(path).read()
    check("slimserve: loaded model \"stat\"" in text, "text log lost 'loaded model'")
    check("listening on http://" in text, "text log lost 'listening on'")
    check(not any(line.startswith("{") for line in text.splitlines()), "JSON in a text log")
    check(re.search(r"^slimserve: GET /v2/models/stat 401 [\d.]+ ms \d+ bytes request_id=[0-9a-f]{32}$",
                    text, re.M), "no text access line for the 401")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--slimserve", required=True)
    ap.add_argument("--workdir", required=True)
    args = ap.parse_args()
    args.slimserve = os.path.abspath(args.slimserve)
    os.makedirs(args.workdir, exist_ok=True)
    repo = os.path.join(args.workdir, "repo")
    build_repository(repo)
    r = Runner()

    json_log = os.path.join(args.workdir, "server-json.log")
    srv = Server(args.slimserve, repo, json_log, "--log-format", "json", "--workers", "1")
    try:
        r.case("statistics through tritonclient", t_statistics, srv)
        r.case("version policies", t_version_policy, srv)
        r.case("request ids: kept, echoed, made up", t_request_ids, srv)
    finally:
        code = srv.stop()
    r.case("JSON log: exit 0, every line JSON, request ids in access lines",
           lambda: (check(code == 0, f"exit code {code}"), check_json_log(json_log)))

    text_log = os.path.join(args.workdir, "server-key.log")
    srv = Server(args.slimserve, repo, text_log, "--api-key", KEY, "--workers", "1")
    try:
        r.case("API key: 401 without, 200 with either header, health exempt", t_api_key, srv)
    finally:
        srv.stop()
    r.case("text log unchanged, with access lines", t_text_log_unchanged, text_log)
    r.case("SLIMSERVE_API_KEY and --api-key-metrics", t_api_key_env_metrics, args, repo)
    print(f"{r.passed} passed, {r.failed} failed")
    return 1 if r.failed else 0


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""End-to-end test of Triton's shared-memory extensions in slimserve:

    python3 tests/e2e/test_shared_memory.py --slimserve build/bin/slimserve \\
        --workdir /tmp/e2e-shm

The same client script runs through tritonclient.http and tritonclient.grpc
with tritonclient.utils.shared_memory (POSIX objects in /dev/shm):

  * register -> infer with the input and the output in regions -> the
    output region holds what the same request without shared memory
    answers (bit for bit) -> status lists the regions -> unregister
  * an output at an offset inside a larger region; input and output in
    one region
  * bad cases, each a clear error and the server still serving: a region
    too small for the output (refused before the run), an offset past the
    region's end (at infer and at register), an unknown region, an unknown
    key, a bad key, a name registered twice, unregister/status of an
    unknown name
  * inputs are read in place: bytes changed while the request waits in its
    queue are the ones the model reads
  * unregister while a request uses the region: the request (held in its
    model's queue by a batching delay) still answers correctly, the name is
    gone at once, and a later request naming it is refused
  * registering needs the API key (--api-key)
  * CUDA shared memory: without a GPU, status is an empty list and register
    a clear error (with a GPU and cuda-python, a round trip; else skipped)

Only 127.0.0.1 is contacted. Ends with "N passed, N failed"; exits 77 when
slimserve was built without gRPC, non-zero on any failure.
"""

import base64
import os
import shutil
import sys
import threading
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from test_grpc import Server, fresh_args, without_grpc  # noqa: E402  (HTTP and gRPC)
from test_server import (Failure, Http, Runner, add_const_model, check,  # noqa: E402
                         write_json)

import tritonclient.grpc as tg  # noqa: E402
import tritonclient.http as th  # noqa: E402
import tritonclient.utils.shared_memory as shm  # noqa: E402
from tritonclient.utils import InferenceServerException  # noqa: E402

HOST = "127.0.0.1"
SKIP = 77
KEY = "shm-key_0123"
PID = os.getpid()


def build_repository(root):
    shutil.rmtree(root, ignore_errors=True)
    # y = x + 1 on [n, 4], batches up to 8
    add_const_model(os.path.join(root, "add", "1", "model.onnx"), 1)
    write_json(os.path.join(root, "add", "config.json"), {"name": "add", "max_batch_size": 8})
    # the same, held in its queue for 1.5 s waiting for a batch to fill
    add_const_model(os.path.join(root, "slow", "1", "model.onnx"), 2)
    write_json(os.path.join(root, "slow", "config.json"),
               {"name": "slow", "max_batch_size": 8,
                "dynamic_batching": {"max_queue_delay_microseconds": 1500000,
                                     "preferred_batch_size": [8]}})


def error_text(fn, *args, **kw):
    try:
        fn(*args, **kw)
    except InferenceServerException as e:
        return str(e)
    raise Failure(f"{getattr(fn, '__name__', fn)} succeeded where it must fail")


def expect_error(words, fn, *args, **kw):
    msg = error_text(fn, *args, **kw)
    for w in words:
        check(w in msg, f"error {msg!r} does not say {w!r}")
    return msg


class Regions:
    """POSIX shared memory objects made by the client, destroyed at the end."""

    def __init__(self):
        self.handles = []

    def make(self, name, size):
        h = shm.create_shared_memory_region(name, f"/slim_e2e_{PID}_{name}", size)
        self.handles.append(h)
        return h, f"/slim_e2e_{PID}_{name}"

    def close(self):
        for h in self.handles:
            try:
                shm.destroy_shared_memory_region(h)
            except Exception:
                pass


def status_names(client, proto):
    st = client.get_system_shared_memory_status()
    if proto == "http":
        return {r["name"]: r for r in st}
    return {k: {"name": v.name, "key": v.key, "offset": v.offset, "byte_size": v.byte_size}
            for k, v in st.regions.items()}


class Tests:
    def __init__(self, srv):
        self.srv = srv
        self.mods = {"http": th, "grpc": tg}

    def client(self, proto):
        if proto == "http":
            return th.InferenceServerClient(f"{HOST}:{self.srv.port}")
        return tg.InferenceServerClient(f"{HOST}:{self.srv.grpc_port}")

    def plain(self, proto, model, x):
        mod = self.mods[proto]
        i = mod.InferInput("x", list(x.shape), "FP32")
        i.set_data_from_numpy(x)
        return self.client(proto).infer(model, [i]).as_numpy("y")

    def shm_request(self, proto, x, in_region, out_region, out_size, in_offset=0, out_offset=0):
        mod = self.mods[proto]
        i = mod.InferInput("x", list(x.shape), "FP32")
        i.set_shared_memory(in_region, x.nbytes, offset=in_offset)
        o = mod.InferRequestedOutput("y")
        o.set_shared_memory(out_region, out_size, offset=out_offset)
        return [i], [o]

    # ---- the round trip ----

    def t_round_trip(self, proto):
        c = self.client(proto)
        regs = Regions()
        try:
            x = (np.arange(8, dtype=np.float32).reshape(2, 4) * 0.37 - 1.1).astype(np.float32)
            hin, kin = regs.make(f"in_{proto}", x.nbytes)
            hout, kout = regs.make(f"out_{proto}", 4096)
            shm.set_shared_memory_region(hin, [x])
            c.register_system_shared_memory(f"in_{proto}", kin, x.nbytes)
            c.register_system_shared_memory(f"out_{proto}", kout, 4096)
            names = status_names(c, proto)
            check(names.get(f"in_{proto}", {}).get("key") == kin and
                  int(names[f"in_{proto}"]["byte_size"]) == x.nbytes,
                  f"status does not show in_{proto} as registered: {names}")
            want = self.plain(proto, "add", x)
            ins, outs = self.shm_request(proto, x, f"in_{proto}", f"out_{proto}", 64, out_offset=128)
            r = c.infer("add", ins, outputs=outs)
            got = shm.get_contents_as_numpy(hout, np.float32, [2, 4], offset=128)
            check(got.tobytes() == want.tobytes(), f"{proto}: region holds {got}, want {want}")
            if proto == "http":
                p = r.get_output("y").get("parameters", {})
                check(p.get("shared_memory_region") == f"out_{proto}" and
                      p.get("shared_memory_byte_size") == x.nbytes,
                      f"the reply's output parameters are {p}")
                check("data" not in r.get_output("y"), "the reply carries the output's data too")
            # the input and the output in one region: read before written
            ins, outs = self.shm_request(proto, x, f"in_{proto}", f"in_{proto}", x.nbytes)
            c.infer("add", ins, outputs=outs)
            got = shm.get_contents_as_numpy(hin, np.float32, [2, 4])
            check(got.tobytes() == want.tobytes(), f"{proto}: in-place round trip gave {got}")
            c.unregister_system_shared_memory(f"in_{proto}")
            c.unregister_system_shared_memory(f"out_{proto}")
            names = status_names(c, proto)
            check(f"in_{proto}" not in names and f"out_{proto}" not in names,
                  f"still listed after unregister: {names}")
        finally:
            regs.close()

    # ---- bad cases ----

    def t_bad_cases(self, proto):
        c = self.client(proto)
        regs = Regions()
        tag = proto
        try:
            x = np.ones((2, 4), np.float32)
            h, key = regs.make(f"b_{tag}", 64)
            shm.set_shared_memory_region(h, [x])
            c.register_system_shared_memory(f"b_{tag}", key, 64)
            # too small for the output: refused before the run
            ins, outs = self.shm_request(proto, x, f"b_{tag}", f"b_{tag}", 16, out_offset=32)
            expect_error(["output 'y'", "32 bytes", "shared_memory_byte_size", f"b_{tag}"],
                         c.infer, "add", ins, outputs=outs)
            # an offset past the region's end
            ins, outs = self.shm_request(proto, x, f"b_{tag}", f"b_{tag}", 32, in_offset=48)
            expect_error(["input 'x'", "runs past the end", f"b_{tag}"],
                         c.infer, "add", ins, outputs=outs)
            # an unknown region
            ins, outs = self.shm_request(proto, x, f"nope_{tag}", f"b_{tag}", 32)
            expect_error(["input 'x'", f"nope_{tag}"], c.infer, "add", ins, outputs=outs)
            # registering: past the object's end, an unknown key, a bad key, a name twice
            expect_error(["runs past the end"], c.register_system_shared_memory,
                         f"c_{tag}", key, 32, offset=48)
            expect_error(["cannot open", "IPC namespace"], c.register_system_shared_memory,
                         f"d_{tag}", f"/slim_e2e_{PID}_missing", 32)
            expect_error(["key"], c.register_system_shared_memory, f"e_{tag}", "/../etc/passwd", 32)
            expect_error(["region name"], c.register_system_shared_memory, "bad:name", key, 32)
            expect_error(["already registered"], c.register_system_shared_memory,
                         f"b_{tag}", key, 64)
            expect_error([f"x_{tag}"], c.unregister_system_shared_memory, f"x_{tag}")
            expect_error([f"x_{tag}"], c.get_system_shared_memory_status, f"x_{tag}")
            # still serving, and the region still works
            ins, outs = self.shm_request(proto, x, f"b_{tag}", f"b_{tag}", 32, out_offset=32)
            c.infer("add", ins, outputs=outs)
            got = shm.get_contents_as_numpy(h, np.float32, [2, 4], offset=32)
            check(np.array_equal(got, x + 1), f"after the errors the region holds {got}")
            c.unregister_system_shared_memory()  # all
            check(status_names(c, proto) == {}, "unregister of all left regions")
        finally:
            regs.close()

    # Both cases below need a request decoded and waiting in "slow"'s queue
    # (1.5 s delay) when the test acts; nothing shows that from outside, so
    # the test acts 0.5 s after sending and, when the timing shows the
    # request came after the act (a loaded machine), tries again.
    TRIES = 4

    def t_unregister_in_use(self, proto):
        for attempt in range(self.TRIES):
            if self.unregister_in_use(proto, last=attempt == self.TRIES - 1):
                return

    def unregister_in_use(self, proto, last):
        c = self.client(proto)
        regs = Regions()
        try:
            x = (np.arange(8, dtype=np.float32).reshape(2, 4) + 0.5).astype(np.float32)
            h, key = regs.make(f"u_{proto}", 64)
            shm.set_shared_memory_region(h, [x])
            c.register_system_shared_memory(f"u_{proto}", key, 64)
            result = {}

            def run():
                try:
                    ins, outs = self.shm_request(proto, x, f"u_{proto}", f"u_{proto}", 32,
                                                 out_offset=32)
                    self.client(proto).infer("slow", ins, outputs=outs)
                    result["ok"] = True
                except Exception as e:  # noqa: BLE001 - reported below
                    result["error"] = str(e)

            t = threading.Thread(target=run)
            t0 = time.time()
            t.start()
            time.sleep(0.5)  # decoded and waiting in the queue (1.5 s delay)
            c.unregister_system_shared_memory(f"u_{proto}")
            check(f"u_{proto}" not in status_names(c, proto), "still listed after unregister")
            ins, outs = self.shm_request(proto, x, f"u_{proto}", f"u_{proto}", 32)
            expect_error([f"u_{proto}"], c.infer, "add", ins, outputs=outs)
            t.join(30)
            waited = time.time() - t0 > 1.0
            if not last and not (waited and result.get("ok")):
                print(f"  ({proto}: the request was not queued when the region went: "
                      f"{result}; again)", flush=True)
                return False
            check(waited, "the request did not wait in the queue: the case "
                  "did not test unregistering while in use")
            check(result.get("ok"), f"the request in flight failed: {result}")
            got = shm.get_contents_as_numpy(h, np.float32, [2, 4], offset=32)
            check(np.array_equal(got, x + 2), f"the request in flight wrote {got}")
            return True
        finally:
            regs.close()

    def t_read_in_place(self, proto):
        """The input is read from the region when the model runs, not copied when the
        request is decoded: bytes changed while it waits in the queue are the ones used."""
        for attempt in range(self.TRIES):
            if self.read_in_place(proto, last=attempt == self.TRIES - 1):
                return

    def read_in_place(self, proto, last):
        c = self.client(proto)
        regs = Regions()
        try:
            x = np.full((1, 4), 1.25, np.float32)
            h, key = regs.make(f"p_{proto}", 64)
            shm.set_shared_memory_region(h, [x])
            c.register_system_shared_memory(f"p_{proto}", key, 64)
            ins, outs = self.shm_request(proto, x, f"p_{proto}", f"p_{proto}", 16, out_offset=32)
            t = threading.Thread(target=lambda: self.client(proto).infer("slow", ins, outputs=outs))
            t.start()
            time.sleep(0.5)
            shm.set_shared_memory_region(h, [np.full((1, 4), 7.0, np.float32)])
            changed = time.time()
            t.join(30)
            # Answered 1.5 s after it was queued: sooner than 1.2 s after the
            # change, it was queued (decoded) before the change.
            queued_before = time.time() - changed < 1.2
            got = shm.get_contents_as_numpy(h, np.float32, [1, 4], offset=32)
            c.unregister_system_shared_memory(f"p_{proto}")
            if not last and not queued_before:
                print(f"  ({proto}: the request was not queued before the change; again)",
                      flush=True)
                return False
            check(queued_before, "the request was decoded after the change: the case did "
                  "not test reading in place")
            check(np.array_equal(got, np.full((1, 4), 9.0, np.float32)),
                  f"got {got}: the input was copied at decode (want 7 + 2 = 9)")
            return True
        finally:
            regs.close()

    def t_cuda_without_gpu(self, proto):
        c = self.client(proto)
        st = c.get_cuda_shared_memory_status()
        n = len(st) if proto == "http" else len(st.regions)
        check(n == 0, f"CUDA status lists {n} regions")
        handle = base64.b64encode(bytes(64)) if proto == "http" else bytes(64)
        expect_error(["CUDA"], c.register_cuda_shared_memory, "g0", handle, 0, 64)

    def t_extensions(self):
        meta = self.client("http").get_server_metadata()
        check("system_shared_memory" in meta["extensions"], f"extensions: {meta['extensions']}")
        gmeta = self.client("grpc").get_server_metadata()
        check("system_shared_memory" in gmeta.extensions, f"gRPC extensions: {gmeta.extensions}")
        check(("cuda_shared_memory" in meta["extensions"]) ==
              ("cuda_shared_memory" in gmeta.extensions), "the protocols list different extensions")


def t_cuda_round_trip(srv):
    """With a GPU and cuda-python: a CUDA region as the input and the output."""
    try:
        import tritonclient.utils.cuda_shared_memory as cudashm
        h = cudashm.create_shared_memory_region("cg0", 64, 0)
    except Exception as e:  # noqa: BLE001 - no module, no driver, no GPU
        print(f"SKIP cuda_round_trip: {str(e).splitlines()[0][:120] if str(e) else type(e).__name__}")
        return
    try:
        c = th.InferenceServerClient(f"{HOST}:{srv.port}")
        x = np.arange(8, dtype=np.float32).reshape(2, 4)
        cudashm.set_shared_memory_region(h, [x])
        c.register_cuda_shared_memory("cg0", cudashm.get_raw_handle(h), 0, 64)
        i = th.InferInput("x", [2, 4], "FP32")
        i.set_shared_memory("cg0", 32)
        o = th.InferRequestedOutput("y")
        o.set_shared_memory("cg0", 32, offset=32)
        c.infer("add", [i], outputs=[o])
        got = cudashm.get_contents_as_numpy(h, np.float32, [2, 4], offset=32)
        check(np.array_equal(got, x + 1), f"the CUDA region holds {got}")
        c.unregister_cuda_shared_memory("cg0")
    finally:
        cudashm.destroy_shared_memory_region(h)


def t_api_key(args, repo):
    srv = Server(args.slimserve, repo, os.path.join(args.workdir, "server-key.log"), "--api-key", KEY)
    try:
        http = Http(srv.port)
        body = b'{"key": "/slim_none", "byte_size": 16}'
        st, _, _ = http.request("POST", "/v2/systemsharedmemory/region/k/register", body)
        check(st == 401, f"register without the key: {st}")
        st, _, _ = http.request("GET", "/v2/systemsharedmemory/status")
        check(st == 401, f"status without the key: {st}")
        st, _, got = http.request("GET", "/v2/systemsharedmemory/status",
                                  headers={"Authorization": f"Bearer {KEY}"})
        check(st == 200 and got.strip() == b"[]", f"status with the key: {st} {got[:200]}")
    finally:
        srv.stop()


def main():
    args = fresh_args()
    repo = os.path.join(args.workdir, "models")
    build_repository(repo)
    srv = Server(args.slimserve, repo, os.path.join(args.workdir, "server.log"))
    if without_grpc(srv):
        return SKIP
    r = Runner()
    try:
        t = Tests(srv)
        for proto in ("http", "grpc"):
            r.case(f"round_trip_{proto}", t.t_round_trip, proto)
            r.case(f"bad_cases_{proto}", t.t_bad_cases, proto)
            r.case(f"unregister_in_use_{proto}", t.t_unregister_in_use, proto)
            r.case(f"read_in_place_{proto}", t.t_read_in_place, proto)
        r.case("extensions", t.t_extensions)
        if "cuda_shared_memory" not in t.client("http").get_server_metadata()["extensions"]:
            for proto in ("http", "grpc"):
                r.case(f"cuda_without_gpu_{proto}", t.t_cuda_without_gpu, proto)
        else:
            r.case("cuda_round_trip", t_cuda_round_trip, srv)
    finally:
        code = srv.stop()
    r.case("sigterm_exit_0", lambda: check(code == 0, f"exit code {code}"))
    r.case("api_key", t_api_key, args, repo)
    print(f"{r.passed} passed, {r.failed} failed")
    return 1 if r.failed else 0


if __name__ == "__main__":
    sys.exit(main())

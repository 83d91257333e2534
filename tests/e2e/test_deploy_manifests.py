#!/usr/bin/env python3
"""The Kubernetes and KServe manifests in deploy/: valid, and true to slimserve.

    python3 tests/e2e/test_deploy_manifests.py

Needs the kubernetes-validate package (pip), which carries the Kubernetes
JSON schemas and validates offline; exits 77 when it is not importable.

  * every resource in deploy/k8s and deploy/kserve that Kubernetes itself
    defines validates, strictly (no unknown fields), against the schemas of
    the oldest and the newest Kubernetes the package carries;
  * KServe's resources (CRDs, not in those schemas) are checked by
    structure: ClusterServingRuntime offers the onnx and slim formats over
    the v2 protocol, its container validates as a Kubernetes container, the
    InferenceService asks for a format and protocol the runtime offers;
  * and against slimserve: probes on /v2/health/live and /v2/health/ready,
    ports as served, flags that slimserve's --help lists, --memory-limit
    below the container's memory limit with room to spare, a grace period
    covering preStop plus slimserve's drain (--shutdown-grace, default in
    server/main.c), the Dockerfile's user, names that point at each other
    (Service, HPA, PVC, PDB), and kustomization.yaml listing the rest.

Ends with "N passed, N failed"; exits non-zero on any failure.
"""

import glob
import os
import re
import sys

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DEPLOY = os.path.join(REPO, "deploy")
# Room the container needs beyond what --memory-limit caps (deployment.yaml's
# comment says what it is for); a smaller margin fails the check.
MIN_HEADROOM = 256 * 2**20

try:
    import yaml
    import kubernetes_validate
    from kubernetes_validate.utils import all_versions, latest_version
except ImportError as e:
    print(f"SKIP: {e.name} not importable (pip install kubernetes-validate)")
    sys.exit(77)


# The e2e tests' shared case runner and check (test_server.py).
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from test_server import Failure, Runner, check  # noqa: E402


def load_all():
    """{relative path: [resource, ...]} for every YAML file under deploy/."""
    out = {}
    for path in sorted(glob.glob(os.path.join(DEPLOY, "**", "*.yaml"), recursive=True)):
        with open(path, encoding="utf-8") as f:
            out[os.path.relpath(path, REPO)] = [d for d in yaml.safe_load_all(f) if d]
    return out


def by_kind(docs, kind):
    found = [d for ds in docs.values() for d in ds if d.get("kind") == kind]
    check(found, f"no {kind} under deploy/")
    return found


def versions():
    """The oldest and newest Kubernetes whose schemas the package carries."""
    vs = sorted({v.split("-")[0].lstrip("v") for v in all_versions()},
                key=lambda v: tuple(int(x) for x in v.split(".")))
    return [vs[0], latest_version()]


def validate_k8s(doc, what):
    for v in versions():
        try:
            kubernetes_validate.validate(doc, v, strict=True)
        except kubernetes_validate.ValidationError as e:
            path = "/".join(str(p) for p in e.path)
            raise Failure(f"{what}: Kubernetes {v}: {path}: {e.message}") from None


def case_schemas(docs):
    n = 0
    for path, ds in docs.items():
        for d in ds:
            api = d.get("apiVersion", "")
            if api.startswith("serving.kserve.io/") or api.startswith("kustomize.config.k8s.io/"):
                continue
            validate_k8s(d, f"{path} {d.get('kind')}/{d['metadata'].get('name')}")
            n += 1
    check(n >= 6, f"only {n} Kubernetes resources validated")
    print(f"{n} resources valid (strict) for Kubernetes {' and '.join(versions())}", flush=True)


def slimserve_flags():
    """Flags slimserve's usage() lists (server/main.c), taken from the source."""
    text = open(os.path.join(REPO, "server", "main.c"), encoding="utf-8").read()
    usage = re.search(r"static void usage\(.*?\n\}", text, re.S)
    check(usage, "server/main.c: no usage()")
    return set(re.findall(r"(--[a-z][a-z-]*)", usage.group(0)))


def parse_bytes(s):
    m = re.fullmatch(r"(\d+)\s*(Ki|Mi|Gi|KiB|MiB|GiB|K|M|G|KB|MB|GB)?", s)
    check(m, f"cannot read the size {s!r}")
    unit = (m.group(2) or "").rstrip("B")
    mult = {"": 1, "Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "K": 10**3, "M": 10**6, "G": 10**9}
    return int(m.group(1)) * mult[unit]


def check_container(c, what, port, flags):
    """Probes, port, flags and memory of a container that runs slimserve."""
    probes = {k: c.get(k, {}).get("httpGet", {}) for k in ("livenessProbe", "readinessProbe")}
    check(probes["livenessProbe"].get("path") == "/v2/health/live", f"{what}: liveness {probes}")
    check(probes["readinessProbe"].get("path") == "/v2/health/ready", f"{what}: readiness {probes}")
    names = {p.get("name"): p["containerPort"] for p in c.get("ports", [])}
    for k, p in probes.items():
        got = names.get(p["port"], p["port"])
        check(got == port, f"{what}: {k} on port {p['port']}, slimserve serves {port}")
    check(port in names.values(), f"{what}: container port {port} not declared")
    args = list(c.get("command", [])[1:]) + list(c.get("args", []))
    for a in args:
        if a.startswith("--"):
            check(a in flags, f"{what}: slimserve has no flag {a} (its --help lists {sorted(flags)})")
    opts = dict(zip(args[::2], args[1::2]))
    if "--http-port" in opts:
        check(int(opts["--http-port"]) == port, f"{what}: --http-port {opts['--http-port']}")
    check("--memory-limit" in opts, f"{what}: no --memory-limit")
    value = opts["--memory-limit"]
    value = value.split("=", 1)[1] if value.startswith("cpu=") else value
    cap = parse_bytes(value)
    limit = c.get("resources", {}).get("limits", {}).get("memory")
    check(limit, f"{what}: no memory limit")
    room = parse_bytes(limit) - cap
    check(room >= MIN_HEADROOM, f"{what}: --memory-limit {value} leaves {room / 2**20:.0f} MiB "
          f"of the container's {limit}; slimserve needs room outside its allocator")
    check(c.get("resources", {}).get("requests", {}).get("cpu"), f"{what}: no CPU request")
    return opts


def dockerfile_user():
    text = open(os.path.join(REPO, "Dockerfile"), encoding="utf-8").read()
    m = re.findall(r"^USER (\d+)(?::(\d+))?", text, re.M)
    check(m, "Dockerfile: no numeric USER")
    return int(m[-1][0])


def case_deployment(docs):
    dep = by_kind(docs, "Deployment")[0]
    pod = dep["spec"]["template"]
    spec = pod["spec"]
    c = spec["containers"][0]
    check_container(c, "Deployment", 8000, slimserve_flags())
    # The grace period must cover preStop and slimserve's own drain.
    # The drain is --shutdown-grace (default in server/main.c) unless the
    # container sets it, plus under a second to cancel what still runs.
    main_c = open(os.path.join(REPO, "server", "main.c"), encoding="utf-8").read()
    m = re.search(r"\.shutdown_grace_s = (\d+)", main_c)
    check(m, "server/main.c: no default for shutdown_grace_s")
    drain = int(m.group(1)) + 1
    args = c.get("args", []) + c.get("command", [])
    if "--shutdown-grace" in args:
        drain = int(args[args.index("--shutdown-grace") + 1]) + 1
    pre = c.get("lifecycle", {}).get("preStop", {}).get("exec", {}).get("command", [])
    pre_s = int(pre[1]) if len(pre) == 2 and pre[0] == "sleep" else 0
    grace = spec.get("terminationGracePeriodSeconds", 30)
    check(grace > pre_s + drain, f"terminationGracePeriodSeconds {grace} <= preStop {pre_s} s + "
          f"slimserve's drain {drain} s")
    sc = spec.get("securityContext", {})
    check(sc.get("runAsNonRoot") is True and sc.get("runAsUser") == dockerfile_user(),
          f"pod securityContext {sc}, the image runs as {dockerfile_user()}")
    csc = c.get("securityContext", {})
    check(csc.get("readOnlyRootFilesystem") is True and csc.get("allowPrivilegeEscalation") is False,
          f"container securityContext {csc}")
    mounts = {m["mountPath"]: m for m in c.get("volumeMounts", [])}
    check("/models" in mounts and mounts["/models"].get("readOnly"), f"mounts {mounts}")
    vols = {v["name"]: v for v in spec.get("volumes", [])}
    claim = vols[mounts["/models"]["name"]].get("persistentVolumeClaim", {}).get("claimName")
    pvcs = {p["metadata"]["name"] for p in by_kind(docs, "PersistentVolumeClaim")}
    check(claim in pvcs, f"the models volume claims {claim!r}; PVCs here: {pvcs}")
    labels = pod["metadata"]["labels"]
    check(all(labels.get(k) == v for k, v in dep["spec"]["selector"]["matchLabels"].items()),
          "Deployment selector does not match its pods")

    svc = by_kind(docs, "Service")[0]
    check(all(labels.get(k) == v for k, v in svc["spec"]["selector"].items()),
          f"Service selector {svc['spec']['selector']} does not match the pods {labels}")
    names = {p.get("name"): p["containerPort"] for p in c["ports"]}
    check(names.get("grpc") == 8001, f"container ports {names}: gRPC (--grpc-port 8001) missing")
    for p in svc["spec"]["ports"]:
        t = p.get("targetPort", p["port"])
        want = {"metrics": 8002, "grpc": 8001}.get(p.get("name"), 8000)
        check(names.get(t, t) == want, f"Service port {p} does not reach {want}")
    # --metrics-port's default (server/main.c), where the scrape annotation points
    metrics = int(pod["metadata"].get("annotations", {}).get("prometheus.io/port", 0))
    check(metrics == 8002 and 8002 in names.values(),
          f"metrics: annotation port {metrics}, container ports {names}; slimserve serves 8002")

    hpa = by_kind(docs, "HorizontalPodAutoscaler")[0]
    ref = hpa["spec"]["scaleTargetRef"]
    check(ref["kind"] == "Deployment" and ref["name"] == dep["metadata"]["name"],
          f"HPA scales {ref}")
    check(hpa["spec"]["minReplicas"] <= hpa["spec"]["maxReplicas"], "HPA min > max")
    pdb = by_kind(docs, "PodDisruptionBudget")[0]
    check(all(labels.get(k) == v for k, v in pdb["spec"]["selector"]["matchLabels"].items()),
          "PDB selector does not match the pods")
    print(f"--memory-limit under the {c['resources']['limits']['memory']} limit; grace {grace} s "
          f">= preStop {pre_s} s + drain {drain} s", flush=True)


def case_kustomization(docs):
    k = docs.get(os.path.join("deploy", "k8s", "kustomization.yaml"))
    check(k, "no deploy/k8s/kustomization.yaml")
    listed = set(k[0]["resources"])
    present = {os.path.basename(p) for p in docs if p.startswith(os.path.join("deploy", "k8s"))}
    present -= {"kustomization.yaml", "models-loader.yaml"}  # the loader is applied by hand
    check(listed == present, f"kustomization lists {sorted(listed)}; deploy/k8s has {sorted(present)}")


def case_kserve(docs):
    rt = by_kind(docs, "ClusterServingRuntime")[0]
    check(rt["apiVersion"] == "serving.kserve.io/v1alpha1", f"apiVersion {rt['apiVersion']}")
    spec = rt["spec"]
    known = {"supportedModelFormats", "protocolVersions", "containers", "annotations", "labels",
             "multiModel", "disabled", "grpcEndpoint", "grpcDataEndpoint", "httpDataEndpoint",
             "replicas", "storageHelper", "builtInAdapter", "volumes", "nodeSelector",
             "affinity", "tolerations", "imagePullSecrets", "hostIPC", "workerSpec"}
    check(set(spec) <= known, f"unknown ServingRuntime fields {set(spec) - known}")
    formats = {}
    for f in spec["supportedModelFormats"]:
        check(set(f) <= {"name", "version", "autoSelect", "priority"}, f"format fields {f}")
        check(isinstance(f["name"], str) and isinstance(f.get("version", ""), str),
              f"format {f}: name and version are strings")
        check(isinstance(f.get("autoSelect", False), bool), f"format {f}: autoSelect is a boolean")
        if "priority" in f:
            check(isinstance(f["priority"], int) and f["priority"] >= 1 and f.get("autoSelect"),
                  f"format {f}: priority is an integer >= 1, and needs autoSelect")
        formats[f["name"]] = f
    check({"onnx", "slim"} <= set(formats), f"formats {sorted(formats)}")
    check(spec["protocolVersions"] == ["v2", "grpc-v2"], f"protocols {spec['protocolVersions']}")
    for k, v in spec.get("annotations", {}).items():
        check(isinstance(v, str), f"annotation {k} is not a string")
    containers = spec["containers"]
    check(len(containers) == 1 and containers[0]["name"] == "kserve-container",
          "KServe expects one container named kserve-container")
    c = containers[0]
    # The container is a Kubernetes container: validate it inside a Pod.
    validate_k8s({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "x"},
                  "spec": {"containers": [c]}}, "ClusterServingRuntime container")
    opts = check_container(c, "ClusterServingRuntime", 8080, slimserve_flags())
    check(opts.get("--model-repository") == "/mnt/models" and opts.get("--host") == "0.0.0.0",
          f"ClusterServingRuntime args {opts}: KServe puts models in /mnt/models")
    check(spec["annotations"].get("prometheus.kserve.io/port") == opts.get("--metrics-port"),
          f"metrics port: annotation {spec['annotations'].get('prometheus.kserve.io/port')}, "
          f"--metrics-port {opts.get('--metrics-port')}")
    # the server listens only after the repository has loaded
    startup = c.get("startupProbe", {}).get("httpGet", {})
    check(startup.get("path") == "/v2/health/ready" and startup.get("port") == 8080,
          f"ClusterServingRuntime startupProbe {startup}")
    check(opts.get("--grpc-port") == "9000", f"grpc-v2: --grpc-port {opts.get('--grpc-port')}, "
          "KServe's gRPC predictor port is 9000")

    isvc = by_kind(docs, "InferenceService")[0]
    check(isvc["apiVersion"] == "serving.kserve.io/v1beta1", f"apiVersion {isvc['apiVersion']}")
    model = isvc["spec"]["predictor"]["model"]
    check(model["modelFormat"]["name"] in formats, f"InferenceService format {model['modelFormat']}")
    check(model.get("runtime") in (None, rt["metadata"]["name"]), f"runtime {model.get('runtime')}")
    if not formats[model["modelFormat"]["name"]].get("autoSelect"):
        check(model.get("runtime") == rt["metadata"]["name"],
              "format not auto-selected: the InferenceService must name the runtime")
    check(model.get("protocolVersion", "v2") in spec["protocolVersions"], "protocol")
    uri = model.get("storageUri", "")
    m = re.match(r"pvc://([^/]+)/", uri)
    if m:
        pvcs = {p["metadata"]["name"] for p in by_kind(docs, "PersistentVolumeClaim")}
        check(m.group(1) in pvcs, f"storageUri {uri}: no such PVC here ({pvcs})")


def case_negative():
    """The validator refuses what it should, so a pass means something."""
    bad = {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "x"},
           "spec": {"selector": {}, "template": {"spec": {"containers": [
               {"name": "c", "image": "i", "livenesProbe": {}}]}}}}
    try:
        validate_k8s(bad, "misspelt probe")
    except Failure:
        return
    raise Failure("a misspelt field validated")


def main():
    docs = load_all()
    r = Runner()
    r.case("Kubernetes schemas (strict)", case_schemas, docs)
    r.case("validator refuses a misspelt field", case_negative)
    r.case("Deployment, Service, HPA, PDB against slimserve", case_deployment, docs)
    r.case("kustomization lists every resource", case_kustomization, docs)
    r.case("KServe ClusterServingRuntime and InferenceService", case_kserve, docs)
    print(f"{r.passed} passed, {r.failed} failed")
    return 1 if r.failed else 0


if __name__ == "__main__":
    sys.exit(main())

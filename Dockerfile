# slimserve on the CPU: `docker build -t slimserve .` (or `make image`, which
# also works with Podman and without a registry; docs/deploy.md).
#
# Two stages. "build" compiles slim and slimserve with Debian's toolchain;
# the final stage holds the two binaries and the shared libraries they load
# (protobuf-c, OpenBLAS, libmicrohttpd, cJSON, ImageDecoder's image codecs, RE2)
# and no compiler. It runs as an unprivileged user and serves the model
# repository mounted at /models on 0.0.0.0:8000:
#
#   docker run --rm -p 8000:8000 -v "$PWD/models:/models:ro" slimserve
#   docker run --rm -p 8000:8000 -v ... slimserve --memory-limit 1536MiB
#
# Arguments after the image name are appended to slimserve's command line
# (a flag given twice takes its last value). SIGTERM lets in-flight requests
# finish for up to 60 s: stop with `docker stop -t 70`.

# Any Debian 12 image; `make image` passes a local one when none can be pulled.
ARG BASE=debian:12-slim

# ONEDNN=1 builds the fused convolutions on oneDNN (kernels/cpu/conv_dnnl.c):
# faster CNNs, and 40 MB more image (libdnnl2), past the 150 MB the default
# image keeps under. Without it convolutions run as im2col + OpenBLAS.
ARG ONEDNN=0

FROM ${BASE} AS build
ARG ONEDNN
ENV DEBIAN_FRONTEND=noninteractive
# `check` is not linked into the programs, but configure asks for it (unit tests).
RUN apt-get update \
 && apt-get install -y --no-install-recommends \
        build-essential cmake pkg-config \
        libprotobuf-c-dev protobuf-c-compiler libopenblas-dev \
        libmicrohttpd-dev libcjson-dev check zlib1g-dev \
        libjpeg62-turbo-dev libpng-dev libtiff-dev libwebp-dev libopenjp2-7-dev libre2-dev \
        python3 python3-venv \
 && if [ "$ONEDNN" = 1 ]; then apt-get install -y --no-install-recommends libdnnl-dev; fi \
 && rm -rf /var/lib/apt/lists/*
# Configure takes onnx.proto (and checks for the node tests) from the onnx
# package, pinned as scripts/install-deps.sh pins it. Behind a proxy that
# re-signs TLS, pip needs that proxy's CA: scripts/image.sh passes the
# host's bundle (PIP_CERT or SSL_CERT_FILE) as the build secret pip-ca;
# without it pip uses its own. Secrets stay out of the image's layers.
RUN --mount=type=secret,id=pip-ca \
    python3 -m venv /opt/onnx \
 && if [ -s /run/secrets/pip-ca ]; then export PIP_CERT=/run/secrets/pip-ca; fi \
 && /opt/onnx/bin/pip install --no-cache-dir --disable-pip-version-check onnx==1.22.0
WORKDIR /src
COPY . .
RUN cmake -S . -B /build -DCMAKE_BUILD_TYPE=RelWithDebInfo -DSLIM_CUDA=OFF \
        -DPython3_EXECUTABLE=/opt/onnx/bin/python \
 && cmake --build /build -j "$(nproc)" --target slim slimserve \
 && strip /build/bin/slim /build/bin/slimserve \
 && /build/bin/slimserve --help >/dev/null

FROM ${BASE}
ARG ONEDNN
# libopenblas0-pthread is the variant the build links against (slimserve
# runs OpenBLAS single-threaded inside its own workers). The image codecs
# (ImageDecoder: JPEG, PNG, TIFF, WebP, JPEG 2000) add 3.7 MB installed,
# with libtiff's libdeflate0, libjbig0 and liblerc4.
RUN apt-get update \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \
        libprotobuf-c1 libopenblas0-pthread libmicrohttpd12 libcjson1 \
        libjpeg62-turbo libpng16-16 libtiff6 libwebp7 libopenjp2-7 libre2-9 \
 && if [ "$ONEDNN" = 1 ]; then apt-get install -y --no-install-recommends libdnnl2; fi \
 && rm -rf /var/lib/apt/lists/* /var/cache/apt/* /var/log/apt /var/log/dpkg.log \
 && groupadd --gid 10001 slim \
 && useradd --uid 10001 --gid 10001 --home-dir /nonexistent --no-create-home \
        --shell /usr/sbin/nologin slim \
 && mkdir /models
COPY --from=build /build/bin/slim /build/bin/slimserve /usr/local/bin/
COPY deploy/docker/ready.sh /usr/local/bin/slimserve-ready
# Once glibc's dynamic mmap threshold has risen, freed allocator segments
# stay in its heap and RSS grows past what --memory-limit counts, towards the
# container's limit (docs/memory.md, "Soak"); a fixed threshold gives them back.
ENV MALLOC_MMAP_THRESHOLD_=131072
# Build facts last, so a new date or revision rebuilds no layer before it.
ARG BASE
ARG VERSION=0.1.0
ARG REVISION=unknown
ARG CREATED=unknown
LABEL org.opencontainers.image.title="slimserve" \
      org.opencontainers.image.description="KServe v2 / Triton-compatible ONNX inference server in C (CPU)" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.revision="${REVISION}" \
      org.opencontainers.image.created="${CREATED}" \
      org.opencontainers.image.base.name="${BASE}"
# Numeric, so Kubernetes' runAsNonRoot can check it without /etc/passwd.
USER 10001:10001
EXPOSE 8000 8001
STOPSIGNAL SIGTERM
HEALTHCHECK --interval=10s --timeout=3s --start-period=60s --retries=3 \
    CMD ["/usr/local/bin/slimserve-ready", "8000"]
ENTRYPOINT ["/usr/local/bin/slimserve", "--model-repository", "/models", \
            "--host", "0.0.0.0", "--http-port", "8000"]
CMD []

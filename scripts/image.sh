#!/usr/bin/env bash
# Builds slimserve's container images with Docker, or with Podman where no
# Docker daemon answers.
#
#   scripts/image.sh build [cpu|cuda]  build Dockerfile (cpu, the default) or
#                                      Dockerfile.cuda and tag it $IMAGE
#   scripts/image.sh check             can an image be built and run here? Picks the
#                                      engine, finds or makes the base, runs it once
#   scripts/image.sh base              print the CPU image's base, making it if needed
#   scripts/image.sh engine            print the engine in use (docker or podman)
#   scripts/image.sh cli ARGS...       run that engine with ARGS and the settings
#                                      this script uses (e.g. `cli run --rm -p ...`)
#
# Environment:
#   ENGINE         docker or podman (default: docker when its daemon answers, else podman)
#   IMAGE          the tag to build (default slimserve:latest, slimserve:cuda for cuda)
#   BASE           the CPU image's base (default docker.io/library/debian:12-slim).
#                  When the default cannot be pulled (no registry reachable), a
#                  Debian 12 base is made with debootstrap from Debian's archive and
#                  imported as localhost/debian:12-debootstrap
#   DEBIAN_MIRROR  debootstrap's mirror (default http://deb.debian.org/debian)
#   PIP_CERT, SSL_CERT_FILE  a CA bundle handed to pip in the build stage (as the
#                  build secret pip-ca), for proxies that re-sign TLS
#
# Exit status: 0 done, 1 the build or a command failed, 2 usage, 3 nothing here
# can build or run images (no engine, no base): the reason is printed.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD

DEFAULT_BASE=docker.io/library/debian:12-slim
LOCAL_BASE=localhost/debian:12-debootstrap
DEBIAN_MIRROR=${DEBIAN_MIRROR:-http://deb.debian.org/debian}
STATE=${SLIM_IMAGE_STATE:-$ROOT/build/image}

die() { echo "image.sh: $*" >&2; exit 1; }
unavailable() { echo "image.sh: $*" >&2; exit 3; }
say() { echo "image.sh: $*" >&2; }

# ---- the engine --------------------------------------------------------------
pick_engine() {
    if [ -n "${ENGINE:-}" ]; then
        case "$ENGINE" in docker | podman) ;; *) die "ENGINE must be docker or podman" ;; esac
        command -v "$ENGINE" >/dev/null || unavailable "ENGINE=$ENGINE but $ENGINE is not installed"
        if [ "$ENGINE" = docker ] && ! timeout 20 docker info >/dev/null 2>&1; then
            unavailable "ENGINE=docker but no Docker daemon answers"
        fi
    elif command -v docker >/dev/null && timeout 20 docker info >/dev/null 2>&1; then
        ENGINE=docker
    elif command -v podman >/dev/null; then
        ENGINE=podman
    else
        unavailable "no Docker daemon answers and Podman is not installed" \
            "(Debian: apt-get install podman runc)"
    fi
    if [ "$ENGINE" = podman ]; then
        podman_settings
    fi
}

# Podman reads its settings from containers.conf. Unless the caller chose
# one (CONTAINERS_CONF), write one that fits this machine:
#  - runc when installed: crun refuses hybrid cgroup v1/v2 hosts, runc runs
#    on all of them;
#  - without systemd as init, cgroupfs and a file for events (the systemd
#    cgroup manager and journald are not there);
#  - the host's hard limits on open files and processes as the containers'
#    limits: Podman's defaults for root (1048576) are above many hosts' hard
#    limits, and then no container starts. Podman itself was seen running
#    with no more processes than kernel.pid_max, so nproc stays under that.
podman_settings() {
    [ -n "${CONTAINERS_CONF:-}" ] && return 0
    mkdir -p "$STATE"
    local conf="$STATE/containers.conf" nofile nproc pid_max ulimits=()
    nofile=$(ulimit -Hn)
    nproc=$(ulimit -Hu)
    pid_max=$(cat /proc/sys/kernel/pid_max 2>/dev/null || echo unlimited)
    if [ "$pid_max" != unlimited ] && { [ "$nproc" = unlimited ] || [ "$nproc" -gt "$pid_max" ]; }; then
        nproc=$pid_max
    fi
    [ "$nofile" != unlimited ] && ulimits+=("\"nofile=$nofile:$nofile\"")
    [ "$nproc" != unlimited ] && ulimits+=("\"nproc=$nproc:$nproc\"")
    {
        echo "# Written by scripts/image.sh for this machine; see the comments there."
        echo "[containers]"
        if [ ${#ulimits[@]} -gt 0 ]; then
            (IFS=,; echo "default_ulimits = [${ulimits[*]}]")
        fi
        echo "[engine]"
        if command -v runc >/dev/null; then echo 'runtime = "runc"'; fi
        if [ ! -d /run/systemd/system ]; then
            echo 'cgroup_manager = "cgroupfs"'
            echo 'events_logger = "file"'
        fi
    } >"$conf.tmp"
    mv "$conf.tmp" "$conf"
    export CONTAINERS_CONF=$conf
}

engine() { "$ENGINE" "$@"; }
have_image() { engine image inspect "$1" >/dev/null 2>&1; }

# ---- the base ----------------------------------------------------------------
# The official image when a registry gives it; otherwise a Debian 12 made
# here by debootstrap from Debian's archive (which must be reachable).
find_base() {
    if [ -n "${BASE:-}" ]; then
        have_image "$BASE" || timeout 600 "$ENGINE" pull "$BASE" >&2 \
            || die "cannot pull BASE=$BASE"
        return 0
    fi
    BASE=$DEFAULT_BASE
    if have_image "$BASE"; then return 0; fi
    if timeout 120 "$ENGINE" pull "$BASE" >"$STATE/pull.log" 2>&1; then return 0; fi
    say "cannot pull $BASE ($(tail -1 "$STATE/pull.log")); using a Debian 12 base made with debootstrap"
    BASE=$LOCAL_BASE
    have_image "$BASE" || make_debian_base
}

make_debian_base() {
    command -v debootstrap >/dev/null \
        || unavailable "no registry gives $DEFAULT_BASE and debootstrap is not installed (apt-get install debootstrap)"
    [ "$(id -u)" = 0 ] || unavailable "no registry gives $DEFAULT_BASE and debootstrap needs root"
    local rootfs
    rootfs=$(mktemp -d "${TMPDIR:-/var/tmp}/slim-debian.XXXXXX")
    # shellcheck disable=SC2064
    trap "rm -rf '$rootfs'" EXIT
    say "debootstrap bookworm from $DEBIAN_MIRROR (a few minutes)"
    debootstrap --variant=minbase bookworm "$rootfs" "$DEBIAN_MIRROR" >"$STATE/debootstrap.log" 2>&1 || {
        tail -20 "$STATE/debootstrap.log" >&2
        unavailable "debootstrap failed (log: $STATE/debootstrap.log)"
    }
    slim_rootfs "$rootfs"
    tar --numeric-owner -C "$rootfs" -c . | engine import \
        --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
        --change 'CMD ["bash"]' - "$LOCAL_BASE" >&2
    rm -rf "$rootfs"
    trap - EXIT
    say "made $LOCAL_BASE"
}

# Brings a minbase tree close to the official slim image: the release's
# updates and security suites, no package lists, caches, manuals, docs
# (copyright files kept) or translations, and dpkg told to leave those out
# of what the images install later.
slim_rootfs() {
    local r=$1
    rm -f "$r/etc/apt/sources.list"
    cat >"$r/etc/apt/sources.list.d/debian.sources" <<EOF
Types: deb
URIs: ${DEBIAN_MIRROR}
Suites: bookworm bookworm-updates
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg

Types: deb
URIs: ${DEBIAN_MIRROR%/debian}/debian-security
Suites: bookworm-security
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
EOF
    cat >"$r/etc/dpkg/dpkg.cfg.d/slim-excludes" <<'EOF'
# Images carry no manuals, docs or translations (copyright files stay).
path-exclude /usr/share/doc/*
path-include /usr/share/doc/*/copyright
path-exclude /usr/share/man/*
path-exclude /usr/share/info/*
path-exclude /usr/share/locale/*
path-exclude /usr/share/lintian/*
EOF
    cat >"$r/etc/apt/apt.conf.d/slim-no-cache" <<'EOF'
// Downloaded .debs are not kept in image layers.
APT::Keep-Downloaded-Packages "false";
EOF
    find "$r/usr/share/doc" -mindepth 1 -not -name copyright -not -type d -delete
    find "$r/usr/share/doc" -mindepth 1 -type d -empty -delete
    rm -rf "$r"/usr/share/man/* "$r"/usr/share/info/* "$r"/usr/share/locale/* \
        "$r"/usr/share/lintian/* "$r"/var/lib/apt/lists/* "$r"/var/cache/apt/* \
        "$r"/var/log/*.log "$r"/var/log/apt/*
    # The engine provides these at run time; the host's must not be baked in.
    rm -f "$r/etc/resolv.conf" "$r/etc/hostname"
    : >"$r/etc/resolv.conf"
}

# ---- building ----------------------------------------------------------------
build() {
    local flavour=${1:-cpu} file args=()
    case "$flavour" in
    cpu) file=Dockerfile; IMAGE=${IMAGE:-slimserve:latest} ;;
    cuda) file=Dockerfile.cuda; IMAGE=${IMAGE:-slimserve:cuda} ;;
    *) echo "usage: scripts/image.sh build [cpu|cuda]" >&2; exit 2 ;;
    esac
    if [ "$flavour" = cpu ]; then
        find_base
        args+=(--build-arg "BASE=$BASE")
    fi
    local version revision
    version=$(sed -n 's/^project(slimserve VERSION \([0-9.]*\).*/\1/p' CMakeLists.txt)
    revision=$(git rev-parse HEAD 2>/dev/null || echo unknown)
    # The context is the work tree, so say when it differs from the commit.
    if [ "$revision" != unknown ] && ! git diff --quiet HEAD 2>/dev/null; then
        revision="$revision-dirty"
    fi
    args+=(--build-arg "VERSION=$version" --build-arg "REVISION=$revision"
        --build-arg "CREATED=$(date -u +%Y-%m-%dT%H:%M:%SZ)")
    if [ "$ENGINE" = podman ]; then
        # Docker's format keeps HEALTHCHECK (the OCI format has no field for it).
        args+=(--format docker)
    fi
    # pip in the build stage trusts what pip trusts here (a proxy's CA).
    local ca=${PIP_CERT:-${SSL_CERT_FILE:-}}
    if [ -n "$ca" ] && [ -s "$ca" ]; then
        args+=(--secret "id=pip-ca,src=$ca")
    fi
    say "$ENGINE build -f $file -t $IMAGE ${args[*]}"
    engine build -f "$file" -t "$IMAGE" "${args[@]}" . || die "$ENGINE build failed"
    say "built $IMAGE ($(engine image inspect --format '{{.Size}}' "$IMAGE") bytes)"
}

check() {
    find_base
    local out
    out=$(engine run --rm "$BASE" true 2>&1) \
        || unavailable "$ENGINE cannot run a container here: $(echo "$out" | tail -3)"
    echo "$ENGINE $BASE"
}

cmd=${1:-build}
[ $# -gt 0 ] && shift
case "$cmd" in
build) pick_engine; mkdir -p "$STATE"; build "$@" ;;
check) pick_engine; mkdir -p "$STATE"; check ;;
base) pick_engine; mkdir -p "$STATE"; find_base; echo "$BASE" ;;
engine) pick_engine; echo "$ENGINE" ;;
cli) pick_engine; exec "$ENGINE" "$@" ;;
*) sed -n '2,/^set -e/p' "$0" | sed '$d; s/^# \{0,1\}//' >&2; exit 2 ;;
esac

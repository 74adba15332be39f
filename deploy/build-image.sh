#!/usr/bin/env bash
# Builds the entrokv container image from Dockerfile with podman or
# docker, whichever works here (installs podman with apt when neither does and
# we are root).
#
#   deploy/build-image.sh                 # entrokv:VERSION (CPU)
#   deploy/build-image.sh --skip-tests    # same, without building/running ctest
#   deploy/build-image.sh --cuda          # entrokv-cuda:VERSION (see below)
#
# Options:
#   --skip-tests         RUN_TESTS=0: build only entrokv-server and entrokv-loadgen
#   --cuda               CUDA=1, tag entrokv-cuda:VERSION. BUILD_BASE must be a
#                        Debian 12 image with the CUDA toolkit at /usr/local/cuda,
#                        or pass --cuda-apt (NVIDIA's Debian 12 apt repository), or
#                        --cuda-home DIR (podman only: bind-mounts a toolkit
#                        from this machine into the build, read-only)
#   --cuda-apt           with --cuda: CUDA_APT=1
#   --cuda-home DIR      with --cuda: mount DIR at /usr/local/cuda during the build
#   --tag NAME:TAG       image name (default entrokv[-cuda]:VERSION, VERSION from
#                        CMakeLists.txt)
#   --local-base         do not try a registry: make the Debian 12 base with
#                        debootstrap even if docker.io answers
# Environment:
#   BUILD_BASE, RUNTIME_BASE  base images (default: debian:12 / debian:12-slim
#                        from the registry; when it is unreachable, a local
#                        localhost/debian:12 made with debootstrap for both)
#   DEBIAN_MIRROR        for debootstrap (default http://deb.debian.org/debian)
#   ENTROKV_ENGINE, ENTROKV_STORAGE_DRIVER: see deploy/container-env.sh
set -euo pipefail
cd "$(dirname "$0")/.."
ENTROKV_LOG_PREFIX=build-image
# shellcheck source=deploy/container-env.sh
source deploy/container-env.sh

version=$(sed -n 's/^project(entrokv VERSION \([0-9.]*\).*/\1/p' CMakeLists.txt)
[[ -n $version ]] || { entrokv_log "cannot read the version from CMakeLists.txt"; exit 1; }

run_tests=1 cuda=0 cuda_apt=0 cuda_home="" tag="" local_base=0
while [[ $# -gt 0 ]]; do
  case $1 in
    --skip-tests) run_tests=0 ;;
    --cuda) cuda=1 ;;
    --cuda-apt) cuda_apt=1 ;;
    --cuda-home) cuda_home=$2; shift ;;
    --tag) tag=$2; shift ;;
    --local-base) local_base=1 ;;
    -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    *) entrokv_log "unknown option $1 (see --help)"; exit 2 ;;
  esac
  shift
done
if [[ -z $tag ]]; then
  if [[ $cuda == 1 ]]; then tag=entrokv-cuda:$version; else tag=entrokv:$version; fi
fi

entrokv_pick_engine

image_exists() { "${ENGINE[@]}" image inspect "$1" >/dev/null 2>&1; }

# Makes localhost/debian:12 from Debian's own mirror (no registry needed).
make_local_base() {
  local name=localhost/debian:12
  if image_exists "$name"; then
    entrokv_log "using the existing local base $name"
    return
  fi
  if ! command -v debootstrap >/dev/null 2>&1; then
    [[ $(id -u) -eq 0 ]] || { entrokv_log "debootstrap is missing (apt-get install debootstrap)"; exit 1; }
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends debootstrap >&2
  fi
  local dir
  dir=$(mktemp -d /var/tmp/entrokv-debian12.XXXXXX)
  entrokv_log "making $name with debootstrap in $dir (a few minutes)"
  debootstrap --variant=minbase bookworm "$dir/rootfs" \
    "${DEBIAN_MIRROR:-http://deb.debian.org/debian}" >"$dir/debootstrap.log" 2>&1 ||
    { tail -n 20 "$dir/debootstrap.log"; exit 1; }
  # What debian:12-slim leaves out, and the bootstrap's own caches.
  rm -rf "$dir"/rootfs/var/cache/apt/archives/*.deb "$dir"/rootfs/var/lib/apt/lists/* \
    "$dir"/rootfs/usr/share/doc/* "$dir"/rootfs/usr/share/man/* \
    "$dir"/rootfs/usr/share/info/* "$dir"/rootfs/usr/share/locale/*
  tar -C "$dir/rootfs" -c . | "${ENGINE[@]}" import \
    --change 'CMD ["/bin/bash"]' - "$name" >/dev/null
  rm -rf "$dir"
  entrokv_log "made $name"
}

if [[ -z ${BUILD_BASE:-} || -z ${RUNTIME_BASE:-} ]]; then
  registry_ok=0
  if [[ $local_base == 0 ]]; then
    if image_exists docker.io/library/debian:12 && image_exists docker.io/library/debian:12-slim; then
      registry_ok=1
    elif timeout 90 "${ENGINE[@]}" pull -q docker.io/library/debian:12 >/dev/null 2>&1 &&
         timeout 90 "${ENGINE[@]}" pull -q docker.io/library/debian:12-slim >/dev/null 2>&1; then
      registry_ok=1
    else
      entrokv_log "docker.io is not reachable: making the Debian 12 base locally"
    fi
  fi
  if [[ $registry_ok == 1 ]]; then
    : "${BUILD_BASE:=docker.io/library/debian:12}"
    : "${RUNTIME_BASE:=docker.io/library/debian:12-slim}"
  else
    make_local_base
    : "${BUILD_BASE:=localhost/debian:12}"
    : "${RUNTIME_BASE:=localhost/debian:12}"
  fi
fi

args=(build -f Dockerfile -t "$tag"
  --build-arg "BUILD_BASE=$BUILD_BASE" --build-arg "RUNTIME_BASE=$RUNTIME_BASE"
  --build-arg "RUN_TESTS=$run_tests" --build-arg "CUDA=$cuda"
  --build-arg "CUDA_APT=$cuda_apt")
if [[ ${ENGINE[0]} == podman ]]; then
  # Keep base images that exist only locally: never pull them.
  args+=(--pull=never)
  # Podman drops the build's seccomp/ulimit defaults from CONTAINERS_CONF too.
fi
if [[ -n $cuda_home ]]; then
  [[ $cuda == 1 ]] || { entrokv_log "--cuda-home needs --cuda"; exit 2; }
  [[ ${ENGINE[0]} == podman ]] || { entrokv_log "--cuda-home needs podman (docker build has no -v)"; exit 2; }
  [[ -x $cuda_home/bin/nvcc ]] || { entrokv_log "no nvcc in $cuda_home/bin"; exit 2; }
  args+=(-v "$(readlink -f "$cuda_home"):/usr/local/cuda:ro")
fi
[[ -n ${DOCKER_BUILDKIT:-} || ${ENGINE[0]} != docker ]] || export DOCKER_BUILDKIT=1

entrokv_log "building $tag (RUN_TESTS=$run_tests CUDA=$cuda) from $BUILD_BASE / $RUNTIME_BASE"
start=$(date +%s)
"${ENGINE[@]}" "${args[@]}" .
entrokv_log "built $tag in $(( $(date +%s) - start )) s"
"${ENGINE[@]}" image inspect "$tag" --format '{{.Size}}' 2>/dev/null |
  awk -v t="$tag" '{ printf "build-image: %s is %.0f MB\n", t, $1 / 1e6 }' >&2 || true

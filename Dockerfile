# syntax=docker/dockerfile:1
# entrokv-server container: build on Debian 12 with Debian's own gRPC,
# protobuf, Abseil, spdlog and civetweb packages (those of
# scripts/install-deps.sh), then run the server as uid/gid 10001 in a runtime image that
# holds only entrokv-server, entrokv-loadgen and the Debian packages of the
# shared libraries those two binaries load.
#
# Build from the repository root (deploy/build-image.sh does this, and makes
# the Debian base locally when no registry is reachable):
#   docker build -t entrokv:0.1.0 .
#   docker build --build-arg CUDA=1 \
#     --build-arg BUILD_BASE=<Debian 12 image with the CUDA toolkit in /usr/local/cuda> \
#     -t entrokv-cuda:0.1.0 .
#
# Build arguments:
#   BUILD_BASE    base of the build stage; Debian 12 (bookworm). Default debian:12.
#   RUNTIME_BASE  base of the runtime stage; Debian 12. Default debian:12-slim.
#   RUN_TESTS     1 (default): build the test suites and run ctest during the
#                 build; 0: build only the two binaries (faster).
#   CUDA          0 (default): CPU image. 1: build the CUDA backend. nvcc must be
#                 at /usr/local/cuda/bin/nvcc in BUILD_BASE (CUDA 12.x or 13.x for
#                 Debian 12), or CUDA_APT=1 installs it from NVIDIA's Debian 12
#                 apt repository. The CUDA runtime is linked statically
#                 (CUDA::cudart_static), so the runtime stage needs no CUDA
#                 library: the NVIDIA container toolkit mounts the driver's
#                 libcuda.so into the container at start.
#   CUDA_APT      1: with CUDA=1 and no nvcc in BUILD_BASE, install
#                 cuda-nvcc/cuda-cudart-dev/cuda-cccl CUDA_APT_VERSION (default 13-0)
#                 from developer.download.nvidia.com.
#   CUDA_ARCHITECTURES  CMake CUDA architectures (default "80;90").

ARG BUILD_BASE=debian:12
ARG RUNTIME_BASE=debian:12-slim

FROM ${BUILD_BASE} AS build
ARG RUN_TESTS=1
ARG CUDA=0
ARG CUDA_APT=0
ARG CUDA_APT_VERSION=13-0
ARG CUDA_ARCHITECTURES=80;90
RUN apt-get update \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \
      build-essential cmake ninja-build ccache pkg-config ca-certificates \
      libabsl-dev libgrpc++-dev libprotobuf-dev protobuf-compiler \
      protobuf-compiler-grpc libspdlog-dev libfmt-dev libcivetweb-dev \
      openssl libssl-dev \
      $([ "$RUN_TESTS" = 1 ] && echo libgtest-dev libgmock-dev python3 python3-yaml) \
      $([ "$CUDA" = 1 ] && [ "$CUDA_APT" = 1 ] && echo curl) \
 && if [ "$CUDA" = 1 ] && [ ! -x /usr/local/cuda/bin/nvcc ]; then \
      if [ "$CUDA_APT" != 1 ]; then \
        echo "CUDA=1: no nvcc at /usr/local/cuda/bin/nvcc in BUILD_BASE; use a Debian 12 base with the CUDA toolkit, or --build-arg CUDA_APT=1" >&2; \
        exit 1; \
      fi; \
      curl -fsSLo /tmp/cuda-keyring.deb \
        https://developer.download.nvidia.com/compute/cuda/repos/debian12/x86_64/cuda-keyring_1.1-1_all.deb \
      && dpkg -i /tmp/cuda-keyring.deb && apt-get update \
      && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \
           cuda-nvcc-${CUDA_APT_VERSION} cuda-cudart-dev-${CUDA_APT_VERSION} \
           cuda-cccl-${CUDA_APT_VERSION} \
      && ln -sfn "$(ls -d /usr/local/cuda-* | sort -V | tail -n 1)" /usr/local/cuda; \
    fi \
 && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY . .
# ccache: a cache mount keeps objects between image builds (BuildKit and
# podman/buildah both support it); /src as base dir keeps the keys relative.
# The build folder is /src/build, as in a checkout: with ccache's base dir,
# __FILE__ is then "../server/main.cc", which --help's own-flag filter expects
# (a build folder outside the tree made it "../src/server/main.cc" and --help
# listed no flags).
ENV CCACHE_DIR=/root/.ccache CCACHE_BASEDIR=/src CCACHE_COMPILERCHECK=content
RUN --mount=type=cache,target=/root/.ccache \
    set -e; \
    cuda=OFF; [ "$CUDA" = 1 ] && cuda=ON; \
    tests=OFF; [ "$RUN_TESTS" = 1 ] && tests=ON; \
    cmake -S . -B /src/build -G Ninja \
      -DCMAKE_BUILD_TYPE=Release \
      -DENTROKV_BUILD_BENCH=OFF \
      -DENTROKV_BUILD_TESTS=$tests \
      -DENTROKV_ENABLE_CUDA=$cuda \
      "-DCMAKE_CUDA_ARCHITECTURES=$CUDA_ARCHITECTURES"; \
    if [ "$CUDA" = 1 ] && ! grep -q '^CMAKE_CUDA_FLAGS:' /src/build/CMakeCache.txt; then \
      echo "CUDA=1 but CMake found no CUDA compiler" >&2; exit 1; \
    fi; \
    if [ "$RUN_TESTS" = 1 ]; then \
      cmake --build /src/build; \
      ctest --test-dir /src/build --output-on-failure -j"$(nproc)"; \
    else \
      cmake --build /src/build --target entrokv-server entrokv_loadgen; \
    fi; \
    ccache --show-stats | head -n 5 || true
# Stage the two binaries, stripped, and name the Debian packages that own
# every shared library they load; the runtime stage installs exactly those.
RUN set -e; \
    mkdir -p /stage/usr/local/bin; \
    install -s -m 0755 /src/build/server/entrokv-server /src/build/tools/loadgen/entrokv-loadgen \
      /stage/usr/local/bin/; \
    for bin in /stage/usr/local/bin/*; do ldd "$bin"; done \
      | awk '$2 == "=>" && $3 ~ /^\// { print $3 }' | sort -u \
      | while read -r lib; do \
          owner=$(dpkg -S "$lib" 2>/dev/null || dpkg -S "/usr$lib" 2>/dev/null \
                  || dpkg -S "$(readlink -f "$lib")" 2>/dev/null) \
            || { echo "no Debian package owns $lib" >&2; exit 1; }; \
          echo "$owner" | head -n 1 | cut -d: -f1; \
        done | sort -u > /stage/runtime-packages; \
    echo "runtime packages: $(tr '\n' ' ' < /stage/runtime-packages)"

FROM ${RUNTIME_BASE} AS runtime
COPY --from=build /stage/runtime-packages /tmp/runtime-packages
RUN apt-get update \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \
      $(cat /tmp/runtime-packages) \
 && rm -rf /var/lib/apt/lists/* /var/cache/apt/* /tmp/runtime-packages \
      /usr/share/doc/* /usr/share/man/* /usr/share/info/* \
 && groupadd --system --gid 10001 entrokv \
 && useradd --system --uid 10001 --gid entrokv --no-create-home \
      --home-dir /nonexistent --shell /usr/sbin/nologin entrokv \
 && install -d -o 10001 -g 10001 -m 0770 /run/entrokv
COPY --from=build /stage/usr/local/bin/ /usr/local/bin/
# The NVIDIA container toolkit reads these; harmless in the CPU image.
ENV NVIDIA_DRIVER_CAPABILITIES=compute,utility
LABEL org.opencontainers.image.title="entrokv" \
      org.opencontainers.image.version="0.1.0" \
      org.opencontainers.image.source="Dockerfile"
USER 10001:10001
# The API is on the unix socket only. 8081 serves only grpc.health.v1
# (plaintext, for the kubelet's probes); 9464 serves GET /metrics.
EXPOSE 8081 9464
VOLUME ["/run/entrokv"]
# The addresses come from the environment (ENTROKV_<FLAG>), not from CMD, so
# that `-e ENTROKV_LISTEN=...` and the like change them: command-line flags
# would win over the environment.
ENV ENTROKV_LISTEN=unix:/run/entrokv/entrokv.sock \
    ENTROKV_HEALTH_LISTEN=0.0.0.0:8081 \
    ENTROKV_METRICS_LISTEN=0.0.0.0:9464
ENTRYPOINT ["/usr/local/bin/entrokv-server"]
CMD []

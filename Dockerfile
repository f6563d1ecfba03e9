# syntax=docker/dockerfile:1
# leasejob as a container: the entrypoint of a Kubernetes CronJob (helm/leasejob), or
#   docker run --rm -e LEASEJOB_DATABASE_URL=postgres://... leasejob:0.1.0 run --name hello --window once -- echo hi
#
# Base: Node.js 24 LTS on Debian 12 (bookworm) slim. 24 is the LTS line supported the longest
# (security fixes until April 2028; 22 ends in April 2027). package.json asks for Node >= 20
# and CI runs 20, so nothing here depends on 24. Debian slim rather than Alpine: tini and
# util-linux come from Debian's archive, on the glibc that Node's official builds target. For
# reproducible builds, pin the base by digest: --build-arg NODE_IMAGE=node:24-bookworm-slim@sha256:...
ARG NODE_IMAGE=node:24-bookworm-slim

# ---- build: dev dependencies, TypeScript -> dist/ -----------------------------------------
FROM ${NODE_IMAGE} AS build
WORKDIR /app
# Dependencies first, in their own layer, so a source change does not reinstall them.
# --ignore-scripts: `npm ci` would run `prepare` (tsc) before src/ is copied; it runs below.
COPY package.json package-lock.json ./
RUN npm ci --ignore-scripts --no-audit --no-fund
COPY tsconfig.json ./
COPY src ./src
COPY scripts ./scripts
RUN npm run build

# ---- runtime: production dependencies only, non-root ---------------------------------------
FROM ${NODE_IMAGE} AS runtime
# Re-declared: an ARG before the first FROM is visible only in FROM lines.
ARG NODE_IMAGE
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
      org.opencontainers.image.base.name="${NODE_IMAGE}"

# tini: PID 1 that forwards SIGTERM to leasejob (which stops its child's process group, waits
# --kill-grace, then releases the lease) and reaps orphans. util-linux: `setpriv --pdeathsig`,
# through which leasejob starts the child so that the child dies if leasejob is SIGKILLed
# (it is Essential in Debian and already present; named so the dependency is explicit).
RUN apt-get update \
 && apt-get install -y --no-install-recommends tini util-linux \
 && rm -rf /var/lib/apt/lists/*

# A fixed numeric uid/gid, so Kubernetes `runAsNonRoot` can verify it and volumes can be
# chowned to it (helm/leasejob's podSecurityContext uses 10001).
RUN groupadd --system --gid 10001 leasejob \
 && useradd --system --uid 10001 --gid leasejob --home-dir /nonexistent --no-create-home \
      --shell /usr/sbin/nologin leasejob

WORKDIR /app
# The image is for PostgreSQL: without a database URL, leasejob says so (exit 64) instead of
# reaching for the embedded one-host store, whose native module is not built here.
ENV NODE_ENV=production \
    LEASEJOB_REQUIRE_SHARED=1
COPY package.json package-lock.json ./
# --ignore-scripts: `prepare` (tsc) is a build step. It also leaves better-sqlite3's native
# addon unbuilt: the image is for PostgreSQL (the embedded one-host SQLite store is refused
# inside Kubernetes anyway), and this keeps compilers and downloads out of the image.
RUN npm ci --omit=dev --ignore-scripts --no-audit --no-fund \
 && npm cache clean --force
COPY bin ./bin
COPY sql ./sql
COPY --from=build /app/dist ./dist
RUN chmod 0755 /app/bin/leasejob.js \
 && ln -s /app/bin/leasejob.js /usr/local/bin/leasejob

# V8's code cache for `run` (src/startup/compile-cache.ts), primed here: a run against a closed port
# loads and compiles the start and the connection, then exits 69 (database unreachable); the
# lease, the child and the outcome still compile at each start (about 6% of a run). Root-owned
# and read-only at run time, so every pod starts warm (about 115 ms instead of 135 for
# `run -- true`, docs/performance.md), and nothing is written to the pod's /tmp (a run that
# went further than the priming one tries to rewrite it, fails to open the file, and moves on).
ENV LEASEJOB_COMPILE_CACHE=/app/compile-cache
RUN mkdir -m 0755 /app/compile-cache \
 && { leasejob run --database-url postgres://prime@127.0.0.1:1/prime --name prime --window prime \
        --log-level fatal -- true 2>/dev/null; test $? -eq 69; } \
 && test -n "$(ls /app/compile-cache)"

USER 10001:10001
# No -g: tini signals leasejob only; leasejob itself signals the child's process group, after
# its own grace logic. Kubernetes' terminationGracePeriodSeconds must exceed --kill-grace plus
# the time to release the lease (the chart checks this).
ENTRYPOINT ["tini", "--", "leasejob"]
CMD ["--help"]

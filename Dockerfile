# callsync: one image, one role per container (CALLSYNC_ROLE=ingress|worker|poller|all).
# Build: docker build -t callsync .   Run: docker compose up (see docker-compose.yml, docs/operations.md)

ARG NODE_IMAGE=node:22.20.0-bookworm-slim

# Production dependencies only.
FROM ${NODE_IMAGE} AS deps
WORKDIR /app
COPY package.json package-lock.json ./
RUN npm ci --omit=dev --ignore-scripts --no-audit --no-fund && npm cache clean --force

# Compile TypeScript to dist/.
FROM ${NODE_IMAGE} AS build
WORKDIR /app
COPY package.json package-lock.json ./
RUN npm ci --ignore-scripts --no-audit --no-fund
COPY tsconfig.json tsconfig.build.json ./
COPY src ./src
COPY queues ./queues
COPY workers ./workers
RUN npm run build

FROM ${NODE_IMAGE} AS runtime
ENV NODE_ENV=production \
    HOST=0.0.0.0 \
    PORT=3000 \
    ARCHIVE_DIR=/app/data/archive \
    SPOOL_DIR=/app/data/spool \
    DATA_DIR=/app/data
WORKDIR /app
COPY --from=deps --chown=node:node /app/node_modules ./node_modules
COPY --from=build --chown=node:node /app/dist ./dist
COPY --chown=node:node package.json ./
COPY --chown=node:node bin ./bin
# The local archive and the ingress spool live here. No VOLUME: an anonymous volume per container
# would keep what nobody can find again; mount named volumes (docker-compose.yml: `archive`,
# `ingress-spool`). A named volume mounted on an empty one of these folders takes its owner (node).
RUN mkdir -p /app/data/archive /app/data/spool && chown -R node:node /app/data
USER node
# 3000: ingress (webhook, /metrics, /admin/queues); 9464: ops server of worker and poller.
EXPOSE 3000 9464
HEALTHCHECK --interval=15s --timeout=5s --start-period=20s --retries=3 CMD ["node", "bin/healthcheck.js"]
# callsync handles SIGTERM itself: 503 for new requests, active jobs finish within SHUTDOWN_GRACE_MS.
STOPSIGNAL SIGTERM
# A smaller young generation: same CPU per webhook, ~25 MB less resident memory (docs/performance.md).
ENTRYPOINT ["node", "--max-semi-space-size=8", "bin/callsync.js"]
CMD ["start"]

#!/usr/bin/env bash
# Start the servers the test suite needs: PostgreSQL (role ntklab, database ntklab_test) and
# Redis on port 6390, plus Chromium and Firefox ESR for the browser tests. Idempotent: installs (as root, with
# apt-get) only what is missing and starts only what is not answering. Prints the
# environment lines the tests read, NTKLAB_REQUIRE_SERVERS=1 among them: with it an unreachable
# server fails a test instead of skipping it (tests/server_checks.py), so CI never passes by skipping.
set -euo pipefail

REDIS_PORT="${NTKLAB_TEST_REDIS_PORT:-6390}"
PG_PORT=5432

as_postgres() {
  # from / so that the postgres user may enter the working directory
  if [ "$(id -u)" = 0 ]; then (cd / && runuser -u postgres -- "$@"); else (cd / && sudo -n -u postgres "$@"); fi
}

install_missing() {
  local packages=()
  command -v redis-server >/dev/null || packages+=(redis-server)
  ls /usr/lib/postgresql/*/bin/postgres >/dev/null 2>&1 || packages+=(postgresql)
  # the dashboard's browser tests (tests/ui) drive Debian's Chromium through Playwright and
  # Debian's Firefox ESR through Marionette
  [ -x /usr/bin/chromium ] || packages+=(chromium)
  [ -x /usr/bin/firefox-esr ] || packages+=(firefox-esr)
  [ ${#packages[@]} -eq 0 ] && return
  if [ "$(id -u)" != 0 ]; then
    echo "services.sh: missing ${packages[*]}; run as root to install them" >&2
    exit 1
  fi
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${packages[@]}" >/dev/null
}

start_postgres() {
  local version
  version="$(pg_lsclusters --no-header 2>/dev/null | awk '{print $1}' | sort -V | tail -1)"
  [ -n "$version" ] || version="$(ls /usr/lib/postgresql | sort -V | tail -1)"
  if ! pg_lsclusters --no-header | awk -v v="$version" '$1 == v && $2 == "main"' | grep -q .; then
    pg_createcluster "$version" main >/dev/null
  fi
  if ! pg_lsclusters --no-header | awk -v v="$version" '$1 == v && $2 == "main" && $4 == "online"' | grep -q .; then
    pg_ctlcluster --skip-systemctl-redirect "$version" main start
  fi
  for _ in $(seq 50); do
    pg_isready -q -h 127.0.0.1 -p "$PG_PORT" && break
    sleep 0.2
  done
  pg_isready -q -h 127.0.0.1 -p "$PG_PORT"
  as_postgres psql -qtAc "SELECT 1 FROM pg_roles WHERE rolname = 'ntklab'" | grep -q 1 \
    || as_postgres psql -qc "CREATE ROLE ntklab LOGIN SUPERUSER PASSWORD 'ntklab'"
  as_postgres psql -qtAc "SELECT 1 FROM pg_database WHERE datname = 'ntklab_test'" | grep -q 1 \
    || as_postgres createdb -O ntklab ntklab_test
}

start_redis() {
  if ! redis-cli -p "$REDIS_PORT" ping >/dev/null 2>&1; then
    redis-server --daemonize yes --port "$REDIS_PORT" --bind 127.0.0.1 --save '' --appendonly no \
      --logfile /tmp/ntklab-redis-"$REDIS_PORT".log >/dev/null
  fi
  for _ in $(seq 50); do
    redis-cli -p "$REDIS_PORT" ping >/dev/null 2>&1 && return
    sleep 0.1
  done
  echo "services.sh: redis did not answer on port $REDIS_PORT" >&2
  exit 1
}

install_missing
start_postgres >&2
start_redis >&2
echo "NTKLAB_TEST_DATABASE_URL=postgresql+psycopg://ntklab:ntklab@127.0.0.1:${PG_PORT}/ntklab_test"
echo "NTKLAB_TEST_REDIS_URL=redis://127.0.0.1:${REDIS_PORT}/0"
echo "NTKLAB_REQUIRE_SERVERS=1"

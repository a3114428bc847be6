#!/usr/bin/env bash
# Installs the Debian packages logbroker needs when they are missing: ZooKeeper (the
# coordination service brokers and consumer groups use), a Java runtime to run it and Spark,
# Python's venv module (Debian ships it apart from python3), headless Chromium (the UI and
# Data Docs tests render pages in it), docker-compose v1 (it validates docker-compose.yaml
# without a Docker engine), iproute2 (`ip`: the tests' separate hosts, network namespaces),
# and gcc with zlib's and Python's headers (`pip install -e .` compiles the message-set walks,
# plugins/logbroker/protocol/_native.pyx; without them they run in pure Python), and
# PostgreSQL's server binaries (`make up` runs Airflow's database on a cluster of its own,
# logbroker.stack.postgres; Debian's own `main` cluster is not used), and kcat (librdkafka's
# command-line client: the tests speak Kafka 0.8's protocol to the broker through it).
# Idempotent: a machine that has both returns at once. Needs root (or sudo) to install.
set -euo pipefail

need=()
[ -r /usr/share/java/zookeeper.jar ] || need+=(zookeeper)
command -v java >/dev/null 2>&1 || need+=(default-jre-headless)
"${PYTHON:-python3}" -c 'import ensurepip, venv' 2>/dev/null || need+=(python3-venv)
command -v chromium >/dev/null 2>&1 || need+=(chromium)
command -v docker-compose >/dev/null 2>&1 || need+=(docker-compose)
command -v ip >/dev/null 2>&1 || [ -x /usr/sbin/ip ] || [ -x /sbin/ip ] || need+=(iproute2)
command -v gcc >/dev/null 2>&1 || need+=(gcc)
compgen -G '/usr/lib/postgresql/*/bin/initdb' >/dev/null || need+=(postgresql)
command -v kcat >/dev/null 2>&1 || need+=(kcat)
[ -r /usr/include/zlib.h ] || need+=(zlib1g-dev)  # brings libc6-dev, which gcc only recommends
"${PYTHON:-python3}" -c 'import os, sysconfig, sys
sys.exit(not os.path.exists(os.path.join(sysconfig.get_paths()["include"], "Python.h")))' \
    2>/dev/null || need+=(python3-dev)
[ ${#need[@]} -eq 0 ] && exit 0

SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO="sudo"
export DEBIAN_FRONTEND=noninteractive
# Another apt (unattended upgrades on a fresh machine) may hold the dpkg lock: wait for it.
for attempt in 1 2 3 4 5 6 7 8 9 10; do
    if $SUDO apt-get update -qq && \
       $SUDO apt-get install -y -qq --no-install-recommends "${need[@]}"; then
        exit 0
    fi
    echo "apt-get failed (attempt $attempt), retrying in 6 s" >&2
    sleep 6
done
echo "could not install: ${need[*]}" >&2
exit 1

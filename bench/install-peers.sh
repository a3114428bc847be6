#!/usr/bin/env bash
# Install the peers of `make bench` from Debian's packages and their Python clients into .venv.
#
#   bash bench/install-peers.sh [VENV]        (VENV defaults to .venv)
#
# Debian packages: rabbitmq-server (3.10, with Erlang and epmd), activemq (5.17, KahaDB),
# redis-server (7.0, with redis-tools: redis-benchmark, the C client of the redis_c reference
# row). The Python clients come from bench/requirements.txt (redis-py with hiredis). The
# benchmark starts its own copies of these servers on 127.0.0.1 with data in a work directory; the system services that apt would start are kept from starting
# (a policy-rc.d that says "no" for the duration of the install) and, if they run anyway,
# are stopped afterwards. Idempotent: installed packages are skipped.
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=${1:-.venv}

PACKAGES=(rabbitmq-server activemq redis-server)
missing=()
for pkg in "${PACKAGES[@]}"; do
    dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" || missing+=("$pkg")
done
if ((${#missing[@]})); then
    SUDO=""
    [[ $(id -u) -eq 0 ]] || SUDO="sudo"
    policy=/usr/sbin/policy-rc.d
    created_policy=""
    if [[ ! -e $policy ]]; then
        printf '#!/bin/sh\nexit 101\n' | $SUDO tee "$policy" >/dev/null
        $SUDO chmod +x "$policy"
        created_policy=1
    fi
    trap '[[ -n $created_policy ]] && $SUDO rm -f '"$policy" EXIT
    echo "installing ${missing[*]} from Debian (services kept from starting)"
    $SUDO apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
    # Where a service manager started them anyway, stop them: the benchmark runs its own.
    if command -v service >/dev/null; then
        for svc in rabbitmq-server activemq redis-server; do
            $SUDO service "$svc" stop >/dev/null 2>&1 || true
        done
    fi
    # rabbitmq-server's postinst leaves an epmd daemon on 0.0.0.0:4369; the benchmark starts
    # its own on 127.0.0.1. `epmd -kill` refuses while any Erlang node is registered.
    if command -v epmd >/dev/null && epmd -names >/dev/null 2>&1; then
        epmd -kill >/dev/null 2>&1 || true
    fi
fi

"$VENV/bin/python" -m pip install -q --disable-pip-version-check -r bench/requirements.txt
echo "peers installed: $(dpkg-query -W -f='${Package} ${Version}  ' "${PACKAGES[@]}")"

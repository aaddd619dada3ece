#!/usr/bin/env bash
# Installs what tests/it/monitoring.rs and the real-control-plane scenario
# `prometheus::` need: Debian's `prometheus` package, for `promtool` (checks
# and unit-tests the shipped alerting rules) and the `prometheus` server the
# scenario starts as a child process of its own. Idempotent.
#
# The package starts a Prometheus daemon of its own (port 9090) where an init
# system runs; the tests never use it, so it is stopped and disabled here.
set -euo pipefail

if ! command -v promtool >/dev/null 2>&1 || ! command -v prometheus >/dev/null 2>&1; then
    apt-get -o DPkg::Lock::Timeout=600 update -qq
    DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=600 install -y -qq --no-install-recommends prometheus >/dev/null
fi

# Stop the packaged daemon: systemd where it runs, else the SysV script.
if [ -d /run/systemd/system ] && command -v systemctl >/dev/null 2>&1; then
    systemctl disable --now prometheus.service >/dev/null 2>&1 || true
elif [ -x /etc/init.d/prometheus ]; then
    /etc/init.d/prometheus stop >/dev/null 2>&1 || true
    update-rc.d prometheus disable >/dev/null 2>&1 || true
fi

promtool --version 2>&1 | head -n 1

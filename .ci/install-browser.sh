#!/usr/bin/env bash
# Install Debian's headless-capable Chromium (+ chromedriver) for the dashboard's browser tests.
# Idempotent and quiet: does nothing when /usr/bin/chromium already exists.
set -euo pipefail

if [ -x /usr/bin/chromium ]; then
    exit 0
fi
SUDO=""
if [ "$(id -u)" -ne 0 ]; then
    if command -v sudo >/dev/null 2>&1; then
        SUDO="sudo"
    else
        echo "install-browser: need root (or sudo) to apt-get install chromium" >&2
        exit 1
    fi
fi
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq >/dev/null
$SUDO apt-get install -y -qq --no-install-recommends chromium chromium-driver fonts-liberation >/dev/null
/usr/bin/chromium --version

#!/usr/bin/env bash
# Installs the trace consumer that load_trace.mjs drives: Debian's Chromium and, next to this script, the npm
# packages pinned in package.json/package-lock.json (speedscope, puppeteer-core; no browser download).
# Run as root after `apt-get update`. Needs node >= 18 and npm.
set -euo pipefail
cd "$(dirname "$0")"
DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends chromium >/dev/null
npm ci --no-audit --no-fund --ignore-scripts --loglevel=error
node load_trace.mjs --check

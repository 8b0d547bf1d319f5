#!/usr/bin/env bash
# The interactive view (ir2torch view) is tested in headless Chromium. `make test` runs this when the browser
# its tests use (CHROMIUM, default /usr/bin/chromium) is missing: it installs the distribution's package with
# apt-get (through sudo when not root). Elsewhere, install Chromium yourself and pass CHROMIUM=<path>.
set -euo pipefail
browser="${CHROMIUM:-/usr/bin/chromium}"
[ -x "$browser" ] && exit 0
if ! command -v apt-get >/dev/null; then
  echo "make test: $browser is missing and apt-get is not available: install Chromium and run" \
       "make test CHROMIUM=<path to chromium>" >&2
  exit 1
fi
sudo=""; [ "$(id -u)" -eq 0 ] || sudo="sudo"
echo "make test: installing Chromium (apt-get install chromium) for the view's browser tests" >&2
$sudo env DEBIAN_FRONTEND=noninteractive apt-get update -qq
$sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null
if [ ! -x "$browser" ]; then
  echo "make test: apt-get installed chromium, but $browser is still missing: pass CHROMIUM=<path>" >&2
  exit 1
fi

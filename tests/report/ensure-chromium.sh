#!/bin/sh
# Make Debian's headless-capable `chromium` available for tests/test_report.py.
# Exit 0: chromium is at /usr/bin/chromium (already there, or installed now as root).
# Exit 3: missing and we are not root - the test skips with this script's message.
# Any other exit: the install itself failed (apt's output says why).
set -eu

CHROMIUM=/usr/bin/chromium

if [ -x "$CHROMIUM" ]; then
    exit 0
fi
if [ "$(id -u)" -ne 0 ]; then
    echo "$CHROMIUM is missing and installing it needs root: run tests/report/ensure-chromium.sh (apt-get install chromium) as root" >&2
    exit 3
fi
# A fresh machine has empty package lists; noninteractive keeps debconf from asking questions.
export DEBIAN_FRONTEND=noninteractive
# Wait for a concurrent apt (another job on the machine) instead of failing on its lock.
apt-get -o DPkg::Lock::Timeout=300 update -qq
apt-get -o DPkg::Lock::Timeout=300 install -y -qq --no-install-recommends chromium >/dev/null
[ -x "$CHROMIUM" ] || { echo "apt-get installed chromium but $CHROMIUM is still missing" >&2; exit 1; }

#!/usr/bin/env bash
# Everything the tests need, installed when missing: the one set-up step that both the README's
# test command and CI (.ci/run) run, so a newcomer's run is CI's run.
#
#   Java 17+ (PySpark), mosquitto + its clients (broker tests), openssl (TLS tests),
#   iproute2 (wide-area emulation tests), openssh-server (sshd "hosts" of the 'cluster up' over ssh
#   tests; the tests start their own sshd, nothing is enabled), chromium (the dashboard's headless-browser
#   test) — from Debian packages, as root or through sudo;
#   then this package with its test and benchmark extras: pip install -e '.[all,test,bench]', which
#   compiles the per-message path with mypyc (setup.py; rebuilt below when its sources changed).
#
# Re-running is cheap: packages present are not touched, and pip runs again only when setup.cfg
# changed since the last successful run (a stamp in .replicast/).
set -euo pipefail
cd "$(dirname "$0")/.."

need=()
if ! command -v java >/dev/null 2>&1 || ! java -version 2>&1 | grep -qE 'version "(1[7-9]|[2-9][0-9])'; then
  need+=(openjdk-17-jre-headless)
fi
command -v mosquitto >/dev/null 2>&1 || [ -x /usr/sbin/mosquitto ] || need+=(mosquitto)
command -v mosquitto_pub >/dev/null 2>&1 || need+=(mosquitto-clients)
command -v openssl >/dev/null 2>&1 || need+=(openssl)
{ command -v ip >/dev/null 2>&1 && command -v tc >/dev/null 2>&1; } || need+=(iproute2)
[ -x /usr/sbin/sshd ] || command -v sshd >/dev/null 2>&1 || need+=(openssh-server)
{ command -v ssh-keygen >/dev/null 2>&1; } || need+=(openssh-client)
command -v chromium >/dev/null 2>&1 || need+=(chromium)

if [ ${#need[@]} -gt 0 ]; then
  if [ "$(id -u)" -eq 0 ]; then sudo=""; elif command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then sudo="sudo";
  else sudo="none"; fi
  if [ "$sudo" != "none" ] && command -v apt-get >/dev/null 2>&1; then
    echo "setup: installing Debian packages: ${need[*]}"
    export DEBIAN_FRONTEND=noninteractive
    $sudo apt-get update -qq
    $sudo apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
  else
    echo "setup: cannot install ${need[*]} here (needs apt-get as root or sudo); the tests that need them will skip" >&2
  fi
fi

stamp=.replicast/setup.stamp
want="$(python3 --version 2>&1) $(sha256sum setup.cfg | cut -c1-16)"
if [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "$want" ] || ! python3 -m pip show replicast >/dev/null 2>&1; then
  echo "setup: pip install -e '.[all,test,bench]'"
  python3 -m pip install --quiet --upgrade pip
  python3 -m pip install --quiet -e '.[all,test,bench]'
  mkdir -p .replicast && echo "$want" > "$stamp"
fi
# The native build of the per-message path (setup.py, replicast/native_build.py) is compiled from
# the sources as they were at install: rebuilt when one of them changed since (or it is missing
# where mypyc could build it), without touching the dependencies.
if python3 -c "import mypyc.build" 2>/dev/null && ! python3 -W ignore -c \
    "import sys, replicast.native_build as n; sys.exit(0 if n.STATUS.native or n.PURE_ENV in __import__('os').environ else 1)"; then
  echo "setup: the native build is missing or older than its sources: pip install --no-deps -e ."
  python3 -m pip install --quiet --no-deps -e .
fi

#!/usr/bin/env bash
# Set up a fresh machine for development of training_platform, from a clone of the repository:
#
#   1. system tools: bubblewrap (the evaluation sandbox) and redis-server, with apt-get when run as root or with
#      passwordless sudo, and only those that are missing; otherwise it prints the one command to run;
#   2. `make setup`: the virtualenv .venv with torch and the package (editable, with its dev extras);
#   3. the front-end toolchain (`cd frontend && npm ci`) when node and npm exist (only needed to rebuild the UI);
#   4. `.venv/bin/tp doctor`: checks everything the platform needs, one line per check;
#   5. prints what to run next.
#
# Idempotent: a second run installs nothing new (make and npm steps are skipped when up to date).
#
# Environment:
#   TP_INIT_SKIP_SYSTEM=1   skip step 1 (no apt-get, no sudo)
#   TP_INIT_SKIP_UI=1       skip step 3 (no npm ci)
#   PY=python3.11           the interpreter `make setup` builds .venv from (default python3)
#
# Exit code: 0 when `tp doctor` finds nothing failing, 1 otherwise (its FAIL lines say how to fix them).
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")"

say() { printf '==> %s\n' "$*"; }
note() { printf '    %s\n' "$*"; }

# --- 1. system tools ---------------------------------------------------------------------------------------------
say "1/4 system tools (bubblewrap, redis-server)"
if [[ "${TP_INIT_SKIP_SYSTEM:-0}" == "1" ]]; then
    note "skipped (TP_INIT_SKIP_SYSTEM=1)"
else
    missing=()
    command -v bwrap >/dev/null 2>&1 || missing+=(bubblewrap)
    command -v redis-server >/dev/null 2>&1 || missing+=(redis-server)
    if [[ ${#missing[@]} -eq 0 ]]; then
        note "already installed: $(command -v bwrap), $(command -v redis-server)"
    elif ! command -v apt-get >/dev/null 2>&1; then
        note "missing: ${missing[*]}; no apt-get here: install them with your package manager"
    else
        sudo_cmd=()
        if [[ "$(id -u)" -ne 0 ]]; then
            if command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then
                sudo_cmd=(sudo -n)
            else
                sudo_cmd=(none)
            fi
        fi
        if [[ "${sudo_cmd[*]}" == "none" ]]; then
            note "missing: ${missing[*]}; not root and no passwordless sudo: run this yourself, then ./init.sh again:"
            note "    sudo apt-get install -y ${missing[*]}"
        else
            note "installing: ${missing[*]}"
            "${sudo_cmd[@]}" env DEBIAN_FRONTEND=noninteractive apt-get update -qq
            "${sudo_cmd[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}"
        fi
    fi
fi

# --- 2. Python: .venv ---------------------------------------------------------------------------------------------
say "2/4 Python virtualenv and the package (make setup)"
for tool in make "${PY:-python3}"; do
    if ! command -v "$tool" >/dev/null 2>&1; then
        note "$tool not found: install it (Debian/Ubuntu: apt-get install -y make python3 python3-venv)" >&2
        exit 1
    fi
done
if make -q setup 2>/dev/null; then
    note ".venv is up to date"
else
    make setup
fi

# --- 3. front-end toolchain ---------------------------------------------------------------------------------------
say "3/4 front-end toolchain (frontend/node_modules, to rebuild the UI with make ui)"
if [[ "${TP_INIT_SKIP_UI:-0}" == "1" ]]; then
    note "skipped (TP_INIT_SKIP_UI=1)"
elif ! command -v node >/dev/null 2>&1 || ! command -v npm >/dev/null 2>&1; then
    note "node/npm not found: skipped (the built UI is committed; Node.js >= 20.19 is needed only for make ui)"
elif [[ -f frontend/node_modules/.package-lock.json && frontend/node_modules/.package-lock.json -nt frontend/package-lock.json ]]; then
    note "frontend/node_modules is up to date"
elif (cd frontend && npm ci --no-audit --no-fund); then
    note "frontend/node_modules installed"
else
    note "npm ci failed (network?): the UI cannot be rebuilt until it succeeds; everything else works" >&2
fi

# --- 4. check ------------------------------------------------------------------------------------------------------
say "4/4 tp doctor"
status=0
.venv/bin/tp doctor || status=$?

echo
if [[ $status -eq 0 ]]; then
    say "ready. Next:"
else
    say "tp doctor found problems (FAIL lines above, each with its fix). Once fixed:"
fi
note "make up     # the whole platform on this machine (API + workers + embedded Redis) on http://127.0.0.1:8000"
note "make test   # ruff + the test suite"
exit "$status"

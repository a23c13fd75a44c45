#!/usr/bin/env bash
# Set up fedad from nothing: data packages (Debian, when root), a local virtual
# environment in .venv, torch pinned to the CPU build, Flower (the `flower` extra, with
# Ray for its simulation engine) pinned to the version tested here, and fedad itself
# (editable).
# Idempotent: a second run only checks. Used by both README commands.
set -euo pipefail
cd "$(dirname "$0")/.."

PY="${PYTHON:-python3}"
VENV=.venv
TORCH_PIN="torch==2.13.0"
# flwr 1.42 pins certifi>=2026.10.19, which this index does not have; 1.41 resolves.
# flwr pins typer<0.21, whose import warns under click 8.5: click stays below 8.5.
FLOWER_PINS=("flwr[simulation]==1.41.0" "click<8.5")
EXTRAS="${FEDAD_EXTRAS:-dev,flower,pretrained,graph}"

# 1. Data packages: Fashion-MNIST IDX files and mlbench's ODDS source tables.
APT_PKGS=(dataset-fashion-mnist r-cran-mlbench)
missing=()
if command -v dpkg >/dev/null 2>&1; then
  for p in "${APT_PKGS[@]}"; do
    dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p")
  done
fi
if ((${#missing[@]})); then
  if [ "$(id -u)" = "0" ] && command -v apt-get >/dev/null 2>&1; then
    echo "setup: installing ${missing[*]} (apt-get)"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq >/dev/null
    apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
  else
    echo "setup: missing Debian packages ${missing[*]}; without root they are not installed." >&2
    echo "setup: data sets that need them will say so; digits and user paths still work." >&2
  fi
fi

# 2. Virtual environment with torch pinned first (an unpinned torch pulls GBs of CUDA wheels).
stamp="$VENV/.fedad-setup"
want="$(cat pyproject.toml scripts/setup.sh | sha256sum | cut -c1-16)-$EXTRAS"
if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ]; then
  exit 0
fi
[ -x "$VENV/bin/python" ] || "$PY" -m venv "$VENV"
"$VENV/bin/python" -m pip install -q --upgrade pip
"$VENV/bin/python" -m pip install -q "$TORCH_PIN"
if [[ ",$EXTRAS," == *",flower,"* ]]; then
  "$VENV/bin/python" -m pip install -q "${FLOWER_PINS[@]}"
fi
"$VENV/bin/python" -m pip install -q -e ".[$EXTRAS]"
echo "$want" > "$stamp"
echo "setup: ready ($VENV)"

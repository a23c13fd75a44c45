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
EXTRAS="${FEDAD_EXTRAS:-dev,flower,pretrained,graph,export,tracking,pyod,bench}"

# 1. Data packages: Fashion-MNIST IDX files, mlbench's ODDS source tables, and GIMP's
#    tileable texture photographs (the `textures` data set; without them it keeps 3 types).
APT_PKGS=(dataset-fashion-mnist r-cran-mlbench gimp-data)
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

# 3 (run at the end, and on every run): MUTAG's graphs for the `mutag_structures` data set,
# the sdist of PyPI graphkernels 0.2.1 (not installed: it needs a C++ build), hash-checked.
# Failure only warns: that one data set then says how to get the file.
GK_SDIST=graphkernels-0.2.1.tar.gz
GK_SHA256=78c3a3633b4838480d56ceb7b479890eb8f8c7545f93c8f159f443414fe559ff
fetch_mutag() {
  local dir="$VENV/share/fedad"
  if [ -f "$dir/$GK_SDIST" ] && echo "$GK_SHA256  $dir/$GK_SDIST" | sha256sum -c --quiet - 2>/dev/null; then
    return 0
  fi
  mkdir -p "$dir" && rm -f "$dir/$GK_SDIST"
  # --require-hashes: pip checks the hash before it runs anything of the sdist (its metadata)
  if "$VENV/bin/python" -m pip download -q --no-deps --no-binary :all: --require-hashes \
      -r <(echo "graphkernels==0.2.1 --hash=sha256:$GK_SHA256") -d "$dir" >/dev/null 2>&1 \
    && echo "$GK_SHA256  $dir/$GK_SDIST" | sha256sum -c --quiet - 2>/dev/null; then
    echo "setup: fetched $GK_SDIST (mutag_structures)"
  else
    rm -f "$dir/$GK_SDIST"
    echo "setup: warning: could not fetch $GK_SDIST; data set mutag_structures needs data.path" >&2
  fi
}

# 2. Virtual environment with torch pinned first (an unpinned torch pulls GBs of CUDA wheels).
stamp="$VENV/.fedad-setup"
want="$(cat pyproject.toml scripts/setup.sh | sha256sum | cut -c1-16)-$EXTRAS"
if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ]; then
  fetch_mutag || true
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
fetch_mutag || true
echo "setup: ready ($VENV)"

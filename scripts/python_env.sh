#!/usr/bin/env bash
# Makes (once) the Python environment that the interop tests check strata against:
# Debian's python3 and python3-torch (scripts/bootstrap.sh installs them) with the
# reference libraries from PyPI in a --system-site-packages venv. The product never
# runs Python; only tests do.
#
#   scripts/python_env.sh DIR            make DIR if needed; exit 0 when it is usable
#   scripts/python_env.sh DIR -- CMD...  then run CMD with DIR/bin first on PATH and
#                                        STRATA_PYTHON=DIR/bin/python
#
# Exit 77 (ctest's skip code for these tests), with the reason on stderr, when the
# environment cannot be made here: no python3-torch, or PyPI unreachable.
set -euo pipefail
dir=$1
shift
# transformers 4.46.3 is the last release that runs on Debian's torch 1.13; it pins
# tokenizers to 0.20.
reqs=("transformers==4.46.3" "tokenizers>=0.20,<0.21" "safetensors>=0.4")
stamp="$dir/.strata-ready"
want="${reqs[*]}"

mkdir -p "$(dirname "$dir")"
exec 8>"$dir.lock"
flock 8  # several tests may ask at once: one makes it, the others wait
if [[ ! -f "$stamp" || "$(cat "$stamp")" != "$want" ]]; then
  if ! /usr/bin/python3 -c "import torch" 2>/dev/null; then
    echo "python_env: skipped: Debian's python3-torch is not installed (run scripts/bootstrap.sh)" >&2
    exit 77
  fi
  rm -rf "$dir"
  if ! /usr/bin/python3 -m venv --system-site-packages "$dir" >&2 ||
     ! "$dir/bin/pip" install -q --disable-pip-version-check "${reqs[@]}" >&2 ||
     ! "$dir/bin/python" -c "import transformers, tokenizers, safetensors" >&2; then
    echo "python_env: skipped: could not install ${want} into $dir (is PyPI reachable?)" >&2
    rm -rf "$dir"
    exit 77
  fi
  echo "$want" > "$stamp"
fi
exec 8>&-

if [[ $# -gt 0 && "$1" == "--" ]]; then
  shift
  export PATH="$dir/bin:$PATH" STRATA_PYTHON="$dir/bin/python"
  exec "$@"
fi

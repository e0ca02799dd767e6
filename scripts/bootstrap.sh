#!/usr/bin/env bash
# Installs the Debian packages strata builds and tests with. Idempotent: when
# everything is present it only runs dpkg queries and returns in well under a second.
set -euo pipefail

PACKAGES=(
  build-essential cmake ninja-build pkg-config
  libopenblas-dev
  libdnnl-dev libblis-dev libxsmm-dev  # alternative CPU GEMM and convolution kernels
  libspdlog-dev libcli11-dev libyaml-cpp-dev nlohmann-json3-dev zlib1g-dev
  libgtest-dev
  libpcre2-dev  # the tokenizer's pre-tokenizer regexes
  libopenmpi-dev openmpi-bin
  dataset-fashion-mnist fortunes
  time ccache
  # Test-only: the interop tests check strata against transformers and tokenizers,
  # which scripts/python_env.sh installs from PyPI into a venv over Debian's torch.
  python3-venv python3-torch python3-numpy
  # Test-only: tests/slurm.sh starts a one-node Slurm (srun --mpi=pmix) on this machine.
  slurm-wlm munge
)
# clang and its runtime (libFuzzer, ASan, UBSan) are only needed to run the fuzzers
# (tests/fuzz/run_fuzz.sh); the corpus regression tests build with the default compiler.
if [[ "${STRATA_BOOTSTRAP_FUZZ:-0}" == "1" ]]; then
  PACKAGES+=(clang libclang-rt-dev)
fi

missing=()
for p in "${PACKAGES[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

if (( ${#missing[@]} == 0 )); then
  exit 0
fi

echo "bootstrap: installing ${missing[*]}"
SUDO=""
if [[ $(id -u) -ne 0 ]]; then SUDO="sudo"; fi
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null

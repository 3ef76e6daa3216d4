#!/usr/bin/env bash
# CPU benchmark: pykeops (if installed: pip install pykeops) and the rkeops engine in the same run.
#   bench/cpu.sh [N]     (default N = M = 10000)
set -euo pipefail
cd "$(dirname "$0")/.."
n="${1:-10000}"
if python3 -c "import pykeops" 2>/dev/null; then
  python3 bench/cpu_peers.py "$n"
else
  echo "pykeops not installed (pip install pykeops): rkeops only"
fi
export CARGO_HOME="$PWD/src/rust/.cargo" PATH="$HOME/.cargo/bin:$PATH"
cargo bench -q -p rkeops-engine --bench cpu --manifest-path src/rust/Cargo.toml -- "$n" 2>/dev/null | grep Gpairs

#!/usr/bin/env bash
# GPU benchmark: the torch/Triton peers and rkeops in the same call on the GPU host, so that every
# ratio is measured in one run. Build here, then send .gpu along (see ../shared/gpu/README.md):
#   bench/gpu.sh build        # on the development machine: copies the benchmark binary to .gpu/bin
#   bench/gpu.sh run          # on the GPU host
set -euo pipefail
cd "$(dirname "$0")/.."
case "${1:-run}" in
  build)
    export CARGO_HOME="$PWD/src/rust/.cargo" PATH="$HOME/.cargo/bin:$PATH"
    bin=$(cargo bench --no-run -p rkeops-engine --bench gpu --manifest-path src/rust/Cargo.toml 2>&1 |
          sed -n 's/.*Executable .*(\(.*\))/\1/p')
    mkdir -p .gpu/bin && cp "$bin" .gpu/bin/gpu-bench
    cp ../shared/peers/gpu_peers.py bench/gpu_peer_d64.py .gpu/ ;;
  run)
    nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
    (cd "${OUT:-/tmp}" && python3 "$OLDPWD/.gpu/gpu_peers.py" && python3 "$OLDPWD/.gpu/gpu_peer_d64.py")
    .gpu/bin/gpu-bench ;;
esac

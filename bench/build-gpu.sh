#!/usr/bin/env bash
# Builds, on the development machine, what bench/gpu.sh runs on the GPU machine (which
# has no Go toolchain): the bench binary, the test binaries of its fixtures and kernels
# sections, and a copy of the fixtures, packed into .gpu/ (ignored by git; name it in
# the device run's carry).
set -euo pipefail
cd "$(dirname "$0")/.."
export GOTOOLCHAIN=go1.27.3 GOEXPERIMENT=simd CGO_ENABLED=1
rm -rf .gpu && mkdir -p .gpu/bin .gpu/fixtures
go build -ldflags="-s -w" -o .gpu/bin/bench ./examples/bench
for pkg in internal/modelcore diffusion quant backend/hlo; do
  go test -c -ldflags="-s -w" -o ".gpu/bin/$(basename $pkg).test" "./$pkg"
done
# The working tree that travels is limited to 64 MiB: the binaries go packed (xz).
(cd .gpu && tar cf - bin) | xz -9 -T1 >.gpu/bin.txz && rm -rf .gpu/bin
# The tokenizers' fixtures (13 MB) stay here: none of these binaries reads them.
cp -r ../shared/fixtures/models ../shared/fixtures/safetensors ../shared/fixtures/fp8_e4m3fn.json \
  ../shared/fixtures/README.md .gpu/fixtures/
du -sh .gpu

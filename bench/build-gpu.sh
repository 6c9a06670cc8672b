#!/usr/bin/env bash
# Builds, on the development machine, what bench/gpu.sh runs on the GPU machine (which
# has no Go toolchain): test and benchmark binaries and a copy of the fixtures, packed
# into .gpu/ (ignored by git; name it in the device run's carry).
set -euo pipefail
cd "$(dirname "$0")/.."
export GOTOOLCHAIN=go1.27.3 GOEXPERIMENT=simd CGO_ENABLED=1
rm -rf .gpu && mkdir -p .gpu/bin .gpu/fixtures
go test -c -ldflags="-s -w" -o .gpu/bin/model.test ./model
go test -c -ldflags="-s -w" -o .gpu/bin/diffusion.test ./diffusion
go build -ldflags="-s -w" -o .gpu/bin/bench ./examples/bench
# Binaries are packed: the working tree that travels is limited to 64 MiB.
tar czf .gpu/bin.tgz -C .gpu bin && rm -rf .gpu/bin
cp -r ../shared/fixtures/models ../shared/fixtures/safetensors ../shared/fixtures/README.md .gpu/fixtures/
du -sh .gpu

#!/usr/bin/env bash
# Builds, on the development machine, what bench/gpu.sh runs on the GPU machine (which
# has no Go toolchain): test and benchmark binaries and a copy of the fixtures, packed
# into .gpu/ (ignored by git; name it in the device run's carry).
#
# VARIANTS="ref ..." also builds the bench and test binaries of other git refs (e.g. a
# branch with a change that waits for its measurement) as .gpu/bin/<ref>/, for
# `bash bench/gpu.sh variants`, and writes each ref's own bench/gpu.sh, pointed at its
# binaries, as .gpu/sh/gpu-<ref>.sh: on the device, `cp .gpu/sh/gpu-<ref>.sh bench/ &&
# bash bench/gpu-<ref>.sh SECTION` runs a section that only that ref has.
set -euo pipefail
cd "$(dirname "$0")/.."
export GOTOOLCHAIN=go1.27.3 GOEXPERIMENT=simd CGO_ENABLED=1
rm -rf .gpu && mkdir -p .gpu/bin .gpu/fixtures .gpu/sh
build() { # build DIR: the binaries of the source tree in the current folder, into DIR
  go test -c -ldflags="-s -w" -o "$1/model.test" ./model
  go test -c -ldflags="-s -w" -o "$1/diffusion.test" ./diffusion
  go test -c -ldflags="-s -w" -o "$1/hlo.test" ./backend/hlo
  go build -ldflags="-s -w" -o "$1/bench" ./examples/bench
}
build .gpu/bin
go build -ldflags="-s -w" -o .gpu/bin/tritonprobe ./bench/tritonprobe # main only
go test -c -ldflags="-s -w" -o .gpu/bin/quant.test ./quant          # main only
for ref in ${VARIANTS:-}; do
  dir=$(mktemp -d)
  git worktree add -q --detach "$dir" "$ref"
  out=$PWD/.gpu/bin/${ref//\//_}
  (cd "$dir" && build "$out")
  sed "s#\.gpu/bin/#.gpu/bin/${ref//\//_}/#g" "$dir/bench/gpu.sh" >".gpu/sh/gpu-${ref//\//_}.sh"
  git worktree remove --force "$dir"
done
# Binaries are packed: the working tree that travels is limited to 64 MiB. Sorted by
# name, each variant's binary follows its twin, and xz's 64 MiB window stores it as
# little more than the difference (6 binaries: 10.5 MB, against 44 MB with gzip).
files=$(cd .gpu && find bin -type f | awk -F/ '{print $NF "\t" $0}' | sort | cut -f2)
(cd .gpu && tar cf - $files) | xz -9 -T1 >.gpu/bin.txz && rm -rf .gpu/bin
# The tokenizers' fixtures (13 MB) stay here: none of these binaries reads them.
cp -r ../shared/fixtures/models ../shared/fixtures/safetensors ../shared/fixtures/fp8_e4m3fn.json ../shared/fixtures/README.md \
  .gpu/fixtures/
du -sh .gpu

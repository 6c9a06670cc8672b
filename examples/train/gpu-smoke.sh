#!/usr/bin/env bash
# Smoke test and throughput probe of the trainer on the GPU machine, at the shape issue 54
# targets (hidden 512, 8 layers, 8 heads × 64, 2 KV heads, FFN 1408, vocab 8192, tied; B 32 ×
# S 512), on random token ids: a run of STEPS steps that checkpoints, a resumed run of 20
# more, and an evaluation of the checkpoint. Build the binary here first, then run this
# there with .gpu in the device run's carry:
#
#	CGO_ENABLED=1 GOTOOLCHAIN=go1.27.3 GOEXPERIMENT=simd go build -ldflags='-s -w' -o .gpu/train ./examples/train
#	bash examples/train/gpu-smoke.sh            # our backend (backend.New's choice)
#	BACKEND=goxla bash examples/train/gpu-smoke.sh  # go-xla's backend, to compare
set -uo pipefail
export GOMLX_NO_AUTO_INSTALL=1 GOPJRT_CUDA_CHECKS=0
steps=${STEPS:-300}
python3 - <<'PY'
import random, struct
random.seed(1)
def write(path, n):
    ids = []
    while len(ids) < n:
        ids += [1] + [random.randint(4, 8190) for _ in range(random.randint(200, 3000))] + [2]
    open(path, 'wb').write(b'bdids001' + struct.pack('<II', 8192, 0) + struct.pack('<%dH' % len(ids), *ids))
write('/tmp/smoke-train.ids', 4_000_000)
write('/tmp/smoke-heldout.ids', 100_000)
PY
backend=()
if [ "${BACKEND:-}" = goxla ]; then
  plugin=$(python3 -c 'import site; print(site.getsitepackages()[0])')/jax_plugins/xla_cuda13/xla_cuda_plugin.so
  backend=(-backend "xla:$plugin,preallocate=true")
fi
shape=(-hidden 512 -layers 8 -heads 8 -kv-heads 2 -ffn 1408 -seq 512 -batch 32 -warmup 50 -quiet -shard-bytes 15728640)
rm -rf /tmp/smoke-ckpt
./.gpu/train -stage ar "${backend[@]}" "${shape[@]}" -train /tmp/smoke-train.ids -heldout /tmp/smoke-heldout.ids \
  -heldout-bytes 400000 -steps "$steps" -log-every 50 -max-time "${MAXTIME:-5m}" -ckpt /tmp/smoke-ckpt
ls -la /tmp/smoke-ckpt /tmp/smoke-ckpt/optimizer | head -20
du -sh /tmp/smoke-ckpt
./.gpu/train -stage ar "${backend[@]}" "${shape[@]}" -train /tmp/smoke-train.ids -steps $((steps + 20)) -log-every 10 \
  -ckpt /tmp/smoke-ckpt -resume 2>&1 | grep -Ev '^(model|backend):'
./.gpu/train -stage eval "${backend[@]}" -model /tmp/smoke-ckpt -heldout /tmp/smoke-heldout.ids -heldout-bytes 400000 -seq 512 -batch 32

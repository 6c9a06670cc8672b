#!/usr/bin/env bash
# Data-parallel training over several GPUs of one host (package train's Config.Devices,
# examples/train -devices): its check against one GPU, then the training throughput at
# 1, 2, … GPUs, printed as a table. Build here, run there carrying what `build` names (a
# machine of two GPUs or more: nvidia-h200-x2):
#
#   bash bench/multigpu.sh build   here: into .gpu/multigpu (after the other .gpu builds:
#                                  they empty .gpu) dp.txz (the train binary and train's
#                                  test binary, 8 MB), tp.txz (the test binaries of
#                                  internal/modelcore and diffusion, 8 MB), gen.txz
#                                  (generate, with the embedded demo, 30 MB) and the
#                                  fixtures. A call carries 64 MiB with the tracked tree's
#                                  35 MB: carry fixtures and dp.txz or tp.txz; the demo's
#                                  text over 2 GPUs needs gen.txz and is skipped without it
#   bash bench/multigpu.sh         there: the check (~1 min), then DEVICES ("1 2") runs
#                                  of STEPS (300) steps, BATCH_PER_GPU (32) rows of 512
#                                  each, at the shape of bench/train.sh's ar stage (~4 min),
#                                  then the tensor-parallel decoding below
#   bash bench/multigpu.sh tp [check|bench]
#                                  there: tensor-parallel decoding alone (one GPU or more):
#                                  check, its checks against one device (the steps' logits
#                                  on the fixture models and a 2-layer MiniCPM5-2B shape,
#                                  the decoder's tokens on the fixtures, on 2 GPUs the demo
#                                  model's text by examples/generate; ≤ 10 min); bench,
#                                  the batch-1 AR and denoise steps of the MiniCPM5-2B
#                                  shape on one device and over 1 (a mesh of one), 2, 4, 8
#                                  GPUs as the machine has them, TP_STEPS (300) steps each
#                                  (≤ 9 min); both without an argument
#
# One GPU runs on ours (what backend.Select picks) and on go-xla's backend; several run
# on go-xla's (backend.ForDevices), so the speed-up that counts is against go-xla's one
# GPU. NVLink multicast stays as the machine's environment sets it (NCCL_NVLS_ENABLE=0).
set -uo pipefail
cd "$(dirname "$0")/.."
B=.gpu/multigpu
if [ "${1:-}" = build ]; then
  set -e
  export GOTOOLCHAIN=go1.27.3 GOEXPERIMENT=simd CGO_ENABLED=1
  rm -rf $B && mkdir -p $B/dp/bin $B/tp/bin $B/gen/bin
  go build -ldflags="-s -w" -o $B/dp/bin/train ./examples/train
  go test -c -ldflags="-s -w" -o $B/dp/bin/train.test ./train
  go build -ldflags="-s -w" -o $B/gen/bin/generate ./examples/generate
  go test -c -ldflags="-s -w" -o $B/tp/bin/modelcore.test ./internal/modelcore
  go test -c -ldflags="-s -w" -o $B/tp/bin/diffusion.test ./diffusion
  mkdir -p $B/fixtures && cp -r ../shared/fixtures/models $B/fixtures/
  for a in dp tp gen; do (cd $B/$a && tar cf - bin) | xz -9 -T2 >$B/$a.txz && rm -rf $B/${a:?}; done
  du -sh $B
  exit 0
fi

OUT=${OUT:-out/multigpu}
mkdir -p "$OUT" /tmp/multigpu
# xz may be missing there
python3 -c 'import glob, tarfile; [tarfile.open(a).extractall("/tmp/multigpu") for a in glob.glob(".gpu/multigpu/*.txz")]'
T=/tmp/multigpu/bin
site=$(python3 -c 'import site; print(site.getsitepackages()[0])')
plugin="$site/jax_plugins/xla_cuda13/xla_cuda_plugin.so"
export NCCL_NVLS_ENABLE=${NCCL_NVLS_ENABLE:-0} GOPJRT_CUDA_CHECKS=0 GOMLX_NO_AUTO_INSTALL=1
unset GOMLX_BACKEND
nvidia-smi --query-gpu=index,name,memory.total --format=csv,noheader | tee "$OUT/env.txt"
gpus=$(nvidia-smi --list-gpus | wc -l)
echo "NCCL_NVLS_ENABLE=$NCCL_NVLS_ENABLE, $gpus GPUs" | tee -a "$OUT/env.txt"

# tensor_parallel: internal/modelcore's tensor-parallel decoding on go-xla's backend,
# its check against one device, then its steps' medians as a table (tp.txt).
tensor_parallel() {
  [ -x $T/modelcore.test ] || { echo; echo "tensor-parallel decoding skipped: carry .gpu/multigpu/tp.txz"; return; }
  [ "${1:-check}" = check ] || { tensor_parallel_bench; return; }
  echo; echo "=== tensor-parallel check: logits and greedy tokens against one device ($(date +%T))"
  BLOCKDIFF_PJRT_PLUGIN=$plugin BLOCKDIFF_FIXTURES=$PWD/$B/fixtures timeout 300 $T/modelcore.test \
    -test.run '^TestTensorParallelMatchesOneDevice$' -test.v -test.count=1 2>&1 | tee "$OUT/tp-check.log" |
    grep -E '^(---|ok|FAIL|PASS)|^ +--- |devices: max|Error|skip' | head -40
  echo; echo "=== tensor-parallel check: the decoder's tokens against one device ($(date +%T))"
  BLOCKDIFF_PJRT_PLUGIN=$plugin BLOCKDIFF_FIXTURES=$PWD/$B/fixtures timeout 300 $T/diffusion.test \
    -test.run '^TestTensorParallelDecoderMatchesOneDevice$' -test.v -test.count=1 2>&1 | tee "$OUT/tp-decoder.log" |
    grep -E '^(---|ok|FAIL|PASS)|^ +--- [A-Z]+: [^ ]+/[0-9]+ |Error|skip' | head -40
  if [ "$gpus" -ge 2 ] && [ -x $T/generate ]; then
    echo; echo "=== the demo model's text, go-xla's backend on one GPU and over 2 (examples/generate -devices; bf16) ($(date +%T))"
    for n in 1 2; do
      GOMLX_BACKEND="xla:$plugin" timeout 120 $T/generate -devices $n -max-tokens 96 >"$OUT/tp-generate-$n.txt" 2>"$OUT/tp-generate-$n.log" ||
        { echo "generate -devices $n failed:"; tail -3 "$OUT/tp-generate-$n.log"; }
      tail -2 "$OUT/tp-generate-$n.log"
    done
    if cmp -s "$OUT/tp-generate-1.txt" "$OUT/tp-generate-2.txt"; then echo "the same text"; else
      echo "the texts differ:"; diff "$OUT/tp-generate-1.txt" "$OUT/tp-generate-2.txt" | head -8; fi
  fi
  [ "${1:-}" = check ] || tensor_parallel_bench
}
tensor_parallel_bench() {
  echo; echo "=== tensor-parallel steps, MiniCPM5-2B shape, bf16, batch 1 ($(date +%T))"
  BLOCKDIFF_PJRT_PLUGIN=$plugin timeout 540 $T/modelcore.test -test.run '^$' -test.bench '^BenchmarkTensorParallel$' \
    -test.benchtime "${TP_STEPS:-300}x" -test.count=1 2>&1 | tee "$OUT/tp-bench.log" | grep -E 'Benchmark|FAIL|panic|Error' | head -20
  python3 - "$OUT/tp-bench.log" <<'PY' | tee "$OUT/tp.txt"
import re, sys
rows = {}
for line in open(sys.argv[1]):
    m = re.match(r'BenchmarkTensorParallel/(\w+)/(\S+?)(-\d+)?\s+\d+\s+.*?([\d.]+) median-ms\s+([\d.]+) ms/step', line)
    if m:
        rows[(m.group(1), m.group(2))] = (float(m.group(4)), float(m.group(5)))
print("median-ms: one step with the host's read of its logits; ms/step: the device's work alone")
print(f"{'step':<8} {'run':<6} {'median-ms':>9} {'vs plain':>8} {'ms/step':>8} {'vs plain':>8}")
for (kind, run), (ms, dev) in rows.items():
    base = rows.get((kind, 'plain'), (0, 0))
    rel = lambda x, b: f"{x / b:.2f}x" if b else "-"
    print(f"{kind:<8} {run:<6} {ms:>9.3f} {rel(ms, base[0]):>8} {dev:>8.3f} {rel(dev, base[1]):>8}")
PY
}
if [ "${1:-}" = tp ]; then
  tensor_parallel "${2:-}"
  exit 0
fi

echo; echo "=== check: data-parallel steps against one GPU's ($(date +%T))"
BLOCKDIFF_PJRT_PLUGIN=$plugin timeout 300 $T/train.test -test.run '^TestDataParallelMatchesOneDevice$' -test.v -test.count=1 \
  2>&1 | tee "$OUT/check.log" | grep -E '^(---|ok|FAIL|PASS)|devices|skip' | head -20

python3 - <<'PY' # random ids of bench/train.sh's vocabulary, as examples/train/gpu-smoke.sh writes them
import random, struct
random.seed(1)
ids = []
while len(ids) < 8_000_000:
    ids += [1] + [random.randint(4, 8190) for _ in range(random.randint(200, 3000))] + [2]
open('/tmp/multigpu/train.ids', 'wb').write(b'bdids001' + struct.pack('<II', 8192, 0) + struct.pack('<%dH' % len(ids), *ids))
PY

per=${BATCH_PER_GPU:-32}
shape=(-hidden 512 -layers 8 -heads 8 -kv-heads 2 -ffn 1408 -seq 512 -lr 2e-3 -warmup 50 -quiet -log-every 100)
# train LABEL DEVICES ARGS...: one run of STEPS steps; its log to $OUT/LABEL.log.
train() {
  local label=$1 n=$2
  shift 2
  BLOCKDIFF_PJRT_PLUGIN=$plugin timeout 400 $T/train -stage ar -train /tmp/multigpu/train.ids "${shape[@]}" \
    -batch $((per * n)) -steps "${STEPS:-300}" -devices "$n" "$@" >"$OUT/$label.log" 2>&1
  local rc=$?
  local rate loss
  rate=$(awk '/^tokens\/s/ {print $2}' "$OUT/$label.log")
  loss=$(awk '/^train loss/ {print $NF}' "$OUT/$label.log")
  [ "$rc" = 0 ] || { echo "$label: rc=$rc" >&2; tail -5 "$OUT/$label.log" >&2; }
  printf '%s\t%s\t%s\t%s\t%s\n' "$label" "$n" $((per * n)) "${rate:-0}" "${loss:--}" >>"$OUT/table.tsv"
}
echo; echo "=== throughput ($(date +%T))"
: >"$OUT/table.tsv"
train "ours-1" 1
train "go-xla-1" 1 -backend "xla:$plugin,preallocate=true"
for n in ${DEVICES:-1 2}; do
  [ "$n" -gt 1 ] || continue
  [ "$n" -le "$gpus" ] || { echo "skipping $n GPUs: the machine has $gpus"; continue; }
  train "go-xla-$n" "$n"
done
python3 - "$OUT/table.tsv" <<'PY' | tee "$OUT/table.txt"
import sys
rows = [l.rstrip('\n').split('\t') for l in open(sys.argv[1]) if l.strip()]
base = {r[0]: float(r[3]) for r in rows}
ours, xla1 = base.get('ours-1', 0), base.get('go-xla-1', 0)
print(f"{'run':<10} {'GPUs':>4} {'batch':>5} {'tokens/s':>10} {'vs go-xla 1':>11} {'vs ours 1':>9}  last loss")
for label, n, batch, rate, loss in rows:
    rate = float(rate)
    rel = lambda b: f"{rate / b:.2f}x" if b else "-"
    print(f"{label:<10} {n:>4} {batch:>5} {rate:>10.0f} {rel(xla1):>11} {rel(ours):>9}  {loss}")
PY

tensor_parallel

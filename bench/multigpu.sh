#!/usr/bin/env bash
# Data-parallel training over several GPUs of one host (package train's Config.Devices,
# examples/train -devices): its check against one GPU, then the training throughput at
# 1, 2, … GPUs, printed as a table. Build here, run there carrying .gpu (a machine of
# two GPUs or more: nvidia-h200-x2):
#
#   bash bench/multigpu.sh build   here: the train binary and package train's test
#                                  binary into .gpu/multigpu (build it after the other
#                                  .gpu builds: they empty .gpu)
#   bash bench/multigpu.sh         there: the check (~1 min), then DEVICES ("1 2") runs
#                                  of STEPS (300) steps, BATCH_PER_GPU (32) rows of 512
#                                  each, at the shape of bench/train.sh's ar stage (~4 min)
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
  rm -rf $B && mkdir -p $B/bin
  go build -ldflags="-s -w" -o $B/bin/train ./examples/train
  go test -c -ldflags="-s -w" -o $B/bin/train.test ./train
  (cd $B && tar cf - bin) | xz -9 -T2 >$B/bin.txz && rm -rf $B/bin
  du -sh $B
  exit 0
fi

OUT=${OUT:-out/multigpu}
mkdir -p "$OUT" /tmp/multigpu
python3 -c 'import tarfile; tarfile.open(".gpu/multigpu/bin.txz").extractall("/tmp/multigpu")' # xz may be missing there
T=/tmp/multigpu/bin
site=$(python3 -c 'import site; print(site.getsitepackages()[0])')
plugin="$site/jax_plugins/xla_cuda13/xla_cuda_plugin.so"
export NCCL_NVLS_ENABLE=${NCCL_NVLS_ENABLE:-0} GOPJRT_CUDA_CHECKS=0 GOMLX_NO_AUTO_INSTALL=1
unset GOMLX_BACKEND
nvidia-smi --query-gpu=index,name,memory.total --format=csv,noheader | tee "$OUT/env.txt"
gpus=$(nvidia-smi --list-gpus | wc -l)
echo "NCCL_NVLS_ENABLE=$NCCL_NVLS_ENABLE, $gpus GPUs" | tee -a "$OUT/env.txt"

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

#!/usr/bin/env bash
# PERFORMANCE.md's GPU figures, reproduced on one H200. Build on the development machine
# with `bash bench/build-gpu.sh`, then run on the GPU machine, carrying .gpu:
#
#   bash bench/gpu.sh                  the headline figures in one call (~7 min)
#   bash bench/gpu.sh SECTION...       sections in one call, so that figures compare
#
# Sections (their times on the H200, as measured before):
#   peer      the PyTorch peer of bench/pytorch: its steps, prefills, AR at batch 8, 64 (~2 min)
#   steps     ours: batch-1 denoise, fused and AR steps over CAPACITY (528, the peer's
#             bucket) slots after CONTEXT (512) positions, ROUNDS (2) rounds (~35 s a round)
#   prefill   ours: 512- and 2048-token prefill, one execution and per added prefill (~90 s)
#   decode    ours: decoding throughput at BATCHES (1: ~80 s; "1,8,64": ~7 min)
#   fp8       ours: steps with FP8 and W8A8 weights and MiniCPM-2B's shape (~4 min), then
#             fused decoding at FP8_BATCHES (1,8,64) in bf16, FP8, W8A8 (~5 min); FP8_PARTS
#             ("steps decode") picks the halves
#   contexts  the peer's and our steps after CONTEXTS ("2048 4096") positions (~2 min each)
#   fixtures  correctness on ours: the model's, the decoder's and quant's fixture tests (~8 min;
#             FIXTURES="diffusion" runs one package's)
#   kernels   backend/hlo's GPU tests: our kernels against XLA's products and the Go backend (~5 min)
#   headline  peer, steps, prefill, decode at batch 1 and the FP8 steps (the default)
#
# "Ours" is what backend.Select picks on CUDA (BLOCKDIFF_PJRT_PLUGIN set); `xla` runs a
# command on go-xla's backend instead. Every bench run's table and log go to $OUT.
set -u
cd "$(dirname "$0")/.."
OUT=${OUT:-out}
mkdir -p "$OUT"
python3 -c 'import tarfile; tarfile.open(".gpu/bin.txz").extractall(".gpu")' # xz may be missing there
site=$(python3 -c 'import site; print(site.getsitepackages()[0])')
plugin="$site/jax_plugins/xla_cuda13/xla_cuda_plugin.so"
export GOPJRT_CUDA_CHECKS=0 GOMLX_NO_AUTO_INSTALL=1 BLOCKDIFF_FIXTURES=$PWD/.gpu/fixtures
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee "$OUT/env.txt"

section() { echo; echo "=== $* ($(date +%T))"; }
ours() { BLOCKDIFF_PJRT_PLUGIN=$plugin "$@"; }
xla() { GOMLX_BACKEND="xla:$plugin,preallocate=true" "$@"; }

# bench NAME ARGS...: the bench binary on ours (ON=xla: go-xla's backend) with ARGS, its
# table to $OUT/NAME.txt and printed (less the steps timed one execution each, which
# carry the host's cost), its log to $OUT/NAME.log (its tail on a failure).
bench() {
  local name=$1
  shift
  "${ON:-ours}" timeout "${LIMIT:-300}" .gpu/bin/bench "$@" >"$OUT/$name.txt" 2>"$OUT/$name.log"
  local rc=$?
  grep -v 'one execution each' "$OUT/$name.txt"
  [ "$rc" = 0 ] || { echo "bench $*: rc=$rc"; tail -5 "$OUT/$name.log"; }
}

peer() {
  # The peer's GEMVs and decode attention tuned on this machine, its combine kernel.
  section "PyTorch peer"
  timeout 240 python3 bench/pytorch/peer.py --gemv-tune --dattn-combine kernel --out "$OUT/peer" >"$OUT/peer.log" 2>&1
  echo "peer: rc=$?"; tail -25 "$OUT/peer.log"
}

steps() {
  # Loops of 20 steps per execution, and the time each step added to a loop of 80 takes
  # (free of an execution's own cost, as the peer's CUDA-graph replays are).
  local round
  for round in $(seq "${ROUNDS:-2}"); do
    section "steps over ${CAPACITY:-528} slots after ${CONTEXT:-512} positions, ${FLAGS:-bf16}, round $round"
    bench "steps-${CONTEXT:-512}${FLAGS// /}-$round" -only steps -steps "${STEPS:-denoise,fused,ar}" -iters 20 \
      -context "${CONTEXT:-512}" -capacity "${CAPACITY:-528}" $FLAGS
  done
}

prefill() {
  section "prefill, one execution and per prefill added to a device loop"
  bench prefill -only prefill -added-prefills 3 $FLAGS
}

decode() {
  # 256 new tokens after a 512-token prompt; reveal-all and reveal-min are forced
  # schedules (the weights are random), upper and lower bounds.
  section "decoding at batch ${BATCHES:-1}"
  LIMIT=560 bench "decode-${BATCHES:-1}" -only decode -batches "${BATCHES:-1}" -decode "${DECODE:-}" $FLAGS
}

fp8() {
  local parts=${FP8_PARTS:-steps decode} a
  if [[ $parts == *steps* ]]; then
    FLAGS="-fp8 weight-only" ROUNDS=1 steps
    FLAGS="-fp8 w8a8" ROUNDS=1 STEPS=denoise,fused steps # its AR step compiles for minutes
    for a in "" "-fp8 weight-only"; do
      section "MiniCPM-2B's shape: ${a:-bf16}"
      bench "minicpm-2b${a// /_}" -config bench/shapes/minicpm-2b.json -only steps -iters 20 -capacity 528 $a
    done
  fi
  if [[ $parts == *decode* ]]; then
    for a in "" "-fp8 weight-only" "-fp8 w8a8"; do
      section "fused quality, reveal-all at batch ${FP8_BATCHES:-1,8,64}: ${a:-bf16}"
      # "(" leaves out the streamed cases, whose names go on with a comma.
      LIMIT=200 bench "fp8-decode${a// /_}" -only decode -batches "${FP8_BATCHES:-1,8,64}" \
        -decode "fused quality, reveal-all (" $a
    done
  fi
}

contexts() {
  # At each context the peer's block, fused and AR steps (with and without its L2 side
  # stream), then ours over context + 16 slots, the peer's bucket.
  local c
  for c in ${CONTEXTS:-2048 4096}; do
    section "the peer after $c positions"
    timeout 240 python3 bench/pytorch/peer.py --batch 1 --context "$c" --max-len $((c + 64)) --prefill 512 \
      --only block,fused,ar/main,ar/side-l2 --gemv-tune --dattn-combine kernel --no-profile \
      --out "$OUT/peer-$c" >"$OUT/peer-$c.log" 2>&1
    echo "peer: rc=$?"; tail -22 "$OUT/peer-$c.log"
    CONTEXT=$c CAPACITY=$((c + 16)) ROUNDS=1 steps
  done
}

fixtures() {
  # float32 products at full precision (notf32) for the exact fixtures, on ours as
  # picked: its configuration is bench's first line (an unknown -dtype stops it there).
  config=$(ours .gpu/bin/bench -dtype none 2>&1 | sed -n 's/^backend: \([^ ]*\) .*/\1/p')
  local p
  for p in ${FIXTURES:-model diffusion quant}; do # a subset: FIXTURES="diffusion"
    case $p in
    model) gotest model modelcore.test 'TestFixtureLogits|TestShardedLogits|TestCachedPath|TestWhile|TestFused' ;;
    diffusion) gotest diffusion diffusion.test "${DIFFUSION_TESTS:-TestFixtureDecode|TestFixtureAutoregressive|TestBatchEqualsSingle|TestSampling|TestStreamAndCancel|TestNonFiniteLogits|TestFinishLengthWhenStopIsPastN|TestGenerateInsideStream}" ;;
    quant) gotest quant quant.test 'E4M3Node|FP8Linear|QuantizedDiffusion|QuantizedWhileLoop|FixtureAccuracy' ;;
    esac
  done
}
gotest() { # gotest NAME BINARY REGEXP: a test binary's tests on $config,notf32
  section "$1 on $config,notf32"
  GOMLX_BACKEND="$config,notf32" timeout 280 ".gpu/bin/$2" -test.v -test.run "$3" >"$OUT/$1.log" 2>&1
  echo "rc=$?"; grep -E '^\s*(--- |ok|FAIL|PASS)|Error:|panic' "$OUT/$1.log" | head -40
}

kernels() {
  # Each test compares our kernels' or ops' results with XLA's dot or the Go backend's.
  section "backend/hlo's GPU tests"
  BLOCKDIFF_PJRT_PLUGIN=$plugin timeout 400 .gpu/bin/hlo.test -test.v >"$OUT/hlo.log" 2>&1
  echo "rc=$?"; grep -E '^(--- FAIL|ok|FAIL|PASS)|Error:|panic' "$OUT/hlo.log" | head -40
}

headline() {
  peer
  steps
  prefill
  decode
  FLAGS="-fp8 weight-only" ROUNDS=1 steps
}

FLAGS=${FLAGS:-}
sections=("$@")
[ ${#sections[@]} -eq 0 ] && sections=(headline)
for s in "${sections[@]}"; do "$s"; done
# A device call brings back a few files: the logs and tables go into one.
files=$(cd "$OUT" && find . -type f ! -name all.tgz ! -name env.txt)
[ -z "$files" ] || (cd "$OUT" && echo "$files" | tar czf all.tgz -T - && echo "$files" | xargs rm -f &&
  find . -type d -empty -delete && echo "logs and tables: $OUT/all.tgz")

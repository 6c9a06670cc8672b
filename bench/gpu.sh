#!/usr/bin/env bash
# Every GPU measurement of BENCHMARKS.md in one device call (the session's device time
# is short): correctness on XLA, the PyTorch peer, then our benchmarks, in the same
# run so figures can be compared. Run bench/build-gpu.sh first, then on the device:
#
#   bash bench/gpu.sh        (carry .gpu; logs and tables go to $OUT)
set -u
cd "$(dirname "$0")/.."
OUT=${OUT:-out}
mkdir -p "$OUT"
tar xzf .gpu/bin.tgz -C .gpu
site=$(python3 -c 'import site; print(site.getsitepackages()[0])')
plugin="$site/jax_plugins/xla_cuda13/xla_cuda_plugin.so"
export GOPJRT_CUDA_CHECKS=0 GOMLX_NO_AUTO_INSTALL=1 BLOCKDIFF_FIXTURES=$PWD/.gpu/fixtures
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee "$OUT/env.txt"

section() { echo; echo "=== $* ($(date +%T))"; }

# 1. Correctness on XLA: float32 without TF32 for the exact fixtures, bf16 tolerance.
section "fixtures on XLA"
GOMLX_BACKEND="xla:$plugin,preallocate=true,notf32" timeout 120 .gpu/bin/model.test -test.v \
  -test.run 'TestFixtureLogits|TestShardedLogits|TestCachedPath|TestWhile' >"$OUT/model.log" 2>&1
echo "model: rc=$?"; grep -E '^(--- |ok|FAIL|PASS)|bf16:' "$OUT/model.log" | head -20
GOMLX_BACKEND="xla:$plugin,preallocate=true,notf32" timeout 240 .gpu/bin/diffusion.test -test.v \
  -test.run 'TestFixtureDecode|TestFixtureAutoregressive|TestBatchEqualsSingle|TestSampling|TestStreamAndCancel' \
  >"$OUT/diffusion.log" 2>&1
echo "diffusion: rc=$?"; grep -E '^(--- |ok|FAIL|PASS)' "$OUT/diffusion.log" | head -20

# 2. The PyTorch CUDA-graph peer, in the same run.
section "PyTorch peer"
timeout 240 python3 bench/pytorch/peer.py --out "$OUT" >"$OUT/peer.log" 2>&1
echo "peer: rc=$?"; tail -25 "$OUT/peer.log"

# 3. Ours: steps, prefill and decoding at batch 1, 8 and 64 (bf16, MiniCPM5-2B shape).
section "blockdiff bench"
export GOMLX_BACKEND="xla:$plugin,preallocate=true"
timeout 420 .gpu/bin/bench -only steps,prefill,decode -batches 1,8,64 -json "$OUT/bench.json" >"$OUT/bench.log" 2>&1
echo "bench: rc=$?"; tail -30 "$OUT/bench.log"

# 4. FP8 against bf16: the same steps with FP8 weights (both in-graph decoders).
for fp8 in "weight-only -fp8-decoder lut" "weight-only -fp8-decoder bits" "w8a8 -fp8-decoder bits"; do
  section "FP8 steps: -fp8 $fp8"
  timeout 200 .gpu/bin/bench -only steps -fp8 $fp8 >"$OUT/fp8-${fp8// /_}.log" 2>&1
  echo "rc=$?"; tail -8 "$OUT/fp8-${fp8// /_}.log"
done

# 5. Where the time goes (only with "bash bench/gpu.sh explore"): the step loop's HLO
#    after optimisation (fusions, chosen GEMM kernels), then the same steps under XLA
#    flag variants.
if [ "${1:-}" = explore ]; then
  section "XLA dump of the step loops"
  XLA_FLAGS="--xla_dump_to=$OUT/xla --xla_dump_hlo_as_text --xla_dump_hlo_module_re=.*bench.loop.*" \
    timeout 150 .gpu/bin/bench -only steps -iters 20 >"$OUT/dump.log" 2>&1
  tar czf "$OUT/xla-dump.tgz" -C "$OUT" xla && rm -rf "$OUT/xla"
  for flags in "--xla_gpu_enable_command_buffer=FUSION,CUBLAS,CUBLASLT,CUSTOM_CALL,WHILE,CONDITIONAL" \
               "--xla_gpu_autotune_level=4" "--xla_gpu_enable_triton_gemm=false"; do
    section "steps with XLA_FLAGS=$flags"
    XLA_FLAGS="$flags" timeout 150 .gpu/bin/bench -only steps -iters 20 2>&1 | tail -7
  done
fi

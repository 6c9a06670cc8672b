#!/usr/bin/env bash
# The GPU measurements of BENCHMARKS.md, in sections that share one device call so that
# figures can be compared within a run. Run bench/build-gpu.sh first, then on the
# device (carrying .gpu; logs and tables go to $OUT):
#
#   bash bench/gpu.sh                  peer and bench (~400 s on the H200)
#   bash bench/gpu.sh peer steps       the same-run comparison: the peer, then batch-1
#                                      steps and prefill on XLA's backend and ours (~340 s)
#   bash bench/gpu.sh fixtures         correctness on XLA (~300 s)
#   bash bench/gpu.sh hlo              our own StableHLO backend against the Go backend
#                                      and the model fixtures (<= 270 s); hlodecoder: the
#                                      decoder's fixtures and FP8 on it (<= 540 s)
#   bash bench/gpu.sh hlosteps         its steps with and without our Triton GEMVs
#                                      against XLA's (<= 400 s); hlodecode: prefill and
#                                      batch-1 decoding on XLA's backend and ours (<= 300 s;
#                                      BATCHES="8,64" ONLY=decode: other batch sizes)
#   bash bench/gpu.sh compare profile  batch-1 steps against the peer on cuBLAS, FP8
#                                      against bf16, kernel times, the FP8 loop's HLO (~220 s)
#   bash bench/gpu.sh variants         the builds of VARIANTS="ref ..." bash bench/build-gpu.sh
#                                      beside this one (~200 s per build;
#                                      VARIANTS="ref ..." bash bench/gpu.sh variants: some)
#
# Sections: peer, bench, steps (after peer: the same-run comparison), fixtures, hlo,
# hlodecoder, hlosteps and hlodecode (backend/hlo), freshinputs (what new input buffers
# cost an execution), triton (bench/tritonprobe), prefetch (its L2 prefetch probe),
# persistent (its persistent-kernel probe), dattnab (the peer's AR step under variants of
# its decode attention),
# aroptions (options triton=preload and splitdown: their checks on the GPU, the AR step
# with and without them), fp8preload (the FP8 AR step with and without triton=preload),
# arloop (the decoder's AR loop against the bench's, and builds of VARIANTS), decodeab
# and stepsab (batch-1 decoding and steps of builds of VARIANTS), decodelabels (decoding
# on backend labels), readbackab (decoding under several Config.BlocksPerReadback),
# whileloop (~220 s: what a While whose exit depends on data costs per iteration, and
# whether command buffers holding the While remove it), compare, fp8 (every FP8
# decoder), fp8gemv (FP8 on ours, our GEMV reading the bytes, W8A8 on FP8 tensor
# cores, split K loops), fp8decode (its decoding at batch 1 and 8), fp8tiles (the FP8
# and W8A8 tiles' checks and figures: MiniCPM5-2B's steps and batch-8 decoding), ownslot
# (one-token windows past the copy bound: their check, AR steps), xlafp8 (FP8 past 32
# rows on XLA's GEMM reading the bytes, own slots at every batch, ragged GEMVs: checks
# and decoding at batch 8 and 64), w8a8 (W8A8 past 32 rows on XLA's FP8 x FP8 GEMM:
# checks, decoding at batch 8 and 64), w8a8compile (how
# long W8A8's AR step compiles), explore
# (per-layer cost, the padded AR step, XLA flag variants, HLO dumps),
# tiling (XLA's exhaustive GEMM search and its cache on disk), flagsweep (the steps
# under sets of XLA flags), tritonattention (our attention kernel over the cache),
# prefillflags (XLA's GEMM flags on the prefill), attnbench
# (cuDNN's prefill attention with three masks), hostcost (a CPU profile of the
# prefills), prefillab (prefills of builds of other refs), variants
# (builds of other git refs, see bench/build-gpu.sh), tritonfold (ours with
# option triton=fold and without it), ropeab (ours against ours without triton=rope),
# normab (ours against ours without triton=norm), placeab (ours against ours without
# triton=place), buffers (an execution's cost by its buffers), stacked (whether XLA
# copies a stacked weight's layer), prefilladded (prefill per added prefill), trace
# (in-graph kernel times, bench/cupti), contexts (batch-1 steps at longer contexts,
# ours and the peer's), profile, and pack (every file under $OUT into one, since a
# device call brings back at most 8). A device call lasts at most 600 s, so the default
# stops at two.
set -u
cd "$(dirname "$0")/.."
OUT=${OUT:-out}
mkdir -p "$OUT"
python3 -c 'import tarfile; tarfile.open(".gpu/bin.txz").extractall(".gpu")' # xz may be missing there
site=$(python3 -c 'import site; print(site.getsitepackages()[0])')
plugin="$site/jax_plugins/xla_cuda13/xla_cuda_plugin.so"
export GOPJRT_CUDA_CHECKS=0 GOMLX_NO_AUTO_INSTALL=1 BLOCKDIFF_FIXTURES=$PWD/.gpu/fixtures
XLA_BF16="xla:$plugin,preallocate=true"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee "$OUT/env.txt"
sections=("$@")
[ ${#sections[@]} -eq 0 ] && sections=(peer bench)

section() { echo; echo "=== $* ($(date +%T))"; }

fixtures() {
  # float32 without TF32 for the exact fixtures; the bf16 test loads bf16 itself.
  section "fixtures on XLA"
  GOMLX_BACKEND="$XLA_BF16,notf32" timeout 240 .gpu/bin/model.test -test.v \
    -test.run 'TestFixtureLogits|TestShardedLogits|TestCachedPath|TestWhile|TestFused' >"$OUT/model.log" 2>&1
  echo "model: rc=$?"; grep -E '^(--- |ok|FAIL|PASS)|bf16:|position' "$OUT/model.log" | head -20
  GOMLX_BACKEND="$XLA_BF16,notf32" timeout 240 .gpu/bin/diffusion.test -test.v \
    -test.run 'TestFixtureDecode|TestFixtureAutoregressive|TestBatchEqualsSingle|TestSampling|TestStreamAndCancel' \
    >"$OUT/diffusion.log" 2>&1
  echo "diffusion: rc=$?"; grep -E '^(--- |ok|FAIL|PASS)|Error:|rror' "$OUT/diffusion.log" | head -20
}

hlo() {
  # Our own StableHLO backend (backend/hlo): its ops, the fixture models' logits and
  # greedy decodes and cuDNN's attention against the Go backend, and triton=gemv-all's
  # GEMVs against its dot_generals, then model.test's fixture tests on it (float32
  # products at full precision, as in the fixtures section).
  section "hlo backend"
  BLOCKDIFF_PJRT_PLUGIN=$plugin timeout 300 .gpu/bin/hlo.test -test.v >"$OUT/hlo.log" 2>&1
  echo "hlo.test: rc=$?"; grep -E '^\s*(--- |ok|FAIL|PASS)|Error:|rror|max \|' "$OUT/hlo.log" | head -70
  GOMLX_BACKEND="bdxla:$plugin,notf32" timeout 150 .gpu/bin/model.test -test.v \
    -test.run 'TestFixtureLogits|TestCachedPath|TestFused' >"$OUT/model-hlo.log" 2>&1
  echo "model on hlo: rc=$?"; grep -E '^\s*(--- |ok|FAIL|PASS)|backend:|Error:|fused|max' "$OUT/model-hlo.log" | head -40
}

hlodecoder() {
  # The decoder's fixture tests and quant's GPU-relevant tests on ours as picked on
  # CUDA (every triton option, so windows placed and one-token windows unpadded at
  # batch 2-63), as on XLA's backend in the fixtures section (<= 540 s; run AC:
  # TestFixtureAccuracy, which compiles many small programs, took 178 s; runs before FZ
  # ran triton=gemv alone).
  local ours
  ours=$(backend_config ours)
  section "decoder and FP8 on ours ($ours)"
  GOMLX_BACKEND="$ours,notf32" timeout 240 .gpu/bin/diffusion.test -test.v \
    -test.run 'TestFixtureDecode|TestFixtureAutoregressive|TestBatchEqualsSingle|TestSampling|TestStreamAndCancel' \
    >"$OUT/diffusion-hlo.log" 2>&1
  echo "diffusion on hlo: rc=$?"; grep -E '^(--- |ok|FAIL|PASS)|Error:|rror' "$OUT/diffusion-hlo.log" | head -20
  GOMLX_BACKEND="$ours,notf32" timeout 300 .gpu/bin/quant.test -test.v \
    -test.run 'E4M3Node|FP8Linear|QuantizedDiffusion|QuantizedWhileLoop|FixtureAccuracy' >"$OUT/quant-hlo.log" 2>&1
  echo "quant on hlo: rc=$?"; grep -E '^(--- |ok|FAIL|PASS)|Error:|rror' "$OUT/quant-hlo.log" | head -20
}

# backend_config prints the GOMLX_BACKEND of a label of the hlo sections: XLA's backend,
# ours bare (bdxla), with triton=gemv, triton=gemv-all, triton=gemv,triton=attention or
# that and triton=fold (norms, SwiGLU and residual adds folded into our 1-row GEMVs),
# each preallocating; "ours" is what backend.Select picks on CUDA (runs before BW:
# triton=gemv alone; runs BZ-CG: triton=attention ran our attention kernels at batch 1
# and from batch 32 only, and bdxla-gemv-attention-all, triton=attention-all, at every
# batch, as triton=attention does now; runs before CM: without triton=fold).
backend_config() {
  case $1 in
    xla) echo "$XLA_BF16" ;;
    bdxla) echo "bdxla:$plugin,preallocate=true" ;;
    bdxla-gemv) echo "bdxla:$plugin,preallocate=true,triton=gemv" ;;
    bdxla-gemv-all) echo "bdxla:$plugin,preallocate=true,triton=gemv-all" ;;
    bdxla-gemv-attention) echo "bdxla:$plugin,preallocate=true,triton=gemv,triton=attention" ;;
    bdxla-gemv-attention-fold) echo "bdxla:$plugin,preallocate=true,triton=gemv,triton=attention,triton=fold" ;;
    bdxla-gemv-attention-fold-pdl) echo "bdxla:$plugin,preallocate=true,triton=gemv,triton=attention,triton=fold,triton=pdl" ;;
    bdxla-gemv-attention-fold-pdl-rope) echo "$(backend_config bdxla-gemv-attention-fold-pdl),triton=rope" ;;
    bdxla-gemv-attention-fold-pdl-rope-norm) echo "$(backend_config bdxla-gemv-attention-fold-pdl-rope),triton=norm" ;;
    bdxla-gemv-attention-fold-pdl-rope-norm-place) echo "$(backend_config bdxla-gemv-attention-fold-pdl-rope-norm),triton=place" ;;
    bdxla-gemv-attention-fold-pdl-rope-norm-place-preload) echo "$(backend_config bdxla-gemv-attention-fold-pdl-rope-norm-place),triton=preload" ;;
    bdxla-gemv-attention-fold-pdl-rope-norm-place-preload-split) echo "$(backend_config bdxla-gemv-attention-fold-pdl-rope-norm-place-preload),splitdown=2" ;;
    ours) backend_config bdxla-gemv-attention-fold-pdl-rope-norm-place-preload-split ;; # what backend.Select picks on CUDA
    ours-no-split) echo "$(backend_config bdxla-gemv-attention-fold-pdl-rope-norm-place),triton=preload" ;; # ours less splitdown=2 (runs before GV)
    ours-no-preload) echo "$(backend_config bdxla-gemv-attention-fold-pdl-rope-norm-place),splitdown=2" ;; # ours less triton=preload (run GV)
    ours-neither) backend_config bdxla-gemv-attention-fold-pdl-rope-norm-place ;; # before both (runs before GV)
    ours-gemv-all) echo "$(backend_config ours),triton=gemv-all" ;; # and every product of 1-8 rows our GEMV
    ours-no-norm) echo "$(backend_config bdxla-gemv-attention-fold-pdl-rope),triton=place" ;; # ours less triton=norm
    ours-no-pdl) echo "$(backend_config bdxla-gemv-attention-fold),triton=rope,triton=norm,triton=place" ;; # ours less triton=pdl
  esac
}

hlosteps() {
  # The batch-1 steps in a device loop (bf16, MiniCPM5-2B shape, random weights) on
  # XLA's backend, ours, ours with our Triton GEMVs where the probe measured them faster
  # (triton=gemv: 1 row, the larger weights) and ours with every product of 1-8 rows as
  # our GEMV (triton=gemv-all); preallocating as $XLA_BF16 does. A run cut by its
  # timeout shows no times (bench prints its table at the end).
  section "hlo backend: steps against XLA's (ms per step in a device loop of 20)"
  printf '%-12s %-4s %10s %10s %10s %10s\n' backend rc denoise fused ar ar-padded
  local label
  for label in xla bdxla bdxla-gemv bdxla-gemv-all; do
    GOMLX_BACKEND=$(backend_config "$label") timeout 100 .gpu/bin/bench -only steps -steps denoise,fused,ar,ar-padded -iters 20 -added-steps 0 \
      >"$OUT/steps-$label.log" 2>&1
    local rc=$?
    printf '%-12s %-4s' "$label" "$rc"
    awk '/in a device loop/ { sub(/.*in a device loop +/, ""); split($0, f, / +/); printf " %10s", f[2] }' \
      "$OUT/steps-$label.log"
    echo
    [ "$rc" = 0 ] || grep -m3 -E 'rror|panic|FAIL' "$OUT/steps-$label.log" | cut -c1-300
  done
}

hlodecode() {
  # Prefill (cuDNN's attention and plain) and decoding on XLA's backend and on ours as
  # picked (whose 1-row AR steps are not padded at batch 1: backend.MinWindow), at the
  # batch sizes of BATCHES (default 1; each size adds ~60-100 s per backend).
  # ONLY="decode" skips the prefill; LABELS="ours" times one backend.
  local label
  for label in ${LABELS:-xla ours}; do
    section "${ONLY:-prefill,decode} at batch ${BATCHES:-1} on $label"
    GOMLX_BACKEND=$(backend_config "$label") timeout "${DECODE_TIMEOUT:-150}" .gpu/bin/bench -only "${ONLY:-prefill,decode}" \
      -batches "${BATCHES:-1}" -prefill-attention auto,plain >"$OUT/decode-$label.log" 2>&1
    echo "rc=$?"; grep -E '^(prefill|fused|autoregressive)' "$OUT/decode-$label.log" | grep -v compiled
  done
}

steps() {
  # Batch-1 steps in a device loop of 20 (and per step added to one of 80) and prefill
  # (cuDNN attention) on XLA's backend and ours as picked on CUDA; after peer in the
  # same call, the same-run comparison of BENCHMARKS.md (~200 s; with the peer ~340 s,
  # run CU). Our steps
  # attend over their whole cache: 2048 slots, then 528, the peer's bucket for a
  # context of 512 (its decode steps attend over roundup(context + commit, 16) slots),
  # then 768, what our decoder would size (a multiple of 256: no padding of the keys).
  local label
  for label in xla ours; do
    section "steps and prefill on $label"
    GOMLX_BACKEND=$(backend_config "$label") timeout 180 .gpu/bin/bench -only steps,prefill -steps denoise,fused,ar \
      -iters 20 -prefill-attention auto >"$OUT/steps-prefill-$label.log" 2>&1
    echo "rc=$?"; grep -E 'device loop|^prefill' "$OUT/steps-prefill-$label.log" | grep -v compiled
  done
  local slots
  for slots in 528 768; do
    section "steps on ours, a cache of $slots slots"
    CAPACITY=$slots steps_of .gpu/bin/bench
  done
}

dattnab() {
  # The peer's AR batch-1 step under variants of its decode attention (peer.py's
  # --dattn-steps, --dattn-preload and --dattn-combine; DATTN_VARIANTS="STEPS:PRELOAD:COMBINE
  # ..."), one process each, alternating over ROUNDS rounds (default 2), ~45 s a process;
  # PEER_FLAGS: more of peer.py's flags for every process (e.g. --gemv-tune).
  local round v st pre comb name
  for round in $(seq "${ROUNDS:-2}"); do
    for v in ${DATTN_VARIANTS:-1:off:kernel 1:on:kernel 2:on:kernel 4:on:kernel 4:on:last-cta}; do
      IFS=: read -r st pre comb <<<"$v"
      name="dattn-$st-$pre-$comb${PEER_FLAGS:+-tuned}-$round"
      section "peer AR step, --dattn-steps $st --dattn-preload $pre --dattn-combine $comb, round $round"
      timeout 150 python3 bench/pytorch/peer.py --batch 1 --prefill 512 --only ar/main --dattn-tune off \
        --dattn-steps "$st" --dattn-preload "$pre" --dattn-combine "$comb" --no-profile ${PEER_FLAGS:-} \
        --out "$OUT/$name" >"$OUT/$name.log" 2>&1
      echo "rc=$?"; grep -E '^\[decode-attn\]|FAIL|^ar |AR step batch 1' "$OUT/$name.log" | tail -4
    done
  done
}

aroptions() {
  # Options triton=preload (the o GEMV loads its weight before its wait, the attention
  # letting it launch early) and splitdown (the down GEMV split over K, its parts summed
  # in order by the GEMVs that read them), both picked by backend.Select on CUDA since
  # run GW: their correctness on the GPU (hlo's fold tests, with both on and 3 parts on
  # tiny-llama, and the decoder's fixtures under ours with splitdown=3), then our AR
  # step over 528 slots under ours, ours without either option and without both
  # (LABELS), alternating over ROUNDS rounds (default 2; ~4 min).
  local ours
  ours=$(backend_config ours)
  section "aroptions: hlo's fold tests and the decoder's fixtures under ours with splitdown=3"
  BLOCKDIFF_PJRT_PLUGIN=$plugin timeout 150 .gpu/bin/hlo.test -test.v \
    -test.run 'TestTritonFold|TestSplitDown|TestPreload' >"$OUT/aroptions-hlo.log" 2>&1
  echo "rc=$?"; grep -E '^\s*(--- |ok|FAIL|PASS)|Error:' "$OUT/aroptions-hlo.log" | head -24
  GOMLX_BACKEND="$ours,notf32,splitdown=3" timeout 150 .gpu/bin/diffusion.test -test.v \
    -test.run 'TestFixtureDecode|TestFixtureAutoregressive' >"$OUT/aroptions-diffusion.log" 2>&1
  echo "rc=$?"; grep -E '^(--- |ok|FAIL|PASS)' "$OUT/aroptions-diffusion.log"
  arlabels "AR step" "${LABELS:-ours ours-no-preload ours-no-split ours-neither}"
}

arlabels() {
  # arlabels TITLE LABELS [FLAGS...]: our AR step over 528 slots under each backend
  # label of LABELS, with the bench's FLAGS, alternating over ROUNDS rounds (default 2).
  local round v
  for round in $(seq "${ROUNDS:-2}"); do
    for v in $2; do
      section "$1, $v, round $round"
      GOMLX_BACKEND=$(backend_config "$v") timeout 120 .gpu/bin/bench -only steps -steps ar -iters 20 -capacity 528 \
        "${@:3}" 2>&1 | grep -E 'device loop|rror' | grep -v compiled
    done
  done
}

fp8preload() {
  # The FP8 AR step (-fp8 weight-only) under ours and ours without triton=preload
  # (whose attention now launches the FP8 o GEMV early, which does not preload its
  # weight), alternating over ROUNDS rounds (default 2; ~40 s a process).
  arlabels "FP8 AR step" "ours ours-no-preload" -fp8 weight-only
}

freshinputs() {
  # What new input buffers cost a prefill on ours (run AG: +8 ms at 512 and at 2048
  # tokens, with one new input or four): the same inputs each run, new ones, new ones
  # with the previous freed first (does the allocator then hand out the same addresses?),
  # and new ones without XLA's command buffers (are its CUDA graphs updated for new
  # addresses?); then batch-1 decoding, whose prefill inside the decoder took 12.5-16.4
  # ms against 7.2 ms bare (runs AE, AG). ~200 s.
  export GOMLX_BACKEND=$(backend_config ours)
  local flags
  for flags in "" "-prefill-fresh" "-prefill-fresh -prefill-free"; do
    section "prefill $flags"
    timeout 70 .gpu/bin/bench -only prefill $flags 2>&1 | grep '^prefill'
  done
  section "prefill -prefill-fresh, XLA_FLAGS=--xla_gpu_enable_command_buffer="
  XLA_FLAGS=--xla_gpu_enable_command_buffer= timeout 70 .gpu/bin/bench -only prefill -prefill-fresh 2>&1 | grep '^prefill'
  section "decoding at batch 1"
  timeout 100 .gpu/bin/bench -only decode -batches 1 2>&1 | grep -E '^(fused|autoregressive) '
}

peer() {
  section "PyTorch peer"
  # The GEMVs tuned (the persistent 1-row ones no longer candidates: --gemv-tune picked
  # the gate/up one, as fast alone and 3 % slower in the AR step's graph, runs GG, GH)
  # and the combine kernel. Run GI ran the table's configs: AR batch 8 then took 4.287 ms
  # against 3.935 tuned (run GM), batch 1 the same.
  timeout 240 python3 bench/pytorch/peer.py --gemv-tune --dattn-combine kernel --out "$OUT" >"$OUT/peer.log" 2>&1
  echo "peer: rc=$?"; tail -25 "$OUT/peer.log"
}

bench() {
  # Steps, prefill and decoding at batch 1, 8 and 64 (bf16, MiniCPM5-2B shape) on the
  # backend blockdiff picks on CUDA (ours; runs before AC: XLA's).
  section "blockdiff bench"
  GOMLX_BACKEND=$(backend_config ours) timeout 300 .gpu/bin/bench -only steps,prefill,decode -batches 1,8,64 \
    -steps denoise,fused,ar,ar-padded -prefill-attention fused,plain -json "$OUT/bench.json" >"$OUT/bench.log" 2>&1
  echo "bench: rc=$?"; grep -v '^\(backend\|loaded\)' "$OUT/bench.log" | tail -40
}

fp8() {
  # The same steps with FP8 weights (both in-graph decoders), against bf16 above.
  for fp8 in "weight-only -fp8-decoder bits" "w8a8 -fp8-decoder bits" "weight-only -fp8-decoder lut"; do
    section "FP8 steps: -fp8 $fp8"
    GOMLX_BACKEND=$XLA_BF16 timeout 200 .gpu/bin/bench -only steps -fp8 $fp8 >"$OUT/fp8-${fp8// /_}.log" 2>&1
    echo "rc=$?"; tail -7 "$OUT/fp8-${fp8// /_}.log"
  done
}

fp8gemv() {
  # FP8 weights on ours (runs EN-FB, ~7 min; fp8decode after it, ~2 min): hlo's GPU
  # tests of our kernels and folds on FP8 bytes against XLA's product of the decoded
  # weight (W8A8 layers' FP8 × FP8 products too, their K loops split); the batch-1
  # steps in bf16, with FP8 weights that our kernels read up to 64 rows (quant's table
  # decoder, -fp8-decoder lut, the default), the same with an FP8 head (-fp8-head; runs
  # before FC: FP8 weights that XLA decodes, -fp8-decoder bits, which the backend does
  # not recognise, here) and W8A8.
  section "our GEMV on FP8 bytes and the folds around it against XLA's product of the decoded weight"
  BLOCKDIFF_PJRT_PLUGIN=$plugin timeout 240 .gpu/bin/hlo.test -test.v -test.run 'TritonFP8MatchesDot|TritonGEMVModelsMatch|TritonFoldModelsMatch|TritonNormModelsMatch' 2>&1 |
    grep -E '^\s*(--- |ok|FAIL|PASS)|Error:|max \|'
  local a
  for a in "" "-fp8 weight-only" "-fp8 weight-only -fp8-head" "-fp8 w8a8"; do
    section "steps: ${a:-bf16}"
    GOMLX_BACKEND=$(backend_config ours) timeout 170 .gpu/bin/bench -only steps -steps denoise,fused,ar -iters 20 \
      -capacity 528 $a 2>&1 | grep -E 'device loop|FP8' | grep -v compiled
  done
}

fp8decode() {
  # Fused decoding at batch 1 and 8 on ours, bf16 and FP8 weight-only (~2 min).
  local a
  for a in "" "-fp8 weight-only"; do
    section "decoding: ${a:-bf16}"
    GOMLX_BACKEND=$(backend_config ours) timeout 150 .gpu/bin/bench -only decode -batches 1,8 \
      -decode "fused quality, reveal-all" $a 2>&1 | grep -E '^fused|FP8' | grep -v compiled
  done
}

fp8tiles() {
  # FP8 and W8A8 tiles (~5 min): hlo's GPU tests of FP8 and W8A8 products and of the
  # fixture models on them against XLA's product of the decoded weight (folds and norms
  # on FP8: fp8gemv), then MiniCPM5-2B's
  # batch-1 steps in bf16, FP8 and W8A8 (denoise and fused: its AR step's program
  # compiles for over 100 s, run FJ), and fused decoding at batch 8 in bf16 and FP8.
  section "FP8 and W8A8 products and fixture models against XLA's product of the decoded weight"
  BLOCKDIFF_PJRT_PLUGIN=$plugin timeout 200 .gpu/bin/hlo.test -test.v \
    -test.run 'TritonFP8MatchesDot|TritonGEMVModelsMatch/(fp8|w8a8)' 2>&1 | grep -E '^\s*(--- FAIL|ok|FAIL|PASS)|Error:|max \|'
  local a steps
  for a in "" "-fp8 weight-only" "-fp8 w8a8"; do
    steps=denoise,fused,ar
    [ "$a" = "-fp8 w8a8" ] && steps=denoise,fused
    section "steps: ${a:-bf16}"
    GOMLX_BACKEND=$(backend_config ours) timeout 100 .gpu/bin/bench -only steps -steps $steps -iters 20 -capacity 528 $a \
      2>&1 </dev/null | grep -E 'device loop, per|rror' | grep -v compiled
  done
  for a in "" "-fp8 weight-only"; do
    section "fused decoding at batch 8: ${a:-bf16}"
    GOMLX_BACKEND=$(backend_config ours) timeout 100 .gpu/bin/bench -only decode -batches 8 -decode "fused quality, reveal-all" \
      $a 2>&1 </dev/null | grep -E '^fused|rror' | grep -v compiled
  done
}

# fused_8_64 LIMIT ARGS... runs prefill and fused decoding at batch 8 and 64 on ours, a
# process per ARGS (bench flags: "" for bf16, "-fp8 w8a8", ...), each under LIMIT s.
fused_8_64() {
  local limit=$1 a
  shift
  for a in "$@"; do
    section "prefill and fused decoding at batch 8 and 64: ${a:-bf16}"
    GOMLX_BACKEND=$(backend_config ours) timeout "$limit" .gpu/bin/bench -only prefill,decode -batches 8,64 \
      -decode "fused quality, reveal-all" $a 2>&1 </dev/null | grep -E '^(prefill|fused)|rror' | grep -v compiled
  done
}

xlafp8() {
  # FP8 products past 32 rows on XLA's GEMM reading the bytes as f8E4M3FN, one-token
  # windows in their own slot at every batch size, ragged GEMVs (~7 min): their GPU
  # checks and quant's FP8 tests on ours, then prefill and fused decoding at batch 8 and
  # 64 in bf16, FP8 weight-only and W8A8, and AR decoding at batch 8 and 64 in bf16.
  section "FP8 past 32 rows, own slots at batch 2, ragged GEMVs: checks"
  BLOCKDIFF_PJRT_PLUGIN=$plugin timeout 200 .gpu/bin/hlo.test -test.v \
    -test.run 'TritonFP8MatchesDot|TritonGEMVModelsMatch/(fp8|w8a8)|TritonPlaceBatch2Match|TritonRaggedGEMV' 2>&1 |
    grep -E '^\s*(--- FAIL|ok|FAIL|PASS)|Error:|max \|'
  GOMLX_BACKEND="bdxla:$plugin,notf32,triton=gemv" timeout 150 .gpu/bin/quant.test -test.v \
    -test.run 'FP8Linear|QuantizedDiffusion|QuantizedWhileLoop' 2>&1 | grep -E '^(--- |ok|FAIL|PASS)|Error:|rror'
  fused_8_64 150 "" "-fp8 weight-only" "-fp8 w8a8"
  section "AR decoding at batch 8 and 64: bf16"
  GOMLX_BACKEND=$(backend_config ours) timeout 100 .gpu/bin/bench -only decode -batches 8,64 -decode autoregressive \
    2>&1 </dev/null | grep -E '^autoregressive|rror' | grep -v compiled
}

w8a8() {
  # W8A8 products past 32 rows on XLA's FP8 x FP8 GEMM under precision HIGHEST (~9 min):
  # the FP8 products at three shapes and the fixture W8A8 models against the plain
  # backend, quant's GPU-relevant tests (the fixture models' accuracy among them) on ours,
  # then prefill and fused decoding at batch 8 and 64, bf16 then W8A8.
  section "W8A8 past 32 rows on XLA's FP8 x FP8 GEMM: checks"
  BLOCKDIFF_PJRT_PLUGIN=$plugin timeout 150 .gpu/bin/hlo.test -test.v \
    -test.run 'TritonFP8MatchesDot|TritonGEMVModelsMatch/w8a8' 2>&1 | grep -E '^\s*(--- FAIL|ok|FAIL|PASS)|Error:|max \|'
  GOMLX_BACKEND="$(backend_config ours),notf32" timeout 280 .gpu/bin/quant.test -test.v \
    -test.run 'FP8Linear|QuantizedDiffusion|QuantizedWhileLoop|FixtureAccuracy' >"$OUT/quant-w8a8.log" 2>&1
  echo "quant on ours: rc=$?"; grep -E '^(--- |ok|FAIL|PASS)|Error:|rror|W8A8' "$OUT/quant-w8a8.log" | head -30
  fused_8_64 200 "" "-fp8 w8a8"
}

ownslot() {
  # One-token windows at batch 1 in their own slot past the copy bound (~3 min): the
  # wide-heads place test (commits over 4608 slots against the plain backend's two
  # products), then AR steps where the cache is past the bound: MiniCPM5-2B's over 4608
  # slots, MiniCPM-2B's shape over 528, bf16 and FP8.
  section "one-token windows past the copy bound against the plain backend"
  BLOCKDIFF_PJRT_PLUGIN=$plugin timeout 120 .gpu/bin/hlo.test -test.v -test.run 'TritonPlaceWideHeadsMatch' 2>&1 |
    grep -E '^\s*(--- FAIL|ok|FAIL|PASS)|Error:|max \|'
  local args
  for args in "-capacity 4608" "-config bench/shapes/minicpm-2b.json -capacity 528" \
    "-config bench/shapes/minicpm-2b.json -capacity 528 -fp8 weight-only"; do
    section "AR step: $args"
    GOMLX_BACKEND=$(backend_config ours) timeout 100 .gpu/bin/bench -only steps -steps ar -iters 20 $args \
      2>&1 </dev/null | grep -E 'device loop, per|rror' | grep -v compiled
  done
}

w8a8compile() {
  # How long W8A8's AR step takes to compile (run FJ: its three steps outlasted 100 s),
  # against FP8 weight-only's, and with XLA's autotuning off (is it the autotuner?):
  # bench's log of each step loop's compile and warm-up, and its time (~4-8 min).
  local a flags
  for a in "-fp8 weight-only" "-fp8 w8a8"; do
    for flags in "" "--xla_gpu_autotune_level=0"; do
      [ "$a" = "-fp8 weight-only" ] && [ -n "$flags" ] && continue
      section "AR step, ${a#-fp8 }, XLA_FLAGS=$flags"
      XLA_FLAGS="$flags" GOMLX_BACKEND=$(backend_config ours) timeout 200 .gpu/bin/bench -only steps -steps ar -iters 20 \
        -capacity 528 $a 2>&1 </dev/null | grep -E 'compiled|device loop, per|rror'
    done
  done
}

whileloop() {
  # The decoder's While ends on its state, so XLA cannot count its trips; the bench's
  # step loops end on a constant count. Each step loop both ways, then decoding at
  # batch 1, with XLA's default command buffers and with ones that also hold the While
  # and its condition (device-side CUDA graph conditionals: no host round trip per
  # iteration, but run C measured the constant-count denoise step 3 % slower with them).
  export GOMLX_BACKEND=$XLA_BF16
  local flags exit
  for flags in "" "--xla_gpu_enable_command_buffer=FUSION,CUBLAS,CUBLASLT,CUSTOM_CALL,CUDNN,WHILE,CONDITIONAL"; do
    section "XLA_FLAGS=$flags"
    for exit in count data; do
      XLA_FLAGS="$flags" timeout 60 .gpu/bin/bench -only steps -steps denoise,ar-padded -loop-exit $exit 2>&1 |
        grep 'device loop'
    done
    XLA_FLAGS="$flags" timeout 100 .gpu/bin/bench -only decode -batches 1 2>&1 | grep -E '^(fused|autoregressive) '
  done
}

explore() {
  export GOMLX_BACKEND=$XLA_BF16
  denoise() { timeout 100 .gpu/bin/bench -only steps -steps denoise -iters 20 "$@" 2>&1 | grep 'device loop'; }
  section "per-layer cost: the denoise step with 2 and 42 layers"
  denoise -layers 2; denoise
  section "the AR step, and the AR step padded to 4 rows (are 1-row GEMMs the slow part?)"
  timeout 100 .gpu/bin/bench -only steps -steps ar,ar-padded -iters 20 2>&1 | grep 'device loop'
  XLA_FLAGS="--xla_dump_to=$OUT/xla-ar --xla_dump_hlo_as_text --xla_dump_hlo_module_re=.*loop.*" \
    timeout 100 .gpu/bin/bench -only steps -steps ar -iters 20 >/dev/null 2>&1
  rm -f "$OUT"/xla-ar/*{before,after_spmd,buffer-assignment,live-range,memory-usage}*
  tar czf "$OUT/xla-ar.tgz" -C "$OUT" xla-ar && rm -rf "$OUT/xla-ar"
  for flags in "--xla_gpu_enable_command_buffer=" \
               "--xla_gpu_enable_command_buffer=FUSION,CUBLAS,CUBLASLT,CUSTOM_CALL,CUDNN,WHILE,CONDITIONAL" \
               "--xla_gpu_enable_triton_gemm=false" "--xla_gpu_enable_cublaslt=true"; do
    section "XLA_FLAGS=$flags"
    XLA_FLAGS="$flags" denoise
  done
  section "XLA dump of the decoder's loop (fused mode, batch 1): its work outside the layers"
  XLA_FLAGS="--xla_dump_to=$OUT/xla-dec --xla_dump_hlo_as_text --xla_dump_hlo_module_re=.*chunk.*" \
    timeout 150 .gpu/bin/bench -only decode -batches 1 2>&1 | grep -E '^fused quality, reveal-all'
  rm -f "$OUT"/xla-dec/*{before,after_spmd,buffer-assignment,live-range,memory-usage}*
  tar czf "$OUT/xla-dec.tgz" -C "$OUT" xla-dec && rm -rf "$OUT/xla-dec"
  section "XLA dump of the denoise loop"
  XLA_FLAGS="--xla_dump_to=$OUT/xla --xla_dump_hlo_as_text --xla_dump_hlo_module_re=.*loop.*" denoise
  tar czf "$OUT/xla-dump.tgz" -C "$OUT" xla && rm -rf "$OUT/xla"
}

tiling() {
  # XLA's default GEMM autotuning against its exhaustive tiling search (faster steps,
  # 40 s of compiling per step loop in run G), then the exhaustive search with XLA's
  # per-fusion autotune cache on disk, cold and warm: does a second process compile
  # fast? First the plugin's flags (flags.txt) and those that name programmatic
  # dependent launch, then batch-1 steps over CAPACITY (default 528) slots on ours.
  local cache="--xla_gpu_exhaustive_tiling_search=true --xla_gpu_per_fusion_autotune_cache_dir=$OUT/autotune"
  strings "$plugin" | grep -o 'xla_gpu_[a-z0-9_]*' | sort -u >"$OUT/flags.txt"
  echo "flags.txt: $(wc -l <"$OUT/flags.txt") xla_gpu flags; PDL:"
  strings "$plugin" | grep -i -o '[a-z_]*\(pdl\|programmatic\)[a-z_]*' | sort -u | head -20
  local flags
  for flags in "" "$cache" "$cache"; do
    section "XLA_FLAGS=$flags"
    XLA_FLAGS="$flags" GOMLX_BACKEND=$(backend_config ours) timeout 240 .gpu/bin/bench -only steps \
      -steps denoise,fused,ar -iters 20 -capacity "${CAPACITY:-528}" 2>&1 | grep -E 'device loop|loop compiled'
  done
  echo "autotune cache: $(ls "$OUT/autotune" 2>/dev/null | wc -l) files"
}

flagsweep() {
  # Batch-1 steps over CAPACITY (default 528) slots on ours under each set of XLA
  # flags in FLAGSETS (separated by ';'; default: programmatic dependent launch on and
  # off, and XLA's experimental Triton features), the default first and last, with each
  # loop's compile time (~30 s a set).
  local sets flags
  IFS=';' read -r -a sets <<<"${FLAGSETS:---xla_gpu_enable_pdl=true --xla_gpu_enable_pdl_launch=true;--xla_gpu_enable_pdl=false --xla_gpu_enable_pdl_launch=false;--xla_gpu_experimental_enable_triton_tma=true;--xla_gpu_experimental_enable_triton_warp_specialization=true --xla_gpu_experimental_enable_triton_tma=true;--xla_gpu_experimental_enable_fusion_block_level_rewriter=true;--xla_gpu_experimental_all_fusions_with_triton=true}"
  for flags in "" "${sets[@]}" ""; do
    section "XLA_FLAGS=$flags"
    XLA_FLAGS="$flags" GOMLX_BACKEND=$(backend_config ours) timeout 120 .gpu/bin/bench -only steps \
      -steps "${STEPS:-denoise,fused,ar}" -iters 20 -capacity "${CAPACITY:-528}" 2>&1 |
      grep -E 'device loop|loop compiled|rror' | cut -c1-110
  done
}

tritonattention() {
  # Our Triton attention over the cache (option triton=attention): its GPU tests, then
  # batch-1 steps over CAPACITY (default 528) slots on bdxla-gemv without and with it,
  # and with BATCHES set (e.g. 8,64) decoding there (fused quality under reveal-all,
  # and autoregressive) (~110 s; ~200 s more per batch size). BUILD=ref runs the
  # binaries of a build of VARIANTS (bench/build-gpu.sh) instead of this one's; LABELS:
  # other backend labels.
  local bin=.gpu/bin${BUILD:+/${BUILD//\//_}}
  section "triton=attention: GPU tests of ${BUILD:-this build}"
  BLOCKDIFF_PJRT_PLUGIN=$plugin timeout 150 "$bin/hlo.test" -test.v \
    -test.run 'TestFusedAttentionMatchesPlain|TestTritonAttention' >"$OUT/tritonattention-tests.log" 2>&1
  echo "rc=$?"; grep -E '^(--- |ok|FAIL|PASS)|triton - plain|Error:|gpu_test.go:[0-9]+: [a-z]' "$OUT/tritonattention-tests.log" | head -30
  local label cfg d
  for label in ${LABELS:-bdxla-gemv bdxla-gemv-attention}; do
    cfg=$(backend_config "$label")
    section "steps on $label, ${CAPACITY:-528} slots"
    GOMLX_BACKEND=$cfg timeout 90 "$bin/bench" -only steps -steps denoise,fused,ar -iters 20 \
      -capacity "${CAPACITY:-528}" 2>&1 | grep 'device loop' | grep -v compiled
    [ -n "${BATCHES:-}" ] || continue
    for d in "fused quality, reveal-all" autoregressive; do
      section "decoding ($d) at batches $BATCHES on $label"
      GOMLX_BACKEND=$cfg timeout 150 "$bin/bench" -only decode -batches "$BATCHES" -decode "$d" 2>&1 |
        grep -E '^(fused|autoregressive)' | grep -v compiled
    done
  done
}

tritonfold() {
  # Option triton=fold (norms, SwiGLU and residual adds folded into our 1-row GEMVs): its
  # GPU tests, then batch-1 steps over 528 slots and AR decoding at batch 1 on ours
  # without it (bdxla-gemv-attention) and with it (ours since run CM), alternating, ROUNDS rounds (default 2), then a trace of its AR
  # step (~300 s).
  section "triton=fold: GPU tests"
  BLOCKDIFF_PJRT_PLUGIN=$plugin timeout 120 .gpu/bin/hlo.test -test.v -test.run 'TestTritonFold' \
    >"$OUT/tritonfold-tests.log" 2>&1
  echo "rc=$?"; grep -E '^(--- |ok|FAIL|PASS)|folded - plain|Error:' "$OUT/tritonfold-tests.log" | head -20
  local round label
  for round in $(seq "${ROUNDS:-2}"); do
    for label in bdxla-gemv-attention bdxla-gemv-attention-fold; do
      section "steps and AR decoding on $label, round $round"
      AB_LABEL=$label steps_of .gpu/bin/bench
      AB_LABEL=$label DECODE=autoregressive DECODE_TIMEOUT=90 decodes .gpu/bin/bench
    done
  done
  TRACE_LABEL=bdxla-gemv-attention-fold TRACE_STEPS=ar TRACE_PEER=0 TRACE_OPENER=gemm_norm TRACE_PER=2 trace
}

variants() {
  # This build against the builds of other git refs (bench/build-gpu.sh with VARIANTS;
  # VARIANTS="ref ..." here picks some), on the default backend (ours): every
  # build's model tests on it, then everyone's steps with caches of 528 and 2048 slots,
  # the 528-slot steps again in a second round, and decoding at BATCHES (default 1)
  # (~200 s per build). Runs I-M ran it as it was at their commits, on XLA's backend.
  export GOMLX_BACKEND=$(backend_config ours)
  local dirs=(.gpu/bin .gpu/bin/*/) dir cap round
  if [ -n "${VARIANTS:-}" ]; then
    dirs=(.gpu/bin); for ref in $VARIANTS; do dirs+=(".gpu/bin/${ref//\//_}"); done
  fi
  dirs=("${dirs[@]%/}")
  for dir in "${dirs[@]}"; do
    section "variant ${dir#.gpu/bin}: model tests"
    GOMLX_BACKEND="$GOMLX_BACKEND,notf32" timeout 100 "$dir/model.test" \
      -test.run 'TestCachedPath|TestFixtureLogits' 2>&1 | tail -1
  done
  for round in 1 2; do
    for dir in "${dirs[@]}"; do
      for cap in 528 2048; do
        [ "$round" = 2 ] && [ "$cap" = 2048 ] && continue
        section "variant ${dir#.gpu/bin}: steps, a cache of $cap slots (round $round)"
        timeout 90 "$dir/bench" -only steps -steps denoise,fused,ar -iters 20 -capacity "$cap" 2>&1 | grep 'device loop'
      done
    done
  done
  for dir in "${dirs[@]}"; do
    section "variant ${dir#.gpu/bin}: decoding at batch ${BATCHES:-1}"
    timeout "${DECODE_TIMEOUT:-120}" "$dir/bench" -only decode -batches "${BATCHES:-1}" 2>&1 | grep -E '^(fused|autoregressive) '
  done
}

triton() {
  # Can a StableHLO program run our own Triton kernels (XLA's __gpu$xla.gpu.triton
  # custom call, through go-xla's public packages)? And how fast are hand-written GEMVs
  # of every layer shape, at 1, 4 and 8 rows, next to XLA's dot of the same shapes? 143
  # programs to compile (run R took 50 s for the 123 before the tensor-core tiles); XLA's
  # messages, and each failing kernel's whole error, go to tritonprobe.err.
  section "Triton kernels in StableHLO (bench/tritonprobe)"
  run_tritonprobe tritonprobe.err 240
}

run_tritonprobe() {
  # run_tritonprobe ERRFILE TIMEOUT [FLAGS...]: bench/tritonprobe with FLAGS, XLA's
  # messages into $OUT/ERRFILE, their end shown where it fails.
  local err=$1 limit=$2 rc
  shift 2
  timeout "$limit" .gpu/bin/tritonprobe -plugin "$plugin" "$@" 2>"$OUT/$err"
  rc=$?
  echo "tritonprobe: rc=$rc"
  [ "$rc" = 0 ] || tail -c 3000 "$OUT/$err"
}

prefetch() {
  # Does a kernel that asks L2 for a weight and returns at once (PTX's bulk or per-line
  # prefetch) let XLA's 4-row GEMM after 0, 2 or 4 small dots read it from L2? qkv, o
  # and down, 9 programs each (~1 min); XLA's messages go to tritonprobe-prefetch.err.
  section "L2 prefetch before XLA's 4-row GEMMs (bench/tritonprobe -prefetch)"
  run_tritonprobe tritonprobe-prefetch.err 200 -prefetch -shapes qkv,o,down -iters 50
}

persistent() {
  # What a grid-wide barrier costs a persistent kernel running a chain of 16 dependent
  # 4-row products (o shape), against a launch per product, ours and XLA's, and
  # whether its counters may be a constant of the program (bench/tritonprobe
  # -persistent, ~1 min; a barrier that never opens ends at the timeout). XLA's
  # messages go to tritonprobe-persistent.err.
  section "a persistent kernel's grid barrier against a launch per product (bench/tritonprobe -persistent)"
  run_tritonprobe tritonprobe-persistent.err 120 -persistent -iters 50
}

compare() {
  # Step latencies at batch 1 against the peer on cuBLAS (its Triton GEMVs win the AR
  # step but lose the 4- and 8-row steps), and FP8 (bits, weight-only) against bf16.
  section "PyTorch peer, cuBLAS GEMMs, batch 1"
  timeout 150 python3 bench/pytorch/peer.py --gemv cublas --batch 1 --prefill 512 --out "$OUT/peer-cublas" \
    >"$OUT/peer-cublas.log" 2>&1
  echo "peer: rc=$?"; grep -A12 '^step ' "$OUT/peer-cublas.log"
  section "blockdiff steps, bf16"
  GOMLX_BACKEND=$XLA_BF16 timeout 100 .gpu/bin/bench -only steps 2>&1 | grep -E 'device loop|one execution'
  section "blockdiff steps, FP8 weight-only (bits decoder)"
  GOMLX_BACKEND=$XLA_BF16 timeout 120 .gpu/bin/bench -only steps -steps denoise,ar -fp8 weight-only \
    -fp8-decoder bits 2>&1 | grep -E 'weights|device loop|one execution'
}

build_tracer() {
  # Builds bench/cupti/trace.c into /tmp/libtrace.so against the CUDA toolkit's CUPTI.
  local inc lib d rec
  for d in /usr/local/cuda/extras/CUPTI /usr/local/cuda "$site/nvidia/cu13" "$site/nvidia/cuda_cupti"; do
    [ -z "${inc:-}" ] && [ -f "$d/include/cupti.h" ] && inc=$d/include
    [ -z "${lib:-}" ] && lib=$(ls -d "$d"/lib64/libcupti.so* "$d"/lib/libcupti.so* 2>/dev/null | head -1)
  done
  lib=$(dirname "$lib")
  newest() { grep -ho "CUpti_Activity$1[0-9]*\b" "$inc"/cupti_activity*.h | sort -V | tail -1; }
  rec="-DKERNEL_RECORD=$(newest Kernel) -DMEMCPY_RECORD=$(newest Memcpy) -DMEMSET_RECORD=$(newest Memset)"
  echo "cupti: include $inc, lib $lib, $rec"
  build() { # build FLAGS...: the library with these record flags, or without copies
    gcc -shared -fPIC -O2 -I"$inc" "$@" bench/cupti/trace.c -L"$lib" -lcupti -lpthread -Wl,-rpath,"$lib" \
      -o /tmp/libtrace.so 2>>"$OUT/trace-build.log"
  }
  build $rec || build "-DKERNEL_RECORD=$(newest Kernel)" -DNO_COPIES || { tail -5 "$OUT/trace-build.log"; return 1; }
}

trace() {
  # In-graph kernel times (bench/cupti: a CUPTI injection library built here, since
  # nsys is absent and ncu crashed on our process): our AR and denoise steps over a
  # cache of 528 slots on ours, then the peer's steps at batch 1 (~250 s).
  # TRACE_STEPS="ar fused prefill decode" TRACE_CAPACITY=2048 TRACE_PEER=0: other steps
  # (the bench's 512- and 2048-token prefills, the decoder's AR loop), cache, no peer;
  # CUPTI_TRACE_API=1 also records the host's CUDA calls (bench/cupti/trace.c);
  # TRACE_LOOP_EXIT=data: the step loops end on data (bench -loop-exit); TRACE_BUILD=REF:
  # the bench of a build of VARIANTS (bench/build-gpu.sh); TRACE_DECODE=NAME: the decoding
  # case the decode step traces (bench -decode; default autoregressive), TRACE_BATCH its
  # batch size (default 1); TRACE_LABEL: another backend label (backend_config), e.g.
  # bdxla-gemv for the plain attention; TRACE_OPENER and TRACE_PER: the kernel that opens
  # a layer and how many of it a layer has, where a label changes them; TRACE_ARGS: more
  # arguments for the bench (e.g. "-fp8 weight-only").
  section "CUPTI traces: our steps and the peer's"
  build_tracer || return
  local step what opener per group bin=.gpu/bin/${TRACE_BUILD:-.}/bench
  for step in ${TRACE_STEPS:-ar denoise}; do
    section "our $step step traced"
    what=(-only steps -steps "$step" -iters 20 -capacity "${TRACE_CAPACITY:-528}" -loop-exit "${TRACE_LOOP_EXIT:-count}") group=()
    # A prefill's kernels are grouped by time (a host read separates runs), which also
    # lists the host's calls before each run (CUPTI_TRACE_API=1).
    [ "$step" = prefill ] && what=(-only prefill) group=(--bursts 50)
    # The decoder's loop at batch 1 (autoregressive unless TRACE_DECODE names another
    # case; TRACE_BATCH another batch size): its body beside the bare step's.
    [ "$step" = decode ] && what=(-only decode -batches "${TRACE_BATCH:-1}" -decode "${TRACE_DECODE:-autoregressive}" -new 64)
    # A layer opens with its first norm: a fusion of its own kind in the AR step; of the
    # MLP norm's kind elsewhere, so there a layer spans two of them.
    opener=input_multiply_reduce_fusion per=2
    [ "$step" = ar ] || [ "$step:${TRACE_DECODE:-autoregressive}" = decode:autoregressive ] &&
      opener=input_add_reduce_fusion per=1
    # At larger batches (run BQ, batch 64) the norms are two of one kind in every layer.
    if [ "$step" = decode ] && [ "${TRACE_BATCH:-1}" != 1 ]; then
      opener=input_multiply_reduce_fusion per=2
      [ "${TRACE_DECODE:-autoregressive}" = autoregressive ] || opener=input_add_multiply_reduce_fusion
    fi
    opener=${TRACE_OPENER:-$opener} per=${TRACE_PER:-$per}
    CUDA_INJECTION64_PATH=/tmp/libtrace.so CUPTI_TRACE_OUT="$OUT/trace-$step.tsv" GOMLX_BACKEND=$(backend_config "${TRACE_LABEL:-ours}") \
      XLA_FLAGS="--xla_dump_to=$OUT/xla-$step --xla_dump_hlo_as_text --xla_dump_hlo_module_re=.*(loop|prefill|chunk).*" \
      timeout 90 "$bin" "${what[@]}" ${TRACE_ARGS:-} 2>&1 | grep -E 'device loop|prefill [0-9]+ tokens|^(fused|autoregressive) ' | grep -v compiled
    sleep 1
    python3 bench/cupti/summarize.py "$OUT/trace-$step.tsv" --min-kernels 200 --min-launches 5 --top 22 \
      --layer "$opener" --layer-kernels "$per" "${group[@]}"
  done
  if [ "${TRACE_PEER:-1}" = 1 ]; then
    section "the peer traced"
    CUDA_INJECTION64_PATH=/tmp/libtrace.so CUPTI_TRACE_OUT="$OUT/trace-peer.tsv" timeout 230 python3 bench/pytorch/peer.py \
      --batch 1 --prefill 512 --gemv-tune --dattn-combine kernel --no-profile --out "$OUT/peer" >"$OUT/peer-trace.log" 2>&1
    echo "peer: rc=$?"; grep -E 'ms|step' "$OUT/peer-trace.log" | tail -12
    python3 bench/cupti/summarize.py "$OUT/trace-peer.tsv" --min-kernels 200 --top 14 --layer gemv_rmsnorm --layer-kernels 2
  fi
  gzip -f "$OUT"/trace-*.tsv
  find "$OUT"/xla-* -type f ! -name '*after_optimizations.txt' ! -name '*thunk_sequence*' -delete
  (cd "$OUT" && tar czf xla-traced.tgz xla-* && rm -rf xla-*/)
}

arloop() {
  # What the decoder's autoregressive loop pays for an exit that depends on its state
  # (runs AZ-BB: 2.50 ms per token against 2.21 ms for the bare step): the bench's AR
  # step loop over a cache of 1024 slots (the decoder's below) with a counted and a
  # data-dependent exit, then batch-1 autoregressive decoding of this build and of the
  # builds of VARIANTS (decodeab) (~250 s).
  local round exit
  for round in 1 2; do
    for exit in count data; do
      section "AR step loop, exit on $exit, round $round"
      GOMLX_BACKEND=$(backend_config ours) timeout 60 .gpu/bin/bench -only steps -steps ar -iters 20 -capacity 1024 \
        -loop-exit "$exit" 2>&1 | grep 'device loop' | grep -v compiled
    done
  done
  DECODE=autoregressive decodeab
}

decodeab() {
  # Decoding at BATCHES (bench -batches, default 1) of this build and of the builds of
  # VARIANTS on ours, alternating, ROUNDS rounds (default 2); DECODE picks cases
  # (bench -decode, e.g. autoregressive; default all: ~80 s per build and round at
  # batch 1).
  alternate "decoding at batch ${BATCHES:-1}" decodes
}

decodelabels() {
  # Decoding at BATCHES of this build on each backend label of LABELS (default
  # bdxla-gemv and ours: the plain attention against our kernels),
  # alternating, ROUNDS rounds (default 2); DECODE as decodeab. Batch 64 without
  # triton=norm or triton=pdl (BENCHMARKS.md, "Batch 64 now"): BATCHES=64 DECODE="fused
  # quality, reveal-all" LABELS="ours ours-no-norm ours-no-pdl" ROUNDS=3.
  local round label
  for round in $(seq "${ROUNDS:-2}"); do
    for label in ${LABELS:-bdxla-gemv ours}; do
      section "decoding at batch ${BATCHES:-1} on $label, round $round"
      AB_LABEL=$label decodes .gpu/bin/bench
    done
  done
}

stepsab() {
  # Batch-1 steps (STEPS, default denoise,fused,ar; 20 per execution) over CAPACITY cache
  # slots (default 528) of this build and of the builds of VARIANTS on ours,
  # alternating, ROUNDS rounds (default 2): ~35 s per build and round. AB_LABEL: another
  # backend label (backend_config) for stepsab and decodeab.
  alternate "steps over ${CAPACITY:-528} slots" steps_of
}

steps_of() {
  # steps_of BENCH: the step rows of the bench binary BENCH, as stepsab says, after
  # CONTEXT positions (default 512), and its errors.
  GOMLX_BACKEND=$(backend_config "${AB_LABEL:-ours}") timeout 120 "$1" -only steps -steps "${STEPS:-denoise,fused,ar}" -iters 20 \
    -context "${CONTEXT:-512}" -capacity "${CAPACITY:-528}" 2>&1 | grep -E 'device loop|rror' | grep -v compiled
}

decodes() {
  # decodes BENCH [FLAGS...]: decoding rows of the bench binary BENCH on ours, as
  # decodeab says (DECODE_TIMEOUT: seconds, default 150).
  GOMLX_BACKEND=$(backend_config "${AB_LABEL:-ours}") timeout "${DECODE_TIMEOUT:-150}" "$1" -only decode \
    -batches "${BATCHES:-1}" -decode "${DECODE:-}" "${@:2}" 2>&1 | grep -E '^(fused|autoregressive|reference)' | grep -v compiled
}

readbackab() {
  # Decoding at BATCHES (default 1) of this build with each Config.BlocksPerReadback of
  # READBACKS (default "16 64"; bench -blocks-per-readback), alternating, ROUNDS rounds
  # (default 2); DECODE as decodeab.
  local round r
  for round in $(seq "${ROUNDS:-2}"); do
    for r in ${READBACKS:-16 64}; do
      section "decoding at batch ${BATCHES:-1}, $r blocks per readback, round $round"
      decodes .gpu/bin/bench -blocks-per-readback "$r"
    done
  done
}

alternate() {
  # alternate WHAT FN: FN BENCH for the bench binary of this build, then of each build
  # of VARIANTS="ref ..." (bench/build-gpu.sh), ROUNDS rounds (default 2), so that
  # builds compare on one machine at about the same time.
  local round v
  for round in $(seq "${ROUNDS:-2}"); do
    for v in . ${VARIANTS:-}; do
      section "$1, build ${v/./this one}, round $round"
      "$2" ".gpu/bin/${v//\//_}/bench"
    done
  done
}

prefills() {
  # prefills BENCH [FLAGS...]: the 512- and 2048-token prefill rows of the bench binary
  # BENCH on ours (AB_LABEL: another backend label).
  GOMLX_BACKEND=$(backend_config "${AB_LABEL:-ours}") timeout 120 "$1" -only prefill "${@:2}" 2>&1 |
    grep -E 'prefill [0-9]+ tokens'
}

prefillflags() {
  # The 512- and 2048-token prefills on ours under XLA flags that change its GEMMs,
  # default and cuBLAS alternating (~150 s): cuBLAS in place of XLA's Triton GEMMs (its
  # HLO dumped), no split-K; then the GPU flags this plugin knows, into flags.txt.
  local flags dump
  for flags in "" "--xla_gpu_enable_triton_gemm=false" "" "--xla_gpu_enable_triton_gemm=false" \
               "--xla_gpu_enable_split_k_autotuning=false"; do
    section "prefill, XLA_FLAGS=$flags"
    dump=""
    [ "$flags" = --xla_gpu_enable_triton_gemm=false ] && [ ! -d "$OUT/xla-cublas" ] &&
      dump="--xla_dump_to=$OUT/xla-cublas --xla_dump_hlo_as_text --xla_dump_hlo_module_re=.*prefill.*"
    XLA_FLAGS="$flags${dump:+ $dump}" prefills .gpu/bin/bench
  done
  find "$OUT"/xla-cublas -type f ! -name '*after_optimizations.txt' ! -name '*thunk_sequence*' -delete
  (cd "$OUT" && tar czf xla-cublas.tgz xla-cublas && rm -rf xla-cublas)
  strings "$plugin" | grep -o 'xla_gpu_[a-z0-9_]*' | sort -u >"$OUT/flags.txt"
  echo "flags.txt: $(wc -l <"$OUT/flags.txt") xla_gpu flags"
}

attnbench() {
  # cuDNN's prefill attention three ways (backend/hlo's BenchmarkCuDNNPrefillAttention):
  # the block-causal mask as a bias, the causal mask alone, and the block-causal mask
  # through a shifted causal one; first the test that cuDNN honours causal and a mask
  # together, then each variant traced (bench/cupti) for its kernels' own times (~90 s).
  # The tracer flushes four times a second, so a process loses its last quarter second
  # of records: 100 executions of 32 attentions keep most of them.
  section "cuDNN prefill attention"
  BLOCKDIFF_PJRT_PLUGIN=$plugin timeout 100 .gpu/bin/hlo.test -test.v -test.run 'TestFusedAttentionMatchesPlain/cuDNN' \
    >"$OUT/attnbench.log" 2>&1
  echo "hlo.test: rc=$?"; grep -E '^\s*(--- |ok|FAIL|PASS)|rror' "$OUT/attnbench.log" | head -12
  build_tracer || return
  local v
  for v in 512/mask 512/causal 512/shifted 2048/mask 2048/causal 2048/shifted; do
    section "attention $v, traced"
    CUDA_INJECTION64_PATH=/tmp/libtrace.so CUPTI_TRACE_OUT="$OUT/trace-attention-${v/\//-}.tsv" BLOCKDIFF_PJRT_PLUGIN=$plugin \
      timeout 60 .gpu/bin/hlo.test -test.run '^$' -test.bench "CuDNNPrefillAttention/$v\$" -test.benchtime 100x 2>&1 |
      grep -E '^Benchmark'
    sleep 1
    python3 bench/cupti/summarize.py "$OUT/trace-attention-${v/\//-}.tsv" --bursts 20 --min-kernels 30 --min-launches 5 --top 5
  done
  gzip -f "$OUT"/trace-attention-*.tsv
}

prefillab() {
  # The prefills of this build against those of the builds of VARIANTS="ref ..."
  # (bench/build-gpu.sh), alternating, ROUNDS rounds (default 2; ~25 s per build and
  # round).
  alternate prefill prefills
}

hostcost() {
  # Where the host's time goes around one prefill execution: a Go CPU profile of the
  # prefills (bench -cpuprofile; go tool pprof -top -focus runAndWait on it) (~40 s).
  section "prefill with a CPU profile"
  prefills .gpu/bin/bench -cpuprofile "$OUT/prefill.pprof"
}

profile() {
  # Per-kernel device times of two layers' denoise steps (ncu, isolated replays), and
  # whether XLA fuses the FP8 weight decoder into the GEMMs (HLO after optimisation).
  export GOMLX_BACKEND=$XLA_BF16
  section "nsys: kernel summary of the denoise loop (ncu crashed on our process)"
  nsys=$(command -v nsys || ls /usr/local/cuda/bin/nsys /opt/nvidia/nsight-systems/*/bin/nsys 2>/dev/null | head -1)
  if [ -n "$nsys" ]; then
    timeout 200 "$nsys" profile -t cuda -o "$OUT/denoise" --force-overwrite true \
      .gpu/bin/bench -only steps -steps denoise -iters 20 >"$OUT/nsys.log" 2>&1
    echo "nsys: rc=$?"
    timeout 100 "$nsys" stats -r cuda_gpu_kern_sum -f csv -o "$OUT/kernels" "$OUT/denoise.nsys-rep" >>"$OUT/nsys.log" 2>&1
    head -25 "$OUT"/kernels*.csv 2>/dev/null | cut -c1-160
  else
    echo "nsys not found"
  fi
  section "ncu: kernels of the denoise step, 2 layers"
  timeout 200 /usr/local/cuda/bin/ncu --metrics gpu__time_duration.sum --csv --launch-count 400 \
    .gpu/bin/bench -only steps -steps denoise -layers 2 -iters 2 >"$OUT/ncu.csv" 2>"$OUT/ncu.err"
  echo "ncu: rc=$? $(wc -l <"$OUT/ncu.csv") lines"; tail -3 "$OUT/ncu.err"
  section "XLA dump of the FP8 (bits) denoise loop"
  XLA_FLAGS="--xla_dump_to=$OUT/xla-fp8 --xla_dump_hlo_as_text --xla_dump_hlo_module_re=.*loop.*" \
    timeout 150 .gpu/bin/bench -only steps -steps denoise -iters 20 -fp8 weight-only -fp8-decoder bits 2>&1 | grep 'device loop'
  rm -f "$OUT"/xla-fp8/*{before,after_spmd,buffer-assignment,live-range,memory-usage}*
  tar czf "$OUT/xla-fp8.tgz" -C "$OUT" xla-fp8 && rm -rf "$OUT/xla-fp8"
}

optionab() {
  # optionab OPTION TEST WITHOUT RUN...: option triton=OPTION, in ours, against ours
  # without it (the backend label WITHOUT): backend/hlo's GPU test TEST, then each RUN
  # (steps_of: the batch-1 steps, STEPS, default denoise,fused,ar, over 528 slots;
  # prefills) on WITHOUT and ours, alternating, ROUNDS rounds (default 2).
  section "triton=$1: GPU tests"
  BLOCKDIFF_PJRT_PLUGIN=$plugin timeout 150 .gpu/bin/hlo.test -test.v -test.run "$2" >"$OUT/$1-tests.log" 2>&1
  echo "rc=$?"; grep -E '^\s*(--- |ok|FAIL|PASS)|max \||Error' "$OUT/$1-tests.log" | head -24
  local round label run
  for round in $(seq "${ROUNDS:-2}"); do
    for label in "$3" ours; do
      section "${*:4} on $label, round $round"
      for run in "${@:4}"; do AB_LABEL=$label "$run" .gpu/bin/bench; done
    done
  done
}

ropeab() {
  # Option triton=rope (our attention kernel rotates one-token windows' queries; ours
  # since run CY): our attention kernels' GPU tests with and without it, then the steps
  # (~250 s).
  optionab rope TestTritonAttentionModelsMatch bdxla-gemv-attention-fold-pdl steps_of
}

normab() {
  # Option triton=norm (our kernel for the RMSNorms of several rows; ours since run
  # DA): its GPU tests, then the steps and the prefills (~300 s).
  optionab norm TestTritonNormModelsMatch bdxla-gemv-attention-fold-pdl-rope steps_of prefills
}

buffers() {
  # What an execution costs by its number of buffers (backend/hlo's
  # BenchmarkExecutionBuffers: inputs and new outputs; BenchmarkExecutionInPlace:
  # constant inputs and state updated in place, as the decoder's chunks; ~60 s).
  section "an execution's cost by its buffers (us/execution)"
  BLOCKDIFF_PJRT_PLUGIN=$plugin timeout 240 .gpu/bin/hlo.test -test.run '^$' -test.count 3 \
    -test.bench 'ExecutionBuffers|ExecutionInPlace' >"$OUT/buffers.log" 2>&1
  echo "rc=$?"; grep -E '^Benchmark|^(ok|FAIL)' "$OUT/buffers.log" | awk '{ print $1, $(NF-1), $NF }'
}

prefilladded() {
  # The 512- and 2048-token prefills on ours as one execution each and per prefill
  # added to a device loop (bench -added-prefills: free of each execution's own cost,
  # as the peer's CUDA-graph prefill timed by CUDA events is; ~90 s).
  section "prefill, one execution and per added prefill"
  GOMLX_BACKEND=$(backend_config ours) timeout 240 .gpu/bin/bench -only prefill -added-prefills 3 2>&1 |
    grep -E '^prefill' | grep -v compiled
}

stacked() {
  # Whether XLA reads a layer of a weight stacked over the layers in place (backend/hlo's
  # BenchmarkStackedWeights: one forward's products, 1 and 4 rows, 168 weights against
  # 4 stacked ones sliced per layer), with the optimised programs' copies counted
  # (~120 s).
  section "stacked weights: a forward's products (us/execution), copies in XLA's programs"
  BLOCKDIFF_PJRT_PLUGIN=$plugin XLA_FLAGS="--xla_dump_to=$OUT/xla-stacked --xla_dump_hlo_as_text" \
    timeout 300 .gpu/bin/hlo.test -test.run '^$' -test.count 3 -test.bench StackedWeights >"$OUT/stacked.log" 2>&1
  echo "rc=$?"; grep -E '^Benchmark|^(ok|FAIL)' "$OUT/stacked.log" | awk '{ print $1, $(NF-1), $NF }'
  local f
  for f in "$OUT"/xla-stacked/*after_optimizations.txt; do
    [ -e "$f" ] || continue
    printf '%s: %s copy, %s dynamic-slice, %s slice instructions\n' "$(basename "$f" | cut -c1-60)" \
      "$(grep -cE ' copy\(' "$f")" "$(grep -c 'dynamic-slice(' "$f")" "$(grep -cE ' slice\(' "$f")"
  done
}

placeab() {
  # Option triton=place (our attention kernel places one-token windows' keys and values
  # and writes them into the cache, ours since run DE; and since run DL the denoise
  # step's window of 4, which writes nothing): package diffusion's decoding tests on
  # ours, its GPU tests, then the steps (~300 s).
  section "triton=place: diffusion's decoding tests"
  GOMLX_BACKEND="$(backend_config ours),notf32" timeout 200 .gpu/bin/diffusion.test -test.v \
    -test.run 'TestFixtureDecode|TestFixtureAutoregressive|TestBatchEqualsSingle|TestStreamAndCancel' >"$OUT/place-diffusion.log" 2>&1
  echo "rc=$?"; grep -E '^(--- |ok|FAIL|PASS)|Error' "$OUT/place-diffusion.log" | head -24
  optionab place TestTritonPlaceModelsMatch bdxla-gemv-attention-fold-pdl-rope-norm steps_of
}

normtile() {
  # The q/k/v GEMV with the norm on 4-row tiles (normTile): hlo's fold and norm tests,
  # the decoder's fixtures under ours, then our AR step against the builds of VARIANTS
  # (stepsab; ROUNDS rounds, default 2).
  section "normtile: hlo's fold tests, the decoder's fixtures under ours"
  BLOCKDIFF_PJRT_PLUGIN=$plugin timeout 120 .gpu/bin/hlo.test -test.v \
    -test.run 'TestTritonFoldModelsMatch|TestTritonNormModelsMatch' >"$OUT/normtile-hlo.log" 2>&1
  echo "rc=$?"; grep -E '^(--- FAIL|ok|FAIL|PASS)|Error:' "$OUT/normtile-hlo.log" | head; grep -c -- '--- PASS' "$OUT/normtile-hlo.log"
  GOMLX_BACKEND="$(backend_config ours),notf32" timeout 150 .gpu/bin/diffusion.test -test.v \
    -test.run 'TestFixtureDecode|TestFixtureAutoregressive' >"$OUT/normtile-diffusion.log" 2>&1
  echo "rc=$?"; grep -E '^(--- |ok|FAIL|PASS)' "$OUT/normtile-diffusion.log"
  STEPS=ar stepsab
}

contexts() {
  # Batch-1 steps at longer contexts (CONTEXTS, default "2048 4096"), the peer's and
  # ours one after the other per context: the peer's block and fused steps (its Triton
  # and cuBLAS products) and AR step (its main compile, and with its L2 side stream),
  # its GEMVs tuned as the peer section's, then our denoise, fused and AR steps over
  # context + 16 slots, the peer's cache bucket (~2 min a context: runs HV-HW).
  local c
  for c in ${CONTEXTS:-2048 4096}; do
    section "contexts: the peer at context $c"
    timeout 240 python3 bench/pytorch/peer.py --batch 1 --context "$c" --max-len $((c + 64)) --prefill 512 \
      --only block,fused,ar/main,ar/side-l2 --gemv-tune --dattn-combine kernel --no-profile \
      --out "$OUT/peer-$c" >"$OUT/peer-$c.log" 2>&1
    echo "peer: rc=$?"; tail -22 "$OUT/peer-$c.log"
    section "contexts: ours at context $c"
    CONTEXT=$c CAPACITY=$((c + 16)) steps_of .gpu/bin/bench
  done
}

pack() {
  # Every file under $OUT into $OUT/all.tgz: a device call brings back at most 8 files,
  # so a call running several sections (or several OUT=$OUT/x invocations) ends with
  # `OUT=$OUT bash bench/gpu.sh pack`.
  local files
  files=$(cd "$OUT" && find . -type f ! -name all.tgz ! -name env.txt)
  [ -n "$files" ] || return 0
  (cd "$OUT" && echo "$files" | tar czf all.tgz -T - && echo "$files" | xargs rm -f)
  echo "packed $(echo "$files" | wc -l) files into $OUT/all.tgz"
}

for s in "${sections[@]}"; do "$s"; done

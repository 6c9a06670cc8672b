// Package quant does FP8 (E4M3) quantization with static scales: FP8 linear layers for
// package model, loading and saving compressed-tensors checkpoints (the format vLLM and
// llm-compressor use), and calibration of static activation scales.
//
// # The E4M3 codec
//
// Weights are stored as FP8 E4M3FN bytes (1 sign bit, 4 exponent bits with bias 7,
// 3 mantissa bits; no infinities; 0x7f and 0xff are NaN; largest finite value 448,
// smallest subnormal 2^-9) together with a float32 scale, per tensor or per output
// channel, so that value ≈ decode(byte) × scale.
//
// The codec has two halves that agree bit for bit:
//
//   - A Go codec: [EncodeE4M3] rounds a float32 to the nearest E4M3FN value (ties to
//     even), either like PyTorch's plain cast `x.to(torch.float8_e4m3fn)` (magnitudes
//     that round past 448 become NaN) or saturating to ±448; [DecodeE4M3] and
//     [E4M3DecodeTable] give the exact value of each byte; [EncodeE4M3Slice] and
//     [DecodeE4M3Slice] do whole buffers with a scale.
//   - Graph operations: neither XLA (through go-xla) nor GoMLX's Go backend has a float8
//     dtype, so FP8 tensors live in the graph as uint8. [EncodeE4M3Node] rounds float
//     values to E4M3 bytes and [DecodeE4M3Node] turns bytes into exact bfloat16, float16,
//     float32 or float64 values, optionally times a scale, with operations that both
//     backends support: a 256-entry table and a Gather ([DecodeE4M3NodeLUT]), or integer
//     and bit operations ([DecodeE4M3NodeBits], and the encoder).
//
// # FP8 linear layers
//
// [FP8Linear] is a linear layer holding uint8 weights [out, in] and a float32 weight
// scale (a scalar, or [out]), and optionally a static input scale. Apply quantizes the
// activation in the graph when it has an input scale (x/s rounded to E4M3 with
// saturation), decodes the weight to the compute dtype without scale, multiplies, and
// applies input scale × weight scale to the product in float32: the matrix product sees
// exact E4M3 values, as an FP8 GEMM does (see [FP8Linear] for why the scale goes on the
// output).
//
// [Options] configure quantization and are a [model.LinearLoader]:
//
//	m, err := quant.Load(backend, dir, quant.Options{Calibration: cal}, model.LoadOptions{})
//	// or: model.Load(backend, dir, model.LoadOptions{Linear: quant.Options{...}})
//
// From a bf16 or float32 checkpoint, the linear layers are quantized at load time with
// scales amax/448 ([ScaleFromAmax]) per output channel (the default) or per tensor.
// Embeddings, norms and attention stay in the compute dtype, and so does lm_head unless
// Options.QuantizeHead. [QuantizeModel] does the same to a model already loaded (or a
// [model.NewRandom] one), before it compiles any program.
//
// # Compressed-tensors checkpoints
//
// An FP8 checkpoint's config.json has a quantization_config with quant_method
// "compressed-tensors", format "float-quantized", and config_groups whose weights are
// {num_bits: 8, type: "float", symmetric: true, dynamic: false, strategy: "tensor" or
// "channel"} and whose input_activations are null (weight-only) or {num_bits: 8, type:
// "float", strategy: "tensor", dynamic: false}; modules listed in ignore (usually
// lm_head) are stored unquantized. [ParseQuantizationConfig] reads it into a
// [QuantizationConfig] and rejects anything else (other formats, dynamic activations,
// group or block strategies, other bit widths) with an error naming it;
// [IsFP8Checkpoint] tells whether a folder holds one.
//
// Each quantized module (q_proj, k_proj, v_proj, o_proj, gate_proj, up_proj, down_proj,
// optionally lm_head) stores <module>.weight as F8_E4M3 [out, in], <module>.weight_scale
// (F32, BF16 or F16; shape [1] or [] per tensor, [out, 1] per channel) and, with static
// input activations, <module>.input_scale [1]. Loading fuses q/k/v and gate/up as
// package model does: per-channel scales concatenate; parts with different per-tensor
// scales are requantized to the largest (decode × own scale / largest, encoded with
// saturation), and parts with different input scales share the largest, as vLLM does.
//
// [Save] writes a model with FP8 layers in this format: config.json (the source
// config.json plus quantization_config), and model.safetensors with the fused layers
// split back into their modules, each with the layer's scales (a per-tensor scale is
// shared by the parts), F32 scales, and the other tensors in bf16. Loading it back gives
// identical logits.
//
// # Calibration
//
// [Calibrate] runs a model over token sequences ([RandomSequences], or files read with
// [ReadTokenFiles]: a .json file holds one array of ids or an array of arrays, any other
// file whitespace-separated ids) with block-causal forward passes (block size 4 by
// default) and records, for each linear layer, the largest |x| of its input over all
// sequences. Options.Calibration then gives each quantized layer the static input scale
// input_amax/448. The calibration file, calibration.json, is:
//
//	{
//	  "format": "blockdiff-calibration/v1",  // required, exactly this
//	  "dtype": "float8_e4m3fn",             // required, exactly this
//	  "block_size": 4,                       // attention block size of the passes
//	  "sequences": 64,                       // sequences run
//	  "tokens": 16384,                       // tokens run
//	  "layers": {                            // one entry per linear layer, by the name
//	    "model.layers.0.self_attn.qkv_proj": {"input_amax": 4.37},  // Model.Linears gives
//	    "model.layers.0.self_attn.o_proj": {"input_amax": 2.26},
//	    "model.layers.0.mlp.gate_up_proj": {"input_amax": 4.13},
//	    "model.layers.0.mlp.down_proj": {"input_amax": 7.25},
//	    …,
//	    "lm_head": {"input_amax": 27.2}
//	  }
//	}
//
// input_amax is the largest magnitude (a finite number ≥ 0) of any element of the
// layer's input. Loading checks that a calibration names only layers the model has and
// covers every layer it quantizes ([Calibration.Check]).
//
// # Cost
//
// On the Go backend an in-graph decode costs about 9 nanoseconds per weight element on
// every execution (either decoder), so FP8 layers there are slower than dense ones by
// far: they save memory, not time. The table decoder and the layer's product name
// themselves to the backend (package internal/kernels' E4M3Decoded and FP8Dense): on
// CUDA, our own XLA backend (backend/hlo, what backend.New picks) then runs a product
// of up to 32 rows on the bytes themselves, one per weight (a W8A8
// layer's products of 2 to 8 rows multiply its input's bytes by them on the FP8 tensor
// cores); in larger products XLA's own GEMM reads the bytes as StableHLO's f8E4M3FN
// values, and a W8A8 layer's input's bytes too: XLA's FP8 × FP8 GEMM, whose sums keep
// fewer bits than float32's (within 3e-4 of the exact product, far under the input's
// own rounding to E4M3). The bit decoder's products decode the weight in XLA first,
// which costs more than a bfloat16 weight would. On the H200 weight-only FP8 saves
// memory, and time at batch 1 (PERFORMANCE.md, "FP8").
package quant

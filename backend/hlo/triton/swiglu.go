package triton

// GEMVSwiGLUResidualTTIR is the TTIR module of the kernel @gemm_swiglu: for one float32
// row gu [2k] (gate, then up), W [n, k] as w says and the float32 residual r [n],
// y[n0:n0+bn] = r + bf16(gate·σ(gate)·up) · W[n0:n0+bn, :]ᵀ, float32 (the product times
// W's row scales s first, with w.Scaled), its arguments gu, W, r, (s,) y in that order.
// That is model's down projection of swiGLU(gate/up) and the residual add after it,
// with SwiGLU computed in float32 and rounded to bf16 as the graph does (σ as
// 1/(1+exp(-x))), as each program loads its K step of gate and up: SwiGLU's own kernel
// goes. It runs n/bn programs of GEMVTTIR's 1-row loop, Stages deep, gate and up [1,
// bk] tiles as GEMVNormTTIR's x.
func GEMVSwiGLUResidualTTIR(n, k int, t Tile, w Weight) (string, error) {
	if err := checkRowTile("GEMV with SwiGLU", 1, n, k, t); err != nil {
		return "", err
	}
	text := `module {
  tt.func public @gemm_swiglu(%gu: !tt.ptr<f32> {tt.divisibility = 16 : i32}, %w: !tt.ptr<$WT> {tt.divisibility = 16 : i32}, %r: !tt.ptr<f32> {tt.divisibility = 16 : i32}, ` + w.scaleArg() + `%y: !tt.ptr<f32> {tt.divisibility = 16 : i32}) attributes {noinline = false} {
` + programStart + rowTile + `    %gbase = tt.splat %gu : !tt.ptr<f32> -> tensor<1x$BKx!tt.ptr<f32>>
    %gp0 = tt.addptr %gbase, %rk2 : tensor<1x$BKx!tt.ptr<f32>>, tensor<1x$BKxi32>
    %upoff = arith.constant dense<$K> : tensor<1x$BKxi32>
    %up0 = tt.addptr %gp0, %upoff : tensor<1x$BKx!tt.ptr<f32>>, tensor<1x$BKxi32>
    %one = arith.constant dense<1.000000e+00> : tensor<1x$BKxf32>
    %zero = arith.constant dense<0.000000e+00> : tensor<$BNx$BKxf32>
    %acc = scf.for %k = %c0 to %cK step %cBK iter_args(%a = %zero) -> (tensor<$BNx$BKxf32>) : i32 {
` + wTile + `      %kx = tt.splat %k : i32 -> tensor<1x$BKxi32>
      %gk = tt.addptr %gp0, %kx : tensor<1x$BKx!tt.ptr<f32>>, tensor<1x$BKxi32>
      %gv = tt.load %gk : tensor<1x$BKx!tt.ptr<f32>>
      %uk = tt.addptr %up0, %kx : tensor<1x$BKx!tt.ptr<f32>>, tensor<1x$BKxi32>
      %uv = tt.load %uk : tensor<1x$BKx!tt.ptr<f32>>
      %ng = arith.negf %gv : tensor<1x$BKxf32>
      %eg = math.exp %ng : tensor<1x$BKxf32>
      %den = arith.addf %one, %eg : tensor<1x$BKxf32>
      %sig = arith.divf %one, %den : tensor<1x$BKxf32>
      %silu = arith.mulf %gv, %sig : tensor<1x$BKxf32>
      %sw = arith.mulf %silu, %uv : tensor<1x$BKxf32>
      %swb = arith.truncf %sw : tensor<1x$BKxf32> to tensor<1x$BKxbf16>
      %swf = arith.extf %swb : tensor<1x$BKxbf16> to tensor<1x$BKxf32>
      %xb = tt.broadcast %swf : tensor<1x$BKxf32> -> tensor<$BNx$BKxf32>
      %p = arith.mulf %wf, %xb : tensor<$BNx$BKxf32>
      %a1 = arith.addf %a, %p : tensor<$BNx$BKxf32>
      scf.yield %a1 : tensor<$BNx$BKxf32>
    }$LOOPATTR
` + launchMark + `` + sumTile("%acc", w) + `    %rbase = tt.splat %r : !tt.ptr<f32> -> tensor<$BNx!tt.ptr<f32>>
    %rp = tt.addptr %rbase, %rows : tensor<$BNx!tt.ptr<f32>>, tensor<$BNxi32>
    %rv = tt.load %rp : tensor<$BNx!tt.ptr<f32>>
    %res = arith.addf %rv, %sum : tensor<$BNxf32>
` + storeRows("%res")
	return rowKernel(text, k, t, w.dtype()), nil
}

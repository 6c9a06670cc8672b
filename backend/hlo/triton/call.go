//go:build cgo && !noxla

package triton

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/gomlx/compute/dtypes"
	"github.com/gomlx/go-xla/stablehlo"
	"github.com/gomlx/go-xla/types/shapes"
)

// Target is the custom call of XLA's GPU plugin that runs a Triton kernel.
const Target = "__gpu$xla.gpu.triton"

// Kernels appends our Triton kernels to StableHLO functions, each a custom call of
// Target. Its zero value leaves their launch to XLA as it is.
type Kernels struct {
	// PDL has every kernel take part in programmatic dependent launch (compute capability
	// 9.0+): each waits for the kernels before it at its start and lets the next launch once
	// its main loop is done, so that the next programs are placed while its own store results
	// (triggering at the start, as the PyTorch peer does, left XLA's kernels waiting on ours).
	PDL bool
	// Preload, with PDL, has the o projection's GEMV after a one-token window's attention at
	// batch 1 load its W tile before its wait (firstWBeforeWait), the attention and combine
	// letting it launch right after theirs, so that its weight streams while they run.
	Preload bool
}

// launchMarks replaces ir's marks with the instructions PDL needs, or leaves them as
// comments without it. A kernel without its wait mark cannot run under PDL: it could
// read its inputs before the kernel writing them is done.
func (kn Kernels) launchMarks(name, ir string) (string, error) {
	if !kn.PDL {
		return ir, nil
	}
	if strings.Count(ir, waitMark) != 1 || strings.Count(ir, launchMark) != 1 {
		return "", fmt.Errorf("triton: kernel %s needs one mark of each kind to run under PDL", name)
	}
	return strings.NewReplacer(waitMark, inlinePTX("pdl_wait", "griddepcontrol.wait;"),
		launchMark, inlinePTX("pdl_launch", "griddepcontrol.launch_dependents;")).Replace(ir), nil
}

// inlinePTX is the TTIR that runs the PTX instruction ptx for its side effect alone;
// Triton's inline assembly must return a value: the i32 name, unused.
func inlinePTX(name, ptx string) string {
	return fmt.Sprintf("    %%%s = tt.elementwise_inline_asm \"%s mov.u32 $0, 0;\" {constraints = \"=r\", packed_element = 1 : i32, pure = false} -> i32\n", name, ptx)
}

// Call is the custom call running kernel name of the TTIR module ir on the operands,
// writing outputs, on a grid of grid programs of warps warps, its loops pipelined
// stages deep: XLA passes the operands' and then the outputs' buffers as the kernel's
// pointer arguments. Its backend config is the MLIR dictionary that XLA's
// TritonCall::Parse reads. Every operand and output is laid out row-major, as the
// kernels index them: without layouts XLA may pick others, e.g. a transpose's operand
// order for its result, which the kernel would read as garbage.
func (kn Kernels) Call(name, ir string, grid, warps, stages int, operands []*stablehlo.Value, outputs ...shapes.Shape) ([]*stablehlo.Value, error) {
	ir, err := kn.launchMarks(name, ir)
	if err != nil {
		return nil, err
	}
	config := fmt.Sprintf(`{name = "%s", ir = "%s", num_stages = %d : i32, num_warps = %d : i32, `+
		`grid_x = %d : i32, grid_y = 1 : i32, grid_z = 1 : i32, debug = false}`,
		name, mlirEscape(ir), stages, warps, grid)
	return stablehlo.CustomCallV2(Target, config, operands, make([][]int, len(operands)), outputs, make([][]int, len(outputs)))
}

// mlirEscape escapes s for an MLIR string literal: quotes and backslashes as hex
// escapes, newlines as \0A.
func mlirEscape(s string) string {
	return strings.NewReplacer(`\`, `\5C`, `"`, `\22`, "\n", `\0A`).Replace(s)
}

// GEMV appends y [m, n] = x·wᵀ of dtype out to x's function, for x [m, k] bfloat16
// and w [n, k] bfloat16 or uint8 (FP8 E4M3FN bytes, read as their values), GEMVTTIR's
// kernel of tile t, or x and w both uint8, GEMVFP8TTIR's: one program per t.BN rows of
// w (Tile.Programs); with t.Split, y is the float32 partial sums [Split, m, n].
func (kn Kernels) GEMV(x, w *stablehlo.Value, t Tile, out dtypes.DType) (*stablehlo.Value, error) {
	return kn.GEMVOfRows(x, w, w.Shape().Dimensions[0], t, out)
}

// GEMVOfRows is GEMV of w's first n rows: y [m, n], the kernel reading w in place (no
// slice of it made).
func (kn Kernels) GEMVOfRows(x, w *stablehlo.Value, n int, t Tile, out dtypes.DType) (*stablehlo.Value, error) {
	xs, ws := x.Shape(), w.Shape()
	fp8x := xs.DType == dtypes.Uint8 && ws.DType == dtypes.Uint8
	if xs.Rank() != 2 || ws.Rank() != 2 || xs.Dimensions[1] != ws.Dimensions[1] ||
		!fp8x && (xs.DType != dtypes.BFloat16 || (ws.DType != dtypes.BFloat16 && ws.DType != dtypes.Uint8)) {
		return nil, fmt.Errorf("triton: GEMV of x %s and w %s: want x [m, k] bfloat16 and w [n, k] bfloat16 or uint8, or both uint8", xs, ws)
	}
	if n < 1 || n > ws.Dimensions[0] {
		return nil, fmt.Errorf("triton: GEMV of the first %d rows of w %s", n, ws)
	}
	m, k := xs.Dimensions[0], xs.Dimensions[1]
	var ir string
	var err error
	if fp8x {
		ir, err = GEMVFP8TTIR(m, n, k, t, out)
	} else {
		ir, err = GEMVTTIR(m, n, k, t, ws.DType, out)
	}
	return kn.callGEMV("gemm", ir, err, t, []*stablehlo.Value{x, w}, t.output(out, m, n))
}

// output is the shape of a GEMV kernel's y of m rows, W [n, k] and dtype out with tile t:
// [m, n], or with t.Split its partial sums [Split, m, n].
func (t Tile) output(out dtypes.DType, m, n int) shapes.Shape {
	if t.Split > 1 {
		return shapes.Make(out, t.Split, m, n)
	}
	return shapes.Make(out, m, n)
}

// callGEMV runs the GEMV kernel name of ir on operands, on tile t's grid for its output y
// (Tile.Programs); err, from writing ir, is returned as it is.
func (kn Kernels) callGEMV(name, ir string, err error, t Tile, operands []*stablehlo.Value, y shapes.Shape) (*stablehlo.Value, error) {
	if err != nil {
		return nil, err
	}
	ys, err := kn.Call(name, ir, t.Programs(y.Dimensions[y.Rank()-1]), t.warps(), t.Stages, operands, y)
	if err != nil {
		return nil, err
	}
	return ys[0], nil
}

// foldWeight checks a fold kernel's W [n, k], bfloat16 or uint8 (FP8 E4M3FN bytes), and
// its row scales s [n] float32, nil for none, and says what W is.
func foldWeight(w, s *stablehlo.Value) (Weight, error) {
	ws := w.Shape()
	if ws.Rank() != 2 || (ws.DType != dtypes.BFloat16 && ws.DType != dtypes.Uint8) {
		return Weight{}, fmt.Errorf("w %s: want [n, k] bfloat16 or uint8", ws)
	}
	if s != nil && !s.Shape().Equal(shapes.Make(dtypes.Float32, ws.Dimensions[0])) {
		return Weight{}, fmt.Errorf("scales %s: want [%d] float32", s.Shape(), ws.Dimensions[0])
	}
	return Weight{FP8: ws.DType == dtypes.Uint8, Scaled: s != nil}, nil
}

// withScales appends the row scales s, when there are, to a fold kernel's operands
// before its output.
func withScales(operands []*stablehlo.Value, s *stablehlo.Value) []*stablehlo.Value {
	if s == nil {
		return operands
	}
	return append(operands, s)
}

// GEMVResidual appends y [1, n] = r + (x·wᵀ)(·s), float32, to x's function, for x [1, k]
// bfloat16, w [n, k] bfloat16 or FP8 bytes (uint8), s [n] float32 its row scales or nil
// for none, and r [1, n] float32: GEMVResidualTTIR's kernel of tile t.
func (kn Kernels) GEMVResidual(x, w, r, s *stablehlo.Value, t Tile) (*stablehlo.Value, error) {
	xs, ws, rs := x.Shape(), w.Shape(), r.Shape()
	weight, err := foldWeight(w, s)
	if err != nil {
		return nil, fmt.Errorf("triton: GEMV with a residual: %w", err)
	}
	if xs.Rank() != 2 || xs.Dimensions[0] != 1 || xs.DType != dtypes.BFloat16 || xs.Dimensions[1] != ws.Dimensions[1] ||
		rs.Rank() != 2 || rs.Dimensions[0] < 1 || !rs.Equal(shapes.Make(dtypes.Float32, rs.Dimensions[0], ws.Dimensions[0])) {
		return nil, fmt.Errorf("triton: GEMV with a residual of x %s, w %s and r %s: want x [1, k] bfloat16 and r [parts, n] float32", xs, ws, rs)
	}
	n, k := ws.Dimensions[0], ws.Dimensions[1]
	ir, err := GEMVResidualTTIR(1, n, k, t, weight)
	if err == nil && rs.Dimensions[0] > 1 {
		ir, err = sumParts(ir, "rv0", rs.Dimensions[0], n)
	}
	if err == nil && kn.PDL && kn.Preload && !weight.FP8 && t.BK == k {
		ir, err = firstWBeforeWait("gemm", ir)
	}
	return kn.callGEMV("gemm", ir, err, t, withScales([]*stablehlo.Value{x, w, r}, s), shapes.Make(dtypes.Float32, 1, n))
}

// GEMVSwiGLUResidual appends y [1, n] = r + (bf16(SwiGLU(gu))·wᵀ)(·s), float32, to gu's
// function, for gu [1, 2k] float32 (gate, then up), w [n, k] bfloat16 or FP8 bytes
// (uint8), s [n] float32 its row scales or nil for none, and r [1, n] float32:
// GEMVSwiGLUResidualTTIR's kernel of tile t.
func (kn Kernels) GEMVSwiGLUResidual(gu, w, r, s *stablehlo.Value, t Tile) (*stablehlo.Value, error) {
	gs, ws, rs := gu.Shape(), w.Shape(), r.Shape()
	weight, err := foldWeight(w, s)
	if err != nil {
		return nil, fmt.Errorf("triton: GEMV with SwiGLU: %w", err)
	}
	if !gs.Equal(shapes.Make(dtypes.Float32, 1, 2*ws.Dimensions[1])) || !rs.Equal(shapes.Make(dtypes.Float32, 1, ws.Dimensions[0])) {
		return nil, fmt.Errorf("triton: GEMV with SwiGLU of gu %s, w %s and r %s: want gu [1, 2k] and r [1, n] float32", gs, ws, rs)
	}
	n, k := ws.Dimensions[0], ws.Dimensions[1]
	ir, err := GEMVSwiGLUResidualTTIR(n, k, t, weight)
	return kn.callGEMV("gemm_swiglu", ir, err, t, withScales([]*stablehlo.Value{gu, w, r}, s), shapes.Make(dtypes.Float32, 1, n))
}

// GEMVSwiGLUSplit is GEMVSwiGLUResidual of bfloat16 weights with its K loop split over
// splits programs per tile (GEMVSwiGLUSplitTTIR): its output is the partial sums
// [splits, n], the first with r added, whose rows summed in order are the layer's
// output; GEMVNorm and GEMVResidual read such parts as their x and r.
func (kn Kernels) GEMVSwiGLUSplit(gu, w, r *stablehlo.Value, t Tile, splits int) (*stablehlo.Value, error) {
	gs, ws, rs := gu.Shape(), w.Shape(), r.Shape()
	if ws.Rank() != 2 || ws.DType != dtypes.BFloat16 || !gs.Equal(shapes.Make(dtypes.Float32, 1, 2*ws.Dimensions[1])) ||
		!rs.Equal(shapes.Make(dtypes.Float32, 1, ws.Dimensions[0])) {
		return nil, fmt.Errorf("triton: split GEMV with SwiGLU of gu %s, w %s and r %s: want gu [1, 2k] and r [1, n] float32 and w [n, k] bfloat16", gs, ws, rs)
	}
	n, k := ws.Dimensions[0], ws.Dimensions[1]
	ir, err := GEMVSwiGLUSplitTTIR(n, k, t, splits)
	if err != nil {
		return nil, err
	}
	ys, err := kn.Call("gemm_swiglu", ir, t.Programs(n)*splits, t.warps(), t.Stages,
		[]*stablehlo.Value{gu, w, r}, shapes.Make(dtypes.Float32, splits, n))
	if err != nil {
		return nil, err
	}
	return ys[0], nil
}

// GEMVNorm appends y [1, n] = the dense layer of GEMVNormTTIR (x·g rounded to bfloat16,
// times wᵀ, times s where given, times the row's 1/rms) to x's function, for x [1, k]
// float32, g [k] bfloat16, w [n, k] bfloat16 or FP8 bytes (uint8) and s [n] float32
// its row scales or nil for none: one program per t.BN rows of w.
func (kn Kernels) GEMVNorm(x, g, w, s *stablehlo.Value, t Tile, norm Norm) (*stablehlo.Value, error) {
	xs, gs, ws := x.Shape(), g.Shape(), w.Shape()
	weight, err := foldWeight(w, s)
	if err != nil {
		return nil, fmt.Errorf("triton: GEMV with a norm: %w", err)
	}
	if xs.Rank() != 2 || xs.Dimensions[0] < 1 || xs.DType != dtypes.Float32 ||
		!gs.Equal(shapes.Make(dtypes.BFloat16, xs.Dimensions[1])) || xs.Dimensions[1] != ws.Dimensions[1] {
		return nil, fmt.Errorf("triton: GEMV with a norm of x %s, g %s and w %s: want x [parts, k] float32 and g [k] bfloat16", xs, gs, ws)
	}
	n, k := ws.Dimensions[0], ws.Dimensions[1]
	ir, err := GEMVNormTTIR(n, k, t, norm, weight)
	if parts := xs.Dimensions[0]; err == nil && parts > 1 {
		ir, err = sumParts(ir, "xv", parts, k) // the loop's load of x
		if err == nil && norm.Before {
			ir, err = sumParts(ir, "xq", parts, k) // and the squares' loop's
		}
	}
	return kn.callGEMV("gemm_norm", ir, err, t, withScales([]*stablehlo.Value{x, g, w}, s), shapes.Make(dtypes.Float32, 1, n))
}

// AttentionOutput appends our attention of a to fn, the function of k, for the
// queries, k, v and bias as a describes them and lens [B] int32 (keys read per batch
// row), and returns its output [B, Heads, T, D] bfloat16: AttentionTTIR's kernel, whose
// per-split partial results AttentionCombineTTIR's kernel combines (into [B, T, Heads,
// D] where a.OutputBSHD, transposed here). The queries are q,
// or where a.RotaryRow is set the rows x [B, T, RotaryRow] (float32 with
// a.RotaryFloat32, otherwise bfloat16) and cos and sin [B, T, D/2] float32 that the
// kernel rotates them with. With a.Place, placed is start [B] int32, followed with
// a.Write by written [B] int32, and the kernel also returns k and v with the window's
// keys and values written (newK, newV): its outputs alias k's and v's buffers.
func (kn Kernels) AttentionOutput(fn *stablehlo.Function, queries []*stablehlo.Value, k, v, bias, lens *stablehlo.Value,
	placed []*stablehlo.Value, a Attention) (out, newK, newV *stablehlo.Value, err error) {
	want := []shapes.Shape{shapes.Make(dtypes.BFloat16, a.B, a.Heads, a.T, a.D)}
	if a.RotaryRow > 0 {
		x := dtypes.BFloat16
		if a.RotaryFloat32 {
			x = dtypes.Float32
		}
		want = []shapes.Shape{shapes.Make(x, a.B, a.T, a.RotaryRow),
			shapes.Make(dtypes.Float32, a.B, a.T, a.D/2), shapes.Make(dtypes.Float32, a.B, a.T, a.D/2)}
	}
	cache := shapes.Make(dtypes.BFloat16, a.B, a.KVHeads, a.S, a.D)
	want = append(want, cache, cache, shapes.Make(dtypes.BFloat16, a.B, a.BiasHeads, a.T, a.S), shapes.Make(dtypes.Int32, a.B))
	for range placedOperands(a) {
		want = append(want, shapes.Make(dtypes.Int32, a.B))
	}
	operands := append(append(slices.Clone(queries), k, v, bias, lens), placed...)
	if len(operands) != len(want) || len(placed) != placedOperands(a) {
		return nil, nil, nil, fmt.Errorf("triton: attention of %d queries' and %d placement operands for %+v", len(queries), len(placed), a)
	}
	for i, x := range operands {
		if !x.Shape().Equal(want[i]) {
			return nil, nil, nil, fmt.Errorf("triton: attention operand #%d is %s, want %s", i, x.Shape(), want[i])
		}
	}
	ir, err := AttentionTTIR(a)
	if err != nil {
		return nil, nil, nil, err
	}
	splits, rows := a.Splits(), a.Rows()
	outputs := []shapes.Shape{shapes.Make(dtypes.Float32, a.B, a.KVHeads, splits, rows, a.D),
		shapes.Make(dtypes.Float32, a.B, a.KVHeads, splits, rows),
		shapes.Make(dtypes.Float32, a.B, a.KVHeads, splits, rows)}
	if a.Write {
		outputs = append(outputs, cache, cache)
	}
	early := kn.Preload && a.B == 1 && a.T == 1 // the AR step's attention (Preload)
	if early {
		ir = launchAfterWait(ir)
	}
	partials, err := kn.Call("attention", ir, a.Programs(), Warps, a.Stages(), operands, outputs...)
	if err != nil {
		return nil, nil, nil, err
	}
	if a.Write {
		kIndex := len(queries)
		if err := aliasOutputs(fn, partials, map[int]int{3: kIndex, 4: kIndex + 1}); err != nil {
			return nil, nil, nil, err
		}
		newK, newV = partials[3], partials[4]
	}
	if ir, err = AttentionCombineTTIR(a); err != nil {
		return nil, nil, nil, err
	}
	if early {
		ir = launchAfterWait(ir)
	}
	shape := shapes.Make(dtypes.BFloat16, a.B, a.Heads, a.T, a.D)
	if a.OutputBSHD() {
		shape = shapes.Make(dtypes.BFloat16, a.B, a.T, a.Heads, a.D)
	}
	combined, err := kn.Call("combine", ir, a.CombinePrograms(), Warps, 1, partials[:3], shape)
	if err != nil {
		return nil, nil, nil, err
	}
	out = combined[0]
	if a.OutputBSHD() {
		// [B, Heads, T, D] as the fused attention returns it; model transposes it back,
		// and XLA cancels the two transposes.
		out, err = stablehlo.Transpose(out, 0, 2, 1, 3)
	}
	return out, newK, newV, err
}

// placedOperands is how many [B] int32 operands a's kernel takes after lens: start
// with Place, and written with Write.
func placedOperands(a Attention) int {
	switch {
	case a.Write:
		return 2
	case a.Place:
		return 1
	}
	return 0
}

// aliasOutputs makes the custom call of fn whose results are outs write its output
// #o into the buffer of its operand #aliases[o] (StableHLO's output_operand_aliases),
// which XLA then hands the kernel as both. go-xla's CustomCallV2 has no parameter for
// it; its statements' attributes are public.
func aliasOutputs(fn *stablehlo.Function, outs []*stablehlo.Value, aliases map[int]int) error {
	for i := len(fn.Statements) - 1; i >= 0; i-- {
		s := fn.Statements[i]
		if len(s.Outputs) == 0 || s.Outputs[0] != outs[0] {
			continue
		}
		var text []string
		for _, o := range slices.Sorted(maps.Keys(aliases)) {
			text = append(text, fmt.Sprintf("#stablehlo.output_operand_alias<output_tuple_indices = [%d], operand_index = %d, operand_tuple_indices = []>", o, aliases[o]))
		}
		s.Attributes["output_operand_aliases"] = mlirText("[" + strings.Join(text, ", ") + "]")
		return nil
	}
	return errors.New("triton: the custom call to alias is not in its function")
}

// mlirText is an attribute value written as it is.
type mlirText string

// ToStableHLO implements the interface of go-xla's attribute values.
func (t mlirText) ToStableHLO() string { return string(t) }

// RowNorm appends our norm of r to a's function (RowNormTTIR's kernel, a program per
// row): for a [M, K] float32 (and b [M, K] float32, nil unless r.Sum) and the norm
// weight g [K] bfloat16, it returns the rows x (a + b with r.Sum, else nil), x·g
// rounded to bfloat16 [M, K] and each row's 1/rms [M, 1] float32.
func (kn Kernels) RowNorm(a, b, g *stablehlo.Value, r RowNorm) (sum, xg, inv *stablehlo.Value, err error) {
	rows := shapes.Make(dtypes.Float32, r.M, r.K)
	operands, want := []*stablehlo.Value{a}, []shapes.Shape{rows}
	if r.Sum {
		operands, want = append(operands, b), append(want, rows)
	}
	operands, want = append(operands, g), append(want, shapes.Make(dtypes.BFloat16, r.K))
	for i, x := range operands {
		if x == nil || !x.Shape().Equal(want[i]) {
			return nil, nil, nil, fmt.Errorf("triton: norm operand #%d of %+v: want %s", i, r, want[i])
		}
	}
	ir, err := RowNormTTIR(r)
	if err != nil {
		return nil, nil, nil, err
	}
	outputs := []shapes.Shape{shapes.Make(dtypes.BFloat16, r.M, r.K), shapes.Make(dtypes.Float32, r.M, 1)}
	if r.Sum {
		outputs = append([]shapes.Shape{rows}, outputs...)
	}
	out, err := kn.Call("norm", ir, r.M, Warps, 1, operands, outputs...)
	if err != nil {
		return nil, nil, nil, err
	}
	if r.Sum {
		return out[0], out[1], out[2], nil
	}
	return nil, out[0], out[1], nil
}

package triton

import (
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
)

// Attention is the shape of a short window's attention over many keys, the decoding
// steps' kind: queries q [B, Heads, T, D], keys and values k, v [B, KVHeads, S, D], an
// additive bias [B, BiasHeads, T, S], all bfloat16 and row-major; query head h reads
// key/value head h/(Heads/KVHeads).
type Attention struct {
	B, Heads, KVHeads, T, S, D int
	// BiasHeads is the bias's head axis: Heads, or 1 for one bias of every head.
	BiasHeads int
	// Scale multiplies the scores q·kᵀ before the bias is added.
	Scale float64
	// RotaryRow, when positive, has the kernel read rows x [B, T, RotaryRow] instead of
	// q, with cos and sin [B, T, D/2] float32: query head h of position t is columns
	// h·D to (h+1)·D of x's row at t, rotated as model's rotary.apply rotates it
	// (rotate_half: x₁·cos − x₂·sin, x₂·cos + x₁·sin in float32, rounded to bfloat16),
	// so that the queries' rotation needs no kernel of its own. The row may hold more
	// than the queries (model's fused q/k/v product), so that they need no slice either.
	RotaryRow int
	// RotaryFloat32 has x float32, rounded to bfloat16 as the kernel loads it (the
	// graph's rounding of a float32 product before its rotation); otherwise x is
	// bfloat16.
	RotaryFloat32 bool
	// Place, with RotaryRow set, has the kernel take each batch row's own keys and
	// values from x's rows too, as model places a window's in its cache slots: at
	// position t, key/value head kv's key is columns (Heads+kv)·D to (Heads+kv+1)·D of
	// the row, rotated as the queries are, its value the D columns from
	// ValueColumn+kv·D, rounded to bfloat16 where x is float32. They stand in for slots
	// start[b] to start[b]+T-1 of k and v, whatever those hold, so that no kernel need
	// copy the cache with them placed. With T 1 the key and value are loaded once,
	// before the loop, and put in place of slot start[b]'s; with more, the program
	// whose split holds slot start[b] takes the window's keys and values as a step of
	// keys of its own before its loop, and every program's steps leave the window's
	// slots unread.
	Place bool
	// ValueColumn is the column of x's row where the values start (Place).
	ValueColumn int
	// Write, with Place and T 1, has the kernel also store the key and value in slot
	// start[b] of k and v themselves, where written[b] is positive: its outputs k and v
	// are the operands' buffers (aliased), so that the cache's update needs no kernel
	// either.
	Write bool
}

// AttentionKeys is the keys one step of the attention kernel's loop reads: the PyTorch
// peer's decode attention measured 32 positions per program fastest on the H200.
const AttentionKeys = 32

// maxAttentionPrograms bounds the programs of the attention kernel: two per SM of the
// H200 (132). More splits would write more partial results for the combine: at batch
// 64 with windows of 8, 14 steps of 32 keys per program in two splits write 8 MB of
// them, seven splits 29 MB, about half the keys and values they read.
const maxAttentionPrograms = 264

// maxWindowPrograms bounds the splits of the attention kernel of a window of several
// queries at batch 1 instead: one program per SM of the H200. Past 4096 cached positions
// half as many splits of twice the steps made the 4- and 8-token steps faster; the AR step
// lost so and keeps maxAttentionPrograms (at 2048 and below the splits are the same).
const maxWindowPrograms = 132

// programsCap bounds the programs over which a's kernel splits its keys
// (Attention.Splits): maxWindowPrograms for a window of several queries at batch 1,
// maxAttentionPrograms otherwise.
func (a Attention) programsCap() int {
	if a.B == 1 && a.T > 1 {
		return maxWindowPrograms
	}
	return maxAttentionPrograms
}

// maxAttentionStages is how deep the kernel's loop over its steps of keys is pipelined
// (the next steps' keys, values and bias loading while one is computed) where a program
// has that many steps: at batch 64 a program walks 14, where one stage was much slower.
const maxAttentionStages = 3

// Stages is the pipelining depth of a's kernel: maxAttentionStages, or the steps of
// keys each program walks if fewer (1: not pipelined).
func (a Attention) Stages() int { return min(maxAttentionStages, a.KeysPerSplit()/AttentionKeys) }

// maxAttentionRows is the most query rows (query heads of a group times T) one program
// holds: their [rows, D] float32 accumulator must stay in registers.
const maxAttentionRows = 64

// Rows is the query rows of each batch row, key/value head and split, which RowGroups
// programs hold: the Heads/KVHeads query heads of its key/value head times T, rounded
// up to a power of two of at least 16 (tt.dot's smallest side). Rows past the real ones
// repeat the last and are not used.
func (a Attention) Rows() int { return dotSide(a.group() * a.T) }

// dotSide is n rounded up to a power of two of at least DotRows, tt.dot's smallest side.
func dotSide(n int) int { return powerOfTwoAtLeast(max(n, DotRows)) }

func (a Attention) group() int { return a.Heads / a.KVHeads }

// windowKeys is the width of the step of keys in which a program takes a placed window
// of T > 1 queries (Attention.Place): T rounded up to a power of two of at least 16,
// tt.dot's smallest side; the keys past T are hidden.
func (a Attention) windowKeys() int { return dotSide(a.T) }

// Splits is how many programs share the keys of one batch row and key/value head, each
// reading KeysPerSplit of them: as many as there are steps of AttentionKeys keys, up
// to programsCap programs in all.
func (a Attention) Splits() int {
	steps := (a.S + AttentionKeys - 1) / AttentionKeys
	perHead := max(1, a.programsCap()/(a.B*a.KVHeads))
	if steps <= perHead {
		return steps
	}
	// Fewer programs, each several steps: split the steps evenly.
	perSplit := (steps + perHead - 1) / perHead
	return (steps + perSplit - 1) / perSplit
}

// KeysPerSplit is the keys each program reads, a multiple of AttentionKeys.
func (a Attention) KeysPerSplit() int {
	steps := (a.S + AttentionKeys - 1) / AttentionKeys
	splits := a.Splits()
	return (steps + splits - 1) / splits * AttentionKeys
}

// RowGroups is how many programs share the rows of one batch row, key/value head and
// split, each holding programRows of them: Rows()/16 where every step of keys has its
// programs within maxAttentionPrograms, as at batch 1, so that a window of several
// queries spreads over more SMs rather than lengthening each program's work (each
// program then reads the split's keys again, from L2); otherwise 1.
func (a Attention) RowGroups() int {
	groups := a.Rows() / DotRows
	steps := (a.S + AttentionKeys - 1) / AttentionKeys
	if a.B*a.KVHeads*steps*groups > maxAttentionPrograms {
		return 1
	}
	return groups
}

// programRows is the query rows each program holds: Rows()/RowGroups().
func (a Attention) programRows() int { return a.Rows() / a.RowGroups() }

// Programs is the attention kernel's grid: B × KVHeads × RowGroups × Splits.
func (a Attention) Programs() int { return a.B * a.KVHeads * a.RowGroups() * a.Splits() }

// CheckAttention says why AttentionTTIR cannot write a's kernel, or returns nil.
func CheckAttention(a Attention) error {
	var errs []error
	if a.B < 1 || a.Heads < 1 || a.KVHeads < 1 || a.T < 1 || a.S < 1 {
		errs = append(errs, fmt.Errorf("dimensions %+v must be positive", a))
	} else if a.Heads%a.KVHeads != 0 {
		errs = append(errs, fmt.Errorf("%d query heads are not groups of %d key/value heads", a.Heads, a.KVHeads))
	} else if r := a.group() * a.T; r > maxAttentionRows {
		errs = append(errs, fmt.Errorf("%d query heads per key/value head times %d queries is %d rows, over %d",
			a.group(), a.T, r, maxAttentionRows))
	}
	if a.RotaryRow != 0 && (a.RotaryRow < a.Heads*a.D || a.D%2 != 0) {
		errs = append(errs, fmt.Errorf("rotated queries: rows of %d columns of x for %d query heads of dimension %d", a.RotaryRow, a.Heads, a.D))
	}
	if a.Place && (a.RotaryRow == 0 || a.RotaryRow < (a.Heads+a.KVHeads)*a.D ||
		a.ValueColumn < 0 || a.ValueColumn+a.KVHeads*a.D > a.RotaryRow) {
		errs = append(errs, fmt.Errorf("placed keys and values: rotated from rows of %d columns holding %d query and %d key heads of %d and values from column %d",
			a.RotaryRow, a.Heads, a.KVHeads, a.D, a.ValueColumn))
	}
	if a.Write && (!a.Place || a.T != 1) {
		errs = append(errs, errors.New("only the placed key and value of one query per row are written"))
	}
	if a.BiasHeads != a.Heads && a.BiasHeads != 1 {
		errs = append(errs, fmt.Errorf("the bias has %d heads: %d or 1", a.BiasHeads, a.Heads))
	}
	if !isPowerOfTwo(a.D) || a.D < 16 || a.D > 128 {
		errs = append(errs, fmt.Errorf("head dimension %d: a power of two from 16 to 128", a.D))
	}
	if int64(a.B)*int64(max(a.Heads*a.T, a.KVHeads))*int64(a.S+AttentionKeys)*int64(max(a.D, a.T)) > math.MaxInt32 ||
		int64(a.B)*int64(a.T)*int64(a.RotaryRow) > math.MaxInt32 {
		errs = append(errs, fmt.Errorf("%+v: too large for int32 offsets", a))
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("triton: attention: %w", err)
	}
	return nil
}

// AttentionTTIR is the TTIR module of the kernel @attention, the first half of a
// split-key ("flash decoding") attention: program (b, kv, group, split) reads its
// split's keys of key/value head kv in steps of AttentionKeys, for its row group's
// programRows of the Rows() query rows of the heads of that group (row r: head
// kv·g + r/T, query r%T), and keeps FlashAttention's
// running row maximum m, sum of exponentials l and unnormalised output acc in float32.
// Keys past S and hidden ones (bias −1e30) weigh nothing once any visible key has been
// seen; a split that sees none has m = −1e30 and weighs nothing when combined.
//
// Its arguments are q, k, v and bias (see Attention) and lens [B] int32, then its
// outputs acc [B, KVHeads, Splits, Rows, D], m and l [B, KVHeads, Splits, Rows],
// float32, which AttentionCombineTTIR's kernel combines. A program reads no key at
// or past lens[b], one past the last key any query of row b sees: a decoder's cache is
// sized for the whole generation, and its slots past the context would be read for
// nothing; a split past it does no step and weighs nothing.
//
// Each step loads its values with its keys, before the scores need them: at a cache of
// 528 slots a program walks one step, whose loads the compiler would otherwise issue one
// after the other.
func AttentionTTIR(a Attention) (string, error) {
	if err := CheckAttention(a); err != nil {
		return "", err
	}
	text := `module {
  tt.func public @attention($QARGS, %k: !tt.ptr<bf16> {tt.divisibility = 16 : i32}, %v: !tt.ptr<bf16> {tt.divisibility = 16 : i32}, %bias: !tt.ptr<bf16> {tt.divisibility = 16 : i32}, %lens: !tt.ptr<i32> {tt.divisibility = 16 : i32}$PLACEARGS, %oacc: !tt.ptr<f32> {tt.divisibility = 16 : i32}, %om: !tt.ptr<f32> {tt.divisibility = 16 : i32}, %ol: !tt.ptr<f32> {tt.divisibility = 16 : i32}$WRITEARGS) attributes {noinline = false} {
` + waitMark + `    %pid = tt.get_program_id x : i32
    %cSplits = arith.constant $SPLITS : i32
    %cKVH = arith.constant $KVH : i32
    %sp = arith.remsi %pid, %cSplits : i32
$ROWGROUP    %kv = arith.remsi %bkv, %cKVH : i32
    %bi = arith.divsi %bkv, %cKVH : i32
    %lenp = tt.addptr %lens, %bi : !tt.ptr<i32>, i32
    %len = tt.load %lenp : !tt.ptr<i32>
$ROWRANGE    %rlast = arith.constant dense<$LASTROW> : tensor<$Rxi32>
    %rc = arith.minsi %r, %rlast : tensor<$Rxi32>
    %Tr = arith.constant dense<$T> : tensor<$Rxi32>
    %hq = arith.divsi %rc, %Tr : tensor<$Rxi32>
    %iq = arith.remsi %rc, %Tr : tensor<$Rxi32>
    %cG = arith.constant $G : i32
    %h0 = arith.muli %kv, %cG : i32
    %cH = arith.constant $H : i32
    %bH = arith.muli %bi, %cH : i32
    %hb = arith.addi %bH, %h0 : i32
    %hbs = tt.splat %hb : i32 -> tensor<$Rxi32>
    %head = arith.addi %hbs, %hq : tensor<$Rxi32>
    %qrowT = arith.muli %head, %Tr : tensor<$Rxi32>
    %qrow = arith.addi %qrowT, %iq : tensor<$Rxi32>
    %Dr = arith.constant dense<$D> : tensor<$Rxi32>
    %qoff = arith.muli %qrow, %Dr : tensor<$Rxi32>
    %qoff2 = tt.expand_dims %qoff {axis = 1 : i32} : tensor<$Rxi32> -> tensor<$Rx1xi32>
    %qoffb = tt.broadcast %qoff2 : tensor<$Rx1xi32> -> tensor<$RxDxi32>
    %rd = tt.make_range {end = $D : i32, start = 0 : i32} : tensor<$Dxi32>
    %rd0 = tt.expand_dims %rd {axis = 0 : i32} : tensor<$Dxi32> -> tensor<1x$Dxi32>
    %rdb = tt.broadcast %rd0 : tensor<1x$Dxi32> -> tensor<$RxDxi32>
    %qo = arith.addi %qoffb, %rdb : tensor<$RxDxi32>
    %Sr = arith.constant dense<$S> : tensor<$Rxi32>
$BIASROW$COLUMNS$PLACELOADS$QLOAD    %cS = arith.constant $S : i32
    %kvrow = arith.muli %bkv, %cS : i32
    %kvrows = tt.splat %kvrow : i32 -> tensor<$BNxi32>
    %rn = tt.make_range {end = $BN : i32, start = 0 : i32} : tensor<$BNxi32>
    %Sn = arith.constant dense<$S> : tensor<$BNxi32>
    %Dn = arith.constant dense<$D> : tensor<$BNxi32>
    %rdk = tt.expand_dims %rd {axis = 1 : i32} : tensor<$Dxi32> -> tensor<$Dx1xi32>
    %rdkb = tt.broadcast %rdk : tensor<$Dx1xi32> -> tensor<$Dx$BNxi32>
    %rdvb = tt.broadcast %rd0 : tensor<1x$Dxi32> -> tensor<$BNx$Dxi32>
    %brow2 = tt.expand_dims %brow {axis = 1 : i32} : tensor<$Rxi32> -> tensor<$Rx1xi32>
    %browb = tt.broadcast %brow2 : tensor<$Rx1xi32> -> tensor<$RxBNxi32>
    %kbase = tt.splat %k : !tt.ptr<bf16> -> tensor<$Dx$BNx!tt.ptr<bf16>>
    %vbase = tt.splat %v : !tt.ptr<bf16> -> tensor<$BNx$Dx!tt.ptr<bf16>>
    %bbase = tt.splat %bias : !tt.ptr<bf16> -> tensor<$RxBNx!tt.ptr<bf16>>
    %kzero = arith.constant dense<0.000000e+00> : tensor<$Dx$BNxbf16>
    %vzero = arith.constant dense<0.000000e+00> : tensor<$BNx$Dxbf16>
    %hidden = arith.constant dense<-1.000000e+30> : tensor<$RxBNxbf16>
    %szero = arith.constant dense<0.000000e+00> : tensor<$RxBNxf32>
    %scale = arith.constant dense<$SCALE> : tensor<$RxBNxf32>
    %cL = arith.constant $L : i32
    %cBN = arith.constant $BN : i32
    %jstart = arith.muli %sp, %cL : i32
    %jsplit = arith.addi %jstart, %cL : i32
    %jend = arith.minsi %jsplit, %len : i32
    %m0 = arith.constant dense<-1.000000e+30> : tensor<$Rxf32>
    %l0 = arith.constant dense<0.000000e+00> : tensor<$Rxf32>
    %a0 = arith.constant dense<0.000000e+00> : tensor<$RxDxf32>
$PLACELOAD    %res:3 = scf.for %j0 = %jstart to %jend step %cBN iter_args(%m = $M0, %l = $L0, %acc = $A0) -> (tensor<$Rxf32>, tensor<$Rxf32>, tensor<$RxDxf32>) : i32 {
      %j0s = tt.splat %j0 : i32 -> tensor<$BNxi32>
      %j = arith.addi %j0s, %rn : tensor<$BNxi32>
      %jok = arith.cmpi slt, %j, %Sn : tensor<$BNxi32>
$LOOPMASK      %krow = arith.addi %kvrows, %j : tensor<$BNxi32>
      %koff = arith.muli %krow, %Dn : tensor<$BNxi32>
      %koffT = tt.expand_dims %koff {axis = 0 : i32} : tensor<$BNxi32> -> tensor<1x$BNxi32>
      %koffTb = tt.broadcast %koffT : tensor<1x$BNxi32> -> tensor<$Dx$BNxi32>
      %kto = arith.addi %koffTb, %rdkb : tensor<$Dx$BNxi32>
      %kp = tt.addptr %kbase, %kto : tensor<$Dx$BNx!tt.ptr<bf16>>, tensor<$Dx$BNxi32>
      %jokT = tt.expand_dims %jok {axis = 0 : i32} : tensor<$BNxi1> -> tensor<1x$BNxi1>
      %jokTb = tt.broadcast %jokT : tensor<1x$BNxi1> -> tensor<$Dx$BNxi1>
      %kt = tt.load %kp, $KMASK, %kzero : tensor<$Dx$BNx!tt.ptr<bf16>>
      %voffc = tt.expand_dims %koff {axis = 1 : i32} : tensor<$BNxi32> -> tensor<$BNx1xi32>
      %voffb = tt.broadcast %voffc : tensor<$BNx1xi32> -> tensor<$BNx$Dxi32>
      %vo = arith.addi %voffb, %rdvb : tensor<$BNx$Dxi32>
      %vp = tt.addptr %vbase, %vo : tensor<$BNx$Dx!tt.ptr<bf16>>, tensor<$BNx$Dxi32>
      %jokV = tt.expand_dims %jok {axis = 1 : i32} : tensor<$BNxi1> -> tensor<$BNx1xi1>
      %jokVb = tt.broadcast %jokV : tensor<$BNx1xi1> -> tensor<$BNx$Dxi1>
      %vv = tt.load %vp, $VMASK, %vzero : tensor<$BNx$Dx!tt.ptr<bf16>>
$KPLACE$STEP      scf.yield %mn, %ln, %an : tensor<$Rxf32>, tensor<$Rxf32>, tensor<$RxDxf32>
    }
` + launchMark + `    %cR = arith.constant $ROWS : i32
    %bkvs = arith.muli %bkv, %cSplits : i32
    %part = arith.addi %bkvs, %sp : i32
    %prow = arith.muli %part, %cR : i32
    %prows = tt.splat %prow : i32 -> tensor<$Rxi32>
    %orow = arith.addi %prows, %r : tensor<$Rxi32>
    %mbase = tt.splat %om : !tt.ptr<f32> -> tensor<$Rx!tt.ptr<f32>>
    %mp = tt.addptr %mbase, %orow : tensor<$Rx!tt.ptr<f32>>, tensor<$Rxi32>
    tt.store %mp, %res#0 : tensor<$Rx!tt.ptr<f32>>
    %lbase = tt.splat %ol : !tt.ptr<f32> -> tensor<$Rx!tt.ptr<f32>>
    %lp = tt.addptr %lbase, %orow : tensor<$Rx!tt.ptr<f32>>, tensor<$Rxi32>
    tt.store %lp, %res#1 : tensor<$Rx!tt.ptr<f32>>
    %ooff = arith.muli %orow, %Dr : tensor<$Rxi32>
    %ooff2 = tt.expand_dims %ooff {axis = 1 : i32} : tensor<$Rxi32> -> tensor<$Rx1xi32>
    %ooffb = tt.broadcast %ooff2 : tensor<$Rx1xi32> -> tensor<$RxDxi32>
    %oo = arith.addi %ooffb, %rdb : tensor<$RxDxi32>
    %abase = tt.splat %oacc : !tt.ptr<f32> -> tensor<$RxDx!tt.ptr<f32>>
    %ap = tt.addptr %abase, %oo : tensor<$RxDx!tt.ptr<f32>>, tensor<$RxDxi32>
    tt.store %ap, %res#2 : tensor<$RxDx!tt.ptr<f32>>
$PLACESTORE    tt.return
  }
}`
	// A step of the cache's keys: their bias loaded between the scores and their use.
	text = strings.Replace(text, "$STEP", onlineStep("", "BN", "$KT", "$VV", "%m", "%l", "%acc", cacheBias, "$VPLACE"), 1)
	// The bias row of each query row: its query's, or with one bias of every head its
	// batch row's and position's.
	biasRow := "    %brow = arith.muli %qrow, %Sr : tensor<$Rxi32>\n"
	if a.BiasHeads == 1 && a.Heads > 1 {
		biasRow = `    %cT = arith.constant $T : i32
    %bT = arith.muli %bi, %cT : i32
    %bTs = tt.splat %bT : i32 -> tensor<$Rxi32>
    %brow0 = arith.addi %bTs, %iq : tensor<$Rxi32>
    %brow = arith.muli %brow0, %Sr : tensor<$Rxi32>
`
	}
	text = strings.Replace(text, "$BIASROW", biasRow, 1)
	text = a.placed(text)
	if a.RotaryRow > 0 {
		// The rows' type, width and half the head dimension, in rotaryLoad's text and in
		// placed's.
		xtype, round, xb, xpb := "bf16", "", "%xv", "%xpv"
		if a.RotaryFloat32 {
			xtype, round, xb, xpb = "f32", roundedLoad, "%xb", "%xpb"
		}
		text = strings.NewReplacer("$QARGS", rotaryArgs, "$COLUMNS", rotaryColumns, "$QLOAD", rotaryLoad).Replace(text)
		text = strings.NewReplacer("$XROUND", round, "$XROW", strconv.Itoa(a.RotaryRow), "$XT", xtype,
			"$XB", xb, "$XPB", xpb, "$HALF", strconv.Itoa(a.D/2)).Replace(text)
	} else {
		text = strings.NewReplacer("$QARGS", queryArgs, "$COLUMNS", "", "$QLOAD", queryLoad).Replace(text)
	}
	// A program's rows: all of its batch row's, key/value head's and split's, or with
	// several row groups its group's, from its first.
	rowGroup, rowRange := `    %bkv = arith.divsi %pid, %cSplits : i32
`, `    %r = tt.make_range {end = $R : i32, start = 0 : i32} : tensor<$Rxi32>
`
	if a.RowGroups() > 1 {
		rowGroup = `    %pidr = arith.divsi %pid, %cSplits : i32
    %cRG = arith.constant $RG : i32
    %rg = arith.remsi %pidr, %cRG : i32
    %bkv = arith.divsi %pidr, %cRG : i32
`
		rowRange = `    %r0 = tt.make_range {end = $R : i32, start = 0 : i32} : tensor<$Rxi32>
    %cPR = arith.constant $R : i32
    %rg0 = arith.muli %rg, %cPR : i32
    %rg0s = tt.splat %rg0 : i32 -> tensor<$Rxi32>
    %r = arith.addi %rg0s, %r0 : tensor<$Rxi32>
`
	}
	text = strings.NewReplacer("$ROWGROUP", rowGroup, "$ROWRANGE", rowRange).Replace(text)
	r := strconv.Itoa(a.programRows())
	// strings.Replacer tries its pairs in order at each position: longer names first.
	return strings.NewReplacer("$ROWS", strconv.Itoa(a.Rows()), "$RG", strconv.Itoa(a.RowGroups()),
		"$RxBN", r+"x"+strconv.Itoa(AttentionKeys), "$RxWN", r+"x"+strconv.Itoa(a.windowKeys()), "$RxD", r+"x"+strconv.Itoa(a.D),
		"$Rx", r+"x", "$R ", r+" ", "$WN", strconv.Itoa(a.windowKeys()),
		"$BN", strconv.Itoa(AttentionKeys), "$D", strconv.Itoa(a.D), "$SPLITS", strconv.Itoa(a.Splits()),
		"$KVH", strconv.Itoa(a.KVHeads), "$LASTROW", strconv.Itoa(a.group()*a.T-1), "$T", strconv.Itoa(a.T),
		"$G", strconv.Itoa(a.group()), "$H", strconv.Itoa(a.Heads), "$SCALE", strconv.FormatFloat(a.Scale, 'e', 9, 64),
		"$S", strconv.Itoa(a.S), "$L", strconv.Itoa(a.KeysPerSplit()),
	).Replace(text), nil
}

// onlineStep is the text of one step of keys of FlashAttention's online softmax, its
// names prefixed by p: the scores of the queries %qv against keys [D, W] (W the width
// $BN or $WN that width names), scaled by %{p}scale, plus the bias %{p}bv [R, W] that
// bias loads after the scores; then the running maximum m, sum l and output acc
// updated with the values [W, D] into %{p}mn, %{p}ln and %{p}an. beforeValues comes
// just before the product with the values. The loop's steps over the cache and a
// placed window's step before them (from no keys seen) are the same text.
func onlineStep(p, width, keys, values, m, l, acc, bias, beforeValues string) string {
	return strings.NewReplacer("%_", "%"+p, "$RxW", "$Rx"+width, "$W", "$"+width, "KEYS", keys, "VALUES", values,
		"M_IN", m, "L_IN", l, "ACC_IN", acc, "BIAS\n", bias, "BEFOREV", beforeValues).Replace(onlineStepText)
}

// onlineStepText is onlineStep's template.
const onlineStepText = `      %_s = tt.dot %qv, KEYS, %_szero : tensor<$RxDxbf16> * tensor<$Dx$Wxbf16> -> tensor<$RxWxf32>
      %_ss = arith.mulf %_s, %_scale : tensor<$RxWxf32>
BIAS
      %_bf = arith.extf %_bv : tensor<$RxWxbf16> to tensor<$RxWxf32>
      %_sc = arith.addf %_ss, %_bf : tensor<$RxWxf32>
      %_mt = "tt.reduce"(%_sc) <{axis = 1 : i32}> ({
      ^bb0(%_x0: f32, %_x1: f32):
        %_mx = arith.maxnumf %_x0, %_x1 : f32
        tt.reduce.return %_mx : f32
      }) : (tensor<$RxWxf32>) -> tensor<$Rxf32>
      %_mn = arith.maxnumf M_IN, %_mt : tensor<$Rxf32>
      %_md = arith.subf M_IN, %_mn : tensor<$Rxf32>
      %_alpha = math.exp %_md : tensor<$Rxf32>
      %_mn2 = tt.expand_dims %_mn {axis = 1 : i32} : tensor<$Rxf32> -> tensor<$Rx1xf32>
      %_mn2b = tt.broadcast %_mn2 : tensor<$Rx1xf32> -> tensor<$RxWxf32>
      %_sd = arith.subf %_sc, %_mn2b : tensor<$RxWxf32>
      %_p = math.exp %_sd : tensor<$RxWxf32>
      %_ps = "tt.reduce"(%_p) <{axis = 1 : i32}> ({
      ^bb0(%_y0: f32, %_y1: f32):
        %_sm = arith.addf %_y0, %_y1 : f32
        tt.reduce.return %_sm : f32
      }) : (tensor<$RxWxf32>) -> tensor<$Rxf32>
      %_la = arith.mulf L_IN, %_alpha : tensor<$Rxf32>
      %_ln = arith.addf %_la, %_ps : tensor<$Rxf32>
      %_alpha2 = tt.expand_dims %_alpha {axis = 1 : i32} : tensor<$Rxf32> -> tensor<$Rx1xf32>
      %_alpha2b = tt.broadcast %_alpha2 : tensor<$Rx1xf32> -> tensor<$RxDxf32>
      %_accs = arith.mulf ACC_IN, %_alpha2b : tensor<$RxDxf32>
      %_pb = arith.truncf %_p : tensor<$RxWxf32> to tensor<$RxWxbf16>
BEFOREV      %_an = tt.dot %_pb, VALUES, %_accs : tensor<$RxWxbf16> * tensor<$Wx$Dxbf16> -> tensor<$RxDxf32>
`

// cacheBias loads the bias of a step of the cache's keys %j (onlineStep's bias).
const cacheBias = `      %j2 = tt.expand_dims %j {axis = 0 : i32} : tensor<$BNxi32> -> tensor<1x$BNxi32>
      %j2b = tt.broadcast %j2 : tensor<1x$BNxi32> -> tensor<$RxBNxi32>
      %bo = arith.addi %browb, %j2b : tensor<$RxBNxi32>
      %bp = tt.addptr %bbase, %bo : tensor<$RxBNx!tt.ptr<bf16>>, tensor<$RxBNxi32>
      %jokBb = tt.broadcast %jokT : tensor<1x$BNxi1> -> tensor<$RxBNxi1>
      %bv = tt.load %bp, $BMASK, %hidden : tensor<$RxBNx!tt.ptr<bf16>>
`

// queryArgs and queryLoad are the attention kernel's query argument q [B, Heads, T, D]
// and its load of the program's rows, %qv [R, D] (%qo their offsets in q).
const (
	queryArgs = "%q: !tt.ptr<bf16> {tt.divisibility = 16 : i32}"
	queryLoad = `    %qbase = tt.splat %q : !tt.ptr<bf16> -> tensor<$RxDx!tt.ptr<bf16>>
    %qp = tt.addptr %qbase, %qo : tensor<$RxDx!tt.ptr<bf16>>, tensor<$RxDxi32>
    %qv = tt.load %qp : tensor<$RxDx!tt.ptr<bf16>>
`
)

// rotaryColumns precedes every load of rows of x to rotate (the queries', a placed key's
// or window's), which all take their columns from it: the partner of column d,
// %rdp = (d + D/2) mod D, and its cosine's and sine's column %rdc = d mod D/2.
const rotaryColumns = `    %halfd = arith.constant dense<$HALF> : tensor<$Dxi32>
    %Dd = arith.constant dense<$D> : tensor<$Dxi32>
    %rdh = arith.addi %rd, %halfd : tensor<$Dxi32>
    %rdp = arith.remsi %rdh, %Dd : tensor<$Dxi32>
    %rdc = arith.remsi %rd, %halfd : tensor<$Dxi32>
`

// rotaryArgs and rotaryLoad are queryArgs and queryLoad where Attention.RotaryRow is
// set: the rows x [B, T, $XROW] of type $XT and cos, sin [B, T, $HALF], and %qv made
// from each query's columns of x (position %pos = b·T + t, head %xh) and its partner
// columns (rotaryColumns' %rdp) as rotary.apply makes it; $XROUND rounds float32 x to
// bfloat16 first (roundedLoad), as the graph does, and $XB and $XPB name the bfloat16
// values. x's second half times −1 is exact, so the sum x·cos + (±x')·sin rounds as the
// graph's difference and sum do.
const (
	rotaryArgs = "%x: !tt.ptr<$XT> {tt.divisibility = 16 : i32}, %cos: !tt.ptr<f32> {tt.divisibility = 16 : i32}, %sin: !tt.ptr<f32> {tt.divisibility = 16 : i32}"
	rotaryLoad = `    %h0s = tt.splat %h0 : i32 -> tensor<$Rxi32>
    %xh = arith.addi %h0s, %hq : tensor<$Rxi32>
    %cTx = arith.constant $T : i32
    %bTx = arith.muli %bi, %cTx : i32
    %bTxs = tt.splat %bTx : i32 -> tensor<$Rxi32>
    %pos = arith.addi %bTxs, %iq : tensor<$Rxi32>
    %XRr = arith.constant dense<$XROW> : tensor<$Rxi32>
    %xr0 = arith.muli %pos, %XRr : tensor<$Rxi32>
    %xhd = arith.muli %xh, %Dr : tensor<$Rxi32>
    %xoff = arith.addi %xr0, %xhd : tensor<$Rxi32>
    %xoff2 = tt.expand_dims %xoff {axis = 1 : i32} : tensor<$Rxi32> -> tensor<$Rx1xi32>
    %xoffb = tt.broadcast %xoff2 : tensor<$Rx1xi32> -> tensor<$RxDxi32>
    %xo = arith.addi %xoffb, %rdb : tensor<$RxDxi32>
    %rdp0 = tt.expand_dims %rdp {axis = 0 : i32} : tensor<$Dxi32> -> tensor<1x$Dxi32>
    %rdpb = tt.broadcast %rdp0 : tensor<1x$Dxi32> -> tensor<$RxDxi32>
    %xpo = arith.addi %xoffb, %rdpb : tensor<$RxDxi32>
    %xbase = tt.splat %x : !tt.ptr<$XT> -> tensor<$RxDx!tt.ptr<$XT>>
    %xp = tt.addptr %xbase, %xo : tensor<$RxDx!tt.ptr<$XT>>, tensor<$RxDxi32>
    %xv = tt.load %xp : tensor<$RxDx!tt.ptr<$XT>>
    %xpp = tt.addptr %xbase, %xpo : tensor<$RxDx!tt.ptr<$XT>>, tensor<$RxDxi32>
    %xpv = tt.load %xpp : tensor<$RxDx!tt.ptr<$XT>>
$XROUND    %xf = arith.extf $XB : tensor<$RxDxbf16> to tensor<$RxDxf32>
    %xpf = arith.extf $XPB : tensor<$RxDxbf16> to tensor<$RxDxf32>
    %HALFr = arith.constant dense<$HALF> : tensor<$Rxi32>
    %coff = arith.muli %pos, %HALFr : tensor<$Rxi32>
    %coff2 = tt.expand_dims %coff {axis = 1 : i32} : tensor<$Rxi32> -> tensor<$Rx1xi32>
    %coffb = tt.broadcast %coff2 : tensor<$Rx1xi32> -> tensor<$RxDxi32>
    %rdc0 = tt.expand_dims %rdc {axis = 0 : i32} : tensor<$Dxi32> -> tensor<1x$Dxi32>
    %rdcb = tt.broadcast %rdc0 : tensor<1x$Dxi32> -> tensor<$RxDxi32>
    %cso = arith.addi %coffb, %rdcb : tensor<$RxDxi32>
    %cbase = tt.splat %cos : !tt.ptr<f32> -> tensor<$RxDx!tt.ptr<f32>>
    %cptr = tt.addptr %cbase, %cso : tensor<$RxDx!tt.ptr<f32>>, tensor<$RxDxi32>
    %cv = tt.load %cptr : tensor<$RxDx!tt.ptr<f32>>
    %sbase = tt.splat %sin : !tt.ptr<f32> -> tensor<$RxDx!tt.ptr<f32>>
    %sptr = tt.addptr %sbase, %cso : tensor<$RxDx!tt.ptr<f32>>, tensor<$RxDxi32>
    %sv = tt.load %sptr : tensor<$RxDx!tt.ptr<f32>>
    %first = arith.cmpi slt, %rd, %halfd : tensor<$Dxi32>
    %plus = arith.constant dense<1.000000e+00> : tensor<$Dxf32>
    %minus = arith.constant dense<-1.000000e+00> : tensor<$Dxf32>
    %sgn = arith.select %first, %minus, %plus : tensor<$Dxi1>, tensor<$Dxf32>
    %sgn0 = tt.expand_dims %sgn {axis = 0 : i32} : tensor<$Dxf32> -> tensor<1x$Dxf32>
    %sgnb = tt.broadcast %sgn0 : tensor<1x$Dxf32> -> tensor<$RxDxf32>
    %xcos = arith.mulf %xf, %cv : tensor<$RxDxf32>
    %xps = arith.mulf %xpf, %sgnb : tensor<$RxDxf32>
    %xsin = arith.mulf %xps, %sv : tensor<$RxDxf32>
    %rot = arith.addf %xcos, %xsin : tensor<$RxDxf32>
    %qv = arith.truncf %rot : tensor<$RxDxf32> to tensor<$RxDxbf16>
`
)

// placed fills text's placeholders of Attention.Place and Write: with Place, the
// arguments start (and written), the loads of the program's own key and value
// (placeLoad) and their use in place of slot start[b]'s, or with T > 1 the window's
// step of keys before the loop and its slots masked off in the loop's (windowLoads,
// windowStep, windowMask); with Write,
// the outputs k and v and the store of the two there (placeStore); otherwise nothing.
// The rows' type, width and half the head dimension ($XT, $XROW, $HALF) are left for
// AttentionTTIR to fill as it fills rotaryLoad's.
func (a Attention) placed(text string) string {
	// The loop starts from no keys seen and masks the bias by S alone, except where a
	// window of several queries is placed (windowStep, windowMask).
	if !a.Place || a.T == 1 {
		text = strings.NewReplacer("$M0", "%m0", "$L0", "%l0", "$A0", "%a0", "$LOOPMASK", "",
			"$KMASK", "%jokTb", "$VMASK", "%jokVb", "$BMASK", "%jokBb").Replace(text)
	}
	if !a.Place {
		return strings.NewReplacer("$PLACEARGS", "", "$WRITEARGS", "", "$PLACELOADS", "", "$PLACELOAD", "", "$KPLACE", "",
			"$VPLACE", "", "$KT", "%kt", "$VV", "%vv", "$PLACESTORE", "").Replace(text)
	}
	if a.T > 1 {
		round, wk, wkp, wv := "", "%pw_kx", "%pw_kpx", "%pw_vx"
		if a.RotaryFloat32 {
			round, wk, wkp, wv = windowRounded, "%pw_kb", "%pw_kpb", "%pw_vb"
		}
		step := strings.Replace(windowStep, "$PWSTEP", onlineStep("pw_", "WN", "%pw_k", "$WV", "%m0", "%l0", "%a0", "", ""), 1)
		text = strings.NewReplacer("$PLACEARGS", placeArgs, "$WRITEARGS", "", "$PLACELOADS", startLoad+windowLoads,
			"$PLACELOAD", step, "$KPLACE", "", "$VPLACE", "", "$KT", "%kt", "$VV", "%vv", "$PLACESTORE", "",
			"$M0", "%pw_init#0", "$L0", "%pw_init#1", "$A0", "%pw_init#2", "$LOOPMASK", windowMask,
			"$KMASK", "%pw_keepK", "$VMASK", "%pw_keepV", "$BMASK", "%pw_keepB").Replace(text)
		return strings.NewReplacer("$WROUND", round, "$WKB", wk, "$WKPB", wkp, "$WV", wv,
			"$KCOL", strconv.Itoa(a.Heads*a.D), "$VCOL", strconv.Itoa(a.ValueColumn)).Replace(text)
	}
	args, writes, load, store := placeArgs, "", "", ""
	if a.Write {
		args += writtenArg
		writes, load, store = writeArgs, writtenLoad, placeStore
	}
	round, tkb, tkpb, tv := "", "%tkx", "%tkpx", "%tvx"
	if a.RotaryFloat32 {
		round, tkb, tkpb, tv = placeRounded, "%tkb16", "%tkpb16", "%tv"
	}
	text = strings.NewReplacer("$PLACEARGS", args, "$WRITEARGS", writes, "$PLACELOADS", strings.Replace(placeLoads, "$WRITTENLOAD", load, 1), "$PLACELOAD", placeLoad,
		"$KPLACE", keyPlace, "$VPLACE", valuePlace, "$KT", "%ktp", "$VV", "%vvp", "$PLACESTORE", store).Replace(text)
	return strings.NewReplacer("$PROUND", round, "$TKB", tkb, "$TKPB", tkpb, "$TV", tv,
		"$KCOL", strconv.Itoa(a.Heads*a.D), "$VCOL", strconv.Itoa(a.ValueColumn)).Replace(text)
}

// The text of Attention.Place and Write (see placed). placeLoads loads the program's
// key (columns $KCOL + kv·D of x's row at position b, and their partner columns
// rotaryColumns gives, for the rotation rotaryLoad's queries have), value, cos and sin,
// start[b] and with Write written[b]; placeLoad rounds and rotates the key as
// rotaryLoad does the queries (reusing its %sgn), and broadcasts key and value to the
// loop's tiles of keys [D, BN] and values [BN, D]; keyPlace and valuePlace put them in
// place of slot start[b] of each tile; placeStore writes them to that slot of the
// outputs k and v, from the program whose split holds it, where written[b] > 0 and the
// slot is one of the S (the last split may reach past them). The slot's own keys and
// values are loaded and never used, so the store cannot race with any program's loads.
const (
	placeArgs  = ", %start: !tt.ptr<i32> {tt.divisibility = 16 : i32}"
	writtenArg = ", %written: !tt.ptr<i32> {tt.divisibility = 16 : i32}"
	writeArgs  = ", %kout: !tt.ptr<bf16> {tt.divisibility = 16 : i32}, %vout: !tt.ptr<bf16> {tt.divisibility = 16 : i32}"
	// placeLoads comes before the queries' loads and placeLoad after them, so that all of
	// the kernel's loads before its loop are issued before the first waits for its data:
	// after the queries' rotation, each load costs the kernel its whole latency.
	placeLoads = `    %cXRp = arith.constant $XROW : i32
    %xprow = arith.muli %bi, %cXRp : i32
    %cDp = arith.constant $D : i32
    %kvD = arith.muli %kv, %cDp : i32
    %cKC = arith.constant $KCOL : i32
    %kcol0 = arith.addi %cKC, %kvD : i32
    %kcol = arith.addi %xprow, %kcol0 : i32
    %kcols = tt.splat %kcol : i32 -> tensor<$Dxi32>
    %tko = arith.addi %kcols, %rd : tensor<$Dxi32>
    %tkpo = arith.addi %kcols, %rdp : tensor<$Dxi32>
    %xrow = tt.splat %x : !tt.ptr<$XT> -> tensor<$Dx!tt.ptr<$XT>>
    %tkp = tt.addptr %xrow, %tko : tensor<$Dx!tt.ptr<$XT>>, tensor<$Dxi32>
    %tkx = tt.load %tkp : tensor<$Dx!tt.ptr<$XT>>
    %tkpp = tt.addptr %xrow, %tkpo : tensor<$Dx!tt.ptr<$XT>>, tensor<$Dxi32>
    %tkpx = tt.load %tkpp : tensor<$Dx!tt.ptr<$XT>>
    %cVC = arith.constant $VCOL : i32
    %vcol0 = arith.addi %cVC, %kvD : i32
    %vcol = arith.addi %xprow, %vcol0 : i32
    %vcols = tt.splat %vcol : i32 -> tensor<$Dxi32>
    %tvo = arith.addi %vcols, %rd : tensor<$Dxi32>
    %tvp = tt.addptr %xrow, %tvo : tensor<$Dx!tt.ptr<$XT>>, tensor<$Dxi32>
    %tvx = tt.load %tvp : tensor<$Dx!tt.ptr<$XT>>
    %cHALFp = arith.constant $HALF : i32
    %ccol = arith.muli %bi, %cHALFp : i32
    %ccols = tt.splat %ccol : i32 -> tensor<$Dxi32>
    %tco = arith.addi %ccols, %rdc : tensor<$Dxi32>
    %tcb = tt.splat %cos : !tt.ptr<f32> -> tensor<$Dx!tt.ptr<f32>>
    %tcp = tt.addptr %tcb, %tco : tensor<$Dx!tt.ptr<f32>>, tensor<$Dxi32>
    %tcv = tt.load %tcp : tensor<$Dx!tt.ptr<f32>>
    %tsb = tt.splat %sin : !tt.ptr<f32> -> tensor<$Dx!tt.ptr<f32>>
    %tsp = tt.addptr %tsb, %tco : tensor<$Dx!tt.ptr<f32>>, tensor<$Dxi32>
    %tsv = tt.load %tsp : tensor<$Dx!tt.ptr<f32>>
` + startLoad + `$WRITTENLOAD`
	writtenLoad = `    %wrp = tt.addptr %written, %bi : !tt.ptr<i32>, i32
    %wrn = tt.load %wrp : !tt.ptr<i32>
`
	placeLoad = `$PROUND    %tkf = arith.extf $TKB : tensor<$Dxbf16> to tensor<$Dxf32>
    %tkpf = arith.extf $TKPB : tensor<$Dxbf16> to tensor<$Dxf32>
    %tkc = arith.mulf %tkf, %tcv : tensor<$Dxf32>
    %tks0 = arith.mulf %tkpf, %sgn : tensor<$Dxf32>
    %tks = arith.mulf %tks0, %tsv : tensor<$Dxf32>
    %tkr = arith.addf %tkc, %tks : tensor<$Dxf32>
    %tk = arith.truncf %tkr : tensor<$Dxf32> to tensor<$Dxbf16>
    %tk2 = tt.expand_dims %tk {axis = 1 : i32} : tensor<$Dxbf16> -> tensor<$Dx1xbf16>
    %tkb = tt.broadcast %tk2 : tensor<$Dx1xbf16> -> tensor<$Dx$BNxbf16>
    %tv2 = tt.expand_dims $TV {axis = 0 : i32} : tensor<$Dxbf16> -> tensor<1x$Dxbf16>
    %tvb = tt.broadcast %tv2 : tensor<1x$Dxbf16> -> tensor<$BNx$Dxbf16>
    %sts = tt.splat %st : i32 -> tensor<$BNxi32>
`
	// startLoad loads start[b] before the queries. Where T > 1, the program whose split
	// holds slot start[b] takes the window as a step of keys of its own, before its
	// loop: windowLoads loads, with the queries, the window's keys (and their partner
	// columns, cos and sin), values and bias, masked off in every other program;
	// windowStep rotates the keys as rotaryLoad does the queries (reusing its %sgn) and
	// takes them in onlineStep's step ($PWSTEP) from no keys seen, which starts the
	// program's running maximum, sum and output;
	// windowMask hides the window's slots from every program's steps of the cache,
	// which do not hold its keys, and leaves them unread.
	startLoad = `    %stp = tt.addptr %start, %bi : !tt.ptr<i32>, i32
    %st = tt.load %stp : !tt.ptr<i32>
`
	windowLoads = `    %pw_i = tt.make_range {end = $WN : i32, start = 0 : i32} : tensor<$WNxi32>
    %pw_T = arith.constant dense<$T> : tensor<$WNxi32>
    %pw_real = arith.cmpi slt, %pw_i, %pw_T : tensor<$WNxi32>
    %pw_cL = arith.constant $L : i32
    %pw_j0 = arith.muli %sp, %pw_cL : i32
    %pw_j1 = arith.addi %pw_j0, %pw_cL : i32
    %pw_ge = arith.cmpi sge, %st, %pw_j0 : i32
    %pw_lt = arith.cmpi slt, %st, %pw_j1 : i32
    %pw_own = arith.andi %pw_ge, %pw_lt : i1
    %pw_owns = tt.splat %pw_own : i1 -> tensor<$WNxi1>
    %pw_in = arith.andi %pw_real, %pw_owns : tensor<$WNxi1>
    %pw_zero = arith.constant dense<0> : tensor<$WNxi32>
    %pw_ic = arith.select %pw_real, %pw_i, %pw_zero : tensor<$WNxi1>, tensor<$WNxi32>
    %pw_cT = arith.constant $T : i32
    %pw_bT0 = arith.muli %bi, %pw_cT : i32
    %pw_bT = tt.splat %pw_bT0 : i32 -> tensor<$WNxi32>
    %pw_pos = arith.addi %pw_bT, %pw_ic : tensor<$WNxi32>
    %pw_XR = arith.constant dense<$XROW> : tensor<$WNxi32>
    %pw_xr = arith.muli %pw_pos, %pw_XR : tensor<$WNxi32>
    %pw_cD = arith.constant $D : i32
    %pw_kvD = arith.muli %kv, %pw_cD : i32
    %pw_cKC = arith.constant $KCOL : i32
    %pw_kc0 = arith.addi %pw_cKC, %pw_kvD : i32
    %pw_kcs = tt.splat %pw_kc0 : i32 -> tensor<$WNxi32>
    %pw_kr = arith.addi %pw_xr, %pw_kcs : tensor<$WNxi32>
    %pw_kr0 = tt.expand_dims %pw_kr {axis = 0 : i32} : tensor<$WNxi32> -> tensor<1x$WNxi32>
    %pw_krb = tt.broadcast %pw_kr0 : tensor<1x$WNxi32> -> tensor<$Dx$WNxi32>
    %pw_rd1 = tt.expand_dims %rd {axis = 1 : i32} : tensor<$Dxi32> -> tensor<$Dx1xi32>
    %pw_rdb = tt.broadcast %pw_rd1 : tensor<$Dx1xi32> -> tensor<$Dx$WNxi32>
    %pw_rdp1 = tt.expand_dims %rdp {axis = 1 : i32} : tensor<$Dxi32> -> tensor<$Dx1xi32>
    %pw_rdpb = tt.broadcast %pw_rdp1 : tensor<$Dx1xi32> -> tensor<$Dx$WNxi32>
    %pw_ko = arith.addi %pw_krb, %pw_rdb : tensor<$Dx$WNxi32>
    %pw_kpo = arith.addi %pw_krb, %pw_rdpb : tensor<$Dx$WNxi32>
    %pw_inK0 = tt.expand_dims %pw_in {axis = 0 : i32} : tensor<$WNxi1> -> tensor<1x$WNxi1>
    %pw_inK = tt.broadcast %pw_inK0 : tensor<1x$WNxi1> -> tensor<$Dx$WNxi1>
    %pw_xk = tt.splat %x : !tt.ptr<$XT> -> tensor<$Dx$WNx!tt.ptr<$XT>>
    %pw_xzk = arith.constant dense<0.000000e+00> : tensor<$Dx$WNx$XT>
    %pw_kp = tt.addptr %pw_xk, %pw_ko : tensor<$Dx$WNx!tt.ptr<$XT>>, tensor<$Dx$WNxi32>
    %pw_kx = tt.load %pw_kp, %pw_inK, %pw_xzk : tensor<$Dx$WNx!tt.ptr<$XT>>
    %pw_kpp = tt.addptr %pw_xk, %pw_kpo : tensor<$Dx$WNx!tt.ptr<$XT>>, tensor<$Dx$WNxi32>
    %pw_kpx = tt.load %pw_kpp, %pw_inK, %pw_xzk : tensor<$Dx$WNx!tt.ptr<$XT>>
    %pw_HALF = arith.constant dense<$HALF> : tensor<$WNxi32>
    %pw_cr = arith.muli %pw_pos, %pw_HALF : tensor<$WNxi32>
    %pw_cr0 = tt.expand_dims %pw_cr {axis = 0 : i32} : tensor<$WNxi32> -> tensor<1x$WNxi32>
    %pw_crb = tt.broadcast %pw_cr0 : tensor<1x$WNxi32> -> tensor<$Dx$WNxi32>
    %pw_rdc1 = tt.expand_dims %rdc {axis = 1 : i32} : tensor<$Dxi32> -> tensor<$Dx1xi32>
    %pw_rdcb = tt.broadcast %pw_rdc1 : tensor<$Dx1xi32> -> tensor<$Dx$WNxi32>
    %pw_co = arith.addi %pw_crb, %pw_rdcb : tensor<$Dx$WNxi32>
    %pw_fz = arith.constant dense<0.000000e+00> : tensor<$Dx$WNxf32>
    %pw_cb = tt.splat %cos : !tt.ptr<f32> -> tensor<$Dx$WNx!tt.ptr<f32>>
    %pw_cp = tt.addptr %pw_cb, %pw_co : tensor<$Dx$WNx!tt.ptr<f32>>, tensor<$Dx$WNxi32>
    %pw_cv = tt.load %pw_cp, %pw_inK, %pw_fz : tensor<$Dx$WNx!tt.ptr<f32>>
    %pw_sb = tt.splat %sin : !tt.ptr<f32> -> tensor<$Dx$WNx!tt.ptr<f32>>
    %pw_sp = tt.addptr %pw_sb, %pw_co : tensor<$Dx$WNx!tt.ptr<f32>>, tensor<$Dx$WNxi32>
    %pw_sv = tt.load %pw_sp, %pw_inK, %pw_fz : tensor<$Dx$WNx!tt.ptr<f32>>
    %pw_cVC = arith.constant $VCOL : i32
    %pw_vc0 = arith.addi %pw_cVC, %pw_kvD : i32
    %pw_vcs = tt.splat %pw_vc0 : i32 -> tensor<$WNxi32>
    %pw_vr = arith.addi %pw_xr, %pw_vcs : tensor<$WNxi32>
    %pw_vr1 = tt.expand_dims %pw_vr {axis = 1 : i32} : tensor<$WNxi32> -> tensor<$WNx1xi32>
    %pw_vrb = tt.broadcast %pw_vr1 : tensor<$WNx1xi32> -> tensor<$WNx$Dxi32>
    %pw_rdv = tt.broadcast %rd0 : tensor<1x$Dxi32> -> tensor<$WNx$Dxi32>
    %pw_vo = arith.addi %pw_vrb, %pw_rdv : tensor<$WNx$Dxi32>
    %pw_inV0 = tt.expand_dims %pw_in {axis = 1 : i32} : tensor<$WNxi1> -> tensor<$WNx1xi1>
    %pw_inV = tt.broadcast %pw_inV0 : tensor<$WNx1xi1> -> tensor<$WNx$Dxi1>
    %pw_xv = tt.splat %x : !tt.ptr<$XT> -> tensor<$WNx$Dx!tt.ptr<$XT>>
    %pw_xzv = arith.constant dense<0.000000e+00> : tensor<$WNx$Dx$XT>
    %pw_vp = tt.addptr %pw_xv, %pw_vo : tensor<$WNx$Dx!tt.ptr<$XT>>, tensor<$WNx$Dxi32>
    %pw_vx = tt.load %pw_vp, %pw_inV, %pw_xzv : tensor<$WNx$Dx!tt.ptr<$XT>>
    %pw_sts = tt.splat %st : i32 -> tensor<$WNxi32>
    %pw_slot = arith.addi %pw_sts, %pw_ic : tensor<$WNxi32>
    %pw_brow1 = tt.expand_dims %brow {axis = 1 : i32} : tensor<$Rxi32> -> tensor<$Rx1xi32>
    %pw_browb = tt.broadcast %pw_brow1 : tensor<$Rx1xi32> -> tensor<$RxWNxi32>
    %pw_slot0 = tt.expand_dims %pw_slot {axis = 0 : i32} : tensor<$WNxi32> -> tensor<1x$WNxi32>
    %pw_slotb = tt.broadcast %pw_slot0 : tensor<1x$WNxi32> -> tensor<$RxWNxi32>
    %pw_bo = arith.addi %pw_browb, %pw_slotb : tensor<$RxWNxi32>
    %pw_bb = tt.splat %bias : !tt.ptr<bf16> -> tensor<$RxWNx!tt.ptr<bf16>>
    %pw_bp = tt.addptr %pw_bb, %pw_bo : tensor<$RxWNx!tt.ptr<bf16>>, tensor<$RxWNxi32>
    %pw_inB = tt.broadcast %pw_inK0 : tensor<1x$WNxi1> -> tensor<$RxWNxi1>
    %pw_hidden = arith.constant dense<-1.000000e+30> : tensor<$RxWNxbf16>
    %pw_bv = tt.load %pw_bp, %pw_inB, %pw_hidden : tensor<$RxWNx!tt.ptr<bf16>>
`
	windowStep = `    %pw_init:3 = scf.if %pw_own -> (tensor<$Rxf32>, tensor<$Rxf32>, tensor<$RxDxf32>) {
$WROUND      %pw_kf = arith.extf $WKB : tensor<$Dx$WNxbf16> to tensor<$Dx$WNxf32>
      %pw_kpf = arith.extf $WKPB : tensor<$Dx$WNxbf16> to tensor<$Dx$WNxf32>
      %pw_sgn1 = tt.expand_dims %sgn {axis = 1 : i32} : tensor<$Dxf32> -> tensor<$Dx1xf32>
      %pw_sgnb = tt.broadcast %pw_sgn1 : tensor<$Dx1xf32> -> tensor<$Dx$WNxf32>
      %pw_kc = arith.mulf %pw_kf, %pw_cv : tensor<$Dx$WNxf32>
      %pw_ks0 = arith.mulf %pw_kpf, %pw_sgnb : tensor<$Dx$WNxf32>
      %pw_ks = arith.mulf %pw_ks0, %pw_sv : tensor<$Dx$WNxf32>
      %pw_krot = arith.addf %pw_kc, %pw_ks : tensor<$Dx$WNxf32>
      %pw_k = arith.truncf %pw_krot : tensor<$Dx$WNxf32> to tensor<$Dx$WNxbf16>
      %pw_szero = arith.constant dense<0.000000e+00> : tensor<$RxWNxf32>
      %pw_scale = arith.constant dense<$SCALE> : tensor<$RxWNxf32>
$PWSTEP      scf.yield %pw_mn, %pw_ln, %pw_an : tensor<$Rxf32>, tensor<$Rxf32>, tensor<$RxDxf32>
    } else {
      scf.yield %m0, %l0, %a0 : tensor<$Rxf32>, tensor<$Rxf32>, tensor<$RxDxf32>
    }
    %pw_st = tt.splat %st : i32 -> tensor<$BNxi32>
    %pw_zeroN = arith.constant dense<0> : tensor<$BNxi32>
    %pw_TN = arith.constant dense<$T> : tensor<$BNxi32>
    %pw_true = arith.constant dense<true> : tensor<$BNxi1>
`
	windowMask = `      %pw_rel = arith.subi %j, %pw_st : tensor<$BNxi32>
      %pw_lo = arith.cmpi sge, %pw_rel, %pw_zeroN : tensor<$BNxi32>
      %pw_hi = arith.cmpi slt, %pw_rel, %pw_TN : tensor<$BNxi32>
      %pw_inN = arith.andi %pw_lo, %pw_hi : tensor<$BNxi1>
      %pw_out = arith.xori %pw_inN, %pw_true : tensor<$BNxi1>
      %pw_keep = arith.andi %jok, %pw_out : tensor<$BNxi1>
      %pw_keep0 = tt.expand_dims %pw_keep {axis = 0 : i32} : tensor<$BNxi1> -> tensor<1x$BNxi1>
      %pw_keepK = tt.broadcast %pw_keep0 : tensor<1x$BNxi1> -> tensor<$Dx$BNxi1>
      %pw_keepB = tt.broadcast %pw_keep0 : tensor<1x$BNxi1> -> tensor<$RxBNxi1>
      %pw_keep1 = tt.expand_dims %pw_keep {axis = 1 : i32} : tensor<$BNxi1> -> tensor<$BNx1xi1>
      %pw_keepV = tt.broadcast %pw_keep1 : tensor<$BNx1xi1> -> tensor<$BNx$Dxi1>
`
	windowRounded = `      %pw_kb = arith.truncf %pw_kx : tensor<$Dx$WNxf32> to tensor<$Dx$WNxbf16>
      %pw_kpb = arith.truncf %pw_kpx : tensor<$Dx$WNxf32> to tensor<$Dx$WNxbf16>
      %pw_vb = arith.truncf %pw_vx : tensor<$WNx$Dxf32> to tensor<$WNx$Dxbf16>
`
	placeRounded = `    %tkb16 = arith.truncf %tkx : tensor<$Dxf32> to tensor<$Dxbf16>
    %tkpb16 = arith.truncf %tkpx : tensor<$Dxf32> to tensor<$Dxbf16>
    %tv = arith.truncf %tvx : tensor<$Dxf32> to tensor<$Dxbf16>
`
	keyPlace = `      %own = arith.cmpi eq, %j, %sts : tensor<$BNxi32>
      %ownK0 = tt.expand_dims %own {axis = 0 : i32} : tensor<$BNxi1> -> tensor<1x$BNxi1>
      %ownK = tt.broadcast %ownK0 : tensor<1x$BNxi1> -> tensor<$Dx$BNxi1>
      %ktp = arith.select %ownK, %tkb, %kt : tensor<$Dx$BNxi1>, tensor<$Dx$BNxbf16>
`
	valuePlace = `      %ownV0 = tt.expand_dims %own {axis = 1 : i32} : tensor<$BNxi1> -> tensor<$BNx1xi1>
      %ownV = tt.broadcast %ownV0 : tensor<$BNx1xi1> -> tensor<$BNx$Dxi1>
      %vvp = arith.select %ownV, %tvb, %vv : tensor<$BNx$Dxi1>, tensor<$BNx$Dxbf16>
`
	placeStore = `    %czw = arith.constant 0 : i32
    %wpos = arith.cmpi sgt, %wrn, %czw : i32
    %inlo = arith.cmpi sge, %st, %jstart : i32
    %inhi = arith.cmpi slt, %st, %jsplit : i32
    %inspl = arith.andi %inlo, %inhi : i1
    %inS = arith.cmpi slt, %st, %cS : i32
    %inslots = arith.andi %inspl, %inS : i1
    %wr = arith.andi %wpos, %inslots : i1
    %wrs = tt.splat %wr : i1 -> tensor<$Dxi1>
    %srow = arith.addi %kvrow, %st : i32
    %soff = arith.muli %srow, %cDp : i32
    %soffs = tt.splat %soff : i32 -> tensor<$Dxi32>
    %so = arith.addi %soffs, %rd : tensor<$Dxi32>
    %kob = tt.splat %kout : !tt.ptr<bf16> -> tensor<$Dx!tt.ptr<bf16>>
    %kop = tt.addptr %kob, %so : tensor<$Dx!tt.ptr<bf16>>, tensor<$Dxi32>
    tt.store %kop, %tk, %wrs : tensor<$Dx!tt.ptr<bf16>>
    %vob = tt.splat %vout : !tt.ptr<bf16> -> tensor<$Dx!tt.ptr<bf16>>
    %vop = tt.addptr %vob, %so : tensor<$Dx!tt.ptr<bf16>>, tensor<$Dxi32>
    tt.store %vop, $TV, %wrs : tensor<$Dx!tt.ptr<bf16>>
`
)

// roundedLoad rounds float32 x's loaded values %xv and %xpv to bfloat16 (to nearest,
// ties to even, as XLA's conversion does) as %xb and %xpb, which rotaryLoad then widens.
const roundedLoad = `    %xb = arith.truncf %xv : tensor<$RxDxf32> to tensor<$RxDxbf16>
    %xpb = arith.truncf %xpv : tensor<$RxDxf32> to tensor<$RxDxbf16>
`

// OutputBSHD reports whether AttentionCombineTTIR's kernel writes out as [B, T, Heads,
// D], the layout in which model reads it (each position's heads side by side), rather
// than [B, Heads, T, D]: at batch 1, where model transposes the attention's output
// straight back, so that XLA cancels the two transposes and a window of several queries
// needs no transpose kernel after ours (one a layer in the 4- and 8-token steps). At
// larger batches model may order the output with the cache's update by an optimization
// barrier, which the transposes would not cross.
func (a Attention) OutputBSHD() bool { return a.B == 1 }

// outRowBHSD and outRowBSHD compute the combine kernel's output row %orow from its
// batch row %ob0, head %oh and query %ot in out [B, Heads, T, D] and [B, T, Heads, D].
const (
	outRowBHSD = `    %cHo = arith.constant $H : i32
    %obH = arith.muli %ob0, %cHo : i32
    %obh = arith.addi %obH, %oh : i32
    %obhT = arith.muli %obh, %cTo : i32
    %orow = arith.addi %obhT, %ot : i32
`
	outRowBSHD = `    %obT = arith.muli %ob0, %cTo : i32
    %obt = arith.addi %obT, %ot : i32
    %cHo = arith.constant $H : i32
    %obtH = arith.muli %obt, %cHo : i32
    %orow = arith.addi %obtH, %oh : i32
`
)

// combineSplits is the splits AttentionCombineTTIR's programs load at once: a's
// splits rounded up to a power of two of at least 16, the padding masked.
func (a Attention) combineSplits() int { return powerOfTwoAtLeast(max(a.Splits(), 16)) }

// CombinePrograms is the grid of AttentionCombineTTIR's kernel: a program per batch
// row, key/value head and real query row of its group, B × KVHeads × (Heads/KVHeads)·T.
func (a Attention) CombinePrograms() int { return a.B * a.Heads * a.T }

// AttentionCombineTTIR is the TTIR module of the kernel @combine, the second half of
// AttentionTTIR's attention: program (b, kv, r) loads the m and l of query row r in
// every split of (b, kv), and the split's acc rows [Splits, D], and writes
// out = Σ acc·e^(m−M) / Σ l·e^(m−M), M the largest m, in bfloat16 at row r of the group
// of kv. One kernel where XLA's ops took two (the reduction over the splits' m and l,
// then the weighted sum of acc), each of them longer than this one's whole work.
//
// Its arguments are AttentionTTIR's outputs acc, m and l, then its output out
// [B, Heads, T, D] bfloat16, or [B, T, Heads, D] where a.OutputBSHD (row r of
// key/value head kv: head kv·g + r/T, query r%T).
func AttentionCombineTTIR(a Attention) (string, error) {
	if err := CheckAttention(a); err != nil {
		return "", err
	}
	text := `module {
  tt.func public @combine(%acc: !tt.ptr<f32> {tt.divisibility = 16 : i32}, %m: !tt.ptr<f32> {tt.divisibility = 16 : i32}, %l: !tt.ptr<f32> {tt.divisibility = 16 : i32}, %out: !tt.ptr<bf16> {tt.divisibility = 16 : i32}) attributes {noinline = false} {
` + waitMark + `    %pid = tt.get_program_id x : i32
    %cGT = arith.constant $GT : i32
    %r = arith.remsi %pid, %cGT : i32
    %bkv = arith.divsi %pid, %cGT : i32
    %cSplits = arith.constant $SPLITS : i32
    %cR = arith.constant $R : i32
    %first = arith.muli %bkv, %cSplits : i32
    %firstR = arith.muli %first, %cR : i32
    %row0 = arith.addi %firstR, %r : i32
    %s = tt.make_range {end = $SP : i32, start = 0 : i32} : tensor<$SPxi32>
    %Splitsv = arith.constant dense<$SPLITS> : tensor<$SPxi32>
    %sok = arith.cmpi slt, %s, %Splitsv : tensor<$SPxi32>
    %Rv = arith.constant dense<$R> : tensor<$SPxi32>
    %sR = arith.muli %s, %Rv : tensor<$SPxi32>
    %row0s = tt.splat %row0 : i32 -> tensor<$SPxi32>
    %idx = arith.addi %row0s, %sR : tensor<$SPxi32>
    %mbase = tt.splat %m : !tt.ptr<f32> -> tensor<$SPx!tt.ptr<f32>>
    %mp = tt.addptr %mbase, %idx : tensor<$SPx!tt.ptr<f32>>, tensor<$SPxi32>
    %hidden = arith.constant dense<-1.000000e+30> : tensor<$SPxf32>
    %mv = tt.load %mp, %sok, %hidden : tensor<$SPx!tt.ptr<f32>>
    %lbase = tt.splat %l : !tt.ptr<f32> -> tensor<$SPx!tt.ptr<f32>>
    %lp = tt.addptr %lbase, %idx : tensor<$SPx!tt.ptr<f32>>, tensor<$SPxi32>
    %zero = arith.constant dense<0.000000e+00> : tensor<$SPxf32>
    %lv = tt.load %lp, %sok, %zero : tensor<$SPx!tt.ptr<f32>>
    %mmax = "tt.reduce"(%mv) <{axis = 0 : i32}> ({
    ^bb0(%x0: f32, %x1: f32):
      %mx = arith.maxnumf %x0, %x1 : f32
      tt.reduce.return %mx : f32
    }) : (tensor<$SPxf32>) -> f32
    %mmaxs = tt.splat %mmax : f32 -> tensor<$SPxf32>
    %md = arith.subf %mv, %mmaxs : tensor<$SPxf32>
    %w = math.exp %md : tensor<$SPxf32>
    %lw = arith.mulf %lv, %w : tensor<$SPxf32>
    %den = "tt.reduce"(%lw) <{axis = 0 : i32}> ({
    ^bb0(%y0: f32, %y1: f32):
      %sm = arith.addf %y0, %y1 : f32
      tt.reduce.return %sm : f32
    }) : (tensor<$SPxf32>) -> f32
    %Dv = arith.constant dense<$D> : tensor<$SPxi32>
    %aoff = arith.muli %idx, %Dv : tensor<$SPxi32>
    %aoff2 = tt.expand_dims %aoff {axis = 1 : i32} : tensor<$SPxi32> -> tensor<$SPx1xi32>
    %aoffb = tt.broadcast %aoff2 : tensor<$SPx1xi32> -> tensor<$SPx$Dxi32>
    %d = tt.make_range {end = $D : i32, start = 0 : i32} : tensor<$Dxi32>
    %d0 = tt.expand_dims %d {axis = 0 : i32} : tensor<$Dxi32> -> tensor<1x$Dxi32>
    %db = tt.broadcast %d0 : tensor<1x$Dxi32> -> tensor<$SPx$Dxi32>
    %ao = arith.addi %aoffb, %db : tensor<$SPx$Dxi32>
    %abase = tt.splat %acc : !tt.ptr<f32> -> tensor<$SPx$Dx!tt.ptr<f32>>
    %ap = tt.addptr %abase, %ao : tensor<$SPx$Dx!tt.ptr<f32>>, tensor<$SPx$Dxi32>
    %sok2 = tt.expand_dims %sok {axis = 1 : i32} : tensor<$SPxi1> -> tensor<$SPx1xi1>
    %sokb = tt.broadcast %sok2 : tensor<$SPx1xi1> -> tensor<$SPx$Dxi1>
    %azero = arith.constant dense<0.000000e+00> : tensor<$SPx$Dxf32>
    %av = tt.load %ap, %sokb, %azero : tensor<$SPx$Dx!tt.ptr<f32>>
    %w2 = tt.expand_dims %w {axis = 1 : i32} : tensor<$SPxf32> -> tensor<$SPx1xf32>
    %w2b = tt.broadcast %w2 : tensor<$SPx1xf32> -> tensor<$SPx$Dxf32>
    %aw = arith.mulf %av, %w2b : tensor<$SPx$Dxf32>
    %num = "tt.reduce"(%aw) <{axis = 0 : i32}> ({
    ^bb0(%z0: f32, %z1: f32):
      %sz = arith.addf %z0, %z1 : f32
      tt.reduce.return %sz : f32
    }) : (tensor<$SPx$Dxf32>) -> tensor<$Dxf32>
    %dens = tt.splat %den : f32 -> tensor<$Dxf32>
    %o = arith.divf %num, %dens : tensor<$Dxf32>
    %ob = arith.truncf %o : tensor<$Dxf32> to tensor<$Dxbf16>
    %cTo = arith.constant $T : i32
    %oq = arith.divsi %r, %cTo : i32
    %ot = arith.remsi %r, %cTo : i32
    %cKVHo = arith.constant $KVH : i32
    %ob0 = arith.divsi %bkv, %cKVHo : i32
    %okv = arith.remsi %bkv, %cKVHo : i32
    %cGo = arith.constant $G : i32
    %oh0 = arith.muli %okv, %cGo : i32
    %oh = arith.addi %oh0, %oq : i32
$OROW    %cD = arith.constant $D : i32
    %ooff = arith.muli %orow, %cD : i32
    %ooffs = tt.splat %ooff : i32 -> tensor<$Dxi32>
    %oo = arith.addi %ooffs, %d : tensor<$Dxi32>
    %obase = tt.splat %out : !tt.ptr<bf16> -> tensor<$Dx!tt.ptr<bf16>>
    %op = tt.addptr %obase, %oo : tensor<$Dx!tt.ptr<bf16>>, tensor<$Dxi32>
    tt.store %op, %ob : tensor<$Dx!tt.ptr<bf16>>
` + launchMark + `    tt.return
  }
}`
	orow := outRowBHSD
	if a.OutputBSHD() {
		orow = outRowBSHD
	}
	text = strings.Replace(text, "$OROW", orow, 1)
	// strings.Replacer tries its pairs in order at each position: $SPLITS before $SP,
	// $GT before $G.
	return strings.NewReplacer(
		"$SPLITS", strconv.Itoa(a.Splits()), "$SP", strconv.Itoa(a.combineSplits()), "$GT", strconv.Itoa(a.group()*a.T),
		"$G", strconv.Itoa(a.group()), "$R", strconv.Itoa(a.Rows()), "$D", strconv.Itoa(a.D), "$T", strconv.Itoa(a.T),
		"$KVH", strconv.Itoa(a.KVHeads), "$H", strconv.Itoa(a.Heads),
	).Replace(text), nil
}

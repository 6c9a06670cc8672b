package triton

import (
	"fmt"
	"math"
	"regexp"
	"strings"
	"testing"

	"github.com/gomlx/compute/dtypes"
	"github.com/stretchr/testify/require"
)

// MiniCPM5-2B's decoding windows: 16 query heads over 2 key/value heads of 128.
func decodeAttention(t, s int) Attention {
	return Attention{B: 1, Heads: 16, KVHeads: 2, T: t, S: s, D: 128, BiasHeads: 16, Scale: 1 / math.Sqrt(128)}
}

// The grid: a program per batch row, key/value head, group of 16 rows (where every
// step of keys keeps its programs, up to 264) and split of 32 keys (the splits up to
// 264 programs, 132 for a window of several queries at batch 1), with every key in
// some split; the rows of a group padded to tt.dot's 16; programs of several steps
// pipelined up to 3 deep.
func TestAttentionGrid(t *testing.T) {
	for _, c := range []struct {
		a                                                       Attention
		rows, rowGroups, splits, keysPerSplit, programs, stages int
	}{
		{decodeAttention(1, 513), 16, 1, 17, 32, 34, 1},
		{decodeAttention(4, 516), 32, 2, 17, 32, 68, 1},
		{decodeAttention(8, 520), 64, 4, 17, 32, 136, 1},
		{decodeAttention(4, 2048), 32, 2, 64, 32, 256, 1},
		{decodeAttention(8, 2048), 64, 1, 64, 32, 128, 1},
		{decodeAttention(1, 4100), 16, 1, 129, 32, 258, 1},
		{decodeAttention(4, 4100), 32, 1, 65, 64, 130, 2},
		{decodeAttention(4, 8200), 32, 1, 65, 128, 130, 3},
		{decodeAttention(8, 8200), 64, 1, 65, 128, 130, 3},
		{Attention{B: 2, Heads: 16, KVHeads: 2, T: 4, S: 4100, D: 128, BiasHeads: 1}, 32, 1, 65, 64, 260, 2},
		{Attention{B: 64, Heads: 16, KVHeads: 2, T: 4, S: 2052, D: 128, BiasHeads: 1}, 32, 1, 2, 1056, 256, 3},
		{Attention{B: 64, Heads: 16, KVHeads: 2, T: 1, S: 896, D: 128, BiasHeads: 1}, 16, 1, 2, 448, 256, 3},
		{Attention{B: 2, Heads: 4, KVHeads: 4, T: 3, S: 20, D: 16, BiasHeads: 4}, 16, 1, 1, 32, 8, 1},
	} {
		a := c.a
		require.Equal(t, c.rows, a.Rows(), "%+v", a)
		require.Equal(t, c.rowGroups, a.RowGroups(), "%+v", a)
		require.Equal(t, c.rows/c.rowGroups, a.programRows(), "%+v", a)
		require.Equal(t, c.splits, a.Splits(), "%+v", a)
		require.Equal(t, c.keysPerSplit, a.KeysPerSplit(), "%+v", a)
		require.Equal(t, c.programs, a.Programs(), "%+v", a)
		require.Equal(t, c.stages, a.Stages(), "%+v", a)
		require.GreaterOrEqual(t, a.Splits()*a.KeysPerSplit(), a.S, "every key in a split")
		require.Less(t, (a.Splits()-1)*a.KeysPerSplit(), a.S, "no split without keys")
		require.LessOrEqual(t, a.Programs(), max(maxAttentionPrograms, a.B*a.KVHeads))
		require.LessOrEqual(t, a.B*a.KVHeads*a.Splits(), max(a.programsCap(), a.B*a.KVHeads), "splits within the cap")
	}
}

func TestCheckAttention(t *testing.T) {
	require.NoError(t, CheckAttention(decodeAttention(8, 2048)))
	for _, c := range []struct {
		a    Attention
		want string
	}{
		{decodeAttention(9, 64), "72 rows, over 64"},
		{Attention{B: 1, Heads: 6, KVHeads: 4, T: 1, S: 8, D: 64, BiasHeads: 6}, "not groups"},
		{Attention{B: 1, Heads: 4, KVHeads: 2, T: 1, S: 8, D: 96, BiasHeads: 4}, "power of two"},
		{Attention{B: 1, Heads: 4, KVHeads: 2, T: 0, S: 8, D: 64, BiasHeads: 4}, "positive"},
		{Attention{B: 1 << 10, Heads: 16, KVHeads: 2, T: 4, S: 1 << 16, D: 128, BiasHeads: 16}, "int32 offsets"},
		{Attention{B: 1, Heads: 4, KVHeads: 2, T: 1, S: 8, D: 64, BiasHeads: 2}, "the bias has 2 heads"},
	} {
		require.ErrorContains(t, CheckAttention(c.a), c.want, "%+v", c.a)
		_, err := AttentionTTIR(c.a)
		require.Error(t, err)
	}
}

// requireWellFormed checks what can be checked of a TTIR text without Triton: every
// placeholder filled, every SSA value used defined (as a result, an argument, a loop
// variable or a block argument), and no value defined twice.
func requireWellFormed(t *testing.T, text string) {
	t.Helper()
	require.NotContains(t, text, "$", "a placeholder left")
	defined := map[string]bool{}
	for _, m := range regexp.MustCompile(`%(\w+)(?::\d+)? =|%(\w+): `).FindAllStringSubmatch(text, -1) {
		require.False(t, defined[m[1]+m[2]], "%%%s is defined twice", m[1]+m[2])
		defined[m[1]+m[2]] = true
	}
	for _, m := range regexp.MustCompile(`%(\w+)`).FindAllStringSubmatch(text, -1) {
		require.True(t, defined[m[1]], "%%%s is used but not defined", m[1])
	}
	require.Equal(t, strings.Count(text, "{"), strings.Count(text, "}"))
	require.Equal(t, strings.Count(text, "("), strings.Count(text, ")"))
}

// The kernel's text for the decoding windows: its sizes in place, its bias rows those of
// the queries or, with one bias of every head, of the positions, its loop ending at its
// batch row's length, and its three outputs stored.
func TestAttentionTTIR(t *testing.T) {
	shared := decodeAttention(4, 516)
	shared.BiasHeads = 1
	for _, a := range []Attention{decodeAttention(1, 513), decodeAttention(4, 516), decodeAttention(8, 2056), shared} {
		t.Run(fmt.Sprintf("T%d_S%d_biasheads%d", a.T, a.S, a.BiasHeads), func(t *testing.T) {
			text, err := AttentionTTIR(a)
			require.NoError(t, err)
			requireWellFormed(t, text)
			r := fmt.Sprint(a.programRows())
			require.Contains(t, text, fmt.Sprintf("%%cR = arith.constant %d : i32", a.Rows()), "the partial results' rows")
			if a.RowGroups() > 1 {
				require.Contains(t, text, fmt.Sprintf("%%cRG = arith.constant %d : i32", a.RowGroups()))
				require.Contains(t, text, "%rg0 = arith.muli %rg, %cPR : i32")
				require.Contains(t, text, "%r = arith.addi %rg0s, %r0 : tensor<"+r+"xi32>")
			} else {
				require.Contains(t, text, "%r = tt.make_range {end = "+r+" : i32, start = 0 : i32}")
			}
			require.Contains(t, text, "tt.dot %qv, %kt, %szero : tensor<"+r+"x128xbf16> * tensor<128x32xbf16> -> tensor<"+r+"x32xf32>")
			require.Contains(t, text, "tt.dot %pb, %vv, %accs : tensor<"+r+"x32xbf16> * tensor<32x128xbf16> -> tensor<"+r+"x128xf32>")
			require.Contains(t, text, fmt.Sprintf("%%cSplits = arith.constant %d : i32", a.Splits()))
			require.Contains(t, text, fmt.Sprintf("%%cL = arith.constant %d : i32", a.KeysPerSplit()))
			require.Contains(t, text, fmt.Sprintf("%%rlast = arith.constant dense<%d>", 8*a.T-1))
			require.Contains(t, text, "%scale = arith.constant dense<8.838834765e-02>")
			require.Contains(t, text, "%lenp = tt.addptr %lens, %bi : !tt.ptr<i32>, i32")
			require.Contains(t, text, "%jend = arith.minsi %jsplit, %len : i32")
			require.Contains(t, text, "scf.for %j0 = %jstart to %jend step %cBN")
			require.Less(t, strings.Index(text, "%vv = tt.load"), strings.Index(text, "%s = tt.dot"), "values load with the keys")
			require.Equal(t, 3, strings.Count(text, "tt.store"))
			if a.BiasHeads == 1 {
				require.Contains(t, text, "%brow = arith.muli %brow0, %Sr")
			} else {
				require.Contains(t, text, "%brow = arith.muli %qrow, %Sr")
			}
		})
	}
}

// The combine kernel's text: a program per real query row, every split's m, l and acc
// row loaded at once (the splits padded to a power of two and masked), one store, at
// the row of out of the program's head and position.
func TestAttentionCombineTTIR(t *testing.T) {
	for _, c := range []struct {
		a                          Attention
		programs, loaded, rowsPart int
	}{
		{decodeAttention(1, 513), 16, 32, 16},
		{decodeAttention(8, 520), 128, 32, 64},
		{Attention{B: 64, Heads: 16, KVHeads: 2, T: 4, S: 2052, D: 128, BiasHeads: 1}, 4096, 16, 32},
	} {
		a := c.a
		text, err := AttentionCombineTTIR(a)
		require.NoError(t, err)
		requireWellFormed(t, text)
		require.Equal(t, c.programs, a.CombinePrograms(), "%+v", a)
		require.Contains(t, text, fmt.Sprintf("%%Splitsv = arith.constant dense<%d> : tensor<%dxi32>", a.Splits(), c.loaded))
		require.Contains(t, text, fmt.Sprintf("%%cR = arith.constant %d : i32", c.rowsPart))
		require.Contains(t, text, fmt.Sprintf("%%cGT = arith.constant %d : i32", a.Heads/a.KVHeads*a.T))
		require.Contains(t, text, fmt.Sprintf("tt.load %%ap, %%sokb, %%azero : tensor<%dx128x!tt.ptr<f32>>", c.loaded))
		require.Equal(t, 1, strings.Count(text, "tt.store"))
		// Out is [B, T, Heads, D] at batch 1, row (b·T + r%T)·Heads + kv·g + r/T, and
		// [B, Heads, T, D] at larger batches, row (b·Heads + kv·g + r/T)·T + r%T.
		for _, line := range []string{
			fmt.Sprintf("%%cTo = arith.constant %d : i32", a.T),
			fmt.Sprintf("%%cGo = arith.constant %d : i32", a.Heads/a.KVHeads),
			fmt.Sprintf("%%cHo = arith.constant %d : i32", a.Heads),
			"%oh = arith.addi %oh0, %oq : i32",
		} {
			require.Contains(t, text, line)
		}
		require.Equal(t, a.B == 1, a.OutputBSHD())
		if a.OutputBSHD() {
			require.Contains(t, text, "%obt = arith.addi %obT, %ot : i32")
			require.Contains(t, text, "%orow = arith.addi %obtH, %oh : i32")
		} else {
			require.Contains(t, text, "%obh = arith.addi %obH, %oh : i32")
			require.Contains(t, text, "%orow = arith.addi %obhT, %ot : i32")
		}
	}
	_, err := AttentionCombineTTIR(decodeAttention(9, 64))
	require.ErrorContains(t, err, "72 rows, over 64")
}

// With RotaryRow the kernel reads x, cos and sin for its queries and rotates them:
// query head h at position p = b·T + t starts at column p·RotaryRow + h·D of x, the
// partner of column d is (d + D/2) mod D, both halves' factor column is d mod D/2, and
// the first half's partner is negated; float32 x is rounded to bfloat16 first.
func TestRotaryAttentionTTIR(t *testing.T) {
	a := decodeAttention(4, 516)
	for _, rotaryFloat32 := range []bool{false, true} {
		a.RotaryRow, a.RotaryFloat32 = 20*128, rotaryFloat32
		text, err := AttentionTTIR(a)
		require.NoError(t, err)
		requireWellFormed(t, text)
		xtype, widened := "bf16", "%xv"
		if rotaryFloat32 {
			xtype, widened = "f32", "%xb"
			require.Contains(t, text, "%xb = arith.truncf %xv : tensor<16x128xf32> to tensor<16x128xbf16>")
			require.Contains(t, text, "%xpb = arith.truncf %xpv : tensor<16x128xf32> to tensor<16x128xbf16>")
		} else {
			require.NotContains(t, text, "%xb =")
		}
		require.Contains(t, text, "@attention(%x: !tt.ptr<"+xtype+"> {tt.divisibility = 16 : i32}, %cos: !tt.ptr<f32> {tt.divisibility = 16 : i32}, %sin: !tt.ptr<f32> {tt.divisibility = 16 : i32}, %k:")
		require.NotContains(t, text, "%q:")
		for _, line := range []string{
			"%XRr = arith.constant dense<2560> : tensor<16xi32>",
			"%xr0 = arith.muli %pos, %XRr",
			"%xhd = arith.muli %xh, %Dr",
			"%xv = tt.load %xp : tensor<16x128x!tt.ptr<" + xtype + ">>",
			"%xf = arith.extf " + widened + " : tensor<16x128xbf16> to tensor<16x128xf32>",
			"%halfd = arith.constant dense<64> : tensor<128xi32>",
			"%rdp = arith.remsi %rdh, %Dd",
			"%rdc = arith.remsi %rd, %halfd",
			"%sgn = arith.select %first, %minus, %plus",
			"%qv = arith.truncf %rot : tensor<16x128xf32> to tensor<16x128xbf16>",
		} {
			require.Contains(t, text, line)
		}
	}
	a.RotaryRow = 8 * 128
	require.ErrorContains(t, CheckAttention(a), "rows of 1024 columns of x for 16 query heads")
}

// With Place the kernel also loads the program's own key (rotated as the queries, from
// the columns after theirs) and value (from ValueColumn) from x's row at position b,
// and uses them in place of slot start[b] of each tile; with Write it stores them
// there in its outputs k and v, masked to the split holding the slot and to rows whose
// written[b] is positive. Float32 x is rounded to bfloat16 first.
func TestPlacedAttentionTTIR(t *testing.T) {
	a := decodeAttention(1, 516)
	a.RotaryRow, a.ValueColumn, a.Place = 20*128, 18*128, true
	for _, c := range []struct{ rotaryFloat32, write bool }{{false, false}, {true, false}, {true, true}} {
		a.RotaryFloat32, a.Write = c.rotaryFloat32, c.write
		text, err := AttentionTTIR(a)
		require.NoError(t, err)
		requireWellFormed(t, text)
		for _, line := range []string{
			"%lens: !tt.ptr<i32> {tt.divisibility = 16 : i32}, %start: !tt.ptr<i32>",
			"%cKC = arith.constant 2048 : i32",
			"%cVC = arith.constant 2304 : i32",
			"%xprow = arith.muli %bi, %cXRp",
			"%tkpo = arith.addi %kcols, %rdp",
			"%tks0 = arith.mulf %tkpf, %sgn",
			"%tk = arith.truncf %tkr : tensor<128xf32> to tensor<128xbf16>",
			"%own = arith.cmpi eq, %j, %sts : tensor<32xi32>",
			"tt.dot %qv, %ktp, %szero",
			"tt.dot %pb, %vvp, %accs",
		} {
			require.Contains(t, text, line)
		}
		// Every load before the loop is issued before the queries' rotation waits for its
		// data.
		require.Less(t, strings.Index(text, "%tsv = tt.load"), strings.Index(text, "%xf = arith.extf"))
		require.Less(t, strings.Index(text, "%len = tt.load"), strings.Index(text, "%xf = arith.extf"))
		if c.rotaryFloat32 {
			require.Contains(t, text, "%tkf = arith.extf %tkb16")
			require.Contains(t, text, "%tv = arith.truncf %tvx : tensor<128xf32> to tensor<128xbf16>")
		} else {
			require.Contains(t, text, "%tkf = arith.extf %tkx")
		}
		if c.write {
			require.Contains(t, text, "%ol: !tt.ptr<f32> {tt.divisibility = 16 : i32}, %kout: !tt.ptr<bf16> {tt.divisibility = 16 : i32}, %vout:")
			require.Contains(t, text, "%start: !tt.ptr<i32> {tt.divisibility = 16 : i32}, %written: !tt.ptr<i32>")
			require.Contains(t, text, "%inS = arith.cmpi slt, %st, %cS : i32")
			require.Contains(t, text, "%wr = arith.andi %wpos, %inslots")
			require.Less(t, strings.Index(text, "%wrn = tt.load"), strings.Index(text, "%xf = arith.extf"))
			require.Contains(t, text, "tt.store %kop, %tk, %wrs")
			require.Equal(t, 5, strings.Count(text, "tt.store"))
		} else {
			require.NotContains(t, text, "%written")
			require.Equal(t, 3, strings.Count(text, "tt.store"))
		}
	}
	for _, bad := range []func(a Attention) Attention{
		func(a Attention) Attention { a.RotaryRow = 0; return a },
		func(a Attention) Attention { a.T = 2; return a }, // written
		func(a Attention) Attention { a.ValueColumn = 19 * 128; return a },
		func(a Attention) Attention { a.Place = false; return a },
	} {
		require.Error(t, CheckAttention(bad(a)))
	}
}

// With Place and a window of several positions, the program whose split holds slot
// start[b] loads the window's keys (with their partner columns, cos and sin of their
// position), values and bias from x's rows with the queries, rotates the keys as the
// queries are and takes them as a step of its own before its loop; every program's
// steps of the cache leave slots start[b] to start[b]+T-1 unread and hidden. Nothing is
// written.
func TestPlacedWindowAttentionTTIR(t *testing.T) {
	for _, c := range []struct {
		t             int
		rotaryFloat32 bool
	}{{4, false}, {4, true}, {8, true}} {
		a := decodeAttention(c.t, 516)
		a.RotaryRow, a.ValueColumn, a.Place, a.RotaryFloat32 = 20*128, 18*128, true, c.rotaryFloat32
		text, err := AttentionTTIR(a)
		require.NoError(t, err)
		requireWellFormed(t, text)
		xt, r := "bf16", fmt.Sprint(a.programRows())
		if c.rotaryFloat32 {
			xt = "f32"
		}
		for _, line := range []string{
			"%lens: !tt.ptr<i32> {tt.divisibility = 16 : i32}, %start: !tt.ptr<i32>",
			fmt.Sprintf("%%pw_T = arith.constant dense<%d> : tensor<16xi32>", c.t),
			"%pw_cKC = arith.constant 2048 : i32",
			"%pw_cVC = arith.constant 2304 : i32",
			"%pw_XR = arith.constant dense<2560> : tensor<16xi32>",
			// The program whose split holds slot start[b] loads the window's keys,
			// values and bias; the others load nothing.
			"%pw_own = arith.andi %pw_ge, %pw_lt : i1",
			"%pw_in = arith.andi %pw_real, %pw_owns : tensor<16xi1>",
			"%pw_kx = tt.load %pw_kp, %pw_inK, %pw_xzk : tensor<128x16x!tt.ptr<" + xt + ">>",
			"%pw_kpo = arith.addi %pw_krb, %pw_rdpb : tensor<128x16xi32>",
			"%pw_vx = tt.load %pw_vp, %pw_inV, %pw_xzv : tensor<16x128x!tt.ptr<" + xt + ">>",
			"%pw_bo = arith.addi %pw_browb, %pw_slotb : tensor<" + r + "x16xi32>",
			"%pw_bv = tt.load %pw_bp, %pw_inB, %pw_hidden",
			// It takes them as a step of keys of its own before its loop, rotated as
			// the queries...
			"%pw_init:3 = scf.if %pw_own -> (tensor<" + r + "xf32>, tensor<" + r + "xf32>, tensor<" + r + "x128xf32>) {",
			"%pw_ks0 = arith.mulf %pw_kpf, %pw_sgnb : tensor<128x16xf32>",
			"%pw_s = tt.dot %qv, %pw_k, %pw_szero : tensor<" + r + "x128xbf16> * tensor<128x16xbf16> -> tensor<" + r + "x16xf32>",
			"%pw_sc = arith.addf %pw_ss, %pw_bf : tensor<" + r + "x16xf32>",
			// (the loop's online step, from no keys seen)
			"%pw_mn = arith.maxnumf %m0, %pw_mt",
			"%pw_accs = arith.mulf %a0, %pw_alpha2b",
			"scf.yield %pw_mn, %pw_ln, %pw_an",
			"scf.yield %m0, %l0, %a0",
			"iter_args(%m = %pw_init#0, %l = %pw_init#1, %acc = %pw_init#2)",
			// ...and every program's steps of the cache leave the window's slots unread
			// and hidden.
			"%pw_keep = arith.andi %jok, %pw_out : tensor<32xi1>",
			"%kt = tt.load %kp, %pw_keepK, %kzero",
			"%vv = tt.load %vp, %pw_keepV, %vzero",
			"%bv = tt.load %bp, %pw_keepB, %hidden",
			"tt.dot %qv, %kt, %szero",
			"tt.dot %pb, %vv, %accs",
		} {
			require.Contains(t, text, line)
		}
		loop := strings.Index(text, "scf.for")
		require.Less(t, strings.Index(text, "%st = tt.load"), strings.Index(text, "%xv = tt.load"))
		require.Less(t, strings.Index(text, "%pw_bv = tt.load"), strings.Index(text, "%xv = tt.load"), "the window's loads come before the queries'")
		require.Less(t, strings.Index(text, "%qv = arith.truncf"), strings.Index(text, "%pw_init:3"))
		require.Less(t, strings.Index(text, "%pw_init:3"), loop)
		if c.rotaryFloat32 {
			require.Contains(t, text, "%pw_kf = arith.extf %pw_kb : tensor<128x16xbf16>")
			require.Contains(t, text, "tt.dot %pw_pb, %pw_vb, %pw_accs : tensor<"+r+"x16xbf16> * tensor<16x128xbf16>")
		} else {
			require.Contains(t, text, "%pw_kf = arith.extf %pw_kx : tensor<128x16xbf16>")
			require.Contains(t, text, "tt.dot %pw_pb, %pw_vx, %pw_accs : tensor<"+r+"x16xbf16> * tensor<16x128xbf16>")
		}
		require.NotContains(t, text, "%tkx")
		require.Equal(t, 3, strings.Count(text, "tt.store"))
	}
}

// The GEMV kernels pass the same checks.
func TestGEMVWellFormed(t *testing.T) {
	for _, tile := range []Tile{{BN: 8, BK: 256, Stages: 3}, {BN: 32, BK: 128, Stages: 4, Dot: true}} {
		text, err := GEMVTTIR(4, 2560, 2048, tile, dtypes.BFloat16, dtypes.BFloat16)
		require.NoError(t, err)
		requireWellFormed(t, text)
	}
}

package main

import (
	"fmt"
	"log"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/gomlx/compute/dtypes"
	"github.com/gomlx/compute/shapes"
	. "github.com/gomlx/gomlx/core/graph" //nolint:revive
	"github.com/gomlx/gomlx/core/tensors"

	"github.com/blockdiff/blockdiff/backend"
	"github.com/blockdiff/blockdiff/internal/modelcore"
	"github.com/blockdiff/blockdiff/model"
)

// stepKind is a forward pass shape the decoder runs.
type stepKind struct {
	short string // as in -steps
	name  string
	width int // window positions
	write int // positions written to the cache
	block int // attention block size
}

var stepKinds = []stepKind{
	{"denoise", "denoise step (4 tokens)", 4, 0, 4},
	{"fused", "fused step (8 tokens, commits 4)", 8, 4, 4},
	{"ar", "autoregressive step (1 token)", 1, 1, 1},
	// The AR step padded to 4 rows (3 discarded), to tell whether XLA's 1-row GEMMs
	// are what makes the AR step slower than the 4-token step.
	{"ar-padded", "autoregressive step padded to 4 rows", 4, 1, 1},
}

// benchSteps times each kind of step inside a device loop (as the decoder runs them)
// and as one execution each (with a host read per step).
func benchSteps(pub *model.Model) []row {
	m := modelcore.Of(pub)
	var rows []row
	for _, k := range stepKinds {
		if !slices.Contains(strings.Split(*steps, ","), k.short) {
			continue
		}
		if backend.RunsLoopsOnDevice(m.Backend()) {
			r, err := timeStepLoop(m, k)
			check(err)
			rows = append(rows, r...)
		}
		r, err := timeSingleStep(m, k)
		check(err)
		rows = append(rows, r)
	}
	return rows
}

// window is the forward of one step kind over a cache holding `context` positions.
func (k stepKind) window(g *Graph, tokens *Node) modelcore.Window {
	b := tokens.Shape().Dimensions[0]
	start := Const(g, fill(b, int32(*context_)))
	win := modelcore.Window{Tokens: tokens, Start: start, CacheLen: start, BlockSize: k.block}
	if k.write > 0 { // A zero WriteLen would still scatter (zeros) into every layer's cache.
		win.WriteLen = Const(g, fill(b, int32(k.write)))
	}
	return win
}

// time runs p on a zeroed cache: once to warm it up (its first run compiles), then reps
// more times, timed.
func (k stepKind) time(m *modelcore.Model, p *modelcore.Program, reps int) (first time.Duration, times []time.Duration, err error) {
	cache, err := m.NewCache(1, *capacity)
	if err != nil {
		return 0, nil, err
	}
	defer cache.Free()
	args := append([]*tensors.Tensor{tensors.FromValue([][]int32{make([]int32, k.width)})}, cache.Tensors()...)
	run := func() error { return runAndWait(p, args...) }
	start := time.Now()
	if err := run(); err != nil {
		return 0, nil, err
	}
	first = time.Since(start)
	times, err = repeat(reps, run)
	return first, times, err
}

// next feeds the argmax of every position back as the next tokens, so that the steps
// depend on each other and nothing is hoisted out of the loop.
func next(logits *Node) *Node { return ConvertDType(ArgMax(logits, -1), dtypes.Int32) }

// timeStepLoop runs *iters steps inside one While and reports the time per step; with
// -added-steps, also the time each step beyond those takes in a longer loop.
func timeStepLoop(m *modelcore.Model, k stepKind) ([]row, error) {
	n := *iters
	compileStart := time.Now()
	p, err := stepLoop(m, k, n)
	if err != nil {
		return nil, err
	}
	built := time.Since(compileStart)
	first, times, err := k.time(m, p, 5)
	if err != nil {
		return nil, err
	}
	log.Printf("%s: loop compiled and warmed up in %s", k.name, (built + first).Round(time.Millisecond))
	name := k.name + ", in a device loop"
	if *loopExit == "data" {
		name += " (data-dependent exit)"
	}
	r := summarize(name, 1, times, float64(n))
	r.Note = fmt.Sprintf("%d steps per execution, context %d", n, *context_)
	rows := []row{r}
	if *added <= 1 {
		return rows, nil
	}
	long := *added * n
	q, err := stepLoop(m, k, long)
	if err != nil {
		return nil, err
	}
	_, longTimes, err := k.time(m, q, 5)
	if err != nil {
		return nil, err
	}
	a := addedSteps(name+", per added step", times, longTimes, long-n)
	a.Note = fmt.Sprintf("(%d-step execution - %d-step one) / %d", long, n, long-n)
	return append(rows, a), nil
}

// addedSteps is the time each of added steps takes, from the times of executions of n
// and of n+added steps: each quantile's difference, divided by added. An execution's
// own cost (its launch, the copies of its inputs, the host's wait for it) cancels out.
func addedSteps(name string, short, long []time.Duration, added int) row {
	s, l := summarize("", 1, short, 1), summarize("", 1, long, 1)
	per := func(ls, ss float64) float64 { return (ls - ss) / float64(added) }
	return row{Name: name, Batch: 1, Median: per(l.Median, s.Median), P10: per(l.P10, s.P10), P90: per(l.P90, s.P90)}
}

// stepLoop compiles n steps of kind k inside one While (as the decoder runs them).
func stepLoop(m *modelcore.Model, k stepKind, n int) (*modelcore.Program, error) {
	cacheShapes := cacheShapes(m, 1)
	inputs := append([]shapes.Shape{shapes.Make(dtypes.Int32, 1, k.width)}, cacheShapes...)
	key := fmt.Sprintf("bench/loop/%s/%d/%d/%d/%s", k.name, n, *capacity, *context_, *loopExit)
	return m.CachedProgram(key, inputs, func(w *modelcore.Weights, in []*Node) []*Node {
		// Constants of the enclosing function are uncached (see modelcore.Weights.While).
		init := append([]*Node{Const(in[0].Graph(), int32(0))}, in...)
		cond := func(_ *modelcore.Weights, st, _ []*Node) []*Node {
			more := LessThan(st[0], Const(st[0].Graph(), int32(n)))
			if *loopExit == "data" {
				// An argmax is never negative, but XLA cannot know: the trip count is
				// unknown to it, as in the decoder's loop.
				first := Reshape(Slice(st[1], AxisElem(0), AxisElem(0)))
				more = LogicalAnd(more, GreaterOrEqual(first, ZerosLike(first)))
			}
			return []*Node{more}
		}
		body := func(w *modelcore.Weights, st, _ []*Node) []*Node {
			g := st[0].Graph()
			logits, cache := m.Forward(w, k.window(g, st[1]), modelcore.CacheNodesFrom(st[2:]), nil)
			return append([]*Node{Add(st[0], Const(g, int32(1))), next(logits)}, cache.Nodes()...)
		}
		return []*Node{w.While(init, nil, cond, body)[1]}
	})
}

// timeSingleStep runs one step per execution, reading its tokens back each time.
func timeSingleStep(m *modelcore.Model, k stepKind) (row, error) {
	inputs := append([]shapes.Shape{shapes.Make(dtypes.Int32, 1, k.width)}, cacheShapes(m, 1)...)
	key := fmt.Sprintf("bench/single/%s/%d/%d", k.name, *capacity, *context_)
	p, err := m.CachedProgram(key, inputs, func(w *modelcore.Weights, in []*Node) []*Node {
		logits, cache := m.Forward(w, k.window(in[0].Graph(), in[0]), modelcore.CacheNodesFrom(in[1:]), nil)
		out := []*Node{next(logits)}
		if k.write > 0 {
			out = append(out, cache.Nodes()...)
		}
		return out
	})
	if err != nil {
		return row{}, err
	}
	_, times, err := k.time(m, p, *iters)
	if err != nil {
		return row{}, err
	}
	r := summarize(k.name+", one execution each", 1, times, 1)
	r.Note = "includes a host read; the cache is copied when written"
	return r, nil
}

// benchPrefill times the prefill of -prefill-tokens prompt tokens (one execution each,
// block-causal with blocks of 4, keys and values written, logits of the last position).
func benchPrefill(pub *model.Model) []row {
	m := modelcore.Of(pub)
	var rows []row
	for _, field := range strings.Split(*prefillToks, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(field))
		check(err)
		if n < 1 || n > m.Config.MaxPositionEmbeddings {
			log.Printf("prefill of %d tokens skipped: the model takes 1 to %d positions", n, m.Config.MaxPositionEmbeddings)
			continue
		}
		rows = append(rows, benchPrefillOnce(m, n))
		if *addedPrefill > 0 && backend.RunsLoopsOnDevice(m.Backend()) {
			rows = append(rows, benchPrefillAdded(m, n, *addedPrefill))
		}
	}
	return rows
}

// benchPrefillAdded times device loops of 1 and of 1+added prefills of n tokens (into n
// slots, as benchPrefillOnce's defaults) and reports the time each added prefill
// takes: an execution's own cost cancels out.
func benchPrefillAdded(m *modelcore.Model, n, added int) row {
	in := prefillTokens(m, n)
	timesOf := func(r int) []time.Duration {
		p, err := prefillLoop(m, n, r)
		check(err)
		check(runAndWait(p, in))
		times, err := repeat(10, func() error { return runAndWait(p, in) })
		check(err)
		return times
	}
	short, long := timesOf(1), timesOf(1+added)
	r := addedSteps(fmt.Sprintf("prefill %d tokens, per added prefill", n), short, long, added)
	r.TokPerS = float64(n) / (r.Median / 1e3)
	r.Note = fmt.Sprintf("(%d-prefill execution - 1-prefill one) / %d", 1+added, added)
	return r
}

// prefillLoop compiles r prefills of the n tokens of its input inside one While, each
// prefill's first token the argmax of the one before's last logits, so that XLA can
// neither hoist nor merge them; the cache is carried from one to the next.
func prefillLoop(m *modelcore.Model, n, r int) (*modelcore.Program, error) {
	key := fmt.Sprintf("bench/prefill-loop/%d/%d", n, r)
	return m.CachedProgram(key, []shapes.Shape{shapes.Make(dtypes.Int32, 1, n)}, func(w *modelcore.Weights, in []*Node) []*Node {
		g := in[0].Graph()
		init := append([]*Node{Const(g, int32(0)), in[0]}, zeroCache(g, m, n)...)
		cond := func(_ *modelcore.Weights, st, _ []*Node) []*Node {
			return []*Node{LessThan(st[0], Const(st[0].Graph(), int32(r)))}
		}
		body := func(w *modelcore.Weights, st, _ []*Node) []*Node {
			g := st[0].Graph()
			win := modelcore.Window{Tokens: st[1], Start: Const(g, []int32{0}), WriteLen: Const(g, []int32{int32(n)}),
				BlockSize: 4, LogitIndices: Const(g, [][]int32{{int32(n - 1)}})}
			logits, cache := m.Forward(w, win, modelcore.CacheNodesFrom(st[2:]), nil)
			tokens := Concatenate([]*Node{next(logits), Slice(st[1], AxisRange(), AxisRange(1))}, 1)
			return append([]*Node{Add(st[0], Const(g, int32(1))), tokens}, cache.Nodes()...)
		}
		return []*Node{w.While(init, nil, cond, body)[1]}
	})
}

// benchPrefillOnce times the prefill of n tokens into -prefill-capacity slots and, with
// -prefill-inputs, with its start, write length and logits' position given at run time.
func benchPrefillOnce(m *modelcore.Model, n int) row {
	slots := max(*prefillCap, n)
	key := fmt.Sprintf("bench/prefill/%d/%d/%t", n, slots, *prefillIn)
	inputs := []shapes.Shape{shapes.Make(dtypes.Int32, 1, n)}
	if *prefillIn {
		inputs = append(inputs, shapes.Make(dtypes.Int32, 1), shapes.Make(dtypes.Int32, 1), shapes.Make(dtypes.Int32, 1, 1))
	}
	p, err := m.CachedProgram(key, inputs, func(w *modelcore.Weights, in []*Node) []*Node {
		g := in[0].Graph()
		cache := modelcore.CacheNodesFrom(zeroCache(g, m, slots))
		win := modelcore.Window{Tokens: in[0], Start: Const(g, []int32{0}), WriteLen: Const(g, []int32{int32(n)}),
			BlockSize: 4, LogitIndices: Const(g, [][]int32{{int32(n - 1)}})}
		if *prefillIn {
			win.Start, win.WriteLen, win.LogitIndices = in[1], in[2], in[3]
		}
		logits, cache := m.Forward(w, win, cache, nil)
		return append([]*Node{next(logits)}, cache.Nodes()...)
	})
	check(err)
	in := []*tensors.Tensor{prefillTokens(m, n)}
	if *prefillIn {
		in = append(in, tensors.FromValue([]int32{0}), tensors.FromValue([]int32{int32(n)}), tensors.FromValue([][]int32{{int32(n - 1)}}))
	}
	run := func() error {
		if *prefillFresh { // new tensors each time, as each Generate call has: uploaded again
			for i, t := range in {
				var err error
				if in[i], err = tensors.FromAnyValue(t.Value()); err != nil {
					return err
				}
				if *prefillFree {
					_ = t.FinalizeAll()
				}
			}
		}
		return runAndWait(p, in...)
	}
	check(run())
	times, err := repeat(10, run)
	check(err)
	name := fmt.Sprintf("prefill %d tokens", n)
	if slots > n || *prefillIn || *prefillFresh {
		name += fmt.Sprintf(" (%d slots, inputs %t, fresh %t, free %t)", slots, *prefillIn, *prefillFresh, *prefillFree)
	}
	r := summarize(name, 1, times, 1)
	r.TokPerS = float64(n) / (r.Median / 1e3)
	r.Note = "one execution, cache written, last logits read"
	return r
}

// zeroCache is an empty cache of one row and slots slots in g, as CacheNodes.Nodes lists
// it: the layers' keys, then their values.
func zeroCache(g *Graph, m *modelcore.Model, slots int) []*Node {
	nodes := make([]*Node, 2*m.Config.NumLayers)
	for i := range nodes {
		nodes[i] = Zeros(g, m.CacheShape(1, slots))
	}
	return nodes
}

// prefillTokens is the prompt [1, n] the prefill timings take: tokens spread over the
// vocabulary.
func prefillTokens(m *modelcore.Model, n int) *tensors.Tensor {
	tokens := make([]int32, n)
	for i := range tokens {
		tokens[i] = int32(i*7919) % int32(m.Config.VocabSize)
	}
	return tensors.FromFlatDataAndDimensions(tokens, 1, n)
}

// runAndWait executes p, waits until its first output reaches the host (so the time
// covers the device's work) and frees the outputs.
func runAndWait(p *modelcore.Program, args ...*tensors.Tensor) error {
	out, err := p.Run(args...)
	if err != nil {
		return err
	}
	_, err = out[0].ValueSafe()
	for _, t := range out {
		_ = t.FinalizeAll()
	}
	return err
}

func cacheShapes(m *modelcore.Model, batch int) []shapes.Shape {
	list := make([]shapes.Shape, 2*m.Config.NumLayers)
	for i := range list {
		list[i] = m.CacheShape(batch, *capacity)
	}
	return list
}

func fill(n int, v int32) []int32 {
	out := make([]int32, n)
	for i := range out {
		out[i] = v
	}
	return out
}

package diffusion

import (
	"context"
	"errors"
	"fmt"
	"iter"
	"slices"
	"time"

	"github.com/gomlx/compute/dtypes"
	"github.com/gomlx/compute/shapes"
	. "github.com/gomlx/gomlx/core/graph" //nolint:revive
	"github.com/gomlx/gomlx/core/tensors"

	"github.com/blockdiff/blockdiff/backend"
	"github.com/blockdiff/blockdiff/internal/modelcore"
	"github.com/blockdiff/blockdiff/internal/sharding"
	"github.com/blockdiff/blockdiff/model"
)

// Decoder generates text with a model under one configuration. It is safe for
// concurrent use; generations run one at a time on the device, waiting their turn as
// long as their context allows. A stream gives the turn up while its consumer holds a
// chunk, so that other generations, even one started from inside the stream's loop,
// run meanwhile. Compiled programs are kept by the model and shared by decoders of the
// same mode, block size and sampling.
type Decoder struct {
	m     *modelcore.Model
	cfg   Config
	loop  *loop
	stops []int // EOS and the configured stop tokens
	// parallel returns the model's weights laid over Config.Devices devices
	// (modelcore.Model.TensorParallel; tests take its layout on one device).
	parallel func(devices int) (*modelcore.TensorParallel, error)

	turn chan struct{} // holds a value while a generation runs on the device
}

// New returns a decoder for m. The model's mask token is required except in
// autoregressive mode.
func New(pub *model.Model, cfg Config) (*Decoder, error) {
	m := modelcore.Of(pub)
	if m == nil || m.Backend() == nil {
		return nil, errors.New("diffusion: no model (nil, or not made by model.Load, FromCheckpoint or NewRandom)")
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	mc := m.Config
	if cfg.Mode != Autoregressive && mc.MaskTokenID < 0 {
		return nil, errors.New("diffusion: the checkpoint has no mask_token_id; only autoregressive mode can run it")
	}
	stops := slices.Clone(mc.EOSTokenIDs)
	for _, t := range cfg.StopTokens {
		if t < 0 || t >= mc.VocabSize {
			return nil, fmt.Errorf("diffusion: stop token %d is outside the vocabulary of %d", t, mc.VocabSize)
		}
		if !slices.Contains(stops, t) {
			stops = append(stops, t)
		}
	}
	if len(stops) > maxStops {
		return nil, fmt.Errorf("diffusion: %d stop tokens (EOS included), at most %d", len(stops), maxStops)
	}
	block := cfg.blockSize()
	window := block
	if cfg.Mode == Fused {
		window = 2 * block
	}
	l := &loop{m: m, mode: cfg.Mode, block: block, window: window, mask: mc.MaskTokenID,
		sampling: cfg.sampling(), topK: cfg.sampling() && cfg.TopK > 0, topP: cfg.sampling() && cfg.TopP > 0 && cfg.TopP < 1}
	d := &Decoder{m: m, cfg: cfg, loop: l, stops: stops, parallel: m.TensorParallel, turn: make(chan struct{}, 1)}
	if cfg.Devices > 1 {
		if _, err := d.parallel(cfg.Devices); err != nil {
			return nil, fmt.Errorf("diffusion: %w", err)
		}
	}
	return d, nil
}

// acquire waits for the device's turn, or until ctx is done.
func (d *Decoder) acquire(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	select {
	case d.turn <- struct{}{}:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// release gives the device's turn up.
func (d *Decoder) release() { <-d.turn }

// Config returns the decoder's configuration.
func (d *Decoder) Config() Config { return d.cfg }

// Generate decodes one prompt.
func (d *Decoder) Generate(ctx context.Context, prompt []int) (*Result, error) {
	results, err := d.GenerateBatch(ctx, [][]int{prompt})
	if err != nil {
		return nil, err
	}
	return results[0], nil
}

// GenerateBatch decodes several prompts together, of any lengths. Each result equals
// what Generate returns for that prompt alone.
func (d *Decoder) GenerateBatch(ctx context.Context, prompts [][]int) ([]*Result, error) {
	return d.run(ctx, prompts, nil)
}

// Chunk is what [Decoder.Stream] yields: the tokens finished since the previous chunk
// and, on the last chunk, the whole result.
type Chunk struct {
	Tokens []int
	Result *Result
}

// Stream decodes one prompt and yields its tokens as blocks finish, read after the
// first block and then after twice as many blocks each time, up to
// Config.BlocksPerReadback. It stops with ctx's error, at the next read, when ctx is
// cancelled; breaking out of the loop stops the generation.
func (d *Decoder) Stream(ctx context.Context, prompt []int) iter.Seq2[Chunk, error] {
	return func(yield func(Chunk, error) bool) {
		stopped := errors.New("stream consumer stopped")
		results, err := d.run(ctx, [][]int{prompt}, func(_ int, tokens []int) error {
			if !yield(Chunk{Tokens: tokens}, nil) {
				return stopped
			}
			return nil
		})
		switch {
		case errors.Is(err, stopped):
		case err != nil:
			yield(Chunk{}, err)
		default:
			yield(Chunk{Result: results[0]}, nil)
		}
	}
}

// summaryCols are the per-row values read back after the sequence in a chunk's summary.
const summaryCols = 9

// ErrNonFiniteLogits is the error (wrapped) of a generation whose model computed logits
// that are not finite (NaN or infinite), as corrupt weights make it.
var ErrNonFiniteLogits = errors.New("diffusion: the model's logits are not finite (NaN or infinite); its weights may be corrupt")

// run decodes prompts, calling emit (when not nil) with each row's newly finished
// tokens, without the device's turn: emit may start another generation.
func (d *Decoder) run(ctx context.Context, prompts [][]int, emit func(row int, tokens []int) error) ([]*Result, error) {
	if d == nil || d.turn == nil {
		return nil, errors.New("diffusion: decoder not made by New")
	}
	if err := d.acquire(ctx); err != nil {
		return nil, err
	}
	held := true
	defer func() {
		if held {
			d.release()
		}
	}()
	l, cfg, mc := d.loop, d.cfg, d.m.Config
	if len(prompts) == 0 {
		return nil, errors.New("diffusion: no prompts")
	}
	maxPrompt := 0
	for i, p := range prompts {
		if len(p) == 0 {
			return nil, fmt.Errorf("diffusion: prompt %d is empty (a BOS token counts)", i)
		}
		for j, t := range p {
			if t < 0 || t >= mc.VocabSize {
				return nil, fmt.Errorf("diffusion: prompt %d: token %d at index %d is outside the vocabulary of %d", i, t, j, mc.VocabSize)
			}
		}
		maxPrompt = max(maxPrompt, len(p))
	}
	if cfg.MaxNewTokens > mc.MaxPositionEmbeddings-maxPrompt { // maxPrompt+MaxNewTokens could overflow
		return nil, fmt.Errorf("diffusion: a prompt of %d tokens plus %d new tokens exceeds max_position_embeddings %d",
			maxPrompt, cfg.MaxNewTokens, mc.MaxPositionEmbeddings)
	}
	B, b := l.block, len(prompts)
	// Room for the prompt, the new tokens, and the window (padded) of the last block
	// and the anchor guess block past it: a window lies within the cache (see
	// modelcore.Window). Rounded up so that similar requests share compiled programs, to a
	// multiple of 128 slots, which XLA's attention products do not pad (finer than 256,
	// and faster at batch 64).
	capacity := roundUp(maxPrompt+cfg.MaxNewTokens+B+l.windowFor(b), 128)
	prefillWidth := roundUp(max(bucket(maxPrompt/B*B), B), B)
	// Iterations per chunk program: a block takes at most B+1 forwards.
	inWhile := backend.RunsLoopsOnDevice(d.m.Backend())
	readbackBlocks := cfg.readbackBlocks()
	maxIters := 1
	if inWhile {
		maxIters = readbackBlocks*(B+2) + 1
	}

	// tp, when set, runs the programs tensor-parallel: each device d holds states[d]
	// and reads[d] (its share of the cache, a copy of the rest); the host reads device 0's.
	var tp *modelcore.TensorParallel
	devices := 1
	if cfg.Devices > 1 {
		var err error
		if tp, err = d.parallel(cfg.Devices); err != nil {
			return nil, fmt.Errorf("diffusion: %w", err)
		}
		devices = tp.Devices()
	}
	prefill, err := d.prefillProgram(tp, b, capacity, prefillWidth)
	if err != nil {
		return nil, err
	}
	chunk, err := d.chunkProgram(tp, b, capacity, maxIters, inWhile)
	if err != nil {
		return nil, err
	}

	seq := make([]int32, b*capacity)
	prefillTokens := make([]int32, b*prefillWidth)
	promptLen := make([]int32, b)
	for i, p := range prompts {
		row := seq[i*capacity : (i+1)*capacity]
		for j := range row {
			row[j] = int32(max(l.mask, 0))
		}
		for j, t := range p {
			row[j] = int32(t)
			if j < prefillWidth {
				prefillTokens[i*prefillWidth+j] = int32(t)
			}
		}
		promptLen[i] = int32(len(p))
	}
	stops := make([]int32, maxStops)
	for i := range stops {
		stops[i] = -1
		if i < len(d.stops) {
			stops[i] = int32(d.stops[i])
		}
	}
	topP := cfg.TopP
	if topP == 0 {
		topP = 1
	}
	chunkBlocks := firstChunkBlocks(readbackBlocks, emit != nil)
	common := []*tensors.Tensor{
		tensors.FromFlatDataAndDimensions(promptLen, b),
		tensors.FromScalar(int32(cfg.MaxNewTokens)),
		tensors.FromScalar(uint32(cfg.Seed)),
		tensors.FromScalar(float32(cfg.Threshold)),
		tensors.FromScalar(int32(cfg.MinReveal)),
		tensors.FromValue(stops),
		tensors.FromScalar(int32(cfg.Schedule)),
		tensors.FromScalar(float32(max(cfg.Temperature, 1e-6))),
		tensors.FromScalar(int32(cfg.TopK)),
		tensors.FromScalar(float32(topP)),
		tensors.FromScalar(int32(chunkBlocks)), // replaced as the chunks grow
	}

	results := make([]*Result, b)
	for i := range results {
		results[i] = &Result{Tokens: []int{}}
	}
	// The inputs' device buffers are freed as soon as they are used rather than when
	// the garbage collector gets to them (a plugin frees them once the execution that
	// reads them has finished).
	defer freeAll(common)
	var stats Stats
	start := time.Now()
	prefillOnly := []*tensors.Tensor{tensors.FromFlatDataAndDimensions(seq, b, capacity),
		tensors.FromFlatDataAndDimensions(prefillTokens, b, prefillWidth)}
	states, err := exec(prefill, tp, append(common, prefillOnly...), nil)
	freeAll(prefillOnly)
	if err != nil {
		return nil, err
	}
	// The first chunk's read-back inputs: their values are unused.
	reads := make([][]*tensors.Tensor, devices)
	for i := range reads {
		for _, s := range chunkReadShapes(b, B, capacity, maxIters) {
			reads[i] = append(reads[i], tensors.FromShape(s))
		}
	}
	defer func() {
		for i := range states {
			freeAll(states[i])
			freeAll(reads[i])
		}
	}()
	stats.Execs++
	// Wait for the prefill so its time is measured apart from decoding.
	if _, err := states[0][numStateNodes-1].ValueSafe(); err != nil { // failed: a small tensor
		return nil, fmt.Errorf("diffusion: prefill: %w", err)
	}
	stats.Readbacks++
	stats.PrefillTime = time.Since(start)

	start = time.Now()
	emitted := make([]int, b)
	for i, p := range prompts {
		emitted[i] = len(p)
	}
	// Every iteration makes progress, and a block takes at most B+2 of them: a bound
	// that only a bug can reach, turned into an error rather than a hang.
	maxRuns := (cfg.MaxNewTokens/B + 2) * (B + 2)
	for run := 0; ; run++ {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		if run > maxRuns {
			return nil, fmt.Errorf("diffusion: internal error: generation unfinished after %d executions", run)
		}
		if next := nextChunkBlocks(chunkBlocks, readbackBlocks); run > 0 && next != chunkBlocks {
			chunkBlocks = next
			freeAll(common[numParams-1:])
			common[numParams-1] = tensors.FromScalar(int32(chunkBlocks))
		}
		// The chunk consumes states and reads (see chunkProgram).
		own := make([][]*tensors.Tensor, len(states))
		for i := range own {
			own[i] = slices.Concat(states[i], reads[i])
		}
		outs, err := exec(chunk, tp, common, own)
		if err != nil {
			return nil, err
		}
		stats.Execs++
		for i, out := range outs {
			n := len(states[i])
			states[i], reads[i] = out[:n], out[n:]
		}
		sum, revealed, starts, iters := reads[0][0], reads[0][1], reads[0][2], reads[0][3]
		rows, err := tensors.CopyFlatData[int32](sum)
		stats.Readbacks++
		if err != nil {
			return nil, fmt.Errorf("diffusion: reading the state back: %w", err)
		}
		if cfg.Trace {
			if err := d.collectTrace(results, revealed, starts, iters); err != nil {
				return nil, err
			}
		}
		allDone := true
		for i, p := range prompts {
			row := rows[i*(capacity+summaryCols) : (i+1)*(capacity+summaryCols)]
			r := d.readRow(row[:capacity], row[capacity:], len(p))
			if r.failed {
				return nil, fmt.Errorf("%w (prompt %d, the block at position %d)", ErrNonFiniteLogits, i, r.blockStart)
			}
			results[i].Stats = r.Stats
			results[i].Finish = r.Stats.Finish
			if r.end > emitted[i] {
				tokens := make([]int, 0, r.end-emitted[i])
				for _, t := range row[emitted[i]:r.end] {
					tokens = append(tokens, int(t))
				}
				results[i].Tokens = append(results[i].Tokens, tokens...)
				emitted[i] = r.end
				if emit != nil {
					d.release()
					held = false
					err := emit(i, tokens)
					if err == nil {
						err = d.acquire(ctx)
						held = err == nil
					}
					if err != nil {
						return nil, err
					}
				}
			}
			allDone = allDone && r.done
		}
		if allDone {
			break
		}
	}
	stats.DecodeTime = time.Since(start)
	for _, r := range results {
		s := r.Stats
		s.Execs, s.Readbacks, s.PrefillTime, s.DecodeTime = stats.Execs, stats.Readbacks, stats.PrefillTime, stats.DecodeTime
		s.Tokens = len(r.Tokens)
		if s.Forwards > 0 {
			s.TokensPerForward = float64(s.Tokens) / float64(s.Forwards)
		}
		r.Stats = s
	}
	return results, nil
}

// firstChunkBlocks is the blocks the first chunk finishes before the host reads: one
// when streaming, so that text comes at once, each later chunk then twice as many as
// the one before, up to most (Config.readbackBlocks); most from the start for a
// whole generation, whose caller reads nothing before its end.
func firstChunkBlocks(most int, streaming bool) int {
	if streaming {
		return 1
	}
	return most
}

// nextChunkBlocks is the blocks of the chunk after one of prev blocks: twice as many,
// up to most.
func nextChunkBlocks(prev, most int) int { return min(2*prev, most) }

// summary packs what the host reads after a chunk into one [b, s+8] int32 tensor, so
// a chunk costs one transfer.
func summary(s *state) *Node {
	cols := []*Node{s.seq}
	for _, n := range []*Node{s.blockStart, s.pending, s.done, s.stopped, s.forwards, s.steps, s.commits, s.remasks, s.failed} {
		cols = append(cols, InsertAxes(ConvertDType(n, dtypes.Int32), -1))
	}
	return Concatenate(cols, 1)
}

// rowStatus is one row's progress read from a summary.
type rowStatus struct {
	end        int // positions before end are final
	done       bool
	failed     bool // the model's logits were not finite
	blockStart int
	Stats      Stats
}

// readRow interprets one row of a summary: seq and the values after it.
func (d *Decoder) readRow(seq, vals []int32, promptLen int) rowStatus {
	l := d.loop
	blockStart, pending, done, stopped := int(vals[0]), vals[1] != 0, vals[2] != 0, vals[3] != 0
	r := rowStatus{done: done, failed: vals[8] != 0, blockStart: blockStart}
	r.Stats.Forwards, r.Stats.DenoiseSteps, r.Stats.Commits, r.Stats.Remasks = int(vals[4]), int(vals[5]), int(vals[6]), int(vals[7])
	limit := promptLen + d.cfg.MaxNewTokens
	switch {
	case done && stopped:
		r.end = promptLen
		for r.end < len(seq) && !slices.Contains(d.stops, int(seq[r.end])) {
			r.end++
		}
		// A stop token revealed at or past the N-th new token, in the last block, is
		// cut with it: the output then holds N tokens, and the spec's reason is length.
		r.Stats.Finish = FinishStop
		if r.end >= limit {
			r.Stats.Finish = FinishLength
		}
	case done:
		r.end = limit
		r.Stats.Finish = FinishLength
	case pending && d.cfg.Mode != Fused:
		r.end = blockStart + l.block // the clean block awaiting its commit
	default:
		r.end = blockStart
	}
	r.end = max(min(r.end, limit), promptLen)
	return r
}

// collectTrace appends the denoise steps of a chunk to each row's result.
func (d *Decoder) collectTrace(results []*Result, revealedT, startsT, itersT *tensors.Tensor) error {
	revealed, err := tensors.CopyFlatData[int32](revealedT)
	if err != nil {
		return err
	}
	starts, err := tensors.CopyFlatData[int32](startsT)
	if err != nil {
		return err
	}
	iters := int(tensors.ToScalar[int32](itersT))
	b, B := len(results), d.loop.block
	for it := range iters {
		for r := range b {
			var step Step
			for i := range B {
				if tok := revealed[(it*b+r)*B+i]; tok >= 0 {
					step.Revealed = append(step.Revealed, [2]int{int(starts[it*b+r]) + i, int(tok)})
				}
			}
			if len(step.Revealed) > 0 {
				step.BlockStart = int(starts[it*b+r])
				results[r].Steps = append(results[r].Steps, step)
			}
		}
	}
	return nil
}

// prefillProgram compiles (once) the prefill of b prompts into a cache of capacity
// positions, the prompts' full blocks padded to width; tensor-parallel over tp's
// devices when tp is set.
func (d *Decoder) prefillProgram(tp *modelcore.TensorParallel, b, capacity, width int) (*modelcore.Program, error) {
	layers := 2 * d.m.Config.NumLayers
	return d.program(tp, fmt.Sprintf("prefill/%d/%d/%d", b, capacity, width),
		[]shapes.Shape{shapes.Make(dtypes.Int32, b, capacity), shapes.Make(dtypes.Int32, b, width)},
		cacheAt{input: -1, output: numStateNodes, outputs: numStateNodes + layers},
		func(w *modelcore.Weights, p params, in []*Node) []*Node {
			return d.loop.prefill(w, p, in[0], in[1]).nodes()
		})
}

// chunkProgram compiles (once) a chunk of at most maxIters iterations, inside a While
// when inWhile. Its inputs are the state and the previous chunk's read-back outputs
// (see chunkReadShapes), its outputs the same, each written in place of its input:
// chunk after chunk, every buffer keeps its address, and XLA need not update the loop's
// CUDA graphs for new ones. The read-back inputs' values are unused. Tensor-parallel
// over tp's devices when tp is set.
func (d *Decoder) chunkProgram(tp *modelcore.TensorParallel, b, capacity, maxIters int, inWhile bool) (*modelcore.Program, error) {
	key := fmt.Sprintf("chunk/%d/%d/%d/%d/%t", b, capacity, d.cfg.BlocksPerReadback, maxIters, inWhile)
	cache := d.m.CacheShape(b, capacity)
	if tp != nil {
		cache = tp.CacheShape(b, capacity)
	}
	state := stateShapes(d.m, b, d.loop.block, capacity, cache)
	read := chunkReadShapes(b, d.loop.block, capacity, maxIters)
	inputs := slices.Concat(state, read)
	opts := make([]modelcore.ProgramOption, len(inputs))
	for i := range inputs {
		opts[i] = modelcore.InPlace(numParams+i, i)
	}
	at := cacheAt{input: numStateNodes, output: numStateNodes, outputs: len(inputs)}
	return d.program(tp, key, inputs, at, func(w *modelcore.Weights, p params, in []*Node) []*Node {
		s, revealed, starts, iters := d.loop.chunk(w, p, fromNodes(in[:len(state)]), maxIters, inWhile)
		return append(s.nodes(), summary(s), revealed, starts, iters)
	}, opts...)
}

// chunkReadShapes are the shapes of what the host reads after a chunk: the summary, the
// tokens revealed per iteration, the block starts per iteration and the iterations run.
func chunkReadShapes(b, block, capacity, maxIters int) []shapes.Shape {
	return []shapes.Shape{shapes.Make(dtypes.Int32, b, capacity+summaryCols), shapes.Make(dtypes.Int32, maxIters, b, block),
		shapes.Make(dtypes.Int32, maxIters, b), shapes.Make(dtypes.Int32)}
}

// programBuild builds a program's outputs from the weights, the common parameters and
// its own inputs.
type programBuild func(w *modelcore.Weights, p params, in []*Node) []*Node

// cacheAt says where a program's cache lies, its 2·layers tensors in a row: from input
// (among the program's own inputs; -1: none) and from output, of outputs in all. A
// tensor-parallel program splits them along their heads and gives everything else whole
// to every device.
type cacheAt struct{ input, output, outputs int }

// axes returns the split axis of each of n values whose cache starts at from (-1: none).
func (c cacheAt) axes(n, from, layers int) []int {
	out := make([]int, n)
	for i := range out {
		out[i] = sharding.Replicated
		if from >= 0 && i >= from && i < from+layers {
			out[i] = 1
		}
	}
	return out
}

// program returns a compiled program, compiling it on first use. Its inputs are the
// parameters (see [params]) followed by inputs; opts count inputs so too. With tp set it
// is tensor-parallel over tp's devices, the cache split as at says.
func (d *Decoder) program(tp *modelcore.TensorParallel, key string, inputs []shapes.Shape, at cacheAt, build programBuild,
	opts ...modelcore.ProgramOption) (*modelcore.Program, error) {
	l := d.loop
	b := inputs[0].Dimensions[0]
	scalar := func(dt dtypes.DType) shapes.Shape { return shapes.Make(dt) }
	all := append([]shapes.Shape{
		shapes.Make(dtypes.Int32, b), scalar(dtypes.Int32), scalar(dtypes.Uint32), scalar(dtypes.Float32),
		scalar(dtypes.Int32), shapes.Make(dtypes.Int32, maxStops), scalar(dtypes.Int32),
		scalar(dtypes.Float32), scalar(dtypes.Int32), scalar(dtypes.Float32), scalar(dtypes.Int32),
	}, inputs...)
	key = fmt.Sprintf("diffusion/%s/%d/%d/%t/%t/%t/%s", l.mode, l.block, l.window, l.sampling, l.topK, l.topP, key)
	whole := func(w *modelcore.Weights, in []*Node) []*Node {
		return build(w, paramsFrom(in[:numParams]), in[numParams:])
	}
	if tp == nil {
		return d.m.CachedProgram(key, all, whole, opts...)
	}
	layers, from := 2*d.m.Config.NumLayers, -1
	if at.input >= 0 {
		from = numParams + at.input
	}
	return tp.CachedProgram(key, all, at.axes(len(all), from, layers), at.axes(at.outputs, at.output, layers), whole, opts...)
}

// exec runs p with shared then own[d] as its inputs: on one device when tp is nil
// (own has one list, or is nil); else tensor-parallel, each of tp's devices on its own
// copy of shared's values. It returns each device's outputs.
func exec(p *modelcore.Program, tp *modelcore.TensorParallel, shared []*tensors.Tensor, own [][]*tensors.Tensor) ([][]*tensors.Tensor, error) {
	mine := func(d int) []*tensors.Tensor {
		if own == nil {
			return nil
		}
		return own[d]
	}
	if tp == nil {
		out, err := p.Run(slices.Concat(shared, mine(0))...)
		return [][]*tensors.Tensor{out}, err
	}
	inputs := make([][]*tensors.Tensor, tp.Devices())
	var copies []*tensors.Tensor
	defer func() { freeAll(copies) }()
	for d := range inputs {
		list := shared
		if d > 0 {
			list = make([]*tensors.Tensor, len(shared))
			for i, t := range shared {
				c, err := t.LocalClone()
				if err != nil {
					return nil, fmt.Errorf("diffusion: copying an input for device %d: %w", d, err)
				}
				list[i] = c
			}
			copies = append(copies, list...)
		}
		inputs[d] = slices.Concat(list, mine(d))
	}
	return p.RunDevices(inputs)
}

func freeAll(ts []*tensors.Tensor) {
	for _, t := range ts {
		_ = t.FinalizeAll()
	}
}

func roundUp(n, m int) int { return (n + m - 1) / m * m }

// bucket rounds n up to a power of two, so prompts of similar lengths share programs.
func bucket(n int) int {
	p := 1
	for p < n {
		p *= 2
	}
	return p
}

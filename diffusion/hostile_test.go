package diffusion

import (
	"context"
	"encoding/json"
	"errors"
	"math"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/gomlx/compute/dtypes"
	"github.com/stretchr/testify/require"

	"github.com/blockdiff/blockdiff/internal/testutil"
	"github.com/blockdiff/blockdiff/model"
	"github.com/blockdiff/blockdiff/safetensors"
)

// counterVocab is the vocabulary of counterModel; its last token masks.
const counterVocab = 64

// counterModel loads a one-layer Llama whose weights are written by hand: attention and
// MLP outputs are zero, so each position's logits depend on its own token alone, and
// the head predicts the next integer (token t → t+1, confidence ≈ 1) while the mask
// token's logits are flat. Decoding [..., t] therefore generates t+1, t+2, …, one
// position per denoise step. poison, when set, edits the head's weights [v, h] first.
func counterModel(t *testing.T, poison func(head [][]float32)) *model.Model {
	t.Helper()
	const v, h, heads, kvHeads, headDim, inter = counterVocab, counterVocab, 2, 1, 4, 4
	config := map[string]any{
		"architectures": []string{model.ArchLlama}, "vocab_size": v, "hidden_size": h, "intermediate_size": inter,
		"num_hidden_layers": 1, "num_attention_heads": heads, "num_key_value_heads": kvHeads, "head_dim": headDim,
		"max_position_embeddings": 256, "rms_norm_eps": 1e-6, "rope_theta": 10000.0, "tie_word_embeddings": false,
		"bos_token_id": 1, "eos_token_id": 2, "mask_token_id": v - 1,
	}
	matrix := func(rows, cols int, value func(i, j int) float32) []float32 {
		out := make([]float32, rows*cols)
		for i := range rows {
			for j := range cols {
				out[i*cols+j] = value(i, j)
			}
		}
		return out
	}
	zero := func(int, int) float32 { return 0 }
	one := func(int, int) float32 { return 1 }
	head := make([][]float32, v)
	for i := range head {
		head[i] = make([]float32, h)
		if i > 0 && i-1 != v-1 {
			head[i][i-1] = 2 // token i-1, one-hot and normalised to 8, gives token i a logit of 16
		}
	}
	if poison != nil {
		poison(head)
	}
	var w safetensors.Writer
	add := func(name string, shape []int, values []float32) {
		require.NoError(t, w.AddFloat32s(name, safetensors.F32, shape, values))
	}
	add("model.embed_tokens.weight", []int{v, h}, matrix(v, h, func(i, j int) float32 {
		if i == j {
			return 1
		}
		return 0
	}))
	p := "model.layers.0."
	add(p+"input_layernorm.weight", []int{h}, matrix(1, h, one))
	add(p+"post_attention_layernorm.weight", []int{h}, matrix(1, h, one))
	add(p+"self_attn.q_proj.weight", []int{heads * headDim, h}, matrix(heads*headDim, h, zero))
	add(p+"self_attn.k_proj.weight", []int{kvHeads * headDim, h}, matrix(kvHeads*headDim, h, zero))
	add(p+"self_attn.v_proj.weight", []int{kvHeads * headDim, h}, matrix(kvHeads*headDim, h, zero))
	add(p+"self_attn.o_proj.weight", []int{h, heads * headDim}, matrix(h, heads*headDim, zero))
	add(p+"mlp.gate_proj.weight", []int{inter, h}, matrix(inter, h, zero))
	add(p+"mlp.up_proj.weight", []int{inter, h}, matrix(inter, h, zero))
	add(p+"mlp.down_proj.weight", []int{h, inter}, matrix(h, inter, zero))
	add("model.norm.weight", []int{h}, matrix(1, h, one))
	add("lm_head.weight", []int{v, h}, matrix(v, h, func(i, j int) float32 { return head[i][j] }))
	dir := t.TempDir()
	require.NoError(t, w.WriteFile(filepath.Join(dir, safetensors.SingleFileName)))
	data, err := json.Marshal(config)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(dir, "config.json"), data, 0o644))
	m, err := model.Load(testutil.Backend(t), dir, model.LoadOptions{DType: dtypes.Float32})
	require.NoError(t, err)
	t.Cleanup(func() { _ = m.Close() })
	return m
}

// counting is the counter model's output after a prompt ending in last: last+1, ….
func counting(last, n int) []int {
	out := make([]int, n)
	for i := range out {
		out[i] = last + 1 + i
	}
	return out
}

// The spec's Output rule: a stop token revealed in the last block at or past the N-th
// new token is cut with it, so the output holds N tokens and the reason is length;
// one before is a stop. With 12 new tokens after a prompt of 3 (blocks of 4), the
// counter model reveals token 20 at position 15, new token 12, in the last block.
func TestFinishLengthWhenStopIsPastN(t *testing.T) {
	m := counterModel(t, nil)
	prompt, long := []int{5, 6, 7}, []int{1, 2, 3, 4, 5, 6, 7}
	for name, mode := range map[string]Mode{"reference": Reference, "fused": Fused, "autoregressive": Autoregressive} {
		t.Run(name, func(t *testing.T) {
			cfg := Quality
			cfg.Mode, cfg.MaxNewTokens = mode, 12
			for stop, want := range map[int]struct {
				tokens []int
				finish Finish
			}{
				20: {counting(7, 12), FinishLength}, // new token 12: cut
				19: {counting(7, 11), FinishStop},   // new token 11: within
				30: {counting(7, 12), FinishLength}, // never reached
			} {
				cfg.StopTokens = []int{stop}
				d, err := New(m, cfg)
				require.NoError(t, err)
				res, err := d.Generate(context.Background(), prompt)
				require.NoError(t, err)
				require.Equal(t, want.tokens, res.Tokens, "stop %d", stop)
				require.Equal(t, want.finish, res.Finish, "stop %d: %v", stop, res.Tokens)
				require.Equal(t, want.finish, res.Stats.Finish)
				batch, err := d.GenerateBatch(context.Background(), [][]int{long, prompt})
				require.NoError(t, err)
				for i, r := range batch {
					require.Equal(t, want.tokens, r.Tokens, "stop %d, batch row %d", stop, i)
					require.Equal(t, want.finish, r.Finish, "stop %d, batch row %d", stop, i)
				}
			}
		})
	}
}

// Logits that are not finite (NaN, +Inf or -Inf everywhere, as corrupt weights give)
// end the generation with ErrNonFiniteLogits in every mode, greedy or sampled, alone,
// in a batch or streamed, never with a token.
func TestNonFiniteLogits(t *testing.T) {
	poisons := map[string]func(head [][]float32){
		"NaN": func(head [][]float32) {
			for j := range head[40] {
				head[40][j] = float32(math.NaN())
			}
		},
		"+Inf": func(head [][]float32) { // 1e38 × 8 overflows float32
			for j := range head[40] {
				head[40][j] = 1e38
			}
		},
		"-Inf everywhere": func(head [][]float32) {
			for i := range head {
				for j := range head[i] {
					head[i][j] = -1e38
				}
			}
		},
	}
	sampled := Quality
	sampled.Temperature, sampled.TopK, sampled.TopP = 0.8, 10, 0.9
	configs := map[string]Config{"fused": Quality, "sampled": sampled}
	for _, mode := range []Mode{Reference, Autoregressive} {
		cfg := Quality
		cfg.Mode = mode
		configs[mode.String()] = cfg
	}
	for name, poison := range poisons {
		m := counterModel(t, poison)
		for mode, cfg := range configs {
			t.Run(name+"/"+mode, func(t *testing.T) {
				cfg.MaxNewTokens = 12
				d, err := New(m, cfg)
				require.NoError(t, err)
				for _, prompt := range [][]int{{5, 6, 7}, {5, 6, 7, 8}} { // the first block or the prefill's anchor
					res, err := d.Generate(context.Background(), prompt)
					require.ErrorIs(t, err, ErrNonFiniteLogits, "got %+v", res)
					require.ErrorContains(t, err, "prompt 0")
				}
				_, err = d.GenerateBatch(context.Background(), [][]int{{5, 6, 7}, {9}})
				require.ErrorIs(t, err, ErrNonFiniteLogits)
				var streamErr error
				for c, err := range d.Stream(context.Background(), []int{5, 6, 7}) {
					require.Nil(t, c.Result)
					streamErr = err
				}
				require.ErrorIs(t, streamErr, ErrNonFiniteLogits)
			})
		}
	}
}

// Generate called from inside the decoder's own Stream loop runs (the stream gives the
// device's turn up while its consumer holds a chunk) instead of deadlocking.
func TestGenerateInsideStream(t *testing.T) {
	m := tinyModel(t)
	cfg := Quality
	cfg.MaxNewTokens = 16
	d, err := New(m, cfg)
	require.NoError(t, err)
	want, err := d.Generate(context.Background(), []int{5, 6, 7})
	require.NoError(t, err)

	done := make(chan error, 1)
	go func() {
		var streamed []int
		inner := 0
		for c, err := range d.Stream(context.Background(), []int{5, 6, 7}) {
			if err != nil {
				done <- err
				return
			}
			streamed = append(streamed, c.Tokens...)
			res, err := d.Generate(context.Background(), []int{5, 6, 7})
			if err != nil {
				done <- err
				return
			}
			if !slicesEqual(res.Tokens, want.Tokens) {
				done <- errors.New("the inner generation differs")
				return
			}
			inner++
		}
		if !slicesEqual(streamed, want.Tokens) || inner < 2 {
			done <- errors.New("the stream differs")
			return
		}
		done <- nil
	}()
	select {
	case err := <-done:
		require.NoError(t, err)
	case <-time.After(2 * time.Minute):
		t.Fatal("Generate inside a Stream loop deadlocks")
	}
}

// A generation waiting for the device's turn honours its context; one that finds a
// stream paused in its consumer's hands does not wait for it.
func TestWaitingHonoursTheContext(t *testing.T) {
	m := tinyModel(t)
	cfg := Quality
	cfg.MaxNewTokens = 8
	d, err := New(m, cfg)
	require.NoError(t, err)

	require.NoError(t, d.acquire(context.Background())) // another generation's turn
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err = d.Generate(ctx, []int{5})
	require.ErrorIs(t, err, context.DeadlineExceeded)
	require.Less(t, time.Since(start), 30*time.Second)
	var streamErr error
	for _, err := range d.Stream(ctx, []int{5}) {
		streamErr = err
	}
	require.ErrorIs(t, streamErr, context.DeadlineExceeded)
	d.release()

	paused, resume, finished := make(chan struct{}), make(chan struct{}), make(chan error, 1)
	go func() {
		first := true
		var streamErr error
		for _, err := range d.Stream(context.Background(), []int{5, 6}) {
			streamErr = err
			if first {
				first = false
				close(paused)
				<-resume // the consumer holds the chunk
			}
		}
		finished <- streamErr
	}()
	<-paused
	ctx, cancel = context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	_, err = d.Generate(ctx, []int{5, 6})
	close(resume)
	require.NoError(t, err, "a paused stream does not hold the device")
	require.NoError(t, <-finished, "the stream goes on")
}

// Configurations and requests out of range are errors, checked before anything runs:
// block sizes above MaxBlockSize, too many new tokens, a nil or closed model. In a
// child process under limits: a block of 1000 decoded for 11 minutes, and sizes that
// overflow could exhaust memory.
func TestHostileRequests(t *testing.T) {
	if !testutil.InChild(t, 1<<30, 5*time.Minute) {
		return
	}
	m := tinyModel(t)
	for name, c := range map[string]struct {
		edit func(*Config)
		want string
	}{
		"block 1000":      {func(c *Config) { c.BlockSize = 1000 }, "block size must be at least 1 and at most 128, got 1000"},
		"min reveal":      {func(c *Config) { c.MinReveal = 1 << 40 }, "minimum reveals per step"},
		"max new tokens":  {func(c *Config) { c.MaxNewTokens = math.MaxInt }, "max new tokens"},
		"readback":        {func(c *Config) { c.BlocksPerReadback = math.MaxInt32 }, "blocks per readback must be at least 1 and at most 1024"},
		"top-k":           {func(c *Config) { c.TopK = math.MaxInt }, "top-k"},
		"nan temperature": {func(c *Config) { c.Temperature = math.NaN() }, "temperature"},
	} {
		t.Run(name, func(t *testing.T) {
			cfg := Quality
			c.edit(&cfg)
			_, err := New(m, cfg)
			require.ErrorContains(t, err, c.want)
		})
	}
	cfg := Quality
	cfg.BlockSize = MaxBlockSize
	_, err := New(m, cfg)
	require.NoError(t, err, "the largest block size")

	// The most new tokens the configuration allows, past what the model's positions
	// allow with any prompt.
	cfg = Quality
	cfg.MaxNewTokens = model.MaxPositions
	d, err := New(m, cfg)
	require.NoError(t, err)
	_, err = d.Generate(context.Background(), []int{1, 2})
	require.ErrorContains(t, err, "exceeds max_position_embeddings")

	_, err = New(nil, Quality)
	require.ErrorContains(t, err, "no model")
	_, err = New(&model.Model{}, Quality)
	require.ErrorContains(t, err, "no model")
	var none *Decoder
	_, err = none.Generate(context.Background(), []int{1})
	require.ErrorContains(t, err, "not made by New")

	closed := tinyModel(t)
	d, err = New(closed, Quality)
	require.NoError(t, err)
	_, err = d.Generate(context.Background(), []int{1, 2})
	require.NoError(t, err)
	require.NoError(t, closed.Close())
	_, err = d.Generate(context.Background(), []int{1, 2})
	require.ErrorIs(t, err, model.ErrClosed)
	_, err = New(closed, Quality)
	require.NoError(t, err, "a decoder of a closed model fails when it runs")
}

func slicesEqual(a, b []int) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

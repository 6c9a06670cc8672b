package diffusion

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestConfigValidation(t *testing.T) {
	require.NoError(t, Quality.Validate())
	require.NoError(t, Speed.Validate())
	for name, c := range map[string]struct {
		edit func(*Config)
		want string
	}{
		"block":        {func(c *Config) { c.BlockSize = 0 }, "block size must be at least 1"},
		"fused block":  {func(c *Config) { c.BlockSize = 1 }, "fused mode needs a block size above 1"},
		"threshold":    {func(c *Config) { c.Threshold = 1.5 }, "threshold must be in [0, 1]"},
		"min reveal":   {func(c *Config) { c.MinReveal = 0 }, "minimum reveals"},
		"max tokens":   {func(c *Config) { c.MaxNewTokens = 0 }, "max new tokens"},
		"temperature":  {func(c *Config) { c.Temperature = -1 }, "temperature"},
		"top-p":        {func(c *Config) { c.TopP = 2 }, "top-p"},
		"readback":     {func(c *Config) { c.BlocksPerReadback = 0 }, "blocks per readback"},
		"mode":         {func(c *Config) { c.Mode = 9 }, "unknown mode"},
		"schedule":     {func(c *Config) { c.Schedule = 9 }, "unknown schedule"},
		"two mistakes": {func(c *Config) { c.MinReveal, c.TopK = 0, -1 }, "top-k must be non-negative"},
	} {
		t.Run(name, func(t *testing.T) {
			cfg := Quality
			c.edit(&cfg)
			require.ErrorContains(t, cfg.Validate(), c.want)
		})
	}
	_, err := ParseMode("diagonal")
	require.ErrorContains(t, err, "unknown mode")
	_, err = Preset("fast")
	require.ErrorContains(t, err, "unknown preset")
}

func TestBadRequests(t *testing.T) {
	m := tinyModel(t)
	d, err := New(m, Quality)
	require.NoError(t, err)
	ctx := context.Background()
	_, err = d.Generate(ctx, nil)
	require.ErrorContains(t, err, "prompt 0 is empty")
	_, err = d.Generate(ctx, []int{1, m.Config.VocabSize})
	require.ErrorContains(t, err, "outside the vocabulary")
	_, err = d.GenerateBatch(ctx, nil)
	require.ErrorContains(t, err, "no prompts")

	long := Quality
	long.MaxNewTokens = m.Config.MaxPositionEmbeddings
	d, err = New(m, long)
	require.NoError(t, err)
	_, err = d.Generate(ctx, []int{1})
	require.ErrorContains(t, err, "exceeds max_position_embeddings")

	many := Quality
	many.StopTokens = make([]int, maxStops)
	for i := range many.StopTokens {
		many.StopTokens[i] = i + 10
	}
	_, err = New(m, many)
	require.ErrorContains(t, err, "stop tokens")
	many.StopTokens = []int{m.Config.VocabSize}
	_, err = New(m, many)
	require.ErrorContains(t, err, "outside the vocabulary")
}

// A stream reads after its first block, then after twice as many blocks as the read
// before, up to BlocksPerReadback; a whole generation reads every BlocksPerReadback
// blocks.
func TestChunkBlocks(t *testing.T) {
	for _, c := range []struct {
		most      int
		streaming bool
		want      []int
	}{
		{16, true, []int{1, 2, 4, 8, 16, 16}},
		{5, true, []int{1, 2, 4, 5, 5}},
		{1, true, []int{1, 1}},
		{16, false, []int{16, 16}},
	} {
		got := []int{firstChunkBlocks(c.most, c.streaming)}
		for len(got) < len(c.want) {
			got = append(got, nextChunkBlocks(got[len(got)-1], c.most))
		}
		require.Equal(t, c.want, got, "%+v", c)
	}
}

// Autoregressive mode's blocks are single tokens: it reads after BlocksPerReadback ×
// BlockSize of them, as many tokens as the other modes read after.
func TestReadbackBlocks(t *testing.T) {
	cfg := Quality
	require.Equal(t, 64, cfg.readbackBlocks())
	cfg.Mode = Reference
	require.Equal(t, 64, cfg.readbackBlocks())
	cfg.Mode = Autoregressive
	require.Equal(t, 256, cfg.readbackBlocks())
	cfg.BlocksPerReadback = 1
	require.Equal(t, 4, cfg.readbackBlocks())
}

package train

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"strconv"

	"github.com/gomlx/compute/dtypes"
	"github.com/gomlx/compute/shapes"
	"github.com/gomlx/gomlx/core/graph"
	"github.com/gomlx/gomlx/core/tensors"

	"github.com/blockdiff/blockdiff/internal/hostdata"
	"github.com/blockdiff/blockdiff/internal/modelcore"
	"github.com/blockdiff/blockdiff/model"
	"github.com/blockdiff/blockdiff/safetensors"
)

// Files of a checkpoint folder besides the model's (config.json and its safetensors).
const (
	// StateFileName is the trainer's state: step, data sampler, random state.
	StateFileName = "trainer_state.json"
	// OptimizerDir holds the float32 master weights and AdamW's moments, as safetensors
	// "optimizer.safetensors", or shards of it listed by "optimizer.safetensors.index.json".
	OptimizerDir = "optimizer"
)

// optimizerBase names the optimizer's safetensors files.
const optimizerBase = "optimizer"

// stateFormat is the version of trainer_state.json this package writes.
const stateFormat = 1

// trainerState is trainer_state.json.
type trainerState struct {
	Format  int          `json:"format"`
	Step    int          `json:"step"`
	Sampler SamplerState `json:"sampler"`
	// RNG is the objective's random state, as decimal strings (JSON numbers lose
	// 64-bit integers).
	RNG    []string `json:"rng"`
	Batch  int      `json:"batch"`
	SeqLen int      `json:"seq_len"`
	DType  string   `json:"dtype"`
}

// SaveOptions configure [Trainer.Save].
type SaveOptions struct {
	// MaxShardBytes, when positive, bounds every file written: the model's weights are
	// sharded (a tensor larger than the bound is an error), the optimizer's tensors cut
	// into pieces.
	MaxShardBytes int64
	// DType the model's weights are stored in: BFloat16 (the zero value) or Float32.
	// The master weights in the optimizer state are float32 regardless.
	DType dtypes.DType
}

// Save writes a checkpoint into folder dir: the model (config.json and safetensors,
// which model.Load opens; the tokenizer's files are not the trainer's to write), the
// optimizer state and the trainer's state, from which [Trainer.Restore] resumes. The
// folder is written beside dir and renamed into place, replacing dir.
func (t *Trainer) Save(dir string, opts SaveOptions) error {
	dir = filepath.Clean(dir)
	tmp := dir + ".tmp"
	if err := os.RemoveAll(tmp); err != nil {
		return fmt.Errorf("train: %w", err)
	}
	if err := t.writeCheckpoint(tmp, opts); err != nil {
		_ = os.RemoveAll(tmp)
		return err
	}
	old := dir + ".old"
	if err := os.RemoveAll(old); err != nil {
		return fmt.Errorf("train: %w", err)
	}
	if err := os.Rename(dir, old); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("train: %w", err)
	}
	if err := os.Rename(tmp, dir); err != nil {
		return fmt.Errorf("train: %w", err)
	}
	if err := os.RemoveAll(old); err != nil {
		return fmt.Errorf("train: %w", err)
	}
	return nil
}

func (t *Trainer) writeCheckpoint(dir string, opts SaveOptions) error {
	if err := modelcore.WriteCheckpoint(dir, t.core.Config, t.Weights(), modelcore.SaveOptions{DType: opts.DType, MaxShardBytes: opts.MaxShardBytes}); err != nil {
		return fmt.Errorf("train: %w", err)
	}
	// Pieces of the optimizer's tensors fit a shard with room for its header.
	piece := int64(-1)
	if opts.MaxShardBytes > 0 {
		piece = (opts.MaxShardBytes - 4096) / 4
		if piece < 1 {
			return fmt.Errorf("train: shard bound of %d bytes is too small", opts.MaxShardBytes)
		}
	}
	var w safetensors.Writer
	for kind, list := range map[string][]*tensors.Tensor{"master": t.masters, "adam_m": t.moment1, "adam_v": t.moment2} {
		for i, x := range list {
			values, err := hostdata.Float32s(x)
			if err != nil {
				return fmt.Errorf("train: reading %s of %s: %w", kind, t.params[i].Name, err)
			}
			for k := 0; k == 0 || int64(k)*piece < int64(len(values)); k++ {
				part := values
				if piece > 0 {
					part = values[int64(k)*piece : min(int64(len(values)), int64(k+1)*piece)]
				}
				if err := w.AddFloat32s(pieceName(kind, t.params[i].Name, k), safetensors.F32, []int{len(part)}, part); err != nil {
					return fmt.Errorf("train: %w", err)
				}
				if piece <= 0 {
					break
				}
			}
		}
	}
	optDir := filepath.Join(dir, OptimizerDir)
	if err := os.MkdirAll(optDir, 0o755); err != nil {
		return fmt.Errorf("train: %w", err)
	}
	var err error
	if opts.MaxShardBytes <= 0 {
		err = w.WriteFile(filepath.Join(optDir, optimizerBase+".safetensors"))
	} else {
		_, err = w.WriteShards(optDir, optimizerBase, opts.MaxShardBytes)
	}
	if err != nil {
		return fmt.Errorf("train: %w", err)
	}
	rng, err := tensors.CopyFlatData[uint64](t.rng)
	if err != nil {
		return fmt.Errorf("train: reading the random state: %w", err)
	}
	state := trainerState{Format: stateFormat, Step: t.step, Sampler: t.sampler.State(), Batch: t.cfg.Batch,
		SeqLen: t.cfg.SeqLen, DType: t.dtype.String()}
	for _, r := range rng {
		state.RNG = append(state.RNG, strconv.FormatUint(r, 10))
	}
	data, err := json.MarshalIndent(state, "", "  ")
	if err != nil {
		return fmt.Errorf("train: %w", err)
	}
	if err := os.WriteFile(filepath.Join(dir, StateFileName), append(data, '\n'), 0o644); err != nil {
		return fmt.Errorf("train: %w", err)
	}
	return nil
}

// pieceName names piece k of a tensor of the optimizer state.
func pieceName(kind, param string, k int) string { return fmt.Sprintf("%s/%s/%d", kind, param, k) }

// Restore resumes from a checkpoint folder [Trainer.Save] wrote for the same model
// configuration and sequence length: it replaces the master weights, moments, step,
// data sampler position and random state.
func (t *Trainer) Restore(dir string) error {
	cfg, err := model.LoadConfig(dir)
	if err != nil {
		return fmt.Errorf("train: %w", err)
	}
	if !reflect.DeepEqual(cfg, t.m.Config) {
		return fmt.Errorf("train: checkpoint %s is of another model configuration", dir)
	}
	statePath := filepath.Join(dir, StateFileName)
	data, err := os.ReadFile(statePath)
	if err != nil {
		return fmt.Errorf("train: %w", err)
	}
	var state trainerState
	if err := json.Unmarshal(data, &state); err != nil {
		return fmt.Errorf("train: %s: %w", statePath, err)
	}
	switch {
	case state.Format != stateFormat:
		return fmt.Errorf("train: %s: format %d, want %d", statePath, state.Format, stateFormat)
	case state.SeqLen != t.cfg.SeqLen:
		return fmt.Errorf("train: %s: sequence length %d, the trainer's is %d", statePath, state.SeqLen, t.cfg.SeqLen)
	case state.Step < 0:
		return fmt.Errorf("train: %s: step %d", statePath, state.Step)
	case len(state.RNG) != graph.RNGStateShape.Size():
		return fmt.Errorf("train: %s: rng has %d values, want %d", statePath, len(state.RNG), graph.RNGStateShape.Size())
	}
	rng := make([]uint64, len(state.RNG))
	for i, s := range state.RNG {
		if rng[i], err = strconv.ParseUint(s, 10, 64); err != nil {
			return fmt.Errorf("train: %s: rng: %w", statePath, err)
		}
	}
	lists, err := t.readOptimizer(filepath.Join(dir, OptimizerDir))
	if err != nil {
		return err
	}
	if err := t.sampler.Restore(state.Sampler); err != nil {
		return fmt.Errorf("train: %s: %w", statePath, err)
	}
	for _, list := range [][]*tensors.Tensor{t.masters, t.moment1, t.moment2, {t.rng}} {
		for _, x := range list {
			_ = x.FinalizeAll()
		}
	}
	t.masters, t.moment1, t.moment2 = lists[0], lists[1], lists[2]
	t.rng = tensors.FromFlatDataAndDimensions(rng, graph.RNGStateShape.Dimensions...)
	t.step = state.Step
	return t.replicate()
}

// readOptimizer reads the master weights and moments from the optimizer folder.
func (t *Trainer) readOptimizer(dir string) ([3][]*tensors.Tensor, error) {
	var out [3][]*tensors.Tensor
	var ckpt safetensors.Checkpoint
	f, err := safetensors.Open(filepath.Join(dir, optimizerBase+".safetensors"))
	if errors.Is(err, fs.ErrNotExist) {
		ckpt, err = safetensors.OpenSharded(filepath.Join(dir, optimizerBase+".safetensors.index.json"))
	} else if err == nil {
		ckpt = f
	}
	if err != nil {
		return out, fmt.Errorf("train: optimizer state: %w", err)
	}
	defer ckpt.Close()
	total := len(ckpt.Tensors())
	used := 0
	for k, kind := range []string{"master", "adam_m", "adam_v"} {
		for _, p := range t.params {
			shape := shapes.Make(dtypes.Float32, p.Tensor.Shape().Dimensions...)
			values := make([]float32, 0, shape.Size())
			for piece := 0; piece < total; piece++ {
				name := pieceName(kind, p.Name, piece)
				info, ok := ckpt.Lookup(name)
				if !ok {
					break
				}
				if info.DType != safetensors.F32 || len(info.Shape) != 1 || len(values)+int(info.Shape[0]) > shape.Size() {
					return out, fmt.Errorf("train: optimizer state: tensor %q is %s %v, not a piece of float32 %v", name, info.DType, info.Shape, shape.Dimensions)
				}
				part, err := ckpt.Float32s(name)
				if err != nil {
					return out, fmt.Errorf("train: optimizer state: %w", err)
				}
				values = append(values, part...)
				used++
			}
			if len(values) != shape.Size() {
				return out, fmt.Errorf("train: optimizer state: %s of %s has %d values, want %d", kind, p.Name, len(values), shape.Size())
			}
			out[k] = append(out[k], tensors.FromFlatDataAndDimensions(values, shape.Dimensions...))
		}
	}
	if used != total {
		return out, fmt.Errorf("train: optimizer state: %d tensors, of which %d are this model's", total, used)
	}
	return out, nil
}

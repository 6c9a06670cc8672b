package train

import (
	"fmt"
	"iter"
	"math/rand/v2"
)

// PadToken marks a position of a row that holds no token (the last rows of an evaluation).
const PadToken = -1

// Rows are one batch's host data: rows of width tokens with, for each token, its
// document within the row and its position in that document.
type Rows struct {
	Rows, Width int
	// Tokens [Rows·Width]: ids, or [PadToken].
	Tokens []int32
	// Segments [Rows·Width]: the token's document, counted from 0 at the row's start and
	// increased at each BOS after it; -1 for pads.
	Segments []int32
	// Positions [Rows·Width]: the token's position in its document, counted from its BOS
	// or, for the document the row starts in, from the row's start; 0 for pads.
	Positions []int32
}

// newRows returns rows of the given size, all pads.
func newRows(rows, width int) *Rows {
	r := &Rows{Rows: rows, Width: width, Tokens: make([]int32, rows*width),
		Segments: make([]int32, rows*width), Positions: make([]int32, rows*width)}
	for i := range r.Tokens {
		r.Tokens[i], r.Segments[i] = PadToken, -1
	}
	return r
}

// setRow fills row i with ids (at most Width of them; the rest stay pads) and their
// segments and positions, documents starting at each bos.
func (r *Rows) setRow(i int, ids []uint16, bos int32) {
	seg, start := int32(0), 0
	for j, id := range ids[:min(len(ids), r.Width)] {
		k := i*r.Width + j
		if int32(id) == bos && j > 0 {
			seg, start = seg+1, j
		}
		r.Tokens[k], r.Segments[k], r.Positions[k] = int32(id), seg, int32(j-start)
	}
}

// SamplerState is where a [Sampler] is in its sequence of rows.
type SamplerState struct {
	Seed  uint64 `json:"seed"`
	Epoch int64  `json:"epoch"`
	Next  int64  `json:"next"`
}

// Sampler draws training rows of seqLen+1 tokens: each epoch cuts the ids into windows
// that overlap by one token (so that every token but the first is a target once), from
// an offset drawn for the epoch, and visits them in an order drawn for the epoch. Both
// draws depend only on the seed and the epoch, so that the state is three numbers.
type Sampler struct {
	data   *Tokens
	width  int // seqLen + 1
	bos    int32
	state  SamplerState
	offset int     // the current epoch's first window start
	order  []int32 // the current epoch's window order
}

// NewSampler returns a sampler of rows of seqLen+1 tokens over data, whose documents
// start with bos. The data must hold at least 2·seqLen+1 tokens.
func NewSampler(data *Tokens, seqLen int, bos int, seed uint64) (*Sampler, error) {
	if seqLen < 1 {
		return nil, fmt.Errorf("train: sequence length %d must be positive", seqLen)
	}
	if len(data.IDs) < 2*seqLen+1 {
		return nil, fmt.Errorf("train: %d tokens are too few for rows of %d (need %d)", len(data.IDs), seqLen+1, 2*seqLen+1)
	}
	s := &Sampler{data: data, width: seqLen + 1, bos: int32(bos)}
	s.restore(SamplerState{Seed: seed})
	return s, nil
}

// State returns the sampler's position, for [Sampler.Restore].
func (s *Sampler) State() SamplerState { return s.state }

// Restore moves the sampler to a state [Sampler.State] returned (of a sampler over the
// same data and sequence length).
func (s *Sampler) Restore(state SamplerState) error {
	if state.Epoch < 0 || state.Next < 0 {
		return fmt.Errorf("train: invalid sampler state %+v", state)
	}
	old := s.state
	s.restore(state)
	if state.Next > int64(len(s.order)) {
		s.restore(old)
		return fmt.Errorf("train: sampler state %+v is past the epoch's %d windows", state, len(s.order))
	}
	return nil
}

func (s *Sampler) restore(state SamplerState) {
	s.state = state
	seqLen := s.width - 1
	rng := rand.New(rand.NewPCG(state.Seed, uint64(state.Epoch)))
	s.offset = rng.IntN(seqLen)
	windows := (len(s.data.IDs) - 1 - s.offset) / seqLen
	s.order = make([]int32, windows)
	for i, j := range rng.Perm(windows) {
		s.order[i] = int32(j)
	}
}

// Next returns the next rows.
func (s *Sampler) Next(rows int) *Rows {
	r := newRows(rows, s.width)
	for i := range rows {
		if s.state.Next == int64(len(s.order)) {
			s.restore(SamplerState{Seed: s.state.Seed, Epoch: s.state.Epoch + 1})
		}
		start := s.offset + int(s.order[s.state.Next])*(s.width-1)
		s.state.Next++
		r.setRow(i, s.data.IDs[start:start+s.width], s.bos)
	}
	return r
}

// evalRows cuts data into consecutive rows of seqLen+1 tokens overlapping by one, so
// that every token but the first is a target once, batched by rows; the last batch is
// padded.
func evalRows(data *Tokens, seqLen, rows int, bos int32) iter.Seq[*Rows] {
	return func(yield func(*Rows) bool) {
		n := len(data.IDs)
		for start := 0; start < n-1; {
			r := newRows(rows, seqLen+1)
			for i := 0; i < rows && start < n-1; i++ {
				r.setRow(i, data.IDs[start:min(n, start+seqLen+1)], bos)
				start += seqLen
			}
			if !yield(r) {
				return
			}
		}
	}
}

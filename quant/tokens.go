package quant

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// RandomSequences returns n sequences of length token ids drawn uniformly from
// [0, vocab), reproducibly from seed: calibration data when no text is at hand.
func RandomSequences(n, length, vocab int, seed uint64) ([][]int, error) {
	if n <= 0 || length <= 0 || vocab <= 0 {
		return nil, fmt.Errorf("quant: random sequences need positive count, length and vocabulary, got %d, %d, %d", n, length, vocab)
	}
	rng := rand.New(rand.NewPCG(seed, 0x6a09e667f3bcc908))
	seqs := make([][]int, n)
	for i := range seqs {
		seqs[i] = make([]int, length)
		for j := range seqs[i] {
			seqs[i][j] = rng.IntN(vocab)
		}
	}
	return seqs, nil
}

// ReadTokenFiles reads token sequences from files. A file ending in .json holds one JSON
// array of ids (one sequence) or an array of such arrays (several); any other file
// (e.g. .txt) holds one sequence of ids separated by whitespace. Empty sequences are
// errors.
func ReadTokenFiles(paths ...string) ([][]int, error) {
	if len(paths) == 0 {
		return nil, errors.New("quant: no token files")
	}
	var seqs [][]int
	for _, path := range paths {
		data, err := os.ReadFile(path)
		if err != nil {
			return nil, fmt.Errorf("quant: reading tokens: %w", err)
		}
		var got [][]int
		if strings.EqualFold(filepath.Ext(path), ".json") {
			got, err = parseJSONTokens(data)
		} else {
			got, err = parseTextTokens(data)
		}
		if err == nil {
			for i, seq := range got {
				if len(seq) == 0 {
					err = fmt.Errorf("sequence %d is empty", i)
					break
				}
			}
		}
		if err != nil {
			return nil, fmt.Errorf("quant: token file %s: %w", path, err)
		}
		seqs = append(seqs, got...)
	}
	return seqs, nil
}

// parseJSONTokens reads [ids...] or [[ids...], ...].
func parseJSONTokens(data []byte) ([][]int, error) {
	trimmed := bytes.TrimSpace(data)
	var one []int
	if err := json.Unmarshal(trimmed, &one); err == nil {
		return [][]int{one}, nil
	}
	var many [][]int
	if err := json.Unmarshal(trimmed, &many); err != nil {
		return nil, errors.New("want a JSON array of token ids, or an array of such arrays")
	}
	if len(many) == 0 {
		return nil, errors.New("no sequences")
	}
	return many, nil
}

// parseTextTokens reads whitespace-separated ids as one sequence.
func parseTextTokens(data []byte) ([][]int, error) {
	fields := strings.Fields(string(data))
	seq := make([]int, len(fields))
	for i, f := range fields {
		id, err := strconv.Atoi(f)
		if err != nil {
			return nil, fmt.Errorf("token %d: %q is not an integer id", i, f)
		}
		seq[i] = id
	}
	return [][]int{seq}, nil
}

// ChunkSequences splits each sequence into consecutive pieces of at most length tokens
// (the last piece of each may be shorter), e.g. to fit long token files in
// max_position_embeddings.
func ChunkSequences(seqs [][]int, length int) ([][]int, error) {
	if length <= 0 {
		return nil, fmt.Errorf("quant: chunk length must be positive, got %d", length)
	}
	var out [][]int
	for _, seq := range seqs {
		for start := 0; start < len(seq); start += length {
			out = append(out, seq[start:min(start+length, len(seq))])
		}
	}
	return out, nil
}

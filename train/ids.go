package train

import (
	"encoding/binary"
	"fmt"
	"os"
)

// tokensMagic opens a token-ids file.
const tokensMagic = "bdids001"

// tokensHeaderSize is the bytes before the ids: the magic, the vocabulary size and a
// reserved word, both uint32 little-endian.
const tokensHeaderSize = 16

// Tokens is a token-ids file in memory: documents concatenated, each as BOS, its tokens
// and EOS.
type Tokens struct {
	// Vocab is the vocabulary size the ids were written for; every id is below it.
	Vocab int
	// IDs are the token ids.
	IDs []uint16
}

// ReadTokens reads a token-ids file: the 8 bytes "bdids001", the vocabulary size and a
// reserved zero as uint32 little-endian, then the ids as uint16 little-endian.
func ReadTokens(path string) (*Tokens, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("train: %w", err)
	}
	t, err := ParseTokens(data)
	if err != nil {
		return nil, fmt.Errorf("train: %s: %w", path, err)
	}
	return t, nil
}

// ParseTokens parses the contents of a token-ids file (see [ReadTokens]).
func ParseTokens(data []byte) (*Tokens, error) {
	if len(data) < tokensHeaderSize {
		return nil, fmt.Errorf("%d bytes, shorter than the %d-byte header", len(data), tokensHeaderSize)
	}
	if string(data[:8]) != tokensMagic {
		return nil, fmt.Errorf("magic %q, want %q", data[:8], tokensMagic)
	}
	vocab := binary.LittleEndian.Uint32(data[8:])
	if vocab == 0 || vocab > 1<<16 {
		return nil, fmt.Errorf("vocabulary size %d is not in [1, 65536]", vocab)
	}
	if reserved := binary.LittleEndian.Uint32(data[12:]); reserved != 0 {
		return nil, fmt.Errorf("reserved header word is %d, want 0", reserved)
	}
	body := data[tokensHeaderSize:]
	if len(body)%2 != 0 {
		return nil, fmt.Errorf("%d bytes of ids, not a whole number of uint16", len(body))
	}
	ids := make([]uint16, len(body)/2)
	for i := range ids {
		ids[i] = binary.LittleEndian.Uint16(body[2*i:])
		if uint32(ids[i]) >= vocab {
			return nil, fmt.Errorf("id %d at index %d is outside the vocabulary of %d", ids[i], i, vocab)
		}
	}
	return &Tokens{Vocab: int(vocab), IDs: ids}, nil
}

// Bytes returns the token-ids file's contents (see [ReadTokens]).
func (t *Tokens) Bytes() []byte {
	out := make([]byte, tokensHeaderSize+2*len(t.IDs))
	copy(out, tokensMagic)
	binary.LittleEndian.PutUint32(out[8:], uint32(t.Vocab))
	for i, id := range t.IDs {
		binary.LittleEndian.PutUint16(out[tokensHeaderSize+2*i:], id)
	}
	return out
}

package tokfile

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"os"
	"runtime"
	"sync"
	"sync/atomic"

	"github.com/blockdiff/blockdiff/tokenizer"
)

// Magic opens every token-id file.
const Magic = "bdids001"

// HeaderSize is the length of the header that precedes the ids.
const HeaderSize = 16

// MaxVocab is the largest vocabulary whose ids fit in uint16.
const MaxVocab = 1 << 16

// Write writes a token-id file holding ids to w. Every id must be below vocab.
func Write(w io.Writer, vocab int, ids []uint16) error {
	if vocab < 1 || vocab > MaxVocab {
		return fmt.Errorf("tokfile: vocabulary size %d is outside [1, %d]", vocab, MaxVocab)
	}
	for i, id := range ids {
		if int(id) >= vocab {
			return fmt.Errorf("tokfile: id %d at position %d is not below the vocabulary size %d", id, i, vocab)
		}
	}
	buf := make([]byte, HeaderSize, HeaderSize+2*len(ids))
	copy(buf, Magic)
	binary.LittleEndian.PutUint32(buf[8:], uint32(vocab))
	for _, id := range ids {
		buf = binary.LittleEndian.AppendUint16(buf, id)
	}
	if _, err := w.Write(buf); err != nil {
		return fmt.Errorf("tokfile: %w", err)
	}
	return nil
}

// WriteFile writes a token-id file at path (see Write).
func WriteFile(path string, vocab int, ids []uint16) error {
	var buf bytes.Buffer
	if err := Write(&buf, vocab, ids); err != nil {
		return err
	}
	if err := os.WriteFile(path, buf.Bytes(), 0o644); err != nil {
		return fmt.Errorf("tokfile: %w", err)
	}
	return nil
}

// Parse reads the ids and the vocabulary size from the bytes of a token-id file, checking
// the header and that every id is below the vocabulary size.
func Parse(data []byte) (ids []uint16, vocab int, err error) {
	if len(data) < HeaderSize || string(data[:8]) != Magic {
		return nil, 0, fmt.Errorf("tokfile: not a token-id file (want the magic %q)", Magic)
	}
	v := binary.LittleEndian.Uint32(data[8:])
	if v < 1 || v > MaxVocab {
		return nil, 0, fmt.Errorf("tokfile: vocabulary size %d is outside [1, %d]", v, MaxVocab)
	}
	if r := binary.LittleEndian.Uint32(data[12:]); r != 0 {
		return nil, 0, fmt.Errorf("tokfile: reserved header field is %d, want 0", r)
	}
	body := data[HeaderSize:]
	if len(body)%2 != 0 {
		return nil, 0, fmt.Errorf("tokfile: %d bytes of ids is not a whole number of uint16", len(body))
	}
	ids = make([]uint16, len(body)/2)
	for i := range ids {
		id := binary.LittleEndian.Uint16(body[2*i:])
		if uint32(id) >= v {
			return nil, 0, fmt.Errorf("tokfile: id %d at position %d is not below the vocabulary size %d", id, i, v)
		}
		ids[i] = id
	}
	return ids, int(v), nil
}

// ReadFile reads the token-id file at path (see Parse).
func ReadFile(path string) (ids []uint16, vocab int, err error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, 0, fmt.Errorf("tokfile: %w", err)
	}
	ids, vocab, err = Parse(data)
	if err != nil {
		return nil, 0, fmt.Errorf("%s: %w", path, err)
	}
	return ids, vocab, nil
}

// EncodeDocs encodes each text with tok, on all CPUs, and returns the documents as BOS,
// the text's tokens, EOS, one after the other in the order of texts. Text that spells a
// special token is encoded as ordinary text. tok must have a BOS and an EOS token and at
// most MaxVocab ids.
func EncodeDocs(ctx context.Context, tok *tokenizer.Tokenizer, texts []string) ([]uint16, error) {
	bos, okB := tok.BOSTokenID()
	eos, okE := tok.EOSTokenID()
	if !okB || !okE {
		return nil, fmt.Errorf("tokfile: the tokenizer lacks a BOS or an EOS token")
	}
	if tok.VocabSize() > MaxVocab {
		return nil, fmt.Errorf("tokfile: vocabulary of %d ids does not fit in uint16", tok.VocabSize())
	}
	docs := make([][]int, len(texts))
	errs := make([]error, len(texts))
	var next atomic.Int64
	var wg sync.WaitGroup
	for range runtime.GOMAXPROCS(0) {
		wg.Go(func() {
			for {
				j := int(next.Add(1) - 1)
				if j >= len(texts) || ctx.Err() != nil {
					return
				}
				docs[j], errs[j] = tok.EncodeWith(texts[j], tokenizer.EncodeOptions{})
			}
		})
	}
	wg.Wait()
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	n := 0
	for j, d := range docs {
		if errs[j] != nil {
			return nil, fmt.Errorf("tokfile: document %d: %w", j, errs[j])
		}
		n += len(d) + 2
	}
	out := make([]uint16, 0, n)
	for _, d := range docs {
		out = append(out, uint16(bos))
		for _, id := range d {
			out = append(out, uint16(id))
		}
		out = append(out, uint16(eos))
	}
	return out, nil
}

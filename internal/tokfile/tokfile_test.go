package tokfile

import (
	"bytes"
	"context"
	"encoding/binary"
	"path/filepath"
	"slices"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/blockdiff/blockdiff/tokenizer"
)

func TestWriteParse(t *testing.T) {
	var buf bytes.Buffer
	require.NoError(t, Write(&buf, 300, []uint16{1, 299, 0, 256}))
	want := []byte("bdids001")
	want = binary.LittleEndian.AppendUint32(want, 300)
	want = binary.LittleEndian.AppendUint32(want, 0)
	for _, id := range []uint16{1, 299, 0, 256} {
		want = binary.LittleEndian.AppendUint16(want, id)
	}
	assert.Equal(t, want, buf.Bytes())
	ids, vocab, err := Parse(buf.Bytes())
	require.NoError(t, err)
	assert.Equal(t, []uint16{1, 299, 0, 256}, ids)
	assert.Equal(t, 300, vocab)

	path := filepath.Join(t.TempDir(), "x.ids")
	require.NoError(t, WriteFile(path, MaxVocab, []uint16{65535}))
	ids, vocab, err = ReadFile(path)
	require.NoError(t, err)
	assert.Equal(t, []uint16{65535}, ids)
	assert.Equal(t, MaxVocab, vocab)

	assert.ErrorContains(t, Write(&buf, 10, []uint16{10}), "not below")
	assert.ErrorContains(t, Write(&buf, 0, nil), "outside")
	assert.ErrorContains(t, Write(&buf, MaxVocab+1, nil), "outside")
}

func TestParseRejects(t *testing.T) {
	good := func() []byte {
		var buf bytes.Buffer
		require.NoError(t, Write(&buf, 8, []uint16{7, 0}))
		return buf.Bytes()
	}
	for name, c := range map[string]struct {
		edit func([]byte) []byte
		msg  string
	}{
		"short":    {func(b []byte) []byte { return b[:10] }, "not a token-id file"},
		"magic":    {func(b []byte) []byte { b[7] = '2'; return b }, "not a token-id file"},
		"vocab 0":  {func(b []byte) []byte { binary.LittleEndian.PutUint32(b[8:], 0); return b }, "outside"},
		"vocab":    {func(b []byte) []byte { binary.LittleEndian.PutUint32(b[8:], MaxVocab+1); return b }, "outside"},
		"reserved": {func(b []byte) []byte { b[12] = 1; return b }, "reserved"},
		"odd":      {func(b []byte) []byte { return b[:len(b)-1] }, "whole number"},
		"id":       {func(b []byte) []byte { b[16] = 8; return b }, "id 8 at position 0"},
	} {
		_, _, err := Parse(c.edit(good()))
		assert.ErrorContains(t, err, c.msg, name)
	}
	_, _, err := ReadFile(filepath.Join(t.TempDir(), "missing.ids"))
	assert.Error(t, err)
}

func TestEncodeDocs(t *testing.T) {
	texts := []string{"package a\n\nfunc f() {}\n", "", "// <|eos|> is text here\n", "package a\n"}
	b, err := tokenizer.Train(context.Background(), slices.Values(texts), tokenizer.TrainConfig{VocabSize: 300})
	require.NoError(t, err)
	tok, err := b.Tokenizer()
	require.NoError(t, err)
	bos, _ := tok.BOSTokenID()
	eos, _ := tok.EOSTokenID()

	ids, err := EncodeDocs(context.Background(), tok, texts)
	require.NoError(t, err)
	// Cut the stream back into documents.
	var docs []string
	var cur []int
	for _, id := range ids {
		switch int(id) {
		case bos:
			require.Nil(t, cur, "BOS inside a document")
			cur = []int{}
		case eos:
			require.NotNil(t, cur, "EOS outside a document")
			docs = append(docs, tok.Decode(cur, false))
			cur = nil
		default:
			require.NotNil(t, cur, "token outside a document")
			cur = append(cur, int(id))
		}
	}
	assert.Equal(t, texts, docs)
	for _, id := range ids {
		assert.Less(t, int(id), tok.VocabSize())
	}

	cancelled, cancel := context.WithCancel(context.Background())
	cancel()
	_, err = EncodeDocs(cancelled, tok, texts)
	assert.ErrorIs(t, err, context.Canceled)
}

package tokenizer

import (
	"compress/gzip"
	"encoding/json"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

// The files in testdata/oracle hold results computed by the Hugging Face tokenizers library
// (see testdata/oracle/hf_oracle.py): for the fixture tokenizers on ~780 generated texts and
// 400 random id sequences each, and for ~50 small tokenizers built with the library, one per
// configuration of normalizers, pre-tokenizers, added-token flags, post-processors and
// decoders, each stored with its tokenizer.json.

type oracleCase struct {
	Text               string          `json:"text"`
	IDs                json.RawMessage `json:"ids"`
	IDsWithSpecial     json.RawMessage `json:"ids_with_special"`
	IDsSplitSpecial    json.RawMessage `json:"ids_split_special"`
	Decoded            json.RawMessage `json:"decoded"`
	DecodedSkipSpecial json.RawMessage `json:"decoded_skip_special"`
}

type oracleDecode struct {
	IDs                []int           `json:"ids"`
	Decoded            json.RawMessage `json:"decoded"`
	DecodedSkipSpecial json.RawMessage `json:"decoded_skip_special"`
}

type oracleResult struct {
	Name          string         `json:"name"`
	TokenizerJSON string         `json:"tokenizer_json"`
	Cases         []oracleCase   `json:"cases"`
	Decodes       []oracleDecode `json:"decodes"`
}

// readOracle decodes a gzipped JSON file of testdata/oracle, reporting false if absent.
func readOracle(t *testing.T, name string, v any) bool {
	t.Helper()
	f, err := os.Open(filepath.Join("testdata", "oracle", name))
	if errors.Is(err, fs.ErrNotExist) {
		return false
	}
	require.NoError(t, err)
	defer f.Close()
	zr, err := gzip.NewReader(f)
	require.NoError(t, err)
	require.NoError(t, json.NewDecoder(zr).Decode(v))
	return true
}

// wantIDs returns the expected ids, or false when the reference raised an error.
func wantIDs(raw json.RawMessage) ([]int, bool) {
	var ids []int
	if err := json.Unmarshal(raw, &ids); err != nil {
		return nil, false
	}
	return ids, true
}

func wantString(raw json.RawMessage) (string, bool) {
	var s string
	if err := json.Unmarshal(raw, &s); err != nil {
		return "", false
	}
	return s, true
}

// checkOracle compares tok with the reference results in r.
func checkOracle(t *testing.T, tok *Tokenizer, r oracleResult) {
	t.Helper()
	for _, c := range r.Cases {
		for _, v := range []struct {
			raw  json.RawMessage
			opts EncodeOptions
			what string
		}{
			{c.IDs, EncodeOptions{ParseSpecialTokens: true}, "ids"},
			{c.IDsWithSpecial, EncodeOptions{ParseSpecialTokens: true, AddSpecialTokens: true}, "ids_with_special"},
			// HF's encode_special_tokens = True is ParseSpecialTokens: false.
			{c.IDsSplitSpecial, EncodeOptions{}, "ids_split_special"},
		} {
			want, ok := wantIDs(v.raw)
			if !ok {
				continue
			}
			got, err := tok.EncodeWith(c.Text, v.opts)
			require.NoError(t, err, "%s: %q", r.Name, c.Text)
			require.Equal(t, want, nonNil(got), "%s %s of %q", r.Name, v.what, c.Text)
		}
		ids, ok := wantIDs(c.IDs)
		if !ok {
			continue
		}
		if want, ok := wantString(c.Decoded); ok {
			require.Equal(t, want, tok.Decode(ids, false), "%s: decode of %q", r.Name, c.Text)
		}
		if want, ok := wantString(c.DecodedSkipSpecial); ok {
			require.Equal(t, want, tok.Decode(ids, true), "%s: skip-special decode of %q", r.Name, c.Text)
		}
	}
	for _, d := range r.Decodes {
		if want, ok := wantString(d.Decoded); ok {
			require.Equal(t, want, tok.Decode(d.IDs, false), "%s: decode of %v", r.Name, d.IDs)
		}
		if want, ok := wantString(d.DecodedSkipSpecial); ok {
			require.Equal(t, want, tok.Decode(d.IDs, true), "%s: skip-special decode of %v", r.Name, d.IDs)
		}
		checkStream(t, tok, d.IDs, false, nil)
	}
}

func TestOracleFixtures(t *testing.T) {
	for _, f := range loadFixtures(t) {
		t.Run(f.name, func(t *testing.T) {
			var r oracleResult
			if !readOracle(t, "fixtures_"+f.name+".json.gz", &r) {
				t.Skipf("no reference results for fixture %s", f.name)
			}
			r.Name = f.name
			require.NotEmpty(t, r.Cases)
			checkOracle(t, f.tok, r)
		})
	}
}

func TestOracleSynthetic(t *testing.T) {
	var all struct {
		Configs []oracleResult `json:"configs"`
	}
	if !readOracle(t, "synthetic.json.gz", &all) {
		t.Skip("no reference results for synthetic tokenizers")
	}
	require.NotEmpty(t, all.Configs)
	for _, r := range all.Configs {
		t.Run(r.Name, func(t *testing.T) {
			tok, err := FromBytes([]byte(r.TokenizerJSON), nil)
			require.NoError(t, err)
			checkOracle(t, tok, r)
		})
	}
}

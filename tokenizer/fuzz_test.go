package tokenizer

import (
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/stretchr/testify/require"
)

// FuzzEncodeDecode encodes arbitrary input (invalid UTF-8 included) with every fixture
// tokenizer. Nothing may panic; invalid UTF-8 is refused with ErrInvalidUTF8. For valid
// input, decoding the ids gives back the (normalized) text: exactly the input for byte-level
// tokenizers (up to their NFC normalizer) and for the Llama-style tokenizer (when the input
// holds no "▁", which it uses for spaces). The streaming decoder agrees with Decode.
func FuzzEncodeDecode(f *testing.F) {
	for _, s := range []string{"", " ", "Hello, world!", "  two  spaces\n\n", "<|im_start|>user\nhi<|im_end|>", "<s>x</s>",
		"数字 12345", "🙂👩‍💻🇫🇷", "e\u0301", "\xff\xfe", "a\xc3", "'S 'll ſ", "\u00a0\u3000\u2028"} {
		f.Add(s)
	}
	fs := loadFixtures(f)
	f.Fuzz(func(t *testing.T, s string) {
		for _, fx := range fs {
			for _, parse := range []bool{false, true} {
				ids, err := fx.tok.EncodeWith(s, EncodeOptions{ParseSpecialTokens: parse, AddSpecialTokens: parse})
				if !utf8.ValidString(s) {
					require.ErrorIs(t, err, ErrInvalidUTF8)
					continue
				}
				require.NoError(t, err)
				for _, id := range ids {
					require.True(t, id >= 0 && id < fx.tok.VocabSize())
				}
				checkStream(t, fx.tok, ids, parse, nil)
				if parse {
					continue
				}
				want := s
				if fx.tok.normalizer != nil {
					if n, ok := fx.tok.normalizer.(unicodeNormalizer); ok {
						want = n.form.String(s)
					}
				}
				switch fx.tok.decoder.(type) {
				case byteLevelDecoder:
					require.Equal(t, want, fx.tok.Decode(ids, false))
				case seqDecoder:
					if !strings.Contains(s, "▁") {
						require.Equal(t, want, fx.tok.Decode(ids, true))
					}
				}
			}
		}
	})
}

// FuzzDecodeStream decodes arbitrary id sequences: every streamed piece is valid UTF-8 and
// the pieces concatenate to Decode.
func FuzzDecodeStream(f *testing.F) {
	f.Add([]byte{0, 1, 2, 3}, false)
	f.Add([]byte{0xF0, 0x9F, 0x99, 0x82, 0xFF, 0x10}, true)
	f.Add([]byte("hello world"), false)
	fs := loadFixtures(f)
	f.Fuzz(func(t *testing.T, data []byte, skip bool) {
		for _, fx := range fs {
			byteIDs := byteTokenIDs(fx.tok)
			var ids []int
			for i := 0; i+1 < len(data); i += 2 {
				v := int(data[i])<<8 | int(data[i+1])
				if v&1 == 0 {
					ids = append(ids, byteIDs[(v>>1)%len(byteIDs)])
				} else {
					ids = append(ids, (v>>1)*37%(fx.tok.VocabSize()+3))
				}
			}
			checkStream(t, fx.tok, ids, skip, nil)
		}
	})
}

// FuzzFastMatchers checks the hand-written pre-tokenizer matchers against the regex engine.
func FuzzFastMatchers(f *testing.F) {
	for _, s := range fastMatcherSeeds {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if !utf8.ValidString(s) {
			return
		}
		compareFastMatchers(t, s)
	})
}

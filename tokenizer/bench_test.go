package tokenizer

import (
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ardanlabs/jinja"

	"github.com/blockdiff/blockdiff/internal/fixtures"
)

// mixedText generates about n bytes of deterministic mixed text: English prose, CJK,
// emoji, long whitespace runs, digits and code.
func mixedText(n int) string {
	rng := rand.New(rand.NewPCG(1, 2))
	words := strings.Fields("the of and to in is was for on that with as by at from it an be this which " +
		"block diffusion model decodes tokens parallel language generation autoregressive attention " +
		"transformer sequence probability sampling temperature vocabulary embedding layer")
	cjk := []rune("的一是不了人我在有他这为之大来以个中上们到说国和地也子时道出而要于就下得可你年生自会那后能对着事其里所去行过家十用发天如然作方成者多日都三小军二无同么经法当起与好看学进种将还分此心前面又定见只主没公从")
	emoji := []string{"🙂", "🚀", "🤖", "👩‍💻", "🎉", "❤️", "🇫🇷"}
	code := []string{"func main() {\n\tfmt.Println(\"hi\")\n}\n", "x := a[i] + b->c; // note\n", "if (n >= 0x1F) { return -1; }\n", "    for i in range(10):\n        print(i ** 2)\n"}
	var sb strings.Builder
	sb.Grow(n + 64)
	for sb.Len() < n {
		switch k := rng.IntN(100); {
		case k < 55:
			for i := rng.IntN(12) + 3; i > 0; i-- {
				w := words[rng.IntN(len(words))]
				if rng.IntN(8) == 0 {
					w = strings.ToUpper(w[:1]) + w[1:]
				}
				sb.WriteString(w)
				sb.WriteByte(' ')
			}
			sb.WriteString(". ")
		case k < 70:
			for i := rng.IntN(20) + 5; i > 0; i-- {
				sb.WriteRune(cjk[rng.IntN(len(cjk))])
			}
			sb.WriteString("。")
		case k < 77:
			for i := rng.IntN(4) + 1; i > 0; i-- {
				sb.WriteString(emoji[rng.IntN(len(emoji))])
			}
			sb.WriteByte(' ')
		case k < 82:
			sb.WriteString(strings.Repeat(" ", rng.IntN(40)+1))
			if rng.IntN(2) == 0 {
				sb.WriteString(strings.Repeat("\n", rng.IntN(4)+1))
			}
		case k < 90:
			fmt.Fprintf(&sb, "%d.%d %d ", rng.IntN(100000), rng.IntN(1000), rng.Int64())
		default:
			sb.WriteString(code[rng.IntN(len(code))])
		}
	}
	return sb.String()
}

// BenchmarkEncode encodes 1 MB and 10 MB of mixed text with each fixture tokenizer, starting
// each encode with an empty word cache. The 10 MB run taking about ten times as long as the
// 1 MB run (equal MB/s) shows that encoding is linear in the input length.
func BenchmarkEncode(b *testing.B) {
	fs := loadFixtures(b)
	for _, size := range []int{1 << 20, 10 << 20} {
		text := mixedText(size)
		for _, f := range fs {
			b.Run(fmt.Sprintf("%s/%dMB", f.name, size>>20), func(b *testing.B) {
				b.SetBytes(int64(len(text)))
				cpu0, cpuOK := processCPUTime()
				for b.Loop() {
					// Start cold: a warm word cache would hold every word of the 1 MB text
					// but not of the 10 MB one, which would flatter the small size.
					f.tok.model.cache.reset()
					if _, err := f.tok.EncodeWith(text, EncodeOptions{ParseSpecialTokens: true}); err != nil {
						b.Fatal(err)
					}
				}
				// CPU time per MB, which other programs on the machine do not inflate.
				if cpu1, ok := processCPUTime(); ok && cpuOK {
					mb := float64(len(text)) / (1 << 20) * float64(b.N)
					b.ReportMetric(float64((cpu1-cpu0).Milliseconds())/mb, "cpu-ms/MB")
				}
			})
		}
	}
}

// BenchmarkDecode decodes the ids of 1 MB of mixed text.
func BenchmarkDecode(b *testing.B) {
	text := mixedText(1 << 20)
	for _, f := range loadFixtures(b) {
		ids, err := f.tok.EncodeWith(text, EncodeOptions{})
		if err != nil {
			b.Fatal(err)
		}
		b.Run(f.name, func(b *testing.B) {
			b.SetBytes(int64(len(text)))
			for b.Loop() {
				_ = f.tok.Decode(ids, false)
			}
		})
	}
}

// BenchmarkLoad reads each fixture tokenizer from the bytes of its files.
func BenchmarkLoad(b *testing.B) {
	for _, dir := range fixtures.Subdirs(b, "tokenizers") {
		tj, err := os.ReadFile(filepath.Join(dir, "tokenizer.json"))
		if err != nil {
			b.Fatal(err)
		}
		cfg, err := os.ReadFile(filepath.Join(dir, "tokenizer_config.json"))
		if err != nil {
			b.Fatal(err)
		}
		b.Run(filepath.Base(dir), func(b *testing.B) {
			b.SetBytes(int64(len(tj)))
			for b.Loop() {
				if _, err := FromBytes(tj, cfg); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkChatTemplate renders each fixture's chat template for conversations of 10 and
// 1,000 messages, under the budgets (guarded) and with the template engine alone (raw).
func BenchmarkChatTemplate(b *testing.B) {
	for _, f := range loadFixtures(b) {
		if !f.tok.HasChatTemplate() {
			continue
		}
		for _, n := range []int{10, 1000} {
			msgs := make([]Message, n)
			for i := range msgs {
				role := "user"
				if i%2 == 1 {
					role = "assistant"
				}
				msgs[i] = Message{Role: role, Content: mixedText(200)}
			}
			opts := ChatOptions{AddGenerationPrompt: true}
			b.Run(fmt.Sprintf("%s/%d/guarded", f.name, n), func(b *testing.B) {
				for b.Loop() {
					if _, err := f.tok.ApplyChatTemplate(msgs, opts); err != nil {
						b.Fatal(err)
					}
				}
			})
			raw, err := jinja.Compile(f.tok.config.ChatTemplate)
			if err != nil {
				b.Fatal(err)
			}
			b.Run(fmt.Sprintf("%s/%d/raw", f.name, n), func(b *testing.B) {
				for b.Loop() {
					if _, err := raw.RenderValues(f.tok.chatData(msgs, opts)); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}

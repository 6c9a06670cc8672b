package tokenizer_test

import (
	"fmt"
	"log"

	"github.com/blockdiff/blockdiff/tokenizer"
)

// tinyTokenizerJSON is a complete byte-level BPE tokenizer.json with a handful of merges, in
// the style of GPT-2 and Qwen: bytes map to printable characters ("Ġ" is the space), and
// "<|end|>" is a special added token.
const tinyTokenizerJSON = `{
  "version": "1.0",
  "added_tokens": [
    {"id": 12, "content": "<|end|>", "single_word": false, "lstrip": false, "rstrip": false, "normalized": false, "special": true}
  ],
  "normalizer": {"type": "NFC"},
  "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": true, "use_regex": true},
  "post_processor": {"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": true, "use_regex": true},
  "decoder": {"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": true, "use_regex": true},
  "model": {
    "type": "BPE",
    "vocab": {"h": 0, "e": 1, "l": 2, "o": 3, "Ġ": 4, "w": 5, "r": 6, "d": 7, "he": 8, "ll": 9, "hell": 10, "hello": 11,
              "<": 13, "|": 14, "n": 15, ">": 16, "Ġw": 17, "or": 18, "Ġwor": 19, "Ġworld": 20, "Ġworl": 21},
    "merges": ["h e", "l l", "he ll", "hell o", "Ġ w", "o r", "Ġw or", "Ġwor l", "Ġworl d"]
  }
}`

// tinyConfigJSON is the matching tokenizer_config.json, with a ChatML-style template.
const tinyConfigJSON = `{
  "eos_token": "<|end|>",
  "chat_template": "{% for m in messages %}{{ m.role }}: {{ m.content }}<|end|>\n{% endfor %}{% if add_generation_prompt %}assistant: {% endif %}"
}`

func Example() {
	tok, err := tokenizer.FromBytes([]byte(tinyTokenizerJSON), []byte(tinyConfigJSON))
	if err != nil {
		log.Fatal(err)
	}
	ids, err := tok.Encode("hello world")
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(ids)
	fmt.Printf("%q\n", tok.Decode(ids, false))
	// Output:
	// [11 20]
	// "hello world"
}

// Text that spells a special token stays text unless the caller says it holds real ones.
func ExampleEncodeOptions() {
	tok, err := tokenizer.FromBytes([]byte(tinyTokenizerJSON), nil)
	if err != nil {
		log.Fatal(err)
	}
	typed, _ := tok.Encode("hello<|end|>")
	parsed, _ := tok.EncodeWith("hello<|end|>", tokenizer.EncodeOptions{ParseSpecialTokens: true})
	fmt.Println(typed)
	fmt.Println(parsed)
	fmt.Printf("%q\n", tok.Decode(parsed, true))
	// Output:
	// [11 13 14 1 15 7 14 16]
	// [11 12]
	// "hello"
}

func ExampleTokenizer_ApplyChatTemplate() {
	tok, err := tokenizer.FromBytes([]byte(tinyTokenizerJSON), []byte(tinyConfigJSON))
	if err != nil {
		log.Fatal(err)
	}
	prompt, err := tok.ApplyChatTemplate([]tokenizer.Message{
		{Role: "user", Content: "hello"},
	}, tokenizer.ChatOptions{AddGenerationPrompt: true})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("%q\n", prompt)
	// Output:
	// "user: hello<|end|>\nassistant: "
}

// A stream returns text as soon as it is final. (Half of a multi-byte character would be held
// back until the ids completing it arrive.)
func ExampleDecodeStream() {
	tok, err := tokenizer.FromBytes([]byte(tinyTokenizerJSON), nil)
	if err != nil {
		log.Fatal(err)
	}
	ids, _ := tok.Encode("hello world")
	stream := tok.NewDecodeStream(true)
	for _, id := range ids {
		fmt.Printf("%q ", stream.Push(id))
	}
	fmt.Printf("%q\n", stream.Flush())
	// Output:
	// "hello" " world" ""
}

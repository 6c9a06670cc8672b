// Package tokenizer runs Hugging Face tokenizers: it reads tokenizer.json and
// tokenizer_config.json and encodes and decodes exactly as the Hugging Face tokenizers
// library (checked against version 0.23) and transformers' chat templates do.
//
// It covers the byte-pair-encoding (BPE) tokenizers of the models blockdiff runs: the
// SentencePiece-style BPE with byte fallback of MiniCPM 1 to 4 (Llama-like), and the
// byte-level BPE of MiniCPM5 (Qwen-like), whose pre-tokenizer pattern uses look-ahead.
//
// # Pipeline
//
// Encoding follows the stages of tokenizer.json:
//
//  1. Added tokens ("added_tokens") are found in the text first, so the model never splits
//     them; the text between them goes on.
//  2. The normalizer rewrites the text (Prepend, Replace, NFC/NFD/NFKC/NFKD, Lowercase,
//     Strip, StripAccents, ByteLevel, BertNormalizer, Sequence).
//  3. The pre-tokenizer cuts it into words (Split with a string or regex pattern and any
//     behavior, ByteLevel, Metaspace, Digits, Whitespace, WhitespaceSplit, Punctuation,
//     CharDelimiterSplit, BertPreTokenizer, Sequence).
//  4. The BPE model turns each word into ids (merges by rank, byte_fallback, unk_token and
//     fuse_unk, continuing_subword_prefix, end_of_word_suffix, ignore_merges). Merging uses
//     a heap over a linked list of symbols, so it is O(n log n) in a word's length; words
//     are cached; and a long word (with no pre-tokenizer, the whole text is one word) is cut
//     where no merge can join its sides, so encoding is linear in the input.
//  5. The post-processor adds special tokens such as BOS (TemplateProcessing,
//     RobertaProcessing, BertProcessing, ByteLevel, Sequence) when asked to.
//
// Decoding maps ids back to token strings and runs the decoder (Replace, ByteFallback, Fuse,
// Strip, ByteLevel, Metaspace, WordPiece, BPEDecoder, Sequence). A tokenizer.json that uses
// anything else (a Unigram or WordPiece model, the Precompiled normalizer, ...) is refused
// with an error wrapping ErrUnsupported that names the component, never run approximately.
//
// # Special tokens in text
//
// Encode does not turn text that merely spells a special token ("<|im_end|>", "</s>") into
// that token: user text must not be able to inject control tokens. Set
// EncodeOptions.ParseSpecialTokens for text whose special tokens are real, such as a prompt
// rendered from a chat template (EncodeChat does this). The Hugging Face library parses them
// by default; ParseSpecialTokens: true reproduces its encode exactly.
//
// # Streaming
//
// DecodeStream decodes ids one at a time as a model generates them. It holds back what may
// still change (half of a UTF-8 character, an unfinished run of byte-fallback tokens) so each
// piece it returns is valid UTF-8, and the pieces always concatenate to Decode of all ids.
//
// # Training
//
// Train learns a byte-level BPE tokenizer from texts (by default with CodePattern as the
// pre-tokenizer, suited to source code) and writes it as tokenizer.json and
// tokenizer_config.json that this package and the Hugging Face library load alike. Its
// special tokens BOS, EOS, pad and mask take the last four ids, mask the very last.
//
// # Chat templates
//
// ApplyChatTemplate renders the Jinja chat_template of tokenizer_config.json for a list of
// messages, with the variables transformers provides (bos_token, eos_token, ...,
// add_generation_prompt). It renders under ChatLimits and, with ApplyChatTemplateContext
// or EncodeChatContext, a context.
//
// # Untrusted input
//
// Everything in a model folder is untrusted: a hostile tokenizer.json, tokenizer_config.json
// or chat template must not crash, hang or exhaust the host program. Loading reads only
// regular files of bounded size (a FIFO is refused, not waited on), parses each component
// once, so that loading is linear in the file (nesting deeper than 64 levels is refused),
// sizes its id tables by the tokens the file defines (an id far beyond them is refused),
// and bounds added tokens (256 bytes each, found with a radix tree). Encoding runs each
// regex of the file under a match budget (1 s per search, more for long texts; the error
// wraps ErrRegexBudget and names the pattern) and bounds what the normalizer and the
// pre-tokenizers may make of a text to 64 times its size plus 1 MiB (ErrExpansion).
// Decoding cannot fail: a decoder step that would (a Replace over budget) leaves its token
// as it was, and DecodeStream.Err says so. A chat template is rewritten with hooks that count
// loop iterations and macro calls, recursion depth, output, the bytes of the values it makes
// and time, and that check the operands of every operation whose cost grows with them, so a
// template that would run out of memory or stack, or never end, fails with an error wrapping
// ErrChatLimit instead (see the internal package jinjaguard). The rewritten template renders
// exactly what the original does: FuzzChatTemplate checks this against the template engine
// alone. FuzzLoad and FuzzChatTemplate each ran 10^6 executions without a failure (in
// about 3 and 2 minutes, one worker on two shared cores).
package tokenizer

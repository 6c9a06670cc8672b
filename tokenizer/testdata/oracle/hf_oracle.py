"""Computes reference encodings and decodings with the Hugging Face `tokenizers` library.

This is how testdata/oracle/*.json.gz were made (tokenizers 0.23.2, transformers 5.17):

    python3 testdata/oracle/gen_inputs.py > inputs.json
    python3 testdata/oracle/hf_oracle.py inputs.json FIXTURES_DIR OUT_DIR

FIXTURES_DIR holds llama2/ and qwen3/ (the shared tokenizer fixtures). OUT_DIR receives
fixtures_<name>.json.gz (ids for the fixture tokenizers) and synthetic.json.gz (small tokenizers
built here, one per component configuration, with their tokenizer.json and expected results).
"""
import gzip
import json
import os
import sys

import tokenizers
from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, processors
from tokenizers.trainers import BpeTrainer

inputs = json.load(open(sys.argv[1]))
fixtures_dir, out_dir = sys.argv[2], sys.argv[3]
texts = inputs["texts"]


def safe(fn):
    try:
        return fn()
    except BaseException as e:  # Rust panics surface as PanicException, a BaseException
        return {"error": f"{type(e).__name__}: {e}"}


def run_cases(tok, texts, id_lists):
    cases = []
    for t in texts:
        c = {"text": t}
        c["ids"] = safe(lambda: tok.encode(t, add_special_tokens=False).ids)
        c["ids_with_special"] = safe(lambda: tok.encode(t, add_special_tokens=True).ids)
        tok.encode_special_tokens = True
        c["ids_split_special"] = safe(lambda: tok.encode(t, add_special_tokens=False).ids)
        tok.encode_special_tokens = False
        if isinstance(c["ids"], list):
            c["decoded"] = safe(lambda: tok.decode(c["ids"], skip_special_tokens=False))
            c["decoded_skip_special"] = safe(lambda: tok.decode(c["ids"], skip_special_tokens=True))
        cases.append(c)
    decodes = []
    for ids in id_lists:
        decodes.append({
            "ids": ids,
            "decoded": safe(lambda: tok.decode(ids, skip_special_tokens=False)),
            "decoded_skip_special": safe(lambda: tok.decode(ids, skip_special_tokens=True)),
        })
    return {"cases": cases, "decodes": decodes}


def dump(name, obj):
    with gzip.open(os.path.join(out_dir, name), "wt", encoding="utf-8") as f:
        json.dump(obj, f, ensure_ascii=False)


os.makedirs(out_dir, exist_ok=True)

# --- the fixture tokenizers, on many more texts -------------------------------------------------
for name in ["llama2", "qwen3"]:
    path = os.path.join(fixtures_dir, name, "tokenizer.json")
    if not os.path.exists(path):
        continue
    tok = Tokenizer.from_file(path)
    res = run_cases(tok, texts, inputs["ids"][name])
    res["tokenizers_version"] = tokenizers.__version__
    dump(f"fixtures_{name}.json.gz", res)
    print(name, "done", flush=True)

# --- synthetic tokenizers, one per component configuration --------------------------------------
corpus = [t for t in texts if t] * 3 + [
    "the quick brown fox jumps over the lazy dog " * 5,
    "Tokenizers split text into words and words into tokens. " * 5,
    "数字 12345 和 3.14159 日本語のテキスト Привет, мир! café naïve résumé " * 5,
]
short_texts = texts[:260]


def byte_fallback_vocab(tok_json):
    """Adds <0x00>..<0xFF> to a trained BPE vocabulary and turns byte_fallback on."""
    d = json.loads(tok_json)
    vocab = d["model"]["vocab"]
    n = max(vocab.values()) + 1
    for b in range(256):
        t = "<0x%02X>" % b
        if t not in vocab:
            vocab[t] = n
            n += 1
    d["model"]["byte_fallback"] = True
    return json.dumps(d, ensure_ascii=False)


def set_model_fields(tok_json, **fields):
    d = json.loads(tok_json)
    d["model"].update(fields)
    return json.dumps(d, ensure_ascii=False)


MASK = lambda **kw: AddedToken("<mask>", **kw)

configs = []


def config(name, model_kw=None, trainer_kw=None, normalizer=None, pre=None, decoder=None, post=None,
           specials=(), added=(), edit=None):
    configs.append(dict(name=name, model_kw=model_kw or {}, trainer_kw=trainer_kw or {}, normalizer=normalizer,
                        pre=pre, decoder=decoder, post=post, specials=specials, added=added, edit=edit))


llama_decoder = lambda: decoders.Sequence([decoders.Replace("▁", " "), decoders.ByteFallback(), decoders.Fuse(),
                                           decoders.Strip(" ", 1, 0)])
llama_norm = lambda: normalizers.Sequence([normalizers.Prepend("▁"), normalizers.Replace(" ", "▁")])
bos_post = lambda: processors.TemplateProcessing(single="<s> $A </s>", pair="<s> $A </s> $B </s>",
                                                 special_tokens=[("<s>", 1), ("</s>", 2)])

config("llama_like", model_kw=dict(unk_token="<unk>", fuse_unk=True), normalizer=llama_norm(), pre=None,
       decoder=llama_decoder(), specials=["<unk>", "<s>", "</s>"], edit=byte_fallback_vocab, post=bos_post())
config("llama_like_no_fallback_unfused", model_kw=dict(unk_token="<unk>", fuse_unk=False), normalizer=llama_norm(),
       decoder=llama_decoder(), specials=["<unk>", "<s>", "</s>"], trainer_kw=dict(limit_alphabet=60))
config("metaspace_always", pre=pre_tokenizers.Metaspace(prepend_scheme="always"),
       decoder=decoders.Metaspace(prepend_scheme="always"), specials=["<s>", "</s>"],
       added=[MASK(lstrip=True), AddedToken("<think>", special=False)])
config("metaspace_first", pre=pre_tokenizers.Metaspace(prepend_scheme="first"),
       decoder=decoders.Metaspace(prepend_scheme="first"), specials=["<s>", "</s>", "<|im_end|>"])
config("metaspace_never_nosplit", pre=pre_tokenizers.Metaspace(prepend_scheme="never", split=False),
       decoder=decoders.Metaspace(prepend_scheme="never"), specials=["<s>"])
config("bytelevel_prefix", pre=pre_tokenizers.ByteLevel(add_prefix_space=True, use_regex=True),
       decoder=decoders.ByteLevel(), post=processors.ByteLevel(trim_offsets=True),
       trainer_kw=dict(initial_alphabet=pre_tokenizers.ByteLevel.alphabet()),
       specials=["<|endoftext|>", "<|im_start|>", "<|im_end|>"],
       added=[AddedToken("<think>", special=False), MASK(rstrip=True)])
config("bytelevel_lower_nfkc", normalizer=normalizers.Sequence([normalizers.NFKC(), normalizers.Lowercase()]),
       pre=pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True), decoder=decoders.ByteLevel(),
       trainer_kw=dict(initial_alphabet=pre_tokenizers.ByteLevel.alphabet()), specials=["<s>"],
       added=[AddedToken("Hello", normalized=True, special=False)], edit=lambda j: set_model_fields(j, ignore_merges=True))
config("qwen_like", normalizer=normalizers.NFC(),
       pre=pre_tokenizers.Sequence([
           pre_tokenizers.Split(Regex(r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"),
                                behavior="isolated"),
           pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)]),
       decoder=decoders.ByteLevel(), post=processors.ByteLevel(trim_offsets=False),
       trainer_kw=dict(initial_alphabet=pre_tokenizers.ByteLevel.alphabet()),
       specials=["<|endoftext|>", "<|im_start|>", "<|im_end|>"], added=[AddedToken("<think>", special=False)])
config("llama3_like",
       pre=pre_tokenizers.Sequence([
           pre_tokenizers.Split(Regex(r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"),
                                behavior="isolated"),
           pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)]),
       decoder=decoders.ByteLevel(), trainer_kw=dict(initial_alphabet=pre_tokenizers.ByteLevel.alphabet()),
       specials=["<|begin_of_text|>"], post=processors.TemplateProcessing(single="<|begin_of_text|> $A",
                                                                         special_tokens=[("<|begin_of_text|>", 0)]),
       edit=lambda j: set_model_fields(j, ignore_merges=True))
for beh in ["removed", "isolated", "merged_with_previous", "merged_with_next", "contiguous"]:
    for inv in [False, True]:
        config(f"split_string_{beh}_{inv}", pre=pre_tokenizers.Split(" ", behavior=beh, invert=inv),
               decoder=decoders.Fuse(), specials=["<s>"])
    config(f"split_regex_{beh}", pre=pre_tokenizers.Split(Regex(r"\d+|[aeiou]"), behavior=beh),
           specials=["<s>"])
    config(f"punct_{beh}", pre=pre_tokenizers.Punctuation(behavior=beh))
config("digits_individual", pre=pre_tokenizers.Sequence([pre_tokenizers.WhitespaceSplit(),
                                                         pre_tokenizers.Digits(individual_digits=True)]))
config("digits_contiguous", pre=pre_tokenizers.Digits(individual_digits=False))
config("whitespace", pre=pre_tokenizers.Whitespace())
config("bert_pre", pre=pre_tokenizers.BertPreTokenizer(),
       normalizer=normalizers.BertNormalizer(clean_text=True, handle_chinese_chars=True, strip_accents=None,
                                             lowercase=True),
       decoder=decoders.WordPiece(prefix="##", cleanup=True), model_kw=dict(continuing_subword_prefix="##"),
       trainer_kw=dict(continuing_subword_prefix="##"), specials=["[CLS]", "[SEP]", "[MASK]"],
       post=processors.BertProcessing(("[SEP]", 1), ("[CLS]", 0)))
config("char_delimiter", pre=pre_tokenizers.CharDelimiterSplit("a"))
config("suffix_bpe", pre=pre_tokenizers.WhitespaceSplit(), model_kw=dict(end_of_word_suffix="</w>"),
       trainer_kw=dict(end_of_word_suffix="</w>"), decoder=decoders.BPEDecoder(suffix="</w>"))
config("strip_norm_accents", normalizer=normalizers.Sequence([normalizers.Strip(left=True, right=True),
                                                              normalizers.NFKD(), normalizers.StripAccents(),
                                                              normalizers.Replace(Regex(r"\s+"), " ")]),
       pre=pre_tokenizers.Whitespace())
config("nfd_replace", normalizer=normalizers.Sequence([normalizers.NFD(), normalizers.Replace("a", "aa"),
                                                        normalizers.Prepend("@")]),
       pre=pre_tokenizers.Metaspace(), decoder=decoders.Sequence([decoders.Metaspace(),
                                                                  decoders.Strip("@", 1, 0)]))
config("strip_decoder_stop", pre=pre_tokenizers.Metaspace(),
       decoder=decoders.Sequence([decoders.Replace("▁", " "), decoders.Strip(" ", 2, 1)]))
config("added_tokens_flags", pre=pre_tokenizers.ByteLevel(add_prefix_space=False), decoder=decoders.ByteLevel(),
       normalizer=normalizers.Lowercase(),
       trainer_kw=dict(initial_alphabet=pre_tokenizers.ByteLevel.alphabet()),
       specials=[AddedToken("<s>", lstrip=True, rstrip=True), AddedToken("</s>", single_word=True)],
       added=[MASK(single_word=True, lstrip=True), AddedToken("HELLO", normalized=True),
              AddedToken("World", normalized=False, rstrip=True), AddedToken("ab", single_word=True),
              AddedToken("<think>", special=False, normalized=False)])
config("no_decoder", pre=pre_tokenizers.WhitespaceSplit(), specials=["<s>"])
config("roberta_post", pre=pre_tokenizers.ByteLevel(add_prefix_space=True), decoder=decoders.ByteLevel(),
       trainer_kw=dict(initial_alphabet=pre_tokenizers.ByteLevel.alphabet()), specials=["<s>", "</s>"],
       post=processors.Sequence([processors.ByteLevel(), processors.RobertaProcessing(("</s>", 1), ("<s>", 0))]))

synthetic = []
for c in configs:
    try:
        tok = Tokenizer(models.BPE(**c["model_kw"]))
        if c["normalizer"] is not None:
            tok.normalizer = c["normalizer"]
        if c["pre"] is not None:
            tok.pre_tokenizer = c["pre"]
        specials = [s if isinstance(s, AddedToken) else AddedToken(s, special=True) for s in c["specials"]]
        trainer = BpeTrainer(vocab_size=c["trainer_kw"].pop("vocab_size", 500), special_tokens=specials,
                             show_progress=False, **c["trainer_kw"])
        tok.train_from_iterator(corpus, trainer)
        if c["added"]:
            tok.add_tokens(list(c["added"]))
        if c["decoder"] is not None:
            tok.decoder = c["decoder"]
        if c["post"] is not None:
            tok.post_processor = c["post"]
        js = tok.to_str()
        if c["edit"] is not None:
            js = c["edit"](js)
        tok = Tokenizer.from_str(js)
        res = run_cases(tok, short_texts, inputs["ids"]["synthetic"])
        res["name"] = c["name"]
        res["tokenizer_json"] = js
        synthetic.append(res)
        print(c["name"], "ok", flush=True)
    except BaseException as e:
        print(c["name"], "FAILED", type(e).__name__, e, flush=True)
dump("synthetic.json.gz", {"tokenizers_version": tokenizers.__version__, "configs": synthetic})
print("all done")

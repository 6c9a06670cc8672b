#!/usr/bin/env python3
"""Checks our trained tokenizer against the Hugging Face tokenizers library.

Usage: python3 hfcheck.py DIR

DIR is the output of `go run ./internal/gocorpus/cmd/gocorpus -out DIR`: it holds
tokenizer/tokenizer.json and heldout.jsonl.gz, one JSON object {"path", "text", "ids"} per
held-out file (ids from our Go encoder, without BOS/EOS), then a few synthetic texts whose
paths start with "synthetic/". The library encodes every text with add_special_tokens=False
and special tokens treated as text (as our encoder does by default), and the ids must be
equal; decoding must give the text back. Exits 1 on any difference.
"""
import gzip
import json
import os
import sys

import tokenizers


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    d = sys.argv[1]
    tok = tokenizers.Tokenizer.from_file(os.path.join(d, "tokenizer", "tokenizer.json"))
    # Text that spells "<|eos|>" is ordinary text, as with our EncodeOptions{} default.
    tok.encode_special_tokens = True
    with gzip.open(os.path.join(d, "heldout.jsonl.gz"), "rt", encoding="utf-8") as f:
        recs = [json.loads(line) for line in f]
    print(f"tokenizers {tokenizers.__version__}; vocabulary {tok.get_vocab_size(with_added_tokens=True)}")
    encs = tok.encode_batch([r["text"] for r in recs], add_special_tokens=False)
    failed = False
    for kind in ("heldout", "synthetic"):
        group = [(r, e) for r, e in zip(recs, encs) if r["path"].startswith("synthetic/") == (kind == "synthetic")]
        same, round_trip, nbytes, ntok, first = 0, 0, 0, 0, None
        for r, e in group:
            nbytes += len(r["text"].encode("utf-8"))
            ntok += len(e.ids)
            if e.ids == r["ids"]:
                same += 1
            elif first is None:
                i = next((i for i, (a, b) in enumerate(zip(e.ids, r["ids"])) if a != b), min(len(e.ids), len(r["ids"])))
                first = (r["path"], i, e.ids[max(0, i - 3):i + 5], r["ids"][max(0, i - 3):i + 5],
                         [tok.id_to_token(x) for x in e.ids[max(0, i - 3):i + 5]])
            if tok.decode(r["ids"], skip_special_tokens=False) == r["text"]:
                round_trip += 1
        print(f"{kind}: {len(group)} texts, {nbytes} bytes, {ntok} HF tokens; identical ids: {same}; "
              f"HF decode of our ids exact: {round_trip}")
        if first:
            path, i, hf, ours, toks = first
            print(f"  first mismatch: {path} at token {i}: HF {hf} {toks} vs ours {ours}")
        failed |= same != len(group) or round_trip != len(group)
    # With special tokens requested, the post-processor puts BOS first.
    bos = tok.token_to_id("<|bos|>")
    with_bos = tok.encode(recs[0]["text"], add_special_tokens=True).ids
    ok = with_bos == [bos] + recs[0]["ids"]
    print(f"add_special_tokens=True gives BOS + ids: {ok}")
    failed |= not ok
    print("FAIL" if failed else "OK")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()

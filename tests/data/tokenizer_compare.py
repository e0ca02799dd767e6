"""strata's tokenizer against Hugging Face `tokenizers` on tokenizers trained here.

Trains small byte-level BPE tokenizers with `tokenizers` (GPT-2 style, GPT-2 style with
add_prefix_space and merges written as "a b" strings, Llama-3 style with the Split
pattern, special tokens and a BOS template, and with ignore_merges), then checks that
strata encodes every case to the same ids and decodes id lists to the same text.

  tokenizer_compare.py TOOL WORKDIR [FAMILY...]
TOOL is strata_tokenize_ids; FAMILY is gpt2, gpt2_prefix, llama3, splits (every Split
behaviour, invert, a literal pattern, empty matches), gpt2_transformers (the
GPT-2 tokenizer's file as `transformers`' GPT2TokenizerFast writes it from vocab.json and
merges.txt, the form of GPT-2's own file) (all by default), or
file:PATH to check a tokenizer.json made elsewhere (`strata tokenizer train`).
"""
import json
import os
import random
import subprocess
import sys

from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, processors, trainers

FORTUNES = "/usr/share/games/fortunes"
GPT2_PATTERN = r"""'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"""
LLAMA3_PATTERN = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*"
                  r"|\s*[\r\n]+|\s+(?!\S)|\s+")
SPECIALS = ["<|begin_of_text|>", "<|end_of_text|>", "<|eot_id|>"]


def fortune_files():
    names = sorted(n for n in os.listdir(FORTUNES)
                   if not n.endswith(".dat") and os.path.isfile(os.path.join(FORTUNES, n))
                   and not os.path.islink(os.path.join(FORTUNES, n)))
    return [os.path.join(FORTUNES, n) for n in names]


def corpus_lines():
    for f in fortune_files():
        with open(f, "rb") as fh:
            yield from fh.read().decode("utf-8", errors="replace").splitlines(keepends=True)


def train(family, vocab_size=1200):
    tok = Tokenizer(models.BPE())
    if family == "llama3":
        tok.pre_tokenizer = pre_tokenizers.Sequence([
            pre_tokenizers.Split(Regex(LLAMA3_PATTERN), behavior="isolated", invert=False),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
        specials = SPECIALS
    elif family == "splits":  # every Split behaviour, invert, a literal pattern, ByteLevel's prefix space
        tok.pre_tokenizer = pre_tokenizers.Sequence([
            pre_tokenizers.Split("\n", behavior="merged_with_previous"),
            pre_tokenizers.Split(Regex(r"\p{N}"), behavior="contiguous"),
            pre_tokenizers.Split(Regex(r"[,;:]"), behavior="merged_with_next"),
            pre_tokenizers.Split(Regex(r"[^;]+"), behavior="removed", invert=True),  # drops the ';' runs
            pre_tokenizers.Split(Regex(r"\s+"), behavior="isolated"),
            pre_tokenizers.Split(Regex(r"(?<=[a-z])(?=[A-Z])"), behavior="isolated"),  # empty matches
            pre_tokenizers.ByteLevel(add_prefix_space=True, use_regex=False)])
        specials = ["<|endoftext|>"]
    else:
        tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=(family == "gpt2_prefix"))
        specials = ["<|endoftext|>"]
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=specials, show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(corpus_lines(), trainer=trainer)
    if family == "llama3":
        bos = tok.token_to_id("<|begin_of_text|>")
        tok.post_processor = processors.TemplateProcessing(
            single="<|begin_of_text|> $A", pair="<|begin_of_text|> $A $B",
            special_tokens=[("<|begin_of_text|>", bos)])
        # An added token that is neither special nor in the model's vocabulary, with flags.
        from tokenizers import AddedToken
        tok.add_tokens([AddedToken("stratum", single_word=True, lstrip=True, rstrip=False)])
        tok.add_tokens([AddedToken("<sep>", lstrip=True, rstrip=True, normalized=False)])
    else:
        tok.post_processor = processors.ByteLevel(trim_offsets=False)
    return tok


def edit_json(path, family):
    """The file forms strata must read besides what tokenizers 0.20 writes."""
    with open(path, encoding="utf-8") as fh:
        j = json.load(fh)
    if family == "gpt2_prefix":  # merges as "a b" strings (tokenizers < 0.20, GPT-2's own file)
        j["model"]["merges"] = [" ".join(m) for m in j["model"]["merges"]]
    if family == "llama3":  # Llama 3's tokenizer.json sets it
        j["model"]["ignore_merges"] = True
    with open(path, "w", encoding="utf-8") as fh:
        json.dump(j, fh, ensure_ascii=False)


def transformers_gpt2(work):
    from transformers import GPT2TokenizerFast
    j = json.loads(train("gpt2").to_str())
    os.makedirs(os.path.join(work, "gpt2_files"), exist_ok=True)
    vocab_path = os.path.join(work, "gpt2_files", "vocab.json")
    merges_path = os.path.join(work, "gpt2_files", "merges.txt")
    with open(vocab_path, "w", encoding="utf-8") as fh:
        json.dump(j["model"]["vocab"], fh, ensure_ascii=False)
    with open(merges_path, "w", encoding="utf-8") as fh:
        fh.write("#version: 0.2\n" + "".join(f"{a} {b}\n" for a, b in j["model"]["merges"]))
    out = os.path.join(work, "gpt2_transformers")
    GPT2TokenizerFast(vocab_file=vocab_path, merges_file=merges_path).save_pretrained(out)
    return os.path.join(out, "tokenizer.json")


def cases(family):
    """(name, bytes) pairs."""
    out = []
    for f in fortune_files():
        with open(f, "rb") as fh:
            out.append(("fortunes/" + os.path.basename(f), fh.read()))
    special = "<|endoftext|>" if "llama3" not in family else "<|begin_of_text|>"
    texts = {
        "empty": "",
        "one_space": " ",
        "whitespace_runs": "a" + " " * 1000 + "b\n\n\n   \t\t x  \n" + "\n" * 300 + " " * 5000 + "\r\n\r\n  end   ",
        "only_spaces": " " * 70000,
        "nel_and_ideographic_space": "a\u0085b \u3000c\u00a0d\u2028e  \u0085 f",
        "emoji": "I \u2764\ufe0f tokens \U0001F600\U0001F468\u200d\U0001F469\u200d\U0001F467 \U0001F1EB\U0001F1F7!",
        "combining": "Cafe\u0301 nai\u0308ve \u1e9b\u0323 Z\u0351\u0362a\u0336\u0327l\u0334g\u0334o\u0358",
        "cjk": "\u65e5\u672c\u8a9e\u306e\u30c6\u30ad\u30b9\u30c8\u3002\u4e2d\u6587\u5b57\u7b26 \ud55c\uad6d\uc5b4 123\u4e00\u4e8c",
        "numbers": "1 12 123 1234 12345 3.14159 \u0663\u0664 \u00b2\u2167",
        "contractions": "I'm you're he'll she'd we've it's DON'T I'M 'S 'sX",
        "special_inside": f"hello{special}world {special} {special}{special}x<|endo",
        "special_only": special,
        "added_flags": "a stratum b xstratum stratumx  stratum\t<sep>  q <sep>z",
        "unicode15": "a\U00031350b \U0001FAE8x \u0C5Dy",
        "split_edges": "camelCaseWord xxabxx 12ab34;;c,d\n\nx 1,2,3 ; end\n",
        "controls": "\x00\x01\x7f\x1b[31mred\x1b[0m\x0b\x0c",
    }
    out += [(k, v.encode("utf-8")) for k, v in texts.items()]
    out += [
        ("invalid_lone", b"abc\xff\xfe def \x80 g"),
        ("invalid_truncated", b"caf\xc3 \xe2\x82 \xf0\x9f\x98 end\xe2"),
        ("invalid_surrogate_overlong", b"\xed\xa0\x80 \xc0\xaf \xe0\x80\xaf \xf4\x90\x80\x80 x"),
    ]
    rng = random.Random(0)
    out.append(("random_bytes", bytes(rng.randrange(256) for _ in range(20000))))
    words = open(fortune_files()[0], "rb").read().decode("utf-8", errors="replace").split()
    line = []
    n = 0
    while n < 10_000_000:
        w = words[rng.randrange(len(words))]
        line.append(w)
        n += len(w) + 1
    out.append(("ten_mb_line", " ".join(line).encode("utf-8")))
    return out


def run_tool(tool, mode, tok_path, files, extra=()):
    res = subprocess.run([tool, mode, tok_path, *extra, *files], capture_output=True, check=False)
    if res.returncode != 0:
        sys.exit(f"{tool} {mode} failed ({res.returncode}): {res.stderr.decode(errors='replace')}")
    return res.stdout.decode().split("\n")[:len(files)]


def check_family(tool, work, family):
    if family.startswith("file:"):
        path = family[len("file:"):]
        family = os.path.splitext(os.path.basename(path))[0]
    elif family == "gpt2_transformers":
        path = transformers_gpt2(work)
    else:
        tok = train(family)
        path = os.path.join(work, f"{family}.json")
        tok.save(path)
        edit_json(path, family)
    ref = Tokenizer.from_file(path)
    case_list = cases(family)
    files = []
    for k, (name, data) in enumerate(case_list):
        p = os.path.join(work, f"{family}_case{k}.txt")
        with open(p, "wb") as fh:
            fh.write(data)
        files.append(p)
    failures = 0
    for add_special in (False, True):
        # `tokenizers` needs ~7 s for the 10 MB line: it is encoded once, without specials.
        chosen = [k for k, (name, _) in enumerate(case_list) if not (add_special and name == "ten_mb_line")]
        got = run_tool(tool, "encode", path, [files[k] for k in chosen], ["--add-special"] if add_special else [])
        texts = [case_list[k][1].decode("utf-8", errors="replace") for k in chosen]
        want = ref.encode_batch(texts, add_special_tokens=add_special)
        for (name, _), g, w in zip([case_list[k] for k in chosen], got, want):
            g_ids = [int(x) for x in g.split()]
            if g_ids != w.ids:
                failures += 1
                i = next((i for i, (a, b) in enumerate(zip(g_ids, w.ids)) if a != b), min(len(g_ids), len(w.ids)))
                print(f"FAIL {family} encode {name} add_special={add_special}: {len(g_ids)} vs {len(w.ids)} ids, "
                      f"first difference at {i}: strata {g_ids[i:i + 8]} tokenizers {w.ids[i:i + 8]}")
    # Decode: ids of the cases, random id lists (most do not form UTF-8), and special tokens.
    rng = random.Random(1)
    n = ref.get_vocab_size(with_added_tokens=True)
    id_lists = [ref.encode(data.decode("utf-8", errors="replace")).ids for _, data in case_list[-8:-1]]
    id_lists += [[rng.randrange(n) for _ in range(rng.randrange(1, 50))] for _ in range(300)]
    id_lists += [[], [n + 5, 3, n + 100], list(range(n))]
    id_files = []
    for k, ids in enumerate(id_lists):
        p = os.path.join(work, f"{family}_ids{k}.txt")
        with open(p, "w") as fh:
            fh.write(" ".join(map(str, ids)))
        id_files.append(p)
    got = run_tool(tool, "decode", path, id_files)
    for k, (ids, g) in enumerate(zip(id_lists, got)):
        want = ref.decode(ids).encode("utf-8").hex()
        if g != want:
            failures += 1
            print(f"FAIL {family} decode list {k} ({len(ids)} ids): strata {bytes.fromhex(g)[:60]!r} "
                  f"tokenizers {bytes.fromhex(want)[:60]!r}")
    print(f"{family}: {len(case_list)} texts x 2, {len(id_lists)} id lists, vocab {n}: "
          f"{'OK' if failures == 0 else str(failures) + ' failures'}")
    return failures


def main():
    tool, work = sys.argv[1], sys.argv[2]
    families = sys.argv[3:] or ["gpt2", "gpt2_prefix", "llama3", "splits", "gpt2_transformers"]
    os.makedirs(work, exist_ok=True)
    failures = sum(check_family(tool, work, f) for f in families)
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()

"""Tokenizer tests: ingot-tokenize against llama.cpp's ids (fixture) and the HF tokenizers library (live).

Fixtures come from tests/fixtures/make_corpus.py and make_tokenizer_fixtures.py (see their headers).
"""
import gzip
import json
import re
import shutil
import time

import pytest

from conftest import ROOT, run

FIX = ROOT / "tests" / "fixtures"
CORPUS = FIX / "tokenizer_corpus.txt"
TOKS = FIX / "tokenizers"
GGUF = ROOT / "models" / "smollm2" / "SmolLM2-135M-Instruct.Q4_1.gguf"
JSON_TOKENIZERS = ["smollm2-from-gguf", "trained-llama3-split", "trained-qwen2-split", "trained-gpt2-prefix"]
# ByteLevel(add_prefix_space) adds a space in front of every piece, so decoding cannot give the text back.
NO_ROUND_TRIP = {"trained-gpt2-prefix"}
STRIPPING = re.compile(r"\s<mask>|<tool>\s")


def unescape(line):
    out, i = [], 0
    while i < len(line):
        if line[i] == "\\" and i + 1 < len(line) and line[i + 1] in "n\\":
            out.append("\n" if line[i + 1] == "n" else "\\")
            i += 2
        else:
            out.append(line[i])
            i += 1
    return "".join(out)


def corpus():
    lines = CORPUS.read_bytes().decode("utf-8").split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    return [unescape(l) for l in lines]


def tool(built):
    return built / "tools" / "ingot-tokenize"


def encode(built, source, infile, *flags, check=True):
    """Runs ingot-tokenize; returns the list of id lists (one per input line)."""
    r = run([tool(built), *source, *flags, infile])
    if check:
        assert r.returncode == 0, f"ingot-tokenize failed ({r.returncode}):\n{r.stderr[-4000:]}"
    return [json.loads(l) for l in r.stdout.splitlines()], r


def compare(name, got, want, lines):
    """Asserts identical id lists, reporting every mismatch by line number with both lists."""
    assert len(got) == len(want), f"{name}: {len(got)} outputs for {len(want)} lines"
    bad = [i for i in range(len(want)) if got[i] != want[i]]
    msg = "\n".join(f"{name} line {i + 1} {lines[i]!r}:\n  ingot: {got[i]}\n  want:  {want[i]}" for i in bad[:20])
    assert not bad, f"{name}: {len(bad)}/{len(want)} lines differ\n{msg}"


@pytest.fixture(scope="module")
def lines():
    return corpus()


@pytest.fixture(scope="module")
def gguf_path():
    if not GGUF.exists():
        pytest.skip(f"{GGUF} missing: run scripts/fetch_smollm2.sh")
    return GGUF


def load_llamacpp():
    rows = [json.loads(l) for l in gzip.open(TOKS / "smollm2_llamacpp.jsonl.gz", "rt", encoding="utf-8").read().splitlines()]
    assert "meta" in rows[0]
    return rows[1:]


@pytest.mark.parametrize("option", ["plain", "special"])
def test_gguf_matches_llamacpp(built, lines, gguf_path, option):
    rows = load_llamacpp()
    assert len(rows) == len(lines), "fixture out of date with the corpus: rerun make_tokenizer_fixtures.py"
    flags = ["--add-special", "--parse-special"] if option == "special" else []
    got, _ = encode(built, ["--gguf", gguf_path], CORPUS, *flags)
    compare(f"gguf/{option}", got, [r[option] for r in rows], lines)


@pytest.mark.parametrize("name", JSON_TOKENIZERS)
@pytest.mark.parametrize("add_special", [False, True])
def test_json_matches_hf(built, lines, name, add_special):
    tokenizers = pytest.importorskip("tokenizers")
    path = TOKS / name / "tokenizer.json"
    hf = tokenizers.Tokenizer.from_file(str(path))
    want = [e.ids for e in hf.encode_batch(lines, add_special_tokens=add_special)]
    flags = ["--parse-special"] + (["--add-special"] if add_special else [])
    got, _ = encode(built, ["--json", path], CORPUS, *flags)
    compare(f"{name}/add_special={add_special}", got, want, lines)


@pytest.mark.parametrize("source", ["gguf", *[n for n in JSON_TOKENIZERS if n not in NO_ROUND_TRIP]])
def test_decode_round_trip(built, lines, gguf_path, source):
    src = ["--gguf", gguf_path] if source == "gguf" else ["--json", TOKS / source / "tokenizer.json"]
    for flags in ([], ["--parse-special"]):
        r = run([tool(built), *src, *flags, "--decode", CORPUS])
        bad = [int(m) for m in re.findall(r"line (\d+): decode mismatch", r.stderr)]
        # The trained tokenizers' <mask> (lstrip) and <tool> (rstrip) swallow the whitespace
        # beside them, as in HF, so those lines cannot come back; every other line must.
        unexpected = [i for i in bad if source == "gguf" or not STRIPPING.search(lines[i - 1])]
        assert not unexpected, f"{source} {flags}: decode mismatch on lines {unexpected}"
        assert r.returncode == 0 or bad, f"{source} {flags}: {r.stderr[-4000:]}"


def test_encode_speed(built, tmp_path, gguf_path, lines):
    # One 40 KB line (corpus text joined, newlines escaped) must encode well under a second.
    text = " ".join(lines)
    while len(text.encode()) < 40_000:
        text += " " + text
    text = text.encode()[:40_000].decode("utf-8", "ignore")
    f = tmp_path / "big.txt"
    f.write_text(text.replace("\\", "\\\\").replace("\n", "\\n") + "\n", encoding="utf-8")
    t0 = time.monotonic()
    got, _ = encode(built, ["--gguf", gguf_path], f)
    elapsed = time.monotonic() - t0
    assert len(got) == 1 and len(got[0]) > 5000
    assert elapsed < 3.0, f"40 KB took {elapsed:.2f}s (including loading the vocabulary)"


STREAM_TEST = r"""
/* Streaming decode test: multi-byte characters split across tokens. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "tokenizer.h"
static int valid_utf8(const unsigned char *s, size_t n) {
    for (size_t i = 0; i < n;) {
        unsigned char b = s[i];
        size_t k = b < 0x80 ? 1 : (b >> 5) == 6 ? 2 : (b >> 4) == 14 ? 3 : (b >> 3) == 30 ? 4 : 0;
        if (!k || i + k > n) return 0;
        for (size_t j = 1; j < k; j++) if ((s[i + j] & 0xC0) != 0x80) return 0;
        i += k;
    }
    return 1;
}
/* The token of one raw byte: a lone byte is one pre-token without pairs to merge. */
static int byte_tok(const tok_tokenizer *t, unsigned char b) {
    int32_t *ids; size_t n; char err[256]; char c = (char)b;
    if (tok_encode(t, &c, 1, 0, 0, &ids, &n, err, sizeof err) || n != 1) return -1;
    int id = ids[0]; free(ids); return id;
}
int main(int argc, char **argv) {
    char err[512];
    if (argc != 2) return 2;
    tok_tokenizer *t = tok_from_json_file(argv[1], err, sizeof err);
    if (!t) { fprintf(stderr, "%s\n", err); return 1; }
    /* E2 82 AC is the euro sign, F0 9F 98 .. an emoji cut short. */
    int e2 = byte_tok(t, 0xE2), x82 = byte_tok(t, 0x82), xac = byte_tok(t, 0xAC);
    int f0 = byte_tok(t, 0xF0), x9f = byte_tok(t, 0x9F), x98 = byte_tok(t, 0x98), a = byte_tok(t, 'a');
    if (e2 < 0 || x82 < 0 || xac < 0 || f0 < 0 || x9f < 0 || x98 < 0 || a < 0) { fprintf(stderr, "byte tokens missing\n"); return 1; }
    int32_t *ids; size_t n;
    if (tok_encode(t, "\xf0\x9f\x98\x80", 4, 0, 0, &ids, &n, err, sizeof err)) return 1;
    int seq[] = {a, e2, x82, xac, a, e2, x82, a, f0, x9f, x98, a, e2};
    char out[64], all[256]; size_t total = 0;
    tok_stream s; tok_stream_init(&s);
    for (size_t i = 0; i < sizeof seq / sizeof seq[0]; i++) {
        size_t k = tok_stream_push(&s, t, seq[i], 1, out, sizeof out);
        if (!valid_utf8((unsigned char *)out, k)) { fprintf(stderr, "invalid UTF-8 after token %zu\n", i); return 1; }
        if (i == 1 || i == 2) { if (k != 0) { fprintf(stderr, "emitted a partial character\n"); return 1; } }
        memcpy(all + total, out, k); total += k;
    }
    size_t k = tok_stream_flush(&s, out, sizeof out);
    memcpy(all + total, out, k); total += k;
    /* a EURO a U+FFFD(E2 82 cut by 'a') a U+FFFD(F0 9F 98 cut by 'a') a U+FFFD(flushed E2) */
    const char *want = "a\xe2\x82\xac" "a\xef\xbf\xbd" "a\xef\xbf\xbd" "a\xef\xbf\xbd";
    if (total != strlen(want) || memcmp(all, want, total)) { fprintf(stderr, "stream gave '%.*s'\n", (int)total, all); return 1; }
    /* Token-by-token over a real encoding of an emoji: pieces come out whole. */
    tok_stream_init(&s); total = 0;
    for (size_t i = 0; i < n; i++) {
        k = tok_stream_push(&s, t, ids[i], 0, out, sizeof out);
        if (!valid_utf8((unsigned char *)out, k)) return 1;
        memcpy(all + total, out, k); total += k;
    }
    if (total != 4 || memcmp(all, "\xf0\x9f\x98\x80", 4)) { fprintf(stderr, "emoji stream mismatch\n"); return 1; }
    free(ids); tok_free(t);
    puts("ok");
    return 0;
}
"""


def test_stream_decode_utf8(built, tmp_path):
    src = tmp_path / "stream_test.c"
    src.write_text(STREAM_TEST)
    exe = tmp_path / "stream_test"
    san = "san" in built.name
    flags = ["-std=c11", "-D_GNU_SOURCE", "-Wall", "-Wextra", "-Werror", "-g"] + [f"-I{ROOT / 'runtime' / d}" for d in ("text", "load")]
    if san:
        flags += ["-fsanitize=address,undefined", "-fno-sanitize-recover=all"]
    cc = shutil.which("cc") or "gcc"
    r = run([cc, *flags, src, "-o", exe, built / "libingot.a", "-lcjson", "-lutf8proc", "-lpcre2-8", "-lm", "-pthread"])
    assert r.returncode == 0, r.stderr
    r = run([exe, TOKS / "smollm2-from-gguf" / "tokenizer.json"])
    assert r.returncode == 0 and r.stdout.strip() == "ok", r.stdout + r.stderr


def write_json(tmp_path, name, data):
    d = tmp_path / name
    d.mkdir()
    p = d / "tokenizer.json"
    p.write_text(data if isinstance(data, str) else json.dumps(data), encoding="utf-8")
    return p


def small_tokenizer():
    return json.loads((TOKS / "trained-qwen2-split" / "tokenizer.json").read_text(encoding="utf-8"))


def expect_error(built, path, tmp_path, *needles):
    inp = tmp_path / "in.txt"
    inp.write_text("hello\n")
    r = run([tool(built), "--json", path, inp])
    assert r.returncode != 0, f"accepted {path}"
    for n in needles:
        assert n in r.stderr, f"error message {r.stderr!r} lacks {n!r}"
    assert "Sanitizer" not in r.stderr and "runtime error" not in r.stderr


def test_error_unknown_pattern(built, tmp_path):
    data = small_tokenizer()
    data["pre_tokenizer"]["pretokenizers"][0]["pattern"]["Regex"] = r"\w+|[^\w\s]+"
    expect_error(built, write_json(tmp_path, "pat", data), tmp_path, "unsupported Split regex pattern", r"\w+|[^\w\s]+")


def test_error_unknown_pretokenizer(built, tmp_path):
    data = small_tokenizer()
    data["pre_tokenizer"] = {"type": "Whitespace"}
    expect_error(built, write_json(tmp_path, "ws", data), tmp_path, "pre_tokenizer", "Whitespace")


def test_error_malformed_json(built, tmp_path):
    text = (TOKS / "trained-qwen2-split" / "tokenizer.json").read_text(encoding="utf-8")
    expect_error(built, write_json(tmp_path, "bad", text[: len(text) // 2]), tmp_path, "malformed JSON")


def test_error_missing_vocab(built, tmp_path):
    data = small_tokenizer()
    del data["model"]["vocab"]
    expect_error(built, write_json(tmp_path, "novocab", data), tmp_path, "vocab")


def test_error_ids_with_too_many_holes(built, tmp_path):
    """Every id up to the largest gets an entry: a few tokens with an id near the 2^24 limit would
    cost millions of them (found by fuzz_tokenizer_json as a 12 s input), so they are refused."""
    data = small_tokenizer()
    data["added_tokens"].append({"id": 5_000_000, "content": "<far>", "single_word": False, "lstrip": False,
                                 "rstrip": False, "normalized": False, "special": True})
    expect_error(built, write_json(tmp_path, "holes", data), tmp_path, "too many holes", "5000000")


def test_error_normalizer(built, tmp_path):
    data = small_tokenizer()
    data["normalizer"] = {"type": "NFC"}
    expect_error(built, write_json(tmp_path, "norm", data), tmp_path, "normalizer", "NFC")


def test_invalid_utf8_does_not_crash(built, tmp_path, gguf_path):
    inp = tmp_path / "bad.txt"
    inp.write_bytes(b"ok \xff\xfe abc \xc3 \xe2\x82 x\xf0\x9f\x98 \xed\xa0\x80 \xc0\xaf 12\x80 \n\xf4\x90\x80\x80'\xff\n")
    for src in (["--gguf", gguf_path], ["--json", TOKS / "trained-llama3-split" / "tokenizer.json"]):
        got, r = encode(built, src, inp, "--parse-special")
        assert len(got) == 2 and all(got), r.stderr
        assert "Sanitizer" not in r.stderr and "runtime error" not in r.stderr


def write_gguf(path, model="gpt2", pre="smollm"):
    """A tensor-less GGUF holding only a tiny byte-level tokenizer."""
    gguf = pytest.importorskip("gguf")
    w = gguf.GGUFWriter(str(path), "llama")
    alphabet = [chr(c) for c in range(33, 127)] + ["Ġ"]
    tokens = ["<|endoftext|>", "<tool>"] + alphabet + ["he", "Ġhe"]
    w.add_tokenizer_model(model)
    if pre is not None:
        w.add_tokenizer_pre(pre)
    w.add_token_list(tokens)
    w.add_token_types([3, 4] + [1] * (len(tokens) - 2))
    w.add_token_merges(["h e", "Ġ he"])
    w.add_bos_token_id(0)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


def test_gguf_tiny_and_errors(built, tmp_path):
    inp = tmp_path / "in.txt"
    inp.write_text("he<tool> he<|endoftext|>\n")
    ok = write_gguf(tmp_path / "ok.gguf")
    got, r = encode(built, ["--gguf", ok], inp, "--decode")
    # <tool> is user-defined: matched even without parse_special; the control token is not.
    ids = {t: i for i, t in enumerate(["<|endoftext|>", "<tool>"] + [chr(c) for c in range(33, 127)] + ["Ġ", "he", "Ġhe"])}
    assert got == [[ids["he"], 1, ids["Ġhe"]] + [ids[c] for c in "<|endoftext|>"]], got
    got, r = encode(built, ["--gguf", ok], inp, "--parse-special")
    assert got == [[ids["he"], 1, ids["Ġhe"], 0]], got
    for kw, needle in [({"model": "llama"}, '"llama"'), ({"pre": "mystery-pre"}, '"mystery-pre"')]:
        bad = write_gguf(tmp_path / f"bad-{needle.strip(chr(34))}.gguf", **kw)
        r = run([tool(built), "--gguf", bad, inp])
        assert r.returncode != 0 and needle in r.stderr, r.stderr


# ---------- SentencePiece ("llama" GGUF vocabulary) ----------

SPM = TOKS / "spm"


def spm_rows():
    rows = [json.loads(l) for l in gzip.open(SPM / "llamacpp.jsonl.gz", "rt", encoding="utf-8").read().splitlines()]
    assert "meta" in rows[0]
    return rows[1:]


def spm_lines():
    raw = (SPM / "lines.txt").read_bytes().split(b"\n")[:-1]
    return [l.replace(b"\\\\", b"\0").replace(b"\\n", b"\n").replace(b"\0", b"\\") for l in raw]


@pytest.mark.parametrize("option", ["plain", "special"])
def test_spm_gguf_matches_llamacpp(built, option):
    rows, lines = spm_rows(), spm_lines()
    assert len(rows) == len(lines), "fixture out of date: rerun tests/fixtures/make_spm_fixtures.py"
    flags = ["--add-special", "--parse-special"] if option == "special" else []
    got, _ = encode(built, ["--gguf", SPM / "spm.gguf"], SPM / "lines.txt", *flags)
    compare(f"spm/{option}", got, [r[option] for r in rows], lines)


@pytest.mark.parametrize("option", ["plain", "special"])
def test_spm_decode_like_llamacpp(built, option):
    # ingot decodes a line back exactly where llama.cpp's detokenizer does, except that text which
    # is not valid UTF-8 comes back with U+FFFD (llama.cpp returns the raw bytes).
    rows, lines = spm_rows(), spm_lines()
    flags = ["--add-special", "--parse-special"] if option == "special" else []
    r = run([tool(built), "--gguf", SPM / "spm.gguf", *flags, "--decode", SPM / "lines.txt"])
    assert "Sanitizer" not in r.stderr and "runtime error" not in r.stderr, r.stderr[-4000:]
    got = {int(m) - 1 for m in re.findall(r"line (\d+): decode mismatch", r.stderr)}

    def valid(b):
        try:
            b.decode("utf-8")
            return True
        except UnicodeDecodeError:
            return False

    want = {i for i, row in enumerate(rows) if not row[f"{option}_back"] or not valid(lines[i])}
    assert got == want, f"mismatches only in ingot: {sorted(got - want)[:20]}, only in llama.cpp: {sorted(want - got)[:20]}"
    if option == "plain":
        # Only lines with user-defined tokens (the text after one gets a space prefix) and invalid UTF-8.
        assert len(want) < len(rows) // 10, "most lines must round-trip without BOS"


def write_spm_gguf(path, scores="ok", bad_type=False):
    """A tensor-less GGUF with a tiny SentencePiece vocabulary, broken as asked."""
    gguf = pytest.importorskip("gguf")
    w = gguf.GGUFWriter(str(path), "llama")
    tokens = ["<unk>", "<s>", "</s>"] + [f"<0x{b:02X}>" for b in range(256)] + ["▁", "h", "e", "he", "▁he"]
    types = [2, 3, 3] + [6] * 256 + [1] * 5
    if bad_type:
        types[-1] = 9
    w.add_tokenizer_model("llama")
    w.add_token_list(tokens)
    if scores == "ok":
        w.add_token_scores([0.0] * 259 + [-1.0, -2.0, -3.0, -0.5, -0.25])
    elif scores == "short":
        w.add_token_scores([0.0] * 10)
    w.add_token_types(types)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


def test_spm_tiny_and_errors(built, tmp_path):
    inp = tmp_path / "in.txt"
    inp.write_bytes("he hé\n".encode())
    got, _ = encode(built, ["--gguf", write_spm_gguf(tmp_path / "ok.gguf")], inp, "--add-special")
    # BOS (default id 1), "▁he", "▁", "h", then é as byte fallback <0xC3> <0xA9>.
    assert got == [[1, 263, 259, 260, 3 + 0xC3, 3 + 0xA9]], got
    for kw, needle in [({"scores": None}, "tokenizer.ggml.scores"), ({"scores": "short"}, "10 scores for 264 tokens"),
                       ({"bad_type": True}, "token_type[263] is 9")]:
        bad = write_spm_gguf(tmp_path / f"bad{len(needle)}.gguf", **kw)
        r = run([tool(built), "--gguf", bad, inp])
        assert r.returncode != 0 and needle in r.stderr and len(r.stderr.strip().splitlines()) == 1, r.stderr
        assert "Sanitizer" not in r.stderr and "runtime error" not in r.stderr


def valid_utf8(b):
    try:
        b.decode("utf-8")
        return True
    except UnicodeDecodeError:
        return False


@pytest.mark.parametrize("name", ["hf-legacy", "hf-metaspace"])
@pytest.mark.parametrize("add_special", [False, True])
def test_spm_json_matches_hf(built, tmp_path, name, add_special):
    # The same SentencePiece model as tokenizer.json (byte_fallback BPE); lines that are not valid
    # UTF-8 cannot be given to the library as they are, so they are left out.
    tokenizers = pytest.importorskip("tokenizers")
    path = SPM / name / "tokenizer.json"
    hf = tokenizers.Tokenizer.from_file(str(path))
    lines = [l for l in spm_lines() if valid_utf8(l)]
    inp = tmp_path / "lines.txt"
    inp.write_bytes(b"".join(l.replace(b"\\", b"\\\\").replace(b"\n", b"\\n") + b"\n" for l in lines))
    text = [l.decode("utf-8") for l in lines]
    want = [e.ids for e in hf.encode_batch(text, add_special_tokens=add_special)]
    flags = ["--parse-special"] + (["--add-special"] if add_special else [])
    got, _ = encode(built, ["--json", path], inp, *flags)
    compare(f"{name}/add_special={add_special}", got, want, text)
    # Decoding gives the line back exactly where the library's decode does.
    r = run([tool(built), "--json", path, *flags, "--decode", inp])
    assert "Sanitizer" not in r.stderr and "runtime error" not in r.stderr, r.stderr[-4000:]
    bad = {int(m) - 1 for m in re.findall(r"line (\d+): decode mismatch", r.stderr)}
    hf_bad = {i for i, ids in enumerate(want) if hf.decode(ids, skip_special_tokens=False) != text[i]}
    assert bad == hf_bad, f"only ingot: {sorted(bad - hf_bad)[:20]}, only HF: {sorted(hf_bad - bad)[:20]}"


def test_spm_json_errors(built, tmp_path):
    data = json.loads((SPM / "hf-legacy" / "tokenizer.json").read_text(encoding="utf-8"))
    data["decoder"] = {"type": "ByteLevel"}
    expect_error(built, write_json(tmp_path, "dec", data), tmp_path, "SentencePiece decoder")
    data = json.loads((SPM / "hf-metaspace" / "tokenizer.json").read_text(encoding="utf-8"))
    data["pre_tokenizer"]["replacement"] = "_"
    expect_error(built, write_json(tmp_path, "rep", data), tmp_path, "Metaspace replacement")


def write_spm_llama(path):
    """A tiny random Llama (F32) carrying the SentencePiece fixture vocabulary
    (written by tests/fixtures/make_kquant_models.py's GGUF writer)."""
    gguf = pytest.importorskip("gguf")
    import sys
    sys.path.insert(0, str(FIX))
    from make_kquant_models import write_f32_gguf
    f = gguf.GGUFReader(str(SPM / "spm.gguf")).fields
    tokens = [bytes(f["tokenizer.ggml.tokens"].parts[i]).decode() for i in f["tokenizer.ggml.tokens"].data]
    scores = [float(f["tokenizer.ggml.scores"].parts[i][0]) for i in f["tokenizer.ggml.scores"].data]
    types = [int(f["tokenizer.ggml.token_type"].parts[i][0]) for i in f["tokenizer.ggml.token_type"].data]

    def spm_vocabulary(wr, c):
        wr.add_tokenizer_model("llama")
        wr.add_token_list(tokens)
        wr.add_token_scores(scores)
        wr.add_token_types(types)
        wr.add_bos_token_id(1)
        wr.add_eos_token_id(2)
        wr.add_unk_token_id(0)
        wr.add_add_bos_token(True)
        wr.add_add_space_prefix(True)

    c = {"dim": 64, "ffn": 128, "layers": 1, "heads": 2, "kv_heads": 2, "head_dim": 32, "vocab": len(tokens),
         "ctx": 128, "rope_theta": 10000.0, "eps": 1e-5, "seed": 7}
    write_f32_gguf(path, c, spm_vocabulary, name="spm-tiny")
    return path


def test_spm_model_binary_tokenizes_like_llamacpp(built, tmp_path):
    # A model built from a GGUF with a "llama" vocabulary uses it: `NAME tokenize` (BOS, control
    # tokens parsed) gives llama.cpp's "special" ids, and generation decodes without error.
    model = write_spm_llama(tmp_path / "spm-tiny.gguf")
    san = "san" in built.name
    name = "spm-tiny-tok"
    r = run([ROOT / "ingot", "build", model, "--name", name, *(["--san"] if san else [])])
    assert r.returncode == 0, r.stderr[-4000:]
    exe = ROOT / "build" / name / (name + ("-san" if san else ""))
    rows, lines = spm_rows(), spm_lines()
    picks = [i for i, l in enumerate(lines) if valid_utf8(l) and l and b"\n" not in l and b"\0" not in l]
    picks = picks[:8] + [i for i in picks if b"<|im_start|>" in lines[i] or "😀".encode() in lines[i]][:8]
    for i in picks:
        r = run([exe, "tokenize", "-p", lines[i].decode()])
        assert r.returncode == 0, r.stderr[-2000:]
        assert [int(x) for x in r.stdout.split()] == rows[i]["special"], f"line {i + 1} {lines[i]!r}: {r.stdout}"
    r = run([exe, "generate", "-p", "Hello", "-n", "8"])
    assert r.returncode == 0 and "Sanitizer" not in r.stderr and "runtime error" not in r.stderr, r.stderr[-2000:]

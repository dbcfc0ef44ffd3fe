"""Every id that ends a turn stops generation, not only the tokenizer's EOS.

The real SmolLM2 answers "The capital of France is" greedily with
" Paris.\\n\\nThe ..." (ids 7042, 30, 198, 198, 504, ...). Declaring id 504
("The") an end-of-turn token, through each source a model can carry it in,
must end that answer after four tokens: a GGUF's tokenizer.ggml.eot_token_id
(and eom_token_id), and a generation_config.json's eos_token_id list beside a
tokenizer.json. The GGUF copy is made with gguf-py's own metadata editor, so
the file is what llama.cpp's tools would write.
"""
import json
import shutil
import subprocess
import sys

import pytest
import requests

from modelbuild import FIXTURES, build, smollm2_gguf
from serverproc import ServerProc

PROMPT = "The capital of France is"
GREEDY = [7042, 30, 198, 198, 504]
TURN_END = 504  # not EOS (2), not a control token: only the metadata makes it a stop id


@pytest.fixture(scope="module")
def smollm2(built):
    gguf = smollm2_gguf()
    return build(gguf, "smollm2"), gguf


def generate_ids(binary, tmp_path, *args):
    out = tmp_path / "ids.jsonl"
    r = subprocess.run([str(binary), *map(str, args), "generate", "-p", PROMPT, "-n", "8", "--ids-out", str(out)],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    return [json.loads(line)["id"] for line in out.read_text().splitlines()]


def with_turn_end(gguf, tmp_path, key):
    out = tmp_path / f"smollm2-{key}.gguf"
    r = subprocess.run([sys.executable, "-m", "gguf.scripts.gguf_new_metadata", str(gguf), str(out),
                        "--special-token-by-id", key, str(TURN_END), "--force"],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    return out


def test_greedy_answer_is_as_expected(smollm2, tmp_path):
    binary, _ = smollm2
    assert generate_ids(binary, tmp_path)[:5] == GREEDY


@pytest.mark.parametrize("key", ["eot", "eom"])
def test_gguf_turn_end_ids_stop_generate(smollm2, tmp_path, key):
    binary, gguf = smollm2
    weights = with_turn_end(gguf, tmp_path, key)
    ids = generate_ids(binary, tmp_path, "--weights", weights)
    assert ids[-1] == TURN_END and len(ids) == 5  # the stop token is reported by --ids-out, not printed
    info = subprocess.run([str(binary), "--weights", str(weights), "--info"], capture_output=True, text=True,
                          timeout=120)
    assert info.returncode == 0, info.stderr
    stops = next(line for line in info.stdout.splitlines() if line.startswith("stop tokens:"))
    assert f"{TURN_END} " in stops and "2 <|im_end|>" in stops


def test_gguf_turn_end_stops_serve(smollm2, tmp_path):
    binary, gguf = smollm2
    weights = with_turn_end(gguf, tmp_path, "eot")
    with ServerProc(binary, "--weights", weights, "--kv-blocks", "32") as srv:
        body = {"model": "smollm2", "prompt": PROMPT, "max_tokens": 8, "temperature": 0}
        r = requests.post(srv.url + "/v1/completions", json=body, timeout=300)
        assert r.status_code == 200, r.text
        choice = r.json()["choices"][0]
        assert choice["finish_reason"] == "stop" and choice["text"] == " Paris.\n\n"
        assert r.json()["usage"]["completion_tokens"] == 4
        body["ignore_eos"] = True
        r = requests.post(srv.url + "/v1/completions", json=body, timeout=300)
        assert r.json()["choices"][0]["finish_reason"] == "length"
        model = requests.get(srv.url + "/v1/models", timeout=30).json()["data"][0]
        assert TURN_END in model["stop_token_ids"] and 2 in model["stop_token_ids"]
        assert "<|im_end|>" in model["stop_tokens"]


def test_generation_config_eos_list_stops(smollm2, tmp_path):
    """A tokenizer.json whose generation_config.json lists several
    eos_token_id values: each of them ends generation."""
    binary, _ = smollm2
    tok_dir = tmp_path / "tok"
    shutil.copytree(FIXTURES / "tokenizers" / "smollm2-from-gguf", tok_dir)
    (tok_dir / "generation_config.json").write_text(json.dumps({"eos_token_id": [2, TURN_END]}))
    ids = generate_ids(binary, tmp_path, "--tokenizer", tok_dir / "tokenizer.json")
    assert ids == GREEDY
    (tok_dir / "generation_config.json").write_text(json.dumps({"eos_token_id": 2}))
    assert len(generate_ids(binary, tmp_path, "--tokenizer", tok_dir / "tokenizer.json")) == 8

"""Writes the binary seeds of tests/fuzz/corpus (a tiny GGUF with a vocabulary, a tiny safetensors
file) with the reference writers, gguf and safetensors from PyPI. The text seeds are written by
hand; the fuzz script adds the test fixtures (tokenizer.json files, GGUFs, chat templates).

    python3 tests/fuzz/make_seeds.py
"""
import pathlib

import gguf
import numpy as np
from safetensors.numpy import save_file

HERE = pathlib.Path(__file__).resolve().parent / "corpus"


def tiny_gguf(path):
    w = gguf.GGUFWriter(str(path), "llama")
    w.add_context_length(64)
    w.add_embedding_length(8)
    w.add_block_count(1)
    w.add_head_count(2)
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("smollm")
    w.add_token_list(["<s>", "</s>", "a", "b", "ab", "Ġ", "Ġa", "<|im_end|>"])
    w.add_token_types([3, 3, 1, 1, 1, 1, 1, 3])
    w.add_token_merges(["a b", "Ġ a"])
    w.add_bos_token_id(0)
    w.add_eos_token_id(1)
    w.add_chat_template("{% for m in messages %}{{ m.content }}{% endfor %}")
    w.add_tensor("token_embd.weight", np.arange(64, dtype=np.float32).reshape(8, 8))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def main():
    (HERE / "gguf").mkdir(parents=True, exist_ok=True)
    tiny_gguf(HERE / "gguf" / "tiny_vocab.gguf")
    (HERE / "safetensors").mkdir(parents=True, exist_ok=True)
    save_file({"a.weight": np.ones((2, 3), np.float32), "b": np.arange(4, dtype=np.int32)},
              str(HERE / "safetensors" / "two.safetensors"), metadata={"format": "pt"})


if __name__ == "__main__":
    main()

"""LoRA adapters made with PEFT on the tiny family fixtures, and their logits through transformers:
the reference tests/test_lora.py holds ingot's adapters to.

An adapter here is random (init_lora_weights=False: A and B both drawn, so B A is not zero and the
update moves the logits by about their own size) and saved as PEFT saves any adapter:
adapter_config.json and adapter_model.safetensors.
"""
import json

import numpy as np


def linear_modules(model):
    """The leaf names of the model's nn.Linear modules, without the LM head."""
    import torch
    names = set()
    for name, mod in model.named_modules():
        if isinstance(mod, torch.nn.Linear) and not name.endswith("lm_head"):
            names.add(name.rsplit(".", 1)[-1])
    return sorted(names)


def make_adapter(model_dir, out_dir, rank, targets=None, exclude=(), seed=0, alpha=None, rslora=False):
    """Writes a PEFT adapter of model_dir to out_dir and returns (logits of the fixture's tokens
    through the adapted model [n, vocab], the modules it targets)."""
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM
    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    tokens = json.loads((model_dir / "reference.json").read_text())["tokens"]
    targets = [t for t in (targets or linear_modules(model)) if t not in exclude]
    cfg = LoraConfig(r=rank, lora_alpha=alpha or 2 * rank, target_modules=targets, init_lora_weights=False,
                     use_rslora=rslora)
    peft_model = get_peft_model(model, cfg)
    peft_model.eval()
    with torch.no_grad():
        logits = peft_model(torch.tensor([tokens])).logits[0].float().numpy()
    peft_model.save_pretrained(str(out_dir))
    return logits.astype(np.float32), targets

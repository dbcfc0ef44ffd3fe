-- models.lua — architecture descriptions, one entry per family.
--
-- How to add one: copy an entry, name the Hugging Face architectures and the
-- GGUF architecture it covers, map its config keys, list its weights (HF
-- name, GGUF name, shape in config terms) and write `layer` (and `embed`,
-- `head` if they differ) with the ops of generator/ops.lua:
--   embedding(tokens, W)  rmsnorm(x, W, eps [, {offset = 1}])  linear(x, W [, bias])
--   rope(x, {heads, head_dim, theta})  attention(q, k, v, {heads, kv_heads, head_dim})
--   silu(x)  gelu_tanh(x)  x + y  x * y  x * number
-- Every entry is validated (generator/describe.lua): unknown or missing keys
-- and shapes that do not divide are reported as models.lua:LINE: error: ...
--
-- Config values are read from HF config.json (`hf`: a key, a dotted path, or
-- a list of those tried in order) or from GGUF metadata (`gguf`, where %s is
-- the GGUF architecture name); `default` may be a number, a boolean or an
-- expression over other config values.

local M = {}

M.llama = {
  hf = {"LlamaForCausalLM", "MistralForCausalLM"},
  gguf = "llama",
  config = {
    dim        = {hf = "hidden_size",             gguf = "%s.embedding_length"},
    layers     = {hf = "num_hidden_layers",       gguf = "%s.block_count"},
    heads      = {hf = "num_attention_heads",     gguf = "%s.attention.head_count"},
    kv_heads   = {hf = "num_key_value_heads",     gguf = "%s.attention.head_count_kv", default = "heads"},
    head_dim   = {hf = "head_dim",                gguf = "%s.attention.key_length",    default = "dim / heads"},
    ffn        = {hf = "intermediate_size",       gguf = "%s.feed_forward_length"},
    eps        = {hf = "rms_norm_eps",            gguf = "%s.attention.layer_norm_rms_epsilon"},
    rope_theta = {hf = {"rope_theta", "rope_parameters.rope_theta"}, gguf = "%s.rope.freq_base",          default = 10000},
    vocab      = {hf = "vocab_size",              gguf = "%s.vocab_size",              default = "tensor_rows:embed"},
    ctx        = {hf = "max_position_embeddings", gguf = "%s.context_length",          default = 2048},
    window     = {hf = "sliding_window",          gguf = "%s.attention.sliding_window", default = 0},
  },
  -- HF checkpoints rotate (i, i + d/2); the GGUF converter permutes Q/K rows
  -- so that llama.cpp rotates adjacent pairs (2i, 2i+1).
  rope_pairs = {hf = "halves", gguf = "adjacent"},
  weights = {
    embed      = {hf = "model.embed_tokens.weight",                gguf = "token_embd.weight",       shape = {"vocab", "dim"}},
    final_norm = {hf = "model.norm.weight",                        gguf = "output_norm.weight",      shape = {"dim"}},
    lm_head    = {hf = "lm_head.weight",                           gguf = "output.weight",           shape = {"vocab", "dim"}, tied = "embed"},
    attn_norm  = {hf = "model.layers.%d.input_layernorm.weight",   gguf = "blk.%d.attn_norm.weight", shape = {"dim"}},
    q          = {hf = "model.layers.%d.self_attn.q_proj.weight",  gguf = "blk.%d.attn_q.weight",    shape = {"heads * head_dim", "dim"}},
    k          = {hf = "model.layers.%d.self_attn.k_proj.weight",  gguf = "blk.%d.attn_k.weight",    shape = {"kv_heads * head_dim", "dim"}},
    v          = {hf = "model.layers.%d.self_attn.v_proj.weight",  gguf = "blk.%d.attn_v.weight",    shape = {"kv_heads * head_dim", "dim"}},
    o          = {hf = "model.layers.%d.self_attn.o_proj.weight",  gguf = "blk.%d.attn_output.weight", shape = {"dim", "heads * head_dim"}},
    ffn_norm   = {hf = "model.layers.%d.post_attention_layernorm.weight", gguf = "blk.%d.ffn_norm.weight", shape = {"dim"}},
    gate       = {hf = "model.layers.%d.mlp.gate_proj.weight",     gguf = "blk.%d.ffn_gate.weight",  shape = {"ffn", "dim"}},
    up         = {hf = "model.layers.%d.mlp.up_proj.weight",       gguf = "blk.%d.ffn_up.weight",    shape = {"ffn", "dim"}},
    down       = {hf = "model.layers.%d.mlp.down_proj.weight",     gguf = "blk.%d.ffn_down.weight",  shape = {"dim", "ffn"}},
  },
  embed = function(tokens, w, c)
    return embedding(tokens, w.embed)
  end,
  layer = function(x, w, c)
    local h = rmsnorm(x, w.attn_norm, c.eps)
    local q, k, v = linear(h, w.q), linear(h, w.k), linear(h, w.v)
    q = rope(q, {heads = c.heads, head_dim = c.head_dim, theta = c.rope_theta})
    k = rope(k, {heads = c.kv_heads, head_dim = c.head_dim, theta = c.rope_theta})
    local a = attention(q, k, v, {heads = c.heads, kv_heads = c.kv_heads, head_dim = c.head_dim, window = c.window})
    x = x + linear(a, w.o)
    h = rmsnorm(x, w.ffn_norm, c.eps)
    return x + linear(silu(linear(h, w.gate)) * linear(h, w.up), w.down)
  end,
  head = function(x, w, c)
    return linear(rmsnorm(x, w.final_norm, c.eps), w.lm_head)
  end,
}

return M

-- models.lua — architecture descriptions, one entry per family.
--
-- How to add one (docs/adding-an-architecture.md walks through an example):
-- name the Hugging Face architectures and the GGUF architecture it covers,
-- map its config keys, list its weights (HF name, GGUF name, shape in config
-- terms) and write `layer` (and `embed`, `head`) with the ops of
-- generator/graph.lua:
--   embedding(tokens, W)  rmsnorm(x, W, eps [, {offset = 1, heads = n}])  linear(x, W [, bias])
--   layernorm(x, W, bias or nil, eps [, {heads = n}])
--   rope(x, {heads, head_dim, theta, scaling, rot_dim})  attention(q, k, v, {heads, kv_heads, head_dim,
--   window, softcap, scale})  moe(x, router, {gate, up, down}, {experts, top_k, normalize})
--   columns(x, first, count [, {heads = n}])  concat(a, b [, {heads = n}])  head_linear(x, W, {...})
--   silu(x)  gelu(x)  gelu_tanh(x)  softcap(x, cap)  x + y  x * y  x * number
--   causal_conv(x, W [, bias])  (a depthwise convolution over each sequence's positions; its last
--   inputs are the sequence's recurrent state)
-- An unknown op or option is an error that lists what exists.
-- Every entry is validated (generator/describe.lua): unknown or missing keys
-- and shapes that do not divide are reported as models.lua:LINE: error: ...
--
-- Config values are read from HF config.json (`hf`: a key, a dotted path, or
-- a list of those tried in order) or from GGUF metadata (`gguf`, where %s is
-- the GGUF architecture name); `default` may be a number, a boolean, an
-- expression over other config values (with floor, ceil, min, max), "tensor_rows:WEIGHT" (the stored
-- tensor's row count) or "has_tensor:WEIGHT" (whether the checkpoint stores
-- it; layer 0's for a per-layer weight); `by_format` gives a constant that
-- depends on the checkpoint's format ({hf = ..., gguf = ...}; a format it
-- does not name reads `hf`/`gguf` as usual).
-- A weight may be a row slice of a stored tensor (`slice = {first, of}`:
-- rows [first, first + shape[1]) of a tensor of `of` rows), or one tensor
-- per expert (`experts = "count"`, the name's second %d is the expert; a
-- name with only the layer's %d holds the layer's experts stacked
-- [experts, rows, cols], as GGUF files do). An entry's `gguf_also = {arch,
-- when}` also claims GGUF files of another architecture whose metadata key
-- `when` is set (llama.cpp writes Mixtral as "llama" with an expert count).
-- A checkpoint may store a weight in parts: `gguf = {heads = EXPR, {NAME,
-- rows = EXPR [, transposed = true]}, ...}` holds, for each of `heads`
-- heads, each part's `rows` rows in turn ([heads, rows, cols] tensors, or
-- [heads, cols, rows] when transposed); the loader joins them once, at load
-- (llama.cpp splits DeepSeek-V2's kv_b_proj into attn_k_b, transposed, and
-- attn_v_b).

local M = {}

-- Shared pieces: tables copied into the entries that use them.
local function merge(...)
  local out = {}
  for _, t in ipairs({...}) do
    for k, v in pairs(t) do out[k] = v end
  end
  return out
end

local TRANSFORMER_CONFIG = {
  dim        = {hf = "hidden_size",             gguf = "%s.embedding_length"},
  layers     = {hf = "num_hidden_layers",       gguf = "%s.block_count"},
  heads      = {hf = "num_attention_heads",     gguf = "%s.attention.head_count"},
  kv_heads   = {hf = "num_key_value_heads",     gguf = "%s.attention.head_count_kv", default = "heads"},
  head_dim   = {hf = "head_dim",                gguf = "%s.attention.key_length",    default = "dim / heads"},
  ffn        = {hf = "intermediate_size",       gguf = "%s.feed_forward_length"},
  eps        = {hf = "rms_norm_eps",            gguf = "%s.attention.layer_norm_rms_epsilon"},
  vocab      = {hf = "vocab_size",              gguf = "%s.vocab_size",              default = "tensor_rows:embed"},
  ctx        = {hf = "max_position_embeddings", gguf = "%s.context_length",          default = 2048},
  window     = {hf = "sliding_window",          gguf = "%s.attention.sliding_window", default = 0},
}

-- RoPE and its context-extension schemes (transformers 4 writes rope_scaling,
-- transformers 5 rope_parameters).
local ROPE_CONFIG = {
  rope_theta      = {hf = {"rope_theta", "rope_parameters.rope_theta"}, gguf = "%s.rope.freq_base", default = 10000},
  rope_type       = {hf = {"rope_scaling.rope_type", "rope_scaling.type", "rope_parameters.rope_type"},
                     gguf = "%s.rope.scaling.type", default = "default"},
  rope_factor     = {hf = {"rope_scaling.factor", "rope_parameters.factor"}, gguf = "%s.rope.scaling.factor", default = 1},
  rope_low_freq   = {hf = {"rope_scaling.low_freq_factor", "rope_parameters.low_freq_factor"}, default = 1},
  rope_high_freq  = {hf = {"rope_scaling.high_freq_factor", "rope_parameters.high_freq_factor"}, default = 4},
  rope_orig_ctx   = {hf = {"rope_scaling.original_max_position_embeddings", "rope_parameters.original_max_position_embeddings"},
                     gguf = "%s.rope.scaling.original_context_length", default = "ctx"},
  rope_beta_fast  = {hf = {"rope_scaling.beta_fast", "rope_parameters.beta_fast"}, default = 32},
  rope_beta_slow  = {hf = {"rope_scaling.beta_slow", "rope_parameters.beta_slow"}, default = 1},
  rope_attn_factor = {hf = {"rope_scaling.attention_factor", "rope_parameters.attention_factor"}, default = 0},
  rope_mscale     = {hf = {"rope_scaling.mscale", "rope_parameters.mscale"}, default = 0},
  rope_mscale_all = {hf = {"rope_scaling.mscale_all_dim", "rope_parameters.mscale_all_dim"}, default = 0},
  -- YaRN's ramp bounds rounded out (transformers' default; llama.cpp always rounds) or kept fractional
  rope_truncate   = {hf = {"rope_scaling.truncate", "rope_parameters.truncate"}, default = true},
  -- partial rotary: the first rot_dim columns of each head rotate (transformers' int(head_dim * factor))
  rotary_pct      = {hf = {"rope_parameters.partial_rotary_factor", "partial_rotary_factor", "rotary_pct"}, default = 1},
  rot_dim         = {gguf = "%s.rope.dimension_count", default = "floor(head_dim * rotary_pct)"},
}

-- YaRN's magnitude correction for a context `factor` times the original.
local function yarn_mscale(factor, mscale)
  return factor <= 1 and 1 or 0.1 * mscale * math.log(factor) + 1
end

-- freq_factors: a weight dividing each RoPE frequency (a GGUF's rope_freqs,
-- where llama.cpp's converter stores Llama 3.1's frequency scaling).
-- YaRN's cos/sin factor, when the config does not give it, is
-- mscale(factor, mscale) / mscale(factor, mscale_all_dim) where both are set
-- (DeepSeek's configs), else 0: the kernel's 0.1 ln(factor) + 1.
local function rope_opts(c, heads, freq_factors)
  local attn_factor = c.rope_attn_factor
  if attn_factor == 0 and c.rope_mscale ~= 0 and c.rope_mscale_all ~= 0 then
    attn_factor = yarn_mscale(c.rope_factor, c.rope_mscale) / yarn_mscale(c.rope_factor, c.rope_mscale_all)
  end
  return {heads = heads, head_dim = c.head_dim, rot_dim = c.rot_dim, theta = c.rope_theta, freq_factors = freq_factors or nil,
          scaling = {type = c.rope_type, factor = c.rope_factor, low_freq = c.rope_low_freq,
                     high_freq = c.rope_high_freq, orig_ctx = c.rope_orig_ctx, beta_fast = c.rope_beta_fast,
                     beta_slow = c.rope_beta_slow, attn_factor = attn_factor, truncate = c.rope_truncate}}
end

local LLAMA_WEIGHTS = {
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
}

-- Optional biases of the attention and MLP projections (transformers'
-- attention_bias / mlp_bias). A GGUF says nothing in its metadata: the bias
-- tensors are there or not.
local BIAS_CONFIG = {
  attention_bias = {hf = "attention_bias", default = "has_tensor:q_bias"},
  mlp_bias       = {hf = "mlp_bias",       default = "has_tensor:gate_bias"},
}

local ATTN_BIAS_WEIGHTS = {
  q_bias = {hf = "model.layers.%d.self_attn.q_proj.bias", gguf = "blk.%d.attn_q.bias",      shape = {"heads * head_dim"}},
  k_bias = {hf = "model.layers.%d.self_attn.k_proj.bias", gguf = "blk.%d.attn_k.bias",      shape = {"kv_heads * head_dim"}},
  v_bias = {hf = "model.layers.%d.self_attn.v_proj.bias", gguf = "blk.%d.attn_v.bias",      shape = {"kv_heads * head_dim"}},
  o_bias = {hf = "model.layers.%d.self_attn.o_proj.bias", gguf = "blk.%d.attn_output.bias", shape = {"dim"}},
}

local MLP_BIAS_WEIGHTS = {
  gate_bias = {hf = "model.layers.%d.mlp.gate_proj.bias", gguf = "blk.%d.ffn_gate.bias", shape = {"ffn"}},
  up_bias   = {hf = "model.layers.%d.mlp.up_proj.bias",   gguf = "blk.%d.ffn_up.bias",   shape = {"ffn"}},
  down_bias = {hf = "model.layers.%d.mlp.down_proj.bias", gguf = "blk.%d.ffn_down.bias", shape = {"dim"}},
}

local function embed_tokens(tokens, w, c)
  return embedding(tokens, w.embed)
end

local function lm_head(x, w, c)
  return linear(rmsnorm(x, w.final_norm, c.eps), w.lm_head)
end

-- Llama 2/3, SmolLM2, Mistral (with or without sliding window), with the
-- optional attention and MLP biases; a GGUF's RoPE frequency factors.
M.llama = {
  hf = {"LlamaForCausalLM", "MistralForCausalLM"},
  gguf = "llama",
  config = merge(TRANSFORMER_CONFIG, ROPE_CONFIG, BIAS_CONFIG,
                 {rope_freqs = {default = "has_tensor:rope_freqs"}}),
  -- HF checkpoints rotate (i, i + d/2); the GGUF converter permutes Q/K rows
  -- so that llama.cpp rotates adjacent pairs (2i, 2i+1).
  rope_pairs = {hf = "halves", gguf = "adjacent"},
  weights = merge(LLAMA_WEIGHTS, ATTN_BIAS_WEIGHTS, MLP_BIAS_WEIGHTS, {
    rope_freqs = {gguf = "rope_freqs.weight", shape = {"head_dim / 2"}},
  }),
  embed = embed_tokens,
  layer = function(x, w, c)
    local ab, mb = c.attention_bias, c.mlp_bias
    local ff = c.rope_freqs and w.rope_freqs
    local h = rmsnorm(x, w.attn_norm, c.eps)
    local q, k, v = linear(h, w.q, ab and w.q_bias), linear(h, w.k, ab and w.k_bias), linear(h, w.v, ab and w.v_bias)
    q = rope(q, rope_opts(c, c.heads, ff))
    k = rope(k, rope_opts(c, c.kv_heads, ff))
    local a = attention(q, k, v, {heads = c.heads, kv_heads = c.kv_heads, head_dim = c.head_dim, window = c.window})
    x = x + linear(a, w.o, ab and w.o_bias)
    h = rmsnorm(x, w.ffn_norm, c.eps)
    local m = silu(linear(h, w.gate, mb and w.gate_bias)) * linear(h, w.up, mb and w.up_bias)
    return x + linear(m, w.down, mb and w.down_bias)
  end,
  head = lm_head,
}

-- Qwen2: Llama with biases on the Q/K/V projections.
M.qwen2 = {
  hf = {"Qwen2ForCausalLM"},
  gguf = "qwen2",
  config = merge(TRANSFORMER_CONFIG, ROPE_CONFIG, {window = {hf = "sliding_window", default = 0},
    use_window = {hf = "use_sliding_window", default = false}}),
  rope_pairs = {hf = "halves", gguf = "halves"},
  weights = merge(LLAMA_WEIGHTS, {
    q_bias = {hf = "model.layers.%d.self_attn.q_proj.bias", gguf = "blk.%d.attn_q.bias", shape = {"heads * head_dim"}},
    k_bias = {hf = "model.layers.%d.self_attn.k_proj.bias", gguf = "blk.%d.attn_k.bias", shape = {"kv_heads * head_dim"}},
    v_bias = {hf = "model.layers.%d.self_attn.v_proj.bias", gguf = "blk.%d.attn_v.bias", shape = {"kv_heads * head_dim"}},
  }),
  embed = embed_tokens,
  layer = function(x, w, c)
    local h = rmsnorm(x, w.attn_norm, c.eps)
    local q, k, v = linear(h, w.q, w.q_bias), linear(h, w.k, w.k_bias), linear(h, w.v, w.v_bias)
    q = rope(q, rope_opts(c, c.heads))
    k = rope(k, rope_opts(c, c.kv_heads))
    local window = c.use_window and c.window or 0
    local a = attention(q, k, v, {heads = c.heads, kv_heads = c.kv_heads, head_dim = c.head_dim, window = window})
    x = x + linear(a, w.o)
    h = rmsnorm(x, w.ffn_norm, c.eps)
    return x + linear(silu(linear(h, w.gate)) * linear(h, w.up), w.down)
  end,
  head = lm_head,
}

-- Qwen3: RMSNorm of every query and key head before RoPE; attention biases
-- when the config asks for them.
M.qwen3 = {
  hf = {"Qwen3ForCausalLM"},
  gguf = "qwen3",
  config = merge(TRANSFORMER_CONFIG, ROPE_CONFIG, {attention_bias = BIAS_CONFIG.attention_bias}),
  rope_pairs = {hf = "halves", gguf = "halves"},
  weights = merge(LLAMA_WEIGHTS, ATTN_BIAS_WEIGHTS, {
    q_norm = {hf = "model.layers.%d.self_attn.q_norm.weight", gguf = "blk.%d.attn_q_norm.weight", shape = {"head_dim"}},
    k_norm = {hf = "model.layers.%d.self_attn.k_norm.weight", gguf = "blk.%d.attn_k_norm.weight", shape = {"head_dim"}},
  }),
  embed = embed_tokens,
  layer = function(x, w, c)
    local ab = c.attention_bias
    local h = rmsnorm(x, w.attn_norm, c.eps)
    local q, k, v = linear(h, w.q, ab and w.q_bias), linear(h, w.k, ab and w.k_bias), linear(h, w.v, ab and w.v_bias)
    q = rope(rmsnorm(q, w.q_norm, c.eps, {heads = c.heads}), rope_opts(c, c.heads))
    k = rope(rmsnorm(k, w.k_norm, c.eps, {heads = c.kv_heads}), rope_opts(c, c.kv_heads))
    local a = attention(q, k, v, {heads = c.heads, kv_heads = c.kv_heads, head_dim = c.head_dim})
    x = x + linear(a, w.o, ab and w.o_bias)
    h = rmsnorm(x, w.ffn_norm, c.eps)
    return x + linear(silu(linear(h, w.gate)) * linear(h, w.up), w.down)
  end,
  head = lm_head,
}

-- One Gemma layer (2 and 3): (1 + w) norms before and after attention and
-- the GeGLU MLP, soft-capped scores, a window on sliding layers. qk(q, k)
-- gives the rotated queries and keys (Gemma 3 normalizes them first and
-- takes its RoPE by layer kind).
local function gemma_block(x, w, c, sliding, qk)
  local norm = {offset = c.norm_offset}
  local ab = c.attention_bias
  local h = rmsnorm(x, w.attn_norm, c.eps, norm)
  local q, k, v = linear(h, w.q, ab and w.q_bias), linear(h, w.k, ab and w.k_bias), linear(h, w.v, ab and w.v_bias)
  q, k = qk(q, k)
  local a = attention(q, k, v, {heads = c.heads, kv_heads = c.kv_heads, head_dim = c.head_dim,
                                window = sliding and c.window or 0, softcap = c.attn_softcap,
                                scale = c.query_scalar ^ -0.5})
  x = x + rmsnorm(linear(a, w.o, ab and w.o_bias), w.post_attn_norm, c.eps, norm)
  h = rmsnorm(x, w.ffn_norm, c.eps, norm)
  local m = linear(gelu_tanh(linear(h, w.gate)) * linear(h, w.up), w.down)
  return x + rmsnorm(m, w.post_ffn_norm, c.eps, norm)
end

-- Gemma 2: scaled embedding, (1 + w) norms before and after attention and
-- MLP, GeGLU, soft-capped attention scores and logits, sliding-window
-- attention on alternate layers, query scale from query_pre_attn_scalar,
-- attention biases when the config asks for them.
M.gemma2 = {
  hf = {"Gemma2ForCausalLM"},
  gguf = "gemma2",
  config = merge(TRANSFORMER_CONFIG, ROPE_CONFIG, {attention_bias = BIAS_CONFIG.attention_bias}, {
    window        = {hf = "sliding_window", gguf = "%s.attention.sliding_window", default = 4096},
    layer_types   = {hf = "layer_types", default = false},
    query_scalar  = {hf = "query_pre_attn_scalar", default = "head_dim"},
    attn_softcap  = {hf = "attn_logit_softcapping", gguf = "%s.attn_logit_softcapping", default = 0},
    final_softcap = {hf = "final_logit_softcapping", gguf = "%s.final_logit_softcapping", default = 0},
    -- HF stores w and computes (1 + w); the GGUF converter stores 1 + w.
    norm_offset   = {by_format = {hf = 1, gguf = 0}},
  }),
  rope_pairs = {hf = "halves", gguf = "halves"},
  weights = merge(LLAMA_WEIGHTS, ATTN_BIAS_WEIGHTS, {
    post_attn_norm = {hf = "model.layers.%d.post_attention_layernorm.weight", gguf = "blk.%d.post_attention_norm.weight", shape = {"dim"}},
    ffn_norm       = {hf = "model.layers.%d.pre_feedforward_layernorm.weight", gguf = "blk.%d.ffn_norm.weight", shape = {"dim"}},
    post_ffn_norm  = {hf = "model.layers.%d.post_feedforward_layernorm.weight", gguf = "blk.%d.post_ffw_norm.weight", shape = {"dim"}},
  }),
  embed = function(tokens, w, c)
    return embedding(tokens, w.embed) * math.sqrt(c.dim)
  end,
  layer = function(x, w, c)
    local sliding
    if c.layer_types then sliding = c.layer_types[c.layer + 1] == "sliding_attention" else sliding = c.layer % 2 == 0 end
    return gemma_block(x, w, c, sliding, function(q, k)
      return rope(q, rope_opts(c, c.heads)), rope(k, rope_opts(c, c.kv_heads))
    end)
  end,
  head = function(x, w, c)
    local logits = linear(rmsnorm(x, w.final_norm, c.eps, {offset = c.norm_offset}), w.lm_head)
    if c.final_softcap > 0 then logits = softcap(logits, c.final_softcap) end
    return logits
  end,
}

-- Phi-3: Q, K, V stored as one qkv_proj, gate and up as one gate_up_proj;
-- each is a row slice of the stored tensor (zero copy).
M.phi3 = {
  hf = {"Phi3ForCausalLM"},
  gguf = "phi3",
  -- the layer is Llama's; Phi-3's projections have no biases
  config = merge(TRANSFORMER_CONFIG, ROPE_CONFIG, {attention_bias = {hf = "attention_bias", default = false},
                                                   mlp_bias = {hf = "mlp_bias", default = false},
                                                   rope_freqs = {by_format = {hf = false, gguf = false}}}),
  rope_pairs = {hf = "halves", gguf = "halves"},
  weights = merge(LLAMA_WEIGHTS, {
    q    = {hf = "model.layers.%d.self_attn.qkv_proj.weight", gguf = "blk.%d.attn_qkv.weight", shape = {"heads * head_dim", "dim"},
            slice = {0, "(heads + 2 * kv_heads) * head_dim"}},
    k    = {hf = "model.layers.%d.self_attn.qkv_proj.weight", gguf = "blk.%d.attn_qkv.weight", shape = {"kv_heads * head_dim", "dim"},
            slice = {"heads * head_dim", "(heads + 2 * kv_heads) * head_dim"}},
    v    = {hf = "model.layers.%d.self_attn.qkv_proj.weight", gguf = "blk.%d.attn_qkv.weight", shape = {"kv_heads * head_dim", "dim"},
            slice = {"(heads + kv_heads) * head_dim", "(heads + 2 * kv_heads) * head_dim"}},
    gate = {hf = "model.layers.%d.mlp.gate_up_proj.weight", gguf = "blk.%d.ffn_up.weight", shape = {"ffn", "dim"}, slice = {0, "2 * ffn"}},
    up   = {hf = "model.layers.%d.mlp.gate_up_proj.weight", gguf = "blk.%d.ffn_up.weight", shape = {"ffn", "dim"}, slice = {"ffn", "2 * ffn"}},
  }),
  embed = embed_tokens,
  layer = M.llama.layer,
  head = lm_head,
}

-- GPT-NeoX (Pythia): LayerNorm with biases, partial rotary (the first rot_dim columns of each
-- head), exact GELU, and by default the parallel residual x + attn(ln1(x)) + mlp(ln2(x)). Q, K
-- and V come from one projection whose rows hold each head's q, k and v rows in turn;
-- llama.cpp's converter regroups them as every head's q rows, then k, then v.
M.gptneox = {
  hf = {"GPTNeoXForCausalLM"},
  gguf = "gptneox",
  config = merge(ROPE_CONFIG, {
    dim        = {hf = "hidden_size",             gguf = "%s.embedding_length"},
    layers     = {hf = "num_hidden_layers",       gguf = "%s.block_count"},
    heads      = {hf = "num_attention_heads",     gguf = "%s.attention.head_count"},
    head_dim   = {default = "dim / heads"},
    ffn        = {hf = "intermediate_size",       gguf = "%s.feed_forward_length"},
    eps        = {hf = "layer_norm_eps",          gguf = "%s.attention.layer_norm_epsilon"},
    vocab      = {hf = "vocab_size",              gguf = "%s.vocab_size", default = "tensor_rows:embed"},
    ctx        = {hf = "max_position_embeddings", gguf = "%s.context_length", default = 2048},
    rope_theta = {hf = {"rope_parameters.rope_theta", "rotary_emb_base"}, gguf = "%s.rope.freq_base", default = 10000},
    parallel   = {hf = "use_parallel_residual", gguf = "%s.use_parallel_residual", default = true},
    attention_bias = {hf = "attention_bias", default = "has_tensor:qkv_bias"},
    act        = {hf = "hidden_act", default = "gelu"},
    qkv_per_head = {by_format = {hf = true, gguf = false}},
  }),
  rope_pairs = {hf = "halves", gguf = "halves"},
  weights = {
    embed        = {hf = "gpt_neox.embed_in.weight", gguf = "token_embd.weight", shape = {"vocab", "dim"}},
    final_norm   = {hf = "gpt_neox.final_layer_norm.weight", gguf = "output_norm.weight", shape = {"dim"}},
    final_norm_b = {hf = "gpt_neox.final_layer_norm.bias",   gguf = "output_norm.bias",   shape = {"dim"}},
    lm_head      = {hf = "embed_out.weight", gguf = "output.weight", shape = {"vocab", "dim"}, tied = "embed"},
    attn_norm    = {hf = "gpt_neox.layers.%d.input_layernorm.weight", gguf = "blk.%d.attn_norm.weight", shape = {"dim"}},
    attn_norm_b  = {hf = "gpt_neox.layers.%d.input_layernorm.bias",   gguf = "blk.%d.attn_norm.bias",   shape = {"dim"}},
    qkv          = {hf = "gpt_neox.layers.%d.attention.query_key_value.weight", gguf = "blk.%d.attn_qkv.weight",
                    shape = {"3 * dim", "dim"}},
    qkv_bias     = {hf = "gpt_neox.layers.%d.attention.query_key_value.bias", gguf = "blk.%d.attn_qkv.bias", shape = {"3 * dim"}},
    o            = {hf = "gpt_neox.layers.%d.attention.dense.weight", gguf = "blk.%d.attn_output.weight", shape = {"dim", "dim"}},
    o_bias       = {hf = "gpt_neox.layers.%d.attention.dense.bias",   gguf = "blk.%d.attn_output.bias",   shape = {"dim"}},
    ffn_norm     = {hf = "gpt_neox.layers.%d.post_attention_layernorm.weight", gguf = "blk.%d.ffn_norm.weight", shape = {"dim"}},
    ffn_norm_b   = {hf = "gpt_neox.layers.%d.post_attention_layernorm.bias",   gguf = "blk.%d.ffn_norm.bias",   shape = {"dim"}},
    up           = {hf = "gpt_neox.layers.%d.mlp.dense_h_to_4h.weight", gguf = "blk.%d.ffn_up.weight",   shape = {"ffn", "dim"}},
    up_bias      = {hf = "gpt_neox.layers.%d.mlp.dense_h_to_4h.bias",   gguf = "blk.%d.ffn_up.bias",     shape = {"ffn"}},
    down         = {hf = "gpt_neox.layers.%d.mlp.dense_4h_to_h.weight", gguf = "blk.%d.ffn_down.weight", shape = {"dim", "ffn"}},
    down_bias    = {hf = "gpt_neox.layers.%d.mlp.dense_4h_to_h.bias",   gguf = "blk.%d.ffn_down.bias",   shape = {"dim"}},
  },
  embed = embed_tokens,
  layer = function(x, w, c)
    local H, D, ab = c.heads, c.head_dim, c.attention_bias
    local act = ({gelu = gelu, gelu_new = gelu_tanh, gelu_pytorch_tanh = gelu_tanh})[c.act]
    if not act then error("gptneox: hidden_act '" .. tostring(c.act) .. "' is not supported (gelu, gelu_new)") end
    local qkv = linear(layernorm(x, w.attn_norm, w.attn_norm_b, c.eps), w.qkv, ab and w.qkv_bias)
    local function part(i) -- of [head][q | k | v] rows, or [q of every head | k ... | v ...]
      return c.qkv_per_head and columns(qkv, i * D, D, {heads = H}) or columns(qkv, i * H * D, H * D)
    end
    local q, k = rope(part(0), rope_opts(c, H)), rope(part(1), rope_opts(c, H)) -- rot_dim: partial rotary
    local a = attention(q, k, part(2), {heads = H, kv_heads = H, head_dim = D})
    a = linear(a, w.o, ab and w.o_bias)
    local function mlp(h) return linear(act(linear(h, w.up, w.up_bias)), w.down, w.down_bias) end
    if c.parallel then return x + a + mlp(layernorm(x, w.ffn_norm, w.ffn_norm_b, c.eps)) end
    x = x + a
    return x + mlp(layernorm(x, w.ffn_norm, w.ffn_norm_b, c.eps))
  end,
  head = function(x, w, c) return linear(layernorm(x, w.final_norm, w.final_norm_b, c.eps), w.lm_head) end,
}

-- StableLM (StableLM 2, Zephyr): Llama's projections and SwiGLU with LayerNorms (and their
-- biases), partial rotary, optional q/k/v biases, and optionally the parallel residual
-- x + attn(ln1(x)) + mlp(ln1(x)) (one norm: post_attention_layernorm is absent). Its per-head q/k
-- LayerNorms (qk_layernorm, StableLM 2 12B) are separate tensors per head: such a checkpoint is
-- refused by its unused tensors.
M.stablelm = {
  hf = {"StableLmForCausalLM"},
  gguf = "stablelm",
  config = merge(TRANSFORMER_CONFIG, ROPE_CONFIG, {
    head_dim  = {default = "dim / heads"},
    eps       = {hf = "layer_norm_eps", gguf = "%s.attention.layer_norm_epsilon"},
    qkv_bias  = {hf = "use_qkv_bias", default = "has_tensor:q_bias"},
    -- the parallel residual has no post_attention_layernorm (llama.cpp decides the same way)
    serial    = {default = "has_tensor:ffn_norm"},
  }),
  rope_pairs = {hf = "halves", gguf = "halves"},
  weights = merge(LLAMA_WEIGHTS, ATTN_BIAS_WEIGHTS, {
    final_norm_b = {hf = "model.norm.bias", gguf = "output_norm.bias", shape = {"dim"}},
    attn_norm_b  = {hf = "model.layers.%d.input_layernorm.bias", gguf = "blk.%d.attn_norm.bias", shape = {"dim"}},
    ffn_norm_b   = {hf = "model.layers.%d.post_attention_layernorm.bias", gguf = "blk.%d.ffn_norm.bias", shape = {"dim"}},
  }),
  embed = embed_tokens,
  layer = function(x, w, c)
    local b = c.qkv_bias
    local h = layernorm(x, w.attn_norm, w.attn_norm_b, c.eps)
    local q, k, v = linear(h, w.q, b and w.q_bias), linear(h, w.k, b and w.k_bias), linear(h, w.v, b and w.v_bias)
    q, k = rope(q, rope_opts(c, c.heads)), rope(k, rope_opts(c, c.kv_heads))
    x = x + linear(attention(q, k, v, {heads = c.heads, kv_heads = c.kv_heads, head_dim = c.head_dim}), w.o)
    if c.serial then h = layernorm(x, w.ffn_norm, w.ffn_norm_b, c.eps) end
    return x + linear(silu(linear(h, w.gate)) * linear(h, w.up), w.down)
  end,
  head = function(x, w, c) return linear(layernorm(x, w.final_norm, w.final_norm_b, c.eps), w.lm_head) end,
}

-- A GGUF keeps a layer's experts stacked in one tensor [experts, rows, cols].
local EXPS = {gate = "blk.%d.ffn_gate_exps.weight", up = "blk.%d.ffn_up_exps.weight",
              down = "blk.%d.ffn_down_exps.weight"}

-- The routed experts of Qwen3-MoE and DeepSeek-V2 (one naming in both): a
-- router and `experts` SwiGLU MLPs moe_ffn wide, top_k of them per token.
local MOE_CONFIG = {
  experts = {hf = {"num_experts", "num_local_experts", "n_routed_experts"}, gguf = "%s.expert_count"},
  top_k   = {hf = "num_experts_per_tok", gguf = "%s.expert_used_count"},
  moe_ffn = {hf = "moe_intermediate_size", gguf = "%s.expert_feed_forward_length"},
}
local MOE_WEIGHTS = {
  router      = {hf = "model.layers.%d.mlp.gate.weight", gguf = "blk.%d.ffn_gate_inp.weight", shape = {"experts", "dim"}},
  expert_gate = {hf = "model.layers.%d.mlp.experts.%d.gate_proj.weight", gguf = EXPS.gate, shape = {"moe_ffn", "dim"}, experts = "experts"},
  expert_up   = {hf = "model.layers.%d.mlp.experts.%d.up_proj.weight", gguf = EXPS.up, shape = {"moe_ffn", "dim"}, experts = "experts"},
  expert_down = {hf = "model.layers.%d.mlp.experts.%d.down_proj.weight", gguf = EXPS.down, shape = {"dim", "moe_ffn"}, experts = "experts"},
}

-- Mixtral: Llama attention; the MLP is a sparse mixture of experts (softmax
-- router, top-k experts per token, their outputs weighted by the renormalized
-- router probabilities).
M.mixtral = {
  hf = {"MixtralForCausalLM"},
  gguf = "mixtral",
  gguf_also = {arch = "llama", when = "%s.expert_count"}, -- llama.cpp's Mixtral GGUFs say "llama"
  config = merge(TRANSFORMER_CONFIG, ROPE_CONFIG, {
    window  = {hf = "sliding_window", default = 0},
    experts = {hf = "num_local_experts", gguf = "%s.expert_count"},
    top_k   = {hf = "num_experts_per_tok", gguf = "%s.expert_used_count"},
  }),
  rope_pairs = {hf = "halves", gguf = "adjacent"},
  weights = merge(LLAMA_WEIGHTS, {
    router      = {hf = "model.layers.%d.block_sparse_moe.gate.weight", gguf = "blk.%d.ffn_gate_inp.weight", shape = {"experts", "dim"}},
    expert_gate = {hf = "model.layers.%d.block_sparse_moe.experts.%d.w1.weight", gguf = EXPS.gate, shape = {"ffn", "dim"}, experts = "experts"},
    expert_up   = {hf = "model.layers.%d.block_sparse_moe.experts.%d.w3.weight", gguf = EXPS.up, shape = {"ffn", "dim"}, experts = "experts"},
    expert_down = {hf = "model.layers.%d.block_sparse_moe.experts.%d.w2.weight", gguf = EXPS.down, shape = {"dim", "ffn"}, experts = "experts"},
  }),
  embed = embed_tokens,
  layer = function(x, w, c)
    local h = rmsnorm(x, w.attn_norm, c.eps)
    local q, k, v = linear(h, w.q), linear(h, w.k), linear(h, w.v)
    q = rope(q, rope_opts(c, c.heads))
    k = rope(k, rope_opts(c, c.kv_heads))
    local a = attention(q, k, v, {heads = c.heads, kv_heads = c.kv_heads, head_dim = c.head_dim, window = c.window})
    x = x + linear(a, w.o)
    h = rmsnorm(x, w.ffn_norm, c.eps)
    return x + moe(h, w.router, {gate = w.expert_gate, up = w.expert_up, down = w.expert_down},
                   {experts = c.experts, top_k = c.top_k})
  end,
  head = lm_head,
}

-- OLMo 2: no norm before attention or MLP; an RMSNorm on each branch's
-- output before its residual add, and RMSNorm of the whole Q and K
-- projections (one weight over all heads) before RoPE.
M.olmo2 = {
  hf = {"Olmo2ForCausalLM"},
  gguf = "olmo2",
  config = merge(TRANSFORMER_CONFIG, ROPE_CONFIG, {attention_bias = BIAS_CONFIG.attention_bias}),
  rope_pairs = {hf = "halves", gguf = "halves"},
  weights = merge(LLAMA_WEIGHTS, ATTN_BIAS_WEIGHTS, {
    q_norm         = {hf = "model.layers.%d.self_attn.q_norm.weight", gguf = "blk.%d.attn_q_norm.weight", shape = {"heads * head_dim"}},
    k_norm         = {hf = "model.layers.%d.self_attn.k_norm.weight", gguf = "blk.%d.attn_k_norm.weight", shape = {"kv_heads * head_dim"}},
    post_attn_norm = {hf = "model.layers.%d.post_attention_layernorm.weight", gguf = "blk.%d.post_attention_norm.weight", shape = {"dim"}},
    post_ffn_norm  = {hf = "model.layers.%d.post_feedforward_layernorm.weight", gguf = "blk.%d.post_ffw_norm.weight", shape = {"dim"}},
  }),
  embed = embed_tokens,
  layer = function(x, w, c)
    local ab = c.attention_bias
    local q, k, v = linear(x, w.q, ab and w.q_bias), linear(x, w.k, ab and w.k_bias), linear(x, w.v, ab and w.v_bias)
    q = rope(rmsnorm(q, w.q_norm, c.eps), rope_opts(c, c.heads))
    k = rope(rmsnorm(k, w.k_norm, c.eps), rope_opts(c, c.kv_heads))
    local a = attention(q, k, v, {heads = c.heads, kv_heads = c.kv_heads, head_dim = c.head_dim})
    x = x + rmsnorm(linear(a, w.o, ab and w.o_bias), w.post_attn_norm, c.eps)
    local m = linear(silu(linear(x, w.gate)) * linear(x, w.up), w.down)
    return x + rmsnorm(m, w.post_ffn_norm, c.eps)
  end,
  head = lm_head,
}

-- Granite 3: Llama with four scalars: the embedding is multiplied by
-- embedding_multiplier, each branch by residual_multiplier before its
-- residual add, attention scores by attention_multiplier (instead of
-- 1/sqrt(head_dim)), and the logits are divided by logits_scaling.
M.granite = {
  hf = {"GraniteForCausalLM"},
  gguf = "granite",
  config = merge(TRANSFORMER_CONFIG, ROPE_CONFIG, BIAS_CONFIG, {
    embedding_multiplier = {hf = "embedding_multiplier", gguf = "%s.embedding_scale", default = 1},
    residual_multiplier  = {hf = "residual_multiplier", gguf = "%s.residual_scale", default = 1},
    attention_multiplier = {hf = "attention_multiplier", gguf = "%s.attention.scale", default = 1},
    logits_scaling       = {hf = "logits_scaling", gguf = "%s.logit_scale", default = 1},
  }),
  rope_pairs = {hf = "halves", gguf = "adjacent"},
  weights = merge(LLAMA_WEIGHTS, ATTN_BIAS_WEIGHTS, MLP_BIAS_WEIGHTS),
  embed = function(tokens, w, c)
    return embedding(tokens, w.embed) * c.embedding_multiplier
  end,
  layer = function(x, w, c)
    local ab, mb, r = c.attention_bias, c.mlp_bias, c.residual_multiplier
    local h = rmsnorm(x, w.attn_norm, c.eps)
    local q, k, v = linear(h, w.q, ab and w.q_bias), linear(h, w.k, ab and w.k_bias), linear(h, w.v, ab and w.v_bias)
    q = rope(q, rope_opts(c, c.heads))
    k = rope(k, rope_opts(c, c.kv_heads))
    local a = attention(q, k, v, {heads = c.heads, kv_heads = c.kv_heads, head_dim = c.head_dim,
                                  scale = c.attention_multiplier})
    x = x + linear(a, w.o, ab and w.o_bias) * r
    h = rmsnorm(x, w.ffn_norm, c.eps)
    local m = silu(linear(h, w.gate, mb and w.gate_bias)) * linear(h, w.up, mb and w.up_bias)
    return x + linear(m, w.down, mb and w.down_bias) * r
  end,
  head = function(x, w, c)
    return linear(rmsnorm(x, w.final_norm, c.eps), w.lm_head) * (1 / c.logits_scaling)
  end,
}

-- SmolLM3: Llama where some layers use no positional encoding (NoPE):
-- layer i applies RoPE iff no_rope_layers[i] is 1; without that list, every
-- no_rope_layer_interval-th layer (i + 1 divisible by it) skips RoPE. A
-- sliding window applies to the layers layer_types marks sliding when
-- use_sliding_window is set.
M.smollm3 = {
  hf = {"SmolLM3ForCausalLM"},
  gguf = "smollm3",
  config = merge(TRANSFORMER_CONFIG, ROPE_CONFIG, BIAS_CONFIG, {
    window         = {hf = "sliding_window", default = 0},
    use_window     = {hf = "use_sliding_window", default = false},
    layer_types    = {hf = "layer_types", default = false},
    no_rope_layers = {hf = "no_rope_layers", default = false},
    nope_interval  = {hf = "no_rope_layer_interval", default = 4},
  }),
  rope_pairs = {hf = "halves", gguf = "adjacent"},
  weights = merge(LLAMA_WEIGHTS, ATTN_BIAS_WEIGHTS, MLP_BIAS_WEIGHTS),
  embed = embed_tokens,
  layer = function(x, w, c)
    local ab, mb = c.attention_bias, c.mlp_bias
    local use_rope
    if c.no_rope_layers then use_rope = c.no_rope_layers[c.layer + 1] ~= 0
    else use_rope = (c.layer + 1) % c.nope_interval ~= 0 end
    local sliding = c.use_window and c.layer_types and c.layer_types[c.layer + 1] == "sliding_attention"
    local h = rmsnorm(x, w.attn_norm, c.eps)
    local q, k, v = linear(h, w.q, ab and w.q_bias), linear(h, w.k, ab and w.k_bias), linear(h, w.v, ab and w.v_bias)
    if use_rope then
      q = rope(q, rope_opts(c, c.heads))
      k = rope(k, rope_opts(c, c.kv_heads))
    end
    local a = attention(q, k, v, {heads = c.heads, kv_heads = c.kv_heads, head_dim = c.head_dim,
                                  window = sliding and c.window or 0})
    x = x + linear(a, w.o, ab and w.o_bias)
    h = rmsnorm(x, w.ffn_norm, c.eps)
    local m = silu(linear(h, w.gate, mb and w.gate_bias)) * linear(h, w.up, mb and w.up_bias)
    return x + linear(m, w.down, mb and w.down_bias)
  end,
  head = lm_head,
}

-- Qwen3-MoE: Qwen3's attention; the MLP of layer i is a sparse mixture of
-- many small experts (moe_intermediate_size) when i is not in mlp_only_layers
-- and (i + 1) is a multiple of decoder_sparse_step, a dense SwiGLU MLP
-- (intermediate_size) otherwise. The top-k router probabilities are
-- renormalized only when norm_topk_prob is set.
M.qwen3moe = {
  hf = {"Qwen3MoeForCausalLM"},
  gguf = "qwen3moe",
  config = merge(TRANSFORMER_CONFIG, ROPE_CONFIG, MOE_CONFIG, {attention_bias = BIAS_CONFIG.attention_bias}, {
    ffn             = {hf = "intermediate_size", gguf = "%s.feed_forward_length", default = "moe_ffn"},
    norm_topk       = {hf = "norm_topk_prob", default = true},
    sparse_step     = {hf = "decoder_sparse_step", default = 1},
    mlp_only_layers = {hf = "mlp_only_layers", default = false},
  }),
  rope_pairs = {hf = "halves", gguf = "halves"},
  weights = merge(LLAMA_WEIGHTS, ATTN_BIAS_WEIGHTS, MOE_WEIGHTS, {
    q_norm      = {hf = "model.layers.%d.self_attn.q_norm.weight", gguf = "blk.%d.attn_q_norm.weight", shape = {"head_dim"}},
    k_norm      = {hf = "model.layers.%d.self_attn.k_norm.weight", gguf = "blk.%d.attn_k_norm.weight", shape = {"head_dim"}},
  }),
  embed = embed_tokens,
  layer = function(x, w, c)
    local ab = c.attention_bias
    local dense = c.experts == 0 or (c.layer + 1) % c.sparse_step ~= 0
    for _, i in ipairs(c.mlp_only_layers or {}) do dense = dense or i == c.layer end
    local h = rmsnorm(x, w.attn_norm, c.eps)
    local q, k, v = linear(h, w.q, ab and w.q_bias), linear(h, w.k, ab and w.k_bias), linear(h, w.v, ab and w.v_bias)
    q = rope(rmsnorm(q, w.q_norm, c.eps, {heads = c.heads}), rope_opts(c, c.heads))
    k = rope(rmsnorm(k, w.k_norm, c.eps, {heads = c.kv_heads}), rope_opts(c, c.kv_heads))
    local a = attention(q, k, v, {heads = c.heads, kv_heads = c.kv_heads, head_dim = c.head_dim})
    x = x + linear(a, w.o, ab and w.o_bias)
    h = rmsnorm(x, w.ffn_norm, c.eps)
    if dense then return x + linear(silu(linear(h, w.gate)) * linear(h, w.up), w.down) end
    return x + moe(h, w.router, {gate = w.expert_gate, up = w.expert_up, down = w.expert_down},
                   {experts = c.experts, top_k = c.top_k, normalize = c.norm_topk})
  end,
  head = lm_head,
}

-- DeepSeek-V2: multi-head latent attention (MLA) and a MoE with shared
-- experts. Keys and values come from one low-rank latent per token
-- (kv_a_proj's first kv_lora columns, RMSNorm) and a RoPE key shared by all
-- heads (its last qk_rope columns; RoPE on adjacent pairs). The KV cache holds
-- just that row, and attention runs in the absorbed form: each query head's
-- no-RoPE part enters latent space through its block of kv_b_proj (W_UK^T),
-- attends over the cached rows as one KV head whose values are the latent,
-- and leaves through the head's W_UV. Layers from first_k_dense_replace on
-- (every moe_layer_freq-th) route: softmax, top-k among the topk_group best of
-- n_group groups (group_limited_greedy), weights times routed_scaling_factor,
-- not renormalized (transformers' DeepseekV2 ignores norm_topk_prob), plus a
-- dense MLP n_shared_experts experts wide; the others a dense MLP. (The
-- layer's order lets q_a and kv_a share a kernel, and k end just before
-- attention, so that the KV store joins the kernel that finishes k.)
-- GGUF (llama.cpp's converter): kv_b_proj in parts (attn_k_b, each head's
-- block transposed, and attn_v_b); qk_nope is key_length_mla less the RoPE
-- width; yarn_log_multiplier holds 0.1 x mscale_all_dim, and llama.cpp
-- takes mscale equal to it; groups limit the routing whenever there are
-- several (llama.cpp knows no topk_method), and expert_weights_norm
-- renormalizes as llama.cpp does. Only softmax routing (expert_gating_func
-- 1): DeepSeek-V3's sigmoid and its expert bias are refused.
M.deepseek2 = {
  hf = {"DeepseekV2ForCausalLM"}, gguf = "deepseek2",
  config = merge(TRANSFORMER_CONFIG, ROPE_CONFIG, BIAS_CONFIG, MOE_CONFIG, {
    head_dim = {hf = "qk_rope_head_dim", gguf = "%s.rope.dimension_count"}, kv_lora = {hf = "kv_lora_rank", gguf = "%s.attention.kv_lora_rank"},
    q_lora = {hf = "q_lora_rank", gguf = "%s.attention.q_lora_rank", default = 0}, k_mla = {gguf = "%s.attention.key_length_mla", default = 0},
    v_dim = {hf = "v_head_dim", gguf = "%s.attention.value_length_mla"}, qk_nope = {hf = "qk_nope_head_dim", default = "k_mla - head_dim"},
    shared = {hf = "n_shared_experts", gguf = "%s.expert_shared_count", default = 0}, moe_freq = {hf = "moe_layer_freq", default = 1},
    routed_scale = {hf = "routed_scaling_factor", gguf = "%s.expert_weights_scale", default = 1}, gating = {gguf = "%s.expert_gating_func", default = 1},
    groups = {hf = "n_group", gguf = "%s.expert_group_count", default = 1}, norm_topk = {gguf = "%s.expert_weights_norm", default = false},
    top_groups = {hf = "topk_group", gguf = "%s.expert_group_used_count", default = "groups"},
    topk_method = {hf = "topk_method", by_format = {gguf = "group_limited_greedy"}, default = "greedy"},
    first_dense = {hf = "first_k_dense_replace", gguf = "%s.leading_dense_block_count", default = 0},
    log_mul = {gguf = "%s.rope.scaling.yarn_log_multiplier", default = 0}, rope_mscale = {hf = ROPE_CONFIG.rope_mscale.hf, default = "log_mul * 10"},
    rope_mscale_all = {hf = ROPE_CONFIG.rope_mscale_all.hf, default = "log_mul * 10"},
  }),
  rope_pairs = {hf = "adjacent", gguf = "adjacent"},
  weights = merge(LLAMA_WEIGHTS, ATTN_BIAS_WEIGHTS, MLP_BIAS_WEIGHTS, MOE_WEIGHTS, {
    q           = {hf = "model.layers.%d.self_attn.q_proj.weight", gguf = "blk.%d.attn_q.weight", shape = {"heads * (qk_nope + head_dim)", "dim"}},
    q_a         = {hf = "model.layers.%d.self_attn.q_a_proj.weight", gguf = "blk.%d.attn_q_a.weight", shape = {"q_lora", "dim"}},
    q_a_bias    = {hf = "model.layers.%d.self_attn.q_a_proj.bias", shape = {"q_lora"}},
    q_a_norm    = {hf = "model.layers.%d.self_attn.q_a_layernorm.weight", gguf = "blk.%d.attn_q_a_norm.weight", shape = {"q_lora"}},
    q_b         = {hf = "model.layers.%d.self_attn.q_b_proj.weight", gguf = "blk.%d.attn_q_b.weight", shape = {"heads * (qk_nope + head_dim)", "q_lora"}},
    kv_a        = {hf = "model.layers.%d.self_attn.kv_a_proj_with_mqa.weight", gguf = "blk.%d.attn_kv_a_mqa.weight", shape = {"kv_lora + head_dim", "dim"}},
    kv_a_bias   = {hf = "model.layers.%d.self_attn.kv_a_proj_with_mqa.bias", shape = {"kv_lora + head_dim"}},
    kv_a_norm   = {hf = "model.layers.%d.self_attn.kv_a_layernorm.weight", gguf = "blk.%d.attn_kv_a_norm.weight", shape = {"kv_lora"}},
    kv_b        = {hf = "model.layers.%d.self_attn.kv_b_proj.weight", shape = {"heads * (qk_nope + v_dim)", "kv_lora"},
                   gguf = {heads = "heads", {"blk.%d.attn_k_b.weight", rows = "qk_nope", transposed = true}, {"blk.%d.attn_v_b.weight", rows = "v_dim"}}},
    o           = {hf = "model.layers.%d.self_attn.o_proj.weight", gguf = "blk.%d.attn_output.weight", shape = {"dim", "heads * v_dim"}},
    shared_gate = {hf = "model.layers.%d.mlp.shared_experts.gate_proj.weight", gguf = "blk.%d.ffn_gate_shexp.weight", shape = {"shared * moe_ffn", "dim"}},
    shared_up   = {hf = "model.layers.%d.mlp.shared_experts.up_proj.weight", gguf = "blk.%d.ffn_up_shexp.weight", shape = {"shared * moe_ffn", "dim"}},
    shared_down = {hf = "model.layers.%d.mlp.shared_experts.down_proj.weight", gguf = "blk.%d.ffn_down_shexp.weight", shape = {"dim", "shared * moe_ffn"}},
    shared_gate_bias = {hf = "model.layers.%d.mlp.shared_experts.gate_proj.bias", shape = {"shared * moe_ffn"}},
    shared_up_bias   = {hf = "model.layers.%d.mlp.shared_experts.up_proj.bias", shape = {"shared * moe_ffn"}},
    shared_down_bias = {hf = "model.layers.%d.mlp.shared_experts.down_proj.bias", shape = {"dim"}},
  }),
  embed = embed_tokens,
  layer = function(x, w, c)
    local ab, mb, H, nope, rd, lora = c.attention_bias, c.mlp_bias, c.heads, c.qk_nope, c.head_dim, c.kv_lora
    local h = rmsnorm(x, w.attn_norm, c.eps)
    local q, kv = linear(h, c.q_lora > 0 and w.q_a or w.q, c.q_lora > 0 and ab and w.q_a_bias), linear(h, w.kv_a, ab and w.kv_a_bias)
    if c.q_lora > 0 then q = linear(rmsnorm(q, w.q_a_norm, c.eps), w.q_b) end
    local q_pe = rope(columns(q, nope, rd, {heads = H}), rope_opts(c, H))
    q = concat(head_linear(columns(q, 0, nope, {heads = H}), w.kv_b, {heads = H, rows = nope, transpose = true}), q_pe, {heads = H})
    local k = concat(rmsnorm(columns(kv, 0, lora), w.kv_a_norm, c.eps), rope(columns(kv, lora, rd), rope_opts(c, 1)))
    local m = c.rope_type ~= "default" and c.rope_mscale_all ~= 0 and yarn_mscale(c.rope_factor, c.rope_mscale_all) or 1
    local a = attention(q, k, nil, {heads = H, kv_heads = 1, head_dim = lora + rd, value_dim = lora, scale = m * m / math.sqrt(nope + rd)})
    x = x + linear(head_linear(a, w.kv_b, {heads = H, first = nope, rows = c.v_dim}), w.o, ab and w.o_bias)
    h = rmsnorm(x, w.ffn_norm, c.eps)
    local function mlp(p) -- the dense MLP (p = "") or the shared experts' (p = "shared_")
      local function l(y, n) return linear(y, w[p .. n], mb and w[p .. n .. "_bias"]) end
      return l(silu(l(h, "gate")) * l(h, "up"), "down")
    end
    if c.layer < c.first_dense or c.layer % c.moe_freq ~= 0 then return x + mlp("") end
    assert(c.gating == 1, "deepseek2: only softmax routing (expert_gating_func 1)"); local limited = c.topk_method == "group_limited_greedy"
    local routed = moe(h, w.router, {gate = w.expert_gate, up = w.expert_up, down = w.expert_down}, {experts = c.experts, top_k = c.top_k,
                       normalize = c.norm_topk, groups = limited and c.groups or 1, top_groups = limited and c.top_groups or 1}) * c.routed_scale
    return x + (c.shared > 0 and routed + mlp("shared_") or routed)
  end,
  head = lm_head,
}

-- gpt-oss: Llama's attention with biases and a learned sink logit per query
-- head in each softmax (it joins the sum and weighs no value), sliding and
-- full layers alternating (layer_types), YaRN RoPE on halves; in every layer
-- a MoE with a router bias, a softmax over the top-k logits (the same as
-- renormalizing their probabilities), and experts with biases whose SwiGLU
-- clamps the gate to <= limit and up to [-limit, limit] and gives
-- gate sigmoid(alpha gate) (up + 1). transformers keeps a layer's experts
-- stacked and transposed, gate and up interleaved (gate_up_proj [experts,
-- dim, 2 ffn]: gate the even columns, up the odd); llama.cpp's converter
-- splits and transposes them into ffn_*_exps, and llama.cpp fixes alpha and
-- limit and always rounds YaRN's ramp bounds (transformers: truncate false).
M.gptoss = {
  hf = {"GptOssForCausalLM"},
  gguf = "gpt-oss",
  config = merge(TRANSFORMER_CONFIG, ROPE_CONFIG, {attention_bias = BIAS_CONFIG.attention_bias}, {
    rope_theta   = {hf = {"rope_theta", "rope_parameters.rope_theta"}, gguf = "%s.rope.freq_base", default = 150000},
    ffn          = {hf = "intermediate_size", gguf = "%s.expert_feed_forward_length"},
    experts      = {hf = "num_local_experts", gguf = "%s.expert_count"},
    top_k        = {hf = "num_experts_per_tok", gguf = "%s.expert_used_count"},
    swiglu_alpha = {hf = "swiglu_alpha", default = 1.702},
    swiglu_limit = {hf = "swiglu_limit", default = 7},
    layer_types  = {hf = "layer_types", default = false},
  }),
  rope_pairs = {hf = "halves", gguf = "halves"},
  weights = merge(LLAMA_WEIGHTS, ATTN_BIAS_WEIGHTS, {
    ffn_norm    = {hf = "model.layers.%d.post_attention_layernorm.weight", gguf = "blk.%d.post_attention_norm.weight", shape = {"dim"}},
    sinks       = {hf = "model.layers.%d.self_attn.sinks", gguf = "blk.%d.attn_sinks.weight", shape = {"heads"}},
    router      = {hf = "model.layers.%d.mlp.router.weight", gguf = "blk.%d.ffn_gate_inp.weight", shape = {"experts", "dim"}},
    router_bias = {hf = "model.layers.%d.mlp.router.bias", gguf = "blk.%d.ffn_gate_inp.bias", shape = {"experts"}},
    expert_gate = {hf = {{"model.layers.%d.mlp.experts.gate_up_proj", rows = "ffn", every = 2, transposed = true}},
                   gguf = EXPS.gate, shape = {"ffn", "dim"}, experts = "experts"},
    expert_up   = {hf = {{"model.layers.%d.mlp.experts.gate_up_proj", rows = "ffn", first = 1, every = 2, transposed = true}},
                   gguf = EXPS.up, shape = {"ffn", "dim"}, experts = "experts"},
    expert_down = {hf = {{"model.layers.%d.mlp.experts.down_proj", rows = "dim", transposed = true}},
                   gguf = EXPS.down, shape = {"dim", "ffn"}, experts = "experts"},
    gate_bias   = {hf = {{"model.layers.%d.mlp.experts.gate_up_proj_bias", rows = "ffn", every = 2}},
                   gguf = "blk.%d.ffn_gate_exps.bias", shape = {"ffn"}, experts = "experts"},
    up_bias     = {hf = {{"model.layers.%d.mlp.experts.gate_up_proj_bias", rows = "ffn", first = 1, every = 2}},
                   gguf = "blk.%d.ffn_up_exps.bias", shape = {"ffn"}, experts = "experts"},
    down_bias   = {hf = "model.layers.%d.mlp.experts.down_proj_bias", gguf = "blk.%d.ffn_down_exps.bias", shape = {"dim"},
                   experts = "experts"},
  }),
  embed = embed_tokens,
  layer = function(x, w, c)
    local ab = c.attention_bias
    local sliding = c.layer_types and c.layer_types[c.layer + 1] == "sliding_attention" or not c.layer_types and c.layer % 2 == 0
    local h = rmsnorm(x, w.attn_norm, c.eps)
    local q, k, v = linear(h, w.q, ab and w.q_bias), linear(h, w.k, ab and w.k_bias), linear(h, w.v, ab and w.v_bias)
    q, k = rope(q, rope_opts(c, c.heads)), rope(k, rope_opts(c, c.kv_heads))
    local a = attention(q, k, v, {heads = c.heads, kv_heads = c.kv_heads, head_dim = c.head_dim,
                                  window = sliding and c.window or 0, sinks = w.sinks})
    x = x + linear(a, w.o, ab and w.o_bias)
    h = rmsnorm(x, w.ffn_norm, c.eps)
    return x + moe(h, w.router, {gate = w.expert_gate, up = w.expert_up, down = w.expert_down, gate_bias = w.gate_bias,
                                 up_bias = w.up_bias, down_bias = w.down_bias},
                   {experts = c.experts, top_k = c.top_k, router_bias = w.router_bias, alpha = c.swiglu_alpha,
                    limit = c.swiglu_limit, up_offset = 1})
  end,
  head = lm_head,
}

-- Gemma 3 (text): Gemma 2's layer with a (1 + w) RMSNorm of every query and
-- key head before RoPE and no attention softcap by default; sliding and full
-- layers (layer_types) use different RoPE: the full layers rope_parameters'
-- full_attention (theta, scaling), the sliding ones sliding_attention's theta
-- (transformers 4: rope_theta / rope_scaling and rope_local_base_freq).
M.gemma3 = {
  hf = {"Gemma3ForCausalLM"},
  gguf = "gemma3",
  config = merge(M.gemma2.config, {
    rope_theta       = {hf = {"rope_parameters.full_attention.rope_theta", "rope_theta"}, gguf = "%s.rope.freq_base", default = 10000},
    rope_type        = {hf = {"rope_parameters.full_attention.rope_type", "rope_scaling.rope_type", "rope_scaling.type"},
                        gguf = "%s.rope.scaling.type", default = "default"},
    rope_factor      = {hf = {"rope_parameters.full_attention.factor", "rope_scaling.factor"}, gguf = "%s.rope.scaling.factor", default = 1},
    rope_low_freq    = {hf = {"rope_parameters.full_attention.low_freq_factor", "rope_scaling.low_freq_factor"}, default = 1},
    rope_high_freq   = {hf = {"rope_parameters.full_attention.high_freq_factor", "rope_scaling.high_freq_factor"}, default = 4},
    rope_orig_ctx    = {hf = {"rope_parameters.full_attention.original_max_position_embeddings",
                              "rope_scaling.original_max_position_embeddings"}, default = "ctx"},
    rope_beta_fast   = {hf = {"rope_parameters.full_attention.beta_fast", "rope_scaling.beta_fast"}, default = 32},
    rope_beta_slow   = {hf = {"rope_parameters.full_attention.beta_slow", "rope_scaling.beta_slow"}, default = 1},
    rope_attn_factor = {hf = {"rope_parameters.full_attention.attention_factor", "rope_scaling.attention_factor"}, default = 0},
    window          = {hf = "sliding_window", gguf = "%s.attention.sliding_window", default = 4096},
    window_pattern  = {hf = "sliding_window_pattern", default = 6},
    local_theta     = {hf = {"rope_parameters.sliding_attention.rope_theta", "rope_local_base_freq"}, default = 10000},
    local_rope_type = {hf = "rope_parameters.sliding_attention.rope_type", default = "default"},
  }),
  rope_pairs = {hf = "halves", gguf = "halves"},
  weights = merge(M.gemma2.weights, {
    q_norm = {hf = "model.layers.%d.self_attn.q_norm.weight", gguf = "blk.%d.attn_q_norm.weight", shape = {"head_dim"}},
    k_norm = {hf = "model.layers.%d.self_attn.k_norm.weight", gguf = "blk.%d.attn_k_norm.weight", shape = {"head_dim"}},
  }),
  embed = M.gemma2.embed,
  layer = function(x, w, c)
    local sliding
    if c.layer_types then sliding = c.layer_types[c.layer + 1] == "sliding_attention"
    else sliding = (c.layer + 1) % c.window_pattern ~= 0 end
    if sliding and c.local_rope_type ~= "default" then error("gemma3: RoPE scaling on sliding layers is not supported") end
    local function rope_of(heads)
      local o = rope_opts(c, heads)
      if sliding then o.theta, o.scaling = c.local_theta, merge(o.scaling, {type = "default"}) end
      return o
    end
    return gemma_block(x, w, c, sliding, function(q, k)
      return rope(rmsnorm(q, w.q_norm, c.eps, {heads = c.heads, offset = c.norm_offset}), rope_of(c.heads)),
             rope(rmsnorm(k, w.k_norm, c.eps, {heads = c.kv_heads, offset = c.norm_offset}), rope_of(c.kv_heads))
    end)
  end,
  head = M.gemma2.head,
}

-- LFM2 (Liquid): a hybrid of gated short convolutions and grouped-query attention with per-head
-- q/k RMSNorms, each layer's mixer followed by a SwiGLU MLP. A convolution layer projects its
-- normalized input to B, C and x (one in_proj, in that order), convolves B * x causally over the
-- sequence with a kernel of conv_L_cache taps per channel (its last inputs are the sequence's
-- recurrent state), gates the result with C and projects it out. layer_types names each layer
-- ("conv" or "full_attention"; older configs list full_attn_idxs). The final norm is stored as
-- embedding_norm. The MLP's width comes from its stored weight (the config's intermediate_size
-- is adjusted by block_auto_adjust_ff_dim before use).
M.lfm2 = {
  hf = {"Lfm2ForCausalLM"},
  gguf = "lfm2",
  config = merge(TRANSFORMER_CONFIG, ROPE_CONFIG, {
    eps            = {hf = "norm_eps", gguf = "%s.attention.layer_norm_rms_epsilon", default = 1e-5},
    ffn            = {default = "tensor_rows:gate"},
    kv_heads       = {hf = "num_key_value_heads", gguf = "%s.attention.head_count_kv", default = "heads", reduce = "max"},
    conv_width     = {hf = "conv_L_cache", gguf = "%s.shortconv.l_cache", default = 3},
    conv_bias      = {hf = "conv_bias", default = false},
    layer_types    = {hf = "layer_types", gguf = "%s.attention.head_count_kv", default = false},
    full_attn_idxs = {hf = "full_attn_idxs", default = false},
  }),
  rope_pairs = {hf = "halves", gguf = "halves"},
  weights = {
    embed = LLAMA_WEIGHTS.embed, lm_head = LLAMA_WEIGHTS.lm_head,
    final_norm = {hf = "model.embedding_norm.weight", gguf = "token_embd_norm.weight", shape = {"dim"}},
    attn_norm  = {hf = "model.layers.%d.operator_norm.weight", gguf = "blk.%d.attn_norm.weight", shape = {"dim"}},
    ffn_norm   = {hf = "model.layers.%d.ffn_norm.weight", gguf = "blk.%d.ffn_norm.weight", shape = {"dim"}},
    q = LLAMA_WEIGHTS.q, k = LLAMA_WEIGHTS.k, v = LLAMA_WEIGHTS.v,
    o          = {hf = "model.layers.%d.self_attn.out_proj.weight", gguf = LLAMA_WEIGHTS.o.gguf, shape = {"dim", "heads * head_dim"}},
    q_norm     = {hf = "model.layers.%d.self_attn.q_layernorm.weight", gguf = "blk.%d.attn_q_norm.weight", shape = {"head_dim"}},
    k_norm     = {hf = "model.layers.%d.self_attn.k_layernorm.weight", gguf = "blk.%d.attn_k_norm.weight", shape = {"head_dim"}},
    conv_in    = {hf = "model.layers.%d.conv.in_proj.weight", gguf = "blk.%d.shortconv.in_proj.weight", shape = {"3 * dim", "dim"}},
    conv_in_bias = {hf = "model.layers.%d.conv.in_proj.bias", shape = {"3 * dim"}},
    conv       = {hf = "model.layers.%d.conv.conv.weight", gguf = "blk.%d.shortconv.conv.weight", shape = {"dim", "conv_width"}},
    conv_bias  = {hf = "model.layers.%d.conv.conv.bias", shape = {"dim"}},
    conv_out   = {hf = "model.layers.%d.conv.out_proj.weight", gguf = "blk.%d.shortconv.out_proj.weight", shape = {"dim", "dim"}},
    conv_out_bias = {hf = "model.layers.%d.conv.out_proj.bias", shape = {"dim"}},
    gate       = {hf = "model.layers.%d.feed_forward.w1.weight", gguf = LLAMA_WEIGHTS.gate.gguf, shape = {"ffn", "dim"}},
    up         = {hf = "model.layers.%d.feed_forward.w3.weight", gguf = LLAMA_WEIGHTS.up.gguf, shape = {"ffn", "dim"}},
    down       = {hf = "model.layers.%d.feed_forward.w2.weight", gguf = LLAMA_WEIGHTS.down.gguf, shape = {"dim", "ffn"}},
  },
  embed = embed_tokens,
  layer = function(x, w, c)
    local attn
    local kind = c.layer_types and c.layer_types[c.layer + 1]
    if type(kind) == "number" then attn = kind > 0 -- a GGUF's head_count_kv
    elseif kind then attn = kind ~= "conv"
    else
      attn = false
      for _, i in ipairs(c.full_attn_idxs or {}) do attn = attn or i == c.layer end
    end
    local h = rmsnorm(x, w.attn_norm, c.eps)
    if attn then
      local q, k, v = linear(h, w.q), linear(h, w.k), linear(h, w.v)
      q = rope(rmsnorm(q, w.q_norm, c.eps, {heads = c.heads}), rope_opts(c, c.heads))
      k = rope(rmsnorm(k, w.k_norm, c.eps, {heads = c.kv_heads}), rope_opts(c, c.kv_heads))
      x = x + linear(attention(q, k, v, {heads = c.heads, kv_heads = c.kv_heads, head_dim = c.head_dim}), w.o)
    else
      local cb = c.conv_bias
      local bcx = linear(h, w.conv_in, cb and w.conv_in_bias)
      local b, gate, xs = columns(bcx, 0, c.dim), columns(bcx, c.dim, c.dim), columns(bcx, 2 * c.dim, c.dim)
      local y = gate * causal_conv(b * xs, w.conv, cb and w.conv_bias)
      x = x + linear(y, w.conv_out, cb and w.conv_out_bias)
    end
    h = rmsnorm(x, w.ffn_norm, c.eps)
    return x + linear(silu(linear(h, w.gate)) * linear(h, w.up), w.down)
  end,
  head = lm_head,
}

-- Mamba-2's mixer, shared by the entries of its hybrids (Granite 4.0's; Nemotron-H and Falcon-H1
-- name their weights alike under another prefix): in_proj to the gate z, x|B|C and dt per head;
-- x|B|C through a causal convolution and SiLU; the selective scan (ssm_scan) per head from the
-- sequence's state; RMSNorm per group of heads (a weight per channel) of the result gated by
-- SiLU(z); out_proj. time_step_limit clamps dt (transformers writes its infinity as an object).
local MAMBA2_CONFIG = {
  ssm_heads      = {hf = "mamba_n_heads", gguf = "%s.ssm.time_step_rank"},
  ssm_groups     = {hf = "mamba_n_groups", gguf = "%s.ssm.group_count", default = 1},
  ssm_state      = {hf = "mamba_d_state", gguf = "%s.ssm.state_size"},
  ssm_conv       = {hf = "mamba_d_conv", gguf = "%s.ssm.conv_kernel", default = 4},
  ssm_inner      = {gguf = "%s.ssm.inner_size", default = "mamba_expand * dim"},
  mamba_expand   = {hf = "mamba_expand", default = 2},
  ssm_head_dim   = {hf = "mamba_d_head", default = "ssm_inner / ssm_heads"},
  ssm_conv_bias  = {hf = "mamba_conv_bias", default = true},
  ssm_proj_bias  = {hf = "mamba_proj_bias", default = false},
  time_step_limit = {hf = "time_step_limit", default = false},
  -- transformers stores A_log, llama.cpp's converter A = -exp(A_log)
  ssm_a_log      = {by_format = {hf = true, gguf = false}},
}

local MAMBA2_PROJ, MAMBA2_XBC = "2 * ssm_inner + 2 * ssm_groups * ssm_state + ssm_heads", "ssm_inner + 2 * ssm_groups * ssm_state"
local MAMBA2_WEIGHTS = {
  ssm_in          = {hf = "model.layers.%d.mamba.in_proj.weight", gguf = "blk.%d.ssm_in.weight", shape = {MAMBA2_PROJ, "dim"}},
  ssm_in_bias     = {hf = "model.layers.%d.mamba.in_proj.bias", shape = {MAMBA2_PROJ}},
  ssm_conv1d      = {hf = "model.layers.%d.mamba.conv1d.weight", gguf = "blk.%d.ssm_conv1d.weight", shape = {MAMBA2_XBC, "ssm_conv"}},
  ssm_conv1d_bias = {hf = "model.layers.%d.mamba.conv1d.bias", gguf = "blk.%d.ssm_conv1d.bias", shape = {MAMBA2_XBC}},
  ssm_a           = {hf = "model.layers.%d.mamba.A_log", gguf = "blk.%d.ssm_a", shape = {"ssm_heads"}},
  ssm_d           = {hf = "model.layers.%d.mamba.D", gguf = "blk.%d.ssm_d", shape = {"ssm_heads"}},
  ssm_dt_bias     = {hf = "model.layers.%d.mamba.dt_bias", gguf = "blk.%d.ssm_dt.bias", shape = {"ssm_heads"}},
  ssm_norm        = {hf = "model.layers.%d.mamba.norm.weight", gguf = "blk.%d.ssm_norm.weight", shape = {"ssm_inner"}},
  ssm_out         = {hf = "model.layers.%d.mamba.out_proj.weight", gguf = "blk.%d.ssm_out.weight", shape = {"dim", "ssm_inner"}},
  ssm_out_bias    = {hf = "model.layers.%d.mamba.out_proj.bias", shape = {"dim"}},
}

local function mamba2_mixer(h, w, c)
  local I, GN, H, pb = c.ssm_inner, c.ssm_groups * c.ssm_state, c.ssm_heads, c.ssm_proj_bias
  local p = linear(h, w.ssm_in, pb and w.ssm_in_bias)
  local z, dt = columns(p, 0, I), columns(p, 2 * I + 2 * GN, H)
  local xbc = silu(causal_conv(columns(p, I, I + 2 * GN), w.ssm_conv1d, c.ssm_conv_bias and w.ssm_conv1d_bias))
  local lim = c.time_step_limit or {}
  local y = ssm_scan(columns(xbc, 0, I), dt, columns(xbc, I, GN), columns(xbc, I + GN, GN), w.ssm_a, w.ssm_d,
                     w.ssm_dt_bias, {heads = H, head_dim = c.ssm_head_dim, state = c.ssm_state, groups = c.ssm_groups,
                                     a_log = c.ssm_a_log, dt_min = type(lim[1]) == "number" and lim[1] or 0,
                                     dt_max = type(lim[2]) == "number" and lim[2] or math.huge})
  y = rmsnorm(y * silu(z), w.ssm_norm, c.eps, {heads = c.ssm_groups})
  return linear(y, w.ssm_out, pb and w.ssm_out_bias)
end

-- Granite 4.0 hybrid (GraniteMoeHybrid: Granite-4.0-H Micro, Tiny, Small): Mamba-2 layers among
-- grouped-query attention layers, Granite's multipliers (embedding, residual, attention scale,
-- logits), and after every mixer a shared SwiGLU MLP plus, when the config has experts, a
-- top-k MoE (softmax over the chosen experts' logits: the renormalized top-k). The Mamba-2
-- layers are mamba2_mixer. layer_types says "mamba"/"linear_attention" or "attention"/"full_attention"; attention
-- layers rotate q and k only with position_embedding_type "rope" (Granite 4.0 uses none).
M.granitehybrid = {
  hf = {"GraniteMoeHybridForCausalLM"},
  gguf = "granitehybrid",
  config = merge(TRANSFORMER_CONFIG, ROPE_CONFIG, {attention_bias = BIAS_CONFIG.attention_bias}, {
    embedding_multiplier = M.granite.config.embedding_multiplier, residual_multiplier = M.granite.config.residual_multiplier,
    attention_multiplier = M.granite.config.attention_multiplier, logits_scaling = M.granite.config.logits_scaling,
    kv_heads       = {hf = "num_key_value_heads", gguf = "%s.attention.head_count_kv", default = "heads", reduce = "max"},
    layer_types    = {hf = "layer_types", gguf = "%s.attention.head_count_kv"},
    position_type  = {hf = "position_embedding_type", default = "nope"},
    gguf_rope      = {by_format = {hf = false}, gguf = "%s.rope.scaling.finetuned", default = true}, -- absent: rotate
    shared_ffn     = {hf = "shared_intermediate_size", gguf = "%s.expert_shared_feed_forward_length"},
    experts        = {hf = "num_local_experts", gguf = "%s.expert_count", default = 0},
    top_k          = {hf = "num_experts_per_tok", gguf = "%s.expert_used_count", default = 0},
  }, MAMBA2_CONFIG),
  rope_pairs = {hf = "halves", gguf = "adjacent"},
  weights = merge(ATTN_BIAS_WEIGHTS, MAMBA2_WEIGHTS, {
    embed       = LLAMA_WEIGHTS.embed, final_norm = LLAMA_WEIGHTS.final_norm, lm_head = LLAMA_WEIGHTS.lm_head,
    attn_norm   = LLAMA_WEIGHTS.attn_norm, ffn_norm = LLAMA_WEIGHTS.ffn_norm,
    q = LLAMA_WEIGHTS.q, k = LLAMA_WEIGHTS.k, v = LLAMA_WEIGHTS.v, o = LLAMA_WEIGHTS.o,
    shared_gate = {hf = {{"model.layers.%d.shared_mlp.input_linear.weight", rows = "shared_ffn", of = "2 * shared_ffn"}},
                   gguf = "blk.%d.ffn_gate_shexp.weight", shape = {"shared_ffn", "dim"}},
    shared_up   = {hf = {{"model.layers.%d.shared_mlp.input_linear.weight", rows = "shared_ffn", first = "shared_ffn",
                          of = "2 * shared_ffn"}}, gguf = "blk.%d.ffn_up_shexp.weight", shape = {"shared_ffn", "dim"}},
    shared_down = {hf = "model.layers.%d.shared_mlp.output_linear.weight", gguf = "blk.%d.ffn_down_shexp.weight",
                   shape = {"dim", "shared_ffn"}},
    router      = {hf = "model.layers.%d.block_sparse_moe.router.layer.weight", gguf = MOE_WEIGHTS.router.gguf, shape = {"experts", "dim"}},
    expert_gate = {hf = {{"model.layers.%d.block_sparse_moe.input_linear.weight", rows = "ffn", of = "2 * ffn"}},
                   gguf = EXPS.gate, shape = {"ffn", "dim"}, experts = "experts"},
    expert_up   = {hf = {{"model.layers.%d.block_sparse_moe.input_linear.weight", rows = "ffn", first = "ffn", of = "2 * ffn"}},
                   gguf = EXPS.up, shape = {"ffn", "dim"}, experts = "experts"},
    expert_down = {hf = "model.layers.%d.block_sparse_moe.output_linear.weight", gguf = EXPS.down, shape = {"dim", "ffn"},
                   experts = "experts"},
  }),
  embed = M.granite.embed,
  layer = function(x, w, c)
    local kind = c.layer_types[c.layer + 1]
    if type(kind) == "number" then kind = kind > 0 and "attention" or "mamba" end -- a GGUF's head_count_kv
    local r, h = c.residual_multiplier, rmsnorm(x, w.attn_norm, c.eps)
    if kind == "mamba" or kind == "linear_attention" then
      x = x + mamba2_mixer(h, w, c) * r
    elseif kind == "attention" or kind == "full_attention" then
      local ab = c.attention_bias
      local q, k, v = linear(h, w.q, ab and w.q_bias), linear(h, w.k, ab and w.k_bias), linear(h, w.v, ab and w.v_bias)
      if c.position_type == "rope" or c.gguf_rope then q, k = rope(q, rope_opts(c, c.heads)), rope(k, rope_opts(c, c.kv_heads)) end
      local a = attention(q, k, v, {heads = c.heads, kv_heads = c.kv_heads, head_dim = c.head_dim,
                                    scale = c.attention_multiplier})
      x = x + linear(a, w.o, ab and w.o_bias) * r
    else
      error("granitehybrid: layer kind '" .. tostring(kind) .. "' is not supported (mamba, attention)")
    end
    h = rmsnorm(x, w.ffn_norm, c.eps)
    local m = linear(silu(linear(h, w.shared_gate)) * linear(h, w.shared_up), w.shared_down)
    if c.experts > 0 then
      m = m + moe(h, w.router, {gate = w.expert_gate, up = w.expert_up, down = w.expert_down},
                  {experts = c.experts, top_k = c.top_k})
    end
    return x + m * r
  end,
  head = M.granite.head,
}

-- Gated DeltaNet (Qwen3-Next's linear attention): projections to q|k|v|z and to b|a, each grouped
-- by key head as transformers splits them (in_proj_qkvz, in_proj_ba); q|k|v convolved causally
-- with SiLU; the gated delta rule (delta_scan) per value head from the sequence's state; each
-- value head RMS-normalized (a weight shared by the heads) and gated by SiLU(z); out_proj.
local DELTANET_CONFIG = {
  lin_kh    = {hf = "linear_num_key_heads", gguf = "%s.ssm.group_count"},
  lin_vh    = {hf = "linear_num_value_heads", gguf = "%s.ssm.time_step_rank"},
  lin_kd    = {hf = "linear_key_head_dim", gguf = "%s.ssm.state_size"},
  lin_vd    = {hf = "linear_value_head_dim", default = "lin_inner / lin_vh"},
  lin_inner = {gguf = "%s.ssm.inner_size", default = "lin_vh * lin_vd"},
  lin_conv  = {hf = "linear_conv_kernel_dim", gguf = "%s.ssm.conv_kernel", default = 4},
  -- transformers stores in_proj_qkvz grouped by key head and A_log; llama.cpp's converter q, k, v
  -- of all heads (attn_qkv), z apart (attn_gate), and A = -exp(A_log)
  lin_hf    = {by_format = {hf = true, gguf = false}},
}

local DELTANET_QKV = "2 * lin_kh * lin_kd + lin_vh * lin_vd"
local DELTANET_WEIGHTS = {
  lin_qkvz    = {hf = "model.layers.%d.linear_attn.in_proj_qkvz.weight", shape = {"2 * lin_kh * lin_kd + 2 * lin_vh * lin_vd", "dim"}},
  lin_qkv     = {gguf = "blk.%d.attn_qkv.weight", shape = {DELTANET_QKV, "dim"}},
  lin_z       = {gguf = "blk.%d.attn_gate.weight", shape = {"lin_vh * lin_vd", "dim"}},
  lin_ba      = {hf = "model.layers.%d.linear_attn.in_proj_ba.weight", gguf = "blk.%d.ssm_ba.weight", shape = {"2 * lin_vh", "dim"}},
  lin_conv1d  = {hf = "model.layers.%d.linear_attn.conv1d.weight", gguf = "blk.%d.ssm_conv1d.weight", shape = {DELTANET_QKV, "lin_conv"}},
  lin_a_log   = {hf = "model.layers.%d.linear_attn.A_log", gguf = "blk.%d.ssm_a", shape = {"lin_vh"}},
  lin_dt_bias = {hf = "model.layers.%d.linear_attn.dt_bias", gguf = "blk.%d.ssm_dt.bias", shape = {"lin_vh"}},
  lin_norm    = {hf = "model.layers.%d.linear_attn.norm.weight", gguf = "blk.%d.ssm_norm.weight", shape = {"lin_vd"}},
  lin_out     = {hf = "model.layers.%d.linear_attn.out_proj.weight", gguf = "blk.%d.ssm_out.weight", shape = {"dim", "lin_vh * lin_vd"}},
}

local function gated_deltanet(h, w, c)
  local KH, VH, KD, VD = c.lin_kh, c.lin_vh, c.lin_kd, c.lin_vd
  local r = VH // KH -- value heads per key head
  local qkv, z
  if c.lin_hf then
    local qkvz = linear(h, w.lin_qkvz)
    local q, k = columns(qkvz, 0, KD, {heads = KH}), columns(qkvz, KD, KD, {heads = KH})
    qkv, z = concat(concat(q, k), columns(qkvz, 2 * KD, r * VD, {heads = KH})), columns(qkvz, 2 * KD + r * VD, r * VD, {heads = KH})
  else
    qkv, z = linear(h, w.lin_qkv), linear(h, w.lin_z)
  end
  local ba = linear(h, w.lin_ba)
  local b, a = columns(ba, 0, r, {heads = KH}), columns(ba, r, r, {heads = KH})
  qkv = silu(causal_conv(qkv, w.lin_conv1d))
  local o = delta_scan(columns(qkv, 0, KH * KD), columns(qkv, KH * KD, KH * KD), columns(qkv, 2 * KH * KD, VH * VD),
                       a, b, w.lin_a_log, w.lin_dt_bias, {k_heads = KH, v_heads = VH, k_dim = KD, v_dim = VD, a_log = c.lin_hf})
  return linear(rmsnorm(o, w.lin_norm, c.eps, {heads = VH}) * silu(z), w.lin_out)
end

-- Qwen3-Next: Gated DeltaNet layers among gated attention layers, each followed by a MoE with a
-- shared expert (sigmoid-gated) or, by decoder_sparse_step / mlp_only_layers, a dense MLP; every
-- norm scales by (1 + w). An attention layer's q_proj holds each head's query and its output gate side by side; q and k
-- get per-head norms and partial rotary, and the output is multiplied by sigmoid(gate).
M.qwen3next = {
  hf = {"Qwen3NextForCausalLM"},
  gguf = "qwen3next",
  config = merge(TRANSFORMER_CONFIG, ROPE_CONFIG, MOE_CONFIG, {attention_bias = BIAS_CONFIG.attention_bias}, {
    norm_topk       = {hf = "norm_topk_prob", default = true},
    shared_ffn      = {hf = "shared_expert_intermediate_size", gguf = "%s.expert_shared_feed_forward_length", default = 0},
    sparse_step     = {hf = "decoder_sparse_step", default = 1},
    mlp_only_layers = {hf = "mlp_only_layers", default = false},
    layer_types     = {hf = "layer_types", gguf = "%s.attention.recurrent_layers"},
    norm_offset     = {by_format = {hf = 1, gguf = 0}}, -- llama.cpp's converter stores 1 + w
  }, DELTANET_CONFIG),
  rope_pairs = {hf = "halves", gguf = "halves"},
  weights = merge(MOE_WEIGHTS, ATTN_BIAS_WEIGHTS, DELTANET_WEIGHTS, {
    embed = LLAMA_WEIGHTS.embed, final_norm = LLAMA_WEIGHTS.final_norm, lm_head = LLAMA_WEIGHTS.lm_head,
    attn_norm = LLAMA_WEIGHTS.attn_norm,
    ffn_norm = {hf = "model.layers.%d.post_attention_layernorm.weight", gguf = "blk.%d.post_attention_norm.weight", shape = {"dim"}},
    q      = {hf = "model.layers.%d.self_attn.q_proj.weight", gguf = LLAMA_WEIGHTS.q.gguf, shape = {"2 * heads * head_dim", "dim"}},
    q_bias = {hf = "model.layers.%d.self_attn.q_proj.bias", shape = {"2 * heads * head_dim"}},
    k = LLAMA_WEIGHTS.k, v = LLAMA_WEIGHTS.v, o = LLAMA_WEIGHTS.o,
    q_norm = {hf = "model.layers.%d.self_attn.q_norm.weight", gguf = "blk.%d.attn_q_norm.weight", shape = {"head_dim"}},
    k_norm = {hf = "model.layers.%d.self_attn.k_norm.weight", gguf = "blk.%d.attn_k_norm.weight", shape = {"head_dim"}},
    gate = LLAMA_WEIGHTS.gate, up = LLAMA_WEIGHTS.up, down = LLAMA_WEIGHTS.down,
    shared_gate   = {hf = "model.layers.%d.mlp.shared_expert.gate_proj.weight", gguf = "blk.%d.ffn_gate_shexp.weight", shape = {"shared_ffn", "dim"}},
    shared_up     = {hf = "model.layers.%d.mlp.shared_expert.up_proj.weight", gguf = "blk.%d.ffn_up_shexp.weight", shape = {"shared_ffn", "dim"}},
    shared_down   = {hf = "model.layers.%d.mlp.shared_expert.down_proj.weight", gguf = "blk.%d.ffn_down_shexp.weight", shape = {"dim", "shared_ffn"}},
    shared_router = {hf = "model.layers.%d.mlp.shared_expert_gate.weight", gguf = "blk.%d.ffn_gate_inp_shexp.weight", shape = {1, "dim"}},
  }),
  embed = embed_tokens,
  layer = function(x, w, c)
    local norm = {offset = c.norm_offset}
    local h = rmsnorm(x, w.attn_norm, c.eps, norm)
    local kind = c.layer_types[c.layer + 1]
    if kind == "linear_attention" or kind == true then -- a GGUF's recurrent_layers
      x = x + gated_deltanet(h, w, c)
    else
      local ab, H = c.attention_bias, c.heads
      local qg = linear(h, w.q, ab and w.q_bias)
      local q, gate = columns(qg, 0, c.head_dim, {heads = H}), columns(qg, c.head_dim, c.head_dim, {heads = H})
      local k, v = linear(h, w.k, ab and w.k_bias), linear(h, w.v, ab and w.v_bias)
      q = rope(rmsnorm(q, w.q_norm, c.eps, {heads = H, offset = c.norm_offset}), rope_opts(c, H))
      k = rope(rmsnorm(k, w.k_norm, c.eps, {heads = c.kv_heads, offset = c.norm_offset}), rope_opts(c, c.kv_heads))
      local att = attention(q, k, v, {heads = H, kv_heads = c.kv_heads, head_dim = c.head_dim})
      x = x + linear(att * sigmoid(gate), w.o, ab and w.o_bias)
    end
    h = rmsnorm(x, w.ffn_norm, c.eps, norm)
    local dense = c.experts == 0 or (c.layer + 1) % c.sparse_step ~= 0
    for _, i in ipairs(c.mlp_only_layers or {}) do dense = dense or i == c.layer end
    if dense then return x + linear(silu(linear(h, w.gate)) * linear(h, w.up), w.down) end
    local m = moe(h, w.router, {gate = w.expert_gate, up = w.expert_up, down = w.expert_down},
                  {experts = c.experts, top_k = c.top_k, normalize = c.norm_topk})
    local shared = linear(silu(linear(h, w.shared_gate)) * linear(h, w.shared_up), w.shared_down)
    return x + m + shared * sigmoid(linear(h, w.shared_router))
  end,
  head = function(x, w, c)
    return linear(rmsnorm(x, w.final_norm, c.eps, {offset = c.norm_offset}), w.lm_head)
  end,
}

return M

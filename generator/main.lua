-- generator/main.lua — the ingot generator: models.lua + a model's config → specialized sources.
--
-- usage: lua5.4 generator/main.lua --inspect INSPECT.json --source PATH --name NAME --out DIR
--            [--hf-config config.json] [--dtype native|TYPE|MIX (runtime/load/dtype_table.h)]
--            [--backend cpu] [--no-fuse] [--act-quant none|q8|q16|k8] [--max-tokens N]
--            [--models models.lua] [--dry-run] [--allow-unused]
--
-- INSPECT.json is what `ingot-inspect` prints for the checkpoint (GGUF
-- metadata or safetensors tensor list). Writes DIR/model.c (only when its
-- bytes change). INGOT_DEBUG=1 prints the kernel plan.

local script_dir = arg[0]:match("^(.*)/[^/]*$") or "."
package.path = script_dir .. "/?.lua;" .. package.path

local util = require("util")
local describe = require("describe")
local config = require("config")
local graph = require("graph")
local fuse = require("fuse")
local plan = require("plan")
local emit_c = require("emit_c")
local emit_cuda = require("emit_cuda")
local dtypes = require("dtypes")
local weight_names = require("weight_names")

local VERSION = "ingot-generator 0.1"

-- --act-quant k8 (the CPU default), q16 and q8: which weights are stored in the 16-row
-- interleaved layout (kernels/cpu/kc_x16.h), rewritten once at load. A
-- weight qualifies when its type has x16 kernels, its rows come in whole
-- groups of 16, and every node that reads it is a linear (a matmul phase,
-- whose row chunks are multiples of 16) or an embedding lookup (which reads
-- rows through kc_x16k_dequantize_row). Weights sharing a tensor (a tied LM
-- head and embedding) share the memory, so they share the decision.
-- The value is the tile's width in columns (kc_x16k.h: a K-quant tile is a
-- 256-column super-block; the generator picks K-quants only for such rows).
-- Float weights (kc_x16f.h) keep f32 activations: the layout turns their
-- decode GEMV into one weight stream with no horizontal sums (1.5x the
-- row-major kernel's read speed from DRAM, bench/RESULTS.md). --act-quant
-- none keeps every weight in the file's own layout.
-- Every type the kernels are compiled for (dtype_table.h's "build" role) has x16 kernels: a
-- block type's tile is its block, a float's 32 columns.
local X16_TYPES = {}
for _, t in ipairs(dtypes.list) do
  if t.role == "build" then X16_TYPES[t.name] = t.elems > 1 and t.elems or 32 end
end
local function choose_x16_layouts(g, weights, opts)
  if opts.backend ~= "cpu" or opts.act_quant == "none" then return end
  local readers_ok = {}
  for _, n in ipairs(g.nodes) do
    for i, inp in ipairs(n.inputs) do
      if type(inp) == "table" and inp.logical then
        local ok = (n.op == "linear" or n.op == "embedding") and i == 2
        readers_ok[inp] = (readers_ok[inp] ~= false) and ok
      end
    end
  end
  local tensor_ok = {}
  for _, w in ipairs(weights) do
    local ok = X16_TYPES[w.dtype] and #w.shape == 2 and w.shape[1] % 16 == 0 and w.shape[2] % X16_TYPES[w.dtype] == 0
      and w.stacked == 0 and not w.perm
      and not w.parts and readers_ok[w] == true
    local key = w.same_as >= 0 and w.same_as or w.slot
    tensor_ok[key] = (tensor_ok[key] ~= false) and ok and true or false
  end
  for _, w in ipairs(weights) do
    w.x16 = tensor_ok[w.same_as >= 0 and w.same_as or w.slot] == true
  end
end

-- --info's line on the activations' numerics (CPU; the CUDA backend writes its own lines)
local function act_info(opts, weights)
  if opts.backend ~= "cpu" then return "NULL" end
  local text
  -- interleaved weights: block-quantized ones (integer kernels) and float ones (f32 activations)
  local nq, nf, nk = 0, 0, 0
  for _, w in ipairs(weights) do
    if w.x16 and w.same_as < 0 then
      if plan.quantized(w.dtype) then nq = nq + 1 else nf = nf + 1 end
      if w.dtype == "q4_k" or w.dtype == "q5_k" or w.dtype == "q6_k" then nk = nk + 1 end
    end
  end
  local floats = nf == 0 and "" or string.format("; f32 against the %d float weight(s) interleaved in groups of 16 rows (kernels/cpu/kc_x16f.h)", nf)
  local q16s_text = "per 256 where a matmul's weights are all Q4_K/Q5_K/Q6_K (kc_x16s.h: AMX tiles for steps of 16+ tokens where the CPU has them, INGOT_AMX=0 to turn them off; the same bits)"
  if opts.act_quant ~= "q8" and nq == 0 then
    text = nf == 0 and "f32 (no weight here has the x16 layout's type and shape)" or string.format(
      "f32, against the %d float weight(s) interleaved in groups of 16 rows (kernels/cpu/kc_x16f.h) and the rest in the file's layout", nf)
  elseif opts.act_quant == "k8" and nk > 0 then
    text = string.format(
      "k8: int8 per 256 (llama.cpp's Q8_K rounding) where a matmul's weights are all Q4_K/Q5_K/Q6_K (kc_x16s.h), 15-bit integers per block of 32 against the other interleaved weights (kc_x16.h); %d weight(s) interleaved in groups of 16 rows%s; f32 for the rest", nq, floats)
  elseif opts.act_quant == "q16" or opts.act_quant == "k8" then
    text = string.format(
      (opts.act_quant == "k8" and "k8 (no Q4_K/Q5_K/Q6_K weight here: as q16)" or "q16") .. ": 15-bit integers per block of 32 against the %d weight(s) interleaved in groups of 16 rows (kernels/cpu/kc_x16.h), %s%s; f32 for the rest", nq, q16s_text, floats)
  elseif opts.act_quant == "q8" then
    text = string.format("q8: int8 per block of 32 against every block-quantized weight (llama.cpp's numerics); %d weight(s) interleaved in groups of 16 rows (kernels/cpu/kc_x16.h)%s", nq, floats)
  else
    text = "f32 (--act-quant none: the weights dequantized in registers, exact)"
  end
  return '"activations:     ' .. text .. '\\n"'
end

-- The architectures a CUDA build carries cubins for: the kernels are checked (no spills, nvcc
-- warnings as errors) on each of these; any other GPU runs NVRTC-compiled code (runtime/cuda/cuda_host.h)
local CUDA_ARCHS = {80, 86, 89, 90}

-- "all" or a comma-separated subset of CUDA_ARCHS, as a sorted list without repeats
local function parse_cuda_archs(text)
  if text == "all" then return CUDA_ARCHS end
  local known, picked, list = {}, {}, {}
  for _, a in ipairs(CUDA_ARCHS) do known[a] = true end
  for item in (text .. ","):gmatch("([^,]*),") do
    local a = math.tointeger(tonumber(item:match("^(%d+)$") or ""))
    if not a or not known[a] then
      util.die(string.format("--cuda-arch: '%s' is not one of 80, 86, 89, 90 (or all)", item))
    end
    if not picked[a] then picked[a] = true; list[#list + 1] = a end
  end
  table.sort(list)
  return list
end

local function parse_args(argv)
  local o = {dtype = "native", backend = "cpu", fused = true, max_tokens = 512, act_quant = "auto", kv_dtype = "auto",
             models = script_dir .. "/../models.lua"}
  local i = 1
  while i <= #argv do
    local a = argv[i]
    local function val() i = i + 1; if argv[i] == nil then util.die("missing value for " .. a) end; return argv[i] end
    if a == "--inspect" then o.inspect = val()
    elseif a == "--source" then o.source = val()
    elseif a == "--name" then o.name = val()
    elseif a == "--out" then o.out = val()
    elseif a == "--hf-config" then o.hf_config = val()
    elseif a == "--dtype" then o.dtype = val()
    elseif a == "--backend" then o.backend = val()
    elseif a == "--no-fuse" then o.fused = false
    elseif a == "--act-quant" then o.act_quant = val()
    elseif a == "--kv-dtype" then o.kv_dtype = val()
    elseif a == "--max-tokens" then o.max_tokens = math.tointeger(tonumber(val()))
    elseif a == "--models" then o.models = val()
    elseif a == "--dry-run" then o.dry_run = true
    elseif a == "--allow-unused" then o.allow_unused = true
    elseif a == "--cuda-arch" then o.cuda_arch = val()
    else util.die("unknown argument " .. a) end
    i = i + 1
  end
  for _, k in ipairs({"inspect", "source", "name", "out"}) do
    if not o[k] then util.die("--" .. k .. " is required") end
  end
  if o.backend ~= "cpu" and o.backend ~= "cuda" then util.die("unknown --backend " .. o.backend .. " (cpu or cuda)") end
  -- auto: on the CPU, k8: int8 activations per 256 for the matmuls whose weights are all
  -- Q4_K/Q5_K/Q6_K (llama.cpp's Q8_K rounding: one integer chain per weight, half the multiplies
  -- of 15 bits; perplexity no worse than llama.cpp's on the same file, bench/RESULTS.md) and
  -- 15-bit activations for the other interleaved weights (kernels/cpu/kc_x16.h, kc_x16k.h;
  -- SmolLM2's perplexity within 0.01% of f32 activations); the CUDA kernels take f32 activations
  if o.act_quant == "auto" then o.act_quant = o.backend == "cpu" and "k8" or "none" end
  if o.backend == "cuda" and o.act_quant ~= "none" then util.die("--act-quant " .. o.act_quant .. " is a CPU option") end
  -- the dtypes a weight can be converted to at load (runtime/load/dtype.c has a quantizer for each)
  local ok = {}
  for _, d in ipairs(dtypes.build_choices()) do ok[d] = true end
  if not ok[o.dtype] then util.die("unknown --dtype " .. o.dtype) end
  if o.act_quant ~= "none" and o.act_quant ~= "q8" and o.act_quant ~= "q16" and o.act_quant ~= "k8" then
    util.die("--act-quant is none, q8, q16 or k8")
  end
  -- auto: f16 (half the memory and the bytes attention reads; SmolLM2's
  -- perplexity moves by 0.01%, bench/RESULTS.md)
  if o.kv_dtype == "auto" then o.kv_dtype = "f16" end
  if o.kv_dtype ~= "f32" and o.kv_dtype ~= "f16" and o.kv_dtype ~= "q8_0" and o.kv_dtype ~= "q4" then
    util.die("--kv-dtype is f32, f16, q8_0 or q4")
  end
  if o.kv_dtype == "q4" and o.backend == "cuda" then
    util.die("--kv-dtype q4 is a CPU option: the CUDA kernels read f32, f16 and q8_0 caches")
  end
  if not o.max_tokens or o.max_tokens < 1 or o.max_tokens > 65536 then
    util.die("--max-tokens must be an integer in 1..65536")
  end
  o.cuda_archs = parse_cuda_archs(o.cuda_arch or "all")
  if o.cuda_arch and o.backend ~= "cuda" then util.die("--cuda-arch is a CUDA option") end
  return o
end

-- The dtype each weight's kernels are compiled for: vectors (norms, biases)
-- are f32; matrices keep their stored dtype unless --dtype asks otherwise.
-- A quantized --dtype follows llama.cpp's presets (llama_tensor_get_type in
-- src/llama-quant.cpp):
--  * the LM head (or the embedding it is tied to) gets q6_k: its errors go
--    straight into every logit;
--  * the mixes (MIXES) are a base type with some matrices at other types,
--    by the category of their GGUF name and their layer (mix_type);
--  * an MoE router keeps its stored type;
--  * a matrix whose rows are not a multiple of the type's block (256 for the
--    K-quants) takes llama.cpp's fallback on 32-blocks (q2_k, q3_k -> q4_0,
--    q4_k -> q5_0, q5_k -> q5_1, q6_k -> q8_0, iq4_xs -> iq4_nl), else keeps
--    its stored dtype.
-- So --dtype q4_k_m on SmolLM2 gives the very mix of llama.cpp's Q4_K_M file.
local MIXES = dtypes.mixes -- runtime/load/dtype_table.h's INGOT_DTYPE_MIX rows: name -> base type
local KQUANT_FALLBACK = {q2_k = "q4_0", q3_k = "q4_0", q4_k = "q5_0", q5_k = "q5_1", q6_k = "q8_0", iq4_xs = "iq4_nl"}

local function use_more_bits(i, n) return i < n // 8 or i >= 7 * n // 8 or (i - n // 8) % 3 == 2 end

-- llama.cpp's tensor categories, from the GGUF name (a fused QKV counts as V there).
local function tensor_category(gguf)
  if type(gguf) ~= "string" then return nil end
  for _, c in ipairs({{"attn_qkv.weight", "attn_v"}, {"attn_kv_b.weight", "attn_v"}, {"attn_v.weight", "attn_v"},
                      {"attn_k.weight", "attn_k"}, {"attn_output.weight", "attn_output"}, {"ffn_down", "ffn_down"}}) do
    if gguf:find(c[1], 1, true) then return c[2] end
  end
  return nil
end

-- The type a matrix of category `cat` in layer `i` takes in the preset `mix`
-- instead of its base type (nil: the base type). m: the model's layers, GQA
-- ratio (heads per KV head), expert count and whether llama.cpp counts it a
-- 70B (see mix_type); the 8-expert rules are Mixtral's. (The Falcon rules
-- have no family here.)
local function mix_rule(mix, cat, i, m)
  local moe8 = m.experts == 8
  if cat == "attn_v" then
    if moe8 then return "q8_0" end
    if mix == "q2_k" then return m.gqa >= 4 and "q4_k" or "q3_k" end
    if mix == "q3_k_m" then return i < 2 and "q5_k" or "q4_k" end -- the first two attn_v
    if mix == "q3_k_l" then return "q5_k" end
    if (mix == "q4_k_m" or mix == "q5_k_m") and use_more_bits(i, m.layers) then return "q6_k" end
  elseif cat == "attn_k" then
    if moe8 then return "q8_0" end
  elseif cat == "ffn_down" then
    if mix == "q2_k" then return "q3_k" end
    if mix == "q3_k_m" then return i < m.layers // 16 and "q5_k" or "q4_k" end
    if mix == "q3_k_l" then return "q5_k" end
    if (mix == "q4_k_m" or mix == "q5_k_m") and use_more_bits(i, m.layers) then return "q6_k" end
  elseif cat == "attn_output" then
    if moe8 then
      if mix == "q2_k" or mix == "q3_k_s" or mix == "q3_k_m" or mix == "q4_k_m" then return "q5_k" end
      return nil
    end
    if mix == "q2_k" then return "q3_k" end
    if mix == "q3_k_m" then return "q4_k" end
    if mix == "q3_k_l" then return "q5_k" end
  end
  return nil
end

-- llama.cpp gives a 70B model's attn_v (8 query heads per KV head: a small
-- matrix for its weight) q5_k where the preset has q3_k or q4_k.
local function mix_type(mix, cat, i, m)
  local t = mix_rule(mix, cat, i, m)
  local eff = t or MIXES[mix]
  if cat == "attn_v" and m.b70 and (eff == "q3_k" or eff == "q4_k") then return "q5_k" end
  return t
end

local function compiled_dtype(opts, w, stored, is_head, model)
  if #w.shape == 1 or w.f32 then return "f32" end -- vectors, and matrices an op reads as floats (causal_conv)
  if opts.dtype == "native" then return stored end
  local want = MIXES[opts.dtype] or opts.dtype
  -- an MoE router (ffn_gate_inp) picks the experts: llama.cpp never quantizes it
  local gguf = w.decl.gguf
  if plan.block_elems(want) > 1 and type(gguf) == "string" and gguf:find("ffn_gate_inp", 1, true) then return stored end
  if plan.block_elems(want) > 1 and want ~= "q8_0" then
    if is_head then
      want = "q6_k"
    elseif MIXES[opts.dtype] and w.layer then
      want = mix_type(opts.dtype, tensor_category(w.decl.gguf), w.layer, model) or want
    end
  end
  local block = plan.block_elems(want)
  if w.shape[2] % block ~= 0 then
    local fallback = KQUANT_FALLBACK[want]
    if fallback and w.shape[2] % plan.block_elems(fallback) == 0 then return fallback end
    io.stderr:write(string.format("ingot: note: %s (%s) has rows of %d, not a multiple of %d: kept as %s\n",
      w.logical, w.layer and ("layer " .. w.layer) or "model", w.shape[2], block, stored))
    return stored
  end
  return want
end

-- The stored tensors of a weight the checkpoint keeps in parts
-- (config.weight_parts), marked consumed. Returns what stands for the stored
-- tensor when the compiled dtype is chosen: the parts' common dtype, or f32
-- when they differ, when their blocks do not fit the assembled rows, or when a
-- part of a block type is transposed (its values land in other blocks than
-- the file's: quantized again they would change, and IQ4/K-quant types have
-- no quantizer here; f32 keeps the file's values exactly). `name` keys the
-- weight's sharing (same_as) by all of its parts.
local MAX_WEIGHT_PARTS = 4 -- templates/model_weights.c.in
local function stored_parts(d, w, tensors, consumed, source)
  if #w.parts > MAX_WEIGHT_PARTS then
    util.die(string.format("%s:%d: error: weight '%s' is stored in %d parts, at most %d are supported", d.path,
      w.decl.line, w.logical, #w.parts, MAX_WEIGHT_PARTS))
  end
  local names, dtype, regrouped = {}, nil, false
  local cols, experts = w.shape[2] or 1, w.expert and w.decl.n_experts
  for j, part in ipairs(w.parts) do
    part.tensor = w.layer and string.format(part.name, w.layer) or part.name
    local t = tensors[part.tensor]
    if not t then
      util.die(string.format("%s:%d: error: weight '%s' (part '%s') is not in %s", d.path, w.decl.line, w.logical,
        part.tensor, source))
    end
    -- its shape: [experts,] [heads,] then [of, cols] ([cols, of] transposed; [of] for a vector)
    local expect = {}
    if experts then expect[#expect + 1] = experts end
    if w.parts.heads then expect[#expect + 1] = w.parts.heads end
    if not w.shape[2] then expect[#expect + 1] = part.of
    elseif part.transposed then expect[#expect + 1] = cols; expect[#expect + 1] = part.of
    else expect[#expect + 1] = part.of; expect[#expect + 1] = cols end
    local have = {}
    for k, v in ipairs(t.shape or {}) do have[k] = math.tointeger(v) or v end
    if t.shape and table.concat(have, ", ") ~= table.concat(expect, ", ") then
      util.die(string.format("%s:%d: error: weight '%s' part '%s' is [%s] in %s, but models.lua says [%s]", d.path,
        w.decl.line, w.logical, part.tensor, table.concat(have, ", "), source, table.concat(expect, ", ")))
    end
    consumed[part.tensor] = true
    -- what tells this weight's parts from another's: the rows it takes, and the expert
    names[j] = string.format("%s[%d::%d]%s", part.tensor, part.first, part.every, experts and ("@" .. w.expert) or "")
    dtype = (dtype == nil or dtype == t.dtype) and t.dtype or "f32"
    if part.transposed and plan.block_elems(t.dtype) > 1 then regrouped = true end
  end
  if regrouped or cols % plan.block_elems(dtype) ~= 0 then dtype = "f32" end
  return {name = table.concat(names, "+"), dtype = dtype}
end

-- The LM head's weight: the last linear on the way to the logits (a softcap
-- or scale may follow it).
local function head_weight(g)
  local n = g.logits
  while n and n.op ~= "linear" do n = n.inputs[1] and n.inputs[1].node end
  return n and n.inputs[2]
end

-- The RoPE tables of the model: one per distinct parameter set among its
-- rope ops (Gemma 3: one for the sliding layers, one for the full ones), each
-- op told its table (attrs.table); the runtime builds every table at load.
-- They share one rotary width.
local ROPE_TYPES = {default = "KC_ROPE_DEFAULT", none = "KC_ROPE_DEFAULT", linear = "KC_ROPE_LINEAR",
                    llama3 = "KC_ROPE_LLAMA3", yarn = "KC_ROPE_YARN"}
local function rope_params(g, d)
  local found, tables, index = nil, {}, {}
  for _, n in ipairs(g.nodes) do
    if n.op == "rope" then
      local sc = n.attrs.scaling or {}
      local kind = ROPE_TYPES[sc.type or "default"]
      if not kind then
        util.die(string.format("%s:%d: error: rope scaling type '%s' is not supported (default, linear, llama3, yarn)",
          d.path, n.line, tostring(sc.type)))
      end
      local p = {type = kind, theta = n.attrs.theta, factor = sc.factor or 1, low_freq = sc.low_freq or 1,
                 high_freq = sc.high_freq or 4, orig_ctx = sc.orig_ctx or 0, beta_fast = sc.beta_fast or 32,
                 beta_slow = sc.beta_slow or 1, attn_factor = sc.attn_factor or 0, rot_dim = n.attrs.rot_dim,
                 freq_dim = n.attrs.freq_dim or n.attrs.rot_dim, no_truncate = sc.truncate == false and 1 or 0}
      p.factors = n.attrs.freq_factors
      if p.factors and p.factors.shape[1] * 2 ~= p.rot_dim then
        util.die(string.format("%s:%d: error: rope freq_factors %s has %d values, not rot_dim / 2 = %d", d.path,
          n.line, p.factors.logical, p.factors.shape[1], p.rot_dim // 2))
      end
      local key = table.concat({p.type, p.theta, p.factor, p.low_freq, p.high_freq, p.orig_ctx, p.beta_fast,
                                p.beta_slow, p.attn_factor, p.rot_dim, p.freq_dim, p.no_truncate, p.factors and p.factors.key or "-"}, ",")
      if found and found.rot_dim ~= p.rot_dim then
        util.die(string.format("%s:%d: error: every rope op of a model must rotate the same width", d.path, n.line))
      end
      p.key = key
      found = found or p
      if not index[key] then
        tables[#tables + 1] = p
        index[key] = #tables - 1
      end
      n.attrs.table = index[key]
      -- where its table starts in the tables' array: MAX_CTX * ROPE_DIM floats each
      n.attrs.table_offset = index[key] * g.cfg.values.ctx * p.rot_dim
    end
  end
  if found then
    local list, slots = {}, {}
    for _, t in ipairs(tables) do
      list[#list + 1] = string.format("{%s, %s, %s, %s, %s, %s, %s, %s, %s, %d, %d}", t.type, t.theta, t.factor, t.low_freq,
        t.high_freq, t.orig_ctx, t.beta_fast, t.beta_slow, t.attn_factor, t.freq_dim, t.no_truncate)
      slots[#slots + 1] = t.factors and tostring(t.factors.slot) or "-1"
    end
    found.count, found.list, found.factor_slots = #tables, table.concat(list, ", "), table.concat(slots, ", ")
    return found
  end
  return {count = 1, list = "{KC_ROPE_DEFAULT, 10000, 1, 1, 4, 0, 32, 1, 0, 0, 0}", factor_slots = "-1", type = "KC_ROPE_DEFAULT", theta = 10000, factor = 1, low_freq = 1, high_freq = 4, orig_ctx = 0,
                   beta_fast = 32, beta_slow = 1, attn_factor = 0, rot_dim = 2}
end

-- What the KV cache holds per layer and token, as the attention ops say:
-- kv_heads rows of head_dim for K and as many for V (parts = 2), or only the
-- K rows when the values are their first value_dim columns (parts = 1: MLA's
-- latent and RoPE key). The paged pool, the prefix cache and both backends
-- size and address it from this; every attention op must agree.
local function kv_layout(g, d, kv_dtype)
  local kv
  for _, n in ipairs(g.nodes) do
    if n.op == "attention" then
      local a = n.attrs
      local this = {heads = a.kv_heads, head_dim = a.head_dim, value_dim = a.value_dim, parts = a.shared_value and 1 or 2}
      if kv and (kv.heads ~= this.heads or kv.head_dim ~= this.head_dim or kv.parts ~= this.parts) then
        util.die(string.format("%s:%d: error: every attention op of a model must cache the same rows (kv_heads, head_dim, values)",
          d.path, n.line))
      end
      kv = kv or this
    end
  end
  kv = kv or {heads = 1, head_dim = 1, value_dim = 1, parts = 2}
  -- a cached row in the KV element type: q8_0 and q4 are whole blocks of 32
  -- values (34 bytes: an f16 scale and 32 int8; 18: an f16 scale and 32
  -- 4-bit levels of the block rotated), so its rows and values must be too
  local block_bytes = ({q8_0 = 34, q4 = 18})[kv_dtype]
  if block_bytes and (kv.head_dim % 32 ~= 0 or (kv.value_dim or kv.head_dim) % 32 ~= 0) then
    util.die(string.format("--kv-dtype %s caches rows in blocks of 32 values; this model's cached rows are %d wide%s "
      .. "(use --kv-dtype f16)", kv_dtype, kv.head_dim, kv.parts == 1 and string.format(" with %d value columns", kv.value_dim) or ""))
  end
  kv.row_bytes = block_bytes and kv.head_dim // 32 * block_bytes or kv.head_dim * (kv_dtype == "f16" and 2 or 4)
  if kv.parts == 2 then
    kv.text = string.format("K and V, %d head(s) x %d each per layer", kv.heads, kv.head_dim)
  else
    kv.text = string.format("one row of %d per layer and kv head (%d), its first %d columns the values (shared K/V)",
      kv.head_dim, kv.heads, kv.value_dim)
  end
  return kv
end

-- Tensors a checkpoint may carry that every description recomputes from its
-- config: the RoPE inverse frequencies older transformers saved as buffers.
local DERIVED_TENSORS = {"%.rotary_emb%.inv_freq$"}

-- Every tensor of the checkpoint must be read by the description: one that
-- it forgets (a bias, a norm) would otherwise be dropped without a word and
-- the binary would give wrong answers. --allow-unused makes it a warning.
local function check_every_tensor_used(d, entry, tensors, consumed, opts)
  local unused = {}
  for _, t in ipairs(tensors) do
    local derived = false
    for _, pat in ipairs(DERIVED_TENSORS) do derived = derived or t.name:find(pat) ~= nil end
    if not consumed[t.name] and not derived then unused[#unused + 1] = t.name end
  end
  if #unused == 0 then return end
  local shown = {}
  for i = 1, math.min(#unused, 8) do shown[i] = unused[i] end
  local msg = string.format("%d tensor%s of %s %s not used by models.lua entry '%s' (models.lua:%d): %s%s",
    #unused, #unused == 1 and "" or "s", opts.source, #unused == 1 and "is" or "are", entry.name, entry.line,
    table.concat(shown, ", "), #unused > #shown and string.format(" and %d more", #unused - #shown) or "")
  if opts.allow_unused then
    io.stderr:write("ingot: warning: " .. msg .. " (ignored: --allow-unused)\n")
  else
    util.die(string.format("%s: error: %s\n  the description must declare and use every weight of the checkpoint; "
      .. "--allow-unused builds anyway", d.path, msg))
  end
end

-- A shape without its dimensions of size 1 but the last: the same values in the same order
-- (transformers stores a depthwise convolution's weight as [channels, 1, width]; the loader
-- reads it as the [channels, width] the description declares, runtime/load/weights.c).
local function squeezed(shape)
  local out = {}
  for i, v in ipairs(shape) do
    if v ~= 1 or i == #shape then out[#out + 1] = v end
  end
  return out
end

-- Whether a stored tensor holds the declared shape: the same shape but dimensions of size 1, or
-- for a declared vector any shape of as many values of an element type (llama.cpp's converters
-- store Mamba-2's A and D as [heads, 1], its grouped norm as [groups, inner / groups];
-- runtime/load/weights.c, wt_expect, reads them alike).
local ELEMENT_DTYPES = {f32 = true, f16 = true, bf16 = true}
local function holds_shape(have, dtype, expect)
  if table.concat(squeezed(have), ", ") == table.concat(squeezed(expect), ", ") then return true end
  if #expect ~= 1 or not ELEMENT_DTYPES[dtype] then return false end
  local count = 1
  for _, v in ipairs(have) do count = count * v end
  return count == expect[1]
end

local function main(argv)
  local opts = parse_args(argv)
  local inspect_text = util.read_file(opts.inspect) or util.die("cannot read " .. opts.inspect)
  local info = util.json_decode(inspect_text, opts.inspect)
  local tensors = {}
  for _, t in ipairs(info.tensors) do tensors[t.name] = t end
  local src = {format = info.format, meta = info.metadata, tensors = tensors}
  local hf_archs, gguf_arch
  local hf_text = ""
  if info.format == "gguf" then
    gguf_arch = info.metadata["general.architecture"]
  else
    if not opts.hf_config then util.die("a safetensors model needs its config.json (--hf-config)") end
    hf_text = util.read_file(opts.hf_config) or util.die("cannot read " .. opts.hf_config)
    src.hf = util.json_decode(hf_text, opts.hf_config)
    hf_archs = src.hf.architectures or {}
  end

  local d = describe.load(opts.models)
  local entry = describe.select(d, hf_archs, gguf_arch, src.meta)
  local cfg = config.resolve(d, entry, src)
  config.weight_dims(d, entry, cfg.values)
  d.entry = entry
  local c = cfg.values

  local g = graph.new(d, cfg):trace()

  -- Bind each traced weight to its stored tensor and compiled dtype.
  local weights, by_tensor, counts, consumed = {}, {}, {}, {}
  local head = head_weight(g)
  local head_tensor = head and config.tensor_name(entry, head.logical, head.layer, cfg.format)
  if head and head.decl.tied and not tensors[head_tensor] then
    head_tensor = config.tensor_name(entry, head.decl.tied, head.layer, cfg.format)
  end
  -- llama.cpp's LLM_TYPE_70B, the model size one of its preset rules keys on: 80 layers of
  -- Llama with grouped KV heads (with as many KV heads as heads it is the 65B) or of Qwen2
  local heads, kv_heads = c.heads or 1, c.kv_heads or c.heads or 1
  -- llama.cpp's rules take layer 0's GQA ratio (0 where a hybrid's layer 0 is recurrent: a GGUF
  -- lists head_count_kv per layer, 0 for such a layer); a safetensors hybrid's list is not at
  -- hand here, and takes its attention layers' ratio
  local kv_list = info.metadata and gguf_arch and info.metadata[gguf_arch .. ".attention.head_count_kv"]
  if type(kv_list) == "table" and type(kv_list[1]) == "number" then kv_heads = kv_list[1] end
  local mix_model = {layers = c.layers, gqa = kv_heads > 0 and heads // kv_heads or 0, experts = c.experts or 0,
                     b70 = c.layers == 80 and ((entry.gguf == "llama" and heads ~= kv_heads) or entry.gguf == "qwen2")}
  for i, w in ipairs(g.weight_list) do
    w.tensor = config.tensor_name(entry, w.logical, w.layer, cfg.format, w.expert)
    local stored = w.tensor and tensors[w.tensor]
    w.parts = w.decl.stored_parts[cfg.format == "gguf" and "gguf" or "hf"]
    if w.parts then stored = stored_parts(d, w, tensors, consumed, opts.source) end
    w.tied_c = "NULL"
    if not stored and w.decl.tied then
      local tied = config.tensor_name(entry, w.decl.tied, w.layer, cfg.format)
      stored = tensors[tied]
      w.tied_c = '"' .. tied .. '"'
    end
    if not stored then
      util.die(string.format("%s:%d: error: weight '%s' (tensor '%s') is not in %s", d.path, w.decl.line,
        w.logical, tostring(w.tensor), opts.source))
    end
    -- a row slice is checked against the whole stored tensor
    w.first_row = w.decl.first_row or 0
    w.stacked = 0
    if w.expert and not w.parts and config.stacked_experts(entry, w.logical, cfg.format) then
      -- expert j: rows j * rows .. of the [experts, rows, cols] tensor, row j of a vector's [experts, n]
      w.stacked, w.first_row = w.decl.n_experts, w.expert * (w.shape[2] and w.shape[1] or 1)
    end
    w.stored_shape = w.shape
    if w.decl.slice then
      w.stored_shape = {w.decl.stored_rows, w.shape[2]}
    end
    -- the declared shape against the stored one, here rather than when the binary loads
    local expect = w.stacked > 0 and {w.stacked, w.shape[1], w.shape[2]} or w.stored_shape
    local have = {}
    for k, v in ipairs(stored.shape or {}) do have[k] = math.tointeger(v) or v end
    if not w.parts and stored.shape and not holds_shape(have, stored.dtype, expect) then
      util.die(string.format("%s:%d: error: weight '%s' is [%s] by its shape in models.lua, but tensor '%s' is [%s] in %s",
        d.path, w.decl.line, w.logical, table.concat(expect, ", "), stored.name or w.tensor, table.concat(have, ", "),
        opts.source))
    end
    consumed[stored.name or w.tensor] = true
    w.dtype = compiled_dtype(opts, w, stored.dtype, (stored.name or w.tensor) == head_tensor, mix_model)
    w.dtype_enum = "INGOT_" .. w.dtype:upper()
    w.slot = i - 1
    local key = (stored.name or w.tensor) .. "/" .. w.dtype .. "/" .. w.first_row
    w.parts_c = "0, 0, 0, 0, {{NULL, 0, 0, 0, 1, 0}}"
    if w.parts then
      local list = {}
      for j, part in ipairs(w.parts) do
        list[j] = string.format('{"%s", %d, %d, %d, %d, %d}', part.tensor, part.rows, part.transposed and 1 or 0, part.first,
          part.every, part.of)
      end
      w.parts_c = string.format("%d, %d, %d, %d, {%s}", #w.parts, w.parts.heads or 0, w.expert and w.decl.n_experts or 0,
        w.expert or 0, table.concat(list, ", "))
    end
    w.same_as = by_tensor[key] or -1
    by_tensor[key] = by_tensor[key] or w.slot
    counts[w.dtype] = (counts[w.dtype] or 0) + 1
    weights[i] = w
  end
  -- An act-order GPTQ linear repacked with its inputs reordered (runtime/load/quant_ckpt.h) comes
  -- with `<tensor>.perm`, the order: a weight of its own (i32, copied as stored) that the matmul's
  -- activations are gathered by. An expert's order is its own (the MoE kernels gather each expert's
  -- rows by it); a GGUF's stacked experts never come reordered.
  for i = 1, #weights do
    local w = weights[i]
    local pname = w.tensor and (w.tensor .. ".perm")
    if pname and tensors[pname] and w.same_as < 0 then
      if w.first_row ~= 0 or w.stacked ~= 0 or w.decl.slice or #w.shape ~= 2 then
        util.die(string.format("%s:%d: error: '%s' has reordered inputs (%s) but is read as a row slice (not supported)", d.path,
          w.decl.line, w.tensor, pname))
      end
      if opts.act_quant == "q8" then
        util.die(string.format("%s has reordered inputs (act-order GPTQ): build with --act-quant none", w.tensor))
      end
      local p = {logical = w.logical .. ".perm", layer = w.layer, expert = w.expert, decl = w.decl, tensor = pname, tied_c = "NULL",
                 shape = {w.shape[2]}, stored_shape = {w.shape[2]}, first_row = 0, stacked = 0, dtype = "i32",
                 dtype_enum = "INGOT_I32", slot = #weights, same_as = -1}
      weights[#weights + 1] = p
      w.perm = p
      consumed[pname] = true
    elseif pname and tensors[pname] then
      w.perm = weights[w.same_as + 1].perm
    end
  end
  choose_x16_layouts(g, weights, opts)
  check_every_tensor_used(d, entry, info.tensors, consumed, opts)
  if opts.backend == "cuda" then emit_cuda.check_dtypes(weights) end
  local summary = {}
  for _, k in ipairs(util.sorted_keys(counts)) do summary[#summary + 1] = string.format("%s (%d)", k, counts[k]) end

  local groups = fuse.run(g, opts.fused)
  local p = plan.run(g, groups, g.logits, opts.act_quant, opts.backend)
  local ctx = {desc_lines = {}, act_quant = opts.act_quant, desc_path = d.path}
  for line in (d.text .. "\n"):gmatch("(.-)\n") do ctx.desc_lines[#ctx.desc_lines + 1] = line end
  local kernels, calls
  local rope = rope_params(g, d) -- before the kernels: each rope op's table is part of its kernel's text
  if opts.backend == "cuda" then kernels, calls = emit_cuda.kernels(ctx, groups, g.logits)
  else kernels, calls = emit_c.kernels(ctx, groups, g.logits) end

  local input_hash = util.hash(table.concat({VERSION, d.text, inspect_text, hf_text, opts.dtype,
    tostring(opts.fused), tostring(opts.max_tokens), opts.backend, opts.act_quant, tostring(opts.allow_unused), opts.kv_dtype,
    opts.backend == "cuda" and table.concat(opts.cuda_archs, ",") or ""}, "\0"))
  local function banner_for(emitter, template_path, comment)
    local open, mid, close = "/* ", " * ", " */"
    if comment == "//" then open, mid, close = "// ", "// ", "" end
    return table.concat({
      open .. "DO NOT EDIT: generated by " .. VERSION .. " (generator/main.lua, generator/" .. emitter .. ")",
      mid .. "template:    " .. template_path,
      mid .. "description: models.lua entry '" .. entry.name .. "' (models.lua:" .. entry.line .. ")",
      mid .. "model:       " .. opts.source .. " (" .. cfg.format .. ")",
      mid .. "options:     backend=" .. opts.backend .. " dtype=" .. opts.dtype .. " fused=" .. tostring(opts.fused) ..
        " act_quant=" .. opts.act_quant .. " kv_dtype=" .. opts.kv_dtype .. " max_tokens=" .. opts.max_tokens,
      mid .. "inputs hash: " .. input_hash,
      mid .. "Edit models.lua or the generator and rebuild with ./ingot build." .. close}, "\n")
  end

  local template = require("pl.template")
  local function render(rel, env)
    local path = script_dir .. "/../templates/" .. rel
    local tmpl = util.read_file(path) or util.die("cannot read " .. path)
    local out, err = template.substitute(tmpl, env)
    if not out then util.die("templates/" .. rel .. ": " .. tostring(err)) end
    return out
  end
  local kv_layers = g.n_attn
  -- KV older than the window is dead only if every layer has a window.
  local kv_window
  for _, n in ipairs(g.nodes) do
    if n.op == "attention" then
      local w = n.attrs.window or 0
      if w <= 0 then kv_window = 0 elseif kv_window == nil or (kv_window > 0 and w > kv_window) then kv_window = w end
    end
  end
  local kv = kv_layout(g, d, opts.kv_dtype)
  -- what a sequence's recurrent state holds, by kind and shape: "3 causal convolutions' last 2 x 64
  -- inputs, 2 SSM scans of 4 heads x 16 x 16" (f32)
  local state_kinds, state_order = {}, {}
  for _, n in ipairs(g.nodes) do
    local a, key = n.attrs, nil
    if n.op == "causal_conv" then key = string.format("causal convolution's last %d x %d inputs", a.width - 1, n.width)
    elseif n.op == "ssm_scan" then key = string.format("SSM scan of %d heads x %d x %d", a.heads, a.head_dim, a.state)
    elseif n.op == "delta_scan" then key = string.format("gated delta rule of %d heads x %d x %d", a.v_heads, a.k_dim, a.v_dim) end
    if key and not state_kinds[key] then state_order[#state_order + 1] = key end
    if key then state_kinds[key] = (state_kinds[key] or 0) + 1 end
  end
  local state_parts = {}
  for _, key in ipairs(state_order) do state_parts[#state_parts + 1] = string.format("%d x %s", state_kinds[key], key) end
  local state_text = #state_parts > 0 and "f32: " .. table.concat(state_parts, ", ") or ""
  local attn_heads = 1
  for _, n in ipairs(g.nodes) do
    if n.op == "attention" and n.attrs.heads > attn_heads then attn_heads = n.attrs.heads end
  end
  -- the config as the model descriptor (--info) shows it: values an entry need not name (its
  -- attention's KV heads, an MoE model's FFN width) from what the graph says
  local shown = setmetatable({kv_heads = c.kv_heads or kv.heads, head_dim = c.head_dim or kv.head_dim,
                              ffn = c.ffn or c.moe_ffn or 0, rope_theta = c.rope_theta or 0, eps = c.eps or 0},
                             {__index = c})
  local env = {
    _escape = "@", kv = kv, model_name = opts.name, c = shown, arch = entry.name, rope = rope,
    -- the arena is planned for a multiple of 4 tokens (every buffer 16-byte
    -- aligned); a step takes at most what --max-tokens said
    max_tokens = (opts.max_tokens + 3) // 4 * 4, step_tokens = opts.max_tokens, n_kv_layers = kv_layers, plan = p, kv_window = kv_window or 0,
    weights = weights, kernels = kernels, calls = calls, source_path = opts.source:gsub("\\", "\\\\"):gsub('"', '\\"'),
    format = cfg.format, fused = opts.fused and 1 or 0, dtype_summary = table.concat(summary, ", "),
    generator_id = VERSION .. " " .. input_hash, backend = opts.backend, n_kernel_kinds = #kernels,
    ipairs = ipairs, table = table, tostring = tostring, info_c = act_info(opts, weights), allow_unused = opts.allow_unused and 1 or 0,
    attn_heads = attn_heads, attn_split_chunks = 512,
    kv_f16 = opts.kv_dtype == "f16" and 1 or 0, kv_q8 = opts.kv_dtype == "q8_0" and 1 or 0,
    kv_q4 = opts.kv_dtype == "q4" and 1 or 0, kv_dtype = opts.kv_dtype,
    state_floats = g.state_floats or 0, state_text = state_text,
  }
  env.common_weights = render("model_weights.c.in", env)
  local outputs = {}
  -- the weights by name (W->blk[3].q): the host's model state (both backends) and the forward's calls
  env.weight_names, ctx.weight_paths = weight_names.build(weights, "const void *")
  if opts.backend == "cpu" then
    local forward_lines, last_layer = {}, "none"
    local names = {}
    for _, call in ipairs(calls) do
      local n = call.grp.nodes[1]
      local layer = n.layer and ("layer " .. n.layer) or (n.op == "embedding" and "embed" or "head")
      if call.grp.rows == "hidden" then layer = "final hidden state (embeddings: only steps that ask for it)" end
      if layer ~= last_layer then
        forward_lines[#forward_lines + 1] = "    /* " .. layer .. " */"
        last_layer = layer
      end
      forward_lines[#forward_lines + 1] = emit_c.call(ctx, call)
      -- kernels_per_step counts a generation step's kernels
      if call.grp.rows ~= "hidden" then names[#names + 1] = call.kernel.name end
    end
    env.forward_lines, env.launch_names = forward_lines, names
    env.lora_sites = emit_c.lora_sites(calls, #weights)
    env.banner = banner_for("emit_c.lua", "templates/cpu/model.c.in")
    env.common_desc = render("model_desc.c.in", env)
    outputs["model.c"] = render("cpu/model.c.in", env)
  else
    outputs = emit_cuda.files(ctx, env, calls, kernels, {banner = banner_for, render = render, hash = input_hash,
      kv_bytes_per_pos = kv.parts * kv_layers * kv.heads * kv.row_bytes, layers = c.layers, script_dir = script_dir,
      cuda_archs = opts.cuda_archs})
  end
  -- the table of entry points, the generated source's one exported symbol (runtime/core/model_api.h)
  outputs["model.c"] = outputs["model.c"] .. "\n" .. render("model_table.c.in", env)

  if os.getenv("INGOT_DEBUG") then
    io.stderr:write(string.format("ingot: %s: %d kernels per step (%d distinct), arena %d bytes/token (%d without reuse)\n",
      opts.name, #calls, #kernels, p.bytes_per_token, p.naive_bytes_per_token))
    for i, call in ipairs(calls) do
      io.stderr:write(string.format("  %3d %s\n", i, call.kernel and call.kernel.name or call.kind))
    end
  end
  if opts.dry_run then
    for _, f in ipairs(util.sorted_keys(outputs)) do print("would write " .. opts.out .. "/" .. f) end
    return
  end
  os.execute("mkdir -p '" .. opts.out .. "'")
  for _, f in ipairs(util.sorted_keys(outputs)) do util.write_if_changed(opts.out .. "/" .. f, outputs[f]) end
end

main(arg)

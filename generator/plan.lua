-- generator/plan.lua — scratch buffer planning: liveness and one arena.
--
-- Every tensor that a kernel writes gets a buffer of MAX_TOKENS rows; a
-- matmul kernel whose linears take quantized activations also gets one
-- buffer of quantized rows. A buffer is live from the kernel that writes it
-- to the last kernel that reads it. Elementwise ops write in place when
-- their input dies there. Buffers whose lifetimes do not overlap share
-- arena bytes (first fit, largest first). Sizes and offsets are in bytes per
-- token of MAX_TOKENS, so every address in the generated forward is a
-- compile-time constant.

local graph = require("graph")
local util = require("util")

local plan = {}

local Q8_BLOCK_BYTES = 40 -- sizeof(kc_q8): float d, float s, int8 qs[32]
local Q16_BLOCK_BYTES = 80 -- kc_x16.h kc_q16: f32 d, f32 s, 32 high and 32 low int8 digits, 2 int32 half sums
-- (kc_x16s.h kc_q16s: 640 bytes per 256, the same per 32)
local Q16S_DTYPES = {q4_k = true, q5_k = true, q6_k = true} -- kc_x16s.h kc_mms_
local ALIGN = 16

local function align(n) return (n + ALIGN - 1) // ALIGN * ALIGN end

-- Elements per block of each block-quantized weight dtype (runtime/load/dtype.h):
-- a row must be a whole number of blocks.
plan.BLOCK = {q8_0 = 32, q4_0 = 32, q4_1 = 32, q5_0 = 32, q5_1 = 32, iq4_nl = 32,
              q2_k = 256, q3_k = 256, q4_k = 256, q5_k = 256, q6_k = 256, iq4_xs = 256,
              -- what GPTQ/AWQ (zero-point int4/int8) and FP8 checkpoints are repacked into at load
              q4_z = 32, q8_z = 32, f8_b32 = 32,
              -- OCP microscaling FP4 (gpt-oss's experts in GGUF)
              mxfp4 = 32}

-- The dtypes with integer-dot kernels for int8 activations (kc_mm_*: every
-- GGUF block type; kc_kquant.h for those beyond Q8_0/Q4_0/Q4_1). The
-- repacked checkpoint types keep f32 activations (the checkpoint's arithmetic).
local F32_ONLY = {q4_z = true, q8_z = true, f8_b32 = true}
local INT8_KERNELS = {}
for dt in pairs(plan.BLOCK) do INT8_KERNELS[dt] = not F32_ONLY[dt] or nil end

-- Whether a weight dtype is block-quantized.
function plan.quantized(dtype)
  return plan.BLOCK[dtype] ~= nil
end

-- Elements per block (1 for float dtypes).
function plan.block_elems(dtype)
  return plan.BLOCK[dtype] or 1
end

-- Whether a linear of this weight dtype takes int8-quantized activations:
-- only in --act-quant q8 builds (llama.cpp's numerics, integer dot
-- products), for the dtypes that have such kernels (every block type). By
-- default activations stay f32 and quantized weights are dequantized in
-- registers, which computes exactly what the checkpoint means.
function plan.int8_activations(dtype, act_quant)
  return act_quant == "q8" and INT8_KERNELS[dtype] == true
end

-- The input orders (act-order GPTQ: each expert's .perm weight) of the E
-- experts of a moe node's weight family starting at input `first`, in expert
-- order; nil when none is reordered. Every expert of a layer comes reordered
-- or none (the loader reorders a layer's experts all or none).
function plan.expert_perms(n, first, E)
  local any = false
  for e = 0, E - 1 do any = any or n.inputs[first + e].perm ~= nil end
  if not any then return nil end
  local perms = {}
  for e = 0, E - 1 do
    local w = n.inputs[first + e]
    if not w.perm then
      util.die(string.format("models.lua:%d: error: moe: expert %d of '%s' has no input order (.perm) but another has: every expert of a layer must come reordered or none",
        n.line, e, w.logical))
    end
    perms[#perms + 1] = w.perm
  end
  return perms
end

-- backend: "cpu" or "cuda"; the CUDA kernels read reordered (act-order) inputs through the order
-- itself, so only the CPU gets the buffers the activations are gathered into.
function plan.run(g, groups, final_node, act_quant, backend)
  local gathers = backend ~= "cuda"
  local buffers = {}
  local function new_buffer(b)
    b.id = #buffers + 1
    buffers[#buffers + 1] = b
    return b
  end
  for _, grp in ipairs(groups) do
    for _, n in ipairs(grp.nodes) do
      if n.out and not n.output then -- the logits and hidden rows go to the caller's arrays
        -- In place: an elementwise op takes over the buffer of an input it
        -- reads last (every other reader comes earlier in execution order).
        local donor
        if graph.ELEMENTWISE[n.op] and n.op ~= "kv_store" then
          for _, x in ipairs(n.inputs) do
            if not donor and type(x) == "table" and x.node and x.node.buffer and x.node.rows == n.rows
               and x.width == n.width and not x.node.output then
              local last_reader = true
              for _, c in ipairs(x.node.consumers) do
                if c.id > n.id then last_reader = false end
              end
              if last_reader then donor = x.node.buffer end
            end
          end
        end
        if donor then
          n.buffer = donor
          donor.nodes[#donor.nodes + 1] = n
        else
          n.buffer = new_buffer({bytes = align(n.width * 4), first = grp.index, last = grp.index,
                                 nodes = {n}, kind = "f32", width = n.width})
        end
      end
    end
    if grp.kind == "moe" then
      -- scratch of the expert pass: routing (per token: expert ids, weights
      -- and the expert-order row of each choice; the CUDA backend adds a row ->
      -- token map of top_k per token and experts + 1 offsets once per step),
      -- the token rows gathered per expert (CPU; CUDA reads them through the
      -- row map), their gate/up/down outputs; top_k rows per token
      local a = grp.ops[1].attrs
      local dim = grp.ops[1].inputs[1].width
      grp.moe = {}
      local specs = {{"route", 4 * a.top_k + a.experts + 1}, {"xg", a.top_k * dim}, {"gate", a.top_k * a.ffn},
                     {"up", a.top_k * a.ffn}, {"down", a.top_k * grp.ops[1].width}}
      -- experts whose inputs were reordered at load (act-order GPTQ): the CPU gathers each
      -- expert's rows into that order (gate's, up's, and the activated rows for down)
      local inputs = grp.ops[1].inputs
      if gathers and inputs[3].perm then specs[#specs + 1] = {"xg_gate", a.top_k * dim} end
      if gathers and inputs[3 + a.experts].perm then specs[#specs + 1] = {"xg_up", a.top_k * dim} end
      if gathers and inputs[3 + 2 * a.experts].perm then specs[#specs + 1] = {"act_down", a.top_k * a.ffn} end
      for _, spec in ipairs(specs) do
        grp.moe[spec[1]] = new_buffer({bytes = align(spec[2] * 4), first = grp.index, last = grp.index,
                                       nodes = {}, kind = "moe", width = spec[2]})
      end
    end
    if grp.kind == "matmul" then
      -- a linear whose weight's inputs were reordered at load (act-order GPTQ: the weight's .perm)
      -- reads its activations gathered into that order, once per token (CPU)
      for _, l in ipairs(grp.linears) do
        if gathers and l.inputs[2].perm then
          local w = l.inputs[1].width
          l.perm_buffer = new_buffer({bytes = align(w * 4), first = grp.index, last = grp.index, nodes = {},
                                      kind = "perm", width = w})
        end
      end
      -- the group's input quantized once per token for every linear of the group that takes it:
      -- kc_q16 blocks when a block-quantized weight is interleaved (q16: two digits; q8: the high digit alone,
      -- grp.a8), else kc_q8 blocks (--act-quant q8, row-major weights). A q8 group with both
      -- kinds quantizes once, as kc_q16: its row-major weights then take f32 activations.
      local needs_q8, needs_q16 = false, false
      for _, l in ipairs(grp.linears) do
        if l.inputs[2].x16 and plan.quantized(l.inputs[2].dtype) then needs_q16 = true
        elseif plan.int8_activations(l.inputs[2].dtype, act_quant) then needs_q8 = true end
      end
      -- a group whose every weight is an interleaved Q4_K, Q5_K or Q6_K: one scale per
      -- 256 activations (kc_x16s.h kc_q16s, the same 80 bytes per 32), so that a super-block's
      -- sum stays an integer and steps of 16 tokens or more can take AMX tiles
      grp.q16s = needs_q16 and (act_quant == "q16" or act_quant == "k8")
      for _, l in ipairs(grp.linears) do
        if not (l.inputs[2].x16 and Q16S_DTYPES[l.inputs[2].dtype] and not l.perm_buffer) then grp.q16s = false end
      end
      -- int8 activations (the high digit alone): every q8 group (per 32); a k8 group where it is per 256
      grp.a8 = needs_q16 and (act_quant == "q8" or (act_quant == "k8" and grp.q16s))
      if needs_q8 or needs_q16 then
        local w = grp.linears[1].inputs[1].width
        grp.q8 = new_buffer({bytes = align(w // 32 * (needs_q16 and Q16_BLOCK_BYTES or Q8_BLOCK_BYTES)),
                             first = grp.index, last = grp.index, nodes = {}, kind = "q8", width = w})
        grp.q16 = needs_q16
      end
    end
  end
  -- Liveness: extend each buffer to the last kernel reading any of its tensors.
  for _, grp in ipairs(groups) do
    for _, n in ipairs(grp.nodes) do
      for _, t in ipairs(n.inputs) do
        if type(t) == "table" and t.node and t.node.buffer then
          local b = t.node.buffer
          if grp.index > b.last then b.last = grp.index end
          if grp.index < b.first then b.first = grp.index end
        end
      end
    end
  end
  -- First fit, largest first, among buffers whose lifetimes overlap.
  local order = {}
  for i, b in ipairs(buffers) do order[i] = b end
  table.sort(order, function(a, b)
    if a.bytes ~= b.bytes then return a.bytes > b.bytes end
    return a.id < b.id
  end)
  local placed = {}
  local total = 0
  for _, b in ipairs(order) do
    local conflicts = {}
    for _, p in ipairs(placed) do
      if not (p.last < b.first or b.last < p.first) then conflicts[#conflicts + 1] = p end
    end
    table.sort(conflicts, function(x, y) return x.offset < y.offset end)
    local off = 0
    for _, p in ipairs(conflicts) do
      if off + b.bytes <= p.offset then break end
      if p.offset + p.bytes > off then off = p.offset + p.bytes end
    end
    b.offset = off
    placed[#placed + 1] = b
    if off + b.bytes > total then total = off + b.bytes end
  end
  local naive = 0
  for _, b in ipairs(buffers) do naive = naive + b.bytes end
  return {buffers = buffers, bytes_per_token = total, naive_bytes_per_token = naive}
end

return plan

-- generator/emit_c.lua — the CPU backend: emits model.c from the planned, fused graph.
--
-- Each kernel (fusion group) becomes one C function made of phases run with
-- tp_parallel_for: a row phase (per token or logit row), a matmul phase
-- (over the concatenated output rows of the group's linears) and an
-- attention phase (over token x head). Kernels with identical bodies (the
-- same ops, shapes and dtypes in every layer) are emitted once and called
-- per layer with that layer's buffers and weights. Each emitted statement
-- carries the models.lua line and text that produced it.

local util = require("util")
local plan_mod = require("plan")

local emit = {}

-- Each weight type's enum and C element (runtime/load/dtype_table.h: a block struct of dtype.h,
-- or the float's storage type).
local DT_ENUM, DT_CTYPE = {}, {}
for _, t in ipairs(require("dtypes").list) do
  DT_ENUM[t.name] = "INGOT_" .. t.enum
  DT_CTYPE[t.name] = "const " .. t.ctype
end

-- Slot assignment for one kernel: buffers and weights are referred to by
-- position, so the same body serves every layer.
function emit.slots(grp, final_node)
  local s = {bufs = {}, buf_index = {}, weights = {}, weight_index = {}}
  local function buf(n)
    local key = n.output or n.buffer.id -- "logits" / "hidden": the batch's arrays
    if not s.buf_index[key] then
      s.bufs[#s.bufs + 1] = {key = key, node = n}
      s.buf_index[key] = #s.bufs - 1
    end
    return "b" .. s.buf_index[key]
  end
  local function weight(w)
    if not s.weight_index[w] then
      s.weights[#s.weights + 1] = w
      s.weight_index[w] = #s.weights - 1
    end
    return "w" .. s.weight_index[w]
  end
  s.buf, s.weight = buf, weight
  return s
end

-- The models.lua line a node came from, as a trailing comment.
function emit.src(ctx, n)
  local text = ctx.desc_lines[n.line] or ""
  text = text:gsub("^%s+", ""):gsub("%*/", "* /")
  return string.format("/* models.lua:%d  %s */", n.line, text)
end

local function row(ptr, t, width) return string.format("%s + (size_t)%s * %d", ptr, t, width) end

-- C for one per-row op at row t.
local function row_op(ctx, s, n)
  local out = n.out and s.buf(n) or nil
  local function inp(i) return s.buf(n.inputs[i].node) end
  local W = n.width
  local op = n.op
  if op == "embedding" then
    local w = n.inputs[2]
    if w.x16 then -- the table is interleaved because an LM head tied to it is
      return string.format("kc_x16k_dequantize_row(KC_W%s, %s, %d, b->tokens[t], %s);", w.dtype:upper(), s.weight(w), W,
        row(out, "t", W))
    end
    return string.format("kc_embed_row(%s, %s, b->tokens[t], %d, %s);", DT_ENUM[w.dtype], s.weight(w), W, row(out, "t", W))
  elseif op == "rmsnorm" then
    local G = n.attrs.group or W
    if G == W then
      return string.format("kc_rmsnorm(%s, (const float *)%s, %s, %d, %s, %s);", row(inp(1), "t", W),
        s.weight(n.inputs[2]), row(out, "t", W), W, util.cfloat(n.attrs.eps), util.cfloat(n.attrs.offset))
    end
    -- each head: the group's weight shared, or its own (per_head)
    return string.format("for (int g = 0; g < %d; g++) kc_rmsnorm(%s + g * %d, (const float *)%s%s, %s + g * %d, %d, %s, %s); /* each head */",
      W // G, row(inp(1), "t", W), G, s.weight(n.inputs[2]), n.attrs.per_head and " + g * " .. G or "", row(out, "t", W), G, G,
      util.cfloat(n.attrs.eps), util.cfloat(n.attrs.offset))
  elseif op == "layernorm" then
    local G, a = n.attrs.group, n.attrs
    local b = n.inputs[3] and "(const float *)" .. s.weight(n.inputs[3]) or "NULL"
    if G == W then
      return string.format("kc_layernorm(%s, (const float *)%s, %s, %s, %d, %s);", row(inp(1), "t", W),
        s.weight(n.inputs[2]), b, row(out, "t", W), W, util.cfloat(a.eps))
    end
    -- each head: its own weight and bias (per_head) or the group's one, shared
    local step = a.per_head and " + g * " .. G or ""
    return string.format("for (int g = 0; g < %d; g++) kc_layernorm(%s + g * %d, (const float *)%s%s, %s%s, %s + g * %d, %d, %s); /* each head */",
      W // G, row(inp(1), "t", W), G, s.weight(n.inputs[2]), step, b, n.inputs[3] and step or "", row(out, "t", W), G, G,
      util.cfloat(a.eps))
  elseif op == "softcap" then
    return string.format("{ const float *x = %s; float *y = %s; for (int i = 0; i < %d; i++) y[i] = %s * tanhf(x[i] / %s); }",
      row(inp(1), "t", W), row(out, "t", W), W, util.cfloat(n.attrs.cap), util.cfloat(n.attrs.cap))
  elseif op == "select_rows" then
    local from = n.attrs.hidden and "b->hidden_rows[t]" or "b->logit_rows[t]"
    return string.format("memcpy(%s, %s, sizeof(float) * %d);", row(out, "t", W), row(inp(1), from, W), W)
  elseif op == "rope" then
    local a = n.attrs
    local pre = ""
    if inp(1) ~= out then pre = string.format("memcpy(%s, %s, sizeof(float) * %d); ", row(out, "t", W), row(inp(1), "t", W), W) end
    local tbl = (a.table_offset or 0) > 0 and string.format(" + %d /* RoPE table %d */", a.table_offset, a.table) or ""
    return pre .. string.format("kc_rope(%s, %d, %d, %d, a->m->rope%s, b->pos[t], %d);", row(out, "t", W),
      a.heads, a.head_dim, a.rot_dim, tbl, a.pairs == "adjacent" and 1 or 0)
  elseif op == "silu" or op == "gelu_tanh" or op == "gelu" then
    return string.format("kc_%s_row(%s, %s, %d);", op, row(inp(1), "t", W), row(out, "t", W), W)
  elseif op == "sigmoid" then
    return string.format("{ const float *x = %s; float *y = %s; for (int i = 0; i < %d; i++) y[i] = 1.0f / (1.0f + expf(-x[i])); }",
      row(inp(1), "t", W), row(out, "t", W), W)
  elseif op == "mul" and n.inputs[2].width == 1 and W > 1 then -- a gate per row
    return string.format("{ const float *x = %s, g = %s[t]; float *z = %s; for (int i = 0; i < %d; i++) z[i] = x[i] * g; }",
      row(inp(1), "t", W), inp(2), row(out, "t", W), W)
  elseif op == "add" or op == "mul" then
    return string.format("{ const float *x = %s, *y = %s; float *z = %s; for (int i = 0; i < %d; i++) z[i] = x[i] %s y[i]; }",
      row(inp(1), "t", W), row(inp(2), "t", W), row(out, "t", W), W, op == "add" and "+" or "*")
  elseif op == "scale" then
    return string.format("{ const float *x = %s; float *y = %s; for (int i = 0; i < %d; i++) y[i] = x[i] * %s; }",
      row(inp(1), "t", W), row(out, "t", W), W, util.cfloat(n.attrs.factor))
  elseif op == "kv_store" then
    local a = n.attrs
    local kw = a.kv_heads * a.head_dim
    return string.format("kc_kv_store(a->kv, N_KV_LAYERS, a->kv_layer, a->n_blocks, %d, INGOT_KV_BLOCK, %d, b->block_tables[b->seq[t]], b->pos[t], %s, %s);",
      a.kv_heads, a.head_dim, row(inp(1), "t", kw), a.shared_value and "NULL /* the values are the keys' first columns */"
        or row(inp(2), "t", kw))
  elseif op == "columns" then
    local a = n.attrs
    return string.format("for (int h = 0; h < %d; h++) memmove(%s + h * %d, %s + h * %d + %d, sizeof(float) * %d);",
      a.heads, row(out, "t", W), a.count, row(inp(1), "t", n.inputs[1].width), a.group, a.first, a.count)
  elseif op == "concat" then
    local a = n.attrs
    return string.format("for (int h = 0; h < %d; h++) { memcpy(%s + h * %d, %s + h * %d, sizeof(float) * %d); memcpy(%s + h * %d + %d, %s + h * %d, sizeof(float) * %d); }",
      a.heads, row(out, "t", W), a.a + a.b, row(inp(1), "t", n.inputs[1].width), a.a, a.a,
      row(out, "t", W), a.a + a.b, a.a, row(inp(2), "t", n.inputs[2].width), a.b, a.b)
  elseif op == "head_linear" then
    local a, w = n.attrs, n.inputs[2]
    return string.format("kc_head_linear(%s, %s, %d, %d, %d, %d, %d, %d, %s, %s);", DT_ENUM[w.dtype], s.weight(w),
      a.heads, a.stride, a.first, a.rows, a.cols, a.transpose and 1 or 0, row(inp(1), "t", n.inputs[1].width),
      row(out, "t", W))
  end
  -- an op graph.lua traces but this backend cannot emit: the description's line, not a traceback
  util.die(string.format("%s:%d: error: op '%s' has no CPU emitter (generator/emit_c.lua)", ctx.desc_path, n.line, op))
end

local function phase_rows(ctx, s, name, nodes, extra)
  local lines = {}
  lines[#lines + 1] = string.format("static void %s(void *vp, int64_t t0, int64_t t1, int tid) {", name)
  lines[#lines + 1] = "    const kargs *a = vp; const ingot_batch *b = a->b; (void)b; (void)tid;"
  local body = {}
  for _, n in ipairs(nodes) do
    body[#body + 1] = "        " .. emit.src(ctx, n)
    body[#body + 1] = "        " .. row_op(ctx, s, n)
  end
  if extra then body[#body + 1] = "        " .. extra end
  lines[#lines + 1] = "@DECLS@"
  lines[#lines + 1] = "    for (int64_t t = t0; t < t1; t++) {"
  for _, l in ipairs(body) do lines[#lines + 1] = l end
  lines[#lines + 1] = "    }"
  lines[#lines + 1] = "}"
  return lines
end

-- The slot of the buffer a linear's reordered activations are gathered into (plan.lua's perm_buffer).
local function perm_slot(s, l)
  local key = "perm" .. l.perm_buffer.id
  if not s.buf_index[key] then
    s.bufs[#s.bufs + 1] = {key = key, node = {buffer = l.perm_buffer, width = l.perm_buffer.width}}
    s.buf_index[key] = #s.bufs - 1
  end
  return "b" .. s.buf_index[key]
end

--
-- One linear: the phase's range is its rows, cut into contiguous chunks. Two
-- or more (q/k/v, gate/up): the range is [0, threads) and piece i takes the
-- i-th share of every linear's rows (whole 16-row tiles where the rows come
-- in 16s). Their types may differ (a Q4_K_M file's q and k in Q5_0, v in
-- Q8_0 or Q6_K), and so their cost per row: consecutive rows would leave
-- the thread with more of the costlier type behind. A row's arithmetic does
-- not depend on who computes it.
local function phase_matmul(ctx, s, name, grp)
  local lines = {}
  local sliced = #grp.linears > 1
  if sliced then
    lines[#lines + 1] = string.format("static void %s(void *vp, int64_t i0, int64_t i1, int tid) {", name)
    lines[#lines + 1] = "    const kargs *a = vp; (void)tid;"
    lines[#lines + 1] = "    const int64_t n = tp_size(a->pool);"
    lines[#lines + 1] = "@DECLS@"
    lines[#lines + 1] = "    for (int64_t i = i0; i < i1; i++) { /* share i of every linear's rows */"
  else
    lines[#lines + 1] = string.format("static void %s(void *vp, int64_t r0, int64_t r1, int tid) {", name)
    lines[#lines + 1] = "    const kargs *a = vp; (void)tid;"
    lines[#lines + 1] = "@DECLS@"
  end
  local off = 0
  for _, l in ipairs(grp.linears) do
    local w = l.inputs[2]
    local bias = l.inputs[3]
    local IN, OUT = l.inputs[1].width, l.width
    local lo, hi = off, off + OUT
    local x, ldx, fn
    local ctype = DT_CTYPE[w.dtype]
    if w.x16 and not plan_mod.quantized(w.dtype) then -- kernels/cpu/kc_x16f.h: interleaved float weights, f32 activations
      x, ldx, ctype = s.buf(l.inputs[1].node), string.format("%d", IN), "const void"
      fn = "kc_mm16_" .. w.dtype
    elseif w.x16 and grp.q16s then -- kernels/cpu/kc_x16s.h: 15-bit (a8: int8) activations with a scale per 256 (AMX for 16+ tokens)
      x, ldx, ctype = "(const kc_q16s *)a->q8", string.format("%d", IN // 256), "const void"
      fn = (grp.a8 and "kc_mms8_" or "kc_mms_") .. w.dtype
    elseif w.x16 then -- kernels/cpu/kc_x16.h: the interleaved layout against 15-bit activations (q8: their high digits)
      x, ldx, ctype = "(const kc_q16 *)a->q8", string.format("%d", IN // 32), "const void"
      fn = (grp.a8 and "kc_mmp8_" or "kc_mmp_") .. w.dtype
    elseif plan_mod.int8_activations(w.dtype, ctx.act_quant) and not grp.q16 then
      x, ldx, fn = "(const kc_q8 *)a->q8", string.format("%d", IN // 32), "kc_mm_" .. w.dtype
    else
      x, ldx = l.perm_buffer and perm_slot(s, l) or s.buf(l.inputs[1].node), string.format("%d", IN)
      fn = (plan_mod.quantized(w.dtype) and "kc_mmx_" or "kc_mm_") .. w.dtype
    end
    local bias_arg = bias and ("(const float *)" .. s.weight(bias)) or "NULL"
    if sliced then
      local unit = OUT % 16 == 0 and 16 or 1
      lines[#lines + 1] = "        " .. emit.src(ctx, l)
      lines[#lines + 1] = string.format("        { const int r0 = (int)(%d * i / n) * %d, r1 = (int)(%d * (i + 1) / n) * %d;",
        OUT // unit, unit, OUT // unit, unit)
      lines[#lines + 1] = string.format("          if (r1 > r0) %s((%s *)%s, %s, %s, %s, %d, a->rows, %d, r0, r1, %s, 0); }",
        fn, ctype, s.weight(w), x, ldx, s.buf(l), OUT, IN, bias_arg)
    else
      lines[#lines + 1] = "    " .. emit.src(ctx, l)
      lines[#lines + 1] = string.format("    if (r0 < %d && r1 > %d) %s((%s *)%s, %s, %s, %s, %d, a->rows, %d, (int)(r0 > %d ? r0 - %d : 0), (int)(r1 < %d ? r1 - %d : %d), %s, 0);",
        hi, lo, fn, ctype, s.weight(w), x, ldx, s.buf(l), OUT, IN, lo, lo, hi, lo, OUT, bias_arg)
    end
    off = hi
  end
  if sliced then lines[#lines + 1] = "    }" end
  lines[#lines + 1] = "}"
  return lines, off, sliced
end

-- Query heads per work item of the attention phase: the whole group of a KV
-- head (each cached row is loaded once for all of them), except where the
-- cache has a single shared row per token (MLA: every head in one group),
-- which would leave one decode token to one thread: there the group is cut
-- into chunks of at most 4 heads (each head's result is the same either way).
local function attention_heads_per_item(a)
  local G = a.heads // a.kv_heads
  if not a.shared_value then return G end
  for hc = 4, 1, -1 do
    if G % hc == 0 then return hc end
  end
end

-- The attention kernel's phases: "attn" runs each (token, work item) whole,
-- its chunks one after another (kc_attend_kv); "part" and "merge" run the
-- chunks of few tokens on different threads and merge them in chunk order
-- afterwards (attn_split in the template picks, per step). Both do the same
-- operations on the same values, so the bits do not depend on the choice.
local function phase_attention(ctx, s, name, n)
  local a = n.attrs
  local q = s.buf(n.inputs[1].node)
  local out = s.buf(n)
  local W = n.width
  local G = attention_heads_per_item(a)
  local items = a.heads // G -- work items per token: (KV head, chunk of its query heads)
  local first = a.window > 0 and string.format("pos >= %d ? pos - %d : 0", a.window - 1, a.window - 1) or "0"
  local part = string.format("KC_ATTN_PART(%d, %d)", G, a.value_dim)
  -- the item's query heads' sink logits (gpt-oss), or none
  local sinks = n.inputs[3] and string.format("(const float *)%s + h0", s.weight(n.inputs[3])) or "NULL"
  local function item(lines, t_expr)
    lines[#lines + 1] = string.format("        const int k = (int)(i / %d), h0 = (int)(i %% %d) * %d, kvh = h0 / %d;", items, items, G,
      a.heads // a.kv_heads)
    lines[#lines + 1] = string.format("        const int t = %s, pos = b->pos[t];", t_expr)
    lines[#lines + 1] = string.format("        const int first = %s;", first)
    lines[#lines + 1] = "        " .. emit.src(ctx, n)
  end
  local function kv_args()
    return string.format("a->kv, N_KV_LAYERS, a->kv_layer, a->n_blocks, %d, INGOT_KV_BLOCK, %d, %d, %d, b->block_tables[b->seq[t]], kvh, %d, first, pos,",
      a.kv_heads, a.head_dim, a.value_dim, a.shared_value and 1 or 0, G)
  end
  -- a phase function's opening: its name, the thread's scratch and the loop over its range
  local function opening(suffix, scratch, loop)
    return {
      string.format("static void %s%s(void *vp, int64_t %s0, int64_t %s1, int tid) {", name, suffix, loop, loop),
      "    const kargs *a = vp; const ingot_batch *b = a->b;",
      "@DECLS@",
      string.format("    float *%s = a->m->scratch + (size_t)tid * SCRATCH_PER_THREAD;", scratch),
      string.format("    for (int64_t %s = %s0; %s < %s1; %s++) {", loop, loop, loop, loop, loop),
    }
  end
  local lines = opening("", "scratch", "i")
  lines[#lines] = lines[#lines] .. string.format(" /* one token and %d query head(s) of KV head kvh */", G)
  lines[#lines + 1] = "        /* tokens alternate from both ends of the step: the pool hands each"
  lines[#lines + 1] = "         * thread a contiguous share of the range, and a prompt's late tokens"
  lines[#lines + 1] = "         * see more positions, so in order the last thread would get most of"
  lines[#lines + 1] = "         * a prefill's attention */"
  item(lines, "k % 2 == 0 ? k / 2 : a->rows - 1 - k / 2")
  lines[#lines + 1] = "        kc_attend_kv(" .. kv_args()
  lines[#lines + 1] = string.format("                  %s + h0 * %d, %s, %s, %s, scratch, %s + h0 * %d);", row(q, "t", n.inputs[1].width),
    a.head_dim, util.cfloat(a.scale), util.cfloat(a.softcap), sinks, row(out, "t", W), a.value_dim)
  lines[#lines + 1] = "    }"
  lines[#lines + 1] = "}"
  local whole = lines
  lines = opening("_part", "scores", "j")
  lines[#lines] = lines[#lines] .. string.format(" /* chunk c of token t's %d query head(s) of KV head kvh */", G)
  lines[#lines + 1] = "        const int64_t i = j / a->attn_chunks; const int c = (int)(j % a->attn_chunks);"
  item(lines, "k")
  lines[#lines + 1] = "        if (c >= kc_attn_chunks(first, pos)) continue;"
  lines[#lines + 1] = "        kc_attend_chunk(" .. kv_args()
  lines[#lines + 1] = string.format("                        c, %s + h0 * %d, %s, %s, scores, ATTN_SPLIT(a) + (size_t)j * %s);",
    row(q, "t", n.inputs[1].width), a.head_dim, util.cfloat(a.scale), util.cfloat(a.softcap), part)
  lines[#lines + 1] = "    }"
  lines[#lines + 1] = "}"
  local split = lines
  lines = opening("_merge", "ml", "i")
  lines[#lines] = lines[#lines] .. " /* token t's chunks, in order */"
  item(lines, "k")
  lines[#lines + 1] = string.format("        float *o = %s + h0 * %d; (void)kvh;", row(out, "t", W), a.value_dim)
  lines[#lines + 1] = "        const int nc = kc_attn_chunks(first, pos);"
  lines[#lines + 1] = string.format("        for (int c = 0; c < nc; c++) kc_attend_merge(%d, %d, c, ATTN_SPLIT(a) + ((size_t)i * a->attn_chunks + c) * %s, o, ml);",
    G, a.value_dim, part)
  lines[#lines + 1] = string.format("        kc_attend_finish(%d, %d, %d, %s, o, ml);", G, a.value_dim, a.shared_value and 1 or 0, sinks)
  lines[#lines + 1] = "    }"
  lines[#lines + 1] = "}"
  return {whole, split, lines}
end

-- How the attention kernel runs its phases (see phase_attention).
local function run_attention(n)
  local a = n.attrs
  local G = attention_heads_per_item(a)
  local items = a.heads // G
  return table.concat({
    "kargs s = *a;",
    string.format("    s.attn_chunks = attn_split(a, %d, %d, KC_ATTN_PART(%d, %d));", a.window, items, G, a.value_dim),
    "    if (s.attn_chunks) {",
    string.format("        tp_parallel_for(a->pool, (int64_t)a->rows * %d * s.attn_chunks, 1, @NAME@_attn_part, (void *)&s);", items),
    string.format("        tp_parallel_for(a->pool, (int64_t)a->rows * %d, 1, @NAME@_attn_merge, (void *)&s);", items),
    "    } else {",
    string.format("        tp_parallel_for(a->pool, (int64_t)a->rows * %d, 1, @NAME@_attn, (void *)a);", items),
    "    }",
  }, "\n")
end

-- The mixture-of-experts kernel: route every token (router matmul, softmax,
-- top-k, renormalize unless the description says not), gather the rows of each expert's tokens together, run
-- each expert's gate/up, activation and down matmuls once over all its rows
-- (its weights are read once per step), then combine per token in expert
-- order (as the reference accumulates).
local function moe_kernel(ctx, s, n, grp)
  local a = n.attrs
  local E, K, F, D = a.experts, a.top_k, a.ffn, n.inputs[1].width
  local router = n.inputs[2]
  local x, out = s.buf(n.inputs[1].node), s.buf(n)
  local slot = {}
  for _, name in ipairs({"route", "xg", "gate", "up", "down", "xg_gate", "xg_up", "act_down"}) do
    if grp.moe[name] then -- the last three: only for experts reordered at load
      local key = "moe" .. grp.moe[name].id
      s.bufs[#s.bufs + 1] = {key = key, node = {buffer = grp.moe[name], width = grp.moe[name].width}}
      s.buf_index[key] = #s.bufs - 1
      slot[name] = "b" .. (#s.bufs - 1)
    end
  end
  local rw = s.weight(router)
  local gate0 = s.weight(n.inputs[3])
  for i = 4, #n.inputs do s.weight(n.inputs[i]) end
  local function dt_of(list_first)
    local dt = n.inputs[list_first].dtype
    for e = 0, E - 1 do
      if n.inputs[list_first + e].dtype ~= dt then
        util.die(string.format("models.lua:%d: error: moe: every expert's weights must share one dtype", n.line))
      end
    end
    return dt
  end
  local function mm(dt) return (plan_mod.quantized(dt) and "kc_mmx_" or "kc_mm_") .. dt end
  local gdt, udt, ddt = dt_of(3), dt_of(3 + E), dt_of(3 + 2 * E)
  local gw = tonumber(gate0:sub(2))
  -- act-order experts: the first slot of each family's input orders (E consecutive slots)
  local function perms_of(first)
    local perms = plan_mod.expert_perms(n, first, E)
    if not perms then return nil end
    local p0
    for e, perm in ipairs(perms) do
      local slot_e = tonumber(s.weight(perm):sub(2))
      p0 = p0 or slot_e
      if slot_e ~= p0 + e - 1 then util.die(string.format("models.lua:%d: error: moe: the experts' input orders share a tensor", n.line)) end
    end
    return p0
  end
  local gp, up, dp = perms_of(3), perms_of(3 + E), perms_of(3 + 2 * E)
  -- biases (gpt-oss): the router's and each expert family's, their slots consecutive after the
  -- expert weights (input i's slot is gw + i - 3)
  local function bias_of(name, per_expert)
    local i = a.at and a.at[name]
    if not i then return "NULL" end
    return string.format("(const float *)a->w[%d%s]", gw + i - 3, per_expert and " + e" or "")
  end
  local C = {}
  local function L(fmt, ...) C[#C + 1] = string.format(fmt, ...) end
  L("static void @NAME@_route(void *vp, int64_t t0, int64_t t1, int tid) {")
  L("    const kargs *a = vp; (void)tid;")
  L("@DECLS@")
  L("    for (int64_t t = t0; t < t1; t++) {")
  L("        %s", emit.src(ctx, n))
  L("        float logit[%d], best[%d];", E, K)
  L("        int32_t *ids = (int32_t *)(%s + (size_t)t * %d);", slot.route, 3 * K)
  L("        float *weights = %s + (size_t)t * %d + %d;", slot.route, 3 * K, K)
  L("        %s((%s *)%s, %s + (size_t)t * %d, %d, logit, %d, 1, %d, 0, %d, %s, 0);", mm(router.dtype),
    DT_CTYPE[router.dtype], rw, x, D, D, E, D, E, bias_of("router_bias"))
  L("        float maxv = logit[0], sum = 0.0f;")
  L("        for (int e = 1; e < %d; e++) maxv = logit[e] > maxv ? logit[e] : maxv;", E)
  L("        for (int e = 0; e < %d; e++) { logit[e] = expf(logit[e] - maxv); sum += logit[e]; }", E)
  L("        for (int e = 0; e < %d; e++) logit[e] /= sum;", E)
  if a.groups > 1 then
    local per = E // a.groups
    L("        { /* group-limited: only the %d groups (of %d experts) with the best top score */", a.top_groups, per)
    L("            float gbest[%d]; int keep[%d] = {0};", a.groups, a.groups)
    L("            for (int q = 0; q < %d; q++) { gbest[q] = logit[q * %d]; for (int e = 1; e < %d; e++) gbest[q] = logit[q * %d + e] > gbest[q] ? logit[q * %d + e] : gbest[q]; }",
      a.groups, per, per, per, per)
    L("            for (int k = 0; k < %d; k++) { int arg = -1; for (int q = 0; q < %d; q++) if (!keep[q] && (arg < 0 || gbest[q] > gbest[arg])) arg = q; keep[arg] = 1; }",
      a.top_groups, a.groups)
    L("            for (int e = 0; e < %d; e++) if (!keep[e / %d]) logit[e] = 0.0f; /* as the reference masks them */", E, per)
    L("        }")
  end
  L("        float chosen = 0.0f;")
  L("        for (int k = 0; k < %d; k++) { /* top-k by probability, lowest id first on ties */", K)
  L("            int arg = -1;")
  L("            for (int e = 0; e < %d; e++) {", E)
  L("                int taken = 0;")
  L("                for (int j = 0; j < k; j++) taken |= ids[j] == e;")
  L("                if (!taken && (arg < 0 || logit[e] > logit[arg])) arg = e;")
  L("            }")
  L("            ids[k] = arg; best[k] = logit[arg]; chosen += logit[arg];")
  L("        }")
  if a.normalize then
    L("        for (int k = 0; k < %d; k++) weights[k] = best[k] / chosen;", K)
  else
    L("        (void)chosen; for (int k = 0; k < %d; k++) weights[k] = best[k]; /* not renormalized */", K)
  end
  L("    }")
  L("}")
  L("")
  if gp or up then
    L("static void @NAME@_order_in(void *vp, int64_t i0, int64_t i1, int tid) {")
    L("    const kargs *a = vp; const moe_state *st = a->moe; (void)tid;")
    L("@DECLS@")
    L("    for (int64_t i = st->row0 + i0; i < st->row0 + i1; i++) { /* the expert's rows in its linears' input orders */")
    if gp then
      L("        kc_gather(%s + (size_t)i * %d, (const int32_t *)a->w[%d + st->expert], %d, %s + (size_t)i * %d);", slot.xg, D, gp, D,
        slot.xg_gate, D)
    end
    if up then
      L("        kc_gather(%s + (size_t)i * %d, (const int32_t *)a->w[%d + st->expert], %d, %s + (size_t)i * %d);", slot.xg, D, up, D,
        slot.xg_up, D)
    end
    L("    }")
    L("}")
    L("")
  end
  L("static void @NAME@_gateup(void *vp, int64_t r0, int64_t r1, int tid) {")
  L("    const kargs *a = vp; const moe_state *st = a->moe; (void)tid;")
  L("@DECLS@")
  L("    const int e = st->expert;")
  L("    const float *xs_gate = %s + (size_t)st->row0 * %d, *xs_up = %s + (size_t)st->row0 * %d;", slot.xg_gate or slot.xg, D,
    slot.xg_up or slot.xg, D)
  L("    if (r0 < %d) %s((%s *)a->w[%d + e], xs_gate, %d, %s + (size_t)st->row0 * %d, %d, st->rows, %d, (int)r0, (int)(r1 < %d ? r1 : %d), %s, 0);",
    F, mm(gdt), DT_CTYPE[gdt], gw, D, slot.gate, F, F, D, F, F, bias_of("gate_bias", true))
  L("    if (r1 > %d) %s((%s *)a->w[%d + e], xs_up, %d, %s + (size_t)st->row0 * %d, %d, st->rows, %d, (int)(r0 > %d ? r0 - %d : 0), (int)(r1 - %d), %s, 0);",
    F, mm(udt), DT_CTYPE[udt], gw + E, D, slot.up, F, F, D, F, F, F, bias_of("up_bias", true))
  L("}")
  L("")
  L("static void @NAME@_act(void *vp, int64_t i0, int64_t i1, int tid) {")
  L("    const kargs *a = vp; const moe_state *st = a->moe; (void)tid;")
  L("@DECLS@")
  L("    for (int64_t i = st->row0 + i0; i < st->row0 + i1; i++) {")
  L("        float *g = %s + (size_t)i * %d; const float *u = %s + (size_t)i * %d;", slot.gate, F, slot.up, F)
  if a.alpha ~= 1 or a.limit ~= 0 or a.up_offset ~= 0 then
    L("        kc_swiglu_row(g, u, %d, %s, %s, %s); /* clamped SwiGLU: alpha, limit, up offset */", F, util.cfloat(a.alpha),
      util.cfloat(a.limit), util.cfloat(a.up_offset))
  else
    L("        for (int j = 0; j < %d; j++) g[j] = kc_%s(g[j]) * u[j];", F, a.act)
  end
  L("    }")
  L("}")
  L("")
  if dp then
    L("static void @NAME@_order_act(void *vp, int64_t i0, int64_t i1, int tid) {")
    L("    const kargs *a = vp; const moe_state *st = a->moe; (void)tid;")
    L("@DECLS@")
    L("    for (int64_t i = st->row0 + i0; i < st->row0 + i1; i++) /* the activated rows in down's input order */")
    L("        kc_gather(%s + (size_t)i * %d, (const int32_t *)a->w[%d + st->expert], %d, %s + (size_t)i * %d);", slot.gate, F, dp, F,
      slot.act_down, F)
    L("}")
    L("")
  end
  L("static void @NAME@_down(void *vp, int64_t r0, int64_t r1, int tid) {")
  L("    const kargs *a = vp; const moe_state *st = a->moe; (void)tid;")
  L("@DECLS@")
  L("    const int e = st->expert;")
  L("    %s((%s *)a->w[%d + e], %s + (size_t)st->row0 * %d, %d, %s + (size_t)st->row0 * %d, %d, st->rows, %d, (int)r0, (int)r1, %s, 0);",
    mm(ddt), DT_CTYPE[ddt], gw + 2 * E, slot.act_down or slot.gate, F, F, slot.down, D, D, F, bias_of("down_bias", true))
  L("}")
  L("")
  L("static void @NAME@_combine(void *vp, int64_t t0, int64_t t1, int tid) {")
  L("    const kargs *a = vp; (void)tid;")
  L("@DECLS@")
  L("    for (int64_t t = t0; t < t1; t++) {")
  L("        const int32_t *ids = (const int32_t *)(%s + (size_t)t * %d);", slot.route, 3 * K)
  L("        const float *weights = %s + (size_t)t * %d + %d;", slot.route, 3 * K, K)
  L("        const int32_t *rows = (const int32_t *)(%s + (size_t)t * %d + %d);", slot.route, 3 * K, 2 * K)
  L("        float *o = %s + (size_t)t * %d;", out, D)
  L("        memset(o, 0, sizeof(float) * %d);", D)
  L("        for (int e = 0; e < %d; e++)", E)
  L("            for (int k = 0; k < %d; k++)", K)
  L("                if (ids[k] == e) kc_axpy(weights[k], %s + (size_t)rows[k] * %d, o, %d);", slot.down, D, D)
  L("    }")
  L("}")
  -- one phase per function (each gets its own declarations)
  local fn_phases, cur = {}, {}
  for _, line in ipairs(C) do
    if line == "" then fn_phases[#fn_phases + 1] = cur; cur = {} else cur[#cur + 1] = line end
  end
  fn_phases[#fn_phases + 1] = cur
  local runs = {
    "kargs b = *a;",
    "moe_state st = {0, 0, 0};",
    "b.moe = &st;",
    "tp_parallel_for(a->pool, a->rows, 1, @NAME@_route, &b);",
    string.format("int count[%d] = {0}, offset[%d], fill[%d] = {0};", E, E, E),
    "for (int t = 0; t < a->rows; t++)",
    string.format("    for (int k = 0; k < %d; k++) count[((const int32_t *)(a->buf[%d] + (size_t)t * %d))[k]]++;", K, s.buf_index["moe" .. grp.moe.route.id], 3 * K),
    string.format("for (int e = 0, o = 0; e < %d; e++) { offset[e] = o; o += count[e]; }", E),
    "if (model_moe_observer) /* a debugging tap: the routing decisions of this layer */",
    string.format("    for (int t = 0; t < a->rows; t++) model_moe_observer(a->kv_layer, a->b->pos[t], %d, (const int32_t *)(a->buf[%d] + (size_t)t * %d));",
      K, s.buf_index["moe" .. grp.moe.route.id], 3 * K),
    "for (int t = 0; t < a->rows; t++) /* gather each expert's rows, token order */",
    string.format("    for (int k = 0; k < %d; k++) {", K),
    string.format("        int32_t *route = (int32_t *)(a->buf[%d] + (size_t)t * %d);", s.buf_index["moe" .. grp.moe.route.id], 3 * K),
    "        const int e = route[k];",
    "        const int row = offset[e] + fill[e]++;",
    string.format("        route[%d + k] = row; /* where token t's k-th expert output lands */", 2 * K),
    string.format("        memcpy(a->buf[%d] + (size_t)row * %d, a->buf[%d] + (size_t)t * %d, sizeof(float) * %d);",
      s.buf_index["moe" .. grp.moe.xg.id], D, s.buf_index[n.inputs[1].node.buffer.id], D, D),
    "    }",
    string.format("for (int e = 0; e < %d; e++) {", E),
    "    if (!count[e]) continue;",
    "    st.expert = e; st.rows = count[e]; st.row0 = offset[e];",
    (gp or up) and "    tp_parallel_for(a->pool, count[e], 1, @NAME@_order_in, &b);" or false,
    string.format("    tp_parallel_for(a->pool, %d, 16, @NAME@_gateup, &b);", 2 * F),
    "    tp_parallel_for(a->pool, count[e], 1, @NAME@_act, &b);",
    dp and "    tp_parallel_for(a->pool, count[e], 1, @NAME@_order_act, &b);" or false,
    string.format("    tp_parallel_for(a->pool, %d, 16, @NAME@_down, &b);", D),
    "}",
    "tp_parallel_for(a->pool, a->rows, 1, @NAME@_combine, &b);",
  }
  return fn_phases, runs
end

-- A causal convolution (kernels/cpu/kc_conv.h): its output rows, each reading its sequence's
-- earlier rows of the step or the sequence's state from before it, then the new state of each
-- sequence, written by the thread that has the sequence's last token. The state's offset in a
-- sequence's slot comes with the call (a->kv_layer), so every layer of the same shape shares
-- the body.
local function phase_conv(ctx, s, n)
  local a, W = n.attrs, n.width
  local x, out = s.buf(n.inputs[1].node), s.buf(n)
  local taps = s.weight(n.inputs[2]) -- w0: the kernel's taps, then its bias
  local bias = n.inputs[3] and "(const float *)" .. s.weight(n.inputs[3]) or "NULL"
  local state = "a->state + (size_t)b->state_slots[b->seq[t]] * STATE_FLOATS + a->kv_layer"
  local rows = {
    "static void @NAME@_rows(void *vp, int64_t t0, int64_t t1, int tid) {",
    "    const kargs *a = vp; const ingot_batch *b = a->b; (void)tid;",
    "@DECLS@",
    "    for (int64_t t = t0; t < t1; t++) {",
    "        int back = 0; /* the sequence's tokens before t in this step, up to the kernel's width - 1 */",
    string.format("        while (back < %d && t - back > 0 && b->seq[t - back - 1] == b->seq[t]) back++;", a.width - 1),
    "        " .. emit.src(ctx, n),
    string.format("        kc_causal_conv_row(%s, (int)t, back, b->pos[t], %s, (const float *)%s, %s, %d, %d, %s);", x, state,
      taps, bias, W, a.width, row(out, "t", W)),
    "    }",
    "}",
  }
  local keep = {
    "static void @NAME@_keep(void *vp, int64_t t0, int64_t t1, int tid) {",
    "    const kargs *a = vp; const ingot_batch *b = a->b; (void)tid;",
    "@DECLS@",
    "    for (int64_t t = t0; t < t1; t++) {",
    "        if (t + 1 < a->rows && b->seq[t + 1] == b->seq[t]) continue; /* not its sequence's last token */",
    "        int count = 1;",
    string.format("        while (count < %d && t - count >= 0 && b->seq[t - count] == b->seq[t]) count++;", a.width - 1),
    string.format("        kc_causal_conv_keep(%s, (int)t, count, b->pos[t], %s, %d, %d);", x, state, W, a.width),
    "    }",
    "}",
  }
  return {rows, keep}
end

-- A state-space scan (kernels/cpu/kc_ssm.h): a work item per (token, head); the item of a
-- sequence's first token in the step runs the head's scan over all its tokens, in order, from the
-- sequence's state (or from zeros when the step starts the sequence). The state's offset in the
-- slot comes with the call (a->kv_layer).
local function phase_scan(ctx, s, n)
  local a = n.attrs
  local H, P, N, G = a.heads, a.head_dim, a.state, a.groups
  local x, dt, B, C, out = s.buf(n.inputs[1].node), s.buf(n.inputs[2].node), s.buf(n.inputs[3].node),
    s.buf(n.inputs[4].node), s.buf(n)
  local A, D, bias = s.weight(n.inputs[5]), s.weight(n.inputs[6]), s.weight(n.inputs[7])
  return {
    "static void @NAME@_scan(void *vp, int64_t i0, int64_t i1, int tid) {",
    "    const kargs *a = vp; const ingot_batch *b = a->b; (void)tid;",
    "@DECLS@",
    "    for (int64_t i = i0; i < i1; i++) {",
    string.format("        const int t = (int)(i / %d), h = (int)(i %% %d);", H, H),
    "        if (t > 0 && b->seq[t - 1] == b->seq[t]) continue; /* the item of the sequence's first token scans them all */",
    "        int count = 1;",
    "        while (t + count < a->rows && b->seq[t + count] == b->seq[t]) count++;",
    string.format("        float *state = a->state + (size_t)b->state_slots[b->seq[t]] * STATE_FLOATS + a->kv_layer + (size_t)h * %d;",
      P * N),
    string.format("        const float A = %s((const float *)%s)[h]%s;", a.a_log and "-expf(" or "", A, a.a_log and ")" or ""),
    "        " .. emit.src(ctx, n),
    string.format("        kc_ssm_scan_head(%s, %d, %s, %d, %s, %s, %d, h / %d * %d, %s, %d, t, count, h, %d, %d, A, ((const float *)%s)[h], ((const float *)%s)[h], %s, %s, b->pos[t] == 0, state);",
      x, H * P, dt, H, B, C, G * N, H // G, N, out, H * P, P, N, D, bias, util.cfloat(a.dt_min), util.cfloat(a.dt_max)),
    "    }",
    "}",
  }
end

-- The gated delta rule (kernels/cpu/kc_delta.h): a work item per (token, value head), the item of
-- a sequence's first token running the head over all its tokens from the sequence's state. Each
-- thread's attention scratch holds the head's kv, q and k rows.
local function phase_delta(ctx, s, n)
  local a = n.attrs
  local KH, VH, KD, VD = a.k_heads, a.v_heads, a.k_dim, a.v_dim
  local q, k, v, ga, gb, out = s.buf(n.inputs[1].node), s.buf(n.inputs[2].node), s.buf(n.inputs[3].node),
    s.buf(n.inputs[4].node), s.buf(n.inputs[5].node), s.buf(n)
  local A, bias = s.weight(n.inputs[6]), s.weight(n.inputs[7])
  return {
    "static void @NAME@_scan(void *vp, int64_t i0, int64_t i1, int tid) {",
    "    const kargs *a = vp; const ingot_batch *b = a->b;",
    "@DECLS@",
    string.format("    _Static_assert(SCRATCH_PER_THREAD >= %d, \"the head's kv, q and k rows fit the thread's scratch\");", VD + 2 * KD),
    string.format("    float *kv = a->m->scratch + (size_t)tid * SCRATCH_PER_THREAD, *qn = kv + %d, *kn = qn + %d;", VD, KD),
    "    for (int64_t i = i0; i < i1; i++) {",
    string.format("        const int t = (int)(i / %d), j = (int)(i %% %d);", VH, VH),
    "        if (t > 0 && b->seq[t - 1] == b->seq[t]) continue; /* the item of the sequence's first token scans them all */",
    "        int count = 1;",
    "        while (t + count < a->rows && b->seq[t + count] == b->seq[t]) count++;",
    string.format("        float *state = a->state + (size_t)b->state_slots[b->seq[t]] * STATE_FLOATS + a->kv_layer + (size_t)j * %d;",
      KD * VD),
    "        " .. emit.src(ctx, n),
    string.format("        const float A = %s((const float *)%s)[j]%s;", a.a_log and "-expf(" or "", A, a.a_log and ")" or ""),
    string.format("        kc_delta_scan_head(%s, %s, %d, %s, %s, %d, %s, %s, %d, t, count, j, j / %d, %d, %d, A, ((const float *)%s)[j], b->pos[t] == 0, state, kv, qn, kn);",
      q, k, KH * KD, v, out, VH * VD, ga, gb, VH, VH // KH, KD, VD, bias),
    "    }",
    "}",
  }
end

-- Declarations of the slot pointers a body uses, with what each one holds.
local function decls(s, body_text)
  local d = {}
  for i, b in ipairs(s.bufs) do
    local nm = "b" .. (i - 1)
    if body_text:find("%f[%w]" .. nm .. "%f[^%w]") then
      local what = b.node.output or string.format("rows of %d floats", b.node.width)
      d[#d + 1] = string.format("    float *%s = a->buf[%d]; /* %s */", nm, i - 1, what)
    end
  end
  for i, w in ipairs(s.weights) do
    local nm = "w" .. (i - 1)
    if body_text:find("%f[%w]" .. nm .. "%f[^%w]") then
      d[#d + 1] = string.format("    const void *%s = a->w[%d]; /* %s, %s */", nm, i - 1, w.logical, w.dtype)
    end
  end
  return table.concat(d, "\n")
end

local function kernel_name(grp)
  local parts, seen = {}, {}
  for _, n in ipairs(grp.nodes) do
    local p = n.op == "linear" and n.inputs[2].logical or n.op
    if not seen[p] then parts[#parts + 1] = p; seen[p] = true end
  end
  local dt
  for _, l in ipairs(grp.linears) do dt = dt or l.inputs[2].dtype end
  local name = table.concat(parts, "_")
  if dt then name = name .. "_" .. dt end
  if grp.q8 and (not grp.q16 or grp.a8) then name = name .. "_a8" end
  return name
end

-- Per weight table entry, whether a LoRA adapter's update applies to it in the step: the linears
-- over the step's tokens (not the head's logit rows, not a mixture of experts' experts).
function emit.lora_sites(calls, n_weights)
  local site = {}
  for _, c in ipairs(calls) do
    if c.grp.kind == "matmul" and c.grp.rows == "tokens" then
      for _, l in ipairs(c.grp.linears) do site[l.inputs[2].slot] = true end
    end
  end
  local out = {}
  for i = 0, n_weights - 1 do out[#out + 1] = site[i] and "1" or "0" end
  return table.concat(out, ",")
end

-- Builds every kernel's C text and the call sites of the forward.
function emit.kernels(ctx, groups, final_node)
  local kernels, by_body, calls = {}, {}, {}
  for _, grp in ipairs(groups) do
    local s = emit.slots(grp, final_node)
    local phases = {}
    local runs = {}
    if grp.kind == "matmul" then
      local q8_line
      if grp.q8 then
        local x = grp.linears[1].inputs[1]
        local kind = grp.q16s and "q16s" or grp.q16 and "q16" or "q8"
        q8_line = string.format("kc_quantize_%s(%s, (kc_%s *)a->q8 + (size_t)t * %d, %d); /* activations quantized once for every linear below */",
          grp.a8 and kind .. (grp.q16s and "_a8" or "a8") or kind, row(s.buf(x.node), "t", x.width), kind, x.width // (grp.q16s and 256 or 32), x.width)
      end
      for _, l in ipairs(grp.linears) do
        if l.perm_buffer then -- the activations in the order of the weight's reordered inputs
          local x = l.inputs[1]
          q8_line = (q8_line and q8_line .. "\n        " or "") .. string.format(
            "kc_gather(%s, (const int32_t *)%s, %d, %s); /* %s reads its inputs in act-order */",
            row(s.buf(x.node), "t", x.width), s.weight(l.inputs[2].perm), x.width, row(perm_slot(s, l), "t", x.width),
            l.inputs[2].logical)
        end
      end
      if #grp.prologue > 0 or q8_line then
        phases[#phases + 1] = phase_rows(ctx, s, "@NAME@_pre", grp.prologue, q8_line)
        runs[#runs + 1] = "tp_parallel_for(a->pool, a->rows, 1, @NAME@_pre, (void *)a);"
      end
      local mm, total, sliced = phase_matmul(ctx, s, "@NAME@_mm", grp)
      phases[#phases + 1] = mm
      if sliced then
        runs[#runs + 1] = "tp_parallel_for(a->pool, tp_size(a->pool), 1, @NAME@_mm, (void *)a);"
      else
        runs[#runs + 1] = string.format("tp_parallel_for(a->pool, %d, 32, @NAME@_mm, (void *)a);", total)
      end
      if grp.rows == "tokens" then -- LoRA adapters' updates, before any epilogue reads the linears' outputs
        local sites = {}
        for _, l in ipairs(grp.linears) do
          sites[#sites + 1] = string.format("{a->slots[%d], a->buf[%s], %d, a->buf[%s], %d}", s.weight_index[l.inputs[2]],
            s.buf(l.inputs[1].node):sub(2), l.inputs[1].width, s.buf(l):sub(2), l.width)
        end
        assert(#sites <= 8, "more linears in one kernel than runtime/core/lora_step.h's LORA_MAX_LINEARS")
        runs[#runs + 1] = string.format("if (a->m->n_lora) lora_step_apply(&a->m->lora_step, a->pool, a->b, a->rows, %d, (const lora_linear[]){%s}); /* adapters' updates */",
          #sites, table.concat(sites, ", "))
      end
      if #grp.epilogue > 0 then
        phases[#phases + 1] = phase_rows(ctx, s, "@NAME@_post", grp.epilogue)
        runs[#runs + 1] = "tp_parallel_for(a->pool, a->rows, 1, @NAME@_post, (void *)a);"
      end
    elseif grp.kind == "moe" then
      local moe_phases, moe_runs = moe_kernel(ctx, s, grp.ops[1], grp)
      for _, p in ipairs(moe_phases) do phases[#phases + 1] = p end
      for _, r in ipairs(moe_runs) do
        if r then runs[#runs + 1] = r end -- false: a phase of reordered experts this group does not have
      end
      if #grp.epilogue > 0 then
        phases[#phases + 1] = phase_rows(ctx, s, "@NAME@_post", grp.epilogue)
        runs[#runs + 1] = "tp_parallel_for(a->pool, a->rows, 1, @NAME@_post, (void *)a);"
      end
    elseif grp.kind == "attention" then
      local n = grp.ops[1]
      for _, p in ipairs(phase_attention(ctx, s, "@NAME@_attn", n)) do phases[#phases + 1] = p end
      runs[#runs + 1] = run_attention(n)
    elseif grp.kind == "scan" then
      local n = grp.ops[1]
      phases[#phases + 1] = n.op == "delta_scan" and phase_delta(ctx, s, n) or phase_scan(ctx, s, n)
      runs[#runs + 1] = string.format("tp_parallel_for(a->pool, (int64_t)a->rows * %d, 1, @NAME@_scan, (void *)a);",
        n.attrs.heads or n.attrs.v_heads)
    elseif grp.kind == "conv" then
      for _, p in ipairs(phase_conv(ctx, s, grp.ops[1])) do phases[#phases + 1] = p end
      runs[#runs + 1] = "tp_parallel_for(a->pool, a->rows, 1, @NAME@_rows, (void *)a);"
      runs[#runs + 1] = "tp_parallel_for(a->pool, a->rows, 1, @NAME@_keep, (void *)a); /* after every row read the old state */"
    else
      phases[#phases + 1] = phase_rows(ctx, s, "@NAME@_rows", grp.ops)
      runs[#runs + 1] = "tp_parallel_for(a->pool, a->rows, 1, @NAME@_rows, (void *)a);"
    end
    local text = {}
    for _, p in ipairs(phases) do
      local body = table.concat(p, "\n")
      text[#text + 1] = (body:gsub("@DECLS@", function() return decls(s, body) end))
    end
    text[#text + 1] = "static void @NAME@(const kargs *a) {\n    " .. table.concat(runs, "\n    ") .. "\n}"
    local body = table.concat(text, "\n\n")
    local k = by_body[body]
    if not k then
      local base = kernel_name(grp)
      local name = string.format("k%02d_%s", #kernels + 1, base)
      local lines = {}
      for _, n in ipairs(grp.nodes) do lines[#lines + 1] = n.line end
      table.sort(lines)
      k = {name = name, body = (body:gsub("@NAME@", name)), kind = grp.kind, first_line = lines[1],
           last_line = lines[#lines], ops = #grp.nodes}
      kernels[#kernels + 1] = k
      by_body[body] = k
    end
    calls[#calls + 1] = {kernel = k, grp = grp, slots = s}
  end
  return kernels, calls
end

-- One call site of the forward: the kernel with this layer's buffers and weights.
function emit.call(ctx, c)
  local grp, s = c.grp, c.slots
  local bufs = {}
  for _, b in ipairs(s.bufs) do
    if b.node.output then bufs[#bufs + 1] = "b->" .. b.node.output
    else bufs[#bufs + 1] = string.format("ARENA(%d)", b.node.buffer.offset) end
  end
  local ws, slots = {}, {}
  for _, w in ipairs(s.weights) do
    ws[#ws + 1] = "W->" .. ctx.weight_paths[w.slot]
    slots[#slots + 1] = tostring(w.slot)
  end
  -- the weights' table entries, where a LoRA adapter's update applies (model_lora_apply)
  local lora = grp.kind == "matmul" and grp.rows == "tokens"
  local kv_layer = 0
  for _, n in ipairs(grp.nodes) do kv_layer = n.attrs.kv_layer or n.attrs.moe_layer or n.attrs.state_offset or kv_layer end
  local rows = ({logits = "L", hidden = "H"})[grp.rows] or "T"
  -- the head runs only for steps that want logits, the hidden rows only when asked for
  local guard = rows ~= "T" and string.format("if (%s > 0) ", rows) or ""
  return string.format("    %sRUN(%s, %s, %d, ((float *[]){%s}), ((const void *[]){%s}), %s, %s);", guard,
    c.kernel.name, rows, kv_layer,
    #bufs > 0 and table.concat(bufs, ", ") or "NULL", #ws > 0 and table.concat(ws, ", ") or "NULL",
    grp.q8 and string.format("ARENA(%d)", grp.q8.offset) or "NULL",
    lora and string.format("((const int[]){%s})", table.concat(slots, ", ")) or "NULL")
end

return emit

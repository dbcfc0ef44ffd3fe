-- generator/emit_cuda.lua — the CUDA backend: emits kernels.cu and the launch sequence from the
-- same planned, fused graph as the CPU backend.
--
-- Each fusion group becomes one __global__ kernel (extern "C", so NVRTC and the driver find it by
-- name), built from the device helpers of kernels/cuda/*.cuh with every shape a constant:
--   rows       one block per row, the group's row ops in order with a barrier between them;
--   matmul     one warp per output row of the concatenated linears, up to TMAX tokens per launch
--              (weights dequantized in registers, read once for those tokens); an RMSNorm prologue
--              is folded into the weights (each block computes the rows' 1/rms itself, so no block
--              waits for another); the epilogue (RoPE, KV store, SwiGLU, residual, post-norms) is
--              run by the last block to finish, over the launch's rows;
--   attention  the specialized decode (split-K) / flash-prefill kernels where the head shape fits
--              them, else the generic attn_rows kernel; chosen per step by the host;
--   moe        routing, each expert's gate/up and down over its tokens, combine with the epilogue
--              (three launches in decode, four in prefill; generator/emit_cuda_moe.lua).
-- Kernels with identical bodies are emitted once, like the CPU backend. Every statement carries
-- the models.lua line that produced it.

local util = require("util")
local emit_c = require("emit_c")
local emit_moe = require("emit_cuda_moe")

local emit = {}

emit.TMAX = 8        -- tokens per matmul launch (rows of X a warp multiplies each weight by)
emit.MM_WARPS = 4    -- warps (output rows) per matmul block
emit.ROWS_NT = 256   -- threads of a rows kernel block

-- Every weight dtype of the runtime (runtime/load/dtype_table.h) the kernels read, as
-- kernels/cuda/common.cuh's IG_* id, with its block {elements, bytes}: the build, stored and
-- repacked types, and i32 (an act-order weight's input order, read by the matmul, never
-- multiplied). model.cu asserts that common.cuh's ids and block sizes are the table's
-- (dtype_asserts).
local DT, DT_BYTES = {}, {}
for _, t in ipairs(require("dtypes").list) do
  if t.role ~= "part" or t.name == "i32" then
    DT[t.name] = "IG_" .. t.enum
    DT_BYTES[t.name] = {t.elems, t.bytes}
  end
end

-- A weight's device pointer in model.cu, by name (d->w.named.blk[3].q: generator/weight_names.lua).
function emit.weight(ctx, slot) return "d->w.named." .. ctx.device_weight_paths[slot] end

-- static_asserts of model.cu: common.cuh's IG_* ids are the table's enum values, its block sizes
-- the table's.
local function dtype_asserts()
  local out = {}
  for i, t in ipairs(require("dtypes").list) do
    local ig = DT[t.name]
    if ig then
      out[#out + 1] = string.format('static_assert(%s == %d, "%s: common.cuh\'s id is not runtime/load/dtype_table.h\'s");',
        ig, i - 1, ig)
      if t.name ~= "i32" then
        out[#out + 1] = string.format('static_assert(ig_dtype_info<%s>::elems == %d && ig_dtype_info<%s>::bytes == %d, "%s block");',
          ig, t.elems, ig, t.bytes, ig)
      end
    end
  end
  return out
end

-- A weight of a dtype the kernels do not read stops the build rather than emit wrong code.
function emit.check_dtypes(weights)
  for _, w in ipairs(weights) do
    if not DT[w.dtype] then
      util.die(string.format("not supported on CUDA: %s (tensor %s); build with --backend cpu, or convert with --dtype",
        w.dtype, w.tensor or w.logical))
    end
    -- the matmul kernels read a float row in slices of 8 (ig_row_multiple): every released model's widths are
    -- (a convolution's taps, w.f32, are read one by one)
    if #w.shape == 2 and DT_BYTES[w.dtype][1] == 1 and w.dtype ~= "i32" and not w.f32 and w.shape[2] % 8 ~= 0 then
      util.die(string.format("not supported on CUDA: weight %s (tensor %s) has rows of %d, not a multiple of 8; build "
        .. "with --backend cpu", w.logical, w.tensor or w.logical, w.shape[2]))
    end
  end
end

function emit.weight_bytes(w)
  local e, b = table.unpack(DT_BYTES[w.dtype])
  local n = 1
  for _, d in ipairs(w.shape) do n = n * d end
  return n // e * b
end

local function cf(x) return util.cfloat(x) end
local function row(ptr, t, width) return string.format("%s + (long long)(%s) * %d", ptr, t, width) end

-- CUDA statements for one row op at row t, run by every thread of the block (NT threads).
local function row_stmt(ctx, s, n, t, NT)
  local out = n.out and s.buf(n) or nil
  local function inp(i) return s.buf(n.inputs[i].node) end
  local W, op = n.width, n.op
  local function loop(body) return string.format("for (int i = threadIdx.x; i < %d; i += blockDim.x) %s", W, body) end
  if op == "embedding" then
    local w = n.inputs[2]
    return string.format("ig_row_embed<%s, %d>(%s, st.tokens[%s], %s);", DT[w.dtype], W, s.weight(w), t, row(out, t, W))
  elseif op == "rmsnorm" then
    return string.format("ig_row_rmsnorm<%d, %d, %d%s>(%s, (const float *)%s, %s, %s, %s, scratch);", W,
      n.attrs.group or W, NT, n.attrs.per_head and ", true" or "", row(inp(1), t, W), s.weight(n.inputs[2]), row(out, t, W),
      cf(n.attrs.eps), cf(n.attrs.offset))
  elseif op == "layernorm" then
    local a = n.attrs
    return string.format("ig_row_layernorm<%d, %d, %d, %s>(%s, (const float *)%s, %s, %s, %s, scratch);", W, a.group, NT,
      a.per_head and "true" or "false", row(inp(1), t, W), s.weight(n.inputs[2]),
      n.inputs[3] and "(const float *)" .. s.weight(n.inputs[3]) or "nullptr", row(out, t, W), cf(a.eps))
  elseif op == "softcap" then
    local c = cf(n.attrs.cap)
    return loop(string.format("{ const float *x = %s; %s[i] = %s * tanhf(x[i] / %s); }", row(inp(1), t, W),
      "(" .. row(out, t, W) .. ")", c, c))
  elseif op == "select_rows" then
    local from = n.attrs.hidden and "st.hidden_rows[" or "st.logit_rows["
    return loop(string.format("(%s)[i] = (%s)[i];", row(out, t, W), row(inp(1), from .. t .. "]", W)))
  elseif op == "rope" then
    local a = n.attrs
    local tbl = (a.table_offset or 0) > 0 and string.format("%d /* RoPE table %d */ + ", a.table_offset, a.table) or ""
    return string.format("ig_row_rope<%d, %d, %d, %s>(%s, %s, st.rope + %s(long long)st.pos[%s] * %d);", a.heads,
      a.head_dim, a.rot_dim, a.pairs == "adjacent" and "true" or "false", row(inp(1), t, W), row(out, t, W), tbl, t, a.rot_dim)
  elseif op == "silu" or op == "gelu_tanh" or op == "gelu" then
    return loop(string.format("(%s)[i] = ig_%s((%s)[i]);", row(out, t, W), op, row(inp(1), t, W)))
  elseif op == "sigmoid" then
    return loop(string.format("(%s)[i] = 1.0f / (1.0f + expf(-(%s)[i]));", row(out, t, W), row(inp(1), t, W)))
  elseif op == "mul" and n.inputs[2].width == 1 and W > 1 then -- a gate per row
    return loop(string.format("(%s)[i] = (%s)[i] * %s[%s];", row(out, t, W), row(inp(1), t, W), inp(2), t))
  elseif op == "add" or op == "mul" then
    return loop(string.format("(%s)[i] = (%s)[i] %s (%s)[i];", row(out, t, W), row(inp(1), t, W),
      op == "add" and "+" or "*", row(inp(2), t, W)))
  elseif op == "scale" then
    return loop(string.format("(%s)[i] = (%s)[i] * %s;", row(out, t, W), row(inp(1), t, W), cf(n.attrs.factor)))
  elseif op == "kv_store" then
    local a = n.attrs
    local kw = a.kv_heads * a.head_dim
    return string.format("ig_row_kv_store<%d, %d>(%s, %s, st.kv, N_KV_LAYERS, kvl, st.n_blocks, st.block_tables + (long long)st.seq[%s] * BT_STRIDE, st.pos[%s]);",
      a.kv_heads, a.head_dim, row(inp(1), t, kw), a.shared_value and "nullptr /* values: the keys' first columns */"
        or row(inp(2), t, kw), t, t)
  elseif op == "columns" then
    local a = n.attrs
    return loop(string.format("(%s)[i] = (%s)[i / %d * %d + %d + i %% %d];", row(out, t, W),
      row(inp(1), t, n.inputs[1].width), a.count, a.group, a.first, a.count))
  elseif op == "concat" then
    local a = n.attrs
    return loop(string.format("{ const int h = i / %d, j = i %% %d; (%s)[i] = j < %d ? (%s)[h * %d + j] : (%s)[h * %d + j - %d]; }",
      a.a + a.b, a.a + a.b, row(out, t, W), a.a, row(inp(1), t, n.inputs[1].width), a.a, row(inp(2), t, n.inputs[2].width),
      a.b, a.a))
  elseif op == "head_linear" then
    local a, w = n.attrs, n.inputs[2]
    return string.format("ig_row_head_linear<%s, %d, %d, %d, %d, %d, %s>(%s, %s, %s);", DT[w.dtype], a.heads, a.stride,
      a.first, a.rows, a.cols, a.transpose and "true" or "false", s.weight(w), row(inp(1), t, n.inputs[1].width),
      row(out, t, W))
  end
  -- an op graph.lua traces but this backend cannot emit: the description's line, not a traceback
  util.die(string.format("%s:%d: error: op '%s' has no CUDA emitter (generator/emit_cuda.lua)", ctx.desc_path, n.line, op))
end

-- Statements of a list of row ops at row t, a barrier after each (the next op may read what
-- other threads of the block wrote).
local function row_block(ctx, s, nodes, t, NT, indent)
  local L = {}
  for _, n in ipairs(nodes) do
    L[#L + 1] = indent .. emit_c.src(ctx, n)
    L[#L + 1] = indent .. row_stmt(ctx, s, n, t, NT)
    L[#L + 1] = indent .. "__syncthreads();"
  end
  return L
end

-- Whether a matmul group's prologue can be folded into its linears: an optional select_rows
-- (a gather of rows: the X row map) followed by an optional whole-row RMSNorm (its weight
-- multiplies W's columns, 1/rms each row), each read by nothing outside the group.
local function foldable(grp)
  local p = grp.prologue
  local i, fold = 1, {}
  if p[i] and p[i].op == "select_rows" then fold.select = p[i]; i = i + 1 end
  if p[i] and p[i].op == "rmsnorm" and (p[i].attrs.group or p[i].width) == p[i].width then fold.norm = p[i]; i = i + 1 end
  if i <= #p then return nil end
  if fold.select and fold.norm and fold.norm.inputs[1].node ~= fold.select then return nil end
  for _, n in ipairs(p) do
    for _, c in ipairs(n.consumers) do
      if c.group ~= grp then return nil end
    end
  end
  fold.x = #p > 0 and p[1].inputs[1].node or grp.linears[1].inputs[1].node
  return fold
end

-- The block's reduction scratch, declared only in kernels whose statements use it.
local function with_scratch(text)
  if not text:find("scratch") then return text end
  return (text:gsub("%) {\n", ") {\n    __shared__ float scratch[32]; /* block reductions */\n", 1))
end

local function kernel_params(s)
  local ps = {"const ig_step st", "const int t0", "const int nt", "const int kvl"}
  for i = 1, #s.bufs do ps[#ps + 1] = "float *b" .. (i - 1) end
  for i = 1, #s.weights do ps[#ps + 1] = "const void *w" .. (i - 1) end
  return table.concat(ps, ", ")
end

local function rows_kernel(ctx, s, nodes)
  local NT = emit.ROWS_NT
  local L = {string.format("extern \"C\" __global__ void __launch_bounds__(%d) @NAME@(@PARAMS@) {", NT),
             "    (void)nt; (void)kvl;",
             "    const int t = t0 + blockIdx.x; /* one block per row */"}
  for _, l in ipairs(row_block(ctx, s, nodes, "t", NT, "    ")) do L[#L + 1] = l end
  L[#L + 1] = "}"
  return with_scratch((table.concat(L, "\n"):gsub("@PARAMS@", function() return kernel_params(s) end)))
end

-- A causal convolution (kernels/cuda/conv.cuh): a kernel of output rows, one block per row, each
-- reading its sequence's earlier rows of the step or the sequence's state from before it; then a
-- kernel that rewrites each sequence's state, run by the block of the sequence's last token. The
-- state's offset in a sequence's slot comes with the launch (kvl), so every layer of the same
-- shape shares the bodies.
local function conv_kernels(ctx, s, n)
  local NT, W, K = emit.ROWS_NT, n.width, n.attrs.width
  local x, out = s.buf(n.inputs[1].node), s.buf(n)
  local taps = s.weight(n.inputs[2]) -- w0: the kernel's taps, then its bias
  local bias = n.inputs[3] and "(const float *)" .. s.weight(n.inputs[3]) or "nullptr"
  local state = "st.state + (long long)st.state_slots[st.seq[t]] * STATE_FLOATS + kvl"
  local rows = {
    string.format("extern \"C\" __global__ void __launch_bounds__(%d) @NAME@(@PARAMS@) {", NT),
    "    (void)nt;",
    "    const int t = t0 + blockIdx.x; /* one block per row */",
    "    int back = 0; /* the sequence's tokens before t in this step, up to the kernel's width - 1 */",
    string.format("    while (back < %d && t - back > 0 && st.seq[t - back - 1] == st.seq[t]) back++;", K - 1),
    "    " .. emit_c.src(ctx, n),
    string.format("    ig_row_causal_conv<%d, %d>(%s, t, back, st.pos[t], %s, (const float *)%s, %s, %s);", W, K, x, state,
      taps, bias, row(out, "t", W)),
    "}",
  }
  local keep = {
    string.format("extern \"C\" __global__ void __launch_bounds__(%d) @NAME@(@PARAMS@) {", NT),
    "    (void)nt;",
    "    const int t = t0 + blockIdx.x; /* one block per row: the sequence's last token keeps its state */",
    "    if (t + 1 < st.n_tokens && st.seq[t + 1] == st.seq[t]) return;",
    "    int count = 1;",
    string.format("    while (count < %d && t - count >= 0 && st.seq[t - count] == st.seq[t]) count++;", K - 1),
    "    " .. emit_c.src(ctx, n) .. " /* its last inputs: the sequence's state */",
    string.format("    ig_row_causal_conv_keep<%d, %d>(%s, t, count, st.pos[t], %s);", W, K, x, state),
    "}",
  }
  local function text(L) return (table.concat(L, "\n"):gsub("@PARAMS@", function() return kernel_params(s) end)) end
  return text(rows), text(keep)
end

-- A state-space scan (kernels/cuda/ssm.cuh): a block per (token, head); the blocks of a
-- sequence's first token in the step scan the head over all its tokens from the sequence's state.
local function scan_kernel(ctx, s, n)
  local a = n.attrs
  local x, dt, B, C, out = s.buf(n.inputs[1].node), s.buf(n.inputs[2].node), s.buf(n.inputs[3].node),
    s.buf(n.inputs[4].node), s.buf(n)
  local A, D, bias = s.weight(n.inputs[5]), s.weight(n.inputs[6]), s.weight(n.inputs[7])
  local L = {
    "extern \"C\" __global__ void __launch_bounds__(128) @NAME@(@PARAMS@) {",
    "    (void)nt;",
    "    const int t = t0 + blockIdx.x, h = blockIdx.y; /* a block per (token, head) */",
    "    if (t > 0 && st.seq[t - 1] == st.seq[t]) return; /* the sequence's first token's blocks scan them all */",
    "    int count = 1;",
    "    while (t + count < st.n_tokens && st.seq[t + count] == st.seq[t]) count++;",
    string.format("    float *state = st.state + (long long)st.state_slots[st.seq[t]] * STATE_FLOATS + kvl + (long long)h * %d;",
      a.head_dim * a.state),
    string.format("    const float A = %s((const float *)%s)[h]%s;", a.a_log and "-expf(" or "", A, a.a_log and ")" or ""),
    "    " .. emit_c.src(ctx, n),
    string.format("    ig_ssm_scan_head<%d, %d, %d, %d>(%s, %s, %s, %s, %s, t, count, h, A, ((const float *)%s)[h], ((const float *)%s)[h], %s, %s, st.pos[t] == 0, state);",
      a.heads, a.head_dim, a.state, a.groups, x, dt, B, C, out, D, bias, cf(a.dt_min), cf(a.dt_max)),
    "}",
  }
  return (table.concat(L, "\n"):gsub("@PARAMS@", function() return kernel_params(s) end))
end

-- The gated delta rule (kernels/cuda/delta.cuh): a block per (token, value head), as the scan.
local function delta_kernel(ctx, s, n)
  local a = n.attrs
  local q, k, v, ga, gb, out = s.buf(n.inputs[1].node), s.buf(n.inputs[2].node), s.buf(n.inputs[3].node),
    s.buf(n.inputs[4].node), s.buf(n.inputs[5].node), s.buf(n)
  local A, bias = s.weight(n.inputs[6]), s.weight(n.inputs[7])
  local L = {
    "extern \"C\" __global__ void __launch_bounds__(128) @NAME@(@PARAMS@) {",
    "    (void)nt;",
    "    const int t = t0 + blockIdx.x, j = blockIdx.y; /* a block per (token, value head) */",
    "    if (t > 0 && st.seq[t - 1] == st.seq[t]) return; /* the sequence's first token's blocks scan them all */",
    "    int count = 1;",
    "    while (t + count < st.n_tokens && st.seq[t + count] == st.seq[t]) count++;",
    string.format("    float *state = st.state + (long long)st.state_slots[st.seq[t]] * STATE_FLOATS + kvl + (long long)j * %d;",
      a.k_dim * a.v_dim),
    "    " .. emit_c.src(ctx, n),
    string.format("    const float A = %s((const float *)%s)[j]%s;", a.a_log and "-expf(" or "", A, a.a_log and ")" or ""),
    string.format("    ig_delta_scan_head<%d, %d, %d, %d>(%s, %s, %s, %s, %s, %s, t, count, j, A, ((const float *)%s)[j], st.pos[t] == 0, state);",
      a.k_heads, a.v_heads, a.k_dim, a.v_dim, q, k, v, ga, gb, out, bias),
    "}",
  }
  return (table.concat(L, "\n"):gsub("@PARAMS@", function() return kernel_params(s) end))
end

-- The folded prologue of a matmul kernel: comments for the gathered rows and the RMSNorm, and
-- the per-row 1/rms computed by the block. first: the first token row of the block ("t0",
-- "tb"); n: its row count; cap: the rms array's size. Returns the GEMV/GEMM arguments:
-- X pointer, row map, norm weight and offset, per-row scale.
local function folded_prologue(ctx, s, L, fold, x, IN, NT, first, n, cap, gathered_x_at_first)
  local xptr, rows, norm, scale = row(s.buf(x), first, IN), "nullptr", "nullptr, 0.0f", "nullptr"
  local rms_x, rms_rows = xptr, "nullptr"
  if fold and fold.select then
    L[#L + 1] = "    " .. emit_c.src(ctx, fold.select) .. " /* the X rows of the linears below */"
    xptr, rms_x, rms_rows = s.buf(x), s.buf(x), "st.logit_rows + " .. first
    rows = gathered_x_at_first and rms_rows or "st.logit_rows"
  end
  if not gathered_x_at_first and not (fold and fold.select) then xptr = s.buf(x) end
  if fold and fold.norm then
    local nn = fold.norm
    L[#L + 1] = "    " .. emit_c.src(ctx, nn) .. " /* folded: its weight scales the columns of W, 1/rms each row */"
    L[#L + 1] = string.format("    __shared__ float rms[%s];", cap)
    L[#L + 1] = string.format("    ig_rms_scales<%d, %d>(%s, %d, %s, %s, %s, rms);", IN, NT, rms_x, IN, rms_rows, n,
      cf(nn.attrs.eps))
    norm, scale = string.format("(const float *)%s, %s", s.weight(nn.inputs[2]), cf(nn.attrs.offset)), "rms"
  end
  return xptr, rows, norm, scale
end

local function matmul_kernel(ctx, s, grp, fold)
  local NT = emit.MM_WARPS * 32
  local x = fold and fold.x or grp.linears[1].inputs[1].node
  local IN = grp.linears[1].inputs[1].width
  -- min 1 block per SM: ptxas may then keep TMAX accumulators per inlined GEMV in registers
  -- (its occupancy heuristic otherwise caps sm_86/89 at 96 registers and spills)
  -- TM: tokens per launch, a template parameter so that decode (TM = 1) gets its own code with
  -- a fraction of the registers of the TMAX-token version.
  local L = {string.format("template <int TM> __global__ void __launch_bounds__(%d, 1) @NAME@(@PARAMS@) {", NT),
             "    (void)kvl;"}
  -- the GEMV reads X rows t0.. (or the gathered rows logit_rows[t0..])
  local xptr, rows, norm, scale = folded_prologue(ctx, s, L, fold, x, IN, NT, "t0", "nt", "TM", true)
  L[#L + 1] = string.format("    const int r = blockIdx.x * %d + (threadIdx.x >> 5); /* one warp per output row */", emit.MM_WARPS)
  local off = 0
  for i, l in ipairs(grp.linears) do
    local w, bias, OUT = l.inputs[2], l.inputs[3], l.width
    L[#L + 1] = "    " .. emit_c.src(ctx, l)
    -- an act-order weight (inputs reordered at load) reads X through its order
    local perm = w.perm and string.format(", (const int *)%s", s.weight(w.perm)) or ""
    L[#L + 1] = string.format("    %sif (r < %d) ig_gemv_warp<%s, %d, TM%s>(%s, r - %d, %s, %d, %s, nt, %s, %s, %s, %d, %s, 0%s);",
      i > 1 and "else " or "", off + OUT, DT[w.dtype], IN, w.perm and ", true" or "", s.weight(w), off, xptr, IN, rows,
      norm, scale, row(s.buf(l), "t0", OUT), OUT, bias and ("(const float *)" .. s.weight(bias)) or "nullptr", perm)
    off = off + OUT
  end
  if #grp.epilogue > 0 then
    -- one block takes the epilogue's tokens in turn, two barriers per op each: with several tokens
    -- that tail outlasts the GEMV, so a step of more than one token runs the epilogue as its own
    -- rows kernel (a block per token) after the launches
    L[#L + 1] = "    if (TM > 1) return; /* several tokens: the epilogue is the rows kernel launched after */"
    L[#L + 1] = "    if (!ig_last_block(st.done)) return; /* the epilogue: the last block, every row of the launch */"
    L[#L + 1] = "    for (int t = t0; t < t0 + nt; t++) {"
    for _, l in ipairs(row_block(ctx, s, grp.epilogue, "t", NT, "        ")) do L[#L + 1] = l end
    L[#L + 1] = "    }"
  end
  L[#L + 1] = "}"
  return with_scratch((table.concat(L, "\n"):gsub("@PARAMS@", function() return kernel_params(s) end))), off
end

-- The prefill form of a matmul group (more than GEMM_MIN_ROWS rows): 64-token x 64-row tiles
-- (kernels/cuda/gemm_q.cuh), weights read once per 64 tokens; the same folded prologue; the
-- epilogue is a separate rows kernel (one block per row instead of one block for all rows).
emit.GEMM_MIN_ROWS = 16

local function gemm_kernel(ctx, s, grp, fold)
  local NT = 256
  local x = fold and fold.x or grp.linears[1].inputs[1].node
  local IN = grp.linears[1].inputs[1].width
  local L = {string.format("extern \"C\" __global__ void __launch_bounds__(%d) @NAME@(@PARAMS@) {", NT),
             "    (void)kvl;",
             "    const int tb = t0 + blockIdx.y * IG_GEMM_BM, n = min(IG_GEMM_BM, t0 + nt - tb); /* this block's tokens */"}
  -- the GEMM indexes X by absolute token row (tb + t), through logit_rows when gathered
  local xbase, rows, norm, scale = folded_prologue(ctx, s, L, fold, x, IN, NT, "tb", "n", "IG_GEMM_BM", false)
  local nb = 0
  for i, l in ipairs(grp.linears) do
    local w, bias, OUT = l.inputs[2], l.inputs[3], l.width
    local blocks = (OUT + 63) // 64
    L[#L + 1] = "    " .. emit_c.src(ctx, l)
    local perm = w.perm and string.format(", (const int *)%s", s.weight(w.perm)) or ""
    L[#L + 1] = string.format("    %sif (blockIdx.x < %d) ig_gemm_tile<%s, %d%s>(%s, (blockIdx.x - %d) * IG_GEMM_BN, %d, %s, %d, %s, tb, n, %s, %s, %s, %d, %s%s);",
      i > 1 and "else " or "", nb + blocks, DT[w.dtype], IN, w.perm and ", true" or "", s.weight(w), nb, OUT, xbase, IN,
      rows, norm, scale, row(s.buf(l), "tb", OUT), OUT, bias and ("(const float *)" .. s.weight(bias)) or "nullptr", perm)
    nb = nb + blocks
  end
  L[#L + 1] = "}"
  return with_scratch((table.concat(L, "\n"):gsub("@PARAMS@", function() return kernel_params(s) end))), nb
end

-- Dense weights (f32, f16, bf16) in prefill-sized steps go through cuBLASLt: one GEMM per linear,
-- F32 accumulate, the linear's bias in cuBLASLt's epilogue. Its B operand is X in the weights'
-- type (BF16/F16 in): a pack kernel writes it to st.lt_x, one block per row, with the folded
-- prologue (row gather, RMSNorm) applied, as the tiled GEMM applies it while staging. f32 weights
-- with nothing to fold read the activations in place.
local LT_TYPE = {f32 = "CUDA_R_32F", f16 = "CUDA_R_16F", bf16 = "CUDA_R_16BF"}
local LT_BYTES = {f32 = 4, f16 = 2, bf16 = 2}

-- The dtype every linear of the group shares, if it is one cuBLASLt multiplies.
local function lt_dtype(grp)
  local dt = grp.linears[1].inputs[2].dtype
  for _, l in ipairs(grp.linears) do
    if l.inputs[2].dtype ~= dt or l.inputs[2].perm then return nil end -- the pack kernel has no reordering
  end
  return LT_TYPE[dt] and dt or nil
end

local function pack_kernel(ctx, s, grp, fold, dt)
  local NT = emit.ROWS_NT
  local x = fold and fold.x or grp.linears[1].inputs[1].node
  local IN = grp.linears[1].inputs[1].width
  local L = {string.format("extern \"C\" __global__ void __launch_bounds__(%d) @NAME@(@PARAMS@) {", NT),
             "    (void)nt; (void)kvl;",
             "    const int t = t0 + blockIdx.x; /* one block per row of the GEMM's input */"}
  local src_row, norm, off, eps = "t", "nullptr", "0.0f", "0.0f"
  if fold and fold.select then
    L[#L + 1] = "    " .. emit_c.src(ctx, fold.select) .. " /* the X rows of the linears */"
    src_row = "st.logit_rows[t]"
  end
  if fold and fold.norm then
    local nn = fold.norm
    L[#L + 1] = "    " .. emit_c.src(ctx, nn)
    norm, off, eps = "(const float *)" .. s.weight(nn.inputs[2]), cf(nn.attrs.offset), cf(nn.attrs.eps)
  end
  L[#L + 1] = string.format("    ig_row_pack<%d, %d, %s>(%s, %s, %s, %s, (unsigned char *)st.lt_x + (long long)t * %d, scratch);",
    IN, NT, DT[dt], row(s.buf(x), src_row, IN), norm, off, eps, IN * LT_BYTES[dt])
  L[#L + 1] = "}"
  return with_scratch((table.concat(L, "\n"):gsub("@PARAMS@", function() return kernel_params(s) end)))
end

local function kernel_name(grp, nodes)
  local parts, seen = {}, {}
  for _, n in ipairs(nodes) do
    local p = n.op == "linear" and n.inputs[2].logical or n.op
    if not seen[p] then parts[#parts + 1] = p; seen[p] = true end
  end
  local dt
  for _, l in ipairs(grp.linears) do dt = dt or l.inputs[2].dtype end
  return table.concat(parts, "_") .. (dt and ("_" .. dt) or "")
end

-- Attention: which kernels fit this head shape (HD, GROUP). Shared memory limits as in
-- kernels/cuda/attn_*.cuh (48 KiB static).
local function attention_plan(a)
  local HD, GROUP, KVH = a.head_dim, a.heads // a.kv_heads, a.kv_heads
  local p = {HD = HD, GROUP = GROUP, KVH = KVH, HEADS = a.heads, VD = a.value_dim, SHARED = a.shared_value}
  -- values shared with the keys (MLA): the generic kernel, which reads them from the key rows
  if a.shared_value or a.value_dim ~= a.head_dim then return p end
  if HD % 32 == 0 and HD <= 256 and 4 * GROUP * HD * 4 <= 48 * 1024 then p.decode = true end
  if HD % 32 == 0 then
    local bq = math.max(1, (HD <= 64 and 64 or 32) // GROUP)
    while bq > 1 and (bq * GROUP * HD + 32 * (HD + 1) + 32 * HD) * 4 > 48 * 1024 do bq = bq // 2 end
    if (bq * GROUP * HD + 32 * (HD + 1) + 32 * HD) * 4 <= 48 * 1024 then p.prefill_bq = bq end
  end
  return p
end

-- Builds the kernels and the call list. A call is {kernel, grp, slots, kind, ...}; each kernel
-- {name, body, kind, first_line, last_line}. Extra launches (an unfoldable prologue) get their
-- own rows kernel.
function emit.kernels(ctx, groups, final_node)
  local kernels, by_body, calls = {}, {}, {}
  local function add_kernel(body, base, nodes, kind)
    local k = by_body[body]
    if not k then
      local lines = {}
      for _, n in ipairs(nodes) do lines[#lines + 1] = n.line end
      table.sort(lines)
      local name = string.format("k%02d_%s", #kernels + 1, base)
      k = {name = name, body = (body:gsub("@NAME@", name)), kind = kind, first_line = lines[1], last_line = lines[#lines],
           ops = #nodes}
      kernels[#kernels + 1] = k
      by_body[body] = k
    end
    return k
  end
  for _, grp in ipairs(groups) do
    local s = emit_c.slots(grp, final_node)
    local kv_layer = 0
    for _, n in ipairs(grp.nodes) do kv_layer = n.attrs.kv_layer or kv_layer end
    if grp.kind == "rows" then
      local k = add_kernel(rows_kernel(ctx, s, grp.ops), kernel_name(grp, grp.ops), grp.ops, "rows")
      calls[#calls + 1] = {kernel = k, grp = grp, slots = s, kind = "rows", kv_layer = kv_layer}
    elseif grp.kind == "matmul" then
      local fold = foldable(grp)
      if not fold and #grp.prologue > 0 then
        local ps = emit_c.slots(grp, final_node)
        local k = add_kernel(rows_kernel(ctx, ps, grp.prologue), kernel_name(grp, grp.prologue), grp.prologue, "rows")
        calls[#calls + 1] = {kernel = k, grp = grp, slots = ps, kind = "rows", kv_layer = kv_layer}
      end
      local body, total = matmul_kernel(ctx, s, grp, fold)
      local nodes = {}
      for _, n in ipairs(grp.nodes) do nodes[#nodes + 1] = n end
      local k = add_kernel(body, kernel_name(grp, nodes), nodes, "matmul")
      local call = {kernel = k, grp = grp, slots = s, kind = "matmul", rows_out = total, kv_layer = kv_layer}
      local gs = emit_c.slots(grp, final_node)
      local gbody, gblocks = gemm_kernel(ctx, gs, grp, fold)
      local linears = {}
      for _, n in ipairs(grp.linears) do linears[#linears + 1] = n end
      call.gemm = {kernel = add_kernel(gbody, kernel_name(grp, linears) .. "_gemm", linears, "gemm"), slots = gs,
                   blocks = gblocks}
      local dt = lt_dtype(grp)
      if dt then
        call.lt = {dtype = dt, slots = emit_c.slots(grp, final_node), x = fold and fold.x or grp.linears[1].inputs[1].node}
        -- an epilogue that is only the residual add (linear + x, the linear read by nothing else)
        -- is cuBLASLt's C operand: beta = 1, C = x, D = the sum; no epilogue kernel then
        local e, l = grp.epilogue, grp.linears[1]
        if #grp.linears == 1 and #e == 1 and e[1].op == "add" and #l.consumers == 1 then
          local a, b = e[1].inputs[1].node, e[1].inputs[2].node
          local other = (a == l and b ~= l and b) or (b == l and a ~= l and a) or nil
          if other then call.lt.residual = {add = e[1], other = other} end
        end
        if dt ~= "f32" or (fold and (fold.select or fold.norm)) then
          local ps = emit_c.slots(grp, final_node)
          local pnodes = {}
          if fold and fold.select then pnodes[#pnodes + 1] = fold.select end
          if fold and fold.norm then pnodes[#pnodes + 1] = fold.norm end
          local pbody = pack_kernel(ctx, ps, grp, fold, dt)
          call.lt.pack = {kernel = add_kernel(pbody, "pack_" .. kernel_name(grp, grp.linears),
                                              #pnodes > 0 and pnodes or grp.linears, "rows"), slots = ps}
        end
      end
      if #grp.epilogue > 0 then
        local es = emit_c.slots(grp, final_node)
        call.epi = {kernel = add_kernel(rows_kernel(ctx, es, grp.epilogue), kernel_name(grp, grp.epilogue), grp.epilogue,
                                        "rows"), slots = es}
      end
      calls[#calls + 1] = call
    elseif grp.kind == "moe" then
      calls[#calls + 1] = emit_moe.call(ctx, grp, final_node, {DT = DT, kernel_params = kernel_params,
        with_scratch = with_scratch, row_block = row_block, add_kernel = add_kernel, TMAX = emit.TMAX,
        MM_WARPS = emit.MM_WARPS, ROWS_NT = emit.ROWS_NT})
    elseif grp.kind == "scan" then
      local n = grp.ops[1]
      local body = n.op == "delta_scan" and delta_kernel(ctx, s, n) or scan_kernel(ctx, s, n)
      local k = add_kernel(body, kernel_name(grp, grp.ops), grp.ops, "scan")
      calls[#calls + 1] = {kernel = k, grp = grp, slots = s, kind = "scan", kv_layer = n.attrs.state_offset,
                           heads = n.attrs.heads or n.attrs.v_heads}
    elseif grp.kind == "conv" then
      local n = grp.ops[1]
      local rows_k, keep_k = conv_kernels(ctx, s, n)
      local name = kernel_name(grp, grp.ops)
      local k1 = add_kernel(rows_k, name, grp.ops, "rows")
      local k2 = add_kernel(keep_k, name .. "_keep", grp.ops, "rows")
      calls[#calls + 1] = {grp = grp, slots = s, kind = "conv", kernel = k1, keep = k2, kv_layer = n.attrs.state_offset,
                           decode_kernels = {k1.name, k2.name}}
    else
      local n = grp.ops[1]
      calls[#calls + 1] = {grp = grp, slots = s, kind = "attention", node = n, plan = attention_plan(n.attrs),
                           kv_layer = kv_layer}
    end
  end
  return kernels, calls
end

-- Library kernels (templates in kernels/cuda) the attention calls launch, by instantiation.
function emit.library_kernels(calls)
  local list, seen = {}, {}
  local function add(expr)
    if not seen[expr] then seen[expr] = #list; list[#list + 1] = expr end
    return seen[expr]
  end
  for _, c in ipairs(calls) do
    if c.kind == "attention" then
      local p = c.plan
      if p.decode then
        c.k_decode = add(string.format("attn_decode_kernel<%d, %d, %d>", p.HD, p.GROUP, p.KVH))
        c.k_combine = add(string.format("attn_decode_combine_kernel<%d, %d>", p.HD, p.HEADS))
      end
      if p.prefill_bq then c.k_prefill = add(string.format("attn_prefill_kernel<%d, %d, %d, %d>", p.HD, p.GROUP, p.KVH, p.prefill_bq)) end
      c.k_rows = add(p.SHARED and string.format("attn_rows_kernel<%d, %d, %d, %d, true>", p.HD, p.GROUP, p.KVH, p.VD)
        or string.format("attn_rows_kernel<%d, %d, %d>", p.HD, p.GROUP, p.KVH))
    end
  end
  return list
end

-- Host C++ of one call: launches with this layer's buffers and weights. kid(k) is the kernel's
-- index in the launch table.
function emit.call(ctx, c, kid)
  if c.kind == "moe" then return emit_moe.launches(ctx, c, kid, emit.GEMM_MIN_ROWS, emit.MM_WARPS, emit.ROWS_NT) end
  local s = c.slots
  if c.kind == "attention" then s.buf(c.node.inputs[1].node); s.buf(c.node) end -- q, out: slots b0, b1
  -- the host expression of a slot's buffer, and a kernel's argument list after its fixed parameters
  local function host_ptr(b)
    if b.node.output then return "d->" .. b.node.output end -- "logits" / "hidden": the step's device outputs
    return string.format("A(%d)", b.node.buffer.offset)
  end
  local function arg_list(slots)
    local a = {}
    for _, b in ipairs(slots.bufs) do a[#a + 1] = host_ptr(b) end
    for _, w in ipairs(slots.weights) do a[#a + 1] = emit.weight(ctx, w.slot) end
    return a
  end
  local function argl(slots)
    local a = arg_list(slots)
    return #a > 0 and (", " .. table.concat(a, ", ")) or ""
  end
  local args = arg_list(s)
  local rows = ({logits = "L", hidden = "H"})[c.grp.rows] or "T"
  local tail = argl(s)
  -- a rows kernel over the step's rows: one block per row
  local function rows_launch(k, slots)
    return string.format("LAUNCH(%d, %s, dim3(%s), dim3(%d), st, 0, %s, %d%s);", kid(k), k.name, rows, emit.ROWS_NT, rows,
      c.kv_layer, argl(slots))
  end
  if c.kind == "rows" then
    return {"    " .. rows_launch(c.kernel, s)}
  elseif c.kind == "scan" then -- a block per (token, head)
    return {string.format("    LAUNCH(%d, %s, dim3(%s, %d), dim3(128), st, 0, %s, %d%s);", kid(c.kernel), c.kernel.name, rows,
      c.heads, rows, c.kv_layer, argl(s))}
  elseif c.kind == "conv" then -- every row, then the states (after every row read them)
    return {"    " .. rows_launch(c.kernel, s), "    " .. rows_launch(c.keep, s)}
  elseif c.kind == "matmul" then
    local blocks = (c.rows_out + emit.MM_WARPS - 1) // emit.MM_WARPS
    local one, many = kid(c.kernel)
    local gemm = string.format("        LAUNCH(%d, %s, dim3(%d, (%s + IG_GEMM_BM - 1) / IG_GEMM_BM), dim3(256), st, 0, %s, %d%s);",
      kid(c.gemm.kernel), c.gemm.kernel.name, c.gemm.blocks, rows, rows, c.kv_layer, argl(c.gemm.slots))
    local epi_launch = c.epi and rows_launch(c.epi.kernel, c.epi.slots)
    local L = {string.format("    if (%s > %d) { /* prefill: %s%s */", rows, emit.GEMM_MIN_ROWS,
                             c.lt and "cuBLASLt (d->lt) or the tiled GEMM" or "tiled GEMM",
                             c.epi and ", then the epilogue row by row" or "")}
    if c.lt then
      local lt = c.lt
      local function host_buf(n) return host_ptr(lt.slots.bufs[tonumber(lt.slots.buf(n):sub(2)) + 1]) end
      L[#L + 1] = string.format("        if (d->lt) { /* %s in, f32 accumulate%s */", lt.dtype,
                                lt.pack and "; X packed by the first kernel" or "; X read in place")
      if lt.pack then L[#L + 1] = "            " .. rows_launch(lt.pack.kernel, lt.pack.slots) end
      for i, l in ipairs(c.grp.linears) do
        local bias = l.inputs[3]
        local x, b = lt.pack and "d->lt_x" or host_buf(lt.x), bias and emit.weight(ctx, bias.slot) or "nullptr"
        L[#L + 1] = "            " .. emit_c.src(ctx, l)
        if lt.residual then
          if lt.residual.add.line ~= l.line then L[#L + 1] = "            " .. emit_c.src(ctx, lt.residual.add) end
          L[#L + 1] = string.format("            LT_GEMM_ADD(%d, %s, %s, %s, %s, %s, %s); /* C = the residual, beta = 1 */",
            lt.shape_ids[i], emit.weight(ctx, l.inputs[2].slot), x, host_buf(lt.residual.add), host_buf(lt.residual.other), rows, b)
        else
          L[#L + 1] = string.format("            LT_GEMM(%d, %s, %s, %s, %s, %s);", lt.shape_ids[i], emit.weight(ctx, l.inputs[2].slot), x,
            host_buf(l), rows, b)
        end
      end
      if epi_launch and not lt.residual then L[#L + 1] = "            " .. epi_launch end
      L[#L + 1] = "        } else {"
      L[#L + 1] = "    " .. gemm
      if epi_launch then L[#L + 1] = "            " .. epi_launch end
      L[#L + 1] = "        }"
    else
      L[#L + 1] = gemm
      if epi_launch then L[#L + 1] = "        " .. epi_launch end
    end
    L[#L + 1] = string.format("    } else if (%s == 1) { /* one token: the epilogue in the last block */", rows)
    L[#L + 1] = string.format("        LAUNCH(%d, %s<1>, dim3(%d), dim3(%d), st, 0, 1, %d%s);", one, c.kernel.name,
      blocks, emit.MM_WARPS * 32, c.kv_layer, tail)
    L[#L + 1] = "    } else {"
    L[#L + 1] = string.format("        for (int c0 = 0; c0 < %s; c0 += %d) {", rows, emit.TMAX)
    L[#L + 1] = string.format("            const int n = %s - c0 < %d ? %s - c0 : %d;", rows, emit.TMAX, rows, emit.TMAX)
    L[#L + 1] = string.format("            LAUNCH(%d, %s<%d>, dim3(%d), dim3(%d), st, c0, n, %d%s);", many, c.kernel.name,
      emit.TMAX, blocks, emit.MM_WARPS * 32, c.kv_layer, tail)
    L[#L + 1] = "        }"
    if epi_launch then L[#L + 1] = "        " .. epi_launch end
    L[#L + 1] = "    }"
    return L
  end
  local n, p = c.node, c.plan
  local a = n.attrs
  local q, out = s.buf(n.inputs[1].node), s.buf(n)
  local qa, oa = args[tonumber(q:sub(2)) + 1], args[tonumber(out:sub(2)) + 1]
  local W = n.width
  local common = string.format("st.kv, N_KV_LAYERS, %d, st.n_blocks, st.block_tables, BT_STRIDE", a.kv_layer)
  -- the layer's sink logits (gpt-oss), one per query head
  local sinks = n.inputs[3] and "(const float *)" .. emit.weight(ctx, n.inputs[3].slot) or "nullptr"
  local L = {"    " .. emit_c.src(ctx, n)}
  local lead = "    "
  if p.decode then
    L[#L + 1] = "    if (si.decode_only) {"
    L[#L + 1] = string.format("        LAUNCH(%d, (attn_decode_kernel<%d, %d, %d>), dim3(%d, st.n_seqs, si.splits), dim3(128), %s, %d, %s, st.dec_pos, %d, %s, %s, %s, si.chunk, %s, %d, d->part_o, d->part_ml);",
      c.k_decode, p.HD, p.GROUP, p.KVH, p.KVH, qa, W, common, a.window, cf(a.scale), cf(a.softcap), sinks, oa, W)
    L[#L + 1] = string.format("        if (si.splits > 1) LAUNCH(%d, (attn_decode_combine_kernel<%d, %d>), dim3(%d, st.n_seqs), dim3(%d), d->part_o, d->part_ml, si.splits, %s, %s, %d);",
      c.k_combine, p.HD, p.HEADS, p.HEADS, p.HD, sinks, oa, W)
    L[#L + 1] = "    } else {"
    lead = "        "
  end
  if p.prefill_bq then
    L[#L + 1] = string.format("%sLAUNCH(%d, (attn_prefill_kernel<%d, %d, %d, %d>), dim3((si.max_ntok + %d) / %d, %d, st.n_seqs), dim3(128), %s, %d, %s, st.tok0, st.pos0, st.ntok, %d, %s, %s, %s, %s, %d);",
      lead, c.k_prefill, p.HD, p.GROUP, p.KVH, p.prefill_bq, p.prefill_bq - 1, p.prefill_bq, p.KVH, qa, W, common,
      a.window, cf(a.scale), cf(a.softcap), sinks, oa, W)
  else
    local tmpl = p.SHARED and string.format("%d, %d, %d, %d, true", p.HD, p.GROUP, p.KVH, p.VD)
      or string.format("%d, %d, %d", p.HD, p.GROUP, p.KVH)
    L[#L + 1] = string.format("%sLAUNCH(%d, (attn_rows_kernel<%s>), dim3(T, %d), dim3(32), %s, %d, %s, st.pos, st.seq, %d, %s, %s, %s, %s, %d);",
      lead, c.k_rows, tmpl, p.HEADS, qa, n.inputs[1].width, common, a.window, cf(a.scale), cf(a.softcap), sinks, oa, W)
  end
  if p.decode then L[#L + 1] = "    }" end
  return L
end

-- Launches of one decode step and an estimate of the global-memory bytes it moves per decoded
-- token at a context of ctx_len positions (batch of one sequence): every linear's weights once,
-- one embedding row, norm weights, the activation rows each launch reads and writes, and the
-- K/V rows attention reads.
function emit.decode_cost(calls, kv_bytes_per_pos, ctx_len)
  local launches, weights, act = 0, 0, 0
  local counted = {}
  for _, c in ipairs(calls) do
    launches = launches + (c.decode_kernels and #c.decode_kernels or 1)
    for _, n in ipairs(c.grp.nodes) do
      for _, w in ipairs(n.inputs) do
        if type(w) == "table" and w.kind == "weight" then
          local full = n.op ~= "embedding"
          if not counted[w.slot] or (full and counted[w.slot] == "row") then
            local e, b = table.unpack(DT_BYTES[w.dtype])
            local bytes = full and emit.weight_bytes(w) or w.shape[2] // e * b
            -- a decoded token reads the weights of only top_k of the experts
            if n.op == "moe" and w ~= n.inputs[2] then bytes = bytes * n.attrs.top_k // n.attrs.experts end
            if counted[w.slot] == "row" then weights = weights - w.shape[2] // e * b end
            weights = weights + bytes
            counted[w.slot] = full and "full" or "row"
          end
        end
      end
    end
    for _, b in ipairs(c.slots.bufs) do act = act + 4 * b.node.width end
  end
  return {launches = launches, weight_bytes = weights, act_bytes = act, kv_bytes = kv_bytes_per_pos * ctx_len,
          total = weights + act + kv_bytes_per_pos * ctx_len}
end

local HEADERS = {"common.cuh", "embed.cuh", "norm.cuh", "rope_kv.cuh", "elementwise.cuh", "gemv_q.cuh", "gemm_q.cuh",
                 "pack.cuh", "attn_decode.cuh", "attn_prefill.cuh", "attn_rows.cuh", "moe.cuh", "head_linear.cuh",
                 "conv.cuh", "ssm.cuh", "delta.cuh"}

-- The distinct cuBLASLt GEMM shapes (weight type, IN, OUT, bias) of the calls, each linear's index
-- into them in call.lt.shape_ids, and the bytes per token of the largest packed X.
local function lt_shapes(calls)
  local shapes, index, x_bytes = {}, {}, 0
  for _, c in ipairs(calls) do
    if c.lt then
      c.lt.shape_ids = {}
      for i, l in ipairs(c.grp.linears) do
        local IN, OUT, bias = l.inputs[1].width, l.width, l.inputs[3] and 1 or 0
        local key = table.concat({c.lt.dtype, IN, OUT, bias}, ",")
        if not index[key] then
          shapes[#shapes + 1] = string.format("{%s, %d, %d, %d}", LT_TYPE[c.lt.dtype], IN, OUT, bias)
          index[key] = #shapes - 1
        end
        c.lt.shape_ids[i] = index[key]
      end
      if c.lt.pack then x_bytes = math.max(x_bytes, c.grp.linears[1].inputs[1].width * LT_BYTES[c.lt.dtype]) end
    end
  end
  return shapes, x_bytes
end

-- A C string literal of any text.
local function c_string(text)
  local parts = {}
  for line in (text .. "\n"):gmatch("(.-)\n") do
    parts[#parts + 1] = '"' .. line:gsub("\\", "\\\\"):gsub('"', '\\"'):gsub("\t", "\\t") .. '\\n"'
  end
  return table.concat(parts, "\n    ")
end

-- The files of a CUDA build: kernels.cu (device code; what NVRTC compiles), model.cu (host
-- launches, with runtime/cuda/cuda_host.h), kernel_sources.h (the NVRTC sources, embedded) and
-- model.c (host C: weights, descriptor, load).
function emit.files(ctx, env, calls, kernels, aux)
  local c = env.c
  local out = {}
  local lib = emit.library_kernels(calls)
  -- launch table: generated kernels by name, then the library instantiations
  local names, kid_of = {}, {}
  for _, k in ipairs(kernels) do
    if k.kind == "matmul" then -- two instantiations: decode (1 token) and up to TMAX tokens
      names[#names + 1] = k.name .. "<1>"
      names[#names + 1] = string.format("%s<%d>", k.name, emit.TMAX)
      kid_of[k] = {#names - 2, #names - 1}
    else
      names[#names + 1] = k.name
      kid_of[k] = {#names - 1}
    end
  end
  local lt_list, lt_x_bytes = lt_shapes(calls)
  local lib_base = #names
  for i, expr in ipairs(lib) do names[lib_base + i] = expr end
  for _, call in ipairs(calls) do
    if call.kind == "attention" then
      for _, f in ipairs({"k_decode", "k_combine", "k_prefill", "k_rows"}) do
        if call[f] then call[f] = call[f] + lib_base end
      end
    end
  end
  local heads_max, hd_max, kvh_min = 1, 32, 1 << 30
  for _, call in ipairs(calls) do
    if call.kind == "attention" then
      heads_max = math.max(heads_max, call.plan.HEADS)
      hd_max = math.max(hd_max, call.plan.HD)
      kvh_min = math.min(kvh_min, call.plan.KVH)
    end
  end
  if kvh_min == 1 << 30 then kvh_min = 1 end
  local bt_stride = (c.ctx + 15) // 16

  -- kernels.cu
  local K = {aux.banner("emit_cuda.lua", "generator/emit_cuda.lua (device code; compiled by nvcc, NVRTC and cudasim)", "//"),
             "// The fused CUDA kernels of " .. env.model_name .. ": one per fusion group, every shape a constant.",
             "// A kernel's statements carry the models.lua line that produced them."}
  K[#K + 1] = string.format("#define IG_KV_HALF %d /* the KV cache's element: 1 f16 (--kv-dtype f16), 0 f32 */", env.kv_f16)
  K[#K + 1] = string.format("#define IG_KV_Q8 %d   /* 1: q8_0 blocks (--kv-dtype q8_0) */", env.kv_q8)
  for _, h in ipairs(HEADERS) do K[#K + 1] = '#include "' .. h .. '"' end
  K[#K + 1] = ""
  K[#K + 1] = string.format("#define N_KV_LAYERS %d", env.n_kv_layers)
  K[#K + 1] = string.format("#define BT_STRIDE %d /* block-table entries per sequence: MAX_CTX / %d */", bt_stride, 16)
  K[#K + 1] = string.format("#define STATE_FLOATS %d /* one sequence's recurrent state (causal convolutions' last inputs) */",
    env.state_floats)
  K[#K + 1] = [[

// One step, as the kernels see it: device arrays of the batch (ingot_batch on the device).
struct ig_step {
  const int *tokens, *pos, *seq;      // [n_tokens]
  const int *logit_rows;              // [n_logits]: token rows whose logits are wanted
  const int *hidden_rows;             // [n_hidden]: token rows whose final hidden state is wanted
  const int *tok0, *pos0, *ntok;      // [n_seqs]: first token row, its position, token count
  const int *dec_pos;                 // [n_seqs]: position of a decode step's token
  const int *block_tables;            // [n_seqs][BT_STRIDE]
  ig_kv_t *kv;                        // the paged KV pool (kernels/cuda/common.cuh layout and element)
  void *lt_x;                         // packed X of the cuBLASLt GEMMs [n_tokens][IN] (kernels/cuda/pack.cuh)
  int n_blocks;
  const float *rope;                  // [MAX_CTX][ROPE_DIM/2][2] cos, sin
  unsigned *done;                     // blocks finished, for the last-block epilogues
  float *state;                       // recurrent state, STATE_FLOATS per slot (null without one)
  const int *state_slots;             // [n_seqs]: each sequence's state slot
  int n_tokens, n_logits, n_hidden, n_seqs;
};
]]
  for _, k in ipairs(kernels) do
    K[#K + 1] = string.format("// %s: %s kernel, %d ops, models.lua:%d-%d", k.name, k.kind, k.ops, k.first_line, k.last_line)
    K[#K + 1] = k.body
    K[#K + 1] = ""
  end
  out["kernels.cu"] = table.concat(K, "\n")

  -- kernel_sources.h
  local S = {aux.banner("emit_cuda.lua", "generator/emit_cuda.lua (NVRTC sources)"),
             "/* The sources NVRTC compiles at start for the device found: kernels.cu and its headers. */",
             string.format("#define IG_N_SOURCES %d", #HEADERS + 1),
             "static const char *const IG_SOURCE_NAMES[] = {\"kernels.cu\""}
  for _, h in ipairs(HEADERS) do S[#S] = S[#S] .. ', "' .. h .. '"' end
  S[#S] = S[#S] .. "};"
  S[#S + 1] = "static const char *const IG_SOURCES[] = {"
  S[#S + 1] = "    " .. c_string(out["kernels.cu"]) .. ","
  for _, h in ipairs(HEADERS) do
    local path = aux.script_dir .. "/../kernels/cuda/" .. h
    local text = util.read_file(path) or util.die("cannot read " .. path)
    S[#S + 1] = "    " .. c_string(text) .. ","
  end
  S[#S + 1] = "};"
  local srcs = table.concat(S, "\n")
  out["kernel_sources.h"] = srcs

  -- model.cu
  local M = {aux.banner("emit_cuda.lua", "runtime/cuda/cuda_host.h + generator/emit_cuda.lua (launches)", "//"),
             "// The host side of the CUDA forward of " .. env.model_name .. ": cu_run launches one step's kernels in order.",
             '#include "kernels.cu"',
             string.format("#define N_WEIGHTS %d", #env.weights),
             string.format("#define MAX_TOKENS %d", env.max_tokens),
             string.format("#define VOCAB %d", c.vocab),
             string.format("#define HIDDEN_DIM %d /* width of the final hidden state (embeddings) */", c.dim),
             string.format("#define MAX_CTX %d", c.ctx),
             string.format("#define ROPE_DIM %d", env.rope.rot_dim),
             string.format("#define N_ROPE %d", env.rope.count),
             string.format("#define ARENA_BYTES_PER_TOKEN %d", env.plan.bytes_per_token),
             string.format("#define N_HEADS_MAX %d", heads_max),
             string.format("#define HEAD_DIM_MAX %d", hd_max),
             string.format("#define KV_HEADS_MIN %d", kvh_min),
             string.format("#define IG_N_KERNELS %d", #names),
             string.format("#define IG_LT_N_SHAPES %d /* cuBLASLt GEMM shapes: {weight type, IN, OUT, bias} */", #lt_list),
             string.format("#define IG_LT_SHAPE_LIST %s", #lt_list > 0 and (table.concat(lt_list, ", ") .. ",") or ""),
             string.format("#define IG_LT_X_BYTES %d /* bytes per token of the largest packed GEMM input */", lt_x_bytes),
             string.format('#define IG_SOURCE_HASH "%s"', util.hash(srcs)),
             string.format("#define IG_CUBIN_ARCHS %s /* --cuda-arch: the compute capabilities nvcc made cubins for */",
               table.concat(aux.cuda_archs, ", ")),
             "static const char *const IG_KERNEL_NAMES[IG_N_KERNELS] = {"}
  for _, nm in ipairs(names) do M[#M + 1] = '    "' .. nm .. '",' end
  M[#M + 1] = "};"
  M[#M + 1] = '#ifndef INGOT_CUDASIM'
  M[#M + 1] = '#include "kernel_sources.h"'
  M[#M + 1] = '#endif'
  local names_decl
  names_decl, ctx.device_weight_paths = require("weight_names").build(env.weights, "void *")
  M[#M + 1] = "// The device copies of the weights by name: member k is WEIGHTS[k] of model.c (d->w.named)."
  M[#M + 1] = names_decl
  M[#M + 1] = '#include "cuda_host.h"'
  for _, a in ipairs(dtype_asserts()) do M[#M + 1] = a end
  M[#M + 1] = ""
  M[#M + 1] = "static int cu_run(cu_model *d, const ig_step &st, const ig_step_info &si) {"
  M[#M + 1] = "    const int T = st.n_tokens, L = st.n_logits, H = st.n_hidden;"
  M[#M + 1] = "    (void)T; (void)L; (void)H; (void)si;"
  local last_layer = "none"
  local function kid(k) return table.unpack(kid_of[k]) end
  local launch_names = {}
  for _, call in ipairs(calls) do
    local n = call.grp.nodes[1]
    local layer = n.layer and ("layer " .. n.layer) or (n.op == "embedding" and "embed" or "head")
    if call.grp.rows == "hidden" then layer = "final hidden state (embeddings: only steps that ask for it)" end
    if layer ~= last_layer then M[#M + 1] = "    /* " .. layer .. " */"; last_layer = layer end
    -- the head runs only for steps that want logits, the hidden rows only when asked for
    local guard = ({logits = "L", hidden = "H"})[call.grp.rows]
    if guard then M[#M + 1] = string.format("    if (%s > 0) {", guard) end
    for _, l in ipairs(emit.call(ctx, call, kid)) do M[#M + 1] = (guard and "    " or "") .. l end
    if guard then M[#M + 1] = "    }" end
    if call.grp.rows == "hidden" then
      -- not part of a generation step: launch counts and estimates leave it out
    elseif call.kind == "attention" then
      local p = call.plan
      launch_names[#launch_names + 1] = p.decode and lib[call.k_decode - lib_base + 1] or
        (p.prefill_bq and lib[call.k_prefill - lib_base + 1] or lib[call.k_rows - lib_base + 1])
    elseif call.decode_kernels then -- moe, conv: several launches
      for _, nm in ipairs(call.decode_kernels) do launch_names[#launch_names + 1] = nm end
    else
      launch_names[#launch_names + 1] = call.kernel.name .. (call.kind == "matmul" and "<1>" or "")
    end
  end
  M[#M + 1] = "    return 0;"
  M[#M + 1] = "}"
  out["model.cu"] = table.concat(M, "\n") .. "\n"
  -- what build/model.mk hands nvcc: a cubin per architecture, and the newest one's PTX, which
  -- the driver compiles for any later GPU
  out["cuda_arch.mk"] = "# generated by generator/emit_cuda.lua from --cuda-arch: the architectures nvcc compiles for\n"
    .. "CUDA_ARCH := " .. table.concat(aux.cuda_archs, " ") .. "\n"

  -- model.c and the --info notes
  local ctx_len = math.min(1024, c.ctx)
  local step_calls = {}
  for _, call in ipairs(calls) do
    if call.grp.rows ~= "hidden" then step_calls[#step_calls + 1] = call end
  end
  local fused_cost = emit.decode_cost(step_calls, aux.kv_bytes_per_pos, ctx_len)
  -- launches of each layer; layers of different kinds (dense and MoE) are listed apart
  local in_layers, of_layer, split_k = 0, {}, false
  for _, call in ipairs(step_calls) do
    local layer = call.grp.nodes[1].layer
    if layer then
      local n = call.decode_kernels and #call.decode_kernels or 1
      in_layers, of_layer[layer] = in_layers + n, (of_layer[layer] or 0) + n
    end
    split_k = split_k or (call.kind == "attention" and call.plan.decode == true)
  end
  local counts, order = {}, {}
  for i = 0, aux.layers - 1 do
    local n = of_layer[i] or 0
    if not counts[n] then counts[n] = {}; order[#order + 1] = n end
    table.insert(counts[n], i)
  end
  local per_layer
  if #order == 1 then per_layer = string.format("%d per layer", order[1])
  else
    local parts = {}
    -- the layers as runs of consecutive numbers: "0-3", "0, 2-3" (hybrids interleave their kinds)
    local function runs(ls)
      local out, i = {}, 1
      while i <= #ls do
        local j = i
        while j < #ls and ls[j + 1] == ls[j] + 1 do j = j + 1 end
        out[#out + 1] = j - i >= 2 and (ls[i] .. "-" .. ls[j]) or table.concat(ls, ", ", i, j)
        i = j + 1
      end
      return table.concat(out, ", ")
    end
    for _, n in ipairs(order) do
      local ls = counts[n]
      parts[#parts + 1] = string.format("%d per layer (%s %s)", n, #ls == 1 and "layer" or "layers", runs(ls))
    end
    per_layer = table.concat(parts, ", ")
  end
  local info = {
    string.format("CUDA:            %d launches per decode step: %s + %d outside the layers%s; %d distinct kernels; code for sm_%s + NVRTC JIT",
      #launch_names, per_layer, #launch_names - in_layers,
      split_k and " (+1 per layer when split-K attention engages)" or "", #names, table.concat(aux.cuda_archs, "/")),
    string.format("decode estimate: %.3f MB weights + %.1f KB activations + %.1f KB KV (%d positions) = %.3f MB moved per token; H100 roofline (3.35 TB/s): %.0f tokens/s (estimates)",
      fused_cost.weight_bytes / 1e6, fused_cost.act_bytes / 1e3, fused_cost.kv_bytes / 1e3, ctx_len, fused_cost.total / 1e6,
      3.35e12 / fused_cost.total),
  }
  local lt_calls, q_calls, lt_types, seen = 0, 0, {}, {}
  for _, call in ipairs(calls) do
    if call.kind == "matmul" then
      if call.lt then lt_calls = lt_calls + 1 else q_calls = q_calls + 1 end
      if call.lt and not seen[call.lt.dtype] then
        seen[call.lt.dtype] = true
        lt_types[#lt_types + 1] = call.lt.dtype
      end
    end
  end
  info[#info + 1] = string.format("prefill GEMMs:   %d matmul groups through cuBLASLt (%d shapes; X in the weights' type: %s; F32 accumulate; INGOT_CUBLASLT=0: the tiled GEMM), %d through the tiled GEMM (quantized weights)",
    lt_calls, #lt_list, #lt_types > 0 and table.concat(lt_types, ", ") or "none", q_calls)
  local lines = {}
  for _, l in ipairs(info) do lines[#lines + 1] = '"' .. l:gsub('"', '\\"') .. '\\n"' end
  env.info_c = table.concat(lines, "\n             ")
  env.launch_names = launch_names
  env.banner = aux.banner("emit_cuda.lua", "templates/cuda/model.c.in")
  env.common_desc = aux.render("model_desc.c.in", env)
  out["model.c"] = aux.render("cuda/model.c.in", env)
  return out
end

return emit

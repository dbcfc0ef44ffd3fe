-- generator/emit_cuda_moe.lua — the CUDA form of a mixture-of-experts group (Mixtral): the
-- kernels of kernels/cuda/moe.cuh composed with every shape a constant, and their launches.
--
-- The semantics are the CPU backend's moe_kernel (generator/emit_c.lua); one step runs
--   route     one block per token: router logits, softmax, top-k, weights (renormalized if asked); the last
--             block assigns every (token, choice) a row in expert order (token order within an
--             expert) and writes the row -> token map and the per-expert offsets;
--   gate/up   each expert's gate and up linears over its rows (X rows through the row map), then
--             act(gate) * up on the tile just written (no separate activation launch);
--   down      each expert's down linear over its activated rows;
--   combine   per token: the weighted down rows, experts in ascending order, then the group's
--             epilogue (generator/fuse.lua: the residual add) on the row.
-- Gate/up and down come in two forms, chosen per step by the host like the dense linears:
--   prefill (T > GEMM_MIN_ROWS): 64-row x 64-column GEMM tiles, grid column tiles x experts x
--     ceil(T/64) row tiles (blocks past their expert's rows exit), then a combine launch with a
--     block per token: 4 launches;
--   decode: a warp per weight row over up to TMAX of the expert's rows at a time (each chosen
--     expert's weights are read once, the others' not at all); the down kernel's last block runs
--     the combine for the step's few tokens: 3 launches.
-- Grid sizes depend only on T, so a decode step stays capturable in a CUDA graph. An expert's
-- weights are selected at run time among the kernel's pointer parameters (ig_moe_pick). Where
-- decode could be faster: the down kernel's last block combines up to GEMM_MIN_ROWS tokens alone
-- (a separate combine launch spreads that over blocks for larger decode batches); the route's
-- single-thread top-k and per-expert scans could be spread over the block for large E or long
-- prefills; and the route launch could overlap the previous kernel's tail (programmatic
-- dependent launch).

local util = require("util")
local emit_c = require("emit_c")
local plan_mod = require("plan")

local moe = {}

local ACT = {silu = "IG_ACT_SILU", gelu_tanh = "IG_ACT_GELU_TANH"}
local ROUTE_NT = 128 -- threads of a route block: a warp per router row at a time

-- The scratch buffers of the group (generator/plan.lua) as slots of s, by name.
local function scratch_slots(s, grp, names)
  local slot = {}
  for _, name in ipairs(names) do
    local b = grp.moe[name]
    local key = "moe" .. b.id
    if not s.buf_index[key] then
      s.bufs[#s.bufs + 1] = {key = key, node = {buffer = b, width = b.width}}
      s.buf_index[key] = #s.bufs - 1
    end
    slot[name] = "b" .. s.buf_index[key]
  end
  return slot
end

-- The weight slots of one expert matrix family (first input index, E experts), as the argument
-- list of ig_moe_pick, and their common dtype.
local function expert_weights(s, n, first, E)
  local names, dt = {}, n.inputs[first].dtype
  for e = 0, E - 1 do
    local w = n.inputs[first + e]
    if w.dtype ~= dt then
      util.die(string.format("models.lua:%d: error: moe: every expert's weights must share one dtype", n.line))
    end
    names[#names + 1] = s.weight(w)
  end
  return table.concat(names, ", "), dt
end

-- The input orders of an expert family reordered at load (act-order GPTQ: each expert's .perm),
-- as the argument list of ig_moe_pick; nil when the family is not reordered.
local function expert_perms(s, n, first, E)
  local perms = plan_mod.expert_perms(n, first, E)
  if not perms then return nil end
  local names = {}
  for _, perm in ipairs(perms) do names[#names + 1] = s.weight(perm) end
  return table.concat(names, ", ")
end

-- The bias argument of an expert family's linears (gpt-oss: input index a.at[name], E of them), as
-- the expert's pick among them; nullptr when the model has none.
local function expert_bias(s, n, name)
  local first = n.attrs.at and n.attrs.at[name]
  if not first then return "nullptr" end
  return string.format("(const float *)ig_moe_pick(e, %s)", (expert_weights(s, n, first, n.attrs.experts)))
end

-- The activation of the gate/up tile: its IG_ACT_* and the trailing arguments (gpt-oss's SwiGLU's
-- alpha, limit and up offset).
local function activation(a)
  if a.alpha ~= 1 or a.limit ~= 0 or a.up_offset ~= 0 then
    return "IG_ACT_SWIGLU", string.format(", %s, %s, %s", util.cfloat(a.alpha), util.cfloat(a.limit), util.cfloat(a.up_offset))
  end
  return ACT[a.act], ""
end

-- The template flag and trailing argument of ig_gemv_warp / ig_gemm_tile for a family's orders.
local function perm_args(perms)
  if not perms then return "", "" end
  return ", true", string.format(", (const int *)ig_moe_pick(e, %s)", perms)
end

local function kernel(lib, s, head, lines)
  local L = {head, "    (void)t0; (void)nt; (void)kvl;"}
  for _, l in ipairs(lines) do L[#L + 1] = "    " .. l end
  L[#L + 1] = "}"
  return lib.with_scratch((table.concat(L, "\n"):gsub("@PARAMS@", function() return lib.kernel_params(s) end)))
end

-- The call of one moe group: its kernels (added through lib.add_kernel) and what emit.call
-- needs to launch them. lib: emit_cuda's DT names, kernel_params, with_scratch, row_block (the
-- epilogue's statements), add_kernel and its constants.
function moe.call(ctx, grp, final_node, lib)
  local n = grp.ops[1]
  local a = n.attrs
  local E, K, F, D = a.experts, a.top_k, a.ffn, n.inputs[1].width
  local src = emit_c.src(ctx, n)
  local T = "st.n_tokens"
  local function dt_name(dt) return lib.DT[dt] end
  local function add(s, body, base, dt, nodes)
    return {kernel = lib.add_kernel(body, "moe_" .. base .. (dt and ("_" .. dt) or ""), nodes or {n}, "moe"), slots = s}
  end
  local call = {grp = grp, kind = "moe", node = n, E = E, F = F, D = D}

  do -- route
    local s = emit_c.slots(grp, final_node)
    local x, slot, router = s.buf(n.inputs[1].node), scratch_slots(s, grp, {"route"}), n.inputs[2]
    call.route = add(s, kernel(lib, s, string.format("extern \"C\" __global__ void __launch_bounds__(%d) @NAME@(@PARAMS@) {", ROUTE_NT), {
      src,
      string.format("__shared__ float logit[%d];", E),
      "const int t = blockIdx.x; /* one block per token */",
      string.format("ig_moe_route<%s, %d, %d, %d, %d, %s, %d, %d>(%s, %s + (long long)t * %d, ig_moe_rec<%d>(%s, t), logit%s);",
        dt_name(router.dtype), D, E, K, ROUTE_NT, a.normalize and "true" or "false", a.groups, a.top_groups,
        s.weight(router), x, D, K, slot.route,
        a.at and a.at.router_bias and (", (const float *)" .. s.weight(n.inputs[a.at.router_bias])) or ""),
      "if (!ig_last_block(st.done)) return; /* every token is routed: the last block numbers the rows */",
      string.format("ig_moe_assign_rows<%d, %d, %d>(%s, %s);", E, K, ROUTE_NT, slot.route, T),
    }), "route")
  end

  -- The lines common to the expert kernels: the expert, its first row and row count.
  local function expert_rows(slot)
    return {string.format("const int e = blockIdx.y, *offsets = ig_moe_offsets<%d>(%s, %s);", K, slot.route, T),
            "const int first = offsets[e], count = offsets[e + 1] - first; /* the expert's rows */"}
  end
  local function cat(...)
    local out = {}
    for _, list in ipairs({...}) do for _, l in ipairs(list) do out[#out + 1] = l end end
    return out
  end
  -- The combine of token row t by a block of NT threads, then the group's epilogue (the
  -- residual add) on that row, a barrier between (the epilogue reads other threads' outputs).
  local epi_name = ""
  for _, e in ipairs(grp.epilogue) do epi_name = epi_name .. "_" .. e.op end
  local function combine_row(s, slot, NT, indent)
    local L = {indent .. src .. " /* combine */",
               string.format("%sig_moe_combine<%d, %d, %d, %d>(ig_moe_rec<%d>(%s, t), %s, %s + (long long)t * %d);", indent, D,
                 E, K, NT, K, slot.route, slot.down, s.buf(n), D)}
    if #grp.epilogue > 0 then
      L[#L + 1] = indent .. "__syncthreads();"
      for _, l in ipairs(lib.row_block(ctx, s, grp.epilogue, "t", NT, indent)) do L[#L + 1] = l end
    end
    return L
  end
  local gemm_head = "extern \"C\" __global__ void __launch_bounds__(256) @NAME@(@PARAMS@) {"
  -- min 1 block per SM, as the dense GEMV kernels: TMAX accumulators per GEMV stay in registers
  local gemv_head = string.format("extern \"C\" __global__ void __launch_bounds__(%d, 1) @NAME@(@PARAMS@) {", lib.MM_WARPS * 32)
  local gemm_tile = {"const int tb = blockIdx.z * IG_GEMM_BM, n = min(IG_GEMM_BM, count - tb); /* this block's rows */",
                     "if (n <= 0) return; /* the expert has no rows this far */"}
  local gemv_row = string.format("const int r = blockIdx.x * %d + (threadIdx.x >> 5); /* one warp per weight row */", lib.MM_WARPS)

  do -- gate/up and the activation
    local function build(gemm)
      local s = emit_c.slots(grp, final_node)
      local x = s.buf(n.inputs[1].node)
      local slot = scratch_slots(s, grp, {"route", "gate", "up"})
      local gw, gdt = expert_weights(s, n, 3, E)
      local uw, udt = expert_weights(s, n, 3 + E, E)
      local gflag, gperm = perm_args(expert_perms(s, n, 3, E))
      local uflag, uperm = perm_args(expert_perms(s, n, 3 + E, E))
      local map = string.format("ig_moe_row_token<%d>(%s, %s) + first", K, slot.route, T)
      local gb, ub = expert_bias(s, n, "gate_bias"), expert_bias(s, n, "up_bias")
      local act, act_args = activation(a)
      local body
      if gemm then
        body = cat(expert_rows(slot), gemm_tile, {
          src .. " /* gate and up */",
          string.format("const int r0 = blockIdx.x * IG_GEMM_BN; float *gate = %s + (long long)(first + tb) * %d, *up = %s + (long long)(first + tb) * %d;",
            slot.gate, F, slot.up, F),
          string.format("ig_gemm_tile<%s, %d%s>(ig_moe_pick(e, %s), r0, %d, %s, %d, %s, tb, n, nullptr, 0.0f, nullptr, gate, %d, %s%s);",
            dt_name(gdt), D, gflag, gw, F, x, D, map, F, gb, gperm),
          string.format("ig_gemm_tile<%s, %d%s>(ig_moe_pick(e, %s), r0, %d, %s, %d, %s, tb, n, nullptr, 0.0f, nullptr, up, %d, %s%s);",
            dt_name(udt), D, uflag, uw, F, x, D, map, F, ub, uperm),
          "__syncthreads(); /* the activation reads what other threads of the block wrote */",
          string.format("ig_moe_act_tile<%s, %d, IG_GEMM_BN, 256>(gate, up, n, r0, threadIdx.x%s); /* %s(gate) * up */",
            act, F, act_args, a.act),
        })
      else
        body = cat(expert_rows(slot), {
          gemv_row,
          string.format("if (r >= %d || count == 0) return; /* whole warp: nothing below synchronizes the block */", F),
          src .. " /* gate and up */",
          string.format("const void *wg = ig_moe_pick(e, %s), *wu = ig_moe_pick(e, %s);", gw, uw),
          string.format("for (int c0 = 0; c0 < count; c0 += %d) {", lib.TMAX),
          string.format("    const int n = min(%d, count - c0);", lib.TMAX),
          string.format("    ig_gemv_warp<%s, %d, %d%s>(wg, r, %s, %d, %s + c0, n, nullptr, 0.0f, nullptr, %s + (long long)(first + c0) * %d, %d, %s, 0%s);",
            dt_name(gdt), D, lib.TMAX, gflag, x, D, map, slot.gate, F, F, gb, gperm),
          string.format("    ig_gemv_warp<%s, %d, %d%s>(wu, r, %s, %d, %s + c0, n, nullptr, 0.0f, nullptr, %s + (long long)(first + c0) * %d, %d, %s, 0%s);",
            dt_name(udt), D, lib.TMAX, uflag, x, D, map, slot.up, F, F, ub, uperm),
          "}",
          "__syncwarp(); /* the activation reads what other lanes wrote */",
          string.format("ig_moe_act_tile<%s, %d, 1, 32>(%s + (long long)first * %d, %s + (long long)first * %d, count, r, threadIdx.x & 31%s); /* %s(gate) * up */",
            act, F, slot.gate, F, slot.up, F, act_args, a.act),
        })
      end
      return add(s, kernel(lib, s, gemm and gemm_head or gemv_head, body), gemm and "gateup_gemm" or "gateup", gdt)
    end
    call.gateup_gemm, call.gateup = build(true), build(false)
  end

  do -- down
    local function build(gemm)
      local s = emit_c.slots(grp, final_node)
      local slot = scratch_slots(s, grp, {"route", "gate", "down"})
      local dw, ddt = expert_weights(s, n, 3 + 2 * E, E)
      local dflag, dperm = perm_args(expert_perms(s, n, 3 + 2 * E, E))
      local db = expert_bias(s, n, "down_bias")
      local body
      if gemm then
        body = cat(expert_rows(slot), gemm_tile, {
          src .. " /* down */",
          string.format("ig_gemm_tile<%s, %d%s>(ig_moe_pick(e, %s), blockIdx.x * IG_GEMM_BN, %d, %s + (long long)first * %d, %d, nullptr, tb, n, nullptr, 0.0f, nullptr, %s + (long long)(first + tb) * %d, %d, %s%s);",
            dt_name(ddt), F, dflag, dw, D, slot.gate, F, F, slot.down, D, D, db, dperm),
        })
      else
        body = cat(expert_rows(slot), {
          gemv_row,
          src .. " /* down */",
          string.format("if (r < %d && count > 0) { /* no return: every thread reaches ig_last_block */", D),
          string.format("    const void *wd = ig_moe_pick(e, %s);", dw),
          string.format("    for (int c0 = 0; c0 < count; c0 += %d)", lib.TMAX),
          string.format("        ig_gemv_warp<%s, %d, %d%s>(wd, r, %s + (long long)(first + c0) * %d, %d, nullptr, min(%d, count - c0), nullptr, 0.0f, nullptr, %s + (long long)(first + c0) * %d, %d, %s, 0%s);",
            dt_name(ddt), F, lib.TMAX, dflag, slot.gate, F, F, lib.TMAX, slot.down, D, D, db, dperm),
          "}",
          "if (!ig_last_block(st.done)) return; /* the combine: the last block, every token of the step */",
          string.format("for (int t = 0; t < %s; t++) {", T),
        }, combine_row(s, slot, lib.MM_WARPS * 32, "    "), {"}"})
      end
      return add(s, kernel(lib, s, gemm and gemm_head or gemv_head, body), gemm and "down_gemm" or "down_combine" .. epi_name, ddt,
                 not gemm and grp.nodes or nil)
    end
    call.down_gemm, call.down = build(true), build(false)
  end

  do -- combine
    local s = emit_c.slots(grp, final_node)
    local slot = scratch_slots(s, grp, {"route", "down"})
    call.combine = add(s, kernel(lib, s, string.format("extern \"C\" __global__ void __launch_bounds__(%d) @NAME@(@PARAMS@) {", lib.ROWS_NT),
      cat({"const int t = blockIdx.x; /* one block per token */"}, combine_row(s, slot, lib.ROWS_NT, ""))),
      "combine" .. epi_name, nil, grp.nodes)
  end

  -- the launches of a decode step, for --info and decode_cost
  call.decode_kernels = {call.route.kernel.name, call.gateup.kernel.name, call.down.kernel.name}
  -- what decode_cost counts per step: the activation rows of every kernel
  call.slots = emit_c.slots(grp, final_node)
  call.slots.buf(n.inputs[1].node)
  call.slots.buf(n)
  scratch_slots(call.slots, grp, {"route", "gate", "up", "down"})
  return call
end

-- Host C++ of one moe call. kid(k): the kernel's launch-table index.
function moe.launches(ctx, c, kid, GEMM_MIN_ROWS, MM_WARPS, ROWS_NT)
  local function launch(indent, k, grid, block)
    local args = {}
    for _, b in ipairs(k.slots.bufs) do args[#args + 1] = string.format("A(%d)", b.node.buffer.offset) end
    for _, w in ipairs(k.slots.weights) do args[#args + 1] = "d->w.named." .. ctx.device_weight_paths[w.slot] end
    return string.format("%sLAUNCH(%d, %s, %s, dim3(%d), st, 0, T, 0, %s);", indent, kid(k.kernel), k.kernel.name, grid,
      block, table.concat(args, ", "))
  end
  local tiles = "(T + IG_GEMM_BM - 1) / IG_GEMM_BM"
  return {
    "    " .. emit_c.src(ctx, c.node),
    launch("    ", c.route, "dim3(T)", ROUTE_NT),
    string.format("    if (T > %d) { /* prefill: GEMM tiles of each expert's rows */", GEMM_MIN_ROWS),
    launch("        ", c.gateup_gemm, string.format("dim3(%d, %d, %s)", (c.F + 63) // 64, c.E, tiles), 256),
    launch("        ", c.down_gemm, string.format("dim3(%d, %d, %s)", (c.D + 63) // 64, c.E, tiles), 256),
    launch("        ", c.combine, "dim3(T)", ROWS_NT),
    "    } else { /* decode: a warp per weight row of each chosen expert; down's last block combines */",
    -- blocks of the experts no token chose exit at once (E - top_k of E for one token)
    launch("        ", c.gateup, string.format("dim3(%d, %d)", (c.F + MM_WARPS - 1) // MM_WARPS, c.E), MM_WARPS * 32),
    launch("        ", c.down, string.format("dim3(%d, %d)", (c.D + MM_WARPS - 1) // MM_WARPS, c.E), MM_WARPS * 32),
    "    }",
  }
end

return moe

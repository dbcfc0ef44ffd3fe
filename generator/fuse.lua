-- generator/fuse.lua — groups graph nodes into kernels.
--
-- A kernel is one of six kinds, each run as a fixed sequence of phases:
--   rows       per-row ops (embedding, norms, elementwise, KV store) over the
--              rows of the step;
--   matmul     an optional prologue of row ops on the shared input (norm, and
--              quantizing the activations once), every linear that reads that
--              input (horizontal fusion: Q/K/V, gate/up), and an epilogue of
--              elementwise ops on their outputs (RoPE, KV store, SwiGLU,
--              residual add);
--   attention  paged attention over the KV pool;
--   moe        routing, the experts' matmuls and the combine, then an epilogue
--              of elementwise ops on its output (the residual add);
--   conv       a causal convolution over each sequence's positions, which
--              reads its neighbours' rows and the sequence's recurrent state;
--   scan       a state-space scan (Mamba-2) or gated delta rule (Qwen3-Next),
--              sequential over each sequence's tokens from the state it left,
--              parallel over heads.
-- With fusion off every node is its own kernel: that is the --no-fuse build.
-- The rules are generic (they look at producers and consumers, not at op
-- names of a particular architecture), so a new description fuses the same way.

local graph = require("graph")

local fuse = {}

local function kind_of(n)
  if n.op == "linear" then return "matmul" end
  if n.op == "attention" then return "attention" end
  if n.op == "moe" then return "moe" end
  if n.op == "causal_conv" then return "conv" end
  if n.op == "ssm_scan" or n.op == "delta_scan" then return "scan" end
  return "rows"
end

local function produced_in(group, t)
  return type(t) == "table" and t.node and t.node.group == group
end

local function add(group, n, list)
  table.insert(group[list], n)
  table.insert(group.nodes, n)
  n.group = group
end

local function new_group(groups, kind, rows)
  local g = {kind = kind, rows = rows, nodes = {}, ops = {}, prologue = {}, linears = {}, epilogue = {},
             index = #groups + 1}
  groups[#groups + 1] = g
  return g
end

-- True when every consumer of t is a linear (so a norm producing t can live
-- in the prologue of the one matmul kernel that reads it).
local function only_linears_consume(t)
  for _, c in ipairs(t.node.consumers) do
    if c.op ~= "linear" then return false end
  end
  return #t.node.consumers > 0
end

function fuse.run(g, fused)
  local groups = {}
  for _, n in ipairs(g.nodes) do
    if n.op == "tokens" then goto continue end
    local last = groups[#groups]
    local kind = kind_of(n)
    if not fused then
      add(new_group(groups, kind, n.rows), n, kind == "matmul" and "linears" or "ops")
    elseif kind == "matmul" then
      local x = n.inputs[1]
      -- Epilogue ops only read the group's outputs, so a linear can still join
      -- after them: every linear runs before any epilogue op.
      if last and last.kind == "matmul" and last.input == x then
        add(last, n, "linears")
      else
        local mg
        -- Absorb a trailing rows kernel made only of row ops that ends in x.
        if last and last.kind == "rows" and produced_in(last, x) and only_linears_consume(x)
           and x.node == last.nodes[#last.nodes] then
          local all_row_ops = true
          for _, m in ipairs(last.nodes) do
            if not graph.ROW_OPS[m.op] then all_row_ops = false end
          end
          if all_row_ops then
            table.remove(groups)
            mg = new_group(groups, "matmul", n.rows)
            for _, m in ipairs(last.nodes) do add(mg, m, "prologue") end
          end
        end
        mg = mg or new_group(groups, "matmul", n.rows)
        mg.input = x
        add(mg, n, "linears")
      end
    elseif kind == "attention" or kind == "moe" or kind == "conv" or kind == "scan" then
      add(new_group(groups, kind, n.rows), n, "ops")
    else
      local joins = false
      if last and last.rows == n.rows and n.op ~= "embedding" then
        for _, t in ipairs(n.inputs) do
          if produced_in(last, t) then joins = true end
        end
        -- row ops run one after another on each row, so any of them can
        -- follow a rows kernel, whoever produced its inputs (MLA's k: columns
        -- of an earlier projection, normalized, roped and concatenated)
        if last.kind == "rows" then joins = true end
        -- A norm that feeds only linears waits to become the prologue of
        -- their kernel; any other norm of a matmul output (Gemma's
        -- post-norms, Qwen3's per-head q/k norms) joins the epilogue: it
        -- runs after every linear of the kernel, on whole rows.
        if graph.ROW_OPS[n.op] and last.kind == "matmul" and (not graph.NORMS[n.op] or only_linears_consume(n.out)) then
          joins = false
        end
        if n.op == "select_rows" then joins = false end
        -- A norm starts its own kernel unless it follows row ops only: it may
        -- become the prologue of the matmul kernel that reads it.
        if graph.ROW_OPS[n.op] and last.kind == "rows" and (not graph.NORMS[n.op] or only_linears_consume(n.out)) then
          for _, m in ipairs(last.nodes) do
            if not graph.ROW_OPS[m.op] then joins = false end
          end
        end
      end
      if joins and last.kind == "matmul" and (graph.ELEMENTWISE[n.op] or graph.NORMS[n.op]) then
        add(last, n, "epilogue")
      elseif joins and last.kind == "moe" and graph.ELEMENTWISE[n.op] then
        add(last, n, "epilogue")
      elseif joins and last.kind == "rows" then
        add(last, n, "ops")
      else
        add(new_group(groups, "rows", n.rows), n, "ops")
      end
    end
    ::continue::
  end
  for i, grp in ipairs(groups) do grp.index = i end
  return groups
end

return fuse

-- weight_names.lua — the weights of a generated model by name: a C struct whose members are the
-- weight table's entries in slot order, named as models.lua names them (a layer's weights under
-- blk[i], an MoE layer's per-expert weights as arrays), so that emitted code reads
-- `W->blk[3].q` rather than slot 17. The struct is laid over the slot array (a union in the
-- model's state), so member k is slot k: it has no padding (every member one pointer) and the
-- generator builds it in slot order.
local M = {}

local C_KEYWORDS = {}
for k in ("auto break case char const continue default do double else enum extern float for goto if inline int " ..
          "long register restrict return short signed sizeof static struct switch typedef union unsigned void " ..
          "volatile while"):gmatch("%S+") do C_KEYWORDS[k] = true end

-- A models.lua logical name ("q", "expert_gate", "q.perm") as a C member name.
local function ident(name)
  local s = name:gsub("[^%w_]", "_")
  if s:match("^%d") then s = "w_" .. s end
  if C_KEYWORDS[s] then s = s .. "_w" end
  return s
end

-- The members of one run of slots (all of one layer, or all global): {name, count, first slot}, a
-- per-expert weight (consecutive slots of one logical name) one member of count experts.
local function members(ws)
  local out, used = {}, {}
  local i = 1
  while i <= #ws do
    local w, n = ws[i], 1
    if w.expert then
      while ws[i + n] and ws[i + n].logical == w.logical and ws[i + n].expert do n = n + 1 end
    end
    local name = ident(w.logical)
    if used[name] then
      local k = 2
      while used[name .. "_" .. k] do k = k + 1 end
      name = name .. "_" .. k
    end
    used[name] = true
    out[#out + 1] = {name = name, count = n, first = w.slot}
    i = i + n
  end
  return out
end

local function signature(ms)
  local parts = {}
  for _, m in ipairs(ms) do parts[#parts + 1] = m.name .. "[" .. m.count .. "]" end
  return table.concat(parts, ",")
end

local function struct_body(ms, ptr, indent, where)
  local lines = {}
  for _, m in ipairs(ms) do
    lines[#lines + 1] = string.format("%s%s%s%s; /* %sslot %d */", indent, ptr, m.name,
      m.count > 1 and string.format("[%d]", m.count) or "", where or "", m.first)
  end
  return table.concat(lines, "\n")
end

-- weights: the generator's weight table (slot, logical, layer, expert per entry). ptr: the member
-- type ("const void *" on the host, "void *" for device pointers). Returns the C declaration of
-- `typedef struct {...} model_weight_names;` and, per slot (0-based), its path from the struct
-- ("blk[3].q", "embed", "blk[0].expert_gate[5]").
function M.build(weights, ptr)
  -- runs of consecutive slots of one layer (nil: a global weight)
  local runs = {}
  for _, w in ipairs(weights) do
    local r = runs[#runs]
    if r and r.layer == w.layer then r.ws[#r.ws + 1] = w else runs[#runs + 1] = {layer = w.layer, ws = {w}} end
  end
  local decl, paths, used = {}, {}, {}
  local function unique(name)
    local n, k = name, 2
    while used[n] do n = name .. "_" .. k; k = k + 1 end
    used[n] = true
    return n
  end
  local function place(ms, prefix)
    for _, m in ipairs(ms) do
      for e = 0, m.count - 1 do
        paths[m.first + e] = prefix .. m.name .. (m.count > 1 and string.format("[%d]", e) or "")
      end
    end
  end
  local i = 1
  while i <= #runs do
    local r = runs[i]
    if r.layer == nil then
      local ms = members(r.ws)
      for _, m in ipairs(ms) do m.name = unique(m.name) end
      decl[#decl + 1] = struct_body(ms, ptr, "    ")
      place(ms, "")
      i = i + 1
    else
      -- a stretch of layer runs: one array blk[L] when they are layers 0, 1, ... with the same
      -- members each, else one member per layer (blk3: hybrids whose layers differ)
      local j = i
      while runs[j + 1] and runs[j + 1].layer ~= nil do j = j + 1 end
      local ms1, uniform = members(runs[i].ws), runs[i].layer == 0
      for k = i + 1, j do
        if not uniform then break end
        uniform = runs[k].layer == runs[k - 1].layer + 1 and signature(members(runs[k].ws)) == signature(ms1)
      end
      if uniform then
        local name = unique("blk")
        decl[#decl + 1] = string.format("    struct { /* layers 0..%d */\n%s\n    } %s[%d];", j - i, struct_body(ms1, ptr, "        ", "layer 0: "),
          name, j - i + 1)
        for k = i, j do place(members(runs[k].ws), string.format("%s[%d].", name, runs[k].layer)) end
      else
        for k = i, j do
          local ms = members(runs[k].ws)
          local name = unique("blk" .. runs[k].layer)
          decl[#decl + 1] = string.format("    struct {\n%s\n    } %s;", struct_body(ms, ptr, "        "), name)
          place(ms, name .. ".")
        end
      end
      i = j + 1
    end
  end
  return "typedef struct {\n" .. table.concat(decl, "\n") .. "\n} model_weight_names;", paths
end

return M

-- dtypes.lua — the weight element types, as runtime/load/dtype_table.h lists them (the one table
-- C, the generator and the front end read). Each INGOT_DTYPE row becomes
--   {enum = "Q4_K", name = "q4_k", elems = 256, bytes = 144, ggml = 12, ctype = "block_q4_K", role = "build"}
-- in the table's order (list) and by name (by_name); each INGOT_DTYPE_MIX row a name -> base type
-- entry of mixes.
local util = require("util")

local M = {list = {}, by_name = {}, mixes = {}, mix_order = {}}

local script_dir = debug.getinfo(1, "S").source:match("^@(.*)/[^/]*$") or "."
local path = script_dir .. "/../runtime/load/dtype_table.h"
local text = util.read_file(path) or util.die("cannot read " .. path)

for line in text:gmatch("[^\n]+") do
  local args = line:match("^INGOT_DTYPE%(([^)]*)%)")
  if args then
    local f = {}
    for a in args:gmatch("[^,]+") do f[#f + 1] = a:match("^%s*(.-)%s*$") end
    if #f ~= 7 then util.die(path .. ": a row of 7 arguments expected: " .. line) end
    local t = {enum = f[1], name = f[2], elems = tonumber(f[3]), bytes = tonumber(f[4]), ggml = tonumber(f[5]),
               ctype = f[6], role = f[7]}
    M.list[#M.list + 1] = t
    M.by_name[t.name] = t
  end
  local mix, base = line:match("^INGOT_DTYPE_MIX%(%s*([%w_]+)%s*,%s*([%w_]+)%s*%)")
  if mix then
    M.mixes[mix] = base
    M.mix_order[#M.mix_order + 1] = mix
  end
end
if #M.list == 0 then util.die(path .. ": no INGOT_DTYPE rows") end

-- The names ./ingot build --dtype takes: native, every "build" type, then the mixes (in the
-- table's order, each once).
function M.build_choices()
  local out, seen = {"native"}, {native = true}
  for _, t in ipairs(M.list) do
    if t.role == "build" then out[#out + 1] = t.name; seen[t.name] = true end
  end
  for _, m in ipairs(M.mix_order) do
    if not seen[m] then out[#out + 1] = m; seen[m] = true end
  end
  return out
end

return M

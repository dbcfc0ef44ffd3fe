-- generator/describe.lua — loads models.lua and validates each entry as data.
--
-- Errors name the line of models.lua they concern: unknown keys, missing
-- keys, wrong types. Line numbers come from the source text (Lua tables keep
-- none), found by the key's name after the entry's first line.

local util = require("util")

local describe = {}

local ENTRY_KEYS = {hf = "table", gguf = "string", config = "table", rope_pairs = "table",
                    weights = "table", embed = "function", layer = "function", head = "function"}
local REQUIRED = {"hf", "config", "weights", "embed", "layer", "head"}
local CONFIG_KEYS = {hf = "any", gguf = "string", default = "any", by_format = "table"}
local WEIGHT_KEYS = {hf = "string", gguf = "string", shape = "table", tied = "string", optional = "boolean",
                     slice = "table", experts = "string"}

-- Line of `key =` inside entry `name`, for error messages.
local function line_of(text, entry, key)
  local start = 1
  local n = 0
  local entry_line
  for line in (text .. "\n"):gmatch("(.-)\n") do
    n = n + 1
    if not entry_line and line:match("^M%." .. entry .. "%s*=") then entry_line = n end
    if entry_line and key and line:match("^%s*" .. key .. "%s*=") then return n end
  end
  return entry_line or start
end

function describe.load(path)
  local text, err = util.read_file(path)
  if not text then util.die(path .. ": " .. tostring(err)) end
  local ops = {}
  local env = setmetatable({}, {__index = function(_, k)
    local v = ops[k]
    if v ~= nil then return v end
    return _G[k]
  end})
  local chunk, perr = load(text, "@" .. path, "t", env)
  if not chunk then util.die(perr) end
  local ok, entries = pcall(chunk)
  if not ok then util.die(tostring(entries)) end
  if type(entries) ~= "table" then util.die(path .. ":1: error: must return a table of entries") end
  local d = {path = path, text = text, entries = entries, ops = ops}
  for name, entry in pairs(entries) do describe.validate(d, name, entry) end
  return d
end

function describe.fail(d, name, key, msg)
  util.die(string.format("%s:%d: error: %s", d.path, line_of(d.text, name, key), msg))
end

local function check_keys(d, name, tbl, allowed, where)
  for k, v in pairs(tbl) do
    local want = allowed[k]
    if not want then describe.fail(d, name, k, string.format("%s: unknown key '%s'", where, tostring(k))) end
    if want ~= "any" and type(v) ~= want then
      describe.fail(d, name, k, string.format("%s: '%s' must be a %s, not a %s", where, k, want, type(v)))
    end
  end
end

function describe.validate(d, name, e)
  if type(e) ~= "table" then describe.fail(d, name, nil, "entry '" .. name .. "' must be a table") end
  check_keys(d, name, e, ENTRY_KEYS, "entry '" .. name .. "'")
  for _, k in ipairs(REQUIRED) do
    if e[k] == nil then describe.fail(d, name, nil, string.format("entry '%s' is missing '%s'", name, k)) end
  end
  for key, spec in pairs(e.config) do
    if type(spec) ~= "table" then describe.fail(d, name, key, "config '" .. key .. "' must be a table") end
    check_keys(d, name, spec, CONFIG_KEYS, "config '" .. key .. "'")
    if not spec.hf and not spec.gguf and not spec.by_format then
      describe.fail(d, name, key, "config '" .. key .. "' needs an hf, gguf or by_format key")
    end
  end
  -- entries may share weight tables (models.lua builds them with merge):
  -- annotate private copies
  local weights = {}
  for wname, spec in pairs(e.weights) do weights[wname] = util.shallow_copy(spec) end
  e.weights = weights
  for wname, spec in pairs(e.weights) do
    check_keys(d, name, spec, WEIGHT_KEYS, "weight '" .. wname .. "'")
    if not spec.shape then describe.fail(d, name, wname, "weight '" .. wname .. "' is missing 'shape'") end
    if spec.tied and not e.weights[spec.tied] then
      describe.fail(d, name, wname, "weight '" .. wname .. "' is tied to undeclared '" .. spec.tied .. "'")
    end
    spec.per_layer = (spec.hf or spec.gguf or ""):find("%%d") ~= nil
    if spec.slice and #spec.slice ~= 2 then
      describe.fail(d, name, wname, "weight '" .. wname .. "': slice is {first_row, rows_of_the_stored_tensor}")
    end
    if spec.experts and select(2, (spec.hf or spec.gguf or ""):gsub("%%d", "")) ~= 2 then
      describe.fail(d, name, wname, "weight '" .. wname .. "': an expert weight's name needs two %d (layer, expert)")
    end
    spec.line = line_of(d.text, name, wname)
  end
  e.name = name
  e.line = line_of(d.text, name, nil)
end

-- Picks the entry for a HF architecture list or a GGUF architecture name.
function describe.select(d, hf_archs, gguf_arch)
  for _, name in ipairs(util.sorted_keys(d.entries)) do
    local e = d.entries[name]
    if gguf_arch and e.gguf == gguf_arch then return e end
    for _, a in ipairs(hf_archs or {}) do
      for _, h in ipairs(e.hf) do if h == a then return e end end
    end
  end
  local what = gguf_arch and ("GGUF architecture '" .. gguf_arch .. "'")
    or ("architectures " .. table.concat(hf_archs or {}, ", "))
  util.die(string.format("%s: error: no entry describes %s", d.path, what))
end

return describe

-- generator/describe.lua — loads models.lua and validates each entry as data.
--
-- Errors name the line of models.lua they concern: unknown keys, missing
-- keys, wrong types. Lua tables keep no line numbers, so they come from the
-- source text (see `scan`), and a key that an entry takes from a shared
-- table (`merge(LLAMA_WEIGHTS, {...})`) is cited where that table declares it.

local util = require("util")

local describe = {}

local ENTRY_KEYS = {hf = "table", gguf = "string", gguf_also = "table", config = "table", rope_pairs = "table",
                    weights = "table", embed = "function", layer = "function", head = "function"}
local REQUIRED = {"hf", "config", "weights", "embed", "layer", "head"}
-- reduce: how a list the checkpoint stores per layer becomes one value ("max": llama.cpp's
-- converters write head_count_kv per layer, 0 for a recurrent layer)
local CONFIG_KEYS = {hf = "any", gguf = "string", default = "any", by_format = "table", reduce = "string"}
local CONFIG_REDUCE = {max = math.max}
local WEIGHT_KEYS = {hf = "any", gguf = "any", shape = "table", tied = "string", optional = "boolean",
                     slice = "table", experts = "string"}
local PART_KEYS = {[1] = "string", rows = "any", transposed = "boolean", first = "any", every = "any", of = "any"}

-- Skips a long bracket (`[[...]]`, `[==[...]==]`) that opens at i; returns
-- the position after it and the newlines it holds, or nil if none opens there.
local function long_bracket(text, i)
  local eq = text:match("^%[(=*)%[", i)
  if not eq then return nil end
  local _, close = text:find("]" .. eq .. "]", i + #eq + 2, true)
  close = close or #text
  local _, newlines = text:sub(i, close):gsub("\n", "")
  return close + 1, newlines
end

local BLOCK_OPEN = {["function"] = true, ["if"] = true, ["do"] = true, ["repeat"] = true}
local BLOCK_CLOSE = {["end"] = true, ["until"] = true}

-- Where every key of a description file is written. Returns
--   decl: path -> key -> line of the first `key =` at that path,
--   defs: top-level definition name -> line (`local LLAMA_WEIGHTS`, `M.llama`,
--         `local function lm_head`; `return` for a returned constructor).
-- A path is the top-level definition that holds the field, then each key
-- whose value holds it: LLAMA_WEIGHTS's `v` is at "LLAMA_WEIGHTS", qwen2's
-- own `window` (in `config = merge(A, B, {window = ...})`) at "M.qwen2 config".
-- Calls and anonymous tables add nothing to a path; assignments inside
-- function bodies are statements, not fields, and are skipped.
local function scan(text)
  local decl, defs = {}, {}
  local stack = {}      -- open `{` and `(`: {brace = bool, path = string, key = the field being written}
  local blocks = 0      -- open function/if/do/repeat bodies
  local top = "?"       -- the top-level definition being read
  local line, i, n = 1, 1, #text
  local function line_start()
    if #stack > 0 or blocks > 0 then return end
    local l = text:match("^[^\n]*", i)
    local name = l:match("^local%s+function%s+([%a_][%w_]*)") or l:match("^local%s+([%a_][%w_]*)%s*=[^=]")
      or l:match("^function%s+([%a_][%w_.:]*)") or l:match("^([%a_][%w_.]*)%s*=[^=]")
      or (l:match("^return%f[^%w_]") and "return")
    if name then
      top = name
      defs[name] = defs[name] or line
    end
  end
  line_start()
  while i <= n do
    local ch = text:sub(i, i)
    if ch == "\n" then
      line, i = line + 1, i + 1
      line_start()
    elseif ch == "-" and text:sub(i + 1, i + 1) == "-" then
      local after, newlines = long_bracket(text, i + 2)
      if after then i, line = after, line + newlines
      else i = (text:find("\n", i, true) or n + 1) end
    elseif ch == '"' or ch == "'" then
      local j = i + 1
      while j <= n do
        local c = text:sub(j, j)
        if c == "\\" then
          if text:sub(j + 1, j + 1) == "\n" then line = line + 1 end
          j = j + 2
        elseif c == ch or c == "\n" then break
        else j = j + 1 end
      end
      i = j + 1
    elseif ch == "[" and text:match("^%[=*%[", i) then
      local after, newlines = long_bracket(text, i)
      i, line = after, line + newlines
    elseif ch:match("[%a_]") then
      local word = text:match("^[%a_][%w_]*", i)
      i = i + #word
      if BLOCK_OPEN[word] then blocks = blocks + 1
      elseif BLOCK_CLOSE[word] then blocks = blocks - 1
      elseif blocks == 0 and #stack > 0 and stack[#stack].brace and text:match("^%s*=[^=]", i) then
        local frame = stack[#stack]
        frame.key = word
        decl[frame.path] = decl[frame.path] or {}
        decl[frame.path][word] = decl[frame.path][word] or line
      end
    elseif ch:match("%d") then
      i = i + #text:match("^[%w_.]+", i)
    elseif ch == "{" or ch == "(" then
      local parent = stack[#stack]
      local path = top
      if parent then path = parent.key and (parent.path .. " " .. parent.key) or parent.path end
      stack[#stack + 1] = {brace = ch == "{", path = path}
      i = i + 1
    elseif ch == "}" or ch == ")" then
      stack[#stack] = nil
      i = i + 1
    elseif (ch == "," or ch == ";") and stack[#stack] and stack[#stack].brace then
      stack[#stack].key = nil
      i = i + 1
    else
      i = i + 1
    end
  end
  return decl, defs
end

-- Runs a description chunk and returns what it returns plus its top-level
-- locals (name -> value), read when the chunk returns: shared tables such
-- as LLAMA_WEIGHTS are only reachable that way once the chunk has run.
local function run_chunk(chunk)
  local locals = {}
  debug.sethook(function()
    local info = debug.getinfo(2, "f")
    if not info or info.func ~= chunk then return end
    for i = 1, math.huge do
      local name, value = debug.getlocal(2, i)
      if not name then break end
      if not name:find("^%(") then locals[name] = value end
    end
  end, "r")
  local ok, result = pcall(chunk)
  debug.sethook()
  return ok, result, locals
end

-- The models.lua line of every key of every entry:
--   lines[entry] = {entry = N, fields = {key -> N},
--                   weights = {name -> N}, config = {key -> N}}
-- A weight or config spec is the same table object wherever merge() copied
-- it, so a spec found in a top-level table (or another entry) that declares
-- that key was written there; otherwise it was written in the entry itself.
-- A key found nowhere falls back to the entry's first line.
local function key_lines(text, entries, locals)
  local decl, defs = scan(text)
  -- entries are fields of the returned table: `M.llama = {` or `return {llama = {`
  local prefix = "M"
  for name, v in pairs(locals) do if rawequal(v, entries) then prefix = name end end
  local function entry_path(name)
    if defs[prefix .. "." .. name] then return prefix .. "." .. name end
    if decl["return"] and decl["return"][name] then return "return " .. name end
  end
  -- tables that may have supplied a spec, in source order
  local sources = {}
  for name, v in pairs(locals) do
    if type(v) == "table" and not rawequal(v, entries) and defs[name] then
      sources[#sources + 1] = {path = name, t = v, line = defs[name]}
    end
  end
  for name, e in pairs(entries) do
    local p = entry_path(name)
    if p and type(e) == "table" then sources[#sources + 1] = {path = p, t = e, line = defs[p] or 0} end
  end
  table.sort(sources, function(a, b) return a.line < b.line end)
  local function declared(path, key) return decl[path] and decl[path][key] end

  local lines = {}
  for name, e in pairs(entries) do
    local p = entry_path(name)
    local first = p and (defs[p] or declared("return", name)) or 1
    local l = {entry = first, fields = {}, weights = {}, config = {}}
    lines[name] = l
    if type(e) == "table" and p then
      for k in pairs(e) do l.fields[k] = declared(p, k) or first end
      for _, kind in ipairs({"weights", "config"}) do
        local specs = rawget(e, kind)
        if type(specs) == "table" then
          for key, spec in pairs(specs) do
            local at
            if type(spec) == "table" then
              for _, src in ipairs(sources) do
                local sub = type(rawget(src.t, kind)) == "table" and rawget(src.t, kind) or nil
                if rawequal(rawget(src.t, key), spec) then at = declared(src.path, key) end
                if not at and sub and rawequal(rawget(sub, key), spec) then at = declared(src.path .. " " .. kind, key) end
                if at then break end
              end
            end
            l[kind][key] = at or declared(p .. " " .. kind, key) or l.fields[kind] or first
          end
        end
      end
    end
  end
  return lines
end

-- The line of `key` in entry `name`: a weight's, a config key's (kind
-- "weights" or "config"; without kind, a weight, then a config key, then a
-- key of the entry itself), or the entry's first line when key is nil.
function describe.line(d, name, key, kind)
  local l = d.lines[name]
  if not l then return 1 end
  if key == nil then return l.entry end
  if kind then return l[kind][key] or l.entry end
  return l.weights[key] or l.config[key] or l.fields[key] or l.entry
end

function describe.load(path)
  local text, err = util.read_file(path)
  if not text then util.die(path .. ": " .. tostring(err)) end
  local ops = {}
  local env = setmetatable({}, {__index = function(_, k)
    local v = ops[k]
    if v ~= nil then return v end
    v = _G[k]
    -- while a model is traced the ops are known: a name that is neither one nor Lua's is a
    -- misspelled or missing op, reported at the line that used it with the ops there are
    if v == nil and next(ops) ~= nil then
      local names = {}
      for name, f in pairs(ops) do
        if type(f) == "function" and _G[name] == nil then names[#names + 1] = name end
      end
      table.sort(names)
      error(string.format("unknown op or name '%s' (ops: %s)", tostring(k), table.concat(names, ", ")), 2)
    end
    return v
  end})
  local chunk, perr = load(text, "@" .. path, "t", env)
  if not chunk then util.die(perr) end
  local ok, entries, locals = run_chunk(chunk)
  if not ok then util.die(tostring(entries)) end
  if type(entries) ~= "table" then util.die(path .. ":1: error: must return a table of entries") end
  local d = {path = path, text = text, entries = entries, ops = ops, lines = key_lines(text, entries, locals),
             broken = {}}
  -- one entry's mistake is reported when a checkpoint of that entry is cast, and breaks no other
  for _, name in ipairs(util.sorted_keys(entries)) do
    local ok, err = util.try(describe.validate, d, name, entries[name])
    if not ok then d.broken[name] = err end
  end
  return d
end

-- A list value of a config spec with `reduce` made one number (nil for an empty list).
function describe.reduce(spec, v)
  if type(v) ~= "table" or not spec.reduce then return v end
  local out
  for _, x in ipairs(v) do out = out == nil and x or CONFIG_REDUCE[spec.reduce](out, x) end
  return out
end

function describe.fail(d, name, key, msg, kind)
  util.die(string.format("%s:%d: error: %s", d.path, describe.line(d, name, key, kind), msg))
end

-- Checks the keys of tbl against allowed ({key -> type name or "any"});
-- errors cite the line of `owner` (the spec's key, of kind `kind`), or of the
-- offending key itself for the entry's own keys.
local function check_keys(d, name, tbl, allowed, where, owner, kind)
  for k, v in pairs(tbl) do
    local want = allowed[k]
    local key, knd = owner or k, owner and kind or "fields"
    if not want then describe.fail(d, name, key, string.format("%s: unknown key '%s'", where, tostring(k)), knd) end
    if want ~= "any" and type(v) ~= want then
      describe.fail(d, name, key, string.format("%s: '%s' must be a %s, not a %s", where, k, want, type(v)), knd)
    end
  end
end

function describe.validate(d, name, e)
  if type(e) ~= "table" then describe.fail(d, name, nil, "entry '" .. name .. "' must be a table") end
  check_keys(d, name, e, ENTRY_KEYS, "entry '" .. name .. "'")
  for _, k in ipairs(REQUIRED) do
    if e[k] == nil then describe.fail(d, name, nil, string.format("entry '%s' is missing '%s'", name, k)) end
  end
  if type(e.config) ~= "table" or type(e.weights) ~= "table" then
    describe.fail(d, name, nil, "entry '" .. name .. "': config and weights must be tables")
  end
  -- in name order, so that an entry with several mistakes reports the same one every run
  for _, key in ipairs(util.sorted_keys(e.config)) do
    local spec = e.config[key]
    if type(spec) ~= "table" then describe.fail(d, name, key, "config '" .. key .. "' must be a table", "config") end
    check_keys(d, name, spec, CONFIG_KEYS, "config '" .. key .. "'", key, "config")
    -- a value with no key of its own is derived: an expression over other values
    -- ("dim / heads") or read from the checkpoint's tensors (has_tensor:, tensor_rows:)
    local derived = type(spec.default) == "string"
    if not spec.hf and not spec.gguf and not spec.by_format and not derived then
      describe.fail(d, name, key, "config '" .. key .. "' needs an hf, gguf or by_format key, or a default expression", "config")
    end
    if spec.reduce and not CONFIG_REDUCE[spec.reduce] then
      describe.fail(d, name, key, string.format("config '%s': reduce '%s' is not one of: %s", key, spec.reduce,
        table.concat(util.sorted_keys(CONFIG_REDUCE), ", ")), "config")
    end
  end
  -- entries may share weight tables (models.lua builds them with merge):
  -- annotate private copies
  local weights = {}
  for wname, spec in pairs(e.weights) do weights[wname] = util.shallow_copy(spec) end
  e.weights = weights
  for _, wname in ipairs(util.sorted_keys(e.weights)) do
    local spec = e.weights[wname]
    local function fail(msg) describe.fail(d, name, wname, msg, "weights") end
    check_keys(d, name, spec, WEIGHT_KEYS, "weight '" .. wname .. "'", wname, "weights")
    if not spec.shape then fail("weight '" .. wname .. "' is missing 'shape'") end
    if spec.tied and not e.weights[spec.tied] then
      fail("weight '" .. wname .. "' is tied to undeclared '" .. spec.tied .. "'")
    end
    -- a checkpoint that stores the weight in parts: {heads = EXPR, {NAME, rows = EXPR [, transposed = true]
    -- [, first = EXPR, every = EXPR, of = EXPR]}, ...} (see config.weight_parts); the first part's name
    -- stands for the weight where one name is asked for
    spec.parts = {}
    for _, fmt in ipairs({"hf", "gguf"}) do
      local v = spec[fmt]
      if type(v) == "table" then
        if #v == 0 then fail("weight '" .. wname .. "': " .. fmt .. " lists no parts") end
        for k in pairs(v) do
          if k ~= "heads" and (math.type(k) ~= "integer" or k < 1 or k > #v) then
            fail("weight '" .. wname .. "': " .. fmt .. " parts: unknown key '" .. tostring(k) .. "'")
          end
        end
        for _, part in ipairs(v) do
          if type(part) ~= "table" then fail("weight '" .. wname .. "': each " .. fmt .. " part is {NAME, rows = EXPR}") end
          check_keys(d, name, part, PART_KEYS, "weight '" .. wname .. "' " .. fmt .. " part", wname, "weights")
          if not part[1] or not part.rows then fail("weight '" .. wname .. "': each " .. fmt .. " part is {NAME, rows = EXPR}") end
        end
        if spec.slice then fail("weight '" .. wname .. "': stored in parts, it cannot also be a slice") end
        if spec.experts then -- each part holds the layer's experts stacked: [experts, ...]
          if v.heads then fail("weight '" .. wname .. "': an expert weight's parts cannot have heads") end
          for _, part in ipairs(v) do
            if select(2, part[1]:gsub("%%d", "")) ~= 1 then
              fail("weight '" .. wname .. "': an expert weight's part '" .. part[1] .. "' needs one %d (the layer): its experts stacked")
            end
          end
        end
        spec.parts[fmt], spec[fmt] = v, v[1][1]
      elseif v ~= nil and type(v) ~= "string" then
        fail("weight '" .. wname .. "': '" .. fmt .. "' must be a name or a list of parts, not a " .. type(v))
      end
    end
    spec.per_layer = (spec.hf or spec.gguf or ""):find("%%d") ~= nil
    if spec.slice and #spec.slice ~= 2 then
      fail("weight '" .. wname .. "': slice is {first_row, rows_of_the_stored_tensor}")
    end
    -- a name with one %d holds the layer's experts stacked in one tensor (GGUF's ffn_*_exps, gpt-oss's
    -- safetensors), two name each expert's tensor
    for _, fmt in ipairs({"hf", "gguf"}) do
      local n = spec.experts and spec[fmt] and select(2, spec[fmt]:gsub("%%d", ""))
      if n and n ~= 1 and n ~= 2 then
        fail("weight '" .. wname .. "': an expert weight's " .. fmt .. " name needs %d (layer), or two (layer, expert)")
      end
    end
    spec.line = describe.line(d, name, wname, "weights")
  end
  e.name = name
  e.line = describe.line(d, name, nil)
end

-- Picks the entry for a HF architecture list or a GGUF architecture name.
-- The entry for a checkpoint: by GGUF architecture or HF architectures. An
-- entry's gguf_also = {arch = A, when = KEY} also claims GGUF files of
-- architecture A whose metadata KEY (%s = A) is a positive number (llama.cpp
-- writes Mixtral as "llama" with llama.expert_count); that match is more
-- specific than the entry whose gguf is A, so it is tried first.
function describe.select(d, hf_archs, gguf_arch, meta)
  local function chosen(name)
    if d.broken[name] then util.die(d.broken[name]) end -- the entry this checkpoint needs is wrong
    return d.entries[name]
  end
  local function field(e, k) return type(e) == "table" and e[k] or nil end
  if gguf_arch then
    for _, name in ipairs(util.sorted_keys(d.entries)) do
      local also = field(d.entries[name], "gguf_also")
      if type(also) == "table" and also.arch == gguf_arch and type(also.when) == "string" then
        local v = (meta or {})[string.format(also.when, gguf_arch)]
        if type(v) == "number" and v > 0 then return chosen(name) end
      end
    end
  end
  for _, name in ipairs(util.sorted_keys(d.entries)) do
    local e = d.entries[name]
    if gguf_arch and field(e, "gguf") == gguf_arch then return chosen(name) end
    local hf = field(e, "hf")
    for _, a in ipairs(hf_archs or {}) do
      for _, h in ipairs(type(hf) == "table" and hf or {}) do if h == a then return chosen(name) end end
    end
  end
  local what = gguf_arch and ("GGUF architecture '" .. gguf_arch .. "'")
    or ("architectures " .. table.concat(hf_archs or {}, ", "))
  util.die(string.format("%s: error: no entry describes %s", d.path, what))
end

return describe

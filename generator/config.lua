-- generator/config.lua — resolves a description's config values and weight shapes for one model.
--
-- Sources: a Hugging Face config.json (safetensors checkpoints) or GGUF
-- metadata (as printed by ingot-inspect). Missing values fall back to the
-- description's defaults, which may be expressions over other values
-- ("dim / heads") or "tensor_rows:WEIGHT" (the row count of a stored tensor; layer 0's for a
-- per-layer weight).
-- Every value that names a dimension must be a positive integer; a division
-- that leaves a remainder is an error at the models.lua line that wrote it.

local util = require("util")
local describe = require("describe")

local config = {}

-- What an expression may call besides the config values: floor(head_dim * factor) is
-- transformers' int(head_dim * partial_rotary_factor).
local EXPR_FUNCTIONS = {floor = math.floor, ceil = math.ceil, min = math.min, max = math.max}

local function eval_expr(d, e, key, expr, values)
  local env = setmetatable({}, {__index = function(_, k)
    if EXPR_FUNCTIONS[k] then return EXPR_FUNCTIONS[k] end
    if values[k] == nil then error({pending = k}) end
    return values[k]
  end})
  local fn, err = load("return " .. expr, "=models.lua", "t", env)
  if not fn then describe.fail(d, e.name, key, "bad expression '" .. expr .. "': " .. err) end
  local ok, v = pcall(fn)
  if not ok then
    if type(v) == "table" and v.pending then return nil, v.pending end
    describe.fail(d, e.name, key, "expression '" .. expr .. "': " .. tostring(v))
  end
  if type(v) == "number" and math.type(v) == "float" and expr:find("/") then
    if v ~= math.floor(v) then
      describe.fail(d, e.name, key, string.format("'%s' = %g does not divide evenly", expr, v))
    end
    v = math.tointeger(v)
  end
  return v
end

-- src: {format = "gguf"|"safetensors", hf = config table, meta = GGUF metadata,
--       tensors = {name -> {dtype, shape}}}
function config.resolve(d, e, src)
  local values, pending = {}, {}
  local arch = src.meta and src.meta["general.architecture"]
  for _, key in ipairs(util.sorted_keys(e.config)) do -- in name order: the same error every run
    local spec = e.config[key]
    local raw
    local from_default = false
    -- by_format's constant for this format wins; a format it does not name reads hf/gguf
    local constant = spec.by_format and spec.by_format[src.format == "gguf" and "gguf" or "hf"]
    if constant ~= nil then
      raw = constant
    elseif src.format == "gguf" then
      if spec.gguf then raw = src.meta[string.format(spec.gguf, arch)] end
    elseif spec.hf then
      raw = config.hf_value(src.hf, spec.hf)
    end
    if util.is_null(raw) then raw = nil end
    if type(raw) == "table" and raw.array_type and raw.length then
      -- ingot-inspect prints a GGUF list of more than 64 values as its type and length
      describe.fail(d, e.name, key, string.format("config '%s': %s is a list of %s values, more than the 64 the generator reads",
        key, string.format(spec.gguf or "?", arch), tostring(raw.length)))
    end
    raw = describe.reduce(spec, raw)
    if raw == nil then
      if spec.default == nil then
        describe.fail(d, e.name, key, string.format("config '%s' has no value in the model (%s) and no default",
          key, src.format == "gguf" and string.format(spec.gguf or "?", arch) or
          (type(spec.hf) == "table" and table.concat(spec.hf, " or ") or spec.hf or "?")))
      end
      raw = spec.default
      from_default = true
    end
    -- A default string is an expression over other values, unless it is a
    -- bare word that names no config value (a literal such as "default").
    if from_default and type(raw) == "string" and not (raw:match("^[%a_][%w_]*$") and not e.config[raw]) then
      pending[key] = raw
    else
      values[key] = raw
    end
  end
  -- Expressions may refer to each other; resolve until nothing changes.
  local progress = true
  while next(pending) and progress do
    progress = false
    for key, expr in pairs(pending) do
      local v
      local rows_of = expr:match("^tensor_rows:([%w_]+)$")
      local has = expr:match("^has_tensor:([%w_]+)$")
      if has then
        -- whether the checkpoint stores this weight (layer 0's for a per-layer weight)
        local spec = e.weights[has]
        if not spec then describe.fail(d, e.name, key, "has_tensor: '" .. has .. "' is not a declared weight") end
        local name = config.tensor_name(e, has, spec.per_layer and 0 or nil, src.format)
        v = name ~= nil and src.tensors[name] ~= nil
      elseif rows_of then
        -- layer 0's for a per-layer weight
        local spec = e.weights[rows_of]
        if not spec then describe.fail(d, e.name, key, "tensor_rows: '" .. rows_of .. "' is not a declared weight") end
        local t = src.tensors[config.tensor_name(e, rows_of, spec.per_layer and 0 or nil, src.format) or ""]
        if not t then describe.fail(d, e.name, key, "tensor for '" .. rows_of .. "' not found") end
        v = t.shape[1]
      else
        v = eval_expr(d, e, key, expr, values)
      end
      if v ~= nil then values[key] = v; pending[key] = nil; progress = true end
    end
  end
  if next(pending) then
    local key = next(pending)
    describe.fail(d, e.name, key, "config '" .. key .. "' depends on itself or an unknown value")
  end
  for key, v in pairs(values) do
    if type(v) == "number" and math.type(v) == "float" and v == math.floor(v) and key ~= "eps"
       and key ~= "rope_theta" then
      values[key] = math.tointeger(v)
    end
  end
  local pairs_kind = (e.rope_pairs or {})[src.format == "gguf" and "gguf" or "hf"] or "halves"
  return {values = values, rope_pairs = pairs_kind, format = src.format}
end

-- A value from config.json: spec is a key, a dotted path into nested
-- objects ("rope_parameters.rope_theta"), or a list of those tried in order
-- (config.json layouts change between transformers versions).
function config.hf_value(hf, spec)
  local paths = type(spec) == "table" and spec or {spec}
  for _, path in ipairs(paths) do
    local v = hf
    for part in path:gmatch("[^.]+") do
      if type(v) ~= "table" then v = nil; break end
      v = v[part]
    end
    if not util.is_null(v) then return v end
  end
  return nil
end

-- The stored tensor name of a weight for layer i (nil for model-level
-- weights) and expert j (for per-expert weights).
function config.tensor_name(e, logical, layer, format, expert)
  local spec = e.weights[logical]
  local pattern = format == "gguf" and spec.gguf or spec.hf
  if not pattern then return nil end
  if expert and config.stacked_experts(e, logical, format) then return string.format(pattern, layer) end
  if expert then return string.format(pattern, layer, expert) end
  if layer then return string.format(pattern, layer) end
  return pattern
end

-- True when an expert weight's stored name has one %d (the layer): the
-- checkpoint keeps the layer's experts stacked in one tensor [experts, rows,
-- cols] (GGUF's ffn_*_exps), and expert j is rows j*rows .. of it.
function config.stacked_experts(e, logical, format)
  local spec = e.weights[logical]
  local pattern = format == "gguf" and spec.gguf or spec.hf
  return spec.experts ~= nil and pattern ~= nil and select(2, pattern:gsub("%%d", "")) == 1
end

-- A weight a checkpoint stores in parts (llama.cpp's DeepSeek-V2 GGUFs split
-- kv_b_proj into attn_k_b, each head's block transposed, and attn_v_b):
-- `heads` blocks, each the rows of every part in turn (head h: part 1's
-- rows for h, part 2's, ...; one block without `heads`). A part is stored as
-- [heads, rows, cols] ([rows, cols] without `heads`), or as [heads, cols,
-- rows] when `transposed`; `of` rows of which it takes `rows`, from `first`
-- on, every `every`-th (defaults: all of them). An expert weight's parts hold
-- the layer's experts stacked, [experts, ...]. A vector's part is a matrix
-- of one column. The loader assembles the weight in the description's layout
-- once, at load. Returns {heads = n, {name, rows = n, transposed = bool,
-- first, every, of}, ...} with the expressions evaluated and the rows checked
-- against the weight's shape.
function config.weight_parts(d, e, wname, spec, parts, values)
  local function eval(expr, zero_ok)
    local v = type(expr) == "number" and expr or eval_expr(d, e, wname, expr, values)
    if math.type(v) ~= "integer" or v < (zero_ok and 0 or 1) then
      describe.fail(d, e.name, wname, string.format("weight '%s' parts: '%s' = %s is not a %s integer", wname,
        tostring(expr), tostring(v), zero_ok and "non-negative" or "positive"))
    end
    return v
  end
  local out = {heads = parts.heads and eval(parts.heads)}
  local rows = 0
  for i, part in ipairs(parts) do
    -- `every`/`first`: the part's rows are rows first, first + every, ... of the `of` it stores
    -- (gpt-oss's gate_up_proj interleaves gate and up: every = 2, first 0 or 1)
    local p = {name = part[1], rows = eval(part.rows), transposed = part.transposed == true,
               first = part.first and eval(part.first, true) or 0, every = part.every and eval(part.every) or 1}
    p.of = part.of and eval(part.of) or p.rows * p.every
    if p.first + (p.rows - 1) * p.every >= p.of then
      describe.fail(d, e.name, wname, string.format("weight '%s' part '%s': rows %d, %d, ... (%d of them) do not fit in %d",
        wname, p.name, p.first, p.first + p.every, p.rows, p.of))
    end
    if p.transposed and #spec.dims ~= 2 then
      describe.fail(d, e.name, wname, "weight '" .. wname .. "': a vector cannot be stored transposed")
    end
    out[i] = p
    rows = rows + p.rows
  end
  if #spec.dims > 2 then describe.fail(d, e.name, wname, "weight '" .. wname .. "': only a matrix or a vector can be stored in parts") end
  if not spec.absent and rows * (out.heads or 1) ~= spec.dims[1] then
    describe.fail(d, e.name, wname, string.format("weight '%s': %d heads of %d rows in parts, %d rows declared", wname,
      out.heads or 1, rows, spec.dims[1]))
  end
  return out
end

-- Evaluates each declared weight's shape in this model's config.
function config.weight_dims(d, e, values)
  for _, wname in ipairs(util.sorted_keys(e.weights)) do
    local spec = e.weights[wname]
    spec.dims = {}
    for i, expr in ipairs(spec.shape) do
      local v = type(expr) == "number" and expr or eval_expr(d, e, wname, expr, values)
      -- a dimension of 0 says this model has no such weight (DeepSeek-V2's
      -- q_a_proj when q_lora_rank is null): tracing fails if it is used
      if math.type(v) == "integer" and v == 0 then spec.absent = string.format("'%s' = 0", tostring(expr))
      elseif type(v) ~= "number" or math.type(v) ~= "integer" or v <= 0 then
        describe.fail(d, e.name, wname, string.format("weight '%s' dimension %d ('%s') = %s is not a positive integer",
          wname, i, tostring(expr), tostring(v)))
      end
      spec.dims[i] = v
    end
    if spec.slice then
      local first = type(spec.slice[1]) == "number" and spec.slice[1] or eval_expr(d, e, wname, spec.slice[1], values)
      local of = type(spec.slice[2]) == "number" and spec.slice[2] or eval_expr(d, e, wname, spec.slice[2], values)
      if first < 0 or first + spec.dims[1] > of then
        describe.fail(d, e.name, wname, string.format("weight '%s': rows [%d, %d) do not fit in %d", wname, first,
          first + spec.dims[1], of))
      end
      spec.first_row, spec.stored_rows = first, of
    end
    spec.stored_parts = {}
    for fmt, parts in pairs(spec.absent and {} or spec.parts) do
      spec.stored_parts[fmt] = config.weight_parts(d, e, wname, spec, parts, values)
    end
    if spec.experts then
      spec.n_experts = values[spec.experts]
      if type(spec.n_experts) ~= "number" then
        describe.fail(d, e.name, wname, "weight '" .. wname .. "': experts must name a config value")
      end
    end
  end
end

return config

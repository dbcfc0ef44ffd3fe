-- generator/graph.lua — traces a models.lua description into an op graph with static shapes.
--
-- The description's embed/layer/head functions run once per layer against
-- symbolic tensors: every op call appends a node that records its inputs,
-- its width (columns per row), which rows it spans ("tokens": every token of
-- the step; "logits": only the rows whose logits are wanted; "hidden": the
-- rows whose final hidden state is wanted, see trace_hidden) and the
-- models.lua line that called it. Shapes are checked as they are traced, so a
-- mismatch is reported at the line of the description that caused it.

local util = require("util")

local graph = {}

local Tensor = {}
Tensor.__index = Tensor

-- The ops every backend implements. Elementwise ops work per row and can be
-- fused into the epilogue of the kernel that produces their input.
graph.ELEMENTWISE = {add = true, mul = true, scale = true, silu = true, gelu_tanh = true, gelu = true, sigmoid = true,
                     rope = true, kv_store = true, softcap = true, columns = true, concat = true}
graph.ROW_OPS = {rmsnorm = true, layernorm = true, select_rows = true}
-- Norms: a reduction over the row (or each head's group of it) before the elementwise part.
graph.NORMS = {rmsnorm = true, layernorm = true}

local G = {}
G.__index = G

function graph.new(desc, cfg)
  return setmetatable({desc = desc, cfg = cfg, nodes = {}, weights = {}, weight_list = {},
                       n_attn = 0, layer = nil}, G)
end

-- The description line that called the op being traced: the first stack
-- frame that belongs to models.lua. An op in tail position
-- (`return linear(...)`) leaves no frame of its caller; it is attributed to
-- the line of the previous op of the same function, or the line after the
-- function's header.
local tracing = {fn_line = 0, last_line = 0}
local function caller_line(desc_path)
  for level = 3, 12 do
    local info = debug.getinfo(level, "Sl")
    if not info then break end
    if info.source == "@" .. desc_path then
      tracing.last_line = info.currentline
      return info.currentline
    end
  end
  return tracing.last_line > 0 and tracing.last_line or tracing.fn_line + 1
end

function G:fail(line, msg)
  util.die(string.format("%s:%d: error: %s", self.desc.path, line, msg))
end

function G:node(op, inputs, width, rows, attrs)
  local n = {id = #self.nodes + 1, op = op, inputs = inputs, width = width, rows = rows,
             attrs = attrs or {}, line = caller_line(self.desc.path), layer = self.layer,
             consumers = {}}
  for _, t in ipairs(inputs) do
    if getmetatable(t) == Tensor then table.insert(t.node.consumers, n) end
  end
  self.nodes[#self.nodes + 1] = n
  if width then
    local t = setmetatable({node = n, width = width, rows = rows, g = self}, Tensor)
    n.out = t
    return t
  end
  return n
end

local function check_tensor(g, v, what)
  if getmetatable(v) ~= Tensor then
    g:fail(caller_line(g.desc.path), what .. " expects a tensor, got " .. type(v))
  end
end

local function check_weight(g, w, what)
  if type(w) ~= "table" or w.kind ~= "weight" then
    g:fail(caller_line(g.desc.path), what .. " expects a weight (w.NAME), got " .. type(w))
  end
end

-- An option an op does not read is an error (a misspelled or unsupported one would otherwise be
-- ignored, and a weight named in it would count as used).
local function check_opts(g, opts, what, allowed)
  if opts == nil then return {} end
  if type(opts) ~= "table" then g:fail(caller_line(g.desc.path), what .. ": options must be a table") end
  local names = {}
  for k in pairs(allowed) do names[#names + 1] = k end
  table.sort(names)
  for k in pairs(opts) do
    if not allowed[k] then
      g:fail(caller_line(g.desc.path), string.format("%s: unknown option '%s' (options: %s)", what, tostring(k),
        table.concat(names, ", ")))
    end
  end
  return opts
end

local function set(...)
  local t = {}
  for _, k in ipairs({...}) do t[k] = true end
  return t
end

-- The norm weight (and bias) of `what` over x in `groups` equal groups: one value per column of
-- a group (shared by the groups: Qwen3's per-head q/k norm) or per column of the row.
local function check_norm_weight(g, what, x, w, groups)
  local n = #w.shape == 1 and w.shape[1] or -1
  if x.width % groups ~= 0 or (n ~= x.width // groups and n ~= x.width) then
    g:fail(caller_line(g.desc.path), string.format("%s: weight %s has shape [%s], input has width %d in %d group(s)",
      what, w.logical, table.concat(w.shape, ", "), x.width, groups))
  end
  return n == x.width and groups > 1
end

-- Weight handles: w.NAME inside embed/layer/head resolves the declared
-- weight for the current layer (or the model) and records it once.
function G:weight_table()
  local g = self
  return setmetatable({}, {__index = function(_, name)
    local decl = g.desc.entry.weights[name]
    if not decl then
      g:fail(caller_line(g.desc.path), "weight '" .. tostring(name) .. "' is not declared in weights")
    end
    if decl.absent then
      g:fail(caller_line(g.desc.path), "weight '" .. name .. "' has no rows in this model (" .. decl.absent .. ")")
    end
    local per_layer = decl.per_layer
    local function handle(expert)
      local key = per_layer and string.format("%s.%d", name, g.layer) or name
      if expert then key = key .. "." .. expert end
      local w = g.weights[key]
      if not w then
        w = {kind = "weight", logical = name, key = key, layer = per_layer and g.layer or nil,
             expert = expert, decl = decl, shape = decl.dims, line = caller_line(g.desc.path)}
        g.weights[key] = w
        g.weight_list[#g.weight_list + 1] = w
      end
      return w
    end
    if decl.experts then -- one weight per expert
      local list = {kind = "experts", logical = name}
      for j = 0, decl.n_experts - 1 do list[j + 1] = handle(j) end
      return list
    end
    return handle(nil)
  end})
end

-- The op functions visible to descriptions.
function G:env()
  local g = self
  local env = {}
  function env.embedding(tokens, w)
    check_weight(g, w, "embedding")
    return g:node("embedding", {tokens, w}, w.shape[2], "tokens")
  end
  -- opts.offset: scale by (offset + w) (Gemma: 1). opts.heads: normalize each
  -- of that many equal groups of the row separately, with one weight of the
  -- group's size shared by all (Qwen3's per-head q/k norm) or one value per
  -- column of the row, each group its own (Mamba-2's grouped norm).
  function env.rmsnorm(x, w, eps, opts)
    check_tensor(g, x, "rmsnorm"); check_weight(g, w, "rmsnorm")
    opts = check_opts(g, opts, "rmsnorm", set("heads", "offset"))
    local groups = opts.heads or 1
    local per_head = check_norm_weight(g, "rmsnorm", x, w, groups)
    if type(eps) ~= "number" then g:fail(caller_line(g.desc.path), "rmsnorm: eps must be a number") end
    return g:node("rmsnorm", {x, w}, x.width, x.rows, {eps = eps, offset = opts.offset or 0,
      group = x.width // groups, per_head = per_head})
  end
  -- LayerNorm: (x - mean) / sqrt(var + eps) * w + b, the variance the biased one (transformers'
  -- nn.LayerNorm); b may be nil (no bias). opts.heads: each of that many equal groups of the row
  -- normalized separately (per-head q/k norms), w and b one value per column of a group (shared
  -- by the groups) or per column of the row (each head its own).
  function env.layernorm(x, w, b, eps, opts)
    check_tensor(g, x, "layernorm"); check_weight(g, w, "layernorm")
    opts = check_opts(g, opts, "layernorm", set("heads"))
    local groups = opts.heads or 1
    local per_head = check_norm_weight(g, "layernorm", x, w, groups)
    if not b then b = nil end -- `cond and w.b` gives false when a description has no bias
    if b then
      check_weight(g, b, "layernorm bias")
      if check_norm_weight(g, "layernorm bias", x, b, groups) ~= per_head then
        g:fail(caller_line(g.desc.path), string.format("layernorm: weight %s and bias %s differ in shape",
          w.logical, b.logical))
      end
    end
    if type(eps) ~= "number" or eps < 0 then g:fail(caller_line(g.desc.path), "layernorm: eps must be a number >= 0") end
    return g:node("layernorm", {x, w, b}, x.width, x.rows, {eps = eps, group = x.width // groups,
      per_head = per_head})
  end
  -- cap * tanh(x / cap): Gemma 2's final-logit soft-capping.
  function env.softcap(x, cap)
    check_tensor(g, x, "softcap")
    if type(cap) ~= "number" or cap <= 0 then g:fail(caller_line(g.desc.path), "softcap: cap must be a positive number") end
    return g:node("softcap", {x}, x.width, x.rows, {cap = cap})
  end
  function env.linear(x, w, bias)
    check_tensor(g, x, "linear"); check_weight(g, w, "linear")
    if #w.shape ~= 2 or w.shape[2] ~= x.width then
      g:fail(caller_line(g.desc.path), string.format("linear: weight %s has shape [%s], input has width %d",
        w.logical, table.concat(w.shape, ", "), x.width))
    end
    if not bias then bias = nil end -- `cond and w.b` gives false when a description has no bias
    if bias then check_weight(g, bias, "linear bias") end
    return g:node("linear", {x, w, bias}, w.shape[1], x.rows)
  end
  -- o.rot_dim: partial rotary, only the first rot_dim columns of each head rotate (transformers:
  -- int(head_dim * partial_rotary_factor)), the frequencies theta^(-2i / rot_dim). An odd rot_dim
  -- rotates rot_dim + 1 columns at those frequencies, as transformers does (its cos/sin tables
  -- have 2 * ceil(rot_dim / 2) columns). Default: the whole head.
  local SCALING = set("type", "factor", "low_freq", "high_freq", "orig_ctx", "beta_fast", "beta_slow", "attn_factor",
                      "truncate")
  function env.rope(x, o)
    check_tensor(g, x, "rope")
    local line = caller_line(g.desc.path)
    o = check_opts(g, o, "rope", set("heads", "head_dim", "theta", "scaling", "freq_factors", "rot_dim"))
    if type(o.heads) ~= "number" or type(o.head_dim) ~= "number" or o.heads * o.head_dim ~= x.width then
      g:fail(line, string.format("rope: %s heads x %s != width %d", tostring(o.heads), tostring(o.head_dim), x.width))
    end
    if type(o.theta) ~= "number" or o.theta <= 0 then g:fail(line, "rope: theta must be a positive number") end
    if o.scaling ~= nil then check_opts(g, o.scaling, "rope scaling", SCALING) end
    if o.scaling and o.scaling.truncate ~= nil and type(o.scaling.truncate) ~= "boolean" then
      g:fail(line, "rope: scaling.truncate must be a boolean")
    end
    local freq_dim = o.rot_dim or o.head_dim
    if math.type(freq_dim) ~= "integer" or freq_dim < 1 or freq_dim + freq_dim % 2 > o.head_dim then
      g:fail(line, string.format("rope: rot_dim %s does not fit heads of %d (an integer in 1..%d; an odd width rotates "
        .. "one column more)", tostring(o.rot_dim), o.head_dim, o.head_dim))
    end
    -- o.freq_factors: a weight of rot_dim / 2 values dividing each frequency (GGUF rope_freqs)
    if o.freq_factors then check_weight(g, o.freq_factors, "rope freq_factors") end
    return g:node("rope", {x}, x.width, x.rows, {heads = o.heads, head_dim = o.head_dim,
      rot_dim = freq_dim + freq_dim % 2, freq_dim = freq_dim, theta = o.theta, pairs = g.cfg.rope_pairs,
      scaling = o.scaling, freq_factors = o.freq_factors or nil})
  end
  -- What the KV cache holds is what attention is given: k and v rows of
  -- kv_heads x head_dim each, or, with v = nil and o.value_dim, the k rows
  -- alone, each head's values being the first value_dim columns of its key
  -- (multi-head latent attention in its absorbed form: one cached row of
  -- latent and RoPE key per token, shared by every query head). The output
  -- has heads x value_dim columns.
  function env.attention(q, k, v, o)
    check_tensor(g, q, "attention"); check_tensor(g, k, "attention")
    local line = caller_line(g.desc.path)
    o = check_opts(g, o, "attention", set("heads", "kv_heads", "head_dim", "window", "softcap", "scale", "value_dim", "sinks"))
    if v == nil then
      if type(o.value_dim) ~= "number" or o.value_dim < 1 or o.value_dim > o.head_dim then
        g:fail(line, "attention: without v, value_dim (the key columns that are the values) must be in 1..head_dim")
      end
    else
      check_tensor(g, v, "attention")
      if o.value_dim and o.value_dim ~= o.head_dim then g:fail(line, "attention: value_dim needs v = nil") end
    end
    if o.heads % o.kv_heads ~= 0 then g:fail(line, "attention: heads must be a multiple of kv_heads") end
    if q.width ~= o.heads * o.head_dim or k.width ~= o.kv_heads * o.head_dim or (v and v.width ~= k.width) then
      g:fail(line, string.format("attention: q/k/v widths %d/%d/%s do not match %d heads, %d kv heads of %d",
        q.width, k.width, v and tostring(v.width) or "-", o.heads, o.kv_heads, o.head_dim))
    end
    -- sinks (gpt-oss): one learned logit per query head that joins the softmax's denominator and
    -- attends to nothing
    if o.sinks ~= nil then
      check_weight(g, o.sinks, "attention sinks")
      if #o.sinks.shape ~= 1 or o.sinks.shape[1] ~= o.heads then
        g:fail(line, string.format("attention: sinks %s has shape [%s], expected [%d] (one per query head)", o.sinks.logical,
          table.concat(o.sinks.shape, ", "), o.heads))
      end
    end
    local slot = g.n_attn
    g.n_attn = g.n_attn + 1
    local attrs = {heads = o.heads, kv_heads = o.kv_heads, head_dim = o.head_dim, kv_layer = slot,
                   window = o.window or 0, softcap = o.softcap or 0,
                   scale = o.scale or 1 / math.sqrt(o.head_dim),
                   value_dim = v and o.head_dim or o.value_dim, shared_value = v == nil, sinks = o.sinks ~= nil}
    local store = g:node("kv_store", {k, v}, nil, k.rows, attrs)
    return g:node("attention", {q, store, o.sinks}, o.heads * attrs.value_dim, q.rows, attrs)
  end
  -- A causal depthwise convolution over each sequence's positions (LFM2's short convolution,
  -- Mamba's conv1d): column i of the output at position p is sum_k w[i][k] x[p - (width-1) + k][i]
  -- (+ bias[i]), positions before 0 reading zeros. w is [width of x, kernel width]. The last
  -- kernel width - 1 input rows of a sequence are its recurrent state: held between steps in the
  -- sequence's state slot (model_api.h), so a prompt in chunks or token by token gives what one
  -- step gives.
  function env.causal_conv(x, w, bias)
    check_tensor(g, x, "causal_conv"); check_weight(g, w, "causal_conv")
    local line = caller_line(g.desc.path)
    if #w.shape ~= 2 or w.shape[1] ~= x.width or w.shape[2] < 2 then
      g:fail(line, string.format("causal_conv: weight %s has shape [%s], expected [%d, kernel width >= 2]", w.logical,
        table.concat(w.shape, ", "), x.width))
    end
    if not bias then bias = nil end
    if bias then
      check_weight(g, bias, "causal_conv bias")
      if #bias.shape ~= 1 or bias.shape[1] ~= x.width then
        g:fail(line, string.format("causal_conv: bias %s has shape [%s], expected [%d]", bias.logical,
          table.concat(bias.shape, ", "), x.width))
      end
    end
    local width = w.shape[2]
    w.f32 = true -- the kernel reads its taps as floats, whatever the checkpoint or --dtype says
    local attrs = {width = width, state_offset = g.state_floats or 0, state_layer = g.n_states or 0}
    g.state_floats = attrs.state_offset + (width - 1) * x.width
    g.n_states = attrs.state_layer + 1
    return g:node("causal_conv", {x, w, bias}, x.width, x.rows, attrs)
  end
  -- Mamba-2's selective state-space scan over each sequence's positions. x holds heads x head_dim
  -- columns, dt one per head, B and C groups x state each (head h reads group h // (heads /
  -- groups)). Per token and head: dt' = clamp(softplus(dt + dt_bias), dt_min, dt_max), the state
  -- [head_dim][state] decays by exp(dt' A) and takes dt' x B, and the output is state . C + D x.
  -- A is the weight itself, or -exp of it with o.a_log (transformers stores A_log). The state of
  -- every head is the sequence's recurrent state, carried between steps like causal_conv's.
  function env.ssm_scan(x, dt, B, C, A, D, dt_bias, o)
    for _, t in ipairs({{x, "x"}, {dt, "dt"}, {B, "B"}, {C, "C"}}) do check_tensor(g, t[1], "ssm_scan " .. t[2]) end
    check_weight(g, A, "ssm_scan A"); check_weight(g, D, "ssm_scan D"); check_weight(g, dt_bias, "ssm_scan dt_bias")
    local line = caller_line(g.desc.path)
    o = check_opts(g, o, "ssm_scan", set("heads", "head_dim", "state", "groups", "a_log", "dt_min", "dt_max"))
    local H, P, N, G = o.heads, o.head_dim, o.state, o.groups or 1
    for _, k in ipairs({"heads", "head_dim", "state"}) do
      if math.type(o[k]) ~= "integer" or o[k] < 1 then g:fail(line, "ssm_scan: " .. k .. " must be a positive integer") end
    end
    if math.type(G) ~= "integer" or G < 1 or H % G ~= 0 then
      g:fail(line, string.format("ssm_scan: %s groups do not divide %d heads", tostring(G), H))
    end
    if x.width ~= H * P or dt.width ~= H or B.width ~= G * N or C.width ~= G * N then
      g:fail(line, string.format("ssm_scan: x/dt/B/C widths %d/%d/%d/%d do not match %d heads of %d, %d groups of state %d",
        x.width, dt.width, B.width, C.width, H, P, G, N))
    end
    for _, w in ipairs({A, D, dt_bias}) do
      if #w.shape ~= 1 or w.shape[1] ~= H then
        g:fail(line, string.format("ssm_scan: %s has shape [%s], expected [%d] (one per head)", w.logical,
          table.concat(w.shape, ", "), H))
      end
    end
    local dt_min, dt_max = o.dt_min or 0, o.dt_max or math.huge
    if type(dt_min) ~= "number" or type(dt_max) ~= "number" or dt_min < 0 or dt_max < dt_min then
      g:fail(line, "ssm_scan: dt_min and dt_max must be numbers with 0 <= dt_min <= dt_max")
    end
    local attrs = {heads = H, head_dim = P, state = N, groups = G, a_log = o.a_log and true or false,
                   dt_min = dt_min, dt_max = dt_max, state_offset = g.state_floats or 0, state_layer = g.n_states or 0}
    g.state_floats = attrs.state_offset + H * P * N
    g.n_states = attrs.state_layer + 1
    return g:node("ssm_scan", {x, dt, B, C, A, D, dt_bias}, H * P, x.rows, attrs)
  end
  -- The gated delta rule (Qwen3-Next's Gated DeltaNet) over each sequence's positions: per value
  -- head j (its key head j // (v_heads / k_heads)), q and k are l2-normalized (eps 1e-6) and q
  -- scaled by 1/sqrt(k_dim); with g = -exp(A_log) softplus(a + dt_bias) and beta = sigmoid(b),
  -- the state S [k_dim][v_dim] decays by exp(g), then S += k (beta (v - S^T k))^T, and the
  -- output is S^T q. a and b hold one value per value head; A_log and dt_bias are weights of
  -- v_heads. The state of every head is the sequence's recurrent state. With o.a_log false the
  -- weight is A itself (llama.cpp's converter stores -exp(A_log)).
  function env.delta_scan(q, k, v, a, b, A_log, dt_bias, o)
    for _, t in ipairs({{q, "q"}, {k, "k"}, {v, "v"}, {a, "a"}, {b, "b"}}) do check_tensor(g, t[1], "delta_scan " .. t[2]) end
    check_weight(g, A_log, "delta_scan A_log"); check_weight(g, dt_bias, "delta_scan dt_bias")
    local line = caller_line(g.desc.path)
    o = check_opts(g, o, "delta_scan", set("k_heads", "v_heads", "k_dim", "v_dim", "a_log"))
    local KH, VH, KD, VD = o.k_heads, o.v_heads, o.k_dim, o.v_dim
    for _, key in ipairs({"k_heads", "v_heads", "k_dim", "v_dim"}) do
      if math.type(o[key]) ~= "integer" or o[key] < 1 then g:fail(line, "delta_scan: " .. key .. " must be a positive integer") end
    end
    if VH % KH ~= 0 then g:fail(line, string.format("delta_scan: %d key heads do not divide %d value heads", KH, VH)) end
    if q.width ~= KH * KD or k.width ~= KH * KD or v.width ~= VH * VD or a.width ~= VH or b.width ~= VH then
      g:fail(line, string.format("delta_scan: q/k/v/a/b widths %d/%d/%d/%d/%d do not match %d key heads of %d, %d value heads of %d",
        q.width, k.width, v.width, a.width, b.width, KH, KD, VH, VD))
    end
    for _, w in ipairs({A_log, dt_bias}) do
      if #w.shape ~= 1 or w.shape[1] ~= VH then
        g:fail(line, string.format("delta_scan: %s has shape [%s], expected [%d] (one per value head)", w.logical,
          table.concat(w.shape, ", "), VH))
      end
    end
    local attrs = {k_heads = KH, v_heads = VH, k_dim = KD, v_dim = VD, a_log = o.a_log ~= false, state_offset = g.state_floats or 0,
                   state_layer = g.n_states or 0}
    g.state_floats = attrs.state_offset + VH * KD * VD
    g.n_states = attrs.state_layer + 1
    return g:node("delta_scan", {q, k, v, a, b, A_log, dt_bias}, VH * VD, q.rows, attrs)
  end
  -- Columns [first, first + count) of each of opts.heads equal groups of a
  -- row (one group by default): the RoPE part of every query head.
  function env.columns(x, first, count, opts)
    check_tensor(g, x, "columns")
    local heads = check_opts(g, opts, "columns", set("heads")).heads or 1
    local group = x.width // heads
    if x.width % heads ~= 0 or first < 0 or count < 1 or first + count > group then
      g:fail(caller_line(g.desc.path), string.format("columns: [%d, %d) is not inside groups of %d (width %d, %d group(s))",
        first, first + count, group, x.width, heads))
    end
    return g:node("columns", {x}, heads * count, x.rows, {heads = heads, first = first, count = count, group = group})
  end
  -- Each of opts.heads groups of a followed by the same group of b.
  function env.concat(a, b, opts)
    check_tensor(g, a, "concat"); check_tensor(g, b, "concat")
    local heads = check_opts(g, opts, "concat", set("heads")).heads or 1
    if a.width % heads ~= 0 or b.width % heads ~= 0 or a.rows ~= b.rows then
      g:fail(caller_line(g.desc.path), string.format("concat: widths %d and %d do not split into %d group(s)", a.width,
        b.width, heads))
    end
    return g:node("concat", {a, b}, a.width + b.width, a.rows, {heads = heads, a = a.width // heads, b = b.width // heads})
  end
  -- A linear per head: head h multiplies its group of x by its own block of
  -- w, rows [h * stride + o.first, + o.rows) with stride = w's rows / heads
  -- (a projection whose heads interleave several parts, like kv_b_proj's
  -- [k_nope | v] per head). o.transpose multiplies by the block's transpose
  -- (x's group has o.rows columns, the output's as many as w): the absorbed
  -- form of MLA moves each query head into latent space through W_UK^T.
  function env.head_linear(x, w, o)
    check_tensor(g, x, "head_linear"); check_weight(g, w, "head_linear")
    local line = caller_line(g.desc.path)
    o = check_opts(g, o, "head_linear", set("heads", "first", "rows", "transpose"))
    local heads, first, rows = o.heads, o.first or 0, o.rows
    if #w.shape ~= 2 or w.shape[1] % heads ~= 0 or first < 0 or rows < 1 or first + rows > w.shape[1] // heads then
      g:fail(line, string.format("head_linear: rows [%d, %d) of each of %d heads do not fit weight %s [%s]", first,
        first + (rows or 0), heads, w.logical, table.concat(w.shape, ", ")))
    end
    local per_in = o.transpose and rows or w.shape[2]
    local per_out = o.transpose and w.shape[2] or rows
    if x.width ~= heads * per_in then
      g:fail(line, string.format("head_linear: input width %d is not %d heads x %d", x.width, heads, per_in))
    end
    return g:node("head_linear", {x, w}, heads * per_out, x.rows, {heads = heads, first = first, rows = rows,
      stride = w.shape[1] // heads, cols = w.shape[2], transpose = o.transpose and true or false})
  end
  -- Sparse mixture of experts: router logits (plus router_bias) -> softmax -> top_k experts per
  -- token, their gated MLP outputs weighted by the top-k probabilities,
  -- renormalized to sum to 1 (Mixtral) unless o.normalize is false (the
  -- softmax probabilities as they are: Qwen3-MoE's norm_topk_prob = false).
  -- An expert's MLP is down(act(gate(x)) * up(x)), each linear with its
  -- expert's bias where the experts table names one (gate_bias, up_bias,
  -- down_bias). gpt-oss's SwiGLU: alpha (silu(x) = x sigmoid(alpha x)), limit
  -- (gate clamped to <= limit, up to [-limit, limit]) and up_offset (added to
  -- up after the clamp).
  function env.moe(x, router, experts, o)
    check_tensor(g, x, "moe"); check_weight(g, router, "moe router")
    local line = caller_line(g.desc.path)
    o = check_opts(g, o, "moe", set("experts", "top_k", "normalize", "groups", "top_groups", "activation", "router_bias",
      "alpha", "limit", "up_offset"))
    check_opts(g, experts, "moe experts", set("gate", "up", "down", "gate_bias", "up_bias", "down_bias"))
    if o.activation ~= nil and o.activation ~= "silu" and o.activation ~= "gelu_tanh" then
      g:fail(line, "moe: activation must be \"silu\" or \"gelu_tanh\", not " .. tostring(o.activation))
    end
    for _, k in ipairs({"alpha", "limit", "up_offset"}) do
      if o[k] ~= nil and (type(o[k]) ~= "number" or o[k] ~= o[k] or math.abs(o[k]) == math.huge) then
        g:fail(line, "moe: " .. k .. " must be a finite number")
      end
    end
    if (o.alpha ~= nil or o.limit ~= nil or o.up_offset ~= nil) and (o.activation or "silu") ~= "silu" then
      g:fail(line, "moe: alpha, limit and up_offset shape a SwiGLU: activation must be silu")
    end
    if o.limit ~= nil and o.limit <= 0 then g:fail(line, "moe: limit must be positive") end
    local gate, up, down = experts.gate, experts.up, experts.down
    for _, list in ipairs({gate, up, down}) do
      if type(list) ~= "table" or list.kind ~= "experts" or #list ~= o.experts then
        g:fail(line, "moe: gate, up and down must be expert weights (experts = ...) with " .. tostring(o.experts) .. " experts")
      end
    end
    if router.shape[1] ~= o.experts or router.shape[2] ~= x.width then
      g:fail(line, string.format("moe: router has shape [%s], expected [%d, %d]", table.concat(router.shape, ", "), o.experts, x.width))
    end
    if o.router_bias ~= nil then
      check_weight(g, o.router_bias, "moe router_bias")
      if #o.router_bias.shape ~= 1 or o.router_bias.shape[1] ~= o.experts then
        g:fail(line, string.format("moe: router_bias has shape [%s], expected [%d]", table.concat(o.router_bias.shape, ", "), o.experts))
      end
    end
    -- each bias: expert weights of one row per output of its linear
    local biases = {}
    for _, b in ipairs({{"gate_bias", gate}, {"up_bias", up}, {"down_bias", down}}) do
      local list, of = experts[b[1]], b[2]
      if list ~= nil then
        if type(list) ~= "table" or list.kind ~= "experts" or #list ~= o.experts or #list[1].shape ~= 1
           or list[1].shape[1] ~= of[1].shape[1] then
          g:fail(line, string.format("moe: %s must be expert weights of shape [%d] with %d experts", b[1], of[1].shape[1], o.experts))
        end
        biases[#biases + 1] = b[1]
      end
    end
    if o.top_k < 1 or o.top_k > o.experts then g:fail(line, "moe: top_k must be in [1, experts]") end
    if o.normalize ~= nil and type(o.normalize) ~= "boolean" then g:fail(line, "moe: normalize must be a boolean") end
    -- group-limited routing (DeepSeek-V2): experts in `groups` equal groups,
    -- only the top_groups groups with the highest best score are eligible
    local groups, top_groups = o.groups or 1, o.top_groups or o.groups or 1
    if o.experts % groups ~= 0 or top_groups < 1 or top_groups > groups
       or o.top_k > top_groups * (o.experts // groups) then
      g:fail(line, string.format("moe: %d experts in %d groups, %d of them eligible, cannot give top_k %d", o.experts,
        groups, top_groups, o.top_k))
    end
    -- inputs: x, router, E gate, E up, E down weights, then the router bias and each named
    -- expert bias family (E each), in that order; attrs.inputs says where each begins
    local inputs, at = {x, router}, {}
    for _, list in ipairs({gate, up, down}) do
      for _, w in ipairs(list) do inputs[#inputs + 1] = w end
    end
    if o.router_bias then at.router_bias = #inputs + 1; inputs[#inputs + 1] = o.router_bias end
    for _, b in ipairs(biases) do
      at[b] = #inputs + 1
      for _, w in ipairs(experts[b]) do inputs[#inputs + 1] = w end
    end
    g.n_moe = (g.n_moe or 0) + 1
    return g:node("moe", inputs, down[1].shape[1], x.rows, {experts = o.experts, top_k = o.top_k,
      ffn = gate[1].shape[1], act = o.activation or "silu", moe_layer = g.n_moe - 1,
      normalize = o.normalize ~= false, groups = groups, top_groups = top_groups, at = at,
      alpha = o.alpha or 1, limit = o.limit or 0, up_offset = o.up_offset or 0})
  end
  local function unary(op)
    return function(x) check_tensor(g, x, op); return g:node(op, {x}, x.width, x.rows) end
  end
  env.silu = unary("silu")
  env.gelu_tanh = unary("gelu_tanh") -- GELU's tanh approximation (gelu_pytorch_tanh, gelu_new)
  env.gelu = unary("gelu")           -- GELU exactly: x * Phi(x), through erf (transformers' "gelu")
  env.sigmoid = unary("sigmoid")     -- 1 / (1 + exp(-x)): Qwen3-Next's output and shared-expert gates
  env.math = math
  env.string = string
  env.ipairs, env.pairs, env.type, env.error = ipairs, pairs, type, error
  return env
end

local function binary(op)
  return function(a, b)
    if type(a) == "number" then a, b = b, a end
    local g = a.g
    if type(b) == "number" then
      if op ~= "mul" then g:fail(caller_line(g.desc.path), "only tensor * number is supported") end
      return g:node("scale", {a}, a.width, a.rows, {factor = b})
    end
    -- a * b where b (or a) has one column: every column of the other scaled by it (a gate per row)
    if op == "mul" and a.width == 1 and b.width ~= 1 then a, b = b, a end
    if a.width ~= b.width and not (op == "mul" and b.width == 1) then
      g:fail(caller_line(g.desc.path), string.format("%s: widths differ (%d vs %d)", op, a.width, b.width))
    end
    return g:node(op, {a, b}, a.width, a.rows)
  end
end
Tensor.__add = binary("add")
Tensor.__mul = binary("mul")

-- Traces the whole model: embed, every layer, then head on the logit rows.
function G:trace()
  local e, c = self.desc.entry, self.cfg.values
  local env = self:env()
  -- models.lua runs in an environment whose globals resolve to desc.ops.
  for k, v in pairs(env) do self.desc.ops[k] = v end
  -- An error the description raises itself (error() or assert() refusing a
  -- config it does not support, or a Lua mistake in it) becomes
  -- models.lua:LINE: error: ...; any other is the generator's, with a traceback.
  local function call(fn, ...)
    -- Lua names the file in its messages by its short form (a long path is cut at the front)
    local prefix = debug.getinfo(fn, "S").short_src .. ":"
    tracing.fn_line = debug.getinfo(fn, "S").linedefined
    tracing.last_line = 0
    local out = table.pack(xpcall(fn, function(err)
      local text = tostring(err)
      local line, msg = text:sub(#prefix + 1):match("^(%d+): (.*)$")
      if text:sub(1, #prefix) == prefix and line then self:fail(tonumber(line), msg) end
      return debug.traceback(text, 2)
    end, ...))
    if not out[1] then error(out[2], 0) end
    return table.unpack(out, 2, out.n)
  end
  local cview = setmetatable({}, {__index = function(_, k)
    local v = c[k]
    if v == nil then self:fail(caller_line(self.desc.path), "unknown config value c." .. tostring(k)) end
    return v
  end})
  local tokens = self:node("tokens", {}, 1, "tokens")
  self.layer = nil
  local x = call(e.embed, tokens, self:weight_table(), cview)
  for i = 0, c.layers - 1 do
    self.layer = i
    c.layer = i
    x = call(e.layer, x, self:weight_table(), cview)
    self.layer = nil
  end
  c.layer = nil
  self.final_residual = x
  x = self:node("select_rows", {x}, x.width, "logits")
  -- the framework inserts this op: attribute it to the head function's line
  x.node.line = debug.getinfo(e.head, "S").linedefined
  local logits = call(e.head, x, self:weight_table(), cview)
  if getmetatable(logits) ~= Tensor or logits.width ~= c.vocab then
    util.die(string.format("%s: error: head must return a tensor of width vocab (%d)", self.desc.path, c.vocab))
  end
  self.logits = logits.node
  self.logits.output = "logits"
  self:trace_hidden(x.node)
  -- a weight read (w.NAME) but given to no op would pass the unused-tensor check unused
  local used = {}
  for _, n in ipairs(self.nodes) do
    for _, t in pairs(n.inputs) do used[t] = true end
    if n.attrs.freq_factors then used[n.attrs.freq_factors] = true end
  end
  for _, w in ipairs(self.weight_list) do
    if not used[w] then self:fail(w.line, string.format("weight '%s' is read but no op uses it", w.logical)) end
  end
  return self
end

-- The embedding path: the head's ops from its row selection up to the input
-- of its last linear (the final norm: transformers' last_hidden_state),
-- copied onto the rows whose hidden state is wanted ("hidden" rows, chosen by
-- the batch's hidden_rows). They run after the head and only when a step
-- asks for hidden rows, so the LM head is skipped when only those are wanted.
function G:trace_hidden(select)
  local lm_head
  for i = #self.nodes, select.id, -1 do
    if self.nodes[i].op == "linear" then lm_head = self.nodes[i]; break end
  end
  if not lm_head then
    util.die(string.format("%s: error: head must end in a linear (the LM head)", self.desc.path))
  end
  local last = lm_head.inputs[1].node
  -- the nodes of the head that the final hidden state depends on
  local needed = {[last] = true}
  for i = last.id, select.id, -1 do
    local n = self.nodes[i]
    if needed[n] then
      for _, t in ipairs(n.inputs) do
        if getmetatable(t) == Tensor and t.node.id >= select.id then needed[t.node] = true end
      end
    end
  end
  local copy = {}
  for i = select.id, last.id do
    local n = self.nodes[i]
    if needed[n] then
      local inputs = {}
      for k, t in ipairs(n.inputs) do
        inputs[k] = (getmetatable(t) == Tensor and copy[t.node]) and copy[t.node].out or t
      end
      local attrs = {}
      for k, v in pairs(n.attrs) do attrs[k] = v end
      if n.op == "select_rows" then attrs.hidden = true end
      local c = self:node(n.op, inputs, n.width, "hidden", attrs)
      c.node.line = n.line
      copy[n] = c.node
    end
  end
  if last.width ~= self.cfg.values.dim then
    util.die(string.format("%s: error: the LM head's input has width %d, not dim (%d)", self.desc.path, last.width,
      self.cfg.values.dim))
  end
  self.hidden = copy[last]
  self.hidden.output = "hidden"
end

return graph

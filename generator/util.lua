-- generator/util.lua — small helpers: errors, files, JSON, hashing.

local util = {}

-- Reports a compiler-style error (file:line: error: ...) and exits.
function util.die(msg)
  io.stderr:write("ingot: ", msg, "\n")
  os.exit(1)
end

-- Runs fn(...) with util.die raising instead of exiting: true, results or false, the message it
-- would have printed. Any other error propagates.
function util.try(fn, ...)
  local die = util.die
  util.die = function(msg) error({die = msg}, 0) end
  local out = table.pack(pcall(fn, ...))
  util.die = die
  if out[1] then return true, table.unpack(out, 2, out.n) end
  if type(out[2]) == "table" and out[2].die then return false, out[2].die end
  error(out[2], 0)
end

function util.read_file(path)
  local f, err = io.open(path, "rb")
  if not f then return nil, err end
  local s = f:read("a")
  f:close()
  return s
end

-- Writes only when the bytes change, so make rebuilds only what changed.
function util.write_if_changed(path, text)
  local old = util.read_file(path)
  if old == text then return false end
  local f = assert(io.open(path, "wb"))
  f:write(text)
  f:close()
  return true
end

function util.json_decode(text, what)
  local cjson = require("cjson")
  local ok, v = pcall(cjson.decode, text)
  if not ok then util.die(what .. ": invalid JSON: " .. tostring(v)) end
  return v
end

function util.is_null(v)
  return v == nil or v == require("cjson").null
end

-- FNV-1a 64-bit over a string, as 16 hex digits: a stable fingerprint of the
-- generator's inputs for the banner of every emitted file.
function util.hash(s)
  local h = 0xcbf29ce484222325
  for i = 1, #s do
    h = h ~ s:byte(i)
    h = h * 0x100000001b3
  end
  return string.format("%016x", h)
end

function util.shallow_copy(t)
  local r = {}
  for k, v in pairs(t) do r[k] = v end
  return r
end

function util.sorted_keys(t)
  local keys = {}
  for k in pairs(t) do keys[#keys + 1] = k end
  table.sort(keys, function(a, b) return tostring(a) < tostring(b) end)
  return keys
end

-- A C float literal that round-trips.
function util.cfloat(x)
  if x == math.huge or x == -math.huge then return x > 0 and "INFINITY" or "-INFINITY" end -- math.h's, in C and CUDA
  if x == math.floor(x) and math.abs(x) < 1e15 then return string.format("%.1ff", x) end
  return string.format("%.9gf", x)
end

return util

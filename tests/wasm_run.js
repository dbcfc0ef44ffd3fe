// wasm_run.js — a --target wasm32 build's module under node, for tests/test_wasm.py: loads a GGUF
// and generates through the page's entry points (templates/wasm/ingot_web.c), printing one JSON
// line: {"prompt_tokens", "ids", "text"} (ids: the tokens generated, a stop token excluded).
//
//   node tests/wasm_run.js build/NAME-wasm32/ingot.js MODEL.gguf text  PROMPT   N [CTX]
//   node tests/wasm_run.js build/NAME-wasm32/ingot.js MODEL.gguf chat  MESSAGES N [CTX]
//   node tests/wasm_run.js build/NAME-wasm32/ingot.js MODEL.gguf logits IDS OUT [decode]
//
// chat: MESSAGES is a JSON array of conversations (each an array of {role, content}), answered in
// turn by one loaded model (the KV cache carries over, as in the page); one line per conversation.
// Greedy (temperature 0) throughout. logits: the teacher-forced logits of the comma-separated token
// IDS (ingot_web_logits; "decode": a step per token) written to OUT as little-endian float32
// [n][vocab], as the native binary's `logits --out`. A failure prints the module's error and exits 1.
'use strict';
const fs = require('fs');
const path = require('path');

const [glue, gguf, mode, input, count, ctx] = process.argv.slice(2);
const logitsOut = count;
// Emscripten's loader fetches ingot.wasm, which node's fetch cannot do for a file: hand it the bytes
const createIngot = require(path.resolve(glue));
createIngot({wasmBinary: fs.readFileSync(glue.replace(/\.js$/, '.wasm'))}).then((M) => {
  const call = (name, returns, types, args) => M.ccall(name, returns, types, args);
  const fail = () => {
    console.error(call('ingot_web_error', 'string', [], []));
    process.exit(1);
  };
  M.FS.writeFile('/model.gguf', fs.readFileSync(gguf));
  const decode = mode === 'logits' && ctx === 'decode';
  if (call('ingot_web_load', 'number', ['string', 'number'], ['/model.gguf', mode === 'logits' ? 0 : Number(ctx || 0)]) !== 0) fail();
  M.FS.unlink('/model.gguf');
  const generate = (start, arg) => {
    const n = call(start, 'number', ['string', 'number', 'number', 'number'], [arg, Number(count), 0, 0]);
    if (n < 0) fail();
    const ids = [];
    let text = '';
    for (;;) {
      const ptr = call('ingot_web_next', 'number', [], []);
      if (!ptr) break;
      text += M.UTF8ToString(ptr);
      const id = call('ingot_web_token', 'number', [], []);
      if (id >= 0) ids.push(id); // -1: the trailing bytes of earlier tokens
    }
    if (call('ingot_web_error', 'string', [], [])) fail();
    console.log(JSON.stringify({prompt_tokens: n, ids, text}));
  };
  if (mode === 'logits') {
    const ids = input.split(',').map(Number);
    const p = M._malloc(4 * ids.length);
    M.HEAP32.set(ids, p / 4);
    const out = call('ingot_web_logits', 'number', ['number', 'number', 'number'], [p, ids.length, decode ? 1 : 0]);
    M._free(p);
    if (!out) fail();
    const info = JSON.parse(call('ingot_web_info', 'string', [], []));
    const n = ids.length * info.vocab;
    fs.writeFileSync(logitsOut, Buffer.from(M.HEAPF32.buffer, out, 4 * n));
  } else if (mode === 'text') generate('ingot_web_start_text', input);
  else for (const conversation of JSON.parse(input)) generate('ingot_web_start', JSON.stringify(conversation));
});

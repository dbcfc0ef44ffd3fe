// ingot_wasm_bench.js — ingot's side of bench/bench_wasm.py: a --target wasm32 build's module under
// node, timed as bench/llama_wasm_bench.c times llama.cpp's:
//
//   node bench/ingot_wasm_bench.js build/NAME-wasm32/ingot.js MODEL.gguf PROMPT N_GEN
//
// The prompt (BOS, control tokens recognized: ingot_web_start_text) in one start, which is the
// prefill, then N_GEN greedy tokens by ingot_web_next (each samples a token, then steps it, as the
// page does); one JSON line with the token counts, the seconds of each phase and the ids.
'use strict';
const fs = require('fs');
const path = require('path');

const [glue, gguf, prompt, count] = process.argv.slice(2);
const createIngot = require(path.resolve(glue));
createIngot({wasmBinary: fs.readFileSync(glue.replace(/\.js$/, '.wasm'))}).then((M) => {
  const call = (name, returns, types, args) => M.ccall(name, returns, types, args);
  const n_gen = Number(count);
  M.FS.writeFile('/model.gguf', fs.readFileSync(gguf));
  if (call('ingot_web_load', 'number', ['string', 'number'], ['/model.gguf', 0]) !== 0) {
    console.error(call('ingot_web_error', 'string', [], []));
    process.exit(1);
  }
  M.FS.unlink('/model.gguf');
  const t0 = performance.now();
  const n = call('ingot_web_start_text', 'number', ['string', 'number', 'number', 'number'], [prompt, n_gen, 0, 0]);
  const t1 = performance.now();
  const ids = [];
  for (;;) {
    const ptr = call('ingot_web_next', 'number', [], []);
    if (!ptr) break;
    const id = call('ingot_web_token', 'number', [], []);
    if (id >= 0) ids.push(id);
  }
  const t2 = performance.now();
  console.log(JSON.stringify({prompt_tokens: n, prefill_s: (t1 - t0) / 1000, ids, generated: ids.length,
                              decode_s: (t2 - t1) / 1000}));
});

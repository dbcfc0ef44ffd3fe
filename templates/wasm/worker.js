// worker.js — runs the model's WebAssembly module (ingot.js, ingot.wasm) off the page's thread, so
// that the page stays responsive while a step computes. The page (chat.js) sends it messages:
//   {type: 'load', bytes: ArrayBuffer, ctx}          the GGUF's bytes, the KV cache's tokens (0: 2048)
//   {type: 'chat', messages, maxTokens, temperature, seed}
//   {type: 'stop'}                                    ends the answer being generated
// and it answers with {type: 'loaded', info}, {type: 'prompt', tokens}, {type: 'token', text, id}
// per generated token (id -1: the answer's trailing bytes, no token of their own),
// {type: 'done', tokens, seconds}, or {type: 'error', error}.
// The entry points are templates/wasm/ingot_web.c's.
importScripts('ingot.js');

let module = null;
let generating = false;
let stopRequested = false;

function call(name, returns, types, args) {
  return module.ccall(name, returns, types, args);
}
function lastError() {
  return call('ingot_web_error', 'string', [], []);
}

async function load(bytes, ctx) {
  if (!module) module = await createIngot();
  // the loader maps a file: the bytes go into Emscripten's in-memory file system, and once the
  // weights are loaded (copied into the module's memory by the mapping) the file is removed
  module.FS.writeFile('/model.gguf', new Uint8Array(bytes));
  const rc = call('ingot_web_load', 'number', ['string', 'number'], ['/model.gguf', ctx || 0]);
  module.FS.unlink('/model.gguf');
  if (rc !== 0) throw new Error(lastError());
  postMessage({type: 'loaded', info: JSON.parse(call('ingot_web_info', 'string', [], []))});
}

// One token per task, so that a 'stop' message between two tokens is seen.
function generateNext(started, count) {
  if (stopRequested) {
    generating = false;
    postMessage({type: 'done', tokens: count, seconds: (performance.now() - started) / 1000, stopped: true});
    return;
  }
  const ptr = call('ingot_web_next', 'number', [], []);
  if (!ptr) {
    generating = false;
    const error = lastError();
    if (error) postMessage({type: 'error', error});
    else postMessage({type: 'done', tokens: count, seconds: (performance.now() - started) / 1000});
    return;
  }
  postMessage({type: 'token', text: module.UTF8ToString(ptr), id: call('ingot_web_token', 'number', [], [])});
  setTimeout(generateNext, 0, started, count + 1);
}

function chat(msg) {
  if (generating) throw new Error('an answer is still being generated');
  const started = performance.now();
  const n = call('ingot_web_start', 'number', ['string', 'number', 'number', 'number'],
                 [JSON.stringify(msg.messages), msg.maxTokens || 0, msg.temperature || 0, msg.seed || 0]);
  if (n < 0) throw new Error(lastError());
  postMessage({type: 'prompt', tokens: n});
  generating = true;
  stopRequested = false;
  setTimeout(generateNext, 0, started, 0);
}

onmessage = async (event) => {
  const msg = event.data;
  try {
    if (msg.type === 'load') await load(msg.bytes, msg.ctx);
    else if (msg.type === 'chat') chat(msg);
    else if (msg.type === 'stop') stopRequested = true;
  } catch (err) {
    postMessage({type: 'error', error: String(err && err.message ? err.message : err)});
  }
};

// chat.js — the page's script: loads a GGUF into the worker (worker.js), sends it the conversation,
// and shows each answer as its tokens arrive. The model comes from ?model=URL, else model.gguf
// beside the page (./ingot build --target wasm32 links the checkpoint there), else the file picker.
// Other settings from the address: ?temperature=T (default 0.7), ?max_tokens=N (default 512),
// ?ctx=TOKENS (the KV cache; default 2048), ?seed=S.
// A finished answer's element carries data-done and data-ids (its token ids), which tests read.
const $ = (id) => document.getElementById(id);
const params = new URLSearchParams(location.search);
const settings = {
  temperature: Number(params.get('temperature') ?? 0.7),
  maxTokens: Number(params.get('max_tokens') ?? 512),
  ctx: Number(params.get('ctx') ?? 2048),
  seed: Number(params.get('seed') ?? 0),
};
const worker = new Worker('worker.js');
const messages = []; // the conversation so far: {role, content}
let answer = null;   // the answer being generated: {element, text, ids}

function setStatus(text, state) {
  $('status').textContent = text;
  document.body.dataset.state = state;
}

function addMessage(role, text) {
  const element = document.createElement('div');
  element.className = 'message ' + role;
  element.textContent = text;
  $('log').append(element);
  element.scrollIntoView({block: 'end'});
  return element;
}

function setGenerating(on) {
  $('send').disabled = on;
  $('stop').disabled = !on;
}

worker.onmessage = (event) => {
  const msg = event.data;
  if (msg.type === 'loaded') {
    const i = msg.info;
    setStatus(`${i.name}: ${i.arch}, ${i.weights}; context ${i.context} tokens, KV ${i.kv_dtype}, ${i.isa}`, 'ready');
    $('send').disabled = false;
    $('prompt').focus();
  } else if (msg.type === 'prompt') {
    setStatus(`reading ${msg.tokens} tokens…`, 'busy');
  } else if (msg.type === 'token') {
    answer.text += msg.text;
    if (msg.id >= 0) answer.ids.push(msg.id);
    answer.element.textContent = answer.text;
    answer.element.scrollIntoView({block: 'end'});
  } else if (msg.type === 'done') {
    answer.element.dataset.ids = answer.ids.join(',');
    answer.element.dataset.done = '1';
    messages.push({role: 'assistant', content: answer.text});
    const rate = msg.tokens / Math.max(msg.seconds, 1e-3);
    setStatus(`${msg.tokens} tokens in ${msg.seconds.toFixed(1)} s (${rate.toFixed(1)} tokens/s)` +
              (msg.stopped ? ', stopped' : ''), 'ready');
    answer = null;
    setGenerating(false);
  } else if (msg.type === 'error') {
    setStatus(msg.error, 'error');
    if (answer) {
      messages.pop(); // the turn that failed is not part of the conversation
      answer.element.remove();
      answer = null;
    }
    setGenerating(false);
    $('send').disabled = !document.body.dataset.loaded;
  }
  if (msg.type === 'loaded') document.body.dataset.loaded = '1';
};

function load(bytes, label) {
  setStatus(`loading ${label} (${(bytes.byteLength / 1048576).toFixed(0)} MiB)…`, 'busy');
  worker.postMessage({type: 'load', bytes, ctx: settings.ctx}, [bytes]);
}

async function loadFromUrl(url, quiet) {
  try {
    const response = await fetch(url);
    if (!response.ok) throw new Error(`${url}: HTTP ${response.status}`);
    load(await response.arrayBuffer(), url);
  } catch (err) {
    if (quiet) setStatus('choose a GGUF file to chat with', 'empty');
    else setStatus(String(err.message || err), 'error');
  }
}

function send() {
  const text = $('prompt').value.trim();
  if (!text || answer) return;
  $('prompt').value = '';
  messages.push({role: 'user', content: text});
  addMessage('user', text);
  answer = {element: addMessage('assistant', ''), text: '', ids: []};
  setGenerating(true);
  worker.postMessage({type: 'chat', messages, maxTokens: settings.maxTokens, temperature: settings.temperature,
                      seed: settings.seed});
}

$('file').addEventListener('change', async () => {
  const file = $('file').files[0];
  if (!file) return;
  setStatus(`reading ${file.name}…`, 'busy');
  load(await file.arrayBuffer(), file.name);
});
$('send').addEventListener('click', send);
$('stop').addEventListener('click', () => worker.postMessage({type: 'stop'}));
$('prompt').addEventListener('keydown', (event) => {
  if (event.key === 'Enter' && !event.shiftKey) {
    event.preventDefault();
    send();
  }
});

if (params.get('model')) loadFromUrl(params.get('model'), false);
else loadFromUrl('model.gguf', true);

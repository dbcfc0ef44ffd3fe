/* chat.h — the model's chat template (chat_ prefix).
 *
 * Found where the checkpoint keeps it: GGUF metadata tokenizer.chat_template,
 * or "chat_template" in the tokenizer_config.json beside a safetensors
 * checkpoint (a string, or a list of {name, template} of which "default" is
 * taken). Rendered by the jinja interpreter with Hugging Face's lexer options
 * (trim_blocks, lstrip_blocks) and HF's context: messages, tools,
 * documents (None), add_generation_prompt, bos_token, eos_token. A model without a template
 * gets ChatML, which Hugging Face used as its default.
 */
#ifndef INGOT_CHAT_H
#define INGOT_CHAT_H

#include <cjson/cJSON.h>
#include <stddef.h>

#include "tokenizer.h"
#include "weights.h"

typedef struct chat_template chat_template;

/* NULL and err filled if a template exists but does not parse. */
chat_template *chat_load(const wt_file *w, const tok_tokenizer *tok, char *err, size_t errlen);
void chat_free(chat_template *c);
/* Where the template came from: "gguf", "tokenizer_config.json" or "builtin ChatML". */
const char *chat_source(const chat_template *c);
/* 1 when the model has no template of its own and ChatML is used. */
int chat_is_builtin(const chat_template *c);

/* The template's source text. */
const char *chat_text(const chat_template *c);

/* Renders messages (an array of {role, content} objects with string content;
 * assistant turns may carry tool_calls, tool turns tool_call_id) followed by
 * the assistant's generation prompt, with tools (an OpenAI tools array, or
 * NULL for None) in the context. Returns a malloc'd string, or NULL with err
 * filled; *user_error = 1 when the template itself rejected the conversation
 * (raise_exception: the client's fault, a 400). */
char *chat_render(const chat_template *c, const cJSON *messages, const cJSON *tools, int *user_error, char *err,
                  size_t errlen);

/* chat_render, plus where the message contents lie in the result: *plain
 * (malloc'd, sorted, disjoint; *n_plain of them, possibly none) are the byte
 * ranges that came from a content rather than from the template, for
 * tok_encode_spans. */
char *chat_render_prompt(const chat_template *c, const cJSON *messages, const cJSON *tools, tok_span **plain,
                         size_t *n_plain, int *user_error, char *err, size_t errlen);

/* Adds to *plain (as chat_render_prompt returns it) every occurrence in text
 * of each of strs[0..n), as given and as JSON writes it inside a string
 * (templates render tool definitions and call arguments with tojson), so
 * those bytes stay text too. Overlapping ranges are merged. 0, or -1 on out
 * of memory (*plain unchanged). */
int chat_protect(const char *text, const char *const *strs, size_t n, tok_span **plain, size_t *n_plain);

#endif

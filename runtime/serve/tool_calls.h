/* tool_calls.h — finding tool calls in generated text (tc_ prefix).
 *
 * Models write a tool call as markup around JSON, in one of a few formats
 * (tc_format). The format of a model is chosen from its chat template
 * (tc_detect): the template that renders tool calls in the history shows the
 * markup the model was trained to write.
 *
 * tc_parser splits a generation, fed in pieces as it streams, into content
 * (text outside any call, released as soon as it cannot be the start of a
 * call) and complete calls (a name and the arguments as a JSON string). A
 * call's markup never reaches the content; markup that does not hold a valid
 * call (a missing name, JSON that does not parse) is given back as content,
 * byte for byte. Whitespace between content and a call is dropped, so a reply
 * that is only calls has no content.
 */
#ifndef INGOT_TOOL_CALLS_H
#define INGOT_TOOL_CALLS_H

#include <cjson/cJSON.h>
#include <stddef.h>
#include <stdint.h>

#include "openai.h"

typedef enum {
    TC_HERMES,  /* <tool_call>{"name": ..., "arguments": {...}}</tool_call>, one per call (Hermes, Qwen, SmolLM3) */
    TC_LLAMA3,  /* {"name": ..., "parameters": {...}} as the whole reply, optionally after <|python_tag|>;
                   several calls separated by ';' (Llama 3.1 / 3.2 / 3.3) */
    TC_MISTRAL, /* [TOOL_CALLS][{"name": ..., "arguments": {...}}, ...] (Mistral v0.3 and later) */
} tc_format;

/* "hermes", "llama3_json", "mistral". */
const char *tc_format_name(tc_format f);

/* The format a chat template's model writes, by what the template contains
 * (first match wins):
 *   "[TOOL_CALLS]"                      -> TC_MISTRAL
 *   "<|python_tag|>" or "ipython"       -> TC_LLAMA3
 *   anything else                       -> TC_HERMES
 * *native: 1 when the template renders tools itself (it mentions "tools"),
 * 0 when the server has to describe the tools in a system message of its own
 * (tool_prompt.h), which asks for the Hermes format. */
tc_format tc_detect(const char *template_src, int *native);

/* The control-token spelling that opens a call in format f, or NULL (the
 * server prints that token even where it skips other special tokens). */
const char *tc_open_marker(tc_format f);

typedef enum {
    TC_TEXT,      /* outside a call: scanning for the opening markup */
    TC_START,     /* TC_LLAMA3 only: nothing but whitespace yet, a call may still begin with '{' */
    TC_IN_CALL,   /* after the opening markup: gathering the call's JSON */
    TC_PLAIN,     /* TC_LLAMA3: the reply began with text, so it holds no call */
} tc_state;

typedef struct {
    tc_format fmt;
    tc_state state;
    oai_buf held;      /* TC_TEXT/TC_START: text that may begin a call; TC_IN_CALL: the markup so far */
    size_t body;       /* TC_IN_CALL: offset in held where the JSON starts (after the opening markup) */
    int n_calls;       /* complete calls so far */
    int after_call;    /* the last thing seen was a call: whitespace that follows is dropped */
} tc_parser;

/* What one step released: content text (appended) and complete calls
 * (appended to calls, an array of {"name": string, "arguments": string}). */
typedef struct {
    oai_buf content;
    cJSON *calls;
} tc_out;

void tc_init(tc_parser *p, tc_format f);
void tc_free(tc_parser *p);
/* Feeds n bytes of generated text. 0, or -1 on out of memory. */
int tc_feed(tc_parser *p, const char *text, size_t n, tc_out *out);
/* The generation ended: a call still open is taken if its JSON is complete
 * and valid (models often end on EOS without the closing tag), else given
 * back as content; held text is released (trailing whitespace only when no
 * call was made). */
int tc_finish(tc_parser *p, tc_out *out);

/* A call id: "call_" and 24 alphanumerics, or 9 alphanumerics for
 * TC_MISTRAL (whose templates refuse other ids in the history). rng is a
 * splitmix64 state, advanced. */
void tc_call_id(tc_format f, uint64_t *rng, char out[32]);

#endif

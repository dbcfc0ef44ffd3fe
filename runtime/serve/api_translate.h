/* api_translate.h — what the parsers of the Messages and Responses APIs
 * share (api_ prefix): both build the chat-completions body a request means
 * (a cJSON tree the chat parser, oai_parse_tree, then checks), remembering
 * which of the client's messages or items each chat message came from so that
 * an error names the client's own field.
 */
#ifndef INGOT_API_TRANSLATE_H
#define INGOT_API_TRANSLATE_H

#include <cjson/cJSON.h>
#include <stddef.h>

#include "openai.h"

/* A 400 invalid_request_error "'param' what" naming param; -1. */
int api_bad(oai_error *e, const char *param, const char *what);
/* Every top-level field of root is one of known[0..n): else a 400 naming the
 * first that is not. 0 or -1. */
int api_check_fields(const cJSON *root, const char *const *known, size_t n, oai_error *e);
/* e's param renamed to `to`, in its message as well. */
void api_rename_param(oai_error *e, const char *to);
/* Every `from` in e's message replaced by `to`. */
void api_rename_in_message(oai_error *e, const char *from, const char *to);

/* Chat messages under construction, each with the index of the client's
 * message (item) it came from (-1: the system prompt / instructions). */
typedef struct {
    cJSON *messages;
    int *origin;
    int n, cap;
} api_chat;
/* Appends {"role", "content", "tool_calls"?, "tool_call_id"?}; content and
 * calls (may be NULL) are taken over. 0, or -1 out of memory. */
int api_chat_add(api_chat *c, const char *role, cJSON *content, cJSON *calls, const char *tool_call_id, int origin);
void api_chat_free(api_chat *c);

/* Content given as a string or an array of text blocks ("text",
 * "input_text", "output_text"): a new string or array of {"type": "text"}
 * parts. NULL with a 400 naming param. */
cJSON *api_text_content(const cJSON *v, const char *param, oai_error *e);
/* Appends a text block's text to parts as {"type": "text", "text"}. 0, or -1 with a 400. */
int api_add_text_part(cJSON *parts, const cJSON *block, const char *param, oai_error *e);
/* {"id", "type": "function", "function": {"name", "arguments"}}; arguments
 * (an object or a JSON string) taken over. */
cJSON *api_tool_call(const char *id, const char *name, cJSON *arguments);
/* {"type": "function", "function": {"name", "description"?, "parameters"}}
 * from tool t's name_key and desc_key fields and schema (copied); NULL when
 * its name is not a string. */
cJSON *api_function_tool(const cJSON *t, const char *name_key, const char *desc_key, const cJSON *schema);

#endif

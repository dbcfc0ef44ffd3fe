/* messages_api.h — Anthropic's Messages API on /v1/messages (msg_ prefix).
 *
 * A request is translated into a chat request (messages_request.c): system
 * → a system message, content blocks → contents, tool_use blocks → an
 * assistant's tool_calls, tool_result blocks → tool messages, tools'
 * input_schema → parameters, tool_choice auto/any/tool/none → auto/required/
 * named/none, stop_sequences → stop. It then runs on the same scheduler,
 * template and constrained decoding as /v1/chat/completions.
 *
 * The reply (messages_reply.c) is a message of content blocks (text,
 * tool_use) with its stop_reason, or a stream of message_start,
 * content_block_start/delta/stop per block, message_delta and message_stop.
 * Errors are {"type": "error", "error": {"type", "message"}}.
 */
#ifndef INGOT_MESSAGES_API_H
#define INGOT_MESSAGES_API_H

#include <cjson/cJSON.h>
#include <stddef.h>

#include "openai.h"
#include "output.h"

/* Parses and validates a Messages body of len bytes into r (api
 * OAI_API_MESSAGES, kind OAI_CHAT); count_only: the body of count_tokens,
 * which has no max_tokens. 0 (free with oai_request_free), or -1 with e
 * filled, its param spelled as Anthropic does ("messages.1.content"). */
int msg_parse(const char *body, size_t len, int vocab, int count_only, oai_request *r, oai_error *e);

/* {"type": "error", "error": {"type", "message"}} (malloc'd), the type
 * Anthropic's for e's status; and the same as an SSE "error" event. */
char *msg_error_json(const oai_error *e);
char *msg_error_event(const oai_error *e);

/* The stream's first event: message_start, with the prompt's tokens. */
char *msg_stream_start(const out_request *o);
/* Text and tool calls of the reply as they form; on a stream, as events. */
void msg_text(const out_request *o, out_choice *c, const char *text, size_t n);
void msg_call(const out_request *o, out_choice *c, const cJSON *call);
/* The text block that is open, closed (content_block_stop on a stream). */
void msg_close_text(const out_request *o, out_choice *c);
/* The end: message_delta (stop_reason, output tokens) and message_stop as
 * SSE bytes, or the whole message as JSON. */
char *msg_stream_end(const out_request *o, out_choice *c, const out_summary *s);
cJSON *msg_reply(const out_request *o, out_choice *c, const out_summary *s);

#endif

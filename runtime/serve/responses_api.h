/* responses_api.h — OpenAI's Responses API on /v1/responses (rsp_ prefix).
 *
 * A request is translated into a chat request (responses_request.c): input
 * items → messages (a message item by its role, function_call → an
 * assistant's tool_calls, function_call_output → a tool message),
 * instructions → a system message, previous_response_id → the stored
 * conversation before them (response_store.h), tools and tool_choice →
 * chat tools, text.format → response_format, max_output_tokens → max_tokens.
 *
 * The reply (responses_reply.c) is a response object whose output lists a
 * message item per stretch of text and a function_call item per call, or a
 * stream of response.created, response.in_progress, the output items'
 * events (output_item.added, content_part.added, output_text.delta ... done;
 * function_call_arguments.delta/done) and response.completed (or
 * response.incomplete when max_output_tokens cut it short), each with its
 * sequence_number. Errors are OpenAI's shape, as on the other endpoints.
 */
#ifndef INGOT_RESPONSES_API_H
#define INGOT_RESPONSES_API_H

#include <cjson/cJSON.h>
#include <stddef.h>

#include "openai.h"
#include "output.h"
#include "response_store.h"

/* Parses and validates a Responses body of len bytes into r (api
 * OAI_API_RESPONSES, kind OAI_CHAT, api_echo and api_history set);
 * previous_response_id is looked up in store (may be NULL: none is kept). 0
 * (free with oai_request_free), or -1 with e filled. */
int rsp_parse(const char *body, size_t len, int vocab, rs_store *store, oai_request *r, oai_error *e);

/* The stream's first events: response.created and response.in_progress. */
char *rsp_stream_start(const out_request *o, out_choice *c);
/* Text and tool calls of the reply as they form; on a stream, as events. */
void rsp_text(const out_request *o, out_choice *c, const char *text, size_t n);
void rsp_call(const out_request *o, out_choice *c, const cJSON *call);
/* The message item that is open, closed (its done events on a stream). */
void rsp_close_text(const out_request *o, out_choice *c);
/* The response object at the end (status completed, or incomplete when the
 * length limit cut it short); the output items are taken from c. */
cJSON *rsp_response(const out_request *o, out_choice *c, const out_summary *s);
/* A stream's last event for that object: response.completed or response.incomplete. */
char *rsp_stream_end(out_choice *c, const cJSON *response);
/* A stream's error event, after which it ends. */
char *rsp_error_event(out_choice *c, const oai_error *e);
/* What the store keeps of a finished request: its conversation with the
 * reply appended as an assistant message (malloc'd JSON text). */
char *rsp_conversation(const oai_request *q, const out_choice *c);

#endif

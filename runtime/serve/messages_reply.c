/* messages_reply.c — the reply of a Messages API request: content blocks,
 * their stream events, the stop reason and errors; see messages_api.h.
 *
 * A reply is a list of content blocks in the order the model wrote them:
 * text, then a tool_use block per call, text again if the model went on. A
 * stream sends each block as content_block_start, its deltas and
 * content_block_stop, at the index it has in the final list; the same list
 * (out_choice.blocks) is the non-streamed reply's content.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "messages_api.h"

/* Anthropic's error type for an HTTP status. */
static const char *error_type(int status) {
    switch (status) {
    case 401: return "authentication_error";
    case 403: return "permission_error";
    case 404: return "not_found_error";
    case 413: return "request_too_large";
    case 429: return "rate_limit_error";
    case 503: return "overloaded_error";
    case 504: return "timeout_error";
    default: return status >= 500 ? "api_error" : "invalid_request_error";
    }
}

static cJSON *error_object(const oai_error *e) {
    cJSON *j = cJSON_CreateObject();
    cJSON_AddStringToObject(j, "type", "error");
    cJSON *err = cJSON_AddObjectToObject(j, "error");
    cJSON_AddStringToObject(err, "type", error_type(e->status));
    cJSON_AddStringToObject(err, "message", e->message);
    return j;
}

char *msg_error_json(const oai_error *e) {
    cJSON *j = error_object(e);
    char *s = cJSON_PrintUnformatted(j);
    cJSON_Delete(j);
    return s;
}

char *msg_error_event(const oai_error *e) { return out_sse_event("error", error_object(e)); }

/* A stream event {"type": type, "index": index} to add to. */
static cJSON *block_event(const char *type, int index) {
    cJSON *ev = cJSON_CreateObject();
    cJSON_AddStringToObject(ev, "type", type);
    cJSON_AddNumberToObject(ev, "index", index);
    return ev;
}

static void write_event(const out_request *o, const char *type, cJSON *data) {
    o->write(o->user, out_sse_event(type, data));
}

char *msg_stream_start(const out_request *o) {
    cJSON *ev = cJSON_CreateObject();
    cJSON_AddStringToObject(ev, "type", "message_start");
    cJSON *m = cJSON_AddObjectToObject(ev, "message");
    cJSON_AddStringToObject(m, "id", o->meta->id);
    cJSON_AddStringToObject(m, "type", "message");
    cJSON_AddStringToObject(m, "role", "assistant");
    cJSON_AddStringToObject(m, "model", o->meta->model);
    cJSON_AddArrayToObject(m, "content");
    cJSON_AddNullToObject(m, "stop_reason");
    cJSON_AddNullToObject(m, "stop_sequence");
    cJSON *u = cJSON_AddObjectToObject(m, "usage");
    cJSON_AddNumberToObject(u, "input_tokens", o->prompt_tokens);
    cJSON_AddNumberToObject(u, "output_tokens", 0);
    return out_sse_event("message_start", ev);
}

void msg_text(const out_request *o, out_choice *c, const char *text, size_t n) {
    if (!n) return;
    if (!c->blocks) c->blocks = cJSON_CreateArray();
    const int index = cJSON_GetArraySize(c->blocks);
    if (!c->text_open) {
        c->text_open = 1;
        c->text_from = c->text.len;
        if (o->q->stream) {
            cJSON *ev = block_event("content_block_start", index);
            cJSON *b = cJSON_AddObjectToObject(ev, "content_block");
            cJSON_AddStringToObject(b, "type", "text");
            cJSON_AddStringToObject(b, "text", "");
            write_event(o, "content_block_start", ev);
        }
    }
    oai_buf_add(&c->text, text, n);
    if (o->q->stream) {
        cJSON *ev = block_event("content_block_delta", index);
        cJSON *d = cJSON_AddObjectToObject(ev, "delta");
        cJSON_AddStringToObject(d, "type", "text_delta");
        out_add_text(d, "text", text, n);
        write_event(o, "content_block_delta", ev);
    }
}

void msg_close_text(const out_request *o, out_choice *c) {
    if (!c->text_open) return;
    c->text_open = 0;
    const int index = cJSON_GetArraySize(c->blocks);
    cJSON *b = cJSON_CreateObject();
    cJSON_AddStringToObject(b, "type", "text");
    out_add_text(b, "text", c->text.p + c->text_from, c->text.len - c->text_from);
    cJSON_AddItemToArray(c->blocks, b);
    if (o->q->stream) write_event(o, "content_block_stop", block_event("content_block_stop", index));
}

void msg_call(const out_request *o, out_choice *c, const cJSON *call) {
    msg_close_text(o, c);
    if (!c->blocks) c->blocks = cJSON_CreateArray();
    const int index = cJSON_GetArraySize(c->blocks);
    const char *id, *name, *args;
    out_call_parts(call, &id, &name, &args);
    /* the call parser hands over the arguments as JSON text of an object */
    cJSON *input = cJSON_Parse(args);
    if (!cJSON_IsObject(input)) {
        cJSON_Delete(input);
        input = cJSON_CreateObject();
    }
    cJSON *b = cJSON_CreateObject();
    cJSON_AddStringToObject(b, "type", "tool_use");
    cJSON_AddStringToObject(b, "id", id);
    cJSON_AddStringToObject(b, "name", name);
    if (o->q->stream) {
        cJSON *ev = block_event("content_block_start", index);
        cJSON *start = cJSON_Duplicate(b, 1);
        cJSON_AddObjectToObject(start, "input");
        cJSON_AddItemToObject(ev, "content_block", start);
        write_event(o, "content_block_start", ev);
        ev = block_event("content_block_delta", index);
        cJSON *d = cJSON_AddObjectToObject(ev, "delta");
        cJSON_AddStringToObject(d, "type", "input_json_delta");
        cJSON_AddStringToObject(d, "partial_json", args);
        write_event(o, "content_block_delta", ev);
        write_event(o, "content_block_stop", block_event("content_block_stop", index));
    }
    cJSON_AddItemToObject(b, "input", input);
    cJSON_AddItemToArray(c->blocks, b);
}

/* The Messages API's stop_reason for how the choice ended. */
static const char *stop_reason(const out_summary *s) {
    if (!strcmp(s->finish_reason, "tool_calls")) return "tool_use";
    if (!strcmp(s->finish_reason, "length")) return "max_tokens";
    return s->stop_sequence ? "stop_sequence" : "end_turn";
}

static void add_stop(cJSON *o, const out_summary *s) {
    cJSON_AddStringToObject(o, "stop_reason", stop_reason(s));
    if (s->stop_sequence) cJSON_AddStringToObject(o, "stop_sequence", s->stop_sequence);
    else cJSON_AddNullToObject(o, "stop_sequence");
}

char *msg_stream_end(const out_request *o, out_choice *c, const out_summary *s) {
    msg_close_text(o, c);
    cJSON *ev = cJSON_CreateObject();
    cJSON_AddStringToObject(ev, "type", "message_delta");
    add_stop(cJSON_AddObjectToObject(ev, "delta"), s);
    cJSON_AddNumberToObject(cJSON_AddObjectToObject(ev, "usage"), "output_tokens", s->completion_tokens);
    char *delta = out_sse_event("message_delta", ev);
    cJSON *stop = cJSON_CreateObject();
    cJSON_AddStringToObject(stop, "type", "message_stop");
    return out_concat(delta, out_sse_event("message_stop", stop));
}

cJSON *msg_reply(const out_request *o, out_choice *c, const out_summary *s) {
    msg_close_text(o, c);
    cJSON *m = cJSON_CreateObject();
    cJSON_AddStringToObject(m, "id", o->meta->id);
    cJSON_AddStringToObject(m, "type", "message");
    cJSON_AddStringToObject(m, "role", "assistant");
    cJSON_AddStringToObject(m, "model", o->meta->model);
    cJSON_AddItemToObject(m, "content", c->blocks ? c->blocks : cJSON_CreateArray());
    c->blocks = NULL;
    add_stop(m, s);
    cJSON *u = cJSON_AddObjectToObject(m, "usage");
    cJSON_AddNumberToObject(u, "input_tokens", s->prompt_tokens);
    cJSON_AddNumberToObject(u, "output_tokens", s->completion_tokens);
    return m;
}

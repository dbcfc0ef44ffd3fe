/* responses_reply.c — the reply of a Responses API request: the response
 * object, its output items and their stream events; see responses_api.h.
 *
 * The output is a list of items in the order the model wrote them: a message
 * item per stretch of text, a function_call item per call. A stream sends
 * each item as output_item.added, its deltas and its done events at the
 * output_index it has in the final list; the same list (out_choice.blocks)
 * is the response object's output. Every event carries the next
 * sequence_number of the response (out_choice.seq).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "responses_api.h"

static cJSON *new_event(const char *type) {
    cJSON *ev = cJSON_CreateObject();
    cJSON_AddStringToObject(ev, "type", type);
    return ev;
}

/* The event as SSE bytes, numbered. */
static char *event_bytes(out_choice *c, cJSON *ev) {
    cJSON_AddNumberToObject(ev, "sequence_number", c->seq++);
    char type[64];
    snprintf(type, sizeof type, "%s", cJSON_GetObjectItem(ev, "type")->valuestring);
    return out_sse_event(type, ev);
}

static void write_event(const out_request *o, out_choice *c, cJSON *ev) { o->write(o->user, event_bytes(c, ev)); }

/* A response object with status and output (taken over), and the request's echoed fields. */
static cJSON *response_object(const out_request *o, const char *status, cJSON *output) {
    cJSON *r = cJSON_CreateObject();
    cJSON_AddStringToObject(r, "id", o->meta->id);
    cJSON_AddStringToObject(r, "object", "response");
    cJSON_AddNumberToObject(r, "created_at", (double)o->meta->created);
    cJSON_AddStringToObject(r, "status", status);
    cJSON_AddNullToObject(r, "error");
    cJSON_AddNullToObject(r, "incomplete_details");
    cJSON_AddStringToObject(r, "model", o->meta->model);
    cJSON_AddItemToObject(r, "output", output);
    for (const cJSON *f = o->q->api_echo ? o->q->api_echo->child : NULL; f; f = f->next)
        cJSON_AddItemToObject(r, f->string, cJSON_Duplicate(f, 1));
    return r;
}

char *rsp_stream_start(const out_request *o, out_choice *c) {
    cJSON *created = new_event("response.created");
    cJSON_AddItemToObject(created, "response", response_object(o, "in_progress", cJSON_CreateArray()));
    cJSON *progress = new_event("response.in_progress");
    cJSON_AddItemToObject(progress, "response", response_object(o, "in_progress", cJSON_CreateArray()));
    char *first = event_bytes(c, created);
    return out_concat(first, event_bytes(c, progress));
}

/* {"item_id", "output_index", "content_index": 0} of the open message item's events. */
static cJSON *text_event(const char *type, const out_choice *c, int output_index) {
    cJSON *ev = new_event(type);
    cJSON_AddStringToObject(ev, "item_id", c->item_id);
    cJSON_AddNumberToObject(ev, "output_index", output_index);
    cJSON_AddNumberToObject(ev, "content_index", 0);
    return ev;
}

static cJSON *output_text_part(const char *text, size_t n) {
    cJSON *p = cJSON_CreateObject();
    cJSON_AddStringToObject(p, "type", "output_text");
    out_add_text(p, "text", text, n);
    cJSON_AddArrayToObject(p, "annotations");
    cJSON_AddArrayToObject(p, "logprobs");
    return p;
}

static cJSON *message_item(const out_choice *c, const char *status, cJSON *part) {
    cJSON *it = cJSON_CreateObject();
    cJSON_AddStringToObject(it, "id", c->item_id);
    cJSON_AddStringToObject(it, "type", "message");
    cJSON_AddStringToObject(it, "status", status);
    cJSON_AddStringToObject(it, "role", "assistant");
    cJSON *content = cJSON_AddArrayToObject(it, "content");
    if (part) cJSON_AddItemToArray(content, part);
    return it;
}

void rsp_text(const out_request *o, out_choice *c, const char *text, size_t n) {
    if (!n) return;
    if (!c->blocks) c->blocks = cJSON_CreateArray();
    const int index = cJSON_GetArraySize(c->blocks);
    if (!c->text_open) {
        c->text_open = 1;
        c->text_from = c->text.len;
        /* msg_ + the response id's random part + the item's place: unique, and the same in every event */
        const char *rid = strchr(o->meta->id, '_');
        snprintf(c->item_id, sizeof c->item_id, "msg_%.24s_%d", rid ? rid + 1 : o->meta->id, index);
        if (o->q->stream) {
            cJSON *ev = new_event("response.output_item.added");
            cJSON_AddNumberToObject(ev, "output_index", index);
            cJSON_AddItemToObject(ev, "item", message_item(c, "in_progress", NULL));
            write_event(o, c, ev);
            ev = text_event("response.content_part.added", c, index);
            cJSON_AddItemToObject(ev, "part", output_text_part("", 0));
            write_event(o, c, ev);
        }
    }
    oai_buf_add(&c->text, text, n);
    if (o->q->stream) {
        cJSON *ev = text_event("response.output_text.delta", c, index);
        out_add_text(ev, "delta", text, n);
        cJSON_AddArrayToObject(ev, "logprobs");
        write_event(o, c, ev);
    }
}

void rsp_close_text(const out_request *o, out_choice *c) {
    if (!c->text_open) return;
    c->text_open = 0;
    const int index = cJSON_GetArraySize(c->blocks);
    const char *text = c->text.p + c->text_from;
    const size_t n = c->text.len - c->text_from;
    if (o->q->stream) {
        cJSON *ev = text_event("response.output_text.done", c, index);
        out_add_text(ev, "text", text, n);
        cJSON_AddArrayToObject(ev, "logprobs");
        write_event(o, c, ev);
        ev = text_event("response.content_part.done", c, index);
        cJSON_AddItemToObject(ev, "part", output_text_part(text, n));
        write_event(o, c, ev);
        ev = new_event("response.output_item.done");
        cJSON_AddNumberToObject(ev, "output_index", index);
        cJSON_AddItemToObject(ev, "item", message_item(c, "completed", output_text_part(text, n)));
        write_event(o, c, ev);
    }
    cJSON_AddItemToArray(c->blocks, message_item(c, "completed", output_text_part(text, n)));
}

static cJSON *call_item(const char *id, const char *call_id, const char *name, const char *args, const char *status) {
    cJSON *it = cJSON_CreateObject();
    cJSON_AddStringToObject(it, "id", id);
    cJSON_AddStringToObject(it, "type", "function_call");
    cJSON_AddStringToObject(it, "status", status);
    cJSON_AddStringToObject(it, "arguments", args);
    cJSON_AddStringToObject(it, "call_id", call_id);
    cJSON_AddStringToObject(it, "name", name);
    return it;
}

void rsp_call(const out_request *o, out_choice *c, const cJSON *call) {
    rsp_close_text(o, c);
    if (!c->blocks) c->blocks = cJSON_CreateArray();
    const int index = cJSON_GetArraySize(c->blocks);
    const char *call_id, *name, *args;
    out_call_parts(call, &call_id, &name, &args);
    char id[48];
    snprintf(id, sizeof id, "fc_%.40s", strncmp(call_id, "call_", 5) ? call_id : call_id + 5);
    if (o->q->stream) {
        cJSON *ev = new_event("response.output_item.added");
        cJSON_AddNumberToObject(ev, "output_index", index);
        cJSON_AddItemToObject(ev, "item", call_item(id, call_id, name, "", "in_progress"));
        write_event(o, c, ev);
        ev = new_event("response.function_call_arguments.delta");
        cJSON_AddStringToObject(ev, "item_id", id);
        cJSON_AddNumberToObject(ev, "output_index", index);
        cJSON_AddStringToObject(ev, "delta", args);
        write_event(o, c, ev);
        ev = new_event("response.function_call_arguments.done");
        cJSON_AddStringToObject(ev, "item_id", id);
        cJSON_AddNumberToObject(ev, "output_index", index);
        cJSON_AddStringToObject(ev, "name", name);
        cJSON_AddStringToObject(ev, "arguments", args);
        write_event(o, c, ev);
        ev = new_event("response.output_item.done");
        cJSON_AddNumberToObject(ev, "output_index", index);
        cJSON_AddItemToObject(ev, "item", call_item(id, call_id, name, args, "completed"));
        write_event(o, c, ev);
    }
    cJSON_AddItemToArray(c->blocks, call_item(id, call_id, name, args, "completed"));
}

cJSON *rsp_response(const out_request *o, out_choice *c, const out_summary *s) {
    rsp_close_text(o, c);
    const int cut = !strcmp(s->finish_reason, "length");
    cJSON *r = response_object(o, cut ? "incomplete" : "completed", c->blocks ? c->blocks : cJSON_CreateArray());
    c->blocks = NULL;
    if (cut) {
        cJSON *d = cJSON_CreateObject();
        cJSON_AddStringToObject(d, "reason", "max_output_tokens");
        cJSON_ReplaceItemInObject(r, "incomplete_details", d);
    }
    cJSON *u = cJSON_AddObjectToObject(r, "usage");
    cJSON_AddNumberToObject(u, "input_tokens", s->prompt_tokens);
    cJSON_AddNumberToObject(cJSON_AddObjectToObject(u, "input_tokens_details"), "cached_tokens", 0);
    cJSON_AddNumberToObject(u, "output_tokens", s->completion_tokens);
    cJSON_AddNumberToObject(cJSON_AddObjectToObject(u, "output_tokens_details"), "reasoning_tokens", 0);
    cJSON_AddNumberToObject(u, "total_tokens", s->prompt_tokens + s->completion_tokens);
    return r;
}

char *rsp_stream_end(out_choice *c, const cJSON *response) {
    const cJSON *status = cJSON_GetObjectItem(response, "status");
    cJSON *ev = new_event(!strcmp(status->valuestring, "completed") ? "response.completed" : "response.incomplete");
    cJSON_AddItemToObject(ev, "response", cJSON_Duplicate(response, 1));
    return event_bytes(c, ev);
}

char *rsp_error_event(out_choice *c, const oai_error *e) {
    cJSON *ev = new_event("error");
    if (e->code) cJSON_AddStringToObject(ev, "code", e->code);
    else cJSON_AddNullToObject(ev, "code");
    cJSON_AddStringToObject(ev, "message", e->message);
    if (e->param[0]) cJSON_AddStringToObject(ev, "param", e->param);
    else cJSON_AddNullToObject(ev, "param");
    return event_bytes(c, ev);
}

char *rsp_conversation(const oai_request *q, const out_choice *c) {
    cJSON *conv = q->api_history ? cJSON_Duplicate(q->api_history, 1) : cJSON_CreateArray();
    cJSON *m = cJSON_CreateObject();
    cJSON_AddStringToObject(m, "role", "assistant");
    out_add_text(m, "content", c->text.p, c->text.len);
    if (c->calls && cJSON_GetArraySize(c->calls)) cJSON_AddItemToObject(m, "tool_calls", cJSON_Duplicate(c->calls, 1));
    cJSON_AddItemToArray(conv, m);
    char *s = cJSON_PrintUnformatted(conv);
    cJSON_Delete(conv);
    return s;
}

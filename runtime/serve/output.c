/* output.c — a generation's output, token by token; see output.h.
 *
 * The path of one token's text: out_token detokenizes it, feed_text passes
 * it through the stop-string matcher (oai_stop_feed), release_text through
 * the tool-call parser (tc_feed), and emit_text writes what is left: a
 * stream chunk (oai_chunk) or the reply's text.
 */
#include "output.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "messages_api.h"
#include "responses_api.h"

/* The Messages and Responses APIs write content blocks (output items) of their own. */
static int own_blocks(const out_request *o) {
    return o->q->api == OAI_API_MESSAGES || o->q->api == OAI_API_RESPONSES;
}

char *out_sse_event(const char *name, cJSON *data) {
    char *json = cJSON_PrintUnformatted(data);
    cJSON_Delete(data);
    if (!json) return NULL;
    const size_t n = strlen(name) + strlen(json) + sizeof "event: \ndata: \n\n";
    char *ev = malloc(n);
    if (ev) snprintf(ev, n, "event: %s\ndata: %s\n\n", name, json);
    free(json);
    return ev;
}

void out_call_parts(const cJSON *call, const char **id, const char **name, const char **args) {
    const cJSON *fn = cJSON_GetObjectItem(call, "function");
    *id = cJSON_GetObjectItem(call, "id")->valuestring;
    *name = cJSON_GetObjectItem(fn, "name")->valuestring;
    *args = cJSON_GetObjectItem(fn, "arguments")->valuestring;
}

char *out_concat(char *a, char *b) {
    char *both = NULL;
    if (a && b && (both = malloc(strlen(a) + strlen(b) + 1))) {
        strcpy(both, a);
        strcat(both, b);
    }
    free(a);
    free(b);
    return both;
}

void out_add_text(cJSON *o, const char *key, const char *s, size_t n) {
    char *clean = oai_utf8_clean(s ? s : "", s ? n : 0);
    cJSON_AddStringToObject(o, key, clean ? clean : "");
    free(clean);
}

void out_choice_init(const out_request *o, out_choice *c) {
    const oai_request *q = o->q;
    tok_stream_init(&c->ts);
    tc_init(&c->tc, o->tool_format);
    c->stop_index = -1;
    if (q->kind != OAI_CHAT || !q->tools || q->tool_choice == OAI_TOOLS_NONE) return;
    c->tools = 1;
    c->calls = cJSON_CreateArray();
    /* a constrained call whose opening markup is a control token: the grammar starts after it */
    if (q->tool_choice != OAI_TOOLS_AUTO && o->tool_marker_id >= 0) {
        const char *marker = tc_open_marker(o->tool_format);
        tc_out t = {.calls = cJSON_CreateArray()};
        tc_feed(&c->tc, marker, strlen(marker), &t);
        oai_buf_free(&t.content);
        cJSON_Delete(t.calls);
    }
}

void out_choice_free(out_choice *c) {
    oai_buf_free(&c->held);
    oai_buf_free(&c->text);
    cJSON_Delete(c->logprobs);
    tc_free(&c->tc);
    cJSON_Delete(c->calls);
    cJSON_Delete(c->blocks);
}

/* Releases text of choice i: to the stream as a chunk, or to the reply. */
static void emit_text(const out_request *o, out_choice *c, int i, const char *text, size_t n, cJSON *lp,
                      const char *finish) {
    c->emitted += n;
    if (own_blocks(o)) {
        cJSON_Delete(lp); /* logprobs are not offered on these APIs */
        if (o->q->api == OAI_API_MESSAGES) msg_text(o, c, text, n);
        else rsp_text(o, c, text, n);
    } else if (o->q->stream) {
        if (!n && !lp && !finish && c->sent_first) return;
        o->write(o->user, oai_chunk(o->meta, i, !c->sent_first, text, n, lp, finish, o->q->include_usage));
        c->sent_first = 1;
    } else {
        oai_buf_add(&c->text, text, n);
        if (lp) cJSON_Delete(lp);
    }
}

/* Text past the stop-string matcher: straight out, or through the tool-call
 * parser (final: the choice's text is complete, flush it). Calls go out as
 * delta.tool_calls chunks (name first, then the arguments) or are kept for
 * the reply. Returns 1 when the choice has made the one call that
 * parallel_tool_calls=false allows. */
static int release_text(const out_request *o, out_choice *c, int i, const char *text, size_t n, cJSON *lp,
                        int final) {
    const oai_request *q = o->q;
    if (!c->tools) {
        emit_text(o, c, i, text, n, lp, NULL);
        return 0;
    }
    tc_out t = {.calls = cJSON_CreateArray()};
    tc_feed(&c->tc, text, n, &t);
    if (final) tc_finish(&c->tc, &t);
    /* a constrained reply is nothing but calls: what is not a complete call
     * (a call cut short by max_tokens) is dropped, never shown as content */
    const int calls_only = q->tool_choice == OAI_TOOLS_REQUIRED || q->tool_choice == OAI_TOOLS_NAMED;
    emit_text(o, c, i, t.content.p ? t.content.p : "", calls_only ? 0 : t.content.len, lp, NULL);
    const cJSON *call;
    cJSON_ArrayForEach(call, t.calls) {
        const int k = cJSON_GetArraySize(c->calls);
        if (!q->parallel_tool_calls && k >= 1) break;
        const char *name = cJSON_GetObjectItem(call, "name")->valuestring;
        const char *args = cJSON_GetObjectItem(call, "arguments")->valuestring;
        char id[32];
        tc_call_id(o->tool_format, o->rng, id);
        if (q->stream && !own_blocks(o)) {
            o->write(o->user, oai_tool_call_chunk(o->meta, i, !c->sent_first, k, id, name, "", q->include_usage));
            c->sent_first = 1;
            o->write(o->user, oai_tool_call_chunk(o->meta, i, 0, k, NULL, NULL, args, q->include_usage));
        }
        cJSON *made = oai_tool_call(id, name, args);
        cJSON_AddItemToArray(c->calls, made);
        if (q->api == OAI_API_MESSAGES) msg_call(o, c, made);
        else if (q->api == OAI_API_RESPONSES) rsp_call(o, c, made);
    }
    oai_buf_free(&t.content);
    cJSON_Delete(t.calls);
    return !q->parallel_tool_calls && cJSON_GetArraySize(c->calls) >= 1;
}

/* Passes new text through the stop-string matcher; returns 1 on a stop, 2
 * when the choice made its one allowed tool call. */
static int feed_text(const out_request *o, out_choice *c, int i, const char *text, size_t n, cJSON *lp) {
    oai_buf out = {0};
    oai_buf_add(&out, "", 0);
    const int stopped = oai_stop_feed(o->q->stop, o->q->n_stop, &c->held, text, n, &out);
    if (stopped) c->stop_index = stopped - 1;
    const int one_call = release_text(o, c, i, out.p ? out.p : "", out.len, lp, stopped);
    oai_buf_free(&out);
    return stopped ? 1 : one_call ? 2 : 0;
}

/* The token's logprobs: a stream's go with its chunk (returned), a reply's
 * into the choice's accumulator (NULL returned). */
static cJSON *token_logprobs(const out_request *o, out_choice *c, const sched_event *ev, const char *piece,
                             size_t plen) {
    const oai_request *q = o->q;
    oai_token_lp t = {.piece = piece, .piece_len = piece ? plen : 0, .logprob = ev->logprob};
    t.n_top = ev->n_top < q->top_logprobs ? ev->n_top : q->top_logprobs;
    for (int k = 0; k < t.n_top; k++) {
        t.top_piece[k] = tok_piece(o->tok, ev->top_ids[k], &t.top_len[k]);
        if (!t.top_piece[k]) t.top_len[k] = 0;
        t.top_logprob[k] = ev->top_logprobs[k];
    }
    if (q->stream) {
        cJSON *lp = oai_logprobs_new(q->kind);
        oai_logprobs_add(q->kind, lp, &t, c->emitted + c->held.len);
        return lp;
    }
    if (!c->logprobs) c->logprobs = oai_logprobs_new(q->kind);
    oai_logprobs_add(q->kind, c->logprobs, &t, c->emitted + c->held.len);
    return NULL;
}

int out_token(const out_request *o, out_choice *c, int i, const sched_event *ev) {
    size_t plen = 0;
    const char *piece = tok_piece(o->tok, ev->token, &plen);
    /* worst case every byte (and the pending ones) becomes a 3-byte U+FFFD */
    const size_t cap = 3 * (plen + sizeof c->ts.pending) + 1;
    char small[512];
    char *buf = cap <= sizeof small ? small : malloc(cap);
    size_t n = buf ? tok_stream_push(&c->ts, o->tok, ev->token, 1, buf, cap) : 0;
    cJSON *lp = o->q->logprobs ? token_logprobs(o, c, ev, piece, plen) : NULL;
    int stopped = feed_text(o, c, i, buf ? buf : "", n, lp);
    if (buf != small) free(buf);
    /* the token that opens a call is a control token, which the detokenizer skips */
    if (!stopped && c->tools && ev->token == o->tool_marker_id) {
        const char *marker = tc_open_marker(o->tool_format);
        stopped = feed_text(o, c, i, marker, strlen(marker), NULL);
    }
    /* a stop string ends the text (the parser was flushed); so does the one allowed call */
    if (stopped == 2) release_text(o, c, i, "", 0, NULL, 1);
    return stopped != 0;
}

int out_flush(const out_request *o, out_choice *c, int i) {
    char tail[16];
    const size_t n = tok_stream_flush(&c->ts, tail, sizeof tail);
    const int stopped = feed_text(o, c, i, tail, n, NULL);
    if (!stopped && (c->held.len || c->tools)) {
        release_text(o, c, i, c->held.p ? c->held.p : "", c->held.len, NULL, 1);
        c->held.len = 0;
    }
    return stopped != 0;
}

const char *out_finish_reason(const out_choice *c, const char *reason) {
    if (c->calls && cJSON_GetArraySize(c->calls) > 0 && !strcmp(reason, "stop")) return "tool_calls";
    return reason;
}

void out_end_chunk(const out_request *o, out_choice *c, int i, const char *finish_reason) {
    if (o->q->api == OAI_API_MESSAGES) msg_close_text(o, c);
    else if (o->q->api == OAI_API_RESPONSES) rsp_close_text(o, c);
    else if (o->q->stream) emit_text(o, c, i, "", 0, NULL, finish_reason);
}

char *out_stream_start(const out_request *o, out_choice *c) {
    if (o->q->api == OAI_API_MESSAGES) return msg_stream_start(o);
    if (o->q->api == OAI_API_RESPONSES) return rsp_stream_start(o, c);
    return NULL;
}

void out_response_add(cJSON *resp, const out_request *o, out_choice *c, int i, const char *finish_reason) {
    oai_response_add_choice(resp, o->q->kind, i, c->text.p, c->text.len, c->logprobs, finish_reason);
    c->logprobs = NULL; /* taken over */
    if (c->calls && cJSON_GetArraySize(c->calls) > 0) {
        oai_response_set_tool_calls(resp, i, c->calls);
        c->calls = NULL;
    }
}

char *out_error_event(const out_request *o, out_choice *c, const oai_error *e) {
    if (o->q->api == OAI_API_MESSAGES) return msg_error_event(e);
    if (o->q->api == OAI_API_RESPONSES) return rsp_error_event(c, e);
    char *j = oai_error_json(e);
    if (!j) return NULL;
    const size_t n = strlen(j) + sizeof "data: \n\n";
    char *event = malloc(n);
    if (event) snprintf(event, n, "data: %s\n\n", j);
    free(j);
    return event;
}

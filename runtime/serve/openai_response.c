/* openai_response.c — the OpenAI wire format of what a request gets back
 * (see openai.h): stop strings over streamed text, logprobs objects, whole
 * responses, and the SSE chunks of a stream. Text the model wrote may be any
 * bytes; every string written here is cleaned to valid UTF-8 first
 * (oai_utf8_clean), as JSON needs.
 */
#include "openai.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* ---- stop strings -------------------------------------------------------- */

int oai_stop_feed(char *const *stop, int n_stop, oai_buf *held, const char *text, size_t n, oai_buf *out) {
    if (n_stop == 0) {
        oai_buf_add(out, text, n);
        return 0;
    }
    oai_buf_add(held, text, n);
    if (!held->p) return 0;
    /* earliest full match: emit what precedes it, drop the rest */
    size_t best = SIZE_MAX;
    int which = 0;
    for (int i = 0; i < n_stop; i++) {
        const char *m = memmem(held->p, held->len, stop[i], strlen(stop[i]));
        if (m && (size_t)(m - held->p) < best) {
            best = (size_t)(m - held->p);
            which = i;
        }
    }
    if (best != SIZE_MAX) {
        oai_buf_add(out, held->p, best);
        held->len = 0;
        held->p[0] = 0;
        return 1 + which;
    }
    /* longest suffix of held that is a proper prefix of a stop string stays held */
    size_t keep = 0;
    for (int i = 0; i < n_stop; i++) {
        const size_t sl = strlen(stop[i]);
        size_t k = sl - 1 < held->len ? sl - 1 : held->len;
        for (; k > keep; k--)
            if (!memcmp(held->p + held->len - k, stop[i], k)) break;
        if (k > keep) keep = k;
    }
    const size_t emit = held->len - keep;
    oai_buf_add(out, held->p, emit);
    memmove(held->p, held->p + emit, keep);
    held->len = keep;
    held->p[keep] = 0;
    return 0;
}

/* ---- responses ----------------------------------------------------------- */

static void add_text(cJSON *o, const char *key, const char *s, size_t n) {
    char *c = oai_utf8_clean(s ? s : "", s ? n : 0);
    cJSON_AddStringToObject(o, key, c ? c : "");
    free(c);
}

static cJSON *bytes_array(const char *s, size_t n) {
    cJSON *a = cJSON_CreateArray();
    for (size_t i = 0; i < n; i++) cJSON_AddItemToArray(a, cJSON_CreateNumber((unsigned char)s[i]));
    return a;
}

cJSON *oai_logprobs_new(oai_kind kind) {
    cJSON *lp = cJSON_CreateObject();
    if (kind == OAI_CHAT) {
        cJSON_AddArrayToObject(lp, "content");
    } else {
        cJSON_AddArrayToObject(lp, "tokens");
        cJSON_AddArrayToObject(lp, "token_logprobs");
        cJSON_AddArrayToObject(lp, "top_logprobs");
        cJSON_AddArrayToObject(lp, "text_offset");
    }
    return lp;
}

void oai_logprobs_add(oai_kind kind, cJSON *lp, const oai_token_lp *t, size_t text_offset) {
    if (kind == OAI_CHAT) {
        cJSON *e = cJSON_CreateObject();
        add_text(e, "token", t->piece, t->piece_len);
        cJSON_AddNumberToObject(e, "logprob", t->logprob);
        cJSON_AddItemToObject(e, "bytes", bytes_array(t->piece, t->piece_len));
        cJSON *tops = cJSON_AddArrayToObject(e, "top_logprobs");
        for (int i = 0; i < t->n_top; i++) {
            cJSON *a = cJSON_CreateObject();
            add_text(a, "token", t->top_piece[i], t->top_len[i]);
            cJSON_AddNumberToObject(a, "logprob", t->top_logprob[i]);
            cJSON_AddItemToObject(a, "bytes", bytes_array(t->top_piece[i], t->top_len[i]));
            cJSON_AddItemToArray(tops, a);
        }
        cJSON_AddItemToArray(cJSON_GetObjectItem(lp, "content"), e);
        return;
    }
    char *piece = oai_utf8_clean(t->piece ? t->piece : "", t->piece ? t->piece_len : 0);
    cJSON_AddItemToArray(cJSON_GetObjectItem(lp, "tokens"), cJSON_CreateString(piece ? piece : ""));
    free(piece);
    cJSON_AddItemToArray(cJSON_GetObjectItem(lp, "token_logprobs"), cJSON_CreateNumber(t->logprob));
    cJSON *tops = cJSON_CreateObject();
    for (int i = 0; i < t->n_top; i++) {
        char *k = oai_utf8_clean(t->top_piece[i] ? t->top_piece[i] : "", t->top_piece[i] ? t->top_len[i] : 0);
        /* two alternatives that clean to the same key: keep the first (the more likely) */
        if (k && !cJSON_GetObjectItemCaseSensitive(tops, k)) cJSON_AddNumberToObject(tops, k, t->top_logprob[i]);
        free(k);
    }
    cJSON_AddItemToArray(cJSON_GetObjectItem(lp, "top_logprobs"), tops);
    cJSON_AddItemToArray(cJSON_GetObjectItem(lp, "text_offset"), cJSON_CreateNumber((double)text_offset));
}

static cJSON *envelope(const oai_meta *m, int chunk) {
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "id", m->id);
    cJSON_AddStringToObject(o, "object", m->kind == OAI_CHAT ? (chunk ? "chat.completion.chunk" : "chat.completion")
                                                              : "text_completion");
    cJSON_AddNumberToObject(o, "created", (double)m->created);
    cJSON_AddStringToObject(o, "model", m->model);
    cJSON_AddStringToObject(o, "system_fingerprint", "ingot");
    cJSON_AddArrayToObject(o, "choices");
    return o;
}

cJSON *oai_response_new(const oai_meta *m) { return envelope(m, 0); }

void oai_response_add_choice(cJSON *resp, oai_kind kind, int index, const char *text, size_t len,
                             cJSON *logprobs, const char *finish_reason) {
    cJSON *c = cJSON_CreateObject();
    cJSON_AddNumberToObject(c, "index", index);
    if (kind == OAI_CHAT) {
        cJSON *msg = cJSON_AddObjectToObject(c, "message");
        cJSON_AddStringToObject(msg, "role", "assistant");
        add_text(msg, "content", text, len);
    } else {
        add_text(c, "text", text, len);
    }
    if (logprobs) cJSON_AddItemToObject(c, "logprobs", logprobs);
    else cJSON_AddNullToObject(c, "logprobs");
    cJSON_AddStringToObject(c, "finish_reason", finish_reason ? finish_reason : "stop");
    cJSON_AddItemToArray(cJSON_GetObjectItem(resp, "choices"), c);
}

void oai_set_usage(cJSON *obj, int prompt_tokens, int completion_tokens) {
    cJSON_DeleteItemFromObject(obj, "usage");
    cJSON *u = cJSON_AddObjectToObject(obj, "usage");
    cJSON_AddNumberToObject(u, "prompt_tokens", prompt_tokens);
    cJSON_AddNumberToObject(u, "completion_tokens", completion_tokens);
    cJSON_AddNumberToObject(u, "total_tokens", prompt_tokens + completion_tokens);
}

cJSON *oai_tool_call(const char *id, const char *name, const char *arguments) {
    cJSON *c = cJSON_CreateObject(), *f;
    cJSON_AddStringToObject(c, "id", id);
    cJSON_AddStringToObject(c, "type", "function");
    f = cJSON_AddObjectToObject(c, "function");
    add_text(f, "name", name, strlen(name));
    add_text(f, "arguments", arguments, strlen(arguments));
    return c;
}

void oai_response_set_tool_calls(cJSON *resp, int index, cJSON *tool_calls) {
    cJSON *choice = cJSON_GetArrayItem(cJSON_GetObjectItem(resp, "choices"), index);
    cJSON *msg = cJSON_GetObjectItem(choice, "message");
    if (!msg) {
        cJSON_Delete(tool_calls);
        return;
    }
    const cJSON *content = cJSON_GetObjectItem(msg, "content");
    if (cJSON_IsString(content) && !content->valuestring[0])
        cJSON_ReplaceItemInObject(msg, "content", cJSON_CreateNull());
    cJSON_AddItemToObject(msg, "tool_calls", tool_calls);
}

static char *sse(cJSON *o) {
    char *json = cJSON_PrintUnformatted(o);
    cJSON_Delete(o);
    if (!json) return NULL;
    const size_t n = strlen(json);
    char *s = malloc(n + 9);
    if (s) {
        memcpy(s, "data: ", 6);
        memcpy(s + 6, json, n);
        memcpy(s + 6 + n, "\n\n", 3);
    }
    free(json);
    return s;
}

char *oai_chunk(const oai_meta *m, int index, int first, const char *text, size_t len, cJSON *logprobs,
                const char *finish_reason, int with_usage_null) {
    cJSON *o = envelope(m, 1), *c = cJSON_CreateObject();
    cJSON_AddNumberToObject(c, "index", index);
    if (m->kind == OAI_CHAT) {
        cJSON *delta = cJSON_AddObjectToObject(c, "delta");
        if (first) cJSON_AddStringToObject(delta, "role", "assistant");
        if (len || first) add_text(delta, "content", text, len);
    } else {
        add_text(c, "text", text, len);
    }
    if (logprobs) cJSON_AddItemToObject(c, "logprobs", logprobs);
    else cJSON_AddNullToObject(c, "logprobs");
    if (finish_reason) cJSON_AddStringToObject(c, "finish_reason", finish_reason);
    else cJSON_AddNullToObject(c, "finish_reason");
    cJSON_AddItemToArray(cJSON_GetObjectItem(o, "choices"), c);
    if (with_usage_null) cJSON_AddNullToObject(o, "usage");
    return sse(o);
}

char *oai_tool_call_chunk(const oai_meta *m, int index, int first, int call_index, const char *id, const char *name,
                          const char *arguments, int with_usage_null) {
    cJSON *o = envelope(m, 1), *c = cJSON_CreateObject();
    cJSON_AddNumberToObject(c, "index", index);
    cJSON *delta = cJSON_AddObjectToObject(c, "delta");
    if (first) cJSON_AddStringToObject(delta, "role", "assistant");
    if (first) cJSON_AddNullToObject(delta, "content");
    cJSON *calls = cJSON_AddArrayToObject(delta, "tool_calls"), *call = cJSON_CreateObject();
    cJSON_AddNumberToObject(call, "index", call_index);
    if (id) {
        cJSON_AddStringToObject(call, "id", id);
        cJSON_AddStringToObject(call, "type", "function");
    }
    cJSON *f = cJSON_AddObjectToObject(call, "function");
    if (name) add_text(f, "name", name, strlen(name));
    add_text(f, "arguments", arguments, strlen(arguments));
    cJSON_AddItemToArray(calls, call);
    cJSON_AddNullToObject(c, "logprobs");
    cJSON_AddNullToObject(c, "finish_reason");
    cJSON_AddItemToArray(cJSON_GetObjectItem(o, "choices"), c);
    if (with_usage_null) cJSON_AddNullToObject(o, "usage");
    return sse(o);
}

char *oai_usage_chunk(const oai_meta *m, int prompt_tokens, int completion_tokens) {
    cJSON *o = envelope(m, 1);
    oai_set_usage(o, prompt_tokens, completion_tokens);
    return sse(o);
}

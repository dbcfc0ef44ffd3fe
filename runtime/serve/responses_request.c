/* responses_request.c — a Responses API body translated into a chat request;
 * see responses_api.h.
 *
 * As for the Messages API, the translation builds the chat-completions body
 * the request means and the chat parser (oai_parse_tree) checks it; what only
 * the Responses API has is checked here, errors naming the client's fields
 * ("input[2].call_id"). The fields a response object repeats are kept in
 * api_echo, and the conversation without the instructions (which a
 * continuation does not inherit, as OpenAI's does not) in api_history.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api_translate.h"
#include "responses_api.h"

/* The fields this server reads, or accepts and ignores; any other is refused by name. */
static const char *const KNOWN_FIELDS[] = {
    "model",       "input",        "instructions", "previous_response_id", "max_output_tokens", "temperature",
    "top_p",       "stream",       "tools",        "tool_choice",          "parallel_tool_calls", "text",
    "store",       "metadata",     "user",         "truncation",           "reasoning",         "include",
    "service_tier", "prompt_cache_key", "safety_identifier", "background"};

/* origin of the messages a previous response brought */
#define FROM_PREVIOUS (-2)

static int is_str(const cJSON *v, const char *s) { return cJSON_IsString(v) && !strcmp(v->valuestring, s); }

/* A function_call item: a call of the assistant message just before it, or of a new one. */
static int add_function_call(const cJSON *it, const char *param, int k, api_chat *chat, oai_error *e) {
    static const char *const NEED[] = {"call_id", "name", "arguments"};
    for (int f = 0; f < 3; f++)
        if (!cJSON_IsString(cJSON_GetObjectItemCaseSensitive(it, NEED[f]))) {
            char p[96];
            snprintf(p, sizeof p, "%.80s.%s", param, NEED[f]);
            return api_bad(e, p, "must be a string");
        }
    cJSON *call = api_tool_call(cJSON_GetObjectItemCaseSensitive(it, "call_id")->valuestring,
                                cJSON_GetObjectItemCaseSensitive(it, "name")->valuestring,
                                cJSON_CreateString(cJSON_GetObjectItemCaseSensitive(it, "arguments")->valuestring));
    cJSON *last = chat->n ? cJSON_GetArrayItem(chat->messages, chat->n - 1) : NULL;
    if (last && is_str(cJSON_GetObjectItemCaseSensitive(last, "role"), "assistant")) {
        cJSON *calls = cJSON_GetObjectItemCaseSensitive(last, "tool_calls");
        if (!calls) calls = cJSON_AddArrayToObject(last, "tool_calls");
        cJSON_AddItemToArray(calls, call);
        return 0;
    }
    cJSON *calls = cJSON_CreateArray();
    cJSON_AddItemToArray(calls, call);
    return api_chat_add(chat, "assistant", cJSON_CreateString(""), calls, NULL, k);
}

/* A function_call_output item: a tool message. */
static int add_function_output(const cJSON *it, const char *param, int k, api_chat *chat, oai_error *e) {
    const cJSON *id = cJSON_GetObjectItemCaseSensitive(it, "call_id");
    char p[96];
    if (!cJSON_IsString(id)) {
        snprintf(p, sizeof p, "%.80s.call_id", param);
        return api_bad(e, p, "must be a string");
    }
    snprintf(p, sizeof p, "%.80s.output", param);
    const cJSON *out = cJSON_GetObjectItemCaseSensitive(it, "output");
    if (!out) return api_bad(e, p, "is required");
    cJSON *content = api_text_content(out, p, e);
    if (!content) return -1;
    return api_chat_add(chat, "tool", content, NULL, id->valuestring, k);
}

/* One input item k. */
static int add_item(const cJSON *it, int k, api_chat *chat, oai_error *e) {
    char param[48];
    snprintf(param, sizeof param, "input[%d]", k);
    if (!cJSON_IsObject(it)) return api_bad(e, param, "must be an object");
    const cJSON *type = oai_field(it, "type");
    const char *t = cJSON_IsString(type) ? type->valuestring : type ? "" : "message";
    if (!strcmp(t, "function_call")) return add_function_call(it, param, k, chat, e);
    if (!strcmp(t, "function_call_output")) return add_function_output(it, param, k, chat, e);
    if (!strcmp(t, "reasoning")) return 0; /* another model's reasoning: this one does not read it */
    if (strcmp(t, "message")) {
        char p[64];
        snprintf(p, sizeof p, "%.80s.type", param);
        return api_bad(e, p, "must be \"message\", \"function_call\" or \"function_call_output\"");
    }
    const cJSON *role = cJSON_GetObjectItemCaseSensitive(it, "role");
    char p[64];
    snprintf(p, sizeof p, "%.80s.role", param);
    if (!is_str(role, "user") && !is_str(role, "assistant") && !is_str(role, "system") && !is_str(role, "developer"))
        return api_bad(e, p, "must be \"user\", \"assistant\", \"system\" or \"developer\"");
    snprintf(p, sizeof p, "%.80s.content", param);
    const cJSON *c = cJSON_GetObjectItemCaseSensitive(it, "content");
    if (!c) return api_bad(e, p, "is required");
    cJSON *content = api_text_content(c, p, e);
    if (!content) return -1;
    return api_chat_add(chat, role->valuestring, content, NULL, NULL, k);
}

/* previous_response_id: the stored conversation it ended, before this input. */
static int add_previous(const cJSON *root, rs_store *store, api_chat *chat, oai_error *e) {
    const cJSON *prev = oai_field(root, "previous_response_id");
    if (!prev) return 0;
    if (!cJSON_IsString(prev)) return api_bad(e, "previous_response_id", "must be a string");
    char *text = rs_conversation(store, prev->valuestring);
    cJSON *msgs = text ? cJSON_Parse(text) : NULL;
    free(text);
    if (!cJSON_IsArray(msgs)) {
        cJSON_Delete(msgs);
        oai_error_set(e, 400, "invalid_request_error", "previous_response_id", "previous_response_not_found",
                      "Previous response with id '%.120s' not found%s", prev->valuestring,
                      store ? " (it was never stored, or the store has forgotten it)" : " (this server stores none)");
        return -1;
    }
    cJSON *m;
    int rc = 0;
    while (!rc && (m = cJSON_DetachItemFromArray(msgs, 0))) {
        cJSON *content = cJSON_DetachItemFromObject(m, "content");
        cJSON *calls = cJSON_DetachItemFromObject(m, "tool_calls");
        const cJSON *id = cJSON_GetObjectItemCaseSensitive(m, "tool_call_id");
        rc = api_chat_add(chat, cJSON_GetObjectItemCaseSensitive(m, "role")->valuestring,
                          content ? content : cJSON_CreateString(""), calls, cJSON_IsString(id) ? id->valuestring : NULL,
                          FROM_PREVIOUS);
        cJSON_Delete(m);
    }
    cJSON_Delete(msgs);
    return rc;
}

static int add_input(const cJSON *root, api_chat *chat, oai_error *e) {
    const cJSON *input = oai_field(root, "input");
    if (!input) return api_bad(e, "input", "is required");
    if (cJSON_IsString(input)) return api_chat_add(chat, "user", cJSON_Duplicate(input, 1), NULL, NULL, 0);
    if (!cJSON_IsArray(input) || !cJSON_GetArraySize(input))
        return api_bad(e, "input", "must be a string or a non-empty array of items");
    int k = 0;
    const cJSON *it;
    cJSON_ArrayForEach(it, input) if (add_item(it, k++, chat, e)) return -1;
    return 0;
}

/* tools (function tools only) and tool_choice, as chat's. */
static int translate_tools(const cJSON *root, cJSON *out, oai_error *e) {
    const cJSON *tools = oai_field(root, "tools");
    if (tools && !cJSON_IsArray(tools)) return api_bad(e, "tools", "must be an array");
    if (tools && cJSON_GetArraySize(tools)) {
        cJSON *list = cJSON_AddArrayToObject(out, "tools");
        int k = 0;
        const cJSON *t;
        cJSON_ArrayForEach(t, tools) {
            char p[48];
            snprintf(p, sizeof p, "tools[%d].type", k++);
            if (!cJSON_IsObject(t) || !is_str(cJSON_GetObjectItemCaseSensitive(t, "type"), "function"))
                return api_bad(e, p, "must be \"function\": this server runs no built-in tools");
            cJSON *fn = api_function_tool(t, "name", "description", oai_field(t, "parameters"));
            if (!fn) {
                snprintf(p, sizeof p, "tools[%d].name", k - 1);
                return api_bad(e, p, "must be a string");
            }
            const cJSON *strict = oai_field(t, "strict");
            if (strict) cJSON_AddItemToObject(cJSON_GetObjectItem(fn, "function"), "strict", cJSON_Duplicate(strict, 1));
            cJSON_AddItemToArray(list, fn);
        }
    }
    const cJSON *tc = oai_field(root, "tool_choice");
    if (cJSON_IsString(tc)) {
        cJSON_AddItemToObject(out, "tool_choice", cJSON_Duplicate(tc, 1));
    } else if (tc) {
        const cJSON *name = cJSON_GetObjectItemCaseSensitive(tc, "name");
        if (!is_str(cJSON_GetObjectItemCaseSensitive(tc, "type"), "function") || !cJSON_IsString(name))
            return api_bad(e, "tool_choice", "must be \"none\", \"auto\", \"required\" or {\"type\": \"function\", "
                                             "\"name\": ...}");
        cJSON *named = cJSON_AddObjectToObject(out, "tool_choice");
        cJSON_AddStringToObject(named, "type", "function");
        cJSON_AddStringToObject(cJSON_AddObjectToObject(named, "function"), "name", name->valuestring);
    }
    const cJSON *ptc = oai_field(root, "parallel_tool_calls");
    if (ptc) cJSON_AddItemToObject(out, "parallel_tool_calls", cJSON_Duplicate(ptc, 1));
    return 0;
}

/* text.format: text | json_object | json_schema, as chat's response_format. */
static int translate_text_format(const cJSON *root, cJSON *out, oai_error *e) {
    const cJSON *text = oai_field(root, "text");
    if (!text) return 0;
    if (!cJSON_IsObject(text)) return api_bad(e, "text", "must be an object");
    for (const cJSON *f = text->child; f; f = f->next)
        if (strcmp(f->string, "format")) return api_bad(e, "text", "may only hold 'format' on this server");
    const cJSON *fmt = oai_field(text, "format");
    if (!fmt) return 0;
    const cJSON *type = cJSON_GetObjectItemCaseSensitive(fmt, "type");
    if (!cJSON_IsObject(fmt) || !cJSON_IsString(type))
        return api_bad(e, "text.format", "must be an object with a \"type\"");
    if (!strcmp(type->valuestring, "text")) return 0;
    cJSON *rf = cJSON_AddObjectToObject(out, "response_format");
    cJSON_AddStringToObject(rf, "type", type->valuestring);
    if (strcmp(type->valuestring, "json_schema")) return 0; /* json_object, or a type the chat parser names */
    cJSON *js = cJSON_AddObjectToObject(rf, "json_schema");
    static const char *const COPY[] = {"name", "schema", "strict", "description"};
    for (int k = 0; k < 4; k++) {
        const cJSON *v = cJSON_GetObjectItemCaseSensitive(fmt, COPY[k]);
        if (v) cJSON_AddItemToObject(js, COPY[k], cJSON_Duplicate(v, 1));
    }
    return 0;
}

/* The fields that are only checked or renamed. */
static int translate_settings(const cJSON *root, cJSON *out, oai_error *e) {
    const cJSON *v;
    if ((v = oai_field(root, "max_output_tokens"))) cJSON_AddItemToObject(out, "max_tokens", cJSON_Duplicate(v, 1));
    static const char *const SAME[] = {"model", "temperature", "top_p", "stream", "store", "metadata", "user",
                                       "service_tier", "prompt_cache_key", "safety_identifier"};
    for (size_t k = 0; k < sizeof SAME / sizeof SAME[0]; k++)
        if ((v = oai_field(root, SAME[k]))) cJSON_AddItemToObject(out, SAME[k], cJSON_Duplicate(v, 1));
    if ((v = oai_field(root, "truncation")) && !is_str(v, "disabled"))
        return api_bad(e, "truncation", "must be \"disabled\": this server does not drop input to fit the context");
    const cJSON *effort = (v = oai_field(root, "reasoning")) ? oai_field(v, "effort") : NULL;
    if (v && (!cJSON_IsObject(v) || effort))
        return api_bad(e, "reasoning", "is not supported by this server (reasoning effort is not configurable)");
    if ((v = oai_field(root, "include")) && !(cJSON_IsArray(v) && !cJSON_GetArraySize(v)))
        return api_bad(e, "include", "must be empty: this server has no additional output to include");
    if ((v = oai_field(root, "background")) && !cJSON_IsFalse(v))
        return api_bad(e, "background", "must be false: this server answers in the foreground");
    if ((v = oai_field(root, "instructions")) && !cJSON_IsString(v))
        return api_bad(e, "instructions", "must be a string");
    return 0;
}

/* The request fields a response object repeats, with their defaults. */
static cJSON *echo_fields(const cJSON *root) {
    cJSON *echo = cJSON_CreateObject();
    static const char *const FIELDS[] = {"instructions", "max_output_tokens", "previous_response_id", "temperature",
                                         "top_p", "user"};
    for (size_t k = 0; k < sizeof FIELDS / sizeof FIELDS[0]; k++) {
        const cJSON *v = oai_field(root, FIELDS[k]);
        cJSON_AddItemToObject(echo, FIELDS[k], v ? cJSON_Duplicate(v, 1) : cJSON_CreateNull());
    }
    const cJSON *v;
    if (!oai_field(root, "temperature")) cJSON_ReplaceItemInObject(echo, "temperature", cJSON_CreateNumber(1));
    if (!oai_field(root, "top_p")) cJSON_ReplaceItemInObject(echo, "top_p", cJSON_CreateNumber(1));
    cJSON_AddItemToObject(echo, "tools", (v = oai_field(root, "tools")) ? cJSON_Duplicate(v, 1) : cJSON_CreateArray());
    cJSON_AddItemToObject(echo, "tool_choice",
                          (v = oai_field(root, "tool_choice")) ? cJSON_Duplicate(v, 1) : cJSON_CreateString("auto"));
    v = oai_field(root, "parallel_tool_calls");
    cJSON_AddBoolToObject(echo, "parallel_tool_calls", !cJSON_IsFalse(v));
    v = oai_field(root, "store");
    cJSON_AddBoolToObject(echo, "store", !cJSON_IsFalse(v));
    cJSON_AddItemToObject(echo, "metadata",
                          (v = oai_field(root, "metadata")) ? cJSON_Duplicate(v, 1) : cJSON_CreateObject());
    v = oai_field(root, "text");
    if (v && oai_field(v, "format")) {
        cJSON_AddItemToObject(echo, "text", cJSON_Duplicate(v, 1));
    } else {
        cJSON *t = cJSON_AddObjectToObject(echo, "text");
        cJSON_AddStringToObject(cJSON_AddObjectToObject(t, "format"), "type", "text");
    }
    cJSON_AddStringToObject(echo, "truncation", "disabled");
    cJSON *reasoning = cJSON_AddObjectToObject(echo, "reasoning");
    cJSON_AddNullToObject(reasoning, "effort");
    cJSON_AddNullToObject(reasoning, "summary");
    return echo;
}

/* The chat parser's names of the translated fields, and the client's. */
static void rename_param(oai_error *e, const api_chat *chat) {
    char to[64] = "";
    int k = -1, n = 0;
    if (sscanf(e->param, "messages[%d]%n", &k, &n) == 1 && k >= 0 && k < chat->n) {
        const int o = chat->origin[k];
        if (o == -1) snprintf(to, sizeof to, "instructions");
        else if (o == FROM_PREVIOUS) snprintf(to, sizeof to, "previous_response_id");
        else snprintf(to, sizeof to, "input[%d]", o);
    } else if (!strcmp(e->param, "max_tokens")) {
        snprintf(to, sizeof to, "max_output_tokens");
    } else if (!strncmp(e->param, "response_format", 15)) {
        api_rename_in_message(e, "response_format.json_schema", "text.format");
        snprintf(to, sizeof to, "text.format");
    } else if (sscanf(e->param, "tools[%d]%n", &k, &n) == 1 && k >= 0) {
        snprintf(to, sizeof to, "tools[%d]%s", k, strstr(e->param, ".parameters") ? ".parameters" : "");
    }
    if (to[0]) api_rename_param(e, to);
}

int rsp_parse(const char *body, size_t len, int vocab, rs_store *store, oai_request *r, oai_error *e) {
    memset(r, 0, sizeof *r);
    memset(e, 0, sizeof *e);
    cJSON *root = oai_parse_object(body, len, e);
    if (!root) return -1;
    cJSON *out = cJSON_CreateObject();
    api_chat chat = {0};
    int rc = -1;
    if (api_check_fields(root, KNOWN_FIELDS, sizeof KNOWN_FIELDS / sizeof KNOWN_FIELDS[0], e) ||
        translate_settings(root, out, e) || translate_tools(root, out, e) || translate_text_format(root, out, e))
        goto done;
    const cJSON *instr = oai_field(root, "instructions");
    if (instr && api_chat_add(&chat, "system", cJSON_Duplicate(instr, 1), NULL, NULL, -1)) goto done;
    if (add_previous(root, store, &chat, e) || add_input(root, &chat, e)) goto done;
    cJSON *history = cJSON_Duplicate(chat.messages, 1);
    if (instr) cJSON_DeleteItemFromArray(history, 0);
    cJSON_AddItemToObject(out, "messages", chat.messages);
    chat.messages = NULL;
    if ((rc = oai_parse_tree(OAI_CHAT, out, vocab, r, e)) != 0) {
        cJSON_Delete(history);
        rename_param(e, &chat);
        goto done;
    }
    r->api = OAI_API_RESPONSES;
    r->api_history = history;
    r->api_echo = echo_fields(root);
done:
    if (rc && !e->status) oai_error_set(e, 500, "server_error", NULL, NULL, "out of memory");
    api_chat_free(&chat);
    cJSON_Delete(out);
    cJSON_Delete(root);
    return rc;
}

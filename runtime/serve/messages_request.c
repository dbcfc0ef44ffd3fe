/* messages_request.c — a Messages API body (Anthropic) translated into a chat
 * request; see messages_api.h.
 *
 * The translation builds the chat-completions body the request means and
 * hands it to the chat parser (oai_parse_tree), so both APIs share every
 * check and limit. What only the Messages API has is checked here, with
 * Anthropic's field paths ("messages.2.content.0.tool_use_id"); an error the
 * chat parser finds is renamed back to the client's path (rename_param).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api_translate.h"
#include "messages_api.h"

/* The top-level fields of a Messages request this server reads or accepts
 * and ignores; any other is refused by name. temperature, top_p and top_k
 * are read as older versions of the API had them (the current one samples at
 * the model's own settings; here, temperature 1). */
static const char *const KNOWN_FIELDS[] = {
    "model",       "messages",       "max_tokens", "system",      "stop_sequences", "stream",   "temperature",
    "top_p",       "top_k",          "tools",      "tool_choice", "metadata",       "thinking", "service_tier",
    "output_config", "cache_control", "speed",     "inference_geo", "user_profile_id", "workspace_id", "diagnostics"};

/* Accepted and ignored: prompt caching is automatic (the prefix cache), and
 * the rest are about Anthropic's own service. Held to their types. */
static const char *const IGNORED_STRINGS[] = {"service_tier", "speed", "inference_geo", "user_profile_id",
                                              "workspace_id"};

/* system: a string or an array of text blocks, as the first message. */
static int add_system(const cJSON *root, api_chat *chat, oai_error *e) {
    const cJSON *sys = oai_field(root, "system");
    if (!sys) return 0;
    cJSON *content = api_text_content(sys, "system", e);
    if (!content) return -1;
    return api_chat_add(chat, "system", content, NULL, NULL, -1);
}

/* One tool_use block of an assistant message: an OpenAI tool call. */
static cJSON *tool_use_call(const cJSON *b, const char *param, oai_error *e) {
    const cJSON *id = cJSON_GetObjectItemCaseSensitive(b, "id");
    const cJSON *name = cJSON_GetObjectItemCaseSensitive(b, "name");
    const cJSON *input = cJSON_GetObjectItemCaseSensitive(b, "input");
    char p[96];
    if (!cJSON_IsString(id)) return snprintf(p, sizeof p, "%.80s.id", param), api_bad(e, p, "must be a string"), NULL;
    if (!cJSON_IsString(name))
        return snprintf(p, sizeof p, "%.80s.name", param), api_bad(e, p, "must be a string"), NULL;
    if (!cJSON_IsObject(input))
        return snprintf(p, sizeof p, "%.80s.input", param), api_bad(e, p, "must be an object"), NULL;
    return api_tool_call(id->valuestring, name->valuestring, cJSON_Duplicate(input, 1));
}

/* One tool_result block of a user message: a tool message. */
static int add_tool_result(const cJSON *b, const char *param, int origin, api_chat *chat, oai_error *e) {
    const cJSON *id = cJSON_GetObjectItemCaseSensitive(b, "tool_use_id");
    const cJSON *is_error = cJSON_GetObjectItemCaseSensitive(b, "is_error");
    char p[96];
    if (!cJSON_IsString(id)) {
        snprintf(p, sizeof p, "%.80s.tool_use_id", param);
        return api_bad(e, p, "must be a string");
    }
    if (is_error && !cJSON_IsBool(is_error)) {
        snprintf(p, sizeof p, "%.80s.is_error", param);
        return api_bad(e, p, "must be a boolean");
    }
    const cJSON *c = cJSON_GetObjectItemCaseSensitive(b, "content");
    snprintf(p, sizeof p, "%.80s.content", param);
    cJSON *content = c && !cJSON_IsNull(c) ? api_text_content(c, p, e) : cJSON_CreateString("");
    if (!content) return -1;
    return api_chat_add(chat, "tool", content, NULL, id->valuestring, origin);
}

/* One message of the client's: a user message's tool_result blocks become
 * tool messages (before its text, as the Messages API orders them); an
 * assistant's tool_use blocks become its tool_calls; thinking blocks are
 * another model's and are left out. */
static int add_message(const cJSON *m, int i, api_chat *chat, oai_error *e) {
    char param[64];
    snprintf(param, sizeof param, "messages.%d", i);
    if (!cJSON_IsObject(m)) return api_bad(e, param, "must be an object");
    const cJSON *role = cJSON_GetObjectItemCaseSensitive(m, "role");
    snprintf(param, sizeof param, "messages.%d.role", i);
    if (!cJSON_IsString(role) || (strcmp(role->valuestring, "user") && strcmp(role->valuestring, "assistant")))
        return api_bad(e, param, "must be \"user\" or \"assistant\"");
    const int user = !strcmp(role->valuestring, "user");
    const cJSON *content = cJSON_GetObjectItemCaseSensitive(m, "content");
    snprintf(param, sizeof param, "messages.%d.content", i);
    if (cJSON_IsString(content)) return api_chat_add(chat, role->valuestring, cJSON_Duplicate(content, 1), NULL, NULL, i);
    if (!cJSON_IsArray(content)) return api_bad(e, param, "must be a string or an array of content blocks");
    cJSON *parts = cJSON_CreateArray(), *calls = cJSON_CreateArray();
    int j = 0;
    const cJSON *b;
    cJSON_ArrayForEach(b, content) {
        char bp[96];
        snprintf(bp, sizeof bp, "messages.%d.content.%d", i, j++);
        const cJSON *type = cJSON_GetObjectItemCaseSensitive(b, "type");
        const char *t = cJSON_IsString(type) ? type->valuestring : NULL;
        int rc = 0;
        if (!cJSON_IsObject(b) || !t) {
            rc = api_bad(e, bp, "must be a content block (an object with a \"type\")");
        } else if (!strcmp(t, "text")) {
            rc = api_add_text_part(parts, b, bp, e);
        } else if (!strcmp(t, "tool_use") && !user) {
            cJSON *call = tool_use_call(b, bp, e);
            if (call) cJSON_AddItemToArray(calls, call);
            else rc = -1;
        } else if (!strcmp(t, "tool_result") && user) {
            rc = add_tool_result(b, bp, i, chat, e);
        } else if ((!strcmp(t, "thinking") || !strcmp(t, "redacted_thinking")) && !user) {
            continue;
        } else {
            char what[160];
            snprintf(what, sizeof what, "is a \"%.40s\" block, which %s", t,
                     !strcmp(t, "tool_use") || !strcmp(t, "tool_result") ? "this role cannot send"
                                                                          : "this server does not read (text only)");
            rc = api_bad(e, bp, what);
        }
        if (rc) {
            cJSON_Delete(parts);
            cJSON_Delete(calls);
            return -1;
        }
    }
    /* a user message that only carried tool results adds no user turn */
    if (user && cJSON_GetArraySize(parts) == 0 && chat->n && chat->origin[chat->n - 1] == i) {
        cJSON_Delete(parts);
        cJSON_Delete(calls);
        return 0;
    }
    if (cJSON_GetArraySize(calls) == 0) {
        cJSON_Delete(calls);
        calls = NULL;
    }
    return api_chat_add(chat, role->valuestring, parts, calls, NULL, i);
}

/* tools: [{"name", "description"?, "input_schema"}] as chat tools; Anthropic's
 * server tools (a "type" other than "custom") are refused. */
static int translate_tools(const cJSON *root, cJSON *out, oai_error *e) {
    const cJSON *tools = oai_field(root, "tools");
    if (!tools) return 0;
    if (!cJSON_IsArray(tools)) return api_bad(e, "tools", "must be an array");
    cJSON *list = cJSON_AddArrayToObject(out, "tools");
    int k = 0;
    const cJSON *t;
    cJSON_ArrayForEach(t, tools) {
        char p[64];
        snprintf(p, sizeof p, "tools.%d", k++);
        if (!cJSON_IsObject(t)) return api_bad(e, p, "must be an object");
        const cJSON *type = oai_field(t, "type");
        if (type && !(cJSON_IsString(type) && !strcmp(type->valuestring, "custom"))) {
            snprintf(p, sizeof p, "tools.%d.type", k - 1);
            return api_bad(e, p, "names a server tool, which this server does not run (only client tools)");
        }
        const cJSON *schema = cJSON_GetObjectItemCaseSensitive(t, "input_schema");
        if (!cJSON_IsObject(schema)) {
            snprintf(p, sizeof p, "tools.%d.input_schema", k - 1);
            return api_bad(e, p, "must be a JSON Schema object");
        }
        cJSON *fn = api_function_tool(t, "name", "description", schema);
        if (!fn) {
            snprintf(p, sizeof p, "tools.%d.name", k - 1);
            return api_bad(e, p, "must be a string");
        }
        /* strict: the arguments follow the schema only where tool_choice constrains decoding */
        const cJSON *strict = oai_field(t, "strict");
        if (strict) cJSON_AddItemToObject(cJSON_GetObjectItem(fn, "function"), "strict", cJSON_Duplicate(strict, 1));
        cJSON_AddItemToArray(list, fn);
    }
    return 0;
}

/* tool_choice {"type": auto | any | tool | none, "name"?, "disable_parallel_tool_use"?}. */
static int translate_tool_choice(const cJSON *root, cJSON *out, oai_error *e) {
    const cJSON *tc = oai_field(root, "tool_choice");
    if (!tc) return 0;
    const cJSON *type = cJSON_GetObjectItemCaseSensitive(tc, "type");
    const char *t = cJSON_IsString(type) ? type->valuestring : "";
    if (!cJSON_IsObject(tc) || (strcmp(t, "auto") && strcmp(t, "any") && strcmp(t, "tool") && strcmp(t, "none")))
        return api_bad(e, "tool_choice", "must be {\"type\": \"auto\" | \"any\" | \"tool\" | \"none\"}");
    if (!strcmp(t, "tool")) {
        const cJSON *name = cJSON_GetObjectItemCaseSensitive(tc, "name");
        if (!cJSON_IsString(name)) return api_bad(e, "tool_choice.name", "must be a string");
        cJSON *named = cJSON_AddObjectToObject(out, "tool_choice");
        cJSON_AddStringToObject(named, "type", "function");
        cJSON_AddStringToObject(cJSON_AddObjectToObject(named, "function"), "name", name->valuestring);
    } else {
        cJSON_AddStringToObject(out, "tool_choice", !strcmp(t, "any") ? "required" : t);
    }
    const cJSON *dp = oai_field(tc, "disable_parallel_tool_use");
    if (dp && !cJSON_IsBool(dp)) return api_bad(e, "tool_choice.disable_parallel_tool_use", "must be a boolean");
    if (cJSON_IsTrue(dp)) cJSON_AddFalseToObject(out, "parallel_tool_calls");
    return 0;
}

/* The fields that only need checking or a new name. */
static int translate_settings(const cJSON *root, int count_only, cJSON *out, oai_error *e) {
    const cJSON *mt = oai_field(root, "max_tokens");
    if (!mt && !count_only) return api_bad(e, "max_tokens", "is required");
    if (mt) cJSON_AddItemToObject(out, "max_tokens", cJSON_Duplicate(mt, 1));
    /* Anthropic's ranges: temperature and top_p in [0, 1] */
    static const char *const UNIT[] = {"temperature", "top_p"};
    for (int k = 0; k < 2; k++) {
        const cJSON *v = oai_field(root, UNIT[k]);
        if (!v) continue;
        if (!cJSON_IsNumber(v) || v->valuedouble < 0 || v->valuedouble > 1)
            return api_bad(e, UNIT[k], "must be a number in [0, 1]");
        cJSON_AddItemToObject(out, UNIT[k], cJSON_Duplicate(v, 1));
    }
    static const char *const SAME[] = {"top_k", "stream"};
    for (int k = 0; k < 2; k++) {
        const cJSON *v = oai_field(root, SAME[k]);
        if (v) cJSON_AddItemToObject(out, SAME[k], cJSON_Duplicate(v, 1));
    }
    const cJSON *stop = oai_field(root, "stop_sequences");
    if (stop && !cJSON_IsArray(stop)) return api_bad(e, "stop_sequences", "must be an array of strings");
    if (stop && cJSON_GetArraySize(stop)) cJSON_AddItemToObject(out, "stop", cJSON_Duplicate(stop, 1));
    const cJSON *th = oai_field(root, "thinking");
    const cJSON *tht = th ? cJSON_GetObjectItemCaseSensitive(th, "type") : NULL;
    if (th && !(cJSON_IsString(tht) && !strcmp(tht->valuestring, "disabled")))
        return api_bad(e, "thinking", "must be {\"type\": \"disabled\"}: this server does not run extended thinking");
    const cJSON *md = oai_field(root, "metadata");
    if (md && !cJSON_IsObject(md)) return api_bad(e, "metadata", "must be an object");
    for (size_t k = 0; k < sizeof IGNORED_STRINGS / sizeof IGNORED_STRINGS[0]; k++) {
        const cJSON *v = oai_field(root, IGNORED_STRINGS[k]);
        if (v && !cJSON_IsString(v)) return api_bad(e, IGNORED_STRINGS[k], "must be a string");
    }
    static const char *const IGNORED_OBJECTS[] = {"cache_control", "diagnostics"};
    for (size_t k = 0; k < 2; k++) {
        const cJSON *v = oai_field(root, IGNORED_OBJECTS[k]);
        if (v && !cJSON_IsObject(v)) return api_bad(e, IGNORED_OBJECTS[k], "must be an object");
    }
    return 0;
}

/* output_config: format {"type": "json_schema", "schema"} as chat's
 * response_format; effort is accepted and has no effect (the model has no
 * effort setting). */
static int translate_output_config(const cJSON *root, cJSON *out, oai_error *e) {
    const cJSON *oc = oai_field(root, "output_config");
    if (!oc) return 0;
    if (!cJSON_IsObject(oc)) return api_bad(e, "output_config", "must be an object");
    for (const cJSON *f = oc->child; f; f = f->next)
        if (strcmp(f->string, "format") && strcmp(f->string, "effort")) {
            char p[64];
            snprintf(p, sizeof p, "output_config.%.40s", f->string);
            return api_bad(e, p, "is not supported by this server");
        }
    const cJSON *effort = oai_field(oc, "effort");
    if (effort && !cJSON_IsString(effort)) return api_bad(e, "output_config.effort", "must be a string");
    const cJSON *fmt = oai_field(oc, "format");
    if (!fmt) return 0;
    const cJSON *type = cJSON_GetObjectItemCaseSensitive(fmt, "type");
    const cJSON *schema = cJSON_GetObjectItemCaseSensitive(fmt, "schema");
    if (!cJSON_IsObject(fmt) || !cJSON_IsString(type) || strcmp(type->valuestring, "json_schema"))
        return api_bad(e, "output_config.format", "must be {\"type\": \"json_schema\", \"schema\": {...}}");
    if (!cJSON_IsObject(schema)) return api_bad(e, "output_config.format.schema", "must be a JSON Schema object");
    cJSON *rf = cJSON_AddObjectToObject(out, "response_format");
    cJSON_AddStringToObject(rf, "type", "json_schema");
    cJSON *js = cJSON_AddObjectToObject(rf, "json_schema");
    cJSON_AddStringToObject(js, "name", "output");
    cJSON_AddItemToObject(js, "schema", cJSON_Duplicate(schema, 1));
    cJSON_AddTrueToObject(js, "strict");
    return 0;
}

/* The chat parser's names of the translated fields, and the client's. */
static void rename_param(oai_error *e, const api_chat *chat) {
    char to[96] = "";
    int k = -1, n = 0;
    if (sscanf(e->param, "messages[%d]%n", &k, &n) == 1 && k >= 0 && k < chat->n) {
        if (chat->origin[k] < 0) snprintf(to, sizeof to, "system");
        else snprintf(to, sizeof to, "messages.%d.content", chat->origin[k]);
    } else if (!strcmp(e->param, "stop")) {
        snprintf(to, sizeof to, "stop_sequences");
    } else if (!strncmp(e->param, "response_format", 15)) {
        api_rename_in_message(e, "response_format.json_schema.schema", "output_config.format.schema");
        snprintf(to, sizeof to, "output_config.format");
    } else if (sscanf(e->param, "tools[%d]%n", &k, &n) == 1 && k >= 0) {
        snprintf(to, sizeof to, "tools.%d%s", k,
                 strstr(e->param, ".parameters") ? ".input_schema" : strstr(e->param, ".name") ? ".name" : "");
    }
    if (to[0]) api_rename_param(e, to);
}

int msg_parse(const char *body, size_t len, int vocab, int count_only, oai_request *r, oai_error *e) {
    memset(r, 0, sizeof *r);
    memset(e, 0, sizeof *e);
    cJSON *root = oai_parse_object(body, len, e);
    if (!root) return -1;
    cJSON *out = cJSON_CreateObject();
    api_chat chat = {0};
    int rc = -1;
    if (api_check_fields(root, KNOWN_FIELDS, sizeof KNOWN_FIELDS / sizeof KNOWN_FIELDS[0], e)) goto done;
    const cJSON *model = oai_field(root, "model");
    if (model) cJSON_AddItemToObject(out, "model", cJSON_Duplicate(model, 1));
    const cJSON *msgs = oai_field(root, "messages");
    if (!msgs) {
        api_bad(e, "messages", "is required");
        goto done;
    }
    if (!cJSON_IsArray(msgs) || cJSON_GetArraySize(msgs) == 0) {
        api_bad(e, "messages", "must be a non-empty array");
        goto done;
    }
    if (add_system(root, &chat, e)) goto done;
    int i = 0;
    const cJSON *m;
    cJSON_ArrayForEach(m, msgs) if (add_message(m, i++, &chat, e)) goto done;
    if (translate_settings(root, count_only, out, e) || translate_tools(root, out, e) || translate_tool_choice(root, out, e) ||
        translate_output_config(root, out, e))
        goto done;
    cJSON_AddItemToObject(out, "messages", chat.messages);
    chat.messages = NULL;
    if ((rc = oai_parse_tree(OAI_CHAT, out, vocab, r, e)) != 0) rename_param(e, &chat);
    else r->api = OAI_API_MESSAGES;
done:
    if (rc && !e->status) oai_error_set(e, 500, "api_error", NULL, NULL, "out of memory");
    api_chat_free(&chat);
    cJSON_Delete(out);
    cJSON_Delete(root);
    return rc;
}

/* api_translate.c — the helpers the Messages and Responses parsers share;
 * see api_translate.h. */
#include "api_translate.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int api_bad(oai_error *e, const char *param, const char *what) {
    oai_error_set(e, 400, "invalid_request_error", param, NULL, "'%s' %s", param, what);
    return -1;
}

int api_check_fields(const cJSON *root, const char *const *known, size_t n, oai_error *e) {
    for (const cJSON *f = root->child; f; f = f->next) {
        size_t k = 0;
        while (k < n && strcmp(known[k], f->string)) k++;
        if (k == n) {
            char param[48];
            snprintf(param, sizeof param, "%.47s", f->string);
            return api_bad(e, param, "is not supported by this server");
        }
    }
    return 0;
}

void api_rename_param(oai_error *e, const char *to) {
    api_rename_in_message(e, e->param, to);
    snprintf(e->param, sizeof e->param, "%s", to);
}

void api_rename_in_message(oai_error *e, const char *from, const char *to) {
    char msg[sizeof e->message];
    const size_t from_len = strlen(from);
    size_t o = 0;
    for (const char *p = e->message; *p && o + 1 < sizeof msg;) {
        if (from_len && !strncmp(p, from, from_len)) {
            o += (size_t)snprintf(msg + o, sizeof msg - o, "%s", to);
            if (o >= sizeof msg) o = sizeof msg - 1;
            p += from_len;
        } else {
            msg[o++] = *p++;
        }
    }
    msg[o] = 0;
    memcpy(e->message, msg, sizeof msg);
}

int api_chat_add(api_chat *c, const char *role, cJSON *content, cJSON *calls, const char *tool_call_id, int origin) {
    if (!c->messages) c->messages = cJSON_CreateArray();
    if (c->n == c->cap) {
        const int cap = c->cap ? c->cap * 2 : 16;
        int *p = realloc(c->origin, sizeof *p * (size_t)cap);
        if (!p) {
            cJSON_Delete(content);
            cJSON_Delete(calls);
            return -1;
        }
        c->origin = p;
        c->cap = cap;
    }
    cJSON *m = cJSON_CreateObject();
    cJSON_AddStringToObject(m, "role", role);
    cJSON_AddItemToObject(m, "content", content);
    if (calls) cJSON_AddItemToObject(m, "tool_calls", calls);
    if (tool_call_id) cJSON_AddStringToObject(m, "tool_call_id", tool_call_id);
    cJSON_AddItemToArray(c->messages, m);
    c->origin[c->n++] = origin;
    return 0;
}

void api_chat_free(api_chat *c) {
    cJSON_Delete(c->messages);
    free(c->origin);
    memset(c, 0, sizeof *c);
}

static int is_text_type(const char *t) {
    return !strcmp(t, "text") || !strcmp(t, "input_text") || !strcmp(t, "output_text");
}

int api_add_text_part(cJSON *parts, const cJSON *block, const char *param, oai_error *e) {
    const cJSON *text = cJSON_GetObjectItemCaseSensitive(block, "text");
    if (!cJSON_IsString(text)) {
        char p[128];
        snprintf(p, sizeof p, "%.80s.text", param);
        return api_bad(e, p, "must be a string");
    }
    cJSON *part = cJSON_CreateObject();
    cJSON_AddStringToObject(part, "type", "text");
    cJSON_AddStringToObject(part, "text", text->valuestring);
    cJSON_AddItemToArray(parts, part);
    return 0;
}

cJSON *api_text_content(const cJSON *v, const char *param, oai_error *e) {
    if (cJSON_IsString(v)) return cJSON_Duplicate(v, 1);
    if (!cJSON_IsArray(v)) {
        api_bad(e, param, "must be a string or an array of text blocks");
        return NULL;
    }
    cJSON *parts = cJSON_CreateArray();
    int j = 0;
    const cJSON *b;
    cJSON_ArrayForEach(b, v) {
        char p[128];
        snprintf(p, sizeof p, "%.80s.%d", param, j++);
        const cJSON *type = cJSON_GetObjectItemCaseSensitive(b, "type");
        if (!cJSON_IsObject(b) || !cJSON_IsString(type) || !is_text_type(type->valuestring)) {
            api_bad(e, p, "must be a text block: this server reads text only");
            cJSON_Delete(parts);
            return NULL;
        }
        if (api_add_text_part(parts, b, p, e)) {
            cJSON_Delete(parts);
            return NULL;
        }
    }
    return parts;
}

cJSON *api_tool_call(const char *id, const char *name, cJSON *arguments) {
    cJSON *c = cJSON_CreateObject();
    cJSON_AddStringToObject(c, "id", id);
    cJSON_AddStringToObject(c, "type", "function");
    cJSON *fn = cJSON_AddObjectToObject(c, "function");
    cJSON_AddStringToObject(fn, "name", name);
    cJSON_AddItemToObject(fn, "arguments", arguments);
    return c;
}

cJSON *api_function_tool(const cJSON *t, const char *name_key, const char *desc_key, const cJSON *schema) {
    const cJSON *name = cJSON_GetObjectItemCaseSensitive(t, name_key);
    if (!cJSON_IsString(name)) return NULL;
    const cJSON *desc = oai_field(t, desc_key);
    cJSON *tool = cJSON_CreateObject();
    cJSON_AddStringToObject(tool, "type", "function");
    cJSON *fn = cJSON_AddObjectToObject(tool, "function");
    cJSON_AddStringToObject(fn, "name", name->valuestring);
    if (desc) cJSON_AddItemToObject(fn, "description", cJSON_Duplicate(desc, 1));
    if (schema) cJSON_AddItemToObject(fn, "parameters", cJSON_Duplicate(schema, 1));
    return tool;
}

/* tool_prompt.c — tools for templates that do not render them; see tool_prompt.h. */
#include "tool_prompt.h"

#include <stdlib.h>
#include <string.h>

#include "openai.h"

/* Qwen2.5's tool prompt, word for word: the instructions a Hermes-trained model knows. */
static const char TOOLS_HEAD[] =
    "# Tools\n\nYou may call one or more functions to assist with the user query.\n\n"
    "You are provided with function signatures within <tools></tools> XML tags:\n<tools>";
static const char TOOLS_TAIL[] =
    "\n</tools>\n\nFor each function call, return a json object with function name and arguments within "
    "<tool_call></tool_call> XML tags:\n<tool_call>\n{\"name\": <function-name>, \"arguments\": "
    "<args-json-object>}\n</tool_call>";

static int add_str(oai_buf *b, const char *s) { return oai_buf_add(b, s, strlen(s)); }

/* Appends cJSON's compact text of v. */
static int add_json(oai_buf *b, const cJSON *v) {
    char *s = cJSON_PrintUnformatted(v);
    if (!s) return -1;
    const int rc = add_str(b, s);
    free(s);
    return rc;
}

static const char *content_of(const cJSON *m) {
    const cJSON *c = cJSON_GetObjectItemCaseSensitive(m, "content");
    return cJSON_IsString(c) ? c->valuestring : "";
}

static int is_role(const cJSON *m, const char *role) {
    const cJSON *r = cJSON_GetObjectItemCaseSensitive(m, "role");
    return cJSON_IsString(r) && !strcmp(r->valuestring, role);
}

static cJSON *message(const char *role, const char *content) {
    cJSON *m = cJSON_CreateObject();
    cJSON_AddStringToObject(m, "role", role);
    cJSON_AddStringToObject(m, "content", content);
    return m;
}

/* The assistant's content followed by its calls in Hermes markup. */
static int write_calls(oai_buf *b, const cJSON *m) {
    const cJSON *calls = cJSON_GetObjectItemCaseSensitive(m, "tool_calls"), *c;
    int rc = add_str(b, content_of(m));
    cJSON_ArrayForEach(c, calls) {
        const cJSON *fn = cJSON_GetObjectItemCaseSensitive(c, "function");
        cJSON *call = cJSON_CreateObject();
        cJSON_AddItemToObject(call, "name", cJSON_Duplicate(cJSON_GetObjectItemCaseSensitive(fn, "name"), 1));
        cJSON_AddItemToObject(call, "arguments",
                              cJSON_Duplicate(cJSON_GetObjectItemCaseSensitive(fn, "arguments"), 1));
        if (b->len) rc |= add_str(b, "\n");
        rc |= add_str(b, "<tool_call>\n");
        rc |= add_json(b, call);
        rc |= add_str(b, "\n</tool_call>");
        cJSON_Delete(call);
    }
    return rc;
}

cJSON *tp_messages(const cJSON *messages, const cJSON *tools) {
    cJSON *out = cJSON_CreateArray();
    oai_buf b = {0};
    int rc = out ? 0 : -1;
    const cJSON *m = messages ? messages->child : NULL;
    if (tools) {
        /* the client's system text first, then the tools */
        if (m && is_role(m, "system")) {
            rc |= add_str(&b, content_of(m));
            rc |= add_str(&b, "\n\n");
            m = m->next;
        }
        rc |= add_str(&b, TOOLS_HEAD);
        const cJSON *t;
        cJSON_ArrayForEach(t, tools) {
            rc |= add_str(&b, "\n");
            rc |= add_json(&b, t);
        }
        rc |= add_str(&b, TOOLS_TAIL);
        if (!rc) cJSON_AddItemToArray(out, message("system", b.p));
        b.len = 0;
    }
    while (!rc && m) {
        if (is_role(m, "tool")) { /* a run of tool results: one user turn */
            for (; m && is_role(m, "tool"); m = m->next) {
                if (b.len) rc |= add_str(&b, "\n");
                rc |= add_str(&b, "<tool_response>\n");
                rc |= add_str(&b, content_of(m));
                rc |= add_str(&b, "\n</tool_response>");
            }
            if (!rc) cJSON_AddItemToArray(out, message("user", b.p));
            b.len = 0;
            continue;
        }
        if (cJSON_GetObjectItemCaseSensitive(m, "tool_calls")) {
            rc |= write_calls(&b, m);
            if (!rc) cJSON_AddItemToArray(out, message("assistant", b.p));
            b.len = 0;
        } else {
            cJSON_AddItemToArray(out, cJSON_Duplicate(m, 1));
        }
        m = m->next;
    }
    oai_buf_free(&b);
    if (rc) {
        cJSON_Delete(out);
        return NULL;
    }
    return out;
}

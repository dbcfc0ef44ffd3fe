/* tool_grammar.c — the grammar of a tool call; see tool_grammar.h.
 *
 * Each tool's arguments grammar comes from json_schema.h with its own rule
 * names; before they are put together every rule name of tool k is
 * prefixed with "tk-" (identifiers outside literals, character classes,
 * repetition counts and comments), so the shared JSON rules each schema
 * grammar carries do not collide.
 */
#include "tool_grammar.h"

#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "json_schema.h"
#include "openai.h"

static int is_name_char(char c) { return isalnum((unsigned char)c) || c == '-' || c == '_'; }

/* Appends g with every rule name prefixed. */
static int add_renamed(oai_buf *b, const char *g, const char *prefix) {
    const size_t pl = strlen(prefix);
    int rc = 0;
    for (const char *p = g; *p && !rc;) {
        const char *s = p;
        if (*p == '"' || *p == '[') { /* a literal or a character class, escapes included */
            const char close = *p == '"' ? '"' : ']';
            for (p++; *p && *p != close; p++)
                if (*p == '\\' && p[1]) p++;
            if (*p) p++;
        } else if (*p == '{') { /* a repetition count */
            while (*p && *p != '}') p++;
            if (*p) p++;
        } else if (*p == '#') { /* a comment, to the end of the line */
            while (*p && *p != '\n') p++;
        } else if (is_name_char(*p)) {
            while (is_name_char(*p)) p++;
            rc = oai_buf_add(b, prefix, pl);
        } else {
            p++;
        }
        rc |= oai_buf_add(b, s, (size_t)(p - s));
    }
    return rc;
}

/* s as the inside of a GBNF literal. */
static int add_literal_text(oai_buf *b, const char *s) {
    int rc = 0;
    for (; *s && !rc; s++) {
        char esc[8];
        if (*s == '"' || *s == '\\') snprintf(esc, sizeof esc, "\\%c", *s);
        else if (*s == '\n') snprintf(esc, sizeof esc, "\\n");
        else if ((unsigned char)*s < 0x20) snprintf(esc, sizeof esc, "\\x%02x", (unsigned char)*s);
        else snprintf(esc, sizeof esc, "%c", *s);
        rc = oai_buf_add(b, esc, strlen(esc));
    }
    return rc;
}

static int add(oai_buf *b, const char *s) { return oai_buf_add(b, s, strlen(s)); }

char *tg_grammar(tc_format f, const cJSON *tools, const char *only, int parallel, int open_in_grammar,
                 int *bad_tool, char *err, size_t errlen) {
    *bad_tool = -1;
    /* Hermes markup the grammar cannot write (control tokens): one bare call after the server's marker */
    const int markup = f == TC_HERMES && open_in_grammar;
    if (f == TC_HERMES && !open_in_grammar) parallel = 0;
    oai_buf calls = {0}, rules = {0}, out = {0};
    int rc = add(&calls, "call ::= ");
    int k = 0, n = 0;
    const cJSON *t;
    cJSON_ArrayForEach(t, tools) {
        const cJSON *fn = cJSON_GetObjectItemCaseSensitive(t, "function");
        const char *name = cJSON_GetObjectItemCaseSensitive(fn, "name")->valuestring;
        const cJSON *params = cJSON_GetObjectItemCaseSensitive(fn, "parameters");
        if (only && strcmp(name, only)) {
            k++;
            continue;
        }
        char *g = NULL;
        if (cJSON_IsObject(params)) {
            char jerr[256];
            if (!(g = js_schema_grammar(params, jerr, sizeof jerr))) {
                snprintf(err, errlen, "%s", jerr);
                *bad_tool = k;
                goto fail;
            }
        } else {
            g = strdup(js_object_grammar());
        }
        char prefix[32];
        snprintf(prefix, sizeof prefix, "t%d-", k);
        rc |= g ? add_renamed(&rules, g, prefix) : -1;
        free(g);
        /* this tool's call: the name fixed, the arguments by its grammar */
        rc |= add(&calls, n ? " | \"" : "\"");
        rc |= add_literal_text(&calls, markup ? "<tool_call>\n" : "");
        rc |= add_literal_text(&calls, "{\"name\": \"");
        rc |= add_literal_text(&calls, name);
        rc |= add_literal_text(&calls, f == TC_LLAMA3 ? "\", \"parameters\": " : "\", \"arguments\": ");
        rc |= add(&calls, "\" ");
        rc |= add(&calls, prefix);
        rc |= add(&calls, "root \"");
        rc |= add_literal_text(&calls, markup ? "}\n</tool_call>" : "}");
        rc |= add(&calls, "\"");
        n++;
        k++;
    }
    if (!n) {
        snprintf(err, errlen, "no tool to call");
        goto fail;
    }
    const char *sep = f == TC_HERMES ? "\"\\n\"" : f == TC_LLAMA3 ? "\"; \"" : "\", \"";
    rc |= add(&out, "root ::= ");
    if (f == TC_MISTRAL) rc |= add(&out, open_in_grammar ? "\"[TOOL_CALLS][\" " : "\"[\" ");
    rc |= add(&out, "call");
    if (parallel) {
        rc |= add(&out, " (");
        rc |= add(&out, sep);
        rc |= add(&out, " call)*");
    }
    if (f == TC_MISTRAL) rc |= add(&out, " \"]\"");
    rc |= add(&out, "\n");
    rc |= oai_buf_add(&out, calls.p, calls.len);
    rc |= add(&out, "\n");
    rc |= oai_buf_add(&out, rules.p, rules.len);
    if (rc) {
        snprintf(err, errlen, "out of memory");
        goto fail;
    }
    oai_buf_free(&calls);
    oai_buf_free(&rules);
    return out.p;
fail:
    oai_buf_free(&calls);
    oai_buf_free(&rules);
    oai_buf_free(&out);
    return NULL;
}

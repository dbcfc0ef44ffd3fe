/* test_tool_calls.c — the tool-call parser (runtime/serve/tool_calls.c) on
 * every format: whole texts, the same texts split at every byte (the
 * streamed path must give the same content and calls), malformed markup
 * (given back as content, byte for byte), format detection, call ids, and
 * the grammar of a constrained call in each format (what it accepts is what
 * the parser takes as a call). */
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "grammar.h"
#include "tool_calls.h"
#include "tool_grammar.h"

typedef struct {
    const char *name;
    tc_format fmt;
    const char *text;
    const char *content;  /* expected content */
    const char *calls;    /* expected calls as JSON ([{"name", "arguments"}]) */
} tcase;

static const tcase CASES[] = {
    /* Hermes / Qwen / SmolLM3 */
    {"hermes one call", TC_HERMES, "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>",
     "", "[{\"name\":\"get_weather\",\"arguments\":\"{\\\"city\\\":\\\"Paris\\\"}\"}]"},
    {"hermes text then call", TC_HERMES,
     "Let me check.\n<tool_call>{\"name\": \"f\", \"arguments\": {}}</tool_call>\n",
     "Let me check.", "[{\"name\":\"f\",\"arguments\":\"{}\"}]"},
    {"hermes two calls", TC_HERMES,
     "<tool_call>{\"name\": \"a\", \"arguments\": {\"x\": 1}}</tool_call>\n<tool_call>{\"name\": \"b\", \"arguments\": "
     "{\"s\": \"</tool\"}}</tool_call>",
     "", "[{\"name\":\"a\",\"arguments\":\"{\\\"x\\\":1}\"},{\"name\":\"b\",\"arguments\":\"{\\\"s\\\":\\\"</tool\\\"}\"}]"},
    {"hermes arguments as a string", TC_HERMES, "<tool_call>{\"name\": \"f\", \"arguments\": \"{\\\"k\\\": [1, 2]}\"}</tool_call>",
     "", "[{\"name\":\"f\",\"arguments\":\"{\\\"k\\\": [1, 2]}\"}]"},
    {"hermes unclosed but complete", TC_HERMES, "<tool_call>\n{\"name\": \"f\", \"arguments\": {\"a\": true}}\n",
     "", "[{\"name\":\"f\",\"arguments\":\"{\\\"a\\\":true}\"}]"},
    {"hermes no markup", TC_HERMES, "Paris is the capital of France.  \n", "Paris is the capital of France.  \n", "[]"},
    {"hermes lookalike tag", TC_HERMES, "use <tool> or <tool_cal and x < y", "use <tool> or <tool_cal and x < y", "[]"},
    {"hermes malformed json", TC_HERMES, "A <tool_call>{\"name\": \"f\", \"arguments\": {</tool_call> B",
     "A <tool_call>{\"name\": \"f\", \"arguments\": {</tool_call> B", "[]"},
    {"hermes missing name", TC_HERMES, "<tool_call>{\"arguments\": {}}</tool_call>",
     "<tool_call>{\"arguments\": {}}</tool_call>", "[]"},
    {"hermes arguments not an object", TC_HERMES, "<tool_call>{\"name\": \"f\", \"arguments\": 3}</tool_call>",
     "<tool_call>{\"name\": \"f\", \"arguments\": 3}</tool_call>", "[]"},
    {"hermes unclosed truncated", TC_HERMES, "ok <tool_call>{\"name\": \"f\", \"argu",
     "ok <tool_call>{\"name\": \"f\", \"argu", "[]"},
    {"hermes bad call then good call", TC_HERMES,
     "<tool_call>nope</tool_call><tool_call>{\"name\": \"g\"}</tool_call>",
     "<tool_call>nope</tool_call>", "[{\"name\":\"g\",\"arguments\":\"{}\"}]"},
    /* Llama 3.1 JSON */
    {"llama3 call", TC_LLAMA3, "{\"name\": \"get_weather\", \"parameters\": {\"city\": \"Paris\"}}",
     "", "[{\"name\":\"get_weather\",\"arguments\":\"{\\\"city\\\":\\\"Paris\\\"}\"}]"},
    {"llama3 python tag", TC_LLAMA3, "<|python_tag|>{\"name\": \"f\", \"parameters\": {\"q\": \"a}b\"}}",
     "", "[{\"name\":\"f\",\"arguments\":\"{\\\"q\\\":\\\"a}b\\\"}\"}]"},
    {"llama3 two calls", TC_LLAMA3,
     " {\"name\": \"a\", \"parameters\": {}}; {\"name\": \"b\", \"parameters\": {\"n\": 2}}",
     "", "[{\"name\":\"a\",\"arguments\":\"{}\"},{\"name\":\"b\",\"arguments\":\"{\\\"n\\\":2}\"}]"},
    {"llama3 plain text", TC_LLAMA3, "The weather is {\"sunny\"}.", "The weather is {\"sunny\"}.", "[]"},
    {"llama3 json that is not a call", TC_LLAMA3, "{\"answer\": 42} done", "{\"answer\": 42} done", "[]"},
    {"llama3 unfinished json", TC_LLAMA3, "{\"name\": \"f\", \"parameters\": {", "{\"name\": \"f\", \"parameters\": {", "[]"},
    /* Mistral */
    {"mistral calls", TC_MISTRAL,
     "[TOOL_CALLS][{\"name\": \"a\", \"arguments\": {\"x\": \"]\"}}, {\"name\": \"b\", \"arguments\": {}}]",
     "", "[{\"name\":\"a\",\"arguments\":\"{\\\"x\\\":\\\"]\\\"}\"},{\"name\":\"b\",\"arguments\":\"{}\"}]"},
    {"mistral text first", TC_MISTRAL, "Sure. [TOOL_CALLS] [{\"name\": \"a\", \"arguments\": {}}]",
     "Sure.", "[{\"name\":\"a\",\"arguments\":\"{}\"}]"},
    {"mistral marker without json", TC_MISTRAL, "[TOOL_CALLS] sorry", "[TOOL_CALLS] sorry", "[]"},
    {"mistral bad element", TC_MISTRAL, "[TOOL_CALLS][{\"name\": \"a\", \"arguments\": {}}, 5]",
     "[TOOL_CALLS][{\"name\": \"a\", \"arguments\": {}}, 5]", "[]"},
    {"mistral empty array", TC_MISTRAL, "[TOOL_CALLS][]", "[TOOL_CALLS][]", "[]"},
};

/* Runs the parser over text in pieces of `piece` bytes (0: all at once). */
static void run(const tcase *c, size_t piece, char **content, char **calls) {
    tc_parser p;
    tc_init(&p, c->fmt);
    tc_out out = {.calls = cJSON_CreateArray()};
    const size_t n = strlen(c->text);
    if (!piece) piece = n ? n : 1;
    for (size_t i = 0; i < n; i += piece) tc_feed(&p, c->text + i, i + piece <= n ? piece : n - i, &out);
    tc_finish(&p, &out);
    *content = strdup(out.content.p ? out.content.p : "");
    *calls = cJSON_PrintUnformatted(out.calls);
    oai_buf_free(&out.content);
    cJSON_Delete(out.calls);
    tc_free(&p);
}

static void test_cases(void) {
    for (size_t k = 0; k < sizeof CASES / sizeof CASES[0]; k++) {
        const tcase *c = &CASES[k];
        const size_t n = strlen(c->text);
        for (size_t piece = 0; piece <= n; piece++) {
            char *content, *calls;
            run(c, piece, &content, &calls);
            check(!strcmp(content, c->content), "%s (pieces of %zu): content '%s', want '%s'", c->name, piece,
                  content, c->content);
            check(!strcmp(calls, c->calls), "%s (pieces of %zu): calls %s, want %s", c->name, piece, calls, c->calls);
            free(content);
            free(calls);
        }
    }
}

static void test_detect(void) {
    int native;
    CHECK(tc_detect("{% for message in messages %}{{ message.content }}{% endfor %}", &native) == TC_HERMES &&
              native == 0,
          "a template without tools: the server's Hermes prompt");
    CHECK(tc_detect("{% if tools %}<tools>{{ tools | tojson }}</tools><tool_call>{% endif %}", &native) == TC_HERMES &&
              native == 1,
          "Hermes template");
    CHECK(tc_detect("{% if tools %}{{ '<|python_tag|>' }}{% endif %}ipython", &native) == TC_LLAMA3 && native,
          "Llama 3.1 template");
    CHECK(tc_detect("{% if tools %}[AVAILABLE_TOOLS]{% endif %}[TOOL_CALLS]", &native) == TC_MISTRAL && native,
          "Mistral template");
    CHECK(!strcmp(tc_format_name(TC_LLAMA3), "llama3_json"), "format name");
}

static void test_ids(void) {
    uint64_t rng = 42;
    char a[32], b[32];
    tc_call_id(TC_HERMES, &rng, a);
    tc_call_id(TC_HERMES, &rng, b);
    CHECK(strlen(a) == 29 && !strncmp(a, "call_", 5) && strcmp(a, b), "call ids '%s' '%s'", a, b);
    tc_call_id(TC_MISTRAL, &rng, a);
    CHECK(strlen(a) == 9 && strspn(a, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789") == 9,
          "Mistral id '%s'", a);
}

/* 1 when the whole text is a sentence of the grammar. */
static int accepts(const char *grammar, const char *text) {
    char err[256];
    gram_grammar *g = gram_compile(grammar, strlen(grammar), err, sizeof err);
    if (!g) {
        printf("grammar does not compile: %s\n%s\n", err, grammar);
        return -1;
    }
    gram_matcher *m = gram_matcher_new(g, err, sizeof err);
    gram_free(g);
    const int ok = m && gram_accept_bytes(m, text, strlen(text)) == 0 && gram_is_complete(m);
    gram_matcher_free(m);
    return ok;
}

static void test_grammar(void) {
    cJSON *tools = cJSON_Parse(
        "[{\"type\": \"function\", \"function\": {\"name\": \"get_weather\", \"parameters\": {\"type\": \"object\", "
        "\"properties\": {\"city\": {\"type\": \"string\"}, \"days\": {\"type\": \"integer\"}}, \"required\": "
        "[\"city\"], \"additionalProperties\": false}}},"
        " {\"type\": \"function\", \"function\": {\"name\": \"ping\"}}]");
    static const struct {
        tc_format f;
        const char *only;
        int parallel, open, ok;
        const char *text;
    } G[] = {
        {TC_HERMES, NULL, 0, 1, 1, "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>"},
        {TC_HERMES, NULL, 0, 1, 1, "<tool_call>\n{\"name\": \"ping\", \"arguments\": {\"any\": [1, {}]}}\n</tool_call>"},
        {TC_HERMES, NULL, 0, 1, 0, "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"days\": 2}}\n</tool_call>"},
        {TC_HERMES, NULL, 0, 1, 0, "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"P\", \"x\": 1}}\n</tool_call>"},
        {TC_HERMES, NULL, 0, 1, 0, "<tool_call>\n{\"name\": \"other\", \"arguments\": {}}\n</tool_call>"},
        {TC_HERMES, NULL, 0, 1, 0, "<tool_call>\n{\"name\": \"ping\", \"arguments\": {}}\n</tool_call>\n<tool_call>\n"
                                   "{\"name\": \"ping\", \"arguments\": {}}\n</tool_call>"},
        {TC_HERMES, NULL, 1, 1, 1, "<tool_call>\n{\"name\": \"ping\", \"arguments\": {}}\n</tool_call>\n<tool_call>\n"
                                   "{\"name\": \"ping\", \"arguments\": {}}\n</tool_call>"},
        {TC_HERMES, "ping", 0, 1, 0, "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>"},
        {TC_HERMES, NULL, 0, 0, 1, "{\"name\": \"ping\", \"arguments\": {}}"},
        {TC_LLAMA3, NULL, 1, 1, 1, "{\"name\": \"get_weather\", \"parameters\": {\"city\": \"Oslo\", \"days\": 3}}; "
                                   "{\"name\": \"ping\", \"parameters\": {}}"},
        {TC_LLAMA3, NULL, 0, 1, 0, "{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Oslo\"}}"},
        {TC_MISTRAL, NULL, 1, 1, 1, "[TOOL_CALLS][{\"name\": \"ping\", \"arguments\": {}}, {\"name\": \"get_weather\", "
                                    "\"arguments\": {\"city\": \"Rome\"}}]"},
        {TC_MISTRAL, NULL, 0, 0, 1, "[{\"name\": \"ping\", \"arguments\": {}}]"},
        {TC_MISTRAL, NULL, 0, 0, 0, "[TOOL_CALLS][{\"name\": \"ping\", \"arguments\": {}}]"},
    };
    for (size_t k = 0; k < sizeof G / sizeof G[0]; k++) {
        int bad = -2;
        char err[256];
        char *g = tg_grammar(G[k].f, tools, G[k].only, G[k].parallel, G[k].open, &bad, err, sizeof err);
        CHECK(g != NULL, "grammar %zu: %s", k, err);
        if (!g) continue;
        const int ok = accepts(g, G[k].text);
        CHECK(ok == G[k].ok, "grammar %zu (%s) on '%s': %d, want %d", k, tc_format_name(G[k].f), G[k].text, ok,
              G[k].ok);
        if (ok == 1) { /* what the grammar writes, the parser takes as calls and nothing else */
            tc_parser p;
            tc_init(&p, G[k].f);
            tc_out out = {.calls = cJSON_CreateArray()};
            const char *marker = tc_open_marker(G[k].f);
            if (!G[k].open) tc_feed(&p, marker, strlen(marker), &out);
            tc_feed(&p, G[k].text, strlen(G[k].text), &out);
            tc_finish(&p, &out);
            CHECK(cJSON_GetArraySize(out.calls) >= 1 && out.content.len == 0, "grammar %zu: parsed %d calls, content '%s'",
                  k, cJSON_GetArraySize(out.calls), out.content.p ? out.content.p : "");
            oai_buf_free(&out.content);
            cJSON_Delete(out.calls);
            tc_free(&p);
        }
        free(g);
    }
    /* a schema outside json_schema.h's subset names its tool */
    cJSON *bad_tools = cJSON_Parse("[{\"type\": \"function\", \"function\": {\"name\": \"a\"}}, {\"type\": \"function\", "
                                   "\"function\": {\"name\": \"b\", \"parameters\": {\"type\": \"object\", \"properties\": "
                                   "{\"n\": {\"type\": \"integer\", \"oneOf\": [{\"minimum\": 3}]}}}}}]");
    int bad = -2;
    char err[256];
    char *g = tg_grammar(TC_HERMES, bad_tools, NULL, 1, 1, &bad, err, sizeof err);
    CHECK(!g && bad == 1 && strstr(err, "oneOf"), "bad schema: tool %d, '%s'", bad, err);
    free(g);
    g = tg_grammar(TC_HERMES, bad_tools, "a", 0, 1, &bad, err, sizeof err);
    CHECK(g != NULL, "the other tool alone: %s", err);
    free(g);
    g = tg_grammar(TC_HERMES, bad_tools, "nope", 0, 1, &bad, err, sizeof err);
    CHECK(!g && bad == -1, "no such tool");
    free(g);
    cJSON_Delete(bad_tools);
    cJSON_Delete(tools);
}

int main(void) {
    test_cases();
    test_grammar();
    test_detect();
    test_ids();
    return check_summary();
}

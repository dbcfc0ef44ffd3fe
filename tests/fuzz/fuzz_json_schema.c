/* fuzz_json_schema.c — a JSON schema to its GBNF grammar (runtime/serve/json_schema.c), and that
 * grammar compiled (runtime/serve/grammar_parse.c): a schema the translator accepts must give a
 * grammar the compiler accepts, or the translator has a bug. */
#include <cjson/cJSON.h>

#include "fuzz_common.h"
#include "grammar.h"
#include "json_schema.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t n) {
    cJSON *schema = cJSON_ParseWithLength((const char *)data, n);
    if (!schema) return 0;
    char err[256];
    char *text = js_schema_grammar(schema, err, sizeof err);
    if (text) {
        gram_grammar *g = gram_compile(text, strlen(text), err, sizeof err);
        /* the translator's limits are under the compiler's: only size may fail */
        if (!g && !strstr(err, "more than")) {
            fprintf(stderr, "schema accepted, its grammar refused: %s\n%s\n", err, text);
            abort();
        }
        gram_free(g);
        free(text);
    }
    cJSON_Delete(schema);
    return 0;
}

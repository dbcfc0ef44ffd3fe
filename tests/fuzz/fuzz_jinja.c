/* fuzz_jinja.c — a chat template (runtime/text/jinja*.c): parsed, then rendered with a
 * conversation as a chat template is, under the renderer's default limits. */
#include <cjson/cJSON.h>

#include "fuzz_common.h"
#include "jinja.h"

static cJSON *context;

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t n) {
    if (!context)
        context = cJSON_Parse("{\"messages\": [{\"role\": \"system\", \"content\": \"Be brief.\"},"
                              "{\"role\": \"user\", \"content\": \"Hi <b>there</b>\"},"
                              "{\"role\": \"assistant\", \"content\": \"Hello.\", \"tool_calls\": "
                              "[{\"function\": {\"name\": \"f\", \"arguments\": {\"a\": [1, 2.5, null, true]}}}]}],"
                              "\"add_generation_prompt\": true, \"bos_token\": \"<s>\", \"eos_token\": \"</s>\","
                              "\"tools\": [{\"type\": \"function\", \"function\": {\"name\": \"f\"}}]}");
    char err[256];
    jinja_template *t = jinja_parse((const char *)data, n, err, sizeof err);
    if (t) {
        free(jinja_render(t, context, err, sizeof err));
        jinja_free(t);
    }
    return 0;
}

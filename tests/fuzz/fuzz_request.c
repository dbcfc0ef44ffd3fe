/* fuzz_request.c — a request body to its sampling parameters, messages, tools and structured
 * output (runtime/serve/openai.c, json_schema.c, tool grammars): the first byte picks chat or
 * completions, the rest is the body. */
#include "fuzz_common.h"
#include "openai.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t n) {
    if (n < 1) return 0;
    const oai_kind kind = data[0] & 1 ? OAI_CHAT : OAI_COMPLETION;
    oai_request r;
    oai_error e;
    if (oai_parse(kind, (const char *)data + 1, n - 1, 49152, &r, &e) == 0) oai_request_free(&r);
    return 0;
}

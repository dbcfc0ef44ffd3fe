/* fuzz_request.c — a request body to its sampling parameters, messages, tools and structured
 * output (runtime/serve/openai.c, json_schema.c, tool grammars), through each API's parser: the
 * first byte picks completions, chat, Messages (messages_request.c) or Responses
 * (responses_request.c, whose previous_response_id may name the one stored response "resp_a"),
 * the rest is the body. */
#include "fuzz_common.h"
#include "messages_api.h"
#include "openai.h"
#include "responses_api.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t n) {
    static rs_store *store;
    if (!store) {
        store = rs_new(4, 1 << 20);
        rs_put(store, "resp_a",
               "[{\"role\":\"user\",\"content\":\"hi\"},{\"role\":\"assistant\",\"content\":\"hello\","
               "\"tool_calls\":[{\"id\":\"call_1\",\"type\":\"function\",\"function\":{\"name\":\"f\","
               "\"arguments\":\"{}\"}}]}]",
               "{}");
    }
    if (n < 1) return 0;
    const char *body = (const char *)data + 1;
    oai_request r;
    oai_error e;
    int rc;
    switch (data[0] & 3) {
    case 0: rc = oai_parse(OAI_COMPLETION, body, n - 1, 49152, &r, &e); break;
    case 1: rc = oai_parse(OAI_CHAT, body, n - 1, 49152, &r, &e); break;
    case 2: rc = msg_parse(body, n - 1, 49152, 0, &r, &e); break;
    default: rc = rsp_parse(body, n - 1, 49152, store, &r, &e); break;
    }
    if (rc == 0) oai_request_free(&r);
    return 0;
}

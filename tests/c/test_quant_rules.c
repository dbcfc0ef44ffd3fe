/* test_quant_rules.c — runtime/load/quant_rules.c: which modules a quantization_config leaves
 * unquantized (modules_to_not_convert, ignored_layers: whole components) and GPTQModel's dynamic
 * rules (Python regular expressions, compiled by PCRE2, from the start of the name, in order, -:
 * excluding). */
#include <stdio.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "check.h"
#include "quant_rules.h"

static qr_rules *parse(const char *json, int dynamic_allowed, char *err, size_t errlen) {
    cJSON *q = cJSON_Parse(json);
    CHECK(q != NULL, "test JSON parses: %s", json);
    err[0] = 0;
    qr_rules *r = qr_parse(q, dynamic_allowed, err, errlen);
    cJSON_Delete(q);
    return r;
}

/* 1: excluded; 0: quantized with (bits, group_size) overrides as given. */
static void expect(const qr_rules *r, const char *module, int excluded, int bits, long long group_size) {
    const qr_match m = qr_lookup(r, module);
    check(m.excluded == excluded && m.bits == bits && m.group_size == group_size,
          "%s: excluded %d bits %d group_size %lld, expected %d %d %lld", module, m.excluded, m.bits,
          (long long)m.group_size, excluded, bits, group_size);
}

static void expect_refused(const char *json, int dynamic_allowed, const char *words) {
    char err[256];
    qr_rules *r = parse(json, dynamic_allowed, err, sizeof err);
    check(r == NULL && strstr(err, words) != NULL, "%s refused naming '%s' (got: %s)", json, words, r ? "accepted" : err);
    qr_free(r);
}

int main(void) {
    char err[256];
    qr_rules *r = parse("{\"modules_to_not_convert\": [\"gate\", \"lm_head\", \"model.layers.3\"],"
                        " \"ignored_layers\": [\"mlp.shared_experts\"]}", 0, err, sizeof err);
    CHECK(r != NULL, "lists parse: %s", err);
    expect(r, "model.layers.0.block_sparse_moe.gate", 1, 0, 0);
    expect(r, "model.layers.0.mlp.gate", 1, 0, 0);
    expect(r, "model.layers.0.mlp.experts.1.gate_proj", 0, 0, 0); /* "gate" is not a component of gate_proj */
    expect(r, "model.layers.0.mlp.gate_up_proj", 0, 0, 0);
    expect(r, "lm_head", 1, 0, 0);
    expect(r, "model.layers.3.self_attn.q_proj", 1, 0, 0);
    expect(r, "model.layers.31.self_attn.q_proj", 0, 0, 0); /* layer 31 is not layer 3 */
    expect(r, "model.layers.1.mlp.shared_experts.up_proj", 1, 0, 0);
    expect(r, "model.layers.1.mlp.experts.2.up_proj", 0, 0, 0);
    CHECK(strcmp(qr_lookup(r, "model.layers.1.mlp.shared_experts.up_proj").key, "ignored_layers") == 0, "the key named");
    qr_free(r);

    /* dynamic: the first matching rule decides; re.match anchors at the start only */
    r = parse("{\"dynamic\": {\"-:.*\\\\.mlp\\\\.gate$\": {},"
              " \"+:model\\\\.layers\\\\.\\\\d+\\\\.mlp\\\\.experts\\\\.(?:0|1)\\\\.down_proj\": {\"bits\": 8, \"group_size\": 32},"
              " \".*down_proj\": {\"group_size\": -1, \"sym\": true},"
              " \"+:.*experts\\\\.[\\\\d]+\\\\.up_.*?\": {\"bits\": 8},"
              " \"-:\\\\w+\\\\.layers\\\\.7\\\\.\": {}}}", 1, err, sizeof err);
    CHECK(r != NULL, "dynamic parses: %s", err);
    expect(r, "model.layers.0.mlp.gate", 1, 0, 0);
    expect(r, "model.layers.0.mlp.gate_proj", 0, 0, 0); /* $ ends the router rule */
    expect(r, "model.layers.12.mlp.experts.1.down_proj", 0, 8, 32);
    expect(r, "model.layers.12.mlp.experts.2.down_proj", 0, 0, -1);
    expect(r, "model.layers.2.mlp.experts.5.up_proj", 0, 8, 0);
    expect(r, "model.layers.7.self_attn.o_proj", 1, 0, 0);
    expect(r, "model.layers.17.self_attn.o_proj", 0, 0, 0);
    expect(r, "xmodel.layers.0.mlp.experts.0.down_proj", 0, 0, -1); /* not from the start: the third rule */
    qr_free(r);

    r = parse("{}", 1, err, sizeof err);
    CHECK(r != NULL, "an empty configuration parses");
    expect(r, "model.layers.0.mlp.gate", 0, 0, 0);
    qr_free(r);
    r = parse("{\"modules_to_not_convert\": null, \"dynamic\": null}", 0, err, sizeof err);
    CHECK(r != NULL, "null fields are absent ones: %s", err);
    qr_free(r);

    /* Python's syntax beyond POSIX: lookarounds, named groups and their backreferences, \b, negated
     * classes and escapes inside [...] */
    r = parse("{\"dynamic\": {\"-:(?!model\\\\.layers\\\\.0\\\\.).*\\\\bgate$\": {},"
              " \"+:(?P<l>model)\\\\.layers\\\\.[\\\\D]*(?P=l)\": {\"bits\": 8},"
              " \"+:.*experts\\\\.[0\\\\-9]\\\\.up_proj\": {\"group_size\": 32}}}", 1, err, sizeof err);
    CHECK(r != NULL, "Python forms parse: %s", err);
    expect(r, "model.layers.1.mlp.gate", 1, 0, 0);
    expect(r, "model.layers.0.mlp.gate", 0, 0, 0);        /* the lookahead keeps layer 0's router */
    expect(r, "model.layers.1.mlp.gate_proj", 0, 0, 0);   /* $ after \b gate */
    expect(r, "model.layers.xmodel", 0, 8, 0);            /* (?P=l) repeats the named group */
    expect(r, "model.layers.1.mlp.experts.9.up_proj", 0, 0, 32);
    expect(r, "model.layers.1.mlp.experts.5.up_proj", 0, 0, 0); /* [0\-9] is 0, - or 9 */
    qr_free(r);

    expect_refused("{\"dynamic\": {\"+:(x\": {}}}", 1, "'+:(x': not a regular expression");
    expect_refused("{\"dynamic\": {\"+:x{2,1}\": {}}}", 1, "'+:x{2,1}'");
    expect_refused("{\"dynamic\": {\"+:x\": {\"bits\": 3}}}", 1, "bits must be 4 or 8");
    expect_refused("{\"dynamic\": {\"+:x\": {\"group_size\": 1.5}}}", 1, "group_size");
    expect_refused("{\"dynamic\": {\"+:x\": 4}}", 1, "must map to an object");
    expect_refused("{\"dynamic\": [1]}", 1, "must be an object");
    expect_refused("{\"dynamic\": {\"-:x\": {}}}", 0, "GPTQ field");
    expect_refused("{\"modules_to_not_convert\": \"gate\"}", 0, "must be a list");
    expect_refused("{\"ignored_layers\": [\"\"]}", 0, "ignored_layers[0]");
    return check_summary();
}

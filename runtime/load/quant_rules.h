/* quant_rules.h — which modules a quantized checkpoint leaves unquantized, and per-module settings (qr_ prefix).
 *
 * A quantization_config may name modules that stay in floating point and
 * settings that differ per module:
 *
 *   modules_to_not_convert (transformers: AWQ, FP8, GPTQ) and ignored_layers
 *     (vLLM's fp8 configs): lists of module names. An entry names a module
 *     when it is a run of whole dot-separated components of the module's
 *     name: "gate" names model.layers.0.block_sparse_moe.gate but not
 *     model.layers.0.mlp.experts.0.gate_proj; "model.layers.0.mlp.gate" names
 *     exactly that module.
 *   dynamic (GPTQModel): an object of rules in order, each key a Python
 *     regular expression matched at the start of the module name; "-:re"
 *     leaves the matching module unquantized, "+:re" or "re" gives it the
 *     rule's bits and group_size (other keys of a rule do not change how the
 *     stored tensors decode). The first matching rule decides.
 *
 * The rules' Python regular expressions are compiled by PCRE2 (whose syntax
 * is Python's for these ASCII names: classes, groups, lookarounds, \b),
 * anchored at the start as re.match is; one it cannot compile is refused
 * with the rule named and PCRE2's reason.
 */
#ifndef INGOT_QUANT_RULES_H
#define INGOT_QUANT_RULES_H

#include <stdint.h>

#include <cjson/cJSON.h>

typedef struct qr_rules qr_rules;

/* What the configuration says about one module. */
typedef struct {
    int excluded;        /* 1: the configuration leaves the module unquantized */
    const char *key;     /* excluded: the quantization_config key that says so */
    const char *entry;   /* excluded: its entry or rule, as written */
    int bits;            /* a dynamic rule's bits, 0 = the configuration's */
    int64_t group_size;  /* a dynamic rule's group_size, 0 = the configuration's */
} qr_match;

/* Reads the fields above from quantization_config `qcfg` (dynamic only when
 * `dynamic_allowed`: GPTQ). Returns NULL with one line in err naming the key
 * on a malformed field, or when out of memory; a configuration without any
 * of the fields gives an empty rule set. */
qr_rules *qr_parse(const cJSON *qcfg, int dynamic_allowed, char *err, size_t errlen);

/* The configuration's word on module `name` (a linear's prefix, e.g.
 * "model.layers.0.mlp.experts.3.up_proj"). */
qr_match qr_lookup(const qr_rules *r, const char *name);

void qr_free(qr_rules *r);

#endif

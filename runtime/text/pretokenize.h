/* pretokenize.h — split rules (pre-tokenizer regexes as hand-written matchers) for the BPE tokenizer.
 *
 * Each rule reproduces one known regex (GPT-2's, Llama-3's, Qwen2's) with the
 * leftmost-first alternative semantics of the regex engines the references use.
 * Text is UTF-8; an invalid byte counts as one character of no category, which
 * only ever matches on its own.
 */
#ifndef INGOT_PRETOKENIZE_H
#define INGOT_PRETOKENIZE_H

#include <stddef.h>
#include <stdint.h>

typedef enum {
    PT_GPT2,        /* 's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+ */
    PT_LLAMA3,      /* (?i:'s|...)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+ */
    PT_QWEN2,       /* as PT_LLAMA3 with \p{N} single */
    PT_DIGITS_EACH, /* \p{N}: every number character alone (HF Digits individual_digits) */
    PT_DIGITS_RUNS, /* \p{N}+ runs (HF Digits without individual_digits) */
    PT_PREFIX_SPACE /* not a split: prepend ' ' unless the piece starts with one (ByteLevel add_prefix_space) */
} pt_rule;

/* Character classes used by the rules. */
enum { PT_C_INVALID = 0, PT_C_LETTER, PT_C_NUMBER, PT_C_SPACE, PT_C_OTHER };

/* Decodes the character at s[pos..len): returns its byte length (>= 1) and sets
 * *cp (0xFFFFFFFF for an invalid byte) and *cls. pos must be < len. */
size_t pt_char(const uint8_t *s, size_t len, size_t pos, uint32_t *cp, int *cls);

/* Byte length of the rule's match that starts at pos (< len) in s[0..len). Always >= 1.
 * Split rules only (not PT_PREFIX_SPACE). */
size_t pt_match(pt_rule rule, const uint8_t *s, size_t len, size_t pos);

/* Recognises a Split regex pattern string from tokenizer.json; returns 0 and sets
 * *rule, or -1 for a pattern without a matcher. */
int pt_rule_from_pattern(const char *pattern, pt_rule *rule);

#endif

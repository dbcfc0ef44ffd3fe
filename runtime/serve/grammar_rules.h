/* grammar_rules.h — the compiled form of a grammar: what grammar_parse.c builds
 * from GBNF text and the matcher (grammar.c) follows. Internal to the grammar's
 * files; everything else uses grammar.h.
 *
 * Layout (the one llama.cpp uses): every rule is a run of elements, its
 * alternatives separated by ALT and the last one closed by END. A character
 * class is CHAR or CHAR_NOT followed by CHAR_RNG_UPPER (the top of a range)
 * and CHAR_ALT (more characters or ranges); RULE_REF names another rule.
 * Characters are Unicode code points.
 */
#ifndef INGOT_GRAMMAR_RULES_H
#define INGOT_GRAMMAR_RULES_H

#include <stdatomic.h>
#include <stdint.h>

#include "grammar.h"

enum {
    G_END,            /* end of a rule */
    G_ALT,            /* start of the next alternative */
    G_RULE_REF,       /* value: rule id */
    G_CHAR,           /* value: code point; starts a class */
    G_CHAR_NOT,       /* value: code point; starts a negated class */
    G_CHAR_RNG_UPPER, /* value: upper end of the range begun by the element before */
    G_CHAR_ALT,       /* value: one more code point (or range start) of the class */
    G_CHAR_ANY,       /* any code point: "." */
};

typedef struct {
    uint32_t type, value;
} gelem;

struct gram_grammar {
    atomic_int refs;
    gelem *elems;
    int n_elems;
    int n_rules;
    int32_t *alt_off;  /* [n_rules + 1]: rule r's alternatives are alts[alt_off[r] .. alt_off[r + 1]) */
    int32_t *alts;     /* element position of each alternative's first element */
    int32_t *after;    /* [n_elems]: for a class start, the position after the class */
    uint32_t *ascii;   /* [n_elems * 4]: for a class start, which ASCII bytes it matches */
    int root;
};

static inline int is_class_start(uint32_t t) { return t == G_CHAR || t == G_CHAR_NOT || t == G_CHAR_ANY; }

/* Does the class starting at pos contain cp? *after: the position past the class (grammar.c). */
int gram_class_match(const gelem *e, int pos, uint32_t cp, int *after);

#endif

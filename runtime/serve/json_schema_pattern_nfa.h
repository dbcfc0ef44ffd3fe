/* json_schema_pattern_nfa.h — a pattern's NFA, shared by json_schema_pattern.c (which parses
 * the pattern and builds it) and json_schema_pattern_dfa.c (which turns it into grammar rules).
 * Internal to those files; everything else uses json_schema_pattern.h.
 *
 * A Thompson automaton over Unicode code points: a SET state consumes one character of its
 * set, a SPLIT state goes on to both its successors consuming nothing, MATCH accepts. The
 * search semantics are built in: an unanchored start is a loop over any character before the
 * pattern, an unanchored end a loop over any character after MATCH is reached (any_loop).
 */
#ifndef INGOT_JSON_SCHEMA_PATTERN_NFA_H
#define INGOT_JSON_SCHEMA_PATTERN_NFA_H

#include <stddef.h>
#include <stdint.h>

/* the code points a string can hold: UTF-16 surrogates are left out of every set */
#define JSP_MAX_CP 0x10FFFFu
#define JSP_SURR_LO 0xD800u
#define JSP_SURR_HI 0xDFFFu

typedef struct {
    uint32_t lo, hi;
} jsp_range;

enum { JSP_SET, JSP_SPLIT, JSP_MATCH };

typedef struct {
    int kind;     /* JSP_SET, JSP_SPLIT or JSP_MATCH */
    int set;      /* JSP_SET: the characters it consumes */
    int out;      /* JSP_SET: the state after the character; JSP_SPLIT: one successor */
    int out2;     /* JSP_SPLIT: the other */
} jsp_state;

typedef struct {
    jsp_state *states;
    int n_states;
    jsp_range *ranges; /* set i: ranges[set_off[i] .. set_off[i + 1]), sorted, disjoint, not adjacent */
    int *set_off;      /* [n_sets + 1] */
    int n_sets;
    int start, match;
    int any_loop;      /* the SET state looping over any character once a match with an unanchored end
                        * is complete (every string from there on matches), or -1 */
} jsp_nfa;

/* Parses pattern (NUL-terminated) and builds its NFA. 0, or -1 with err filled
 * (nfa then holds nothing to free). */
int jsp_nfa_build(const char *pattern, jsp_nfa *nfa, char *err, size_t errlen);
void jsp_nfa_free(jsp_nfa *nfa);

/* Does set contain cp? */
int jsp_set_has(const jsp_nfa *nfa, int set, uint32_t cp);

#endif

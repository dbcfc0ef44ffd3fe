/* json_schema_pattern.h — a JSON Schema "pattern" as GBNF (jsp_ prefix), for json_schema.h.
 *
 * The pattern is an ECMA-262 regular expression, matched as JSON Schema says:
 * unanchored (it may match anywhere in the string) against the decoded
 * string, with PCRE2's meaning where ECMA-262 and PCRE2 differ (code points,
 * not UTF-16 units; "." is any character but "\n"). The subset:
 *   literals; escapes \d \D \w \W \s \S (ASCII digits and word characters,
 *   ECMA-262's whitespace), \t \n \r \f \v \0 \xHH \uHHHH and any escaped
 *   punctuation (\. \\ \/ \- \$ ...); "."; classes [...] and [^...] with
 *   ranges and those escapes (\b is a backspace there); ^ at the start and $
 *   at the end of the pattern or of one of its top-level alternatives;
 *   * + ? {n} {n,} {n,m} (a lazy "?" after one is accepted: a grammar has no
 *   preference between matches); groups ( ) and (?: ); alternation |.
 * Refused, with what and where: backreferences, lookahead and lookbehind,
 * \b \B, named groups, inline flags, \p{...}, \cX, \u{...}, octal escapes,
 * POSIX classes, empty classes, anchors anywhere else, a "{" that does not
 * start a count, a quantifier after a quantifier.
 *
 * The grammar spells each allowed character as JSON does: '"' as \", '\' as
 * \\, a control character as \b \f \n \r \t or \u00XX (either case), any
 * other as itself in UTF-8; other spellings (\/, \u0041) are not allowed.
 *
 * Limits (each an error, never unbounded memory or time): the pattern's
 * length, the nesting of groups, the counts of {n,m}, the automaton's size
 * after counts are expanded, the work of building it, and the text of the
 * rules.
 */
#ifndef INGOT_JSON_SCHEMA_PATTERN_H
#define INGOT_JSON_SCHEMA_PATTERN_H

#include <stddef.h>

#define JSP_MAX_PATTERN 1000    /* bytes of pattern */
#define JSP_MAX_GROUP_DEPTH 32  /* groups inside groups */
#define JSP_MAX_COUNT 1000      /* n and m of {n}, {n,}, {n,m} */
#define JSP_MAX_NFA 20000       /* NFA states, counts expanded */
#define JSP_MAX_STATES 4096     /* grammar states (with a length bound: state and length pairs) */
#define JSP_MAX_BRANCHES 128    /* distinct successors of one state (the matcher keeps two stacks each) */
#define JSP_MAX_WORK 10000000L  /* steps of building the automaton (about 0.1 s at most) */

/* GBNF rules (malloc'd text, one per line) of which the rule `name` matches the
 * JSON string literal (quotes included) of exactly the strings that pattern
 * matches and whose length in characters (code points) is within [min_len,
 * max_len] (max_len < 0: unbounded). The other rules' names start with
 * `name` and "-". NULL with err filled otherwise ("lookahead '(?=' is not
 * supported (at offset 3)"; the caller adds the keyword and the schema path). */
char *jsp_grammar(const char *pattern, long min_len, long max_len, const char *name, char *err, size_t errlen);

#endif

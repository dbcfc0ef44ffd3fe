/* test_grammar.c — the GBNF compiler, the matcher and the token mask (runtime/serve/grammar.h).
 *
 * Parser errors carry a position and name their cause; the matcher accepts
 * exactly the sentences of small grammars (UTF-8, classes, repetition
 * counts, nesting); pathological grammars hit a limit instead of running
 * away; and gram_mask agrees, token for token, with feeding each token's
 * bytes to a copy of the matcher, on a synthetic vocabulary of random byte
 * strings (ASCII, multi-byte characters, lone UTF-8 fragments) along random
 * accepted paths through several grammars.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "grammar.h"
#include "json_schema.h"
#include "xorshift.h"

static gram_grammar *compile(const char *text, char *err) {
    return gram_compile(text, strlen(text), err, 256);
}

static void expect_error(const char *text, const char *needle) {
    char err[256] = "";
    gram_grammar *g = compile(text, err);
    check(g == NULL && strstr(err, needle) != NULL, "grammar %s: expected an error with '%s', got '%s'", text, needle,
          g ? "(compiled)" : err);
    gram_free(g);
}

/* 1 if the whole string s is a sentence of the grammar (fed in pieces of `step` bytes). */
static int matches(gram_grammar *g, const char *s, size_t step) {
    char err[256];
    gram_matcher *m = gram_matcher_new(g, err, sizeof err);
    if (!m) return -1;
    int ok = 1;
    const size_t n = strlen(s);
    for (size_t i = 0; i < n && ok; i += step) {
        const size_t k = n - i < step ? n - i : step;
        if (gram_accept_bytes(m, s + i, k) != 0) ok = 0;
    }
    if (ok) ok = gram_is_complete(m);
    gram_matcher_free(m);
    return ok;
}

static void expect_matches(const char *grammar, const char *const *yes, const char *const *no) {
    char err[256] = "";
    gram_grammar *g = compile(grammar, err);
    check(g != NULL, "grammar %s: %s", grammar, err);
    if (!g) return;
    for (int i = 0; yes[i]; i++)
        for (size_t step = 1; step <= 3; step++)
            check(matches(g, yes[i], step) == 1, "grammar %s should accept '%s' (step %zu)", grammar, yes[i], step);
    for (int i = 0; no[i]; i++)
        check(matches(g, no[i], 1) == 0, "grammar %s should reject '%s'", grammar, no[i]);
    gram_free(g);
}

static void test_errors(void) {
    expect_error("foo ::= \"a\"\n", "no rule named 'root'");
    expect_error("root ::= foo\n", "undefined rule 'foo'");
    expect_error("root ::= \"a\"\nroot ::= \"b\"\n", "defined twice");
    expect_error("root ::= root \"a\" | \"b\"\n", "left recursion");
    expect_error("root ::= a\na ::= b \"x\"\nb ::= a | \"y\"\n", "left recursion");
    expect_error("root ::= e root \"x\" | \"y\"\ne ::= \"\" | \"z\"\n", "left recursion");
    expect_error("root ::= (\"a\"?)*\n", "left recursion");
    expect_error("root ::= \"abc\n", "unterminated literal");
    expect_error("root ::= [abc\n", "unterminated character class");
    expect_error("root ::= []\n", "empty character class");
    expect_error("root ::= [z-a]\n", "below its start");
    expect_error("root ::= \"\\q\"\n", "unknown escape");
    expect_error("root ::= \"\\x4\"\n", "hexadecimal digits");
    /* what generated text can never hold: surrogates, U+0000, overlong or surrogate UTF-8 */
    expect_error("root ::= \"\\uD800\"\n", "U+D800 is a UTF-16 surrogate");
    expect_error("root ::= [\\uDC00-\\uDFFF]\n", "surrogate");
    expect_error("root ::= [\\x00-\\x00]\n", "U+0000 is not a character");
    expect_error("root ::= \"a\\x00\"\n", "column 12: U+0000 is not a character");
    expect_error("root ::= \"\xc0\xaf\"\n", "invalid UTF-8");
    expect_error("root ::= \"\xed\xa0\x80\"\n", "invalid UTF-8");
    expect_error("root ::= \"\xf4\x90\x80\x80\"\n", "invalid UTF-8");
    expect_error("root \"a\"\n", "expected '::='");
    expect_error("root ::= (\"a\" \"b\"\n", "expected ')'");
    expect_error("root ::= \"a\"{3,1}\n", "m <= n");
    expect_error("root ::= \"a\"{2\n", "expected '}'");
    expect_error("root ::= \"a\" )\n", "unexpected ')'");
    expect_error("root ::= *\n", "must follow an item");
    expect_error("root ::= \"a\"{100001}\n", "limited to 100000");
    expect_error("root ::= \"abcdefghijk\"{99999}\n", "more than");
    /* the position is where the problem is */
    char err[256] = "";
    gram_grammar *g = compile("root ::= \"a\"\n\nx ::= \"b\" y\n", err);
    check(!g && strstr(err, "line 3, column 11") && strstr(err, "undefined rule 'y'"), "position: %s", err);
    gram_free(g);
    g = compile("# a comment\nroot ::= \"a\" \\z\n", err);
    check(!g && strstr(err, "line 2, column 14"), "position of an unexpected character: %s", err);
    gram_free(g);
    static const char big[] = "root ::= \"a\"\n";
    char *huge = malloc(GRAM_MAX_TEXT + 2);
    memset(huge, ' ', GRAM_MAX_TEXT + 1);
    memcpy(huge, big, sizeof big - 1);
    g = gram_compile(huge, GRAM_MAX_TEXT + 1, err, sizeof err);
    check(!g && strstr(err, "at most"), "oversized grammar: %s", err);
    free(huge);
}

static void test_matching(void) {
    expect_matches("root ::= \"yes\" | \"no\"\n", (const char *[]){"yes", "no", NULL},
                   (const char *[]){"", "ye", "yess", "No", NULL});
    expect_matches("root ::= [a-c]+ [0-9]* # trailing comment\n", (const char *[]){"a", "abc9", "cc012", NULL},
                   (const char *[]){"", "9", "ad", "a9a", NULL});
    expect_matches("root ::= [^\"\\\\]{2,4}\n", (const char *[]){"ab", "x y", "\xc3\xa9t\xc3\xa9", NULL},
                   (const char *[]){"a", "abcde", "a\"", NULL});
    expect_matches("root ::= \"(\" inner \")\"\ninner ::= \"x\" | \"(\" inner \")\"\n",
                   (const char *[]){"(x)", "((x))", "(((((x)))))", NULL},
                   (const char *[]){"((x)", "(x))", "()", NULL});
    expect_matches("root ::= item (\",\" item)*\nitem ::= [0-9]+\n  | \"-\" [0-9]+\n",
                   (const char *[]){"1", "1,-22,333", NULL}, (const char *[]){"1,", ",1", "--1", NULL});
    expect_matches("root ::= \"\\u00e9\" [\\u0400-\\u04FF] \"\\U0001F600\" .\n",
                   (const char *[]){"\xc3\xa9\xd0\x96\xf0\x9f\x98\x80z", "\xc3\xa9\xd0\x80\xf0\x9f\x98\x80\xe2\x82\xac",
                                    NULL},
                   (const char *[]){"e\xd0\x96\xf0\x9f\x98\x80z", "\xc3\xa9z\xf0\x9f\x98\x80z", "\xc3\xa9\xd0\x96\xf0\x9f\x98\x81z",
                                    NULL});
    expect_matches("root ::= \"a\"? \"b\"{3} \"c\"{1,} \"d\"{0,2}\n",
                   (const char *[]){"bbbc", "abbbccdd", "abbbcccd", NULL},
                   (const char *[]){"bbc", "abbbdd", "bbbcddd", "aabbbc", NULL});
    expect_matches("root ::= (\n  \"x\" |\n  \"y\"\n) \"!\"\n", (const char *[]){"x!", "y!", NULL},
                   (const char *[]){"xy!", "!", NULL});
    expect_matches("root ::= [^a-z]\n", (const char *[]){"A", "\xc3\xa9", NULL}, (const char *[]){"q", "", NULL});
    /* a lone lead byte never stands for an ASCII character (no overlong prefix of "o") */
    {
        char e2[256];
        gram_grammar *g = compile("root ::= \"o\"\n", e2);
        gram_matcher *m = gram_matcher_new(g, e2, sizeof e2);
        check(gram_accept_bytes(m, "\xe0", 1) != 0 && gram_accept_bytes(m, "\xf0", 1) != 0 &&
                  gram_accept_bytes(m, "\xc1", 1) != 0,
              "a lead byte of an overlong form is a prefix of 'o'");
        gram_matcher_free(m);
        gram_free(g);
    }

    /* invalid UTF-8 is never accepted, even by "." */
    char err[256];
    gram_grammar *g = compile("root ::= .*\n", err);
    gram_matcher *m = gram_matcher_new(g, err, sizeof err);
    check(gram_accept_bytes(m, "\xff", 1) != 0, "0xFF accepted");
    check(gram_accept_bytes(m, "\xe0\x81\xaf", 3) != 0 && gram_accept_bytes(m, "\xf0\x80", 2) != 0 &&
              gram_accept_bytes(m, "\xc1\xaf", 2) != 0 && gram_accept_bytes(m, "\xed\xa0\x80", 3) != 0,
          "overlong forms and surrogates accepted");
    check(gram_accept_bytes(m, "\xc3", 1) == 0 && !gram_is_complete(m), "a lead byte leaves the matcher incomplete");
    check(gram_accept_bytes(m, "a", 1) != 0, "a lead byte followed by ASCII accepted");
    check(gram_accept_bytes(m, "\xa9", 1) == 0 && gram_is_complete(m), "the completed character");
    check(gram_can_continue(m), ".* can continue");
    gram_matcher_free(m);
    gram_free(g);

    /* a rejected input leaves the matcher where it was */
    g = compile("root ::= \"ab\" \"c\"\n", err);
    m = gram_matcher_new(g, err, sizeof err);
    gram_free(g); /* the matcher holds its own reference */
    check(gram_accept_bytes(m, "ax", 2) != 0, "ax rejected");
    check(gram_accept_bytes(m, "abc", 3) == 0 && gram_is_complete(m) && !gram_can_continue(m),
          "abc accepted after a rejection; complete, nothing more");
    gram_matcher_free(m);

    /* long inputs through a loop do not grow memory without bound (the arena is compacted) */
    g = compile("root ::= (\"[\" [a-z]* \"]\")*\n", err);
    m = gram_matcher_new(g, err, sizeof err);
    int ok = gram_accept_bytes(m, "[", 1) == 0;
    for (int i = 0; i < 20000 && ok; i++) ok = gram_accept_bytes(m, i % 10 == 9 ? "][" : "q", i % 10 == 9 ? 2 : 1) == 0;
    check(ok && gram_accept_bytes(m, "]", 1) == 0 && gram_is_complete(m), "20000 loop iterations");
    gram_matcher_free(m);
    gram_free(g);
}

/* Grammars near the size limit that would take quadratic time with a
 * name-by-name symbol lookup or a naive nullability fixpoint compile at once. */
static gram_grammar *nullable_chain(char *text, int n_chain, char *err) {
    size_t len = (size_t)sprintf(text, "root ::= r0 \"x\"\n");
    for (int i = n_chain - 1; i >= 0; i--) /* defined last-first: the worst order for a fixpoint */
        len += (size_t)sprintf(text + len, i == n_chain - 1 ? "r%d ::= \"\" | \"y\"\n" : "r%d ::= r%d\n", i, i + 1);
    return gram_compile(text, len, err, 256);
}

static void test_large_grammars(void) {
    char err[256];
    const int n_chain = 12000;
    char *text = malloc(GRAM_MAX_TEXT);
    gram_grammar *g = nullable_chain(text, 3000, err);
    check(g != NULL && matches(g, "x", 1) == 1 && matches(g, "yx", 1) == 1 && matches(g, "y", 1) == 0,
          "a chain of 3000 nullable rules: %s", g ? "" : err);
    gram_free(g);
    /* 12000 rules nested before the first character: compiles, but no matcher starts */
    g = nullable_chain(text, n_chain, err);
    gram_matcher *m = g ? gram_matcher_new(g, err, sizeof err) : NULL;
    check(g && !m && strstr(err, "rules nested"), "a chain of %d nullable rules: %s", n_chain, err);
    gram_matcher_free(m);
    gram_free(g);
    size_t len;
    /* a chain that loops back is left recursion, however long */
    len = (size_t)sprintf(text, "root ::= r0\n");
    for (int i = 0; i < n_chain; i++) len += (size_t)sprintf(text + len, "r%d ::= r%d\n", i, (i + 1) % n_chain);
    g = gram_compile(text, len, err, sizeof err);
    check(!g && strstr(err, "left recursion"), "a cycle of %d rules: %s", n_chain, g ? "(compiled)" : err);
    gram_free(g);
    /* 40000 nullable references in one alternative */
    len = (size_t)sprintf(text, "root ::= ");
    for (int i = 0; i < 40000; i++) len += (size_t)sprintf(text + len, "e ");
    len += (size_t)sprintf(text + len, "\"b\"\ne ::= \"\" | \"a\"\n");
    g = gram_compile(text, len, err, sizeof err);
    check(g != NULL, "40000 nullable references: %s", err);
    gram_free(g);
    free(text);
}

static void test_limits(void) {
    char err[256];
    /* every prefix x^n has 2^n distinct stacks (a y or z owed per x): the stack limit fails it */
    gram_grammar *g = compile("root ::= a\na ::= \"x\" a \"y\" | \"x\" a \"z\" | \"\"\n", err);
    check(g != NULL, "ambiguous grammar compiles: %s", err);
    gram_matcher *m = gram_matcher_new(g, err, sizeof err);
    int accepted = 0;
    while (accepted < 40 && gram_accept_bytes(m, "x", 1) == 0) accepted++;
    check(accepted >= 5 && accepted < 40, "the stack limit stops an exploding grammar (accepted %d)", accepted);
    gram_matcher_free(m);
    gram_free(g);
    /* 2^40 derivations of the same stack: the work limit, not a hang */
    char text[2048] = "root ::= ";
    for (int i = 0; i < 40; i++) strcat(text, "e ");
    strcat(text, "\"b\"\ne ::= \"\" | \"\"\n");
    g = compile(text, err);
    m = g ? gram_matcher_new(g, err, sizeof err) : NULL;
    check(g && !m && strstr(err, "limits"), "exponential start: %s", err);
    gram_matcher_free(m);
    gram_free(g);
    /* parentheses nest up to GRAM_MAX_NESTING deep; a client's 50,000 (100 KB, under the text
     * limit) is an error at the first paren past the limit, not a stack overflow */
    const int deep = 50000;
    char *nested = malloc(2 * (size_t)deep + 32);
    const int depths[] = {GRAM_MAX_NESTING, GRAM_MAX_NESTING + 1, deep};
    for (size_t d = 0; d < sizeof depths / sizeof *depths; d++) {
        const int depth = depths[d];
        char *t = nested + sprintf(nested, "root ::= ");
        for (int i = 0; i < depth; i++) *t++ = '(';
        *t++ = '"';
        *t++ = 'a';
        *t++ = '"';
        for (int i = 0; i < depth; i++) *t++ = ')';
        *t = 0;
        g = gram_compile(nested, strlen(nested), err, sizeof err);
        if (depth == GRAM_MAX_NESTING) {
            check(g != NULL, "%d nested parentheses compile: %s", depth, err);
        } else {
            char want[64];
            snprintf(want, sizeof want, "column %d: parentheses nest more than %d", 10 + GRAM_MAX_NESTING,
                     GRAM_MAX_NESTING);
            check(!g && strstr(err, want), "%d nested parentheses: %s", depth, err);
        }
        gram_free(g);
    }
    free(nested);
    /* text that ends inside a literal or a class, in a buffer exactly its length (no NUL after it:
     * the end is checked before the byte is read; found by tests/fuzz/fuzz_gbnf) */
    static const char *const cut[] = {"root ::= \"r.\"\"", "root ::= \"ab", "root ::= [a-", "root ::= \"\\"};
    for (size_t i = 0; i < sizeof cut / sizeof *cut; i++) {
        const size_t n = strlen(cut[i]);
        char *exact = malloc(n);
        memcpy(exact, cut[i], n);
        g = gram_compile(exact, n, err, sizeof err);
        check(g == NULL && (strstr(err, "unterminated") || strstr(err, "end of the grammar")), "%s: %s", cut[i],
              g ? "(compiled)" : err);
        gram_free(g);
        free(exact);
    }
}

/* A repetition takes its item out of the sequence and puts copies back: the compiled element
 * array is as long as what was put back (build() asserts it; before, it counted the item twice
 * and scanned elements never written). Each form, alone and in a class-heavy rule. */
static void test_repetition_counts(void) {
    static const char *const grammars[] = {
        "root ::= \"a\"*\n", "root ::= [a-z]+ \"!\"\n", "root ::= ([0-9] \"x\")?\n",
        "root ::= [^\"]{2,5}\n", "root ::= (\"ab\" [c-e]){3}\n", "root ::= [a-c]{1,}\n",
        "root ::= x* y+ x{0,3}\nx ::= [xyz] [0-9]*\ny ::= (x | \"q\"){2}\n",
    };
    static const char *const accepted[] = {"aaa", "abc!", "3x", "xyz", "abcabdabe", "cab", "x1y2q"};
    char err[256];
    for (size_t i = 0; i < sizeof grammars / sizeof *grammars; i++) {
        gram_grammar *g = gram_compile(grammars[i], strlen(grammars[i]), err, sizeof err);
        check(g != NULL, "%s compiles: %s", grammars[i], err);
        if (!g) continue;
        gram_matcher *m = gram_matcher_new(g, err, sizeof err);
        check(m && gram_accept_bytes(m, accepted[i], strlen(accepted[i])) == 0 && gram_is_complete(m),
              "%s accepts %s", grammars[i], accepted[i]);
        gram_matcher_free(m);
        gram_free(g);
    }
}

/* A repetition of an unbounded repetition is the same language, compiled once: (x+)+ as x+, the
 * rest as x* (expanded again, nested repetitions gave the matcher exponentially many ways to
 * split a text: a fuzzer's 159-byte ".+++++++++" took seconds). Each form accepts and refuses
 * what its language does, and sixty nested `+` over a long text stay fast and small. */
static void test_nested_repetitions(void) {
    expect_matches("root ::= \"a\"++\n", (const char *const[]){"a", "aaaa", NULL}, (const char *const[]){"", "b", NULL});
    expect_matches("root ::= (\"ab\"+)+ \"!\"\n", (const char *const[]){"ab!", "ababab!", NULL},
                   (const char *const[]){"!", "aba!", NULL});
    expect_matches("root ::= \"ab\"+*\n", (const char *const[]){"", "ab", "abab", NULL}, (const char *const[]){"a", NULL});
    expect_matches("root ::= [0-9]*+ \"x\"\n", (const char *const[]){"x", "12x", NULL}, (const char *const[]){"1", NULL});
    expect_matches("root ::= \"ab\"+? \"c\"\n", (const char *const[]){"c", "abc", "ababc", NULL},
                   (const char *const[]){"ac", NULL});
    expect_matches("root ::= \"a\"*? \"b\"+ +\n", (const char *const[]){"b", "aabbb", NULL},
                   (const char *const[]){"a", "ba", NULL});
    char grammar[128] = "root ::= .", text[4097];
    for (int i = 0; i < 60; i++) strcat(grammar, "+");
    strcat(grammar, "\n");
    memset(text, 'z', 4096);
    text[4096] = 0;
    char err[256];
    gram_grammar *g = compile(grammar, err);
    check(g != NULL, "sixty nested + compile: %s", err);
    if (g) {
        check(matches(g, text, 64) == 1, "sixty nested + accept 4096 bytes");
        gram_free(g);
    }
}

/* ---- mask against brute force ------------------------------------------- */

#define N_TOK 3000

static const char *const ALPHABET[] = {"a", "b", "x", "0", "1", "9", "\"", "{", "}", "[", "]", ":", ",", " ", "\n",
                                       "-", ".", "e", "t", "r", "u", "\xc3\xa9", "\xe2\x82\xac", "\xf0\x9f\x98\x80",
                                       "\xc3", "\xa9", "\x82\xac", "\\", "n", "l"};

static int is_ascii(const char *s) {
    for (; *s; s++)
        if ((unsigned char)*s >= 0x80) return 0;
    return 1;
}

/* ascii_only: a vocabulary without multi-byte pieces, where big subtrees
 * are allowed whole (the mask's shortcut for those needs ASCII bytes). */
static void test_mask(int ascii_only) {
    rng_state = 42;
    char *pieces[N_TOK];
    size_t lens[N_TOK];
    uint8_t excluded[N_TOK] = {0};
    const size_t n_alpha = sizeof ALPHABET / sizeof ALPHABET[0];
    for (int i = 0; i < N_TOK; i++) {
        char buf[64];
        size_t n = 0;
        if (i < (int)n_alpha) { /* every single piece, so a path never dead-ends for lack of tokens */
            const char *a = ascii_only && !is_ascii(ALPHABET[i]) ? "a" : ALPHABET[i];
            n = strlen(a);
            memcpy(buf, a, n);
        } else if (i % 97 == 0) {
            n = 0; /* empty tokens are never allowed */
        } else {
            const int parts = rndi(1, 6);
            for (int k = 0; k < parts; k++) {
                const char *a = ALPHABET[rnd() % n_alpha];
                while (ascii_only && !is_ascii(a)) a = ALPHABET[rnd() % n_alpha];
                if (n + strlen(a) < sizeof buf) {
                    memcpy(buf + n, a, strlen(a));
                    n += strlen(a);
                }
            }
        }
        pieces[i] = malloc(n + 1);
        memcpy(pieces[i], buf, n);
        lens[i] = n;
        if (i % 53 == 7) excluded[i] = 1;
    }
    gram_vocab *v = gram_vocab_new(N_TOK, (const char *const *)pieces, lens, excluded);
    check(v != NULL && gram_vocab_size(v) == N_TOK, "vocabulary built");

    static const char *const GRAMMARS[] = {
        "root ::= obj\nobj ::= \"{\" ws (pair (\",\" ws pair)*)? \"}\"\npair ::= str \":\" ws val ws\n"
        "val ::= str | num | obj | \"[\" ws (val (\",\" ws val)*)? \"]\" | \"true\" | \"null\"\n"
        "str ::= \"\\\"\" ([^\"\\\\\\x00-\\x1f] | \"\\\\\" [\"\\\\n])* \"\\\"\"\n"
        "num ::= \"-\"? [0-9]+ (\".\" [0-9]+)? ([eE] [0-9]+)?\nws ::= [ \\n]{0,2}\n",
        "root ::= (\"a\" | \"\\u00e9\" | \"\\u20ac\")+ \"x\" [^a-z]{1,3}\n",
        "root ::= \"tr\" \"ue\" | \"[\" [0-9]{2,5} \"]\" | .{1,8} \"!\"\n",
        /* a bounded string: subtrees allowed whole along "n left" chains, cut where n runs out */
        "root ::= \"\\\"\" [^\"\\\\]{0,30} \"\\\"\" | [abtrux019]{3,12} \"}\"\n",
        /* every byte of the vocabulary loops: subtrees allowed whole from the state's self-loops */
        "root ::= .* \"!\"\n",
    };
    uint32_t bits[(N_TOK + 31) / 32], plain[(N_TOK + 31) / 32];
    for (size_t gi = 0; gi < sizeof GRAMMARS / sizeof GRAMMARS[0]; gi++) {
        char err[256];
        gram_grammar *g = compile(GRAMMARS[gi], err);
        check(g != NULL, "mask grammar %zu: %s", gi, err);
        if (!g) continue;
        for (int path = 0; path < 6; path++) {
            gram_matcher *m = gram_matcher_new(g, err, sizeof err);
            for (int step = 0; step < 30; step++) {
                const int count = gram_mask(m, v, bits);
                const int count_plain = gram_mask_stepwise(m, v, plain);
                check(count_plain == count && !memcmp(bits, plain, sizeof bits),
                      "grammar %zu path %d step %d: the stepwise mask differs (%d vs %d)", gi, path, step, count_plain,
                      count);
                int brute = 0, mismatches = 0, first_bad = -1;
                int allowed_ids[N_TOK];
                for (int id = 0; id < N_TOK; id++) {
                    gram_matcher *c = gram_matcher_clone(m);
                    const int ok = gram_accept_token(c, v, id) == 0;
                    gram_matcher_free(c);
                    const int bit = bits[id >> 5] >> (id & 31) & 1;
                    if (ok) allowed_ids[brute++] = id;
                    if (ok != bit && mismatches++ == 0) first_bad = id;
                }
                check(mismatches == 0 && count == brute,
                      "vocabulary %d grammar %zu path %d step %d: mask %d vs brute force %d, %d differ (first id %d)",
                      ascii_only, gi, path, step, count, brute, mismatches, first_bad);
                if (brute == 0) break;
                const int pick = allowed_ids[rnd() % (uint64_t)brute];
                check(gram_accept_token(m, v, pick) == 0, "accept of an allowed token");
                if (gram_is_complete(m) && rnd() % 3 == 0) break;
            }
            gram_matcher_free(m);
        }
        gram_free(g);
    }
    /* excluded and empty ids are never accepted as tokens */
    char err[256];
    gram_grammar *g = compile("root ::= .*\n", err);
    gram_matcher *m = gram_matcher_new(g, err, sizeof err);
    check(gram_accept_token(m, v, 7) != 0 && gram_accept_token(m, v, 97) != 0 && gram_accept_token(m, v, -1) != 0 &&
              gram_accept_token(m, v, N_TOK) != 0,
          "excluded, empty and out-of-range ids are refused");
    gram_matcher_free(m);
    gram_free(g);
    gram_vocab_free(v);
    for (int i = 0; i < N_TOK; i++) free(pieces[i]);
}

/* ---- JSON Schema to grammar ------------------------------------------------ */

static void expect_schema(const char *schema_json, const char *const *yes, const char *const *no) {
    cJSON *schema = cJSON_Parse(schema_json);
    char err[256] = "";
    char *text = schema ? js_schema_grammar(schema, err, sizeof err) : NULL;
    cJSON_Delete(schema);
    check(text != NULL, "schema %s: %s", schema_json, err);
    if (!text) return;
    gram_grammar *g = gram_compile(text, strlen(text), err, sizeof err);
    check(g != NULL, "schema %s: grammar does not compile: %s\n%s", schema_json, err, text);
    free(text);
    if (!g) return;
    for (int i = 0; yes[i]; i++) check(matches(g, yes[i], 2) == 1, "schema %s should accept %s", schema_json, yes[i]);
    for (int i = 0; no[i]; i++) check(matches(g, no[i], 1) == 0, "schema %s should reject %s", schema_json, no[i]);
    gram_free(g);
}

static void expect_schema_error(const char *schema_json, const char *needle) {
    cJSON *schema = cJSON_Parse(schema_json);
    char err[256] = "";
    char *text = js_schema_grammar(schema, err, sizeof err);
    check(!text && strstr(err, needle), "schema %s: expected an error with '%s', got '%s'", schema_json, needle,
          text ? "(converted)" : err);
    free(text);
    cJSON_Delete(schema);
}

/* Numeric bounds against arithmetic: for each schema, every candidate in a grid of integer parts
 * and fractions is accepted exactly when its value is within the bounds (strtod decides). The
 * candidates spell values the grammar's digits can (no exponent, no "-0"). */
static void expect_bounds(const char *type, const char *bounds, double lo, int lo_incl, double hi, int hi_incl) {
    char schema_json[256], err[256] = "";
    snprintf(schema_json, sizeof schema_json, "{\"type\":\"%s\"%s%s}", type, *bounds ? "," : "", bounds);
    cJSON *schema = cJSON_Parse(schema_json);
    char *text = schema ? js_schema_grammar(schema, err, sizeof err) : NULL;
    cJSON_Delete(schema);
    check(text != NULL, "schema %s: %s", schema_json, err);
    gram_grammar *g = text ? gram_compile(text, strlen(text), err, sizeof err) : NULL;
    check(!text || g, "schema %s: grammar does not compile: %s", schema_json, err);
    free(text);
    if (!g) return;
    static const char *const fracs[] = {"", ".0", ".00", ".5", ".05", ".50", ".000001", ".9", ".0010"};
    const int integer = !strcmp(type, "integer");
    int wrong = 0;
    for (int k = -1300; k <= 1300 && wrong < 5; k++)
        for (size_t f = 0; f < (integer ? 1 : sizeof fracs / sizeof *fracs); f++) {
            for (int sign = 0; sign < 2; sign++) {
                if (sign && k <= 0 && !(k == 0 && f > 0)) continue; /* -0, and k < 0 spelled once */
                if (!sign && k < 0) continue;
                char cand[64];
                snprintf(cand, sizeof cand, "%s%d%s", sign ? "-" : "", k, fracs[f]);
                const double v = strtod(cand, NULL);
                if (v == 0 && sign) continue; /* -0.0 and the like: zero spelled negative */
                const int in = (lo_incl ? v >= lo : v > lo) && (hi_incl ? v <= hi : v < hi);
                if (matches(g, cand, 1) != in) {
                    check(0, "schema %s: %s is %s bounds but %s", schema_json, cand, in ? "within" : "outside",
                          in ? "rejected" : "accepted");
                    wrong++;
                }
            }
        }
    check(wrong == 0, "schema %s: every candidate as its value says", schema_json);
    gram_free(g);
}

static void test_numeric_bounds(void) {
    const double inf = 1e300;
    expect_bounds("integer", "\"minimum\":13,\"maximum\":57", 13, 1, 57, 1);
    expect_bounds("integer", "\"minimum\":-1000,\"maximum\":999", -1000, 1, 999, 1);
    expect_bounds("integer", "\"exclusiveMinimum\":-8,\"exclusiveMaximum\":1205", -8, 0, 1205, 0);
    expect_bounds("integer", "\"minimum\":0", 0, 1, inf, 1);
    expect_bounds("integer", "\"maximum\":-3", -inf, 1, -3, 1);
    expect_bounds("integer", "\"minimum\":2.5,\"maximum\":99.9", 3, 1, 99, 1);
    expect_bounds("integer", "\"minimum\":100,\"maximum\":100", 100, 1, 100, 1);
    expect_bounds("integer", "\"minimum\":5,\"exclusiveMinimum\":7", 7, 0, inf, 1);
    expect_bounds("number", "\"minimum\":0,\"maximum\":1", 0, 1, 1, 1);
    expect_bounds("number", "\"exclusiveMinimum\":0,\"exclusiveMaximum\":1", 0, 0, 1, 0);
    expect_bounds("number", "\"minimum\":-40,\"exclusiveMaximum\":60", -40, 1, 60, 0);
    expect_bounds("number", "\"exclusiveMinimum\":-3,\"maximum\":-1", -3, 0, -1, 1);
    expect_bounds("number", "\"exclusiveMinimum\":3", 3, 0, inf, 1);
    expect_bounds("number", "\"maximum\":0", -inf, 1, 0, 1);
    expect_bounds("number", "\"minimum\":7,\"maximum\":7", 7, 1, 7, 1);
    expect_bounds("number", "\"minimum\":1,\"exclusiveMinimum\":true", 1, 0, inf, 1);
    expect_schema_error("{\"type\":\"integer\",\"minimum\":5,\"maximum\":4}", "no integer at # is within its bounds");
    expect_schema_error("{\"type\":\"number\",\"exclusiveMinimum\":2,\"exclusiveMaximum\":2}", "no number");
    expect_schema_error("{\"type\":\"number\",\"maximum\":0.5}", "must be whole numbers");
    expect_schema_error("{\"type\":\"integer\",\"minimum\":\"1\"}", "'minimum' at # must be a number");
}

static void test_json_schema(void) {
    expect_schema("{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"integer\"},\"b\":{\"type\":\"string\"}},"
                  "\"required\":[\"a\"],\"additionalProperties\":false}",
                  (const char *[]){"{\"a\":1}", "{\"a\": -12, \"b\": \"x\\\"y\"}", "{\n  \"a\": 0\n}", NULL},
                  (const char *[]){"{}", "{\"b\":\"x\"}", "{\"a\":1,}", "{\"a\":01}", "{\"a\":1,\"c\":2}",
                                   "{\"b\":\"x\",\"a\":1}", "{\"a\":1}  ", NULL});
    expect_schema("{\"type\":\"array\",\"items\":{\"enum\":[\"x\",2,null]},\"minItems\":1,\"maxItems\":3}",
                  (const char *[]){"[\"x\"]", "[2, null, \"x\"]", NULL},
                  (const char *[]){"[]", "[1]", "[2,2,2,2]", NULL});
    expect_schema("{\"$defs\":{\"n\":{\"type\":\"object\",\"properties\":{\"v\":{\"type\":\"number\"},"
                  "\"next\":{\"anyOf\":[{\"$ref\":\"#/$defs/n\"},{\"type\":\"null\"}]}},"
                  "\"required\":[\"v\",\"next\"],\"additionalProperties\":false}},\"$ref\":\"#/$defs/n\"}",
                  (const char *[]){"{\"v\":1.5,\"next\":null}", "{\"v\":1,\"next\":{\"v\":2e3,\"next\":null}}", NULL},
                  (const char *[]){"{\"v\":1}", "{\"v\":1,\"next\":{}}", NULL});
    expect_schema("{\"type\":[\"string\",\"null\"],\"format\":\"date\"}",
                  (const char *[]){"\"2024-02-28\"", "null", NULL},
                  (const char *[]){"\"2024-02-30\"", "\"2024-13-01\"", "\"x\"", NULL});
    expect_schema("{\"type\":\"string\",\"minLength\":2,\"maxLength\":3}",
                  (const char *[]){"\"ab\"", "\"\\u00e9\\n\"", "\"\xc3\xa9t\xc3\xa9\"", NULL},
                  (const char *[]){"\"a\"", "\"abcd\"", NULL});
    expect_schema("{\"const\":{\"k\":[1,true]}}", (const char *[]){"{\"k\":[1,true]}", NULL},
                  (const char *[]){"{\"k\":[1,false]}", NULL});
    expect_schema("{\"type\":\"integer\",\"minimum\":0}", (const char *[]){"0", "42", NULL},
                  (const char *[]){"-1", "1.5", NULL});
    /* multipleOf of an integer: the remainder automaton (both signs; from 0; from 1), the 16-digit cap,
     * and the multiples listed between two bounds */
    expect_schema("{\"type\":\"integer\",\"multipleOf\":7}",
                  (const char *[]){"0", "7", "-14", "700", "9999999999999996", "-1001", NULL},
                  (const char *[]){"1", "-8", "07", "70000000000000000", "7.0", "-0", NULL});
    expect_schema("{\"type\":\"integer\",\"multipleOf\":12,\"minimum\":0}",
                  (const char *[]){"0", "12", "144", "1200", NULL}, (const char *[]){"-12", "6", "100", NULL});
    expect_schema("{\"type\":\"integer\",\"multipleOf\":3,\"exclusiveMinimum\":0}",
                  (const char *[]){"3", "999", NULL}, (const char *[]){"0", "-3", "10", NULL});
    expect_schema("{\"type\":\"integer\",\"multipleOf\":25,\"minimum\":-60,\"maximum\":80}",
                  (const char *[]){"-50", "0", "25", "75", NULL}, (const char *[]){"-75", "100", "30", "-0", NULL});
    expect_schema_error("{\"type\":\"number\",\"multipleOf\":5}", "'multipleOf' at # is enforced for integers only");
    expect_schema_error("{\"type\":\"integer\",\"multipleOf\":5,\"maximum\":9}", "with no bounds");
    expect_schema_error("{\"type\":\"integer\",\"multipleOf\":500}", "without both bounds, at most 100");
    expect_schema_error("{\"type\":\"integer\",\"multipleOf\":6,\"minimum\":1,\"maximum\":5}",
                        "no integer at # is a multiple of 6");
    /* pattern (tests/c/test_json_pattern.c has the rest): inside an object, and on a nullable string with maxLength */
    expect_schema("{\"type\":\"object\",\"properties\":{\"code\":{\"type\":\"string\",\"pattern\":\"^[A-Z]{2}\\\\d$\"},"
                  "\"note\":{\"type\":[\"string\",\"null\"],\"pattern\":\"x\",\"maxLength\":3}},"
                  "\"required\":[\"code\",\"note\"],\"additionalProperties\":false}",
                  (const char *[]){"{\"code\":\"AB1\",\"note\":null}", "{\"code\": \"ZZ9\", \"note\": \"\\\"x\\n\"}", NULL},
                  (const char *[]){"{\"code\":\"AB\",\"note\":null}", "{\"code\":\"AB1\",\"note\":\"y\"}",
                                   "{\"code\":\"AB1\",\"note\":\"xxxx\"}", NULL});
    expect_schema_error("{\"type\":\"object\",\"properties\":{\"code\":{\"type\":\"string\",\"pattern\":\"(?=a)\"}}}",
                        "'pattern' at #/properties/code: the lookahead '(?='");
    /* a schema that reaches itself before matching anything (found by tests/fuzz/fuzz_json_schema) */
    expect_schema_error("{\"$ref\":\"#\"}", "reaches itself through '$ref'");
    expect_schema_error("{\"anyOf\":[{\"$ref\":\"#\"},{\"type\":\"null\"}]}", "reaches itself");
    expect_schema_error("{\"type\":\"object\",\"properties\":{\"a\":{\"oneOf\":[]}}}",
                        "unsupported keyword 'oneOf' at #/properties/a");
    expect_schema_error("{\"type\":\"string\",\"format\":\"ipv4\"}", "unsupported format 'ipv4'");
    expect_schema_error("{\"$ref\":\"#/$defs/missing\"}", "does not resolve");
    expect_schema_error("{\"type\":\"object\",\"properties\":{},\"required\":[\"x\"]}", "not in 'properties'");
    expect_schema_error("{\"type\":\"tuple\"}", "unsupported type 'tuple'");
    /* any JSON object */
    char err[256];
    gram_grammar *g = gram_compile(js_object_grammar(), strlen(js_object_grammar()), err, sizeof err);
    check(g && matches(g, "{\"a\": [1, {\"b\": null}], \"c\": \"\\u0041\"}", 3) == 1 && matches(g, "[1]", 1) == 0 &&
              matches(g, "{\"a\" 1}", 1) == 0,
          "json_object grammar: %s", g ? "" : err);
    gram_free(g);
}

int main(void) {
    test_errors();
    test_matching();
    test_limits();
    test_repetition_counts();
    test_nested_repetitions();
    test_large_grammars();
    test_mask(0);
    test_mask(1);
    test_json_schema();
    test_numeric_bounds();
    return check_summary();
}

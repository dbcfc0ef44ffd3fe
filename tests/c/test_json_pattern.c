/* test_json_pattern.c — JSON Schema "pattern" compiled into the grammar (runtime/serve/json_schema_pattern.h).
 *
 * Each pattern goes through js_schema_grammar as {"type": "string", "pattern": ...} and the
 * grammar matcher: the JSON spelling of strings the regular expression matches (quotes,
 * backslashes, newlines, control characters and non-ASCII included) is accepted and that of
 * strings it does not match is rejected; minLength / maxLength combine with it; unsupported
 * constructs and inputs past the limits are refused by name, quickly. Then a randomized
 * cross-check against PCRE2 (the reference for the semantics): for each of a list of patterns,
 * strings known to match, their random mutations and random strings are accepted by the
 * grammar exactly when pcre2_match finds a match.
 */
#define PCRE2_CODE_UNIT_WIDTH 8
#include <cjson/cJSON.h>
#include <pcre2.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "check.h"
#include "grammar.h"
#include "json_schema.h"
#include "json_schema_pattern.h"
#include "xorshift.h"

/* s (UTF-8) as a JSON string literal, as json.dumps(s, ensure_ascii=False) writes it. */
static void json_encode(const char *s, size_t n, char *out, size_t cap) {
    size_t k = 0;
    out[k++] = '"';
    for (size_t i = 0; i < n && k + 8 < cap; i++) {
        const unsigned char c = (unsigned char)s[i];
        const char *esc = c == '"' ? "\\\"" : c == '\\' ? "\\\\" : c == '\n' ? "\\n" : c == '\r' ? "\\r"
                          : c == '\t' ? "\\t" : c == '\b' ? "\\b" : c == '\f' ? "\\f" : NULL;
        if (esc) k += (size_t)snprintf(out + k, cap - k, "%s", esc);
        else if (c < 0x20) k += (size_t)snprintf(out + k, cap - k, "\\u%04x", c);
        else out[k++] = (char)c;
    }
    out[k++] = '"';
    out[k] = 0;
}

/* The grammar of {"type": "string", "pattern": pattern, ...bounds} (min / max < 0: absent);
 * NULL with err filled. */
static gram_grammar *pattern_grammar(const char *pattern, long min, long max, char *err, size_t errlen) {
    cJSON *schema = cJSON_CreateObject();
    cJSON_AddStringToObject(schema, "type", "string");
    cJSON_AddStringToObject(schema, "pattern", pattern);
    if (min >= 0) cJSON_AddNumberToObject(schema, "minLength", (double)min);
    if (max >= 0) cJSON_AddNumberToObject(schema, "maxLength", (double)max);
    char *text = js_schema_grammar(schema, err, errlen);
    cJSON_Delete(schema);
    if (!text) return NULL;
    gram_grammar *g = gram_compile(text, strlen(text), err, errlen);
    if (!g) check(0, "pattern %s: its grammar does not compile: %s", pattern, err);
    free(text);
    return g;
}

/* 1 if the whole JSON text is a sentence of g (fed in pieces of `step` bytes). */
static int accepts(gram_grammar *g, const char *text, size_t step) {
    char err[256];
    gram_matcher *m = gram_matcher_new(g, err, sizeof err);
    if (!m) return -1;
    int ok = 1;
    const size_t n = strlen(text);
    for (size_t i = 0; i < n && ok; i += step) ok = gram_accept_bytes(m, text + i, n - i < step ? n - i : step) == 0;
    ok = ok && gram_is_complete(m);
    gram_matcher_free(m);
    return ok;
}

static int accepts_string(gram_grammar *g, const char *s, size_t n, size_t step) {
    char json[1024];
    json_encode(s, n, json, sizeof json);
    return accepts(g, json, step);
}

/* yes: strings the pattern matches; no: strings it does not (both raw, JSON-encoded here). */
static void expect_pattern(const char *pattern, long min, long max, const char *const *yes, const char *const *no) {
    char err[256] = "";
    gram_grammar *g = pattern_grammar(pattern, min, max, err, sizeof err);
    check(g != NULL, "pattern %s: %s", pattern, err);
    if (!g) return;
    for (int i = 0; yes[i]; i++)
        for (size_t step = 1; step <= 3; step += 2)
            check(accepts_string(g, yes[i], strlen(yes[i]), step) == 1, "pattern %s should accept '%s' (step %zu)",
                  pattern, yes[i], step);
    for (int i = 0; no[i]; i++)
        check(accepts_string(g, no[i], strlen(no[i]), 1) == 0, "pattern %s should reject '%s'", pattern, no[i]);
    gram_free(g);
}

#define YES(...) (const char *[]){__VA_ARGS__, NULL}
#define NO(...) (const char *[]){__VA_ARGS__, NULL}

static void test_matching(void) {
    expect_pattern("^[A-Z]{3}-\\d{2,4}$", -1, -1, YES("ABC-12", "XYZ-1234"),
                   NO("AB-12", "ABC-1", "ABC-12345", "abc-12", " ABC-12", "ABC-12\n", ""));
    /* unanchored: anywhere in the string, with anything (quotes, backslashes, newlines) around it */
    expect_pattern("abc", -1, -1, YES("abc", "xxabcxx", "a\"abc\\", "\nabc\n", "aabc", "ababc", "\x01" "abc\x7f"),
                   NO("ab", "acb", "", "ABC", "a\"bc", "ab\nc"));
    expect_pattern("^ab", -1, -1, YES("ab", "abc\"\\"), NO("xab", "a"));
    expect_pattern("ab$", -1, -1, YES("ab", "\"\\ab"), NO("abx", "ab\n"));
    expect_pattern("^(cat|dog)s?$", -1, -1, YES("cat", "dogs"), NO("cats!", "", "catdog", "cow"));
    expect_pattern("^a|b$", -1, -1, YES("a", "ax", "xb", "b"), NO("xa", "bx", ""));
    expect_pattern("^-?\\d+(\\.\\d+)?$", -1, -1, YES("0", "-12.5", "3.14159"), NO("1.", ".5", "--1", "1e5"));
    /* quotes and backslashes as JSON spells them: \" and \\ */
    expect_pattern("^\"[^\"]*\"$", -1, -1, YES("\"hi\"", "\"\"", "\"a\\b\""), NO("\"a\"b\"", "hi", "\""));
    expect_pattern("^a\\\\b$", -1, -1, YES("a\\b"), NO("ab", "a\\\\b", "a/b"));
    expect_pattern("^[^a-z]*$", -1, -1, YES("ABC\"\\\n\t\x01", ""), NO("aB", "Z\"z"));
    /* newlines: "." leaves out "\n" only; escapes of control characters */
    expect_pattern("^line1\\nline2$", -1, -1, YES("line1\nline2"), NO("line1 line2", "line1\\nline2"));
    expect_pattern("^.+$", -1, -1, YES("a\tb", "\r", "\x1f", "\xe6\x97\xa5"), NO("a\nb", "", "\n"));
    expect_pattern("^[\\t\\r\\f\\b\\v\\0]+$", -1, -1, YES("\t\r\f\b\v"), NO("\n", "b", " "));
    expect_pattern("^\\x41\\u00e9\\/\\.\\-\\$\\^\\*\\+\\?\\(\\)\\[\\]\\{\\}\\|$", -1, -1,
                   YES("A\xc3\xa9/.-$^*+?()[]{}|"), NO("A\xc3\xa9/x-$^*+?()[]{}|"));
    /* classes: \d \w \s (ECMA-262's whitespace, no-break space included), negated forms, in classes */
    expect_pattern("^\\s+$", -1, -1, YES(" \t\n\r\f\v", "\xc2\xa0", "\xe2\x80\xa8", "\xef\xbb\xbf"), NO("a", " a", ""));
    expect_pattern("^\\S\\D\\W$", -1, -1, YES("aa ", "\"b\\", "x.\n"), NO(" a!", "a1!", "aaa"));
    expect_pattern("^[\\w.-]+@[\\w-]+\\.[a-z]{2,}$", -1, -1, YES("a.b-c_1@ex-ample.org"), NO("a@b.c", "a b@c.de"));
    expect_pattern("^[\\d\\s]+$", -1, -1, YES("1 2\n3"), NO("1a"));
    expect_pattern("^[^\\d\\s]+$", -1, -1, YES("ab\"\\"), NO("a1", "a b"));
    expect_pattern("^[a\\-z]+$", -1, -1, YES("a-z"), NO("b"));
    expect_pattern("^[-a]+[b-]$", -1, -1, YES("-a-"), NO("c"));
    expect_pattern("^[\\]\\\\\\[]+$", -1, -1, YES("]\\["), NO("a"));
    /* Unicode: characters are code points */
    expect_pattern("^[\xce\xb1-\xcf\x89]{2}$", -1, -1, YES("\xce\xb1\xce\xb2"), NO("ab", "\xce\xb1"));
    expect_pattern("^.{3}$", -1, -1, YES("\xe6\x97\xa5\xe6\x9c\xac\xe8\xaa\x9e", "\xf0\x9f\x98\x80xy"),
                   NO("\xe6\x97\xa5\xe6\x9c\xac", "abcd"));
    expect_pattern("^[^a]$", -1, -1, YES("\xf0\x9f\x98\x80", "\xef\xbf\xbf", "\xee\x80\x80", "\xed\x9f\xbf"),
                   NO("a", ""));
    /* the empty pattern, empty alternatives, anchors alone */
    expect_pattern("", -1, -1, YES("", "x", "\"\n"), NO("\xff"));
    expect_pattern("^$", -1, -1, YES(""), NO("x", "\n"));
    expect_pattern("x|", -1, -1, YES("", "abc"), NO("\xff"));
    /* quantifiers: lazy forms, nullable items under * and +, counts */
    expect_pattern("^a+?b??c*?d{1,2}?$", -1, -1, YES("ad", "aabcccdd"), NO("abd d", "bd"));
    expect_pattern("^(a?)*b$", -1, -1, YES("b", "aab"), NO("a", "bb"));
    expect_pattern("^(a|ab)*c$", -1, -1, YES("c", "abac", "aababc"), NO("bc", "abbc"));
    expect_pattern("^(a*)+$", -1, -1, YES("", "aaa"), NO("b"));
    expect_pattern("^()*x{0}y(?:)$", -1, -1, YES("y"), NO("xy", "x"));
    expect_pattern("^(?:ab){2,}$", -1, -1, YES("abab", "ababab"), NO("ab", "aba"));
    expect_pattern("^(((a)))b{3}$", -1, -1, YES("abbb"), NO("abb"));
    expect_pattern("^[ab]{0,3}$", -1, -1, YES("", "ab", "bba"), NO("abab"));
    expect_pattern("}]", -1, -1, YES("a}]"), NO("}"));
}

/* The JSON spelling the grammar takes: "\u00XX" in either case for control characters without a
 * short escape, the short escape for those that have one, characters as themselves otherwise. */
static void test_spelling(void) {
    char err[256] = "";
    gram_grammar *g = pattern_grammar("^[\\x01\\x1f\\n/A\"]$", -1, -1, err, sizeof err);
    check(g != NULL, "spelling grammar: %s", err);
    if (!g) return;
    static const char *const yes[] = {"\"\\u0001\"", "\"\\u001f\"", "\"\\u001F\"", "\"\\n\"", "\"/\"", "\"A\"",
                                      "\"\\\"\"", NULL};
    static const char *const no[] = {"\"\\u000a\"", "\"\\/\"", "\"\\u0041\"", "\"\x01\"", "\"\n\"", "\"\"\"",
                                     "\"\\x01\"", "\"\\u0002\"", "\"A", "A", NULL};
    for (int i = 0; yes[i]; i++) check(accepts(g, yes[i], 1) == 1, "spelling: should accept %s", yes[i]);
    for (int i = 0; no[i]; i++) check(accepts(g, no[i], 1) == 0, "spelling: should reject %s", no[i]);
    gram_free(g);
}

static void test_lengths(void) {
    expect_pattern("^[a-z]+$", 2, 4, YES("ab", "abcd"), NO("a", "abcde", "AB"));
    expect_pattern("abc", -1, 5, YES("abc", "xabcx", "abcde"), NO("xxabcx", "ab"));
    expect_pattern("^a*$", 3, -1, YES("aaa", "aaaaaaa"), NO("aa", ""));
    expect_pattern("b", 2, -1, YES("ab", "bb", "xxbxx"), NO("b", "aa"));
    expect_pattern("^(a|bc)d$", 3, 3, YES("bcd"), NO("ad", "bcdd"));
    expect_pattern("", 1, 2, YES("x", "\"\\"), NO("", "abc"));
    /* lengths count characters: an escape or a multi-byte character is one */
    expect_pattern("^.*$", 2, 2, YES("\"\\", "\xc3\xa9\xf0\x9f\x98\x80", "\t\x01"), NO("a", "abc"));
}

static void expect_refused(const char *pattern, long min, long max, const char *needle) {
    char err[256] = "";
    const clock_t t0 = clock();
    gram_grammar *g = pattern_grammar(pattern, min, max, err, sizeof err);
    const double secs = (double)(clock() - t0) / CLOCKS_PER_SEC;
    check(!g && strstr(err, needle) != NULL, "pattern %.60s: expected an error with '%s', got '%s'", pattern, needle,
          g ? "(compiled)" : err);
    check(secs < 5, "pattern %.60s: refused in %.2f s", pattern, secs);
    gram_free(g);
}

static void test_refusals(void) {
    static const char *const cases[][2] = {
        {"(?=a)", "the lookahead '(?=' is not supported (at offset 0)"},
        {"a(?!b)", "negative lookahead '(?!' is not supported (at offset 1)"},
        {"(?<=a)b", "lookbehind '(?<='"},
        {"(?<!a)b", "lookbehind '(?<!'"},
        {"(?<year>\\d{4})", "named group '(?<'"},
        {"(?P<y>a)", "named group '(?P'"},
        {"(?i)abc", "'(?' is supported only as the non-capturing group"},
        {"(a)\\1", "backreference '\\1'"},
        {"\\k<a>", "named backreference"},
        {"\\bfoo", "word boundary '\\b'"},
        {"\\Bfoo", "'\\B'"},
        {"\\p{L}", "Unicode property class '\\p'"},
        {"\\P{L}", "Unicode property class '\\P'"},
        {"\\cA", "control escape '\\c'"},
        {"\\u{41}", "'\\u{...}'"},
        {"\\012", "octal escapes"},
        {"\\q", "the escape '\\q' is not supported"},
        {"\\A", "the escape '\\A' is not supported"},
        {"\\ud800", "surrogate"},
        {"\\x4", "'\\x' needs 2 hexadecimal digits"},
        {"a\\", "ends with '\\'"},
        {"a^b", "'^' is supported only at the start"},
        {"(^a)", "'^' is supported only at the start"},
        {"^^a", "'^' is supported only at the start"},
        {"a$b", "'$' is supported only at the end"},
        {"(a$)", "'$' is supported only at the end"},
        {"*a", "'*' has nothing to repeat"},
        {"a|+b", "'+' has nothing to repeat"},
        {"^*", "'*' has nothing to repeat"},
        {"a**", "a quantifier cannot follow another"},
        {"a*+", "a quantifier cannot follow another"},
        {"a{2}{3}", "a quantifier cannot follow another"},
        {"a{2,1}", "needs n <= m"},
        {"a{,3}", "'{' must start a count"},
        {"a{x}", "'{' must start a count"},
        {"a{3", "'{' must start a count"},
        {"{", "'{' has nothing to repeat"},
        {"[]", "an empty class"},
        {"[^]", "an empty class"},
        {"[a", "'[' without its closing ']'"},
        {"[z-a]", "the range ends below its start"},
        {"[\\d-z]", "a range cannot start at a class escape"},
        {"[a-\\w]", "a range cannot end at a class escape"},
        {"[[:alpha:]]", "POSIX class '[:'"},
        {"(a", "'(' without its closing ')'"},
        {"a)", "')' without its opening '('"},
        {"\xff", "not valid UTF-8"},
        {"\xc3", "not valid UTF-8"},
        {"[^\\s\\S]", "no string matches it"},
        {"^[^\\s\\S]$", "no string matches it"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) expect_refused(cases[i][0], -1, -1, cases[i][1]);
    expect_refused("^abc$", -1, 2, "no string of the length minLength / maxLength allow");
    expect_refused("^a{5}$", 6, -1, "no string of the length");
    /* the whole message names the keyword and the schema path */
    const char *schema_json =
        "{\"type\":\"object\",\"properties\":{\"code\":{\"type\":\"string\",\"pattern\":\"^(?=x)\"}}}";
    cJSON *schema = cJSON_Parse(schema_json);
    char err[256] = "";
    char *text = js_schema_grammar(schema, err, sizeof err);
    check(!text && !strcmp(err, "'pattern' at #/properties/code: the lookahead '(?=' is not supported (at offset 1)"),
          "the error names keyword, construct and path: '%s'", err);
    free(text);
    cJSON_Delete(schema);
    static const char *const bad_schemas[][2] = {
        {"{\"type\":\"string\",\"pattern\":5}", "'pattern' at # must be a string"},
        {"{\"type\":\"string\",\"pattern\":\"a\",\"format\":\"date\"}", "cannot be combined with 'format'"},
        {"{\"type\":\"string\",\"pattern\":\"a\",\"minLength\":3,\"maxLength\":2}", "'maxLength' at # is below"},
    };
    for (size_t i = 0; i < sizeof bad_schemas / sizeof *bad_schemas; i++) {
        schema = cJSON_Parse(bad_schemas[i][0]);
        text = js_schema_grammar(schema, err, sizeof err);
        check(!text && strstr(err, bad_schemas[i][1]), "schema %s: expected '%s', got '%s'", bad_schemas[i][0],
              bad_schemas[i][1], text ? "(converted)" : err);
        free(text);
        cJSON_Delete(schema);
    }
}

/* Hostile sizes: each is refused by its limit, quickly, never by running out of memory. */
static void test_limits(void) {
    char p[4096];
    memset(p, 'a', 1001);
    p[1001] = 0;
    expect_refused(p, -1, -1, "the pattern is 1001 bytes; at most 1000");
    memset(p, 'a', 1000);
    p[1000] = 0;
    char err[256] = "";
    gram_grammar *g = pattern_grammar(p, -1, -1, err, sizeof err);
    check(g != NULL, "a 1000-byte pattern compiles: %s", err);
    gram_free(g);
    int k = 0; /* 33 groups inside each other; 32 are fine */
    for (int i = 0; i < 33; i++) p[k++] = '(';
    p[k++] = 'a';
    for (int i = 0; i < 33; i++) p[k++] = ')';
    p[k] = 0;
    expect_refused(p, -1, -1, "groups nest more than 32 deep");
    g = pattern_grammar(p + 1, -1, -1, err, sizeof err); /* one '(' fewer... */
    check(g == NULL, "unbalanced");
    gram_free(g);
    p[k - 1] = 0;
    g = pattern_grammar(p + 1, -1, -1, err, sizeof err);
    check(g != NULL, "32 nested groups compile: %s", err);
    gram_free(g);
    expect_refused("a{1001}", -1, -1, "a count in '{...}' is limited to 1000");
    expect_refused("a{99999999999999999999}", -1, -1, "limited to 1000");
    expect_refused("^(a{1000}){1000}$", -1, -1, "more than 20000 states");
    expect_refused("^((((b{1000}){1000}){1000}){1000})$", -1, -1, "more than 20000 states");
    expect_refused("^((((){1000}){1000}){1000}){1000}$", -1, -1, "too complex");
    expect_refused("a[^x]{30}b", -1, -1, "more than 4096 states");
    expect_refused("^(a|b)*a(a|b){14}$", -1, -1, "more than 4096 states");
    expect_refused("^[a-z]+$", -1, 100000, "together with minLength / maxLength the pattern needs more than 4096");
}

static void test_large_counts(void) {
    char s[1100];
    memset(s, 'x', 1000);
    s[1000] = 0;
    char err[256] = "";
    gram_grammar *g = pattern_grammar("^x{1000}$", -1, -1, err, sizeof err);
    check(g != NULL, "x{1000}: %s", err);
    if (!g) return;
    check(accepts_string(g, s, 1000, 7) == 1, "x{1000} accepts 1000 x");
    check(accepts_string(g, s, 999, 7) == 0, "x{1000} rejects 999 x");
    s[1000] = 'x';
    check(accepts_string(g, s, 1001, 7) == 0, "x{1000} rejects 1001 x");
    gram_free(g);
    g = pattern_grammar("^.{0,1000}$", -1, -1, err, sizeof err);
    check(g != NULL, ".{0,1000}: %s", err);
    if (g) check(accepts_string(g, s, 1000, 5) == 1 && accepts_string(g, s, 1001, 5) == 0, ".{0,1000} counts");
    gram_free(g);
}

/* ---- randomized cross-check against PCRE2 ----------------------------------------------- */

/* a pattern and strings it matches (the seeds the random strings are mutated from); PCRE2
 * decides the expected answer, with $ matching only at the very end (ECMA-262's meaning) */
static const char *const CROSS[][4] = {
    {"^[A-Z]{3}-\\d{2,4}$", "ABC-12", "QRS-9876", NULL},
    {"abc", "abc", "zabcz", NULL},
    {"^(cat|dog|bird)s?$", "cats", "bird", NULL},
    {"a.c", "abc", "a\"c", "xa\\cx"},
    {"^\\w+@\\w+\\.(com|org)$", "me@ex.com", "a_1@b2.org", NULL},
    {"^-?\\d+(\\.\\d{1,2})?$", "-3.14", "42", NULL},
    {"^(a|ab)*c$", "ababac", "c", NULL},
    {"^[^\"\\\\]*$", "plain", "", NULL},
    {"\"[^\"]*\"", "say \"hi\"", "\"\"", NULL},
    {"^\\s*\\S+\\s*$", " a ", "b\n", NULL},
    {"x{2,3}y|^z", "xxy", "zq", NULL},
    {"^(?:[0-9a-f]{2}:){2}[0-9a-f]{2}$", "0a:1b:ff", "00:00:00", NULL},
    {"\\\\n|\\n", "a\\nb", "a\nb", NULL},
    {"^.{2,4}$", "ab", "\xc3\xa9t\xc3\xa9", NULL},
    {"^[\\x00-\\x1f]+$", "\x01\t", "\n", NULL},
    {"(ab|a)(bc|c)$", "abc", "xabbc", NULL},
    {"^[^a-c\\d]{1,3}z?$", "xyz", "\"\\", NULL},
    {"^(a+|b+)+$", "aabba", "b", NULL},
    {"q[\\s\\S]?q", "qq", "q\nq", NULL},
    {"^\\D\\W?\\d$", "a 1", "b2", NULL},
};

static const char *const ALPHA[] = {"a", "b", "c", "x", "z", "q", "A", "C", "Q", "0", "1", "9", "-", ".", "@", ":",
                                    " ", "\n", "\t", "\"", "\\", "\x01", "\x1f", "_", "y", "\xc3\xa9", "\xe6\x97\xa5",
                                    "\xf0\x9f\x98\x80", "n", "\r", "o", "m"};
#define N_ALPHA (int)(sizeof ALPHA / sizeof *ALPHA)

/* a random string: from a seed with a few random edits, or from scratch */
static size_t random_string(const char *const *seeds, int n_seeds, char *out, size_t cap) {
    size_t n = 0;
    const uint64_t r = rnd();
    if (r % 4 != 0 && n_seeds > 0) {
        const char *seed = seeds[r / 4 % (uint64_t)n_seeds];
        n = strlen(seed);
        memcpy(out, seed, n);
        const int edits = (int)(rnd() % 3);
        for (int e = 0; e < edits; e++) {
            const size_t at = n ? rnd() % (n + 1) : 0;
            const char *c = ALPHA[rnd() % N_ALPHA];
            const size_t cl = strlen(c);
            const int op = (int)(rnd() % 3);
            /* edits are on bytes; one that leaves broken UTF-8 is skipped below */
            if (op == 0 && n + cl < cap) memmove(out + at + cl, out + at, n - at), memcpy(out + at, c, cl), n += cl;
            else if (op == 1 && at < n) memmove(out + at, out + at + 1, n - at - 1), n--;
            else if (op == 2 && at < n) out[at] = c[0];
        }
    } else {
        const int len = (int)(rnd() % 7);
        for (int i = 0; i < len; i++) {
            const char *c = ALPHA[rnd() % N_ALPHA];
            if (n + strlen(c) < cap) memcpy(out + n, c, strlen(c)), n += strlen(c);
        }
    }
    out[n] = 0;
    return n;
}

static int valid_utf8(const char *s, size_t n) {
    for (size_t i = 0; i < n;) {
        const unsigned char c = (unsigned char)s[i];
        const size_t len = c < 0x80 ? 1 : (c & 0xe0) == 0xc0 && c >= 0xc2 ? 2 : (c & 0xf0) == 0xe0 ? 3
                           : (c & 0xf8) == 0xf0 && c <= 0xf4 ? 4 : 0;
        if (!len || i + len > n) return 0;
        for (size_t k = 1; k < len; k++)
            if (((unsigned char)s[i + k] & 0xc0) != 0x80) return 0;
        i += len;
    }
    return 1;
}

static void test_cross_check_pcre2(void) {
    rng_state = 0x9e3779b97f4a7c15ull;
    long agree = 0, matched = 0;
    for (size_t p = 0; p < sizeof CROSS / sizeof *CROSS; p++) {
        const char *pattern = CROSS[p][0];
        int n_seeds = 0;
        while (n_seeds < 3 && CROSS[p][1 + n_seeds]) n_seeds++;
        int code;
        PCRE2_SIZE off;
        pcre2_compile_context *cc = pcre2_compile_context_create(NULL);
        pcre2_set_newline(cc, PCRE2_NEWLINE_LF);
        pcre2_code *re = pcre2_compile((PCRE2_SPTR)pattern, PCRE2_ZERO_TERMINATED, PCRE2_UTF | PCRE2_DOLLAR_ENDONLY,
                                       &code, &off, cc);
        pcre2_compile_context_free(cc);
        char err[256] = "";
        gram_grammar *g = pattern_grammar(pattern, -1, -1, err, sizeof err);
        check(re && g, "cross-check %s: pcre2 %s, grammar %s", pattern, re ? "ok" : "refused", g ? "ok" : err);
        if (!re || !g) {
            pcre2_code_free(re);
            gram_free(g);
            continue;
        }
        pcre2_match_data *md = pcre2_match_data_create_from_pattern(re, NULL);
        int wrong = 0;
        for (int i = 0; i < 400 && wrong < 3; i++) {
            char s[256];
            const size_t n = random_string(&CROSS[p][1], n_seeds, s, sizeof s - 8);
            if (!valid_utf8(s, n)) continue;
            const int want = pcre2_match(re, (PCRE2_SPTR)s, n, 0, 0, md, NULL) >= 0;
            const int got = accepts_string(g, s, n, 1 + (size_t)(i % 3));
            matched += want;
            if (got == want) {
                agree++;
            } else {
                char json[1024];
                json_encode(s, n, json, sizeof json);
                check(0, "cross-check %s on %s: pcre2 says %s, the grammar %s", pattern, json,
                      want ? "match" : "no match", got ? "accepts" : "rejects");
                wrong++;
            }
        }
        check(wrong == 0, "cross-check %s agrees with pcre2", pattern);
        pcre2_match_data_free(md);
        pcre2_code_free(re);
        gram_free(g);
    }
    printf("cross-check: %ld strings agree with pcre2 (%ld of them match)\n", agree, matched);
    check(matched > 1000 && agree - matched > 1000, "the cross-check has both kinds of strings");
}

int main(void) {
    test_matching();
    test_spelling();
    test_lengths();
    test_refusals();
    test_limits();
    test_large_counts();
    test_cross_check_pcre2();
    return check_summary();
}

/* pretokenize.c — hand-written matchers for the known pre-tokenizer regexes (see pretokenize.h). */
#include "pretokenize.h"

#include <string.h>
#include <utf8proc.h>

/* Unicode White_Space: what \s means in Oniguruma (HF tokenizers) and in llama.cpp's tables. */
static int is_space_cp(uint32_t c) {
    return (c >= 0x09 && c <= 0x0D) || c == 0x20 || c == 0x85 || c == 0xA0 || c == 0x1680 ||
           (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F ||
           c == 0x205F || c == 0x3000;
}

static int classify(uint32_t c) {
    if (c < 0x80) { /* fast path: ASCII is most text */
        if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z')) return PT_C_LETTER;
        if (c >= '0' && c <= '9') return PT_C_NUMBER;
        if (is_space_cp(c)) return PT_C_SPACE;
        return PT_C_OTHER;
    }
    if (is_space_cp(c)) return PT_C_SPACE;
    switch (utf8proc_category((utf8proc_int32_t)c)) {
    case UTF8PROC_CATEGORY_LU: case UTF8PROC_CATEGORY_LL: case UTF8PROC_CATEGORY_LT:
    case UTF8PROC_CATEGORY_LM: case UTF8PROC_CATEGORY_LO:
        return PT_C_LETTER;
    case UTF8PROC_CATEGORY_ND: case UTF8PROC_CATEGORY_NL: case UTF8PROC_CATEGORY_NO:
        return PT_C_NUMBER;
    default:
        return PT_C_OTHER;
    }
}

size_t pt_char(const uint8_t *s, size_t len, size_t pos, uint32_t *cp, int *cls) {
    uint8_t b = s[pos];
    size_t n;
    uint32_t c, min;
    if (b < 0x80) {
        *cp = b;
        *cls = classify(b);
        return 1;
    }
    if (b >= 0xC2 && b <= 0xDF) { n = 2; c = b & 0x1F; min = 0x80; }
    else if (b >= 0xE0 && b <= 0xEF) { n = 3; c = b & 0x0F; min = 0x800; }
    else if (b >= 0xF0 && b <= 0xF4) { n = 4; c = b & 0x07; min = 0x10000; }
    else goto invalid;
    if (len - pos < n) goto invalid;
    for (size_t i = 1; i < n; i++) {
        if ((s[pos + i] & 0xC0) != 0x80) goto invalid;
        c = (c << 6) | (s[pos + i] & 0x3F);
    }
    /* Overlong forms, surrogates and values past U+10FFFF are not characters. */
    if (c < min || c > 0x10FFFF || (c >= 0xD800 && c <= 0xDFFF)) goto invalid;
    *cp = c;
    *cls = classify(c);
    return n;
invalid:
    *cp = 0xFFFFFFFFu;
    *cls = PT_C_INVALID;
    return 1;
}

/* Class of the character at pos, or -1 past the end; *n gets its byte length. */
static int cls_at(const uint8_t *s, size_t len, size_t pos, size_t *n, uint32_t *cp) {
    uint32_t c;
    int cls;
    if (pos >= len) {
        if (n) *n = 0;
        if (cp) *cp = 0xFFFFFFFFu;
        return -1;
    }
    size_t k = pt_char(s, len, pos, &c, &cls);
    if (n) *n = k;
    if (cp) *cp = c;
    return cls;
}

/* End of the run of characters of class cls starting at pos. */
static size_t run_of(const uint8_t *s, size_t len, size_t pos, int cls) {
    size_t n;
    while (cls_at(s, len, pos, &n, NULL) == cls) pos += n;
    return pos;
}

static int lower_ascii(uint32_t c) { return (c >= 'A' && c <= 'Z') ? (int)(c + 32) : (int)c; }

/* Contractions 's 't 're 've 'm 'll 'd at pos (s[pos] == '\''); returns the match
 * length or 0. ci: case-insensitive (Llama-3 / Qwen2 write (?i:...)). */
static size_t contraction(const uint8_t *s, size_t len, size_t pos, int ci) {
    if (pos + 1 >= len) return 0;
    int a = ci ? lower_ascii(s[pos + 1]) : s[pos + 1];
    if (a == 's' || a == 't' || a == 'm' || a == 'd') return 2;
    if (pos + 2 >= len) return 0;
    int b = ci ? lower_ascii(s[pos + 2]) : s[pos + 2];
    if ((a == 'r' && b == 'e') || (a == 'v' && b == 'e') || (a == 'l' && b == 'l')) return 3;
    return 0;
}

/* \s+(?!\S) then \s+ at a whitespace character: the whole run when it ends the text,
 * otherwise the run less its last character (which then starts the next token, e.g.
 * " word"); a single whitespace character before non-space matches \s+ alone. */
static size_t space_run(const uint8_t *s, size_t len, size_t pos) {
    size_t end = pos, last = pos, n;
    while (cls_at(s, len, end, &n, NULL) == PT_C_SPACE) {
        last = end;
        end += n;
    }
    if (end >= len || last == pos) return end - pos;
    return last - pos;
}

static size_t match_gpt2(const uint8_t *s, size_t len, size_t pos) {
    size_t n0, n1;
    uint32_t c;
    int cls = cls_at(s, len, pos, &n0, &c);
    if (c == '\'') {
        size_t k = contraction(s, len, pos, 0);
        if (k) return k;
    }
    /* " ?X+" for X in letters, numbers, other: the optional space binds to the run after it. */
    size_t start = pos;
    int cls2 = cls;
    if (c == ' ') {
        cls2 = cls_at(s, len, pos + n0, &n1, NULL);
        if (cls2 == PT_C_LETTER || cls2 == PT_C_NUMBER || cls2 == PT_C_OTHER) start = pos + n0;
    }
    if (cls2 == PT_C_LETTER || cls2 == PT_C_NUMBER || cls2 == PT_C_OTHER)
        return run_of(s, len, start, cls2) - pos;
    if (cls == PT_C_SPACE) return space_run(s, len, pos);
    return n0; /* an invalid byte stands alone */
}

static size_t match_llama3(const uint8_t *s, size_t len, size_t pos, int max_digits) {
    size_t n0, n1;
    uint32_t c;
    int cls = cls_at(s, len, pos, &n0, &c);
    if (c == '\'') {
        size_t k = contraction(s, len, pos, 1);
        if (k) return k;
    }
    /* [^\r\n\p{L}\p{N}]?\p{L}+ */
    if (cls == PT_C_LETTER) return run_of(s, len, pos, PT_C_LETTER) - pos;
    if ((cls == PT_C_SPACE || cls == PT_C_OTHER) && c != '\r' && c != '\n' &&
        cls_at(s, len, pos + n0, &n1, NULL) == PT_C_LETTER)
        return run_of(s, len, pos + n0, PT_C_LETTER) - pos;
    /* \p{N}{1,max_digits} */
    if (cls == PT_C_NUMBER) {
        size_t end = pos;
        for (int i = 0; i < max_digits && cls_at(s, len, end, &n1, NULL) == PT_C_NUMBER; i++) end += n1;
        return end - pos;
    }
    /* " ?[^\s\p{L}\p{N}]+[\r\n]*" */
    size_t start = pos;
    if (c == ' ' && cls_at(s, len, pos + n0, &n1, NULL) == PT_C_OTHER) start = pos + n0;
    if (cls_at(s, len, start, &n1, NULL) == PT_C_OTHER) {
        size_t end = run_of(s, len, start, PT_C_OTHER);
        while (end < len && (s[end] == '\r' || s[end] == '\n')) end++;
        return end - pos;
    }
    if (cls == PT_C_SPACE) {
        /* \s*[\r\n]+ : the whitespace run up to and including its last line break. */
        size_t end = pos, brk = 0;
        while (cls_at(s, len, end, &n1, NULL) == PT_C_SPACE) {
            if (s[end] == '\r' || s[end] == '\n') brk = end + 1;
            end += n1;
        }
        if (brk) return brk - pos;
        return space_run(s, len, pos);
    }
    return n0;
}

size_t pt_match(pt_rule rule, const uint8_t *s, size_t len, size_t pos) {
    size_t n;
    int cls;
    switch (rule) {
    case PT_GPT2: return match_gpt2(s, len, pos);
    case PT_LLAMA3: return match_llama3(s, len, pos, 3);
    case PT_QWEN2: return match_llama3(s, len, pos, 1);
    case PT_DIGITS_EACH:
    case PT_DIGITS_RUNS:
        /* Number characters are isolated (each, or as runs); the text between them is one piece. */
        cls = cls_at(s, len, pos, &n, NULL);
        if (cls == PT_C_NUMBER) return rule == PT_DIGITS_EACH ? n : run_of(s, len, pos, PT_C_NUMBER) - pos;
        {
            size_t end = pos + n;
            while (end < len && cls_at(s, len, end, &n, NULL) != PT_C_NUMBER) end += n;
            return end - pos;
        }
    case PT_PREFIX_SPACE: break;
    }
    return len - pos;
}

static const struct {
    const char *pattern;
    pt_rule rule;
} known[] = {
    {"'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+", PT_GPT2},
    {"'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)", PT_GPT2},
    {"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+",
     PT_LLAMA3},
    {"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+",
     PT_QWEN2},
    {"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+",
     PT_LLAMA3},
    {"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+",
     PT_QWEN2},
    {"\\p{N}", PT_DIGITS_EACH},
    {"\\p{N}+", PT_DIGITS_RUNS},
};

int pt_rule_from_pattern(const char *pattern, pt_rule *rule) {
    for (size_t i = 0; i < sizeof known / sizeof known[0]; i++) {
        if (strcmp(pattern, known[i].pattern) == 0) {
            *rule = known[i].rule;
            return 0;
        }
    }
    return -1;
}

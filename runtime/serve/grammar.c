/* grammar.c — the pushdown matcher and the token mask; see grammar.h. The
 * compiled form it follows is in grammar_rules.h, built by grammar_parse.c.
 *
 * Characters are Unicode code points; the matcher decodes UTF-8 itself and,
 * in the middle of a code point, keeps only the stacks whose class contains
 * some code point starting with those bytes.
 *
 * A stack is a linked list of element positions in an arena (top first):
 * the top is always a character element still to be matched; the rest are
 * where to continue when the rules above it end. Lists share their tails, so
 * splitting on alternatives copies nothing. A stack is the empty list (-1)
 * when the whole grammar has been matched. Repetition is right recursion
 * (x* is R ::= x R | ""), and a reference in tail position pushes nothing,
 * so loops do not grow stacks.
 */
#include "grammar_rules.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- character classes ------------------------------------------------------ */

/* Does the class starting at pos contain cp? *after: the position past the class. */
int gram_class_match(const gelem *e, int pos, uint32_t cp, int *after) {
    if (e[pos].type == G_CHAR_ANY) {
        *after = pos + 1;
        return 1;
    }
    const int negate = e[pos].type == G_CHAR_NOT;
    int found = 0, i = pos;
    do {
        const uint32_t lo = e[i].value;
        uint32_t hi = lo;
        if (e[i + 1].type == G_CHAR_RNG_UPPER) {
            hi = e[i + 1].value;
            i++;
        }
        if (cp >= lo && cp <= hi) found = 1;
        i++;
    } while (e[i].type == G_CHAR_ALT);
    *after = i;
    return found != negate;
}

/* Could the class at pos contain some code point in [lo, hi]? (Exact for
 * positive classes; for a negated one, unless a single range covers it.) */
static int class_may_match(const gelem *e, int pos, uint32_t lo, uint32_t hi) {
    if (e[pos].type == G_CHAR_ANY) return 1;
    const int negate = e[pos].type == G_CHAR_NOT;
    int i = pos;
    do {
        const uint32_t a = e[i].value;
        uint32_t b = a;
        if (e[i + 1].type == G_CHAR_RNG_UPPER) {
            b = e[i + 1].value;
            i++;
        }
        if (!negate && a <= hi && b >= lo) return 1;
        if (negate && a <= lo && b >= hi) return 0;
        i++;
    } while (e[i].type == G_CHAR_ALT);
    return negate;
}

/* ---- the matcher ------------------------------------------------------------ */

typedef struct {
    int32_t pos, next; /* element position; the node below (-1: bottom) */
} gnode;

#define GRAM_CACHE 4       /* masks remembered per matcher */
#define GRAM_SIG_MAX 256   /* state signatures longer than this are not cached */

#define GRAM_WALK_STATES 2048 /* automaton states one mask may build (1 KiB of successors each) */

typedef struct {
    int32_t first, n;  /* tops: st_tops[first .. first + n) */
    uint32_t cp, hash;
    int rem;
    int loops_known;   /* loop is computed */
    uint64_t loop[4];  /* the bytes that lead from this state back to itself */
} gstate;

typedef struct {
    const gram_vocab *v;
    int32_t sig[GRAM_SIG_MAX];
    int n_sig;             /* 0: empty */
    uint32_t *bits;
    size_t cap_words;
    int count;
    uint64_t used;
} gram_cached;

struct gram_matcher {
    gram_grammar *g;
    gnode *nodes;      /* arena; the current state's nodes come first */
    int n_nodes, cap_nodes;
    int32_t *stacks;   /* current state: each stack's top node (-1: the grammar is complete) */
    int n_stacks;
    uint32_t cp;       /* a code point's bits so far ... */
    int rem;           /* ... its continuation bytes still due and its length (see step_byte; 0: between code points) */
    int overflow;      /* a limit was hit in the current operation */
    int work;          /* expansions in the current step (bounded: ambiguity can be exponential) */
    int32_t *scratch;  /* sets for accept (2) and the trie walk (one per depth) */
    int scratch_sets;
    uint32_t loops[4]; /* during a plain mask walk: ASCII bytes that lead from the state back to itself */
    gram_cached cache[GRAM_CACHE];
    uint64_t clock;
    /* during a mask: the automaton built lazily over the states the trie walk
     * meets (see walk_memo); nodes are hash-consed so equal stacks are equal ids */
    int interning;     /* node_new returns the existing node for an equal (pos, next) */
    int walk_mark;     /* nodes from here on were made (and interned) by this walk */
    int32_t *ni;       /* node intern table, open addressing (-1: empty) */
    int ni_cap, ni_used;
    gstate *st;        /* the states met, and ... */
    int n_st, cap_st;
    int32_t *st_tops;  /* ... their stack tops (sorted), and ... */
    int n_tops, cap_tops;
    int32_t *st_trans; /* ... per state 256 successors: a state id, -1 rejected, -2 not computed yet */
    int32_t *st_index; /* state hash table (-1: empty) */
    int st_index_cap;
    int memo_full;     /* more than GRAM_WALK_STATES states: the plain walk takes over */
    int masking;       /* a gram_mask is running: its expansions count against GRAM_MAX_MASK_WORK */
    long mask_work;    /* expansions in this mask, over every token tried */
    int mask_over;     /* the budget ran out: the mask is abandoned */
};

#define GRAM_MAX_NODES (1 << 22)
#define GRAM_MAX_DEPTH 10000   /* rules entered at once without matching input */
#define GRAM_MAX_WORK 100000   /* expansions for one code point */

static uint32_t node_hash(int32_t pos, int32_t next) {
    return (uint32_t)pos * 0x9e3779b1u ^ (uint32_t)(next + 1) * 0x85ebca77u;
}

/* Grows the node intern table; every node from walk_mark on is in it. */
static int intern_grow(gram_matcher *m) {
    const int cap = m->ni_cap ? m->ni_cap * 2 : 4096;
    int32_t *t = malloc(sizeof(int32_t) * (size_t)cap);
    if (!t) return -1;
    memset(t, 0xff, sizeof(int32_t) * (size_t)cap);
    for (int i = m->walk_mark; i < m->n_nodes; i++) {
        uint32_t h = node_hash(m->nodes[i].pos, m->nodes[i].next) & (uint32_t)(cap - 1);
        while (t[h] >= 0) h = (h + 1) & (uint32_t)(cap - 1);
        t[h] = i;
    }
    free(m->ni);
    m->ni = t;
    m->ni_cap = cap;
    return 0;
}

static int32_t node_new(gram_matcher *m, int32_t pos, int32_t next) {
    uint32_t slot = 0;
    if (m->interning) {
        if ((m->ni_used + 1) * 2 > m->ni_cap && intern_grow(m) != 0) {
            m->overflow = 1;
            return -1;
        }
        slot = node_hash(pos, next) & (uint32_t)(m->ni_cap - 1);
        for (; m->ni[slot] >= 0; slot = (slot + 1) & (uint32_t)(m->ni_cap - 1))
            if (m->nodes[m->ni[slot]].pos == pos && m->nodes[m->ni[slot]].next == next) return m->ni[slot];
    }
    if (m->n_nodes == m->cap_nodes) {
        if (m->cap_nodes >= GRAM_MAX_NODES) {
            m->overflow = 1;
            return -1;
        }
        const int cap = m->cap_nodes ? m->cap_nodes * 2 : 256;
        gnode *n = realloc(m->nodes, sizeof *n * (size_t)cap);
        if (!n) {
            m->overflow = 1;
            return -1;
        }
        m->nodes = n;
        m->cap_nodes = cap;
    }
    m->nodes[m->n_nodes] = (gnode){pos, next};
    if (m->interning) {
        m->ni[slot] = m->n_nodes;
        m->ni_used++;
    }
    return m->n_nodes++;
}

static int same_stack(const gram_matcher *m, int32_t a, int32_t b) {
    while (a != b) {
        if (a < 0 || b < 0 || m->nodes[a].pos != m->nodes[b].pos) return 0;
        a = m->nodes[a].next;
        b = m->nodes[b].next;
    }
    return 1;
}

static void set_add(gram_matcher *m, int32_t *set, int *n, int32_t top) {
    if (m->masking && (m->mask_work += *n + 1) > GRAM_MAX_MASK_WORK) { /* each comparison walks two stacks */
        m->mask_over = m->overflow = 1;
        return;
    }
    for (int i = 0; i < *n; i++)
        if (same_stack(m, set[i], top)) return;
    if (*n >= GRAM_MAX_STACKS) {
        m->overflow = 1;
        return;
    }
    set[(*n)++] = top;
}

/* Adds to set every stack that continues at element pos with rest below,
 * expanded until each top is a character class: the end of a rule pops,
 * a rule reference splits into its alternatives (pushing the element after
 * the reference, unless the reference was the last of its alternative). */
static void expand(gram_matcher *m, int32_t pos, int32_t rest, int32_t *set, int *n, int depth) {
    const gram_grammar *g = m->g;
    if (m->overflow) return;
    if (depth > GRAM_MAX_DEPTH || ++m->work > GRAM_MAX_WORK) {
        m->overflow = 1;
        return;
    }
    if (m->masking && ++m->mask_work > GRAM_MAX_MASK_WORK) {
        m->mask_over = m->overflow = 1;
        return;
    }
    for (;;) {
        const uint32_t t = g->elems[pos].type;
        if (t == G_END || t == G_ALT) {
            if (rest < 0) {
                set_add(m, set, n, -1);
                return;
            }
            pos = m->nodes[rest].pos;
            rest = m->nodes[rest].next;
            continue;
        }
        if (t == G_RULE_REF) {
            const int r = (int)g->elems[pos].value;
            const uint32_t nt = g->elems[pos + 1].type;
            int32_t below = rest;
            if (nt != G_END && nt != G_ALT) {
                below = node_new(m, pos + 1, rest);
                if (below < 0) return;
            }
            for (int a = g->alt_off[r]; a < g->alt_off[r + 1]; a++) expand(m, g->alts[a], below, set, n, depth + 1);
            return;
        }
        const int32_t top = node_new(m, pos, rest);
        if (top >= 0) set_add(m, set, n, top);
        return;
    }
}

/* The stacks after one more code point. */
static int step_cp(gram_matcher *m, const int32_t *in, int n_in, uint32_t cp, int32_t *out) {
    const gram_grammar *g = m->g;
    int n = 0;
    m->work = 0;
    for (int i = 0; i < n_in; i++) {
        if (in[i] < 0) continue;
        const int32_t pos = m->nodes[in[i]].pos;
        int after;
        if (cp < 128) {
            if (!(g->ascii[pos * 4 + cp / 32] >> (cp % 32) & 1)) continue;
            after = g->after[pos];
        } else if (!gram_class_match(g->elems, pos, cp, &after)) {
            continue;
        }
        expand(m, after, m->nodes[in[i]].next, out, &n, 0);
    }
    return m->overflow ? 0 : n;
}

/* The stacks after one more byte; *cp / *rem carry a partial code point:
 * its bits so far, and in *rem the continuation bytes still due (low 4
 * bits) and the sequence's whole length (bits 4..7), which sets the
 * smallest code point it may encode (overlong forms are invalid UTF-8). */
static int step_byte(gram_matcher *m, const int32_t *in, int n_in, uint32_t *cp, int *rem, unsigned char b,
                     int32_t *out) {
    static const uint32_t min_cp[5] = {0, 0, 0x80, 0x800, 0x10000};
    if (*rem == 0) {
        if (b < 0x80) return step_cp(m, in, n_in, b, out);
        if (b >= 0xc2 && b <= 0xdf) *cp = b & 0x1fu, *rem = 1 | 2 << 4;
        else if ((b & 0xf0) == 0xe0) *cp = b & 0x0fu, *rem = 2 | 3 << 4;
        else if (b >= 0xf0 && b <= 0xf4) *cp = b & 0x07u, *rem = 3 | 4 << 4;
        else return 0;
    } else {
        if ((b & 0xc0) != 0x80) return 0;
        *cp = *cp << 6 | (b & 0x3fu);
        if (((*rem = *rem - 1) & 15) == 0) {
            const int len = *rem >> 4;
            *rem = 0;
            if (*cp < min_cp[len] || *cp > 0x10ffff || (*cp >= 0xd800 && *cp <= 0xdfff)) return 0;
            return step_cp(m, in, n_in, *cp, out);
        }
    }
    /* inside a code point: keep the stacks that some completion could satisfy */
    const uint32_t shift = 6u * (uint32_t)(*rem & 15);
    uint32_t lo = *cp << shift, hi = lo | ((1u << shift) - 1);
    if (lo < min_cp[*rem >> 4]) lo = min_cp[*rem >> 4];
    if (hi > 0x10ffff) hi = 0x10ffff;
    if (lo > hi) return 0;
    int n = 0;
    for (int i = 0; i < n_in; i++)
        if (in[i] >= 0 && class_may_match(m->g->elems, m->nodes[in[i]].pos, lo, hi)) out[n++] = in[i];
    return n;
}

static int reserve_scratch(gram_matcher *m, int sets) {
    if (sets <= m->scratch_sets) return 0;
    int32_t *s = realloc(m->scratch, sizeof(int32_t) * GRAM_MAX_STACKS * (size_t)sets);
    if (!s) return -1;
    m->scratch = s;
    m->scratch_sets = sets;
    return 0;
}

/* Copies the current state's stacks to the front of the arena, dropping
 * the nodes of earlier states and of abandoned branches. */
static int compact(gram_matcher *m) {
    int32_t *map = malloc(sizeof(int32_t) * (size_t)(m->n_nodes + 1));
    gnode *fresh = malloc(sizeof(gnode) * (size_t)(m->n_nodes + 1));
    int32_t *chain = malloc(sizeof(int32_t) * (size_t)(m->n_nodes + 1));
    if (!map || !fresh || !chain) {
        free(map);
        free(fresh);
        free(chain);
        return -1;
    }
    for (int i = 0; i < m->n_nodes; i++) map[i] = -1;
    int n_fresh = 0;
    for (int s = 0; s < m->n_stacks; s++) {
        int len = 0;
        for (int32_t t = m->stacks[s]; t >= 0 && map[t] < 0; t = m->nodes[t].next) chain[len++] = t;
        for (int k = len - 1; k >= 0; k--) {
            const int32_t old = chain[k], below = m->nodes[old].next;
            fresh[n_fresh] = (gnode){m->nodes[old].pos, below < 0 ? -1 : map[below]};
            map[old] = n_fresh++;
        }
        if (m->stacks[s] >= 0) m->stacks[s] = map[m->stacks[s]];
    }
    memcpy(m->nodes, fresh, sizeof(gnode) * (size_t)n_fresh);
    m->n_nodes = n_fresh;
    free(map);
    free(fresh);
    free(chain);
    return 0;
}

gram_matcher *gram_matcher_new(gram_grammar *g, char *err, size_t errlen) {
    gram_matcher *m = calloc(1, sizeof *m);
    m = m && reserve_scratch(m, 2) == 0 ? m : (free(m), NULL);
    if (m) m->stacks = malloc(sizeof(int32_t) * GRAM_MAX_STACKS);
    if (!m || !m->stacks) {
        if (m) free(m->scratch);
        free(m);
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    atomic_fetch_add(&g->refs, 1);
    m->g = g;
    m->work = 0;
    for (int a = g->alt_off[g->root]; a < g->alt_off[g->root + 1]; a++)
        expand(m, g->alts[a], -1, m->stacks, &m->n_stacks, 0);
    if (m->overflow) {
        snprintf(err, errlen,
                 "the grammar's start exceeds the matcher's limits (%d alternatives alive, %d rules nested, %d "
                 "expansions)", GRAM_MAX_STACKS, GRAM_MAX_DEPTH, GRAM_MAX_WORK);
        gram_matcher_free(m);
        return NULL;
    }
    return m;
}

gram_matcher *gram_matcher_clone(const gram_matcher *m) {
    gram_matcher *c = calloc(1, sizeof *c);
    if (!c) return NULL;
    *c = *m;
    c->nodes = malloc(sizeof(gnode) * (size_t)(m->cap_nodes ? m->cap_nodes : 1));
    c->stacks = malloc(sizeof(int32_t) * GRAM_MAX_STACKS);
    c->scratch = NULL;
    c->scratch_sets = 0;
    memset(c->cache, 0, sizeof c->cache); /* the copy starts with no cached masks ... */
    c->ni = c->st_tops = c->st_trans = c->st_index = NULL; /* ... and no automaton */
    c->st = NULL;
    c->ni_cap = c->ni_used = c->n_st = c->cap_st = c->n_tops = c->cap_tops = c->st_index_cap = 0;
    c->interning = 0;
    if (!c->nodes || !c->stacks || reserve_scratch(c, 2) != 0) {
        free(c->nodes);
        free(c->stacks);
        free(c->scratch);
        free(c);
        return NULL;
    }
    if (m->n_nodes) memcpy(c->nodes, m->nodes, sizeof(gnode) * (size_t)m->n_nodes);
    memcpy(c->stacks, m->stacks, sizeof(int32_t) * (size_t)m->n_stacks);
    atomic_fetch_add(&m->g->refs, 1);
    return c;
}

void gram_matcher_free(gram_matcher *m) {
    if (!m) return;
    gram_free(m->g);
    for (int i = 0; i < GRAM_CACHE; i++) free(m->cache[i].bits);
    free(m->ni);
    free(m->st);
    free(m->st_tops);
    free(m->st_trans);
    free(m->st_index);
    free(m->nodes);
    free(m->stacks);
    free(m->scratch);
    free(m);
}

int gram_accept_bytes(gram_matcher *m, const char *bytes, size_t n) {
    const int mark = m->n_nodes;
    int32_t *a = m->scratch, *b = m->scratch + GRAM_MAX_STACKS;
    memcpy(a, m->stacks, sizeof(int32_t) * (size_t)m->n_stacks);
    int n_cur = m->n_stacks, rem = m->rem;
    uint32_t cp = m->cp;
    m->overflow = 0;
    for (size_t i = 0; i < n; i++) {
        n_cur = step_byte(m, a, n_cur, &cp, &rem, (unsigned char)bytes[i], b);
        if (n_cur == 0 || m->overflow) {
            m->n_nodes = mark;
            m->overflow = 0;
            return -1;
        }
        int32_t *t = a;
        a = b;
        b = t;
    }
    memcpy(m->stacks, a, sizeof(int32_t) * (size_t)n_cur);
    m->n_stacks = n_cur;
    m->cp = cp;
    m->rem = rem;
    if (m->n_nodes > 1024 && compact(m) != 0) return -1;
    return 0;
}

int gram_is_complete(const gram_matcher *m) {
    if (m->rem) return 0;
    for (int i = 0; i < m->n_stacks; i++)
        if (m->stacks[i] < 0) return 1;
    return 0;
}

int gram_can_continue(const gram_matcher *m) {
    for (int i = 0; i < m->n_stacks; i++)
        if (m->stacks[i] >= 0) return 1;
    return 0;
}

/* ---- the vocabulary trie and the mask --------------------------------------- */

struct gram_vocab {
    int n_tokens;
    char **piece;      /* [n_tokens]: each id's bytes (copied) */
    size_t *len;
    uint8_t *usable;   /* [n_tokens]: not excluded and not empty */
    /* the trie in depth-first pre-order: node i's subtree is [i, end[i]),
     * its first child i + 1, the child after c is end[c]; node 0 is the root */
    int n_nodes;
    unsigned char *byte;
    int32_t *end;
    int32_t *tok_first, *tok_n; /* ids spelled exactly by node i: tok_ids[tok_first .. + tok_n) */
    int32_t *tok_ids;
    int32_t *tok_start;  /* [n_nodes + 1]: tok_ids entries of the nodes before i (a subtree's ids are
                            tok_ids[tok_start[i] .. tok_start[end[i]])) */
    uint64_t *sub_bytes; /* [n_nodes * 4]: the bytes of node i's strict descendants, as a 256-bit set */
    int32_t *height;     /* [n_nodes]: how many bytes node i's deepest descendant adds to it */
    int max_len;
};

typedef struct {
    const unsigned char *p;
    size_t len;
    int32_t id;
} vocab_entry;

static int entry_cmp(const void *a, const void *b) {
    const vocab_entry *x = a, *y = b;
    const size_t n = x->len < y->len ? x->len : y->len;
    const int c = memcmp(x->p, y->p, n);
    if (c) return c;
    if (x->len != y->len) return x->len < y->len ? -1 : 1;
    return x->id < y->id ? -1 : x->id > y->id;
}

void gram_vocab_free(gram_vocab *v) {
    if (!v) return;
    if (v->piece)
        for (int i = 0; i < v->n_tokens; i++) free(v->piece[i]);
    free(v->piece);
    free(v->len);
    free(v->usable);
    free(v->byte);
    free(v->end);
    free(v->tok_first);
    free(v->tok_n);
    free(v->tok_ids);
    free(v->tok_start);
    free(v->sub_bytes);
    free(v->height);
    free(v);
}

gram_vocab *gram_vocab_new(int n_tokens, const char *const *pieces, const size_t *lens, const uint8_t *excluded) {
    gram_vocab *v = calloc(1, sizeof *v);
    vocab_entry *ents = malloc(sizeof *ents * (size_t)(n_tokens + 1));
    if (!v || !ents) goto oom;
    v->n_tokens = n_tokens;
    v->piece = calloc((size_t)n_tokens + 1, sizeof *v->piece);
    v->len = calloc((size_t)n_tokens + 1, sizeof *v->len);
    v->usable = calloc((size_t)n_tokens + 1, 1);
    if (!v->piece || !v->len || !v->usable) goto oom;
    size_t total = 1;
    int n_ents = 0;
    for (int i = 0; i < n_tokens; i++) {
        const size_t len = pieces[i] ? lens[i] : 0;
        v->piece[i] = malloc(len + 1);
        if (!v->piece[i]) goto oom;
        if (len) memcpy(v->piece[i], pieces[i], len);
        v->len[i] = len;
        if (len == 0 || (excluded && excluded[i])) continue;
        v->usable[i] = 1;
        ents[n_ents++] = (vocab_entry){(const unsigned char *)v->piece[i], len, i};
        total += len;
        if ((int)len > v->max_len) v->max_len = (int)len;
    }
    qsort(ents, (size_t)n_ents, sizeof *ents, entry_cmp);
    v->byte = malloc(total);
    v->end = malloc(sizeof(int32_t) * total);
    v->tok_first = calloc(total, sizeof(int32_t));
    v->tok_n = calloc(total, sizeof(int32_t));
    v->tok_ids = malloc(sizeof(int32_t) * (size_t)(n_ents + 1));
    int32_t *path = malloc(sizeof(int32_t) * (size_t)(v->max_len + 1));
    if (!v->byte || !v->end || !v->tok_first || !v->tok_n || !v->tok_ids || !path) {
        free(path);
        goto oom;
    }
    v->byte[0] = 0;
    v->n_nodes = 1;
    path[0] = 0;
    int depth = 0, n_ids = 0;
    const unsigned char *prev = NULL;
    for (int k = 0; k < n_ents; k++) {
        const unsigned char *s = ents[k].p;
        const int len = (int)ents[k].len;
        int common = 0;
        while (prev && common < depth && common < len && prev[common] == s[common]) common++;
        while (depth > common) v->end[path[depth--]] = v->n_nodes;
        for (int i = common; i < len; i++) {
            const int nd = v->n_nodes++;
            v->byte[nd] = s[i];
            path[++depth] = nd;
        }
        const int nd = path[depth];
        if (v->tok_n[nd] == 0) v->tok_first[nd] = n_ids;
        v->tok_ids[n_ids++] = ents[k].id;
        v->tok_n[nd]++;
        prev = s;
    }
    while (depth >= 0) v->end[path[depth--]] = v->n_nodes;
    free(path);
    free(ents);
    v->tok_start = malloc(sizeof(int32_t) * ((size_t)v->n_nodes + 1));
    v->sub_bytes = calloc((size_t)v->n_nodes * 4, sizeof(uint64_t));
    v->height = calloc((size_t)v->n_nodes, sizeof(int32_t));
    if (!v->tok_start || !v->sub_bytes || !v->height) {
        gram_vocab_free(v);
        return NULL;
    }
    for (int i = 0, k = 0; i <= v->n_nodes; i++) {
        v->tok_start[i] = k;
        if (i < v->n_nodes) k += v->tok_n[i];
    }
    /* children come after their parent: fold each node's set into its parent's, last node first */
    int32_t *parent = malloc(sizeof(int32_t) * (size_t)v->n_nodes);
    if (!parent) {
        gram_vocab_free(v);
        return NULL;
    }
    for (int i = 0; i < v->n_nodes; i++)
        for (int c = i + 1; c < v->end[i]; c = v->end[c]) parent[c] = i;
    for (int c = v->n_nodes - 1; c > 0; c--) {
        uint64_t *ps = v->sub_bytes + (size_t)parent[c] * 4, *cs = v->sub_bytes + (size_t)c * 4;
        ps[v->byte[c] >> 6] |= 1ull << (v->byte[c] & 63);
        for (int w = 0; w < 4; w++) ps[w] |= cs[w];
        if (v->height[c] + 1 > v->height[parent[c]]) v->height[parent[c]] = v->height[c] + 1;
    }
    free(parent);
    return v;
oom:
    free(ents);
    gram_vocab_free(v);
    return NULL;
}

int gram_vocab_size(const gram_vocab *v) { return v->n_tokens; }

int gram_accept_token(gram_matcher *m, const gram_vocab *v, int id) {
    if (id < 0 || id >= v->n_tokens || !v->usable[id]) return -1;
    return gram_accept_bytes(m, v->piece[id], v->len[id]);
}

/* Do sets a and b hold the same stacks (structurally, in any order)? */
static int same_set(const gram_matcher *m, const int32_t *a, int na, const int32_t *b, int nb) {
    if (na != nb) return 0;
    for (int i = 0; i < na; i++) {
        int found = 0;
        for (int k = 0; k < nb && !found; k++) found = same_stack(m, a[i], b[k]);
        if (!found) return 0;
    }
    return 1;
}

/* Visits node's children with the state (set, cp, rem) reached by node's
 * bytes: a child whose byte is rejected prunes its subtree; otherwise the
 * ids it spells are allowed and its children are visited in turn. The
 * arena above the current state is reclaimed after each child.
 *
 * at_start: the state is the matcher's own (structurally). An ASCII byte in
 * m->loops leads from that state back to itself (inside a JSON string, every
 * ordinary character does), so such a child needs no step at all: most of
 * the vocabulary is then a plain trie walk. */
static void walk(gram_matcher *m, const gram_vocab *v, int node, const int32_t *set, int n, uint32_t cp, int rem,
                 int at_start, int depth, uint32_t *allowed, int *count) {
    if (m->mask_over) return;
    int32_t *out = m->scratch + (size_t)(depth + 2) * GRAM_MAX_STACKS;
    for (int c = node + 1; c < v->end[node]; c = v->end[c]) {
        const unsigned char b = v->byte[c];
        if (at_start && b < 128 && (m->loops[b >> 5] >> (b & 31) & 1)) {
            for (int t = v->tok_first[c]; t < v->tok_first[c] + v->tok_n[c]; t++) {
                const int32_t id = v->tok_ids[t];
                allowed[id >> 5] |= 1u << (id & 31);
                ++*count;
            }
            if (c + 1 < v->end[c]) walk(m, v, c, set, n, cp, rem, 1, depth + 1, allowed, count);
            continue;
        }
        const int mark = m->n_nodes;
        uint32_t ncp = cp;
        int nrem = rem;
        const int k = step_byte(m, set, n, &ncp, &nrem, b, out);
        if (m->overflow) {
            m->overflow = 0; /* a branch past the limits is not allowed */
        } else if (k > 0) {
            for (int t = v->tok_first[c]; t < v->tok_first[c] + v->tok_n[c]; t++) {
                const int32_t id = v->tok_ids[t];
                allowed[id >> 5] |= 1u << (id & 31);
                ++*count;
            }
            if (c + 1 < v->end[c]) walk(m, v, c, out, k, ncp, nrem, 0, depth + 1, allowed, count);
        }
        m->n_nodes = mark;
    }
}

/* ---- the automaton of one mask walk ----
 *
 * Most trie nodes lead to a state the walk has already met: inside a string
 * of at most 24 characters, every token's k-th byte brings the same "24 - k
 * left" state whatever the letters were. Nodes are hash-consed during the
 * walk, so a state (its sorted stack tops, plus a partial code point) is a
 * short key; each state keeps its 256 successors once computed, and a trie
 * node then costs one table lookup instead of a matcher step. */

static uint32_t state_hash(const int32_t *tops, int n, uint32_t cp, int rem) {
    uint32_t h = 2166136261u ^ cp * 0x9e3779b1u ^ (uint32_t)rem * 0x85ebca77u;
    for (int i = 0; i < n; i++) h = (h ^ (uint32_t)tops[i]) * 16777619u;
    return h ^ (uint32_t)n;
}

static int state_index_grow(gram_matcher *m) {
    const int cap = m->st_index_cap ? m->st_index_cap * 2 : 256;
    int32_t *t = malloc(sizeof(int32_t) * (size_t)cap);
    if (!t) return -1;
    memset(t, 0xff, sizeof(int32_t) * (size_t)cap);
    for (int i = 0; i < m->n_st; i++) {
        uint32_t h = m->st[i].hash & (uint32_t)(cap - 1);
        while (t[h] >= 0) h = (h + 1) & (uint32_t)(cap - 1);
        t[h] = i;
    }
    free(m->st_index);
    m->st_index = t;
    m->st_index_cap = cap;
    return 0;
}

/* The id of the state (set sorted in place, cp, rem), added if new; -1 when
 * the table is full or memory runs out (memo_full set). */
static int32_t state_intern(gram_matcher *m, int32_t *set, int n, uint32_t cp, int rem) {
    for (int i = 1; i < n; i++) { /* insertion sort: sets are small */
        const int32_t x = set[i];
        int k = i;
        while (k > 0 && set[k - 1] > x) {
            set[k] = set[k - 1];
            k--;
        }
        set[k] = x;
    }
    const uint32_t h = state_hash(set, n, cp, rem);
    if (m->st_index_cap) {
        for (uint32_t i = h & (uint32_t)(m->st_index_cap - 1); m->st_index[i] >= 0;
             i = (i + 1) & (uint32_t)(m->st_index_cap - 1)) {
            const gstate *g = &m->st[m->st_index[i]];
            if (g->hash == h && g->n == n && g->cp == cp && g->rem == rem &&
                !memcmp(m->st_tops + g->first, set, sizeof(int32_t) * (size_t)n))
                return m->st_index[i];
        }
    }
    if (m->n_st >= GRAM_WALK_STATES) {
        m->memo_full = 1;
        return -1;
    }
    if (m->n_st == m->cap_st) {
        const int cap = m->cap_st ? m->cap_st * 2 : 64;
        gstate *st = realloc(m->st, sizeof *st * (size_t)cap);
        if (st) m->st = st;
        int32_t *tr = st ? realloc(m->st_trans, sizeof(int32_t) * 256 * (size_t)cap) : NULL;
        if (tr) m->st_trans = tr;
        if (!st || !tr) {
            m->memo_full = 1;
            return -1;
        }
        m->cap_st = cap;
    }
    if (m->n_tops + n > m->cap_tops) {
        int cap = m->cap_tops ? m->cap_tops : 256;
        while (cap < m->n_tops + n) cap *= 2;
        int32_t *t = realloc(m->st_tops, sizeof(int32_t) * (size_t)cap);
        if (!t) {
            m->memo_full = 1;
            return -1;
        }
        m->st_tops = t;
        m->cap_tops = cap;
    }
    if ((m->n_st + 1) * 2 > m->st_index_cap && state_index_grow(m) != 0) {
        m->memo_full = 1;
        return -1;
    }
    const int32_t id = m->n_st++;
    m->st[id] = (gstate){.first = m->n_tops, .n = n, .cp = cp, .hash = h, .rem = rem};
    memcpy(m->st_tops + m->n_tops, set, sizeof(int32_t) * (size_t)n);
    m->n_tops += n;
    for (int i = 0; i < 256; i++) m->st_trans[(size_t)id * 256 + i] = -2;
    uint32_t i = h & (uint32_t)(m->st_index_cap - 1);
    while (m->st_index[i] >= 0) i = (i + 1) & (uint32_t)(m->st_index_cap - 1);
    m->st_index[i] = id;
    return id;
}

/* The successor of state sid by byte b (computed once): a state id, -1
 * rejected, -3 when the automaton is full (memo_full). */
static int32_t transition(gram_matcher *m, int32_t sid, unsigned char b) {
    int32_t next = m->st_trans[(size_t)sid * 256 + b];
    if (next != -2) return next;
    int32_t *out = m->scratch + GRAM_MAX_STACKS;
    const gstate g = m->st[sid]; /* a copy: interning may move the table */
    uint32_t cp = g.cp;
    int rem = g.rem;
    const int k = step_byte(m, m->st_tops + g.first, g.n, &cp, &rem, b, out);
    if (m->overflow || k == 0) {
        m->overflow = 0; /* a branch past the limits is not allowed */
        next = -1;
    } else {
        next = state_intern(m, out, k, cp, rem);
        if (next < 0) return -3;
    }
    m->st_trans[(size_t)sid * 256 + b] = next;
    return next;
}

/* Subtrees smaller than this are walked even when they could be skipped:
 * the check costs up to 128 transitions per level. */
#define GRAM_SKIP_MIN_NODES 64

/* The one state every byte of set leads state sid to, or -1 if they lead
 * to different states or some byte is rejected (-3: the automaton is full). */
static int32_t uniform_successor(gram_matcher *m, int32_t sid, const uint64_t *set) {
    int32_t to = -1;
    for (int w = 0; w < 2; w++) /* ASCII only: the caller checked */
        for (uint64_t bits = set[w]; bits; bits &= bits - 1) {
            const int32_t t = transition(m, sid, (unsigned char)(w * 64 + __builtin_ctzll(bits)));
            if (t < 0) return t == -3 ? -3 : -1;
            if (to >= 0 && t != to) return -1;
            to = t;
        }
    return to;
}

/* Is every token below trie node c allowed from state sid, without walking
 * c's subtree? Yes if every byte of the subtree leads sid to one same
 * state s1, every such byte leads s1 to one same s2, and so on for as many
 * levels as the subtree is deep: then every path below c ends in a live
 * state. Inside an unbounded JSON string each s is sid itself (checked
 * first, from the state's self-loop bytes); inside a string of at most n
 * characters s1, s2, ... are "n - 1 left", "n - 2 left", ... */
static int subtree_allowed(gram_matcher *m, const gram_vocab *v, int c, int32_t sid) {
    if (v->end[c] - c < GRAM_SKIP_MIN_NODES) return 0;
    const uint64_t *sub = v->sub_bytes + (size_t)c * 4;
    if (sub[2] | sub[3]) return 0; /* a byte >= 0x80 starts or continues a code point: partial states differ */
    if (!m->st[sid].loops_known) {
        uint64_t loop[4] = {0};
        for (int b = 0; b < 128; b++) {
            const int32_t t = transition(m, sid, (unsigned char)b);
            if (t == -3) return 0;
            if (t == sid) loop[b >> 6] |= 1ull << (b & 63);
        }
        memcpy(m->st[sid].loop, loop, sizeof loop);
        m->st[sid].loops_known = 1;
    }
    if (!(sub[0] & ~m->st[sid].loop[0]) && !(sub[1] & ~m->st[sid].loop[1])) return 1;
    int32_t s = sid;
    for (int level = 0; level < v->height[c]; level++) {
        s = uniform_successor(m, s, sub);
        if (s < 0) return 0;
    }
    return 1;
}

/* walk() over the automaton: node's bytes led to state sid. */
static void walk_memo(gram_matcher *m, const gram_vocab *v, int node, int32_t sid, uint32_t *allowed, int *count) {
    if (m->mask_over) return;
    for (int c = node + 1; c < v->end[node] && !m->memo_full; c = v->end[c]) {
        const int32_t next = transition(m, sid, v->byte[c]);
        if (next == -3) return;
        if (next < 0) continue;
        const int has_children = c + 1 < v->end[c];
        const int whole = has_children && subtree_allowed(m, v, c, next);
        if (m->memo_full) return;
        const int t_end = whole ? v->tok_start[v->end[c]] : v->tok_first[c] + v->tok_n[c];
        for (int t = whole ? v->tok_start[c] : v->tok_first[c]; t < t_end; t++) {
            const int32_t id = v->tok_ids[t];
            allowed[id >> 5] |= 1u << (id & 31);
            ++*count;
        }
        if (has_children && !whole) walk_memo(m, v, c, next, allowed, count);
    }
}

/* The mask through the automaton; -1 if it outgrew GRAM_WALK_STATES. */
static int mask_memo(gram_matcher *m, const gram_vocab *v, uint32_t *allowed) {
    int count = 0;
    m->walk_mark = m->n_nodes;
    m->interning = 1;
    m->ni_used = 0;
    if (m->st_index) memset(m->st_index, 0xff, sizeof(int32_t) * (size_t)m->st_index_cap);
    m->n_st = m->n_tops = 0;
    m->memo_full = 0;
    m->overflow = 0;
    int32_t *root = m->scratch;
    memcpy(root, m->stacks, sizeof(int32_t) * (size_t)m->n_stacks);
    const int32_t sid = state_intern(m, root, m->n_stacks, m->cp, m->rem);
    if (sid >= 0) walk_memo(m, v, 0, sid, allowed, &count);
    /* empty the intern table for the next walk: newest first, so each
     * node's probe chain is still intact when it is looked up (a table that
     * grew large need not be swept whole for a walk that met few nodes) */
    for (int i = m->n_nodes - 1; i >= m->walk_mark && m->ni; i--) {
        uint32_t h = node_hash(m->nodes[i].pos, m->nodes[i].next) & (uint32_t)(m->ni_cap - 1);
        while (m->ni[h] != i) h = (h + 1) & (uint32_t)(m->ni_cap - 1);
        m->ni[h] = -1;
    }
    m->ni_used = 0;
    m->interning = 0;
    m->n_nodes = m->walk_mark;
    m->overflow = 0;
    return m->memo_full ? -1 : count;
}

/* The mask by the plain walk: a matcher step per trie node (the state's
 * self-looping ASCII bytes aside). */
static void mask_plain(gram_matcher *m, const gram_vocab *v, uint32_t *allowed, int *count) {
    memset(allowed, 0, sizeof(uint32_t) * (size_t)((v->n_tokens + 31) / 32));
    m->overflow = 0;
    memset(m->loops, 0, sizeof m->loops);
    if (m->rem == 0) {
        int32_t *out = m->scratch + GRAM_MAX_STACKS;
        for (uint32_t b = 0; b < 128; b++) {
            const int mark = m->n_nodes;
            const int k = step_cp(m, m->stacks, m->n_stacks, b, out);
            if (!m->overflow && k > 0 && same_set(m, out, k, m->stacks, m->n_stacks)) m->loops[b >> 5] |= 1u << (b & 31);
            m->overflow = 0;
            m->n_nodes = mark;
        }
    }
    walk(m, v, 0, m->stacks, m->n_stacks, m->cp, m->rem, 1, 0, allowed, count);
}

/* The state's signature for the mask cache: cp, rem, then per stack its
 * depth and positions. Returns its length, or -1 if longer than cap. */
static int signature(const gram_matcher *m, int32_t *sig, int cap) {
    int n = 0;
    if (cap < 3) return -1;
    sig[n++] = (int32_t)m->cp;
    sig[n++] = m->rem;
    sig[n++] = m->n_stacks;
    for (int i = 0; i < m->n_stacks; i++) {
        const int at = n++;
        if (n > cap) return -1;
        int d = 0;
        for (int32_t t = m->stacks[i]; t >= 0; t = m->nodes[t].next, d++) {
            if (n >= cap) return -1;
            sig[n++] = m->nodes[t].pos;
        }
        sig[at] = d;
    }
    return n;
}

int gram_mask(gram_matcher *m, const gram_vocab *v, uint32_t *allowed) {
    const size_t words = (size_t)((v->n_tokens + 31) / 32);
    /* a state seen recently (the same string, the same position in a
     * repeated structure) gets its mask from the cache */
    int32_t sig[GRAM_SIG_MAX];
    const int n_sig = signature(m, sig, GRAM_SIG_MAX);
    if (n_sig > 0) {
        for (int i = 0; i < GRAM_CACHE; i++) {
            gram_cached *e = &m->cache[i];
            if (e->v == v && e->n_sig == n_sig && !memcmp(e->sig, sig, sizeof(int32_t) * (size_t)n_sig)) {
                memcpy(allowed, e->bits, sizeof(uint32_t) * words);
                e->used = ++m->clock;
                return e->count;
            }
        }
    }
    memset(allowed, 0, sizeof(uint32_t) * words);
    if (reserve_scratch(m, v->max_len + 3) != 0) return 0;
    m->masking = 1;
    m->mask_work = 0;
    m->mask_over = 0;
    int count = mask_memo(m, v, allowed);
    if (count < 0 && !m->mask_over) { /* too many states for the automaton: the plain walk, step by step */
        count = 0;
        mask_plain(m, v, allowed, &count);
    }
    m->masking = 0;
    if (m->mask_over) { /* nothing is allowed from a mask cut short; it is not cached */
        m->overflow = 0;
        memset(allowed, 0, sizeof(uint32_t) * words);
        return -1;
    }
    if (n_sig > 0) {
        gram_cached *e = &m->cache[0];
        for (int i = 1; i < GRAM_CACHE; i++)
            if (m->cache[i].used < e->used) e = &m->cache[i];
        if (e->cap_words < words) {
            uint32_t *bits = realloc(e->bits, sizeof(uint32_t) * words);
            if (!bits) return count;
            e->bits = bits;
            e->cap_words = words;
        }
        memcpy(e->bits, allowed, sizeof(uint32_t) * words);
        memcpy(e->sig, sig, sizeof(int32_t) * (size_t)n_sig);
        e->n_sig = n_sig;
        e->v = v;
        e->count = count;
        e->used = ++m->clock;
    }
    return count;
}

int gram_mask_stepwise(gram_matcher *m, const gram_vocab *v, uint32_t *allowed) {
    int count = 0;
    if (reserve_scratch(m, v->max_len + 3) != 0) {
        memset(allowed, 0, sizeof(uint32_t) * (size_t)((v->n_tokens + 31) / 32));
        return 0;
    }
    mask_plain(m, v, allowed, &count);
    return count;
}

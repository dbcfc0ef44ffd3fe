/* json_schema_pattern_dfa.c — a pattern's NFA (json_schema_pattern.c) into GBNF rules; see
 * json_schema_pattern.h.
 *
 * The NFA becomes a DFA by subset construction, and each DFA state one rule:
 *   N-5 ::= N-c1 N-6 | N-c2 N-9 | ""      ("" when the state accepts)
 * where N-c1 is the rule of one set of characters, each spelled as JSON spells it inside a
 * string. A DFA, not a rule per piece of the pattern, because the grammar matcher keeps one stack
 * per way the text so far can be parsed: ".*a.*" unanchored, or "(a|ab)*", would split into
 * stacks without bound (and a nullable item under "*", "(a?)*", is left recursion to the
 * grammar); a DFA has one way. Once a match with an unanchored end is complete, every string
 * from there on matches: such a state is one "anything" state rather than all the NFA states
 * it holds, which keeps unanchored patterns small.
 *
 * minLength / maxLength are compiled in as a product: a state is a DFA state and the length so
 * far (up to maxLength, or up to minLength when there is no maximum). States from which nothing
 * can be accepted are dropped, so generation never walks into a dead end.
 */
#include "json_schema_pattern.h"
#include "json_schema_pattern_nfa.h"
#include "text_buf.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "grammar.h"

#define JSP_MAX_POOL (1 << 21) /* 32-bit words of interned keys (NFA state sets, labels, pairs) */

/* ---- interning of uint32 sequences -------------------------------------------------- */

typedef struct {
    uint32_t *pool;
    size_t n_pool, cap_pool;
    size_t *off;
    int *len;
    int n, cap;
    int *slot; /* open addressing, -1 empty; n_slots a power of two, at least 2 n */
    int n_slots;
} interner;

static uint32_t seq_hash(const uint32_t *v, int n) {
    uint32_t h = 2166136261u;
    for (int i = 0; i < n; i++) h = (h ^ v[i]) * 16777619u;
    return h ^ (uint32_t)n;
}

static int in_rehash(interner *t) {
    const int n_slots = t->n_slots ? t->n_slots * 2 : 64;
    int *slot = malloc(sizeof *slot * (size_t)n_slots);
    if (!slot) return -1;
    memset(slot, 0xff, sizeof *slot * (size_t)n_slots);
    for (int i = 0; i < t->n; i++) {
        uint32_t h = seq_hash(t->pool + t->off[i], t->len[i]) & (uint32_t)(n_slots - 1);
        while (slot[h] >= 0) h = (h + 1) & (uint32_t)(n_slots - 1);
        slot[h] = i;
    }
    free(t->slot);
    t->slot = slot;
    t->n_slots = n_slots;
    return 0;
}

/* v[0..n)'s id, added when new (*added set). -1: out of memory, -2: past JSP_MAX_POOL. */
static int intern(interner *t, const uint32_t *v, int n, int *added) {
    *added = 0;
    if ((t->n + 1) * 2 > t->n_slots && in_rehash(t)) return -1;
    uint32_t h = seq_hash(v, n) & (uint32_t)(t->n_slots - 1);
    for (; t->slot[h] >= 0; h = (h + 1) & (uint32_t)(t->n_slots - 1)) {
        const int i = t->slot[h];
        if (t->len[i] == n && !memcmp(t->pool + t->off[i], v, sizeof *v * (size_t)n)) return i;
    }
    if (t->n_pool + (size_t)n > JSP_MAX_POOL) return -2;
    if (t->n_pool + (size_t)n > t->cap_pool) {
        size_t cap = t->cap_pool ? t->cap_pool : 1024;
        while (cap < t->n_pool + (size_t)n) cap *= 2;
        uint32_t *p = realloc(t->pool, sizeof *p * cap);
        if (!p) return -1;
        t->pool = p;
        t->cap_pool = cap;
    }
    if (t->n == t->cap) {
        const int cap = t->cap ? t->cap * 2 : 64;
        size_t *o = realloc(t->off, sizeof *o * (size_t)cap);
        if (o) t->off = o;
        int *l = realloc(t->len, sizeof *l * (size_t)cap);
        if (l) t->len = l;
        if (!o || !l) return -1;
        t->cap = cap;
    }
    memcpy(t->pool + t->n_pool, v, sizeof *v * (size_t)n);
    t->off[t->n] = t->n_pool;
    t->len[t->n] = n;
    t->n_pool += (size_t)n;
    t->slot[h] = t->n;
    *added = 1;
    return t->n++;
}

static void in_free(interner *t) {
    free(t->pool);
    free(t->off);
    free(t->len);
    free(t->slot);
}

/* ---- the automaton ------------------------------------------------------------------- */

typedef struct {
    int label, to;
} edge;

typedef struct {
    int accept;
    int e_off, e_n; /* its edges: edges[e_off .. e_off + e_n) */
} dstate;

typedef struct {
    dstate *s;
    int n, cap;
    edge *e;
    int n_e, cap_e;
} graph;

typedef struct {
    const jsp_nfa *nfa;
    interner keys;   /* DFA state: its sorted SET and MATCH states */
    interner labels; /* a set of characters on an edge, as (lo, hi) pairs */
    graph dfa;
    int *stack, *mark, gen;        /* closure scratch, [n_states] */
    uint32_t *key;                 /* [n_states] */
    int *set_mark, set_gen;        /* [n_sets] */
    uint32_t *pts, *ranges;        /* a state's character boundaries, and one label's ranges */
    int *atom_to, *targets, *prev_targets;
    uint64_t *order;               /* successor << 32 | atom, sorted to group atoms by successor */
    int cap_pts;
    long work;
    char *err;
    size_t errlen;
    int failed;
} dctx;

static int dfail(dctx *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int dfail(dctx *c, const char *fmt, ...) {
    if (c->failed) return -1;
    c->failed = 1;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(c->err, c->errlen, fmt, ap);
    va_end(ap);
    return -1;
}

static int intern_failed(dctx *c, int id) {
    if (id == -1) return dfail(c, "out of memory");
    if (id == -2) return dfail(c, "the pattern is too complex (its automaton would take more than %d MiB)",
                               (int)(JSP_MAX_POOL * sizeof(uint32_t) >> 20));
    return 0;
}

static int graph_state(dctx *c, graph *g, int accept) {
    if (g->n == g->cap) {
        const int cap = g->cap ? g->cap * 2 : 64;
        dstate *s = realloc(g->s, sizeof *s * (size_t)cap);
        if (!s) return dfail(c, "out of memory");
        g->s = s;
        g->cap = cap;
    }
    g->s[g->n] = (dstate){accept, 0, 0};
    return g->n++;
}

static int graph_edge(dctx *c, graph *g, int label, int to) {
    if (g->n_e == g->cap_e) {
        const int cap = g->cap_e ? g->cap_e * 2 : 256;
        edge *e = realloc(g->e, sizeof *e * (size_t)cap);
        if (!e) return dfail(c, "out of memory");
        g->e = e;
        g->cap_e = cap;
    }
    g->e[g->n_e++] = (edge){label, to};
    return 0;
}

static int u32_cmp(const void *a, const void *b) {
    const uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
    return x < y ? -1 : x > y;
}

/* The DFA state of the NFA states reachable from seeds[0..n) without consuming: its SET and
 * MATCH states, sorted. A set holding the unanchored end's loop is that loop and MATCH alone
 * (everything from it on matches). Its id, created when new; -1 on an error. */
static int dfa_state_of(dctx *c, const int *seeds, int n) {
    const jsp_nfa *a = c->nfa;
    int sp = 0, nk = 0;
    c->gen++;
    for (int i = 0; i < n; i++)
        if (c->mark[seeds[i]] != c->gen) c->mark[seeds[i]] = c->gen, c->stack[sp++] = seeds[i];
    while (sp > 0) {
        const int s = c->stack[--sp];
        const jsp_state *st = &a->states[s];
        c->work++;
        if (st->kind != JSP_SPLIT) {
            c->key[nk++] = (uint32_t)s;
            continue;
        }
        const int outs[2] = {st->out, st->out2};
        for (int k = 0; k < 2; k++)
            if (c->mark[outs[k]] != c->gen) c->mark[outs[k]] = c->gen, c->stack[sp++] = outs[k];
    }
    if (a->any_loop >= 0 && c->mark[a->any_loop] == c->gen) {
        nk = 0;
        c->key[nk++] = (uint32_t)a->any_loop;
        c->key[nk++] = (uint32_t)a->match;
    }
    qsort(c->key, (size_t)nk, sizeof *c->key, u32_cmp);
    c->work += nk;
    if (c->work > JSP_MAX_WORK)
        return dfail(c, "the pattern is too complex to compile (more than %ld steps)", JSP_MAX_WORK);
    int added;
    const int id = intern(&c->keys, c->key, nk, &added);
    if (id < 0) return intern_failed(c, id);
    if (!added) return id;
    if (id >= JSP_MAX_STATES)
        return dfail(c, "the pattern needs more than %d states (lower counts, or anchoring it with ^...$, "
                        "may help)", JSP_MAX_STATES);
    int accept = 0;
    for (int i = 0; i < nk; i++) accept |= (int)c->key[i] == a->match;
    return graph_state(c, &c->dfa, accept);
}

static int grow_scratch(dctx *c, int need) {
    if (need <= c->cap_pts) return 0;
    int cap = c->cap_pts ? c->cap_pts : 64;
    while (cap < need) cap *= 2;
    uint32_t *p = realloc(c->pts, sizeof *p * (size_t)cap);
    if (p) c->pts = p;
    uint32_t *r = realloc(c->ranges, sizeof *r * 2 * (size_t)cap);
    if (r) c->ranges = r;
    int *at = realloc(c->atom_to, sizeof *at * (size_t)cap);
    if (at) c->atom_to = at;
    uint64_t *o = realloc(c->order, sizeof *o * (size_t)cap);
    if (o) c->order = o;
    if (!p || !r || !at || !o) return dfail(c, "out of memory");
    c->cap_pts = cap;
    return 0;
}

/* State d's key's SET states split the code points into atoms: the ranges between consecutive
 * boundaries of their sets, within which every character leads to the same states. Fills c->pts
 * (n + 1 boundaries for n atoms); returns n, or -1. */
static int atoms_of(dctx *c, const uint32_t *key, int nk) {
    const jsp_nfa *a = c->nfa;
    int n = 0;
    c->set_gen++;
    for (int i = 0; i < nk; i++) {
        const jsp_state *st = &a->states[key[i]];
        if (st->kind != JSP_SET || c->set_mark[st->set] == c->set_gen) continue;
        c->set_mark[st->set] = c->set_gen;
        const int r0 = a->set_off[st->set], r1 = a->set_off[st->set + 1];
        if (grow_scratch(c, n + 2 * (r1 - r0) + 1)) return -1;
        for (int r = r0; r < r1; r++) c->pts[n++] = a->ranges[r].lo, c->pts[n++] = a->ranges[r].hi + 1;
    }
    if (n > 1) qsort(c->pts, (size_t)n, sizeof *c->pts, u32_cmp);
    int u = 0;
    for (int i = 0; i < n; i++)
        if (u == 0 || c->pts[i] != c->pts[u - 1]) c->pts[u++] = c->pts[i];
    c->work += n;
    return u > 0 ? u - 1 : 0;
}

static int u64_cmp(const void *a, const void *b) {
    const uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

/* The edges of DFA state d: for each atom, the state its characters lead to; then one edge per
 * distinct successor, labelled with the union of its atoms. */
static int dfa_expand(dctx *c, int d) {
    const jsp_nfa *a = c->nfa;
    const int nk = c->keys.len[d];
    uint32_t *key = malloc(sizeof *key * (size_t)(nk ? nk : 1)); /* interning may move the pool */
    if (!key) return dfail(c, "out of memory");
    memcpy(key, c->keys.pool + c->keys.off[d], sizeof *key * (size_t)nk);
    const int n_atoms = atoms_of(c, key, nk);
    int n_prev = -1, prev_to = -1, rc = n_atoms < 0 ? -1 : 0;
    for (int i = 0; i < n_atoms && rc == 0; i++) {
        if (c->work > JSP_MAX_WORK) {
            rc = dfail(c, "the pattern is too complex to compile (more than %ld steps)", JSP_MAX_WORK);
            break;
        }
        int nt = 0;
        for (int k = 0; k < nk; k++) {
            const jsp_state *st = &a->states[key[k]];
            if (st->kind == JSP_SET && jsp_set_has(a, st->set, c->pts[i])) c->targets[nt++] = st->out;
        }
        c->work += nk;
        /* the atoms of one class (between those of others, or none) lead to the same targets as
         * the last atom that led anywhere: their successor is known */
        if (nt == 0 || (nt == n_prev && !memcmp(c->targets, c->prev_targets, sizeof *c->targets * (size_t)nt))) {
            c->atom_to[i] = nt ? prev_to : -1;
            continue;
        }
        const int to = dfa_state_of(c, c->targets, nt);
        if (to < 0) rc = -1;
        c->atom_to[i] = prev_to = to;
        memcpy(c->prev_targets, c->targets, sizeof *c->targets * (size_t)nt);
        n_prev = nt;
    }
    free(key);
    if (rc) return -1;
    int n_order = 0;
    for (int i = 0; i < n_atoms; i++)
        if (c->atom_to[i] >= 0) c->order[n_order++] = (uint64_t)c->atom_to[i] << 32 | (uint32_t)i;
    if (n_order > 1) qsort(c->order, (size_t)n_order, sizeof *c->order, u64_cmp);
    c->dfa.s[d].e_off = c->dfa.n_e;
    for (int i = 0; i < n_order && rc == 0;) {
        const int to = (int)(c->order[i] >> 32);
        int nr = 0;
        for (; i < n_order && (int)(c->order[i] >> 32) == to; i++) {
            const int t = (int)(uint32_t)c->order[i];
            if (nr > 0 && c->ranges[2 * nr - 1] + 1 == c->pts[t]) c->ranges[2 * nr - 1] = c->pts[t + 1] - 1;
            else c->ranges[2 * nr] = c->pts[t], c->ranges[2 * nr + 1] = c->pts[t + 1] - 1, nr++;
        }
        int added;
        const int label = intern(&c->labels, c->ranges, 2 * nr, &added);
        rc = label < 0 ? intern_failed(c, label) : graph_edge(c, &c->dfa, label, to);
    }
    c->dfa.s[d].e_n = c->dfa.n_e - c->dfa.s[d].e_off;
    if (rc == 0 && c->dfa.s[d].e_n > JSP_MAX_BRANCHES)
        return dfail(c, "the pattern branches more than %d ways after one character", JSP_MAX_BRANCHES);
    return rc;
}

static int build_dfa(dctx *c) {
    const jsp_nfa *a = c->nfa;
    c->stack = malloc(sizeof *c->stack * (size_t)a->n_states);
    c->mark = calloc((size_t)a->n_states, sizeof *c->mark);
    c->key = malloc(sizeof *c->key * (size_t)a->n_states);
    c->targets = malloc(sizeof *c->targets * (size_t)a->n_states);
    c->prev_targets = malloc(sizeof *c->prev_targets * (size_t)a->n_states);
    c->set_mark = calloc((size_t)a->n_sets, sizeof *c->set_mark);
    if (!c->stack || !c->mark || !c->key || !c->targets || !c->prev_targets || !c->set_mark)
        return dfail(c, "out of memory");
    const int start = a->start;
    if (dfa_state_of(c, &start, 1) < 0) return -1;
    for (int d = 0; d < c->dfa.n; d++) /* states are appended as they are found */
        if (dfa_expand(c, d)) return -1;
    return 0;
}

/* ---- lengths, dead ends --------------------------------------------------------------- */

/* The product of the DFA and the length so far (k, up to kcap): its states in *p, the pair
 * interned in pairs. Without bounds (kcap 0) it is the DFA itself. */
static int build_product(dctx *c, long min_len, long max_len, graph *p) {
    interner pairs = {0};
    const long kcap = max_len >= 0 ? max_len : min_len;
    uint32_t pair[2] = {0, 0};
    int added, rc = 0;
    int id = intern(&pairs, pair, 2, &added);
    if (id < 0 || graph_state(c, p, c->dfa.s[0].accept && min_len == 0) < 0) rc = id < 0 ? intern_failed(c, id) : -1;
    for (int s = 0; s < p->n && rc == 0; s++) {
        const int d = (int)pairs.pool[pairs.off[s]];
        const long k = (long)pairs.pool[pairs.off[s] + 1];
        p->s[s].e_off = p->n_e;
        if (max_len >= 0 && k >= max_len) continue; /* no room for another character */
        const long k2 = k + 1 < kcap ? k + 1 : kcap;
        for (int e = c->dfa.s[d].e_off; e < c->dfa.s[d].e_off + c->dfa.s[d].e_n && rc == 0; e++) {
            const int to = c->dfa.e[e].to;
            pair[0] = (uint32_t)to, pair[1] = (uint32_t)k2;
            id = intern(&pairs, pair, 2, &added);
            if (id < 0) {
                rc = intern_failed(c, id);
            } else if (added) {
                if (id >= JSP_MAX_STATES)
                    rc = dfail(c, "together with minLength / maxLength the pattern needs more than %d states; "
                                  "lower them or drop one", JSP_MAX_STATES);
                else if (graph_state(c, p, c->dfa.s[to].accept && k2 >= min_len) < 0)
                    rc = -1;
            }
            if (rc == 0) rc = graph_edge(c, p, c->dfa.e[e].label, id);
        }
        p->s[s].e_n = p->n_e - p->s[s].e_off;
    }
    in_free(&pairs);
    return rc;
}

/* live[s]: some accepting state is reachable from s (a reverse search from the accepting ones). */
static int find_live(dctx *c, const graph *p, char *live) {
    int *in_off = calloc((size_t)p->n + 1, sizeof *in_off), *in = malloc(sizeof *in * (size_t)(p->n_e + 1));
    int *queue = malloc(sizeof *queue * (size_t)p->n);
    if (!in_off || !in || !queue) {
        free(in_off);
        free(in);
        free(queue);
        return dfail(c, "out of memory");
    }
    for (int e = 0; e < p->n_e; e++) in_off[p->e[e].to + 1]++;
    for (int s = 0; s < p->n; s++) in_off[s + 1] += in_off[s];
    for (int s = 0; s < p->n; s++)
        for (int e = p->s[s].e_off; e < p->s[s].e_off + p->s[s].e_n; e++) in[in_off[p->e[e].to]++] = s;
    for (int s = p->n; s > 0; s--) in_off[s] = in_off[s - 1]; /* back to starts */
    in_off[0] = 0;
    int head = 0, tail = 0;
    for (int s = 0; s < p->n; s++)
        if ((live[s] = (char)p->s[s].accept)) queue[tail++] = s;
    while (head < tail) {
        const int s = queue[head++];
        for (int i = in_off[s]; i < in_off[s + 1]; i++)
            if (!live[in[i]]) live[in[i]] = 1, queue[tail++] = in[i];
    }
    free(in_off);
    free(in);
    free(queue);
    return 0;
}

/* ---- GBNF text ------------------------------------------------------------------------ */

typedef text_buf tbuf;

static void tb_add(tbuf *b, const char *s, size_t n) { text_buf_add(b, s, n); }
#define tb_addf text_buf_printf

/* One code point inside a GBNF character class. */
static void tb_class_char(tbuf *b, uint32_t cp) {
    if (cp > 0x20 && cp < 0x7f && !strchr("\"\\[]-^", (int)cp)) tb_addf(b, "%c", (char)cp);
    else if (cp < 0x100) tb_addf(b, "\\x%02X", (unsigned)cp);
    else if (cp < 0x10000) tb_addf(b, "\\u%04X", (unsigned)cp);
    else tb_addf(b, "\\U%08X", (unsigned)cp);
}

static void tb_class_ranges(tbuf *b, const uint32_t *r, int n) {
    for (int i = 0; i < n; i++) {
        tb_class_char(b, r[2 * i]);
        if (r[2 * i + 1] != r[2 * i]) tb_add(b, "-", 1), tb_class_char(b, r[2 * i + 1]);
    }
}

/* The characters a label holds that JSON writes as themselves (U+0020 and up but '"' and '\'),
 * as ranges in raw[]; those it escapes in *esc (bit c for c < 0x20, bit 32 '"', bit 33 '\'). */
static int split_label(const uint32_t *l, int n, uint32_t *raw, uint64_t *esc) {
    int nr = 0;
    *esc = 0;
    for (int i = 0; i < n; i++) {
        uint32_t lo = l[2 * i];
        const uint32_t hi = l[2 * i + 1];
        for (; lo <= hi && lo < 0x20; lo++) *esc |= 1ull << lo;
        while (lo <= hi) { /* cut at '"' and '\' */
            uint32_t end = hi;
            if (lo <= '"' && '"' <= end) end = lo == '"' ? lo : '"' - 1;
            if (lo <= '\\' && '\\' <= end) end = lo == '\\' ? lo : '\\' - 1;
            if (end == lo && (lo == '"' || lo == '\\')) *esc |= 1ull << (lo == '"' ? 32 : 33);
            else if (nr > 0 && raw[2 * nr - 1] + 1 == lo) raw[2 * nr - 1] = end;
            else raw[2 * nr] = lo, raw[2 * nr + 1] = end, nr++;
            lo = end + 1;
        }
    }
    return nr;
}

/* The raw characters as a class: [...], or [^...] listing the rest (never a surrogate as an end
 * point: generated text holds none, and the compiler refuses them) when that is shorter. */
static void tb_raw_class(tbuf *b, const uint32_t *raw, int nr, uint32_t *tmp) {
    int nc = 0;
    uint32_t next = 0;
    for (int i = 0; i <= nr; i++) { /* the gaps before, between and after raw's ranges (raw starts at U+0020) */
        uint32_t lo = next, hi = i < nr ? raw[2 * i] - 1 : JSP_MAX_CP;
        if (lo >= JSP_SURR_LO && lo <= JSP_SURR_HI) lo = JSP_SURR_HI + 1;
        if (hi >= JSP_SURR_LO && hi <= JSP_SURR_HI) hi = JSP_SURR_LO - 1;
        if (lo <= hi) tmp[2 * nc] = lo, tmp[2 * nc + 1] = hi, nc++;
        if (i < nr) next = raw[2 * i + 1] + 1;
    }
    tb_add(b, nc < nr ? "[^" : "[", nc < nr ? 2 : 1);
    if (nc < nr) tb_class_ranges(b, tmp, nc);
    else tb_class_ranges(b, raw, nr);
    tb_add(b, "]", 1);
}

/* The hex digits whose bits are set, as class members (runs as ranges; a-f in either case). */
static void tb_hex_digits(tbuf *b, uint32_t bits) {
    for (int pass = 0; pass < 3; pass++) { /* 0-9, a-f, A-F */
        const int first = pass ? 10 : 0, last = pass ? 15 : 9;
        const char base = pass == 0 ? '0' : pass == 1 ? 'a' : 'A';
        for (int d = first; d <= last; d++) {
            if (!(bits >> d & 1)) continue;
            int e = d;
            while (e < last && bits >> (e + 1) & 1) e++;
            if (e == d) tb_addf(b, "%c", base + d - first);
            else tb_addf(b, "%c-%c", base + d - first, base + e - first);
            d = e;
        }
    }
}

/* rule `name`-c`id`: the characters of the label, each as JSON writes it inside a string. */
static void tb_label_rule(tbuf *b, const char *name, int id, const uint32_t *l, int n, uint32_t *raw, uint32_t *tmp) {
    uint64_t esc;
    const int nr = split_label(l, n, raw, &esc);
    tb_addf(b, "%s-c%d ::= ", name, id);
    if (nr) tb_raw_class(b, raw, nr, tmp);
    if (!esc) {
        tb_add(b, "\n", 1);
        return;
    }
    /* escapes: \" \\ \b \f \n \r \t, the other control characters as \u00XX */
    static const char SHORT[8] = {'b', 't', 'n', 0, 'f', 'r', 0, 0};
    char shorts[16] = "";
    int ns = 0;
    if (esc >> 32 & 1) shorts[ns++] = '\\', shorts[ns++] = '"';
    if (esc >> 33 & 1) shorts[ns++] = '\\', shorts[ns++] = '\\';
    uint32_t hex[2] = {0, 0}; /* per high digit (0 or 1), which low digits */
    for (int ch = 0; ch < 0x20; ch++) {
        if (!(esc >> ch & 1)) continue;
        if (ch >= 8 && ch <= 13 && SHORT[ch - 8]) shorts[ns++] = SHORT[ch - 8];
        else hex[ch >> 4] |= 1u << (ch & 15);
    }
    tb_addf(b, "%s\"\\\\\" (", nr ? " | " : "");
    if (ns) tb_addf(b, "[%s]%s", shorts, hex[0] || hex[1] ? " | " : "");
    if (hex[0] || hex[1]) {
        tb_add(b, "\"u00\" (", 7);
        for (int hi = 0; hi < 2; hi++) {
            if (!hex[hi]) continue;
            tb_addf(b, "%s\"%d\" [", hi && hex[0] ? " | " : "", hi);
            tb_hex_digits(b, hex[hi]);
            tb_add(b, "]", 1);
        }
        tb_add(b, ")", 1);
    }
    tb_add(b, ")\n", 2);
}

static int emit(dctx *c, const graph *p, const char *live, const char *name, tbuf *out) {
    char *used = calloc((size_t)c->labels.n + 1, 1);
    uint32_t *raw = NULL, *tmp = NULL;
    int longest = 0; /* a label's length; cutting at '"' and '\\' adds two ranges, a complement one */
    for (int i = 0; i < c->labels.n; i++) longest = c->labels.len[i] > longest ? c->labels.len[i] : longest;
    raw = malloc(sizeof *raw * (size_t)(longest + 16));
    tmp = malloc(sizeof *tmp * (size_t)(longest + 16));
    if (!used || !raw || !tmp) {
        free(used), free(raw), free(tmp);
        return dfail(c, "out of memory");
    }
    tb_addf(out, "%s ::= \"\\\"\" %s-0 \"\\\"\"\n", name, name);
    for (int s = 0; s < p->n && !out->oom && out->len <= GRAM_MAX_TEXT; s++) {
        if (!live[s]) continue;
        tb_addf(out, "%s-%d ::=", name, s);
        int alts = 0;
        for (int e = p->s[s].e_off; e < p->s[s].e_off + p->s[s].e_n; e++) {
            if (!live[p->e[e].to]) continue;
            tb_addf(out, "%s %s-c%d %s-%d", alts++ ? " |" : "", name, p->e[e].label, name, p->e[e].to);
            used[p->e[e].label] = 1;
        }
        if (p->s[s].accept) tb_add(out, alts ? " | \"\"" : " \"\"", alts ? 5 : 3);
        tb_add(out, "\n", 1);
    }
    for (int l = 0; l < c->labels.n && !out->oom && out->len <= GRAM_MAX_TEXT; l++)
        if (used[l]) tb_label_rule(out, name, l, c->labels.pool + c->labels.off[l], c->labels.len[l] / 2, raw, tmp);
    free(used), free(raw), free(tmp);
    if (out->oom) return dfail(c, "out of memory");
    if (out->len > GRAM_MAX_TEXT) return dfail(c, "the pattern's grammar is larger than %d bytes", GRAM_MAX_TEXT);
    return 0;
}

char *jsp_grammar(const char *pattern, long min_len, long max_len, const char *name, char *err, size_t errlen) {
    jsp_nfa nfa;
    if (jsp_nfa_build(pattern, &nfa, err, errlen)) return NULL;
    dctx c = {.nfa = &nfa, .err = err, .errlen = errlen};
    graph p = {0};
    char *live = NULL;
    tbuf out = {0};
    if (build_dfa(&c) == 0 && build_product(&c, min_len, max_len, &p) == 0) {
        live = malloc((size_t)p.n);
        if (!live) dfail(&c, "out of memory");
        else if (find_live(&c, &p, live) == 0 && !live[0])
            dfail(&c, min_len > 0 || max_len >= 0 ? "no string of the length minLength / maxLength allow matches it"
                                                  : "no string matches it");
        else if (!c.failed)
            emit(&c, &p, live, name, &out);
    }
    free(live);
    free(p.s);
    free(p.e);
    free(c.dfa.s);
    free(c.dfa.e);
    in_free(&c.keys);
    in_free(&c.labels);
    free(c.stack), free(c.mark), free(c.key), free(c.set_mark), free(c.pts), free(c.ranges);
    free(c.atom_to), free(c.order), free(c.targets), free(c.prev_targets);
    jsp_nfa_free(&nfa);
    if (c.failed) {
        free(out.p);
        return NULL;
    }
    return out.p;
}

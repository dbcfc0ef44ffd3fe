/* jinja_parse.c — the recursive-descent parser of the Jinja2 subset: tokens (jinja_lex.c) to the
 * syntax tree, statements and expressions; jinja_parse and jinja_free. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "jinja_int.h"

/* ---------------------------------------------------------------- parser */

typedef struct parser {
    jarena *a;
    jerr *e;
    jtok *t;
    size_t nt, pos;
    int depth, loops;
    int soft; /* inside an {% if %} (jinja2's "soft" frame): an unknown filter or test fails only when evaluated */
} parser;

static jtok *peek(parser *P) { return &P->t[P->pos]; }
static jtok *peek2(parser *P) { return &P->t[P->pos + 1 < P->nt ? P->pos + 1 : P->pos]; }
static jtok *next(parser *P) {
    jtok *t = &P->t[P->pos];
    if (P->pos + 1 < P->nt) P->pos++;
    return t;
}
static int tok_is(jtok *t, int type, const char *s) {
    return t->t == type && (!s || (t->n == strlen(s) && !memcmp(t->s, s, t->n)));
}
static int is_op(parser *P, const char *s) { return tok_is(peek(P), TK_OP, s); }
static int is_name(parser *P, const char *s) { return tok_is(peek(P), TK_NAME, s); }

static const char *tok_desc(jtok *t, char *buf, size_t n) {
    switch (t->t) {
    case TK_EOF: return "end of template";
    case TK_VEND: return "'}}'";
    case TK_BEND: return "'%}'";
    case TK_STR: return "string";
    case TK_INT: case TK_FLOAT: return "number";
    case TK_NAME: case TK_OP: snprintf(buf, n, "'%.*s'", (int)(t->n > 40 ? 40 : t->n), t->s); return buf;
    default: return "text";
    }
}

static _Noreturn void unexpected(parser *P, const char *want) {
    char b[64];
    jtok *t = peek(P);
    jj_fail(P->e, t->line, "unexpected %s, expected %s", tok_desc(t, b, sizeof b), want);
}

static void expect_op(parser *P, const char *s) {
    if (!is_op(P, s)) {
        char w[16];
        snprintf(w, sizeof w, "'%s'", s);
        unexpected(P, w);
    }
    next(P);
}

static void expect_end(parser *P) {
    if (peek(P)->t != TK_BEND) unexpected(P, "'%}'");
    next(P);
}

static jnode *mk(parser *P, int k, int line) {
    jnode *n = jj_alloc(P->a, sizeof *n);
    memset(n, 0, sizeof *n);
    n->k = k;
    n->line = line;
    return n;
}

static void nl_push(jarena *a, jnlist *l, jnode *n) {
    if (l->n == l->cap) {
        size_t cap = l->cap ? l->cap * 2 : 4;
        jnode **v = jj_alloc(a, cap * sizeof *v);
        if (l->n) memcpy(v, l->v, l->n * sizeof *v);
        l->v = v;
        l->cap = cap;
    }
    l->v[l->n++] = n;
}

static void enter(parser *P) {
    if (++P->depth > JINJA_MAX_NEST) jj_fail(P->e, peek(P)->line, "template nesting too deep");
}

static jnode *parse_expr(parser *P);
static jnode *parse_or(parser *P);
static jnode *parse_unary(parser *P, int with_filter);

static jnode *parse_tuple(parser *P, int condexpr) {
    int line = peek(P)->line;
    jnode *first = condexpr ? parse_expr(P) : parse_or(P);
    if (!is_op(P, ",")) return first;
    jnode *t = mk(P, N_TUPLE, line);
    nl_push(P->a, &t->args, first);
    while (is_op(P, ",")) {
        next(P);
        jtok *k = peek(P);
        if (k->t == TK_VEND || k->t == TK_BEND || tok_is(k, TK_OP, ")") || tok_is(k, TK_NAME, "if")) break;
        nl_push(P->a, &t->args, condexpr ? parse_expr(P) : parse_or(P));
    }
    return t;
}

/* Call arguments after '(' : positional expressions, then name=value keywords. */
static void parse_args(parser *P, jnlist *args) {
    expect_op(P, "(");
    while (!is_op(P, ")")) {
        if (args->n) {
            expect_op(P, ",");
            if (is_op(P, ")")) break;
        }
        if (peek(P)->t == TK_NAME && tok_is(peek2(P), TK_OP, "=")) {
            jtok *nm = next(P);
            next(P);
            jnode *kw = mk(P, N_KWARG, nm->line);
            kw->s.p = nm->s;
            kw->s.n = nm->n;
            kw->a = parse_expr(P);
            nl_push(P->a, args, kw);
        } else {
            if (is_op(P, "*") || is_op(P, "**")) jj_fail(P->e, peek(P)->line, "*args and **kwargs in calls are not supported");
            for (size_t i = 0; i < args->n; i++)
                if (args->v[i]->k == N_KWARG) jj_fail(P->e, peek(P)->line, "positional argument follows keyword argument");
            nl_push(P->a, args, parse_expr(P));
        }
    }
    next(P);
}

static jnode *parse_primary(parser *P) {
    jtok *t = peek(P);
    jnode *n;
    if (t->t == TK_NAME) {
        next(P);
        n = mk(P, N_LIT, t->line);
        if (tok_is(t, TK_NAME, "true") || tok_is(t, TK_NAME, "True")) {
            n->lit.t = JV_BOOL;
            n->lit.u.b = 1;
        } else if (tok_is(t, TK_NAME, "false") || tok_is(t, TK_NAME, "False")) {
            n->lit.t = JV_BOOL;
        } else if (tok_is(t, TK_NAME, "none") || tok_is(t, TK_NAME, "None")) {
            n->lit.t = JV_NONE;
        } else {
            n->k = N_NAME;
            n->s.p = t->s;
            n->s.n = t->n;
        }
        return n;
    }
    if (t->t == TK_STR) {
        /* adjacent string literals concatenate, as in Python */
        jbuf b = {P->a, NULL, 0, 0, (size_t)1 << 30};
        jb_put(&b, "", 0);
        while (peek(P)->t == TK_STR) {
            jtok *s = next(P);
            jb_put(&b, s->s, s->n);
        }
        n = mk(P, N_LIT, t->line);
        n->lit.t = JV_STR;
        n->lit.u.s.p = b.p;
        n->lit.u.s.n = b.n;
        return n;
    }
    if (t->t == TK_INT || t->t == TK_FLOAT) {
        next(P);
        n = mk(P, N_LIT, t->line);
        if (t->t == TK_INT) {
            n->lit.t = JV_INT;
            n->lit.u.i = t->i;
        } else {
            n->lit.t = JV_FLOAT;
            n->lit.u.f = t->f;
        }
        return n;
    }
    if (tok_is(t, TK_OP, "(")) {
        next(P);
        if (is_op(P, ")")) {
            next(P);
            return mk(P, N_TUPLE, t->line);
        }
        n = parse_tuple(P, 1);
        if (n->k == N_TUPLE && n->args.n == 1 && !is_op(P, ")")) unexpected(P, "')'");
        expect_op(P, ")");
        return n;
    }
    if (tok_is(t, TK_OP, "[")) {
        next(P);
        n = mk(P, N_LIST, t->line);
        while (!is_op(P, "]")) {
            if (n->args.n) {
                expect_op(P, ",");
                if (is_op(P, "]")) break;
            }
            nl_push(P->a, &n->args, parse_expr(P));
        }
        next(P);
        return n;
    }
    if (tok_is(t, TK_OP, "{")) {
        next(P);
        n = mk(P, N_DICT, t->line);
        while (!is_op(P, "}")) {
            if (n->args.n) {
                expect_op(P, ",");
                if (is_op(P, "}")) break;
            }
            nl_push(P->a, &n->args, parse_expr(P));
            expect_op(P, ":");
            nl_push(P->a, &n->args, parse_expr(P));
        }
        next(P);
        return n;
    }
    unexpected(P, "an expression");
}

static jnode *parse_postfix(parser *P, jnode *n) {
    for (;;) {
        jtok *t = peek(P);
        if (tok_is(t, TK_OP, ".")) {
            next(P);
            jtok *a = next(P);
            jnode *x;
            if (a->t == TK_NAME) {
                x = mk(P, N_ATTR, a->line);
                x->s.p = a->s;
                x->s.n = a->n;
            } else if (a->t == TK_INT) {
                /* foo.0 is foo[0] */
                x = mk(P, N_ITEM, a->line);
                x->b = mk(P, N_LIT, a->line);
                x->b->lit.t = JV_INT;
                x->b->lit.u.i = a->i;
            } else {
                P->pos--;
                unexpected(P, "an attribute name");
            }
            x->a = n;
            n = x;
        } else if (tok_is(t, TK_OP, "[")) {
            next(P);
            jnode *idx[3] = {NULL, NULL, NULL};
            int colons = 0;
            for (;;) {
                if (is_op(P, ":")) {
                    if (++colons > 2) unexpected(P, "']'");
                    next(P);
                    continue;
                }
                if (is_op(P, "]")) break;
                if (idx[colons]) unexpected(P, "']'");
                idx[colons] = parse_expr(P);
            }
            next(P);
            jnode *x;
            if (colons == 0) {
                if (!idx[0]) unexpected(P, "a subscript");
                x = mk(P, N_ITEM, t->line);
                x->b = idx[0];
            } else {
                x = mk(P, N_SLICE, t->line);
                x->b = idx[0];
                x->c = idx[1];
                if (idx[2]) nl_push(P->a, &x->args, idx[2]);
            }
            x->a = n;
            n = x;
        } else if (tok_is(t, TK_OP, "(")) {
            jnode *x = mk(P, N_CALL, t->line);
            x->a = n;
            parse_args(P, &x->args);
            n = x;
        } else {
            return n;
        }
    }
}

/* One filter after '|': name and optional arguments, applied to n. */
static jnode *parse_one_filter(parser *P, jnode *n) {
    jtok *nm = next(P);
    if (nm->t != TK_NAME) {
        P->pos--;
        unexpected(P, "a filter name");
    }
    int id = jj_filter_id(nm->s, nm->n);
    if (id < 0 && !P->soft) jj_fail(P->e, nm->line, "unknown filter '%.*s'", (int)(nm->n > 60 ? 60 : nm->n), nm->s);
    jnode *x = mk(P, N_FILTER, nm->line);
    x->op = id;
    x->a = n;
    x->s.p = nm->s;
    x->s.n = nm->n;
    if (is_op(P, "(")) parse_args(P, &x->args);
    n = x;
    return x;
}

static jnode *parse_filters(parser *P, jnode *n) {
    for (;;) {
        jtok *t = peek(P);
        if (tok_is(t, TK_OP, "|")) {
            next(P);
            n = parse_one_filter(P, n);
        } else if (tok_is(t, TK_NAME, "is")) {
            next(P);
            jnode *x = mk(P, N_TEST, t->line);
            if (is_name(P, "not")) {
                next(P);
                x->neg = 1;
            }
            jtok *nm = next(P);
            if (nm->t != TK_NAME) {
                P->pos--;
                unexpected(P, "a test name");
            }
            /* "is none"/"is true" lex as names too; ==, < etc. are test aliases */
            int id = jj_test_id(nm->s, nm->n);
            if (id < 0 && !P->soft)
                jj_fail(P->e, nm->line, "unknown test '%.*s'", (int)(nm->n > 60 ? 60 : nm->n), nm->s);
            x->op = id;
            x->a = n;
            x->s.p = nm->s;
            x->s.n = nm->n;
            jtok *k = peek(P);
            if (tok_is(k, TK_OP, "(")) {
                parse_args(P, &x->args);
            } else if ((k->t == TK_NAME || k->t == TK_STR || k->t == TK_INT || k->t == TK_FLOAT || tok_is(k, TK_OP, "[") ||
                        tok_is(k, TK_OP, "{")) &&
                       !tok_is(k, TK_NAME, "else") && !tok_is(k, TK_NAME, "or") && !tok_is(k, TK_NAME, "and") &&
                       !tok_is(k, TK_NAME, "if") && !tok_is(k, TK_NAME, "is") && !tok_is(k, TK_NAME, "in") &&
                       !tok_is(k, TK_NAME, "not")) {
                /* one bare argument: "x is divisibleby 3", "x is sameas false" */
                jnode *arg = parse_postfix(P, parse_primary(P));
                nl_push(P->a, &x->args, arg);
            }
            n = x;
        } else if (tok_is(t, TK_OP, "(")) {
            jnode *x = mk(P, N_CALL, t->line);
            x->a = n;
            parse_args(P, &x->args);
            n = x;
        } else {
            return n;
        }
    }
}

static jnode *parse_unary(parser *P, int with_filter) {
    enter(P);
    jtok *t = peek(P);
    jnode *n;
    if (tok_is(t, TK_OP, "-") || tok_is(t, TK_OP, "+")) {
        next(P);
        n = mk(P, t->s[0] == '-' ? N_NEG : N_POS, t->line);
        n->a = parse_unary(P, 0);
    } else {
        n = parse_postfix(P, parse_primary(P));
    }
    if (with_filter) n = parse_filters(P, n);
    P->depth--;
    return n;
}

static jnode *bin(parser *P, int op, jnode *a, jnode *b, int line) {
    jnode *n = mk(P, N_BIN, line);
    n->op = op;
    n->a = a;
    n->b = b;
    return n;
}

static jnode *parse_pow(parser *P) {
    jnode *n = parse_unary(P, 1);
    while (is_op(P, "**")) {
        int line = next(P)->line;
        n = bin(P, OP_POW, n, parse_unary(P, 1), line);
    }
    return n;
}

static jnode *parse_mul(parser *P) {
    jnode *n = parse_pow(P);
    for (;;) {
        int op = is_op(P, "*") ? OP_MUL : is_op(P, "/") ? OP_DIV : is_op(P, "//") ? OP_FLOORDIV : is_op(P, "%") ? OP_MOD : -1;
        if (op < 0) return n;
        int line = next(P)->line;
        n = bin(P, op, n, parse_pow(P), line);
    }
}

static jnode *parse_concat(parser *P) {
    jnode *n = parse_mul(P);
    while (is_op(P, "~")) {
        int line = next(P)->line;
        n = bin(P, OP_CONCAT, n, parse_mul(P), line);
    }
    return n;
}

static jnode *parse_add(parser *P) {
    jnode *n = parse_concat(P);
    for (;;) {
        int op = is_op(P, "+") ? OP_ADD : is_op(P, "-") ? OP_SUB : -1;
        if (op < 0) return n;
        int line = next(P)->line;
        n = bin(P, op, n, parse_concat(P), line);
    }
}

static jnode *parse_compare(parser *P) {
    jnode *n = parse_add(P);
    for (;;) {
        jtok *t = peek(P);
        int op = -1;
        if (t->t == TK_OP) {
            op = tok_is(t, TK_OP, "==") ? OP_EQ : tok_is(t, TK_OP, "!=") ? OP_NE : tok_is(t, TK_OP, "<") ? OP_LT
               : tok_is(t, TK_OP, "<=") ? OP_LE : tok_is(t, TK_OP, ">") ? OP_GT : tok_is(t, TK_OP, ">=") ? OP_GE : -1;
            if (op >= 0) next(P);
        } else if (tok_is(t, TK_NAME, "in")) {
            op = OP_IN;
            next(P);
        } else if (tok_is(t, TK_NAME, "not") && tok_is(peek2(P), TK_NAME, "in")) {
            op = OP_NOTIN;
            next(P);
            next(P);
        }
        if (op < 0) return n;
        /* chained comparisons (a < b < c) are rare in templates; they evaluate left to right here */
        n = bin(P, op, n, parse_add(P), t->line);
    }
}

static jnode *parse_not(parser *P) {
    if (is_name(P, "not")) {
        enter(P);
        int line = next(P)->line;
        jnode *n = mk(P, N_NOT, line);
        n->a = parse_not(P);
        P->depth--;
        return n;
    }
    return parse_compare(P);
}

static jnode *parse_and(parser *P) {
    jnode *n = parse_not(P);
    while (is_name(P, "and")) {
        jnode *x = mk(P, N_AND, next(P)->line);
        x->a = n;
        x->b = parse_not(P);
        n = x;
    }
    return n;
}

static jnode *parse_or(parser *P) {
    jnode *n = parse_and(P);
    while (is_name(P, "or")) {
        jnode *x = mk(P, N_OR, next(P)->line);
        x->a = n;
        x->b = parse_and(P);
        n = x;
    }
    return n;
}

static jnode *parse_expr(parser *P) {
    enter(P);
    jnode *n = parse_or(P);
    while (is_name(P, "if")) {
        jnode *x = mk(P, N_COND, next(P)->line);
        x->a = parse_or(P);
        x->b = n;
        if (is_name(P, "else")) {
            next(P);
            x->c = parse_expr(P);
        }
        n = x;
    }
    P->depth--;
    return n;
}

/* ---- statements */

static jtok *parse_body(parser *P, jnlist *out, const char *const *enders, int open_line, const char *open_tag);

static int name_in(jtok *t, const char *const *list) {
    for (; list && *list; list++)
        if (tok_is(t, TK_NAME, *list)) return 1;
    return 0;
}

/* Assignment targets: name, ns.attr, or a comma list of names. */
static void parse_targets(parser *P, jnlist *out, int allow_attr) {
    for (;;) {
        int paren = 0;
        if (is_op(P, "(")) {
            next(P);
            paren = 1;
        }
        jtok *t = next(P);
        if (t->t != TK_NAME) {
            P->pos--;
            unexpected(P, "a variable name");
        }
        jnode *n = mk(P, N_NAME, t->line);
        n->s.p = t->s;
        n->s.n = t->n;
        if (allow_attr && is_op(P, ".")) {
            next(P);
            jtok *a = next(P);
            if (a->t != TK_NAME) {
                P->pos--;
                unexpected(P, "an attribute name");
            }
            jnode *x = mk(P, N_ATTR, a->line);
            x->a = n;
            x->s.p = a->s;
            x->s.n = a->n;
            n = x;
        }
        nl_push(P->a, out, n);
        if (paren) {
            while (is_op(P, ",")) {
                next(P);
                jtok *t2 = next(P);
                if (t2->t != TK_NAME) {
                    P->pos--;
                    unexpected(P, "a variable name");
                }
                jnode *m = mk(P, N_NAME, t2->line);
                m->s.p = t2->s;
                m->s.n = t2->n;
                nl_push(P->a, out, m);
            }
            expect_op(P, ")");
        }
        if (!is_op(P, ",")) return;
        next(P);
    }
}

/* {% if %} ... {% elif %} ... {% else %} ... {% endif %}: elif chains nest in els */
static jnode *parse_if(parser *P, int line) {
    P->soft = 1;
    jnode *n = mk(P, N_IF, line);
    n->a = parse_tuple(P, 1);
    expect_end(P);
    static const char *const E1[] = {"elif", "else", "endif", NULL};
    static const char *const E2[] = {"endif", NULL};
    jnode *cur = n;
    for (;;) {
        jtok *end = parse_body(P, &cur->body, E1, line, "if");
        if (tok_is(end, TK_NAME, "elif")) {
            jnode *x = mk(P, N_IF, end->line);
            x->a = parse_tuple(P, 1);
            expect_end(P);
            nl_push(P->a, &cur->els, x);
            cur = x;
            continue;
        }
        if (tok_is(end, TK_NAME, "else")) {
            expect_end(P);
            parse_body(P, &cur->els, E2, line, "if");
        }
        break;
    }
    expect_end(P);
    return n;
}

/* {% for targets in iterable [if filter] %} ... [{% else %} ...] {% endfor %} */
static jnode *parse_for(parser *P, int line) {
    jnode *n = mk(P, N_FOR, line);
    parse_targets(P, &n->args, 0);
    if (!is_name(P, "in")) unexpected(P, "'in'");
    next(P);
    n->a = parse_tuple(P, 0);
    P->soft = 0; /* the loop's own frame (jinja2's frame.inner()) */
    if (is_name(P, "if")) {
        next(P);
        n->b = parse_expr(P);
    }
    if (is_name(P, "recursive")) jj_fail(P->e, line, "recursive loops are not supported");
    expect_end(P);
    static const char *const E1[] = {"else", "endfor", NULL};
    static const char *const E2[] = {"endfor", NULL};
    P->loops++;
    jtok *end = parse_body(P, &n->body, E1, line, "for");
    P->loops--;
    if (tok_is(end, TK_NAME, "else")) {
        expect_end(P);
        parse_body(P, &n->els, E2, line, "for");
    }
    expect_end(P);
    return n;
}

/* {% set targets = expr %}, or the block form {% set name [| filters] %} ... {% endset %} */
static jnode *parse_set(parser *P, int line) {
    jnode *n = mk(P, N_SET, line);
    parse_targets(P, &n->args, 1);
    if (is_op(P, "=")) {
        next(P);
        n->a = parse_tuple(P, 1);
        expect_end(P);
        return n;
    }
    n->k = N_SETBLOCK;
    P->soft = 0;
    if (n->args.n != 1 || n->args.v[0]->k != N_NAME) unexpected(P, "'='");
    if (is_op(P, "|")) n->a = parse_filters(P, mk(P, N_BODY, line));
    expect_end(P);
    static const char *const E[] = {"endset", NULL};
    parse_body(P, &n->body, E, line, "set");
    expect_end(P);
    return n;
}

/* {% macro name(param, param=default, ...) %} ... {% endmacro [name] %} */
static jnode *parse_macro(parser *P, int line) {
    P->soft = 0;
    jnode *n = mk(P, N_MACRO, line);
    jtok *nm = next(P);
    if (nm->t != TK_NAME) {
        P->pos--;
        unexpected(P, "a macro name");
    }
    n->s.p = nm->s;
    n->s.n = nm->n;
    expect_op(P, "(");
    while (!is_op(P, ")")) {
        if (n->args.n) expect_op(P, ",");
        jtok *pn = next(P);
        if (pn->t != TK_NAME) {
            P->pos--;
            unexpected(P, "a parameter name");
        }
        jnode *pm = mk(P, N_KWARG, pn->line);
        pm->s.p = pn->s;
        pm->s.n = pn->n;
        if (is_op(P, "=")) {
            next(P);
            pm->a = parse_expr(P);
        }
        nl_push(P->a, &n->args, pm);
    }
    next(P);
    expect_end(P);
    static const char *const E[] = {"endmacro", NULL};
    int saved = P->loops;
    P->loops = 0;
    parse_body(P, &n->body, E, line, "macro");
    P->loops = saved;
    if (peek(P)->t == TK_NAME) next(P); /* {% endmacro name %} */
    expect_end(P);
    return n;
}

/* {% filter f | g %} ... {% endfilter %} */
static jnode *parse_filter_block(parser *P, int line) {
    P->soft = 0;
    jnode *n = mk(P, N_FILTERBLOCK, line);
    /* the first filter is written without a leading '|' */
    n->a = parse_filters(P, parse_one_filter(P, mk(P, N_BODY, line)));
    expect_end(P);
    static const char *const E[] = {"endfilter", NULL};
    parse_body(P, &n->body, E, line, "filter");
    expect_end(P);
    return n;
}

static jnode *parse_statement(parser *P) {
    jtok *kw = next(P);
    int line = kw->line;
    char b[64];
    if (kw->t != TK_NAME) {
        P->pos--;
        unexpected(P, "a tag name");
    }
    enter(P);
    jnode *n;
    const int soft = P->soft; /* restored below: only an if's test and bodies are soft */
    if (tok_is(kw, TK_NAME, "if")) {
        n = parse_if(P, line);
    } else if (tok_is(kw, TK_NAME, "for")) {
        n = parse_for(P, line);
    } else if (tok_is(kw, TK_NAME, "set")) {
        n = parse_set(P, line);
    } else if (tok_is(kw, TK_NAME, "macro")) {
        n = parse_macro(P, line);
    } else if (tok_is(kw, TK_NAME, "break") || tok_is(kw, TK_NAME, "continue")) {
        if (!P->loops) jj_fail(P->e, line, "'%.*s' outside of a loop", (int)kw->n, kw->s);
        n = mk(P, kw->s[0] == 'b' ? N_BREAK : N_CONTINUE, line);
        expect_end(P);
    } else if (tok_is(kw, TK_NAME, "generation")) {
        /* Hugging Face's AssistantTracker tag: marks assistant text, renders its body unchanged */
        n = mk(P, N_BODY, line);
        expect_end(P);
        static const char *const E[] = {"endgeneration", NULL};
        parse_body(P, &n->body, E, line, "generation");
        expect_end(P);
    } else if (tok_is(kw, TK_NAME, "filter")) {
        n = parse_filter_block(P, line);
    } else {
        static const char *const unsupported[] = {"include", "import", "from", "extends", "block", "call", "with",
                                                  "do", "autoescape", "trans", NULL};
        if (name_in(kw, unsupported))
            jj_fail(P->e, line, "unsupported tag '%.*s'", (int)kw->n, kw->s);
        jj_fail(P->e, line, "unknown tag %s", tok_desc(kw, b, sizeof b));
    }
    P->soft = soft;
    P->depth--;
    return n;
}

/* Parses statements until one of enders (consumed with its tag-begin; the rest of that tag is
 * left to the caller) or, with no enders, to the end of the template. */
static jtok *parse_body(parser *P, jnlist *out, const char *const *enders, int open_line, const char *open_tag) {
    for (;;) {
        jtok *t = peek(P);
        if (t->t == TK_EOF) {
            if (enders)
                jj_fail(P->e, t->line, "unexpected end of template: '%s' block opened on line %d is never closed with 'end%s'",
                        open_tag, open_line, open_tag);
            return t;
        }
        if (t->t == TK_DATA) {
            next(P);
            jnode *n = mk(P, N_TEXT, t->line);
            n->s.p = t->s;
            n->s.n = t->n;
            nl_push(P->a, out, n);
        } else if (t->t == TK_VBEGIN) {
            next(P);
            jnode *n = mk(P, N_OUT, t->line);
            n->a = parse_tuple(P, 1);
            if (peek(P)->t != TK_VEND) unexpected(P, "'}}'");
            next(P);
            nl_push(P->a, out, n);
        } else if (t->t == TK_BBEGIN) {
            next(P);
            jtok *k = peek(P);
            if (enders && name_in(k, enders)) {
                next(P);
                return k;
            }
            static const char *const closers[] = {"endif", "endfor", "endset", "endmacro", "elif", "else",
                                                  "endgeneration", "endfilter", "endraw", NULL};
            if (name_in(k, closers)) {
                char b[64];
                if (enders)
                    jj_fail(P->e, k->line, "unexpected %s inside '%s' block opened on line %d", tok_desc(k, b, sizeof b),
                            open_tag, open_line);
                jj_fail(P->e, k->line, "unexpected %s with no open block", tok_desc(k, b, sizeof b));
            }
            nl_push(P->a, out, parse_statement(P));
        } else {
            unexpected(P, "text or a tag");
        }
    }
}

static void parse_all(jinja_template *t, const char *src, size_t len, unsigned flags) {
    parser P = {0};
    P.a = &t->arena;
    P.e = &t->perr;
    P.t = jj_lex(&t->arena, &t->perr, src, len, flags, &P.nt);
    parse_body(&P, &t->body, NULL, 0, NULL);
}

/* setjmp lives here, where nothing it must preserve is modified after it */
static jinja_template *parse_guarded(jinja_template *t, const char *src, size_t len, unsigned flags) {
    if (setjmp(t->perr.jb)) {
        jj_arena_free(&t->arena);
        free(t);
        return NULL;
    }
    parse_all(t, src, len, flags);
    t->perr.buf = NULL;
    t->perr.len = 0;
    return t;
}

jinja_template *jinja_parse_ex(const char *src, size_t len, unsigned flags, char *err, size_t errlen) {
    if (err && errlen) err[0] = 0;
    jinja_template *t = calloc(1, sizeof *t);
    if (!t) {
        if (err && errlen) snprintf(err, errlen, "out of memory");
        return NULL;
    }
    t->flags = flags;
    t->perr.buf = err;
    t->perr.len = errlen;
    t->arena.e = &t->perr;
    t->arena.limit = (size_t)1 << 30;
    return parse_guarded(t, src ? src : "", src ? len : 0, flags);
}

jinja_template *jinja_parse(const char *src, size_t len, char *err, size_t errlen) {
    return jinja_parse_ex(src, len, 0, err, errlen);
}

void jinja_free(jinja_template *t) {
    if (!t) return;
    jj_arena_free(&t->arena);
    free(t);
}

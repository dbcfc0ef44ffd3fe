/* grammar.h — grammar-constrained decoding (gram_ prefix).
 *
 * A grammar in llama.cpp's GBNF syntax (docs/structured-output.md) is
 * compiled once into rules; a matcher follows one generation through it,
 * byte by byte, as a set of pushdown stacks (one per way the bytes so far
 * can be parsed). A vocabulary (every token id's byte string, built once per
 * tokenizer) is kept as a trie, so the set of tokens a matcher allows next is
 * found by walking the trie against the matcher's state, pruning a whole
 * subtree as soon as its prefix is rejected.
 *
 * Typical use:
 *   gram_grammar *g = gram_compile(text, len, err, sizeof err);   // per request
 *   gram_matcher *m = gram_matcher_new(g, err, sizeof err);       // per choice
 *   gram_free(g);                                                 // m keeps its own reference
 *   loop: gram_mask(m, vocab, bits) → sample an allowed id → gram_accept_token(m, vocab, id)
 *         until gram_is_complete(m) (and, if !gram_can_continue(m), stop)
 *
 * Limits (each an error, never unbounded memory or time): grammar text up to
 * GRAM_MAX_TEXT bytes, at most GRAM_MAX_ELEMS compiled elements (repetition
 * counts {m,n} are expanded), parentheses nested at most GRAM_MAX_NESTING deep
 * (the parser recurses once per level; a client's 50,000 would overflow the
 * stack), at most GRAM_MAX_STACKS live stacks in a
 * matcher (an ambiguous grammar that splits further fails the input), 10000
 * rules entered and 100000 expansions per character; left recursion is
 * rejected at compile time, which takes time linear in the grammar's size.
 *
 * Threads: a compiled grammar and a vocabulary are immutable and may be
 * shared; a matcher belongs to one thread at a time.
 */
#ifndef INGOT_GRAMMAR_H
#define INGOT_GRAMMAR_H

#include <stddef.h>
#include <stdint.h>

#define GRAM_MAX_TEXT (256 * 1024)
#define GRAM_MAX_ELEMS (1 << 20)
#define GRAM_MAX_STACKS 512
#define GRAM_MAX_NESTING 256
/* Expansions one token mask may take over the whole vocabulary: an ambiguous grammar
 * (nested repetitions of a wildcard) can need seconds a token, in the scheduler's step that
 * every other sequence waits on; past this, gram_mask gives up (-1). */
#define GRAM_MAX_MASK_WORK 4000000L

typedef struct gram_grammar gram_grammar;
typedef struct gram_matcher gram_matcher;
typedef struct gram_vocab gram_vocab;

/* Compiles GBNF text[0..len) whose start rule is "root". NULL with err
 * filled ("line L, column C: message") on a syntax error, an undefined
 * rule, a missing root, left recursion or a size limit. The result is
 * reference counted: gram_free drops the caller's reference. */
gram_grammar *gram_compile(const char *text, size_t len, char *err, size_t errlen);
void gram_free(gram_grammar *g);
int gram_rule_count(const gram_grammar *g);

/* A matcher at the start of g (takes its own reference to g). NULL with err
 * filled on out of memory or when the start state already exceeds a limit. */
gram_matcher *gram_matcher_new(gram_grammar *g, char *err, size_t errlen);
gram_matcher *gram_matcher_clone(const gram_matcher *m);
void gram_matcher_free(gram_matcher *m);

/* Advances over bytes[0..n). 0 on success; -1 if the bytes are not a valid
 * continuation (or a limit was hit), and then the matcher is unchanged. */
int gram_accept_bytes(gram_matcher *m, const char *bytes, size_t n);
/* The input so far is a complete sentence of the grammar. */
int gram_is_complete(const gram_matcher *m);
/* Some non-empty continuation is still possible. */
int gram_can_continue(const gram_matcher *m);

/* Token byte strings of a vocabulary as a trie. pieces[i] / lens[i]: id i's
 * raw bytes; excluded[i] != 0 (excluded may be NULL): the id is never
 * allowed by a mask (control tokens, stop ids). Empty tokens are never
 * allowed: they would not advance the grammar. NULL on out of memory. */
gram_vocab *gram_vocab_new(int n_tokens, const char *const *pieces, const size_t *lens, const uint8_t *excluded);
void gram_vocab_free(gram_vocab *v);
int gram_vocab_size(const gram_vocab *v);
/* gram_accept_bytes with token id's bytes; -1 also for an excluded or unknown id. */
int gram_accept_token(gram_matcher *m, const gram_vocab *v, int id);

/* Sets bit i of allowed (ceil(n_tokens / 32) words, every bit written) for
 * each token whose bytes the matcher would accept now. Returns how many are
 * allowed, or -1 (nothing allowed) when that took more than
 * GRAM_MAX_MASK_WORK expansions. The matcher is not changed (only its
 * scratch space is used). */
int gram_mask(gram_matcher *m, const gram_vocab *v, uint32_t *allowed);
/* The same set by the plain walk, one matcher step per trie node, without
 * the automaton or the cache gram_mask uses (its fallback past
 * GRAM_WALK_STATES states, and the reference the tests check it against). */
int gram_mask_stepwise(gram_matcher *m, const gram_vocab *v, uint32_t *allowed);

#endif

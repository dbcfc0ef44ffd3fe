/* constrain.h — a compiled grammar as a scheduler constraint (con_ prefix).
 *
 * The glue between grammar.h and the scheduler's sched_constraint hook: the
 * server builds one vocabulary trie from its tokenizer at start (control
 * tokens and stop ids are never allowed inside a grammar), and one
 * constraint per sequence. Before sampling, every token the grammar does not
 * allow gets -INFINITY; the stop ids stay allowed only when the output so
 * far is complete (and are then the only choice once the grammar cannot go
 * on, or if it reached a dead end); after a token, the matcher advances and
 * the sequence ends as soon as nothing but a stop could follow.
 */
#ifndef INGOT_CONSTRAIN_H
#define INGOT_CONSTRAIN_H

#include <stddef.h>
#include <stdint.h>

#include "grammar.h"
#include "scheduler.h"
#include "tokenizer.h"

/* The tokenizer's vocabulary with special tokens and stop ids excluded. */
gram_vocab *con_vocab_new(const tok_tokenizer *t);

/* A constraint following g (the caller keeps its own reference to g) over
 * v; stop_ids (n_stop) must outlive it. NULL with err filled when the
 * grammar's start state exceeds a limit or memory runs out. */
sched_constraint *con_grammar_new(gram_grammar *g, const gram_vocab *v, const int32_t *stop_ids, int n_stop,
                                  char *err, size_t errlen);

#endif

/* test_scheduler_state.c — test_scheduler.c for a model with recurrent layers: its
 * next token comes from a running hash kept in each sequence's state slot, not
 * from the KV cells. So a run is right only if every sequence keeps one slot
 * from its first step to its last, brings each position once and in order, and
 * starts afresh after a preemption (the slot says which position it expects). */
#define RECURRENT 1
#include "test_scheduler.c"

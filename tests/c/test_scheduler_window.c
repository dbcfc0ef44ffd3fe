/* test_scheduler_window.c — test_scheduler.c for a sliding-window model: blocks
 * behind the window are released as a sequence advances, so a request longer
 * than the pool runs, and a preempted one must come back within the pool. */
#define KV_WINDOW 24
#include "test_scheduler.c"

/* output.h — a generation's output (out_ prefix): from a sampled token to the
 * bytes of a stream chunk or of the reply.
 *
 * Per token of a choice (out_token): detokenize incrementally (tok_stream:
 * only complete UTF-8 leaves), add its logprobs, hold back text that may be
 * the start of a stop string (a stop string is never emitted), split the
 * rest into content and tool calls (tool_calls.h), and release it: a stream
 * writes SSE chunks through the request's write callback as they form; a
 * non-streamed reply gathers the text, logprobs and calls of each choice for
 * one JSON body at the end (out_response_add).
 *
 * Nothing here knows about sockets, libevent or the scheduler's queues: a
 * request's settings and the scheduler's token events come in, JSON and SSE
 * bytes go out. Event-loop thread only (like the srv_req that holds these).
 */
#ifndef INGOT_OUTPUT_H
#define INGOT_OUTPUT_H

#include <cjson/cJSON.h>
#include <stddef.h>
#include <stdint.h>

#include "openai.h"
#include "scheduler.h"
#include "tokenizer.h"
#include "tool_calls.h"

/* What a request's output needs, fixed while it runs. */
typedef struct {
    const oai_request *q;                 /* the parsed request: stream, stop strings, logprobs, tools */
    const oai_meta *meta;                 /* id, created and model of every chunk and of the reply */
    const tok_tokenizer *tok;
    tc_format tool_format;                /* how the model writes tool calls */
    int tool_marker_id;                   /* the control token that opens a call, or -1 */
    uint64_t *rng;                        /* tool-call ids (a splitmix64 state, advanced) */
    void (*write)(void *user, char *sse); /* a stream's next SSE event (taken over) */
    void *user;
} out_request;

/* One choice's text as it forms. */
typedef struct {
    tok_stream ts;
    oai_buf held;            /* text that might begin a stop string */
    oai_buf text;            /* non-streaming: the reply text so far */
    size_t emitted;          /* bytes of text released so far (completions text_offset) */
    cJSON *logprobs;         /* non-streaming logprobs accumulator */
    int sent_first;          /* streaming: the chunk carrying the role went out */
    int tools;               /* tool calls are parsed out of this choice's text */
    tc_parser tc;            /* the text after stop strings, split into content and calls */
    cJSON *calls;            /* the calls so far (oai_tool_call objects) */
} out_choice;

/* A zeroed choice made ready for o's tokens. */
void out_choice_init(const out_request *o, out_choice *c);
void out_choice_free(out_choice *c);

/* One generated token of choice i (ev: its SCHED_EV_TOKEN). 1 when the
 * choice's text has ended: a stop string completed, or it made the one tool
 * call that parallel_tool_calls=false allows (the text is flushed then). */
int out_token(const out_request *o, out_choice *c, int i, const sched_event *ev);
/* The sequence ended on its own: releases the incomplete UTF-8 tail and the
 * held-back text (no stop string can complete any more). 1 when a stop
 * string (or the one allowed call) completed in that tail. */
int out_flush(const out_request *o, out_choice *c, int i);

/* The finish_reason of a choice that ended for reason: a choice that made
 * tool calls and ended on its own ("stop") finishes with "tool_calls", as
 * OpenAI's do. */
const char *out_finish_reason(const out_choice *c, const char *reason);
/* A stream's last chunk of choice i, carrying its finish_reason (nothing for
 * a reply that is not streamed). */
void out_end_chunk(const out_request *o, out_choice *c, int i, const char *finish_reason);

/* Adds choice i to a non-streamed reply (oai_response_new): its text,
 * logprobs and tool calls, which the reply takes over. */
void out_response_add(cJSON *resp, const out_request *o, out_choice *c, int i, const char *finish_reason);
/* An error as the SSE event that ends a stream whose 200 went out
 * ("data: {error}\n\n", malloc'd; NULL on out of memory). */
char *out_error_event(const oai_error *e);

#endif

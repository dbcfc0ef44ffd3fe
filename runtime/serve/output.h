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
    int prompt_tokens;                    /* Messages' message_start reports them */
} out_request;

/* How a choice ended: what the last events and the reply of the Messages and
 * Responses APIs report. */
typedef struct {
    const char *finish_reason; /* "stop", "length" or "tool_calls" */
    const char *stop_sequence; /* the stop string that ended the text, or NULL */
    int prompt_tokens, completion_tokens;
} out_summary;

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
    int stop_index;          /* the stop string that ended the text, or -1 */
    /* Messages and Responses: the reply's content blocks (output items) so far, and where
     * its stream stands; the text of each block gathers in text as well */
    cJSON *blocks;
    int text_open;           /* a text block (message item) is open; its text begins at text_from */
    size_t text_from;
    int seq;                 /* Responses: the next event's sequence_number */
    char item_id[40];        /* Responses: the open message item's id */
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
/* The choice's text is final: a stream's last chunk of choice i, carrying
 * its finish_reason (nothing for a chat or completion reply that is not
 * streamed); the Messages and Responses APIs close their open text block. */
void out_end_chunk(const out_request *o, out_choice *c, int i, const char *finish_reason);
/* The first events of a Messages or Responses stream, sent with its 200
 * (NULL for the other APIs, whose first chunk carries the first token). */
char *out_stream_start(const out_request *o, out_choice *c);

/* Adds choice i to a non-streamed reply (oai_response_new): its text,
 * logprobs and tool calls, which the reply takes over. */
void out_response_add(cJSON *resp, const out_request *o, out_choice *c, int i, const char *finish_reason);
/* An error as the SSE event that ends a stream whose 200 went out, in the
 * request's API's shape ("data: {error}\n\n" on chat and completions;
 * malloc'd, NULL on out of memory). */
char *out_error_event(const out_request *o, out_choice *c, const oai_error *e);

/* An SSE event "event: name\ndata: {data}\n\n" (data taken over; malloc'd). */
char *out_sse_event(const char *name, cJSON *data);
/* o[key] = s[0..n) as a JSON string, invalid UTF-8 replaced. */
void out_add_text(cJSON *o, const char *key, const char *s, size_t n);
/* The id, function name and arguments (JSON text) of an oai_tool_call object. */
void out_call_parts(const cJSON *call, const char **id, const char **name, const char **args);
/* Two SSE strings as one (malloc'd; both freed; NULL when either is NULL or out of memory). */
char *out_concat(char *a, char *b);

#endif

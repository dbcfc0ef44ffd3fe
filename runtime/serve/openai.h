/* openai.h — the OpenAI wire format (oai_ prefix): request parsing and
 * validation into a struct, stop-string matching over streamed text, and the
 * JSON of responses, stream chunks and errors.
 *
 * Nothing here touches sockets, the model or the scheduler: a request body
 * goes in, an oai_request (or an oai_error with its HTTP status) comes out;
 * text and numbers go in, JSON strings come out.
 */
#ifndef INGOT_OPENAI_H
#define INGOT_OPENAI_H

#include <cjson/cJSON.h>
#include <stddef.h>
#include <stdint.h>

#include "grammar.h"
#include "sampler.h"

#define OAI_MAX_STOP 16       /* OpenAI allows up to 4; engines commonly accept more */
#define OAI_MAX_STOP_BYTES 256
#define OAI_MAX_N 16
#define OAI_MAX_TOP_LOGPROBS 20

typedef enum { OAI_CHAT, OAI_COMPLETION } oai_kind;

/* The API a generation request came in through: its wire format in and out.
 * Messages (Anthropic) and Responses (OpenAI) requests are translated into a
 * chat request (kind OAI_CHAT) and answered in their own shapes
 * (messages_api.h, responses_api.h). */
typedef enum { OAI_API_CHAT, OAI_API_COMPLETIONS, OAI_API_MESSAGES, OAI_API_RESPONSES } oai_api;

#define OAI_MAX_TOOLS 128 /* OpenAI's limit */

/* tool_choice: what the model may or must do with the tools. */
typedef enum {
    OAI_TOOLS_AUTO,     /* call tools or answer, as the model decides (the default when tools are given) */
    OAI_TOOLS_NONE,     /* answer only: the tools are not shown to the model and no call is parsed */
    OAI_TOOLS_REQUIRED, /* call at least one tool */
    OAI_TOOLS_NAMED,    /* call the tool named tool_choice_name */
} oai_tool_choice;

typedef struct {
    int status;        /* HTTP status */
    char message[320];
    const char *type;  /* "invalid_request_error", "authentication_error", "server_error", ... */
    char param[48];    /* "" is sent as null */
    const char *code;  /* NULL is sent as null */
} oai_error;

typedef struct {
    oai_kind kind;
    oai_api api;
    char *model;
    cJSON *messages;       /* chat: normalized copy (owned): every content a string ("" for a null one);
                              tool_calls[i].function.arguments an object when the client's string held
                              one (what chat templates expect) */
    cJSON *tools;          /* chat: the tools as given, validated (owned), or NULL when there are none */
    oai_tool_choice tool_choice;
    char *tool_choice_name;  /* OAI_TOOLS_NAMED: the function's name */
    int parallel_tool_calls; /* 0: at most one call per reply */
    char *prompt_text;     /* completions: string prompt, or NULL */
    int32_t *prompt_ids;   /* completions: token-array prompt, or NULL */
    size_t n_prompt_ids;
    int max_tokens;        /* -1: not given (the rest of the context) */
    samp_params sampling;
    int has_seed;
    char *stop[OAI_MAX_STOP];
    int n_stop;
    int n;
    int stream, include_usage;
    int logprobs;          /* 1: return the chosen tokens' logprobs */
    int top_logprobs;      /* alternatives per token (0..OAI_MAX_TOP_LOGPROBS) */
    int ignore_eos;
    int32_t *bias_ids;     /* logit_bias (owned; sampling.bias_* point here) */
    float *bias_values;
    gram_grammar *grammar; /* response_format json_object / json_schema, or "grammar": compiled (owned), or NULL */
    const char *grammar_param; /* the field it came from ("response_format" or "grammar"), for errors */
    /* Responses: the request fields a response object repeats (owned), and the conversation
     * so far without the instructions (owned: previous_response_id's history and this input,
     * as chat messages), which the response store keeps for the next turn */
    cJSON *api_echo;
    cJSON *api_history;
} oai_request;

/* Fills e: status, type, message (printf-style), param (may be NULL), code (may be NULL). */
void oai_error_set(oai_error *e, int status, const char *type, const char *param, const char *code,
                   const char *fmt, ...) __attribute__((format(printf, 6, 7)));
/* {"error": {"message", "type", "param", "code"}} as a malloc'd string. */
char *oai_error_json(const oai_error *e);

/* Request-validation helpers shared by the parsers (embeddings.c too): a 400
 * "invalid_request_error" for param, fmt formatted with (param, what); -1. */
int oai_bad(oai_error *e, const char *param, const char *fmt, const char *what);
/* The field, or NULL when absent or JSON null (both mean "use the default"). */
const cJSON *oai_field(const cJSON *o, const char *name);

/* Parses and validates a request body of len bytes (need not be
 * NUL-terminated). vocab bounds token ids of a token-array prompt. 0 on
 * success (free with oai_request_free), -1 with e filled (nothing to free). */
int oai_parse(oai_kind kind, const char *body, size_t len, int vocab, oai_request *r, oai_error *e);
void oai_request_free(oai_request *r);
/* The two halves of oai_parse, for the parsers of the other APIs: a body held
 * to RFC 8259 and parsed into one JSON object (NULL with e filled), and a
 * request of kind from such an object (0, or -1 with e filled). */
cJSON *oai_parse_object(const char *body, size_t len, oai_error *e);
int oai_parse_tree(oai_kind kind, const cJSON *root, int vocab, oai_request *r, oai_error *e);

/* ---- growable byte buffer ---------------------------------------------- */
typedef struct {
    char *p;
    size_t len, cap;
} oai_buf;
int oai_buf_add(oai_buf *b, const char *s, size_t n); /* keeps p NUL-terminated; -1 on OOM */
void oai_buf_free(oai_buf *b);

/* ---- stop strings --------------------------------------------------------
 * Text arrives in pieces that may split a stop string across tokens. Each
 * piece is appended to held; everything that can no longer be part of a stop
 * string moves to out; a tail that is a prefix of some stop string stays in
 * held. On a full match the text before it moves to out, held is emptied and
 * 1 + the index of the stop string is returned (the stop string itself is
 * never emitted); 0 otherwise. */
int oai_stop_feed(char *const *stop, int n_stop, oai_buf *held, const char *text, size_t n, oai_buf *out);

/* ---- responses ----------------------------------------------------------- */
typedef struct {
    oai_kind kind;
    const char *id;     /* "chatcmpl-..." / "cmpl-..." */
    long long created;  /* unix seconds */
    const char *model;
} oai_meta;

/* One generated token's log-probabilities; piece bytes need not be UTF-8. */
typedef struct {
    const char *piece;
    size_t piece_len;
    float logprob;
    int n_top;
    const char *top_piece[OAI_MAX_TOP_LOGPROBS];
    size_t top_len[OAI_MAX_TOP_LOGPROBS];
    float top_logprob[OAI_MAX_TOP_LOGPROBS];
} oai_token_lp;

/* A logprobs object for one choice ({"content": []} for chat, {"tokens": [],
 * "token_logprobs": [], "top_logprobs": [], "text_offset": []} for
 * completions), and appending one token to it. text_offset: bytes of text
 * before this token in the choice. */
cJSON *oai_logprobs_new(oai_kind kind);
void oai_logprobs_add(oai_kind kind, cJSON *lp, const oai_token_lp *t, size_t text_offset);

/* A whole non-streamed response: create, add each choice (logprobs is taken
 * over, may be NULL), set usage, print. */
cJSON *oai_response_new(const oai_meta *m);
void oai_response_add_choice(cJSON *resp, oai_kind kind, int index, const char *text, size_t len,
                             cJSON *logprobs, const char *finish_reason);
void oai_set_usage(cJSON *obj, int prompt_tokens, int completion_tokens);

/* One tool call of a reply: {"id", "type": "function", "function": {"name", "arguments"}}. */
cJSON *oai_tool_call(const char *id, const char *name, const char *arguments);
/* Gives choice index of a chat response its tool calls (taken over): the
 * message gets "tool_calls", and a content that is empty becomes null. */
void oai_response_set_tool_calls(cJSON *resp, int index, cJSON *tool_calls);

/* One SSE event "data: {...}\n\n" (malloc'd) for a stream chunk of one
 * choice: role only on a chat stream's first chunk, text (may be empty),
 * logprobs (taken over, may be NULL), finish_reason (NULL while generating).
 * with_usage_null: add "usage": null (stream_options.include_usage). */
char *oai_chunk(const oai_meta *m, int index, int first, const char *text, size_t len, cJSON *logprobs,
                const char *finish_reason, int with_usage_null);
/* A chat stream chunk with one tool call's delta: delta.tool_calls =
 * [{"index": call_index, "id", "type", "function": {"name", "arguments"}}],
 * where id and name are sent (with "type") only when not NULL (the call's
 * first chunk) and arguments is the next fragment. role as in oai_chunk. */
char *oai_tool_call_chunk(const oai_meta *m, int index, int first, int call_index, const char *id, const char *name,
                          const char *arguments, int with_usage_null);
/* The closing usage chunk: "choices": [] and the usage object. */
char *oai_usage_chunk(const oai_meta *m, int prompt_tokens, int completion_tokens);

/* For other endpoints' parsers (embeddings.c): a copy of a request body in
 * which every NUL, raw or escaped (\u0000), became C0 80, so that cJSON keeps
 * the text after it (malloc'd, NUL-terminated; *out_len its length); and the
 * check that then refuses such text, or invalid UTF-8, with a 400 naming
 * param (0 when s is text a model can read). */
char *oai_mark_nuls(const char *body, size_t len, size_t *out_len);
/* A body held to RFC 8259 where cJSON is lenient: before parsing, no raw control character
 * in a string or between values; after (on the oai_mark_nuls copy's tree), every key and
 * string valid UTF-8 and no object with a repeated key, the param naming where. 0, or -1
 * with a 400. */
int oai_check_body(const char *body, size_t len, oai_error *e);
int oai_check_json(const cJSON *root, oai_error *e);
int oai_check_text(const char *s, const char *param, oai_error *e);

/* A malloc'd copy of s[0..n) that is valid UTF-8 without NULs (invalid bytes
 * become U+FFFD), for JSON strings. */
char *oai_utf8_clean(const char *s, size_t n);

#endif

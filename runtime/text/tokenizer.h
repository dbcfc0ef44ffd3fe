/* tokenizer.h — BPE tokenizer (tok_ prefix): byte-level and SentencePiece.
 *
 * Loaded from a Hugging Face tokenizer.json or from GGUF metadata
 * (tokenizer.ggml.*). Byte-level encoding: split out added/special tokens
 * (when asked), pre-tokenize with the model's split rules, map bytes to the
 * byte-level alphabet, apply BPE merges by rank. SentencePiece (GGUF "llama",
 * or tokenizer.json with U+2581 and byte_fallback): spaces become U+2581,
 * UTF-8 characters are merged by piece score (GGUF) or merge rank (JSON), and
 * what has no piece is spelled with <0xNN> byte tokens. Decoding maps back to
 * raw bytes; tok_stream releases only complete UTF-8 sequences.
 */
#ifndef INGOT_TOKENIZER_H
#define INGOT_TOKENIZER_H

#include <stddef.h>
#include <stdint.h>
#include "gguf.h"
#include "weights.h"

typedef struct tok_tokenizer tok_tokenizer;

tok_tokenizer *tok_from_gguf(const gguf_file *g, char *err, size_t errlen);
/* path: a tokenizer.json file. If a tokenizer_config.json sits beside it, its
 * bos/eos tokens and add_bos_token are read as well. */
tok_tokenizer *tok_from_json_file(const char *path, char *err, size_t errlen);
/* The tokenizer that comes with a checkpoint: a GGUF's own, or the
 * tokenizer.json in a safetensors folder or beside a .safetensors file. */
tok_tokenizer *tok_from_weights(const wt_file *w, char *err, size_t errlen);
void tok_free(tok_tokenizer *t);
/* 0 when both number the same token pieces the same way (what a draft model
 * and its target must share); -1 with err naming the first difference. */
int tok_same_vocabulary(const tok_tokenizer *a, const tok_tokenizer *b, char *err, size_t errlen);

int tok_vocab_size(const tok_tokenizer *t);
int tok_bos(const tok_tokenizer *t);     /* -1 if none */
int tok_eos(const tok_tokenizer *t);     /* -1 if none */
int tok_add_bos(const tok_tokenizer *t); /* whether encoding with add_special prepends BOS */
/* The ids that end a generation: EOS, GGUF eot/eom ids, every eos_token_id of
 * generation_config.json / config.json beside a tokenizer.json, and control
 * tokens spelled as a known end-of-turn marker (<|im_end|>, <|eot_id|>,
 * <end_of_turn>, <|end|>, ...). Returns the count; *ids stays valid with t. */
#define TOK_MAX_STOP_IDS 16
int tok_stop_ids(const tok_tokenizer *t, const int32_t **ids);
int tok_is_stop(const tok_tokenizer *t, int id); /* id is one of tok_stop_ids */
int tok_is_special(const tok_tokenizer *t, int id); /* control/special token (not printed by default) */
int tok_find(const tok_tokenizer *t, const char *piece); /* token id for an exact piece (as stored), -1 if none */

/* Encodes text[0..len). add_special: prepend BOS if the tokenizer asks for it
 * (HF add_special_tokens / llama.cpp add_bos). parse_special: recognise
 * special/added token strings inside the text (llama.cpp "special";
 * HF always does this for added tokens). *out is malloc'd; returns 0 or -1
 * (err filled). */
int tok_encode(const tok_tokenizer *t, const char *text, size_t len, int add_special,
               int parse_special, int32_t **out, size_t *n_out, char *err, size_t errlen);

/* A byte range [start, start + len) of a text. */
typedef struct {
    size_t start, len;
} tok_span;

/* tok_encode with special-token parsing everywhere except inside the plain
 * ranges (sorted, disjoint): there, text that spells a control token stays
 * text (added tokens that are not special still match, as they do without
 * parse_special). A chat prompt's message contents are such ranges, so only
 * the template's own markup yields control tokens. */
int tok_encode_spans(const tok_tokenizer *t, const char *text, size_t len, int add_special, const tok_span *plain,
                     size_t n_plain, int32_t **out, size_t *n_out, char *err, size_t errlen);

/* Raw bytes of one token (byte-level alphabet mapped back). NULL for an id out of range. */
const char *tok_piece(const tok_tokenizer *t, int id, size_t *len);

/* Incremental decoder: push token ids, receive only complete UTF-8. */
typedef struct {
    char pending[8]; /* bytes of an incomplete UTF-8 sequence */
    size_t n_pending;
} tok_stream;

void tok_stream_init(tok_stream *s);
/* Appends the printable bytes produced by token id to out (capacity cap);
 * returns the number of bytes written. Invalid sequences become U+FFFD.
 * skip_special: special tokens produce nothing. */
size_t tok_stream_push(tok_stream *s, const tok_tokenizer *t, int id, int skip_special, char *out,
                       size_t cap);
/* Flushes a trailing incomplete sequence as U+FFFD. */
size_t tok_stream_flush(tok_stream *s, char *out, size_t cap);

/* Decodes a whole id sequence into a malloc'd NUL-terminated string. */
char *tok_decode(const tok_tokenizer *t, const int32_t *ids, size_t n, int skip_special);

#endif

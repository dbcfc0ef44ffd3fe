/* jinja.h — a Jinja2-subset template interpreter for model chat templates (parse once, render per request). */
#ifndef INGOT_JINJA_H
#define INGOT_JINJA_H

#include <stddef.h>

#include <cjson/cJSON.h>

typedef struct jinja_template jinja_template;

/* Lexer options, fixed at parse time as in jinja2 (whitespace handling is decided while tokenizing).
 * jinja2's defaults are all off; Hugging Face renders chat templates with JINJA_HF. */
enum {
    JINJA_TRIM_BLOCKS = 1,           /* drop the first newline after a block or comment tag */
    JINJA_LSTRIP_BLOCKS = 2,         /* drop spaces/tabs between a line start and a block/comment tag */
    JINJA_KEEP_TRAILING_NEWLINE = 4, /* keep the template's final newline (jinja2 drops one) */
    JINJA_TOJSON_HTMLSAFE = 8,       /* tojson escapes < > & ' as jinja2's built-in filter does (HF's does not) */
    JINJA_HF = JINJA_TRIM_BLOCKS | JINJA_LSTRIP_BLOCKS,
};

/* Resource bounds for one render; a zero field takes the default. The template comes from a
 * model file, so every render is bounded in output, memory and work. */
typedef struct jinja_limits {
    size_t max_output; /* bytes of output (and of any one string); default 64 MiB */
    size_t max_memory; /* bytes of scratch memory; default 512 MiB */
    long max_steps;    /* statements + loop iterations + calls; default 5,000,000 */
} jinja_limits;

/* Parses with all options off (jinja2's defaults). NULL on error, with a one-line message
 * "template:LINE: what" in err. */
jinja_template *jinja_parse(const char *src, size_t len, char *err, size_t errlen);
jinja_template *jinja_parse_ex(const char *src, size_t len, unsigned flags, char *err, size_t errlen);

/* Renders with context (a JSON object: messages, add_generation_prompt, bos_token, tools, ...).
 * Returns a malloc'd NUL-terminated string, or NULL with err set. An error raised by the
 * template's raise_exception('msg') has exactly msg as its message; jinja_render_ex sets *raised
 * to tell the two kinds apart (the server answers 400 for those). out_len gets the length. */
char *jinja_render(const jinja_template *t, const cJSON *context, char *err, size_t errlen);
char *jinja_render_ex(const jinja_template *t, const cJSON *context, const jinja_limits *lim,
                      size_t *out_len, int *raised, char *err, size_t errlen);

void jinja_free(jinja_template *t);

#endif

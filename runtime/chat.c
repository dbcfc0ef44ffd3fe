/* chat.c — finding and rendering the chat template; see chat.h. */
#include "chat.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "gguf.h"
#include "jinja.h"

/* Hugging Face's historical default (ChatML); also SmolLM2's own format. */
static const char CHATML[] =
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}";

struct chat_template {
    jinja_template *t;
    const char *source;
    char *bos, *eos;
};

/* tokenizer_config.json's special-token fields: a string or {"content": "..."}. */
static char *token_string(const cJSON *v) {
    if (cJSON_IsObject(v)) v = cJSON_GetObjectItemCaseSensitive(v, "content");
    return cJSON_IsString(v) ? strdup(v->valuestring) : NULL;
}

static char *piece_string(const tok_tokenizer *tok, int id) {
    size_t n;
    const char *p = id >= 0 ? tok_piece(tok, id, &n) : NULL;
    return p ? strndup(p, n) : strdup("");
}

static char *read_file(const char *path, size_t max, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    char *buf = NULL;
    if (fseek(f, 0, SEEK_END) == 0) {
        long n = ftell(f);
        if (n >= 0 && (size_t)n <= max && fseek(f, 0, SEEK_SET) == 0 && (buf = malloc((size_t)n + 1))) {
            *len = fread(buf, 1, (size_t)n, f);
            buf[*len] = 0;
        }
    }
    fclose(f);
    return buf;
}

/* The tokenizer_config.json beside a safetensors file, or inside its folder. */
static cJSON *tokenizer_config(const char *weights_path) {
    char path[4096];
    struct stat st;
    if (stat(weights_path, &st) == 0 && S_ISDIR(st.st_mode)) {
        snprintf(path, sizeof path, "%s/tokenizer_config.json", weights_path);
    } else {
        const char *slash = strrchr(weights_path, '/');
        const int dirlen = slash ? (int)(slash - weights_path + 1) : 0;
        snprintf(path, sizeof path, "%.*stokenizer_config.json", dirlen, weights_path);
    }
    size_t len = 0;
    char *text = read_file(path, 64u << 20, &len);
    if (!text) return NULL;
    cJSON *j = cJSON_ParseWithLength(text, len);
    free(text);
    return j;
}

chat_template *chat_load(const wt_file *w, const tok_tokenizer *tok, char *err, size_t errlen) {
    chat_template *c = calloc(1, sizeof *c);
    if (!c) {
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    const char *src = NULL;
    cJSON *cfg = NULL;
    const gguf_file *g = wt_gguf(w);
    if (g) {
        src = gguf_get_str(g, "tokenizer.chat_template");
        if (src) c->source = "gguf";
    } else if ((cfg = tokenizer_config(wt_path(w)))) {
        const cJSON *t = cJSON_GetObjectItemCaseSensitive(cfg, "chat_template");
        if (cJSON_IsArray(t)) { /* named templates: the one called "default" */
            const cJSON *e, *found = NULL;
            cJSON_ArrayForEach(e, t) {
                const cJSON *name = cJSON_GetObjectItemCaseSensitive(e, "name");
                if (cJSON_IsString(name) && !strcmp(name->valuestring, "default"))
                    found = cJSON_GetObjectItemCaseSensitive(e, "template");
            }
            t = found;
        }
        if (cJSON_IsString(t)) {
            src = t->valuestring;
            c->source = "tokenizer_config.json";
        }
        c->bos = token_string(cJSON_GetObjectItemCaseSensitive(cfg, "bos_token"));
        c->eos = token_string(cJSON_GetObjectItemCaseSensitive(cfg, "eos_token"));
    }
    if (!src) {
        src = CHATML;
        c->source = "builtin ChatML";
    }
    if (!c->bos) c->bos = piece_string(tok, tok_bos(tok));
    if (!c->eos) c->eos = piece_string(tok, tok_eos(tok));
    char jerr[256];
    c->t = jinja_parse_ex(src, strlen(src), JINJA_HF, jerr, sizeof jerr);
    cJSON_Delete(cfg);
    if (!c->t || !c->bos || !c->eos) {
        snprintf(err, errlen, "chat template (%s): %s", c->source, c->t ? "out of memory" : jerr);
        chat_free(c);
        return NULL;
    }
    return c;
}

void chat_free(chat_template *c) {
    if (!c) return;
    if (c->t) jinja_free(c->t);
    free(c->bos);
    free(c->eos);
    free(c);
}

const char *chat_source(const chat_template *c) { return c->source; }

char *chat_render(const chat_template *c, const cJSON *messages, int *user_error, char *err, size_t errlen) {
    *user_error = 0;
    cJSON *ctx = cJSON_CreateObject();
    if (!ctx) {
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    /* a reference, not a copy: the context is deleted below without touching messages */
    cJSON_AddItemReferenceToObject(ctx, "messages", (cJSON *)messages);
    cJSON_AddTrueToObject(ctx, "add_generation_prompt");
    cJSON_AddStringToObject(ctx, "bos_token", c->bos);
    cJSON_AddStringToObject(ctx, "eos_token", c->eos);
    /* the request body is bounded, so a prompt far beyond it is a runaway template */
    const jinja_limits lim = {.max_output = 32u << 20, .max_memory = 256u << 20, .max_steps = 2000000};
    size_t len = 0;
    int raised = 0;
    char *out = jinja_render_ex(c->t, ctx, &lim, &len, &raised, err, errlen);
    cJSON_Delete(ctx);
    if (!out) *user_error = raised;
    return out;
}

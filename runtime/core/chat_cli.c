/* chat_cli.c — `NAME chat`: a conversation in the terminal; see chat_cli.h.
 *
 * Each turn renders the whole conversation with the model's template and
 * tokenizes it as the server does (/v1/chat/completions: only the template's
 * markup may yield control tokens), so an answer here is the server's answer
 * to the same messages. One sequence runs through the scheduler on its own
 * thread: the prefix cache keeps the earlier turns' KV blocks, and this
 * thread stays free to notice Ctrl-C and cancel the sequence.
 *
 * Line editing and history are libedit's (BSD-licensed, packaged by Debian);
 * it reads from the terminal only, so piped input is read line by line.
 */
#include "chat_cli.h"

#include <cjson/cJSON.h>
#include <editline/readline.h>
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "chat.h"
#include "sampler.h"
#include "scheduler.h"

#define CHAT_MAX_FILE (64 << 20) /* /load reads at most this many bytes */
#define CHAT_DEFAULT_CTX 8192     /* --ctx when not given, or the model's context if smaller */

typedef struct {
    tok_tokenizer *tok;
    chat_template *tpl;
    sched *s;
    samp_params sp;
    int max_tokens;   /* -n: the most one answer may have (0: the rest of the context) */
    int ctx;          /* the conversation's room in tokens (the KV pool) */
    char *system;     /* the system prompt, or NULL */
    cJSON *messages;  /* the turns so far, without the system prompt */
    int interactive;  /* stdin is a terminal */
    int adapter;      /* the LoRA adapter it answers with: the first --lora, else 0 (none) */
} chat_session;

static volatile sig_atomic_t interrupted;
static void on_sigint(int sig) {
    (void)sig;
    interrupted = 1;
}

static void say(const chat_session *c, const char *fmt, const char *arg) {
    /* messages to the person go to stderr, so that stdout holds only the answers */
    (void)c;
    fprintf(stderr, fmt, arg);
    fputc('\n', stderr);
}

/* ---- the conversation --------------------------------------------------------- */

static cJSON *message(const char *role, const char *content) {
    cJSON *m = cJSON_CreateObject();
    cJSON_AddStringToObject(m, "role", role);
    cJSON_AddStringToObject(m, "content", content);
    return m;
}

/* The conversation as OpenAI messages: the system prompt first. */
static cJSON *full_conversation(const chat_session *c) {
    cJSON *all = cJSON_CreateArray();
    if (c->system) cJSON_AddItemToArray(all, message("system", c->system));
    for (const cJSON *m = c->messages->child; m; m = m->next) cJSON_AddItemToArray(all, cJSON_Duplicate(m, 1));
    return all;
}

/* The prompt of the conversation plus user's turn, tokenized as the server does. NULL with the reason said. */
static int32_t *render_prompt(chat_session *c, const char *user, size_t *n_ids) {
    cJSON *all = full_conversation(c);
    cJSON_AddItemToArray(all, message("user", user));
    char err[512];
    int user_error = 0;
    tok_span *plain = NULL;
    size_t n_plain = 0;
    char *text = chat_render_prompt(c->tpl, all, NULL, &plain, &n_plain, &user_error, err, sizeof err);
    cJSON_Delete(all);
    if (!text) {
        say(c, "chat template: %s", err);
        return NULL;
    }
    int32_t *ids = NULL;
    const int rc = tok_encode_spans(c->tok, text, strlen(text), 0, plain, n_plain, &ids, n_ids, err, sizeof err);
    free(plain);
    free(text);
    if (rc != 0) {
        say(c, "tokenizer: %s", err);
        return NULL;
    }
    return ids;
}

/* Streams one answer to stdout; its text is returned (malloc'd), cut short
 * where Ctrl-C stopped it. NULL after an error (said). */
static char *answer(chat_session *c, const int32_t *ids, size_t n_ids) {
    const int room = c->ctx - (int)n_ids;
    if (room < 1) {
        char n[64];
        snprintf(n, sizeof n, "%zu tokens, room for %d", n_ids, c->ctx);
        say(c, "the conversation no longer fits the context (%s): /clear starts over, or run with a larger --ctx", n);
        return NULL;
    }
    sched_request r = {.prompt = ids, .n_prompt = n_ids, .sampling = c->sp,
                       .max_tokens = c->max_tokens > 0 && c->max_tokens < room ? c->max_tokens : room,
                       .top_logprobs = -1, .adapter = c->adapter};
    uint64_t id;
    char err[512];
    if (sched_submit(c->s, &r, &id, err, sizeof err) != 0) {
        say(c, "%s", err);
        return NULL;
    }
    tok_stream ts;
    tok_stream_init(&ts);
    size_t len = 0, cap = 256;
    char *text = malloc(cap), piece[256];
    int done = 0, cancelled = 0;
    sched_event evs[64];
    interrupted = 0;
    while (!done) {
        if (interrupted && !cancelled) {
            sched_cancel(c->s, id);
            cancelled = 1;
        }
        const size_t n = sched_poll(c->s, evs, 64);
        if (n == 0) {
            struct timespec pause = {0, 1000000};
            nanosleep(&pause, NULL);
            continue;
        }
        for (size_t k = 0; k < n; k++) {
            size_t w = 0;
            if (evs[k].kind == SCHED_EV_DONE) {
                if (evs[k].finish == SCHED_FINISH_ERROR) say(c, "generation failed: %s", evs[k].error);
                w = tok_stream_flush(&ts, piece, sizeof piece);
                done = 1;
            } else {
                w = tok_stream_push(&ts, c->tok, evs[k].token, 1, piece, sizeof piece);
            }
            fwrite(piece, 1, w, stdout);
            fflush(stdout);
            if (len + w + 1 > cap) {
                while (len + w + 1 > cap) cap *= 2;
                char *grown = realloc(text, cap);
                if (!grown) continue;
                text = grown;
            }
            memcpy(text + len, piece, w);
            len += w;
        }
    }
    fputc('\n', stdout);
    fflush(stdout);
    if (cancelled && c->interactive) fprintf(stderr, "[stopped]\n");
    interrupted = 0;
    text[len] = 0;
    return text;
}

static void turn(chat_session *c, const char *user) {
    size_t n_ids = 0;
    int32_t *ids = render_prompt(c, user, &n_ids);
    if (!ids) return;
    char *text = answer(c, ids, n_ids);
    free(ids);
    if (!text) return;
    cJSON_AddItemToArray(c->messages, message("user", user));
    cJSON_AddItemToArray(c->messages, message("assistant", text));
    free(text);
}

/* ---- /save and /load ------------------------------------------------------------ */

static void save(chat_session *c, const char *path) {
    cJSON *doc = cJSON_CreateObject();
    cJSON_AddItemToObject(doc, "messages", full_conversation(c));
    char *json = cJSON_Print(doc);
    cJSON_Delete(doc);
    FILE *f = json ? fopen(path, "w") : NULL;
    const int ok = f && fputs(json, f) >= 0 && fputc('\n', f) != EOF;
    if (f && fclose(f) != 0) say(c, "cannot write %s", path);
    else if (!ok) say(c, "cannot write %s", path);
    else say(c, "saved the conversation to %s", path);
    free(json);
}

static char *read_file(const char *path, size_t max) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    char *buf = malloc(max + 1);
    const size_t n = buf ? fread(buf, 1, max + 1, f) : 0;
    fclose(f);
    if (!buf || n > max) {
        free(buf);
        return NULL;
    }
    buf[n] = 0;
    return buf;
}

/* A saved conversation ({"messages": [...]} or the array itself) replaces this one. */
static void load(chat_session *c, const char *path) {
    char *text = read_file(path, CHAT_MAX_FILE);
    if (!text) {
        say(c, "cannot read %s (missing, unreadable or over 64 MiB)", path);
        return;
    }
    cJSON *doc = cJSON_Parse(text);
    free(text);
    const cJSON *msgs = cJSON_IsArray(doc) ? doc : cJSON_GetObjectItemCaseSensitive(doc, "messages");
    int ok = cJSON_IsArray(msgs);
    for (const cJSON *m = ok ? msgs->child : NULL; m && ok; m = m->next) {
        const cJSON *role = cJSON_GetObjectItemCaseSensitive(m, "role");
        const cJSON *content = cJSON_GetObjectItemCaseSensitive(m, "content");
        ok = cJSON_IsString(role) && cJSON_IsString(content) &&
             (!strcmp(role->valuestring, "user") || !strcmp(role->valuestring, "assistant") ||
              (!strcmp(role->valuestring, "system") && m == msgs->child));
    }
    if (!ok) {
        say(c, "%s is not a saved conversation: {\"messages\": [{\"role\", \"content\"}, ...]} with string "
               "contents, roles user and assistant (and system first)", path);
        cJSON_Delete(doc);
        return;
    }
    cJSON_Delete(c->messages);
    c->messages = cJSON_CreateArray();
    free(c->system);
    c->system = NULL;
    for (const cJSON *m = msgs->child; m; m = m->next) {
        const char *role = cJSON_GetObjectItemCaseSensitive(m, "role")->valuestring;
        const char *content = cJSON_GetObjectItemCaseSensitive(m, "content")->valuestring;
        if (!strcmp(role, "system")) c->system = strdup(content);
        else cJSON_AddItemToArray(c->messages, message(role, content));
    }
    cJSON_Delete(doc);
    char n[32];
    snprintf(n, sizeof n, "%d", cJSON_GetArraySize(c->messages));
    say(c, "loaded %s messages", n);
}

/* ---- input ------------------------------------------------------------------------ */

/* One line of input without its newline (malloc'd), or NULL at the end. On a
 * terminal through libedit (history kept), else from stdin. */
static char *read_line(const chat_session *c, const char *prompt) {
    if (c->interactive) {
        for (;;) {
            interrupted = 0;
            char *line = readline(prompt);
            if (line || !interrupted) return line;
            fputc('\n', stdout); /* Ctrl-C at the prompt: a fresh line, not the end */
        }
    }
    char *line = NULL;
    size_t cap = 0;
    ssize_t n = getline(&line, &cap, stdin);
    if (n < 0) {
        free(line);
        return NULL;
    }
    while (n > 0 && (line[n - 1] == '\n' || line[n - 1] == '\r')) line[--n] = 0;
    return line;
}

static int append(char **text, size_t *len, const char *s) {
    const size_t n = strlen(s);
    char *grown = realloc(*text, *len + n + 2);
    if (!grown) return -1;
    *text = grown;
    memcpy(*text + *len, s, n + 1);
    *len += n;
    return 0;
}

/* One turn of input: a line, lines joined by a trailing backslash, or a
 * block between lines of three double quotes. NULL at the end of input. */
static char *read_turn(const chat_session *c) {
    char *first = read_line(c, "> ");
    if (!first) return NULL;
    const int block = !strcmp(first, "\"\"\"");
    char *text = NULL;
    size_t len = 0;
    char *line = first;
    for (int is_first = 1;; is_first = 0) {
        size_t n = strlen(line);
        const int more = block ? 1 : n > 0 && line[n - 1] == '\\';
        if (c->interactive && is_first) add_history(line);
        if (!block && more) line[n - 1] = 0;
        if (!(block && is_first)) {
            if (text && append(&text, &len, "\n")) break;
            if (append(&text, &len, line)) break;
        }
        free(line);
        line = NULL;
        if (!more) break;
        if (!(line = read_line(c, "... "))) break;
        if (block && !strcmp(line, "\"\"\"")) {
            free(line);
            line = NULL;
            break;
        }
    }
    free(line);
    return text ? text : strdup("");
}

/* ---- commands ---------------------------------------------------------------------- */

static const char HELP[] =
    "Type a message and press Enter. A line ending in \\ continues on the next; \"\"\" on a line of its\n"
    "own opens and closes a block of several lines. Ctrl-C stops an answer; Ctrl-D or /exit leaves.\n"
    "  /system [TEXT]   show or set the system prompt (the conversation is kept)\n"
    "  /clear           forget the conversation (the system prompt stays)\n"
    "  /save FILE       write the conversation as JSON ({\"messages\": [...]}, as the API takes it)\n"
    "  /load FILE       continue a saved conversation\n"
    "  /exit            leave\n"
    "A message that starts with / is written //.";

/* A line starting with '/': 1 to go on, 0 to leave. */
static int command(chat_session *c, const char *line) {
    char word[16] = "";
    int at = 0;
    sscanf(line, "/%15s%n", word, &at);
    const char *arg = line + at;
    while (*arg == ' ') arg++;
    if (!strcmp(word, "exit") || !strcmp(word, "quit")) return 0;
    if (!strcmp(word, "help")) {
        say(c, "%s", HELP);
    } else if (!strcmp(word, "clear")) {
        cJSON_Delete(c->messages);
        c->messages = cJSON_CreateArray();
        say(c, "%s", "the conversation is cleared");
    } else if (!strcmp(word, "system") && !*arg) {
        say(c, "system prompt: %s", c->system ? c->system : "(none)");
    } else if (!strcmp(word, "system")) {
        free(c->system);
        c->system = strdup(arg);
    } else if ((!strcmp(word, "save") || !strcmp(word, "load")) && !*arg) {
        say(c, "/%s needs a file name", word);
    } else if (!strcmp(word, "save")) {
        save(c, arg);
    } else if (!strcmp(word, "load")) {
        load(c, arg);
    } else {
        say(c, "unknown command /%s (/help lists them)", word);
    }
    return 1;
}

/* ---- options and the loop ------------------------------------------------------------ */

static int parse_options(chat_session *c, int argc, char **argv) {
    for (int i = 0; i < argc; i += 2) { /* every option takes a value */
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        char *end = NULL;
        if (!v) {
            fprintf(stderr, "chat: unknown option or missing value '%s'\n", a);
            return -1;
        }
        errno = 0;
        const double x = strtod(v, &end);
        const int number = !errno && end != v && !*end;
        if (!strcmp(a, "--system")) c->system = strdup(v);
        else if (!strcmp(a, "-n") && number && x >= 0 && x <= (1 << 30)) c->max_tokens = (int)x;
        else if (!strcmp(a, "--ctx") && number && x >= 1 && x <= (1 << 30)) c->ctx = (int)x;
        else if (!strcmp(a, "--temp") && number && x >= 0) c->sp.temperature = (float)x;
        else if (!strcmp(a, "--top-k") && number && x >= 0) c->sp.top_k = (int)x;
        else if (!strcmp(a, "--top-p") && number && x > 0 && x <= 1) c->sp.top_p = (float)x;
        else if (!strcmp(a, "--min-p") && number && x >= 0 && x <= 1) c->sp.min_p = (float)x;
        else if (!strcmp(a, "--repeat-penalty") && number && x > 0) c->sp.repetition_penalty = (float)x;
        else if (!strcmp(a, "--seed") && number && x >= 0) c->sp.seed = (uint64_t)x;
        else {
            fprintf(stderr, "chat: bad option or value: %s %s\n", a, v);
            return -1;
        }
    }
    return 0;
}

int chat_cli_main(const ingot_model_api *api, ingot_model *m, tok_tokenizer *tok, int threads, int argc, char **argv) {
    chat_session c = {.tok = tok, .sp = samp_default_params(), .messages = cJSON_CreateArray(), .adapter = api->lora_count(m) > 0,
                      .interactive = isatty(STDIN_FILENO)};
    c.ctx = api->desc->max_ctx < CHAT_DEFAULT_CTX ? api->desc->max_ctx : CHAT_DEFAULT_CTX;
    if (parse_options(&c, argc, argv) != 0) {
        fprintf(stderr, "usage: %s chat [--system TEXT] [-n MAX_TOKENS] [--ctx TOKENS] [--temp T] [--top-k K] "
                        "[--top-p P] [--min-p P] [--repeat-penalty R] [--seed S]\n", api->desc->name);
        free(c.system);
        cJSON_Delete(c.messages);
        return 2;
    }
    if (c.ctx > api->desc->max_ctx) c.ctx = api->desc->max_ctx;
    char err[1024];
    if (!(c.tpl = chat_load(api->weights(m), tok, err, sizeof err))) {
        fprintf(stderr, "%s: error: %s\n", api->desc->name, err);
        return 1;
    }
    sched_config cfg = {.n_threads = threads, .kv_blocks = c.ctx / INGOT_KV_BLOCK + 2,
                        .max_batch_tokens = api->max_tokens(m), .max_running = 1, .prefix_cache = 1,
                        .max_waiting = 1};
    cfg.n_stop_ids = tok_stop_ids(tok, &cfg.stop_ids);
    if (!(c.s = sched_create(api, m, &cfg, err, sizeof err))) {
        fprintf(stderr, "%s: error: %s\n", api->desc->name, err);
        chat_free(c.tpl);
        return 1;
    }
    struct sigaction sa = {.sa_handler = on_sigint};
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, NULL); /* no SA_RESTART: a read at the prompt returns */
    if (c.interactive) {
        using_history();
        fprintf(stderr, "%s (%s template, context %d tokens). /help for commands, Ctrl-D to leave.\n",
                api->desc->name, chat_source(c.tpl), c.ctx);
    }
    char *line;
    while ((line = read_turn(&c))) {
        const int leave = line[0] == '/' && line[1] != '/' && !command(&c, line);
        if (!leave && line[0] && !(line[0] == '/' && line[1] != '/')) turn(&c, line[0] == '/' ? line + 1 : line);
        free(line);
        if (leave) break;
    }
    sched_destroy(c.s);
    chat_free(c.tpl);
    free(c.system);
    cJSON_Delete(c.messages);
    return 0;
}

/* chat_cli.h — `NAME chat` (and `ingot chat MODEL`): a conversation in the
 * terminal with the model's own chat template.
 *
 *   NAME chat [--system TEXT] [-n MAX_TOKENS] [--ctx TOKENS] [--temp T] [--top-k K]
 *             [--top-p P] [--min-p P] [--repeat-penalty R] [--seed S]
 *
 * Each answer streams as it is generated; the conversation is the prompt of
 * the next turn, and the scheduler's prefix cache keeps what the turns share,
 * so only the new turn is computed. Input: a line is one turn; a line ending
 * in a backslash continues on the next; a line of three double quotes opens
 * and closes a block of several lines. Commands: /help, /system [TEXT],
 * /clear, /save FILE, /load FILE, /exit (Ctrl-D too). Ctrl-C stops the
 * answer being written (what was written stays in the conversation), not the
 * program. On a terminal, lines are edited and recalled with libedit; from a
 * pipe, each line is a turn and only the answers are written.
 */
#ifndef INGOT_CHAT_CLI_H
#define INGOT_CHAT_CLI_H

#include "model_api.h"
#include "tokenizer.h"

/* Runs the conversation until the input ends or /exit; 0, or 2 on a bad option. */
int chat_cli_main(const ingot_model_api *api, ingot_model *m, tok_tokenizer *tok, int threads, int argc, char **argv);

#endif

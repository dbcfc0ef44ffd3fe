/* tool_grammar.h — the grammar of a tool call (tg_ prefix), for tool_choice
 * "required" or a named function.
 *
 * The model's own call markup (tool_calls.h) around a JSON object whose name
 * is one of the allowed tools and whose arguments follow that tool's
 * parameters schema (json_schema.h; a tool without parameters takes any
 * object):
 *
 *   TC_HERMES   <tool_call>\n{"name": "NAME", "arguments": ARGS}\n</tool_call>   (calls separated by \n)
 *   TC_LLAMA3   {"name": "NAME", "parameters": ARGS}                            (separated by "; ")
 *   TC_MISTRAL  [TOOL_CALLS][{"name": "NAME", "arguments": ARGS}, ...]
 *
 * When the opening markup is a control token (Mistral's [TOOL_CALLS]),
 * which a grammar never lets the model write, the grammar starts after it
 * and the server hands the parser the markup itself (open_in_grammar = 0);
 * Hermes markup that is a control token leaves one bare call (no closing
 * tag, which the parser accepts at the end of the text).
 */
#ifndef INGOT_TOOL_GRAMMAR_H
#define INGOT_TOOL_GRAMMAR_H

#include <cjson/cJSON.h>
#include <stddef.h>

#include "tool_calls.h"

/* GBNF text (malloc'd) whose root matches one call (parallel = 0) or one or
 * more (parallel = 1) of the tools (only the one named `only` when not
 * NULL). open_in_grammar: the grammar writes the opening markup. NULL with
 * err filled, and *bad_tool set to the index of the tool whose parameters
 * cannot be turned into a grammar (-1 for other errors). */
char *tg_grammar(tc_format f, const cJSON *tools, const char *only, int parallel, int open_in_grammar,
                 int *bad_tool, char *err, size_t errlen);

#endif

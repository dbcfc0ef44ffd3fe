/* tool_prompt.h — how a request's tools reach a chat template (tp_ prefix).
 *
 * A template that renders tools itself ("native", see tc_detect) gets the
 * messages as they are and the tools in its context, as Hugging Face's
 * apply_chat_template passes them. A template that never mentions tools
 * (SmolLM2's, the builtin ChatML) would drop them silently, and would render
 * a history of calls as empty assistant turns. For those the server does what
 * llama.cpp does for a template without tool support: it describes the tools
 * in a system message of its own and writes the history in the same format,
 * so the model sees one consistent convention. The format is Hermes (the one
 * Qwen2.5 and SmolLM3 were trained on):
 *
 *   system:    the client's system text, then the tool prompt (TP_TOOL_PROMPT)
 *              with each tool as one JSON line inside <tools></tools>
 *   assistant: its content, then each call as
 *              <tool_call>\n{"name": ..., "arguments": {...}}\n</tool_call>
 *   tool:      consecutive tool results become one user turn, each as
 *              <tool_response>\n...\n</tool_response>
 *
 * Everything the server writes this way is message content, so control-token
 * spellings in tool descriptions, arguments and results stay text.
 */
#ifndef INGOT_TOOL_PROMPT_H
#define INGOT_TOOL_PROMPT_H

#include <cjson/cJSON.h>

/* The messages for a template that does not render tools: a new array
 * (free with cJSON_Delete) in which the tools (may be NULL: only the history
 * is rewritten) are described in the system message, and tool_calls and tool
 * messages are written as Hermes markup in plain content. NULL on out of memory. */
cJSON *tp_messages(const cJSON *messages, const cJSON *tools);

#endif

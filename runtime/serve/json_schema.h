/* json_schema.h — JSON Schema to GBNF (js_ prefix), for grammar.h.
 *
 * Covers the subset OpenAI's strict structured outputs accept: type (one or
 * a list), object (properties in their declared order, required, optional
 * ones omissible, additionalProperties false; with no properties, a map
 * whose values follow additionalProperties, minProperties, maxProperties), string (minLength, maxLength,
 * format date / time / date-time / uuid / email, pattern: the ECMA-262 subset
 * json_schema_pattern.h lists, with minLength / maxLength compiled in), number and integer,
 * boolean, null, array (items, minItems, maxItems), enum, const, anyOf,
 * $defs / definitions with local $ref (recursion allowed, "#" is the root).
 * Annotations (title, description, default, examples, $schema, $id,
 * $comment) are ignored. Numeric bounds (minimum, maximum and their exclusive
 * forms) are compiled into the digits: any bounds for an integer, whole-number
 * bounds for a number (which then has no exponent); an integer's multipleOf
 * too (json_schema.c says where); numbers have at most 16
 * integer and 16 fraction digits. Any other keyword is refused by
 * name. Whitespace between tokens is bounded (a space, or a newline and up to
 * 16 spaces or tabs) so a small model cannot pad forever.
 */
#ifndef INGOT_JSON_SCHEMA_H
#define INGOT_JSON_SCHEMA_H

#include <cjson/cJSON.h>
#include <stddef.h>

/* GBNF text (malloc'd) whose rule "root" matches exactly the JSON texts
 * (without surrounding whitespace) the schema accepts, within the subset
 * above. NULL with err filled ("unsupported keyword 'oneOf' at
 * #/properties/n", "'pattern' at #/properties/code: the lookahead '(?=' is not
 * supported (at offset 1)", ...) otherwise. */
char *js_schema_grammar(const cJSON *schema, char *err, size_t errlen);

/* GBNF text of any JSON object ({"type": "json_object"}). */
const char *js_object_grammar(void);

#endif

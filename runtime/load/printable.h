/* printable.h — a name from a checkpoint (a tensor's, a key's, a rule's) made fit to quote in a
 * one-line error message: the loaders' names come from untrusted files. */
#ifndef INGOT_PRINTABLE_H
#define INGOT_PRINTABLE_H

#include <stddef.h>

/* s (NULL: "") in buf (cap bytes): printable ASCII kept, any other byte '?', at most 121 bytes of
 * it, and "..." where it was cut (by that or by cap). Returns buf. */
const char *load_printable(const char *s, char *buf, size_t cap);

#endif

/* printable.c — untrusted names quoted in messages (printable.h). */
#include "printable.h"

#include <string.h>

#define PRINTABLE_MAX 121 /* bytes of a name a message quotes */

const char *load_printable(const char *s, char *buf, size_t cap) {
    if (cap < 4) {
        if (cap) buf[0] = 0;
        return buf;
    }
    size_t j = 0;
    for (size_t i = 0; s && s[i]; i++) {
        if (i >= PRINTABLE_MAX || j + 4 >= cap) { /* no room for this byte and the "..." */
            memcpy(buf + j, "...", 3);
            j += 3;
            break;
        }
        const unsigned char c = (unsigned char)s[i];
        buf[j++] = (c >= 0x20 && c < 0x7f) ? (char)c : '?';
    }
    buf[j] = 0;
    return buf;
}

/* web_page.h — the chat page `serve` answers at / (web_ prefix): runtime/serve/web/chat.html,
 * embedded in the binary at build time (the Makefile writes it out as a C array), so the binary
 * needs no file beside it. */
#ifndef INGOT_WEB_PAGE_H
#define INGOT_WEB_PAGE_H

#include <stddef.h>

/* The page's bytes (HTML, UTF-8) and their count. */
const unsigned char *web_chat_page(size_t *len);

#endif

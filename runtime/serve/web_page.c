/* web_page.c — the embedded chat page; see web_page.h. web_chat_html.h is generated from
 * runtime/serve/web/chat.html by the Makefile (od, one byte per element). */
#include "web_page.h"

#include "web_chat_html.h"

const unsigned char *web_chat_page(size_t *len) {
    *len = sizeof WEB_CHAT_HTML;
    return WEB_CHAT_HTML;
}

/* byte_count.c — byte counts with binary suffixes (byte_count.h). */
#include "byte_count.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>

int byte_count_parse(const char *s, double *out) {
    char *end;
    errno = 0;
    const double x = strtod(s, &end);
    double unit = 1;
    switch (*end) {
    case 'k': case 'K': unit = 1024.0; end++; break;
    case 'm': case 'M': unit = 1048576.0; end++; break;
    case 'g': case 'G': unit = 1073741824.0; end++; break;
    case 't': case 'T': unit = 1099511627776.0; end++; break;
    default: break;
    }
    if (unit > 1 && *end == 'i') end++;
    if (*end == 'B' || *end == 'b') end++;
    if (errno || end == s || *end || !isfinite(x) || !(x >= 0) || x * unit > 1e18) return -1;
    *out = floor(x * unit);
    return 0;
}

/* fuzz_router_config.c — an ingot-router configuration file (tools/router/config.c): the JSON,
 * its models, names, binaries and serve arguments, and the bounds on their counts. The router is a
 * program of its own, not in the library: its config reader is compiled into this harness. */
#include "fuzz_common.h"

#include "../../tools/router/config.c"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t n) {
    char path[64];
    const int fd = fuzz_memfile(data, n, path, sizeof path);
    if (fd < 0) return 0;
    rt_router r;
    memset(&r, 0, sizeof r);
    if (rt_config_load(&r, path) == 0) {
        char *common[] = {"--kv-blocks", "64"};
        rt_config_add_common_args(&r, common, 2);
    }
    rt_config_free(&r);
    close(fd);
    return 0;
}

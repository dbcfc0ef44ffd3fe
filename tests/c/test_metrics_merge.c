/* test_metrics_merge.c — tools/router/metrics_merge.c on children's Prometheus text:
 * the model label goes first on every sample (none, empty or existing labels),
 * each family's HELP and TYPE appear once with every child's samples together,
 * histogram series stay with their family, CRLF and a missing final newline
 * are taken, and a family only one child has is kept. */
#include <stdlib.h>
#include <string.h>

/* the router is not in libingot.a: its merge is compiled into this test */
#include "../../tools/router/metrics_merge.c"
#include "check.h"

static const char child_a[] =
    "# HELP ingot_http_requests_total HTTP requests answered, by status code.\n"
    "# TYPE ingot_http_requests_total counter\n"
    "ingot_http_requests_total{code=\"200\"} 3\n"
    "ingot_http_requests_total{code=\"400\"} 1\n"
    "# HELP ingot_batch_size Sequences in the last forward step.\n"
    "# TYPE ingot_batch_size gauge\n"
    "ingot_batch_size 2\n"
    "# HELP ingot_ttft_seconds Time to first token.\n"
    "# TYPE ingot_ttft_seconds histogram\n"
    "ingot_ttft_seconds_bucket{le=\"0.1\"} 1\n"
    "ingot_ttft_seconds_bucket{le=\"+Inf\"} 2\n"
    "ingot_ttft_seconds_sum 0.3\n"
    "ingot_ttft_seconds_count 2\n"
    "# a comment that carries nothing\n";

/* the same families from another child, CRLF line ends, no final newline, an
 * empty label set and a family of its own */
static const char child_b[] =
    "# HELP ingot_http_requests_total HTTP requests answered, by status code.\r\n"
    "# TYPE ingot_http_requests_total counter\r\n"
    "ingot_http_requests_total{code=\"200\"} 5\r\n"
    "# HELP ingot_batch_size Sequences in the last forward step.\r\n"
    "# TYPE ingot_batch_size gauge\r\n"
    "ingot_batch_size{} 1\r\n"
    "# HELP ingot_spec_accepted_total Draft tokens accepted.\r\n"
    "# TYPE ingot_spec_accepted_total counter\r\n"
    "ingot_spec_accepted_total 7";

static int count(const char *hay, const char *needle) {
    int n = 0;
    for (const char *p = hay; (p = strstr(p, needle)); p += strlen(needle)) n++;
    return n;
}

/* where needle starts in hay, or -1 */
static long at(const char *hay, const char *needle) {
    const char *p = strstr(hay, needle);
    return p ? p - hay : -1;
}

int main(void) {
    rt_metrics_merge *mm = rt_merge_new();
    CHECK(mm != NULL, "rt_merge_new");
    CHECK(rt_merge_add(mm, "a", child_a, strlen(child_a)) == 0, "add a");
    CHECK(rt_merge_add(mm, "b", child_b, strlen(child_b)) == 0, "add b");
    size_t len = 0;
    char *text = rt_merge_render(mm, "# HELP ingot_router_x The router's own.\n# TYPE ingot_router_x gauge\n"
                                     "ingot_router_x 1\n", &len);
    CHECK(text != NULL && len == strlen(text), "render");
    if (!text) return check_summary();

    CHECK(at(text, "# HELP ingot_router_x ") == 0, "the prefix comes first:\n%s", text);
    CHECK(count(text, "# HELP ingot_http_requests_total ") == 1, "one HELP per family:\n%s", text);
    CHECK(count(text, "# TYPE ingot_http_requests_total counter\n") == 1, "one TYPE per family:\n%s", text);
    CHECK(count(text, "# TYPE ingot_batch_size gauge\n") == 1, "one TYPE for the gauge:\n%s", text);
    CHECK(strstr(text, "ingot_http_requests_total{model=\"a\",code=\"200\"} 3\n") != NULL, "a's labelled sample");
    CHECK(strstr(text, "ingot_http_requests_total{model=\"a\",code=\"400\"} 1\n") != NULL, "a's second sample");
    CHECK(strstr(text, "ingot_http_requests_total{model=\"b\",code=\"200\"} 5\n") != NULL, "b's sample, CR gone");
    CHECK(strstr(text, "ingot_batch_size{model=\"a\"} 2\n") != NULL, "no labels: the model label alone");
    CHECK(strstr(text, "ingot_batch_size{model=\"b\"} 1\n") != NULL, "empty labels: the model label alone");
    CHECK(strstr(text, "ingot_ttft_seconds_bucket{model=\"a\",le=\"+Inf\"} 2\n") != NULL, "histogram bucket");
    CHECK(strstr(text, "ingot_ttft_seconds_sum{model=\"a\"} 0.3\n") != NULL, "histogram sum");
    CHECK(strstr(text, "ingot_spec_accepted_total{model=\"b\"} 7\n") != NULL, "last line without a newline");
    CHECK(strstr(text, "\r") == NULL && strstr(text, "a comment") == NULL, "no CR, no other comments");

    /* every family's samples together, after its TYPE and before the next family */
    const long type_req = at(text, "# TYPE ingot_http_requests_total"), type_batch = at(text, "# TYPE ingot_batch_size");
    const long b_req = at(text, "ingot_http_requests_total{model=\"b\""), type_ttft = at(text, "# TYPE ingot_ttft");
    const long sum = at(text, "ingot_ttft_seconds_sum"), type_spec = at(text, "# TYPE ingot_spec_accepted_total");
    CHECK(type_req < b_req && b_req < type_batch, "b's request samples sit with a's: %ld %ld %ld", type_req, b_req,
          type_batch);
    CHECK(type_batch < type_ttft && type_ttft < sum && sum < type_spec, "families in first-seen order");
    free(text);
    rt_merge_free(mm);

    /* garbage is skipped, not fatal: only sample-shaped lines become samples */
    mm = rt_merge_new();
    static const char junk[] = "\n\n#\nnot_a_sample_without_value\n{}\n";
    CHECK(rt_merge_add(mm, "c", junk, strlen(junk)) == 0, "junk");
    text = rt_merge_render(mm, "", &len);
    CHECK(text && strstr(text, "not_a_sample") == NULL, "a line with no value is dropped: %s", text ? text : "");
    free(text);
    rt_merge_free(mm);
    return check_summary();
}

/* A small program that crashes the way production code does: a NULL pointer
 * reaches a function that dereferences it, two calls deep. scripts/demo
 * builds it, captures a real core at the fault, and runs `coreepi inspect`. */
#include <stdio.h>
#include <string.h>

struct request { const char *path; size_t length; };

static size_t parse_header(const struct request *req)
{
    return strlen(req->path) + req->length; /* req is NULL: SIGSEGV here */
}

static size_t handle(const struct request *req)
{
    return parse_header(req) * 2;
}

int main(void)
{
    struct request *pending = NULL;
    printf("%zu\n", handle(pending));
    return 0;
}

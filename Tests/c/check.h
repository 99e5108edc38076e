/* A minimal test harness: CHECK prints the failed expression and exits non-zero. */
#ifndef CHECK_H
#define CHECK_H
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>

/* Counted by every thread of a test; relaxed, so that counting orders nothing between threads
 * (a missing happens-before edge stays visible to ThreadSanitizer). */
static atomic_int checks_passed;
#define CHECK_PASSED() atomic_fetch_add_explicit(&checks_passed, 1, memory_order_relaxed)

#define CHECK(cond) do { \
    if (!(cond)) { fprintf(stderr, "%s:%d: FAILED: %s\n", __FILE__, __LINE__, #cond); exit(1); } \
    CHECK_PASSED(); } while (0)
#define CHECK_EQ(a, b) do { \
    long long a_ = (long long)(a), b_ = (long long)(b); \
    if (a_ != b_) { fprintf(stderr, "%s:%d: FAILED: %s == %s (%lld != %lld)\n", \
                            __FILE__, __LINE__, #a, #b, a_, b_); exit(1); } \
    CHECK_PASSED(); } while (0)
#define DONE() do { printf("%s: %d checks passed\n", __FILE__, atomic_load(&checks_passed)); return 0; } while (0)
#endif

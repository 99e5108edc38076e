/* A minimal test harness: CHECK prints the failed expression and exits non-zero. */
#ifndef CHECK_H
#define CHECK_H
#include <stdio.h>
#include <stdlib.h>

static int checks_passed;

#define CHECK(cond) do { \
    if (!(cond)) { fprintf(stderr, "%s:%d: FAILED: %s\n", __FILE__, __LINE__, #cond); exit(1); } \
    checks_passed++; } while (0)
#define CHECK_EQ(a, b) do { \
    long long a_ = (long long)(a), b_ = (long long)(b); \
    if (a_ != b_) { fprintf(stderr, "%s:%d: FAILED: %s == %s (%lld != %lld)\n", \
                            __FILE__, __LINE__, #a, #b, a_, b_); exit(1); } \
    checks_passed++; } while (0)
#define DONE() do { printf("%s: %d checks passed\n", __FILE__, checks_passed); return 0; } while (0)
#endif

/* Uncontended sync_mutex_lock + sync_mutex_unlock through two builds of libsync.so in one run,
 * taking turns (A, B, A, B, ...), so that both see the same machine; then, with the second build,
 * the cost with lock-order checking on (one lock alone, and one lock taken while holding another:
 * the order is looked up in the graph). Not run by benchmarks/run.sh (it needs two builds):
 *
 *   cc -O2 -o build/lock_order_ab benchmarks/ab/lock_order_ab.c -ldl -lpthread
 *   build/lock_order_ab OLD/libsync.so build/libsync.so [rounds]
 *
 * Prints the median ns per lock+unlock pair of each. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

typedef int (*lock_fn)(void *);
typedef void (*enable_fn)(bool);

struct build {
    const char *path;
    lock_fn lock, unlock;
    enable_fn enable;  /* NULL in a build without lock-order checking */
};

static void load(struct build *b) {
    /* RTLD_LOCAL + RTLD_DEEPBIND: two copies of the same library side by side. */
    void *handle = dlopen(b->path, RTLD_NOW | RTLD_LOCAL | RTLD_DEEPBIND);
    if (handle == NULL) { fprintf(stderr, "%s\n", dlerror()); exit(2); }
    b->lock = (lock_fn)(uintptr_t)dlsym(handle, "sync_mutex_lock");
    b->unlock = (lock_fn)(uintptr_t)dlsym(handle, "sync_mutex_unlock");
    b->enable = (enable_fn)(uintptr_t)dlsym(handle, "sync_debug_lock_order");
    if (b->lock == NULL || b->unlock == NULL) { fprintf(stderr, "%s: no sync_mutex_lock\n", b->path); exit(2); }
}

static double now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e9 + ts.tv_nsec;
}

static _Alignas(64) uint32_t word, outer;

/* ns per lock+unlock pair over `n` pairs (holding `outer` around them if `nested`). */
static double sample(const struct build *b, long n, bool nested) {
    if (nested) b->lock(&outer);
    double start = now_ns();
    for (long i = 0; i < n; i++) {
        b->lock(&word);
        b->unlock(&word);
    }
    double took = (now_ns() - start) / n;
    if (nested) b->unlock(&outer);
    return took;
}

static int compare(const void *x, const void *y) {
    double a = *(const double *)x, b = *(const double *)y;
    return a < b ? -1 : a > b;
}

static double median(double *v, int n) {
    qsort(v, (size_t)n, sizeof *v, compare);
    return v[n / 2];
}

int main(int argc, char **argv) {
    if (argc < 3) { fprintf(stderr, "usage: %s OLD/libsync.so NEW/libsync.so [rounds]\n", argv[0]); return 2; }
    struct build a = {argv[1], 0, 0, 0}, b = {argv[2], 0, 0, 0};
    load(&a);
    load(&b);
    int rounds = argc > 3 ? atoi(argv[3]) : 31;
    if (rounds < 1 || rounds > 1000) rounds = 31;
    const long pairs = 2000000;
    double *ta = malloc(sizeof(double) * (size_t)rounds), *tb = malloc(sizeof(double) * (size_t)rounds);
    sample(&a, pairs, false);  /* warm up both */
    sample(&b, pairs, false);
    for (int r = 0; r < rounds; r++) {
        if (r % 2 == 0) { ta[r] = sample(&a, pairs, false); tb[r] = sample(&b, pairs, false); }
        else { tb[r] = sample(&b, pairs, false); ta[r] = sample(&a, pairs, false); }
    }
    printf("uncontended lock+unlock, checking off: A %s %.2f ns, B %s %.2f ns (median of %d, taking turns)\n",
           a.path, median(ta, rounds), b.path, median(tb, rounds), rounds);
    if (b.enable != NULL) {
        const long on_pairs = 200000;
        b.enable(true);
        sample(&b, on_pairs, true);  /* records the one order outer -> word */
        for (int r = 0; r < rounds; r++) ta[r] = sample(&b, on_pairs, false);
        for (int r = 0; r < rounds; r++) tb[r] = sample(&b, on_pairs, true);
        b.enable(false);
        printf("checking on (B): %.1f ns per lock+unlock alone, %.1f ns holding another lock\n",
               median(ta, rounds), median(tb, rounds));
    }
    free(ta);
    free(tb);
    return 0;
}

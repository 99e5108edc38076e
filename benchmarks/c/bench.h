/* The C benchmark harness: run a loop body on N threads, take the median of several runs, print
 * a table of ns/op, Mops/s and the ratio to a peer measured in the same run.
 *
 *   BENCH_BODY(add_libsync, static int32_t v, OSAtomicAdd32(1, &v));
 *   bench_row rows[] = { BENCH_ROW("libsync OSAtomicAdd32", add_libsync, NULL), ... };
 *   bench_table("OSAtomicAdd32", rows, 3, threads, iterations, baseline_index);
 *
 * Times are wall-clock from a barrier that releases all threads together to the last join,
 * divided by the total number of operations (one thread: the process's CPU time over that span,
 * so that what other processes of a shared machine run meanwhile is not counted): for contended cases that is the cost per
 * operation of the whole machine, so more threads on 2 cores is not "faster".
 *
 * Environment (set by benchmarks/run.sh): BENCH_ROWS, a file to which each table row is also
 * appended as one JSON line (read by benchmarks/report.py); BENCH_QUICK, a smoke run: 3 runs
 * per row, a tenth of the iterations or duration; BENCH_ONLY, a substring of the tables to run. */
#ifndef BENCH_H
#define BENCH_H
#define _GNU_SOURCE
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#ifndef BENCH_REPEATS
#define BENCH_REPEATS 7
#endif
/* Contended runs swing with the scheduler of this 2-vCPU machine: more, shorter samples. */
#ifndef BENCH_TIMED_REPEATS
#define BENCH_TIMED_REPEATS 21
#endif

struct bench_ctx {
    long iterations;
    pthread_barrier_t *start;
    void *arg;
    int index;
};

/* Defines `static void *name(void *)`: `setup` runs once per thread, `op` `iterations` times. */
#define BENCH_BODY(name, setup, op)                                          \
    static void *name(void *bench_p) {                                       \
        struct bench_ctx *bench_c = bench_p;                                 \
        void *arg = bench_c->arg; (void)arg;                                 \
        setup;                                                               \
        pthread_barrier_wait(bench_c->start);                                \
        for (long bench_i = 0; bench_i < bench_c->iterations; bench_i++) { op; } \
        return NULL;                                                         \
    }

typedef struct {
    const char *name;
    void *(*body)(void *);
    void *arg;
    double ns_per_op; /* filled in by bench_table */
} bench_row;
#define BENCH_ROW(name, body, arg) { name, body, arg, 0 }

static double bench_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e9 + ts.tv_nsec;
}

static int bench_compare(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* The process's CPU time, in ns: what one thread alone costs, without the time the scheduler
 * gives other processes of a shared machine (the main thread sleeps in the barrier and join). */
static double bench_cpu_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return ts.tv_sec * 1e9 + ts.tv_nsec;
}

/* One run: wall time / (threads * iterations), in ns; with one thread, CPU time / iterations. */
static double bench_sample(void *(*body)(void *), void *arg, int threads, long iterations) {
    pthread_barrier_t start;
    pthread_barrier_init(&start, NULL, (unsigned)threads + 1);
    pthread_t *t = calloc((size_t)threads, sizeof *t);
    struct bench_ctx *ctx = calloc((size_t)threads, sizeof *ctx);
    for (int i = 0; i < threads; i++) {
        ctx[i] = (struct bench_ctx){iterations, &start, arg, i};
        pthread_create(&t[i], NULL, body, &ctx[i]);
    }
    double (*clock)(void) = threads == 1 ? bench_cpu_now : bench_now;
    double begin = clock();
    pthread_barrier_wait(&start);
    for (int i = 0; i < threads; i++) pthread_join(t[i], NULL);
    double ns = (clock() - begin) / ((double)threads * (double)iterations);
    pthread_barrier_destroy(&start);
    free(t);
    free(ctx);
    return ns;
}

static double bench_median_of(double *samples, int count) {
    qsort(samples, (size_t)count, sizeof samples[0], bench_compare);
    return samples[count / 2];
}

/* BENCH_QUICK: fewer runs (at most 3) of a tenth of the work, for a smoke run of the whole suite. */
static int bench_quick(void) { return getenv("BENCH_QUICK") != NULL; }
static int bench_runs(int repeats) { return bench_quick() && repeats > 3 ? 3 : repeats; }
static long bench_work(long amount) { return bench_quick() && amount >= 10 ? amount / 10 : amount; }

/* One row as a JSON line in $BENCH_ROWS (if set): the table, thread count, row name, ns per
 * operation, ratio to the baseline, whether it is the baseline, and fairness (or null). */
static void bench_json_string(FILE *out, const char *text) {
    fputc('"', out);
    for (const unsigned char *c = (const unsigned char *)text; *c; c++) {
        if (*c == '"' || *c == '\\') fprintf(out, "\\%c", *c);
        else if (*c < 0x20) fprintf(out, "\\u%04x", *c);
        else fputc(*c, out);
    }
    fputc('"', out);
}
static void bench_emit(const char *title, int threads, const char *row, double ns, double ratio, const double spread[2],
                       int baseline, double fairness) {
    const char *path = getenv("BENCH_ROWS");
    FILE *out = path ? fopen(path, "a") : NULL;
    if (!out) return;
    fputs("{\"table\": ", out); bench_json_string(out, title);
    fprintf(out, ", \"threads\": %d, \"row\": ", threads); bench_json_string(out, row);
    fprintf(out, ", \"ns\": %.6g, \"ratio\": %.6g, \"spread\": [%.6g, %.6g], \"baseline\": %s, \"fairness\": ", ns, ratio,
            spread[0], spread[1], baseline ? "true" : "false");
    if (fairness < 0) fputs("null", out); else fprintf(out, "%.6g", fairness);
    fputs("}\n", out);
    fclose(out);
}

/* The spread of a row's ratio: its lowest and highest over the rounds (this row's run over the
 * baseline's run in the same round). */
static void bench_spread(const double *row, const double *base, int runs, double spread[2]) {
    spread[0] = spread[1] = row[0] / base[0];
    for (int r = 1; r < runs; r++) {
        double ratio = row[r] / base[r];
        if (ratio < spread[0]) spread[0] = ratio;
        if (ratio > spread[1]) spread[1] = ratio;
    }
}

/* A row of bench_server_table: `op` is one whole operation against a server. */
typedef struct { const char *name; void (*op)(void); double *samples; } bench_server_row;

/* Every call timed alone, the rows taking turns in blocks of 50 calls (a round trip's cost on a
 * VM swings with where the client and the server run: turns expose every row to the same swings;
 * blocks keep each row's server process busy during its turn, as a loop of one row would); each
 * row's median call and its spread (10th...90th percentile), and its ratio to rows[0]. Names are
 * printed `name_width` wide. */
enum { BENCH_SERVER_BLOCK = 50 };
static void bench_server_table(const char *title, bench_server_row *rows, int count, long calls, int name_width) {
    for (int i = 0; i < count; i++) rows[i].samples = calloc((size_t)calls, sizeof(double));
    for (long block = 0; block < calls; block += BENCH_SERVER_BLOCK)
        for (int i = 0; i < count; i++)
            for (long n = block; n < block + BENCH_SERVER_BLOCK && n < calls; n++) {
                double begin = bench_now();
                rows[i].op();
                rows[i].samples[n] = bench_now() - begin;
            }
    printf("\n%s — median of %ld calls, in turns of %d (spread: 10th...90th percentile)\n", title, calls,
           BENCH_SERVER_BLOCK);
    printf("  %-*s %10s %21s %8s\n", name_width, "", "µs/op", "spread", "ratio");
    double base = 0;
    for (int i = 0; i < count; i++) {
        qsort(rows[i].samples, (size_t)calls, sizeof(double), bench_compare);
        double median = rows[i].samples[calls / 2];
        if (i == 0) base = median;
        printf("  %-*s %10.1f %10.1f...%-8.1f %7.2fx\n", name_width, rows[i].name, median / 1e3,
               rows[i].samples[calls / 10] / 1e3, rows[i].samples[calls * 9 / 10] / 1e3, median / base);
        double spread[2] = {median / base, median / base};  /* one sample set: no per-round spread */
        bench_emit(title, 1, rows[i].name, median, median / base, spread, i == 0, -1);  /* into RESULTS.md */
        free(rows[i].samples);
    }
    fflush(stdout);
}

/* Measures every row (interleaved with the others, so drift hits all alike) and prints them
 * with the ratio to rows[baseline]: ratio > 1 means slower than the baseline. */
static int bench_selected(const char *title);
static void bench_table(const char *title, bench_row *rows, int count, int threads, long iterations, int baseline) {
    if (!bench_selected(title)) return;
    int runs = bench_runs(BENCH_REPEATS);
    iterations = bench_work(iterations);
    double (*samples)[BENCH_REPEATS] = calloc((size_t)count, sizeof *samples);
    for (int r = 0; r < runs; r++)  /* round-robin: each round runs every row once */
        for (int i = 0; i < count; i++) samples[i][r] = bench_sample(rows[i].body, rows[i].arg, threads, iterations);
    double (*spread)[2] = calloc((size_t)count, sizeof *spread);
    for (int i = 0; i < count; i++) bench_spread(samples[i], samples[baseline], runs, spread[i]);
    for (int i = 0; i < count; i++) rows[i].ns_per_op = bench_median_of(samples[i], runs);
    free(samples);
    printf("\n%s — %d thread%s, median of %d runs\n", title, threads, threads == 1 ? "" : "s", runs);
    printf("  %-44s %10s %10s %10s %13s\n", "", "ns/op", "Mops/s", "ratio", "ratio range");
    for (int i = 0; i < count; i++) {
        double ratio = rows[i].ns_per_op / rows[baseline].ns_per_op;
        printf("  %-44s %10.2f %10.1f %9.2fx %6.2f-%-6.2f%s\n", rows[i].name, rows[i].ns_per_op, 1e3 / rows[i].ns_per_op,
               ratio, spread[i][0], spread[i][1], i == baseline ? "  (baseline)" : "");
        bench_emit(title, threads, rows[i].name, rows[i].ns_per_op, ratio, spread[i], i == baseline, -1);
    }
    free(spread);
    fflush(stdout);
}
#endif

/* ---- Fixed-duration mode: throughput and fairness (min/max operations per thread) ----
 *
 *   BENCH_TIMED_BODY(name, setup, op);   each thread runs `op` until told to stop
 *   bench_timed_table("title", rows, count, threads, milliseconds, baseline);
 *
 * Prints ns/op (wall time / all operations), Mops/s, the ratio to the baseline, and the
 * fairness: the fewest operations any thread made divided by the most (1.0: all equal; 0: a
 * thread starved), each the median of BENCH_TIMED_REPEATS runs, interleaved round-robin with the other rows. */
struct bench_timed_ctx {
    volatile int *stop;
    pthread_barrier_t *start;
    void *arg;
    int index;
    long ops; /* out */
};

#define BENCH_TIMED_BODY(name, setup, op)                                    \
    static void *name(void *bench_p) {                                       \
        struct bench_timed_ctx *bench_c = bench_p;                           \
        void *arg = bench_c->arg; (void)arg;                                 \
        long bench_n = 0;                                                    \
        setup;                                                               \
        pthread_barrier_wait(bench_c->start);                                \
        while (!__atomic_load_n(bench_c->stop, __ATOMIC_RELAXED)) { op; bench_n++; } \
        bench_c->ops = bench_n;                                              \
        return NULL;                                                         \
    }

/* One timed run: ns per operation (wall time / all operations) and fairness. */
static void bench_timed_run(void *(*body)(void *), void *arg, int threads, int milliseconds, double *ns, double *fair) {
    volatile int stop = 0;
    pthread_barrier_t start;
    pthread_barrier_init(&start, NULL, (unsigned)threads + 1);
    pthread_t *t = calloc((size_t)threads, sizeof *t);
    struct bench_timed_ctx *ctx = calloc((size_t)threads, sizeof *ctx);
    for (int i = 0; i < threads; i++) {
        ctx[i] = (struct bench_timed_ctx){&stop, &start, arg, i, 0};
        pthread_create(&t[i], NULL, body, &ctx[i]);
    }
    pthread_barrier_wait(&start);
    double begin = bench_now();
    struct timespec nap = {milliseconds / 1000, (milliseconds % 1000) * 1000000L};
    nanosleep(&nap, NULL);
    __atomic_store_n(&stop, 1, __ATOMIC_RELAXED);
    for (int i = 0; i < threads; i++) pthread_join(t[i], NULL);
    double elapsed = bench_now() - begin;
    long total = 0, least = -1, most = 0;
    for (int i = 0; i < threads; i++) {
        total += ctx[i].ops;
        if (least < 0 || ctx[i].ops < least) least = ctx[i].ops;
        if (ctx[i].ops > most) most = ctx[i].ops;
    }
    *ns = total ? elapsed / (double)total : 1e9;
    *fair = most ? (double)least / (double)most : 0;
    pthread_barrier_destroy(&start);
    free(t);
    free(ctx);
}

/* Whether to run a table: BENCH_ONLY, if set, is a substring its title must contain. */
static int bench_selected(const char *title) {
    const char *only = getenv("BENCH_ONLY");
    return only == NULL || strstr(title, only) != NULL;
}

__attribute__((unused)) static void bench_timed_table(const char *title, bench_row *rows, int count, int threads, int milliseconds, int baseline) {
    if (!bench_selected(title)) return;
    int runs = bench_runs(BENCH_TIMED_REPEATS);
    milliseconds = (int)bench_work(milliseconds);
    double (*ns)[BENCH_TIMED_REPEATS] = calloc((size_t)count, sizeof *ns);
    double (*fairness)[BENCH_TIMED_REPEATS] = calloc((size_t)count, sizeof *fairness);
    double *fair = calloc((size_t)count, sizeof *fair);
    for (int r = 0; r < runs; r++)  /* round-robin, as bench_table: drift hits all rows alike */
        for (int i = 0; i < count; i++)
            bench_timed_run(rows[i].body, rows[i].arg, threads, milliseconds, &ns[i][r], &fairness[i][r]);
    double (*spread)[2] = calloc((size_t)count, sizeof *spread);
    for (int i = 0; i < count; i++) bench_spread(ns[i], ns[baseline], runs, spread[i]);
    for (int i = 0; i < count; i++) {
        rows[i].ns_per_op = bench_median_of(ns[i], runs);
        fair[i] = bench_median_of(fairness[i], runs);
    }
    free(ns);
    free(fairness);
    printf("\n%s — %d thread%s, %d ms, median of %d runs\n", title, threads, threads == 1 ? "" : "s",
           milliseconds, runs);
    printf("  %-44s %10s %10s %10s %13s %10s\n", "", "ns/op", "Mops/s", "ratio", "ratio range", "min/max");
    for (int i = 0; i < count; i++) {
        double ratio = rows[i].ns_per_op / rows[baseline].ns_per_op;
        printf("  %-44s %10.2f %10.1f %9.2fx %6.2f-%-6.2f %10.2f%s\n", rows[i].name, rows[i].ns_per_op,
               1e3 / rows[i].ns_per_op, ratio, spread[i][0], spread[i][1], fair[i], i == baseline ? "  (baseline)" : "");
        bench_emit(title, threads, rows[i].name, rows[i].ns_per_op, ratio, spread[i], i == baseline, fair[i]);
    }
    fflush(stdout);
    free(spread);
    free(fair);
}

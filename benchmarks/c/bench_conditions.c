/* Conditions: signal with no waiter, a ping-pong hand-off between two threads through a
 * condition, and semaphore wait+signal — libsync beside pthread_cond and sem_t. */
#include "bench.h"
#include <semaphore.h>
#include <sync.h>

static _Alignas(64) pthread_cond_t pcond = PTHREAD_COND_INITIALIZER;
static _Alignas(64) pthread_mutex_t pmutex = PTHREAD_MUTEX_INITIALIZER;
static _Alignas(64) sync_cond_t cond = SYNC_COND_INIT;
static _Alignas(64) sync_mutex_t mutex = SYNC_MUTEX_INIT;
static _Alignas(64) sync_condition_t condition = SYNC_CONDITION_INIT;
static _Alignas(64) sem_t psem;
static _Alignas(64) sync_semaphore_t sem = SYNC_SEMAPHORE_INIT(1);
static volatile int turn_p, turn_s, turn_c;

BENCH_BODY(signal_pthread, , pthread_cond_signal(&pcond))
BENCH_BODY(signal_libsync, , sync_cond_signal(&cond))
BENCH_BODY(broadcast_pthread, , pthread_cond_broadcast(&pcond))
BENCH_BODY(broadcast_libsync, , sync_cond_broadcast(&cond))

/* Ping-pong: thread i waits for its turn, passes it to the other, signals. One op = one hand-off. */
BENCH_BODY(pingpong_pthread, int me = bench_c->index,
           pthread_mutex_lock(&pmutex);
           while (turn_p != me) pthread_cond_wait(&pcond, &pmutex);
           turn_p = 1 - me; pthread_cond_signal(&pcond); pthread_mutex_unlock(&pmutex))
BENCH_BODY(pingpong_libsync, int me = bench_c->index,
           sync_mutex_lock(&mutex);
           while (turn_s != me) sync_cond_wait(&cond, &mutex);
           turn_s = 1 - me; sync_cond_signal(&cond); sync_mutex_unlock(&mutex))
BENCH_BODY(pingpong_condition, int me = bench_c->index,
           sync_condition_enter(&condition);
           while (turn_c != me) sync_condition_wait(&condition);
           turn_c = 1 - me; sync_condition_signal(&condition); sync_condition_exit(&condition))

BENCH_BODY(sem_posix, , sem_wait(&psem); sem_post(&psem))
BENCH_BODY(sem_libsync, , sync_semaphore_wait(&sem); sync_semaphore_signal(&sem, 1))

int main(int argc, char **argv) {
    long scale = argc > 1 ? atol(argv[1]) : 1;
    sem_init(&psem, 0, 1);
    bench_row signal_rows[] = {BENCH_ROW("pthread_cond_signal", signal_pthread, NULL),
                               BENCH_ROW("libsync sync_cond_signal", signal_libsync, NULL),
                               BENCH_ROW("pthread_cond_broadcast", broadcast_pthread, NULL),
                               BENCH_ROW("libsync sync_cond_broadcast", broadcast_libsync, NULL)};
    bench_table("Condition signal with no waiter", signal_rows, 4, 1, 5000000L * scale, 0);
    bench_row pingpong[] = {BENCH_ROW("pthread_mutex + pthread_cond", pingpong_pthread, NULL),
                            BENCH_ROW("libsync sync_mutex + sync_cond", pingpong_libsync, NULL),
                            BENCH_ROW("libsync sync_condition (NSCondition)", pingpong_condition, NULL)};
    bench_table("Ping-pong hand-off between two threads through a condition", pingpong, 3, 2, 50000L * scale, 0);
    for (int threads = 1; threads <= 8; threads *= 2) {
        if (threads == 4) continue;
        bench_row sems[] = {BENCH_ROW("POSIX sem_wait + sem_post", sem_posix, NULL),
                            BENCH_ROW("libsync semaphore wait + signal", sem_libsync, NULL)};
        bench_table("Semaphore wait+signal (count 1: a binary semaphore)", sems, 2, threads, 1000000L * scale / threads, 0);
    }
    return 0;
}

/* The names kept for compatibility (CONTRIBUTING.md, "Names"): each old name still links,
 * through its own symbol, and does what its replacement does. Every other test uses the new
 * names; this one calls the old ones on purpose, so it silences their deprecation warnings. */
#include "check.h"
#include <sync.h>
#include <errno.h>
#include <signal.h>
#include <stdint.h>

#pragma GCC diagnostic ignored "-Wdeprecated-declarations"

static void mutexes(void) {
    sync_mutex_t m = SYNC_MUTEX_INIT;
    CHECK_EQ(sync_mutex_trylock(&m), 0);
    CHECK_EQ(sync_mutex_is_owner(&m), 1);
    CHECK_EQ(sync_mutex_trylock(&m), EBUSY);
    CHECK_EQ(sync_mutex_trylock_first(&m), EBUSY);
    CHECK_EQ(sync_mutex_timedlock(&m, 1000), EDEADLK);
    CHECK_EQ(sync_mutex_unlock(&m), 0);
    CHECK_EQ(sync_mutex_trylock_first(&m), 0);
    CHECK_EQ(sync_mutex_unlock(&m), 0);
    CHECK_EQ(sync_mutex_timedlock(&m, 1000), 0);
    CHECK_EQ(sync_mutex_unlock(&m), 0);
    CHECK_EQ(sync_mutex_is_locked(&m), 0);
    CHECK_EQ(sync_mutex_trylock(NULL), EINVAL);

    sync_recursive_lock_t r = SYNC_RECURSIVE_LOCK_INIT;
    CHECK_EQ(sync_recursive_lock_trylock(&r), 0);
    CHECK_EQ(sync_recursive_lock_trylock_first(&r), 0);
    CHECK_EQ(sync_recursive_lock_timedlock(&r, 1000), 0);
    CHECK_EQ(sync_recursive_lock_depth(&r), 3);
    for (int i = 0; i < 3; i++) CHECK_EQ(sync_recursive_lock_unlock(&r), 0);
    CHECK_EQ(sync_recursive_lock_unlock(&r), EPERM);

    sync_spinlock_t s = SYNC_SPINLOCK_INIT;
    CHECK_EQ(sync_spinlock_trylock(&s), 0);
    CHECK_EQ(sync_spinlock_trylock(&s), EBUSY);
    CHECK_EQ(sync_spinlock_trylock_first(&s), EBUSY);
    CHECK_EQ(sync_spinlock_unlock(&s), 0);
    CHECK_EQ(sync_spinlock_trylock_first(&s), 0);
    CHECK_EQ(sync_spinlock_unlock(&s), 0);
}

static void rwlocks(void) {
    sync_rwlock_t rw = SYNC_RWLOCK_INIT;
    CHECK_EQ(sync_rwlock_tryrdlock(&rw), 0);
    CHECK_EQ(sync_rwlock_tryrdlock_first(&rw), 0);
    CHECK_EQ(sync_rwlock_timedrdlock(&rw, 1000), 0);
    CHECK_EQ(sync_rwlock_trywrlock(&rw), EBUSY);
    CHECK_EQ(sync_rwlock_trywrlock_first(&rw), EBUSY);
    CHECK_EQ(sync_rwlock_timedwrlock(&rw, 1000), ETIMEDOUT);  /* readers hold it, the caller among them */
    for (int i = 0; i < 3; i++) CHECK_EQ(sync_rwlock_rdunlock(&rw), 0);
    CHECK_EQ(sync_rwlock_trywrlock(&rw), 0);
    CHECK_EQ(sync_rwlock_wrunlock(&rw), 0);
    CHECK_EQ(sync_rwlock_trywrlock_first(&rw), 0);
    CHECK_EQ(sync_rwlock_wrunlock(&rw), 0);
    CHECK_EQ(sync_rwlock_timedwrlock(&rw, 1000), 0);
    CHECK_EQ(sync_rwlock_wrunlock(&rw), 0);

    CHECK_EQ(sync_rwlock_tryuprdlock(&rw), 0);
    CHECK_EQ(sync_rwlock_tryupgrade(&rw), 0);
    CHECK_EQ(sync_rwlock_wrunlock(&rw), 0);
    CHECK_EQ(sync_rwlock_tryuprdlock_first(&rw), 0);
    CHECK_EQ(sync_rwlock_timedupgrade(&rw, 1000), 0);
    CHECK_EQ(sync_rwlock_wrunlock(&rw), 0);
    CHECK_EQ(sync_rwlock_timeduprdlock(&rw, 1000), 0);
    CHECK_EQ(sync_rwlock_tryuprdlock(&rw), EBUSY);
    CHECK_EQ(sync_rwlock_uprdunlock(&rw), 0);
    CHECK_EQ(sync_rwlock_trywrlock(&rw), 0);
    CHECK_EQ(sync_rwlock_wrunlock(&rw), 0);
}

static void conditions(void) {
    sync_mutex_t m = SYNC_MUTEX_INIT;
    sync_cond_t cv = SYNC_COND_INIT;
    CHECK_EQ(sync_mutex_lock(&m), 0);
    CHECK_EQ(sync_cond_timedwait(&cv, &m, 1000), ETIMEDOUT);
    CHECK_EQ(sync_mutex_is_owner(&m), 1);  /* taken again after the wait */
    CHECK_EQ(sync_mutex_unlock(&m), 0);

    /* sync_condition_t: lock, trylock, lock_interruptible and unlock became enter, try_enter,
     * enter_interruptible and exit (the old names read as sync_condition_lock_t's). */
    sync_condition_t c = SYNC_CONDITION_INIT;
    CHECK_EQ(sync_condition_lock(&c), 0);
    CHECK_EQ(sync_condition_trylock(&c), EBUSY);
    CHECK_EQ(sync_condition_lock_interruptible(&c, -1), EDEADLK);
    CHECK_EQ(sync_condition_timedwait(&c, 1000), ETIMEDOUT);
    CHECK_EQ(sync_condition_unlock(&c), 0);
    CHECK_EQ(sync_condition_unlock(&c), EPERM);
    CHECK_EQ(sync_condition_trylock(&c), 0);
    CHECK_EQ(sync_condition_unlock(&c), 0);
    CHECK_EQ(sync_condition_lock_interruptible(&c, -1), 0);
    CHECK_EQ(sync_condition_unlock(&c), 0);

    sync_condition_lock_t l = SYNC_CONDITION_LOCK_INIT(1);
    CHECK_EQ(sync_condition_lock_trylock_when(&l, 2), EBUSY);
    CHECK_EQ(sync_condition_lock_trylock_when_first(&l, 2), EBUSY);
    CHECK_EQ(sync_condition_lock_timedlock_when(&l, 2, 1000), ETIMEDOUT);
    CHECK_EQ(sync_condition_lock_trylock_when(&l, 1), 0);
    CHECK_EQ(sync_condition_lock_trylock(&l), EBUSY);
    CHECK_EQ(sync_condition_lock_unlock_with(&l, 2), 0);
    CHECK_EQ(sync_condition_lock_timedlock_when(&l, 2, 1000), 0);
    CHECK_EQ(sync_condition_lock_unlock(&l), 0);
    CHECK_EQ(sync_condition_lock_trylock_when_first(&l, 2), 0);
    CHECK_EQ(sync_condition_lock_unlock(&l), 0);
    CHECK_EQ(sync_condition_lock_trylock(&l), 0);
    CHECK_EQ(sync_condition_lock_unlock(&l), 0);
    CHECK_EQ(sync_condition_lock_trylock_first(&l), 0);
    CHECK_EQ(sync_condition_lock_unlock(&l), 0);

    sync_semaphore_t sem = SYNC_SEMAPHORE_INIT(1);
    CHECK_EQ(sync_semaphore_trywait(&sem), 0);
    CHECK_EQ(sync_semaphore_trywait(&sem), EAGAIN);
    CHECK_EQ(sync_semaphore_timedwait(&sem, 1000), ETIMEDOUT);
    CHECK_EQ(sync_semaphore_signal(&sem, 1), 0);
    CHECK_EQ(sync_semaphore_timedwait(&sem, 1000), 0);
    CHECK_EQ(sync_semaphore_value(&sem), 0);

    sync_event_t e = SYNC_EVENT_INIT;
    CHECK_EQ(sync_event_timedwait(&e, 1000), ETIMEDOUT);
    CHECK_EQ(sync_event_set(&e), 0);
    CHECK_EQ(sync_event_timedwait(&e, 1000), 0);

    sync_barrier_t b = SYNC_BARRIER_INIT(1);
    uint32_t index = 7;
    CHECK(sync_barrier_timedwait(&b, 1000, &index) == sync_barrier_wait_timed(&b, 1000, &index));
    CHECK_EQ(index, 0);
}

/* The old type names are the same types. */
static void queues(void) {
    sync_queue *q = NULL;
    sync_queue_t *q2;
    CHECK_EQ(sync_queue_create(&q, "deprecated", SYNC_QUEUE_SERIAL), 0);
    q2 = q;
    CHECK_EQ(sync_queue_destroy(q2), 0);
    sync_executor *x = NULL;
    CHECK_EQ(sync_executor_create(&x), 0);
    CHECK_EQ(sync_executor_destroy((sync_executor_t *)x), 0);
    sync_isolated *v = NULL;
    int value = 0;
    CHECK_EQ(sync_isolated_create(&v, &value), 0);
    CHECK_EQ(sync_isolated_destroy((sync_isolated_t *)v), 0);
}

/* ... as are the old names of debug.h's, signals.h's and async.h's types (a mismatch fails to compile). */
static size_t old_site_hook(char *buffer, size_t size, void *context) { (void)buffer; (void)size; (void)context; return 0; }

static void debug_types(void) {
    sync_lock_order_site_hook hook = old_site_hook;
    sync_lock_order_site_hook_fn same = hook;
    sync_debug_lock_order_set_site_hook(hook, NULL);
    sync_debug_lock_order_set_site_hook(NULL, NULL);
    CHECK(same == old_site_hook);
    sync_lock_order_edge edge = {0};
    sync_lock_order_edge_t *edge_t = &edge;
    sync_lock_order_cycle cycle = {1, edge_t, "text"};
    const sync_lock_order_cycle_t *cycle_t = &cycle;
    CHECK(cycle_t->edges == &edge);
    sync_lock_order_handler handler = NULL;
    sync_lock_order_handler_fn handler_fn = handler;
    sync_lock_order_thread_hook thread_hook = NULL;
    sync_lock_order_thread_hook_fn thread_hook_fn = thread_hook;
    sync_signal_target target = {NULL, NULL, NULL, NULL};
    const sync_signal_target_t *target_t = &target;
    sync_signal_info info = {0};
    sync_signal_info_t *info_t = &info;
    CHECK(target_t->handler == NULL && info_t->signo == 0);
    CHECK_EQ(sync_signal_route(SIGUSR1, &target), EINVAL);  /* no place, no handler: as with the new name */
    sync_async_callback_t callback = NULL;
    sync_async_callback_fn callback_fn = callback;
    CHECK(handler_fn == NULL && thread_hook_fn == NULL && callback_fn == NULL);
}

int main(void) {
    mutexes();
    rwlocks();
    conditions();
    queues();
    debug_types();
    DONE();
}

/* sync_layout(): its arguments, and each reported word read as the header says it reads, in
 * the states the primitives' own functions put it in. */
#define _GNU_SOURCE
#include <sync.h>
#include <errno.h>
#include <string.h>
#include <unistd.h>
#include "check.h"

static sync_layout_t layout;

/* The 32-bit word at byte `offset` of `memory`. */
static uint32_t word_at(const void *memory, uint32_t offset) {
    uint32_t value;
    CHECK_EQ(offset % 4, 0);
    memcpy(&value, (const char *)memory + offset, sizeof value);
    return value;
}

static void arguments(void) {
    sync_layout_t prefix;
    CHECK_EQ(sync_layout(&layout, sizeof layout), 0);
    CHECK_EQ(sync_layout(NULL, sizeof layout), EINVAL);
    CHECK_EQ(sync_layout(&prefix, sizeof prefix + 4), EINVAL);  /* a header newer than the library */
    CHECK_EQ(sync_layout(&prefix, 6), EINVAL);
    /* An older header's smaller struct gets its fields; nothing past them is written. */
    memset(&prefix, 0xA5, sizeof prefix);
    CHECK_EQ(sync_layout(&prefix, 2 * sizeof(uint32_t)), 0);
    CHECK_EQ(prefix.mutex_robust, layout.mutex_robust);
    CHECK_EQ(prefix.mutex_unowned_held, layout.mutex_unowned_held);
    CHECK_EQ(prefix.recursive_depth_offset, 0xA5A5A5A5u);
    CHECK_EQ(sync_layout(&prefix, 0), 0);
}

static void mutexes(void) {
    sync_mutex_t unowned, plain;
    sync_robust_mutex_t robust;
    CHECK_EQ(sync_mutex_init(&unowned, SYNC_MUTEX_UNOWNED), 0);
    CHECK(word_at(&unowned, 0) != layout.mutex_unowned_held);
    CHECK_EQ(sync_mutex_lock(&unowned), 0);
    CHECK_EQ(word_at(&unowned, 0), layout.mutex_unowned_held);
    CHECK_EQ(sync_mutex_unlock(&unowned), 0);
    CHECK(word_at(&unowned, 0) != layout.mutex_unowned_held);

    /* The contract the header states beside the layout: a held private mutex reads its holder's id. */
    CHECK_EQ(sync_mutex_init(&plain, 0), 0);
    CHECK_EQ(sync_mutex_lock(&plain), 0);
    CHECK_EQ(word_at(&plain, 0), (uint32_t)gettid());
    CHECK_EQ(word_at(&plain, 0) & layout.mutex_robust, 0);
    CHECK_EQ(sync_mutex_unlock(&plain), 0);

    CHECK_EQ(sync_mutex_init(&robust.mutex, SYNC_MUTEX_ROBUST), 0);
    CHECK(word_at(&robust, 0) & layout.mutex_robust);
    CHECK_EQ(sync_mutex_lock(&robust.mutex), 0);
    CHECK(word_at(&robust, 0) & layout.mutex_robust);
    CHECK_EQ(sync_mutex_unlock(&robust.mutex), 0);
}

static void recursive_depths(void) {
    sync_recursive_lock_t plain;
    sync_robust_mutex_t robust;
    CHECK_EQ(sync_recursive_lock_init(&plain, 0), 0);
    CHECK_EQ(sync_recursive_lock_init(&robust.recursive, SYNC_MUTEX_ROBUST), 0);
    for (uint32_t depth = 1; depth <= 3; depth++) {
        CHECK_EQ(sync_recursive_lock_lock(&plain), 0);
        CHECK_EQ(sync_recursive_lock_lock(&robust.recursive), 0);
        CHECK_EQ(word_at(&plain, layout.recursive_depth_offset), depth);
        CHECK_EQ(word_at(&robust, layout.robust_recursive_depth_offset), depth);
    }
    for (int i = 0; i < 3; i++) {
        CHECK_EQ(sync_recursive_lock_unlock(&plain), 0);
        CHECK_EQ(sync_recursive_lock_unlock(&robust.recursive), 0);
    }
    CHECK_EQ(word_at(&plain, layout.recursive_depth_offset), 0);
    CHECK_EQ(word_at(&robust, layout.robust_recursive_depth_offset), 0);
}

static void condition_waiters(void) {
    sync_cond_t cond = SYNC_COND_INIT;
    sync_cond_waiter_t first = SYNC_COND_WAITER_INIT, second = SYNC_COND_WAITER_INIT;
    CHECK_EQ(layout.cond_waiter_size, sizeof(sync_cond_waiter_t));
    CHECK_EQ(word_at(&cond, layout.cond_waiters_offset), 0);
    CHECK_EQ(word_at(&first, layout.cond_waiter_state_offset), layout.cond_waiter_idle);
    CHECK_EQ(sync_cond_wait_begin(&cond, &first), 0);
    CHECK_EQ(sync_cond_wait_begin(&cond, &second), 0);
    CHECK_EQ(word_at(&cond, layout.cond_waiters_offset) & layout.cond_waiters_mask, 2);
    CHECK(word_at(&first, layout.cond_waiter_state_offset) != layout.cond_waiter_idle);
    CHECK_EQ(sync_cond_wait_end(&first), ETIMEDOUT);  /* left the queue unsignalled */
    CHECK_EQ(word_at(&first, layout.cond_waiter_state_offset), layout.cond_waiter_idle);
    CHECK_EQ(word_at(&cond, layout.cond_waiters_offset) & layout.cond_waiters_mask, 1);
    CHECK_EQ(sync_cond_wait_end(&second), ETIMEDOUT);
    CHECK_EQ(word_at(&cond, layout.cond_waiters_offset), 0);
}

static void events(void) {
    sync_event_t event = SYNC_EVENT_INIT;
    CHECK_EQ(word_at(&event, layout.event_state_offset) & layout.event_flag, 0);
    CHECK_EQ(sync_event_set(&event), 0);
    CHECK(word_at(&event, layout.event_state_offset) & layout.event_flag);
    CHECK_EQ(sync_event_clear(&event), 0);
    CHECK_EQ(word_at(&event, layout.event_state_offset) & layout.event_flag, 0);
}

static void semaphore_bound(void) {
    sync_semaphore_t sem;
    CHECK_EQ(sync_semaphore_init(&sem, 2, 7, SYNC_SEMAPHORE_BOUNDED), 0);
    CHECK_EQ(word_at(&sem, layout.semaphore_limit_offset), 7);
}

static void once_done(void) {
    sync_once_t once = SYNC_ONCE_INIT;
    CHECK(word_at(&once, 0) != layout.once_done);
    CHECK_EQ(sync_once_begin(&once), SYNC_ONCE_RUN);
    CHECK(word_at(&once, 0) != layout.once_done);
    CHECK_EQ(sync_once_end(&once, 0), 0);  /* failed: not done */
    CHECK(word_at(&once, 0) != layout.once_done);
    CHECK_EQ(sync_once_begin(&once), SYNC_ONCE_RUN);
    CHECK_EQ(sync_once_end(&once, 1), 0);
    CHECK_EQ(word_at(&once, 0), layout.once_done);
    CHECK_EQ(sync_once_begin(&once), 0);
}

/* The header's flags and static initializers are the library's: each flag equals the value
 * sync_layout reports, and each initializer the memory its init function writes. */
static void flags_and_initializers(void) {
    CHECK_EQ(SYNC_MUTEX_SHARED, layout.lock_shared);
    CHECK_EQ(SYNC_RWLOCK_SHARED, layout.lock_shared);
    CHECK_EQ(SYNC_SPINLOCK_SHARED, layout.lock_shared);
    CHECK_EQ(SYNC_MUTEX_UNOWNED, layout.lock_unowned);
    CHECK_EQ(SYNC_MUTEX_ROBUST, layout.lock_robust);
    CHECK(layout.lock_shared && layout.lock_unowned && layout.lock_robust);

    sync_mutex_t mutex, mutex_shared = SYNC_MUTEX_INIT_SHARED, mutex_unowned = SYNC_MUTEX_INIT_UNOWNED;
    memset(&mutex, 0, sizeof mutex);  /* a shared init needs zeroed memory (or a lock nobody uses) */
    CHECK_EQ(sync_mutex_init(&mutex, SYNC_MUTEX_SHARED), 0);
    CHECK_EQ(memcmp(&mutex, &mutex_shared, sizeof mutex), 0);
    CHECK_EQ(sync_mutex_init(&mutex, SYNC_MUTEX_UNOWNED), 0);
    CHECK_EQ(memcmp(&mutex, &mutex_unowned, sizeof mutex), 0);
    sync_recursive_lock_t recursive, recursive_shared = SYNC_RECURSIVE_LOCK_INIT_SHARED;
    memset(&recursive, 0, sizeof recursive);
    CHECK_EQ(sync_recursive_lock_init(&recursive, SYNC_MUTEX_SHARED), 0);
    CHECK_EQ(memcmp(&recursive, &recursive_shared, sizeof recursive), 0);
    sync_robust_mutex_t robust, robust_shared = SYNC_ROBUST_MUTEX_INIT_SHARED;
    memset(&robust, 0, sizeof robust);
    CHECK_EQ(sync_mutex_init(&robust.mutex, SYNC_MUTEX_SHARED | SYNC_MUTEX_ROBUST), 0);
    CHECK_EQ(memcmp(&robust, &robust_shared, 4), 0);  /* the word; the rest is the holder's */
    sync_rwlock_t rwlock, rwlock_shared = SYNC_RWLOCK_INIT_SHARED;
    memset(&rwlock, 0, sizeof rwlock);
    CHECK_EQ(sync_rwlock_init(&rwlock, SYNC_RWLOCK_SHARED), 0);
    CHECK_EQ(memcmp(&rwlock, &rwlock_shared, sizeof rwlock), 0);
    sync_spinlock_t spin, spin_shared = SYNC_SPINLOCK_INIT_SHARED;
    memset(&spin, 0, sizeof spin);
    CHECK_EQ(sync_spinlock_init(&spin, SYNC_SPINLOCK_SHARED), 0);
    CHECK_EQ(memcmp(&spin, &spin_shared, sizeof spin), 0);
}

int main(void) {
    arguments();
    flags_and_initializers();
    mutexes();
    recursive_depths();
    condition_waiters();
    events();
    semaphore_bound();
    once_done();
    DONE();
}

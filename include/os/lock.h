/*
 * os/lock.h — libsync's drop-in replacement for Apple's header: os_unfair_lock.
 *
 * A C or C++ file written for macOS that includes <os/lock.h> compiles unchanged with
 * `-I <libsync>/include` (or `pkg-config --cflags sync`) and links with `-lsync`.
 *
 * os_unfair_lock is a 4-byte mutual-exclusion lock, OS_UNFAIR_LOCK_INIT (all zero) when free.
 * Semantics, as Apple's:
 *   - Unfair: an unlocking thread (or any running one) may take the lock again before a woken
 *     waiter does; throughput over order, so a waiter can starve under constant contention.
 *   - Owned: the word holds the holder's identity (here its Linux thread id, as a PI futex word
 *     does; on Apple its thread port). Only the holder may unlock it.
 *   - Not recursive, no timeout, process-private (not in memory shared between processes).
 *   - Lock and unlock are acquire and release barriers for the memory the lock protects.
 * Contended, a locker spins briefly, then sleeps in the kernel (futex) until an unlock wakes it.
 *
 * Misuse stops the program (abnormal exit, a message on stderr starting "BUG IN CLIENT OF
 * LIBSYNC"), as Apple's does; there is no error code:
 *   - locking a lock the calling thread already holds ("Trying to recursively lock");
 *   - unlocking a lock the calling thread does not hold ("not owned by current thread");
 *   - a failed os_unfair_lock_assert_owner / os_unfair_lock_assert_not_owner;
 *   - flags or options with unknown bits, a NULL lock, a lock word no operation wrote ("corrupt").
 * After fork(), the child's thread still holds the locks its parent thread held (and may unlock
 * them), though its thread id differs.
 *
 * Thread safety: every function may be called concurrently from any thread of the process.
 * Lock-order checking (<sync/debug.h>) sees an os_unfair_lock as a mutex.
 */
#ifndef __OS_LOCK__
#define __OS_LOCK__

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The lock: Apple's layout (one opaque 32-bit word). Initialize with OS_UNFAIR_LOCK_INIT, which
 * is Apple's: from C99 on a compound literal, so that it also assigns (`l = OS_UNFAIR_LOCK_INIT`).
 * GCC accepts it as the initializer of a static lock, but warns under -Wpedantic (clang does
 * not); there, write `static os_unfair_lock l = {0};`. */
typedef struct os_unfair_lock_s {
    uint32_t _os_unfair_lock_opaque;
} os_unfair_lock, *os_unfair_lock_t;

#ifndef OS_UNFAIR_LOCK_INIT
#if defined(__STDC_VERSION__) && __STDC_VERSION__ >= 199901L
#define OS_UNFAIR_LOCK_INIT ((os_unfair_lock){0})
#elif defined(__cplusplus) && __cplusplus >= 201103L
#define OS_UNFAIR_LOCK_INIT (os_unfair_lock{})
#elif defined(__cplusplus)
#define OS_UNFAIR_LOCK_INIT (os_unfair_lock())
#else
#define OS_UNFAIR_LOCK_INIT {0}
#endif
#endif

/* Flags of os_unfair_lock_lock_with_flags (Apple: macOS 15). Hints: libsync's lock always
 * spins briefly before it sleeps, which is what ADAPTIVE_SPIN asks for. */
typedef uint32_t os_unfair_lock_flags_t;
enum {
    OS_UNFAIR_LOCK_FLAG_NONE = 0x00000000,
    OS_UNFAIR_LOCK_FLAG_ADAPTIVE_SPIN = 0x00040000
};

/** Takes the lock, waiting as long as needed. Stops the program if the calling thread already
 *  holds it. */
void os_unfair_lock_lock(os_unfair_lock_t lock);

/** os_unfair_lock_lock with flags (OS_UNFAIR_LOCK_FLAG_*; Apple's options bits of
 *  <os/lock_private.h> are accepted too). Stops the program on unknown bits. */
void os_unfair_lock_lock_with_flags(os_unfair_lock_t lock, os_unfair_lock_flags_t flags);

/** Takes the lock if it is free, without waiting. Returns true if it took it, false if any
 *  thread holds it (the caller included: no stop). Do not retry it in a loop: call
 *  os_unfair_lock_lock. */
#if defined(__GNUC__) || defined(__clang__)
__attribute__((warn_unused_result))
#endif
bool os_unfair_lock_trylock(os_unfair_lock_t lock);

/** Releases the lock and wakes one waiter, if any. Stops the program if the calling thread does
 *  not hold it. */
void os_unfair_lock_unlock(os_unfair_lock_t lock);

/** Returns if the calling thread holds the lock; otherwise (free, or held by another thread)
 *  stops the program. */
void os_unfair_lock_assert_owner(const os_unfair_lock *lock);

/** Returns if the calling thread does not hold the lock; otherwise stops the program. */
void os_unfair_lock_assert_not_owner(const os_unfair_lock *lock);

#ifdef __cplusplus
}
#endif
#endif /* __OS_LOCK__ */

/*
 * os/lock_private.h — Apple's os_unfair_lock SPI that ported code uses: the lock options and
 * os_unfair_lock_lock_with_options. See <os/lock.h> for the lock's semantics.
 *
 * Both options are hints: DATA_SYNCHRONIZATION tells Apple's workqueue not to add threads for
 * lock waiters (Linux has no such pool: nothing to do), ADAPTIVE_SPIN asks to spin while the
 * holder runs (libsync's lock always spins briefly before it sleeps).
 */
#ifndef __OS_LOCK_PRIVATE__
#define __OS_LOCK_PRIVATE__

#include <os/lock.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef uint32_t os_unfair_lock_options_t;
enum {
    OS_UNFAIR_LOCK_NONE = 0x00000000,
    OS_UNFAIR_LOCK_DATA_SYNCHRONIZATION = 0x00010000,
    OS_UNFAIR_LOCK_ADAPTIVE_SPIN = 0x00040000
};

/** os_unfair_lock_lock with options (OS_UNFAIR_LOCK_*, or-ed). Stops the program on unknown
 *  bits, as os_unfair_lock_lock does on a recursive lock. */
void os_unfair_lock_lock_with_options(os_unfair_lock_t lock, os_unfair_lock_options_t options);

#ifdef __cplusplus
}
#endif
#endif /* __OS_LOCK_PRIVATE__ */

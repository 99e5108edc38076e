/* Peers compiled in a separate translation unit, so they are real (non-inlined) calls, as a call
 * into libsync.so is. */
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

__attribute__((noinline)) int32_t peer_add32(int32_t amount, _Atomic int32_t *value) {
    return atomic_fetch_add_explicit(value, amount, memory_order_relaxed) + amount;
}

__attribute__((noinline)) bool peer_cas32(int32_t old, int32_t new_, _Atomic int32_t *value) {
    return atomic_compare_exchange_strong_explicit(value, &old, new_, memory_order_relaxed, memory_order_relaxed);
}

/* A plain test-and-test-and-set spin lock, what OSSpinLock was on Apple's platforms. */
__attribute__((noinline)) void peer_spin_lock(_Atomic int32_t *lock) {
    for (;;) {
        if (!atomic_exchange_explicit(lock, 1, memory_order_acquire)) return;
        while (atomic_load_explicit(lock, memory_order_relaxed)) __builtin_ia32_pause();
    }
}

__attribute__((noinline)) void peer_spin_unlock(_Atomic int32_t *lock) {
    atomic_store_explicit(lock, 0, memory_order_release);
}

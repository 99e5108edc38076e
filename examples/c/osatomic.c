/* Apple's OSAtomic API on libsync: a lock-free LIFO of nodes shared by threads, an OSSpinLock
 * around a short critical section, and Apple's bit numbering for test-and-set. */
#include <libkern/OSAtomic.h>
#include <pthread.h>
#include <stddef.h>
#include <stdio.h>

struct node { struct node *link; int value; };

static OSQueueHead free_list = OS_ATOMIC_QUEUE_INIT;
static struct node nodes[64];
static OSSpinLock lock = OS_SPINLOCK_INIT;
static long total;

static void *worker(void *arg) {
    (void)arg;
    for (int i = 0; i < 10000; i++) {
        struct node *n = OSAtomicDequeue(&free_list, offsetof(struct node, link));
        if (n == NULL) return NULL;            /* never: 4 threads hold at most 4 of 64 nodes */
        OSSpinLockLock(&lock);
        total += n->value;
        OSSpinLockUnlock(&lock);
        OSAtomicEnqueue(&free_list, n, offsetof(struct node, link));   /* back for reuse */
    }
    return NULL;
}

int main(void) {
    for (int i = 0; i < 64; i++) {
        nodes[i].value = 1;
        OSAtomicEnqueue(&free_list, &nodes[i], offsetof(struct node, link));
    }
    pthread_t threads[4];
    for (int i = 0; i < 4; i++) pthread_create(&threads[i], NULL, worker, NULL);
    for (int i = 0; i < 4; i++) pthread_join(threads[i], NULL);
    int left = 0;
    while (OSAtomicDequeue(&free_list, offsetof(struct node, link)) != NULL) left++;

    uint32_t flags = 0;
    bool was_set = OSAtomicTestAndSet(7, &flags);   /* bit 7 is 0x01 of the first byte */
    printf("nodes back in the list: %d, total %ld, flags = %u (was set: %d)\n", left, total,
           (unsigned)flags, was_set);
    return left == 64 && total == 40000 && flags == 1 && !was_set ? 0 : 1;
}

/* Listings 4-3 to 4-6 of Apple's Threading Programming Guide and its NSConditionLock
 * producer/consumer, on libsync's C API. */
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <sync.h>

/* Listings 4-5 and 4-6: a POSIX-style condition and its predicate. */
static sync_mutex_t mutex = SYNC_MUTEX_INIT;
static sync_cond_t condition = SYNC_COND_INIT;
static bool ready_to_go = false;
static int work_done;

static void *MyWaitOnConditionFunction(void *arg) {
    (void)arg;
    sync_mutex_lock(&mutex);
    while (ready_to_go == false)
        sync_cond_wait(&condition, &mutex);
    work_done++; /* Do work. (The mutex should stay locked.) */
    ready_to_go = false;
    sync_mutex_unlock(&mutex);
    return NULL;
}

static void SignalThreadUsingCondition(void) {
    sync_mutex_lock(&mutex);
    ready_to_go = true;
    sync_cond_signal(&condition);
    sync_mutex_unlock(&mutex);
}

/* Listings 4-3 and 4-4: a Cocoa-style condition (lock and condition in one). */
static sync_condition_t cocoaCondition = SYNC_CONDITION_INIT;
static int timeToDoWork, cocoa_done;

static void *CocoaWaiter(void *arg) {
    (void)arg;
    for (int i = 0; i < 3; i++) {
        sync_condition_enter(&cocoaCondition);
        while (timeToDoWork <= 0)
            sync_condition_wait(&cocoaCondition);
        timeToDoWork--;
        cocoa_done++; /* Do real work here. */
        sync_condition_exit(&cocoaCondition);
    }
    return NULL;
}

/* NSConditionLock: the seed's producer and consumer. */
enum { NO_DATA, HAS_DATA };
static sync_condition_lock_t condLock = SYNC_CONDITION_LOCK_INIT(NO_DATA);
static int queue[16], queued, consumed_sum;

static void *Consumer(void *arg) {
    (void)arg;
    for (int taken = 0; taken < 10; taken++) {
        sync_condition_lock_lock_when(&condLock, HAS_DATA);
        int item = queue[--queued];               /* Remove data from the queue. */
        bool isEmpty = queued == 0;
        sync_condition_lock_unlock_with(&condLock, isEmpty ? NO_DATA : HAS_DATA);
        consumed_sum += item;                     /* Process the data locally. */
    }
    return NULL;
}

int main(void) {
    pthread_t waiter;
    pthread_create(&waiter, NULL, MyWaitOnConditionFunction, NULL);
    SignalThreadUsingCondition();
    pthread_join(waiter, NULL);
    printf("Listings 4-5/4-6 (POSIX-style condition): the waiting thread did its work %d time\n", work_done);

    pthread_create(&waiter, NULL, CocoaWaiter, NULL);
    for (int i = 0; i < 3; i++) {
        sync_condition_enter(&cocoaCondition);
        timeToDoWork++;
        sync_condition_signal(&cocoaCondition);
        sync_condition_exit(&cocoaCondition);
    }
    pthread_join(waiter, NULL);
    printf("Listings 4-3/4-4 (Cocoa-style condition): %d units of work done, timeToDoWork = %d\n", cocoa_done, timeToDoWork);

    pthread_create(&waiter, NULL, Consumer, NULL);
    for (int i = 1; i <= 10; i++) {
        sync_condition_lock_lock(&condLock);
        queue[queued++] = i;                      /* Add data to the queue. */
        sync_condition_lock_unlock_with(&condLock, HAS_DATA);
    }
    pthread_join(waiter, NULL);
    printf("NSConditionLock producer/consumer: consumed 1..10, sum %d, condition NO_DATA = %s\n", consumed_sum,
           sync_condition_lock_condition(&condLock) == NO_DATA ? "yes" : "no");
    return !(work_done == 1 && cocoa_done == 3 && consumed_sum == 55);
}

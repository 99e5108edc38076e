/* An epoll loop that waits for a mutex without blocking (sync/async.h): the acquire's eventfd
 * joins the loop's other descriptors. Here a timer plays the part of the rest of the program:
 * it releases the lock that the main thread held, and the loop, woken by the eventfd, then
 * holds the lock itself. */
#define _GNU_SOURCE
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/timerfd.h>
#include <time.h>
#include <unistd.h>

#include <sync.h>

static sync_mutex_t mutex = SYNC_MUTEX_INIT_SHARED;
static int shared_counter;

int main(void) {
    int loop = epoll_create1(EPOLL_CLOEXEC);
    int done = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    int timer = timerfd_create(CLOCK_MONOTONIC, TFD_CLOEXEC | TFD_NONBLOCK);
    struct itimerspec in_10ms = {.it_value = {.tv_nsec = 10000000}};
    timerfd_settime(timer, 0, &in_10ms, NULL);
    struct epoll_event ev = {.events = EPOLLIN, .data.fd = done};
    epoll_ctl(loop, EPOLL_CTL_ADD, done, &ev);
    ev.data.fd = timer;
    epoll_ctl(loop, EPOLL_CTL_ADD, timer, &ev);

    sync_mutex_lock(&mutex);  /* held by this thread until the timer fires */

    sync_async_t *acquire = NULL;
    int rc = sync_mutex_lock_async(&mutex, -1, done, NULL, NULL, &acquire);
    printf("lock_async: %s\n", rc == EINPROGRESS ? "pending" : "taken at once");

    for (int held = rc == 0; !held;) {
        struct epoll_event ready;
        if (epoll_wait(loop, &ready, 1, -1) != 1) continue;
        uint64_t n;
        if (read(ready.data.fd, &n, 8) != 8) continue;
        if (ready.data.fd == timer) {
            printf("timer: the thread releases the lock\n");
            sync_mutex_unlock(&mutex);
        } else if (sync_async_result(acquire) == 0) {
            printf("eventfd: the loop holds the lock\n");
            held = 1;
        }
    }
    shared_counter += 1;  /* the critical section */
    int released = sync_async_unlock(&mutex, acquire);
    sync_async_free(acquire);
    printf("counter %d, released: %d\n", shared_counter, released);
    close(timer);
    close(done);
    close(loop);
    return shared_counter == 1 && released == 0 ? 0 : 1;
}

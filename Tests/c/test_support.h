/* What several C tests share besides check.h: the monotonic clock, a bounded poll for a
 * condition, a watchdog against hangs, and the eventfd completions of sync/async.h. Include it
 * after check.h (a test defines _GNU_SOURCE before its first include). */
#ifndef TEST_SUPPORT_H
#define TEST_SUPPORT_H
#include <poll.h>
#include <signal.h>
#include <stdint.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "check.h"

/* CLOCK_MONOTONIC in ns (the clock of the library's deadlines). */
static inline int64_t now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

/* Polls `cond` every millisecond; fails after 60 s (a guard against hangs, not a timing bound). */
#define WAIT_UNTIL(cond) do { \
    int64_t end_ = now_ns() + 60 * (int64_t)1000000000; \
    while (!(cond)) { CHECK(now_ns() < end_); usleep(1000); } } while (0)

/* The watchdog's message (see watchdog_install). */
static const char *watchdog_message_;
static size_t watchdog_length_;

static inline void watchdog_on_alarm_(int signal) {
    (void)signal;
    if (write(2, watchdog_message_, watchdog_length_) < 0) {}
    _exit(3);
}

/* Makes SIGALRM (an alarm() the test sets) write `message` to stderr and exit 3: a hang
 * becomes a failure with a message. `message` must outlive the process (a string literal). */
static inline void watchdog_install(const char *message) {
    watchdog_message_ = message;
    watchdog_length_ = strlen(message);
    signal(SIGALRM, watchdog_on_alarm_);
}

/* Waits for the eventfd's completion (blocking read: the test's thread may block). */
static inline void await_completion(int efd) {
    uint64_t n = 0;
    CHECK_EQ(read(efd, &n, 8), 8);
    CHECK(n >= 1);
}

/* Whether the eventfd has a completion to read now. */
static inline int readable(int efd) {
    struct pollfd p = {.fd = efd, .events = POLLIN};
    return poll(&p, 1, 0) == 1;
}
#endif

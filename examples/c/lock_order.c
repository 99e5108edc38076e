/* Lock-order checking: two threads take two mutexes in opposite orders, one after the other,
 * so nothing deadlocks, and libsync still reports the potential deadlock with both sites. */
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <sync.h>

static sync_mutex_t accounts = SYNC_MUTEX_INIT, audit_log = SYNC_MUTEX_INIT;
static int cycles;

static void on_cycle(const sync_lock_order_cycle_t *cycle, void *context) {
    (void)context;
    cycles++;
    printf("potential deadlock among %zu locks:\n", cycle->length);
    for (size_t i = 0; i < cycle->length; i++) {
        const sync_lock_order_edge_t *edge = &cycle->edges[i];
        const char *end = strchr(edge->site, '\n');  /* the innermost frame outside libsync */
        printf("  %s %s -> %s %s (thread %s, at %.*s)\n", edge->from_kind, edge->from_name, edge->to_kind,
               edge->to_name, edge->thread_name, end ? (int)(end - edge->site) : (int)strlen(edge->site),
               edge->site);
    }
}

static void *transfer(void *arg) {  /* accounts, then audit_log */
    (void)arg;
    sync_debug_thread_name("transfer");
    sync_mutex_lock(&accounts);
    sync_mutex_lock(&audit_log);
    sync_mutex_unlock(&audit_log);
    sync_mutex_unlock(&accounts);
    return NULL;
}

static void *rotate_log(void *arg) {  /* audit_log, then accounts: the other order */
    (void)arg;
    sync_debug_thread_name("rotate_log");
    sync_mutex_lock(&audit_log);
    sync_mutex_lock(&accounts);
    sync_mutex_unlock(&accounts);
    sync_mutex_unlock(&audit_log);
    return NULL;
}

int main(void) {
    sync_debug_lock_name(&accounts, "accounts");         /* names for the reports (copied) */
    sync_debug_lock_name(&audit_log, "audit_log");
    sync_debug_lock_order_set_handler(on_cycle, NULL);  /* instead of the report on stderr */
    sync_debug_lock_order(true);                        /* or LIBSYNC_CHECK_LOCK_ORDER=1 */
    pthread_t thread;
    pthread_create(&thread, NULL, transfer, NULL);
    pthread_join(thread, NULL);
    pthread_create(&thread, NULL, rotate_log, NULL);    /* after the first: no deadlock */
    pthread_join(thread, NULL);
    sync_debug_lock_order(false);
    return cycles == 1 ? 0 : 1;
}

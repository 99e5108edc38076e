/* Seed 002's churn programs in C, and an AtomicReference torture test. Objects carry a
 * reference count; release poisons and frees the object at zero, so any use after free shows
 * (always as a bad magic number, and as an error under AddressSanitizer: ctest also runs this
 * file built with -fsanitize=address). At the end every object is freed and retains balance
 * releases exactly.
 *   1. doGets: a thread endlessly replaces the value under one key; others get and use it.
 *   2. doSets: set a new object, drop our own reference, use the object through a get (+1).
 *   3. The "corrected application": retain + autorelease with the autorelease pools.
 *   4. AtomicReference: threads mixing get/set/compare_and_set/get_and_set on 3 objects
 *      (so the same object keeps coming back: ABA). */
#include <sync.h>
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include "check.h"

enum { MAGIC = 0x5AFE0B1E, COUNT = 20000, READERS = 3 };

typedef struct object {
    atomic_int refs;
    int magic;
    long serial;
} object;

static atomic_long created, freed, retains, releases;

static object *object_new(long serial) { /* +1 for the caller */
    object *o = malloc(sizeof *o);
    atomic_init(&o->refs, 1);
    o->magic = MAGIC;
    o->serial = serial;
    atomic_fetch_add(&created, 1);
    return o;
}
static void retain(void *p) {
    object *o = p;
    CHECK_EQ(o->magic, MAGIC);
    CHECK(atomic_fetch_add(&o->refs, 1) > 0);
    atomic_fetch_add(&retains, 1);
}
static void release(void *p) {
    object *o = p;
    CHECK_EQ(o->magic, MAGIC);
    atomic_fetch_add(&releases, 1);
    int before = atomic_fetch_sub(&o->refs, 1);
    CHECK(before > 0);
    if (before == 1) {
        memset(o, 0xDD, sizeof *o); /* poison */
        atomic_fetch_add(&freed, 1);
        free(o);
    }
}
/* "Send it a message": touch the object. */
static void use(object *o) { CHECK_EQ(o->magic, MAGIC); CHECK(o->serial >= 0); }

static sync_dictionary_t *dict;
static atomic_bool stop;
static const char KEY[] = "name";

static void *churn(void *arg) { /* seed 002's churnContents */
    (void)arg;
    for (long i = 0; !atomic_load(&stop); i++) {
        object *o = object_new(i);
        sync_dictionary_set(dict, KEY, sizeof KEY, o);
        release(o);
    }
    return NULL;
}

static void *do_gets(void *arg) {
    (void)arg;
    for (int i = 0; i < COUNT; i++) {
        object *o = sync_dictionary_get(dict, KEY, sizeof KEY);
        if (!o) continue;
        use(o);
        release(o);
    }
    return NULL;
}

static void do_sets(void) {
    for (int i = 0; i < COUNT; i++) {
        object *o = object_new(1000000 + i);
        sync_dictionary_set(dict, KEY, sizeof KEY, o);
        release(o); /* as the seed: the dictionary holds it now ... */
        object *again = sync_dictionary_get(dict, KEY, sizeof KEY); /* ... so take a +1 to use it */
        use(again);
        release(again);
    }
}

/* Listing 2, with pools: get (+1) and autorelease; create, set and autorelease. */
static void *corrected_gets(void *arg) {
    (void)arg;
    for (int i = 0; i < COUNT; i++) {
        size_t pool = sync_autorelease_pool_push();
        object *o = sync_dictionary_get(dict, KEY, sizeof KEY);
        if (o) CHECK_EQ(sync_autorelease(o, release), 0);
        if (o) use(o);
        CHECK_EQ(sync_autorelease_pool_pop(pool), 0);
    }
    return NULL;
}
static void corrected_sets(void) {
    size_t pool = sync_autorelease_pool_push();
    for (int i = 0; i < COUNT; i++) {
        object *o = object_new(2000000 + i);
        sync_dictionary_set(dict, KEY, sizeof KEY, o);
        CHECK_EQ(sync_autorelease(o, release), 0); /* still ours until the pool drains */
        use(o);
        if (i % 100 == 99) { sync_autorelease_pool_pop(pool); pool = sync_autorelease_pool_push(); }
    }
    sync_autorelease_pool_pop(pool);
}

static void run_churn(void *(*readers)(void *), void (*setter)(void)) {
    CHECK_EQ(sync_dictionary_create(&dict, retain, release), 0);
    atomic_store(&stop, false);
    pthread_t churner, r[READERS];
    CHECK(pthread_create(&churner, NULL, churn, NULL) == 0);
    for (int i = 0; i < READERS; i++) CHECK(pthread_create(&r[i], NULL, readers, NULL) == 0);
    setter();
    for (int i = 0; i < READERS; i++) pthread_join(r[i], NULL);
    atomic_store(&stop, true);
    pthread_join(churner, NULL);
    CHECK_EQ(sync_dictionary_count(dict), 1);
    sync_dictionary_destroy(dict);
    CHECK_EQ(atomic_load(&created), atomic_load(&freed));
    CHECK_EQ(atomic_load(&retains) + atomic_load(&created), atomic_load(&releases));
}

/* ---- AtomicReference torture ------------------------------------------------------------- */

static sync_atomic_ref_t ref = SYNC_ATOMIC_REF_INIT(retain, release);
static object *pool_objects[3];

static void *torture(void *arg) {
    unsigned seed = (unsigned)(uintptr_t)arg;
    for (int i = 0; i < COUNT * 5; i++) {
        seed = seed * 1103515245u + 12345u;
        object *mine = pool_objects[(seed >> 16) % 3];
        switch ((seed >> 8) % 5) {
        case 0: case 1: { /* get and use */
            object *o = sync_atomic_ref_get(&ref);
            if (o) { use(o); release(o); }
            break;
        }
        case 2:
            sync_atomic_ref_set(&ref, (seed >> 20) % 4 ? mine : NULL);
            break;
        case 3: { /* compare_and_set against what we just saw */
            object *seen = sync_atomic_ref_get(&ref);
            sync_atomic_ref_compare_and_set(&ref, seen, mine);
            if (seen) release(seen);
            break;
        }
        default: {
            object *old = sync_atomic_ref_get_and_set(&ref, mine);
            if (old) { use(old); release(old); }
        }
        }
    }
    return NULL;
}

static void test_reference_torture(void) {
    long base_created = atomic_load(&created);
    for (int i = 0; i < 3; i++) pool_objects[i] = object_new(i);
    enum { T = 4 };
    pthread_t t[T];
    for (int i = 0; i < T; i++) CHECK(pthread_create(&t[i], NULL, torture, (void *)(uintptr_t)(i + 1)) == 0);
    for (int i = 0; i < T; i++) pthread_join(t[i], NULL);
    /* Identity semantics and ownership after the storm. */
    sync_atomic_ref_set(&ref, pool_objects[0]);
    CHECK(!sync_atomic_ref_compare_and_set(&ref, pool_objects[1], pool_objects[2]));
    CHECK(sync_atomic_ref_compare_and_set(&ref, pool_objects[0], NULL));
    CHECK(sync_atomic_ref_get(&ref) == NULL);
    CHECK(sync_atomic_ref_compare_and_set(&ref, NULL, pool_objects[1]));
    for (int i = 0; i < 3; i++) CHECK_EQ(atomic_load(&pool_objects[i]->refs), i == 1 ? 2 : 1);
    sync_atomic_ref_destroy(&ref);
    for (int i = 0; i < 3; i++) release(pool_objects[i]);
    CHECK_EQ(atomic_load(&created) - base_created, 3);
    CHECK_EQ(atomic_load(&created), atomic_load(&freed));
    CHECK_EQ(atomic_load(&retains) + atomic_load(&created), atomic_load(&releases));

    sync_atomic_ref_t r;
    CHECK_EQ(sync_atomic_ref_init(&r, NULL, release), EINVAL);
}

int main(void) {
    run_churn(do_gets, do_sets);
    run_churn(corrected_gets, corrected_sets);
    test_reference_torture();
    DONE();
}

"""libsync.atomics: values, shared memory across processes, AtomicReference and ConcurrentDict
reference counts (sys.getrefcount), throttling (fail fast, bounded waits, decorators)."""
import gc
import multiprocessing
import sys
import threading
import time
from multiprocessing import shared_memory

import pytest

from libsync.atomics import AtomicBool, AtomicInt, AtomicReference, ConcurrentDict, Throttler, ThrottlerFull


def run_threads(target, count=4):
    threads = [threading.Thread(target=target) for _ in range(count)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()


def test_atomic_bool():
    b = AtomicBool()
    assert not b.get() and not b
    assert b.compare_and_set(False, True)
    assert not b.compare_and_set(False, True)
    assert b.get_and_set(False) is True
    b.set(True)
    assert b.get() is True


@pytest.mark.parametrize("bits", [32, 64])
def test_atomic_int_vocabulary_and_wrapping(bits):
    i = AtomicInt(5, bits=bits)
    assert i.get_and_increment() == 5 and i.increment_and_get() == 7
    assert i.get_and_decrement() == 7 and i.decrement_and_get() == 5
    assert i.get_and_add(10) == 5 and i.add_and_get(-20) == -5
    assert i.get_and_set(2 ** (bits - 1) - 1) == -5
    assert i.increment_and_get() == -2 ** (bits - 1)
    assert i.compare_and_set(-2 ** (bits - 1), 3) and not i.compare_and_set(0, 4)
    assert i.get() == 3 and int(i) == 3
    with pytest.raises(OverflowError):
        i.set(2 ** (bits - 1))
    with pytest.raises(TypeError):
        i.add_and_get(1.5)
    with pytest.raises(ValueError):
        AtomicInt(bits=16)


def test_atomic_int_threads():
    i = AtomicInt(bits=32)

    def work():
        for _ in range(20000):
            i.increment_and_get()
    run_threads(work)
    assert i.get() == 80000


def _add_in_child(name, n):
    shm = shared_memory.SharedMemory(name=name)
    counter = AtomicInt(buffer=shm.buf, initialize=False, offset=8, bits=64)
    for _ in range(n):
        counter.increment_and_get()
    del counter
    shm.close()


def test_atomic_int_in_shared_memory_across_processes():
    shm = shared_memory.SharedMemory(create=True, size=16)
    try:
        counter = AtomicInt(buffer=shm.buf, initialize=True, offset=8, bits=64)
        ctx = multiprocessing.get_context("fork")
        children = [ctx.Process(target=_add_in_child, args=(shm.name, 5000)) for _ in range(2)]
        for c in children:
            c.start()
        for _ in range(5000):
            counter.increment_and_get()
        for c in children:
            c.join()
            assert c.exitcode == 0
        assert counter.get() == 15000
        with pytest.raises(ValueError):
            AtomicInt(buffer=shm.buf, initialize=True, offset=4, bits=64)  # misaligned
        del counter
    finally:
        shm.close()
        shm.unlink()


class Thing:
    pass


def test_atomic_reference_refcounts_and_identity():
    a, b = Thing(), Thing()
    base_a, base_b = sys.getrefcount(a), sys.getrefcount(b)
    r = AtomicReference()
    assert r.get() is None
    r.set(a)
    assert sys.getrefcount(a) == base_a + 1
    for _ in range(1000):
        assert r.get() is a
    assert sys.getrefcount(a) == base_a + 1
    assert not r.compare_and_set(b, b)
    assert r.compare_and_set(a, b)
    assert sys.getrefcount(a) == base_a and sys.getrefcount(b) == base_b + 1
    assert r.get_and_set(None) is b
    assert sys.getrefcount(b) == base_b
    assert r.compare_and_set(None, a)
    del r
    gc.collect()
    assert sys.getrefcount(a) == base_a and sys.getrefcount(b) == base_b


def test_atomic_reference_threads_keep_counts():
    objects = [Thing() for _ in range(3)]
    bases = [sys.getrefcount(o) for o in objects]
    r = AtomicReference(objects[0])

    def work():
        for k in range(5000):
            o = objects[k % 3]
            r.set(o) if k % 4 == 0 else None
            seen = r.get()
            r.compare_and_set(seen, o)
            r.get_and_set(objects[(k + 1) % 3])
    run_threads(work)
    r.set(None)
    assert [sys.getrefcount(o) for o in objects] == bases


def test_single_in_flight_request():
    """At most one request in flight: a launch takes the empty AtomicReference
    (compare_and_set), a cancel empties it (get_and_set); each launch is cancelled once."""
    current = AtomicReference()
    launched, cancelled = AtomicInt(), AtomicInt()

    def launch():
        request = object()
        if current.compare_and_set(None, request):
            launched.increment_and_get()

    def cancel():
        if current.get_and_set(None) is not None:
            cancelled.increment_and_get()

    def work():
        for k in range(3000):
            (launch if k % 2 else cancel)()
    run_threads(work)
    cancel()
    assert launched.get() == cancelled.get() > 0


def test_throttler_never_admits_more_than_n():
    throttler = Throttler(2)
    inside, most = AtomicInt(), AtomicInt()
    admitted = AtomicInt()

    def body():
        now = inside.increment_and_get()
        assert now <= 2 and throttler.holders <= 2
        seen = most.get()
        while now > seen and not most.compare_and_set(seen, now):
            seen = most.get()
        time.sleep(0)
        inside.decrement_and_get()

    def work():
        for _ in range(3000):
            if throttler.exec(body):
                admitted.increment_and_get()
    run_threads(work, 6)
    assert most.get() <= 2
    assert throttler.holders == 0
    assert admitted.get() + throttler.rejections == 6 * 3000


def test_throttler_context_manager_decorator_and_wait():
    t = Throttler(1)
    with t:
        assert t.holders == 1
        with pytest.raises(ThrottlerFull):
            with t:
                pass
        assert not t.try_enter()
        start = time.monotonic()
        assert t.enter(timeout=0.1) is False
        assert 0.09 <= time.monotonic() - start < 5

        @t(on_full=False)
        def quiet():
            return "ran"

        @t
        def loud():
            return "ran"
        assert quiet() is False
        with pytest.raises(ThrottlerFull):
            loud()
    assert quiet() == "ran" and loud() == "ran"
    assert t.holders == 0 and t.rejections == 5
    with pytest.raises(RuntimeError):
        t.exit()
    with pytest.raises(ValueError):
        Throttler(0)

    # A waiter gets the slot when the holder leaves.
    t.enter()
    got = []
    waiter = threading.Thread(target=lambda: got.append(t.enter(timeout=60)))  # a bound, not a time
    waiter.start()
    time.sleep(0.05)
    t.exit()
    waiter.join()
    assert got == [True] and t.holders == 1
    t.exit()


def test_busy_flag():
    busy = AtomicBool()
    inside = AtomicInt()

    def work():
        for _ in range(3000):
            if busy.compare_and_set(False, True):
                assert inside.increment_and_get() == 1
                inside.decrement_and_get()
                busy.set(False)
    run_threads(work)
    assert not busy.get()


def test_concurrent_dict_mapping_and_refcounts():
    key, value, other = "name", Thing(), Thing()
    base_v, base_o = sys.getrefcount(value), sys.getrefcount(other)
    d = ConcurrentDict({"x": 1})
    d[key] = value
    assert d[key] is value and d.get("missing") is None and d.get("missing", 7) == 7
    assert key in d and "missing" not in d and len(d) == 2
    assert sorted(d.keys()) == ["name", "x"] and sorted(d) == ["name", "x"]
    for _ in range(1000):
        assert d.get(key) is value
    assert sys.getrefcount(value) == base_v + 1
    d[key] = other
    assert sys.getrefcount(value) == base_v
    assert d.pop(key) is other and d.pop(key, None) is None
    with pytest.raises(KeyError):
        d[key]
    with pytest.raises(KeyError):
        del d[key]
    with pytest.raises(TypeError):
        d[[1]] = 2
    d[1] = value
    assert d[1.0] is value  # Python equality: 1 == 1.0, same hash
    del d
    gc.collect()
    assert sys.getrefcount(value) == base_v and sys.getrefcount(other) == base_o


def test_concurrent_dict_churn_keeps_counts():
    """Churn: one thread replaces the value under a key, others get and use it."""
    d = ConcurrentDict()
    values = [Thing() for _ in range(4)]
    bases = [sys.getrefcount(v) for v in values]
    stop = threading.Event()

    def churn():
        k = 0
        while not stop.is_set():
            d["key"] = values[k % 4]
            k += 1

    def gets():
        for _ in range(5000):
            v = d.get("key")
            assert v is None or isinstance(v, Thing)
    churner = threading.Thread(target=churn)
    churner.start()
    run_threads(gets, 3)
    stop.set()
    churner.join()
    del d
    gc.collect()
    assert [sys.getrefcount(v) for v in values] == bases

"""The OSAtomic family from Python: Listing 4-1, golden values, bad input, threads, processes."""
import ctypes
import mmap
import multiprocessing
import subprocess
import sys
import threading
from ctypes import c_int, c_int32, c_int64, c_long, c_uint32, c_void_p
from multiprocessing import shared_memory

import pytest

from libsync import osatomic as osa
from libsync.osatomic import ref


def test_listing_4_1():
    theValue = c_int32(0)
    osa.OSAtomicTestAndSet(0, theValue)
    assert theValue.value == 128
    theValue.value = 0
    osa.OSAtomicTestAndSet(7, theValue)
    assert theValue.value == 1
    theValue.value = 0
    osa.OSAtomicTestAndSet(15, theValue)
    assert theValue.value == 256
    osa.OSAtomicCompareAndSwap32(256, 512, theValue)
    assert theValue.value == 512
    osa.OSAtomicCompareAndSwap32(256, 1024, theValue)
    assert theValue.value == 512


@pytest.mark.parametrize("barrier", ["", "Barrier"])
def test_arithmetic_returns_new_value_and_wraps(barrier):
    f = lambda name: getattr(osa, name + barrier)
    v = c_int32(5)
    assert f("OSAtomicAdd32")(3, v) == 8 and v.value == 8
    assert f("OSAtomicIncrement32")(v) == 9
    assert f("OSAtomicDecrement32")(v) == 8
    v.value = 2**31 - 1
    assert f("OSAtomicIncrement32")(v) == -2**31
    assert f("OSAtomicDecrement32")(v) == 2**31 - 1
    w = c_int64(2**63 - 1)
    assert f("OSAtomicIncrement64")(w) == -2**63
    assert f("OSAtomicAdd64")(2**40, w) == -2**63 + 2**40
    assert f("OSAtomicDecrement64")(w) == -2**63 + 2**40 - 1


@pytest.mark.parametrize("barrier", ["", "Barrier"])
def test_logic_new_versus_orig(barrier):
    f = lambda name: getattr(osa, name + barrier)
    v = c_uint32(0x0F)
    assert f("OSAtomicOr32")(0xF0, v) == 0xFF
    v.value = 0x0F
    assert f("OSAtomicOr32Orig")(0xF0, v) == 0x0F and v.value == 0xFF
    assert f("OSAtomicAnd32")(0x3C, v) == 0x3C
    assert f("OSAtomicAnd32Orig")(0x0C, v) == 0x3C and v.value == 0x0C
    assert f("OSAtomicXor32")(0xFF, v) == 0xF3
    assert f("OSAtomicXor32Orig")(0xFF, v) == 0xF3 and v.value == 0x0C
    v.value = 1
    assert f("OSAtomicOr32")(0x80000000, v) == -2**31 + 1  # int32_t result, as Apple's


@pytest.mark.parametrize("barrier", ["", "Barrier"])
@pytest.mark.parametrize("suffix,ctype,a,b", [("32", c_int32, 256, 512), ("64", c_int64, 2**40, -2**63),
                                              ("Int", c_int, -1, 1), ("Long", c_long, 2**62, -3)])
def test_compare_and_swap_argument_order(barrier, suffix, ctype, a, b):
    cas = getattr(osa, f"OSAtomicCompareAndSwap{suffix}{barrier}")
    v = ctype(a)
    assert cas(a, b, v) is True and v.value == b
    assert cas(a, 7, v) is False and v.value == b


def test_compare_and_swap_pointer():
    p = c_void_p(None)
    assert osa.OSAtomicCompareAndSwapPtr(None, 0x1000, p) and p.value == 0x1000
    assert not osa.OSAtomicCompareAndSwapPtrBarrier(None, 0x2000, p) and p.value == 0x1000


@pytest.mark.parametrize("barrier", ["", "Barrier"])
def test_bit_numbering_including_most_significant_bits(barrier):
    tas, tac = getattr(osa, "OSAtomicTestAndSet" + barrier), getattr(osa, "OSAtomicTestAndClear" + barrier)
    v = c_uint32(0)
    assert tas(24, v) is False and v.value == 0x80000000
    assert tas(24, v) is True
    assert tac(24, v) is True and v.value == 0
    w = ctypes.c_uint64(0)
    assert tas(56, w) is False and w.value == 1 << 63
    assert tas(63, w) is False and w.value == (1 << 63) | (1 << 56)


def test_bad_input():
    with pytest.raises(TypeError):
        osa.OSAtomicAdd32(1, c_int64(0))           # wrong width
    with pytest.raises(TypeError):
        osa.OSAtomicIncrement32(5)                   # not memory at all
    with pytest.raises(OverflowError):
        osa.OSAtomicAdd32(2**31, c_int32(0))
    with pytest.raises(TypeError):
        osa.OSAtomicAdd32("1", c_int32(0))
    with pytest.raises(ValueError):
        osa.OSAtomicTestAndSet(32, c_int32(0))       # bit outside the object
    with pytest.raises(TypeError):
        ref(bytes(8))                                # read-only buffer
    with pytest.raises(ValueError):
        ref(bytearray(8), 2)                         # misaligned
    with pytest.raises(ValueError):
        ref(bytearray(8), 8)                         # out of range
    with pytest.raises(ValueError):
        ref(bytearray(8), -4)
    with pytest.raises(TypeError):
        ref(bytearray(8), 0, int)                    # not a ctypes type
    with pytest.raises(TypeError):
        ref(object())


_VALUE_TYPES = {"32": c_int32, "64": c_int64, "Int": c_int, "Long": c_long, "Ptr": c_void_p}


def _operand_functions():
    """(name, function, value type, arity) of every OSAtomic function taking int operands."""
    for name in osa.__all__:
        if not name.startswith("OSAtomic") or "crement" in name or "queue" in name.lower():
            continue
        base = name.replace("Barrier", "").replace("Orig", "")
        if base.startswith("OSAtomicCompareAndSwap"):
            yield name, getattr(osa, name), _VALUE_TYPES[base[len("OSAtomicCompareAndSwap"):]], 2
        elif base.startswith("OSAtomicTestAnd"):
            yield name, getattr(osa, name), c_int64, 1
        else:
            yield name, getattr(osa, name), c_int64 if base.endswith("64") else (
                c_uint32 if base[8:10] in ("Or", "An", "Xo") else c_int32), 1


@pytest.mark.parametrize("bad", [1.5, 1.0, "1", b"1", object()])
def test_operands_that_are_not_ints_raise_type_error(bad):
    """Not ctypes.ArgumentError (a float must not reach ctypes' own conversion) and never a
    silent conversion; ints of any kind (bool, __index__) are accepted."""
    names = []
    for name, function, ctype, arity in _operand_functions():
        names.append(name)
        value = ctype()
        for position in range(arity):
            operands = [0] * arity
            operands[position] = bad
            with pytest.raises(TypeError) as raised:
                function(*operands, value)
            assert raised.type is TypeError and name in str(raised.value)
        assert function(*([True] * arity), value) is not None
    assert len(names) == 2 * (2 + 6 + 5 + 2)  # (Barrier or not) Add32/64, Or/And/Xor(Orig), CAS x5, TestAnd x2


def test_pointer_compare_and_swap_refuses_what_is_not_an_address():
    p = c_void_p(None)
    with pytest.raises(OverflowError):
        osa.OSAtomicCompareAndSwapPtr(0, 2**64, p)   # never truncated silently
    with pytest.raises(OverflowError):
        osa.OSAtomicCompareAndSwapPtr(-1, 1, p)
    assert osa.OSAtomicCompareAndSwapPtr(None, 2**64 - 8, p) and p.value == 2**64 - 8
    assert osa.OSAtomicCompareAndSwapPtr(2**64 - 8, None, p) and p.value is None


def test_ref_aliases_buffer():
    buf = bytearray(16)
    r = ref(buf, 8, c_int64)
    osa.OSAtomicAdd64(-2, r)
    assert int.from_bytes(buf[8:], "little", signed=True) == -2
    m = mmap.mmap(-1, 4096)
    r32 = ref(m, 4092)
    assert osa.OSAtomicIncrement32(r32) == 1
    del r32
    m.close()


def test_threads_hammering_counters_and_spin_lock():
    counter, lock, guarded = c_int32(0), c_int32(osa.OS_SPINLOCK_INIT), [0]

    def work():
        for _ in range(20000):
            osa.OSAtomicIncrement32(counter)
            osa.OSSpinLockLock(lock)
            guarded[0] += 1
            osa.OSSpinLockUnlock(lock)

    threads = [threading.Thread(target=work) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert counter.value == 80000 and guarded[0] == 80000 and lock.value == 0
    assert osa.OSSpinLockTry(lock) and not osa.OSSpinLockTry(lock)
    osa.OSSpinLockUnlock(lock)


class Node(ctypes.Structure):
    _fields_ = [("value", ctypes.c_int), ("link", c_void_p)]


@pytest.mark.parametrize("fifo", [False, True])
def test_queues(fifo):
    head = osa.OSFifoQueueHead() if fifo else osa.OSQueueHead()
    enqueue = osa.OSAtomicFifoEnqueue if fifo else osa.OSAtomicEnqueue
    dequeue = osa.OSAtomicFifoDequeue if fifo else osa.OSAtomicDequeue
    nodes = [Node(i) for i in range(5)]
    for n in nodes:
        enqueue(head, n, Node.link.offset)
    out = []
    while (address := dequeue(head, Node.link.offset)) is not None:
        out.append(Node.from_address(address).value)
    assert out == ([0, 1, 2, 3, 4] if fifo else [4, 3, 2, 1, 0])
    with pytest.raises(TypeError):
        enqueue(object(), nodes[0], 0)
    with pytest.raises(ValueError):
        enqueue(head, nodes[0], ctypes.sizeof(Node))


_QUEUE_MISUSE = """
import ctypes, gc, sys, weakref
from ctypes import c_void_p
import libsync.osatomic as osa

class Node(ctypes.Structure):
    _fields_ = [("value", ctypes.c_int), ("link", c_void_p)]

fifo = sys.argv[1] == "fifo"
head = osa.OSFifoQueueHead() if fifo else osa.OSQueueHead()
enqueue = osa.OSAtomicFifoEnqueue if fifo else osa.OSAtomicEnqueue
dequeue = osa.OSAtomicFifoDequeue if fifo else osa.OSAtomicDequeue
link = Node.link.offset

def refused(error, call):
    try:
        call()
    except error:
        return
    raise AssertionError(f"not refused with {error.__name__}")

kept = Node(7)
enqueue(head, kept, link)
for offset in (1 << 40, link + 8, 0, 2**64):        # past the element, or not the link
    refused(ValueError, lambda: dequeue(head, offset))
refused(ValueError, lambda: dequeue(head, link + 4))  # misaligned
refused(ValueError, lambda: dequeue(head, -8))
refused(TypeError, lambda: dequeue(head, 8.0))
refused(ValueError, lambda: enqueue(head, Node(8), 0))  # not the queue's offset
refused(ValueError, lambda: enqueue(head, kept, link))  # already queued: would make a cycle
nine = Node(9)
enqueue(head, nine, link)
alive, nines = weakref.ref(nine), ctypes.addressof(nine)
del nine
gc.collect()
assert alive() is not None                           # the head keeps a queued element alive
litter = [Node(-1) for _ in range(1000)]
values = [alive().value]
while (address := dequeue(head, link)) is not None:
    assert address in (ctypes.addressof(kept), nines)
    values.append(address)
gc.collect()
assert alive() is None                               # and lets go of it once dequeued
assert values == [9] + ([ctypes.addressof(kept), nines] if fifo else [nines, ctypes.addressof(kept)]), values
enqueue(head, kept, link)                            # out again: may come back
assert dequeue(head, link) == ctypes.addressof(kept)
assert dequeue(head, link) is None
print("ok")
"""


@pytest.mark.parametrize("fifo", [False, True])
def test_queue_misuse_raises_instead_of_crashing(fifo):
    """A dequeue with an offset outside the elements must not follow a wild pointer (a crash
    of the interpreter): run in a child interpreter so that a crash fails only this test."""
    child = subprocess.run([sys.executable, "-c", _QUEUE_MISUSE, "fifo" if fifo else "lifo"],
                           capture_output=True, text=True, timeout=60)
    assert child.returncode == 0 and child.stdout.strip() == "ok", (child.returncode, child.stderr)


_QUEUE_FIRST_ENQUEUE_RACE = """
import ctypes, sys
from ctypes import c_void_p
import libsync.osatomic as osa

class Node(ctypes.Structure):
    _fields_ = [("value", ctypes.c_uint64), ("link", c_void_p)]

fifo = sys.argv[1] == "fifo"
enqueue = osa.OSAtomicFifoEnqueue if fifo else osa.OSAtomicEnqueue
dequeue = osa.OSAtomicFifoDequeue if fifo else osa.OSAtomicDequeue
head = osa.OSFifoQueueHead() if fifo else osa.OSQueueHead()
nodes = [Node(0xdeadbeef000 + i) for i in range(3)]

class EnqueueAfterLookup(dict):
    # The interleaving of a thread that enqueues first (link at 8) right after another thread's
    # dequeue (offset 0) has looked at the head's offset.
    def get(self, *args):
        found = dict.get(self, *args)
        if not self:
            for node in nodes:
                enqueue(head, node, Node.link.offset)
        return found

head._link = EnqueueAfterLookup()
got = dequeue(head, 0)
assert got is None, hex(got)          # the queue was empty when the dequeue looked
for _ in range(2):
    try:
        dequeue(head, 0)
    except ValueError:
        pass
    else:
        raise AssertionError("a dequeue with another offset than the queue's was not refused")
out = [dequeue(head, Node.link.offset) for _ in range(4)]
assert out == [ctypes.addressof(n) for n in (nodes if fifo else nodes[::-1])] + [None], out
print("ok")
"""


@pytest.mark.parametrize("fifo", [False, True])
def test_dequeue_racing_the_first_enqueue_never_follows_a_wrong_link(fifo):
    """A dequeue with a wrong offset that looks at a fresh head just before another thread's
    first enqueue must not run the C dequeue with its unchecked offset (it would follow a field
    that is not a link: a crash). In a child interpreter, so that a crash fails only this test."""
    child = subprocess.run([sys.executable, "-c", _QUEUE_FIRST_ENQUEUE_RACE, "fifo" if fifo else "lifo"],
                           capture_output=True, text=True, timeout=60)
    assert child.returncode == 0 and child.stdout.strip() == "ok", (child.returncode, child.stderr)


@pytest.mark.parametrize("fifo", [False, True])
def test_an_element_is_in_one_queue_at_a_time(fifo):
    make = osa.OSFifoQueueHead if fifo else osa.OSQueueHead
    enqueue = osa.OSAtomicFifoEnqueue if fifo else osa.OSAtomicEnqueue
    dequeue = osa.OSAtomicFifoDequeue if fifo else osa.OSAtomicDequeue
    link = Node.link.offset
    first, second = make(), make()
    a, b, c = Node(1), Node(2), Node(3)
    enqueue(first, a, link)
    enqueue(first, b, link)
    with pytest.raises(ValueError, match="another queue"):
        enqueue(second, b, link)
    enqueue(second, c, link)
    drained = [dequeue(first, link) for _ in range(3)]
    assert sorted(drained[:2]) == sorted([ctypes.addressof(a), ctypes.addressof(b)]) and drained[2] is None
    assert [dequeue(second, link) for _ in range(2)] == [ctypes.addressof(c), None]
    enqueue(second, b, link)  # out of the first queue: may go into another
    assert [dequeue(second, link) for _ in range(2)] == [ctypes.addressof(b), None]
    enqueue(first, a, link)
    del first  # a head dropped with elements in it lets them go into other queues
    enqueue(second, a, link)
    assert [dequeue(second, link) for _ in range(2)] == [ctypes.addressof(a), None]


def _add_in_child(name, count):
    shm = shared_memory.SharedMemory(name=name)
    counter = ref(shm.buf, 8, c_int64)
    for _ in range(count):
        osa.OSAtomicIncrement64Barrier(counter)
    del counter
    shm.close()


def test_processes_share_an_atomic_counter():
    shm = shared_memory.SharedMemory(create=True, size=64)
    try:
        context = multiprocessing.get_context("spawn")
        workers = [context.Process(target=_add_in_child, args=(shm.name, 20000)) for _ in range(3)]
        for w in workers:
            w.start()
        _add_in_child(shm.name, 20000)
        for w in workers:
            w.join()
            assert w.exitcode == 0
        assert int.from_bytes(shm.buf[8:16], "little") == 80000
    finally:
        shm.close()
        shm.unlink()

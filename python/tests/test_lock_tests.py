"""CPython's own tests of threading's primitives (Lib/test/lock_tests.py, shipped as
test.lock_tests), run against libsync's drop-ins: the same suite threading.Lock, RLock, Event,
Condition, Semaphore, BoundedSemaphore and Barrier pass."""
import threading

import pytest

import libsync

lock_tests = pytest.importorskip(
    "test.lock_tests", reason="this interpreter does not ship CPython's test package (test.lock_tests)")


class LockTests(lock_tests.LockTests):
    locktype = staticmethod(libsync.Lock)


class RLockTests(lock_tests.RLockTests):
    locktype = staticmethod(libsync.RLock)


class EventTests(lock_tests.EventTests):
    eventtype = staticmethod(libsync.Event)

    def test_at_fork_reinit(self):
        # lock_tests' version reaches into threading.Event's private Condition (evt._cond); a
        # libsync Event is one word with no lock inside. What _at_fork_reinit owes here: the
        # event keeps its flag and works as before.
        for initially_set in (False, True):
            event = self.eventtype()
            if initially_set:
                event.set()
            event._at_fork_reinit()
            self.assertEqual(event.is_set(), initially_set)
            waiter = threading.Thread(target=event.wait)
            waiter.start()
            event.set()
            waiter.join(lock_tests.support.SHORT_TIMEOUT)
            self.assertFalse(waiter.is_alive())


class ConditionTests(lock_tests.ConditionTests):
    condtype = staticmethod(libsync.Condition)


class SemaphoreTests(lock_tests.SemaphoreTests):
    semtype = staticmethod(libsync.Semaphore)


class BoundedSemaphoreTests(lock_tests.BoundedSemaphoreTests):
    semtype = staticmethod(libsync.BoundedSemaphore)


class BarrierTests(lock_tests.BarrierTests):
    barriertype = staticmethod(libsync.Barrier)

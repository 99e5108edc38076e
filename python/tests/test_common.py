"""The package's shared machinery seen from outside: one DeadlockError for locks and queues,
and timeouts refused the same way everywhere."""
import errno
import math

import pytest

from libsync import locks, queues
from libsync.atomics import Throttler


def test_queues_and_locks_raise_one_deadlock_error():
    q = queues.SerialQueue()
    with pytest.raises(locks.DeadlockError) as raised:
        q.sync(lambda: q.sync(lambda: None))
    assert queues.DeadlockError is locks.DeadlockError
    assert isinstance(raised.value, locks.LockError) and isinstance(raised.value, RuntimeError)
    assert raised.value.errno == errno.EDEADLK
    q.close()

    mutex = locks.Mutex()
    with mutex:
        with pytest.raises(queues.DeadlockError) as raised:
            mutex.acquire()
    assert raised.value.errno == errno.EDEADLK


@pytest.mark.parametrize("timeout", [-1, -0.5, math.nan])
def test_throttler_refuses_negative_and_nan_timeouts(timeout):
    throttler = Throttler(1)
    with pytest.raises(ValueError):
        throttler.enter(timeout)
    assert throttler.holders == 0


def test_throttler_bounded_wait_on_a_full_throttler_times_out():
    throttler = Throttler(1)
    assert throttler.enter(0)
    assert throttler.enter(0) is False and throttler.enter(0.01) is False
    throttler.exit()
    assert throttler.enter(0.01) is True
    throttler.exit()


def _public_classes():
    import importlib
    import inspect
    import pkgutil

    import libsync
    for info in pkgutil.iter_modules(libsync.__path__):
        if info.name == "libsync":  # the bundled libsync.so of an installed package, not a module
            continue
        module = importlib.import_module(f"libsync.{info.name}")
        for name, cls in vars(module).items():
            if inspect.isclass(cls) and not name.startswith("_") and cls.__module__ == module.__name__:
                yield cls


def test_every_public_method_has_a_docstring():
    missing = []
    for cls in _public_classes():
        if not cls.__doc__:
            missing.append(cls.__qualname__)
        for klass in cls.__mro__:
            if not klass.__module__.startswith("libsync"):
                continue
            for name, member in vars(klass).items():
                if name.startswith("_") and name != "__call__":
                    continue
                if isinstance(member, (staticmethod, classmethod)):
                    member = member.__func__
                if (callable(member) or isinstance(member, property)) and not member.__doc__:
                    missing.append(f"{cls.__module__}.{cls.__qualname__}.{name}")
    assert not missing, sorted(set(missing))

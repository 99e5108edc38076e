"""The names kept for compatibility (CONTRIBUTING.md, "Names"): each still works as its
replacement does, and warns (DeprecationWarning) naming the replacement."""
import threading

import pytest
from libsync.locks import LockError, Mutex, NotOwnerError, OwnerDiedError, RLock


def test_owned_is_is_owner():
    mutex = Mutex()
    with pytest.warns(DeprecationWarning, match=r"Mutex\.owned\(\) is deprecated: use is_owner\(\)"):
        assert mutex.owned() is False
    with mutex:
        with pytest.warns(DeprecationWarning):
            assert mutex.owned() is True
        assert mutex.is_owner() is True


@pytest.mark.parametrize("kind", [Mutex, RLock])
def test_mark_consistent_is_consistent(kind):
    lock = kind(robust=True)
    holder = threading.Thread(target=lock.acquire)  # exits holding it: its death is reported
    holder.start()
    holder.join()
    with pytest.raises(OwnerDiedError):
        lock.acquire(timeout=60)
    with pytest.warns(DeprecationWarning, match=r"mark_consistent\(\) is deprecated: use consistent\(\)"):
        lock.mark_consistent()
    lock.release()
    assert lock.acquire(blocking=False)  # consistent: usable again, not NotRecoverableError
    lock.release()


def test_mark_consistent_errors_as_consistent():
    with pytest.warns(DeprecationWarning), pytest.raises(LockError):
        Mutex().mark_consistent()  # not robust
    with pytest.warns(DeprecationWarning), pytest.raises(NotOwnerError):
        Mutex(robust=True).mark_consistent()

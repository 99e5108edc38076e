"""libsync.locks.Guarded: a mutable value and the owner-checked Mutex that guards it."""
import threading

import pytest

from libsync.locks import DeadlockError, Guarded


def test_with_gives_the_value_and_changes_stay():
    box = Guarded([])
    with box as items:
        items.append(1)
    with box as items:
        assert items == [1]


def test_threads_update_under_the_lock():
    box = Guarded({"n": 0})

    def work():
        for _ in range(2000):
            with box as state:
                n = state["n"]
                state["n"] = n + 1

    threads = [threading.Thread(target=work) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    with box as state:
        assert state["n"] == 8000


def test_reentry_raises_instead_of_hanging():
    box = Guarded([])
    with box as outer:
        with pytest.raises(DeadlockError, match="Guarded: the calling thread already holds it"):
            with box:
                pass
        outer.append("still held")
    with box as items:  # released once, by the outer block
        assert items == ["still held"]


def test_released_when_the_block_raises():
    box = Guarded(set())
    with pytest.raises(KeyError):
        with box as items:
            items.add(1)
            raise KeyError("boom")
    with box as items:  # a DeadlockError here would mean the lock stayed held
        assert items == {1}


def test_other_threads_wait_while_held():
    box = Guarded([])
    inside, entered = threading.Event(), threading.Event()

    def other():
        inside.wait()
        with box as items:
            items.append("other")
        entered.set()

    t = threading.Thread(target=other)
    t.start()
    with box as items:
        inside.set()
        assert not entered.wait(0.05)  # it cannot get in while held (no timing claim: it never can)
        items.append("first")
    t.join()
    with box as items:
        assert items == ["first", "other"]


@pytest.mark.parametrize("value", [0, 1.5, "text", b"bytes", (1, 2), frozenset(), None])
def test_values_that_cannot_change_in_place_are_refused(value):
    with pytest.raises(TypeError, match="Guarded needs a value that changes in place"):
        Guarded(value)

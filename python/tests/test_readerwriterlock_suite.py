"""readerwriterlock's own test suite (elarivie/pyReaderWriterLock, tests/test_rwlock.py) run
against libsync's RWLock through readerwriterlock_adapter. Nothing of it is vendored: it runs
where READERWRITERLOCK_TESTS names that file in a checkout, and is skipped elsewhere (CI);
test_rwlock.py covers what it checks."""
import importlib.util
import os
import sys
import unittest

import pytest

import readerwriterlock_adapter

# Tests that cannot apply to libsync's lock, with the reason. Policy tests (reader preference,
# fairness) would be listed here: the suite has none at the time of writing.
NOT_APPLICABLE = {
    ("TestWhiteBoxRWLockReadD", "test_read_vs_downgrade_read"):
        "reads readerwriterlock's private attributes (v_read_count, c_resource, ...); "
        "test_rwlock.py::test_downgraded_state_equals_read_state checks the same on libsync's state",
    ("TestWhiteBoxRWLockReadD", "test_read_vs_downgrade_write"):
        "reads readerwriterlock's private attributes; see test_rwlock.py::test_downgraded_state_equals_read_state",
    ("TestWhiteBoxRWLockReadD", "test_read_vs_downgrade_fair"):
        "reads readerwriterlock's private attributes; see test_rwlock.py::test_downgraded_state_equals_read_state",
}


def test_readerwriterlock_suite():
    path = os.environ.get("READERWRITERLOCK_TESTS")
    if not path:
        pytest.skip("set READERWRITERLOCK_TESTS to the path of tests/test_rwlock.py in a checkout of "
                    "elarivie/pyReaderWriterLock to run readerwriterlock's suite against libsync")
    replaced = readerwriterlock_adapter.install()
    try:
        spec = importlib.util.spec_from_file_location("readerwriterlock_suite", path)
        suite_module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(suite_module)
        for (case, method), reason in NOT_APPLICABLE.items():
            cls = getattr(suite_module, case, None)
            if cls is not None and hasattr(cls, method):
                setattr(cls, method, unittest.skip(reason)(getattr(cls, method)))
        result = unittest.TextTestRunner(stream=sys.stdout, verbosity=2).run(
            unittest.defaultTestLoader.loadTestsFromModule(suite_module))
    finally:
        for name, module in replaced.items():
            if module is None:
                sys.modules.pop(name, None)
            else:
                sys.modules[name] = module
    assert result.wasSuccessful(), f"{len(result.failures)} failures, {len(result.errors)} errors"

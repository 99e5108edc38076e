"""pytest plugin that runs filelock's own test suite against libsync (not collected here): filelock's
public lock classes and Timeout become libsync's before the test modules import them, and tests of
filelock internals that have no meaning for libsync are skipped, each with its reason.

    python3 -m venv /tmp/fl && /tmp/fl/bin/pip install pytest pytest-mock pytest-asyncio pytest-timeout
    # filelock's source (github:tox-dev/filelock) in $FILELOCK; installed into the venv:
    (cd $FILELOCK && SETUPTOOLS_SCM_PRETEND_VERSION=3.32.3 /tmp/fl/bin/pip install .)
    cd $FILELOCK && PYTHONPATH=$LIBSYNC/python:$LIBSYNC/python/tests /tmp/fl/bin/python -m pytest \
        -p filelock_suite_shim -p no:randomly tests/test_filelock.py tests/test_async_filelock.py \
        tests/test_error.py tests/test_default_mode.py
    # filelock 4's shapes (ReadWriteLock, AsyncReadWriteLock, SoftReadWriteLock, AsyncSoftReadWriteLock,
    # SoftFileLease, AsyncSoftFileLease), replaced in filelock's package and in its modules:
    cd $FILELOCK && PYTHONPATH=... /tmp/fl/bin/python -m pytest -p filelock_suite_shim -p no:randomly \
        tests/test_read_write.py tests/test_async_read_write.py tests/test_soft_lease.py tests/soft_rw/test_soft_rw_sync.py \
        tests/soft_rw/test_soft_rw_async.py
    # (instead of installing it: PYTHONPATH=$FILELOCK/src after writing $FILELOCK/src/filelock/version.py)

docs/distributed_lock.md reports the outcome; python/tests/test_filelock_interface.py checks the
same points offline."""
import fnmatch
import sys

import filelock
import filelock.asyncio
import pytest

import libsync.distributed_lock as ours

NAMES = ["FileLock", "SoftFileLock", "Timeout", "AsyncFileLock", "AsyncSoftFileLock", "BaseAsyncFileLock",
         "AcquireReturnProxy", "AsyncAcquireReturnProxy",
         # filelock 4's shapes
         "ReadWriteLock", "AsyncReadWriteLock", "SoftReadWriteLock", "AsyncSoftReadWriteLock",
         "AsyncAcquireReadWriteReturnProxy", "SoftFileLease", "AsyncSoftFileLease", "LeaseCompromise"]
# filelock's package, and its modules where tests import a class from (filelock._soft_rw...).
for name in NAMES:
    for module in [module for key, module in list(sys.modules.items()) if key.split(".")[0] == "filelock"]:
        if module is filelock or hasattr(module, name):
            setattr(module, name, getattr(ours, name))

DESCRIPTOR = "lends or injects failures into the lock file's descriptor (on_acquired, os.close/fcntl mocks): libsync's lock is a directory with no descriptor"
FILE_MODE = "checks the lock FILE's mode bits: libsync's lock is a directory (mode's read bits add search bits)"
FILE_CONTENT = "checks the lock file's contents or inode, or writes into it: libsync's lock is a directory"
FLOCK = "filelock's flock/ENOSYS soft fallback: libsync never uses flock"
MOCKS = "mocks a system call inside filelock's backend (os.open, os.write, time.sleep in filelock._api)"
INTERNALS = "calls filelock's private methods or backend hooks (_acquire/_release, _context, registries, __del__ internals)"
SQLITE = "checks filelock's SQLite database (its state, rollback) or ReadWriteLock's private counters (_lock_level, _current_mode), or puts a symlinked database file at the path: libsync's read/write lock is a directory protocol"
MARKER = "writes, reads, removes or symlinks filelock's marker files (<lock>, <lock>.write, <lock>.readers/, a StrictSoftFileLock's claims) or checks their modes: libsync's lock is a directory, its readers' directory is .<name>.readers"
HEARTBEAT = "mocks filelock's heartbeat thread, its marker refresh or its backend methods (_hold, _refresh_marker, _touch_writer_marker_if_ours, _locks, _Gate, os.getpid in filelock._soft_rw): libsync has no heartbeat; its loss notification watches the hold's entry"
SKIPS_4 = {
    "test_read_write.py::test_recursive_lock_acquisition": SQLITE,
    "test_read_write.py::test_read_write_lock_keeps_constructed_database": SQLITE,
    "test_read_write.py::test_release_rollback_failure_reconciles_lock_state": SQLITE,
    "test_read_write.py::test_acquire_proxy_releases_the_read_write_lock_on_exit": SQLITE,
    **{f"test_soft_lease.py::{name}": MARKER for name in (
        "test_lease_publishes_its_claim", "test_lease_self_heals_a_malformed_marker",
        "test_lease_reclaims_a_dead_same_host_holder", "test_lease_reports_compromise_when_the_marker_vanishes",
        "test_lease_reports_compromise_when_a_peer_takes_over", "test_lease_reports_one_compromise_per_claim",
        "test_lease_records_the_compromise_without_a_callback", "test_lease_can_be_released_from_the_compromise_callback",
        "test_lease_release_from_the_callback_needs_a_shared_context", "test_lease_does_not_expire_a_strict_holder")},
    **{f"test_soft_lease.py::{name}": HEARTBEAT for name in (
        "test_lease_reports_compromise_when_a_refresh_fails", "test_lease_records_a_compromise_without_a_callback_deterministically",
        "test_lease_release_from_the_callback_does_not_join_itself", "test_lease_hands_back_the_claim_when_the_heartbeat_cannot_start",
        "test_lease_reports_marker_missing_when_a_refresh_cannot_stat_it",
        "test_lease_reports_owner_changed_when_the_marker_identity_shifts")},
    **{f"test_soft_rw_sync.py::{name}": MARKER for name in (
        "test_leaked_acquired_singleton_is_closed_on_teardown", "test_reentrant_write_holds_and_releases",
        "test_writer_preference_blocks_new_readers", "test_heartbeat_self_stops_when_marker_vanishes",
        "test_writer_phase2_does_not_complete_on_a_peers_marker", "test_symlinked_write_marker_is_refused",
        "test_symlinked_readers_directory_is_refused", "test_readers_path_as_regular_file_is_refused",
        "test_write_marker_is_created_with_0600", "test_readers_directory_is_created_with_0700",
        "test_reader_file_is_created_with_0600", "test_parent_retains_lock_across_fork")},
    **{f"test_soft_rw_sync.py::{name}": HEARTBEAT for name in (
        "test_heartbeat_survives_transient_touch_error", "test_heartbeat_survives_a_transient_marker_error",
        "test_heartbeat_stops_when_marker_evicted", "test_acquire_hands_back_the_slot_when_the_heartbeat_cannot_start",
        "test_refresh_touches_verified_fd_not_swapped_path", "test_write_marker_zero_write_rolls_back",
        "test_touch_writer_marker_returns_false_when_marker_missing", "test_claim_writer_marker_returns_false_on_create_race",
        "test_refresh_marker_stops_once_a_peer_owns_the_marker")},
    "test_soft_rw_async.py::test_async_leaked_singleton_is_closed_on_teardown": MARKER,
    **{f"test_soft_rw_async.py::{name}": HEARTBEAT for name in (
        "test_async_release_and_close_skip_when_pid_differs", "test_async_acquire_cancellation_hands_the_claim_back",
        "test_async_acquire_cancellation_surfaces_a_failed_acquire", "test_async_acquire_cancellation_surfaces_a_failed_release",
        "test_async_release_cancellation_drains_the_release", "test_async_release_cancellation_surfaces_a_failed_release")},
}
SKIPS = {**SKIPS_4,
    "test_on_acquired_*": DESCRIPTOR, "*on_acquired*": DESCRIPTOR, "test_close_*": DESCRIPTOR,
    "test_dual_body_and_close_failure_grouped": DESCRIPTOR, "test_soft_close_*": DESCRIPTOR,
    "test_soft_second_release_does_not_close_reused_descriptor": DESCRIPTOR,
    "test_soft_context_surfaces_close_error_after_cleanup": DESCRIPTOR,
    "test_context_chain_keeps_release_error_with_body_in_context": DESCRIPTOR,
    "test_context_group_*": DESCRIPTOR, "test_context_release_only_failure_propagates_release": DESCRIPTOR,
    "test_unix_release_keeps_lock_held_when_unlock_fails": DESCRIPTOR,
    "test_unix_context_exit_propagates_unlock_failure": DESCRIPTOR,
    "test_release_keeps_lock_held_when_unlock_fails": DESCRIPTOR, "test_filelock_and_descriptor_contend": DESCRIPTOR,
    "test_soft_release_groups_close_and_cleanup_failures": DESCRIPTOR,
    "test_default_mode.py::*": FILE_MODE, "test_lock_mode*": FILE_MODE,
    "test_winner_truncates_stale_content": FILE_CONTENT, "test_contender_preserves_holder_contents": FILE_CONTENT,
    "test_waiter_fd_cannot_split_lock_after_release": FILE_CONTENT,
    "test_stale_inode_retry_on_unlinked_lock": FILE_CONTENT, "test_post_lock_truncate_failure_closes_fd": FILE_CONTENT,
    "test_soft_marker_omits_start_line_without_a_start_token": FILE_CONTENT,
    "test_soft_is_lock_held_by_us_false_for_unparseable_marker": FILE_CONTENT,
    "test_soft_windows_unlink_stops_on_non_permission_error": FILE_CONTENT,
    "test_preserve_lock_file_unix_keeps_pathname": FILE_CONTENT + " (asserts the class is UnixFileLock)",
    "test_preserve_lock_file_async_release_keeps_pathname": FILE_CONTENT + " (asserts the class is AsyncUnixFileLock)",
    "test_fallback_*": FLOCK, "test_flock_not_implemented_unix": FLOCK, "test_preserve_lock_file_fails_closed_on_enosys": FLOCK,
    "test_unix_soft_fallback_keeps_a_replaced_file": FLOCK,
    "test_permission_error_*": MOCKS, "test_sticky_bit_fallback_handles_concurrent_unlink": MOCKS,
    "test_filenotfound_on_fuse_nfs_retries": MOCKS, "test_soft_errors": MOCKS, "test_async_zero_write_rolls_back_acquire": MOCKS,
    "test_poll_interval_used_by_context_manager": MOCKS, "test_poll_interval_acquire_override": MOCKS,
    "test_coroutine_*": INTERNALS, "test_undo_acquire_keeps_registry_entry_while_still_held": INTERNALS,
    "test_rollback_failed_acquire_groups_registration_and_release_failures": INTERNALS,
    "test_async_del_without_any_loop_returns": INTERNALS,
}


def pytest_collection_modifyitems(items):
    for item in items:
        name = item.name.split("[")[0]
        where = f"{item.path.name}::{name}"
        for pattern, reason in SKIPS.items():
            if fnmatch.fnmatch(name, pattern) or fnmatch.fnmatch(where, pattern):
                item.add_marker(pytest.mark.skip(reason=f"libsync: {reason}"))
                break

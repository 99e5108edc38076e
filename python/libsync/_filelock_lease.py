"""filelock 4's ``SoftFileLease`` and ``AsyncSoftFileLease`` over libsync's distributed lock.

filelock's lease is a marker file its holder refreshes (the heartbeat); a peer takes over a claim
left unchanged for ``lease_duration``, and the holder's heartbeat calls ``on_compromise`` when it
finds its claim gone. libsync's lock needs no heartbeat: a live holder's lock never expires, and
a dead holder's lock on this host is taken over at once. ``on_compromise`` is mapped onto
libsync's loss notification: the core's watcher sees the hold's entry gone (broken, or taken by
another) and the lock tells ``on_compromise(LeaseCompromise(...))`` on libsync's notifier thread.
``lease_duration`` and ``heartbeat_interval`` are checked as filelock checks them; with no
expiry and no marker to refresh, they have nothing to act on.
"""
from __future__ import annotations

import math
import os
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, Optional, Union

from ._distributed import HoldEvent
from ._filelock import AcquireReturnProxy, AsyncAcquireReturnProxy, BaseAsyncFileLock, SoftFileLock, _REMOVE_ON_RELEASE

__all__ = ["SoftFileLease", "AsyncSoftFileLease", "LeaseCompromise"]


@dataclass(frozen=True)
class LeaseCompromise:
    """Why a held lease stopped being this process's (filelock's): ``reason`` is
    "marker-missing" (the lock was broken: nobody holds it) or "owner-changed" (another holds it)."""
    lock_file: str
    token: str
    reason: str
    error: Optional[Exception] = None


class _Lease:
    """What SoftFileLease and AsyncSoftFileLease share: the settings, the claim's token, the
    last compromise, and the loss handler."""

    def _lease_init(self, lease_duration: float, heartbeat_interval: Optional[float],
                    on_compromise: Optional[Callable[[LeaseCompromise], None]], options: dict[str, Any]) -> None:
        if isinstance(lease_duration, bool) or not isinstance(lease_duration, (int, float)) \
                or not math.isfinite(lease_duration) or lease_duration <= 0:
            raise ValueError(f"lease_duration must be positive and finite, got {lease_duration!r}")
        heartbeat = lease_duration / 3 if heartbeat_interval is None else heartbeat_interval
        if isinstance(heartbeat, bool) or not isinstance(heartbeat, (int, float)) or not 0 < heartbeat < lease_duration:
            raise ValueError(f"heartbeat_interval must be positive and below lease_duration, got {heartbeat_interval!r}")
        if on_compromise is not None and not callable(on_compromise):
            raise TypeError(f"on_compromise must be callable, not {type(on_compromise).__name__}")
        if "on_event" in options:
            raise TypeError("SoftFileLease reports a lost hold through on_compromise: on_event is not accepted")
        self._lease_duration, self._heartbeat_interval = float(lease_duration), float(heartbeat)
        self._on_compromise = on_compromise
        self._claim_token: Optional[str] = None
        self._compromise: Optional[LeaseCompromise] = None
        options["on_event"] = _lease_event

    @property
    def lease_duration(self) -> float:
        """filelock's staleness before takeover (libsync never expires a live holder's lock)."""
        return self._lease_duration

    @property
    def heartbeat_interval(self) -> float:
        """filelock's refresh interval (libsync has no marker to refresh)."""
        return self._heartbeat_interval

    @property
    def compromise(self) -> Optional[LeaseCompromise]:
        """The last loss of a hold, or None; kept after release, reset by the next acquisition."""
        return self._compromise

    if TYPE_CHECKING:  # (BaseFileLock's, which the classes that use this mix in after it)
        @property
        def lock_counter(self) -> int: ...

        @property
        def token(self) -> Optional[int]: ...

    def _claimed(self) -> None:
        """After an acquire: a fresh hold gets its claim token (its fencing token) and no compromise."""
        if self.lock_counter == 1:
            token = self.token
            self._claim_token, self._compromise = (None if token is None else str(token)), None


def _lease_event(lease: Any, event: HoldEvent) -> None:
    """libsync's loss notification (notifier thread) as filelock's on_compromise."""
    if event != HoldEvent.LOST:
        return
    holder = None
    try:
        holder = lease.holder
    except OSError:  # (the reason only: a store error leaves "marker-missing")
        pass
    reason = "owner-changed" if holder is not None else "marker-missing"
    lease._compromise = compromise = LeaseCompromise(lease.lock_file, lease._claim_token or "", reason)
    if lease._on_compromise is not None:
        lease._on_compromise(compromise)


class SoftFileLease(_Lease, SoftFileLock):
    """filelock's SoftFileLease (see the module doc): SoftFileLock's lock, with ``on_compromise``
    called when the hold is lost and ``compromise`` telling why."""

    def __init__(self, lock_file: Union[str, os.PathLike[str]], *, lease_duration: float = 30.0,
                 heartbeat_interval: Optional[float] = None,
                 on_compromise: Optional[Callable[[LeaseCompromise], None]] = None, **options: Any) -> None:
        self._lease_init(lease_duration, heartbeat_interval, on_compromise, options)
        super().__init__(lock_file, **options)

    def acquire(self, *args: Any, **kwargs: Any) -> AcquireReturnProxy:
        """Acquires as FileLock.acquire does, then, for a fresh hold, records its claim (its fencing token) with no compromise yet."""
        proxy = super().acquire(*args, **kwargs)
        self._claimed()
        return proxy


class AsyncSoftFileLease(_Lease, BaseAsyncFileLock):
    """filelock's AsyncSoftFileLease: SoftFileLease for asyncio (see BaseAsyncFileLock)."""
    _extra_flags = _REMOVE_ON_RELEASE

    def __init__(self, lock_file: Union[str, os.PathLike[str]], *, lease_duration: float = 30.0,
                 heartbeat_interval: Optional[float] = None,
                 on_compromise: Optional[Callable[[LeaseCompromise], None]] = None, **options: Any) -> None:
        self._lease_init(lease_duration, heartbeat_interval, on_compromise, options)
        super().__init__(lock_file, **options)

    # (a coroutine, as BaseAsyncFileLock.acquire: see there)
    async def acquire(self, *args: Any, **kwargs: Any) -> AsyncAcquireReturnProxy:  # type: ignore[override]
        """Acquires as AsyncFileLock.acquire does, then, for a fresh hold, records its claim (its fencing token) with no compromise yet."""
        proxy = await super().acquire(*args, **kwargs)
        self._claimed()
        return proxy

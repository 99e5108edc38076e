"""The distributed lock's etcd backend over TLS (etcds://), against a private etcd that requires
client certificates (scripts/servers.sh start-etcd-tls: a throwaway CA and certificates made
with openssl in the server's temporary directory): acquire and release with fencing tokens
across processes, a server certificate from another CA, no client certificate, a plain
etcd:// URL at the TLS port, and bad TLS options, each a clear error at creation; the read/write
lock and the semaphore over TLS too (the lock's URLs are theirs)."""
import os
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

import pytest

from conftest import assert_exclusion_between_processes
from libsync.distributed_lock import DistributedLock, DistributedSemaphore, ReadWriteLock

ROOT = Path(__file__).resolve().parents[2]
SERVERS_SCRIPT = ROOT / "scripts" / "servers.sh"


@pytest.fixture(scope="module")
def etcd_tls():
    """(the etcds:// URL without options, the directory of its certificates), or a loud skip."""
    directory = Path(tempfile.mkdtemp(prefix="libsync-etcd-tls-py-"))
    started = subprocess.run([str(SERVERS_SCRIPT), "start-etcd-tls", str(directory)])
    try:
        if started.returncode != 0:
            message = (f"!!!!!! SKIPPING etcd over TLS: scripts/servers.sh could not install or start etcd "
                       f"(status {started.returncode}) !!!!!!")
            print("\n" + message, file=sys.stderr)
            pytest.skip(message)
        yield (directory / "etcd.url").read_text().strip(), directory / "tls"
    finally:
        subprocess.run([str(SERVERS_SCRIPT), "stop", str(directory)])
        subprocess.run(["rm", "-rf", str(directory)])


def _url(etcd_tls, lock, **options):
    url, tls = etcd_tls
    given = {"cacert": tls / "ca.pem", "cert": tls / "client.pem", "key": tls / "client-key.pem"}
    given.update(options)
    query = "".join(f"&{name}={value}" for name, value in given.items() if value is not None)
    return f"{url}?lock={lock}-{os.getpid()}{query}"


def test_acquire_release_and_tokens_over_tls(etcd_tls):
    target = _url(etcd_tls, "tls")
    a, b = DistributedLock(target), DistributedLock(target)
    tokens = []
    for holder, other in [(a, b), (b, a), (a, b)]:
        with holder:
            assert not other.try_lock()
            assert other.holder.pid == os.getpid()
            tokens.append(holder.token)
    assert tokens == sorted(set(tokens)) and tokens[0] > 0


def test_exclusion_between_processes_over_tls(etcd_tls, tmp_path):
    assert_exclusion_between_processes(_url(etcd_tls, "tls-processes"), tmp_path / "log", rounds=5)


def test_a_server_certificate_from_another_ca_is_refused(etcd_tls, tmp_path):
    other = tmp_path / "other-ca.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj", "/CN=other",
                    "-keyout", str(tmp_path / "other-key.pem"), "-out", str(other)], check=True, capture_output=True)
    with pytest.raises(ConnectionRefusedError, match="certificate did not verify"):
        DistributedLock(_url(etcd_tls, "wrong-ca", cacert=other))


def test_no_client_certificate_is_refused(etcd_tls):
    with pytest.raises(ConnectionRefusedError, match="cannot connect to the etcd server"):
        DistributedLock(_url(etcd_tls, "no-client-cert", cert=None, key=None))


def test_read_write_lock_over_tls(etcd_tls):
    target = _url(etcd_tls, "tls-rw")
    reader, other, writer = (ReadWriteLock(target, is_singleton=False) for _ in range(3))
    with reader.read_lock(), other.read_lock():
        with pytest.raises(TimeoutError):
            writer.acquire_write(blocking=False)
        read_tokens = {reader.token, other.token}
    with writer.write_lock():
        assert writer.token > max(read_tokens)
        with pytest.raises(TimeoutError):
            reader.acquire_read(blocking=False)


def test_semaphore_over_tls(etcd_tls):
    target = _url(etcd_tls, "tls-semaphore")
    first, second, third = (DistributedSemaphore(target, 2) for _ in range(3))
    assert first.acquire(blocking=False) and second.acquire(blocking=False)
    assert not third.acquire(blocking=False)
    first.release()
    assert third.acquire(blocking=False)
    assert third.token > second.token > 0
    second.release()
    third.release()


def test_waits_over_tls(etcd_tls):
    """A wait watches the key range over a connection of its own: over TLS too. (The holders
    release from a timer thread, most likely while the waiter watches; a release that comes
    first lets the waiter in at its first look, which passes as well.)"""
    target = _url(etcd_tls, "tls-wait")
    holder, waiter = DistributedSemaphore(target, 1, process_owned=True), DistributedSemaphore(target, 1)
    assert holder.acquire(blocking=False)
    later = threading.Timer(0.3, holder.release)
    later.start()
    assert waiter.acquire(timeout=60)
    later.join()
    assert waiter.token > 0
    waiter.release()
    reader, writer = ReadWriteLock(target, is_singleton=False), ReadWriteLock(target, is_singleton=False)
    reader.acquire_read()
    later = threading.Timer(0.3, reader.release)  # (a read hold is the object's: any of its threads releases it)
    later.start()
    with writer.write_lock(timeout=60):
        assert not reader.is_locked
    later.join()


@pytest.mark.parametrize("make", [DistributedLock, lambda url: ReadWriteLock(url, is_singleton=False),
                                  lambda url: DistributedSemaphore(url, 2)], ids=["lock", "rwlock", "semaphore"])
def test_no_client_certificate_is_refused_by_every_kind(etcd_tls, make):
    with pytest.raises(ConnectionRefusedError, match="cannot connect to the etcd server"):
        make(_url(etcd_tls, "no-client-cert", cert=None, key=None))


def test_plain_http_at_the_tls_port_is_an_error_not_a_hang(etcd_tls):
    url, _ = etcd_tls
    with pytest.raises(OSError):
        DistributedLock(url.replace("etcds://", "etcd://") + "?lock=plain&connect_timeout=2")


@pytest.mark.parametrize("options, message", [
    ({"key": None}, "cert= without key="),
    ({"cert": None}, "key= without cert="),
    ({"cacert": "/nonexistent/ca.pem"}, r"cacert=/nonexistent/ca.pem .*cannot read the file"),
    ({"cacert": ""}, "cannot read the file"),
])
def test_bad_tls_options(etcd_tls, options, message):
    with pytest.raises(ValueError, match=message):
        DistributedLock(_url(etcd_tls, "bad", **options))


def test_a_file_that_is_no_certificate(etcd_tls, tmp_path):
    junk = tmp_path / "junk.pem"
    junk.write_text("not a certificate\n")
    with pytest.raises(ValueError, match="holds no CA certificate"):
        DistributedLock(_url(etcd_tls, "junk", cacert=junk))
    with pytest.raises(ValueError, match="holds no certificate"):
        DistributedLock(_url(etcd_tls, "junk", cert=junk))
    _, tls = etcd_tls
    with pytest.raises(ValueError, match="is not the key of"):
        DistributedLock(_url(etcd_tls, "junk", key=tls / "server-key.pem"))


def test_tls_options_on_a_plain_url(etcd_tls):
    url, tls = etcd_tls
    plain = url.replace("etcds://", "etcd://")
    with pytest.raises(ValueError, match="use etcds://"):
        DistributedLock(f"{plain}?lock=x&cacert={tls / 'ca.pem'}")
    with pytest.raises(ValueError, match="for TLS use etcds://"):
        DistributedLock(f"{plain}?lock=x&sslmode=require")

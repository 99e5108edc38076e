"""Python: OSAtomic increment and add beside a threading.Lock-guarded `+= 1` and the `atomics`
package (PyPI), single-threaded and with 2 threads."""
import ctypes
import threading

from harness import per_call_ns, per_call_ns_threads, table
from libsync.osatomic import OSAtomicAdd32, OSAtomicIncrement32

N = 200_000


def main():
    counter = ctypes.c_int32(0)
    lock = threading.Lock()
    box = [0]

    def locked_increment():
        with lock:
            box[0] += 1

    rows = [("threading.Lock-guarded += 1", locked_increment),
            ("libsync OSAtomicIncrement32", lambda: OSAtomicIncrement32(counter)),
            ("libsync OSAtomicAdd32(1, v)", lambda: OSAtomicAdd32(1, counter))]
    try:
        import atomics
        peer = atomics.atomic(width=4, atype=atomics.INT)
        rows.append(("atomics package (PyPI) inc()", peer.inc))
    except ImportError:
        print("(the atomics package is not installed: pip install atomics)")
    # Each lambda adds one Python call to every row alike; the ratios compare like with like.
    table("Python atomic increment", [(name, per_call_ns(f, N)) for name, f in rows], threads=1)
    table("Python atomic increment", [(name, per_call_ns_threads(f, N // 4, 2)) for name, f in rows], threads=2)


if __name__ == "__main__":
    main()

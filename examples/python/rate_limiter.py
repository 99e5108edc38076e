"""A cross-host rate limiter: at most N jobs run at a time, wherever they run, with a distributed
semaphore of N permits (a path here; a postgresql://, redis:// or etcd:// URL for hosts that share
no file system: pass it as the first argument). Each job's permit has a fencing token; the results
store records the token that last claimed each job and refuses an older one, so a worker whose
permit was lost (a lease that ran out while it was stopped; broken here) cannot overwrite the
result of the worker the job was handed to next."""
import sys
import tempfile
import threading

from libsync.distributed_lock import DistributedSemaphore, LockBrokenError

N = 2


class Results:
    """The shared resource: per job, the token that last claimed it, and its result."""

    def __init__(self):
        self.claims, self.values, self.mutex = {}, {}, threading.Lock()

    def claim(self, job, token):
        with self.mutex:
            if token < self.claims.get(job, 0):
                raise PermissionError(f"stale token {token} for job {job}")
            self.claims[job] = token

    def write(self, job, value, token):
        with self.mutex:
            if token < self.claims[job]:  # the job was handed to a newer permit meanwhile
                raise PermissionError(f"stale token {token} for job {job}")
            self.values[job] = value


target = sys.argv[1] if len(sys.argv) > 1 else tempfile.mkdtemp() + "/jobs.semaphore"
results, running, most, guard = Results(), 0, 0, threading.Lock()


def worker(jobs):
    global running, most
    limiter = DistributedSemaphore(target, N)  # one object per concurrent job (one permit each)
    for job in jobs:
        with limiter:  # waits while N jobs run, on any host
            with guard:
                running += 1
                most = max(most, running)
            results.claim(job, limiter.token)
            results.write(job, job * job, limiter.token)
            with guard:
                running -= 1


threads = [threading.Thread(target=worker, args=(range(i, 24, 6),)) for i in range(6)]
for thread in threads:
    thread.start()
for thread in threads:
    thread.join()
assert most <= N and results.values == {job: job * job for job in range(24)}

# A worker loses its permit mid-job (here an operator breaks the semaphore; with a lease, a pause
# longer than ttl does it): the job goes to another worker, and the old worker's write is refused.
slow, fresh = DistributedSemaphore(target, N), DistributedSemaphore(target, N)
assert slow.acquire()
results.claim(99, slow.token)
DistributedSemaphore(target, N).break_lock()
assert fresh.acquire()
results.claim(99, fresh.token)
results.write(99, "fresh", fresh.token)
try:
    results.write(99, "slow", slow.token)
    sys.exit("a stale token was accepted")
except PermissionError as refused:
    print("refused:", refused)
try:
    slow.release()
    sys.exit("the lost permit was not reported")
except LockBrokenError:
    print("the slow worker learns that its permit was lost")
fresh.release()
assert results.values[99] == "fresh"
print(f"24 jobs, at most {most} at a time; ok")

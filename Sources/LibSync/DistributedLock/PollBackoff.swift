/// The pauses of a polling wait for a distributed lock: the first is the backend's first pause
/// (`LockBackend.firstPollNanoseconds`) or else the poll interval; each next one doubles, up to
/// the poll interval; each is cut to the time left. The blocking wait (`DistributedLock.lockCode`)
/// and the async one (AsyncDistributedLock.swift) pause by this one schedule.
struct PollBackoff {
    private let poll: Int64
    private var nap: Int64

    /// `poll` > 0: the longest pause; `first`: the first pause (nil: `poll`).
    init(poll: Int64, first: Int64?) {
        self.poll = poll
        nap = min(poll, first ?? poll)
    }

    /// The next pause in ns, at most until the monotonic `end` (< 0: none) from `now`.
    mutating func next(until end: Int64, now: Int64) -> Int64 {
        let pause = min(nap, Deadline.remaining(end, now: now) ?? nap)
        nap = nap > poll / 2 ? poll : nap * 2  // (saturates: any poll up to Int64.max)
        return pause
    }
}

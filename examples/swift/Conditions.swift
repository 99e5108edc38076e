import Glibc
import LibSync

/// Listings 4-3/4-4 (a Cocoa-style condition) and the NSConditionLock producer/consumer.
func conditionsDemo() throws -> Bool {
    final class Work: @unchecked Sendable { let condition = SyncCondition(); var timeToDoWork = 0, done = 0 }
    let work = Work()
    let waiter = spawn {
        for _ in 0..<3 {
            try! work.condition.lock()
            while work.timeToDoWork <= 0 { try! work.condition.wait() }
            work.timeToDoWork -= 1
            work.done += 1  // Do real work here.
            try! work.condition.unlock()
        }
    }
    for _ in 0..<3 {
        try work.condition.lock()
        work.timeToDoWork += 1
        work.condition.signal()
        try work.condition.unlock()
    }
    pthread_join(waiter, nil)
    print("Listings 4-3/4-4 (SyncCondition): \(work.done) units of work done, timeToDoWork = \(work.timeToDoWork)")

    let NO_DATA = 0, HAS_DATA = 1
    final class Queue: @unchecked Sendable { var items: [Int] = [], consumed: [Int] = [] }
    let condLock = SyncConditionLock(condition: NO_DATA), queue = Queue()
    let consumer = spawn {
        for _ in 0..<10 {
            try! condLock.lock(whenCondition: HAS_DATA)
            let item = queue.items.removeLast()  // Remove data from the queue.
            try! condLock.unlock(withCondition: queue.items.isEmpty ? NO_DATA : HAS_DATA)
            queue.consumed.append(item)          // Process the data locally.
        }
    }
    for i in 1...10 {
        try condLock.lock()
        queue.items.append(i)                    // Add data to the queue.
        try condLock.unlock(withCondition: HAS_DATA)
    }
    pthread_join(consumer, nil)
    let sum = queue.consumed.reduce(0, +)
    print("NSConditionLock producer/consumer (SyncConditionLock): consumed 1..10, sum \(sum), condition NO_DATA = \(condLock.condition == NO_DATA ? "yes" : "no")")
    return work.done == 3 && sum == 55
}

/// Starts a thread running `body`.
func spawn(_ body: @escaping @Sendable () -> Void) -> pthread_t {
    final class Box { let body: @Sendable () -> Void; init(_ body: @escaping @Sendable () -> Void) { self.body = body } }
    var thread = pthread_t()
    pthread_create(&thread, nil, { raw in
        Unmanaged<Box>.fromOpaque(raw!).takeRetainedValue().body()
        return nil
    }, Unmanaged.passRetained(Box(body)).toOpaque())
    return thread
}

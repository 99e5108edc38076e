import Dispatch
import Foundation
import Synchronization
import XCTest
@testable import LibSync

/// Counts live instances, so tests can see that every retain was balanced.
final class Tracked: @unchecked Sendable {
    nonisolated(unsafe) static var live = AtomicInteger<Int64>(0)
    let serial: Int
    init(_ serial: Int) { self.serial = serial; Tracked.live.incrementAndGet() }
    deinit { Tracked.live.decrementAndGet() }
}

final class AtomicsTests: XCTestCase {
    func testAtomicBoolean() {
        let b = AtomicBoolean()
        XCTAssertFalse(b.get())
        XCTAssertTrue(b.compareAndSet(expected: false, desired: true))
        XCTAssertFalse(b.compareAndSet(expected: false, desired: true))
        XCTAssertTrue(b.getAndSet(false))
        b.set(true)
        XCTAssertTrue(b.get())
    }

    func testAtomicIntegerVocabularyAndWrapping() {
        let i = AtomicInteger32(5)
        XCTAssertEqual(i.getAndIncrement(), 5)
        XCTAssertEqual(i.incrementAndGet(), 7)
        XCTAssertEqual(i.getAndDecrement(), 7)
        XCTAssertEqual(i.decrementAndGet(), 5)
        XCTAssertEqual(i.getAndAdd(10), 5)
        XCTAssertEqual(i.addAndGet(-20), -5)
        XCTAssertEqual(i.getAndSet(.max), -5)
        XCTAssertEqual(i.incrementAndGet(), .min)
        XCTAssertTrue(i.compareAndSet(expected: .min, desired: 3))
        XCTAssertFalse(i.compareAndSet(expected: .min, desired: 4))
        let l = AtomicInteger64(.max)
        XCTAssertEqual(l.incrementAndGet(), .min)
        DispatchQueue.concurrentPerform(iterations: 8) { _ in
            for _ in 0..<10_000 { l.incrementAndGet() }
        }
        XCTAssertEqual(l.get(), Int64.min + 80_000)
    }

    func testAtomicReferenceIdentityAndLifetimes() {
        let base = Tracked.live.get()
        do {
            let a = Tracked(1), b = Tracked(2)
            let ref = AtomicReference<Tracked>()
            XCTAssertNil(ref.get())
            ref.set(a)
            XCTAssertTrue(ref.get() === a)
            XCTAssertFalse(ref.compareAndSet(expected: b, desired: b))
            XCTAssertTrue(ref.compareAndSet(expected: a, desired: b))
            XCTAssertTrue(ref.getAndSet(nil) === b)
            XCTAssertTrue(ref.compareAndSet(expected: nil, desired: Tracked(3)))
            XCTAssertEqual(ref.get()?.serial, 3)
        }
        XCTAssertEqual(Tracked.live.get(), base)  // the reference released what it held
    }

    func testAtomicReferenceTortureBalancesLifetimes() {
        let base = Tracked.live.get()
        do {
            let objects = (0..<3).map { Tracked($0) }
            let ref = AtomicReference(objects[0])
            DispatchQueue.concurrentPerform(iterations: 4) { t in
                for k in 0..<20_000 {
                    let mine = objects[(k + t) % 3]
                    switch (k * 7 + t) % 5 {
                    case 0, 1: XCTAssertNotNil(ref.get().map { $0.serial })
                    case 2: ref.set(mine)
                    case 3: _ = ref.compareAndSet(expected: ref.get(), desired: mine)
                    default: _ = ref.getAndSet(mine)
                    }
                }
            }
            // Fresh objects replaced while read: each must die exactly once, after its readers.
            DispatchQueue.concurrentPerform(iterations: 3) { t in
                for k in 0..<20_000 {
                    if t == 0 { ref.set(Tracked(k)) } else { _ = ref.get()?.serial }
                }
            }
        }
        XCTAssertEqual(Tracked.live.get(), base)
    }

    func testThrottlerNeverAdmitsMoreThanLimit() {
        let throttler = SyncThrottler(limit: 2)
        let inside = AtomicInteger32(), admitted = AtomicInteger32()
        DispatchQueue.concurrentPerform(iterations: 6) { _ in
            for _ in 0..<5_000 {
                let ran = throttler.throttledExec {
                    XCTAssertLessThanOrEqual(inside.incrementAndGet(), 2)
                    inside.decrementAndGet()
                }
                if ran { admitted.incrementAndGet() }
            }
        }
        XCTAssertEqual(throttler.holders, 0)
        XCTAssertEqual(Int(admitted.get()) + throttler.rejections, 30_000)
        XCTAssertEqual(throttler.withSlot { 42 }, 42)
    }

    func testThrottlerTimedWait() throws {
        let throttler = SyncThrottler(limit: 1)
        XCTAssertTrue(throttler.tryEnter())
        XCTAssertFalse(throttler.tryEnter())
        XCTAssertNil(throttler.withSlot { 1 })
        let start = monotonicNow()
        XCTAssertFalse(throttler.tryEnter(timeout: .milliseconds(100)))
        let waited = Double(monotonicNow() - start) / 1e9
        XCTAssertTrue(waited >= 0.09 && waited < 5)
        XCTAssertEqual(throttler.rejections, 3)
        DispatchQueue.global().asyncAfter(deadline: .now() + .milliseconds(50)) { throttler.exit() }
        XCTAssertTrue(throttler.tryEnter(timeout: .seconds(60)))  // the exit above comes (a bound, not a time)
        throttler.exit()
        XCTAssertEqual(throttler.holders, 0)
    }

    /// A negative timeout means "now" (it used to mean "forever"); one past the clock's range
    /// means "forever" (it used to wrap to an arbitrary deadline).
    func testThrottlerTimeoutsOutsideTheClocksRange() throws {
        let throttler = SyncThrottler(limit: 1)
        XCTAssertTrue(throttler.tryEnter())
        let refused = finishes(within: 10) {
            !throttler.tryEnter(timeout: .seconds(-1))
        }
        XCTAssertEqual(refused, true)
        let admitted = Atomic<Bool>(false)
        let waiter = Thread {
            XCTAssertTrue(throttler.tryEnter(timeout: .seconds(Int64.max)))
            admitted.store(true, ordering: .sequentiallyConsistent)
            throttler.exit()
        }
        waiter.start()
        throttler.exit()
        XCTAssertEqual(finishes(within: 10) { while !admitted.load(ordering: .sequentiallyConsistent) { usleep(1000) }; return true }, true)
    }

    /// `body`'s result, or nil if it has not returned within `seconds` (a guard against a hang,
    /// never a timing assertion; the thread is then left behind).
    private func finishes<T: Sendable>(within seconds: Int, _ body: @escaping @Sendable () -> T) -> T? {
        let result = Mutex<T?>(nil)
        Thread { let value = body(); result.withLock { $0 = value } }.start()
        for _ in 0..<(seconds * 1000) {
            if let value = result.withLock({ $0 }) { return value }
            usleep(1000)
        }
        return nil
    }

    func testConcurrentDictionary() {
        let base = Tracked.live.get()
        do {
            let d = ConcurrentDictionary<String, Tracked>()
            XCTAssertNil(d["name"])
            d["name"] = Tracked(1)
            let held = d["name"]
            d["name"] = Tracked(2)  // replaces; `held` stays valid
            XCTAssertEqual(held?.serial, 1)
            XCTAssertEqual(d["name"]?.serial, 2)
            d["other"] = Tracked(3)
            XCTAssertEqual(d.count, 2)
            XCTAssertEqual(Set(d.keys), ["name", "other"])
            XCTAssertEqual(d.removeValue(forKey: "other")?.serial, 3)
            d["name"] = nil
            XCTAssertEqual(d.count, 0)
            // Seed 002's churn: one writer replacing the value, readers using it.
            DispatchQueue.concurrentPerform(iterations: 3) { t in
                for k in 0..<20_000 {
                    if t == 0 { d["key"] = Tracked(k) } else { _ = d["key"]?.serial }
                }
            }
            XCTAssertEqual(d.count, 1)
        }
        XCTAssertEqual(Tracked.live.get(), base)
    }
}

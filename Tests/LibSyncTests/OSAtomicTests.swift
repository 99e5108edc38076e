import Dispatch
import Synchronization
import XCTest
@testable import LibSync

final class OSAtomicTests: XCTestCase {
    /// The C ABI views caller memory as `Atomic<T>`: that is only sound if the layouts match.
    func testAtomicHasTheLayoutOfItsValue() {
        func check<T: AtomicRepresentable>(_: T.Type, line: UInt = #line) {
            XCTAssertEqual(MemoryLayout<Atomic<T>>.size, MemoryLayout<T>.size, line: line)
            XCTAssertEqual(MemoryLayout<Atomic<T>>.alignment, MemoryLayout<T>.alignment, line: line)
            XCTAssertEqual(MemoryLayout<Atomic<T>>.stride, MemoryLayout<T>.stride, line: line)
        }
        check(Int32.self); check(Int64.self); check(UInt32.self); check(UInt8.self); check(Int.self)
        check(UnsafeMutableRawPointer?.self)
        XCTAssertEqual(MemoryLayout<Atomic<WordPair>>.size, 16)
        XCTAssertEqual(MemoryLayout<Atomic<WordPair>>.alignment, 16)
    }

    /// Listing 4-1 of Apple's Threading Programming Guide.
    func testListing4_1() {
        let theValue = OSAtomicStorage<Int32>(0)
        _ = OSAtomicTestAndSet(0, theValue)
        XCTAssertEqual(theValue.value, 128)
        theValue.value = 0
        _ = OSAtomicTestAndSet(7, theValue)
        XCTAssertEqual(theValue.value, 1)
        theValue.value = 0
        _ = OSAtomicTestAndSet(15, theValue)
        XCTAssertEqual(theValue.value, 256)
        _ = OSAtomicCompareAndSwap32(256, 512, theValue)
        XCTAssertEqual(theValue.value, 512)
        _ = OSAtomicCompareAndSwap32(256, 1024, theValue)
        XCTAssertEqual(theValue.value, 512)
    }

    func testArithmeticReturnsNewValueAndWraps() {
        let v = OSAtomicStorage<Int32>(5)
        XCTAssertEqual(OSAtomicAdd32(3, v), 8)
        XCTAssertEqual(OSAtomicAdd32Barrier(-10, v), -2)
        XCTAssertEqual(OSAtomicIncrement32(v), -1)
        XCTAssertEqual(OSAtomicDecrement32Barrier(v), -2)
        v.value = .max
        XCTAssertEqual(OSAtomicIncrement32Barrier(v), .min)
        XCTAssertEqual(OSAtomicDecrement32(v), .max)
        let w = OSAtomicStorage<Int64>(.max)
        XCTAssertEqual(OSAtomicIncrement64(w), .min)
        XCTAssertEqual(OSAtomicDecrement64Barrier(w), .max)
        XCTAssertEqual(OSAtomicAdd64(1 << 40, OSAtomicStorage<Int64>(1)), (1 << 40) + 1)
        XCTAssertEqual(OSAtomicAdd64Barrier(-1, w), .max - 1)
        XCTAssertEqual(OSAtomicIncrement64Barrier(w), .max)
        XCTAssertEqual(OSAtomicDecrement64(w), .max - 1)
    }

    func testLogicNewVersusOrig() {
        let v = OSAtomicStorage<UInt32>(0x0F)
        XCTAssertEqual(OSAtomicOr32(0xF0, v), 0xFF)
        XCTAssertEqual(OSAtomicAnd32Orig(0x3C, v), 0xFF)
        XCTAssertEqual(OSAtomicAnd32(0x0C, v), 0x0C)
        XCTAssertEqual(OSAtomicXor32OrigBarrier(0xFF, v), 0x0C)
        XCTAssertEqual(OSAtomicXor32Barrier(0xFF, v), 0x0C)
        XCTAssertEqual(OSAtomicOr32OrigBarrier(0x80000000, v), 0x0C)
        XCTAssertEqual(v.value, 0x8000000C)
        XCTAssertEqual(OSAtomicOr32Barrier(0, v), Int32(bitPattern: 0x8000000C))
        XCTAssertEqual(OSAtomicAnd32Barrier(0xFF, v), 0x0C)
        XCTAssertEqual(OSAtomicAnd32OrigBarrier(0x4, v), 0x0C)
        XCTAssertEqual(OSAtomicXor32(0x1, v), 0x5)
        XCTAssertEqual(OSAtomicOr32Orig(0x2, v), 0x5)
        XCTAssertEqual(OSAtomicXor32Orig(0x7, v), 0x7)
        XCTAssertEqual(v.value, 0)
    }

    func testCompareAndSwapArgumentOrder() {
        let v = OSAtomicStorage<Int32>(256)
        XCTAssertTrue(OSAtomicCompareAndSwap32(256, 512, v))
        XCTAssertFalse(OSAtomicCompareAndSwap32Barrier(256, 1024, v))
        XCTAssertEqual(v.value, 512)
        let w = OSAtomicStorage<Int64>(1 << 40)
        XCTAssertTrue(OSAtomicCompareAndSwap64Barrier(1 << 40, .min, w))
        XCTAssertFalse(OSAtomicCompareAndSwap64(1 << 40, 0, w))
        XCTAssertEqual(w.value, .min)
        let i = OSAtomicStorage<CInt>(-1)
        XCTAssertTrue(OSAtomicCompareAndSwapInt(-1, 1, i) && !OSAtomicCompareAndSwapIntBarrier(-1, 2, i))
        let l = OSAtomicStorage<CLong>(1 << 62)
        XCTAssertTrue(OSAtomicCompareAndSwapLongBarrier(1 << 62, -3, l) && !OSAtomicCompareAndSwapLong(1 << 62, 2, l))
        XCTAssertEqual(l.value, -3)
        let target = UnsafeMutableRawPointer(bitPattern: 0x1000)
        let p = OSAtomicStorage<UnsafeMutableRawPointer?>(nil)
        XCTAssertTrue(OSAtomicCompareAndSwapPtr(nil, target, p))
        XCTAssertFalse(OSAtomicCompareAndSwapPtrBarrier(nil, nil, p))
        XCTAssertEqual(p.value, target)
    }

    func testBitNumberingIncludingMostSignificantBits() {
        let v = OSAtomicStorage<UInt32>(0)
        XCTAssertFalse(OSAtomicTestAndSet(24, v))
        XCTAssertEqual(v.value, 0x8000_0000)
        XCTAssertTrue(OSAtomicTestAndSetBarrier(24, v))
        XCTAssertTrue(OSAtomicTestAndClear(24, v))
        XCTAssertFalse(OSAtomicTestAndClearBarrier(24, v))
        let w = OSAtomicStorage<UInt64>(0)
        XCTAssertFalse(OSAtomicTestAndSet(56, w))
        XCTAssertFalse(OSAtomicTestAndSet(63, w))
        XCTAssertEqual(w.value, (1 << 63) | (1 << 56))
        OSMemoryBarrier()
    }

    func testThreadsHammeringCountersAndCASLoops() {
        let counter = OSAtomicStorage<Int64>(0), casCounter = OSAtomicStorage<Int32>(0)
        let threads = 8, iterations = 50_000
        DispatchQueue.concurrentPerform(iterations: threads) { _ in
            for _ in 0..<iterations {
                _ = OSAtomicIncrement64Barrier(counter)
                var old: Int32
                repeat { old = OSAtomicAdd32(0, casCounter) } while !OSAtomicCompareAndSwap32Barrier(old, old + 1, casCounter)
            }
        }
        XCTAssertEqual(counter.value, Int64(threads * iterations))
        XCTAssertEqual(casCounter.value, Int32(threads * iterations))
    }

    func testSpinLockExcludesAndNeverSpinsForever() {
        let lock = OSAtomicStorage<OSSpinLock>(OS_SPINLOCK_INIT)
        let guarded = OSAtomicStorage<Int>(0)  // changed plainly, under the lock
        // 16 threads on 2 cores: a spin lock without a sleep phase would crawl here.
        DispatchQueue.concurrentPerform(iterations: 16) { _ in
            for _ in 0..<20_000 {
                OSSpinLockLock(lock)
                guarded.value += 1
                OSSpinLockUnlock(lock)
            }
        }
        XCTAssertEqual(guarded.value, 16 * 20_000)
        XCTAssertTrue(OSSpinLockTry(lock))
        XCTAssertFalse(OSSpinLockTry(lock))
        OSSpinLockUnlock(lock)
        XCTAssertEqual(lock.value, 0)
    }

    func testQueuesLoseAndDuplicateNothing() {
        struct Node { var link: UnsafeMutableRawPointer?; var id: Int }
        let perThread = 1000, threads = 4
        nonisolated(unsafe) let nodes = UnsafeMutablePointer<Node>.allocate(capacity: perThread * threads)
        defer { nodes.deallocate() }
        for i in 0..<perThread * threads { (nodes + i).initialize(to: Node(link: nil, id: i)) }
        let offset = MemoryLayout<Node>.offset(of: \Node.link)!
        let lifo = OSQueueHead(), fifo = OSFifoQueueHead()
        for useFIFO in [false, true] {
            DispatchQueue.concurrentPerform(iterations: threads) { t in
                for i in 0..<perThread {
                    let node = UnsafeMutableRawPointer(nodes + t * perThread + i)
                    useFIFO ? OSAtomicFifoEnqueue(fifo, node, offset) : OSAtomicEnqueue(lifo, node, offset)
                    // Churn: take one out and put it back.
                    if let taken = useFIFO ? OSAtomicFifoDequeue(fifo, offset) : OSAtomicDequeue(lifo, offset) {
                        useFIFO ? OSAtomicFifoEnqueue(fifo, taken, offset) : OSAtomicEnqueue(lifo, taken, offset)
                    }
                }
            }
            var seen = Set<Int>()
            while let raw = useFIFO ? OSAtomicFifoDequeue(fifo, offset) : OSAtomicDequeue(lifo, offset) {
                XCTAssertTrue(seen.insert(raw.assumingMemoryBound(to: Node.self).pointee.id).inserted)
            }
            XCTAssertEqual(seen.count, perThread * threads)
        }
        // Order: LIFO pops the last push; FIFO the first.
        let a = UnsafeMutableRawPointer(nodes), b = UnsafeMutableRawPointer(nodes + 1)
        OSAtomicEnqueue(lifo, a, offset); OSAtomicEnqueue(lifo, b, offset)
        OSAtomicFifoEnqueue(fifo, a, offset); OSAtomicFifoEnqueue(fifo, b, offset)
        XCTAssertEqual(OSAtomicDequeue(lifo, offset), b)
        XCTAssertEqual(OSAtomicFifoDequeue(fifo, offset), a)
    }
}

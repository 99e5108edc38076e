// The seeds' listings from Swift, on libsync. `swift run sync-demo`; `sync-demo TARGET` runs the
// distributed lock's calls on that server URL alone (serverLockDemo, DistributedLock.swift).
import Foundation
import LibSync

if CommandLine.arguments.count > 1 {
    if try !serverLockDemo(CommandLine.arguments[1]) { fatalError("the server lock did not behave as documented") }
    exit(0)
}

func show(_ step: String, _ value: Int32, _ wanted: Int32) -> Bool {
    print(step.padding(toLength: 48, withPad: " ", startingAt: 0), "theValue =", value, value == wanted ? "(as Apple says)" : "(WRONG)")
    return value == wanted
}

// Listing 4-1, Apple's Threading Programming Guide: atomic test-and-set and compare-and-swap.
print("Listing 4-1 (Swift):")
let theValue = OSAtomicStorage<Int32>(0)
var ok = true
_ = OSAtomicTestAndSet(0, theValue)
ok = show("OSAtomicTestAndSet(0, theValue)", theValue.value, 128) && ok
theValue.value = 0
_ = OSAtomicTestAndSet(7, theValue)
ok = show("OSAtomicTestAndSet(7, theValue)", theValue.value, 1) && ok
theValue.value = 0
_ = OSAtomicTestAndSet(15, theValue)
ok = show("OSAtomicTestAndSet(15, theValue)", theValue.value, 256) && ok
_ = OSAtomicCompareAndSwap32(256, 512, theValue)
ok = show("OSAtomicCompareAndSwap32(256, 512, theValue)", theValue.value, 512) && ok
_ = OSAtomicCompareAndSwap32(256, 1024, theValue)
ok = show("OSAtomicCompareAndSwap32(256, 1024, theValue)", theValue.value, 512) && ok
if !ok { fatalError("Listing 4-1 did not behave as Apple documents") }

print("\nConditions (Swift):")
if try !conditionsDemo() { fatalError("the condition listings did not behave as Apple documents") }
print("\nSignals (Swift):"); if try !signalsDemo() { fatalError("the routed signal did not reach its thread") }
print("\nLock-order checking (Swift):"); if !lockOrderDemo() { fatalError("the inversion was not reported") }
print("\nApple locks (Swift):"); if !appleLocksDemo() { fatalError("the cache or the counter lost an update") }
print("\nDistributed lock (Swift):"); if try !distributedLockDemo() { fatalError("the distributed lock did not behave as documented") }
print("\nLoss notification (Swift):"); if try !lossNotificationDemo() { fatalError("the holder was not told its hold was lost") }
print("\nRead/write distributed lock (Swift):"); if try !distributedReadWriteLockDemo() { fatalError("the read/write lock did not behave as documented") }
print("\nRate limiter (Swift):"); if try !rateLimiterDemo() { fatalError("the rate limiter let more than N in, or took a stale token") }

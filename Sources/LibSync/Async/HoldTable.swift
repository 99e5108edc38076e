import Synchronization

/// This process's async holds: lock word address -> the holder (a task's identity, a C handle's
/// or an owner's), found without a lock in the common case.
///
/// A fixed open-addressed table of (word, holder) slots, each word probed in a window of
/// `window` slots from its hash; a word whose window is full goes to `overflow` (a dictionary
/// behind a lock, counted in `overflowCount`, consulted only while it holds entries). An entry
/// is added by the task that just took the word and removed by its holder before it releases
/// the word: the lock itself orders the operations on one word, so a slot needs no lock:
/// - add claims an empty slot (CAS of its word from 0), then stores the holder;
/// - remove clears the holder by CAS (of exactly the holder: one release wins), then the word.
/// A reader racing them may see a claimed slot whose holder is not stored yet (0): "not this
/// holder", which is what it is for every reader but the holder itself, whose own add came
/// before its check.
///
/// One table per process, kept across fork(): a child inherits its parent's entries, whose
/// words name the parent's async holder, not the child's (an entry is only consulted for a word
/// that names this process's), and are overwritten when the child's own tasks take the word.
let asyncHolds = HoldTable()

final class HoldTable: @unchecked Sendable {
    static let capacity = 4096  // a power of two
    static let window = 8

    private let words: UnsafeMutablePointer<Atomic<UInt>>
    private let holders: UnsafeMutablePointer<Atomic<UInt>>
    private let overflow = LockedState([UInt: UInt]())
    private let overflowCount = Atomic<Int>(0)

    init() {
        words = .allocate(capacity: Self.capacity)
        holders = .allocate(capacity: Self.capacity)
        for i in 0..<Self.capacity {
            (words + i).initialize(to: Atomic(0))
            (holders + i).initialize(to: Atomic(0))
        }
    }

    @inline(__always) private static func home(_ word: UInt) -> Int {
        Int(truncatingIfNeeded: (word &>> 2) &* 0x9E37_79B9_7F4A_7C15 &>> 52) & (capacity - 1)
    }

    /// The slot holding `word`, if any.
    @inline(__always) private func slot(of word: UInt) -> Int? {
        let home = Self.home(word)
        for i in 0..<Self.window {
            let slot = (home + i) & (Self.capacity - 1)
            if words[slot].load(ordering: .acquiring) == word { return slot }
        }
        return nil
    }

    /// Records `holder` for `word`. (An entry left for the word, by a lock whose memory was
    /// freed while a task held it, is overwritten: the word is the new lock's.)
    func add(_ word: UInt, holder: UInt) {
        // One pass over the window: the word's slot if it has one, else the first empty slot.
        let home = Self.home(word)
        var empty = -1
        for i in 0..<Self.window {
            let slot = (home + i) & (Self.capacity - 1)
            let present = words[slot].load(ordering: .acquiring)
            if present == word {
                holders[slot].store(holder, ordering: .releasing)
                return
            }
            if present == 0 && empty < 0 { empty = slot }
        }
        if empty >= 0 && overflowCount.load(ordering: .relaxed) == 0
            && words[empty].compareExchange(expected: 0, desired: word, ordering: .acquiring).exchanged {
            holders[empty].store(holder, ordering: .releasing)
            return
        }
        if overflowCount.load(ordering: .relaxed) != 0 {
            let updated = overflow.withLock { table -> Bool in
                guard table[word] != nil else { return false }
                table[word] = holder
                return true
            }
            if updated { return }
        }
        for i in 0..<Self.window {
            let slot = (home + i) & (Self.capacity - 1)
            if words[slot].load(ordering: .relaxed) == 0
                && words[slot].compareExchange(expected: 0, desired: word, ordering: .acquiring).exchanged {
                holders[slot].store(holder, ordering: .releasing)
                return
            }
        }
        overflow.withLock { table in
            if table.updateValue(holder, forKey: word) == nil { overflowCount.add(1, ordering: .relaxed) }
        }
    }

    /// Removes `word`'s entry if `holder` (nonzero) has it; returns whether it did.
    func remove(_ word: UInt, holder: UInt) -> Bool {
        guard holder != 0 else { return false }
        if let slot = slot(of: word) {
            guard holders[slot].compareExchange(expected: holder, desired: 0, ordering: .acquiringAndReleasing).exchanged else { return false }
            words[slot].store(0, ordering: .releasing)
            return true
        }
        guard overflowCount.load(ordering: .relaxed) != 0 else { return false }
        return overflow.withLock { table in
            guard table[word] == holder else { return false }
            table[word] = nil
            overflowCount.subtract(1, ordering: .relaxed)
            return true
        }
    }

    /// The holder recorded for `word`, if any.
    func holder(of word: UInt) -> UInt? {
        if let slot = slot(of: word) {
            let holder = holders[slot].load(ordering: .acquiring)
            return holder == 0 ? nil : holder
        }
        guard overflowCount.load(ordering: .relaxed) != 0 else { return nil }
        return overflow.withLock { $0[word] }
    }
}

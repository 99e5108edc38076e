import Foundation
import LibSync  // on Apple platforms: import os (for OSAllocatedUnfairLock)

/// Code written for Apple platforms, unchanged but for the import: an image cache whose state
/// an OSAllocatedUnfairLock guards.
final class ImageCache: Sendable {
    private let sizes = OSAllocatedUnfairLock(initialState: [String: Int]())

    func size(of name: String) -> Int {
        sizes.withLock { sizes in
            if let size = sizes[name] { return size }
            let size = name.utf8.count * 100  // stands for decoding the image
            sizes[name] = size
            return size
        }
    }

    var count: Int { sizes.withLock { $0.count } }
}

/// The cache from four threads, and a request counter in libsync's own value lock
/// (SyncLockedValue: owner- and lock-order-checked).
func appleLocksDemo() -> Bool {
    let cache = ImageCache()
    let requests = SyncLockedValue(0)
    DispatchQueue.concurrentPerform(iterations: 4) { _ in
        for name in ["a.png", "bb.png", "ccc.png"] {
            _ = cache.size(of: name)
            requests.withLock { $0 += 1 }
        }
    }
    let total = requests.withLock { $0 }
    print("cached images: \(cache.count), requests: \(total), size of bb.png: \(cache.size(of: "bb.png"))")
    return cache.count == 3 && total == 12 && cache.size(of: "bb.png") == 600
}

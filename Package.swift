// swift-tools-version:6.0
// libsync: thread-synchronization primitives. The Swift core (LibSync) holds the logic;
// SyncCABI exports it through @_cdecl as the C ABI of libsync.so (product "sync").
// License: MIT (see LICENSE). Version: see VERSION.
import PackageDescription

let package = Package(
    name: "libsync",
    products: [
        // Swift users: `import LibSync`.
        .library(name: "LibSync", targets: ["LibSync"]),
        // C and Python users: libsync.so. For a self-contained build (Swift runtime linked in,
        // only the C API exported) use CMake, see README.
        .library(name: "sync", type: .dynamic, targets: ["SyncCABI"]),
    ],
    targets: [
        // System calls Swift cannot make directly (futex, gettid): no logic here.
        .target(name: "CSyncShim"),
        .target(name: "LibSync", dependencies: ["CSyncShim"]),
        .target(name: "SyncCABI", dependencies: ["LibSync"], exclude: ["exports.map"]),
        .testTarget(name: "LibSyncTests", dependencies: ["LibSync", "SyncCABI"]),
        // The seeds' listings from Swift: `swift run sync-demo`.
        .executableTarget(name: "sync-demo", dependencies: ["LibSync"], path: "examples/swift"),
        // The README's Swift snippet, verbatim (scripts/snippets.py checks): `swift run quickstart`.
        .executableTarget(name: "quickstart", dependencies: ["LibSync"], path: "examples/quickstart-swift"),
        // Benchmarks beside their peers: `swift run -c release SyncBenchmarks`.
        .executableTarget(name: "SyncBenchmarks", dependencies: ["LibSync"], path: "benchmarks/swift"),
    ]
)

// libsync's Swift benchmarks: `swift run -c release SyncBenchmarks [family ...]`
// (benchmarks/run.sh swift). With no argument, every family runs.
let families: [(String, () -> Void)] = [
    ("osatomic", osatomicBenchmarks),
    ("locks", locksBenchmarks),
    ("contended", contendedWorkloadBenchmarks),
    ("unfair", unfairLockBenchmarks),
    ("atomics", atomicsBenchmarks),
    ("distributed", distributedLockBenchmarks),
    ("queues", queuesBenchmarks),
    ("conditions", conditionsBenchmarks),
    ("async", asyncBenchmarks),
]
let wanted = Set(CommandLine.arguments.dropFirst())
for (name, run) in families where wanted.isEmpty || wanted.contains(name) { run() }

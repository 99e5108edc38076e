// libsync's Swift benchmarks: `swift run -c release SyncBenchmarks` (benchmarks/run.sh swift).
osatomicBenchmarks()
locksBenchmarks()
atomicsBenchmarks()
distributedLockBenchmarks()
queuesBenchmarks()
conditionsBenchmarks()

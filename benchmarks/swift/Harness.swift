import Glibc

// The Swift benchmark harness, as the C one (benchmarks/c/bench.h): run a body on N threads
// released together, take the median over several runs of wall time / total operations, and
// print rows beside a baseline measured in the same run. Environment, as the C harness's:
// BENCH_ROWS, a file to which each row is also appended as a JSON line (benchmarks/report.py);
// BENCH_QUICK, a smoke run (3 runs of a tenth of the iterations); BENCH_ONLY and BENCH_ROW_ONLY
// (see `table`).

let quick = getenv("BENCH_QUICK") != nil
let repeats = quick ? 3 : 7

struct Row {
    let name: String
    /// Runs `iterations` operations on the calling thread.
    let body: @Sendable (_ iterations: Int) -> Void
}

private func now(_ clock: clockid_t = CLOCK_MONOTONIC) -> Double {
    var ts = timespec()
    clock_gettime(clock, &ts)
    return Double(ts.tv_sec) * 1e9 + Double(ts.tv_nsec)
}

private final class Run: @unchecked Sendable {
    var barrier = pthread_barrier_t()
    let body: @Sendable (Int) -> Void
    let iterations: Int
    init(threads: Int, iterations: Int, body: @escaping @Sendable (Int) -> Void) {
        self.body = body
        self.iterations = iterations
        pthread_barrier_init(&barrier, nil, UInt32(threads + 1))
    }
    deinit { pthread_barrier_destroy(&barrier) }
}

/// One run: wall time / (threads * iterations), in ns; with one thread, the process's CPU time
/// over that span / iterations (what other processes of a shared machine run meanwhile is not
/// counted; the main thread sleeps in the barrier and the join).
/// `wall`: wall time even with one thread (a body that runs tasks, whose waits are the point).
func sample(threads: Int, iterations: Int, wall: Bool = false, _ body: @escaping @Sendable (Int) -> Void) -> Double {
    let run = Run(threads: threads, iterations: iterations, body: body)
    var handles: [pthread_t] = []
    for _ in 0..<threads {
        var handle = pthread_t()
        let context = Unmanaged.passRetained(run).toOpaque()
        pthread_create(&handle, nil, { context in
            let run = Unmanaged<Run>.fromOpaque(context!).takeRetainedValue()
            pthread_barrier_wait(&run.barrier)
            run.body(run.iterations)
            return nil
        }, context)
        handles.append(handle)
    }
    let clock = threads == 1 && !wall ? CLOCK_PROCESS_CPUTIME_ID : CLOCK_MONOTONIC
    let start = now(clock)
    pthread_barrier_wait(&run.barrier)
    for handle in handles { pthread_join(handle, nil) }
    return (now(clock) - start) / Double(threads * iterations)
}

/// Measures each row and prints ns/op, Mops/s and the ratio to rows[baseline].
/// BENCH_ROW_ONLY, a substring of row names, keeps only those rows (to profile one row alone,
/// with perf stat for instance); the first row kept is then the baseline.
/// BENCH_ONLY, a substring of table titles, keeps only those tables (as the C harness's).
/// `tasks`: the rows run that many tasks (one thread starts them): measured in wall time, and
/// reported (and plotted, benchmarks/report.py) against the number of tasks, as ns per operation.
func table(_ title: String, threads: Int, tasks: Int? = nil, iterations: Int, baseline: Int = 0, _ rows: [Row]) {
    if let only = getenv("BENCH_ONLY").map({ String(cString: $0) }), !title.contains(only) { return }
    var rows = rows, baseline = baseline
    if let only = getenv("BENCH_ROW_ONLY").map({ String(cString: $0) }) {
        rows = rows.filter { $0.name.contains(only) }
        baseline = 0
        if rows.isEmpty { return }
    }
    let iterations = quick ? max(1, iterations / 10) : iterations
    // Round-robin (each round runs every row once), so that drift hits all rows alike.
    var samples = [[Double]](repeating: [], count: rows.count)
    for _ in 0..<repeats {
        for (index, row) in rows.enumerated() {
            samples[index].append(sample(threads: threads, iterations: iterations, wall: tasks != nil, row.body))
        }
    }
    let results = samples.map { $0.sorted()[repeats / 2] }
    let who = tasks.map { "\($0) task\($0 == 1 ? "" : "s")" } ?? "\(threads) thread\(threads == 1 ? "" : "s")"
    print("\n\(title) — \(who), median of \(repeats) runs")
    print("  " + "".padding(44) + "ns/op".padded(10) + "Mops/s".padded(10) + "ratio".padded(10) + "ratio range".padded(14))
    for (index, (row, ns)) in zip(rows, results).enumerated() {
        let ratio = ns / results[baseline]
        // The spread: the ratio in each round (this row's run over the baseline's in that round).
        let rounds = zip(samples[index], samples[baseline]).map { $0 / $1 }
        let spread = (rounds.min() ?? ratio, rounds.max() ?? ratio)
        print("  " + row.name.padding(44) + fixed(ns, 2).padded(10) + fixed(1e3 / ns, 1).padded(10)
              + (fixed(ratio, 2) + "x").padded(10) + (fixed(spread.0, 2) + "-" + fixed(spread.1, 2)).padded(14)
              + (row.name == rows[baseline].name ? "  (baseline)" : ""))
        emit(title, threads: tasks ?? threads, row: row.name, ns: ns, ratio: ratio, spread: spread,
             baseline: row.name == rows[baseline].name, axis: tasks == nil ? nil : "tasks")
    }
}

/// Appends one row as a JSON line to $BENCH_ROWS, if set.
private func emit(_ title: String, threads: Int, row: String, ns: Double, ratio: Double, spread: (Double, Double),
                  baseline: Bool, axis: String? = nil) {
    guard let path = getenv("BENCH_ROWS"), let file = fopen(path, "a") else { return }
    defer { fclose(file) }
    let line = "{\"table\": \(json(title)), \"threads\": \(threads), \"row\": \(json(row)), \"ns\": \(ns), "
        + "\"ratio\": \(ratio), \"spread\": [\(spread.0), \(spread.1)], \"baseline\": \(baseline), \"fairness\": null"
        + (axis.map { ", \"axis\": \(json($0))" } ?? "") + "}\n"
    fputs(line, file)
}

private func json(_ text: String) -> String {
    var out = "\""
    for scalar in text.unicodeScalars {
        switch scalar {
        case "\"": out += "\\\""
        case "\\": out += "\\\\"
        case _ where scalar.value < 0x20: out += "\\u" + String(repeating: "0", count: 4 - String(scalar.value, radix: 16).count) + String(scalar.value, radix: 16)
        default: out.unicodeScalars.append(scalar)
        }
    }
    return out + "\""
}

func fixed(_ value: Double, _ digits: Int) -> String {
    let scale = pow(10.0, Double(digits))
    let rounded = (value * scale).rounded() / scale
    var text = String(rounded)
    let decimals = text.split(separator: ".").last.map(\.count) ?? 0
    if digits > decimals { text += String(repeating: "0", count: digits - decimals) }
    return text
}

extension String {
    func padding(_ width: Int) -> String { count >= width ? self : self + String(repeating: " ", count: width - count) }
    func padded(_ width: Int) -> String { count >= width ? self : String(repeating: " ", count: width - count) + self }
}

import Foundation

/// One workload of the suite.
///
/// A benchmark measures its workload and, in the same run, the baseline it is judged
/// against, and returns one or more rows. Add one by writing a type in `Workloads/` and
/// listing it in ``BenchmarkRegistry/all``.
///
/// ```swift
/// struct RestoreBenchmark: Benchmark {
///     let id = "P5"
///     let title = "restore of pending records vs bare read + decode"
///
///     func run(in context: BenchmarkContext) throws -> [BenchmarkResult] {
///         let rounds = context.size(full: 5, smoke: 1)
///         let restore = try (0..<rounds).map { _ in try Timing.seconds { try restoreStore() } }
///         let bare = try (0..<rounds).map { _ in try Timing.seconds { try readAndDecode() } }
///         return [BenchmarkResult(id: id, name: "restore 10k records", value: restore.median,
///                                 unit: .seconds, baseline: bare.median,
///                                 baselineName: "read + decode", target: .ratio(atMost: 1.5))]
///     }
/// }
/// ```
protocol Benchmark: Sendable {
    /// The identifier, such as `P1`; it selects the benchmark with `--only` and
    /// starts the id of every row it returns.
    var id: String { get }

    /// What is measured, in one line.
    var title: String { get }

    /// Runs the workload and its baseline.
    ///
    /// Throws ``BenchmarkFailure`` when the workload misbehaved (an operation that did
    /// not succeed, a count that does not add up): a figure from a broken run is worthless.
    func run(in context: BenchmarkContext) throws -> [BenchmarkResult]
}

/// How big a run is.
enum RunMode: String, Sendable, Codable {
    /// The documented run: the sizes and durations the targets are stated for.
    case full
    /// A quick run with small sizes, so that CI keeps the suite compiling and working.
    /// Its figures are not comparable with a full run's.
    case smoke
}

/// What a benchmark knows about the run it is part of.
struct BenchmarkContext: Sendable {
    /// Full or smoke.
    var mode: RunMode

    /// `full` in a full run, `smoke` in a smoke run.
    ///
    /// ```swift
    /// let count = context.size(full: 100_000, smoke: 10_000)
    /// ```
    func size<Value>(full: Value, smoke: Value) -> Value {
        mode == .full ? full : smoke
    }

    /// Prints a progress line to standard error, keeping standard output for the table.
    func progress(_ message: String) {
        FileHandle.standardError.write(Data("  \(message)\n".utf8))
    }
}

/// A workload that did not behave as it must; the run stops with this message.
struct BenchmarkFailure: Error, CustomStringConvertible {
    var description: String

    init(_ description: String) {
        self.description = description
    }
}

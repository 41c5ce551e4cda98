import Foundation
import RetryingOperation

/// P2: how late retries start.
///
/// Starts N asynchronous `RetryingOperation`s on one `OperationQueue`; each first attempt
/// ends with `baseOperationEnded(needsRetryIn: 0.05)`. The requested time of a retry is the
/// moment of that call plus 50 ms; its lateness is when the retry's
/// `startBaseOperation(isRetry: true)` begins, minus the requested time. So the figure
/// covers everything between the user's call and the user's code running again: the
/// library's bookkeeping, the default `DispatchRetryScheduler`'s timer and the thread hop.
struct RetryLatenessBenchmark: Benchmark {
    let id = "P2"
    let title = "lateness of retries scheduled 50 ms out"

    static let retryDelay: TimeInterval = 0.05

    func run(in context: BenchmarkContext) throws -> [BenchmarkResult] {
        let count = context.size(full: 1_000, smoke: 200)
        let rounds = context.size(full: 5, smoke: 1)

        var p50: [Double] = []
        var p99: [Double] = []
        var maximum: [Double] = []
        for round in 0..<rounds {
            let lateness = try Self.measureLateness(count: count)
            p50.append(lateness.percentile(50))
            p99.append(lateness.percentile(99))
            maximum.append(lateness.max() ?? .nan)
            context.progress(String(format: "round %d: p50 %.3f ms, p99 %.3f ms, max %.3f ms", round + 1, p50[round], p99[round], maximum[round]))
        }

        let requested = Self.retryDelay * 1000
        func row(_ suffix: String, _ name: String, _ lateness: Double, target: BenchmarkTarget?) -> BenchmarkResult {
            BenchmarkResult(
                id: "\(id).\(suffix)",
                name: "\(name) retry lateness, \(count.groupedDigits) retries 50 ms out",
                value: lateness,
                unit: .milliseconds,
                baseline: requested,
                baselineName: "requested delay",
                ratio: (requested + lateness) / requested,
                target: target
            )
        }
        var rows = [
            row("p50", "p50", p50.median, target: nil),
            row("p99", "p99", p99.median, target: .value(atMost: 3)),
            row("max", "max", maximum.median, target: nil),
        ]
        rows[0].note = "lateness = start of the retry's attempt − (baseOperationEnded(needsRetryIn:) call + 50 ms), "
            + "all retries due together; median over \(rounds) round(s); ratio = actual delay / requested delay"
        return rows
    }

    /// The lateness of each retry, in milliseconds.
    static func measureLateness(count: Int) throws -> [Double] {
        let operations = (0..<count).map { _ in LatenessProbe(retryDelay: retryDelay) }
        let queue = OperationQueue()
        queue.addOperations(operations, waitUntilFinished: false)
        queue.waitUntilAllOperationsAreFinished()
        return try operations.map { operation in
            guard operation.outcome?.isSuccess == true, operation.numberOfAttempts == 2,
                  let requested = operation.requestedRetryTime, let started = operation.retryStartTime
            else {
                throw BenchmarkFailure("a probe did not retry exactly once and succeed")
            }
            return (Double(started) - Double(requested)) / 1e6
        }
    }
}

/// The operation of P2: asks for a retry `retryDelay` out, records when it asked and when
/// the retry began.
final class LatenessProbe: RetryingOperation, @unchecked Sendable {
    // @unchecked: the two times are written by attempts, which the operation runs one at
    // a time, and read only after the queue reported the operation finished.
    let retryDelay: TimeInterval
    private(set) var requestedRetryTime: UInt64?
    private(set) var retryStartTime: UInt64?

    init(retryDelay: TimeInterval) {
        self.retryDelay = retryDelay
        super.init()
    }

    override var isAsynchronous: Bool { true }

    override func startBaseOperation(isRetry: Bool) {
        if isRetry {
            retryStartTime = Timing.now()
            baseOperationEnded()
        } else {
            requestedRetryTime = Timing.now() + UInt64(retryDelay * 1e9)
            baseOperationEnded(needsRetryIn: retryDelay)
        }
    }
}

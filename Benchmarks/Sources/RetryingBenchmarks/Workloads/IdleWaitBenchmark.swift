import Foundation
import RetryingOperation

/// P6: what waiting costs — it must cost nothing (no polling).
///
/// Starts N asynchronous `RetryingOperation`s on one `OperationQueue` with no concurrency
/// limit (a waiting operation stays executing and holds a queue slot); each first attempt
/// ends with a retry far in the future. Once every operation is waiting, the process's CPU
/// time (all threads, user + system) is read across a window of W seconds in which nothing
/// else runs. Then the operations are cancelled, which ends their waits at once.
struct IdleWaitBenchmark: Benchmark {
    let id = "P6"
    let title = "CPU time of operations waiting on retry timers"

    func run(in context: BenchmarkContext) throws -> [BenchmarkResult] {
        let count = context.size(full: 10_000, smoke: 1_000)
        let window = context.size(full: 10.0, smoke: 0.5)
        // Far enough out that no timer fires during setup and the window.
        let retryDelay = window * 3 + 10

        let operations = (0..<count).map { _ in ParkedOperation(retryDelay: retryDelay) }
        let queue = OperationQueue()
        let setupStart = Timing.now()
        queue.addOperations(operations, waitUntilFinished: false)
        try Self.waitUntilAllAreWaiting(operations)
        let setupSeconds = Timing.seconds(from: setupStart, to: Timing.now())
        context.progress(String(format: "%@ operations waiting after %.2f s; measuring %.1f s", count.groupedDigits, setupSeconds, window))

        let cpuBefore = Timing.processCPUSeconds()
        let wallBefore = Timing.now()
        Thread.sleep(forTimeInterval: window)
        let cpuAfter = Timing.processCPUSeconds()
        let measuredWindow = Timing.seconds(from: wallBefore, to: Timing.now())

        let stillWaiting = operations.allSatisfy { $0.isWaitingToRetry && $0.numberOfAttempts == 1 }
        queue.cancelAllOperations()
        queue.waitUntilAllOperationsAreFinished()
        guard stillWaiting else {
            throw BenchmarkFailure("an operation stopped waiting during the window")
        }
        guard operations.allSatisfy({ if case .cancelled? = $0.outcome { return true } else { return false } }) else {
            throw BenchmarkFailure("a waiting operation did not finish as cancelled")
        }

        let cpu = cpuAfter - cpuBefore
        return [
            BenchmarkResult(
                id: id,
                name: "CPU time, \(count.groupedDigits) operations waiting on retry timers for \(BenchmarkUnit.formatNumber(window)) s",
                value: cpu,
                unit: .seconds,
                target: .value(atMost: window >= 10 ? 0.05 : 0.05 * window / 10),
                note: String(format: "process CPU (all threads) over a %.2f s wall-clock window; the smoke run scales the target with the window", measuredWindow)
            ),
        ]
    }

    /// Returns once every operation has set up its retry timer.
    ///
    /// An operation starts waiting just after its first attempt returns, so once every
    /// attempt has begun, the rest follow within microseconds; a short sleep between checks
    /// is enough and happens before the measured window.
    static func waitUntilAllAreWaiting(_ operations: [ParkedOperation]) throws {
        let deadline = Timing.now() + 60 * 1_000_000_000
        while !operations.allSatisfy(\.isWaitingToRetry) {
            guard Timing.now() < deadline else {
                throw BenchmarkFailure("operations did not all start waiting within 60 s")
            }
            Thread.sleep(forTimeInterval: 0.01)
        }
    }
}

/// The operation of P6: its first attempt asks for a retry far out; a retry would succeed.
final class ParkedOperation: RetryingOperation, @unchecked Sendable {
    // @unchecked: the only stored property is a constant.
    let retryDelay: TimeInterval

    init(retryDelay: TimeInterval) {
        self.retryDelay = retryDelay
        super.init()
    }

    override var isAsynchronous: Bool { true }

    override func startBaseOperation(isRetry: Bool) {
        if isRetry {
            baseOperationEnded()
        } else {
            baseOperationEnded(needsRetryIn: retryDelay)
        }
    }
}

import CrashHarness
import Foundation
import Testing
@testable import RetryingOperation

/// An asynchronous operation whose attempts end at random: success, counted or uncounted
/// retries a few milliseconds out, or a wait for a manual retry.
final class RandomOperation: RetryingOperation, @unchecked Sendable {
    private let seed: UInt64
    init(seed: UInt64) {
        self.seed = seed
        super.init()
    }

    override var isAsynchronous: Bool { true }

    override func startBaseOperation(isRetry: Bool) {
        var generator = SeededGenerator(seed: seed &+ UInt64(numberOfAttempts))
        let roll = Int.random(in: 0..<10, using: &generator)
        let delay = Double.random(in: 0...0.002, using: &generator)
        DispatchQueue.global().async {
            switch roll {
            case 0..<5: self.baseOperationEnded()
            case 5..<7: self.baseOperationEnded(needsRetryIn: delay)
            case 7..<9: self.baseOperationEnded(needsRetryIn: delay, countsTowardRetryLimit: false)
            default: self.baseOperationEnded(retryHelpers: [RetryingOperation.TimerRetryHelper(retryDelay: delay * 2, retryingOperation: self)])
            }
        }
    }
}

@Suite(.timeLimit(.minutes(5)))
struct StressTests {
    @Test func tenThousandOperationsWithRandomRetriesCancelsAndRetryNowsAllFinishOnce() async {
        // Given 10,000 operations with random retries, a log that counts finishes, and a
        // chaos thread that cancels or retries random operations while they run
        let count = 10_000
        let finishes = LockedBox([Int](repeating: 0, count: count))
        let operations = (0..<count).map { index -> RandomOperation in
            let operation = RandomOperation(seed: UInt64(index) &* 7919)
            operation.retryPolicy = .constant(0.001, retryLimit: .unlimited)
            operation.logHandler = RetryLogHandler(minimumLevel: .debug) { message in
                if message.text.hasPrefix("finished") { finishes.withLock { $0[index] += 1 } }
            }
            return operation
        }
        var generator = SeededGenerator(seed: 2026)
        let cancelledBeforeStart = (0..<count).filter { _ in Int.random(in: 0..<20, using: &generator) == 0 }
        for index in cancelledBeforeStart { operations[index].cancel() }
        let chaosTargets = (0..<3_000).map { _ in (Int.random(in: 0..<count, using: &generator), Bool.random(using: &generator)) }

        // When they all run on one concurrent queue while the chaos thread works
        let queue = makeQueue()
        queue.maxConcurrentOperationCount = 64
        let chaosDone = await withCheckedContinuation { (chaosStarted: CheckedContinuation<DispatchSemaphore, Never>) in
            let done = DispatchSemaphore(value: 0)
            Thread.detachNewThread {
                for operation in operations { queue.addOperation(operation) }
                for (index, cancels) in chaosTargets {
                    if cancels { operations[index].cancel() } else { operations[index].retryNow() }
                }
                done.signal()
            }
            chaosStarted.resume(returning: done)
        }
        #expect(await onDedicatedThread { chaosDone.wait(seconds: 120) })
        await drain(queue)
        var outcomes: [String: Int] = [:]
        for operation in operations {
            let outcome = await operation.finalOutcome
            outcomes[outcome.isSuccess ? "succeeded" : "\(outcome)", default: 0] += 1
        }

        // Then every operation finished exactly once, cancelled ones never retried, and the
        // queue drained
        #expect(finishes.withLock { $0 }.allSatisfy { $0 == 1 })
        #expect(operations.allSatisfy { $0.isFinished && !$0.isExecuting })
        #expect(cancelledBeforeStart.allSatisfy { operations[$0].numberOfAttempts == 0 })
        #expect(outcomes.values.reduce(0, +) == count)
        #expect(outcomes["cancelled", default: 0] >= cancelledBeforeStart.count)
        #expect(outcomes["succeeded", default: 0] > count / 2)
        #expect(queue.operationCount == 0)
        let attempts = operations.map(\.numberOfAttempts).reduce(0, +)
        print("stress: \(count) operations, \(attempts) attempts, outcomes \(outcomes.sorted { $0.key < $1.key })")
    }
}

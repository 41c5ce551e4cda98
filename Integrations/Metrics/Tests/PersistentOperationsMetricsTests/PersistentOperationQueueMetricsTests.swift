import Foundation
import MetricsTestKit
import PersistentOperations
import PersistentOperationsMetrics
import Testing

/// A job whose attempts follow its script (the last step repeats), each taking `milliseconds`.
final class ScriptedJob: RetryingOperation, PersistentOperation, @unchecked Sendable {
    enum Step: String, Codable, Sendable { case succeed, retry, retryUncounted, fail }
    struct Payload: Codable, Sendable {
        var milliseconds = 5
        var steps: [Step] = [.succeed]
    }

    static let persistenceIdentifier = "metrics-test.job"
    let payload: Payload

    init(payload: Payload) {
        self.payload = payload
        super.init()
    }

    override var isAsynchronous: Bool { true }

    override func startBaseOperation(isRetry: Bool) {
        let step = payload.steps[min(numberOfAttempts - 1, payload.steps.count - 1)]
        let milliseconds = payload.milliseconds
        Thread.detachNewThread { [self] in
            Thread.sleep(forTimeInterval: Double(milliseconds) / 1000)
            switch step {
            case .succeed: baseOperationEnded()
            case .retry: baseOperationEnded(needsRetryIn: 0, countsTowardRetryLimit: true)
            case .retryUncounted: baseOperationEnded(needsRetryIn: 0, countsTowardRetryLimit: false)
            case .fail: baseOperationEnded(failingWith: CocoaError(.fileWriteUnknown))
            }
        }
    }
}

/// Polls `condition` every 10 ms for up to 10 s.
func eventually(_ condition: () throws -> Bool) async throws -> Bool {
    for _ in 0..<1000 {
        if try condition() { return true }
        try await Task.sleep(nanoseconds: 10_000_000)
    }
    return try condition()
}

struct TemporaryStore: ~Copyable {
    let url = FileManager.default.temporaryDirectory.appendingPathComponent("metrics-tests-\(UUID().uuidString)")
    deinit { try? FileManager.default.removeItem(at: url) }
}

@Suite struct PersistentOperationQueueMetricsTests {
    let type = [("type", ScriptedJob.persistenceIdentifier)]

    func makeQueue(_ store: borrowing TemporaryStore) throws -> PersistentOperationQueue {
        let queue = try PersistentOperationQueue(directory: store.url, operationQueue: OperationQueue())
        queue.register(ScriptedJob.self)
        return queue
    }

    @Test func attemptsOutcomesAndDurationsAreCountedByTypeAndOutcome() async throws {
        let store = TemporaryStore()
        let queue = try makeQueue(store)
        let metrics = TestMetrics()
        let observer = PersistentOperationQueueMetrics(queue: queue, dimensions: [("queue", "test")], gaugeInterval: nil, factory: metrics)
        let labels = [("queue", "test")] + type
        // Given a job that retries once (counted) and succeeds, one that retries uncounted and
        // fails for good, and one cancelled before it ran
        _ = try queue.addOperation(ScriptedJob(payload: .init(milliseconds: 30, steps: [.retry, .succeed])), options: EnqueueOptions())
        _ = try queue.addOperation(ScriptedJob(payload: .init(milliseconds: 30, steps: [.retryUncounted, .fail])), options: EnqueueOptions())
        let waiting = try queue.addOperation(ScriptedJob(payload: .init()), options: EnqueueOptions(notBefore: Date().addingTimeInterval(3600)))
        #expect(queue.cancelOperation(withID: waiting.id))
        func total(_ label: String, _ outcome: String?) -> Int64 {
            metrics.counterTotal(label: label, dimensions: labels + (outcome.map { [("outcome", $0)] } ?? []))
        }
        #expect(try await eventually {
            total("persistent_operations_outcomes_total", "succeeded") == 1 && total("persistent_operations_outcomes_total", "failed") == 1
                && total("persistent_operations_outcomes_total", "cancelled") == 1
        })
        queue.close()
        observer.stop()

        // Then the attempts and each kind of end were counted, with the type and the queue's dimension
        #expect(total("persistent_operations_attempts_total", nil) == 4)
        #expect(total("persistent_operations_outcomes_total", "retry") == 1)
        #expect(total("persistent_operations_outcomes_total", "retry_uncounted") == 1)
        // And every attempt's duration was timed under the end it came to; the cancel of the
        // one that never ran has none
        for outcome in ["retry", "retry_uncounted", "succeeded", "failed"] {
            let timer = try metrics.expectTimer("persistent_operations_attempt_duration_seconds", labels + [("outcome", outcome)])
            #expect(timer.values.count == 1, "\(outcome)")
            #expect(timer.values.allSatisfy { $0 >= 30_000_000 && $0 < 30_000_000_000 }, "\(outcome): \(timer.values)")
        }
        #expect(metrics.timers(label: "persistent_operations_attempt_duration_seconds", dimensions: labels + [("outcome", "cancelled")]).isEmpty)
        // And each operation's time from enqueue to done was timed, covering its two attempts
        for outcome in ["succeeded", "failed"] {
            let timer = try metrics.expectTimer("persistent_operations_enqueue_to_done_seconds", labels + [("outcome", outcome)])
            #expect(timer.values.count == 1 && timer.values[0] >= 60_000_000, "\(outcome): \(timer.values)")
        }
        #expect(try metrics.expectTimer("persistent_operations_enqueue_to_done_seconds", labels + [("outcome", "cancelled")]).values.count == 1)
    }

    @Test func theGaugesReadTheQueuesCounts() async throws {
        let store = TemporaryStore()
        let queue = try makeQueue(store)
        let metrics = TestMetrics()
        let observer = PersistentOperationQueueMetrics(queue: queue, gaugeInterval: nil, factory: metrics)
        // Given three operations waiting for a date, and one that failed for good
        for _ in 0..<3 {
            _ = try queue.addOperation(ScriptedJob(payload: .init()), options: EnqueueOptions(notBefore: Date().addingTimeInterval(3600)))
        }
        let failing = ScriptedJob(payload: .init(steps: [.fail]))
        _ = try queue.addOperation(failing, options: EnqueueOptions())
        _ = await failing.finalOutcome
        #expect(try await eventually { try queue.counts().failed == 1 })
        // When the gauges are read
        observer.updateGauges()
        // Then they say so
        func gauge(_ state: String) throws -> Double? { try metrics.expectGauge("persistent_operations_operations", [("state", state)]).lastValue }
        #expect(try gauge("pending") == 3)
        #expect(try gauge("scheduled") == 3)
        #expect(try gauge("running") == 0)
        #expect(try gauge("failed") == 1)
        #expect(try gauge("quarantined") == 0)
        queue.close()
    }

    @Test func theGaugesAreReadEveryInterval() async throws {
        let store = TemporaryStore()
        let queue = try makeQueue(store)
        let metrics = TestMetrics()
        let observer = PersistentOperationQueueMetrics(queue: queue, gaugeInterval: 0.05, factory: metrics)
        _ = try queue.addOperation(ScriptedJob(payload: .init()), options: EnqueueOptions(notBefore: Date().addingTimeInterval(3600)))
        #expect(try await eventually { (try? metrics.expectGauge("persistent_operations_operations", [("state", "pending")]).lastValue) == 1 })
        observer.stop()
        queue.close()
    }

    @Test func aStoppedObserverCountsNothingMoreAndTheAppsHandlerStillGetsEveryEvent() async throws {
        let store = TemporaryStore()
        let queue = try makeQueue(store)
        let metrics = TestMetrics()
        let handled = Counted()
        queue.eventHandler = { event in if case .succeeded = event { handled.add() } }
        let observer = PersistentOperationQueueMetrics(queue: queue, gaugeInterval: nil, factory: metrics)
        let first = ScriptedJob(payload: .init())
        _ = try queue.addOperation(first, options: EnqueueOptions())
        #expect(try await eventually { metrics.counterTotal(label: "persistent_operations_outcomes_total", dimensions: type + [("outcome", "succeeded")]) == 1 })
        // When it stops and another job runs
        observer.stop()
        let second = ScriptedJob(payload: .init())
        _ = try queue.addOperation(second, options: EnqueueOptions())
        #expect(try await eventually { handled.value == 2 })
        queue.close()
        // Then only the first was counted, and the app's handler saw both
        #expect(metrics.counterTotal(label: "persistent_operations_outcomes_total", dimensions: type + [("outcome", "succeeded")]) == 1)
        #expect(metrics.counterTotal(label: "persistent_operations_attempts_total", dimensions: type) == 1)
    }
}

final class Counted: @unchecked Sendable {
    private let lock = NSLock()
    private var count = 0
    func add() { lock.withLock { count += 1 } }
    var value: Int { lock.withLock { count } }
}

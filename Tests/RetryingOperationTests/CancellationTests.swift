import Foundation
import Testing
@testable import RetryingOperation

/// Cancelling before start, during an attempt and during a wait.
@Suite(.timeLimit(.minutes(1)))
struct CancellationTests {
    @Test(arguments: [false, true])
    func cancelBeforeStartFinishesWithoutRunningAnAttempt(asynchronous: Bool) async {
        // Given an operation cancelled before it is added to a queue
        let operation = ScriptedOperation(asynchronous: asynchronous, steps: [.succeed])
        operation.cancel()
        // When the queue runs it
        let queue = makeQueue()
        queue.addOperation(operation)
        await drain(queue)
        // Then no attempt ran and it finished as cancelled
        #expect(operation.startCount == 0)
        #expect(operation.outcome.map { "\($0)" } == "cancelled")
        #expect(operation.isFinished && !operation.isExecuting)
    }

    @Test(arguments: [false, true])
    func cancelDuringAnAttemptCallsCancelBaseOperationAndDoesNotRetry(asynchronous: Bool) async {
        // Given an operation whose attempt runs until cancelled, then would retry
        let clock = ManualRetryScheduler()
        let operation = ScriptedOperation(asynchronous: asynchronous, steps: [.runUntilCancelled, .succeed], scheduler: clock)
        Thread.detachNewThread { operation.start() }
        #expect(await onDedicatedThread { operation.attemptStarted.wait(seconds: 10) })
        // When it is cancelled during the attempt
        operation.cancel()
        // Then cancelBaseOperation was called, the attempt ended, and the operation finished
        // as cancelled without retrying
        #expect("\(await operation.finalOutcome)" == "cancelled")
        #expect(operation.events.count(of: "cancelBaseOperation") == 1)
        #expect(operation.startCount == 1)
        #expect(clock.totalScheduledCount == 0)
    }

    @Test(arguments: [false, true])
    func attemptThatAsksForARetryAfterACancelIsNotRetried(asynchronous: Bool) async {
        // Given an async attempt that will ask for a retry after the operation is cancelled
        let clock = ManualRetryScheduler()
        let operation = GatedOperation(asynchronous: asynchronous, scheduler: clock)
        Thread.detachNewThread { operation.start() }
        #expect(await onDedicatedThread { operation.attemptStarted.wait(seconds: 10) })
        // When it is cancelled, then the attempt asks to retry
        operation.cancel()
        operation.release()
        // Then the operation is cancelled, and no retry was scheduled
        #expect("\(await operation.finalOutcome)" == "cancelled")
        #expect(clock.totalScheduledCount == 0)
    }

    @Test(arguments: [false, true])
    func cancelWhileWaitingTearsHelpersDownAndFinishesAtOnce(asynchronous: Bool) async {
        // Given an operation waiting an hour for its retry, with two extra helpers
        let clock = ManualRetryScheduler()
        let operation = ScriptedOperation(asynchronous: asynchronous, steps: [.waitForHelpers(count: 2, counted: true)], scheduler: clock)
        let queue = makeQueue()
        queue.addOperation(operation)
        #expect(await onDedicatedThread { operation.attemptStarted.wait(seconds: 10) })
        await waitUntilWaiting(operation)
        // When it is cancelled
        operation.cancel()
        // Then it finished before cancel() returned, without any time passing,
        // each helper was set up once and torn down once, and no attempt was cancelled
        #expect(operation.isFinished)
        #expect("\(await operation.finalOutcome)" == "cancelled")
        #expect(operation.events.all.filter { !$0.hasPrefix("start") } == ["setup0", "setup1", "teardown0", "teardown1"])
        #expect(operation.events.count(of: "cancelBaseOperation") == 0)
        await drain(queue)
    }

    @Test func cancellingTwiceAndCancellingAfterFinishingChangeNothing() async {
        // Given a finished operation
        let operation = ScriptedOperation(asynchronous: true, steps: [.succeed])
        operation.start()
        #expect(await operation.finalOutcome.isSuccess)
        // When it is cancelled twice
        operation.cancel()
        operation.cancel()
        // Then it is still a success and cancelBaseOperation was never called
        #expect(operation.outcome?.isSuccess == true)
        #expect(operation.events.count(of: "cancelBaseOperation") == 0)
    }

    @Test func cancelAllOperationsOfAQueueFinishesWaitingOperations() async {
        // Given 50 operations waiting for a retry on one queue
        let clock = ManualRetryScheduler()
        let operations = (0..<50).map { _ in ScriptedOperation(asynchronous: true, steps: [.retryIn(600)], scheduler: clock) }
        let queue = makeQueue()
        for operation in operations { queue.addOperation(operation) }
        await clock.waitForScheduledRetries(count: 50)
        // When the queue cancels them all
        queue.cancelAllOperations()
        await drain(queue)
        // Then all finished as cancelled and their timers are gone
        #expect(operations.allSatisfy { $0.outcome.map { "\($0)" } == "cancelled" })
        #expect(clock.pendingCount == 0)
    }
}

/// Suspends until `operation` has set up all the helpers of its wait.
func waitUntilWaiting(_ operation: ScriptedOperation) async {
    #expect(await onDedicatedThread { operation.helpersSetUp.wait(seconds: 10) })
}

/// An operation whose single attempt asks for a retry only when the test releases it.
final class GatedOperation: RetryingOperation, @unchecked Sendable {
    let asynchronous: Bool
    let attemptStarted = DispatchSemaphore(value: 0)
    private let gate = DispatchSemaphore(value: 0)

    init(asynchronous: Bool, scheduler: any RetryScheduler) {
        self.asynchronous = asynchronous
        super.init()
        retryScheduler = scheduler
    }

    override var isAsynchronous: Bool { asynchronous }

    func release() { gate.signal() }

    override func startBaseOperation(isRetry: Bool) {
        let body: @Sendable () -> Void = {
            self.attemptStarted.signal()
            self.gate.wait()
            self.baseOperationEnded(needsRetryIn: 1)
        }
        if asynchronous { Thread.detachNewThread(body) } else { body() }
    }
}

import Foundation
import Testing
@testable import RetryingOperation

/// `finalOutcome` honours the cancellation of the task that awaits it.
@Suite(.timeLimit(.minutes(1)))
struct FinalOutcomeCancellationTests {
    @Test func cancellingTheAwaitingTaskReturnsCancelledWhileTheOperationGoesOn() async {
        // Given an operation waiting for a manual retry, and a task awaiting its outcome
        let clock = ManualRetryScheduler()
        let operation = ScriptedOperation(asynchronous: true, steps: [.waitForManualRetry, .succeed], scheduler: clock)
        let queue = makeQueue()
        queue.addOperation(operation)
        let waiter = Task { await operation.finalOutcome }
        while operation.outcomeWaiterCount == 0 { await Task.yield() }
        // When the awaiting task is cancelled
        waiter.cancel()
        // Then the wait returns .cancelled at once, its continuation is gone, and the
        // operation itself was not cancelled
        #expect("\(await waiter.value)" == "cancelled")
        #expect(operation.outcomeWaiterCount == 0)
        #expect(operation.outcome == nil)
        #expect(!operation.isCancelled && operation.isExecuting)
        // And a later wait that is not cancelled still gets the real outcome
        let second = Task { await operation.finalOutcome }
        while operation.outcomeWaiterCount == 0 { await Task.yield() }
        while !operation.isWaitingToRetry { await Task.yield() }
        operation.retryNow()
        #expect(await second.value.isSuccess)
    }

    @Test func aTaskCancelledBeforeItAwaitsReturnsAtOnce() async {
        // Given an operation that has not started
        let operation = ScriptedOperation(asynchronous: true, steps: [.succeed])
        // When a task that is already cancelled awaits its outcome
        let outcome = await Task {
            withUnsafeCurrentTask { $0?.cancel() }
            return await operation.finalOutcome
        }.value
        // Then it returns .cancelled without registering a waiter
        #expect("\(outcome)" == "cancelled")
        #expect(operation.outcomeWaiterCount == 0)
        #expect(operation.outcome == nil)
    }

    @Test func cancellingOneOfTwoWaitsLeavesTheOtherWaiting() async {
        // Given two tasks awaiting the outcome of an operation that has not finished
        let clock = ManualRetryScheduler()
        let operation = ScriptedOperation(asynchronous: true, steps: [.waitForManualRetry, .succeed], scheduler: clock)
        makeQueue().addOperation(operation)
        let first = Task { await operation.finalOutcome }
        let second = Task { await operation.finalOutcome }
        while operation.outcomeWaiterCount < 2 { await Task.yield() }
        // When the second is cancelled
        second.cancel()
        #expect("\(await second.value)" == "cancelled")
        // Then the first still waits, and gets the real outcome when the operation finishes
        #expect(operation.outcomeWaiterCount == 1)
        while !operation.isWaitingToRetry { await Task.yield() }
        operation.retryNow()
        #expect(await first.value.isSuccess)
    }

    @Test func aTimeoutRacedInATaskGroupEndsTheWait() async {
        // Given an operation that will not finish on its own
        let clock = ManualRetryScheduler()
        let operation = ScriptedOperation(asynchronous: true, steps: [.waitForManualRetry], scheduler: clock)
        makeQueue().addOperation(operation)
        // When its outcome is raced against a timeout that wins, and the group is cancelled
        let outcome = await withTaskGroup(of: RetryingOperation.Outcome?.self) { group in
            group.addTask { await operation.finalOutcome }
            group.addTask { nil }   // the timeout, already over
            let first = await group.next() ?? nil
            group.cancelAll()
            return first
        }
        // Then the group returns (the losing wait ended) and the operation goes on
        if let outcome { #expect("\(outcome)" == "cancelled") }
        #expect(operation.outcome == nil)
        #expect(operation.outcomeWaiterCount == 0)
        operation.cancel()
        #expect("\(await operation.finalOutcome)" == "cancelled")
    }
}

extension RetryingOperation {
    /// The tasks awaiting ``finalOutcome`` now.
    var outcomeWaiterCount: Int {
        machine.withLock { $0.outcomeWaiters.count }
    }
}

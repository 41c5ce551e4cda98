import Foundation
import Testing
@testable import RetryingOperation

/// Attempts, retries and finishing, for synchronous and asynchronous operations, on and off
/// an `OperationQueue`.
@Suite(.timeLimit(.minutes(1)))
struct LifecycleTests {
    @Test(arguments: [false, true])
    func operationThatSucceedsRunsOnceAndFinishes(asynchronous: Bool) async {
        // Given an operation whose first attempt succeeds
        let operation = ScriptedOperation(asynchronous: asynchronous, steps: [.succeed])
        let queue = makeQueue()
        // When it runs on a queue
        queue.addOperation(operation)
        await drain(queue)
        // Then it ran once, succeeded, and is finished but not executing
        #expect(operation.events.all == ["start(isRetry: false, retries: 0)"])
        #expect(operation.outcome?.isSuccess == true)
        #expect(operation.isFinished)
        #expect(!operation.isExecuting)
        #expect(operation.numberOfRetries == nil)
        #expect(operation.numberOfAttempts == 1)
    }

    @Test(arguments: [false, true])
    func retriesAfterTheDelayOfTheScheduler(asynchronous: Bool) async {
        // Given an operation that asks for two retries, 5 s and then 7 s out
        let clock = ManualRetryScheduler()
        let operation = ScriptedOperation(asynchronous: asynchronous, steps: [.retryIn(5), .retryIn(7), .succeed], scheduler: clock)
        let queue = makeQueue()
        queue.addOperation(operation)

        // When the first attempt has failed
        await clock.waitForScheduledRetries(count: 1)
        // Then the operation waits 5 s, still executing, holding its retry count
        #expect(clock.pendingDelays == [5])
        #expect(operation.isExecuting && !operation.isFinished && operation.isWaitingToRetry)
        #expect(operation.numberOfRetries == 0)

        // When 4.9 s pass nothing happens; at 5 s the second attempt runs and asks for 7 s
        clock.advance(by: 4.9)
        #expect(operation.startCount == 1)
        clock.advance(by: 0.1)
        await clock.waitForScheduledRetries(count: 1)
        #expect(clock.pendingDelays == [7])
        #expect(operation.numberOfRetries == 1)
        clock.advance(by: 7)

        // Then the third attempt succeeds and the operation finishes
        #expect(await operation.finalOutcome.isSuccess)
        #expect(operation.events.all == [
            "start(isRetry: false, retries: 0)",
            "start(isRetry: true, retries: 1)",
            "start(isRetry: true, retries: 2)",
        ])
        #expect(operation.numberOfAttempts == 3)
        #expect(clock.totalScheduledCount == 2)
    }

    @Test(arguments: [false, true])
    func dependenciesCompletionBlockAndWaitsAllSeeTheFinish(asynchronous: Bool) async {
        // Given a retrying operation with a dependent operation and a completion block
        let clock = ManualRetryScheduler()
        let operation = ScriptedOperation(asynchronous: asynchronous, steps: [.retryIn(1), .succeed], scheduler: clock)
        let completionRan = LockedBox(false)
        let dependentSawFinish = LockedBox(false)
        let dependent = BlockOperation { dependentSawFinish.withLock { $0 = operation.isFinished } }
        dependent.addDependency(operation)
        let queue = makeQueue()

        // When its retry is due
        await withCheckedContinuation { (completion: CheckedContinuation<Void, Never>) in
            operation.completionBlock = {
                completionRan.withLock { $0 = true }
                completion.resume()
            }
            queue.addOperations([dependent, operation], waitUntilFinished: false)
            clock.waitForScheduledRetriesThenAdvance(by: 1, dependentNotFinished: { !dependent.isFinished })
        }

        // Then the dependency, the completion block, waitUntilFinished and
        // waitUntilAllOperationsAreFinished all see it finish
        await onDedicatedThread {
            operation.waitUntilFinished()
            queue.waitUntilAllOperationsAreFinished()
        }
        #expect(completionRan.withLock { $0 })
        #expect(dependentSawFinish.withLock { $0 })
        #expect(queue.operationCount == 0)
    }

    @Test(arguments: [false, true])
    func operationStartedByHandRunsWithoutAQueue(asynchronous: Bool) async {
        // Given an operation that retries once, started by hand on a thread of its own
        let clock = ManualRetryScheduler()
        let operation = ScriptedOperation(asynchronous: asynchronous, steps: [.retryIn(2), .succeed], scheduler: clock)
        Thread.detachNewThread { operation.start() }
        // When the retry is due
        await clock.waitForScheduledRetries(count: 1)
        clock.advance(by: 2)
        // Then it finishes
        #expect(await operation.finalOutcome.isSuccess)
        #expect(operation.startCount == 2)
    }

    @Test func synchronousOperationStartedByHandIsFinishedWhenStartReturns() async {
        // Given a synchronous operation that retries twice after 0 s on the real scheduler
        let operation = ScriptedOperation(asynchronous: false, steps: [.retryIn(0), .retryIn(0), .succeed])
        // When started by hand outside any queue
        let finishedAtReturn = await onDedicatedThread {
            operation.start()
            return operation.isFinished
        }
        // Then start() returns only once the operation has finished
        #expect(finishedAtReturn)
        #expect(operation.startCount == 3)
    }

    @Test func synchronousOperationWaitingToRetryDoesNotHoldItsQueueThread() async {
        // Given a queue on a serial dispatch queue, running a synchronous operation that
        // waits an hour for its retry
        let clock = ManualRetryScheduler()
        let dispatchQueue = DispatchQueue(label: "serial")
        let queue = makeQueue(maxConcurrent: 2)
        queue.underlyingQueue = dispatchQueue
        let operation = ScriptedOperation(asynchronous: false, steps: [.retryIn(3600), .succeed], scheduler: clock)
        queue.addOperation(operation)
        await clock.waitForScheduledRetries(count: 1)

        // When other work is submitted to the same serial dispatch queue
        await withCheckedContinuation { (ran: CheckedContinuation<Void, Never>) in
            dispatchQueue.async { ran.resume() }
        }

        // Then it ran while the operation waits: no thread sleeps through the wait
        #expect(operation.isExecuting)
        clock.advance(by: 3600)
        #expect(await operation.finalOutcome.isSuccess)
    }

    @Test func operationWaitingToRetryKeepsItsSlotInABoundedQueue() async {
        // Given a serial queue (one slot) on a serial dispatch queue, whose first operation
        // waits for a retry
        let clock = ManualRetryScheduler()
        let dispatchQueue = DispatchQueue(label: "serial")
        let queue = makeQueue(maxConcurrent: 1)
        queue.underlyingQueue = dispatchQueue
        let waiting = ScriptedOperation(asynchronous: true, steps: [.retryIn(60), .succeed], scheduler: clock)
        let next = ScriptedOperation(asynchronous: true, steps: [.succeed], scheduler: clock)
        queue.addOperation(waiting)
        await clock.waitForScheduledRetries(count: 1)

        // When another operation is added and the dispatch queue has drained
        queue.addOperation(next)
        await withCheckedContinuation { (drained: CheckedContinuation<Void, Never>) in
            dispatchQueue.async { drained.resume() }
        }

        // Then it has not started: the waiting operation still holds the slot
        #expect(next.startCount == 0)
        // Until the waiting one finishes
        clock.advance(by: 60)
        await drain(queue)
        #expect(next.startCount == 1)
        #expect(waiting.outcome?.isSuccess == true && next.outcome?.isSuccess == true)
    }

    @Test(arguments: [false, true])
    func callingBaseOperationEndedTwiceIsIgnoredAndLogged(asynchronous: Bool) async {
        // Given an operation that ends its attempt twice
        let log = LogCapture()
        let operation = ScriptedOperation(asynchronous: asynchronous, steps: [.endTwice])
        operation.logHandler = log.handler
        // When it runs
        let queue = makeQueue()
        queue.addOperation(operation)
        // Then it finished once, successfully, and the second call was logged as an error
        #expect(await operation.finalOutcome.isSuccess)
        #expect(await onDedicatedThread { log.waitForMessage(containing: "baseOperationEnded was called while no attempt was running", seconds: 10) })
    }

    @Test func synchronousAttemptThatForgetsToEndFailsTheOperation() async {
        // Given a synchronous operation whose attempt returns without ending
        let log = LogCapture()
        let operation = ScriptedOperation(asynchronous: false, steps: [.forgetToEnd])
        operation.logHandler = log.handler
        // When it runs
        let queue = makeQueue()
        queue.addOperation(operation)
        // Then it fails with a clear error instead of hanging
        let error = await operation.finalOutcome.error as? RetryingOperationError
        #expect(error?.code == .synchronousAttemptDidNotEnd)
        #expect(!log.texts(at: .error).isEmpty)
    }

    @Test func startingTwiceIsIgnoredAndLogged() async {
        // Given a finished operation
        let log = LogCapture()
        let operation = ScriptedOperation(asynchronous: true, steps: [.succeed])
        operation.logHandler = log.handler
        operation.start()
        _ = await operation.finalOutcome
        // When it is started again
        operation.start()
        // Then nothing runs again and the misuse is logged
        #expect(operation.startCount == 1)
        #expect(log.texts(at: .error).contains { $0.contains("already started") })
    }

    @Test func finishHappensExactlyOnceWhateverComesAfterIt() async {
        // Given an operation that retried once and succeeded
        let clock = ManualRetryScheduler()
        let log = LogCapture()
        let operation = ScriptedOperation(asynchronous: true, steps: [.retryIn(1), .succeed], scheduler: clock)
        operation.logHandler = log.handler
        let queue = makeQueue()
        queue.addOperation(operation)
        await clock.waitForScheduledRetries(count: 1)
        clock.advance(by: 1)
        #expect(await operation.finalOutcome.isSuccess)

        // When it is then cancelled and asked to retry
        operation.cancel()
        operation.retryNow()
        #expect(await onDedicatedThread { log.waitForMessage(containing: "not waiting for one", seconds: 10) })

        // Then it finished once, its outcome stayed a success, and the queue is empty
        #expect(log.texts(at: .debug).filter { $0.hasPrefix("finished") } == ["finished: succeeded"])
        #expect(operation.outcome?.isSuccess == true)
        #expect(operation.startCount == 2)
        await drain(queue)
        #expect(queue.operationCount == 0)
    }
}

private extension ManualRetryScheduler {
    /// Test plumbing for the dependency test: waits for the retry on a thread of its own,
    /// checks the dependent has not run early, then advances the clock.
    func waitForScheduledRetriesThenAdvance(by interval: TimeInterval, dependentNotFinished: @escaping @Sendable () -> Bool) {
        Thread.detachNewThread {
            _ = self.waitForScheduledRetries(count: 1, timeout: 30)
            precondition(dependentNotFinished(), "the dependent operation ran before its dependency finished")
            self.advance(by: interval)
        }
    }
}

import Foundation
import Testing
@testable import RetryingOperation

/// Outcomes, the retry policy deciding, and counted vs uncounted retries.
@Suite(.timeLimit(.minutes(1)))
struct RetryDecisionTests {
    @Test(arguments: [false, true])
    func nonRetriableFailureEndsWithItsError(asynchronous: Bool) async {
        let operation = ScriptedOperation(asynchronous: asynchronous, steps: [.fail(TestError("fatal"))])
        startOnItsOwnThread(operation)
        let outcome = await operation.finalOutcome
        #expect(outcome.error as? TestError == TestError("fatal"))
        #expect(operation.startCount == 1)
    }

    @Test(arguments: [false, true])
    func policyRetriesRetriableErrorsUntilItsLimitThenFailsWithRetryLimitReachedCarryingTheLastError(asynchronous: Bool) async {
        // Given an operation that always fails with a retriable error, under a policy of
        // two retries 3 s apart
        let clock = ManualRetryScheduler()
        let operation = ScriptedOperation(asynchronous: asynchronous, steps: [.retriableError(TestError("flaky"))], scheduler: clock)
        operation.retryPolicy = .constant(3, retryLimit: .maximum(2))
        // When it runs and time passes
        startOnItsOwnThread(operation)
        await clock.waitForScheduledRetries(count: 1)
        #expect(clock.pendingDelays == [3])
        clock.advance(by: 3)
        await clock.waitForScheduledRetries(count: 1)
        clock.advance(by: 3)
        // Then it made 3 attempts (2 retries) and failed with retryLimitReached carrying
        // the last attempt's error
        let error = await operation.finalOutcome.error as? RetryingOperationError
        #expect(error?.code == .retryLimitReached)
        #expect(error?.underlyingError as? TestError == TestError("flaky"))
        #expect(operation.numberOfAttempts == 3)
        #expect(clock.totalScheduledCount == 2)
    }

    @Test func policyBackoffSetsTheDelays() async {
        let clock = ManualRetryScheduler()
        let operation = ScriptedOperation(asynchronous: true, steps: [.retriableError(TestError("flaky"))], scheduler: clock)
        operation.retryPolicy = RetryPolicy(retryLimit: .maximum(4), backoff: .exponential(initial: 2, multiplier: 2), maximumDelay: 10, jitter: .none)
        startOnItsOwnThread(operation)
        var delays: [TimeInterval] = []
        for _ in 0..<4 {
            await clock.waitForScheduledRetries(count: 1)
            delays += clock.pendingDelays
            clock.advanceToNextRetry()
        }
        #expect(delays == [2, 4, 8, 10])
        #expect(await operation.finalOutcome.error != nil)
    }

    @Test(arguments: [false, true])
    func uncountedRetriesDoNotSpendTheBudgetAndCountedOnesDo(asynchronous: Bool) async {
        // Given a policy of one retry, and an operation that first waits twice for a
        // condition (uncounted), then fails twice with counted retries
        let clock = ManualRetryScheduler()
        let operation = ScriptedOperation(asynchronous: asynchronous, steps: [
            .retryWithBudget(1, counted: false),
            .retryWithBudget(1, counted: false),
            .retryWithBudget(1, counted: true),
            .retryWithBudget(1, counted: true),
        ], scheduler: clock)
        operation.retryPolicy = .constant(1, retryLimit: .maximum(1))
        startOnItsOwnThread(operation)
        for _ in 0..<3 {
            await clock.waitForScheduledRetries(count: 1)
            clock.advance(by: 1)
        }
        // Then the uncounted retries left the count at 0, the first counted retry used the
        // budget, and the second was refused
        let error = await operation.finalOutcome.error as? RetryingOperationError
        #expect(error?.code == .retryLimitReached)
        #expect(operation.events.all == [
            "start(isRetry: false, retries: 0)",
            "start(isRetry: true, retries: 0)",
            "start(isRetry: true, retries: 0)",
            "start(isRetry: true, retries: 1)",
        ])
    }

    @Test func legacyRetriesCountButAreNotLimitedByThePolicy() async {
        // Given the default policy is .never, an operation using the earlier library's
        // baseOperationEnded(needsRetryIn:) still retries as it asks
        let clock = ManualRetryScheduler()
        let operation = ScriptedOperation(asynchronous: true, steps: [.retryIn(1), .retryIn(1), .succeed], scheduler: clock)
        operation.retryPolicy = .never
        startOnItsOwnThread(operation)
        for _ in 0..<2 {
            await clock.waitForScheduledRetries(count: 1)
            clock.advance(by: 1)
        }
        #expect(await operation.finalOutcome.isSuccess)
        #expect(operation.events.all.last == "start(isRetry: true, retries: 2)")
    }

    @Test func retryLogMessagesReachTheHandler() async {
        let clock = ManualRetryScheduler()
        let log = LogCapture()
        let operation = ScriptedOperation(asynchronous: true, steps: [.retryIn(4), .succeed], scheduler: clock)
        operation.name = "upload #1"
        operation.logHandler = log.handler
        startOnItsOwnThread(operation)
        await clock.waitForScheduledRetries(count: 1)
        clock.advance(by: 4)
        _ = await operation.finalOutcome
        #expect(log.texts(at: .info).contains("attempt failed; retrying in 4.0 s"))
        #expect(log.all.allSatisfy { $0.operationDescription == "upload #1" })
    }
}

/// retryNow, retry(in:) and retry(withHelpers:) while waiting and while not.
@Suite(.timeLimit(.minutes(1)))
struct ManualRetryTests {
    @Test(arguments: [false, true])
    func retryNowSkipsTheWaitAndTearsTheTimerDown(asynchronous: Bool) async {
        let clock = ManualRetryScheduler()
        let operation = ScriptedOperation(asynchronous: asynchronous, steps: [.retryIn(3600), .succeed], scheduler: clock)
        startOnItsOwnThread(operation)
        await clock.waitForScheduledRetries(count: 1)
        operation.retryNow()
        #expect(await operation.finalOutcome.isSuccess)
        #expect(clock.pendingCount == 0)
        #expect(operation.startCount == 2)
    }

    @Test func retryInReplacesTheWait() async {
        let clock = ManualRetryScheduler()
        let operation = ScriptedOperation(asynchronous: true, steps: [.retryIn(3600), .succeed], scheduler: clock)
        startOnItsOwnThread(operation)
        await clock.waitForScheduledRetries(count: 1)
        operation.retry(in: 5)
        await clock.waitForTotalScheduledRetries(count: 2)   // the old timer was cancelled first
        #expect(clock.pendingDelays == [5])
        clock.advance(by: 5)
        #expect(await operation.finalOutcome.isSuccess)
    }

    @Test func retryWithHelpersSwapsHelpersAndAnEmptyListWaitsForAManualRetry() async {
        let clock = ManualRetryScheduler()
        let operation = ScriptedOperation(asynchronous: true, steps: [.waitForHelpers(count: 1, counted: true), .succeed], scheduler: clock)
        startOnItsOwnThread(operation)
        await waitUntilWaiting(operation)
        let log = operation.events
        let replacement = RecordingRetryHelper(log: log, index: 9)
        operation.retry(withHelpers: [replacement])
        operation.retry(withHelpers: [])
        operation.retryNow()
        #expect(await operation.finalOutcome.isSuccess)
        #expect(operation.events.all.filter { !$0.hasPrefix("start") } == ["setup0", "teardown0", "setup9", "teardown9"])
    }

    @Test func retryRequestsFromOneThreadAreAppliedInTheOrderTheyWereMade() async {
        // Twenty operations in turn, each waiting on a helper: a reordering shows up only when
        // threads are scheduled a certain way, so the scenario runs many times
        for _ in 0..<20 {
            let clock = ManualRetryScheduler()
            let operation = ScriptedOperation(asynchronous: true, steps: [.waitForHelpers(count: 1, counted: true), .succeed], scheduler: clock)
            startOnItsOwnThread(operation)
            await waitUntilWaiting(operation)
            let log = operation.events
            // When one thread swaps the helpers 30 times, then asks for the retry
            for index in 1...30 {
                operation.retry(withHelpers: [RecordingRetryHelper(log: log, index: 100 + index)])
            }
            operation.retryNow()
            // Then every swap was applied, in order, before the retry
            #expect(await operation.finalOutcome.isSuccess)
            let expected = ["setup0"] + (1...30).flatMap { ["teardown\($0 == 1 ? 0 : 99 + $0)", "setup\(100 + $0)"] } + ["teardown130"]
            #expect(operation.events.all.filter { !$0.hasPrefix("start") } == expected)
        }
    }

    @Test(arguments: [false, true])
    func retryRequestsWhileNotWaitingDoNothingButLog(asynchronous: Bool) async {
        let log = LogCapture()
        let operation = ScriptedOperation(asynchronous: asynchronous, steps: [.succeed])
        operation.logHandler = log.handler
        operation.retryNow()                // before start
        #expect(await onDedicatedThread { log.waitForMessage(containing: "not waiting for one (not started)", seconds: 10) })
        startOnItsOwnThread(operation)
        #expect(await operation.finalOutcome.isSuccess)
        operation.retry(in: 1)              // after finish
        #expect(await onDedicatedThread { log.waitForMessage(containing: "not waiting for one (finished, succeeded)", seconds: 10) })
        #expect(operation.startCount == 1)
    }
}

import Foundation
import Testing
@testable import RetryingOperation

/// A synchronous operation whose attempt blocks until the test hands it a result.
private final class BlockedSyncOperation: RetryingOperation, @unchecked Sendable {
    let events = EventLog()
    let started = DispatchSemaphore(value: 0)
    private let results = LockedBox<[AttemptResult]>([])
    private let gate = DispatchSemaphore(value: 0)

    init(clock: ManualRetryScheduler) {
        super.init()
        retryScheduler = clock
        retryPolicy = RetryPolicy(retryLimit: .maximum(3), backoff: .constant(1), jitter: .none)
    }

    override var isAsynchronous: Bool { false }

    override func startBaseOperation(isRetry: Bool) {
        events.append("start \(numberOfAttempts) isRetry=\(isRetry) retries=\(numberOfRetries ?? -1)")
        started.signal()
        // Generous: on a loaded machine the test may take long to hand the result over. Without
        // one (the test failed meanwhile), the attempt fails rather than trap.
        _ = gate.wait(timeout: .now() + 50)
        let result = results.withLock { $0.isEmpty ? AttemptResult.failed(TestError("no result was handed over")) : $0.removeFirst() }
        baseOperationEnded(attempt: numberOfAttempts, with: result)
    }

    override func abandonBaseOperation(_ reason: AbandonReason) {
        events.append("abandon \(reason)")
    }

    func release(with result: AttemptResult) {
        results.withLock { $0.append(result) }
        gate.signal()
    }
}

/// Polls `condition` every millisecond for up to 30 s (a loaded machine is slow).
private func eventually(_ condition: () -> Bool) async throws -> Bool {
    for _ in 0..<30_000 {
        if condition() { return true }
        try await Task.sleep(for: .milliseconds(1))
    }
    return condition()
}

@Suite(.timeLimit(.minutes(1)))
struct StopAttemptTests {
    @Test func aStoppedAsynchronousAttemptEndsAtOnceAsAnUncountedRetryAndItsLateEndIsIgnored() async throws {
        // Given an operation that already spent one counted retry, running its second attempt
        let clock = ManualRetryScheduler()
        let operation = ManuallyEndedOperation(clock: clock, policy: RetryPolicy(retryLimit: .maximum(1), backoff: .constant(1), jitter: .none))
        operation.start()
        #expect(operation.waitForStart())
        operation.end(attempt: 1, with: .retriableError(TestError("busy")))
        await clock.waitForScheduledRetries(count: 1)
        clock.advance(by: 1)
        #expect(operation.waitForStart())
        #expect(operation.numberOfRetries == 1)

        // When it is stopped from outside
        #expect(operation.stopAttempt())

        // Then the hook is told why (the default calls cancelBaseOperation), the operation is
        // not cancelled, and it waits for a retry due at once that spends no budget — the
        // policy allowing no more counted retries does not fail it
        #expect(try await eventually { operation.isWaitingToRetry })
        #expect(operation.events.all.suffix(2) == ["abandon stopped", "cancelBaseOperation (isCancelled: false)"])
        #expect(!operation.isCancelled)
        #expect(operation.numberOfRetries == 1)
        #expect(clock.pendingDelays == [0])

        // And the stopped attempt's late end is ignored; the retry runs as a retry
        operation.end(attempt: 2, with: .failed(TestError("late")))
        #expect(operation.isWaitingToRetry)
        clock.advance(by: 0)
        #expect(operation.waitForStart())
        #expect(operation.events.all.last == "start 3")
        #expect(operation.numberOfRetries == 1)
        operation.end(attempt: 3, with: .succeeded)
        #expect(await operation.finalOutcome.isSuccess)
    }

    @Test func stoppingAnOperationWithNoAttemptRunningDoesNothing() async throws {
        let clock = ManualRetryScheduler()
        let operation = ManuallyEndedOperation(clock: clock, policy: .default)
        #expect(operation.stopAttempt() == false)   // not started
        operation.start()
        #expect(operation.waitForStart())
        operation.end(attempt: 1, with: .retry(after: 5, countsTowardRetryLimit: false))
        #expect(try await eventually { operation.isWaitingToRetry })
        #expect(operation.stopAttempt() == false)   // waiting, not running
        #expect(clock.pendingDelays == [5])
        operation.cancel()
        let outcome = await operation.finalOutcome
        #expect({ if case .cancelled = outcome { return true } else { return false } }())
    }

    @Test func aStoppedSynchronousAttemptEndsWhenItReturnsAsAnUncountedRetryUnlessItSucceeded() async throws {
        let clock = ManualRetryScheduler()
        let operation = BlockedSyncOperation(clock: clock)
        Thread.detachNewThread { operation.start() }
        #expect(await onDedicatedThread { operation.started.wait(timeout: .now() + 50) == .success })

        // When stopped, the hook is called at once from the stopping thread, but the attempt
        // holds its thread: the operation still runs it
        #expect(operation.stopAttempt())
        #expect(operation.events.all == ["start 1 isRetry=false retries=0", "abandon stopped"])
        #expect(operation.isExecuting && !operation.isWaitingToRetry)
        #expect(operation.stopAttempt() == false)   // already stopped

        // When it returns with a counted retriable error, that becomes the uncounted retry
        operation.release(with: .retriableError(TestError("cut off")))
        #expect(try await eventually { operation.isWaitingToRetry })
        #expect(operation.numberOfRetries == 0)
        #expect(clock.pendingDelays == [0])

        // A stop during the next attempt that then succeeds: the success stands (the retry
        // runs on the thread that advances the clock, and blocks it)
        Thread.detachNewThread { clock.advance(by: 0) }
        #expect(await onDedicatedThread { operation.started.wait(timeout: .now() + 50) == .success })
        #expect(operation.stopAttempt())
        operation.release(with: .succeeded)
        #expect(await operation.finalOutcome.isSuccess)
        #expect(operation.events.all.contains("start 2 isRetry=true retries=0"))
    }
}

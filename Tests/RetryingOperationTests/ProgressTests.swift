import Foundation
import Testing
import RetryingOperation

/// An operation whose attempt number `n` (from 1) runs `attempts[n - 1]` with itself.
private final class ProgressingOperation: RetryingOperation, @unchecked Sendable {
    // @unchecked: the constants are set once; the progress is thread-safe.
    let asynchronous: Bool
    let attempts: [@Sendable (ProgressingOperation) -> Void]

    init(asynchronous: Bool, _ attempts: [@Sendable (ProgressingOperation) -> Void]) {
        self.asynchronous = asynchronous
        self.attempts = attempts
        super.init()
    }

    override var isAsynchronous: Bool { asynchronous }

    /// A cancel ends the attempt that is running (an attempt of the script that does not end
    /// by itself waits for one).
    override func cancelBaseOperation() {
        baseOperationEnded(failingWith: CancellationError())
    }

    override func startBaseOperation(isRetry: Bool) {
        let attempt = attempts[min(numberOfAttempts, attempts.count) - 1]
        if asynchronous {
            DispatchQueue.global().async { attempt(self) }
        } else {
            attempt(self)
        }
    }
}

@Suite("Progress of an operation", .timeLimit(.minutes(1)))
struct ProgressTests {
    @Test func aSynchronousAttemptsProgressIsSeenAndSuccessCompletesIt() {
        // Given an attempt that does 4 of 10 units, then succeeds
        let seen = LockedBox<Double?>(nil)
        let operation = ProgressingOperation(asynchronous: false, [{ operation in
            operation.progress.totalUnitCount = 10
            operation.progress.completedUnitCount = 4
            seen.withLock { $0 = operation.progress.fractionCompleted }
            operation.baseOperationEnded()
        }])
        // When it runs
        operation.start()
        // Then the attempt's units were the operation's, and success completed them
        #expect(seen.withLock { $0 } == 0.4)
        #expect(operation.progress.completedUnitCount == 10 && operation.progress.fractionCompleted == 1)
        #expect(operation.progress === operation.progress)
    }

    @Test func aRetryContinuesFromWhereTheLastAttemptLeftIt() async {
        // Given an upload whose first attempt sends 40 of 100 bytes and fails
        let clock = ManualRetryScheduler()
        let resumedAt = LockedBox<Int64?>(nil)
        let operation = ProgressingOperation(asynchronous: true, [
            { operation in
                operation.progress.totalUnitCount = 100
                operation.progress.completedUnitCount = 40
                operation.baseOperationEnded(withRetriableError: TestError("connection lost"))
            },
            { operation in
                resumedAt.withLock { $0 = operation.progress.completedUnitCount }
                operation.progress.completedUnitCount = 90
                operation.baseOperationEnded()
            },
        ])
        operation.retryScheduler = clock
        operation.start()
        // When its retry comes due
        await clock.waitForScheduledRetries(count: 1)
        #expect(operation.progress.fractionCompleted == 0.4, "waiting for the retry, the progress stays")
        clock.advance(by: 60)
        // Then the retry found the first attempt's 40 bytes, and success completed the rest
        #expect(await operation.finalOutcome.isSuccess)
        #expect(resumedAt.withLock { $0 } == 40)
        #expect(operation.progress.completedUnitCount == 100)
    }

    @Test func anIndeterminateProgressCompletesAtSuccessAndAFailureLeavesItWhereItWas() async {
        // An indeterminate progress that succeeds becomes 1 of 1
        let succeeding = ProgressingOperation(asynchronous: false, [{ $0.baseOperationEnded() }])
        #expect(succeeding.progress.isIndeterminate)
        succeeding.start()
        #expect(succeeding.progress.totalUnitCount == 1 && succeeding.progress.fractionCompleted == 1)
        // Asked for only after the success, it is complete too
        let askedLate = ProgressingOperation(asynchronous: false, [{ $0.baseOperationEnded() }])
        askedLate.start()
        #expect(askedLate.progress.fractionCompleted == 1)
        // A failure for good leaves it where the attempt left it, not cancelled
        let failing = ProgressingOperation(asynchronous: true, [{ (operation: ProgressingOperation) in
            operation.progress.totalUnitCount = 4
            operation.progress.completedUnitCount = 1
            operation.baseOperationEnded(failingWith: TestError("refused"))
        }])
        failing.start()
        #expect(await failing.finalOutcome.error != nil)
        #expect(failing.progress.fractionCompleted == 0.25 && !failing.progress.isCancelled)
    }

    @Test func cancellingTheOperationCancelsItsProgressAndTheOtherWayRound() async {
        // Cancelling the operation cancels its progress, made before or after the cancel
        let running = ProgressingOperation(asynchronous: true, [{ _ in }])
        let madeBefore = running.progress
        running.start()
        running.cancel()
        #expect(madeBefore.isCancelled)
        let cancelledFirst = ProgressingOperation(asynchronous: true, [{ _ in }])
        cancelledFirst.cancel()
        #expect(cancelledFirst.progress.isCancelled)
        // Cancelling the progress (a cancel button on a progress UI) cancels the operation
        let started = DispatchSemaphore(value: 0)
        let operation = ProgressingOperation(asynchronous: true, [{ _ in started.signal() }])
        let progress = operation.progress
        operation.start()
        started.wait()
        progress.cancel()
        if case .cancelled = await operation.finalOutcome {} else { Issue.record("the operation was not cancelled") }
        #expect(operation.isCancelled)
    }

    @Test func anAsyncBodyReportsThroughItsAttemptsProgress() async {
        // Given a body that works through 3 items, one attempt failing after the first
        let clock = ManualRetryScheduler()
        let failed = LockedBox(false)
        let operation = AsyncRetryingOperation { attempt in
            attempt.progress.totalUnitCount = 3
            while attempt.progress.completedUnitCount < 3 {
                attempt.progress.completedUnitCount += 1
                if !failed.withLock({ $0 }) {
                    failed.withLock { $0 = true }
                    throw TestError("flaky")
                }
            }
        }
        operation.retryScheduler = clock
        operation.start()
        await clock.waitForScheduledRetries(count: 1)
        // The retry goes on from the item the first attempt reached
        #expect(operation.progress.completedUnitCount == 1)
        clock.advance(by: 60)
        #expect(await operation.finalOutcome.isSuccess)
        #expect(operation.progress.completedUnitCount == 3 && operation.progress.fractionCompleted == 1)
    }

    @Test func theReadmeSampleReportsTheProgressOfABackup() async {
        let photos = (1...3).map { URL(fileURLWithPath: "/tmp/photo-\($0).jpg") }
        let uploaded = LockedBox<[URL]>([])
        @Sendable func upload(_ photo: URL) async throws { uploaded.withLock { $0.append(photo) } }
        // snippet: progress
        let backup = AsyncRetryingOperation { attempt in
            attempt.progress.totalUnitCount = Int64(photos.count)
            // A retry skips the photos the last attempt uploaded.
            for photo in photos.dropFirst(Int(attempt.progress.completedUnitCount)) {
                try await upload(photo)
                attempt.progress.completedUnitCount += 1
            }
        }
        // Show it (`ProgressView(backup.progress)` in SwiftUI), or count it in a parent.
        let overall = Progress(totalUnitCount: 1)
        overall.addChild(backup.progress, withPendingUnitCount: 1)
        // end snippet
        backup.start()
        #expect(await backup.finalOutcome.isSuccess)
        #expect(uploaded.withLock { $0 } == photos)
        #expect(backup.progress.fractionCompleted == 1 && overall.fractionCompleted == 1)
    }

    @Test func reportedUnitsAreWhatTheProgressStartsFromAndUpdatesOnceItExists() {
        // Units reported before anyone asked for the progress: kept, and the progress starts
        // from them
        let reported = LockedBox<Double?>(nil)
        let operation = ProgressingOperation(asynchronous: false, [{ operation in
            operation.reportProgress(completed: 3, of: 12)
            reported.withLock { $0 = operation.progress.fractionCompleted }
            // Once it exists, a report updates it
            operation.reportProgress(completed: 6, of: 12)
            operation.baseOperationEnded(failingWith: TestError("stop"))
        }])
        operation.start()
        #expect(reported.withLock { $0 } == 0.25)
        #expect(operation.progress.completedUnitCount == 6 && operation.progress.totalUnitCount == 12)
        // Reported but never asked for until after a success: complete
        let succeeded = ProgressingOperation(asynchronous: false, [{ operation in
            operation.reportProgress(completed: 1, of: 5)
            operation.baseOperationEnded()
        }])
        succeeded.start()
        #expect(succeeded.progress.completedUnitCount == 5 && succeeded.progress.fractionCompleted == 1)
    }

    @Test func anAsyncBodyReportsThroughItsAttempt() async {
        let operation = AsyncRetryingOperation { attempt in
            attempt.reportProgress(completed: 2, of: 8)
            throw TestError("refused")
        }
        operation.retryPolicy = .never
        operation.start()
        #expect(await operation.finalOutcome.error != nil)
        #expect(operation.progress.fractionCompleted == 0.25)
    }
}

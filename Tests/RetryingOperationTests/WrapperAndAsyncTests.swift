import Foundation
import Testing
@testable import RetryingOperation

/// An operation we "don't own": fails `failuresBeforeSuccess` times, then succeeds.
final class FlakyDownload: Operation, RetryableOperation, @unchecked Sendable {
    let generation: Int
    let failuresBeforeSuccess: Int
    let failsToCopy: Bool
    let runs: LockedBox<[Int]>
    private let retryDelay: TimeInterval


    override func main() {
        runs.withLock { $0.append(generation) }
    }

    var failed: Bool { generation < failuresBeforeSuccess }

    func retryHelpers<T>(from wrapper: RetryableOperationWrapper<T>) -> [RetryHelper]? {
        guard failed, !isCancelled else { return nil }
        return [RetryingOperation.TimerRetryHelper(retryDelay: retryDelay, retryingOperation: wrapper)]
    }

    func operationForRetrying() throws -> Self {
        if failsToCopy { throw TestError("cannot copy") }
        return Self(generation: generation + 1, failuresBeforeSuccess: failuresBeforeSuccess, failsToCopy: failsToCopy, runs: runs, retryDelay: retryDelay)
    }

    required init(generation: Int = 0, failuresBeforeSuccess: Int, failsToCopy: Bool = false, runs: LockedBox<[Int]> = LockedBox([]), retryDelay: TimeInterval = 1) {
        self.generation = generation
        self.failuresBeforeSuccess = failuresBeforeSuccess
        self.failsToCopy = failsToCopy
        self.runs = runs
        self.retryDelay = retryDelay
    }
}

@Suite(.timeLimit(.minutes(1)))
struct RetryableOperationWrapperTests {
    @Test(arguments: [false, true])
    func wrapperRetriesFreshCopiesUntilTheOperationSucceeds(useBaseQueue: Bool) async {
        // Given a download that fails twice, wrapped, with or without a base queue
        let clock = ManualRetryScheduler()
        let runs = LockedBox<[Int]>([])
        let download = FlakyDownload(failuresBeforeSuccess: 2, runs: runs)
        let wrapper = RetryableOperationWrapper(baseOperation: download, baseOperationQueue: useBaseQueue ? makeQueue() : nil)
        wrapper.retryScheduler = clock
        makeQueue().addOperation(wrapper)
        // When its retries come due
        for _ in 0..<2 {
            await clock.waitForScheduledRetries(count: 1)
            clock.advance(by: 1)
        }
        // Then three generations ran, the last one is current, and the wrapper succeeded
        #expect(await wrapper.finalOutcome.isSuccess)
        #expect(runs.withLock { $0 } == [0, 1, 2])
        #expect(wrapper.originalBaseOperation === download)
        #expect(wrapper.currentBaseOperation.generation == 2)
    }

    @Test func wrapperHonoursMaximumNumberOfRetries() async {
        let clock = ManualRetryScheduler()
        let runs = LockedBox<[Int]>([])
        let wrapper = RetryableOperationWrapper(maximumNumberOfRetries: 1, baseOperation: FlakyDownload(failuresBeforeSuccess: 5, runs: runs))
        wrapper.retryScheduler = clock
        wrapper.start()
        await clock.waitForScheduledRetries(count: 1)
        clock.advance(by: 1)
        let error = await wrapper.finalOutcome.error as? RetryingOperationError
        #expect(error?.code == .retryLimitReached)
        #expect(runs.withLock { $0 } == [0, 1])
    }

    @Test func retryLimitInitialiserMatchesTheLegacyOne() {
        let download = FlakyDownload(failuresBeforeSuccess: 0)
        #expect(RetryableOperationWrapper(baseOperation: download, retryLimit: .maximum(3)).maximumNumberOfRetries == 3)
        #expect(RetryableOperationWrapper(baseOperation: download, retryLimit: .unlimited).maximumNumberOfRetries == -1)
        #expect(RetryableOperationWrapper(baseOperation: download).maximumNumberOfRetries == -1)
    }

    @Test func errorThrownByOperationForRetryingIsTheOutcome() async {
        let clock = ManualRetryScheduler()
        let wrapper = RetryableOperationWrapper(baseOperation: FlakyDownload(failuresBeforeSuccess: 1, failsToCopy: true))
        wrapper.retryScheduler = clock
        wrapper.start()
        await clock.waitForScheduledRetries(count: 1)
        clock.advance(by: 1)
        #expect(await wrapper.finalOutcome.error as? TestError == TestError("cannot copy"))
    }

    @Test func cancellingTheWrapperCancelsTheCurrentBaseOperation() async {
        // Given a wrapper whose base operation sits in a suspended base queue
        let baseQueue = makeQueue()
        baseQueue.isSuspended = true
        let download = FlakyDownload(failuresBeforeSuccess: 0)
        let wrapper = RetryableOperationWrapper(baseOperation: download, baseOperationQueue: baseQueue)
        wrapper.start()
        // When the wrapper is cancelled and the base queue resumes
        wrapper.cancel()
        baseQueue.isSuspended = false
        // Then the base operation was cancelled and the wrapper finished as cancelled
        #expect("\(await wrapper.finalOutcome)" == "cancelled")
        #expect(download.isCancelled)
    }

    @Test func cancellingWhileWaitingFinishesTheWrapper() async {
        let clock = ManualRetryScheduler()
        let wrapper = RetryableOperationWrapper(baseOperation: FlakyDownload(failuresBeforeSuccess: 3))
        wrapper.retryScheduler = clock
        wrapper.start()
        await clock.waitForScheduledRetries(count: 1)
        wrapper.cancel()
        #expect(wrapper.isFinished)
        #expect("\(await wrapper.finalOutcome)" == "cancelled")
        #expect(clock.pendingCount == 0)
    }
}

@Suite(.timeLimit(.minutes(1)))
struct AsyncRetryingOperationTests {
    @Test func bodyIsRetriedByPolicyUntilItSucceeds() async {
        let clock = ManualRetryScheduler()
        let attempts = LockedBox<[Int]>([])
        let operation = AsyncRetryingOperation(retryPolicy: .constant(2, retryLimit: .maximum(5))) { attempt in
            attempts.withLock { $0.append(attempt.number) }
            if attempt.number < 3 { throw TestError("flaky") }
        }
        operation.retryScheduler = clock
        makeQueue().addOperation(operation)
        for _ in 0..<2 {
            await clock.waitForScheduledRetries(count: 1)
            #expect(clock.pendingDelays == [2])
            clock.advance(by: 2)
        }
        #expect(await operation.finalOutcome.isSuccess)
        #expect(attempts.withLock { $0 } == [1, 2, 3])
    }

    @Test func nonRetriableErrorsFailAtOnce() async {
        let operation = AsyncRetryingOperation(isRetriable: { ($0 as? TestError)?.name != "fatal" }) { _ in
            throw TestError("fatal")
        }
        operation.start()
        #expect(await operation.finalOutcome.error as? TestError == TestError("fatal"))
        #expect(operation.numberOfAttempts == 1)
    }

    @Test func retryRequestsChooseTheDelayAndWhetherTheRetryCounts() async {
        let clock = ManualRetryScheduler()
        let retriesSeen = LockedBox<[Int]>([])
        let operation = AsyncRetryingOperation(retryPolicy: .never) { attempt in
            retriesSeen.withLock { $0.append(attempt.numberOfRetries) }
            if attempt.number == 1 { throw RetryRequest.after(30, countsTowardRetryLimit: false) }
            if attempt.number == 2 { throw RetryRequest.after(5) }   // counted: refused by .never
        }
        operation.retryScheduler = clock
        operation.start()
        await clock.waitForScheduledRetries(count: 1)
        #expect(clock.pendingDelays == [30])
        clock.advance(by: 30)
        let error = await operation.finalOutcome.error as? RetryingOperationError
        #expect(error?.code == .retryLimitReached)
        #expect(retriesSeen.withLock { $0 } == [0, 0])
    }

    @Test func cancellingTheOperationCancelsTheRunningTask() async {
        let started = LockedBox<CheckedContinuation<Void, Never>?>(nil)
        let sawCancellation = LockedBox(false)
        let operation = AsyncRetryingOperation { _ in
            await withCheckedContinuation { continuation in started.withLock { $0 = continuation } }
            do {
                try await Task.sleep(nanoseconds: 60_000_000_000)
            } catch {
                sawCancellation.withLock { $0 = error is CancellationError }
                throw error
            }
        }
        operation.start()
        // Wait for the body to start, then let it go on to its long sleep
        while started.withLock({ $0 }) == nil { await Task.yield() }
        started.withLock { $0 }?.resume()
        operation.cancel()
        #expect("\(await operation.finalOutcome)" == "cancelled")
        #expect(sawCancellation.withLock { $0 })
        #expect(operation.numberOfAttempts == 1)
    }
}

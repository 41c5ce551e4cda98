import Foundation
import Testing
@testable import RetryingOperation

/// Giving up after the retry limit has one shape for every kind of operation.
@Suite(.timeLimit(.minutes(1)))
struct RetryLimitOutcomeTests {
    @Test func aSubclassAnAsyncOperationAndAWrapperGiveUpInTheSameShape() async {
        // Given a subclass, an async operation and a wrapper that keep failing, each allowed
        // one retry, on test clocks
        let subclassClock = ManualRetryScheduler()
        let subclass = ScriptedOperation(asynchronous: true, steps: [.retriableError(TestError("busy"))], scheduler: subclassClock)
        subclass.retryPolicy = .constant(1, retryLimit: .maximum(1))

        let asyncClock = ManualRetryScheduler()
        let asynchronous = AsyncRetryingOperation(retryPolicy: .constant(1, retryLimit: .maximum(1))) { _ in
            throw TestError("timeout")
        }
        asynchronous.retryScheduler = asyncClock

        let wrapperClock = ManualRetryScheduler()
        let wrapper = RetryableOperationWrapper(baseOperation: FlakyDownload(failuresBeforeSuccess: 5), retryLimit: .maximum(1))
        wrapper.retryScheduler = wrapperClock

        // When each runs and its one retry comes due
        for (operation, clock) in [(subclass, subclassClock), (asynchronous, asyncClock), (wrapper, wrapperClock)] as [(RetryingOperation, ManualRetryScheduler)] {
            operation.start()
            await clock.waitForScheduledRetries(count: 1)
            clock.advance(by: 1)
        }

        // Then each fails with retryLimitReached after two attempts, carrying the last
        // attempt's error where the attempt reported one
        let outcomes = [await subclass.finalOutcome, await asynchronous.finalOutcome, await wrapper.finalOutcome]
        let errors = outcomes.map { $0.error as? RetryingOperationError }
        #expect(errors.map { $0?.code } == [.retryLimitReached, .retryLimitReached, .retryLimitReached])
        #expect(errors[0]?.underlyingError as? TestError == TestError("busy"))
        #expect(errors[1]?.underlyingError as? TestError == TestError("timeout"))
        let wrapperHasNoUnderlyingError = errors[2].map { $0.underlyingError == nil } ?? false
        #expect(wrapperHasNoUnderlyingError)   // an Operation reports no error
        let attempts: [Int] = [subclass.numberOfAttempts, asynchronous.numberOfAttempts, wrapper.numberOfAttempts]
        #expect(attempts == [2, 2, 2])
    }

    @Test func aNonRetriableFailureCarriesItsOwnErrorAndIsToldApartFromGivingUp() async {
        // Given an operation whose attempt fails for good, and one whose attempt fails with
        // the same error, retriable, under a policy that allows no retry
        let failing = ScriptedOperation(asynchronous: true, steps: [.fail(TestError("forbidden"))])
        let exhausted = ScriptedOperation(asynchronous: true, steps: [.retriableError(TestError("forbidden"))])
        exhausted.retryPolicy = .constant(1, retryLimit: .maximum(0))
        // When both run
        failing.start()
        exhausted.start()
        // Then the failure's outcome is that error itself, not a retry-limit error
        #expect(await failing.finalOutcome.error as? TestError == TestError("forbidden"))
        // And giving up is told apart from it: retryLimitReached, carrying the same error
        let gaveUp = await exhausted.finalOutcome.error as? RetryingOperationError
        #expect(gaveUp?.code == .retryLimitReached)
        #expect(gaveUp?.underlyingError as? TestError == TestError("forbidden"))
        #expect(exhausted.numberOfAttempts == 1)
    }
}

import Foundation
import Testing
import RetryingOperation

/// A manual clock's `async` waits end when their task is cancelled, so that a test's time
/// limit ends a wait for retries that never come.
@Suite(.timeLimit(.minutes(1)))
struct ManualRetrySchedulerWaitTests {
    @Test func aWaitForRetriesThatNeverComeEndsWhenItsTaskIsCancelled() async {
        // Given waits for retries that are never scheduled
        let clock = ManualRetryScheduler()
        let pending = Task { await clock.waitForScheduledRetries(count: 1) }
        let total = Task { await clock.waitForTotalScheduledRetries(count: 3) }
        // (each registered before it is cancelled)
        try? await Task.sleep(for: .milliseconds(50))
        // When their tasks are cancelled
        pending.cancel()
        total.cancel()
        // Then both return, and the clock still has nothing pending
        await pending.value
        await total.value
        #expect(clock.pendingDelays.isEmpty)
    }

    @Test func aWaitOfATaskCancelledBeforeItBeganReturnsAtOnceAndLaterWaitsStillWait() async {
        let clock = ManualRetryScheduler()
        // Given a task cancelled before its wait begins
        let early = Task {
            withUnsafeCurrentTask { $0?.cancel() }
            await clock.waitForScheduledRetries(count: 5)
            return Task.isCancelled
        }
        // Then its wait returns at once
        #expect(await early.value)
        // And a wait of another task still waits for its retries, and returns once they are due
        let waiting = Task { await clock.waitForScheduledRetries(count: 1) }
        try? await Task.sleep(for: .milliseconds(20))
        _ = clock.schedule(after: 5) {}
        await waiting.value
        #expect(clock.pendingDelays == [5])
    }
}

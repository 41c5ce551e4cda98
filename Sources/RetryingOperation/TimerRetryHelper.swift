import Foundation

extension RetryingOperation {
    /// A retry helper that retries after a fixed delay, measured by the operation's
    /// ``RetryingOperation/retryScheduler``.
    ///
    /// ``RetryingOperation/baseOperationEnded(needsRetryIn:)`` and
    /// ``RetryingOperation/retry(in:)`` create one for you; create one yourself to combine
    /// a delay with other helpers — the first helper to trigger wins.
    ///
    /// ```swift
    /// baseOperationEnded(retryHelpers: [
    ///     TimerRetryHelper(retryDelay: 60, retryingOperation: self),
    ///     NetworkIsBackRetryHelper(operation: self),
    /// ])
    /// ```
    public class TimerRetryHelper: RetryHelper, @unchecked Sendable {
        // @unchecked: `operation` is written only in `init`; `scheduled` is a `Locked`.

        /// Seconds between ``setup()`` and the retry.
        public let retryDelay: TimeInterval
        private weak var operation: RetryingOperation?
        private let scheduled = Locked<(any ScheduledRetry)?>(nil)

        /// Creates a helper that retries `retryingOperation` `retryDelay` seconds after it
        /// is set up.
        public init(retryDelay: TimeInterval, retryingOperation: RetryingOperation) {
            self.retryDelay = retryDelay
            self.operation = retryingOperation
        }

        /// Starts the timer. Called by the operation when its wait begins.
        public func setup() {
            guard let operation else { return }
            // Bound to the wait being set up: if it fires after that wait ended (a race
            // with `retryNow()` or a cancel), the operation ignores it.
            let wait = operation.currentWaitGeneration
            let retry = operation.retryScheduler.schedule(after: retryDelay) { [weak operation] in
                operation?.timerFired(forWait: wait)
            }
            scheduled.withLock { $0 = retry }
        }

        /// Stops the timer. Called by the operation when its wait ends.
        public func teardown() {
            scheduled.withLock { retry in
                defer { retry = nil }
                return retry
            }?.cancel()
        }
    }
}

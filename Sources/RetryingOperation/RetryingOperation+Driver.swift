import Foundation

/// Something that runs a ``RetryingOperation`` from outside an `OperationQueue` slot and
/// wants to know about its life: the persistent queue, which saves each retry before the wait
/// starts and admits each retry attempt into a bounded queue only when it is due.
///
/// Every method is called synchronously on the operation's callout thread, never while the
/// operation holds its lock, so an implementation may block briefly (to write a file) and may
/// call back into the operation.
package protocol RetryingOperationDriver: AnyObject, Sendable {
    /// An attempt is about to start; ``RetryingOperation/startBaseOperation(isRetry:)`` runs
    /// when this returns.
    func operationWillStartAttempt(_ operation: RetryingOperation, _ attempt: RetryingOperation.AttemptInfo)

    /// The operation is about to wait for a retry; its helpers are set up when this returns.
    /// Also called when `retry(in:)` / `retry(withHelpers:)` replace a wait.
    func operationWillWait(_ operation: RetryingOperation, _ wait: RetryingOperation.WaitInfo)

    /// A retry is due. The attempt starts only once `admit` is called, from any thread; until
    /// then the operation stays waiting (a cancel still finishes it at once).
    func operationRequestsAttempt(_ operation: RetryingOperation, admit: @escaping @Sendable () -> Void)

    /// The operation finished; its `isFinished` is already `true`.
    func operationDidFinish(_ operation: RetryingOperation, _ outcome: RetryingOperation.Outcome)

    /// ``RetryingOperation/cancel()`` was called, whether or not the operation has started:
    /// called on the cancelling thread, after `isCancelled` became `true`.
    func operationWasCancelled(_ operation: RetryingOperation)

    /// ``RetryingOperation/reportProgress(completed:of:)`` was called: on the reporting
    /// thread, after the numbers were kept (and set on the operation's progress, if it has one).
    func operationReportedProgress(_ operation: RetryingOperation, completed: Int64, of total: Int64)
}

extension RetryingOperationDriver {
    package func operationReportedProgress(_ operation: RetryingOperation, completed: Int64, of total: Int64) {}
}

extension RetryingOperation {
    /// An attempt about to start, as told to a ``RetryingOperationDriver``.
    package struct AttemptInfo: Sendable {
        /// 1 for the first attempt ever made, counting attempts made before a restore.
        package var attempt: Int
        /// Counted retries so far, including this attempt when it is a counted retry.
        package var numberOfRetries: Int
        /// The value passed to `startBaseOperation(isRetry:)`.
        package var isRetry: Bool
    }

    /// A wait about to start, as told to a ``RetryingOperationDriver``.
    package struct WaitInfo: Sendable {
        /// Whether the retry will count toward the retry limit.
        package var isCounted: Bool
        /// What ``RetryingOperation/numberOfRetries`` will be during the next attempt.
        package var numberOfRetriesOnRetry: Int
        /// Attempts made so far.
        package var numberOfAttempts: Int
        /// The shortest timer among the wait's helpers; `nil` when only other helpers (a
        /// condition such as "network is back") end the wait.
        package var delay: TimeInterval?
        /// The error the attempt ended with, if it reported one.
        package var errorDescription: String?
    }

    /// Progress carried over from an earlier run of the same work (a restored record).
    package struct RestoredProgress: Sendable {
        package var numberOfRetries: Int
        package var numberOfAttempts: Int
        /// The first attempt of this instance is passed `isRetry: true`.
        package var resumesAsRetry: Bool
        /// The units of work done, as the earlier run last reported them; `nil`: none kept.
        package var units: (completed: Int64, total: Int64)?

        package init(numberOfRetries: Int, numberOfAttempts: Int, resumesAsRetry: Bool, units: (completed: Int64, total: Int64)? = nil) {
            self.numberOfRetries = numberOfRetries
            self.numberOfAttempts = numberOfAttempts
            self.resumesAsRetry = resumesAsRetry
            self.units = units
        }
    }

    /// The units of work the operation reported — through ``progress`` if it was made, else
    /// through ``reportProgress(completed:of:)`` — or `nil` when it reported none: what a
    /// persistent queue keeps with the record when an attempt ends in a retry.
    package var reportedProgressUnits: (completed: Int64, total: Int64)? {
        let (progress, units) = machine.withLock { ($0.progress, $0.reportedUnits) }
        // (The progress read outside the lock: its getters take its own.)
        let current = progress.map { ($0.completedUnitCount, $0.totalUnitCount) } ?? units
        return current == (0, -1) ? nil : current
    }

    /// The driver told about this operation's life; set before the operation starts.
    package var driver: (any RetryingOperationDriver)? {
        get { machine.withLock { $0.driver } }
        set { machine.withLock { $0.driver = newValue } }
    }

    /// Continues the retry count and attempt count of an earlier run. Call before `start()`.
    package func restoreProgress(_ progress: RestoredProgress) {
        machine.withLock { state in
            precondition(!state.hasStarted, "restoreProgress(_:) must be called before the operation starts")
            state.numberOfRetries = progress.numberOfRetries
            state.numberOfAttempts = progress.numberOfAttempts
            state.resumesAsRetry = progress.resumesAsRetry
            if let units = progress.units, state.progress == nil { state.reportedUnits = units }
        }
    }

    /// Makes the operation finish failed with `error`, without running an attempt, when it is
    /// started (a persistent operation whose prerequisite failed for good). Call before `start()`;
    /// a cancelled operation still finishes cancelled.
    package func failWhenStarted(with error: any Error) {
        machine.withLock { state in
            precondition(!state.hasStarted, "failWhenStarted(with:) must be called before the operation starts")
            state.failureBeforeStart = error
        }
    }

    /// Ends the operation's wait for a retry — also a due retry the driver has not admitted yet
    /// — by finishing it failed with `error`, without an attempt (a stored operation that expired
    /// while its retry waited for a slot or its run conditions). Does nothing unless the
    /// operation is waiting. The finish happens on a background thread.
    package func failWait(with error: any Error) {
        submitInBackground(.failWait(error))
    }

    /// The callout of ``failWait(with:)``.
    func processWaitFailure(_ error: any Error) {
        let isWaiting = machine.withLock { state -> Bool in
            guard case .waiting = state.phase else { return false }
            state.isAwaitingAdmission = false
            return true
        }
        guard isWaiting else { return }
        tearDownHelpers()
        finish(.failed(error), wasExecuting: true)
    }

    /// The shortest timer delay among `helpers`, if any is a ``TimerRetryHelper``.
    static func shortestTimerDelay(of helpers: [RetryHelper]) -> TimeInterval? {
        helpers.compactMap { ($0 as? TimerRetryHelper)?.retryDelay }.min()
    }
}

import Foundation

// Attempt timeouts and expiration dates: the two deadlines of a `RetryingOperation`, both
// measured by its `retryScheduler` (so tests drive them with a `ManualRetryScheduler`).
//
// A timeout abandons the running attempt: it is marked ended at once, the subclass is told
// with `abandonBaseOperation(_:)`, and the end is processed as a counted retry whose error is
// `attemptTimedOut`. The abandoned attempt still owes its `baseOperationEnded` call; that late
// call is ignored, by number when it comes through `baseOperationEnded(attempt:with:)`. A
// synchronous attempt holds its thread until it returns, so it is not abandoned early: the hook
// is called from the timer's thread (as `cancel()` calls `cancelBaseOperation()`), and however
// the attempt then ends, it ends as timed out.

extension RetryingOperation {
    /// How an attempt ended, for ``RetryingOperation/baseOperationEnded(attempt:with:)``.
    ///
    /// Each case does what the `baseOperationEnded` method of the same meaning does.
    public enum AttemptResult: Sendable {
        /// Done: the operation finishes with ``Outcome/succeeded`` (``baseOperationEnded()``).
        case succeeded
        /// A failure that must not be retried
        /// (``baseOperationEnded(failingWith:)``).
        case failed(any Error)
        /// An error that may go away: the retry policy decides
        /// (``baseOperationEnded(withRetriableError:)``).
        case retriableError(any Error)
        /// Retry after a delay, counted or not
        /// (``baseOperationEnded(needsRetryIn:countsTowardRetryLimit:)``).
        case retry(after: TimeInterval, countsTowardRetryLimit: Bool)
    }

    /// Why an attempt is abandoned before it ended; passed to
    /// ``RetryingOperation/abandonBaseOperation(_:)``.
    ///
    /// New reasons may appear in minor releases: compare with the ones you handle.
    public struct AbandonReason: Hashable, Sendable, CustomStringConvertible {
        /// A stable, human-readable name of the reason.
        public let rawValue: String

        /// The attempt ran longer than ``RetryPolicy/attemptTimeout``. It ends as a counted
        /// retry with a ``RetryingOperationError/Code-swift.struct/attemptTimedOut`` error.
        public static let timedOut = AbandonReason(rawValue: "timedOut")
        /// The attempt was stopped from outside: a `PersistentOperationQueue` bounded run
        /// ended (its deadline passed, or the app's background time expired). It ends as an
        /// *uncounted* retry that runs again later, passed `isRetry: true`.
        public static let stopped = AbandonReason(rawValue: "stopped")

        public var description: String { rawValue }
    }

    /// Ends attempt number `attempt` with `result` — unless that attempt is no longer the one
    /// running, in which case the call is ignored (and logged).
    ///
    /// Read the attempt's number from ``numberOfAttempts`` when it starts. Use this method
    /// rather than the plain `baseOperationEnded` methods when the attempt has a timeout
    /// (``RetryPolicy/attemptTimeout``) and its callback may still come after the attempt was
    /// abandoned: a plain `baseOperationEnded` call ends whatever attempt is running, which by
    /// then may be the next one.
    ///
    /// ```swift
    /// override func startBaseOperation(isRetry: Bool) {
    ///     let attempt = numberOfAttempts
    ///     uploader.upload(file) { result in
    ///         switch result {
    ///         case .success: self.baseOperationEnded(attempt: attempt, with: .succeeded)
    ///         case .failure(let error): self.baseOperationEnded(attempt: attempt, with: .retriableError(error))
    ///         }
    ///     }
    /// }
    /// ```
    public final func baseOperationEnded(attempt: Int, with result: AttemptResult) {
        endAttempt(Self.attemptEnd(for: result), attempt: attempt)
    }

    /// Ends attempt number `attempt` and waits for `retryHelpers` before the next one —
    /// unless that attempt is no longer the one running, in which case the call is ignored
    /// (and logged) and no helper is set up.
    ///
    /// The attempt-numbered form of ``baseOperationEnded(retryHelpers:countsTowardRetryLimit:)``,
    /// for attempts with a timeout whose callback may come after the attempt was abandoned
    /// (see ``baseOperationEnded(attempt:with:)``). Retry helpers are not `Sendable`, so they are
    /// passed here rather than as a case of ``AttemptResult``.
    ///
    /// - Parameters:
    ///   - attempt: The attempt's number, read from ``numberOfAttempts`` when it started.
    ///   - retryHelpers: What to wait for. An empty array waits until ``retryNow()``,
    ///     ``retry(in:)`` or ``retry(withHelpers:)`` is called, or the operation is cancelled.
    ///   - countsTowardRetryLimit: `true` for an ordinary retry, counted in
    ///     ``numberOfRetries`` and limited by ``retryPolicy``; `false` for a conditional
    ///     retry (waiting for the network, say), which neither counts nor is limited.
    ///
    /// ```swift
    /// override func startBaseOperation(isRetry: Bool) {
    ///     let attempt = numberOfAttempts
    ///     uploader.upload(file) { result in
    ///         switch result {
    ///         case .success:
    ///             self.baseOperationEnded(attempt: attempt, with: .succeeded)
    ///         case .failure(let error as URLError) where error.code == .notConnectedToInternet:
    ///             // Wait for the network without spending a retry.
    ///             self.baseOperationEnded(attempt: attempt,
    ///                                     retryHelpers: [NetworkIsBackRetryHelper(operation: self)],
    ///                                     countsTowardRetryLimit: false)
    ///         case .failure(let error):
    ///             self.baseOperationEnded(attempt: attempt, with: .retriableError(error))
    ///         }
    ///     }
    /// }
    /// ```
    public final func baseOperationEnded(attempt: Int, retryHelpers: [RetryHelper], countsTowardRetryLimit: Bool) {
        endAttempt(
            .retry(after: .helpers(retryHelpers), counted: countsTowardRetryLimit, enforcesLimit: countsTowardRetryLimit, error: nil),
            attempt: attempt
        )
    }

    static func attemptEnd(for result: AttemptResult) -> AttemptEnd {
        switch result {
        case .succeeded:
            return .succeeded
        case .failed(let error):
            return .failed(error)
        case .retriableError(let error):
            return .retry(after: .policyDelay, counted: true, enforcesLimit: true, error: error)
        case .retry(let delay, let counted):
            return .retry(after: .delay(delay), counted: counted, enforcesLimit: counted, error: nil)
        }
    }

    // MARK: Expiration

    /// No attempt starts at or after this date; `nil` (the default) for none.
    ///
    /// When the date passes while the operation waits for a retry, the wait ends and the
    /// operation finishes with ``Outcome/failed(_:)`` carrying a ``RetryingOperationError``
    /// whose code is ``RetryingOperationError/Code-swift.struct/expired``; an operation
    /// started after the date finishes that way without an attempt. An attempt already
    /// running at the date may finish: it is not interrupted, and if it asks for a retry, the
    /// operation fails as expired instead. Dates are read from ``retryScheduler``'s clock.
    ///
    /// ```swift
    /// let upload = UploadOperation(file: file)
    /// upload.expirationDate = Date().addingTimeInterval(24 * 3600)   // worthless tomorrow
    /// queue.addOperation(upload)
    /// ```
    public var expirationDate: Date? {
        get { machine.withLock { $0.expirationDate } }
        set { machine.withLock { $0.expirationDate = newValue } }
    }

    /// The error an operation fails with when an attempt would start at or after its
    /// expiration date; `nil` when it has none or it has not passed.
    func expirationError() -> RetryingOperationError? {
        // The common case, no expiration date, reads one optional and copies nothing else.
        expirationError(date: machine.withLock { $0.expirationDate })
    }

    /// ``expirationError()`` for `date`, the operation's expiration date that the caller read
    /// with the rest of the state (an attempt's start takes no extra lock round trip for it).
    func expirationError(date: Date?) -> RetryingOperationError? {
        guard let expiration = date else { return nil }
        let scheduler = machine.withLock { $0.retryScheduler }
        guard scheduler.now >= expiration else { return nil }
        log(.info, "expired at \(expiration): no attempt starts after its expiration date; the operation fails")
        return RetryingOperationError(code: .expired, message: "the operation expired at \(expiration) before it succeeded")
    }

    /// The callout of a wait's ``ExpirationHelper``: the expiration date passed while the
    /// operation waited for a retry.
    func processExpiration(duringWait generation: UInt64) {
        let isCurrentWait = machine.withLock { state -> Bool in
            guard case .waiting(generation, _) = state.phase, !state.isAwaitingAdmission else { return false }
            return true
        }
        guard isCurrentWait, let expired = expirationError() else { return }
        tearDownHelpers()
        finish(.failed(expired), wasExecuting: true)
    }

    // MARK: Attempt timeouts

    /// Arms the timeout of `attempt`, which is about to start. Called outside the lock (the
    /// scheduler is user code).
    func startTimeoutTimer(for attempt: Int, after timeout: TimeInterval, on scheduler: any RetryScheduler) {
        let timer = scheduler.schedule(after: timeout) { [weak self] in
            self?.attemptTimeoutFired(attempt)
        }
        let isStale = machine.withLock { state -> Bool in
            guard state.numberOfAttempts == attempt, state.phase.isRunningAttempt, !state.synchronousAttemptTimedOut else { return true }
            state.attemptTimer = timer
            return false
        }
        if isStale { timer.cancel() }
    }

    /// The timeout timer of `attempt` fired, on the scheduler's thread.
    private func attemptTimeoutFired(_ attempt: Int) {
        if isAsynchronous {
            submit(.attemptTimedOut(attempt: attempt))
            return
        }
        // A synchronous attempt is running on its own thread: tell it now, end it when it
        // returns.
        let timeout = machine.withLock { state -> TimeInterval?? in
            guard state.numberOfAttempts == attempt, state.phase.isRunningAttempt, !state.synchronousAttemptTimedOut else { return nil }
            state.synchronousAttemptTimedOut = true
            state.attemptTimer = nil
            return .some(state.retryPolicy.attemptTimeout)
        }
        guard let timeout else { return }
        log(.warning, "synchronous attempt \(attempt) ran longer than its timeout of \(timeout.map { "\($0)" } ?? "?") s; it will count as timed out")
        abandonBaseOperation(.timedOut)
    }

    /// The callout of an asynchronous attempt's timeout: abandons the attempt if it is still
    /// running, and processes its end as a timed-out counted retry.
    func processAttemptTimeout(_ attempt: Int) {
        // The timer taken is the one that fired: nothing to cancel.
        guard let abandoned = abandonRunningAttempt(attempt) else { return }
        let timeout = abandoned.timeout
        log(.warning, "attempt \(attempt) ran longer than its timeout of \(timeout.map { "\($0)" } ?? "?") s; abandoned")
        abandonBaseOperation(.timedOut)
        processAttemptEnd(Self.timedOutEnd(attempt: attempt, timeout: timeout))
    }

    // MARK: Stopping

    /// Stops the running attempt, if any, without spending the retry budget: the attempt ends
    /// as an uncounted retry due at once (error ``RetryingOperationError/Code-swift.struct/attemptStopped``),
    /// and ``abandonBaseOperation(_:)`` is called with ``AbandonReason/stopped``. Returns whether
    /// an attempt was running. An asynchronous attempt ends at once (its late
    /// `baseOperationEnded` is ignored like a timed-out one's); a synchronous one holds its
    /// thread, so the hook is called now and the attempt ends when it returns — as a success
    /// if it reports one, otherwise as the uncounted retry.
    @discardableResult
    package func stopAttempt() -> Bool {
        if isAsynchronous {
            let attempt = machine.withLock { state -> Int? in
                state.phase.isRunningAttempt ? state.numberOfAttempts : nil
            }
            guard let attempt else { return false }
            // In the background: the caller (the queue) must not run the operation's callouts.
            submitInBackground(.attemptStopped(attempt: attempt))
            return true
        }
        let isRunning = machine.withLock { state -> Bool in
            guard state.phase.isRunningAttempt, !state.synchronousAttemptStopped else { return false }
            state.synchronousAttemptStopped = true
            return true
        }
        guard isRunning else { return false }
        log(.info, "synchronous attempt stopped from outside; unless it succeeds, it ends as an uncounted retry")
        abandonBaseOperation(.stopped)
        return true
    }

    /// The callout of ``stopAttempt()`` for an asynchronous attempt.
    func processAttemptStop(_ attempt: Int) {
        guard let abandoned = abandonRunningAttempt(attempt) else { return }
        abandoned.timer?.cancel()
        log(.info, "attempt \(attempt) stopped from outside; it ends as an uncounted retry")
        abandonBaseOperation(.stopped)
        processAttemptEnd(Self.stoppedEnd(attempt: attempt))
    }

    /// In a callout: marks asynchronous attempt `attempt` ended, owing its late end, if it is
    /// still the one running; returns its timeout timer (taken) and the policy's timeout.
    private func abandonRunningAttempt(_ attempt: Int) -> (timer: (any ScheduledRetry)?, timeout: TimeInterval?)? {
        machine.withLock { state in
            guard state.numberOfAttempts == attempt, state.phase.isRunningAttempt else { return nil }
            state.phase = .running(hasEnded: true)
            state.abandonedAttemptsOwingEnd += 1
            defer { state.attemptTimer = nil }
            return (state.attemptTimer, state.retryPolicy.attemptTimeout)
        }
    }

    /// The end of an attempt stopped from outside: an uncounted retry, due at once.
    static func stoppedEnd(attempt: Int) -> AttemptEnd {
        let error = RetryingOperationError(
            code: .attemptStopped,
            message: "attempt \(attempt) was stopped before it ended (a bounded run ended); it runs again, as an uncounted retry"
        )
        return .retry(after: .delay(0), counted: false, enforcesLimit: false, error: error)
    }

    /// The end of an attempt that passed its timeout: a counted retry the policy decides on.
    static func timedOutEnd(attempt: Int, timeout: TimeInterval?) -> AttemptEnd {
        let error = RetryingOperationError(
            code: .attemptTimedOut,
            message: "attempt \(attempt) did not end within its timeout of \(timeout.map { "\($0)" } ?? "?") s"
        )
        return .retry(after: .policyDelay, counted: true, enforcesLimit: true, error: error)
    }
}

/// Ends a wait at the operation's expiration date. Added by the operation to every wait when
/// it has an expiration date; not public.
final class ExpirationHelper: RetryHelper, @unchecked Sendable {
    // @unchecked: `operation` is written only in `init`; `scheduled` is a `Locked`.

    private let date: Date
    private weak var operation: RetryingOperation?
    private let scheduled = Locked<(any ScheduledRetry)?>(nil)

    init(date: Date, operation: RetryingOperation) {
        self.date = date
        self.operation = operation
    }

    func setup() {
        guard let operation else { return }
        let wait = operation.currentWaitGeneration
        let scheduler = operation.retryScheduler
        let timer = scheduler.schedule(after: max(0, date.timeIntervalSince(scheduler.now))) { [weak operation] in
            operation?.submit(.expirationReached(generation: wait))
        }
        scheduled.withLock { $0 = timer }
    }

    func teardown() {
        scheduled.withLock { timer in
            defer { timer = nil }
            return timer
        }?.cancel()
    }
}

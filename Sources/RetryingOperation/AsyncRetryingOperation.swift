import Foundation

/// A ``RetryingOperation`` whose attempt is an `async throws` closure, retried by a
/// ``RetryPolicy``.
///
/// Each attempt runs in a new `Task`. Returning ends the operation successfully; throwing
/// lets the policy decide (unless `isRetriable` says the error is final); throwing a
/// ``RetryRequest`` asks for a specific wait, counted or not. Cancelling the operation
/// cancels the running task, and a cancelled operation finishes as
/// ``RetryingOperation/Outcome/cancelled``. With a ``RetryPolicy/attemptTimeout``, an attempt
/// still running at its timeout has its task cancelled and counts as a timed-out retry; what
/// that task returns or throws afterwards is ignored.
///
/// ```swift
/// let sync = AsyncRetryingOperation(retryPolicy: .interactive) { attempt in
///     try await api.sync(since: lastSync)
/// }
/// queue.addOperation(sync)
/// switch await sync.finalOutcome {
/// case .succeeded: print("synced after \(sync.numberOfAttempts) attempts")
/// case .failed(let error): print("sync failed: \(error)")
/// case .cancelled: break
/// }
/// ```
public final class AsyncRetryingOperation: RetryingOperation, @unchecked Sendable {
    // @unchecked: `runningTask` is a `Locked`; the other stored properties are constants.

    /// What the body learns about the attempt it runs.
    public struct Attempt: Sendable {
        /// 1 for the first attempt, 2 for the second, … (uncounted retries included).
        public let number: Int
        /// The counted retries so far (see ``RetryingOperation/numberOfRetries``).
        public let numberOfRetries: Int
        /// `false` for the first attempt only.
        public var isRetry: Bool { number > 1 }
        /// The operation's progress (``RetryingOperation/progress``): a retry continues
        /// from where the last attempt left it.
        ///
        /// ```swift
        /// let backup = AsyncRetryingOperation { attempt in
        ///     attempt.progress.totalUnitCount = Int64(photos.count)
        ///     // A retry skips the photos the last attempt uploaded.
        ///     for photo in photos.dropFirst(Int(attempt.progress.completedUnitCount)) {
        ///         try await api.upload(photo)
        ///         attempt.progress.completedUnitCount += 1
        ///     }
        /// }
        /// ```
        public var progress: Progress { operation.progress }
        /// Reports how much of the work is done, as
        /// ``RetryingOperation/reportProgress(completed:of:)`` does: no `Progress` is made
        /// until someone asks for one.
        ///
        /// ```swift
        /// let backup = AsyncRetryingOperation { attempt in
        ///     for (index, photo) in photos.enumerated() {
        ///         try await api.upload(photo)
        ///         attempt.reportProgress(completed: Int64(index + 1), of: Int64(photos.count))
        ///     }
        /// }
        /// ```
        public func reportProgress(completed: Int64, of total: Int64) {
            operation.reportProgress(completed: completed, of: total)
        }
        /// (Asked for its progress only when the body does: an operation whose progress
        /// nobody reads makes none.)
        let operation: RetryingOperation
    }

    /// One attempt.
    public typealias Body = @Sendable (Attempt) async throws -> Void

    private let body: Body
    private let isRetriable: @Sendable (any Error) -> Bool
    private let taskPriority: TaskPriority?
    private let runningTask = Locked<Task<Void, Never>?>(nil)

    /// Creates an operation that runs `body` until it returns, the policy gives up, or the
    /// operation is cancelled.
    ///
    /// - Parameters:
    ///   - retryPolicy: When to retry thrown errors. Defaults to ``RetryPolicy/default``.
    ///   - priority: The priority of each attempt's task. Defaults to `nil` (inherited).
    ///   - isRetriable: Whether a thrown error may be retried; `false` fails the operation
    ///     at once with that error. Defaults to retrying every error.
    ///   - body: One attempt.
    public init(
        retryPolicy: RetryPolicy = .default,
        priority: TaskPriority? = nil,
        isRetriable: @escaping @Sendable (any Error) -> Bool = { _ in true },
        body: @escaping Body
    ) {
        self.body = body
        self.isRetriable = isRetriable
        self.taskPriority = priority
        super.init()
        self.retryPolicy = retryPolicy
    }

    public override var isAsynchronous: Bool {
        true
    }

    public override func startBaseOperation(isRetry: Bool) {
        let attempt = Attempt(number: numberOfAttempts, numberOfRetries: numberOfRetries ?? 0, operation: self)
        // Ends are reported by attempt number: an attempt abandoned at its timeout whose task
        // ends late does not end the next attempt.
        let task = Task(priority: taskPriority) { [body] in
            do {
                try await body(attempt)
                self.endAttempt(.succeeded, attempt: attempt.number)
            } catch {
                self.attemptThrew(error, attempt: attempt.number)
            }
        }
        runningTask.withLock { $0 = task }
    }

    public override func cancelBaseOperation() {
        runningTask.withLock { $0 }?.cancel()
    }

    private func attemptThrew(_ error: any Error, attempt: Int) {
        if let request = error as? RetryRequest {
            if let delay = request.delay {
                endAttempt(.retry(after: .delay(delay), counted: request.countsTowardRetryLimit,
                                  enforcesLimit: request.countsTowardRetryLimit, error: nil), attempt: attempt)
            } else {
                endAttempt(.retry(after: .policyDelay, counted: request.countsTowardRetryLimit,
                                  enforcesLimit: request.countsTowardRetryLimit, error: nil), attempt: attempt)
            }
        } else if isCancelled || !isRetriable(error) {
            endAttempt(.failed(error), attempt: attempt)
        } else {
            endAttempt(.retry(after: .policyDelay, counted: true, enforcesLimit: true, error: error), attempt: attempt)
        }
    }
}

/// Thrown from an ``AsyncRetryingOperation`` body to ask for a retry on your terms.
///
/// ```swift
/// let upload = AsyncRetryingOperation { _ in
///     guard network.isReachable else {
///         // Waiting for the network does not spend the retry budget.
///         throw RetryRequest.after(30, countsTowardRetryLimit: false)
///     }
///     try await api.upload(file)
/// }
/// ```
public struct RetryRequest: Error, Sendable, Hashable {
    /// Seconds to wait; `nil` uses the operation's retry policy.
    public var delay: TimeInterval?
    /// Whether the retry spends the retry budget (and is refused once it is spent).
    public var countsTowardRetryLimit: Bool

    /// Retry after `delay` seconds.
    public static func after(_ delay: TimeInterval, countsTowardRetryLimit: Bool = true) -> RetryRequest {
        RetryRequest(delay: delay, countsTowardRetryLimit: countsTowardRetryLimit)
    }

    /// Retry after the retry policy's delay.
    public static func afterPolicyDelay(countsTowardRetryLimit: Bool = true) -> RetryRequest {
        RetryRequest(delay: nil, countsTowardRetryLimit: countsTowardRetryLimit)
    }
}

import Foundation

/// An operation you don't own that can be retried by a ``RetryableOperationWrapper``.
///
/// A conforming class says after each run whether and how to retry, and builds a fresh copy
/// for the retry — an `Operation` runs only once. ``operationForRetrying()`` returns `Self`,
/// which a non-final class can build only with a `required` initializer, and a framework's
/// operation classes are `open`, their initializers not `required`: conform a final subclass,
/// whose `Self` is itself, and create it instead of the framework's class. (A `final` class
/// can conform in an extension and return `Self(…)`.)
///
/// ```swift
/// final class RetryableDownload: DownloadOperation, RetryableOperation, @unchecked Sendable {
///     // @unchecked: it adds no state to DownloadOperation.
///     func retryHelpers<T>(from wrapper: RetryableOperationWrapper<T>) -> [RetryHelper]? {
///         guard let error, error.isTransient else { return nil }   // nil: done, no retry
///         return [RetryingOperation.TimerRetryHelper(retryDelay: 2, retryingOperation: wrapper)]
///     }
///
///     func operationForRetrying() throws -> RetryableDownload {
///         RetryableDownload(request: request)   // a fresh copy of the same work
///     }
/// }
/// ```
public protocol RetryableOperation: Operation {
    /// How to wait before retrying, once the operation has finished: `nil` means do not
    /// retry, an empty array waits for a manual ``RetryingOperation/retryNow()``.
    func retryHelpers<T>(from wrapper: RetryableOperationWrapper<T>) -> [RetryHelper]?

    /// A new operation, not yet started, that does the same work again. Never `self`.
    /// A thrown error ends the wrapper with ``RetryingOperation/Outcome/failed(_:)``
    /// carrying that error.
    func operationForRetrying() throws -> Self
}

/// Makes an operation you don't own retryable: runs it, asks it whether to retry, and runs
/// a fresh copy of it after the wait.
///
/// The wrapper is itself a ``RetryingOperation``: add it to a queue, make other operations
/// depend on it, cancel it (the cancel reaches the operation running at the time), read its
/// ``RetryingOperation/outcome``.
///
/// ```swift
/// let download = RetryableDownload(request: request)   // a final subclass (see RetryableOperation)
/// let wrapper = RetryableOperationWrapper(maximumNumberOfRetries: 3, baseOperation: download)
/// queue.addOperation(wrapper)
/// ```
///
/// The base operation runs on `baseOperationQueue` when given, otherwise it is started
/// directly from the wrapper. When the operation asks for a retry but
/// ``maximumNumberOfRetries`` retries were already made, the wrapper fails with
/// ``RetryingOperationError/Code-swift.struct/retryLimitReached``, the shape every
/// ``RetryingOperation`` gives up in; its ``RetryingOperationError/underlyingError`` is `nil`
/// (an `Operation` reports no error: read ``currentBaseOperation`` for the last run).
///
/// With a ``RetryPolicy/attemptTimeout`` in the wrapper's ``RetryingOperation/retryPolicy``,
/// a base operation still running at the timeout is cancelled, and a fresh copy runs after the
/// policy's backoff delay; the late end of the abandoned one is ignored. The initializer sets
/// the policy's ``RetryPolicy/retryLimit`` from ``maximumNumberOfRetries``, so timed-out
/// attempts count against the same limit.
///
/// ```swift
/// let wrapper = RetryableOperationWrapper(baseOperation: download, retryLimit: .maximum(3))
/// wrapper.retryPolicy.attemptTimeout = 60
/// ```
public final class RetryableOperationWrapper<T: RetryableOperation>: RetryingOperation, @unchecked Sendable {
    // @unchecked: `current` is a `Locked`; the other stored properties are constants.

    /// The operation given at creation.
    public let originalBaseOperation: T

    /// The operation of the current (or last) attempt: ``originalBaseOperation``, then the
    /// result of `operationForRetrying()` for each retry.
    public private(set) var currentBaseOperation: T {
        get { current.withLock { $0 } }
        set { current.withLock { $0 = newValue } }
    }

    /// Where base operations run; `nil` starts them directly. Do not pass the queue the
    /// wrapper itself runs on if it may be bounded to fewer slots than it needs.
    public let baseOperationQueue: OperationQueue?

    /// The most retries allowed; a negative value (the default, `-1`) means no limit.
    /// Prefer ``init(baseOperation:retryLimit:baseOperationQueue:)`` in new code.
    public let maximumNumberOfRetries: Int

    private let current: Locked<T>

    /// Creates a wrapper.
    ///
    /// - Parameters:
    ///   - maximumNumberOfRetries: The most retries; negative (the default) for no limit.
    ///   - baseOperation: The operation to run first; not started yet.
    ///   - baseOperationQueue: Where to run base operations; `nil` (the default) starts them
    ///     directly.
    public init(maximumNumberOfRetries: Int = -1, baseOperation: T, baseOperationQueue: OperationQueue? = nil) {
        self.maximumNumberOfRetries = maximumNumberOfRetries
        self.originalBaseOperation = baseOperation
        self.current = Locked(baseOperation)
        self.baseOperationQueue = baseOperationQueue
        super.init()
        // A timed-out attempt is a counted retry decided by the policy: the same limit.
        retryPolicy.retryLimit = maximumNumberOfRetries < 0 ? .unlimited : .maximum(maximumNumberOfRetries)
    }

    /// Creates a wrapper whose limit is a ``RetryPolicy/RetryLimit``, without the `-1`
    /// sentinel.
    ///
    /// ```swift
    /// let wrapper = RetryableOperationWrapper(baseOperation: download, retryLimit: .maximum(3))
    /// ```
    public convenience init(baseOperation: T, retryLimit: RetryPolicy.RetryLimit, baseOperationQueue: OperationQueue? = nil) {
        let maximum: Int
        switch retryLimit {
        case .unlimited: maximum = -1
        case .maximum(let limit):
            maximum = max(0, limit)   // a negative maximum allows no retry, as in a RetryPolicy
        }
        self.init(maximumNumberOfRetries: maximum, baseOperation: baseOperation, baseOperationQueue: baseOperationQueue)
    }

    public override var isAsynchronous: Bool {
        true
    }

    public override func startBaseOperation(isRetry: Bool) {
        let operation: T
        if isRetry {
            do {
                operation = try currentBaseOperation.operationForRetrying()
            } catch {
                log(.info, "operationForRetrying() threw \(error); the wrapper fails with it")
                baseOperationEnded(failingWith: error)
                return
            }
            currentBaseOperation = operation
        } else {
            operation = currentBaseOperation
        }

        let attempt = numberOfAttempts
        let previousCompletion = operation.completionBlock
        operation.completionBlock = { [unowned operation] in
            // Drop the block (and the wrapper it holds) once it has run.
            operation.completionBlock = nil
            previousCompletion?()
            self.baseOperationFinished(operation, attempt: attempt)
        }
        if let baseOperationQueue {
            baseOperationQueue.addOperation(operation)
        } else {
            operation.start()
        }
    }

    public override func cancelBaseOperation() {
        currentBaseOperation.cancel()
    }

    /// The base operation of `attempt` finished. Its end is reported by attempt number: a base
    /// operation abandoned at its timeout that finishes late does not end the next attempt.
    private func baseOperationFinished(_ operation: T, attempt: Int) {
        if isCancelled {
            // The cancel reached the base operation; whatever it says, the wrapper is cancelled.
            endAttempt(.failed(CancellationError()), attempt: attempt)
            return
        }
        guard let helpers = operation.retryHelpers(from: self) else {
            endAttempt(.succeeded, attempt: attempt)
            return
        }
        let retries = numberOfRetries ?? 0
        if maximumNumberOfRetries >= 0 && retries >= maximumNumberOfRetries {
            endAttempt(.failed(RetryingOperationError(
                code: .retryLimitReached,
                message: "\(type(of: operation)) asked for a retry after \(retries) retries; maximumNumberOfRetries is \(maximumNumberOfRetries)"
            )), attempt: attempt)
            return
        }
        endAttempt(.retry(after: .helpers(helpers), counted: true, enforcesLimit: false, error: nil), attempt: attempt)
    }
}

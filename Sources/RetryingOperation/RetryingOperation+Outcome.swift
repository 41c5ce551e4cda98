import Foundation

extension RetryingOperation {
    /// How a ``RetryingOperation`` ended. Read it from ``RetryingOperation/outcome`` or
    /// await ``RetryingOperation/finalOutcome``.
    ///
    /// ```swift
    /// switch await operation.finalOutcome {
    /// case .succeeded: showDone()
    /// case .failed(let error): show(error)
    /// case .cancelled: break
    /// }
    /// ```
    public enum Outcome: Sendable, CustomStringConvertible {
        /// The last attempt succeeded.
        case succeeded
        /// The operation gave up. Carries the error of an attempt that must not be retried
        /// (``RetryingOperation/baseOperationEnded(failingWith:)``), or a
        /// ``RetryingOperationError`` when the library decided to stop.
        ///
        /// Giving up after the retry limit has one shape for every kind of operation — a
        /// subclass, an ``AsyncRetryingOperation``, a ``RetryableOperationWrapper``: a
        /// ``RetryingOperationError`` whose code is
        /// ``RetryingOperationError/Code-swift.struct/retryLimitReached`` and whose
        /// ``RetryingOperationError/underlyingError`` is the last attempt's error (`nil` when
        /// the attempt reported none, as a wrapped `Operation` cannot).
        ///
        /// ```swift
        /// if case .failed(let error as RetryingOperationError) = await operation.finalOutcome,
        ///    error.code == .retryLimitReached {
        ///     print("gave up after \(operation.numberOfAttempts) attempts; last error: \(String(describing: error.underlyingError))")
        /// }
        /// ```
        case failed(any Error)
        /// The operation was cancelled before it could succeed.
        case cancelled

        /// `true` for ``succeeded``.
        public var isSuccess: Bool {
            if case .succeeded = self { return true }
            return false
        }

        /// The error of ``failed(_:)``, `nil` otherwise.
        public var error: (any Error)? {
            if case .failed(let error) = self { return error }
            return nil
        }

        /// The outcome's name in a log message's metadata: `succeeded`, `failed` or `cancelled`.
        var logName: String {
            switch self {
            case .succeeded: return "succeeded"
            case .failed: return "failed"
            case .cancelled: return "cancelled"
            }
        }

        public var description: String {
            switch self {
            case .succeeded: return "succeeded"
            case .failed(let error): return "failed (\(error))"
            case .cancelled: return "cancelled"
            }
        }
    }
}

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
        /// The operation gave up: an attempt failed with an error that must not be retried,
        /// or the retry policy allowed no more retries. Carries the attempt's error, or a
        /// ``RetryingOperationError`` when the library itself decided to stop.
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

        public var description: String {
            switch self {
            case .succeeded: return "succeeded"
            case .failed(let error): return "failed (\(error))"
            case .cancelled: return "cancelled"
            }
        }
    }
}

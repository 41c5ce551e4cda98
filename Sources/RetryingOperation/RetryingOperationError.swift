import Foundation

/// An error the library reports in ``RetryingOperation/Outcome/failed(_:)`` when it is
/// the library, not an attempt, that decided the operation fails.
///
/// Giving up after the retry limit is reported this way by every kind of operation, with
/// the last attempt's error as ``underlyingError``:
///
/// ```swift
/// if let error = operation.outcome?.error as? RetryingOperationError,
///    error.code == .retryLimitReached {
///     print("gave up after \(operation.numberOfAttempts) attempts: \(String(describing: error.underlyingError))")
/// }
/// ```
public struct RetryingOperationError: Error, CustomStringConvertible, Sendable {
    /// What went wrong. New codes may appear in minor releases: match the ones you handle
    /// and keep a default case.
    public struct Code: Hashable, Sendable, CustomStringConvertible {
        /// A stable, human-readable name of the code.
        public let rawValue: String

        /// A counted retry was requested but the retry policy (or the wrapper's
        /// `maximumNumberOfRetries`) allows no more. ``RetryingOperationError/underlyingError``
        /// is the error the last attempt failed with, when it reported one.
        public static let retryLimitReached = Code(rawValue: "retryLimitReached")
        /// A synchronous operation's `startBaseOperation(isRetry:)` returned without
        /// calling a `baseOperationEnded` method.
        public static let synchronousAttemptDidNotEnd = Code(rawValue: "synchronousAttemptDidNotEnd")
        /// An attempt ran longer than ``RetryPolicy/attemptTimeout`` and was abandoned. It is
        /// the error of a counted retry, so it reaches an outcome as the
        /// ``RetryingOperationError/underlyingError`` of
        /// ``Code-swift.struct/retryLimitReached`` when the policy allows no more retries.
        public static let attemptTimedOut = Code(rawValue: "attemptTimedOut")
        /// The operation's ``RetryingOperation/expirationDate`` passed before it succeeded:
        /// no attempt starts after it.
        public static let expired = Code(rawValue: "expired")
        /// The attempt was stopped from outside — a persistent queue's bounded run ended — and
        /// ends as an uncounted retry: the error of that retry, not of an outcome.
        public static let attemptStopped = Code(rawValue: "attemptStopped")

        public var description: String { rawValue }
    }

    /// What went wrong.
    public let code: Code
    /// A sentence for logs.
    public let message: String
    /// The error that caused this one, if any: for
    /// ``Code-swift.struct/retryLimitReached``, the last attempt's error.
    public let underlyingError: (any Error)?

    /// Creates an error; the library creates them, tests may too.
    public init(code: Code, message: String, underlyingError: (any Error)? = nil) {
        self.code = code
        self.message = message
        self.underlyingError = underlyingError
    }

    public var description: String {
        var text = "RetryingOperationError.\(code): \(message)"
        if let underlyingError { text += " (underlying error: \(underlyingError))" }
        return text
    }
}

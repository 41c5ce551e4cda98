import Foundation

/// Something a ``RetryingOperation`` waits on before its next attempt.
///
/// When an attempt ends with retry helpers (see
/// ``RetryingOperation/baseOperationEnded(retryHelpers:)``), the operation calls
/// ``setup()`` on each of them and waits. A helper triggers the retry by calling
/// ``RetryingOperation/retryNow()`` (or replaces the wait with
/// ``RetryingOperation/retry(withHelpers:)``). Before the next attempt starts, and when
/// the operation is cancelled while waiting, the operation calls ``teardown()`` on every
/// helper it set up. Each helper is set up once and torn down once.
///
/// `setup()` and `teardown()` are called one at a time, never concurrently with
/// `startBaseOperation(isRetry:)` or `cancelBaseOperation()` of the same operation, and
/// never while the library holds a lock — a helper may call back into the operation.
///
/// ```swift
/// /// Retries as soon as the app reports that the network is back.
/// final class NetworkIsBackRetryHelper: RetryHelper {
///     private let operation: RetryingOperation
///     private var observer: NSObjectProtocol?
///
///     init(operation: RetryingOperation) { self.operation = operation }
///
///     func setup() {
///         observer = NotificationCenter.default.addObserver(
///             forName: .networkIsBack, object: nil, queue: nil
///         ) { [operation] _ in operation.retryNow() }
///     }
///
///     func teardown() {
///         observer.map(NotificationCenter.default.removeObserver)
///         observer = nil
///     }
/// }
/// ```
public protocol RetryHelper {
    /// Starts waiting for the condition that allows the next attempt.
    mutating func setup()
    /// Stops waiting; the operation is about to retry, or was cancelled.
    mutating func teardown()
}

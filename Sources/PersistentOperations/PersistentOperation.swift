import Foundation

/// An `Operation` that a ``PersistentOperationQueue`` saves to disk and rebuilds after the
/// app crashes or is killed.
///
/// The queue stores the ``payload`` and the type's ``persistenceIdentifier``; on the next
/// launch ``PersistentOperationQueue/restore()`` looks the identifier up among the
/// registered types and calls ``init(payload:)``. Nothing else of the instance is stored:
/// put everything an attempt needs in the payload, and configure the instance (its
/// `retryPolicy`, say) in ``init(payload:)``. The queue also rebuilds an operation added in
/// the running process this way when it had to wait and your app let go of it (see
/// ``PersistentOperationQueue/addOperation(_:)``).
///
/// Subclass `RetryingOperation` to get retries whose count and next-attempt date survive a
/// crash; any other `Operation` subclass works too and runs once per launch until it
/// finishes.
///
/// ```swift
/// struct Upload: Codable, Sendable {
///     var file: URL
///     var attempt: Int
/// }
///
/// final class UploadOperation: RetryingOperation, PersistentOperation, @unchecked Sendable {
///     static let persistenceIdentifier = "com.example.upload"   // never change it
///     let payload: Upload
///
///     init(payload: Upload) {
///         self.payload = payload
///         super.init()
///     }
///
///     override var isAsynchronous: Bool { true }
///     override func startBaseOperation(isRetry: Bool) {
///         upload(payload.file) { error in
///             if let error { self.baseOperationEnded(withRetriableError: error) }
///             else { self.baseOperationEnded() }
///         }
///     }
/// }
/// ```
///
/// Execution is at least once: an attempt that was running when the process died runs again
/// on the next launch, so make the work idempotent (see <doc:ResumingAfterACrash>).
///
/// An operation that is not a `RetryingOperation` tells the queue it finished through its
/// `completionBlock`, which the queue chains to the one set before `addOperation`: set a
/// `completionBlock` before adding the operation, never after. Dependencies on other stored
/// operations (`addDependency(_:)` before adding) are saved and honoured across launches: see
/// <doc:OperationGraphs>.
public protocol PersistentOperation: Operation {
    /// The value saved for the operation; everything needed to rebuild it.
    ///
    /// It must read back equal to what was encoded: ``PersistentOperationQueue/addOperation(_:)``
    /// decodes what it encoded and throws ``PersistenceError/Code/payloadDoesNotRoundTrip``
    /// otherwise. "Equal" is the payload's own `==` when it is `Equatable` (the fast path),
    /// else — or when `==` says they differ — the same JSON form of both values.
    associatedtype Payload: Codable & Sendable

    /// The stable name stored on disk for this type, such as `"com.example.upload"`.
    ///
    /// Never derive it from the Swift type name and never change it once records exist: a
    /// renamed type would no longer find its records.
    static var persistenceIdentifier: String { get }

    /// The value saved for this operation.
    var payload: Payload { get }

    /// Rebuilds an operation from its saved payload.
    init(payload: Payload)
}

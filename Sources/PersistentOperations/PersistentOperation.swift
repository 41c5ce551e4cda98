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

    /// The version of ``Payload``'s stored form, saved with each record. Default: 1.
    ///
    /// Raise it when a change to ``Payload`` makes the payloads stored by earlier versions of
    /// your app no longer decode — a field added without a default, a field whose type
    /// changed — and implement ``migratePayload(_:)`` to read them. Changes that still decode
    /// (an optional field added, a field removed) need no new version. See "Changing a
    /// payload type" in <doc:ResumingAfterACrash>.
    static var payloadVersion: Int { get }

    /// Reads a payload stored with an earlier ``payloadVersion``, when the queue rebuilds an
    /// operation from it. The default decodes it as the current ``Payload``.
    ///
    /// Decode the stored bytes as the type you stored them with (keep it, renamed, for this),
    /// and convert:
    ///
    /// ```swift
    /// struct UploadV1: Codable { var file: URL }   // what version 1 stored
    /// struct AlbumUpload: Codable, Sendable {       // version 2 added `album`
    ///     var file: URL
    ///     var album: Int
    /// }
    ///
    /// final class MigratingUpload: RetryingOperation, PersistentOperation, @unchecked Sendable {
    ///     static let persistenceIdentifier = "com.example.album-upload"
    ///     static var payloadVersion: Int { 2 }
    ///     let payload: AlbumUpload
    ///
    ///     init(payload: AlbumUpload) {
    ///         self.payload = payload
    ///         super.init()
    ///     }
    ///
    ///     static func migratePayload(_ stored: StoredPayload) throws -> AlbumUpload {
    ///         let old = try stored.decode(UploadV1.self)
    ///         return AlbumUpload(file: old.file, album: 0)
    ///     }
    ///
    ///     override var isAsynchronous: Bool { true }
    /// }
    /// ```
    ///
    /// A payload this throws for is quarantined as one that does not decode, as any payload
    /// that does not decode is. A record stored with a *later* version than ``payloadVersion``
    /// (by a newer build of the app) is not read at all: ``PersistentOperationQueue/restore()``
    /// leaves it on disk and lists it in ``RestoreReport/newerFormatVersions``.
    static func migratePayload(_ stored: StoredPayload) throws -> Payload
}

extension PersistentOperation {
    /// Version 1: a type that never changed its payload in a way that breaks decoding.
    public static var payloadVersion: Int { 1 }

    /// Decodes the stored payload as the current ``Payload``.
    public static func migratePayload(_ stored: StoredPayload) throws -> Payload {
        try stored.decode(Payload.self)
    }
}

/// A payload as an earlier version of the app stored it, for
/// ``PersistentOperation/migratePayload(_:)``.
///
/// ```swift
/// let old = try stored.decode(UploadV1.self)   // the type version 1 stored
/// ```
public struct StoredPayload: Sendable {
    /// The ``PersistentOperation/payloadVersion`` it was stored with.
    public let version: Int
    /// The stored bytes (a binary property list).
    let data: Data

    init(version: Int, data: Data) {
        self.version = version
        self.data = data
    }

    /// Decodes the stored bytes as `type`, as ``PersistentOperationQueue`` decodes a payload
    /// (the bytes are verified before any decoder sees them).
    ///
    /// - Throws: ``PersistenceError/Code/corruptRecord`` for bytes that are not a valid
    ///   property list, and the decoding errors of `type`.
    public func decode<T: Decodable>(_ type: T.Type) throws -> T {
        try RecordFormat.decodePayload(T.self, from: data)
    }
}

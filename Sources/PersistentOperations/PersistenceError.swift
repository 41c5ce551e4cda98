import Foundation

/// An error thrown by the persistence layer: a record that cannot be stored, a file that
/// cannot be written or read, or a store that another process holds.
///
/// Switch on ``code`` to react to a kind of failure; log ``description`` for people. The
/// ``fileURL`` and ``underlyingError`` are attached when they are known.
///
/// ```swift
/// do {
///     try queue.addOperation(UploadOperation(payload: upload))
/// } catch let error as PersistenceError where error.code == .payloadDoesNotRoundTrip {
///     print("Cannot store this upload: \(error)")
/// }
/// ```
public struct PersistenceError: Error, CustomStringConvertible, Sendable {
    /// The kind of a ``PersistenceError``.
    ///
    /// New codes may be added in minor releases: always keep a `default` case when you
    /// switch over codes.
    public struct Code: Hashable, Sendable, CustomStringConvertible {
        /// A short stable name of the code, such as `"locked"`.
        public let name: String

        private init(_ name: String) {
            self.name = name
        }

        public var description: String { name }

        /// Another process, or another open store in this process, holds the store directory.
        public static let locked = Code("locked")
        /// An encoded record is bigger than the configured maximum record size.
        public static let recordTooLarge = Code("recordTooLarge")
        /// The payload's `encode(to:)` threw.
        public static let payloadNotEncodable = Code("payloadNotEncodable")
        /// The payload would not read back equal to what was stored.
        public static let payloadDoesNotRoundTrip = Code("payloadDoesNotRoundTrip")
        /// Writing, syncing, renaming or removing a file failed.
        public static let writeFailed = Code("writeFailed")
        /// Reading a file or listing a directory failed.
        public static let readFailed = Code("readFailed")
        /// A record file failed verification: size, header, checksum or structure.
        public static let corruptRecord = Code("corruptRecord")
        /// A stored payload does not decode as its type's payload (and no
        /// ``PersistentOperation/migratePayload(_:)`` reads its payload version): its record is
        /// intact, and kept in quarantine until a build that reads it re-queues it
        /// (``PersistentOperationQueue/requeueQuarantinedOperation(named:)``).
        public static let payloadNotDecodable = Code("payloadNotDecodable")
        /// A record file was written by a format version this library does not read.
        public static let unsupportedFormatVersion = Code("unsupportedFormatVersion")
        /// A record names an operation type that was never registered.
        public static let unknownType = Code("unknownType")
        /// A store directory is missing, is not a directory, or cannot be created.
        public static let directoryUnavailable = Code("directoryUnavailable")
        /// A record with the requested identifier does not exist.
        public static let recordNotFound = Code("recordNotFound")
        /// The store was opened read-only, or has been closed.
        public static let storeNotWritable = Code("storeNotWritable")
        /// An operation's dependencies cannot be stored: it depends on itself, on an operation
        /// this queue does not store, or (in ``PersistentOperationQueue/addOperations(_:)``) the
        /// batch's dependencies form a cycle.
        public static let invalidDependency = Code("invalidDependency")
        /// An operation depends on one that failed for good or was cancelled, so it will never
        /// run: the error of an add that names such a prerequisite, and the outcome of a
        /// dependent `RetryingOperation` whose prerequisite failed.
        public static let prerequisiteFailed = Code("prerequisiteFailed")
        /// An operation was added with a run condition no provider is registered for; call
        /// ``PersistentOperationQueue/register(_:as:)`` first.
        public static let unknownCondition = Code("unknownCondition")
        /// The options cannot be used as given: a ``RepeatSchedule`` whose interval is not
        /// positive or whose flex is outside `0...interval`, a periodic operation or a unique
        /// key given to `addOperations`, a page limit below 1, or a
        /// ``PersistentOperationQueue/Configuration`` a queue cannot open with.
        public static let invalidOptions = Code("invalidOptions")
        /// The operation was already added (to this queue, or twice to one batch), or has
        /// started or finished: an `Operation` runs once. Nothing was stored.
        public static let operationAlreadyAdded = Code("operationAlreadyAdded")
    }

    /// The kind of failure.
    public let code: Code
    /// What happened and what the user can do about it.
    public let message: String
    /// The file or directory involved, when there is one.
    public let fileURL: URL?
    /// The error reported by the system or by the payload's coder, when there is one.
    public let underlyingError: (any Error)?

    /// Creates an error.
    public init(_ code: Code, _ message: String, fileURL: URL? = nil, underlyingError: (any Error)? = nil) {
        self.code = code
        self.message = message
        self.fileURL = fileURL
        self.underlyingError = underlyingError
    }

    public var description: String {
        var text = "\(message) [\(code)]"
        if let fileURL {
            text += " File: \(fileURL.path)."
        }
        if let underlyingError {
            text += " Underlying error: \(underlyingError)."
        }
        return text
    }
}

import Foundation

/// The identifier a ``PersistentOperationQueue`` gives an operation when it stores it.
///
/// It names the operation's record file, stays the same across launches and while the
/// record sits in the failed area, and is what the queue's queries and cancel methods take.
///
/// ```swift
/// let result = try queue.addOperation(operation, options: EnqueueOptions(tags: ["uploads"]))
/// print("stored as \(result.id)")
/// try queue.cancelOperation(withID: result.id)
/// ```
public struct PersistentOperationID: Hashable, Sendable, Codable, CustomStringConvertible {
    /// The identifier as stored: an uppercase UUID string.
    public let rawValue: String

    /// Creates an identifier from its stored form, or `nil` when `rawValue` is not one
    /// (for example, text typed into a command line).
    public init?(_ rawValue: String) {
        guard OperationRecord.isValidIdentifier(rawValue) else { return nil }
        self.rawValue = rawValue
    }

    init(record id: String) {
        self.rawValue = id
    }

    public var description: String { rawValue }
}

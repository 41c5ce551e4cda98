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
    public var rawValue: String { key.string }

    /// The identifier, held without an allocation (a restore of a million reports a million).
    let key: RecordKey

    /// Creates an identifier from text, or `nil` when `rawValue` is not a UUID (for
    /// example, a mistyped command-line argument). Case does not matter: `"6f1c…"` and
    /// `"6F1C…"` are the same identifier, stored in uppercase.
    ///
    /// ```swift
    /// let id = PersistentOperationID("6f1c9a4e-2b7d-4c1e-9f3a-0d5e8b7c6a21")
    /// ```
    public init?(_ rawValue: String) {
        guard let uuid = UUID(uuidString: rawValue) else { return nil }
        self.key = .uuid(UUIDBits(uuid))
    }

    init(record id: String) {
        self.key = RecordKey(id)
    }

    init(key: RecordKey) {
        self.key = key
    }

    public var description: String { rawValue }

    private enum CodingKeys: String, CodingKey {
        case rawValue
    }

    // Encoded as before the identifier was held as a key: `{"rawValue": "6F1C…"}`.
    public init(from decoder: any Decoder) throws {
        let container = try decoder.container(keyedBy: CodingKeys.self)
        self.init(record: try container.decode(String.self, forKey: .rawValue))
    }

    public func encode(to encoder: any Encoder) throws {
        var container = encoder.container(keyedBy: CodingKeys.self)
        try container.encode(rawValue, forKey: .rawValue)
    }
}

import Foundation

// The body of a retire frame: a removal that remembers the removed record's idempotency key.
//
//     <identifier> <enqueue sequence> <remembered until> <key>
//
// UTF-8 text, fields separated by one space: the record's identifier (an uppercase UUID), its
// enqueue sequence (decimal), the date until which the key is remembered (seconds since the
// reference date, as Swift prints a `Double`: it reads back exactly), then the key itself,
// which runs to the end of the body and may hold spaces. The removal and the key are one frame,
// so a crash or a power cut keeps both or neither: a key is never forgotten while the work it
// names could still be taken for new.

/// A record removed from the journal, and its idempotency key, remembered until a date.
///
/// ```swift
/// let retired = RetiredKey(id: UUID(), sequence: 7, rememberedUntil: Date(timeIntervalSinceReferenceDate: 300), key: "order 42")
/// let frame = JournalFrame(kind: .retire, body: retired.body)
/// assert(RetiredKey(body: frame.body) == retired)
/// ```
package struct RetiredKey: Equatable, Sendable {
    /// The removed record.
    package var id: UUID
    /// Its enqueue sequence: the records of one key are listed in this order.
    package var sequence: UInt64
    /// The key is forgotten from this date on.
    package var rememberedUntil: Date
    /// The idempotency key.
    package var key: String

    /// Creates a retired key.
    package init(id: UUID, sequence: UInt64, rememberedUntil: Date, key: String) {
        self.id = id
        self.sequence = sequence
        self.rememberedUntil = rememberedUntil
        self.key = key
    }

    /// Reads a retire frame's body, or nil when it is not one.
    package init?(body: Data) {
        let text = String(decoding: body, as: UTF8.self)
        let fields = text.split(separator: " ", maxSplits: 3, omittingEmptySubsequences: false)
        guard fields.count == 4, let id = RecordIdentifier.uuid(String(fields[0])), let sequence = UInt64(fields[1]),
              let seconds = Double(fields[2]), seconds.isFinite, !fields[3].isEmpty else { return nil }
        self.init(id: id, sequence: sequence, rememberedUntil: Date(timeIntervalSinceReferenceDate: seconds), key: String(fields[3]))
    }

    /// The body of its retire frame.
    package var body: Data {
        Data("\(id.uuidString) \(sequence) \(rememberedUntil.timeIntervalSinceReferenceDate) \(key)".utf8)
    }
}

import Foundation

/// A record identifier held in 24 bytes and no allocation: the 128 bits of the UUID an
/// identifier in canonical form spells (every identifier this package makes), or the text of
/// any other.
///
/// A record identifier as a `String` is 36 characters, too long for a string stored inline:
/// each one takes an allocation of 80 bytes besides its 16. Held as a key, a million pending
/// identifiers take no allocation at all. The key and the text convert both ways exactly:
/// two keys are equal exactly when their texts are.
///
/// ```swift
/// let key = RecordKey("6F1C9A4E-2B7D-4C1E-9F3A-0D5E8B7C6A21")   // held as its UUID's bits
/// let text = key.string                                      // "6F1C9A4E-2B7D-4C1E-9F3A-0D5E8B7C6A21"
/// let same = RecordKey("6f1c9a4e-2b7d-4c1e-9f3a-0d5e8b7c6a21") == key   // false: another text
/// ```
package enum RecordKey: Hashable, Sendable {
    /// An identifier in canonical form (uppercase UUID text).
    case uuid(UUIDBits)
    /// Any other identifier.
    case text(String)

    /// The key of the identifier `id`.
    package init(_ id: String) {
        if let bits = RecordIdentifier.bits(id) {
            self = .uuid(bits)
        } else {
            self = .text(id)
        }
    }

    /// The identifier as text.
    package var string: String {
        switch self {
        case .uuid(let bits): RecordIdentifier.string(of: bits)
        case .text(let text): text
        }
    }
}

/// The 128 bits of a UUID as two integers, the first byte the most significant of `high`:
/// hashed as two words (a `UUID` hashes its 16 bytes one at a time), and read from text
/// without making a `UUID`.
package struct UUIDBits: Hashable, Sendable {
    package var high: UInt64
    package var low: UInt64

    package init(high: UInt64, low: UInt64) {
        self.high = high
        self.low = low
    }

    package init(_ uuid: UUID) {
        var high: UInt64 = 0, low: UInt64 = 0
        withUnsafeBytes(of: uuid.uuid) { bytes in
            for index in 0..<8 { high = high << 8 | UInt64(bytes[index]) }
            for index in 8..<16 { low = low << 8 | UInt64(bytes[index]) }
        }
        self.init(high: high, low: low)
    }

    package var uuid: UUID {
        withUnsafeBytes(of: (high.bigEndian, low.bigEndian)) { raw in
            UUID(uuid: (raw[0], raw[1], raw[2], raw[3], raw[4], raw[5], raw[6], raw[7],
                        raw[8], raw[9], raw[10], raw[11], raw[12], raw[13], raw[14], raw[15]))
        }
    }
}

extension RecordIdentifier {
    /// The canonical (uppercase) text of the UUID `bits` holds, as `uuid.uuidString` spells
    /// it, made without Foundation (one allocation, for the string itself).
    package static func string(of bits: UUIDBits) -> String {
        String(unsafeUninitializedCapacity: 36) { buffer in
            var position = 0
            for index in 0..<16 {
                if index == 4 || index == 6 || index == 8 || index == 10 {
                    buffer[position] = UInt8(ascii: "-")
                    position += 1
                }
                let byte = UInt8(truncatingIfNeeded: (index < 8 ? bits.high : bits.low) >> (56 - 8 * UInt64(index % 8)))
                buffer[position] = hexDigit(byte >> 4)
                buffer[position + 1] = hexDigit(byte & 0x0F)
                position += 2
            }
            return 36
        }
    }

    /// The uppercase hexadecimal digit of `value` (0–15).
    @inline(__always)
    private static func hexDigit(_ value: UInt8) -> UInt8 {
        value < 10 ? UInt8(ascii: "0") + value : UInt8(ascii: "A") + value - 10
    }
}

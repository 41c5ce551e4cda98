import Foundation

/// Record identifiers: uppercase UUID strings, made and read without Foundation's slow paths.
///
/// `UUID()` on Linux opens and reads `/dev/urandom` at every call, and `UUID(uuidString:)`
/// parses with `sscanf`; both sit on the path of every add, so identifiers are made from the
/// system's random number generator (`getrandom`) and parsed by hand. The results are the
/// same: random (version 4) UUIDs in their canonical uppercase form.
///
/// ```swift
/// let id = RecordIdentifier.make()                     // "6F1C9A4E-2B7D-4C1E-9F3A-0D5E8B7C6A21"
/// let same = RecordIdentifier.uuid(id) == UUID(uuidString: id)   // true
/// let refused = RecordIdentifier.uuid(id.lowercased())  // nil: not the canonical form
/// ```
package enum RecordIdentifier {
    /// A new random (version 4, RFC 9562) identifier in its canonical uppercase form.
    package static func make() -> String {
        makeUUID().uuidString
    }

    /// A new random (version 4, RFC 9562) UUID.
    package static func makeUUID() -> UUID {
        var generator = SystemRandomNumberGenerator()
        var high = generator.next() as UInt64
        var low = generator.next() as UInt64
        // Version 4 in the high nibble of byte 6, variant 0b10 in the top bits of byte 8.
        high = (high & ~(0xF << 12)) | (0x4 << 12)
        low = (low & ~(0x3 << 62)) | (0x2 << 62)
        let a = high.bigEndian, b = low.bigEndian
        return withUnsafeBytes(of: (a, b)) { raw in
            UUID(uuid: (raw[0], raw[1], raw[2], raw[3], raw[4], raw[5], raw[6], raw[7],
                        raw[8], raw[9], raw[10], raw[11], raw[12], raw[13], raw[14], raw[15]))
        }
    }

    /// The UUID `id` spells when it is in canonical uppercase form
    /// (`XXXXXXXX-XXXX-XXXX-XXXX-XXXXXXXXXXXX`, hexadecimal digits `0-9A-F`), else `nil`.
    package static func uuid(_ id: String) -> UUID? {
        var id = id
        return id.withUTF8 { text -> UUID? in
            guard text.count == 36 else { return nil }
            // The 32 digits, 16 into each half, with no allocation (this runs for every
            // record a store opens or reads).
            var halves: (UInt64, UInt64) = (0, 0)
            var digits = 0
            for index in 0..<36 {
                if index == 8 || index == 13 || index == 18 || index == 23 {
                    guard text[index] == UInt8(ascii: "-") else { return nil }
                    continue
                }
                guard let value = digit(text[index]) else { return nil }
                if digits < 16 {
                    halves.0 = halves.0 << 4 | UInt64(value)
                } else {
                    halves.1 = halves.1 << 4 | UInt64(value)
                }
                digits += 1
            }
            let bigEndian = (halves.0.bigEndian, halves.1.bigEndian)
            return withUnsafeBytes(of: bigEndian) { raw in
                UUID(uuid: (raw[0], raw[1], raw[2], raw[3], raw[4], raw[5], raw[6], raw[7],
                            raw[8], raw[9], raw[10], raw[11], raw[12], raw[13], raw[14], raw[15]))
            }
        }
    }

    /// Whether `id` is a UUID in canonical uppercase form.
    package static func isValid(_ id: String) -> Bool {
        uuid(id) != nil
    }

    private static func digit(_ character: UInt8) -> UInt8? {
        switch character {
        case UInt8(ascii: "0")...UInt8(ascii: "9"): character - UInt8(ascii: "0")
        case UInt8(ascii: "A")...UInt8(ascii: "F"): character - UInt8(ascii: "A") + 10
        default: nil
        }
    }
}

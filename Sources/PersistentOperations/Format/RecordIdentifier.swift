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
        return UUIDBits(high: high, low: low).uuid
    }

    /// The UUID `id` spells when it is in canonical uppercase form
    /// (`XXXXXXXX-XXXX-XXXX-XXXX-XXXXXXXXXXXX`, hexadecimal digits `0-9A-F`), else `nil`.
    package static func uuid(_ id: String) -> UUID? {
        bits(id)?.uuid
    }

    /// The bits of the UUID `id` spells when it is in canonical uppercase form, else `nil`.
    package static func bits(_ id: String) -> UUIDBits? {
        var id = id
        return id.withUTF8 { bits(utf8: $0) }
    }

    /// The UUID the UTF-8 `text` spells in canonical uppercase form, else `nil`: for a reader
    /// that finds an identifier among other bytes (no `String` made).
    package static func uuid(utf8 text: UnsafeBufferPointer<UInt8>) -> UUID? {
        bits(utf8: text)?.uuid
    }

    /// The bits of the UUID the UTF-8 `text` spells in canonical uppercase form, else `nil`.
    package static func bits(utf8 text: UnsafeBufferPointer<UInt8>) -> UUIDBits? {
        guard text.count == 36, text[8] == dash, text[13] == dash, text[18] == dash, text[23] == dash else { return nil }
        // The 32 digits, 16 into each half, with no allocation (this runs for every record a
        // store opens or reads).
        var high: UInt64 = 0
        var low: UInt64 = 0
        var invalid: UInt8 = 0
        for index in 0..<18 where index != 8 && index != 13 {
            let value = hexValue(text[index])
            invalid |= value
            high = high << 4 | UInt64(value & 0x0F)
        }
        for index in 19..<36 where index != 23 {
            let value = hexValue(text[index])
            invalid |= value
            low = low << 4 | UInt64(value & 0x0F)
        }
        guard invalid & 0xF0 == 0 else { return nil }
        return UUIDBits(high: high, low: low)
    }

    private static let dash = UInt8(ascii: "-")

    /// The value of `byte` as an uppercase hexadecimal digit, 0xFF for every other byte.
    /// (Computed, not looked up in a table: a global table costs a `swift_once` check at every
    /// call, and this runs for every identifier the queue looks up.)
    @inline(__always)
    private static func hexValue(_ byte: UInt8) -> UInt8 {
        let digit = byte &- UInt8(ascii: "0")
        if digit < 10 { return digit }
        let letter = byte &- UInt8(ascii: "A")
        return letter < 6 ? letter + 10 : 0xFF
    }

    /// Whether `id` is a UUID in canonical uppercase form.
    package static func isValid(_ id: String) -> Bool {
        uuid(id) != nil
    }
}

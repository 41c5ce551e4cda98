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
        var generator = SystemRandomNumberGenerator()
        return string(of: makeBits(using: &generator))
    }

    /// `count` new random (version 4) identifiers, as ``make()`` makes one, for a batch.
    ///
    /// The system's generator costs a system call for each 64 bits on Linux (about 0.25 µs),
    /// so a batch draws 256 bits from it once and expands them with xoshiro256** — not a
    /// cryptographic generator, but identifiers need to be unique, not secret: two batches
    /// share identifiers only if their 256-bit seeds are equal, and the 122 random bits of
    /// each identifier of a batch come from a generator of period 2²⁵⁶ − 1.
    ///
    /// ```swift
    /// let ids = RecordIdentifier.make(count: 3)   // three distinct version-4 identifiers
    /// ```
    package static func make(count: Int) -> [String] {
        guard count > 1 else { return count == 1 ? [make()] : [] }
        var generator = Xoshiro256StarStar(seed: SystemRandomNumberGenerator())
        return (0..<count).map { _ in string(of: makeBits(using: &generator)) }
    }

    /// A new random (version 4, RFC 9562) UUID.
    package static func makeUUID() -> UUID {
        var generator = SystemRandomNumberGenerator()
        return makeBits(using: &generator).uuid
    }

    /// The bits of a random (version 4) UUID, drawn from `generator`.
    private static func makeBits<Generator: RandomNumberGenerator>(using generator: inout Generator) -> UUIDBits {
        var high = generator.next() as UInt64
        var low = generator.next() as UInt64
        // Version 4 in the high nibble of byte 6, variant 0b10 in the top bits of byte 8.
        high = (high & ~(0xF << 12)) | (0x4 << 12)
        low = (low & ~(0x3 << 62)) | (0x2 << 62)
        return UUIDBits(high: high, low: low)
    }

    /// xoshiro256** (Blackman and Vigna, 2018), seeded with 256 bits of another generator.
    private struct Xoshiro256StarStar: RandomNumberGenerator {
        private var state: (UInt64, UInt64, UInt64, UInt64)

        init(seed: some RandomNumberGenerator) {
            var seed = seed
            repeat {
                state = (seed.next(), seed.next(), seed.next(), seed.next())
            } while state == (0, 0, 0, 0)   // the one state it must not start from
        }

        mutating func next() -> UInt64 {
            let result = rotate(state.1 &* 5, 7) &* 9
            let shifted = state.1 << 17
            state.2 ^= state.0
            state.3 ^= state.1
            state.1 ^= state.2
            state.0 ^= state.3
            state.2 ^= shifted
            state.3 = rotate(state.3, 45)
            return result
        }

        private func rotate(_ value: UInt64, _ count: UInt64) -> UInt64 {
            (value << count) | (value >> (64 - count))
        }
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

/// The CRC-32 checksum (IEEE 802.3, as in zlib and PNG) that guards every record body.
///
/// ```swift
/// CRC32.checksum(of: Array("123456789".utf8)) // 0xCBF43926
/// ```
package enum CRC32 {
    private static let table: [UInt32] = (0..<256).map { index in
        var value = UInt32(index)
        for _ in 0..<8 {
            value = (value & 1) == 1 ? (value >> 1) ^ 0xEDB8_8320 : value >> 1
        }
        return value
    }

    /// The checksum of `bytes`.
    package static func checksum<Bytes: Sequence>(of bytes: Bytes) -> UInt32 where Bytes.Element == UInt8 {
        // Contiguous bytes (`Data`, arrays) are read through a buffer pointer: iterating a
        // `Data` byte by byte costs several times more.
        if let crc = bytes.withContiguousStorageIfAvailable({ update(0xFFFF_FFFF, with: $0) }) {
            return crc ^ 0xFFFF_FFFF
        }
        return update(0xFFFF_FFFF, with: bytes) ^ 0xFFFF_FFFF
    }

    /// The checksum of bytes that follow bytes whose checksum is `previous`: the checksum of
    /// both runs of bytes one after the other, as zlib's `crc32(previous, bytes)`.
    ///
    /// ```swift
    /// let whole = CRC32.checksum(of: Array("123456789".utf8))
    /// CRC32.checksum(of: Array("6789".utf8), continuing: CRC32.checksum(of: Array("12345".utf8))) == whole // true
    /// ```
    package static func checksum<Bytes: Sequence>(of bytes: Bytes, continuing previous: UInt32) -> UInt32 where Bytes.Element == UInt8 {
        let initial = previous ^ 0xFFFF_FFFF
        if let crc = bytes.withContiguousStorageIfAvailable({ update(initial, with: $0) }) {
            return crc ^ 0xFFFF_FFFF
        }
        return update(initial, with: bytes) ^ 0xFFFF_FFFF
    }

    private static func update<Bytes: Sequence>(_ initial: UInt32, with bytes: Bytes) -> UInt32 where Bytes.Element == UInt8 {
        var crc = initial
        table.withUnsafeBufferPointer { table in
            for byte in bytes {
                crc = table[Int((crc ^ UInt32(byte)) & 0xFF)] ^ (crc >> 8)
            }
        }
        return crc
    }
}

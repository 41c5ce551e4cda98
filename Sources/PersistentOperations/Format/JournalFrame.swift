import Foundation

// Journal frames, segment format version 1
// ========================================
//
// After its header (see `JournalSegment.swift`) a journal segment holds frames, back to back
// with no padding. A frame is a 24-byte header and a body:
//
//     offset  size  field
//     0       4     frame marker: 0xF9 'J' 'F' 'R'
//     4       4     salt, big-endian: the salt of the segment the frame was written to
//     8       1     kind (see `JournalFrame.Kind`)
//     9       3     reserved, must be 0
//     12      4     body length n in bytes, big-endian
//     16      4     header check: CRC-32 (IEEE, as zlib) of bytes 0..<16
//     20      4     frame check: CRC-32 of bytes 0..<16 followed by the n body bytes
//     24      n     body: opaque to this layer (the store puts a binary property-list record
//                   in it; a batch frame holds several, see `JournalFrame+Batch.swift`)
//
// A frame counts only when every check passes, in this order: the marker; the header check,
// before the length is believed, so that a corrupt length can never send a reader astray;
// the salt, which must be the segment's; the length against the frame-size cap and against
// the bytes left; the frame check, which covers the header fields and the body together;
// then a kind this version knows and zero reserved bits. No body byte reaches a decoder
// before the frame check has passed.
//
// Why a salt in every frame. A segment's salt is chosen at random when it is created, so a
// frame is tied to one segment: stale frames of an earlier file that a crash exposes (a
// recycled file, or blocks a file system hands out before their new data is written), and
// frame-shaped bytes inside a payload, fail the check even though their own checksums are
// right. SQLite's WAL salts its frames for the same reason. The salt is in the frame itself,
// not only in the segment header, so frames can still be verified when the header is
// damaged (the reader then takes the salt of the first frame that verifies).
//
// Why two checks. The header check costs 16 bytes of CRC at any offset, so a reader looking
// for the next frame after damage can test every candidate cheaply and computes a body's
// checksum only for a header that verified. The frame check alone, over header and body,
// would have to believe an unverified length to know how far to read.
//
// The cost is 24 bytes a frame: about 3 % of a typical 700-byte record.

/// One frame of a journal segment: a kind and an opaque body; see the format description at
/// the top of this file.
///
/// ```swift
/// let salt = JournalSegment.newSalt()
/// let recordBytes = Data("a record".utf8)
/// var segment = JournalSegment.header(salt: salt, number: 1)
/// try JournalFrame(kind: .put, body: recordBytes).append(to: &segment, salt: salt)
/// let scan = try JournalSegment.scan(segment)
/// assert(scan.frames.map(\.frame) == [JournalFrame(kind: .put, body: recordBytes)])
/// ```
package struct JournalFrame: Sendable, Equatable {
    /// What a frame does to the store. A reader reports a frame of a kind it does not know as
    /// damage (and quarantines it): a new kind needs a new segment format version unless
    /// losing it that way loses nothing (``retire``: an older reader leaves the record
    /// pending, and it runs again, at least once as ever).
    package enum Kind: UInt8, Sendable, CaseIterable {
        /// Adds a record or rewrites it; the body is the record.
        case put = 1
        /// Removes a record; the body names it.
        case remove = 2
        /// Several puts that count all or none, because they are one frame.
        case batch = 3
        /// Moves a record to the failed area; the body is the record as stored there.
        case moveToFailed = 4
        /// Crash evidence: an attempt started or ended.
        case attempt = 5
        /// Removes a record and remembers its idempotency key until a date; the body names
        /// both (see `JournalFrame+Retire.swift`).
        case retire = 6
    }

    /// The size of a frame header in bytes.
    package static let headerSize = 24
    /// The four bytes every frame starts with.
    package static let marker: [UInt8] = [0xF9, 0x4A, 0x46, 0x52]
    /// The default cap on the size of one frame, header included: 1 GiB, room for the batch
    /// of one large `addOperations` (100,000 typical records take about 75 MB). The header
    /// check is verified before a length is believed, so a large cap never sends a reader
    /// after a corrupt length.
    package static let defaultMaximumSize = 1 << 30

    /// What the frame does.
    package var kind: Kind
    /// The frame's contents, opaque to this layer.
    package var body: Data

    /// Creates a frame.
    package init(kind: Kind, body: Data) {
        self.kind = kind
        self.body = body
    }

    /// The size of the frame on disk, header included.
    package var size: Int {
        Self.headerSize + body.count
    }

    /// Appends the frame's bytes, for a segment whose salt is `salt`, to `segment`.
    ///
    /// - Throws: ``PersistenceError/Code/recordTooLarge`` when the frame would exceed
    ///   `maximumSize` bytes; `segment` is then unchanged.
    package func append(to segment: inout Data, salt: UInt32, maximumSize: Int = defaultMaximumSize) throws {
        segment.append(contentsOf: try header(salt: salt, maximumSize: maximumSize))
        segment.append(body)
    }

    /// The frame's header, for a segment whose salt is `salt`: the bytes that go before
    /// ``body`` (whose checksum it holds). Written apart from a large body, it spares a copy
    /// of the body (see ``encoded(salt:maximumSize:)``).
    ///
    /// - Throws: ``PersistenceError/Code/recordTooLarge``, as ``append(to:salt:maximumSize:)``.
    package func header(salt: UInt32, maximumSize: Int = defaultMaximumSize) throws -> [UInt8] {
        try Self.header(kind: kind, bodyPieces: [body], salt: salt, maximumSize: maximumSize)
    }

    /// The header of a frame of `kind` whose body is `bodyPieces` one after another, for a
    /// segment whose salt is `salt` (see ``header(salt:maximumSize:)``).
    ///
    /// - Throws: ``PersistenceError/Code/recordTooLarge``, as ``append(to:salt:maximumSize:)``.
    package static func header(kind: Kind, bodyPieces: [Data], salt: UInt32, maximumSize: Int = defaultMaximumSize) throws -> [UInt8] {
        precondition(maximumSize > headerSize, "maximumSize must exceed the frame header size")
        let bodyCount = bodyPieces.reduce(0) { $0 + $1.count }
        guard headerSize + bodyCount <= maximumSize, bodyCount <= Int(UInt32.max) else {
            throw PersistenceError(
                .recordTooLarge,
                "The journal frame (\(kind)) needs \(headerSize + bodyCount) bytes, more than the maximum frame size of \(maximumSize) bytes."
            )
        }
        var header: [UInt8] = []
        header.reserveCapacity(headerSize)
        header.append(contentsOf: marker)
        header.appendBigEndian(UInt64(salt), width: 4)
        header.append(kind.rawValue)
        header.append(contentsOf: [0, 0, 0])
        header.appendBigEndian(UInt64(bodyCount), width: 4)
        let headerCheck = CRC32.checksum(of: header)
        header.appendBigEndian(UInt64(headerCheck), width: 4)
        let bodyCheck = bodyPieces.reduce(headerCheck) { CRC32.checksum(of: $1, continuing: $0) }
        header.appendBigEndian(UInt64(bodyCheck), width: 4)
        return header
    }

    /// The frame's bytes for a segment whose salt is `salt`.
    ///
    /// - Throws: ``PersistenceError/Code/recordTooLarge``, as ``append(to:salt:maximumSize:)``.
    package func encoded(salt: UInt32, maximumSize: Int = defaultMaximumSize) throws -> Data {
        var data = Data(capacity: size)
        try append(to: &data, salt: salt, maximumSize: maximumSize)
        return data
    }

    // MARK: Verification

    /// Why the bytes at an offset are not a frame.
    enum Rejection: Error, Equatable, CustomStringConvertible {
        case tooShort(available: Int)
        case noMarker
        case headerChecksumMismatch
        case otherSegment(salt: UInt32)
        case tooLarge(size: Int, maximum: Int)
        case pastEnd(size: Int, available: Int)
        case frameChecksumMismatch
        case unknownKind(UInt8)
        case reservedBitsSet

        var description: String {
            switch self {
            case .tooShort(let available): "\(available) bytes left, too few for a frame header"
            case .noMarker: "no frame marker"
            case .headerChecksumMismatch: "frame header checksum mismatch"
            case .otherSegment(let salt): "a frame of another segment (salt \(String(salt, radix: 16)))"
            case .tooLarge(let size, let maximum): "a frame of \(size) bytes, more than the maximum frame size of \(maximum) bytes"
            case .pastEnd(let size, let available): "a frame of \(size) bytes with \(available) bytes left"
            case .frameChecksumMismatch: "frame checksum mismatch"
            case .unknownKind(let raw): "unknown frame kind \(raw)"
            case .reservedBitsSet: "reserved frame header bits are set"
            }
        }
    }

    /// A frame whose checks passed, located in its buffer.
    struct Verified {
        var kind: Kind
        var salt: UInt32
        var body: Range<Int>
        /// The offset just past the frame.
        var end: Int { body.upperBound }
    }

    /// Verifies the bytes at `offset` as a frame of the segment salted `salt` (of any segment
    /// when `salt` is `nil`). `checkingBody: false` checks all but the checksum of its body
    /// (for bytes whose whole frame was verified before: see `JournalStore.forEachPendingRecord`).
    static func verify(
        _ bytes: UnsafeBufferPointer<UInt8>, at offset: Int, salt expectedSalt: UInt32?, maximumSize: Int, checkingBody: Bool = true
    ) -> Result<Verified, Rejection> {
        let available = bytes.count - offset
        guard available >= headerSize else { return .failure(.tooShort(available: available)) }
        guard bytes[offset] == marker[0], bytes[offset + 1] == marker[1], bytes[offset + 2] == marker[2],
              bytes[offset + 3] == marker[3] else {
            return .failure(.noMarker)
        }
        let headerCheck = CRC32.checksum(of: UnsafeBufferPointer(rebasing: bytes[offset..<(offset + 16)]))
        guard headerCheck == UInt32(bytes.bigEndianValue(at: offset + 16, width: 4)) else {
            return .failure(.headerChecksumMismatch)
        }
        let salt = UInt32(bytes.bigEndianValue(at: offset + 4, width: 4))
        if let expectedSalt, salt != expectedSalt { return .failure(.otherSegment(salt: salt)) }
        let size = headerSize + Int(bytes.bigEndianValue(at: offset + 12, width: 4))
        guard size <= maximumSize else { return .failure(.tooLarge(size: size, maximum: maximumSize)) }
        guard size <= available else { return .failure(.pastEnd(size: size, available: available)) }
        let body = (offset + headerSize)..<(offset + size)
        if checkingBody {
            let frameCheck = CRC32.checksum(of: UnsafeBufferPointer(rebasing: bytes[body]), continuing: headerCheck)
            guard frameCheck == UInt32(bytes.bigEndianValue(at: offset + 20, width: 4)) else {
                return .failure(.frameChecksumMismatch)
            }
        }
        guard let kind = Kind(rawValue: bytes[offset + 8]) else { return .failure(.unknownKind(bytes[offset + 8])) }
        guard bytes[offset + 9] == 0, bytes[offset + 10] == 0, bytes[offset + 11] == 0 else {
            return .failure(.reservedBitsSet)
        }
        return .success(Verified(kind: kind, salt: salt, body: body))
    }
}

extension Array where Element == UInt8 {
    /// Appends the low `width` bytes of `value`, most significant first.
    mutating func appendBigEndian(_ value: UInt64, width: Int) {
        for shift in stride(from: (width - 1) * 8, through: 0, by: -8) {
            append(UInt8(truncatingIfNeeded: value >> UInt64(shift)))
        }
    }
}

extension UnsafeBufferPointer where Element == UInt8 {
    /// The big-endian unsigned integer in the `width` bytes at `offset`.
    func bigEndianValue(at offset: Int, width: Int) -> UInt64 {
        var value: UInt64 = 0
        for index in offset..<(offset + width) {
            value = value << 8 | UInt64(self[index])
        }
        return value
    }
}

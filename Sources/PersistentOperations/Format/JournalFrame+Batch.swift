import Foundation

// The body of a batch frame: several parts (records), all or none because they share one frame
// and its checksum.
//
//     offset  size  field
//     0       4     part count c, big-endian
//     4             c times: the part's length m (4 bytes, big-endian), then its m bytes
//
// Nothing follows the last part. The frame check has passed before a body is split, but the
// split still checks every length against the bytes left: a valid checksum proves the bytes
// are as written, not that the writer was right.

extension JournalFrame {
    /// A batch frame holding `parts` (such as the records of one `addOperations`).
    ///
    /// ```swift
    /// let parts = [Data("first record".utf8), Data("second record".utf8)]
    /// let frame = JournalFrame.batch(parts)
    /// let read = try frame.batchParts()   // == parts
    /// ```
    package static func batch(_ parts: [Data]) -> JournalFrame {
        // Copied into a body allocated once, at its full size (appending each part to a `Data`
        // costs more than copying it, for a batch of many small records).
        var body = Data(count: 4 + parts.reduce(0) { $0 + 4 + $1.count })
        body.withUnsafeMutableBytes { body in
            body.storeBytes(of: UInt32(parts.count).bigEndian, toByteOffset: 0, as: UInt32.self)
            var offset = 4
            for part in parts {
                body.storeBytes(of: UInt32(part.count).bigEndian, toByteOffset: offset, as: UInt32.self)
                part.withUnsafeBytes { part in
                    UnsafeMutableRawBufferPointer(rebasing: body[(offset + 4)...]).copyMemory(from: part)
                }
                offset += 4 + part.count
            }
        }
        return JournalFrame(kind: .batch, body: body)
    }

    /// A batch frame of `count` parts, `encodePart` of each index, built in pieces rather than
    /// one body: the parts are encoded in chunks on several cores at once (see
    /// ``ChunkedMap``), each chunk's into one buffer, and the frame is written piece by piece
    /// (``Pieces/header(salt:maximumSize:)``, then ``Pieces/body``). A large `addOperations`
    /// then holds its records' bytes once while it writes, not once a record and once more in
    /// a body.
    ///
    /// ```swift
    /// let parts = [Data("first record".utf8), Data("second record".utf8)]
    /// let pieces = try JournalFrame.batchPieces(parts.count) { parts[$0] }
    /// let whole = JournalFrame(kind: .batch, body: pieces.body.reduce(Data(), +))
    /// let read = try whole.batchParts()   // == parts
    /// ```
    package static func batchPieces(_ count: Int, encodePart: @Sendable (Int) throws -> Data) throws -> Pieces {
        var countField = Data(count: 4)
        countField.withUnsafeMutableBytes { $0.storeBytes(of: UInt32(count).bigEndian, as: UInt32.self) }
        let chunks = try ChunkedMap.mapChunks(count) { range -> (buffer: Data, lengths: [Int]) in
            var buffer = Data()
            var lengths: [Int] = []
            lengths.reserveCapacity(range.count)
            for index in range {
                let part = try encodePart(index)
                withUnsafeBytes(of: UInt32(part.count).bigEndian) { buffer.append(contentsOf: $0) }
                buffer.append(part)
                lengths.append(part.count)
            }
            return (buffer, lengths)
        }
        return Pieces(kind: .batch, body: [countField] + chunks.map(\.buffer), partLengths: chunks.flatMap(\.lengths))
    }

    /// The frame as one piece.
    package var pieces: Pieces { Pieces(kind: kind, body: [body], partLengths: []) }

    /// A frame to write whose body is in pieces, written one after another (never joined).
    package struct Pieces: Sendable {
        package let kind: Kind
        /// The body, piece by piece.
        package let body: [Data]
        /// For a batch, the length of each part, in order.
        package let partLengths: [Int]

        /// The size of the frame on disk, header included.
        package var size: Int { JournalFrame.headerSize + body.reduce(0) { $0 + $1.count } }

        /// The frame's header, for a segment whose salt is `salt`.
        ///
        /// - Throws: ``PersistenceError/Code/recordTooLarge``, as
        ///   ``JournalFrame/append(to:salt:maximumSize:)``.
        package func header(salt: UInt32, maximumSize: Int = defaultMaximumSize) throws -> [UInt8] {
            try JournalFrame.header(kind: kind, bodyPieces: body, salt: salt, maximumSize: maximumSize)
        }
    }

    /// The parts of a batch frame.
    ///
    /// - Throws: ``PersistenceError/Code/corruptRecord`` when the frame is not a batch or its
    ///   body does not split into exactly the parts it announces.
    package func batchParts() throws -> [Data] {
        try batchPartRanges().map { Data(body[$0]) }
    }

    /// Where the parts of a batch frame lie in its ``body`` (in the body's indices): the parts
    /// without copying them, as slices `body[range]`.
    ///
    /// - Throws: The errors of ``batchParts()``.
    package func batchPartRanges() throws -> [Range<Int>] {
        guard kind == .batch else { throw Self.malformedBatch("a \(kind) frame is not a batch") }
        let start = body.startIndex
        return try body.withUnsafeBytes { raw in
            let bytes = raw.bindMemory(to: UInt8.self)
            guard bytes.count >= 4 else { throw Self.malformedBatch("\(bytes.count) bytes, too few for a part count") }
            let count = Int(bytes.bigEndianValue(at: 0, width: 4))
            // Each part takes at least its 4-byte length: check before reserving room.
            guard count <= (bytes.count - 4) / 4 else {
                throw Self.malformedBatch("\(count) parts announced in \(bytes.count) bytes")
            }
            var ranges: [Range<Int>] = []
            ranges.reserveCapacity(count)
            var offset = 4
            for index in 0..<count {
                guard bytes.count - offset >= 4 else { throw Self.malformedBatch("part \(index) has no length") }
                let length = Int(bytes.bigEndianValue(at: offset, width: 4))
                offset += 4
                guard length <= bytes.count - offset else {
                    throw Self.malformedBatch("part \(index) of \(length) bytes with \(bytes.count - offset) bytes left")
                }
                ranges.append((start + offset)..<(start + offset + length))
                offset += length
            }
            guard offset == bytes.count else {
                throw Self.malformedBatch("\(bytes.count - offset) bytes after the last part")
            }
            return ranges
        }
    }

    private static func malformedBatch(_ reason: String) -> PersistenceError {
        PersistenceError(.corruptRecord, "The batch frame is malformed (\(reason)); it cannot be read.")
    }
}

import Foundation

// Journal hint format, version 2
// ==============================
//
// A hint file sits beside a sealed segment (one no frame will be appended to) and says, in
// the order of its frames, what each frame does to the journal's index, without the records'
// payloads: an open reads a million records' hints (about 40 MB) instead of their segments
// (about 630 MB with the typical payload), and a restore reads them again instead of every
// record. The idea is Bitcask's hint files. A hint is derived data: the segment stays the
// truth, and a hint that is missing, damaged, of another format version, or names another
// segment is ignored and the segment is read instead (and the hint made again).
//
//     offset  size  field
//     0       8     magic: 0x89 'O' 'P' 'H' 0x0D 0x0A 0x1A 0x0A
//     8       2     format version (2)
//     10      2     reserved, must be 0
//     12      4     the segment's salt
//     16      8     the segment's number
//     24      4     the segment's generation
//     28      4     number of entries
//     32      8     the segment's valid end: the offset just past its last frame
//     40      8     offset of the table of type identifiers
//     48      4     number of type identifiers
//     52      4     CRC-32 (IEEE, as zlib) of bytes 0..<52
//     56            entries, one per frame or batch part, in segment order
//                   the table of type identifiers: each a 4-byte length and UTF-8 bytes
//     end - 4 4     CRC-32 of the bytes from offset 56 to here
//
// (The type identifiers follow the entries, and the header has a checksum of its own, so
// that a large hint is written as it is made, its header last.)
//
// Fixed-size numbers are little-endian. Most numbers of an entry are varints: 7 bits a byte,
// least significant first, the high bit set on every byte but the last, at most 10 bytes;
// signed ones zigzag-encoded first (0, -1, 1, -2, … as 0, 1, 2, 3, …). "Δ" marks a number
// written as its difference from the same number of the entry before (0 before the first):
// offsets from the previous entry's offset, enqueue sequences from the previous record's.
// An entry starts with a tag byte:
//
// - 1 (a put frame's record), 2 (a record in a batch frame), 3 (a move to the failed area):
//       signed Δ offset of the record's bytes (the frame, or the part in the batch's body)
//       varint their length
//       1 flags: 1 plain, 2 periodic, 4 due date, 8 idempotency key, 16 not-before date,
//         32 next-attempt date
//       16 the record's identifier (UUID bytes)
//       signed Δ enqueue sequence (as a 64-bit two's complement difference), signed
//       priority, varint type (index into the identifiers), signed attempts in flight
//       [8 due date, seconds since the reference date]   when flag 4
//       [4 length and UTF-8 bytes of the idempotency key] when flag 8
//       when flag 1 (the record has only the fields every record has, see
//       `RecordFormat.plainFields`): varint format version, 8 enqueue date,
//       [8 not-before] when flag 16, [8 next-attempt] when flag 32, signed retries,
//       signed attempts
// - 4 (any other frame: a removal, a retired key, an attempt marker):
//       signed Δ offset of the frame, 1 kind, varint body length, the body
//
// Version 1 (written by earlier releases) held every number at its full width: about 84
// bytes a typical record against about 37. Its hints are ignored, and made again in the
// new format.
//
// A hint is written (to a temporary name, then renamed) only for a segment that is sealed and
// flushed, and only when every byte of the segment verified and every record in it was read:
// a segment with damage keeps being scanned, so that its damage is reported at each open as
// before. A hint is not flushed: a power cut can leave it torn, and its checksum then fails.

/// What the frames of one sealed journal segment do to the index: see the format description
/// at the top of this file.
///
/// ```swift
/// let fields = RecordFormat.IndexFields(id: UUID(), enqueueSequence: 1, priority: 0, typeIdentifier: "com.example.upload", attemptsInFlight: 0)
/// let record = JournalHint.Record(kind: .put, offset: 32, length: 700, fields: fields, plain: nil)
/// let hint = JournalHint(salt: 7, number: 1, generation: 0, validEnd: 732, entries: [.record(record)])
/// let same = JournalHint.decode(hint.encoded()) == hint   // true
/// ```
package struct JournalHint: Equatable, Sendable {
    /// The magic bytes at the start of every hint file.
    package static let magic: [UInt8] = [0x89, 0x4F, 0x50, 0x48, 0x0D, 0x0A, 0x1A, 0x0A]
    /// The format version this library writes and reads.
    package static let formatVersion = 2
    /// The extension of hint files: `<segment name without its extension>.hint`.
    package static let fileExtension = "hint"

    /// A record a frame puts in the index.
    package struct Record: Equatable, Sendable {
        package enum Kind: UInt8, Sendable {
            /// A put frame: the record is pending, its bytes are the frame.
            case put = 1
            /// A record of a batch frame: pending, its bytes are its part of the batch's body.
            case batchPart = 2
            /// A move to the failed area: its bytes are the frame.
            case moveToFailed = 3
        }

        package var kind: Kind
        /// Where the record's bytes start in the segment.
        package var offset: Int64
        /// Their length.
        package var length: Int32
        package var fields: RecordFormat.IndexFields
        /// Its fields when it is a plain record (only the fields every record has), for a
        /// restore that reads no payload; nil otherwise.
        package var plain: RecordFormat.PlainFields?

        package init(kind: Kind, offset: Int64, length: Int32, fields: RecordFormat.IndexFields, plain: RecordFormat.PlainFields?) {
            self.kind = kind
            self.offset = offset
            self.length = length
            self.fields = fields
            self.plain = plain
        }
    }

    /// What one frame (or one record of a batch frame) does.
    package enum Entry: Equatable, Sendable {
        case record(Record)
        /// A frame that keeps no record (a removal, a retired key, an attempt marker), whole.
        case frame(offset: Int64, kind: JournalFrame.Kind, body: Data)
    }

    package var salt: UInt32
    package var number: UInt64
    package var generation: UInt32
    /// The offset just past the segment's last frame.
    package var validEnd: Int64
    package var entries: [Entry]

    package init(salt: UInt32, number: UInt64, generation: UInt32, validEnd: Int64, entries: [Entry]) {
        self.salt = salt
        self.number = number
        self.generation = generation
        self.validEnd = validEnd
        self.entries = entries
    }

    fileprivate enum Flag {
        static let plain: UInt8 = 1
        static let periodic: UInt8 = 2
        static let due: UInt8 = 4
        static let key: UInt8 = 8
        static let notBefore: UInt8 = 16
        static let nextAttemptAt: UInt8 = 32
    }

    /// The hint file's bytes.
    package func encoded() -> Data {
        var encoder = Encoder()
        for entry in entries { encoder.append(entry) }
        // (The tail holds the entries' bytes: none were taken before.)
        let (head, tail) = encoder.finish(salt: salt, number: number, generation: generation, validEnd: validEnd)
        return Data(head + tail)
    }

    /// The size of a hint file's header.
    package static let headerSize = 56

    /// Makes a hint file's bytes an entry at a time: ``takeBytes()`` hands on the entries'
    /// bytes made so far (to be written from offset ``JournalHint/headerSize`` on, one after
    /// another), and ``finish(salt:number:generation:validEnd:)`` the header (for offset 0)
    /// and the bytes that end the file. A large segment's hint is written as it is made.
    package struct Encoder {
        private var body = HintWriter()
        private var types: [String] = []
        private var typeOrdinals: [String: UInt32] = [:]
        private var count: UInt32 = 0
        /// What the next entry's differences are taken from: the last entry's offset and the
        /// last record's enqueue sequence.
        private var previousOffset: Int64 = 0
        private var previousSequence: UInt64 = 0
        /// The bytes of the entries taken so far, and their checksum.
        private var taken = 0
        private var checksum: UInt32?

        package init() {}

        /// The bytes made and not taken yet.
        package var pendingByteCount: Int { body.bytes.count }

        private mutating func ordinal(_ type: String) -> UInt32 {
            if let ordinal = typeOrdinals[type] { return ordinal }
            let ordinal = UInt32(types.count)
            types.append(type)
            typeOrdinals[type] = ordinal
            return ordinal
        }

        package mutating func append(_ entry: Entry) {
            count += 1
            switch entry {
            case .record(let record):
                let fields = record.fields
                var flags: UInt8 = 0
                if record.plain != nil { flags |= Flag.plain }
                if fields.isPeriodic { flags |= Flag.periodic }
                if fields.dueDate != nil { flags |= Flag.due }
                if fields.idempotencyKey != nil { flags |= Flag.key }
                if record.plain?.notBefore != nil { flags |= Flag.notBefore }
                if record.plain?.nextAttemptAt != nil { flags |= Flag.nextAttemptAt }
                body.append(UInt8(record.kind.rawValue))
                body.appendSigned(record.offset &- previousOffset)
                previousOffset = record.offset
                body.appendVarint(UInt64(UInt32(bitPattern: record.length)))
                body.append(flags)
                withUnsafeBytes(of: fields.id.uuid) { body.bytes.append(contentsOf: $0) }
                body.appendSigned(Int64(bitPattern: fields.enqueueSequence &- previousSequence))
                previousSequence = fields.enqueueSequence
                body.appendSigned(Int64(fields.priority))
                body.appendVarint(UInt64(ordinal(fields.typeIdentifier)))
                body.appendSigned(Int64(fields.attemptsInFlight))
                if let due = fields.dueDate { body.append(due.timeIntervalSinceReferenceDate.bitPattern) }
                if let key = fields.idempotencyKey { body.appendString(key) }
                if let plain = record.plain {
                    body.appendVarint(UInt64(UInt16(truncatingIfNeeded: plain.formatVersion)))
                    body.append(plain.enqueuedAt.bitPattern)
                    if let notBefore = plain.notBefore { body.append(notBefore.bitPattern) }
                    if let next = plain.nextAttemptAt { body.append(next.bitPattern) }
                    body.appendSigned(Int64(plain.numberOfRetries))
                    body.appendSigned(Int64(plain.numberOfAttempts))
                }
            case .frame(let offset, let kind, let frameBody):
                body.append(UInt8(4))
                body.appendSigned(offset &- previousOffset)
                previousOffset = offset
                body.append(kind.rawValue)
                body.appendVarint(UInt64(frameBody.count))
                body.bytes.append(contentsOf: frameBody)
            }
        }

        /// The entries' bytes made since the last call.
        package mutating func takeBytes() -> [UInt8] {
            let bytes = body.bytes
            body.bytes = []
            checksum = checksum.map { CRC32.checksum(of: bytes, continuing: $0) } ?? CRC32.checksum(of: bytes)
            taken += bytes.count
            return bytes
        }

        /// The header, and the bytes that end the file (after the entries' last bytes,
        /// which ``takeBytes()`` then hands on).
        package mutating func finish(salt: UInt32, number: UInt64, generation: UInt32, validEnd: Int64) -> (header: [UInt8], tail: [UInt8]) {
            let rest = takeBytes()
            var tail = HintWriter()
            for type in types { tail.appendString(type) }
            let bodyChecksum = checksum.map { CRC32.checksum(of: tail.bytes, continuing: $0) } ?? CRC32.checksum(of: tail.bytes)
            tail.append(bodyChecksum)
            var header = HintWriter()
            header.bytes.append(contentsOf: JournalHint.magic)
            header.append(UInt16(JournalHint.formatVersion))
            header.append(UInt16(0))
            header.append(salt)
            header.append(number)
            header.append(generation)
            header.append(count)
            header.append(UInt64(bitPattern: validEnd))
            header.append(UInt64(JournalHint.headerSize + taken))
            header.append(UInt32(types.count))
            header.append(CRC32.checksum(of: header.bytes))
            // (`rest` was the last of the entries: handed on with the tail.)
            return (header.bytes, rest + tail.bytes)
        }
    }

    /// The hint a hint file holds, or nil when it is not a whole, intact hint of this format
    /// version (damaged, torn, or written by a newer library): the caller reads the segment.
    ///
    /// Each hint's type identifiers are strings of its own, shared by its records and by no
    /// other hint's: a hint decoded on one thread while the records of another are indexed
    /// on a second never has both threads counting references to the same string.
    package static func decode(_ data: Data) -> JournalHint? {
        data.withUnsafeBytes { raw -> JournalHint? in
            guard raw.count >= headerSize + 4, raw.starts(with: magic) else { return nil }
            func checksum(_ range: Range<Int>) -> UInt32 {
                CRC32.checksum(of: UnsafeRawBufferPointer(rebasing: raw[range]).bindMemory(to: UInt8.self))
            }
            guard checksum(0..<52) == raw.loadUnaligned(fromByteOffset: 52, as: UInt32.self).littleEndian,
                  checksum(headerSize..<(raw.count - 4)) == raw.loadUnaligned(fromByteOffset: raw.count - 4, as: UInt32.self).littleEndian
            else { return nil }
            var reader = HintReader(bytes: UnsafeRawBufferPointer(rebasing: raw[..<(raw.count - 4)]), position: 8)
            return reader.hint()
        }
    }
}

/// Little-endian appends for ``JournalHint/encoded()``.
private struct HintWriter {
    var bytes: [UInt8] = []

    mutating func append<Value: FixedWidthInteger>(_ value: Value) {
        withUnsafeBytes(of: value.littleEndian) { bytes.append(contentsOf: $0) }
    }

    mutating func appendString(_ string: String) {
        append(UInt32(string.utf8.count))
        bytes.append(contentsOf: string.utf8)
    }

    /// `value` as a varint: 7 bits a byte, least significant first, the high bit set on
    /// every byte but the last.
    mutating func appendVarint(_ value: UInt64) {
        var value = value
        while value >= 0x80 {
            bytes.append(UInt8(truncatingIfNeeded: value) | 0x80)
            value >>= 7
        }
        bytes.append(UInt8(value))
    }

    /// `value` zigzag-encoded (0, -1, 1, -2, … as 0, 1, 2, 3, …), as a varint.
    mutating func appendSigned(_ value: Int64) {
        appendVarint(UInt64(bitPattern: (value << 1) ^ (value >> 63)))
    }
}

/// Bounds-checked little-endian reads for ``JournalHint/decode(_:)``: any
/// read past the end makes the hint invalid.
private struct HintReader {
    let bytes: UnsafeRawBufferPointer
    var position: Int
    /// The last entry's offset and the last record's enqueue sequence, which an entry's
    /// differences are added to.
    var previousOffset: Int64 = 0
    var previousSequence: UInt64 = 0

    mutating func read<Value: FixedWidthInteger>(_: Value.Type) -> Value? {
        let size = MemoryLayout<Value>.size
        guard position <= bytes.count - size else { return nil }
        defer { position += size }
        return Value(littleEndian: bytes.loadUnaligned(fromByteOffset: position, as: Value.self))
    }

    /// A varint (see ``HintWriter/appendVarint(_:)``): nil past the end, or for more than
    /// 10 bytes or more than 64 bits.
    mutating func readVarint() -> UInt64? {
        var value: UInt64 = 0
        var shift: UInt64 = 0
        while position < bytes.count {
            let byte = bytes[position]
            position += 1
            // The tenth byte holds the top bit only.
            guard shift < 63 || byte <= 1 else { return nil }
            value |= UInt64(byte & 0x7F) << shift
            if byte < 0x80 { return value }
            shift += 7
        }
        return nil
    }

    /// A zigzag-encoded varint (see ``HintWriter/appendSigned(_:)``).
    mutating func readSigned() -> Int64? {
        readVarint().map { Int64(bitPattern: ($0 >> 1) ^ (0 &- ($0 & 1))) }
    }

    /// A signed varint that fits an `Int`.
    mutating func readInt() -> Int? {
        readSigned().flatMap { Int(exactly: $0) }
    }

    mutating func readDouble() -> Double? {
        read(UInt64.self).map(Double.init(bitPattern:))
    }

    mutating func readBytes(_ count: Int) -> UnsafeRawBufferPointer? {
        guard count >= 0, position <= bytes.count - count else { return nil }
        defer { position += count }
        return UnsafeRawBufferPointer(rebasing: bytes[position..<(position + count)])
    }

    mutating func readString() -> String? {
        guard let count = read(UInt32.self), let utf8 = readBytes(Int(count)) else { return nil }
        return String(validating: utf8.bindMemory(to: UInt8.self), as: UTF8.self)
    }

    mutating func hint() -> JournalHint? {
        guard let version = read(UInt16.self), Int(version) == JournalHint.formatVersion, read(UInt16.self) == 0,
              let salt = read(UInt32.self), let number = read(UInt64.self), let generation = read(UInt32.self),
              let entryCount = read(UInt32.self), let validEnd = read(UInt64.self), let tableOffset = read(UInt64.self),
              let typeCount = read(UInt32.self), tableOffset >= UInt64(JournalHint.headerSize), tableOffset <= UInt64(bytes.count),
              Int(typeCount) <= bytes.count, Int(entryCount) <= bytes.count
        else { return nil }
        // The table of type identifiers, after the entries.
        position = Int(tableOffset)
        var types: [String] = []
        types.reserveCapacity(Int(typeCount))
        for _ in 0..<typeCount {
            guard let type = readString() else { return nil }
            types.append(type)
        }
        guard position == bytes.count else { return nil }
        var entries: [JournalHint.Entry] = []
        entries.reserveCapacity(Int(entryCount))
        position = JournalHint.headerSize
        previousOffset = 0
        previousSequence = 0
        for _ in 0..<entryCount {
            guard let entry = entry(types: types) else { return nil }
            entries.append(entry)
        }
        guard position == Int(tableOffset) else { return nil }
        return JournalHint(salt: salt, number: number, generation: generation, validEnd: Int64(bitPattern: validEnd), entries: entries)
    }

    private mutating func entry(types: [String]) -> JournalHint.Entry? {
        guard let tag = read(UInt8.self) else { return nil }
        if tag == 4 {
            guard let delta = readSigned(), let kindValue = read(UInt8.self), let kind = JournalFrame.Kind(rawValue: kindValue),
                  kind == .remove || kind == .retire || kind == .attempt,
                  let count = readVarint(), count <= UInt64(bytes.count), let body = readBytes(Int(count)) else { return nil }
            previousOffset = previousOffset &+ delta
            return .frame(offset: previousOffset, kind: kind, body: Data(body))
        }
        guard let kind = JournalHint.Record.Kind(rawValue: tag), let delta = readSigned(), let length = readVarint(),
              let flags = read(UInt8.self), let idBytes = readBytes(16), let sequenceDelta = readSigned(),
              let priority = readInt(), let type = readVarint(), type < UInt64(types.count),
              let attemptsInFlight = readInt() else { return nil }
        let offset = previousOffset &+ delta
        previousOffset = offset
        let sequence = previousSequence &+ UInt64(bitPattern: sequenceDelta)
        previousSequence = sequence
        var uuid: uuid_t = (0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0)
        withUnsafeMutableBytes(of: &uuid) { $0.copyMemory(from: idBytes) }
        let id = UUID(uuid: uuid)
        var fields = RecordFormat.IndexFields(
            id: id, enqueueSequence: sequence, priority: priority, typeIdentifier: types[Int(type)], attemptsInFlight: attemptsInFlight
        )
        fields.isPeriodic = flags & JournalHint.Flag.periodic != 0
        if flags & JournalHint.Flag.due != 0 {
            guard let due = readDouble() else { return nil }
            fields.dueDate = Date(timeIntervalSinceReferenceDate: due)
        }
        if flags & JournalHint.Flag.key != 0 {
            guard let key = readString() else { return nil }
            fields.idempotencyKey = key
        }
        var plain: RecordFormat.PlainFields?
        if flags & JournalHint.Flag.plain != 0 {
            guard let formatVersion = readVarint(), formatVersion <= UInt64(UInt16.max), let enqueuedAt = readDouble() else { return nil }
            var notBefore: Double?
            var nextAttemptAt: Double?
            if flags & JournalHint.Flag.notBefore != 0 {
                guard let value = readDouble() else { return nil }
                notBefore = value
            }
            if flags & JournalHint.Flag.nextAttemptAt != 0 {
                guard let value = readDouble() else { return nil }
                nextAttemptAt = value
            }
            guard let retries = readInt(), let attempts = readInt() else { return nil }
            plain = RecordFormat.PlainFields(
                key: UUIDBits(id), typeIdentifier: fields.typeIdentifier, formatVersion: Int(formatVersion), priority: priority,
                enqueueSequence: sequence, enqueuedAt: enqueuedAt, notBefore: notBefore, nextAttemptAt: nextAttemptAt,
                numberOfRetries: retries, numberOfAttempts: attempts, attemptsInFlight: attemptsInFlight
            )
        }
        guard let length = Int32(exactly: length) else { return nil }
        return .record(JournalHint.Record(kind: kind, offset: offset, length: length, fields: fields, plain: plain))
    }
}

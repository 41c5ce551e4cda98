import Foundation

// Reading only what the journal's index needs
// ===========================================
//
// Opening a journal indexes every record: its identifier, enqueue sequence, priority, type
// and the attempts in flight it counts. A full decode (checksum, structural verification,
// every field) costs as much again as the restore that follows, which decodes each record
// anyway. For a record inside a frame whose
// checksum verified — the bytes the writer wrote — `indexFields(of:)` walks the property
// list to those fields only. Every read is bounds-checked; anything unexpected returns
// nil and the caller decodes the record in full, which reports what is wrong. A record that
// passes here and fails its full decode later (a defect, or a checksum collision) is
// quarantined when it is loaded, as any undecodable record is.

extension RecordFormat {
    /// The fields of a record that the journal's index needs.
    package struct IndexFields: Equatable, Sendable {
        /// The record's identifier, read as the UUID it spells.
        package var id: UUID
        package var enqueueSequence: UInt64
        package var priority: Int
        /// The type, for counts by type from the index alone.
        package var typeIdentifier: String
        /// Attempts in flight the record itself counts (records of the journal count theirs in
        /// attempt frames: 0), for the count of running attempts.
        package var attemptsInFlight: Int
        /// When it may next start (``OperationRecord/dueDate``), for the next due date.
        package var dueDate: Date? = nil
        /// Whether it is a periodic operation's record, for counts of periodic series.
        package var isPeriodic = false
        /// The idempotency key it was added with, for repeated adds.
        package var idempotencyKey: String? = nil
    }

}

extension RecordFormat.IndexFields {
    /// The index fields of `record`, whose identifier spells `id`.
    package init(_ record: OperationRecord, id: UUID) {
        self.init(
            id: id, enqueueSequence: record.enqueueSequence, priority: record.priority, typeIdentifier: record.typeIdentifier,
            attemptsInFlight: record.attemptsInFlight, dueDate: record.dueDate, isPeriodic: record.isPeriodic,
            idempotencyKey: record.idempotencyKey
        )
    }
}

extension RecordFormat {
    /// The index fields of the record file `file`, read without verifying the rest of it, or
    /// nil when they cannot be read that way (see the comment above).
    package static func indexFields(of file: Data) -> IndexFields? {
        var typeIdentifiers: [String] = []
        return indexFields(of: file, typeIdentifiers: &typeIdentifiers)
    }

    /// The index fields of the record file `file`, as ``indexFields(of:)`` reads them, with the
    /// type identifier among `typeIdentifiers` (the same `String` is used; a new one is added,
    /// up to 64): a million records of a few types make no million strings.
    package static func indexFields(of file: Data, typeIdentifiers: inout [String]) -> IndexFields? {
        file.withUnsafeBytes { raw -> IndexFields? in
            let bytes = raw.bindMemory(to: UInt8.self)
            guard bytes.count > headerSize + 8 + 32, bytes.starts(withBytes: magic) else { return nil }
            let version = Int(read(bytes, 8, 2) ?? 0)
            guard OperationRecord.readableFormatVersions.contains(version) else { return nil }
            let body = UnsafeBufferPointer(rebasing: bytes[headerSize...])
            return PropertyListPeek(body).indexFields(version: version, typeIdentifiers: &typeIdentifiers)
        }
    }

    /// What building a record's operation reads of it again: its identifier, type and payload.
    package struct PayloadFields: Equatable, Sendable {
        package var id: UUID
        package var typeIdentifier: String
        package var payload: Data
    }

    /// The identifier, type and payload of the record file `file`, read without decoding the
    /// rest of it, or nil when they cannot be read that way (the caller decodes the record in
    /// full, which reports what is wrong). The record's checksum is verified unless
    /// `checksumVerified` says a frame's checksum covering it was (see ``decode(_:maximumSize:checksumVerified:)``).
    package static func payloadFields(of file: Data, checksumVerified: Bool) -> PayloadFields? {
        peekingBody(of: file, checksumVerified: checksumVerified) { peek, _ in peek.payloadFields() }
    }

    /// `read` of the property-list body of the record file `file` and its format version,
    /// when the header is whole and well formed (a readable version, no reserved bits, the
    /// body's length) and the body's checksum matches (unless `checksumVerified`); else nil.
    private static func peekingBody<Fields>(of file: Data, checksumVerified: Bool, _ read: (PropertyListPeek, Int) -> Fields?) -> Fields? {
        file.withUnsafeBytes { raw -> Fields? in
            let bytes = raw.bindMemory(to: UInt8.self)
            guard bytes.count > headerSize + 8 + 32, bytes.starts(withBytes: magic) else { return nil }
            let version = Int(Self.read(bytes, 8, 2) ?? 0)
            guard OperationRecord.readableFormatVersions.contains(version), Self.read(bytes, 10, 2) == 0,
                  Self.read(bytes, 12, 4) == UInt64(bytes.count - headerSize) else { return nil }
            let body = UnsafeBufferPointer(rebasing: bytes[headerSize...])
            guard checksumVerified || Self.read(bytes, 16, 4) == UInt64(CRC32.checksum(of: body)) else { return nil }
            return read(PropertyListPeek(body), version)
        }
    }

    /// The record file `file` without its payload, read without decoding the rest of it, when
    /// its body holds only the fields every record has (identifier, type, payload, priority,
    /// enqueue sequence and date, not-before and next-attempt dates, counts of retries and
    /// attempts, format version, and from version 5 on nothing else; an empty list of tags
    /// before it); nil otherwise, and the caller decodes the record in full, which also says
    /// what is wrong with a damaged one. The record's checksum is verified unless
    /// `checksumVerified` says a frame's checksum covering it was (see ``decode(_:maximumSize:checksumVerified:)``).
    ///
    /// A restore reads most records this way: it keeps no payload (each is read again when its
    /// operation is built), and the full decode's copy of the payload and check of the whole
    /// property list cost more than the rest of the read.
    ///
    /// ```swift
    /// let record = OperationRecord(typeIdentifier: "com.example.upload", payload: Data([1]), enqueueSequence: 1, enqueuedAt: Date())
    /// let file = try RecordFormat.encode(record)
    /// let plain = RecordFormat.plainRecord(of: file, checksumVerified: false)
    /// var expected = record
    /// expected.payload = Data()
    /// let same = plain == expected   // true
    /// ```
    package static func plainRecord(of file: Data, maximumSize: Int = defaultMaximumRecordSize, checksumVerified: Bool) -> OperationRecord? {
        var typeIdentifiers: [String] = []
        return plainFields(of: file, maximumSize: maximumSize, checksumVerified: checksumVerified, typeIdentifiers: &typeIdentifiers)?.record
    }

    /// The fields of a plain record (see ``plainRecord(of:maximumSize:checksumVerified:)``),
    /// its identifier as the bits of its UUID: no allocation for it, and none for a type
    /// identifier among `typeIdentifiers` (the same `String` is used; a new one is added, up
    /// to 64), so that a restore of a million records of a few types makes two strings, not
    /// two million.
    package static func plainFields(
        of file: Data, maximumSize: Int = defaultMaximumRecordSize, checksumVerified: Bool, typeIdentifiers: inout [String]
    ) -> PlainFields? {
        guard file.count <= maximumSize else { return nil }
        return peekingBody(of: file, checksumVerified: checksumVerified) { peek, version in
            peek.plainFields(version: version, typeIdentifiers: &typeIdentifiers)
        }
    }

    /// The fields of a record that has only the fields every record has (see
    /// ``plainFields(of:maximumSize:checksumVerified:typeIdentifiers:)``).
    package struct PlainFields: Equatable, Sendable {
        /// The record's identifier, as the bits of the UUID it spells in canonical form.
        package var key: UUIDBits
        package var typeIdentifier: String
        package var formatVersion: Int
        package var priority: Int
        package var enqueueSequence: UInt64
        /// Seconds since the reference date.
        package var enqueuedAt: Double
        package var notBefore: Double?
        package var nextAttemptAt: Double?
        package var numberOfRetries: Int
        package var numberOfAttempts: Int
        package var attemptsInFlight: Int

        /// The record's identifier.
        package var id: String { RecordIdentifier.string(of: key) }

        /// The record, without its payload.
        package var record: OperationRecord {
            OperationRecord.plain(
                formatVersion: formatVersion, id: id, typeIdentifier: typeIdentifier, priority: priority, enqueueSequence: enqueueSequence,
                enqueuedAt: Date(timeIntervalSinceReferenceDate: enqueuedAt), notBefore: notBefore.map(Date.init(timeIntervalSinceReferenceDate:)),
                numberOfRetries: numberOfRetries, numberOfAttempts: numberOfAttempts,
                nextAttemptAt: nextAttemptAt.map(Date.init(timeIntervalSinceReferenceDate:)), attemptsInFlight: attemptsInFlight
            )
        }

        /// When it may next start (``OperationRecord/dueDate``): the later of its dates.
        package var dueDate: Date? {
            OperationRecord.dueDate(notBefore: notBefore, nextAttemptAt: nextAttemptAt).map(Date.init(timeIntervalSinceReferenceDate:))
        }

        /// Its place in the run order (``OperationRecord/runOrder``).
        package var runOrder: RunOrder { RunOrder(priority: priority, enqueueSequence: enqueueSequence) }
    }

    fileprivate static func read(_ bytes: UnsafeBufferPointer<UInt8>, _ offset: Int, _ width: Int) -> UInt64? {
        guard offset >= 0, width >= 1, width <= 8, offset <= bytes.count - width else { return nil }
        return bytes.bigEndianValue(at: offset, width: width)
    }
}

/// A bounds-checked walk to a few top-level fields of a binary property list.
private struct PropertyListPeek {
    let bytes: UnsafeBufferPointer<UInt8>

    init(_ bytes: UnsafeBufferPointer<UInt8>) {
        self.bytes = bytes
    }

    func indexFields(version: Int, typeIdentifiers: inout [String]) -> RecordFormat.IndexFields? {
        guard let top = topDictionary() else { return nil }
        var id: UUID?
        var sequence: UInt64?
        var priority: Int?
        var formatVersion: Int?
        var typeIdentifier: String?
        var attemptsInFlight: Int?
        var notBefore: Double?
        var nextAttemptAt: Double?
        var isPeriodic = false
        var idempotencyKey: String?
        for index in 0..<top.count {
            guard let (key, valueOffset) = top.entry(index) else { return nil }
            switch key {
            case .id:
                id = identifier(at: valueOffset)
            case .enqueueSequence:
                sequence = unsignedInteger(at: valueOffset)
            case .priority:
                guard let value = signedInteger(at: valueOffset) else { return nil }
                priority = Int(exactly: value)
            case .formatVersion:
                guard let value = signedInteger(at: valueOffset) else { return nil }
                formatVersion = Int(exactly: value)
            case .typeIdentifier:
                // A type identifier that is not ASCII is read by the full decode.
                typeIdentifier = asciiString(at: valueOffset, interningIn: &typeIdentifiers)
            case .attemptsInFlight:
                guard let value = signedInteger(at: valueOffset) else { return nil }
                attemptsInFlight = Int(exactly: value)
            case .notBefore:
                guard let value = date(at: valueOffset) else { return nil }
                notBefore = value
            case .nextAttemptAt:
                guard let value = date(at: valueOffset) else { return nil }
                nextAttemptAt = value
            case .idempotencyKey:
                // A key that is not ASCII, or longer than 256 bytes, is read by the full decode.
                guard let value = asciiString(at: valueOffset) else { return nil }
                idempotencyKey = value
            case .repeatInterval:
                // Read from version 4 on (an earlier record's field is ignored, as the decoder does).
                isPeriodic = version >= 4
            default:
                continue
            }
        }
        // From version 5 on, a priority or a count of attempts in flight of 0 is left out.
        if priority == nil, version >= 5 { priority = 0 }
        if attemptsInFlight == nil, version >= 5 { attemptsInFlight = 0 }
        guard let id, let sequence, let priority, let typeIdentifier,
              let attemptsInFlight, formatVersion == version else { return nil }
        let due = OperationRecord.dueDate(notBefore: notBefore, nextAttemptAt: nextAttemptAt)
        return RecordFormat.IndexFields(
            id: id, enqueueSequence: sequence, priority: priority, typeIdentifier: typeIdentifier, attemptsInFlight: attemptsInFlight,
            dueDate: due.map(Date.init(timeIntervalSinceReferenceDate:)), isPeriodic: isPeriodic, idempotencyKey: idempotencyKey
        )
    }

    func payloadFields() -> RecordFormat.PayloadFields? {
        guard let top = topDictionary() else { return nil }
        var id: UUID?
        var typeIdentifier: String?
        var payload: Data?
        for index in 0..<top.count {
            guard let (key, valueOffset) = top.entry(index) else { return nil }
            switch key {
            case .id:
                // (A key twice, or anything unexpected: the full decode says what is wrong.)
                guard id == nil else { return nil }
                id = identifier(at: valueOffset)
            case .typeIdentifier:
                // A type identifier that is not ASCII is read by the full decode.
                guard typeIdentifier == nil else { return nil }
                typeIdentifier = asciiString(at: valueOffset)
            case .payload:
                guard payload == nil, let (length, start) = container(at: valueOffset, marker: 0x40),
                      start + length <= bytes.count else { return nil }
                payload = Data(UnsafeBufferPointer(rebasing: bytes[start..<(start + length)]))
            default:
                continue
            }
        }
        guard let id, let typeIdentifier, let payload else { return nil }
        return RecordFormat.PayloadFields(id: id, typeIdentifier: typeIdentifier, payload: payload)
    }

    func plainFields(version: Int, typeIdentifiers: inout [String]) -> RecordFormat.PlainFields? {
        guard let top = topDictionary() else { return nil }
        // The fields present, and those read with a value of the right form: a key twice, or
        // a value of another form, is left to the full decode.
        var present: UInt32 = 0
        var readable: UInt32 = 0
        func note<Value>(_ value: Value?, _ key: Key) -> Value? {
            if value != nil { readable |= key.bit }
            return value
        }
        var identifier: UUIDBits?
        var typeIdentifier: String?
        var formatVersion: Int64?
        var payload: (count: Int, references: Int)?
        var sequence: UInt64?
        var enqueuedAt: Double?
        var priority: Int64?
        var retries: Int64?
        var attempts: Int64?
        var inFlight: Int64?
        var emptyTags: Bool?
        var notBefore: Double?
        var nextAttemptAt: Double?
        for index in 0..<top.count {
            guard let (key, at) = top.entry(index), present & key.bit == 0 else { return nil }
            present |= key.bit
            switch key {
            case .formatVersion: formatVersion = note(signedInteger(at: at), key)
            case .id: identifier = note(identifierBits(at: at), key)
            case .typeIdentifier: typeIdentifier = note(asciiString(at: at, interningIn: &typeIdentifiers), key)
            case .payload: payload = note(container(at: at, marker: 0x40).flatMap { $0.references + $0.count <= bytes.count ? $0 : nil }, key)
            case .enqueueSequence: sequence = note(unsignedInteger(at: at), key)
            case .enqueuedAt: enqueuedAt = note(date(at: at), key)
            case .priority: priority = note(signedInteger(at: at), key)
            case .numberOfRetries: retries = note(signedInteger(at: at), key)
            case .numberOfAttempts: attempts = note(signedInteger(at: at), key)
            case .attemptsInFlight: inFlight = note(signedInteger(at: at), key)
            // An empty list only (a record with tags is read in full).
            case .tags: emptyTags = note(container(at: at, marker: 0xA0).flatMap { $0.count == 0 ? true : nil }, key)
            case .notBefore: notBefore = note(date(at: at), key)
            case .nextAttemptAt: nextAttemptAt = note(date(at: at), key)
            // A rare field (or one this build does not know): the full decode reads it.
            case .idempotencyKey, .repeatInterval, .other: return nil
            }
        }
        guard readable == present else { return nil }
        let hasTags = emptyTags != nil
        let hasPayload = payload != nil
        // Up to version 4 the fields with a default are always written; from 5 on, left out.
        if version < 5 {
            guard priority != nil, hasTags, retries != nil, attempts != nil, inFlight != nil else { return nil }
        }
        guard formatVersion == Int64(version), let identifier, let typeIdentifier, hasPayload, let sequence, let enqueuedAt,
              let priority = Int(exactly: priority ?? 0), let retries = Int(exactly: retries ?? 0),
              let attempts = Int(exactly: attempts ?? 0), let inFlight = Int(exactly: inFlight ?? 0) else { return nil }
        return RecordFormat.PlainFields(
            key: identifier, typeIdentifier: typeIdentifier, formatVersion: version, priority: priority, enqueueSequence: sequence,
            enqueuedAt: enqueuedAt, notBefore: notBefore, nextAttemptAt: nextAttemptAt, numberOfRetries: retries,
            numberOfAttempts: attempts, attemptsInFlight: inFlight
        )
    }

    /// The top object of the property list, a dictionary: how to find an object, the number
    /// of its entries, where its references start and their width.
    private struct TopDictionary {
        let peek: PropertyListPeek
        let objectCount: UInt64
        let table: UInt64
        let offsetSize: Int
        let trailer: Int
        var count = 0
        var references = 0
        let referenceSize: Int

        /// The key of entry `index` (ASCII, as every key of a record is) and where its value
        /// starts, when both are within bounds.
        func entry(_ index: Int) -> (key: Key, valueOffset: Int)? {
            guard let keyReference = peek.read(references + index * referenceSize, referenceSize),
                  let valueReference = peek.read(references + (count + index) * referenceSize, referenceSize),
                  let keyOffset = offset(keyReference), let key = peek.key(at: keyOffset),
                  let valueOffset = offset(valueReference) else { return nil }
            return (key, valueOffset)
        }

        /// Where object `object` starts, when the offset table says so within bounds.
        func offset(_ object: UInt64) -> Int? {
            guard object < objectCount else { return nil }
            let position = Int(table) + Int(object) * offsetSize
            guard position + offsetSize <= trailer, let offset = peek.read(position, offsetSize), offset < table else { return nil }
            return Int(offset)
        }
    }

    /// The first 8 bytes of a binary property list, `bplist00`.
    static let binaryPropertyListMagic: [UInt8] = Array("bplist00".utf8)

    private func topDictionary() -> TopDictionary? {
        guard bytes.count >= 8 + 32, bytes.starts(withBytes: PropertyListPeek.binaryPropertyListMagic) else { return nil }
        let trailer = bytes.count - 32
        guard let offsetSize = read(trailer + 6, 1).map(Int.init), let referenceSize = read(trailer + 7, 1).map(Int.init),
              let objectCount = read(trailer + 8, 8), let top = read(trailer + 16, 8), let table = read(trailer + 24, 8),
              (1...8).contains(offsetSize), (1...8).contains(referenceSize), top < objectCount,
              objectCount <= UInt64(bytes.count), table <= UInt64(trailer) else { return nil }
        var dictionary = TopDictionary(peek: self, objectCount: objectCount, table: table, offsetSize: offsetSize, trailer: trailer, referenceSize: referenceSize)
        guard let start = dictionary.offset(top), let (count, references) = container(at: start, marker: 0xD0) else { return nil }
        dictionary.count = count
        dictionary.references = references
        return dictionary
    }

    fileprivate func read(_ offset: Int, _ width: Int) -> UInt64? {
        RecordFormat.read(bytes, offset, width)
    }

    /// The element count of the container object at `offset` with `marker` (0xA0 or 0xD0),
    /// and where its references start.
    private func container(at offset: Int, marker: UInt8) -> (count: Int, references: Int)? {
        guard offset < bytes.count, bytes[offset] & 0xF0 == marker else { return nil }
        let low = Int(bytes[offset] & 0x0F)
        guard low == 0x0F else { return (low, offset + 1) }
        guard offset + 1 < bytes.count, bytes[offset + 1] & 0xF0 == 0x10 else { return nil }
        let width = 1 << Int(bytes[offset + 1] & 0x0F)
        guard width <= 8, let count = read(offset + 2, width), count < UInt64(bytes.count) else { return nil }
        return (Int(count), offset + 2 + width)
    }

    /// The library-generated identifier the ASCII string object at `offset` spells, read
    /// without making a `String`.
    private func identifier(at offset: Int) -> UUID? {
        identifierBits(at: offset)?.uuid
    }

    /// The bits of the library-generated identifier the ASCII string object at `offset`
    /// spells (canonical, uppercase, as `RecordIdentifier.isValid`).
    private func identifierBits(at offset: Int) -> UUIDBits? {
        stringBytes(at: offset).flatMap { $0.count == 36 ? RecordIdentifier.bits(utf8: $0) : nil }
    }

    /// A key of a record's top dictionary that a peek reads, or `other`.
    enum Key: UInt8 {
        case id, tags, payload, priority, notBefore, enqueuedAt, formatVersion, nextAttemptAt, typeIdentifier, idempotencyKey
        case repeatInterval, enqueueSequence, numberOfRetries, numberOfAttempts, attemptsInFlight, other

        /// The key's own bit, for sets of keys.
        var bit: UInt32 { 1 << UInt32(rawValue) }

        /// The key the ASCII `bytes` spell: compared as bytes, by length first, with no
        /// `String` made (a peek reads about ten keys a record).
        init(_ bytes: UnsafeBufferPointer<UInt8>) {
            // (memcmp: the generic `elementsEqual` compares a byte at a time, and was a tenth
            // of a restore's peeking)
            func spells(_ name: StaticString) -> Bool {
                name.utf8CodeUnitCount == bytes.count && memcmp(name.utf8Start, bytes.baseAddress!, bytes.count) == 0
            }
            switch bytes.count {
            case 2: self = spells("id") ? .id : .other
            case 4: self = spells("tags") ? .tags : .other
            case 7: self = spells("payload") ? .payload : .other
            case 8: self = spells("priority") ? .priority : .other
            case 9: self = spells("notBefore") ? .notBefore : .other
            case 10: self = spells("enqueuedAt") ? .enqueuedAt : .other
            case 13: self = spells("formatVersion") ? .formatVersion : spells("nextAttemptAt") ? .nextAttemptAt : .other
            case 14:
                self = spells("typeIdentifier") ? .typeIdentifier : spells("idempotencyKey") ? .idempotencyKey
                    : spells("repeatInterval") ? .repeatInterval : .other
            case 15: self = spells("enqueueSequence") ? .enqueueSequence : spells("numberOfRetries") ? .numberOfRetries : .other
            case 16: self = spells("numberOfAttempts") ? .numberOfAttempts : spells("attemptsInFlight") ? .attemptsInFlight : .other
            default: self = .other
            }
        }
    }

    /// The key the ASCII string object at `offset` spells (nil for one that is not an ASCII
    /// string of at most 256 bytes, as ``asciiString(at:)``).
    fileprivate func key(at offset: Int) -> Key? {
        guard let characters = stringBytes(at: offset) else { return nil }
        let key = Key(characters)
        guard key != .other || characters.allSatisfy({ $0 < 0x80 }) else { return nil }
        return key
    }

    /// The bytes of the ASCII string object at `offset`, when it is one of at most 256
    /// bytes within bounds (not checked to be ASCII).
    private func stringBytes(at offset: Int) -> UnsafeBufferPointer<UInt8>? {
        guard let (count, start) = container(at: offset, marker: 0x50), count <= 256, start + count <= bytes.count else { return nil }
        return UnsafeBufferPointer(rebasing: bytes[start..<(start + count)])
    }

    /// The ASCII string object at `offset` (keys and identifiers are ASCII).
    private func asciiString(at offset: Int) -> String? {
        guard let characters = stringBytes(at: offset), characters.allSatisfy({ $0 < 0x80 }) else { return nil }
        return String(decoding: characters, as: UTF8.self)
    }

    /// The ASCII string object at `offset`, as the element of `known` with the same
    /// characters when there is one (no allocation), else as a new string added to `known`
    /// (up to 64 of them).
    private func asciiString(at offset: Int, interningIn known: inout [String]) -> String? {
        guard let characters = stringBytes(at: offset) else { return nil }
        for name in known {
            var name = name
            if name.withUTF8({ $0.count == characters.count && memcmp($0.baseAddress!, characters.baseAddress!, $0.count) == 0 }) { return name }
        }
        guard characters.allSatisfy({ $0 < 0x80 }) else { return nil }
        let name = String(decoding: characters, as: UTF8.self)
        if known.count < 64 { known.append(name) }
        return name
    }

    /// The integer object at `offset` read as signed (1, 2 and 4 bytes are non-negative; 8 is
    /// two's complement), or nil when it is not an integer of up to 8 bytes.
    private func signedInteger(at offset: Int) -> Int64? {
        guard offset < bytes.count, bytes[offset] & 0xF0 == 0x10 else { return nil }
        let width = 1 << Int(bytes[offset] & 0x0F)
        guard width <= 8, let value = read(offset + 1, width) else { return nil }
        return width == 8 ? Int64(bitPattern: value) : Int64(value)
    }

    /// The date object at `offset`, in seconds since the reference date, or nil when it is not
    /// a date of a finite value.
    private func date(at offset: Int) -> Double? {
        guard offset < bytes.count, bytes[offset] == 0x33, let bits = read(offset + 1, 8) else { return nil }
        let value = Double(bitPattern: bits)
        return value.isFinite ? value : nil
    }

    /// The non-negative integer object at `offset`, including the 16-byte form of values
    /// above `Int64.max`.
    private func unsignedInteger(at offset: Int) -> UInt64? {
        guard offset < bytes.count, bytes[offset] & 0xF0 == 0x10 else { return nil }
        if bytes[offset] == 0x14 {
            guard read(offset + 1, 8) == 0 else { return nil }
            return read(offset + 9, 8)
        }
        guard let value = signedInteger(at: offset), value >= 0 else { return nil }
        return UInt64(value)
    }
}

extension UnsafeBufferPointer<UInt8> {
    /// Whether the buffer begins with `prefix`, compared with one `memcmp` (the generic
    /// `elementsEqual` compares a byte at a time, once or twice for every record a peek reads).
    func starts(withBytes prefix: [UInt8]) -> Bool {
        prefix.isEmpty || count >= prefix.count && prefix.withUnsafeBufferPointer { memcmp(baseAddress!, $0.baseAddress!, prefix.count) == 0 }
    }
}

import Foundation

// Record file format, version 1
// =============================
//
// A record file is a 20-byte header followed by a body:
//
//     offset  size  field
//     0       8     magic: 0x89 'O' 'P' 'R' 0x0D 0x0A 0x1A 0x0A
//     8       2     format version, big-endian (1 to 5; see `OperationRecord` for what each adds)
//     10      2     reserved, must be 0
//     12      4     body length in bytes, big-endian; must equal file size - 20
//     16      4     CRC-32 (IEEE, as zlib) of the body, big-endian
//     20      n     body: a binary property list (bplist00) holding one dictionary,
//                   the fields of `OperationRecord` (see that type for the keys)
//
// The magic and the version field keep their place in every future version; everything
// after them may change with the version.
//
// Reading never hands unverified bytes to a decoder: the file size is checked against the
// cap (fstat, before reading), then magic, version, reserved bits, length and CRC-32, and
// then `BinaryPropertyListReader` validates the body's structure (trailer, offsets,
// references, counts, markers, depth, cycles) before it builds values. The payload inside
// a record is a binary property list too and goes through the same validator before
// `PropertyListDecoder` sees it.
//
// Why a binary body. Measured on Linux, Swift 6.3.1, release build, a typical payload
// (a URL string, a few integers, a Date, two tags, 64 bytes of data) and its envelope,
// encoded with `PropertyListEncoder` and decoded with `PropertyListDecoder`, 20,000 rounds:
//
//                   payload bytes   record bytes   encode+decode, payload+record
//     XML                  669          1,899           86 µs
//     binary               273            739           75 µs
//
// Binary is 2.5 times smaller and a little faster, and above all it stores a `Date` exactly
// (XML keeps whole seconds only, so a payload with fractional seconds would not read back
// equal). The cost of binary is the structural validator, which the XML path would need
// too (UTF-8, nesting, integer syntax) to avoid its own crashes.
//
// The envelope itself is written and read by this package's own small binary property-list
// writer and reader rather than the Foundation coders, so every string, including "$null"
// (which the Foundation plist coders on Linux turn into nil), reads back exactly.

/// Encodes and decodes record files and payloads; see the format description at the top of
/// this file.
package enum RecordFormat {
    /// The magic bytes at the start of every record file.
    package static let magic: [UInt8] = [0x89, 0x4F, 0x50, 0x52, 0x0D, 0x0A, 0x1A, 0x0A]
    /// The size of the version 1 header in bytes.
    package static let headerSize = 20
    /// The default cap on the size of one record file: 1 MiB.
    package static let defaultMaximumRecordSize = 1 << 20

    // MARK: Record files

    /// The bytes of the record file for `record`.
    ///
    /// - Throws: ``PersistenceError/Code/recordTooLarge`` when the file would exceed
    ///   `maximumSize`, ``PersistenceError/Code/payloadDoesNotRoundTrip`` when a field would
    ///   not read back equal.
    /// - Parameter formatVersion: the format version to write: the journal writes
    ///   ``OperationRecord/journalFormatVersion``; `nil` (the default), for a file of the
    ///   one-file-per-record layout, writes the record's
    ///   ``OperationRecord/requiredFormatVersion``, the lowest version that holds it, whatever
    ///   its ``OperationRecord/formatVersion`` says.
    package static func encode(_ record: OperationRecord, maximumSize: Int = defaultMaximumRecordSize, formatVersion: Int? = nil) throws -> Data {
        var record = record
        record.formatVersion = formatVersion ?? record.requiredFormatVersion
        precondition(
            OperationRecord.readableFormatVersions.contains(record.formatVersion) && record.formatVersion >= record.requiredFormatVersion,
            "format version \(record.formatVersion) cannot hold this record"
        )
        guard OperationRecord.isValidIdentifier(record.id) else {
            throw PersistenceError(.corruptRecord, "Record identifier \"\(record.id)\" is not a library-generated UUID.")
        }
        let value = record.propertyListValue
        let body = BinaryPropertyListWriter.data(for: value)
        let size = headerSize + body.count
        guard size <= maximumSize else {
            throw PersistenceError(
                .recordTooLarge,
                "The record of type \"\(record.typeIdentifier)\" needs \(size) bytes, more than the maximum record size of \(maximumSize) bytes. Store large data in a file of your own and put its location in the payload, or raise the maximum record size."
            )
        }
        // The header built whole, then one append of the body (byte by byte appends to a
        // `Data` cost more than the rest of the header).
        var header = magic
        header.reserveCapacity(headerSize)
        header.appendBigEndian(UInt64(record.formatVersion), width: 2)
        header.appendBigEndian(0, width: 2)
        header.appendBigEndian(UInt64(body.count), width: 4)
        header.appendBigEndian(UInt64(CRC32.checksum(of: body)), width: 4)
        var file = Data(capacity: size)
        file.append(contentsOf: header)
        file.append(body)
        // What is stored must read back the same: prove it now rather than at the next launch.
        // The bytes of a property list read back exactly by construction (every string, date
        // and integer; the golden-file and fuzzing tests hold the writer and the reader to
        // it), so the check is of what can drop a field: the mapping of the record to its
        // property list and back, in its format version.
        let decoded = try? OperationRecord(propertyListValue: value, headerVersion: record.formatVersion)
        guard decoded == record else {
            throw PersistenceError(
                .payloadDoesNotRoundTrip,
                "The record of type \"\(record.typeIdentifier)\" would not read back equal to what was written, so it was not stored."
            )
        }
        return file
    }

    /// Verifies the bytes of a record file and decodes the record.
    ///
    /// - Parameter checksumVerified: The bytes are the body of a journal frame whose own
    ///   checksum, which covers them all, was verified just now: the record's checksum is not
    ///   computed a second time. Its structure is verified all the same.
    /// - Throws: ``PersistenceError/Code/corruptRecord`` or
    ///   ``PersistenceError/Code/unsupportedFormatVersion``, with the reason in the message.
    package static func decode(_ file: Data, maximumSize: Int = defaultMaximumRecordSize, checksumVerified: Bool = false) throws -> OperationRecord {
        guard file.count <= maximumSize else {
            throw corrupt("file is \(file.count) bytes, more than the maximum record size of \(maximumSize) bytes")
        }
        guard file.count >= magic.count + 2 else { throw corrupt("file too short for a record header") }
        guard file.prefix(magic.count).elementsEqual(magic) else { throw corrupt("wrong magic bytes") }
        let version = readBigEndian(file, at: 8, width: 2)
        guard OperationRecord.readableFormatVersions.contains(Int(version)) else {
            if version == 0 { throw corrupt("format version 0 does not exist") }
            throw PersistenceError(
                .unsupportedFormatVersion,
                "The record was written in format version \(version); this library reads versions \(OperationRecord.readableFormatVersions.lowerBound) to \(OperationRecord.currentFormatVersion) only. Open the store with a newer version of the library."
            )
        }
        guard file.count >= headerSize else { throw corrupt("file too short for a record header") }
        guard readBigEndian(file, at: 10, width: 2) == 0 else { throw corrupt("reserved header bits are set") }
        let length = readBigEndian(file, at: 12, width: 4)
        guard length == UInt64(file.count - headerSize) else {
            throw corrupt("header says the body has \(length) bytes, the file holds \(file.count - headerSize)")
        }
        let body = file[(file.startIndex + headerSize)..<file.endIndex]
        guard checksumVerified || readBigEndian(file, at: 16, width: 4) == UInt64(CRC32.checksum(of: body)) else {
            throw corrupt("checksum mismatch")
        }
        let values: [PropertyListValue?]?
        do {
            values = try BinaryPropertyListReader.topLevelValues(from: body, forKeys: OperationRecord.Fields.keyTable)
        } catch {
            throw corrupt("invalid property list body: \(error.reason)")
        }
        guard let values else { throw corrupt("the body is not a dictionary") }
        return try OperationRecord(fieldValues: values, headerVersion: Int(version))
    }

    // MARK: Payloads

    /// Encodes a payload for ``OperationRecord/payload`` (with ``PayloadEncoder``, as a binary
    /// property list `PropertyListDecoder` reads) and proves it reads back equal.
    ///
    /// Equal means `==` for an `Equatable` payload. Otherwise, or when `==` says the two
    /// differ, both are compared through a canonical JSON form (sorted keys), which costs
    /// about as much as the decoding itself.
    ///
    /// - Throws: ``PersistenceError/Code/payloadNotEncodable`` when encoding throws,
    ///   ``PersistenceError/Code/payloadDoesNotRoundTrip`` when decoding what was encoded does
    ///   not give an equal value.
    package static func encodePayload<Payload: Codable>(_ payload: Payload) throws -> Data {
        let data: Data
        let value: PropertyListValue
        do {
            value = try PayloadEncoder().encode(PayloadBox(value: payload))
            data = BinaryPropertyListWriter.data(for: value)
        } catch {
            throw PersistenceError(
                .payloadNotEncodable,
                "The payload of type \(Payload.self) could not be encoded: \(error). Check its encode(to:) implementation.",
                underlyingError: error
            )
        }
        let decoded: Payload
        do {
            // The bytes read back as exactly `value` (the writer and reader are held to that by
            // the golden-file and fuzzing tests), so the value is decoded without parsing them;
            // what this package's decoder refuses, Foundation's decides from the bytes.
            if let box = try? PayloadDecoder(value: value).decode(PayloadBox<Payload>.self) {
                decoded = box.value
            } else {
                decoded = try decodePayload(Payload.self, from: data)
            }
        } catch {
            throw PersistenceError(
                .payloadDoesNotRoundTrip,
                "The payload of type \(Payload.self) does not read back after encoding, so it was not stored: \(error). Property lists cannot hold some values (for example the string \"$null\" or very deep nesting); change how the payload encodes them.",
                underlyingError: error
            )
        }
        if isEqual(payload, decoded) == true { return data }
        let original: Data
        let reread: Data
        do {
            original = try canonicalForm(of: payload)
            reread = try canonicalForm(of: decoded)
        } catch {
            throw PersistenceError(
                .payloadNotEncodable,
                "The payload of type \(Payload.self) could not be compared after encoding: \(error).",
                underlyingError: error
            )
        }
        guard original == reread else {
            throw PersistenceError(
                .payloadDoesNotRoundTrip,
                "The payload of type \(Payload.self) would read back different from what was stored, so it was not stored. Property lists cannot hold some values exactly (for example the string \"$null\"); change how the payload encodes them."
            )
        }
        return data
    }

    /// Verifies encoded payload bytes and decodes them (with ``PayloadDecoder``, or
    /// `PropertyListDecoder` when that refuses them).
    ///
    /// - Throws: ``PersistenceError/Code/corruptRecord`` when the bytes fail verification or
    ///   decoding.
    package static func decodePayload<Payload: Decodable>(_ type: Payload.Type, from data: Data) throws -> Payload {
        let value: PropertyListValue
        do {
            value = try BinaryPropertyListReader.value(from: data)
        } catch {
            throw corrupt("invalid payload property list: \(error.reason)")
        }
        // This package's decoder first, by Foundation's rules and several times faster; what it
        // refuses goes to Foundation's, whose verdict stands.
        if let decoded = try? PayloadDecoder(value: value).decode(PayloadBox<Payload>.self) {
            return decoded.value
        }
        do {
            return try PropertyListDecoder().decode(PayloadBox<Payload>.self, from: data).value
        } catch {
            throw PersistenceError(
                .corruptRecord,
                "The payload could not be decoded as \(Payload.self): \(error).",
                underlyingError: error
            )
        }
    }

    // MARK: Helpers

    /// `lhs == rhs` when the payload type is `Equatable`, else `nil`.
    private static func isEqual<Payload>(_ lhs: Payload, _ rhs: Payload) -> Bool? {
        guard let lhs = lhs as? any Equatable else { return nil }
        return lhs.isEqual(toValue: rhs)
    }

    private static func canonicalForm<Payload: Encodable>(of payload: Payload) throws -> Data {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys]
        encoder.dateEncodingStrategy = .deferredToDate
        encoder.dataEncodingStrategy = .base64
        encoder.nonConformingFloatEncodingStrategy = .convertToString(
            positiveInfinity: "+infinity", negativeInfinity: "-infinity", nan: "nan"
        )
        return try encoder.encode(PayloadBox(value: payload))
    }

    private static func corrupt(_ reason: String) -> PersistenceError {
        PersistenceError(.corruptRecord, "The record file is corrupt (\(reason)); it cannot be read.")
    }

    private static func readBigEndian(_ data: Data, at offset: Int, width: Int) -> UInt64 {
        var value: UInt64 = 0
        for index in 0..<width {
            value = value << 8 | UInt64(data[data.startIndex + offset + index])
        }
        return value
    }
}

/// The keyed wrapper every payload is encoded in, because property lists need a container at
/// the top level.
private struct PayloadBox<Value> {
    var value: Value
}

extension PayloadBox: Encodable where Value: Encodable {}
extension PayloadBox: Decodable where Value: Decodable {}

private extension Equatable {
    /// Whether `other` is a value of this type equal to this one.
    func isEqual(toValue other: Any) -> Bool {
        guard let other = other as? Self else { return false }
        return self == other
    }
}

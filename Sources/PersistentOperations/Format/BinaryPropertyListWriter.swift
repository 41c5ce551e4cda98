import Foundation

/// Serialises a ``PropertyListValue`` as a standard binary property list (`bplist00`).
///
/// The output is an ordinary binary property list that `PropertyListSerialization` and
/// `plutil` read; it is always accepted by ``BinaryPropertyListReader``. Objects are not
/// shared, and dictionary keys are written in sorted order so that equal values always
/// produce equal bytes. Everything is written into one buffer, each object once.
package enum BinaryPropertyListWriter {
    /// The bytes of `value` as a binary property list.
    package static func data(for value: PropertyListValue) -> Data {
        let (objectCount, objectBytes) = measure(value)
        // The header, the objects, the offset table and the trailer, at most: the buffer is
        // never grown.
        let capacity = 8 + objectBytes + 8 * objectCount + 32
        var writer = Writer(referenceSize: byteWidth(for: UInt64(objectCount)), objectCount: objectCount, capacity: capacity)
        writer.output.append(contentsOf: Array("bplist00".utf8))
        writer.append(value)
        var output = writer.output
        let offsetTableOffset = UInt64(output.count)
        let offsetSize = byteWidth(for: offsetTableOffset)
        for offset in writer.offsets {
            appendBigEndian(UInt64(offset), width: offsetSize, to: &output)
        }
        output.append(contentsOf: [0, 0, 0, 0, 0, 0])  // unused, sort version
        output.append(UInt8(offsetSize))
        output.append(UInt8(writer.referenceSize))
        appendBigEndian(UInt64(objectCount), width: 8, to: &output)
        appendBigEndian(0, width: 8, to: &output)  // top object
        appendBigEndian(offsetTableOffset, width: 8, to: &output)
        return Data(output)
    }

    /// The number of objects of `value` and an upper bound of the bytes they take: a marker
    /// with its count takes at most 10 bytes, a reference is counted as 8, and a string that
    /// is not ASCII (written as UTF-16) at most two bytes for each of its UTF-8 bytes.
    private static func measure(_ value: PropertyListValue) -> (objects: Int, bytes: Int) {
        switch value {
        case .array(let elements):
            return elements.reduce((1, 10 + 8 * elements.count)) { total, element in
                let (objects, bytes) = measure(element)
                return (total.0 + objects, total.1 + bytes)
            }
        case .dictionary(let entries):
            return entries.reduce((1 + entries.count, 10 + 16 * entries.count)) { total, entry in
                let (objects, bytes) = measure(entry.value)
                return (total.0 + objects, total.1 + bytes + 10 + 2 * entry.key.utf8.count)
            }
        case .data(let data):
            return (1, 10 + data.count)
        case .string(let string):
            return (1, 10 + 2 * string.utf8.count)
        case .unsignedInteger:
            return (1, 17)
        default:
            return (1, 9)
        }
    }

    private static func count(_ value: PropertyListValue) -> Int {
        switch value {
        case .array(let elements):
            return elements.reduce(1) { $0 + count($1) }
        case .dictionary(let entries):
            return entries.values.reduce(1 + entries.count) { $0 + count($1) }
        default:
            return 1
        }
    }

    /// Writes objects into one buffer, in pre-order (the top object is 0, each container
    /// before its children, a dictionary's keys before its values): the layout whose bytes
    /// the golden record files pin down.
    private struct Writer {
        let referenceSize: Int
        var output: [UInt8] = []
        var offsets: [Int] = []

        init(referenceSize: Int, objectCount: Int, capacity: Int) {
            self.referenceSize = referenceSize
            offsets.reserveCapacity(objectCount)
            output.reserveCapacity(capacity)
        }

        /// Writes `value` and its children; returns the number of `value`.
        @discardableResult
        mutating func append(_ value: PropertyListValue) -> Int {
            let index = offsets.count
            offsets.append(output.count)
            switch value {
            case .array(let elements):
                appendMarker(0xA0, count: elements.count, to: &output)
                var next = index + 1
                for element in elements {
                    appendBigEndian(UInt64(next), width: referenceSize, to: &output)
                    next += count(element)
                }
                for element in elements { append(element) }
            case .dictionary(let entries):
                // Sorted as pairs: no key is looked up again.
                let pairs = entries.sorted { $0.key < $1.key }
                appendMarker(0xD0, count: pairs.count, to: &output)
                for position in pairs.indices {
                    appendBigEndian(UInt64(index + 1 + position), width: referenceSize, to: &output)
                }
                var next = index + 1 + pairs.count
                for pair in pairs {
                    appendBigEndian(UInt64(next), width: referenceSize, to: &output)
                    next += count(pair.value)
                }
                for pair in pairs { appendScalarObject(.string(pair.key)) }
                for pair in pairs { append(pair.value) }
            default:
                appendScalar(value)
            }
            return index
        }

        private mutating func appendScalarObject(_ value: PropertyListValue) {
            offsets.append(output.count)
            appendScalar(value)
        }

        private mutating func appendScalar(_ value: PropertyListValue) {
            switch value {
            case .bool(let flag):
                output.append(flag ? 0x09 : 0x08)
            case .integer(let integer):
                if integer < 0 {
                    output.append(0x13)
                    appendBigEndian(UInt64(bitPattern: integer), width: 8, to: &output)
                } else {
                    appendInteger(UInt64(integer), to: &output)
                }
            case .unsignedInteger(let integer):
                output.append(0x14)
                appendBigEndian(0, width: 8, to: &output)
                appendBigEndian(integer, width: 8, to: &output)
            case .real(let real):
                output.append(0x23)
                appendBigEndian(real.bitPattern, width: 8, to: &output)
            case .date(let date):
                output.append(0x33)
                appendBigEndian(date.timeIntervalSinceReferenceDate.bitPattern, width: 8, to: &output)
            case .data(let data):
                appendMarker(0x40, count: data.count, to: &output)
                output.append(contentsOf: data)
            case .string(let string):
                var string = string
                let isASCII = string.withUTF8 { utf8 in
                    guard utf8.allSatisfy({ $0 < 0x80 }) else { return false }
                    appendMarker(0x50, count: utf8.count, to: &output)
                    output.append(contentsOf: utf8)
                    return true
                }
                if !isASCII {
                    appendMarker(0x60, count: string.utf16.count, to: &output)
                    for unit in string.utf16 {
                        output.append(UInt8(truncatingIfNeeded: unit >> 8))
                        output.append(UInt8(truncatingIfNeeded: unit))
                    }
                }
            case .array, .dictionary:
                preconditionFailure("containers are written by append(_:)")
            }
        }
    }

    private static func appendMarker(_ kind: UInt8, count: Int, to bytes: inout [UInt8]) {
        if count < 15 {
            bytes.append(kind | UInt8(count))
        } else {
            bytes.append(kind | 0x0F)
            appendInteger(UInt64(count), to: &bytes)
        }
    }

    /// Appends a non-negative integer object in its smallest width (1, 2, 4 or 8 bytes).
    private static func appendInteger(_ value: UInt64, to bytes: inout [UInt8]) {
        let width = byteWidth(for: value)
        let exponent: UInt8 = width == 1 ? 0 : width == 2 ? 1 : width == 4 ? 2 : 3
        bytes.append(0x10 | exponent)
        appendBigEndian(value, width: width, to: &bytes)
    }

    private static func byteWidth(for value: UInt64) -> Int {
        if value <= 0xFF { return 1 }
        if value <= 0xFFFF { return 2 }
        if value <= 0xFFFF_FFFF { return 4 }
        return 8
    }

    private static func appendBigEndian(_ value: UInt64, width: Int, to bytes: inout [UInt8]) {
        // The widths of integers, references and offsets, in one append each.
        switch width {
        case 1: bytes.append(UInt8(truncatingIfNeeded: value))
        case 2: withUnsafeBytes(of: UInt16(truncatingIfNeeded: value).bigEndian) { bytes.append(contentsOf: $0) }
        case 4: withUnsafeBytes(of: UInt32(truncatingIfNeeded: value).bigEndian) { bytes.append(contentsOf: $0) }
        case 8: withUnsafeBytes(of: value.bigEndian) { bytes.append(contentsOf: $0) }
        default:
            for shift in stride(from: (width - 1) * 8, through: 0, by: -8) {
                bytes.append(UInt8(truncatingIfNeeded: value >> UInt64(shift)))
            }
        }
    }
}

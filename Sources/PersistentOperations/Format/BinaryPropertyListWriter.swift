import Foundation

/// Serialises a ``PropertyListValue`` as a standard binary property list (`bplist00`).
///
/// The output is an ordinary binary property list that `PropertyListSerialization` and
/// `plutil` read; it is always accepted by ``BinaryPropertyListReader``. Objects are not
/// shared, and dictionary keys are written in sorted order so that equal values always
/// produce equal bytes.
package enum BinaryPropertyListWriter {
    /// The bytes of `value` as a binary property list.
    package static func data(for value: PropertyListValue) -> Data {
        let objectCount = count(value)
        let referenceSize = byteWidth(for: UInt64(objectCount))
        var objects: [[UInt8]] = []
        objects.reserveCapacity(objectCount)
        _ = append(value, to: &objects, referenceSize: referenceSize)

        var output = Array("bplist00".utf8)
        var offsets: [UInt64] = []
        offsets.reserveCapacity(objects.count)
        for object in objects {
            offsets.append(UInt64(output.count))
            output.append(contentsOf: object)
        }
        let offsetTableOffset = UInt64(output.count)
        let offsetSize = byteWidth(for: offsetTableOffset)
        for offset in offsets {
            appendBigEndian(offset, width: offsetSize, to: &output)
        }
        output.append(contentsOf: [0, 0, 0, 0, 0, 0])  // unused, sort version
        output.append(UInt8(offsetSize))
        output.append(UInt8(referenceSize))
        appendBigEndian(UInt64(objects.count), width: 8, to: &output)
        appendBigEndian(0, width: 8, to: &output)  // top object
        appendBigEndian(offsetTableOffset, width: 8, to: &output)
        return Data(output)
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

    /// Appends `value` and its children in pre-order; returns the index of `value`.
    private static func append(_ value: PropertyListValue, to objects: inout [[UInt8]], referenceSize: Int) -> Int {
        let index = objects.count
        objects.append([])
        var bytes: [UInt8] = []
        switch value {
        case .bool(let flag):
            bytes = [flag ? 0x09 : 0x08]
        case .integer(let integer):
            if integer < 0 {
                bytes = [0x13]
                appendBigEndian(UInt64(bitPattern: integer), width: 8, to: &bytes)
            } else {
                appendInteger(UInt64(integer), to: &bytes)
            }
        case .unsignedInteger(let integer):
            bytes = [0x14]
            appendBigEndian(0, width: 8, to: &bytes)
            appendBigEndian(integer, width: 8, to: &bytes)
        case .real(let real):
            bytes = [0x23]
            appendBigEndian(real.bitPattern, width: 8, to: &bytes)
        case .date(let date):
            bytes = [0x33]
            appendBigEndian(date.timeIntervalSinceReferenceDate.bitPattern, width: 8, to: &bytes)
        case .data(let data):
            appendMarker(0x40, count: data.count, to: &bytes)
            bytes.append(contentsOf: data)
        case .string(let string):
            if string.utf8.allSatisfy({ $0 < 0x80 }) {
                appendMarker(0x50, count: string.utf8.count, to: &bytes)
                bytes.append(contentsOf: string.utf8)
            } else {
                let units = Array(string.utf16)
                appendMarker(0x60, count: units.count, to: &bytes)
                for unit in units {
                    appendBigEndian(UInt64(unit), width: 2, to: &bytes)
                }
            }
        case .array(let elements):
            appendMarker(0xA0, count: elements.count, to: &bytes)
            for element in elements {
                let reference = append(element, to: &objects, referenceSize: referenceSize)
                appendBigEndian(UInt64(reference), width: referenceSize, to: &bytes)
            }
        case .dictionary(let entries):
            appendMarker(0xD0, count: entries.count, to: &bytes)
            let keys = entries.keys.sorted()
            var valueReferences: [UInt8] = []
            for key in keys {
                let reference = append(.string(key), to: &objects, referenceSize: referenceSize)
                appendBigEndian(UInt64(reference), width: referenceSize, to: &bytes)
            }
            for key in keys {
                let reference = append(entries[key]!, to: &objects, referenceSize: referenceSize)
                appendBigEndian(UInt64(reference), width: referenceSize, to: &valueReferences)
            }
            bytes.append(contentsOf: valueReferences)
        }
        objects[index] = bytes
        return index
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
        for shift in stride(from: (width - 1) * 8, through: 0, by: -8) {
            bytes.append(UInt8(truncatingIfNeeded: value >> UInt64(shift)))
        }
    }
}

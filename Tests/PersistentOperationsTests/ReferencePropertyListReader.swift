import Foundation
@testable import PersistentOperations

/// The binary property-list reader as it was before it kept objects as positions rather than
/// values: one array, one string, one data object per object parsed. Kept as the oracle of
/// the differential test (`PropertyListReaderDifferentialTests`): the store's reader must
/// accept exactly what this one accepts, and read the same values from it.
enum ReferencePropertyListReader {
    static let maximumDepth = 256

    static func maximumValueCount(forByteCount byteCount: Int) -> Int {
        max(1 << 22, byteCount.multipliedReportingOverflow(by: 2).partialValue)
    }

    struct Rejection: Error, CustomStringConvertible, Sendable {
        let reason: String
        var description: String { reason }
    }

    static func value(from data: Data) throws(Rejection) -> PropertyListValue {
        let graph = try verifiedGraph(of: data)
        return graph.value(at: graph.topObject)
    }

    static func topLevelEntries(from data: Data) throws(Rejection) -> [(key: String, value: PropertyListValue)]? {
        let graph = try verifiedGraph(of: data)
        return graph.entries(at: graph.topObject)
    }

    private static func verifiedGraph(of data: Data) throws(Rejection) -> ObjectGraph {
        let graph = try ObjectGraph(bytes: [UInt8](data))
        try graph.verifyReachableStructure()
        return graph
    }
}

/// The parsed, bounds-checked objects of one binary property list.
private struct ObjectGraph {
    /// One object: a finished scalar value, or a container's references to other objects.
    enum Object {
        case scalar(PropertyListValue)
        case array([Int])
        case dictionary(keys: [Int], values: [Int])
    }

    let bytes: [UInt8]
    let objects: [Object]
    let topObject: Int

    init(bytes: [UInt8]) throws(ReferencePropertyListReader.Rejection) {
        let trailerSize = 32
        guard bytes.count >= 8 + 1 + trailerSize else { throw reject("too short for a binary property list") }
        guard bytes.starts(with: Array("bplist00".utf8)) else { throw reject("not a bplist00 binary property list") }
        let trailer = bytes.count - trailerSize
        let offsetSize = Int(bytes[trailer + 6])
        let referenceSize = Int(bytes[trailer + 7])
        let objectCount = Self.bigEndian(bytes, at: trailer + 8, width: 8)
        let topObject = Self.bigEndian(bytes, at: trailer + 16, width: 8)
        let tableOffset = Self.bigEndian(bytes, at: trailer + 24, width: 8)
        guard (1...8).contains(offsetSize), (1...8).contains(referenceSize) else {
            throw reject("invalid offset or reference width in trailer")
        }
        // Every object takes at least one byte, so the count is bounded by the object area.
        guard tableOffset >= 9, tableOffset <= UInt64(trailer) else { throw reject("offset table outside the file") }
        guard objectCount >= 1, objectCount <= tableOffset - 8 else { throw reject("object count inconsistent with size") }
        guard topObject < objectCount else { throw reject("top object out of range") }
        let (tableSize, overflow) = objectCount.multipliedReportingOverflow(by: UInt64(offsetSize))
        guard !overflow, tableOffset + tableSize <= UInt64(trailer) else { throw reject("offset table overruns the trailer") }

        let objectAreaEnd = Int(tableOffset)
        var objects: [Object] = []
        objects.reserveCapacity(Int(objectCount))
        for index in 0..<Int(objectCount) {
            let offset = Self.bigEndian(bytes, at: objectAreaEnd + index * offsetSize, width: offsetSize)
            guard offset >= 8, offset < tableOffset else { throw reject("object offset out of bounds") }
            var parser = ObjectParser(
                bytes: bytes, position: Int(offset), end: objectAreaEnd,
                referenceSize: referenceSize, objectCount: objectCount
            )
            objects.append(try parser.parseObject())
        }
        for object in objects {
            if case .dictionary(let keys, _) = object {
                try Self.checkKeys(keys, of: objects)
            }
        }
        self.bytes = bytes
        self.objects = objects
        self.topObject = Int(topObject)
    }

    /// Rejects a dictionary whose keys are not all strings, or not all different. A record's
    /// few keys are compared pair by pair (hashing each would cost more); many, through a set.
    private static func checkKeys(_ keys: [Int], of objects: [Object]) throws(ReferencePropertyListReader.Rejection) {
        var names: [String] = []
        names.reserveCapacity(keys.count)
        for key in keys {
            guard case .scalar(.string(let name)) = objects[key] else { throw reject("dictionary key is not a string") }
            names.append(name)
        }
        if names.count <= 32 {
            for index in names.indices {
                for other in names.indices where other > index && names[other] == names[index] {
                    throw reject("duplicate dictionary key")
                }
            }
        } else if Set(names).count != names.count {
            throw reject("duplicate dictionary key")
        }
    }

    /// The entries of the dictionary at `index`, in stored order, or `nil` when it is not a
    /// dictionary; only called after ``verifyReachableStructure()``.
    func entries(at index: Int) -> [(key: String, value: PropertyListValue)]? {
        guard case .dictionary(let keys, let values) = objects[index] else { return nil }
        var entries: [(key: String, value: PropertyListValue)] = []
        entries.reserveCapacity(keys.count)
        for (key, value) in zip(keys, values) {
            if case .scalar(.string(let name)) = objects[key] {
                entries.append((name, self.value(at: value)))
            }
        }
        return entries
    }

    /// Walks the graph from the top object without recursion: rejects cycles, deep nesting
    /// and graphs whose shared objects would expand to too many values.
    func verifyReachableStructure() throws(ReferencePropertyListReader.Rejection) {
        let maximumDepth = ReferencePropertyListReader.maximumDepth
        let maximumValues = ReferencePropertyListReader.maximumValueCount(forByteCount: bytes.count)
        // 0 = unvisited, 1 = on the current path, 2 = finished.
        var state = [UInt8](repeating: 0, count: objects.count)
        var height = [Int](repeating: 0, count: objects.count)
        var expandedCount = [Int](repeating: 0, count: objects.count)
        var path: [(object: Int, nextChild: Int)] = [(topObject, 0)]
        state[topObject] = 1
        while let (object, nextChild) = path.last {
            if let child = self.child(of: object, at: nextChild) {
                path[path.count - 1].nextChild += 1
                switch state[child] {
                case 1:
                    throw reject("reference cycle")
                case 2:
                    guard path.count + height[child] <= maximumDepth else { throw reject("nesting too deep") }
                default:
                    guard path.count < maximumDepth else { throw reject("nesting too deep") }
                    state[child] = 1
                    path.append((child, 0))
                }
                continue
            }
            var childHeight = 0
            var total = 1
            var childIndex = 0
            while let child = self.child(of: object, at: childIndex) {
                childIndex += 1
                childHeight = max(childHeight, height[child])
                total += expandedCount[child]
                guard total <= maximumValues else { throw reject("too many values once shared objects are expanded") }
            }
            height[object] = childHeight + 1
            expandedCount[object] = total
            state[object] = 2
            path.removeLast()
        }
    }

    /// The value tree under `index`; only called after ``verifyReachableStructure()``.
    func value(at index: Int) -> PropertyListValue {
        switch objects[index] {
        case .scalar(let value):
            return value
        case .array(let elements):
            return .array(elements.map { value(at: $0) })
        case .dictionary(let keys, let values):
            var dictionary: [String: PropertyListValue] = [:]
            dictionary.reserveCapacity(keys.count)
            for (key, value) in zip(keys, values) {
                if case .scalar(.string(let name)) = objects[key] {
                    dictionary[name] = self.value(at: value)
                }
            }
            return .dictionary(dictionary)
        }
    }

    /// The `position`th child of an object (dictionary keys first, then values), or `nil` past the end.
    private func child(of index: Int, at position: Int) -> Int? {
        switch objects[index] {
        case .scalar:
            return nil
        case .array(let elements):
            return position < elements.count ? elements[position] : nil
        case .dictionary(let keys, let values):
            if position < keys.count { return keys[position] }
            let valuePosition = position - keys.count
            return valuePosition < values.count ? values[valuePosition] : nil
        }
    }

    static func bigEndian(_ bytes: [UInt8], at position: Int, width: Int) -> UInt64 {
        var value: UInt64 = 0
        for index in position..<(position + width) {
            value = value << 8 | UInt64(bytes[index])
        }
        return value
    }
}

/// Reads one object at a position, checking every byte it touches is before `end`.
private struct ObjectParser {
    let bytes: [UInt8]
    var position: Int
    let end: Int
    let referenceSize: Int
    let objectCount: UInt64

    mutating func parseObject() throws(ReferencePropertyListReader.Rejection) -> ObjectGraph.Object {
        let marker = try takeByte()
        let low = marker & 0x0F
        switch marker >> 4 {
        case 0x0:
            guard marker == 0x08 || marker == 0x09 else { throw reject("unsupported marker 0x\(hex(marker))") }
            return .scalar(.bool(marker == 0x09))
        case 0x1:
            return .scalar(try integer(exponent: low))
        case 0x2:
            guard low == 2 || low == 3 else { throw reject("invalid real width") }
            let raw = try unsigned(width: 1 << Int(low))
            return .scalar(.real(low == 2 ? Double(Float(bitPattern: UInt32(raw))) : Double(bitPattern: raw)))
        case 0x3:
            guard low == 3 else { throw reject("invalid date marker") }
            return .scalar(.date(Date(timeIntervalSinceReferenceDate: Double(bitPattern: try unsigned(width: 8)))))
        case 0x4:
            return .scalar(.data(Data(try take(try count(low)))))
        case 0x5:
            let characters = try take(try count(low))
            guard characters.allSatisfy({ $0 < 0x80 }) else { throw reject("non-ASCII byte in ASCII string") }
            return .scalar(.string(String(decoding: characters, as: UTF8.self)))
        case 0x6:
            let (byteCount, overflow) = try count(low).multipliedReportingOverflow(by: 2)
            guard !overflow else { throw reject("string length overflows") }
            let raw = Array(try take(byteCount))
            let units = stride(from: 0, to: raw.count, by: 2).map { UInt16(raw[$0]) << 8 | UInt16(raw[$0 + 1]) }
            return .scalar(.string(try Self.decodeUTF16(units)))
        case 0xA:
            return .array(try references(try count(low)))
        case 0xD:
            let entries = try count(low)
            let keys = try references(entries)
            return .dictionary(keys: keys, values: try references(entries))
        default:
            throw reject("unsupported marker 0x\(hex(marker))")
        }
    }

    private mutating func integer(exponent: UInt8) throws(ReferencePropertyListReader.Rejection) -> PropertyListValue {
        switch exponent {
        case 0, 1, 2:
            return .integer(Int64(try unsigned(width: 1 << Int(exponent))))
        case 3:
            return .integer(Int64(bitPattern: try unsigned(width: 8)))
        case 4:
            guard try unsigned(width: 8) == 0 else { throw reject("16-byte integer out of range") }
            return .unsigned(try unsigned(width: 8))
        default:
            throw reject("invalid integer width")
        }
    }

    /// The element or byte count of a container, data or string object.
    private mutating func count(_ low: UInt8) throws(ReferencePropertyListReader.Rejection) -> Int {
        guard low == 0x0F else { return Int(low) }
        let marker = try takeByte()
        guard marker >> 4 == 0x1, marker & 0x0F <= 3 else { throw reject("invalid extended count") }
        let value = try unsigned(width: 1 << Int(marker & 0x0F))
        guard value <= UInt64(end - position) else { throw reject("count larger than the remaining bytes") }
        return Int(value)
    }

    private mutating func references(_ count: Int) throws(ReferencePropertyListReader.Rejection) -> [Int] {
        let (byteCount, overflow) = count.multipliedReportingOverflow(by: referenceSize)
        guard !overflow, byteCount <= end - position else { throw reject("container larger than the remaining bytes") }
        var result: [Int] = []
        result.reserveCapacity(count)
        for _ in 0..<count {
            let reference = try unsigned(width: referenceSize)
            guard reference < objectCount else { throw reject("object reference out of range") }
            result.append(Int(reference))
        }
        return result
    }

    private mutating func unsigned(width: Int) throws(ReferencePropertyListReader.Rejection) -> UInt64 {
        let raw = try take(width)
        return raw.reduce(0) { $0 << 8 | UInt64($1) }
    }

    private mutating func takeByte() throws(ReferencePropertyListReader.Rejection) -> UInt8 {
        guard position < end else { throw reject("object runs past the object area") }
        defer { position += 1 }
        return bytes[position]
    }

    /// The next `byteCount` bytes; the slice keeps the indices of `bytes`.
    private mutating func take(_ byteCount: Int) throws(ReferencePropertyListReader.Rejection) -> ArraySlice<UInt8> {
        guard byteCount >= 0, byteCount <= end - position else { throw reject("object runs past the object area") }
        defer { position += byteCount }
        return bytes[position..<(position + byteCount)]
    }

    private static func decodeUTF16(_ units: [UInt16]) throws(ReferencePropertyListReader.Rejection) -> String {
        var scalars = String.UnicodeScalarView()
        var iterator = units.makeIterator()
        var decoder = UTF16()
        while true {
            switch decoder.decode(&iterator) {
            case .scalarValue(let scalar): scalars.append(scalar)
            case .emptyInput: return String(scalars)
            case .error: throw reject("invalid UTF-16 string")
            }
        }
    }

    private func hex(_ byte: UInt8) -> String {
        String(byte, radix: 16, uppercase: true)
    }
}

private func reject(_ reason: String) -> ReferencePropertyListReader.Rejection {
    ReferencePropertyListReader.Rejection(reason: reason)
}

import Foundation

/// Verifies a binary property list completely before anything else reads it, and turns it
/// into a ``PropertyListValue``.
///
/// Foundation's property-list readers on Linux crash the process on small crafted inputs
/// (huge container counts, reference cycles, sets, deep nesting), so no bytes reach
/// `PropertyListDecoder` until this reader accepted them. It checks:
/// - the `bplist00` magic and the 32-byte trailer: offset and reference widths, object count,
///   top object and offset-table position all consistent with the file size;
/// - every offset-table entry points inside the object area;
/// - every object has a known marker (no sets, ordered sets, UIDs, nulls or fills) and its
///   contents, including container reference lists, fit in the bytes that remain;
/// - every reference is below the object count; dictionary keys are strings; strings are
///   valid ASCII or UTF-16; 16-byte integers are unsigned 64-bit values;
/// - from the top object: no reference cycle, nesting at most ``maximumDepth`` and at most
///   ``maximumValueCount(forByteCount:)`` values once shared objects are expanded.
package enum BinaryPropertyListReader {
    /// The deepest nesting accepted, counting the top object as 1.
    package static let maximumDepth = 256

    /// The most values a reader may visit once shared objects are expanded.
    package static func maximumValueCount(forByteCount byteCount: Int) -> Int {
        max(1 << 22, byteCount.multipliedReportingOverflow(by: 2).partialValue)
    }

    /// Why bytes were rejected.
    package struct Rejection: Error, CustomStringConvertible, Sendable {
        /// A short explanation, such as "reference cycle".
        package let reason: String
        package var description: String { reason }
    }

    /// Verifies `data` and returns its top object.
    package static func value(from data: Data) throws(Rejection) -> PropertyListValue {
        let graph = try verifiedGraph(of: data)
        return graph.value(at: graph.topObject)
    }

    /// Verifies `data` as ``value(from:)`` does and returns the entries of its top object, a
    /// dictionary, in the order they are stored (`nil` when the top object is not a
    /// dictionary): no dictionary is built for the top level, so a reader that looks at each
    /// entry once (a record) hashes no key.
    package static func topLevelEntries(from data: Data) throws(Rejection) -> [(key: String, value: PropertyListValue)]? {
        let graph = try verifiedGraph(of: data)
        return graph.entries(at: graph.topObject)
    }

    /// Verifies `data` as ``value(from:)`` does and returns the values of the top dictionary's
    /// entries whose keys `keys` names, by their position in `keys` (`nil` for a key the
    /// dictionary does not have), or `nil` when the top object is not a dictionary. The other
    /// entries are skipped without building their values, and no key is hashed: a record is
    /// read field by field straight from its bytes.
    package static func topLevelValues(from data: Data, forKeys keys: KeyTable) throws(Rejection) -> [PropertyListValue?]? {
        let graph = try verifiedGraph(of: data)
        return graph.values(at: graph.topObject, forKeys: keys)
    }

    /// The dictionary keys a reader looks for (``topLevelValues(from:forKeys:)``), found by
    /// their ASCII bytes: grouped by length, compared byte by byte.
    package struct KeyTable: Sendable {
        /// The names, in the order their values are returned.
        package let names: [String]
        /// The positions in `names` of the names of each length (ASCII names only).
        private let positionsByLength: [Int: [Int]]
        private let bytes: [[UInt8]]

        package init(_ names: [String]) {
            self.names = names
            bytes = names.map { Array($0.utf8) }
            var positions: [Int: [Int]] = [:]
            for (position, name) in bytes.enumerated() where name.allSatisfy({ $0 < 0x80 }) {
                positions[name.count, default: []].append(position)
            }
            positionsByLength = positions
        }

        /// The position of the name whose ASCII characters are `characters`.
        func position(ofASCII characters: ArraySlice<UInt8>) -> Int? {
            positionsByLength[characters.count]?.first { bytes[$0].elementsEqual(characters) }
        }

        /// The position of `name` (a key not stored as ASCII), compared as `String`s are.
        func position(of name: String) -> Int? {
            names.firstIndex(of: name)
        }
    }

    /// Verifies `data` without building values; throws the reason when it is rejected.
    package static func verify(_ data: Data) throws(Rejection) {
        _ = try verifiedGraph(of: data)
    }

    /// The parsed objects of `data`, once every check above has passed.
    private static func verifiedGraph(of data: Data) throws(Rejection) -> ObjectGraph {
        let graph = try ObjectGraph(bytes: [UInt8](data))
        try graph.verifyReachableStructure()
        return graph
    }
}

/// The parsed, bounds-checked objects of one binary property list.
///
/// Objects are kept as what they are and where their bytes lie, not as values: a string,
/// a data object or a container's references are read from `bytes` only when a value is
/// built, so a parse allocates one array for the objects, not one for each of them.
private struct ObjectGraph {
    /// One object, parsed and checked: a number or a date as its value, a string or data as
    /// the position of its bytes, a container as the position of its references.
    enum Object {
        case bool(Bool)
        case integer(Int64)
        case unsigned(UInt64)
        case real(Double)
        case date(Double)
        /// `count` bytes from `start`.
        case data(start: Int, count: Int)
        /// `count` ASCII characters from `start`.
        case asciiString(start: Int, count: Int)
        /// `count` UTF-16 code units (big-endian, two bytes each) from `start`, checked valid.
        case utf16String(start: Int, count: Int)
        /// `count` references from `references`.
        case array(count: Int, references: Int)
        /// `count` key references from `references`, then `count` value references.
        case dictionary(count: Int, references: Int)
    }

    let bytes: [UInt8]
    let objects: [Object]
    let topObject: Int
    let referenceSize: Int

    init(bytes: [UInt8]) throws(BinaryPropertyListReader.Rejection) {
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
        self.bytes = bytes
        self.objects = objects
        self.topObject = Int(topObject)
        self.referenceSize = referenceSize
        for object in objects {
            if case .dictionary(let count, let references) = object {
                try checkKeys(count: count, at: references)
            }
        }
    }

    /// The reference at position `index` of the list at `references` (checked in range when
    /// the container was parsed).
    func reference(_ index: Int, in references: Int) -> Int {
        Int(Self.bigEndian(bytes, at: references + index * referenceSize, width: referenceSize))
    }

    /// Rejects a dictionary whose keys are not all strings, or not all different. A record's
    /// few keys are compared pair by pair (hashing each would cost more); many, through a set.
    private func checkKeys(count: Int, at references: Int) throws(BinaryPropertyListReader.Rejection) {
        for index in 0..<count {
            switch objects[reference(index, in: references)] {
            case .asciiString, .utf16String: continue
            default: throw reject("dictionary key is not a string")
            }
        }
        if count <= 32 {
            for index in 0..<count {
                let key = reference(index, in: references)
                for other in (index + 1)..<count where sameString(key, reference(other, in: references)) {
                    throw reject("duplicate dictionary key")
                }
            }
        } else if Set((0..<count).map { string(at: reference($0, in: references)) }).count != count {
            throw reject("duplicate dictionary key")
        }
    }

    /// Whether the string objects `first` and `second` hold the same string (as `String`
    /// compares them: an ASCII key and a UTF-16 key of the same characters are the same).
    private func sameString(_ first: Int, _ second: Int) -> Bool {
        if first == second { return true }
        if case .asciiString(let start, let count) = objects[first], case .asciiString(let otherStart, let otherCount) = objects[second] {
            return count == otherCount && bytes[start..<(start + count)].elementsEqual(bytes[otherStart..<(otherStart + otherCount)])
        }
        return string(at: first) == string(at: second)
    }

    /// The string object at `index` as a `String` (only called on string objects).
    func string(at index: Int) -> String {
        switch objects[index] {
        case .asciiString(let start, let count):
            return String(decoding: bytes[start..<(start + count)], as: UTF8.self)
        case .utf16String(let start, let count):
            var scalars = String.UnicodeScalarView()
            var iterator = (0..<count).lazy.map { UInt16(bytes[start + 2 * $0]) << 8 | UInt16(bytes[start + 2 * $0 + 1]) }.makeIterator()
            var decoder = UTF16()
            while case .scalarValue(let scalar) = decoder.decode(&iterator) { scalars.append(scalar) }
            return String(scalars)
        default:
            preconditionFailure("string(at:) is only called on string objects")
        }
    }

    /// The entries of the dictionary at `index`, in stored order, or `nil` when it is not a
    /// dictionary; only called after ``verifyReachableStructure()``.
    func entries(at index: Int) -> [(key: String, value: PropertyListValue)]? {
        guard case .dictionary(let count, let references) = objects[index] else { return nil }
        var entries: [(key: String, value: PropertyListValue)] = []
        entries.reserveCapacity(count)
        for entry in 0..<count {
            entries.append((string(at: reference(entry, in: references)), value(at: reference(count + entry, in: references))))
        }
        return entries
    }

    /// The values of the dictionary at `index` whose keys `keys` names, by position in
    /// `keys`, or `nil` when it is not a dictionary; only called after ``verifyReachableStructure()``.
    func values(at index: Int, forKeys keys: BinaryPropertyListReader.KeyTable) -> [PropertyListValue?]? {
        guard case .dictionary(let count, let references) = objects[index] else { return nil }
        var values = [PropertyListValue?](repeating: nil, count: keys.names.count)
        for entry in 0..<count {
            let key = reference(entry, in: references)
            let position: Int?
            if case .asciiString(let start, let length) = objects[key] {
                position = keys.position(ofASCII: bytes[start..<(start + length)])
            } else {
                position = keys.position(of: string(at: key))
            }
            if let position { values[position] = value(at: reference(count + entry, in: references)) }
        }
        return values
    }

    /// Walks the graph from the top object without recursion: rejects cycles, deep nesting
    /// and graphs whose shared objects would expand to too many values.
    func verifyReachableStructure() throws(BinaryPropertyListReader.Rejection) {
        if isFlat { return }
        let maximumDepth = BinaryPropertyListReader.maximumDepth
        let maximumValues = BinaryPropertyListReader.maximumValueCount(forByteCount: bytes.count)
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

    /// Whether the walk of ``verifyReachableStructure()`` has nothing to find, because the top
    /// object is shallow: a scalar, or a container whose children are scalars or arrays of
    /// scalars (a record's body: a dictionary whose only containers are arrays of strings, its
    /// tags, prerequisites and conditions). Such a graph has no cycle and nests at most 3 deep;
    /// its values, expanded, are counted here against the same limit.
    private var isFlat: Bool {
        let (count, references): (Int, Int)
        switch objects[topObject] {
        case .array(let elements, let list): (count, references) = (elements, list)
        case .dictionary(let entries, let list): (count, references) = (2 * entries, list)
        default: return true
        }
        let maximumValues = BinaryPropertyListReader.maximumValueCount(forByteCount: bytes.count)
        var total = 1
        for index in 0..<count {
            switch objects[reference(index, in: references)] {
            case .dictionary:
                return false
            case .array(let elements, let list):
                for element in 0..<elements {
                    switch objects[reference(element, in: list)] {
                    case .array, .dictionary: return false
                    default: continue
                    }
                }
                total += 1 + elements
            default:
                total += 1
            }
            // Past the limit: the walk finds it and names it.
            guard total <= maximumValues else { return false }
        }
        return true
    }

    /// The value tree under `index`; only called after ``verifyReachableStructure()``.
    func value(at index: Int) -> PropertyListValue {
        switch objects[index] {
        case .bool(let value):
            return .bool(value)
        case .integer(let value):
            return .integer(value)
        case .unsigned(let value):
            return .unsigned(value)
        case .real(let value):
            return .real(value)
        case .date(let interval):
            return .date(Date(timeIntervalSinceReferenceDate: interval))
        case .data(let start, let count):
            return .data(Data(bytes[start..<(start + count)]))
        case .asciiString, .utf16String:
            return .string(string(at: index))
        case .array(let count, let references):
            return .array((0..<count).map { value(at: reference($0, in: references)) })
        case .dictionary(let count, let references):
            var dictionary: [String: PropertyListValue] = [:]
            dictionary.reserveCapacity(count)
            for entry in 0..<count {
                dictionary[string(at: reference(entry, in: references))] = value(at: reference(count + entry, in: references))
            }
            return .dictionary(dictionary)
        }
    }

    /// The `position`th child of an object (dictionary keys first, then values), or `nil` past the end.
    private func child(of index: Int, at position: Int) -> Int? {
        switch objects[index] {
        case .array(let count, let references):
            return position < count ? reference(position, in: references) : nil
        case .dictionary(let count, let references):
            return position < 2 * count ? reference(position, in: references) : nil
        default:
            return nil
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

    mutating func parseObject() throws(BinaryPropertyListReader.Rejection) -> ObjectGraph.Object {
        let marker = try takeByte()
        let low = marker & 0x0F
        switch marker >> 4 {
        case 0x0:
            guard marker == 0x08 || marker == 0x09 else { throw reject("unsupported marker 0x\(hex(marker))") }
            return .bool(marker == 0x09)
        case 0x1:
            return try integer(exponent: low)
        case 0x2:
            guard low == 2 || low == 3 else { throw reject("invalid real width") }
            let raw = try unsigned(width: 1 << Int(low))
            return .real(low == 2 ? Double(Float(bitPattern: UInt32(raw))) : Double(bitPattern: raw))
        case 0x3:
            guard low == 3 else { throw reject("invalid date marker") }
            return .date(Double(bitPattern: try unsigned(width: 8)))
        case 0x4:
            let count = try count(low)
            return .data(start: try take(count), count: count)
        case 0x5:
            let count = try count(low)
            let start = try take(count)
            for index in start..<(start + count) where bytes[index] >= 0x80 {
                throw reject("non-ASCII byte in ASCII string")
            }
            return .asciiString(start: start, count: count)
        case 0x6:
            let units = try count(low)
            let (byteCount, overflow) = units.multipliedReportingOverflow(by: 2)
            guard !overflow else { throw reject("string length overflows") }
            let start = try take(byteCount)
            try Self.checkUTF16(bytes, from: start, units: units)
            return .utf16String(start: start, count: units)
        case 0xA:
            let count = try count(low)
            return .array(count: count, references: try references(count))
        case 0xD:
            let entries = try count(low)
            let (references, overflow) = entries.multipliedReportingOverflow(by: 2)
            guard !overflow else { throw reject("container larger than the remaining bytes") }
            return .dictionary(count: entries, references: try self.references(references))
        default:
            throw reject("unsupported marker 0x\(hex(marker))")
        }
    }

    private mutating func integer(exponent: UInt8) throws(BinaryPropertyListReader.Rejection) -> ObjectGraph.Object {
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
    private mutating func count(_ low: UInt8) throws(BinaryPropertyListReader.Rejection) -> Int {
        guard low == 0x0F else { return Int(low) }
        let marker = try takeByte()
        guard marker >> 4 == 0x1, marker & 0x0F <= 3 else { throw reject("invalid extended count") }
        let value = try unsigned(width: 1 << Int(marker & 0x0F))
        guard value <= UInt64(end - position) else { throw reject("count larger than the remaining bytes") }
        return Int(value)
    }

    /// Checks `count` references, each below the object count, and returns where they start.
    private mutating func references(_ count: Int) throws(BinaryPropertyListReader.Rejection) -> Int {
        let (byteCount, overflow) = count.multipliedReportingOverflow(by: referenceSize)
        guard !overflow, byteCount <= end - position else { throw reject("container larger than the remaining bytes") }
        let start = position
        for _ in 0..<count {
            let reference = try unsigned(width: referenceSize)
            guard reference < objectCount else { throw reject("object reference out of range") }
        }
        return start
    }

    private mutating func unsigned(width: Int) throws(BinaryPropertyListReader.Rejection) -> UInt64 {
        let start = try take(width)
        return ObjectGraph.bigEndian(bytes, at: start, width: width)
    }

    private mutating func takeByte() throws(BinaryPropertyListReader.Rejection) -> UInt8 {
        guard position < end else { throw reject("object runs past the object area") }
        defer { position += 1 }
        return bytes[position]
    }

    /// Skips the next `byteCount` bytes, and returns where they start.
    private mutating func take(_ byteCount: Int) throws(BinaryPropertyListReader.Rejection) -> Int {
        guard byteCount >= 0, byteCount <= end - position else { throw reject("object runs past the object area") }
        defer { position += byteCount }
        return position
    }

    /// Rejects `units` big-endian UTF-16 code units from `start` that are not valid UTF-16
    /// (an unpaired surrogate).
    private static func checkUTF16(_ bytes: [UInt8], from start: Int, units: Int) throws(BinaryPropertyListReader.Rejection) {
        var iterator = (0..<units).lazy.map { UInt16(bytes[start + 2 * $0]) << 8 | UInt16(bytes[start + 2 * $0 + 1]) }.makeIterator()
        var decoder = UTF16()
        while true {
            switch decoder.decode(&iterator) {
            case .scalarValue: continue
            case .emptyInput: return
            case .error: throw reject("invalid UTF-16 string")
            }
        }
    }

    private func hex(_ byte: UInt8) -> String {
        String(byte, radix: 16, uppercase: true)
    }
}

private func reject(_ reason: String) -> BinaryPropertyListReader.Rejection {
    BinaryPropertyListReader.Rejection(reason: reason)
}

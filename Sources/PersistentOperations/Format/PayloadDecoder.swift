import Foundation

/// Decodes a payload from the ``PropertyListValue`` that ``BinaryPropertyListReader`` built
/// from its verified bytes, by the rules of Foundation's `PropertyListDecoder` for binary
/// property lists.
///
/// Foundation's decoder costs about 17 µs for a typical payload on Linux, as much as the rest
/// of an add or of a restored operation; this one works on values the reader has already
/// verified and built. The rules it follows are those of swift-foundation's binary
/// property-list decoding: the string `"$null"` is nil; `Date` and `Data` are the property
/// list's date and data objects; an integer decodes into any integer type it fits exactly,
/// a real into an integer type only when it is a whole number that fits; a real decodes into
/// `Float` or `Double` when it fits exactly (NaN stays NaN), an integer into either; booleans,
/// strings, arrays and dictionaries only from their own kind. Whatever it refuses,
/// ``RecordFormat/decodePayload(_:from:)`` hands to `PropertyListDecoder`, so a payload
/// Foundation reads is never refused.
///
/// ```swift
/// struct Upload: Codable { var url: String; var attempt: Int }
/// let bytes = BinaryPropertyListWriter.data(for: try PayloadEncoder().encode(Upload(url: "https://example.com/a", attempt: 2)))
/// let value = try BinaryPropertyListReader.value(from: bytes)
/// let upload = try PayloadDecoder(value: value).decode(Upload.self)   // url and attempt as written
/// ```
package struct PayloadDecoder {
    /// The string the property-list coders write for nil.
    static let nullString = "$null"

    let value: PropertyListValue

    package init(value: PropertyListValue) {
        self.value = value
    }

    /// Decodes a `T` from the value.
    package func decode<T: Decodable>(_ type: T.Type) throws -> T {
        try ValueDecoder(value: value, codingPath: []).unwrap(type)
    }
}

/// The decoder of one value; a nested value gets a decoder of its own.
private final class ValueDecoder: Decoder, SingleValueDecodingContainer {
    let value: PropertyListValue
    let codingPath: [any CodingKey]
    var userInfo: [CodingUserInfoKey: Any] { [:] }

    init(value: PropertyListValue, codingPath: [any CodingKey]) {
        self.value = value
        self.codingPath = codingPath
    }

    // MARK: Decoder

    func container<Key: CodingKey>(keyedBy type: Key.Type) throws -> KeyedDecodingContainer<Key> {
        guard case .dictionary(let dictionary) = value else {
            throw Self.mismatch([String: Any].self, value, codingPath)
        }
        return KeyedDecodingContainer(KeyedContainer<Key>(dictionary: dictionary, codingPath: codingPath))
    }

    func unkeyedContainer() throws -> any UnkeyedDecodingContainer {
        guard case .array(let array) = value else {
            throw Self.mismatch([Any].self, value, codingPath)
        }
        return UnkeyedContainer(array: array, codingPath: codingPath)
    }

    func singleValueContainer() throws -> any SingleValueDecodingContainer { self }

    // MARK: SingleValueDecodingContainer

    func decodeNil() -> Bool { Self.isNull(value) }
    func decode(_ type: Bool.Type) throws -> Bool { try Self.bool(value, codingPath) }
    func decode(_ type: String.Type) throws -> String { try Self.string(value, codingPath) }
    func decode(_ type: Double.Type) throws -> Double { try Self.floatingPoint(value, codingPath) }
    func decode(_ type: Float.Type) throws -> Float { try Self.floatingPoint(value, codingPath) }
    func decode(_ type: Int.Type) throws -> Int { try Self.integer(value, codingPath) }
    func decode(_ type: Int8.Type) throws -> Int8 { try Self.integer(value, codingPath) }
    func decode(_ type: Int16.Type) throws -> Int16 { try Self.integer(value, codingPath) }
    func decode(_ type: Int32.Type) throws -> Int32 { try Self.integer(value, codingPath) }
    func decode(_ type: Int64.Type) throws -> Int64 { try Self.integer(value, codingPath) }
    func decode(_ type: UInt.Type) throws -> UInt { try Self.integer(value, codingPath) }
    func decode(_ type: UInt8.Type) throws -> UInt8 { try Self.integer(value, codingPath) }
    func decode(_ type: UInt16.Type) throws -> UInt16 { try Self.integer(value, codingPath) }
    func decode(_ type: UInt32.Type) throws -> UInt32 { try Self.integer(value, codingPath) }
    func decode(_ type: UInt64.Type) throws -> UInt64 { try Self.integer(value, codingPath) }
    func decode<T: Decodable>(_ type: T.Type) throws -> T { try unwrap(type) }

    /// Decodes a `T` from this decoder's value: `Date` and `Data` as the property list's own
    /// objects, anything else through its `init(from:)`.
    func unwrap<T: Decodable>(_ type: T.Type) throws -> T {
        if type == Date.self {
            try Self.checkNotNull(value, type, codingPath)
            guard case .date(let date) = value else { throw Self.mismatch(type, value, codingPath) }
            return date as! T
        }
        if type == Data.self {
            try Self.checkNotNull(value, type, codingPath)
            guard case .data(let data) = value else { throw Self.mismatch(type, value, codingPath) }
            return data as! T
        }
        if let dictionaryType = type as? any StringKeyedDictionary.Type {
            // What `Dictionary.init(from:)` does through a keyed container, without one.
            guard case .dictionary(let dictionary) = value else {
                throw Self.mismatch([String: Any].self, value, codingPath)
            }
            return try dictionaryType.init(decoding: dictionary, codingPath: codingPath) as! T
        }
        return try T(from: self)
    }

    // MARK: Rules

    static func isNull(_ value: PropertyListValue) -> Bool {
        if case .string(let string) = value { return string == PayloadDecoder.nullString }
        return false
    }

    static func checkNotNull(_ value: PropertyListValue, _ type: Any.Type, _ codingPath: @autoclosure () -> [any CodingKey]) throws {
        if isNull(value) {
            throw DecodingError.valueNotFound(type, .init(codingPath: codingPath(), debugDescription: "Cannot get value of \(type) -- found null value instead"))
        }
    }

    static func bool(_ value: PropertyListValue, _ codingPath: @autoclosure () -> [any CodingKey]) throws -> Bool {
        try checkNotNull(value, Bool.self, codingPath())
        guard case .bool(let bool) = value else { throw mismatch(Bool.self, value, codingPath()) }
        return bool
    }

    static func string(_ value: PropertyListValue, _ codingPath: @autoclosure () -> [any CodingKey]) throws -> String {
        try checkNotNull(value, String.self, codingPath())
        guard case .string(let string) = value else { throw mismatch(String.self, value, codingPath()) }
        return string
    }

    static func integer<T: FixedWidthInteger>(_ value: PropertyListValue, _ codingPath: @autoclosure () -> [any CodingKey]) throws -> T {
        try checkNotNull(value, T.self, codingPath())
        let result: T?
        switch value {
        case .integer(let integer): result = T(exactly: integer)
        case .unsignedInteger(let integer): result = T(exactly: integer)
        case .real(let real): result = T(exactly: real)
        default: throw mismatch(T.self, value, codingPath())
        }
        guard let result else {
            throw DecodingError.dataCorrupted(.init(codingPath: codingPath(), debugDescription: "Property list number <\(value)> does not fit in \(T.self)."))
        }
        return result
    }

    static func floatingPoint<T: BinaryFloatingPoint>(_ value: PropertyListValue, _ codingPath: @autoclosure () -> [any CodingKey]) throws -> T {
        try checkNotNull(value, T.self, codingPath())
        switch value {
        case .real(let real):
            if real.isNaN { return .nan }
            guard let result = T(exactly: real) else {
                throw DecodingError.dataCorrupted(.init(codingPath: codingPath(), debugDescription: "Property list number <\(real)> does not fit in \(T.self)."))
            }
            return result
        case .integer(let integer): return T(integer)
        case .unsignedInteger(let integer): return T(integer)
        default: throw mismatch(T.self, value, codingPath())
        }
    }

    static func mismatch(_ type: Any.Type, _ value: PropertyListValue, _ codingPath: @autoclosure () -> [any CodingKey]) -> DecodingError {
        .typeMismatch(type, .init(codingPath: codingPath(), debugDescription: "Expected to decode \(type) but found \(kind(of: value)) instead."))
    }

    static func kind(of value: PropertyListValue) -> String {
        switch value {
        case .bool: "a boolean"
        case .integer, .unsignedInteger, .real: "a number"
        case .date: "a date"
        case .data: "data"
        case .string: "a string"
        case .array: "an array"
        case .dictionary: "a dictionary"
        }
    }
}

/// A coding key made from a string or an index (of ``PayloadDecoder`` and ``PayloadEncoder``).
struct PayloadCodingKey: CodingKey {
    let stringValue: String
    let intValue: Int?

    init(stringValue: String) {
        self.stringValue = stringValue
        intValue = nil
    }

    init(intValue: Int) {
        stringValue = "Index \(intValue)"
        self.intValue = intValue
    }

    static let superKey = PayloadCodingKey(stringValue: "super")
}

private struct KeyedContainer<Key: CodingKey>: KeyedDecodingContainerProtocol {
    let dictionary: [String: PropertyListValue]
    let codingPath: [any CodingKey]

    var allKeys: [Key] { dictionary.keys.compactMap { Key(stringValue: $0) } }

    func contains(_ key: Key) -> Bool { dictionary[key.stringValue] != nil }

    private func value(for key: some CodingKey) throws -> PropertyListValue {
        guard let value = dictionary[key.stringValue] else {
            throw DecodingError.keyNotFound(key, .init(codingPath: codingPath, debugDescription: "No value associated with key \(key) (\"\(key.stringValue)\")."))
        }
        return value
    }

    private func path(_ key: some CodingKey) -> [any CodingKey] { codingPath + [key] }

    func decodeNil(forKey key: Key) throws -> Bool { ValueDecoder.isNull(try value(for: key)) }
    func decode(_ type: Bool.Type, forKey key: Key) throws -> Bool { try ValueDecoder.bool(value(for: key), path(key)) }
    func decode(_ type: String.Type, forKey key: Key) throws -> String { try ValueDecoder.string(value(for: key), path(key)) }
    func decode(_ type: Double.Type, forKey key: Key) throws -> Double { try ValueDecoder.floatingPoint(value(for: key), path(key)) }
    func decode(_ type: Float.Type, forKey key: Key) throws -> Float { try ValueDecoder.floatingPoint(value(for: key), path(key)) }
    func decode(_ type: Int.Type, forKey key: Key) throws -> Int { try ValueDecoder.integer(value(for: key), path(key)) }
    func decode(_ type: Int8.Type, forKey key: Key) throws -> Int8 { try ValueDecoder.integer(value(for: key), path(key)) }
    func decode(_ type: Int16.Type, forKey key: Key) throws -> Int16 { try ValueDecoder.integer(value(for: key), path(key)) }
    func decode(_ type: Int32.Type, forKey key: Key) throws -> Int32 { try ValueDecoder.integer(value(for: key), path(key)) }
    func decode(_ type: Int64.Type, forKey key: Key) throws -> Int64 { try ValueDecoder.integer(value(for: key), path(key)) }
    func decode(_ type: UInt.Type, forKey key: Key) throws -> UInt { try ValueDecoder.integer(value(for: key), path(key)) }
    func decode(_ type: UInt8.Type, forKey key: Key) throws -> UInt8 { try ValueDecoder.integer(value(for: key), path(key)) }
    func decode(_ type: UInt16.Type, forKey key: Key) throws -> UInt16 { try ValueDecoder.integer(value(for: key), path(key)) }
    func decode(_ type: UInt32.Type, forKey key: Key) throws -> UInt32 { try ValueDecoder.integer(value(for: key), path(key)) }
    func decode(_ type: UInt64.Type, forKey key: Key) throws -> UInt64 { try ValueDecoder.integer(value(for: key), path(key)) }

    func decode<T: Decodable>(_ type: T.Type, forKey key: Key) throws -> T {
        try ValueDecoder(value: value(for: key), codingPath: path(key)).unwrap(type)
    }

    func nestedContainer<NestedKey: CodingKey>(keyedBy type: NestedKey.Type, forKey key: Key) throws -> KeyedDecodingContainer<NestedKey> {
        try ValueDecoder(value: value(for: key), codingPath: path(key)).container(keyedBy: type)
    }

    func nestedUnkeyedContainer(forKey key: Key) throws -> any UnkeyedDecodingContainer {
        try ValueDecoder(value: value(for: key), codingPath: path(key)).unkeyedContainer()
    }

    func superDecoder() throws -> any Decoder {
        ValueDecoder(value: dictionary[PayloadCodingKey.superKey.stringValue] ?? .string(PayloadDecoder.nullString), codingPath: path(PayloadCodingKey.superKey))
    }

    func superDecoder(forKey key: Key) throws -> any Decoder {
        ValueDecoder(value: dictionary[key.stringValue] ?? .string(PayloadDecoder.nullString), codingPath: path(key))
    }
}

private struct UnkeyedContainer: UnkeyedDecodingContainer {
    let array: [PropertyListValue]
    let codingPath: [any CodingKey]
    private(set) var currentIndex = 0

    init(array: [PropertyListValue], codingPath: [any CodingKey]) {
        self.array = array
        self.codingPath = codingPath
    }

    var count: Int? { array.count }
    var isAtEnd: Bool { currentIndex >= array.count }

    private var currentPath: [any CodingKey] { codingPath + [PayloadCodingKey(intValue: currentIndex)] }

    /// The next value, decoded by `body`; the index moves on only when `body` succeeds.
    private mutating func next<T>(_ type: T.Type, _ body: (PropertyListValue, () -> [any CodingKey]) throws -> T) throws -> T {
        guard !isAtEnd else {
            throw DecodingError.valueNotFound(type, .init(codingPath: currentPath, debugDescription: "Unkeyed container is at end."))
        }
        let result = try body(array[currentIndex], { currentPath })
        currentIndex += 1
        return result
    }

    mutating func decodeNil() throws -> Bool {
        guard !isAtEnd else {
            throw DecodingError.valueNotFound(Any?.self, .init(codingPath: currentPath, debugDescription: "Unkeyed container is at end."))
        }
        guard ValueDecoder.isNull(array[currentIndex]) else { return false }
        currentIndex += 1
        return true
    }

    mutating func decode(_ type: Bool.Type) throws -> Bool { try next(type) { try ValueDecoder.bool($0, $1()) } }
    mutating func decode(_ type: String.Type) throws -> String { try next(type) { try ValueDecoder.string($0, $1()) } }
    mutating func decode(_ type: Double.Type) throws -> Double { try next(type) { try ValueDecoder.floatingPoint($0, $1()) } }
    mutating func decode(_ type: Float.Type) throws -> Float { try next(type) { try ValueDecoder.floatingPoint($0, $1()) } }
    mutating func decode(_ type: Int.Type) throws -> Int { try next(type) { try ValueDecoder.integer($0, $1()) } }
    mutating func decode(_ type: Int8.Type) throws -> Int8 { try next(type) { try ValueDecoder.integer($0, $1()) } }
    mutating func decode(_ type: Int16.Type) throws -> Int16 { try next(type) { try ValueDecoder.integer($0, $1()) } }
    mutating func decode(_ type: Int32.Type) throws -> Int32 { try next(type) { try ValueDecoder.integer($0, $1()) } }
    mutating func decode(_ type: Int64.Type) throws -> Int64 { try next(type) { try ValueDecoder.integer($0, $1()) } }
    mutating func decode(_ type: UInt.Type) throws -> UInt { try next(type) { try ValueDecoder.integer($0, $1()) } }
    mutating func decode(_ type: UInt8.Type) throws -> UInt8 { try next(type) { try ValueDecoder.integer($0, $1()) } }
    mutating func decode(_ type: UInt16.Type) throws -> UInt16 { try next(type) { try ValueDecoder.integer($0, $1()) } }
    mutating func decode(_ type: UInt32.Type) throws -> UInt32 { try next(type) { try ValueDecoder.integer($0, $1()) } }
    mutating func decode(_ type: UInt64.Type) throws -> UInt64 { try next(type) { try ValueDecoder.integer($0, $1()) } }

    mutating func decode<T: Decodable>(_ type: T.Type) throws -> T {
        try next(type) { value, path in try ValueDecoder(value: value, codingPath: path()).unwrap(type) }
    }

    mutating func nestedContainer<NestedKey: CodingKey>(keyedBy type: NestedKey.Type) throws -> KeyedDecodingContainer<NestedKey> {
        try next(KeyedDecodingContainer<NestedKey>.self) { value, path in try ValueDecoder(value: value, codingPath: path()).container(keyedBy: type) }
    }

    mutating func nestedUnkeyedContainer() throws -> any UnkeyedDecodingContainer {
        try next((any UnkeyedDecodingContainer).self) { value, path in try ValueDecoder(value: value, codingPath: path()).unkeyedContainer() }
    }

    mutating func superDecoder() throws -> any Decoder {
        try next((any Decoder).self) { value, path in ValueDecoder(value: value, codingPath: path()) }
    }
}

/// A dictionary with `String` keys: decoded straight from the property list's dictionary, each
/// value as `Dictionary.init(from:)` decodes it (`decode(Value.self, forKey:)`), but without a
/// keyed container, its coding keys and the generic lookups they cost.
private protocol StringKeyedDictionary {
    init(decoding dictionary: [String: PropertyListValue], codingPath: [any CodingKey]) throws
}

extension Dictionary: StringKeyedDictionary where Key == String, Value: Decodable {
    fileprivate init(decoding dictionary: [String: PropertyListValue], codingPath: [any CodingKey]) throws {
        self.init(minimumCapacity: dictionary.count)
        if Value.self == String.self {
            // The common case, without a decoder for each value.
            for (key, value) in dictionary {
                self[key] = (try ValueDecoder.string(value, codingPath + [PayloadCodingKey(stringValue: key)]) as! Value)
            }
            return
        }
        for (key, value) in dictionary {
            self[key] = try ValueDecoder(value: value, codingPath: codingPath + [PayloadCodingKey(stringValue: key)]).unwrap(Value.self)
        }
    }
}

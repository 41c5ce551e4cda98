import Foundation

/// Encodes a payload into a ``PropertyListValue``, by the rules of Foundation's
/// `PropertyListEncoder`, for ``BinaryPropertyListWriter`` to write as a binary property list.
///
/// Foundation's encoder costs about 10 µs for a typical payload on Linux, a sixth of an add;
/// this one builds the values the package's writer already writes. Its output is an ordinary
/// binary property list, which `PropertyListDecoder` reads the same way as ``PayloadDecoder``
/// does. The rules: nil is the string `"$null"`; `Date` and `Data` are the property list's
/// date and data objects; integers are integers (an unsigned value above `Int64.max` a
/// 16-byte one), `Float` and `Double` are reals; a value that encodes nothing is an empty
/// dictionary; asking twice for a keyed (or unkeyed) container of one value gives the same one.
///
/// ```swift
/// struct Upload: Codable { var url: String; var note: String? }
/// let value = try PayloadEncoder().encode(Upload(url: "https://example.com/a", note: nil))
/// // .dictionary(["url": .string("https://example.com/a"), "note": .string("$null")])
/// let bytes = BinaryPropertyListWriter.data(for: value)   // PropertyListDecoder reads it too
/// ```
package struct PayloadEncoder {
    package init() {}

    /// The property-list value of `value`.
    ///
    /// - Throws: `EncodingError.invalidValue` when the top-level value encodes nothing, and
    ///   whatever the value's `encode(to:)` throws.
    package func encode<T: Encodable>(_ value: T) throws -> PropertyListValue {
        let encoder = ValueEncoder(codingPath: [])
        try encoder.encodeGeneric(value)
        guard let slot = encoder.slot else {
            throw EncodingError.invalidValue(value, .init(codingPath: [], debugDescription: "Top-level \(T.self) did not encode any values."))
        }
        return slot.resolved
    }
}

/// Where an encoded value is, while encoding goes on: a finished value, or a container that
/// nested encoders still fill (containers are shared references until encoding ends).
private enum Slot {
    case value(PropertyListValue)
    case dictionary(DictionaryStorage)
    case array(ArrayStorage)
    case encoder(ValueEncoder)

    var resolved: PropertyListValue {
        switch self {
        case .value(let value): value
        case .dictionary(let storage): .dictionary(storage.entries.mapValues(\.resolved))
        case .array(let storage): .array(storage.elements.map(\.resolved))
        case .encoder(let encoder): encoder.slot?.resolved ?? .dictionary([:])
        }
    }
}

private final class DictionaryStorage {
    var entries: [String: Slot] = [:]
}

private final class ArrayStorage {
    var elements: [Slot] = []
}

/// The encoder of one value; a nested value gets an encoder of its own.
private final class ValueEncoder: Encoder, SingleValueEncodingContainer {
    let codingPath: [any CodingKey]
    var userInfo: [CodingUserInfoKey: Any] { [:] }
    /// What was encoded, once something was.
    var slot: Slot?

    init(codingPath: [any CodingKey]) {
        self.codingPath = codingPath
    }

    // MARK: Encoder

    func container<Key: CodingKey>(keyedBy type: Key.Type) -> KeyedEncodingContainer<Key> {
        let storage: DictionaryStorage
        if case .dictionary(let existing)? = slot {
            storage = existing
        } else {
            storage = DictionaryStorage()
            slot = .dictionary(storage)
        }
        return KeyedEncodingContainer(KeyedContainer<Key>(storage: storage, codingPath: codingPath))
    }

    func unkeyedContainer() -> any UnkeyedEncodingContainer {
        let storage: ArrayStorage
        if case .array(let existing)? = slot {
            storage = existing
        } else {
            storage = ArrayStorage()
            slot = .array(storage)
        }
        return UnkeyedContainer(storage: storage, codingPath: codingPath)
    }

    func singleValueContainer() -> any SingleValueEncodingContainer { self }

    // MARK: SingleValueEncodingContainer

    func encodeNil() { slot = .value(.string(PayloadDecoder.nullString)) }
    func encode(_ value: Bool) { slot = .value(.bool(value)) }
    func encode(_ value: String) { slot = .value(.string(value)) }
    func encode(_ value: Double) { slot = .value(.real(value)) }
    func encode(_ value: Float) { slot = .value(.real(Double(value))) }
    func encode(_ value: Int) { slot = .value(.integer(Int64(value))) }
    func encode(_ value: Int8) { slot = .value(.integer(Int64(value))) }
    func encode(_ value: Int16) { slot = .value(.integer(Int64(value))) }
    func encode(_ value: Int32) { slot = .value(.integer(Int64(value))) }
    func encode(_ value: Int64) { slot = .value(.integer(value)) }
    func encode(_ value: UInt) { slot = .value(.unsigned(UInt64(value))) }
    func encode(_ value: UInt8) { slot = .value(.integer(Int64(value))) }
    func encode(_ value: UInt16) { slot = .value(.integer(Int64(value))) }
    func encode(_ value: UInt32) { slot = .value(.integer(Int64(value))) }
    func encode(_ value: UInt64) { slot = .value(.unsigned(value)) }
    func encode<T: Encodable>(_ value: T) throws { try encodeGeneric(value) }

    /// Encodes `value` into this encoder: `Date` and `Data` as the property list's own
    /// objects, anything else through its `encode(to:)`.
    func encodeGeneric<T: Encodable>(_ value: T) throws {
        if let direct = try Self.directValue(of: value, codingPath: codingPath) {
            slot = .value(direct)
        } else {
            try value.encode(to: self)
        }
    }

    /// The property-list value of `value` when it is written without its `encode(to:)`: a
    /// `Date`, `Data`, or a dictionary with `String` keys; `nil` for anything else.
    private static func directValue<T: Encodable>(of value: T, codingPath: @autoclosure () -> [any CodingKey]) throws -> PropertyListValue? {
        if let date = value as? Date { return .date(date) }
        if let data = value as? Data { return .data(data) }
        if let dictionary = value as? any StringKeyedEncodableDictionary { return try dictionary.propertyListValue(codingPath: codingPath()) }
        return nil
    }

    /// The slot of `value`, encoded by an encoder of its own at `codingPath` (built only when
    /// one is needed).
    static func slot<T: Encodable>(of value: T, codingPath: @autoclosure () -> [any CodingKey]) throws -> Slot {
        if let direct = try directValue(of: value, codingPath: codingPath()) { return .value(direct) }
        let encoder = ValueEncoder(codingPath: codingPath())
        try value.encode(to: encoder)
        return encoder.slot ?? .dictionary(DictionaryStorage())
    }
}

private struct KeyedContainer<Key: CodingKey>: KeyedEncodingContainerProtocol {
    let storage: DictionaryStorage
    let codingPath: [any CodingKey]

    private func set(_ value: PropertyListValue, _ key: Key) { storage.entries[key.stringValue] = .value(value) }

    mutating func encodeNil(forKey key: Key) { set(.string(PayloadDecoder.nullString), key) }
    mutating func encode(_ value: Bool, forKey key: Key) { set(.bool(value), key) }
    mutating func encode(_ value: String, forKey key: Key) { set(.string(value), key) }
    mutating func encode(_ value: Double, forKey key: Key) { set(.real(value), key) }
    mutating func encode(_ value: Float, forKey key: Key) { set(.real(Double(value)), key) }
    mutating func encode(_ value: Int, forKey key: Key) { set(.integer(Int64(value)), key) }
    mutating func encode(_ value: Int8, forKey key: Key) { set(.integer(Int64(value)), key) }
    mutating func encode(_ value: Int16, forKey key: Key) { set(.integer(Int64(value)), key) }
    mutating func encode(_ value: Int32, forKey key: Key) { set(.integer(Int64(value)), key) }
    mutating func encode(_ value: Int64, forKey key: Key) { set(.integer(value), key) }
    mutating func encode(_ value: UInt, forKey key: Key) { set(.unsigned(UInt64(value)), key) }
    mutating func encode(_ value: UInt8, forKey key: Key) { set(.integer(Int64(value)), key) }
    mutating func encode(_ value: UInt16, forKey key: Key) { set(.integer(Int64(value)), key) }
    mutating func encode(_ value: UInt32, forKey key: Key) { set(.integer(Int64(value)), key) }
    mutating func encode(_ value: UInt64, forKey key: Key) { set(.unsigned(value), key) }

    mutating func encode<T: Encodable>(_ value: T, forKey key: Key) throws {
        storage.entries[key.stringValue] = try ValueEncoder.slot(of: value, codingPath: codingPath + [key])
    }

    mutating func nestedContainer<NestedKey: CodingKey>(keyedBy keyType: NestedKey.Type, forKey key: Key) -> KeyedEncodingContainer<NestedKey> {
        let nested = DictionaryStorage()
        storage.entries[key.stringValue] = .dictionary(nested)
        return KeyedEncodingContainer(KeyedContainer<NestedKey>(storage: nested, codingPath: codingPath + [key]))
    }

    mutating func nestedUnkeyedContainer(forKey key: Key) -> any UnkeyedEncodingContainer {
        let nested = ArrayStorage()
        storage.entries[key.stringValue] = .array(nested)
        return UnkeyedContainer(storage: nested, codingPath: codingPath + [key])
    }

    mutating func superEncoder() -> any Encoder {
        superEncoder(named: PayloadCodingKey.superKey)
    }

    mutating func superEncoder(forKey key: Key) -> any Encoder {
        superEncoder(named: key)
    }

    private func superEncoder(named key: some CodingKey) -> any Encoder {
        let encoder = ValueEncoder(codingPath: codingPath + [key])
        storage.entries[key.stringValue] = .encoder(encoder)
        return encoder
    }
}

private struct UnkeyedContainer: UnkeyedEncodingContainer {
    let storage: ArrayStorage
    let codingPath: [any CodingKey]

    var count: Int { storage.elements.count }

    private func append(_ value: PropertyListValue) { storage.elements.append(.value(value)) }
    private var nextPath: [any CodingKey] { codingPath + [PayloadCodingKey(intValue: count)] }

    mutating func encodeNil() { append(.string(PayloadDecoder.nullString)) }
    mutating func encode(_ value: Bool) { append(.bool(value)) }
    mutating func encode(_ value: String) { append(.string(value)) }
    mutating func encode(_ value: Double) { append(.real(value)) }
    mutating func encode(_ value: Float) { append(.real(Double(value))) }
    mutating func encode(_ value: Int) { append(.integer(Int64(value))) }
    mutating func encode(_ value: Int8) { append(.integer(Int64(value))) }
    mutating func encode(_ value: Int16) { append(.integer(Int64(value))) }
    mutating func encode(_ value: Int32) { append(.integer(Int64(value))) }
    mutating func encode(_ value: Int64) { append(.integer(value)) }
    mutating func encode(_ value: UInt) { append(.unsigned(UInt64(value))) }
    mutating func encode(_ value: UInt8) { append(.integer(Int64(value))) }
    mutating func encode(_ value: UInt16) { append(.integer(Int64(value))) }
    mutating func encode(_ value: UInt32) { append(.integer(Int64(value))) }
    mutating func encode(_ value: UInt64) { append(.unsigned(value)) }

    mutating func encode<T: Encodable>(_ value: T) throws {
        storage.elements.append(try ValueEncoder.slot(of: value, codingPath: nextPath))
    }

    mutating func nestedContainer<NestedKey: CodingKey>(keyedBy keyType: NestedKey.Type) -> KeyedEncodingContainer<NestedKey> {
        let nested = DictionaryStorage()
        let path = nextPath
        storage.elements.append(.dictionary(nested))
        return KeyedEncodingContainer(KeyedContainer<NestedKey>(storage: nested, codingPath: path))
    }

    mutating func nestedUnkeyedContainer() -> any UnkeyedEncodingContainer {
        let nested = ArrayStorage()
        let path = nextPath
        storage.elements.append(.array(nested))
        return UnkeyedContainer(storage: nested, codingPath: path)
    }

    mutating func superEncoder() -> any Encoder {
        let encoder = ValueEncoder(codingPath: nextPath)
        storage.elements.append(.encoder(encoder))
        return encoder
    }
}

/// A dictionary with `String` keys: encoded straight into the property list's dictionary, each
/// value as `Dictionary.encode(to:)` encodes it (`encode(value, forKey:)`), but without a keyed
/// container and its coding keys.
private protocol StringKeyedEncodableDictionary {
    func propertyListValue(codingPath: [any CodingKey]) throws -> PropertyListValue
}

extension Dictionary: StringKeyedEncodableDictionary where Key == String, Value: Encodable {
    fileprivate func propertyListValue(codingPath: [any CodingKey]) throws -> PropertyListValue {
        var entries: [String: PropertyListValue] = [:]
        entries.reserveCapacity(count)
        if Value.self == String.self {
            // The common case, without an encoder for each value.
            for (key, value) in unsafeBitCast(self, to: [String: String].self) { entries[key] = .string(value) }
            return .dictionary(entries)
        }
        for (key, value) in self {
            entries[key] = try ValueEncoder.slot(of: value, codingPath: codingPath + [PayloadCodingKey(stringValue: key)]).resolved
        }
        return .dictionary(entries)
    }
}

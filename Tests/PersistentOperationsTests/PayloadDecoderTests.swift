import CrashHarness
import Foundation
import Testing
@testable import PersistentOperations

/// The package's payload decoder against Foundation's `PropertyListDecoder`: the same values
/// from the same bytes, and the same refusals.
@Suite("Payload decoder")
struct PayloadDecoderTests {
    enum Kind: String, Codable, Equatable { case photo, video }
    enum Step: Codable, Equatable {
        case wait(seconds: Double)
        case upload(URL, parts: [Int])
        case done
    }
    struct Inner: Codable, Equatable {
        var name: String
        var tags: Set<String>
        var optionalDate: Date?
    }
    struct Everything: Codable, Equatable {
        var int: Int, int8: Int8, int16: Int16, int32: Int32, int64: Int64
        var uint: UInt, uint8: UInt8, uint16: UInt16, uint32: UInt32, uint64: UInt64
        var float: Float, double: Double, bool: Bool
        var string: String, optionalString: String?, date: Date, data: Data, url: URL
        var kind: Kind, steps: [Step], inner: Inner, inners: [Inner]
        var byName: [String: Int], byNumber: [Int: String], nested: [[Double]]
        var headers: [String: String], optionalHeaders: [String: String?], datesByName: [String: Date], innersByName: [String: [String: Inner]]
        var decimal: Decimal, uuid: UUID
    }

    class Base: Codable {
        var base: Int
        init(base: Int) { self.base = base }
    }
    final class Derived: Base, @unchecked Sendable {
        var extra: String
        init(base: Int, extra: String) {
            self.extra = extra
            super.init(base: base)
        }
        enum CodingKeys: String, CodingKey { case extra }
        required init(from decoder: any Decoder) throws {
            let container = try decoder.container(keyedBy: CodingKeys.self)
            extra = try container.decode(String.self, forKey: .extra)
            try super.init(from: container.superDecoder())
        }
        override func encode(to encoder: any Encoder) throws {
            var container = encoder.container(keyedBy: CodingKeys.self)
            try container.encode(extra, forKey: .extra)
            try super.encode(to: container.superEncoder())
        }
    }

    static func randomString(_ random: inout SeededGenerator) -> String {
        let pieces = ["", "a", "upload", "日本語", "emoji 🎉", " ", "\u{0}", "x/y?z=1", "Ünïcödé", "$nul", "null"]
        return (0..<Int.random(in: 0...3, using: &random)).map { _ in pieces.randomElement(using: &random)! }.joined()
    }

    static func randomEverything(_ random: inout SeededGenerator) -> Everything {
        func pick<T: FixedWidthInteger>(_ type: T.Type) -> T {
            [T.min, T.max, 0, 1, T.random(in: T.min...T.max, using: &random)].randomElement(using: &random)!
        }
        let doubles: [Double] = [0, -0.0, 1.5, -2.25e-300, .greatestFiniteMagnitude, .infinity, -.infinity, 785_000_000.123_456, Double.random(in: -1e9...1e9, using: &random)]
        let floats: [Float] = [0, 3.25, -.infinity, .greatestFiniteMagnitude, Float.random(in: -1e6...1e6, using: &random)]
        let inner = { (random: inout SeededGenerator) -> Inner in
            Inner(name: randomString(&random), tags: Set((0..<Int.random(in: 0...3, using: &random)).map { _ in randomString(&random) }),
                  optionalDate: Bool.random(using: &random) ? nil : Date(timeIntervalSinceReferenceDate: Double.random(in: -1e9...1e9, using: &random)))
        }
        return Everything(
            int: pick(Int.self), int8: pick(Int8.self), int16: pick(Int16.self), int32: pick(Int32.self), int64: pick(Int64.self),
            uint: pick(UInt.self), uint8: pick(UInt8.self), uint16: pick(UInt16.self), uint32: pick(UInt32.self), uint64: pick(UInt64.self),
            float: floats.randomElement(using: &random)!, double: doubles.randomElement(using: &random)!, bool: Bool.random(using: &random),
            string: randomString(&random), optionalString: Bool.random(using: &random) ? nil : randomString(&random),
            date: Date(timeIntervalSinceReferenceDate: doubles.filter(\.isFinite).randomElement(using: &random)!),
            data: Data((0..<Int.random(in: 0...40, using: &random)).map { _ in UInt8.random(in: 0...255, using: &random) }),
            url: URL(string: "https://example.com/\(Int.random(in: 0...999, using: &random))?q=\(Bool.random(using: &random))")!,
            kind: Bool.random(using: &random) ? .photo : .video,
            steps: (0..<Int.random(in: 0...3, using: &random)).map { index in
                [Step.wait(seconds: Double(index) / 3), .upload(URL(fileURLWithPath: "/tmp/\(index)"), parts: Array(0..<index)), .done][index % 3]
            },
            inner: inner(&random), inners: (0..<Int.random(in: 0...2, using: &random)).map { _ in inner(&random) },
            byName: Dictionary(uniqueKeysWithValues: (0..<Int.random(in: 0...4, using: &random)).map { ("k\($0)", pick(Int.self)) }),
            byNumber: Dictionary(uniqueKeysWithValues: (0..<Int.random(in: 0...4, using: &random)).map { ($0 * 7, randomString(&random)) }),
            nested: [[1, 2.5], [], [doubles.randomElement(using: &random)!]],
            headers: Dictionary(uniqueKeysWithValues: (0..<Int.random(in: 0...4, using: &random)).map { ("h\($0)" + randomString(&random), randomString(&random)) }),
            optionalHeaders: Dictionary(uniqueKeysWithValues: (0..<Int.random(in: 0...3, using: &random)).map { ("o\($0)", Bool.random(using: &random) ? nil : randomString(&random)) }),
            datesByName: Dictionary(uniqueKeysWithValues: (0..<Int.random(in: 0...2, using: &random)).map { ("d\($0)", Date(timeIntervalSinceReferenceDate: Double($0) * 1.5)) }),
            innersByName: ["outer": Dictionary(uniqueKeysWithValues: (0..<Int.random(in: 0...2, using: &random)).map { ("i\($0)", inner(&random)) })],
            decimal: Decimal(string: ["0", "1.5", "-123456789.000001", "3.4028236692093846346337460743176821145e38"].randomElement(using: &random)!)!,
            uuid: UUID()
        )
    }

    static func bytes<T: Encodable>(_ value: T) throws -> Data {
        let encoder = PropertyListEncoder()
        encoder.outputFormat = .binary
        return try encoder.encode(value)
    }

    static func ours<T: Decodable>(_ type: T.Type, _ data: Data) throws -> T {
        try PayloadDecoder(value: BinaryPropertyListReader.value(from: data)).decode(type)
    }

    @Test func decodesWhatFoundationEncodesToTheValuesFoundationsDecoderReads() throws {
        var random = SeededGenerator(seed: 2026)
        for index in 0..<300 {
            let value = Self.randomEverything(&random)
            let data = try Self.bytes(value)
            let foundation = try PropertyListDecoder().decode(Everything.self, from: data)
            let ours = try Self.ours(Everything.self, data)
            // Equal to Foundation's reading (NaN aside: none is generated), field by field
            #expect(ours == foundation, "case \(index)")
            #expect(ours.double.bitPattern == foundation.double.bitPattern, "case \(index): -0.0 and friends")
        }
        // A class hierarchy through superDecoder
        let derived = try Self.ours(Derived.self, Self.bytes(Derived(base: 7, extra: "x")))
        #expect(derived.base == 7 && derived.extra == "x")
        // NaN stays NaN
        #expect(try Self.ours([Double].self, Self.bytes([Double.nan])).first?.isNaN == true)
    }

    @Test func refusesWhatFoundationsDecoderRefuses() throws {
        struct Numbers: Codable { var small: Int8; var unsigned: UInt; var whole: Int; var flag: Bool }
        struct Wide: Codable { var small: Int; var unsigned: Int; var whole: Double; var flag: Bool }
        struct Texts: Codable { var small: String; var unsigned: String?; var whole: [Int]; var flag: [String: Int] }
        struct Missing: Codable { var absent: Int }
        struct Optionals: Codable { var note: String? }
        let cases: [(name: String, data: Data, decode: (Data) throws -> Void, foundation: (Data) throws -> Void)] = try [
            ("out of range", Self.bytes(Wide(small: 300, unsigned: -1, whole: 2, flag: true)),
             { _ = try Self.ours(Numbers.self, $0) }, { _ = try PropertyListDecoder().decode(Numbers.self, from: $0) }),
            ("a fraction into an integer", Self.bytes(Wide(small: 1, unsigned: 1, whole: 2.5, flag: true)),
             { _ = try Self.ours(Numbers.self, $0) }, { _ = try PropertyListDecoder().decode(Numbers.self, from: $0) }),
            ("numbers as texts", Self.bytes(Wide(small: 1, unsigned: 1, whole: 2, flag: false)),
             { _ = try Self.ours(Texts.self, $0) }, { _ = try PropertyListDecoder().decode(Texts.self, from: $0) }),
            ("a missing key", Self.bytes(Optionals(note: "x")),
             { _ = try Self.ours(Missing.self, $0) }, { _ = try PropertyListDecoder().decode(Missing.self, from: $0) }),
            ("$null as a String", Self.bytes(["$null"]),
             { _ = try Self.ours([String].self, $0) }, { _ = try PropertyListDecoder().decode([String].self, from: $0) }),
            ("$null as a String in a dictionary", Self.bytes(["a": "x", "b": "$null"]),
             { _ = try Self.ours([String: String].self, $0) }, { _ = try PropertyListDecoder().decode([String: String].self, from: $0) }),
            ("a number as a String in a dictionary", Self.bytes(["a": 1]),
             { _ = try Self.ours([String: String].self, $0) }, { _ = try PropertyListDecoder().decode([String: String].self, from: $0) }),
            ("an array as a dictionary", Self.bytes(["a", "b"]),
             { _ = try Self.ours([String: String].self, $0) }, { _ = try PropertyListDecoder().decode([String: String].self, from: $0) }),
            ("a date as a number in a dictionary", Self.bytes(["a": 1.5]),
             { _ = try Self.ours([String: Date].self, $0) }, { _ = try PropertyListDecoder().decode([String: Date].self, from: $0) }),
        ]
        for entry in cases {
            #expect(throws: (any Error).self, "\(entry.name): ours") { try entry.decode(entry.data) }
            #expect(throws: (any Error).self, "\(entry.name): Foundation") { try entry.foundation(entry.data) }
        }
        // And what both accept in a wider type reads the same
        let whole = try Self.bytes(Wide(small: 1, unsigned: 2, whole: 3, flag: true))
        let numbers = try Self.ours(Numbers.self, whole)
        #expect(numbers.small == 1 && numbers.unsigned == 2 && numbers.whole == 3 && numbers.flag)
        #expect(try PropertyListDecoder().decode(Numbers.self, from: whole).whole == 3)
        // "$null" is nil for an optional, as Foundation reads it
        #expect(try Self.ours(Optionals.self, Self.bytes(Optionals(note: nil))).note == nil)
        #expect(try Self.ours([String?].self, Self.bytes(["a", nil, "b"])) == ["a", nil, "b"])
    }

    @Test func theRecordFormatDecodesPayloadsWithIt() throws {
        // A payload stored by the queue reads back through RecordFormat.decodePayload
        var random = SeededGenerator(seed: 7)
        let value = Self.randomEverything(&random)
        let data = try RecordFormat.encodePayload(value)
        #expect(try RecordFormat.decodePayload(Everything.self, from: data) == value)
    }
}

/// The package's payload encoder against Foundation's `PropertyListEncoder`: the same property
/// list, read the same by both decoders.
@Suite("Payload encoder")
struct PayloadEncoderTests {
    typealias Everything = PayloadDecoderTests.Everything

    @Test func encodesTheSamePropertyListAsFoundationReadableByBothDecoders() throws {
        var random = SeededGenerator(seed: 2027)
        for index in 0..<300 {
            let value = PayloadDecoderTests.randomEverything(&random)
            let ours = try PayloadEncoder().encode(value)
            let bytes = BinaryPropertyListWriter.data(for: ours)
            // The same values as Foundation's encoder writes (a Float is a 4-byte real there)
            let foundation = try BinaryPropertyListReader.value(from: PayloadDecoderTests.bytes(value))
            #expect(ours == foundation, "case \(index)")
            // And both decoders read back the value
            #expect(try PropertyListDecoder().decode(Everything.self, from: bytes) == value, "case \(index)")
            #expect(try PayloadDecoder(value: BinaryPropertyListReader.value(from: bytes)).decode(Everything.self) == value, "case \(index)")
        }
        // A class hierarchy through superEncoder, and nil in every kind of container
        let derived = try PropertyListDecoder().decode(
            PayloadDecoderTests.Derived.self,
            from: BinaryPropertyListWriter.data(for: PayloadEncoder().encode(PayloadDecoderTests.Derived(base: 3, extra: "y")))
        )
        #expect(derived.base == 3 && derived.extra == "y")
        let optionals: [String: [Int?]] = ["a": [1, nil, 3], "b": []]
        #expect(try PayloadEncoder().encode(optionals) == BinaryPropertyListReader.value(from: PayloadDecoderTests.bytes(optionals)))
    }

    @Test func aTopLevelValueThatEncodesNothingIsRefusedAsFoundationRefusesIt() throws {
        struct Silent: Encodable {
            func encode(to encoder: any Encoder) throws {}
        }
        #expect(throws: EncodingError.self) { try PayloadEncoder().encode(Silent()) }
        #expect(throws: EncodingError.self) { try PayloadDecoderTests.bytes(Silent()) }
        // Nested, it is an empty dictionary, as Foundation writes it
        #expect(try PayloadEncoder().encode([Silent()]) == BinaryPropertyListReader.value(from: PayloadDecoderTests.bytes([Silent()])))
    }
}

import CrashHarness
import Foundation
import Testing
@testable import PersistentOperations

@Suite("Record format")
struct RecordFormatTests {
    @Test func crc32MatchesTheStandardCheckValue() {
        #expect(CRC32.checksum(of: Array("123456789".utf8)) == 0xCBF4_3926)
        #expect(CRC32.checksum(of: Data("123456789".utf8)) == 0xCBF4_3926)
        #expect(CRC32.checksum(of: "123456789".utf8.lazy.map { $0 }) == 0xCBF4_3926)
    }

    @Test(arguments: [2, 40])
    func aDictionaryWithTwoKeysOfEqualTextIsRejectedWhateverTheirEncoding(keyCount: Int) throws {
        // Given dictionaries of `keyCount` keys (compared pair by pair up to 32, through a set
        // beyond), two of them distinct objects of equal text: the same ASCII bytes, or "é" as
        // one precomposed UTF-16 scalar and as "e" and a combining accent (equal as Swift
        // strings compare them)
        func dictionary(keys: [[UInt8]]) -> Data {
            var objects: [[UInt8]] = [[0xDF, 0x10, UInt8(keys.count)] + (1...keys.count).map(UInt8.init) + Array(repeating: UInt8(keys.count + 1), count: keys.count)]
            objects += keys
            objects.append([0x10, 0x01])
            return CraftedPropertyList.assemble(objects: objects)
        }
        let fillers: [[UInt8]] = (0..<(keyCount - 2)).map { [0x52, 0x6B, UInt8(0x41 + $0)] }   // "kA", "kB", …
        let sameBytes = dictionary(keys: fillers + [[0x51, 0x78], [0x51, 0x78]])
        let precomposedAndDecomposed = dictionary(keys: fillers + [[0x61, 0x00, 0xE9], [0x62, 0x00, 0x65, 0x03, 0x01]])
        let distinct = dictionary(keys: fillers + [[0x51, 0x78], [0x51, 0x79]])

        // Then both are rejected as duplicates, as a whole value and as top-level entries
        for data in [sameBytes, precomposedAndDecomposed] {
            #expect(throws: BinaryPropertyListReader.Rejection.self) { try BinaryPropertyListReader.value(from: data) }
            #expect(throws: BinaryPropertyListReader.Rejection.self) { try BinaryPropertyListReader.topLevelEntries(from: data) }
        }
        // And keys of different text are read, in stored order
        let entries = try #require(try BinaryPropertyListReader.topLevelEntries(from: distinct))
        #expect(entries.map(\.key).suffix(2) == ["x", "y"])
        #expect(entries.count == keyCount)
    }

    @Test func theRarelySetFieldsOfACopyChangeApartFromTheOriginal() throws {
        // Given a record with a tag and a unique key (kept in a box that copies share)
        var original = OperationRecord(typeIdentifier: "t", payload: Data([1]), enqueueSequence: 1, tags: ["a"], uniqueKey: "k")
        var copy = original

        // When the copy changes them, and the original changes another
        copy.tags.append("b")
        copy.uniqueKey = nil
        copy.repeatFlex = -0.0
        original.conditions = ["wifi"]

        // Then each sees only its own changes
        #expect(original.tags == ["a"] && original.uniqueKey == "k" && original.conditions == ["wifi"])
        #expect(copy.tags == ["a", "b"] && copy.uniqueKey == nil && copy.conditions.isEmpty)
        #expect(copy.repeatFlex == 0 && copy.repeatFlex.sign == .minus && original.repeatFlex.sign == .plus)
        // And a record whose fields all went back to their defaults equals one that never set them
        copy.tags = []
        copy.repeatFlex = 0
        original.tags = []
        original.uniqueKey = nil
        original.conditions = []
        #expect(copy == original)
        #expect(copy == OperationRecord(id: original.id, typeIdentifier: "t", payload: Data([1]), enqueueSequence: 1, enqueuedAt: original.enqueuedAt))
    }

    @Test func aRecordWithEveryFieldSetReadsBackEqual() throws {
        // Given a record using every field, with fractional-second dates and awkward strings
        let record = OperationRecord(
            typeIdentifier: "$null",
            payload: try RecordFormat.encodePayload(SamplePayload.example),
            priority: -7,
            enqueueSequence: UInt64.max,
            enqueuedAt: Date(timeIntervalSinceReferenceDate: 123.456_789_012),
            notBefore: Date(timeIntervalSinceReferenceDate: -0.25),
            tags: ["$null", "", "日本語", "emoji 🎉"],
            uniqueKey: "user-42/avatar",
            numberOfRetries: 4,
            numberOfAttempts: 9,
            nextAttemptAt: Date(timeIntervalSinceReferenceDate: 1e9 + 0.001),
            attemptsInFlight: 2,
            lastErrorDescription: String(repeating: "x", count: 300),
            failureReason: "crash loop"
        )
        // When it is encoded and decoded
        let decoded = try RecordFormat.decode(try RecordFormat.encode(record))
        // Then every field is equal, dates to the bit
        #expect(decoded == record)
        #expect(decoded.enqueuedAt.timeIntervalSinceReferenceDate == 123.456_789_012)
    }

    @Test func theRecordBodyIsAPropertyListThatFoundationReads() throws {
        // Given an encoded record
        let record = try makeRecord(index: 5)
        let file = try RecordFormat.encode(record)
        // When Foundation's decoder reads the body
        let body = file.dropFirst(RecordFormat.headerSize)
        let decoded = try PropertyListDecoder().decode(OperationRecord.self, from: Data(body))
        // Then it sees the same record
        #expect(decoded == record)
    }

    @Test func aPayloadWithAFractionalSecondsDateReadsBackExactly() throws {
        // Given a payload holding a date with sub-second precision
        let payload = SamplePayload.example
        // When it is encoded and decoded
        let decoded = try RecordFormat.decodePayload(SamplePayload.self, from: try RecordFormat.encodePayload(payload))
        // Then it is equal, date included
        #expect(decoded == payload)
        #expect(decoded.createdAt == payload.createdAt)
    }

    @Test func aPayloadContainingTheStringDollarNullIsRefused() throws {
        // Given a payload whose string is "$null", which the plist coders on Linux read as nil
        var payload = SamplePayload.example
        payload.url = "$null"
        // Then encoding refuses it instead of storing something that reads back different
        let error = #expect(throws: PersistenceError.self) { try RecordFormat.encodePayload(payload) }
        #expect(error?.code == .payloadDoesNotRoundTrip)
    }

    @Test func anOptionalDollarNullThatWouldReadBackAsNilIsRefused() throws {
        var payload = SamplePayload.example
        payload.note = "$null"
        let error = #expect(throws: PersistenceError.self) { try RecordFormat.encodePayload(payload) }
        #expect(error?.code == .payloadDoesNotRoundTrip)
    }

    @Test func equalityIsThePayloadsOwnWhenItIsEquatableAndTheJSONFormOtherwise() throws {
        // A payload whose == compares only its identifier: its own notion of equal decides,
        // so a note that reads back different (nil for "$null") is accepted
        struct Keyed: Codable, Equatable {
            var id: Int
            var note: String?
            static func == (lhs: Keyed, rhs: Keyed) -> Bool { lhs.id == rhs.id }
        }
        #expect(throws: Never.self) { try RecordFormat.encodePayload(Keyed(id: 1, note: "$null")) }
        // A class compared by identity is never == to what it decodes to: the JSON forms decide
        final class Identity: Codable, Equatable, @unchecked Sendable {
            var note: String?
            init(note: String?) { self.note = note }
            static func == (lhs: Identity, rhs: Identity) -> Bool { lhs === rhs }
        }
        #expect(throws: Never.self) { try RecordFormat.encodePayload(Identity(note: "hello")) }
        let error = #expect(throws: PersistenceError.self) { try RecordFormat.encodePayload(Identity(note: "$null")) }
        #expect(error?.code == .payloadDoesNotRoundTrip)
    }

    @Test func aPayloadWhoseEncodeThrowsIsReportedAsNotEncodable() throws {
        struct Unencodable: Codable {
            struct Refusal: Error {}
            init() {}
            init(from decoder: any Decoder) throws {}
            func encode(to encoder: any Encoder) throws { throw Refusal() }
        }
        let error = #expect(throws: PersistenceError.self) { try RecordFormat.encodePayload(Unencodable()) }
        #expect(error?.code == .payloadNotEncodable)
        #expect(error?.underlyingError != nil)
    }

    @Test func aRecordOverTheSizeCapIsRefusedWithRecordTooLarge() throws {
        // Given a record whose payload alone exceeds the cap
        var record = try makeRecord()
        record.payload = Data(count: 2_000)
        // When it is encoded with a 1,000-byte cap
        let error = #expect(throws: PersistenceError.self) { try RecordFormat.encode(record, maximumSize: 1_000) }
        // Then it is refused with a clear code
        #expect(error?.code == .recordTooLarge)
        #expect(error?.message.contains("maximum record size of 1000 bytes") == true)
    }

    @Test func theDefaultCapRefusesARecordOfMoreThanOneMebibyte() throws {
        var record = try makeRecord()
        record.payload = Data(count: 1 << 20)
        let error = #expect(throws: PersistenceError.self) { try RecordFormat.encode(record) }
        #expect(error?.code == .recordTooLarge)
    }

    @Test func aNewerFormatVersionIsReportedAsUnsupported() throws {
        let file = recordFile(body: Data(try RecordFormat.encode(try makeRecord()).dropFirst(RecordFormat.headerSize)), version: UInt16(OperationRecord.currentFormatVersion + 1))
        let error = #expect(throws: PersistenceError.self) { try RecordFormat.decode(file) }
        #expect(error?.code == .unsupportedFormatVersion)
    }

    @Test(arguments: CraftedPropertyList.all.map(\.name))
    func aCraftedBodyWithAValidChecksumIsRejectedBeforeAnyDecoderSeesIt(name: String) throws {
        // Given a crafted body wrapped in a header whose length and CRC-32 are correct
        let body = try #require(CraftedPropertyList.all.first { $0.name == name }?.body)
        // When it is decoded as a record, and as a payload
        let recordError = #expect(throws: PersistenceError.self) { try RecordFormat.decode(recordFile(body: body)) }
        let payloadError = #expect(throws: PersistenceError.self) {
            try RecordFormat.decodePayload(SamplePayload.self, from: body)
        }
        // Then both are rejected as corrupt, and the process is still alive
        #expect(recordError?.code == .corruptRecord)
        #expect(payloadError?.code == .corruptRecord)
    }

    @Test func nestingUpToTheLimitIsAcceptedAndOneMoreLevelIsNot() {
        #expect(throws: Never.self) { try BinaryPropertyListReader.verify(CraftedPropertyList.nested(depth: 255)) }
        #expect(throws: BinaryPropertyListReader.Rejection.self) {
            try BinaryPropertyListReader.verify(CraftedPropertyList.nested(depth: 256))
        }
    }

    @Test func mutatedPayloadsThatPassVerificationNeverCrashTheDecoder() throws {
        // Given a valid payload, mutated a few thousand times (a checksum would not help here)
        let original = [UInt8](try RecordFormat.encodePayload(SamplePayload.example))
        var generator = SeededGenerator(seed: 0x5EED)
        var accepted = 0
        for _ in 0..<3_000 {
            var bytes = original
            for _ in 0..<Int.random(in: 1...4, using: &generator) {
                let index = Int.random(in: 0..<bytes.count, using: &generator)
                if Bool.random(using: &generator) {
                    bytes[index] ^= UInt8(1) << UInt8.random(in: 0..<8, using: &generator)
                } else {
                    bytes[index] = UInt8.random(in: 0...255, using: &generator)
                }
            }
            // When the store's reader decodes it
            if (try? RecordFormat.decodePayload(SamplePayload.self, from: Data(bytes))) != nil {
                accepted += 1
            }
        }
        // Then the process survived every one (some mutations are harmless and decode)
        #expect(accepted < 3_000)
    }
}

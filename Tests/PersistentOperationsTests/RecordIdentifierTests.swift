import Foundation
import Testing
@testable import PersistentOperations

@Suite("Record identifiers")
struct RecordIdentifierTests {
    @Test func madeIdentifiersAreRandomVersion4UUIDsInCanonicalForm() throws {
        var seen = Set<String>()
        for _ in 0..<2_000 {
            let id = RecordIdentifier.make()
            let uuid = try #require(UUID(uuidString: id))
            #expect(uuid.uuidString == id)
            let bytes = uuid.uuid
            #expect(bytes.6 >> 4 == 4, "version 4")
            #expect(bytes.8 >> 6 == 0b10, "RFC 9562 variant")
            seen.insert(id)
        }
        #expect(seen.count == 2_000)
    }

    @Test func aBatchOfIdentifiersIsDistinctVersion4UUIDsWhoseRandomBitsAllVary() throws {
        #expect(RecordIdentifier.make(count: 0).isEmpty)
        #expect(RecordIdentifier.make(count: 1).count == 1)
        let first = RecordIdentifier.make(count: 5_000)
        let second = RecordIdentifier.make(count: 5_000)
        #expect(first.count == 5_000)
        #expect(Set(first + second).count == 10_000, "no identifier repeats, within a batch or across two")
        var ones = UUIDBits(high: 0, low: 0), zeros = UUIDBits(high: 0, low: 0)
        for id in first {
            let uuid = try #require(UUID(uuidString: id))
            #expect(uuid.uuidString == id)
            #expect(uuid.uuid.6 >> 4 == 4, "version 4")
            #expect(uuid.uuid.8 >> 6 == 0b10, "RFC 9562 variant")
            let bits = try #require(RecordIdentifier.bits(id))
            ones.high |= bits.high; ones.low |= bits.low
            zeros.high |= ~bits.high; zeros.low |= ~bits.low
        }
        // Each of the 122 random bits is 1 in some identifier and 0 in another (the 6 fixed
        // bits, version and variant, never change).
        let fixedHigh: UInt64 = 0xF << 12, fixedLow: UInt64 = 0x3 << 62
        #expect(ones.high & zeros.high == ~fixedHigh)
        #expect(ones.low & zeros.low == ~fixedLow)
    }

    @Test func parsingAgreesWithFoundationOnCanonicalIdentifiers() {
        for _ in 0..<2_000 {
            let uuid = UUID()
            #expect(RecordIdentifier.uuid(uuid.uuidString) == uuid)
        }
    }

    @Test func parsingRefusesEverythingButTheCanonicalUppercaseForm() {
        let valid = "6F1C9A4E-2B7D-4C1E-9F3A-0D5E8B7C6A21"
        #expect(RecordIdentifier.isValid(valid))
        let invalid = [
            valid.lowercased(), "", String(valid.dropLast()), valid + "0", "{" + valid + "}",
            valid.replacingOccurrences(of: "-", with: ""), valid.replacingOccurrences(of: "2B7D-", with: "2B7D_"),
            "6F1C9A4E-2B7D-4C1E-9F3A-0D5E8B7C6A2G", "6F1C9A4E-2B7D-4C1E-9F3A0-D5E8B7C6A21",
            "../../etc/passwd-0000-0000-000000000000", "6F1C9A4E-2B7D-4C1E-9F3A-0D5E8B7C6A2\u{00E9}",
        ]
        for id in invalid {
            #expect(!RecordIdentifier.isValid(id), "\(id)")
            #expect(!OperationRecord.isValidIdentifier(id), "\(id)")
        }
    }

    @Test func everyOneByteChangeOfAnIdentifierParsesAsFoundationReadsItsCanonicalForm() {
        // Every byte value at every position of a valid identifier: accepted exactly when it
        // spells the canonical uppercase form of the UUID Foundation reads from it
        let valid = Array("6F1C9A4E-2B7D-4C1E-9F3A-0D5E8B7C6A21".utf8)
        var accepted = 0
        for position in valid.indices {
            for byte in UInt8.min...UInt8.max {
                var bytes = valid
                bytes[position] = byte
                let parsed = bytes.withUnsafeBufferPointer { RecordIdentifier.uuid(utf8: $0) }
                let text = String(decoding: bytes, as: UTF8.self)
                let foundation = UUID(uuidString: text).flatMap { $0.uuidString == text ? $0 : nil }
                #expect(parsed == foundation, "position \(position), byte \(byte)")
                if parsed != nil { accepted += 1 }
            }
        }
        #expect(accepted == 32 * 16 + 4)   // each digit position with any of 16 digits, each dash kept
    }
}

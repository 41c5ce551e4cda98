import CrashHarness
import Foundation
import Testing
@testable import PersistentOperations

/// The store's binary property-list reader against the reader it replaced
/// (`ReferencePropertyListReader`): on records, payloads, crafted attacks and tens of
/// thousands of mutations of them, both accept the same bytes and read the same values.
@Suite("Property-list reader: differential", .timeLimit(.minutes(2)))
struct PropertyListReaderDifferentialTests {
    /// Bodies to start from: every golden record, records and payloads of every shape this
    /// package writes, what Foundation's encoder writes, and the crafted attacks.
    static func corpus() throws -> [Data] {
        var bodies: [Data] = []
        let fixtures = try #require(Bundle.module.url(forResource: "Fixtures", withExtension: nil))
        for name in try FileManager.default.contentsOfDirectory(atPath: fixtures.path).sorted() {
            let file = try Data(contentsOf: fixtures.appendingPathComponent(name))
            bodies.append(name.hasSuffix(".record") ? file.dropFirst(RecordFormat.headerSize) : file)
        }
        var full = try makeRecord(index: 7, priority: -3)
        full.tags = ["$null", "", "日本語", "emoji 🎉", "é"]
        full.prerequisites = [UUID().uuidString, UUID().uuidString]
        full.conditions = ["wifi", "charging"]
        full.uniqueKey = "user-42/avatar"
        full.lastErrorDescription = String(repeating: "x", count: 300)
        full.expiresAt = Date(timeIntervalSinceReferenceDate: 1e9)
        full.lane = "chat:1"
        full.payloadVersion = 3
        for record in [try makeRecord(), try makeRecord(index: 1, priority: 5), full] {
            bodies.append(try RecordFormat.encode(record).dropFirst(RecordFormat.headerSize))
        }
        bodies.append(try RecordFormat.encodePayload(SamplePayload.example))
        let encoder = PropertyListEncoder()
        encoder.outputFormat = .binary
        bodies.append(try encoder.encode(SamplePayload.example))
        bodies.append(try encoder.encode(["a": ["b": [1, 2, 3]], "c": ["d": [], "é": [Int.max, Int.min]]]))
        bodies.append(try encoder.encode([[Data(repeating: 7, count: 300)], [Data()]]))
        bodies.append(try encoder.encode([0.5, -1e300, Double.infinity]))
        bodies.append(try encoder.encode([String(repeating: "日本", count: 40): UInt64.max]))
        bodies += CraftedPropertyList.all.map(\.body)
        bodies.append(CraftedPropertyList.nested(depth: 255))
        bodies.append(CraftedPropertyList.nested(depth: 256))
        return bodies
    }

    /// Whether the two readers agree on `bytes`: both refuse them, or both read the same value
    /// and the same top-level entries.
    static func agree(on bytes: Data) -> (agree: Bool, accepted: Bool) {
        let reference = Result { () throws(ReferencePropertyListReader.Rejection) in try ReferencePropertyListReader.value(from: bytes) }
        let reader = Result { () throws(BinaryPropertyListReader.Rejection) in try BinaryPropertyListReader.value(from: bytes) }
        switch (reference, reader) {
        case (.failure, .failure):
            return (true, false)
        case (.success(let expected), .success(let value)):
            guard identical(expected, value) else { return (false, true) }
            let expectedEntries = try? ReferencePropertyListReader.topLevelEntries(from: bytes)
            let entries = try? BinaryPropertyListReader.topLevelEntries(from: bytes)
            guard let expectedEntries, let entries else { return (expectedEntries == nil && entries == nil, true) }
            let same = expectedEntries.count == entries.count && zip(expectedEntries, entries).allSatisfy { $0.key == $1.key && identical($0.value, $1.value) }
            // And the values read by key, as a record is read, are those of the same entries
            guard let values = try? BinaryPropertyListReader.topLevelValues(from: bytes, forKeys: keys) else { return (false, true) }
            let sameByKey = zip(keys.names, values).allSatisfy { name, value in
                let expected = expectedEntries.first { $0.key == name }?.value
                return expected.flatMap { expected in value.map { identical(expected, $0) } } ?? (value == nil)
            }
            return (same && sameByKey, true)
        default:
            return (false, reference.isSuccess)
        }
    }

    /// The keys read by key: a record's, and the keys of the other dictionaries of the corpus.
    static let keys = BinaryPropertyListReader.KeyTable(OperationRecord.Fields.keyTable.names + ["a", "c", "d", "é", String(repeating: "日本", count: 40)])

    /// `==`, but reals and dates compared bit for bit (a mutation makes NaNs, which `==` never
    /// finds equal).
    static func identical(_ first: PropertyListValue, _ second: PropertyListValue) -> Bool {
        switch (first, second) {
        case (.real(let a), .real(let b)):
            return a.bitPattern == b.bitPattern
        case (.date(let a), .date(let b)):
            return a.timeIntervalSinceReferenceDate.bitPattern == b.timeIntervalSinceReferenceDate.bitPattern
        case (.array(let a), .array(let b)):
            return a.count == b.count && zip(a, b).allSatisfy { identical($0, $1) }
        case (.dictionary(let a), .dictionary(let b)):
            return a.count == b.count && a.allSatisfy { key, value in b[key].map { identical(value, $0) } ?? false }
        default:
            return first == second
        }
    }

    @Test func bothReadersReadTheCorpusAlike() throws {
        for (index, body) in try Self.corpus().enumerated() {
            #expect(Self.agree(on: body).agree, "corpus body \(index) (\(body.count) bytes)")
        }
    }

    @Test func bothReadersAcceptAndRefuseTheSameMutations() throws {
        // Given 40,000 mutations of the corpus: bytes changed, flipped, cut off or added (4,000
        // under the sanitizer, which slows this single-threaded test tenfold and checks nothing in it)
        let rounds = isRunningUnderThreadSanitizer ? 4_000 : 40_000
        let corpus = try Self.corpus().map { [UInt8]($0) }
        var generator = SeededGenerator(seed: 0xD1FF)
        var accepted = 0
        var refused = 0
        var disagreements: [String] = []
        for round in 0..<rounds {
            var bytes = corpus[round % corpus.count]
            switch Int.random(in: 0..<10, using: &generator) {
            case 0 where bytes.count > 1:
                bytes.removeLast(Int.random(in: 1..<bytes.count, using: &generator))
            case 1:
                bytes += (0..<Int.random(in: 1...8, using: &generator)).map { _ in UInt8.random(in: 0...255, using: &generator) }
            default:
                for _ in 0..<Int.random(in: 1...4, using: &generator) where !bytes.isEmpty {
                    let index = Int.random(in: 0..<bytes.count, using: &generator)
                    if Bool.random(using: &generator) {
                        bytes[index] ^= UInt8(1) << UInt8.random(in: 0..<8, using: &generator)
                    } else {
                        bytes[index] = UInt8.random(in: 0...255, using: &generator)
                    }
                }
            }
            // When both readers read it
            let (agree, wasAccepted) = Self.agree(on: Data(bytes))
            if wasAccepted { accepted += 1 } else { refused += 1 }
            if !agree, disagreements.count < 5 { disagreements.append("round \(round): \(bytes.map { String($0, radix: 16) }.joined(separator: " "))") }
        }
        // Then they agree on every one, and the mutations exercised both outcomes
        #expect(disagreements.isEmpty, "\(disagreements.joined(separator: "\n"))")
        #expect(accepted > rounds / 40 && refused > rounds / 40, "accepted \(accepted), refused \(refused)")
    }
}

private extension Result {
    var isSuccess: Bool {
        if case .success = self { return true }
        return false
    }
}

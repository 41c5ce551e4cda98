import CrashHarness
import Foundation
import Testing
@testable import PersistentOperations

/// Opening a journal reads only the fields its index needs; the rest of each record is
/// verified when it is loaded.
@Suite(.timeLimit(.minutes(10)))   // the heavy workloads share two cores under Thread Sanitizer in CI: a limit that catches a hang, not a slow machine
struct IndexFieldsTests {
    /// The golden record files of every format version (`Fixtures/`).
    static let goldenRecordNames = ["v1-minimal.record", "v1-full.record", "v1-failed.record", "v2-dependent.record", "v2-failed-dependent.record", "v3-expiring.record", "v4-periodic.record", "v5-defaults.record", "v5-full.record"]

    /// A record file whose body is the dictionary `entries`, with a header that checks.
    static func recordFile(_ entries: [String: PropertyListValue], formatVersion: Int) -> Data {
        let body = BinaryPropertyListWriter.data(for: .dictionary(entries))
        var file = Data(RecordFormat.magic)
        file.append(contentsOf: [0, UInt8(formatVersion), 0, 0])
        withUnsafeBytes(of: UInt32(body.count).bigEndian) { file.append(contentsOf: $0) }
        withUnsafeBytes(of: CRC32.checksum(of: body).bigEndian) { file.append(contentsOf: $0) }
        file.append(body)
        return file
    }

    static func fields(_ record: OperationRecord) -> RecordFormat.IndexFields {
        .init(record, id: RecordIdentifier.uuid(record.id)!)
    }

    @Test(arguments: IndexFieldsTests.goldenRecordNames)
    func theFieldsOfEveryGoldenRecordAreThoseOfItsFullDecode(name: String) throws {
        let file = try Data(contentsOf: GoldenFileTests.fixtureURL(name))
        let record = try RecordFormat.decode(file)
        #expect(RecordFormat.indexFields(of: file) == Self.fields(record))
    }

    @Test func extremeValuesReadTheSameAsTheFullDecode() throws {
        for (sequence, priority) in [(UInt64(0), Int.min), (UInt64(Int64.max), -8), (UInt64(Int64.max) + 1, 4), (UInt64.max, Int.max), (255, 0), (65_536, 1)] {
            let record = try makeRecord(sequence: sequence, priority: priority)
            for version in [1, 5] {   // version 5 leaves a priority of 0 out
                let file = try RecordFormat.encode(record, formatVersion: version)
                #expect(RecordFormat.indexFields(of: file) == Self.fields(record), "\(sequence) \(priority), version \(version)")
            }
        }
    }

    /// A record with some of its dates (not before, next attempt) and, one in five, periodic.
    static func makeDatedRecord(index: Int) throws -> OperationRecord {
        var record = try makeRecord(index: index, sequence: UInt64(index) * 1_000_003, priority: index - 10)
        if index % 2 == 0 { record.notBefore = Date(timeIntervalSinceReferenceDate: 770_000_000.25 + Double(index)) }
        if index % 3 == 0 { record.nextAttemptAt = Date(timeIntervalSinceReferenceDate: 770_000_100.5 - Double(index) * 20) }
        if index % 5 == 0 {
            record.repeatInterval = 3_600
            record.periodTarget = Date(timeIntervalSinceReferenceDate: 770_003_600)
        }
        return record
    }

    @Test func dueDatesAndThePeriodicFlagReadTheSameAsTheFullDecode() throws {
        // Given records with neither, either or both of their dates (the later one is when
        // they are due), periodic or not, extreme dates among them
        var records = try (0..<20).map { try Self.makeDatedRecord(index: $0) }
        var extreme = try makeRecord(index: 21)
        extreme.notBefore = .distantPast
        extreme.nextAttemptAt = .distantFuture
        records.append(extreme)
        for record in records {
            for version in [4, 5] {
                // When only the index fields are read, they are those of the full decode
                let file = try RecordFormat.encode(record, formatVersion: version)
                let fields = RecordFormat.indexFields(of: file)
                #expect(fields == Self.fields(try RecordFormat.decode(file)), "\(record.id), version \(version)")
                #expect(fields?.dueDate == record.dueDate)
                #expect(fields?.isPeriodic == record.isPeriodic)
            }
        }
        #expect(records.contains { $0.isPeriodic } && records.contains { $0.notBefore != nil && $0.nextAttemptAt != nil })
    }

    @Test func damagedBytesNeverCrashAndNeverReadAsOtherFields() async throws {
        // (Ten thousand damaged records read without a pause: on a thread of its own, not one
        // of the few threads that run every test)
        let outcome = try await onDedicatedThread { try Self.readDamagedRecords() }
        // Then whenever the body also reads as a record in full (its checksum aside: the
        // caller has verified its frame's), they are its fields
        for (index, fields, full) in outcome.compared {
            #expect(fields == full, "case \(index)")
        }
        #expect(outcome.read > 0 && outcome.agreed > 0)
    }

    /// `file` damaged at random, by the kind of damage case `index` takes in turn: bit flips,
    /// truncation, or an overwritten run of bytes.
    static func damaged(_ file: Data, case index: Int, using random: inout SeededGenerator) -> [UInt8] {
        var bytes = [UInt8](file)
        switch index % 3 {
        case 0:
            for _ in 0..<Int.random(in: 1...4, using: &random) {
                bytes[Int.random(in: 0..<bytes.count, using: &random)] ^= UInt8(1) << UInt8.random(in: 0...7, using: &random)
            }
        case 1:
            bytes.removeLast(Int.random(in: 1..<bytes.count, using: &random))
        default:
            let start = Int.random(in: 0..<bytes.count, using: &random)
            for position in start..<min(bytes.count, start + Int.random(in: 1...16, using: &random)) {
                bytes[position] = UInt8.random(in: 0...255, using: &random)
            }
        }
        return bytes
    }

    /// Reads the index fields of 10,000 randomly damaged record files; returns how many read,
    /// how many of those also read in full, and, for each of them, the fields both ways.
    static func readDamagedRecords() throws -> (read: Int, agreed: Int, compared: [(index: Int, fields: RecordFormat.IndexFields, full: RecordFormat.IndexFields)]) {
        // Given record files damaged at random (bit flips, truncation, overwritten runs)
        let outcome = try readDamaged(try (0..<20).map { try Self.makeDatedRecord(index: $0) }, count: 10_000, seed: 4242) { file in
            RecordFormat.indexFields(of: file)
        } full: { file in
            // (Its checksum aside: the caller has verified its frame's.)
            let body = file.dropFirst(RecordFormat.headerSize)
            guard let value = try? BinaryPropertyListReader.value(from: Data(body)),
                  let full = try? OperationRecord(propertyListValue: value, headerVersion: Int(file[file.startIndex + 9])) else { return nil }
            return Self.fields(full)
        }
        print("index fields: \(outcome.read) of 10,000 damaged records read, \(outcome.agreed) also read in full and agreed")
        return outcome
    }

    /// Damages `count` record files made from `records` in turn (see
    /// ``damaged(_:case:using:)``), and reads each with `fields` (a few of a record's fields,
    /// read without decoding the rest) and with `full` (the same fields, of the record decoded
    /// in full); how many read with `fields`, how many of those also with `full`, and for each
    /// of them the fields both ways.
    static func readDamaged<Fields>(
        _ records: [OperationRecord], count: Int, seed: UInt64, fields: (Data) -> Fields?, full: (Data) -> Fields?
    ) throws -> (read: Int, agreed: Int, compared: [(index: Int, fields: Fields, full: Fields)]) {
        var random = SeededGenerator(seed: seed)
        var read = 0, agreed = 0
        var compared: [(index: Int, fields: Fields, full: Fields)] = []
        for index in 0..<count {
            let file = Data(damaged(try RecordFormat.encode(records[index % records.count]), case: index, using: &random))
            // When only those fields are read (a trap here ends the test run)
            guard let found = fields(file) else { continue }
            read += 1
            // And whether the body also reads as a record in full
            if let whole = full(file) {
                compared.append((index, found, whole))
                agreed += 1
            }
        }
        return (read, agreed, compared)
    }

    @Test func aRecordWhoseOtherFieldsDoNotDecodeIsQuarantinedAtItsLoadAndNothingElseIsLost() throws {
        // Given a journal with two good records and one whose index fields read but whose
        // tags field has the wrong type (a frame whose checksums verify)
        let directory = try TemporaryDirectory()
        let good = try (1...2).map { try makeRecord(index: $0, sequence: UInt64($0)) }
        let bad = try makeRecord(index: 3, sequence: 3)
        do {
            let store = try JournalStore(directory: directory.store)
            for record in good { try store.add(record) }
            guard case .dictionary(var entries) = bad.propertyListValue else { Issue.record("not a dictionary"); return }
            entries["tags"] = .integer(7)
            let file = Self.recordFile(entries, formatVersion: bad.formatVersion)
            #expect(RecordFormat.indexFields(of: file) == Self.fields(bad))
            #expect(throws: PersistenceError.self) { try RecordFormat.decode(file) }
            try store.append(JournalFrame(kind: .put, body: file), flushes: true) { _ in } apply: { _, _, _, _ in }
            store.close()
        }

        // When the store is opened and loaded
        let store = try RecordStore(directory: directory.store)
        let report = try store.loadPending()
        // Then the good records load, the bad one is reported quarantined, with its reason
        #expect(report.records.map(\.id) == good.map(\.id))
        #expect(report.quarantined.count == 1)
        #expect(report.quarantined.first?.reason.contains("tags") == true)
        store.close()
        // And it was moved to quarantine: the next load does not report it again
        let reopened = try RecordStore(directory: directory.store)
        defer { reopened.close() }
        let again = try reopened.loadPending()
        #expect(again.records.map(\.id) == good.map(\.id))
        #expect(again.quarantined.isEmpty)
        #expect(try directory.names(in: "quarantine").contains { $0.hasPrefix(bad.id) })
    }
}

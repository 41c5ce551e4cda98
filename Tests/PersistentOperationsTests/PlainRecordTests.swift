import CrashHarness
import Foundation
import Testing
@testable import PersistentOperations

/// A restore reads most records without their payloads: a record with only the fields every
/// record has is read field by field, without the full decode's copy of its payload and check
/// of its whole property list (`RecordFormat.plainRecord`). Whatever it reads must be what
/// the full decode reads, and anything else is left to the full decode.
@Suite(.timeLimit(.minutes(10)))   // the heavy workloads share two cores under Thread Sanitizer in CI: a limit that catches a hang, not a slow machine
struct PlainRecordTests {
    /// What a plain read must give for `record`: the record without its payload, when it has
    /// none of the rare fields; nil when it has one.
    static func expected(_ record: OperationRecord) -> OperationRecord? {
        var withoutPayload = record
        withoutPayload.payload = Data()
        // Plain: made again from the fields every record has alone, it is the same record.
        let common = OperationRecord.plain(
            formatVersion: record.formatVersion, id: record.id, typeIdentifier: record.typeIdentifier, priority: record.priority,
            enqueueSequence: record.enqueueSequence, enqueuedAt: record.enqueuedAt, notBefore: record.notBefore,
            numberOfRetries: record.numberOfRetries, numberOfAttempts: record.numberOfAttempts, nextAttemptAt: record.nextAttemptAt,
            attemptsInFlight: record.attemptsInFlight
        )
        return common == withoutPayload ? withoutPayload : nil
    }

    @Test(arguments: IndexFieldsTests.goldenRecordNames)
    func everyGoldenRecordReadsAsItsFullDecodeWithoutItsPayloadOrIsLeftToIt(name: String) throws {
        let file = try Data(contentsOf: GoldenFileTests.fixtureURL(name))
        let record = try RecordFormat.decode(file)
        #expect(RecordFormat.plainRecord(of: file, checksumVerified: false) == Self.expected(record))
    }

    @Test func theMinimalGoldenRecordsOfEveryLayoutArePlain() throws {
        // (So that the test above compares records, not only nils.)
        for name in ["v1-minimal.record", "v5-defaults.record"] {
            let file = try Data(contentsOf: GoldenFileTests.fixtureURL(name))
            #expect(RecordFormat.plainRecord(of: file, checksumVerified: false) != nil, "\(name)")
        }
    }

    @Test func recordsOfEveryVersionWithAndWithoutRareFieldsReadAsTheFullDecodeSays() throws {
        var plain = 0
        var left = 0
        for index in 0..<60 {
            var record = try IndexFieldsTests.makeDatedRecord(index: index)
            record.payload = Data((0..<[0, 1, 15, 16, 300, 70_000][index % 6]).map { UInt8(truncatingIfNeeded: $0 &* 13) })
            record.priority = [0, 4, -8, Int(Int32.max), -1][index % 5]
            record.numberOfRetries = index % 4
            record.numberOfAttempts = index % 3
            record.tags = []
            switch index % 10 {
            case 0: record.tags = ["t\(index)"]
            case 1: record.uniqueKey = "key-\(index)"
            case 2: record.expiresAt = Date(timeIntervalSinceReferenceDate: 1_000_000)
            case 3: record.lastErrorDescription = "error \(index)"
            case 4: record.lane = "lane"
            default: break
            }
            for version in Set([record.requiredFormatVersion, 4, 5, OperationRecord.currentFormatVersion]) where version >= record.requiredFormatVersion {
                let file = try RecordFormat.encode(record, maximumSize: 1 << 20, formatVersion: version)
                let full = try RecordFormat.decode(file, maximumSize: 1 << 20)
                let read = RecordFormat.plainRecord(of: file, maximumSize: 1 << 20, checksumVerified: false)
                #expect(read == Self.expected(full), "\(index), version \(version)")
                if read == nil { left += 1 } else { plain += 1 }
            }
        }
        #expect(plain > 0 && left > 0)
    }

    @Test func aChecksumMismatchOrAnOversizedRecordIsLeftToTheFullDecode() throws {
        var record = try IndexFieldsTests.makeDatedRecord(index: 1)
        record.tags = []
        var bytes = [UInt8](try RecordFormat.encode(record))
        bytes[16] ^= 0xFF
        let file = Data(bytes)
        #expect(Self.expected(record) != nil)
        #expect(RecordFormat.plainRecord(of: file, checksumVerified: false) == nil)
        #expect(throws: PersistenceError.self) { try RecordFormat.decode(file) }
        // (A frame's checksum covers a whole record's bytes: the caller verified them.)
        #expect(RecordFormat.plainRecord(of: file, checksumVerified: true) == Self.expected(record))
        #expect(RecordFormat.plainRecord(of: file, maximumSize: file.count - 1, checksumVerified: true) == nil)
    }

    @Test func aFieldOfTheWrongFormOrARareFieldLeavesTheRecordToTheFullDecode() throws {
        // Given a plain record whose body is written again with one field changed
        var record = try IndexFieldsTests.makeDatedRecord(index: 1)
        record.tags = []
        record.priority = 4
        record.numberOfRetries = 2
        guard case .dictionary(let fields) = record.propertyListValue else { Issue.record("not a dictionary"); return }
        func file(_ change: (inout [String: PropertyListValue]) -> Void) -> Data {
            var entries = fields
            change(&entries)
            return IndexFieldsTests.recordFile(entries, formatVersion: record.formatVersion)
        }
        // (Unchanged, it reads.)
        #expect(RecordFormat.plainRecord(of: file { _ in }, checksumVerified: false) == Self.expected(record))
        // When a field that has a default holds a value of another form, or a required one
        // does, or a rare field is present
        let changes: [(String, PropertyListValue)] = [
            ("priority", .string("high")), ("numberOfRetries", .real(2.5)), ("numberOfAttempts", .bool(true)),
            ("attemptsInFlight", .string("1")), ("notBefore", .integer(5)), ("nextAttemptAt", .string("soon")),
            ("tags", .integer(7)), ("tags", .array([.string("photos")])), ("enqueuedAt", .real(1)), ("enqueueSequence", .integer(-1)),
            ("id", .string("not-an-identifier")), ("typeIdentifier", .integer(1)), ("payload", .string("bytes")),
            ("formatVersion", .integer(Int64(record.formatVersion) + 1)), ("uniqueKey", .string("k")), ("lane", .string("l")),
        ]
        for (key, value) in changes {
            // Then it is not read plain: the full decode reads it, or says what is wrong
            #expect(RecordFormat.plainRecord(of: file { $0[key] = value }, checksumVerified: false) == nil, "\(key)")
        }
    }

    @Test func damagedBytesNeverCrashAndNeverReadAsAnotherRecord() async throws {
        let outcome = try await onDedicatedThread {
            let records = try (0..<20).map { index in
                var record = try IndexFieldsTests.makeDatedRecord(index: index)
                record.payload = Data((0..<(index * 7)).map { UInt8(truncatingIfNeeded: $0) })
                // (Most of them plain: a record with tags is left to the full decode.)
                if index % 4 != 0 { record.tags = [] }
                return record
            }
            return try IndexFieldsTests.readDamaged(records, count: 4_000, seed: 9191) { file in
                RecordFormat.plainRecord(of: file, checksumVerified: true)
            } full: { file in
                (try? RecordFormat.decode(file, checksumVerified: true)).flatMap(Self.expected)
            }
        }
        print("plain records: \(outcome.read) of 4,000 damaged records read, \(outcome.agreed) also read in full and agreed")
        for (index, read, full) in outcome.compared {
            #expect(read == full, "case \(index)")
        }
        #expect(outcome.read > 0 && outcome.agreed > 0)
    }

    @Test func aRestoreReadsPlainRecordsWithoutTheirPayloadsAndBuildsThemFromTheirPayloads() async throws {
        // Given a store of plain notes and notes with tags (read in full)
        let first = try QueueFixture(suspended: true)
        for index in 0..<6 {
            let note = PlainNote(payload: UploadPayload(name: "n\(index)", journal: first.journal))
            try first.queue.addOperation(note, options: EnqueueOptions(tags: index.isMultiple(of: 2) ? [] : ["photos"]))
        }
        first.queue.close()
        // When the next launch restores them, then runs them
        let second = try QueueFixture(suspended: true, directory: first.directory, journal: first.journal)
        let report = try second.queue.restore()
        #expect(report.restored.count == 6)
        #expect(report.quarantined.isEmpty)
        second.queue.operationQueue.isSuspended = false
        await second.queue.allOperationsFinished()
        // Then each was built from its payload and ran once
        #expect(second.lines == (0..<6).map { "n\($0) ran" })
        #expect(try second.pendingRecords().isEmpty)
    }

    /// Overwrites, in the store's journal segments, the one occurrence of `text` with
    /// `replacement` (as long).
    static func overwrite(_ text: String, with replacement: String, in directory: TemporaryDirectory) throws {
        precondition(text.utf8.count == replacement.utf8.count)
        var found = 0
        for path in try JournalStoreTests.segmentPaths(in: directory) {
            var bytes = try Data(contentsOf: URL(fileURLWithPath: path))
            guard let range = bytes.range(of: Data(text.utf8)) else { continue }
            bytes.replaceSubrange(range, with: Data(replacement.utf8))
            let handle = try FileHandle(forWritingTo: URL(fileURLWithPath: path))
            try handle.seek(toOffset: UInt64(range.lowerBound))
            try handle.write(contentsOf: Data(replacement.utf8))
            try handle.close()
            found += 1
        }
        #expect(found == 1)
    }

    /// Three plain notes stored by a first launch, and a second launch that has opened the
    /// store (every frame verified) and not restored yet.
    static func openedStoreOfThreeNotes(middle: String) throws -> (second: QueueFixture, ids: [PersistentOperationID]) {
        let first = try QueueFixture(suspended: true)
        var ids: [PersistentOperationID] = []
        for name in ["keep-1", middle, "keep-2"] {
            let note = PlainNote(payload: UploadPayload(name: name, journal: first.journal))
            try first.queue.addOperation(note)
            ids.append(try #require(first.queue.identifier(of: note)))
        }
        first.queue.close()
        return (try QueueFixture(suspended: true, directory: first.directory, journal: first.journal), ids)
    }

    @Test func aPlainRecordDamagedAfterTheJournalWasOpenedIsQuarantinedWhenItsOperationIsBuiltAndTheOthersRun() async throws {
        // Given a launch that opened a store of three plain notes, whose journal is then
        // damaged inside one note's payload
        let (second, ids) = try Self.openedStoreOfThreeNotes(middle: "damaged-payload")
        try Self.overwrite("damaged-payload", with: "damaged-PAYLOAD", in: second.directory)

        // When it restores them (their fields read without computing their checksums again)
        let report = try second.queue.restore()
        #expect(report.restored == ids)

        // Then the damaged one is quarantined when its operation is built, and the others run
        second.queue.operationQueue.isSuspended = false
        await second.queue.allOperationsFinished()
        #expect(second.lines == ["keep-1 ran", "keep-2 ran"])
        #expect(second.deliveredEvents().contains { if case .quarantined = $0 { true } else { false } })
        #expect(try second.pendingRecords().isEmpty)
    }

    @Test func aPlainRecordWhoseIdentifierWasDamagedAfterTheJournalWasOpenedIsNotTakenForAnother() async throws {
        // Given a launch that opened a store of three plain notes, whose journal is then
        // damaged inside one note's identifier (another UUID, in canonical form)
        let (second, ids) = try Self.openedStoreOfThreeNotes(middle: "damaged-id")
        let id = ids[1].rawValue
        let other = String(id.prefix(35)) + (id.last == "A" ? "B" : "A")
        try Self.overwrite(id, with: other, in: second.directory)

        // When it restores them
        let report = try second.queue.restore()

        // Then the damaged record is read in full, its checksum fails, and it is quarantined:
        // no entry under another identifier; the others run
        #expect(report.restored == [ids[0], ids[2]])
        #expect(report.quarantined.count == 1)
        second.queue.operationQueue.isSuspended = false
        await second.queue.allOperationsFinished()
        #expect(second.lines == ["keep-1 ran", "keep-2 ran"])
        #expect(try second.pendingRecords().isEmpty)
    }
}

import CrashHarness
import Foundation
import Testing
@testable import PersistentOperations

/// Building an operation reads its record's type and payload again, without decoding the
/// record's other fields (they were decoded when it was restored).
@Suite(.timeLimit(.minutes(10)))   // the heavy workloads share two cores under Thread Sanitizer in CI: a limit that catches a hang, not a slow machine
struct PayloadFieldsTests {
    static func expected(_ record: OperationRecord) -> RecordFormat.PayloadFields {
        .init(id: RecordIdentifier.uuid(record.id)!, typeIdentifier: record.typeIdentifier, payload: record.payload)
    }

    @Test(arguments: IndexFieldsTests.goldenRecordNames)
    func theFieldsOfEveryGoldenRecordAreThoseOfItsFullDecode(name: String) throws {
        let file = try Data(contentsOf: GoldenFileTests.fixtureURL(name))
        let record = try RecordFormat.decode(file)
        #expect(RecordFormat.payloadFields(of: file, checksumVerified: false) == Self.expected(record))
    }

    @Test func recordsOfEveryVersionAndPayloadSizeReadTheSameAsTheFullDecode() throws {
        for index in 0..<40 {
            var record = try IndexFieldsTests.makeDatedRecord(index: index)
            // Payloads of 0 to 70,000 bytes: every form of a data object's length
            record.payload = Data((0..<[0, 1, 14, 15, 16, 255, 256, 65_535, 70_000][index % 9]).map { UInt8(truncatingIfNeeded: $0 &* 31) })
            record.tags = index % 2 == 0 ? ["t\(index)", "payload"] : []
            for version in [record.requiredFormatVersion, OperationRecord.currentFormatVersion] {
                let file = try RecordFormat.encode(record, maximumSize: 1 << 20, formatVersion: version)
                #expect(RecordFormat.payloadFields(of: file, checksumVerified: false) == Self.expected(record), "\(index), version \(version)")
            }
        }
    }

    @Test func aChecksumMismatchIsLeftToTheFullDecodeUnlessTheFrameWasVerified() throws {
        let record = try makeRecord(index: 1)
        var bytes = [UInt8](try RecordFormat.encode(record))
        bytes[16] ^= 0xFF
        let file = Data(bytes)
        #expect(RecordFormat.payloadFields(of: file, checksumVerified: false) == nil)
        #expect(throws: PersistenceError.self) { try RecordFormat.decode(file) }
        // (A frame's checksum covers a whole record's bytes: the caller verified them.)
        #expect(RecordFormat.payloadFields(of: file, checksumVerified: true) == Self.expected(record))
    }

    @Test func damagedBytesNeverCrashAndNeverReadAsAnotherPayload() async throws {
        let outcome = try await onDedicatedThread { try Self.readDamagedRecords() }
        for (index, fields, full) in outcome.compared {
            #expect(fields == full, "case \(index)")
        }
        #expect(outcome.read > 0 && outcome.agreed > 0)
    }

    /// Reads the payload fields of 5,000 randomly damaged record bodies (as a verified frame
    /// gives them: no checksum); returns how many read, how many also read in full, and both.
    static func readDamagedRecords() throws -> (read: Int, agreed: Int, compared: [(index: Int, fields: RecordFormat.PayloadFields, full: RecordFormat.PayloadFields)]) {
        let records = try (0..<20).map { index in
            var record = try IndexFieldsTests.makeDatedRecord(index: index)
            record.payload = Data((0..<(index * 7)).map { UInt8(truncatingIfNeeded: $0) })
            return record
        }
        let outcome = try IndexFieldsTests.readDamaged(records, count: 5_000, seed: 2727) { file in
            RecordFormat.payloadFields(of: file, checksumVerified: true)
        } full: { file in
            (try? RecordFormat.decode(file, checksumVerified: true)).map(Self.expected)
        }
        print("payload fields: \(outcome.read) of 5,000 damaged records read, \(outcome.agreed) also read in full and agreed")
        return outcome
    }

    @Test func theJournalReadsThePayloadOfRecordsPutAloneAndInBatches() throws {
        // Given a journal with a record put alone, the members of a batch, and a record rewritten
        let directory = try TemporaryDirectory()
        let store = try JournalStore(directory: directory.store)
        defer { store.close() }
        var alone = try makeRecord(index: 1, sequence: 1)
        try store.add(alone)
        let batch = try (2...4).map { try makeRecord(index: $0, sequence: UInt64($0)) }
        try store.addBatch(batch)
        alone.numberOfRetries = 3
        try store.update(alone)
        // When each is read for building, and in full
        for record in [alone] + batch {
            let payload = try store.readPendingPayload(id: record.id)
            let full = try store.readPending(id: record.id)
            // Then the type and payload are those of the full read
            #expect(payload.typeIdentifier == full.typeIdentifier && payload.payload == full.payload)
            #expect(payload.payload == record.payload)
        }
        // And a record that is not pending is not found
        try store.removePending(id: alone.id)
        #expect(throws: PersistenceError.self) { _ = try store.readPendingPayload(id: alone.id) }
        #expect(throws: PersistenceError.self) { _ = try store.readPendingPayload(id: "not-an-identifier") }
    }

    @Test func recordsChangedWhilePendingRecordsAreDeliveredAreDeliveredAsTheyAreNow() throws {
        // Given 40 pending records of 100 KB each: about ten to a read window
        let directory = try TemporaryDirectory()
        let store = try JournalStore(directory: directory.store, configuration: .init())
        defer { store.close() }
        var records: [OperationRecord] = []
        for index in 0..<40 {
            var record = try makeRecord(index: index)
            record.payload = Data(repeating: UInt8(index), count: 100_000)
            records.append(record)
            try store.add(record)
        }
        let replacementsBefore = store.state.withLock { $0.index.replacements }
        // When, as the first is delivered, records of later windows are removed, rewritten and
        // moved to the failed area, and a new one is added
        var delivered: [String: OperationRecord] = [:]
        var rewritten = records[25]
        rewritten.numberOfRetries = 7
        let added = try makeRecord(index: 99)
        _ = try store.forEachPendingRecord { record in
            if delivered.isEmpty {
                try store.removePending(id: records[20].id)
                try store.update(rewritten)
                _ = try store.moveToFailed(records[30], reason: "test")
                try store.add(added)
            }
            delivered[record.id] = record
        }
        // Then the index counted the three changes to records it held, not the add...
        #expect(store.state.withLock { $0.index.replacements } == replacementsBefore + 3)
        // ...and each record listed is delivered as it is now: the removed and failed ones
        // not at all, the rewritten one rewritten, the others as written (the added one was
        // not listed)
        var expected = Dictionary(uniqueKeysWithValues: records.map { ($0.id, $0) })
        expected[records[20].id] = nil
        expected[records[30].id] = nil
        expected[rewritten.id] = rewritten
        #expect(delivered.count == expected.count)
        for (id, record) in expected { #expect(delivered[id] == record, "\(id)") }
    }

    @Test func pendingRecordsReadAheadArriveInOrderAsPlainFieldsOrRecordsAndADamagedOneIsReported() throws {
        // Given 30 pending records of 100 KB each (about ten to a read window: three windows,
        // read ahead on a thread of their own): the even ones plain, the odd ones tagged
        let directory = try TemporaryDirectory()
        let store = try JournalStore(directory: directory.store, configuration: .init())
        defer { store.close() }
        var records: [OperationRecord] = []
        for index in 0..<30 {
            let payload = Data(repeating: UInt8(index), count: 100_000)
            let record = OperationRecord(
                typeIdentifier: "com.example.upload", payload: payload, enqueueSequence: UInt64(index + 1),
                enqueuedAt: Date(timeIntervalSinceReferenceDate: 760_000_000 + Double(index)), tags: index.isMultiple(of: 2) ? [] : ["odd"]
            )
            records.append(record)
            try store.add(record)
        }
        // ...and a byte of record 25's payload changed on disk after the open verified it
        let damaged = records[25]
        let location = try #require(store.state.withLock { state in RecordIdentifier.uuid(damaged.id).flatMap { state.index.entries[$0]?.location } })
        let segmentPath = StoreLayout(directory: directory.store).root + "/journal/" + location.segment.fileName
        let handle = try FileHandle(forUpdating: URL(fileURLWithPath: segmentPath))
        try handle.seek(toOffset: UInt64(location.offset) + UInt64(location.length) / 2)
        try handle.write(contentsOf: Data([0xA5]))
        try handle.close()
        // When every pending record is read, plain ones as their fields
        var plainIDs: [String] = []
        var read: [OperationRecord] = []
        let unreadable = try store.forEachPendingRecord(plain: { plainIDs.append($0.id) }, { read.append($0) })
        // Then the plain ones came as fields (payloads not read), the tagged ones whole, in the
        // order they lie, and the damaged one is reported as corrupt, not delivered
        #expect(plainIDs == records.enumerated().filter { $0.offset.isMultiple(of: 2) }.map(\.element.id))
        #expect(read == records.enumerated().filter { !$0.offset.isMultiple(of: 2) && $0.offset != 25 }.map(\.element))
        #expect(unreadable.map(\.name) == [damaged.id])
        #expect(unreadable.first?.code == .corruptRecord)
    }

    @Test func manyPayloadsReadTogetherAreThoseReadOneAtATime() throws {
        // Given a journal with records put alone, in batches, rewritten, removed and failed,
        // in two segments (a small segment size)
        let directory = try TemporaryDirectory()
        let store = try JournalStore(directory: directory.store, configuration: .init(segmentSize: 16 << 10))
        defer { store.close() }
        var records: [OperationRecord] = []
        for index in 0..<30 {
            var record = try makeRecord(index: index, sequence: UInt64(index + 1))
            record.payload = Data((0..<(index * 37 % 500)).map { UInt8(truncatingIfNeeded: $0 &+ index) })
            records.append(record)
        }
        for record in records[0..<10] { try store.add(record) }
        try store.addBatch(Array(records[10..<25]))
        for record in records[25...] { try store.add(record) }
        var rewritten = records[3]
        rewritten.numberOfRetries = 2
        try store.update(rewritten)
        try store.removePending(id: records[5].id)
        _ = try store.moveToFailed(records[12], reason: "test")
        // When they are read together, with identifiers that are not pending or not identifiers
        let ids = records.map(\.id) + ["not-an-identifier", UUID().uuidString]
        let together = store.readPendingPayloads(ids: ids)
        // Then each is what reading it alone gives: the same payload, or an error for the same ids
        #expect(Set(together.keys) == Set(ids))
        for id in ids {
            let alone = Result { try store.readPendingPayload(id: id) }
            switch (together[id], alone) {
            case (.success(let a)?, .success(let b)):
                #expect(a.typeIdentifier == b.typeIdentifier && a.payload == b.payload, "\(id)")
            case (.failure?, .failure):
                break
            default:
                Issue.record("\(id): together \(String(describing: together[id])), alone \(alone)")
            }
        }
        let failures = ids.filter { if case .failure? = together[$0] { return true } else { return false } }
        #expect(Set(failures) == [records[5].id, records[12].id, "not-an-identifier", ids.last!])
        for record in records where record.id != records[5].id && record.id != records[12].id {
            #expect((try? together[record.id]?.get())?.payload == record.payload)
        }
    }
}

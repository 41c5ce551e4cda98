import Foundation
import Testing
@testable import PersistentOperations

/// Hint files: what a sealed segment's frames do to the index, read at open and restore
/// instead of the segment, and never trusted over it.
@Suite("Journal store: hint files of sealed segments", .timeLimit(.minutes(1)))
struct JournalHintTests {
    private static let configuration = JournalStore.Configuration(segmentSize: 4096, compactsAutomatically: false)

    /// A record with only the fields every record has (a restore reads its fields from a hint).
    private func plainRecord(_ index: Int) -> OperationRecord {
        var record = OperationRecord(
            typeIdentifier: index % 2 == 0 ? "com.example.upload" : "com.example.sync", payload: Data(repeating: UInt8(index % 251), count: 300),
            priority: index % 3 - 1, enqueueSequence: UInt64(index + 1), enqueuedAt: Date(timeIntervalSinceReferenceDate: 760_000_000.25 + Double(index))
        )
        if index % 4 == 0 { record.notBefore = Date(timeIntervalSinceReferenceDate: 770_000_000 + Double(index)) }
        if index % 5 == 0 { record.numberOfRetries = index }
        return record
    }

    private func journalPath(_ directory: TemporaryDirectory) -> String {
        StoreLayout(directory: directory.store).root + "/journal"
    }

    private func files(_ directory: TemporaryDirectory, ending suffix: String) throws -> [String] {
        try FileManager.default.contentsOfDirectory(atPath: journalPath(directory)).filter { $0.hasSuffix(suffix) }.sorted()
    }

    /// A store of many 4 KiB segments: plain records and records with tags, one rewritten,
    /// one removed, one moved to the failed area, one with an attempt marker.
    private func fillStore(_ directory: TemporaryDirectory) throws -> (pending: [OperationRecord], failed: OperationRecord) {
        let store = try JournalStore(directory: directory.store, configuration: Self.configuration)
        var records = (0..<40).map(plainRecord)
        records += try (40..<60).map { try makeRecord(index: $0) }
        for record in records { try store.add(record) }
        records[3].numberOfRetries = 9
        try store.update(records[3])
        try store.removePending(id: records[10].id)
        let failed = try store.moveToFailed(records[20], reason: "test")
        try store.setAttemptMarker(AttemptMarker(attempts: 1), forRecord: records[30].id)
        let batch = (60..<70).map(plainRecord)
        try store.addBatch(batch)
        records += batch
        store.close()
        return (records.enumerated().filter { $0.offset != 10 && $0.offset != 20 }.map(\.element), failed)
    }

    /// What a store reads: every pending record, the failed one, the attempt markers, and
    /// the plain fields a restore is given.
    private struct Contents: Equatable {
        var pending: [String: OperationRecord]
        var failed: OperationRecord?
        var markers: [String: AttemptMarker]
        var plain: [String: RecordFormat.PlainFields]
        var others: Set<String>
    }

    private func contents(of store: JournalStore, failedID: String) throws -> Contents {
        var plain: [String: RecordFormat.PlainFields] = [:]
        var others: Set<String> = []
        try store.forEachPendingRecord(plain: { plain[$0.id] = $0 }, { others.insert($0.id) })
        var pending: [String: OperationRecord] = [:]
        try store.forEachPendingRecord { pending[$0.id] = $0 }
        return Contents(pending: pending, failed: try? store.readFailed(id: failedID), markers: store.attemptMarkers(), plain: plain, others: others)
    }

    /// Opens the store, expects it to have read every segment (no hint used), quarantined
    /// nothing and read every record as written, and returns what it read, closed.
    private func openReadingSegments(_ directory: TemporaryDirectory, pending: [OperationRecord], failed: OperationRecord) throws -> Contents {
        let store = try JournalStore(directory: directory.store, configuration: Self.configuration)
        #expect(store.segmentsOpenedFromHints.isEmpty)
        #expect(store.openReport.quarantined.isEmpty)
        let read = try contents(of: store, failedID: failed.id)
        store.close()
        #expect(read.pending.count == pending.count)
        let asWritten = pending.allSatisfy { read.pending[$0.id] == $0 }
        #expect(asWritten)
        return read
    }

    /// A hint file's bytes saying format version `version` in its header, the header's
    /// checksum made again so that it holds.
    private static func relabelled(_ hint: [UInt8], version: UInt16) -> [UInt8] {
        var bytes = hint
        withUnsafeBytes(of: version.littleEndian) { for (offset, byte) in $0.enumerated() { bytes[8 + offset] = byte } }
        withUnsafeBytes(of: CRC32.checksum(of: bytes[0..<52]).littleEndian) { for (offset, byte) in $0.enumerated() { bytes[52 + offset] = byte } }
        return bytes
    }

    @Test func aHintRoundTripsEveryKindOfEntryAndDamageMakesItUnreadable() throws {
        // Given a hint with every kind of entry
        var keyed = RecordFormat.IndexFields(id: UUID(), enqueueSequence: 3, priority: -2, typeIdentifier: "com.example.sync", attemptsInFlight: 1)
        keyed.idempotencyKey = "order 42 ✓"
        keyed.dueDate = Date(timeIntervalSinceReferenceDate: 800_000_000.5)
        keyed.isPeriodic = true
        let plainID = UUID()
        let plainFields = RecordFormat.PlainFields(
            key: UUIDBits(plainID), typeIdentifier: "com.example.upload", formatVersion: 5, priority: 4, enqueueSequence: 9,
            enqueuedAt: 760_000_000.125, notBefore: 770_000_000, nextAttemptAt: nil, numberOfRetries: 2, numberOfAttempts: 3, attemptsInFlight: 0
        )
        var plainIndex = RecordFormat.IndexFields(id: plainID, enqueueSequence: 9, priority: 4, typeIdentifier: "com.example.upload", attemptsInFlight: 0)
        plainIndex.dueDate = plainFields.dueDate
        let hint = JournalHint(salt: 0xDEAD_BEEF, number: 12, generation: 3, validEnd: 40_000, entries: [
            .record(.init(kind: .put, offset: 32, length: 700, fields: keyed, plain: nil)),
            .record(.init(kind: .batchPart, offset: 760, length: 650, fields: plainIndex, plain: plainFields)),
            .frame(offset: 2_000, kind: .remove, body: Data(UUID().uuidString.utf8)),
            .record(.init(kind: .moveToFailed, offset: 3_000, length: 800, fields: plainIndex, plain: nil)),
            .frame(offset: 4_000, kind: .attempt, body: Data("x 1 0 0 0".utf8)),
        ])
        let bytes = hint.encoded()
        // Then it reads back as written
        #expect(JournalHint.decode(bytes) == hint)
        // And any damaged byte, or a cut anywhere, makes it unreadable (the segment is read)
        var damagedReadable = 0
        for position in stride(from: 0, to: bytes.count, by: 3) {
            var damaged = bytes
            damaged[position] ^= 0x10
            if JournalHint.decode(damaged) != nil { damagedReadable += 1 }
        }
        #expect(damagedReadable == 0)
        let cutReadable = stride(from: 0, to: bytes.count, by: 5).filter { JournalHint.decode(bytes.prefix($0)) != nil }
        #expect(cutReadable.isEmpty)
        // And a key longer than a 2-byte length could say is kept whole
        var long = keyed
        long.idempotencyKey = "order 42 ✓ " + String(repeating: "k", count: 70_000)
        let longHint = JournalHint(salt: 1, number: 1, generation: 0, validEnd: 100_000, entries: [.record(.init(kind: .put, offset: 32, length: 90_000, fields: long, plain: nil))])
        let longKeptWhole = JournalHint.decode(longHint.encoded()) == longHint
        #expect(longKeptWhole)
    }

    @Test func numbersAtTheirExtremesAndOffsetsThatGoBackRoundTrip() throws {
        // Given entries whose numbers sit at the ends of their ranges, whose offsets and
        // enqueue sequences go back as well as forward (each is written as its difference from
        // the entry before), and a plain record whose counts are negative
        var high = RecordFormat.IndexFields(id: UUID(), enqueueSequence: .max, priority: .max, typeIdentifier: "a", attemptsInFlight: .max)
        high.dueDate = Date(timeIntervalSinceReferenceDate: -1e300)
        let low = RecordFormat.IndexFields(id: UUID(), enqueueSequence: 0, priority: .min, typeIdentifier: "b", attemptsInFlight: .min)
        let plainID = UUID()
        let plainFields = RecordFormat.PlainFields(
            key: UUIDBits(plainID), typeIdentifier: "a", formatVersion: Int(UInt16.max), priority: -1, enqueueSequence: 1,
            enqueuedAt: -0.0, notBefore: .infinity, nextAttemptAt: 1e-300, numberOfRetries: .min, numberOfAttempts: -1, attemptsInFlight: 0
        )
        var plainIndex = RecordFormat.IndexFields(id: plainID, enqueueSequence: 1, priority: -1, typeIdentifier: "a", attemptsInFlight: 0)
        plainIndex.dueDate = plainFields.dueDate
        let hint = JournalHint(salt: .max, number: .max, generation: .max, validEnd: .max, entries: [
            .record(.init(kind: .put, offset: .max, length: .max, fields: high, plain: nil)),
            .record(.init(kind: .batchPart, offset: 0, length: 0, fields: low, plain: nil)),
            .frame(offset: .max, kind: .retire, body: Data()),
            .record(.init(kind: .moveToFailed, offset: 1, length: 1, fields: plainIndex, plain: plainFields)),
            .frame(offset: 0, kind: .remove, body: Data(repeating: 0xFF, count: 200)),
        ])
        // Then it reads back as written
        #expect(JournalHint.decode(hint.encoded()) == hint)
    }

    @Test func aTypicalRecordTakesAboutFortyBytesAndAHintOfTheEarlierFormatIsRefused() throws {
        // Given the hint of a batch of 1,000 plain records of about 630 bytes each, one after
        // another, as a batch of `addOperations` stores them
        let entries: [JournalHint.Entry] = (0..<1_000).map { index in
            let id = UUID()
            let plain = RecordFormat.PlainFields(
                key: UUIDBits(id), typeIdentifier: "com.example.upload", formatVersion: 5, priority: 0, enqueueSequence: UInt64(5_000 + index),
                enqueuedAt: 786_000_000.123 + Double(index) / 1_000, notBefore: nil, nextAttemptAt: nil, numberOfRetries: 0, numberOfAttempts: 0, attemptsInFlight: 0
            )
            let fields = RecordFormat.IndexFields(id: id, enqueueSequence: UInt64(5_000 + index), priority: 0, typeIdentifier: "com.example.upload", attemptsInFlight: 0)
            return .record(.init(kind: .batchPart, offset: Int64(96 + index * 634), length: 630, fields: fields, plain: plain))
        }
        let bytes = JournalHint(salt: 7, number: 3, generation: 0, validEnd: 700_000, entries: entries).encoded()
        // Then a record takes at most 40 bytes of it (84 in the format before)
        let perRecord = Double(bytes.count - JournalHint.headerSize - 4 - 4 - "com.example.upload".utf8.count) / 1_000
        #expect(perRecord <= 40, "\(perRecord) bytes a record")
        #expect(JournalHint.decode(bytes)?.entries == entries)

        // And the same bytes saying format version 1 (an earlier release's hint: its numbers
        // at full width), with checksums that hold, are refused: the segment is read instead
        let earlier = Self.relabelled([UInt8](bytes), version: 1)
        #expect(JournalHint.decode(Data(earlier)) == nil)
        #expect(JournalHint.decode(Data(Self.relabelled(earlier, version: 2))) != nil)
    }

    @Test func sealedSegmentsGetHintsAndAnOpenReadsThemToTheSameContents() throws {
        // Given a store of many segments, closed
        let directory = try TemporaryDirectory()
        let (pending, failed) = try fillStore(directory)
        let segments = try files(directory, ending: ".segment")
        let hints = try files(directory, ending: ".hint")
        // Then every segment but the last has a hint
        #expect(segments.count >= 8)
        #expect(hints.count == segments.count - 1)
        // When it is opened with its hints, and again without them
        let hinted = try JournalStore(directory: directory.store, configuration: Self.configuration)
        let hintedNames = hinted.segmentsOpenedFromHints
        let withHints = try contents(of: hinted, failedID: failed.id)
        hinted.close()
        for hint in try files(directory, ending: ".hint") { try FileManager.default.removeItem(atPath: journalPath(directory) + "/" + hint) }
        let read = try JournalStore(directory: directory.store, configuration: Self.configuration)
        #expect(read.segmentsOpenedFromHints.isEmpty)
        let withoutHints = try contents(of: read, failedID: failed.id)
        read.close()
        // Then the hints were used, and both read the same: every record as last written,
        // the same plain fields for a restore
        #expect(hintedNames.count >= segments.count - 2)
        #expect(withHints == withoutHints)
        #expect(withHints.pending.count == pending.count)
        let asWritten = pending.allSatisfy { withHints.pending[$0.id] == $0 }
        #expect(asWritten)
        #expect(withHints.failed?.id == failed.id)
        #expect(withHints.markers[pending[28].id] == AttemptMarker(attempts: 1))
        #expect(withHints.plain.count == 48)
        #expect(withHints.others.count == 20)
        // And the open without hints made them again
        #expect(try files(directory, ending: ".hint").count == segments.count - 1)
    }

    @Test func aDamagedHintIsIgnoredAndTheSegmentReadLosesNothing() throws {
        // Given a closed store whose hints are each damaged in one byte
        let directory = try TemporaryDirectory()
        let (pending, failed) = try fillStore(directory)
        let path = journalPath(directory)
        for (index, hint) in try files(directory, ending: ".hint").enumerated() {
            var bytes = try Data(contentsOf: URL(fileURLWithPath: path + "/" + hint))
            bytes[(index * 97) % bytes.count] ^= 0x01
            try bytes.write(to: URL(fileURLWithPath: path + "/" + hint))
        }
        // When it is opened, Then no hint was used, nothing was quarantined, and every record
        // reads as written
        let read = try openReadingSegments(directory, pending: pending, failed: failed)
        // And the next open reads hints made again
        let reopened = try JournalStore(directory: directory.store, configuration: Self.configuration)
        #expect(!reopened.segmentsOpenedFromHints.isEmpty)
        #expect(try contents(of: reopened, failedID: failed.id) == read)
        reopened.close()
    }

    @Test func hintsOfTheEarlierFormatAreIgnoredAndMadeAgainInTheNewOne() throws {
        // Given a closed store whose hints all say format version 1 (as an earlier release
        // wrote them), their checksums holding
        let directory = try TemporaryDirectory()
        let (pending, failed) = try fillStore(directory)
        let path = journalPath(directory)
        let hints = try files(directory, ending: ".hint")
        for hint in hints {
            let bytes = [UInt8](try Data(contentsOf: URL(fileURLWithPath: path + "/" + hint)))
            try Data(Self.relabelled(bytes, version: 1)).write(to: URL(fileURLWithPath: path + "/" + hint))
        }
        // When it is opened, Then no hint was used, nothing was quarantined, and every record
        // reads as written
        let read = try openReadingSegments(directory, pending: pending, failed: failed)
        // And the hints were made again in the format this library reads, which the next
        // open uses
        let versions = try files(directory, ending: ".hint").map { hint in
            try Data(contentsOf: URL(fileURLWithPath: path + "/" + hint))[8]
        }
        #expect(versions.count == hints.count && versions.allSatisfy { Int($0) == JournalHint.formatVersion })
        let reopened = try JournalStore(directory: directory.store, configuration: Self.configuration)
        #expect(reopened.segmentsOpenedFromHints.count >= hints.count - 1)
        #expect(try contents(of: reopened, failedID: failed.id) == read)
        reopened.close()
    }

    @Test func aHintThatEndsBeforeItsSegmentsLastFrameIsIgnored() throws {
        // Given a closed store, and the hint of its first segment replaced by one that knows
        // nothing of the segment's last frame (as a hint made before a frame was appended)
        let directory = try TemporaryDirectory()
        let (pending, failed) = try fillStore(directory)
        let path = journalPath(directory)
        let first = try files(directory, ending: ".hint")[0]
        var hint = try #require(JournalHint.decode(try Data(contentsOf: URL(fileURLWithPath: path + "/" + first))))
        let last = try #require(hint.entries.last)
        guard case .record(let lastRecord) = last else {
            Issue.record("the first segment ends with a record's frame")
            return
        }
        hint.entries.removeLast()
        hint.validEnd = lastRecord.offset
        try hint.encoded().write(to: URL(fileURLWithPath: path + "/" + first))
        // When it is opened
        let store = try JournalStore(directory: directory.store, configuration: Self.configuration)
        defer { store.close() }
        // Then that hint was not used, and the record of the frame it left out is there
        #expect(!store.segmentsOpenedFromHints.contains(first.replacingOccurrences(of: ".hint", with: ".segment")))
        let read = try contents(of: store, failedID: failed.id)
        #expect(read.pending[lastRecord.fields.id.uuidString] != nil)
        #expect(read.pending.count == pending.count)
    }

    @Test func aCompactionWritesTheHintOfItsSegmentAndRemovesThoseOfTheSegmentsItReplaced() throws {
        // Given a store of many segments
        let directory = try TemporaryDirectory()
        let (pending, failed) = try fillStore(directory)
        let before = try files(directory, ending: ".hint")
        // When it is compacted
        do {
            let store = try JournalStore(directory: directory.store, configuration: Self.configuration)
            try store.compact()
            store.close()
        }
        // Then the hints of the replaced segments are gone and the new segment has one
        let after = try files(directory, ending: ".hint")
        #expect(Set(after).isDisjoint(with: before))
        let merged = try files(directory, ending: ".segment").filter { !$0.hasSuffix("-00000000.segment") }
        #expect(merged.count == 1)
        #expect(after.contains(merged[0].replacingOccurrences(of: ".segment", with: ".hint")))
        // And an open reads it to the same contents
        let store = try JournalStore(directory: directory.store, configuration: Self.configuration)
        defer { store.close() }
        #expect(store.segmentsOpenedFromHints.contains(merged[0]))
        let read = try contents(of: store, failedID: failed.id)
        #expect(read.pending.count == pending.count)
        let asWritten = pending.allSatisfy { read.pending[$0.id] == $0 }
        #expect(asWritten)
        #expect(read.markers[pending[28].id] == AttemptMarker(attempts: 1))
    }
}

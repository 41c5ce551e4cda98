import Foundation
import Testing
@testable import PersistentOperations

/// What version 1 of an app stored for a note.
struct NoteV1: Codable, Sendable, Equatable {
    var name: String
    var journal: String
}

/// Version 2 of the note: a required field added, so version 1 payloads no longer decode as it.
struct NoteV2: Codable, Sendable, Equatable {
    var name: String
    var journal: String
    var pages: Int
}

/// The note operation as version 1 of the app builds it.
final class NoteOperationV1: RetryingOperation, PersistentOperation, @unchecked Sendable {
    static let persistenceIdentifier = "test.evolving-note"
    let payload: NoteV1
    init(payload: NoteV1) { self.payload = payload; super.init() }
    override var isAsynchronous: Bool { false }
    override func startBaseOperation(isRetry: Bool) {
        Journal.record(payload.journal, "v1 \(payload.name)")
        baseOperationEnded()
    }
}

/// Version 2, which migrates the payloads version 1 stored.
final class NoteOperationV2: RetryingOperation, PersistentOperation, @unchecked Sendable {
    static let persistenceIdentifier = "test.evolving-note"
    static let payloadVersion = 2
    let payload: NoteV2
    init(payload: NoteV2) { self.payload = payload; super.init() }

    static func migratePayload(_ stored: StoredPayload) throws -> NoteV2 {
        let old = try stored.decode(NoteV1.self)
        return NoteV2(name: old.name, journal: old.journal, pages: stored.version == 1 ? 1 : 0)
    }

    override var isAsynchronous: Bool { false }
    override func startBaseOperation(isRetry: Bool) {
        Journal.record(payload.journal, "v2 \(payload.name) pages=\(payload.pages)")
        baseOperationEnded()
    }
}

/// Version 2 shipped without a migration (its payload version left at 1).
final class NoteOperationV2WithoutMigration: RetryingOperation, PersistentOperation, @unchecked Sendable {
    static let persistenceIdentifier = "test.evolving-note"
    let payload: NoteV2
    init(payload: NoteV2) { self.payload = payload; super.init() }
    override var isAsynchronous: Bool { false }
    override func startBaseOperation(isRetry: Bool) {
        Journal.record(payload.journal, "unmigrated \(payload.name)")
        baseOperationEnded()
    }
}

@Suite("Persistent queue: payloads that change between app versions", .timeLimit(.minutes(1)))
struct PayloadMigrationTests {
    /// A store left by version 1 of the app with one pending note.
    func storeOfVersion1(_ note: String, journal: String) throws -> TemporaryDirectory {
        let directory = try TemporaryDirectory()
        let fixture = try QueueFixture(suspended: true, directory: directory, journal: journal)
        fixture.queue.register(NoteOperationV1.self)
        try fixture.queue.addOperation(NoteOperationV1(payload: NoteV1(name: note, journal: journal)))
        fixture.queue.close()
        return directory
    }

    @Test func aPayloadStoredByAnEarlierVersionIsReadThroughTheMigration() async throws {
        // Given a note stored by version 1
        let journal = UUID().uuidString
        let directory = try storeOfVersion1("old", journal: journal)
        #expect(try RecordStore(directory: directory.store, access: .readOnly).loadPending().records.first?.payloadVersion == 1)

        // When version 2, whose payload has a new required field, restores it and adds another
        let fixture = try QueueFixture(directory: directory, journal: journal)
        fixture.queue.register(NoteOperationV2.self)
        let report = try fixture.queue.restore()
        try fixture.queue.addOperation(NoteOperationV2(payload: NoteV2(name: "new", journal: journal, pages: 3)))
        await fixture.queue.allOperationsFinished()

        // Then the old one ran with its migrated payload, and nothing was quarantined
        #expect(report.restored.count == 1 && report.quarantined.isEmpty)
        #expect(fixture.lines == ["v2 old pages=1", "v2 new pages=3"])
        #expect(fixture.deliveredEvents().allSatisfy { if case .quarantined = $0 { false } else { true } })
    }

    @Test func aPayloadStoredByALaterVersionIsLeftOnDiskUntilABuildThatReadsItRuns() async throws {
        // Given a note stored by version 2
        let journal = UUID().uuidString
        let directory = try TemporaryDirectory()
        do {
            let fixture = try QueueFixture(suspended: true, directory: directory, journal: journal)
            fixture.queue.register(NoteOperationV2.self)
            try fixture.queue.addOperation(NoteOperationV2(payload: NoteV2(name: "newer", journal: journal, pages: 7)))
            #expect(try fixture.pendingRecords().first?.payloadVersion == 2)
            fixture.queue.close()
        }
        // When version 1 (an older build) restores
        do {
            let fixture = try QueueFixture(directory: directory, journal: journal)
            fixture.queue.register(NoteOperationV1.self)
            let report = try fixture.queue.restore()
            await fixture.queue.allOperationsFinished()
            // Then it is left on disk, reported, neither run nor quarantined
            #expect(report.restored.isEmpty && report.quarantined.isEmpty)
            #expect(report.newerFormatVersions.first?.reason.contains("payload version 2") == true)
            #expect(fixture.lines.isEmpty)
            #expect(try fixture.pendingRecords().count == 1)
            fixture.queue.close()
        }
        // And version 2 runs it later
        let fixture = try QueueFixture(directory: directory, journal: journal)
        fixture.queue.register(NoteOperationV2.self)
        try fixture.queue.restore()
        await fixture.queue.allOperationsFinished()
        #expect(fixture.lines == ["v2 newer pages=7"])
    }

    @Test func aPayloadThatNoLongerDecodesIsQuarantinedNamingItsPayloadVersion() async throws {
        // Given a note stored by version 1, and a version 2 that forgot its migration
        let journal = UUID().uuidString
        let directory = try storeOfVersion1("lost", journal: journal)
        let fixture = try QueueFixture(directory: directory, journal: journal)
        fixture.queue.register(NoteOperationV2WithoutMigration.self)
        try fixture.queue.restore()
        await fixture.queue.allOperationsFinished()
        // Then it did not run, and its quarantine says why
        #expect(fixture.lines.isEmpty)
        let reasons = fixture.deliveredEvents().compactMap { event -> String? in
            if case .quarantined(_, let reason) = event { return reason }
            return nil
        }
        #expect(reasons.count == 1)
        #expect(reasons.first?.contains("the payload does not decode as \"test.evolving-note\" (payload version 1)") == true)
    }

    @Test func aRecordKeepsItsPayloadVersionInEveryFormatVersionAndAnAbsentOneReadsAs1() throws {
        var record = try makeRecord()
        record.payloadVersion = 3
        for version in [record.requiredFormatVersion, 5, 6] {
            let decoded = try RecordFormat.decode(try RecordFormat.encode(record, formatVersion: version))
            #expect(decoded.payloadVersion == 3 && decoded == record)
        }
        // Every record written before the key existed reads as version 1
        #expect(try RecordFormat.decode(try RecordFormat.encode(try makeRecord())).payloadVersion == 1)
    }

    @Test func aQuarantinedPayloadIsBroughtBackOnceAFixedBuildReadsIt() async throws {
        // Given a note quarantined by a build that forgot its migration
        let journal = UUID().uuidString
        let directory = try storeOfVersion1("kept", journal: journal)
        var name = ""
        do {
            let broken = try QueueFixture(directory: directory, journal: journal)
            broken.queue.register(NoteOperationV2WithoutMigration.self)
            try broken.queue.restore()
            await broken.queue.allOperationsFinished()
            name = try #require(try directory.names(in: "quarantine").first { !$0.hasSuffix(StoreLayout.reasonSuffix) })
            // Re-queueing it there fails clearly, and leaves it in quarantine
            #expect {
                try broken.queue.requeueQuarantinedOperation(named: name)
            } throws: { ($0 as? PersistenceError)?.code == .payloadNotDecodable }
            #expect(try directory.names(in: "quarantine").contains(name))
            broken.queue.close()
        }

        // When the fixed build re-queues it
        let fixed = try QueueFixture(directory: directory, journal: journal)
        fixed.queue.register(NoteOperationV2.self)
        try fixed.queue.restore()
        let id = try fixed.queue.requeueQuarantinedOperation(named: name)
        await fixed.queue.allOperationsFinished()

        // Then it ran, as the record it was, and the quarantine area is empty
        #expect(fixed.lines == ["v2 kept pages=1"])
        #expect(fixed.deliveredEvents().contains(.succeeded(id)))
        #expect(try directory.names(in: "quarantine").isEmpty)
        #expect(try fixed.pendingRecords().isEmpty)
    }

    @Test func aQuarantineEntryThatIsNotARecordOrDoesNotExistIsRefusedAndLeftInPlace() throws {
        let fixture = try QueueFixture(suspended: true)
        fixture.queue.register(NoteOperationV1.self)
        let quarantine = fixture.directory.store.appendingPathComponent("quarantine")
        try FileManager.default.createDirectory(at: quarantine, withIntermediateDirectories: true)
        try Data("not a record".utf8).write(to: quarantine.appendingPathComponent("segment-7.bytes"))
        #expect {
            try fixture.queue.requeueQuarantinedOperation(named: "segment-7.bytes")
        } throws: { ($0 as? PersistenceError)?.code == .corruptRecord }
        #expect(try fixture.directory.names(in: "quarantine").contains("segment-7.bytes"))
        for missing in ["nothing-here.record", "../pending", ""] {
            #expect {
                try fixture.queue.requeueQuarantinedOperation(named: missing)
            } throws: { ($0 as? PersistenceError)?.code == .recordNotFound }
        }
        #expect(try fixture.pendingRecords().isEmpty)
    }

    @Test func recordsStoredUnderAFormerIdentifierAreRebuiltAsTheRenamedType() async throws {
        // Given a note stored under the identifier of version 1, "test.evolving-note"
        let journal = UUID().uuidString
        let directory = try storeOfVersion1("renamed", journal: journal)
        // When a build whose type is now "test.note" registers the old identifier too
        let fixture = try QueueFixture(directory: directory, journal: journal)
        fixture.queue.register(RenamedNote.self, formerIdentifiers: [NoteOperationV1.persistenceIdentifier])
        let report = try fixture.queue.restore()
        await fixture.queue.allOperationsFinished()
        // Then it ran as the renamed type
        #expect(report.unknownTypes.isEmpty)
        #expect(fixture.lines == ["renamed renamed"])
    }
}

/// Version 1's note under a new persistence identifier.
final class RenamedNote: RetryingOperation, PersistentOperation, @unchecked Sendable {
    static let persistenceIdentifier = "test.note"
    let payload: NoteV1
    init(payload: NoteV1) { self.payload = payload; super.init() }
    override var isAsynchronous: Bool { false }
    override func startBaseOperation(isRetry: Bool) {
        Journal.record(payload.journal, "renamed \(payload.name)")
        baseOperationEnded()
    }
}

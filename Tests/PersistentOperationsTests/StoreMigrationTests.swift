import CrashHarness
import Foundation
import Testing
@testable import PersistentOperations

/// Stores of the earlier layout (one file per record: `pending/`, `failed/`, `batches/`,
/// formats 1–4) opened by this version: migrated to the journal, field for field, and safely
/// under power cuts at any instant of the migration.
@Suite("Store migration to the journal", .timeLimit(.minutes(10)))   // the heavy workloads share two cores under Thread Sanitizer in CI: a limit that catches a hang, not a slow machine
struct StoreMigrationTests {
    /// Every golden record with the area it belongs to in the earlier layout.
    static var goldenRecords: [(file: String, record: OperationRecord)] {
        let all = GoldenFileTests.version1Records.merging(GoldenFileTests.version2Records) { $1 }
            .merging(GoldenFileTests.version3Records) { $1 }.merging(GoldenFileTests.version4Records) { $1 }
        return all.sorted { $0.key < $1.key }.map { ($0.key, $0.value) }
    }

    @Test func aStoreOfTheEarlierLayoutWithEveryGoldenRecordOpensMigratedFieldForField() throws {
        // Given a store of the earlier layout holding the golden record files of formats 1–4
        // (failed ones in failed/, the batch of the version 2 dependent committed)
        let directory = try TemporaryDirectory()
        try RecordStore(directory: directory.store, configuration: .files).close()
        var pending: [OperationRecord] = []
        var failed: [OperationRecord] = []
        for (file, record) in Self.goldenRecords {
            let area = record.failureReason == nil ? "pending" : "failed"
            let bytes = try Data(contentsOf: try GoldenFileTests.fixtureURL(file))
            try bytes.write(to: directory.store.appendingPathComponent("\(area)/\(record.id).record"))
            if record.failureReason == nil { pending.append(record) } else { failed.append(record) }
            if let batch = record.batchID, record.failureReason == nil {
                try Data((record.id + "\n").utf8).write(to: directory.store.appendingPathComponent("batches/\(batch).batch"))
            }
        }
        #expect(pending.count >= 4 && failed.count >= 2)

        // When this version opens it read-write
        let store = try RecordStore(directory: directory.store)
        let loaded = try store.loadPending()
        let loadedFailed = try store.loadFailed()
        store.close()

        // Then every record is there, field for field, in its area, and nothing was quarantined
        #expect(loaded.records.sorted { $0.id < $1.id } == pending.sorted { $0.id < $1.id })
        #expect(loadedFailed.records.sorted { $0.id < $1.id } == failed.sorted { $0.id < $1.id })
        #expect(loaded.quarantined.isEmpty && loaded.skipped.isEmpty)
        // And the earlier layout's areas are empty: the records live in the journal now
        for area in ["pending", "failed", "batches"] {
            #expect(try directory.names(in: area).isEmpty, "\(area) not empty")
        }
        #expect(try directory.names(in: "journal").contains { $0.hasSuffix(".segment") })
        // And a second open reads the same from the journal alone
        let reopened = try RecordStore(directory: directory.store, access: .readOnly)
        #expect(try reopened.loadPending().records.count == pending.count)
        #expect(try reopened.loadFailed().records.count == failed.count)
    }

    @Test func aReadOnlyOpenOfAStoreNotMigratedReadsItsFilesAndChangesNothing() throws {
        // Given a store of the earlier layout with a pending and a failed record
        let directory = try TemporaryDirectory()
        let files = try RecordStore(directory: directory.store, configuration: .files)
        let record = try makeRecord(index: 1)
        let failing = try makeRecord(index: 2)
        try files.add(record)
        try files.add(failing)
        let failed = try files.moveToFailed(failing, reason: "refused")
        files.close()
        let before = try directory.names(in: "pending").union(directory.names(in: "failed"))

        // When a read-only store of this version reads it
        let view = try RecordStore(directory: directory.store, access: .readOnly)

        // Then it sees both records, and the files stay as they were, with no journal made
        #expect(try view.loadPending().records == [record])
        #expect(try view.loadFailed().records == [failed])
        #expect(try view.readPending(id: record.id) == record)
        #expect(try directory.names(in: "pending").union(directory.names(in: "failed")) == before)
        #expect(try directory.names(in: "journal").isEmpty)
    }

    @Test(arguments: [0x4D16_7A7E] as [UInt64])
    func aPowerCutAtAnyInstantOfTheMigrationLosesNothingAndTheNextOpenFinishesIt(seed: UInt64) async throws {
        // (on a thread of its own: seconds of work that must not hold the test runner's threads)
        let outcome = try await onDedicatedThread { try Self.cutDuringMigration(seed: seed) }
        // (every call armed that the run with cuts reached was cut: a flush the writer's timer
        // makes, when the migration takes longer than its delay, can add or save a call)
        #expect(outcome.cuts == outcome.armedAndReached)
        #expect(outcome.armedAndReached >= (isRunningUnderThreadSanitizer ? (outcome.calls + 7) / 8 : outcome.calls) - 2)
        #expect(outcome.calls > 30)
        #expect(outcome.problems.isEmpty, "\(outcome.problems.prefix(10))")
        print("migration power cuts (seed \(seed)): \(outcome.cuts) cuts over \(outcome.calls) calls, problems \(outcome.problems.count)")
    }

    /// Runs the migration of a store of the earlier layout with a cut armed before each of its
    /// calls, and opens every cut store; returns what it found.
    static func cutDuringMigration(seed: UInt64) throws -> (calls: Int, cuts: Int, armedAndReached: Int, problems: [String]) {
        // Given a store of the earlier layout on a disk that models power cuts: pending records,
        // a committed batch, an uncommitted batch (its addOperations never returned), failed ones
        let disk = PowerLossFileSystem()
        let directory = URL(fileURLWithPath: "/data/store")
        let files = try RecordStore(directory: directory, configuration: .init(fileSystem: disk.fileSystem, engine: .files))
        var expectedPending: [String: OperationRecord] = [:]
        var expectedFailed: [String: OperationRecord] = [:]
        for index in 0..<12 {
            let record = try makeRecord(index: index, sequence: UInt64(index + 1))
            try files.add(record)
            if index % 4 == 3 {
                let failed = try files.moveToFailed(record, reason: "refused \(index)")
                expectedFailed[failed.id] = failed
            } else {
                expectedPending[record.id] = record
            }
        }
        let batchID = UUID().uuidString
        var batch: [OperationRecord] = []
        for index in 20..<24 {
            var record = try makeRecord(index: index, sequence: UInt64(index + 1))
            record.batchID = batchID
            batch.append(record)
            expectedPending[record.id] = record
        }
        try files.addBatch(batch)
        files.close()
        // (the uncommitted batch: its records' files without the marker)
        let uncommitted = UUID().uuidString
        let writer = try RecordStore(directory: directory, configuration: .init(fileSystem: disk.fileSystem, engine: .files))
        for index in 30..<33 {
            var record = try makeRecord(index: index, sequence: UInt64(index + 1))
            record.batchID = uncommitted
            try writer.add(record)
        }
        writer.close()
        let durable = disk.cut(seed: 0)

        // When the migration runs, with a power cut armed before many of its calls
        let probe = durable.cut(seed: 0)
        let start = probe.callCount
        try RecordStore(directory: directory, configuration: .init(fileSystem: probe.fileSystem)).close()
        let calls = probe.callCount - start
        var random = SeededGenerator(seed: seed)
        let migrating = durable.cut(seed: 0)
        let base = migrating.callCount
        // (every call; under Thread Sanitizer, which looks for races, every eighth)
        let armed = Array(stride(from: 1, through: calls, by: isRunningUnderThreadSanitizer ? 8 : 1))
        for call in armed {
            migrating.armCut(beforeCall: base + call, seed: UInt64.random(in: 0...UInt64.max, using: &random))
        }
        try RecordStore(directory: directory, configuration: .init(fileSystem: migrating.fileSystem)).close()
        let reached = armed.filter { $0 <= migrating.callCount - base }.count

        // Then every cut store opens, holds every acknowledged record field for field in its
        // area and none of the uncommitted batch, and has left the earlier layout behind
        var problems: [String] = []
        for (call, cut) in migrating.cuts {
            do {
                let store = try RecordStore(directory: directory, configuration: .init(fileSystem: cut.fileSystem))
                let pending = try store.loadPending().records
                let failed = try store.loadFailed().records
                store.close()
                if Dictionary(uniqueKeysWithValues: pending.map { ($0.id, $0) }) != expectedPending {
                    problems.append("cut before call \(call): pending differs (\(pending.count) of \(expectedPending.count))")
                }
                if Dictionary(uniqueKeysWithValues: failed.map { ($0.id, $0) }) != expectedFailed {
                    problems.append("cut before call \(call): failed differs (\(failed.count) of \(expectedFailed.count))")
                }
                let left = cut.snapshot().keys.filter { path in
                    ["pending", "failed", "batches"].contains { path.hasPrefix(directory.path + "/\($0)/") }
                }
                if !left.isEmpty { problems.append("cut before call \(call): files left \(left.sorted().prefix(3))") }
            } catch {
                problems.append("cut before call \(call): \(error)")
            }
        }
        return (calls, migrating.cuts.count, reached, problems)
    }
}

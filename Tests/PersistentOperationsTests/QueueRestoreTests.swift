import Foundation
import Testing
@testable import PersistentOperations

#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// Restores within one process: "a launch" is a queue over the store; closing it releases the
/// lock like a dead process would, and leaves its records as a crash would (the closed
/// queue saves nothing more).
@Suite("Persistent queue: restore", .timeLimit(.minutes(1)))
struct QueueRestoreTests {
    /// A second launch on the same store, with its own clock starting at the same time.
    /// With `crashSignal`, the launch ends as a crash would: the line the crash-signal handler
    /// writes is appended to the launch file.
    func relaunch(_ fixture: QueueFixture, crashLoopLimit: Int = 3, crashSignal: Int32? = nil) throws -> QueueFixture {
        fixture.queue.close()
        if let crashSignal { try fixture.directory.noteCrash(signal: crashSignal) }
        return try QueueFixture(directory: fixture.directory, crashLoopLimit: crashLoopLimit, journal: fixture.journal)
    }

    @Test func aRestoredOperationContinuesItsRetryCountAndHonoursItsNextAttemptDate() async throws {
        // Given a launch in which an operation made a counted retry and waits 100 s
        let first = try QueueFixture()
        try first.queue.addOperation(first.upload("r", [.retry, .succeed], retryDelay: 100))
        await first.clock.waitForScheduledRetries(count: 1)
        // When the app dies and the next launch restores
        let second = try relaunch(first)
        let report = try second.queue.restore()
        // Then the operation is back, waiting for its saved date
        #expect(report.restored.count == 1)
        #expect(second.queue.operations().first?.state == .scheduled)
        second.clock.advance(by: 99)
        #expect(second.lines == ["r#1 retry=false retries=0"])
        // And when due it runs as retry 1, attempt 2
        second.clock.advance(by: 1)
        await second.queue.allOperationsFinished()
        #expect(second.lines == ["r#1 retry=false retries=0", "r#2 retry=true retries=1"])
        #expect(try second.pendingRecords().isEmpty)
        #expect(second.deliveredEvents().first == .restored(report.restored[0], typeIdentifier: ScriptedUpload.persistenceIdentifier))
    }

    @Test func anAttemptInFlightAtACrashRunsAgainAsARetryWithoutCountingOne() async throws {
        let first = try QueueFixture()
        try first.queue.addOperation(first.upload("h", [.hang, .succeed]))
        while first.lines.isEmpty { await Task.yield() }
        let second = try relaunch(first)
        try second.queue.restore()
        await second.queue.allOperationsFinished()
        #expect(second.lines == ["h#1 retry=false retries=0", "h#2 retry=true retries=0"])
    }

    @Test func anOperationAloneInFlightDuringThreeCrashesIsMovedToFailed() async throws {
        // Given an operation whose attempt never ends, and a store relaunched after three crashes
        var launch = try QueueFixture()
        try launch.queue.addOperation(launch.upload("loop", [.hang]))
        for crash in 1...3 {
            while launch.lines.count < crash { await Task.yield() }
            launch = try relaunch(launch, crashSignal: SIGSEGV)
            let report = try launch.queue.restore()
            if crash < 3 {
                #expect(report.restored.count == 1)
            } else {
                // Then the fourth launch does not run it again but moves it to failed
                #expect(report.restored.isEmpty)
                #expect(report.movedToFailedAfterCrashes.count == 1)
            }
        }
        #expect(launch.lines.count == 3)
        let failed = try launch.queue.failedOperations()
        #expect(failed.count == 1)
        #expect(failed.first?.reason.contains("crashed the process 3 times while its attempt ran alone") == true)
        #expect(try launch.pendingRecords().isEmpty)
        // And its record in the failed area keeps its payload (a restore reads records
        // without theirs), so that it can be re-queued
        let record = try #require(try launch.failedRecords().first)
        #expect(try RecordFormat.decodePayload(UploadPayload.self, from: record.payload).name == "loop")
    }

    @Test func aRecordOfAnUnregisteredTypeIsKeptUntouchedAndReported() async throws {
        // Given a store holding a record of a type this launch does not register
        let directory = try TemporaryDirectory()
        let store = try RecordStore(directory: directory.store)
        let record = OperationRecord(
            typeIdentifier: "test.unregistered", payload: try RecordFormat.encodePayload(["k": 1]), enqueueSequence: 1
        )
        try store.add(record)
        store.close()
        let stored = { try RecordStore(directory: directory.store, access: .readOnly).readPending(id: record.id) }
        let before = try stored()
        // When a queue restores
        let fixture = try QueueFixture(directory: directory)
        let report = try fixture.queue.restore()
        // Then the record is reported, not run, not deleted, not changed, and not waited for
        #expect(report.unknownTypes == [UnknownTypeRecord(id: PersistentOperationID(record: record.id), typeIdentifier: "test.unregistered")])
        #expect(fixture.queue.unknownTypeRecords.count == 1)
        #expect(try fixture.queue.counts().unknownType == 1)
        await fixture.queue.allOperationsFinished()
        #expect(try stored() == before)
        #expect(fixture.deliveredEvents().contains(.unknownType(PersistentOperationID(record: record.id), typeIdentifier: "test.unregistered")))
    }

    @Test func badEntriesAreQuarantinedAndReportedAndEveryGoodRecordRuns() async throws {
        // Given a store with good records and a table of bad entries
        let first = try QueueFixture(suspended: true)
        for index in 0..<3 {
            try first.queue.addOperation(first.upload("good\(index)"))
        }
        let wrongShape = OperationRecord(
            typeIdentifier: ScriptedUpload.persistenceIdentifier,
            payload: try RecordFormat.encodePayload(OtherShape.Payload(count: 3)), enqueueSequence: 99
        )
        try first.queue.store.add(wrongShape)
        let good = try RecordFormat.encode(makeRecord(index: 7))
        let bad: [String: Data] = [
            "garbage": Data("not a record at all".utf8),
            "empty": Data(),
            "truncated": good.prefix(good.count / 2),
            "bit flip": { var data = good; data[data.count - 5] ^= 0x10; return data }(),
            "huge array count": recordFile(body: CraftedPropertyList.hugeArrayCount),
            "reference cycle": recordFile(body: CraftedPropertyList.referenceCycle),
            "offset out of bounds": recordFile(body: CraftedPropertyList.offsetOutOfBounds),
            "oversized": Data(count: RecordFormat.defaultMaximumRecordSize + 1),
        ]
        // (as files of the earlier layout: the next read-write open migrates, quarantining them)
        try FileManager.default.createDirectory(atPath: first.directory.path("pending"), withIntermediateDirectories: true)
        for data in bad.values {
            _ = FileManager.default.createFile(atPath: first.directory.path("pending", StoreLayout.fileName(ofRecord: UUID().uuidString)), contents: data)
        }
        try FileManager.default.createDirectory(
            atPath: first.directory.path("pending", StoreLayout.fileName(ofRecord: UUID().uuidString)),
            withIntermediateDirectories: false
        )
        // When the next launch restores
        let second = try relaunch(first)
        let report = try second.queue.restore()
        await second.queue.allOperationsFinished()
        // Then every bad entry is quarantined and reported by the restore (the records of
        // the earlier layout, and the directory among them)
        #expect(report.quarantined.count == bad.count + 1)
        #expect(!report.quarantined.contains { $0.reason.contains("does not decode") })
        // And the payload that does not decode is quarantined when its operation is built
        // (a restore does not decode payloads), and reported by its event
        #expect(try second.queue.counts().quarantined == bad.count + 2)
        let quarantineReasons = second.deliveredEvents().compactMap { event -> String? in
            if case .quarantined(_, let reason) = event { return reason }
            return nil
        }
        #expect(quarantineReasons.count == bad.count + 2)
        #expect(quarantineReasons.filter { $0.contains("the payload does not decode as \"\(ScriptedUpload.persistenceIdentifier)\"") }.count == 1)
        #expect(report.restored.contains(PersistentOperationID(record: wrongShape.id)))
        #expect(second.queue.operation(withID: PersistentOperationID(record: wrongShape.id)) == nil)
        // And every good record ran
        #expect(Set(second.lines) == ["good0#1 retry=false retries=0", "good1#1 retry=false retries=0", "good2#1 retry=false retries=0"])
        #expect(try second.directory.names(in: "pending").isEmpty)
    }

    @Test func aSecondQueueOnTheSameDirectoryGetsLockedUntilTheFirstCloses() throws {
        let first = try QueueFixture()
        #expect {
            _ = try PersistentOperationQueue(directory: first.directory.store)
        } throws: { ($0 as? PersistenceError)?.code == .locked }
        first.queue.close()
        _ = try PersistentOperationQueue(directory: first.directory.store)
    }

    @Test func restoringTwiceRestoresNothingTwice() async throws {
        let first = try QueueFixture()
        try first.queue.addOperation(first.upload("once", [.retry, .succeed], retryDelay: 50))
        await first.clock.waitForScheduledRetries(count: 1)
        let second = try relaunch(first)
        #expect(try second.queue.restore().restored.count == 1)
        #expect(try second.queue.restore().restored.isEmpty)
        second.clock.advance(by: 50)
        await second.queue.allOperationsFinished()
        #expect(second.lines.filter { $0.hasPrefix("once#2") }.count == 1)
    }

    @Test func aReplacementInterruptedByACrashKeepsOnlyTheNewerRecord() async throws {
        // Given two pending records with one unique key (as a crash mid-replacement leaves)
        let directory = try TemporaryDirectory()
        let journal = UUID().uuidString
        let store = try RecordStore(directory: directory.store)
        for (sequence, name) in [(UInt64(1), "old"), (2, "new")] {
            try store.add(OperationRecord(
                typeIdentifier: ScriptedUpload.persistenceIdentifier,
                payload: try RecordFormat.encodePayload(UploadPayload(name: name, journal: journal)),
                enqueueSequence: sequence, uniqueKey: "sync"
            ))
        }
        store.close()
        // When a queue restores
        let fixture = try QueueFixture(directory: directory, journal: journal)
        let report = try fixture.queue.restore()
        await fixture.queue.allOperationsFinished()
        // Then only the newer one ran, and the older one is gone
        #expect(report.removedAsReplaced.count == 1)
        #expect(fixture.lines == ["new#1 retry=false retries=0"])
        #expect(try fixture.pendingRecords().isEmpty)
    }

    @Test func anInterruptedReplacementRemovesTheOlderRecordOnlyAfterItsDependentsAreRemovedAndSynced() async throws {
        // Given two pending records with one unique key (as a crash mid-replacement leaves),
        // the older with a dependent
        let directory = try TemporaryDirectory()
        let journal = UUID().uuidString
        let store = try RecordStore(directory: directory.store)
        func record(_ name: String, _ sequence: UInt64, key: String?, prerequisites: [String] = []) throws -> OperationRecord {
            OperationRecord(
                typeIdentifier: ScriptedUpload.persistenceIdentifier,
                payload: try RecordFormat.encodePayload(UploadPayload(name: name, journal: journal)),
                enqueueSequence: sequence, uniqueKey: key, prerequisites: prerequisites
            )
        }
        let old = try record("old", 1, key: "sync")
        let dependent = try record("dependent", 2, key: nil, prerequisites: [old.id])
        let new = try record("new", 3, key: "sync")
        for item in [old, dependent, new] { try store.add(item) }
        store.close()
        // And a file system that logs the journal's removal frames and its flushes
        let log = Locked<[String]>([])
        var fileSystem = FileSystem.system
        let writeAt = fileSystem.writeAt
        let synchronizeData = fileSystem.synchronizeData
        fileSystem.writeAt = { descriptor, bytes, offset in
            let written = try writeAt(descriptor, bytes, offset)
            if bytes.count == JournalFrame.headerSize + 36, bytes[8] == JournalFrame.Kind.remove.rawValue {
                log.withLock { $0.append("unlink " + String(decoding: bytes[JournalFrame.headerSize...], as: UTF8.self)) }
            }
            return written
        }
        fileSystem.synchronizeData = { descriptor in
            try synchronizeData(descriptor)
            log.withLock { $0.append("sync") }
        }

        // When a queue restores
        let fixture = try QueueFixture(directory: directory, fileSystem: fileSystem, journal: journal)
        let report = try fixture.queue.restore()
        await fixture.queue.allOperationsFinished()

        // Then the dependent was cancelled, its removal synced before the older record was
        // removed (a crash in between must not let it run as if its prerequisite had succeeded)
        #expect(report.removedAsReplaced == [PersistentOperationID(record: old.id)])
        let entries = log.withLock { $0 }
        let dependentRemoved = try #require(entries.firstIndex(of: "unlink \(dependent.id)"))
        let oldRemoved = try #require(entries.firstIndex(of: "unlink \(old.id)"))
        #expect(entries[dependentRemoved...].dropFirst().first == "sync")
        #expect(dependentRemoved < oldRemoved)
        #expect(fixture.deliveredEvents().contains(.cancelled(PersistentOperationID(record: dependent.id))))
        // And only the newer one ran
        #expect(fixture.lines == ["new#1 retry=false retries=0"])
        #expect(try fixture.pendingRecords().isEmpty)
    }
}

import CrashHarness
import Foundation
import Testing
@testable import PersistentOperations

#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// `ReadOnlyPersistentStore`, and attempts in flight reported the same way by the queue's
/// queries, the read-only view and `store-inspector`.
@Suite("Read-only store and attempts in flight", .timeLimit(.minutes(3)))
struct ReadOnlyStoreTests {
    @Test func countsFromTheJournalsIndexAreThoseOfTheRecordsReadOneByOne() throws {
        // Given a held journal store of several types in both areas, changed in every way a
        // queue changes one: adds (single and batched), rewrites, removals, moves to the failed
        // area and back, attempt markers, and a record counting attempts in flight itself
        let directory = try TemporaryDirectory()
        let writer = try RecordStore(directory: directory.store)
        defer { writer.close() }
        var random = SeededGenerator(seed: 91)
        var pending: [OperationRecord] = []
        var failed: [OperationRecord] = []
        let types = ["com.example.upload", "com.example.sync", "com.example.ünïcode"]
        func make(_ index: Int) -> OperationRecord {
            OperationRecord(typeIdentifier: types[index % types.count], payload: Data([UInt8(index % 256)]), enqueueSequence: UInt64(index + 1))
        }
        let reader = try ReadOnlyPersistentStore(directory: directory.store)
        for step in 0..<300 {
            switch Int.random(in: 0..<8, using: &random) {
            case 0, 1:
                var record = make(step)
                if step % 7 == 0 { record.attemptsInFlight = 2 }
                try writer.add(record)
                pending.append(record)
            case 2:
                let batch = (0..<3).map { make(step * 10 + $0) }
                try writer.addBatch(batch)
                pending += batch
            case 3 where !pending.isEmpty:
                var record = pending.remove(at: Int.random(in: 0..<pending.count, using: &random))
                record.numberOfRetries += 1
                record.attemptsInFlight = 0
                try writer.update(record)
                pending.append(record)
            case 4 where !pending.isEmpty:
                let record = pending.remove(at: Int.random(in: 0..<pending.count, using: &random))
                try writer.removePending(id: record.id)
            case 5 where !pending.isEmpty:
                let record = pending.remove(at: Int.random(in: 0..<pending.count, using: &random))
                failed.append(try writer.moveToFailed(record, reason: "refused"))
            case 6 where !failed.isEmpty:
                let record = failed.remove(at: Int.random(in: 0..<failed.count, using: &random))
                pending.append(try writer.requeueFailed(id: record.id))
            case 7 where !pending.isEmpty:
                try writer.setAttemptsInFlight(1, forRecord: pending[Int.random(in: 0..<pending.count, using: &random)].id)
            default:
                continue
            }
            guard step % 25 == 24 else { continue }

            // When the view counts them, and lists them record by record
            let counts = try reader.counts()
            let listed = try reader.pendingRecords()
            let failedListed = try reader.failedRecords()

            // Then the counts are those of the records listed
            #expect(counts.pending == listed.records.count, "step \(step)")
            #expect(counts.pendingByType == Dictionary(grouping: listed.records, by: \.typeIdentifier).mapValues(\.count), "step \(step)")
            #expect(counts.running == listed.records.filter { $0.state == .running }.count, "step \(step)")
            #expect(counts.failed == failedListed.records.count, "step \(step)")
            #expect(counts.failedByType == Dictionary(grouping: failedListed.records, by: \.typeIdentifier).mapValues(\.count), "step \(step)")
            #expect(counts.unreadable == 0 && listed.unreadable.isEmpty)
            #expect(counts.pending == pending.count && counts.failed == failed.count, "step \(step)")
        }
        #expect(try reader.counts().running > 0)
    }

    @Test func readsInOneSnapshotReadTheJournalOnceAndEachCallOutsideOneReadsItAfresh() throws {
        // Given a store with a pending and a failed record, and a read-only view of it that
        // counts the segment files it opens
        let directory = try TemporaryDirectory()
        let writer = try RecordStore(directory: directory.store)
        try writer.add(try makeRecord(index: 1))
        var failed = try makeRecord(index: 2)
        try writer.add(failed)
        failed.failureReason = "refused"
        _ = try writer.moveToFailed(failed, reason: "refused")
        let segmentOpens = Locked(0)
        var fileSystem = FileSystem.system
        let open = fileSystem.open
        fileSystem.open = { path, flags, mode in
            if path.hasSuffix(".segment") { segmentOpens.withLock { $0 += 1 } }
            return try open(path, flags, mode)
        }
        let reader = try RecordStore(directory: directory.store, access: .readOnly, configuration: .init(fileSystem: fileSystem))

        // When it reads both areas and the markers in one snapshot, then twice outside one
        let before = segmentOpens.withLock { $0 }
        let (pending, failedArea) = try reader.withReadSnapshot {
            _ = reader.attemptMarkers()
            return (try reader.loadPending(), try reader.loadFailed())
        }
        let inSnapshot = segmentOpens.withLock { $0 } - before
        try writer.add(try makeRecord(index: 3))
        let later = try reader.loadPending()
        _ = try reader.loadFailed()
        let outside = segmentOpens.withLock { $0 } - before - inSnapshot

        // Then the snapshot opened the journal's one segment once, and each call outside one
        // opened it afresh, seeing the writer's latest record
        #expect(inSnapshot == 1)
        #expect(outside == 2)
        #expect(pending.records.count == 1 && failedArea.records.count == 1)
        #expect(later.records.count == 2)
        writer.close()
    }

    @Test func aRestoredRecordCountsTheAttemptThatWasInFlightWhenItsLaunchDied() async throws {
        // Given a store whose record's first attempt was in flight when its process died
        let directory = try TemporaryDirectory()
        let record = try Self.uploadRecord(name: "interrupted", journal: UUID().uuidString)
        do {
            let store = try RecordStore(directory: directory.store)
            try store.add(record)
            try store.setAttemptsInFlight(1, forRecord: record.id)
            store.close()
        }
        // When the read-only view reads it (no process holds the store)
        let stored = try #require(try ReadOnlyPersistentStore(directory: directory.store).pendingRecords().records.first)
        // Then it counts the interrupted attempt, and the record is due again, not running
        #expect(stored.numberOfAttempts == 1 && stored.attemptsInFlight == 1)
        #expect(stored.state == .queued)

        // When a queue restores it on a suspended OperationQueue, so it does not start yet
        let fixture = try QueueFixture(suspended: true, directory: directory)
        try fixture.queue.restore()
        // Then its query counts the attempt started by the launch that died
        let info = try #require(fixture.queue.operations().first)
        #expect(info.numberOfAttempts == 1)
        #expect(info.state == .queued)
        fixture.queue.cancelAllOperations()
        await fixture.queue.allOperationsFinished()
    }

    @Test func aSecondAttemptRunningIsReportedAsRunningAttemptTwoByTheQueueTheViewAndTheInspector() async throws {
        // Given an operation whose first attempt asked for a retry and whose second hangs
        let fixture = try QueueFixture()
        let upload = fixture.upload("second", [.retry, .hang], retryDelay: 5)
        let result = try fixture.queue.addOperation(upload, options: EnqueueOptions())
        await fixture.clock.waitForScheduledRetries(count: 1)
        fixture.clock.advance(by: 5)
        while fixture.lines.count < 2 { await Task.yield() }
        let before = try Self.files(in: fixture.directory.store)

        // When the queue, a read-only view and the inspector report it
        let info = try #require(fixture.queue.operation(withID: result.id))
        let view = try ReadOnlyPersistentStore(directory: fixture.directory.store)
        let stored = try #require(try view.record(withID: result.id))
        let list = try await StoreInspectorTests.inspect("list", fixture.directory.store.path, "--json")
        let table = try await StoreInspectorTests.inspect("list", fixture.directory.store.path)
        let shown = try await StoreInspectorTests.inspect("show", fixture.directory.store.path, result.id.rawValue, "--json")

        // Then each says running, two attempts started, one retry
        #expect(info.state == .running && info.numberOfAttempts == 2 && info.numberOfRetries == 1)
        #expect(stored.state == .running && stored.numberOfAttempts == 2 && stored.numberOfRetries == 1)
        #expect(stored.attemptsInFlight == 1)
        #expect(try view.counts().running == 1)
        let summary = try #require((try list.json()["pending"] as? [[String: Any]])?.first)
        #expect(summary["state"] as? String == "running")
        #expect(summary["attempts"] as? Int == 2)
        #expect(summary["nextAttempt"] is NSNull)
        #expect(table.output.contains("STATE") && table.output.contains("running"))
        let details = try shown.json()
        #expect(details["state"] as? String == "running")
        #expect(details["attempts"] as? Int == 2)
        #expect(details["attemptsInFlight"] as? Int == 1)
        // And reading changed nothing on disk
        #expect(try Self.files(in: fixture.directory.store) == before)

        fixture.queue.cancelAllOperations()
        await fixture.queue.allOperationsFinished()
    }

    #if os(Linux)
    @Test func aHeldStoreReadsAsHeldEvenWhenTheLockTableMissesItsLine() throws {
        // Given a store held by this process, and its lock file
        let directory = try TemporaryDirectory()
        let store = try RecordStore(directory: directory.store)
        let lockPath = StoreLayout(directory: directory.store).lockPath
        // When the lock table, read while other locks come and go, lacks its line (or cannot be
        // read), then the holder's descriptors still say it is held
        #expect(ReadOnlyPersistentStore.isFlockHeld(onLockFile: lockPath, lockTable: ""))
        #expect(ReadOnlyPersistentStore.isFlockHeld(onLockFile: lockPath, lockTable: nil))
        // And once the store is closed, its lock file naming this same running process, it is free
        store.close()
        #expect(try String(contentsOfFile: lockPath, encoding: .utf8).contains("\(getpid())"))
        #expect(!ReadOnlyPersistentStore.isFlockHeld(onLockFile: lockPath, lockTable: ""))
        #expect(!ReadOnlyPersistentStore.isFlockHeld(onLockFile: lockPath, lockTable: try String(contentsOfFile: "/proc/locks", encoding: .utf8)))
        // And a lock file naming a process that does not exist is free
        try "999999999\n".write(toFile: lockPath, atomically: false, encoding: .utf8)
        #expect(!ReadOnlyPersistentStore.isFlockHeld(onLockFile: lockPath, lockTable: ""))
    }
    #endif

    @Test func eachPendingRecordReadOneAtATimeIsTheListsRecordButForItsGraphState() throws {
        // Given a store with a prerequisite, its dependent and a record due in an hour
        let directory = try TemporaryDirectory()
        let store = try RecordStore(directory: directory.store)
        let prerequisite = try makeRecord(index: 1)
        var dependent = try makeRecord(index: 2)
        dependent.prerequisites = [prerequisite.id]
        var later = try makeRecord(index: 3)
        later.notBefore = Date().addingTimeInterval(3600)
        for record in [prerequisite, dependent, later] { try store.add(record) }
        store.close()
        // When the view reads them one at a time, and as a list
        let view = try ReadOnlyPersistentStore(directory: directory.store)
        var streamed: [PersistentOperationID: StoredOperationRecord] = [:]
        let unreadable = try view.forEachPendingRecord { streamed[$0.id] = $0 }
        let listed = try view.pendingRecords()
        // Then both hold the same records with the same fields; only the list can tell that the
        // dependent waits for its prerequisite
        #expect(unreadable.isEmpty && listed.unreadable.isEmpty)
        #expect(Set(streamed.keys) == Set(listed.records.map(\.id)) && streamed.count == 3)
        for record in listed.records {
            let one = try #require(streamed[record.id])
            #expect(one.typeIdentifier == record.typeIdentifier && one.dueDate == record.dueDate && one.numberOfAttempts == record.numberOfAttempts)
            #expect(one.state == (record.state == .waitingForPrerequisites ? .queued : record.state))
        }
        #expect(listed.records.first { $0.id.rawValue == dependent.id }?.state == .waitingForPrerequisites)
        #expect(streamed.values.first { $0.id.rawValue == later.id }?.state == .scheduled)
        // And the counts and the next due date, read the same way, agree with the list
        let counts = try view.counts()
        #expect(counts.pending == 3 && counts.pendingByType == [prerequisite.typeIdentifier: 3])
        let now = Date()
        #expect(try view.nextDueDate(now: now) == now)
    }

    @Test func theViewReadsAStoreAnotherProcessHoldsAndNeverWrites() async throws {
        // Given a store with a pending record due later, a failed record and a corrupt file
        let directory = try TemporaryDirectory()
        let store = try RecordStore(directory: directory.store)
        // (Damaged before other frames: a damaged last frame reads as the torn tail of a crash.)
        let damaged = try makeRecord(index: 3)
        try store.add(damaged)
        var later = try makeRecord(index: 1)
        later.notBefore = Date().addingTimeInterval(3600)
        let failed = try makeRecord(index: 2)
        try store.add(later)
        try store.add(failed)
        _ = try store.moveToFailed(failed, reason: "403 upload refused")
        store.close()
        try damageJournalRecord(damaged.id, in: directory)
        // And another process holding it
        let pipe = Pipe()
        let holder = try ChildApp.launch(["hold", "--store", directory.store.path], output: pipe.fileHandleForWriting)
        defer {
            kill(holder.processIdentifier, SIGKILL)
            holder.waitUntilExit()
        }
        let line = try await onDedicatedThread { String(decoding: pipe.fileHandleForReading.availableData, as: UTF8.self) }
        #expect(line.hasPrefix("holding"))
        let before = try Self.files(in: directory.store)

        // When the read-only view lists, shows and counts it
        let view = try ReadOnlyPersistentStore(directory: directory.store)
        let pending = try view.pendingRecords()
        let failedList = try view.failedRecords()
        let lowercased = try #require(PersistentOperationID(failed.id.lowercased()))
        let shown = try view.record(withID: lowercased)
        let counts = try view.counts()

        // Then it sees every record with its fields, reports the corrupt file, names the holder
        #expect(pending.records.map(\.id.rawValue) == [later.id])
        #expect(pending.records.first?.state == .scheduled)
        #expect(try pending.records.first?.decodePayload(as: SampleOperation.self) == SamplePayload.example.with(attempt: 1))
        #expect(pending.unreadable.count == 1)
        #expect(pending.unreadable.first?.name.contains(".segment@") == true, "\(pending.unreadable)")
        #expect(failedList.records.map(\.failureReason) == ["403 upload refused"])
        #expect(shown?.area == .failed && shown?.id.rawValue == failed.id)
        #expect(counts == ReadOnlyPersistentStore.Counts(
            pending: 1, running: 0, failed: 1, quarantined: 1, unreadable: 1,
            pendingByType: ["com.example.upload": 1], failedByType: ["com.example.upload": 1]
        ))
        #expect(view.lockHolder == ReadOnlyPersistentStore.LockHolder(processIdentifier: holder.processIdentifier, isRunning: true))
        // And nothing on disk changed: no lock taken, the damaged frame left in place
        #expect(try Self.files(in: directory.store) == before)
    }

    @Test func anIdentifierTypedInLowercaseNamesTheSameRecord() async throws {
        // Given a store with a failed record
        let directory = try TemporaryDirectory()
        let store = try RecordStore(directory: directory.store)
        let record = try makeRecord(index: 1)
        try store.add(record)
        _ = try store.moveToFailed(record, reason: "refused")
        store.close()
        // When its identifier is typed in lowercase
        let lowercase = record.id.lowercased()
        let shown = try await StoreInspectorTests.inspect("show", directory.store.path, lowercase, "--json")
        // Then it is the same identifier, and show finds the record
        #expect(PersistentOperationID(lowercase)?.rawValue == record.id)
        #expect(shown.status == 0, "\(shown.error)")
        #expect(try shown.json()["id"] as? String == record.id)
        #expect(try shown.json()["area"] as? String == "failed")
    }

    // MARK: Helpers

    /// A record of a `ScriptedUpload`.
    static func uploadRecord(name: String, journal: String) throws -> OperationRecord {
        OperationRecord(
            typeIdentifier: ScriptedUpload.persistenceIdentifier,
            payload: try RecordFormat.encodePayload(UploadPayload(name: name, journal: journal, steps: [.succeed])),
            enqueueSequence: 1,
            enqueuedAt: Date()
        )
    }

    /// Every file under `directory` with its contents and permissions, lock file included.
    static func files(in directory: URL) throws -> [String: Data] {
        var files: [String: Data] = [:]
        let enumerator = FileManager.default.enumerator(atPath: directory.path)
        while let name = enumerator?.nextObject() as? String {
            let full = directory.appendingPathComponent(name).path
            var isDirectory: ObjCBool = false
            if FileManager.default.fileExists(atPath: full, isDirectory: &isDirectory), !isDirectory.boolValue {
                files[name] = try Data(contentsOf: URL(fileURLWithPath: full))
            } else {
                files[name + "/"] = Data()
            }
        }
        return files
    }
}

/// The operation type of `SamplePayload` records, to decode them.
final class SampleOperation: Operation, PersistentOperation, @unchecked Sendable {
    static let persistenceIdentifier = "com.example.upload"
    let payload: SamplePayload
    init(payload: SamplePayload) { self.payload = payload }
}

extension SamplePayload {
    func with(attempt: Int) -> SamplePayload {
        var copy = self
        copy.attempt = attempt
        return copy
    }
}

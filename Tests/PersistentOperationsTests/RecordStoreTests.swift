import Foundation
import Testing
@testable import PersistentOperations

#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

@Suite("Record store")
struct RecordStoreTests {
    @Test func addedRecordsLoadInPriorityThenEnqueueOrder() throws {
        // Given records added out of order with mixed priorities
        let directory = try TemporaryDirectory()
        let store = try RecordStore(directory: directory.store, configuration: .files)
        let low1 = try makeRecord(index: 1, sequence: 1, priority: 0)
        let high2 = try makeRecord(index: 2, sequence: 2, priority: 5)
        let low3 = try makeRecord(index: 3, sequence: 3, priority: 0)
        let high4 = try makeRecord(index: 4, sequence: 4, priority: 5)
        for record in [low3, high4, low1, high2] { try store.add(record) }
        store.close()
        // When another store loads them
        let report = try RecordStore(directory: directory.store, configuration: .files).loadPending()
        // Then they come back equal, higher priority first and FIFO within a priority
        #expect(report.records == [high2, high4, low1, low3])
        #expect(report.quarantined.isEmpty && report.skipped.isEmpty)
    }

    @Test func updateRewritesTheRecordInPlace() throws {
        let directory = try TemporaryDirectory()
        let store = try RecordStore(directory: directory.store, configuration: .files)
        var record = try makeRecord()
        try store.add(record)
        // When the record is updated after a retry
        record.numberOfRetries = 2
        record.numberOfAttempts = 3
        record.attemptsInFlight = 1
        record.nextAttemptAt = Date(timeIntervalSinceReferenceDate: 800_000_000.75)
        try store.update(record)
        // Then one file holds the new version
        #expect(try store.loadPending().records == [record])
        #expect(try directory.names(in: "pending") == [StoreLayout.fileName(ofRecord: record.id)])
    }

    @Test func attemptMarkersCountAttemptsInFlightAsLinksEmptyFilesOrDecimalCounts() throws {
        // Given a pending record
        let directory = try TemporaryDirectory()
        let store = try RecordStore(directory: directory.store, configuration: .files)
        let record = try makeRecord()
        try store.add(record)
        let layout = StoreLayout(directory: directory.store)
        let marker = layout.path(ofEntry: record.id + ".attempt", in: .attempts)

        // When its first attempt starts
        try store.setAttemptsInFlight(1, forRecord: record.id)
        // Then the marker is a second name of the record file (no new file) and counts one
        var markerInfo = stat()
        var recordInfo = stat()
        #expect(lstat(marker, &markerInfo) == 0 && lstat(layout.path(ofRecord: record.id, in: .pending), &recordInfo) == 0)
        #expect(markerInfo.st_ino == recordInfo.st_ino)
        #expect(store.attemptsInFlight() == [record.id: 1])

        // When two more start without ending (crashes), the count is written out
        try store.setAttemptsInFlight(3, forRecord: record.id)
        #expect(store.attemptsInFlight() == [record.id: 3])
        #expect(lstat(marker, &markerInfo) == 0 && markerInfo.st_ino != recordInfo.st_ino)
        // And back to one replaces the counted marker with a link again
        try store.setAttemptsInFlight(1, forRecord: record.id)
        #expect(store.attemptsInFlight() == [record.id: 1])

        // When the attempt ends, the marker goes and the record stays whole
        store.clearAttemptsInFlight(forRecord: record.id)
        #expect(store.attemptsInFlight().isEmpty)
        #expect(try store.loadPending().records == [record])
    }

    @Test func whereLinksFailAFirstAttemptIsMarkedByAnEmptyFile() throws {
        // Given a file system that cannot make hard links
        let directory = try TemporaryDirectory()
        var fileSystem = FileSystem.system
        fileSystem.link = { _, newName in throw SystemCallError("link", path: newName, code: EPERM) }
        let store = try RecordStore(directory: directory.store, configuration: .init(fileSystem: fileSystem, engine: .files))
        let record = try makeRecord()
        try store.add(record)

        // When the first attempt starts
        try store.setAttemptsInFlight(1, forRecord: record.id)

        // Then an empty marker file counts it
        let marker = StoreLayout(directory: directory.store).path(ofEntry: record.id + ".attempt", in: .attempts)
        #expect(try FileManager.default.attributesOfItem(atPath: marker)[.size] as? UInt64 == 0)
        #expect(store.attemptsInFlight() == [record.id: 1])
    }

    @Test(arguments: [false, true])
    func aMoveInterruptedAfterItsLinkIsFinishedByTheNextOpen(requeue: Bool) throws {
        // Given a move between the areas cut off after the record got its name in the other
        // area (its old name could not be unlinked: as if the process died right there)
        let directory = try TemporaryDirectory()
        var fileSystem = FileSystem.system
        let failsUnlink = Locked(false)
        let system = FileSystem.system
        fileSystem.unlink = { path in
            if failsUnlink.withLock({ $0 }) { throw SystemCallError("unlink", path: path, code: EIO) }
            try system.unlink(path)
        }
        let record = try makeRecord()
        do {
            let store = try RecordStore(directory: directory.store, configuration: .init(fileSystem: fileSystem, engine: .files))
            try store.add(record)
            if requeue {
                _ = try store.moveToFailed(record, reason: "test")
                failsUnlink.withLock { $0 = true }
                #expect(throws: PersistenceError.self) { _ = try store.requeueFailed(id: record.id) }
            } else {
                failsUnlink.withLock { $0 = true }
                #expect(throws: PersistenceError.self) { _ = try store.moveToFailed(record, reason: "test") }
            }
            failsUnlink.withLock { $0 = false }
            store.close()
        }
        let recordName = StoreLayout.fileName(ofRecord: record.id)
        #expect(try directory.names(in: "pending").contains(recordName))
        #expect(try directory.names(in: "failed").contains(recordName))

        // When the store is opened again and both areas are loaded
        let store = try RecordStore(directory: directory.store, configuration: .files)
        let pending = try store.loadPending()
        let failed = try store.loadFailed()

        // Then the move is finished: the record is in one area only, by name too
        #expect(pending.records.map(\.id) == (requeue ? [record.id] : []))
        #expect(failed.records.map(\.id) == (requeue ? [] : [record.id]))
        #expect(try directory.names(in: requeue ? "failed" : "pending").contains(recordName) == false)
        #expect(try directory.names(in: requeue ? "pending" : "failed").contains(recordName))
    }

    @Test func aRecordWithoutItsPayloadIsNeverWrittenOverTheStoredOne() throws {
        // Given a stored record
        let directory = try TemporaryDirectory()
        let store = try RecordStore(directory: directory.store, configuration: .files)
        let record = try makeRecord()
        try store.add(record)
        // When an update or a move to failed comes with an empty payload (never loaded)
        var hollow = record
        hollow.payload = Data()
        hollow.numberOfRetries = 9
        #expect(throws: PersistenceError.self) { try store.update(hollow) }
        #expect(throws: PersistenceError.self) { _ = try store.moveToFailed(hollow, reason: "test") }
        // Then the stored record is unchanged and still pending
        #expect(try store.loadPending().records == [record])
        #expect(try store.readPending(id: record.id) == record)
    }

    @Test func closeWaitsForAChangeUnderWayAndRefusesLaterOnes() async throws {
        // Given a store whose next write blocks until released
        let directory = try TemporaryDirectory()
        let gate = DispatchSemaphore(value: 0)
        let entered = DispatchSemaphore(value: 0)
        let blocks = Locked(false)
        var fileSystem = FileSystem.system
        fileSystem.write = { descriptor, bytes in
            if blocks.withLock({ $0 }) {
                blocks.withLock { $0 = false }
                entered.signal()
                gate.wait()
            }
            return try FileSystem.system.write(descriptor, bytes)
        }
        let store = try RecordStore(directory: directory.store, configuration: .init(fileSystem: fileSystem, engine: .files))
        let record = try makeRecord()
        let log = Locked<[String]>([])
        blocks.withLock { $0 = true }   // not before: opening the store writes its lock file

        // When an add is under way and another thread closes the store
        let added = DispatchGroup()
        added.enter()
        Thread.detachNewThread {
            do {
                try store.add(record)
                log.withLock { $0.append("added") }
            } catch {
                log.withLock { $0.append("add failed: \(error)") }
            }
            added.leave()
        }
        let closed = DispatchGroup()
        closed.enter()
        await onDedicatedThread {
            entered.wait()
            Thread.detachNewThread {
                store.close()
                // What the add under way had written by the time close returned.
                let onDisk = (try? RecordStore(directory: directory.store, access: .readOnly, configuration: .files).loadPending().records.count) ?? -1
                log.withLock { $0.append("closed with \(onDisk) on disk") }
                closed.leave()
            }
        }
        // Then close does not return while the add is under way
        await onDedicatedThread { _ = usleep(200_000) }
        #expect(log.withLock { $0 }.isEmpty)
        // And once the write goes on, the add completes, and close returns only after its
        // record is on disk (the two threads report in either order)
        gate.signal()
        await onDedicatedThread {
            added.wait()
            closed.wait()
        }
        #expect(Set(log.withLock { $0 }) == ["added", "closed with 1 on disk"])
        #expect(try RecordStore(directory: directory.store, access: .readOnly, configuration: .files).loadPending().records == [record])

        // And a change after close is refused, and the directory can be opened again
        let refused = #expect(throws: PersistenceError.self) { try store.add(try makeRecord(index: 2, sequence: 2)) }
        #expect(refused?.code == .storeNotWritable)
        _ = try RecordStore(directory: directory.store, configuration: .files)
    }

    @Test func updatingOrRemovingAMissingRecordThrowsRecordNotFound() throws {
        let directory = try TemporaryDirectory()
        let store = try RecordStore(directory: directory.store, configuration: .files)
        let record = try makeRecord()
        #expect(throws: PersistenceError.self) { try store.update(record) }
        let error = #expect(throws: PersistenceError.self) { try store.removePending(id: record.id) }
        #expect(error?.code == .recordNotFound)
    }

    @Test func addingTheSameIdentifierTwiceIsRefused() throws {
        let directory = try TemporaryDirectory()
        let store = try RecordStore(directory: directory.store, configuration: .files)
        let record = try makeRecord()
        try store.add(record)
        #expect(throws: PersistenceError.self) { try store.add(record) }
    }

    @Test func removeDeletesThePendingRecord() throws {
        let directory = try TemporaryDirectory()
        let store = try RecordStore(directory: directory.store, configuration: .files)
        let kept = try makeRecord(index: 1)
        let removed = try makeRecord(index: 2)
        try store.add(kept)
        try store.add(removed)
        try store.removePending(id: removed.id)
        #expect(try store.loadPending().records == [kept])
    }

    @Test func aFailedRecordCanBeListedRequeuedAndPurged() throws {
        // Given two records moved to the failed area
        let directory = try TemporaryDirectory()
        let store = try RecordStore(directory: directory.store, configuration: .files)
        var first = try makeRecord(index: 1)
        first.numberOfRetries = 5
        first.attemptsInFlight = 3
        let second = try makeRecord(index: 2)
        try store.add(first)
        try store.add(second)
        let failedFirst = try store.moveToFailed(first, reason: "crash loop: 3 launches")
        _ = try store.moveToFailed(second, reason: "server said 400")
        // Then they are listed with their reasons and nothing is pending
        #expect(try store.loadPending().records.isEmpty)
        let failed = try store.loadFailed().records
        #expect(failed.map(\.failureReason) == ["crash loop: 3 launches", "server said 400"])
        #expect(failed.first == failedFirst)
        // When the first is re-queued
        let requeued = try store.requeueFailed(id: first.id)
        // Then it is pending again with its failure fields reset
        #expect(requeued.failureReason == nil && requeued.numberOfRetries == 0 && requeued.attemptsInFlight == 0)
        #expect(requeued.payload == first.payload && requeued.enqueueSequence == first.enqueueSequence)
        #expect(try store.loadPending().records == [requeued])
        // When the rest is purged
        #expect(try store.purgeAllFailed() == 1)
        #expect(try store.loadFailed().records.isEmpty)
        #expect(try directory.names(in: "failed").isEmpty)
    }

    @Test func requeueAllFailedMovesEveryFailedRecordBack() throws {
        let directory = try TemporaryDirectory()
        let store = try RecordStore(directory: directory.store, configuration: .files)
        let records = try (0..<4).map { try makeRecord(index: $0) }
        for record in records {
            try store.add(record)
            _ = try store.moveToFailed(record, reason: "gave up")
        }
        let requeued = try store.requeueAllFailed()
        #expect(requeued.map(\.id) == records.map(\.id))
        #expect(try store.loadPending().records.count == 4)
        #expect(try store.loadFailed().records.isEmpty)
    }

    @Test func anInterruptedMoveToFailedIsCompletedByTheNextLoad() throws {
        // Given a pending file that already carries a failure reason (a crash hit before the rename)
        let directory = try TemporaryDirectory()
        var record = try makeRecord()
        record.failureReason = "crash loop"
        let path = directory.path("pending", StoreLayout.fileName(ofRecord: record.id))
        try RecordStore(directory: directory.store, configuration: .files).close()
        try RecordFormat.encode(record).write(to: URL(fileURLWithPath: path))
        // When the pending area is loaded
        let store = try RecordStore(directory: directory.store, configuration: .files)
        let report = try store.loadPending()
        // Then the record is moved on rather than run
        #expect(report.records.isEmpty)
        #expect(report.completedMoves == [record])
        #expect(try store.loadFailed().records == [record])
    }

    @Test func enqueueSequencesContinueAfterTheLargestStoredOne() throws {
        let directory = try TemporaryDirectory()
        do {
            let store = try RecordStore(directory: directory.store, configuration: .files)
            try store.add(try makeRecord(index: 1, sequence: 41))
            let failed = try makeRecord(index: 2, sequence: 99)
            try store.add(failed)
            _ = try store.moveToFailed(failed, reason: "gave up")
        }
        // When a new store hands out a sequence before loading anything
        let store = try RecordStore(directory: directory.store, configuration: .files)
        // Then it is above every stored one, and increasing
        #expect(store.nextEnqueueSequence() == 100)
        #expect(store.nextEnqueueSequence() == 101)
    }

    @Test func aSequenceHandedOutAfterLoadingDoesNotReadThePendingRecordsAgain() throws {
        // Given a store with the largest sequence in the pending area and a smaller one failed
        let directory = try TemporaryDirectory()
        do {
            let store = try RecordStore(directory: directory.store, configuration: .files)
            try store.add(try makeRecord(index: 1, sequence: 150))
            let failed = try makeRecord(index: 2, sequence: 99)
            try store.add(failed)
            _ = try store.moveToFailed(failed, reason: "gave up")
        }
        // And a new store that counts how often pending record files are opened
        let pendingOpens = Locked(0)
        var fileSystem = FileSystem.system
        fileSystem.open = { path, flags, mode in
            if path.contains("/pending/"), path.hasSuffix(".record") { pendingOpens.withLock { $0 += 1 } }
            return try FileSystem.system.open(path, flags, mode)
        }
        let store = try RecordStore(directory: directory.store, configuration: .init(fileSystem: fileSystem, engine: .files))
        // When it loads the pending area and then hands out a sequence
        #expect(try store.loadPending().records.count == 1)
        let opensAfterLoad = pendingOpens.withLock { $0 }
        // Then the sequence is above every stored one, and the pending record was read once
        #expect(store.nextEnqueueSequence() == 151)
        #expect(opensAfterLoad == 1)
        #expect(pendingOpens.withLock { $0 } == 1)
    }

    @Test(.serialized, arguments: [mode_t(0), 0o022])
    func directoriesAre0700AndFilesAre0600WhateverTheUmask(umaskValue: mode_t) throws {
        // Given a permissive umask
        let previous = umask(umaskValue)
        defer { umask(previous) }
        let directory = try TemporaryDirectory()
        // When a store is created and a record written
        let store = try RecordStore(directory: directory.store, configuration: .files)
        let record = try makeRecord()
        try store.add(record)
        // Then directories are 0700 and files 0600
        func permissions(_ path: String) throws -> Int {
            (try FileManager.default.attributesOfItem(atPath: path)[.posixPermissions] as? Int) ?? -1
        }
        for area in ["", "pending", "failed", "quarantine"] {
            #expect(try permissions(directory.path(area)) == 0o700, "\(area)")
        }
        #expect(try permissions(directory.path("pending", StoreLayout.fileName(ofRecord: record.id))) == 0o600)
        #expect(try permissions(directory.path("store.lock")) == 0o600)
    }

    @Test func aSecondReadWriteOpenThrowsLockedUntilTheFirstCloses() throws {
        let directory = try TemporaryDirectory()
        // Given an open store
        let first = try RecordStore(directory: directory.store, configuration: .files)
        // When the same directory is opened again in this process
        let error = #expect(throws: PersistenceError.self) { try RecordStore(directory: directory.store, configuration: .files) }
        // Then it is refused with a message that says what to do
        #expect(error?.code == .locked)
        #expect(error?.message.contains("read-only") == true)
        // And a read-only open works while it is locked, and sees the records
        try first.add(try makeRecord())
        let inspector = try RecordStore(directory: directory.store, access: .readOnly, configuration: .files)
        #expect(try inspector.loadPending().records.count == 1)
        #expect(throws: PersistenceError.self) { try inspector.add(try makeRecord(index: 2)) }
        // When the first closes, opening works
        first.close()
        #expect(throws: PersistenceError.self) { try first.add(try makeRecord(index: 3)) }
        _ = try RecordStore(directory: directory.store, configuration: .files)
    }

    @Test func aReadOnlyStoreReportsBadEntriesWithoutMovingThem() throws {
        let directory = try TemporaryDirectory()
        try RecordStore(directory: directory.store, configuration: .files).close()
        let badName = StoreLayout.fileName(ofRecord: UUID().uuidString)
        try Data("garbage".utf8).write(to: URL(fileURLWithPath: directory.path("pending", badName)))
        let report = try RecordStore(directory: directory.store, access: .readOnly, configuration: .files).loadPending()
        #expect(report.skipped.map(\.name) == [badName])
        #expect(try directory.names(in: "pending") == [badName])
    }

    @Test func aReadOnlyOpenOfAMissingDirectoryThrowsDirectoryUnavailable() throws {
        let directory = try TemporaryDirectory()
        let error = #expect(throws: PersistenceError.self) {
            try RecordStore(directory: directory.store, access: .readOnly, configuration: .files)
        }
        #expect(error?.code == .directoryUnavailable)
        #expect(!FileManager.default.fileExists(atPath: directory.store.path))
    }

    @Test func aStoreDirectoryThatIsASymbolicLinkToADirectoryIsOpenedThroughIt() throws {
        // Given a store directory given as a symbolic link to a directory
        let directory = try TemporaryDirectory()
        let real = directory.url.appendingPathComponent("real", isDirectory: true)
        try FileManager.default.createDirectory(at: real, withIntermediateDirectories: false)
        try FileManager.default.createSymbolicLink(atPath: directory.store.path, withDestinationPath: real.path)

        // When a store is opened through the link and a record added
        let store = try RecordStore(directory: directory.store, configuration: .files)
        let record = try makeRecord(index: 1)
        try store.add(record)
        store.close()

        // Then the record is in the directory the link names, the link is left as it is, and
        // the store opens again through the link, read-write and read-only
        #expect(try FileManager.default.contentsOfDirectory(atPath: real.appendingPathComponent("pending").path)
            == [StoreLayout.fileName(ofRecord: record.id)])
        #expect(try FileManager.default.destinationOfSymbolicLink(atPath: directory.store.path) == real.path)
        #expect(try RecordStore(directory: directory.store, access: .readOnly, configuration: .files).loadPending().records.map(\.id) == [record.id])
        #expect(try ReadOnlyPersistentStore(directory: directory.store).pendingRecords().records.map(\.id.rawValue) == [record.id])
        #expect(try RecordStore(directory: directory.store, configuration: .files).loadPending().records.map(\.id) == [record.id])
    }

    @Test func aStoreDirectoryThatIsADanglingLinkOrALinkToAFileGivesAClearError() throws {
        let directory = try TemporaryDirectory()
        let missing = directory.url.appendingPathComponent("missing").path
        try FileManager.default.createSymbolicLink(atPath: directory.store.path, withDestinationPath: missing)
        let dangling = #expect(throws: PersistenceError.self) { try RecordStore(directory: directory.store, configuration: .files) }
        #expect(dangling?.code == .directoryUnavailable)
        #expect(dangling?.message.contains("symbolic link to \(missing), which does not exist") == true)
        #expect(!FileManager.default.fileExists(atPath: missing))   // nothing created behind the link

        let file = directory.url.appendingPathComponent("file").path
        #expect(FileManager.default.createFile(atPath: file, contents: Data("not a store".utf8)))
        try FileManager.default.removeItem(atPath: directory.store.path)
        try FileManager.default.createSymbolicLink(atPath: directory.store.path, withDestinationPath: file)
        let toFile = #expect(throws: PersistenceError.self) {
            try PersistentOperationQueue(directory: directory.store)
        }
        #expect(toFile?.code == .directoryUnavailable)
        #expect(toFile?.message.contains("symbolic link to \(file), which is not a directory") == true)
    }

    @Test func openingRemovesTemporaryFilesLeftByAnInterruptedWrite() throws {
        let directory = try TemporaryDirectory()
        try RecordStore(directory: directory.store, configuration: .files).close()
        let stale = directory.path("pending", ".\(UUID().uuidString).record.1234ABCD.tmp")
        try Data("half".utf8).write(to: URL(fileURLWithPath: stale))
        _ = try RecordStore(directory: directory.store, configuration: .files)
        #expect(try directory.names(in: "pending").isEmpty)
    }
}

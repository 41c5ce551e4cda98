import Foundation
import Testing
@testable import PersistentOperations

#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

@Suite("File-system faults")
struct FaultInjectionTests {
    /// A store over a fault injector, holding two durable records.
    struct Fixture {
        let directory: TemporaryDirectory
        let injector = FaultInjector()
        let store: RecordStore
        let earlier: [OperationRecord]

        init() throws {
            directory = try TemporaryDirectory()
            store = try RecordStore(
                directory: directory.store, configuration: .init(fileSystem: injector.fileSystem, engine: .files)
            )
            earlier = try [makeRecord(index: 1), makeRecord(index: 2)]
            for record in earlier { try store.add(record) }
        }

        /// The records on disk, read by an independent read-only store.
        func storedRecords() throws -> [OperationRecord] {
            try RecordStore(directory: directory.store, access: .readOnly, configuration: .files).loadPending().records
        }

        func hasTemporaryFiles() throws -> Bool {
            try directory.names(in: "pending").contains(where: StoreLayout.isTemporaryFileName)
        }
    }

    @Test(arguments: [("ENOSPC on write", ENOSPC), ("EIO on write", EIO)])
    func aFailedWriteThrowsAndLeavesEarlierRecordsAndNoPartialFile(label: String, code: Int32) throws {
        // Given a store with two records, and a disk that fails writes
        let fixture = try Fixture()
        fixture.injector.faults.withLock { $0.write = code }
        // When a record is added and another updated
        let added = try makeRecord(index: 3)
        let addError = #expect(throws: PersistenceError.self) { try fixture.store.add(added) }
        var changed = fixture.earlier[0]
        changed.numberOfRetries = 7
        let updateError = #expect(throws: PersistenceError.self) { try fixture.store.update(changed) }
        // Then both throw a clear error naming the cause and the file
        #expect(addError?.code == .writeFailed)
        #expect(updateError?.code == .writeFailed)
        #expect(addError?.description.contains(String(cString: strerror(code))) == true, "\(label)")
        #expect(addError?.fileURL?.lastPathComponent == StoreLayout.fileName(ofRecord: added.id))
        // And nothing stored before changed, and no partial file remains
        #expect(try fixture.storedRecords() == fixture.earlier)
        #expect(try !fixture.hasTemporaryFiles())
        // When the fault stops, the store works again
        fixture.injector.faults.withLock { $0.write = nil }
        try fixture.store.add(added)
        try fixture.store.update(changed)
        #expect(try fixture.storedRecords() == [changed, fixture.earlier[1], added])
    }

    @Test func shortWritesAreCompleted() throws {
        let fixture = try Fixture()
        fixture.injector.faults.withLock { $0.maximumWriteSize = 7 }
        let record = try makeRecord(index: 3)
        try fixture.store.add(record)
        #expect(try fixture.storedRecords().last == record)
    }

    @Test func anFsyncFailureKeepsThePreviousVersion() throws {
        // Given a disk whose fsync reports EIO
        let fixture = try Fixture()
        fixture.injector.faults.withLock { $0.synchronize = EIO }
        var changed = fixture.earlier[1]
        changed.attemptsInFlight = 1
        // When a record is updated
        let error = #expect(throws: PersistenceError.self) { try fixture.store.update(changed) }
        // Then the update throws and the old version is still there, whole
        #expect(error?.code == .writeFailed)
        #expect(error?.description.contains("fsync") == true)
        #expect(try fixture.storedRecords() == fixture.earlier)
        #expect(try !fixture.hasTemporaryFiles())
        fixture.injector.faults.withLock { $0.synchronize = nil }
        try fixture.store.update(changed)
        #expect(try fixture.storedRecords() == [fixture.earlier[0], changed])
    }

    @Test func aDirectorySyncFailureTakesTheAddedRecordBack() throws {
        // Given a disk whose directory sync reports EIO
        let fixture = try Fixture()
        fixture.injector.faults.withLock { $0.synchronizeDirectory = EIO }
        // When a record is added
        let record = try makeRecord(index: 3)
        let error = #expect(throws: PersistenceError.self) { try fixture.store.add(record) }
        // Then the add throws and the record is not left behind to run after a crash
        #expect(error?.code == .writeFailed)
        #expect(try fixture.storedRecords() == fixture.earlier)
        fixture.injector.faults.withLock { $0.synchronizeDirectory = nil }
        try fixture.store.add(record)
        #expect(try fixture.storedRecords().count == 3)
    }

    @Test func aReadOnlyFileSystemRefusesChangesAndLosesNothing() throws {
        // Given a file system that turned read-only (EROFS on every change)
        let fixture = try Fixture()
        fixture.injector.faults.withLock { $0.mutation = EROFS }
        // When records are added, removed and moved
        #expect(throws: PersistenceError.self) { try fixture.store.add(try makeRecord(index: 3)) }
        #expect(throws: PersistenceError.self) { try fixture.store.removePending(id: fixture.earlier[0].id) }
        #expect(throws: PersistenceError.self) { _ = try fixture.store.moveToFailed(fixture.earlier[1], reason: "x") }
        // Then everything stored is unchanged
        #expect(try fixture.storedRecords() == fixture.earlier)
        #expect(try !fixture.hasTemporaryFiles())
        // And once writable again, changes work
        fixture.injector.faults.withLock { $0.mutation = nil }
        try fixture.store.removePending(id: fixture.earlier[0].id)
        #expect(try fixture.storedRecords() == [fixture.earlier[1]])
    }

    @Test func aPendingDirectoryMovedAwayGivesDirectoryUnavailableUntilItIsBack() throws {
        // Given a store whose pending directory is moved away while it is open
        let fixture = try Fixture()
        let pending = fixture.directory.path("pending")
        let elsewhere = fixture.directory.url.appendingPathComponent("moved-pending").path
        try FileManager.default.moveItem(atPath: pending, toPath: elsewhere)
        // When a record is added
        let error = #expect(throws: PersistenceError.self) { try fixture.store.add(try makeRecord(index: 3)) }
        // Then the error says the directory is gone and what to do
        #expect(error?.code == .directoryUnavailable)
        #expect(error?.message.contains("reopen") == true)
        #expect(throws: PersistenceError.self) { try fixture.store.loadPending() }
        // When the directory is back, the earlier records are intact and the store works
        try FileManager.default.moveItem(atPath: elsewhere, toPath: pending)
        let record = try makeRecord(index: 3)
        try fixture.store.add(record)
        #expect(try fixture.store.loadPending().records == fixture.earlier + [record])
    }

    @Test func aDeletedPendingDirectoryIsRecreatedWhenTheStoreIsReopened() throws {
        let fixture = try Fixture()
        try FileManager.default.removeItem(atPath: fixture.directory.path("pending"))
        let error = #expect(throws: PersistenceError.self) { try fixture.store.add(try makeRecord(index: 3)) }
        #expect(error?.code == .directoryUnavailable)
        fixture.store.close()
        let reopened = try RecordStore(directory: fixture.directory.store, configuration: .files)
        try reopened.add(try makeRecord(index: 4))
        #expect(try reopened.loadPending().records.count == 1)
    }
}

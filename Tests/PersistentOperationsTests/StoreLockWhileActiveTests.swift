import Foundation
import Testing
@testable import PersistentOperations

/// `Configuration.releasesStoreLockWhenInactive`: a store in an App Group container holds no
/// file lock while the app is not active, and a queue that finds it taken when the app is
/// active again changes the store no more.
@Suite("Persistent queue: the store's lock only while the app is active", .timeLimit(.minutes(1)))
struct StoreLockWhileActiveTests {
    static func openQueue(_ directory: TemporaryDirectory, journal: String, logs: Locked<[String]>? = nil) throws -> PersistentOperationQueue {
        var configuration = PersistentOperationQueue.Configuration()
        configuration.releasesStoreLockWhenInactive = true
        if let logs {
            configuration.logHandler = RetryLogHandler(minimumLevel: .error) { message in logs.withLock { $0.append(message.text) } }
        }
        let operationQueue = OperationQueue()
        operationQueue.isSuspended = true
        let queue = try PersistentOperationQueue(directory: directory.store, operationQueue: operationQueue, configuration: configuration)
        queue.register(PlainNote.self)
        _ = try queue.restore()
        return queue
    }

    /// Whether another open of the store's lock file would get the lock now.
    static func lockIsFree(_ directory: TemporaryDirectory) -> Bool {
        guard let lock = try? StoreLock(path: StoreLayout(directory: directory.store).lockPath, fileSystem: .system) else { return false }
        lock.release()
        return true
    }

    @Test func theLockIsLetGoWhileInactiveAndTakenAgainWhenActiveAndTheQueueWorksThroughout() throws {
        // Given a queue with the option, active: the lock is held
        let directory = try TemporaryDirectory()
        let journal = UUID().uuidString
        let queue = try Self.openQueue(directory, journal: journal)
        #expect(!Self.lockIsFree(directory))

        // When the app resigns active, an add is made in the background, and it is active again
        queue.applicationState = .inactive
        let free = Self.lockIsFree(directory)
        try queue.addOperation(PlainNote(payload: UploadPayload(name: "in the background", journal: journal)))
        queue.applicationState = .active

        // Then the lock was free while inactive, is held again, and the add was stored
        #expect(free)
        #expect(!Self.lockIsFree(directory))
        #expect(try RecordStore(directory: directory.store, access: .readOnly).loadPending().records.count == 1)
        queue.close()
        #expect(Self.lockIsFree(directory))
    }

    @Test func withoutTheOptionTheLockIsHeldWhileInactive() throws {
        let directory = try TemporaryDirectory()
        let queue = try PersistentOperationQueue(directory: directory.store, operationQueue: OperationQueue())
        queue.applicationState = .inactive
        #expect(!Self.lockIsFree(directory))
        queue.close()
    }

    @Test func aQueueThatFindsTheLockTakenWhenActiveChangesTheStoreNoMoreAndLosesNothing() throws {
        // Given a queue with one stored operation, inactive
        let directory = try TemporaryDirectory()
        let journal = UUID().uuidString
        let logs = Locked<[String]>([])
        let queue = try Self.openQueue(directory, journal: journal, logs: logs)
        try queue.addOperation(PlainNote(payload: UploadPayload(name: "kept", journal: journal)))
        queue.applicationState = .inactive

        // When another process takes the store's lock, and the app is active again
        let other = try StoreLock(path: StoreLayout(directory: directory.store).lockPath, fileSystem: .system)
        queue.applicationState = .active

        // Then adds throw `locked` with a clear message and store nothing, and the log says why
        let error = #expect(throws: PersistenceError.self) {
            try queue.addOperation(PlainNote(payload: UploadPayload(name: "refused", journal: journal)))
        }
        #expect(error?.code == .locked)
        #expect(error?.message.contains("while this one held no lock") == true)
        queue.hub.flush()
        #expect(logs.withLock { $0.contains { $0.contains("Another process opened the store") } })
        #expect(try RecordStore(directory: directory.store, access: .readOnly).loadPending().records.map(\.typeIdentifier) == [PlainNote.persistenceIdentifier])

        // And once the other process has let go, a new queue opens the store with what was acknowledged
        other.release()
        queue.close()
        let reopened = try Self.openQueue(directory, journal: journal)
        #expect(reopened.operations().count == 1)
        reopened.close()
    }
}

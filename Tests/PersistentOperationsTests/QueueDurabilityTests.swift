import Foundation
import Testing
@testable import PersistentOperations

/// `Configuration.durability` and `strictRemovals`, counted through the store's flushes.
@Suite("Persistent queue: durability settings", .timeLimit(.minutes(1)))
struct QueueDurabilityTests {
    /// A queue over a file system that counts flushes (`fdatasync` and `fsync`).
    static func queue(
        _ directory: TemporaryDirectory, durability: PersistentOperationQueue.Durability, strictRemovals: Bool = false,
        flushes: Locked<Int>
    ) throws -> PersistentOperationQueue {
        var configuration = PersistentOperationQueue.Configuration(durability: durability, strictRemovals: strictRemovals)
        configuration.fileSystem = .countingFlushes(flushes, fileSyncs: true)
        let operationQueue = OperationQueue()
        operationQueue.maxConcurrentOperationCount = 1   // removals one at a time: none shares a flush
        operationQueue.isSuspended = true
        let queue = try PersistentOperationQueue(directory: directory.store, operationQueue: operationQueue, configuration: configuration)
        queue.register(ScriptedUpload.self)
        return queue
    }

    @Test func theProcessCrashLevelNeverFlushesAndKeepsEveryAddAcrossAReopen() async throws {
        // Given a queue at the process-crash level
        let directory = try TemporaryDirectory()
        let flushes = Locked(0)
        let queue = try Self.queue(directory, durability: .processCrash, flushes: flushes)
        flushes.withLock { $0 = 0 }
        // When 50 operations are added, one at a time and as a batch
        for index in 0..<25 {
            try queue.addOperation(ScriptedUpload(payload: UploadPayload(name: "single\(index)", journal: "j")))
        }
        try queue.addOperations((0..<25).map { ScriptedUpload(payload: UploadPayload(name: "batch\($0)", journal: "j")) })
        // Then nothing was flushed
        #expect(flushes.withLock { $0 } == 0)
        queue.close()
        // And a new launch finds all 50
        let reopened = try Self.queue(directory, durability: .processCrash, flushes: flushes)
        #expect(try reopened.restore().restored.count == 50)
        reopened.close()
    }

    @Test func theDefaultFlushesEachAddAndStrictRemovalsFlushEachRemoval() async throws {
        // Given a queue at the default level, and one with strict removals
        for strict in [false, true] {
            let directory = try TemporaryDirectory()
            let flushes = Locked(0)
            let queue = try Self.queue(directory, durability: .flushed, strictRemovals: strict, flushes: flushes)
            let journal = UUID().uuidString
            flushes.withLock { $0 = 0 }
            // When 10 operations are added one at a time
            for index in 0..<10 {
                try queue.addOperation(ScriptedUpload(payload: UploadPayload(name: "u\(index)", journal: journal)))
            }
            // Then each add was flushed before it returned
            #expect(flushes.withLock { $0 } == 10)
            // When they run and succeed
            flushes.withLock { $0 = 0 }
            queue.operationQueue.isSuspended = false
            await queue.allOperationsFinished()
            // Then strict removals flushed each removal; by default removals ride along (at
            // most one flush after the last, within the flush delay)
            try await Task.sleep(for: .milliseconds(200))
            let removalFlushes = flushes.withLock { $0 }
            if strict {
                #expect(removalFlushes >= 10, "strict: \(removalFlushes)")
            } else {
                #expect(removalFlushes < 10, "default: \(removalFlushes)")
            }
            #expect(Journal.lines(journal).count == 10)
            queue.close()
        }
    }
}

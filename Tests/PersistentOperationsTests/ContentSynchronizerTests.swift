import Foundation
import Testing
@testable import PersistentOperations

/// Group commit of file contents: a lone writer syncs its own file; writers that arrive during
/// a sync share one file-system sync, and each still syncs (and checks) its own file.
@Suite("Content synchronizer", .timeLimit(.minutes(1)))
struct ContentSynchronizerTests {
    /// A fake file system that records the syncs and can hold the first file sync until told.
    final class Recorder: Sendable {
        struct Calls: Sendable {
            var fileSyncs: [Int32] = []
            var fileSystemSyncs: [Int32] = []
        }

        let calls = Locked(Calls())
        let gate = DispatchSemaphore(value: 0)
        let holdsDescriptor: Int32?
        let failingDescriptors: Set<Int32>
        let fileSystemSyncFails: Bool

        init(holding descriptor: Int32? = nil, failing: Set<Int32> = [], fileSystemSyncFails: Bool = false) {
            holdsDescriptor = descriptor
            failingDescriptors = failing
            self.fileSystemSyncFails = fileSystemSyncFails
        }

        func fileSystem(withFileSystemSync: Bool = true) -> FileSystem {
            var fileSystem = FileSystem.system
            fileSystem.synchronize = { [self] descriptor in
                if descriptor == holdsDescriptor { gate.wait() }
                calls.withLock { $0.fileSyncs.append(descriptor) }
                if failingDescriptors.contains(descriptor) { throw SystemCallError("fsync", code: EIO) }
            }
            fileSystem.synchronizeFileSystem = nil
            if withFileSystemSync {
                fileSystem.synchronizeFileSystem = { [self] descriptor in
                    calls.withLock { $0.fileSystemSyncs.append(descriptor) }
                    if fileSystemSyncFails { throw SystemCallError("syncfs", code: EIO) }
                }
            }
            return fileSystem
        }
    }

    typealias Outcomes = [Int32: Result<Void, any Error>]

    /// Starts `synchronize` for each descriptor on a thread of its own; `wait()` on the
    /// returned group, then read the outcomes.
    func startWriters(_ synchronizer: ContentSynchronizer, _ descriptors: [Int32]) -> (DispatchGroup, Locked<Outcomes>) {
        let outcomes = Locked(Outcomes())
        let group = DispatchGroup()
        for descriptor in descriptors {
            group.enter()
            Thread.detachNewThread {
                let outcome = Result { try synchronizer.synchronize(descriptor) }
                outcomes.withLock { $0[descriptor] = outcome }
                group.leave()
            }
        }
        return (group, outcomes)
    }

    /// Runs a first writer whose sync is held until `others` have all arrived, then releases
    /// it; returns every writer's outcome.
    func runWithHeldFirstWriter(_ synchronizer: ContentSynchronizer, _ recorder: Recorder, others: [Int32]) -> Outcomes {
        let (first, firstOutcome) = startWriters(synchronizer, [1])
        waitForCalls(synchronizer, 1)
        let (rest, outcomes) = startWriters(synchronizer, others)
        waitForCalls(synchronizer, 1 + UInt64(others.count))
        recorder.gate.signal()
        first.wait()
        rest.wait()
        return outcomes.withLock { $0 }.merging(firstOutcome.withLock { $0 }) { $1 }
    }

    /// Waits (briefly polling) until `count` calls have arrived.
    func waitForCalls(_ synchronizer: ContentSynchronizer, _ count: UInt64) {
        let deadline = Date().addingTimeInterval(10)
        while synchronizer.callsArrived < count, Date() < deadline { usleep(1_000) }
    }

    @Test func aLoneWriterSyncsItsOwnFileAndNothingElse() throws {
        // Given a synchronizer over a file system with syncfs
        let recorder = Recorder()
        let synchronizer = ContentSynchronizer(fileSystem: recorder.fileSystem())

        // When one writer syncs, then another after it
        try synchronizer.synchronize(10)
        try synchronizer.synchronize(11)

        // Then each synced its own file, and the whole file system was never synced
        let calls = recorder.calls.withLock { $0 }
        #expect(calls.fileSyncs == [10, 11])
        #expect(calls.fileSystemSyncs.isEmpty)
    }

    @Test func writersArrivingDuringASyncShareOneFileSystemSyncAndEachSyncsItsOwnFile() async throws {
        // Given a first writer whose file sync is held
        let recorder = Recorder(holding: 1)
        let synchronizer = ContentSynchronizer(fileSystem: recorder.fileSystem())
        // When four more writers arrive while it syncs, and then it finishes
        let results = try await onDedicatedThread { [self] in runWithHeldFirstWriter(synchronizer, recorder, others: [2, 3, 4, 5]) }

        // Then the four shared a single file-system sync, and every file was synced on its own
        let calls = recorder.calls.withLock { $0 }
        #expect(calls.fileSystemSyncs.count == 1)
        #expect(calls.fileSyncs.sorted() == [1, 2, 3, 4, 5])
        #expect(results.count == 5)
        #expect(results.values.allSatisfy { (try? $0.get()) != nil })
    }

    @Test func aFailedFileSystemSyncIsRedoneByEachFileAndOnlyAFileThatCannotBeSyncedFails() async throws {
        // Given a file system whose syncfs fails and where file 3 cannot be synced
        let recorder = Recorder(holding: 1, failing: [3], fileSystemSyncFails: true)
        let synchronizer = ContentSynchronizer(fileSystem: recorder.fileSystem())
        // When three writers arrive during the first one's sync
        let results = try await onDedicatedThread { [self] in runWithHeldFirstWriter(synchronizer, recorder, others: [2, 3, 4]) }

        // Then the writers whose own sync worked succeed, and the one whose file failed reports it
        #expect(recorder.calls.withLock { $0.fileSystemSyncs.count } == 1)
        #expect((try? results[2]?.get()) != nil)
        #expect((try? results[4]?.get()) != nil)
        let failure = try #require(results[3])
        #expect(throws: SystemCallError.self) { try failure.get() }
        #expect((try? results[1]?.get()) != nil)
        #expect(recorder.calls.withLock { $0.fileSyncs.sorted() } == [1, 2, 3, 4])
    }

    @Test func withoutAFileSystemSyncEveryWriterSyncsItsOwnFileAtOnce() async throws {
        // Given a file system without syncfs (as on Apple platforms)
        let recorder = Recorder()
        let synchronizer = ContentSynchronizer(fileSystem: recorder.fileSystem(withFileSystemSync: false))

        // When eight writers sync at once
        let results = try await onDedicatedThread { [self] () -> Outcomes in
            let (group, outcomes) = startWriters(synchronizer, Array(1...8))
            group.wait()
            return outcomes.withLock { $0 }
        }

        // Then each synced its own file and all succeeded
        #expect(recorder.calls.withLock { $0.fileSyncs.sorted() } == Array(1...8))
        #expect(results.values.allSatisfy { (try? $0.get()) != nil })
    }
}

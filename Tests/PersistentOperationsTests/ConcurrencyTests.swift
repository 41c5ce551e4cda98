import Foundation
import Testing
@testable import PersistentOperations

/// Runs `body` on `count` dedicated threads at once and returns when all have finished.
///
/// Unlike `DispatchQueue.concurrentPerform`, which uses one thread per core, this gives true
/// contention on a machine with few cores. From async code, use the `async` variant: this one
/// blocks its thread until the work is done.
@available(*, noasync, message: "blocks its thread until the work is done: use the async variant")
func runOnThreads(_ count: Int, _ body: @escaping @Sendable (Int) -> Void) {
    let group = DispatchGroup()
    for index in 0..<count {
        group.enter()
        Thread {
            body(index)
            group.leave()
        }.start()
    }
    group.wait()
}

/// Runs `body` on `count` dedicated threads at once and suspends until all have finished;
/// the wait, too, holds a thread of its own rather than one of the few the tests share.
func runOnThreads(_ count: Int, _ body: @escaping @Sendable (Int) -> Void) async {
    await onDedicatedThread { runOnThreads(count, body) }
}

@Suite("Concurrency")
struct ConcurrencyTests {
    @Test func concurrentWritersShareDirectorySyncsAndEachWriteIsDurableWhenItReturns() async throws {
        // Given a store whose directory sync takes a millisecond, as on a slow disk
        let directory = try TemporaryDirectory()
        let injector = FaultInjector()
        injector.faults.withLock { $0.directorySyncLatency = 1_000 }
        let store = try RecordStore(directory: directory.store, configuration: .init(fileSystem: injector.fileSystem, engine: .files))
        let pendingPath = StoreLayout(directory: directory.store).path(of: .pending)
        injector.counters.withLock { $0 = FaultInjector.Counters() }
        let threads = 8
        let writesPerThread = 25
        // (the first directory sync is held until every thread has renamed its first record
        // into place, so that writers surely arrive while a sync runs, however loaded the
        // machine; a store that syncs once per write under a lock never lets them, and the
        // hold gives up after 10 s)
        let firstSyncHeld = Locked(false)
        injector.faults.withLock { faults in
            faults.duringDirectorySync = { [weak injector] in
                guard let injector, !firstSyncHeld.withLock({ held in defer { held = true }; return held }) else { return }
                let deadline = Date().addingTimeInterval(10)
                while injector.counters.withLock({ $0.renamedAt.count }) < threads, Date() < deadline { usleep(1_000) }
            }
        }
        let problems = Locked<[String]>([])
        // When 8 threads add records at the same time
        await runOnThreads(threads) { thread in
            for index in 0..<writesPerThread {
                do {
                    let record = try makeRecord(index: thread * 1_000 + index)
                    try store.add(record)
                    // Then, as soon as the add returns, the file is there and decodes...
                    let path = pendingPath + "/" + StoreLayout.fileName(ofRecord: record.id)
                    let data = try Data(contentsOf: URL(fileURLWithPath: path))
                    if try RecordFormat.decode(data) != record { problems.withLock { $0.append("\(path) differs") } }
                    // ...and a directory sync that started after its rename has completed
                    let covered = injector.counters.withLock { counters in
                        guard let renamedAt = counters.renamedAt[path] else { return false }
                        return counters.completedSyncs.contains { $0.path == pendingPath && $0.startedAt > renamedAt }
                    }
                    if !covered { problems.withLock { $0.append("\(path) returned before a covering directory sync") } }
                } catch {
                    problems.withLock { $0.append("\(error)") }
                }
            }
        }
        let writes = threads * writesPerThread
        let syncs = injector.counters.withLock { $0.directorySyncs }
        #expect(problems.withLock { $0 }.isEmpty)
        #expect(try store.loadPending().records.count == writes)
        // And fewer directory syncs ran than there were writes
        #expect(syncs < writes, "\(syncs) directory syncs for \(writes) writes")
    }

    @Test func manyThreadsAddingUpdatingRemovingAndFailingEndWithExactCounts() async throws {
        // Given one store shared by 8 threads
        let directory = try TemporaryDirectory()
        let store = try RecordStore(directory: directory.store, configuration: .files)
        let threads = 8
        let recordsPerThread = 24
        let problems = Locked<[String]>([])
        let expectedPending = Locked<[String: OperationRecord]>([:])
        let expectedFailed = Locked<Set<String>>([])
        // When each thread adds its records, updates each twice, removes a third and fails a sixth
        await runOnThreads(threads) { thread in
            do {
                for index in 0..<recordsPerThread {
                    var record = try makeRecord(index: index, sequence: store.nextEnqueueSequence())
                    try store.add(record)
                    for retry in 1...2 {
                        record.numberOfRetries = retry
                        record.nextAttemptAt = Date(timeIntervalSinceReferenceDate: Double(thread * 100 + retry) + 0.5)
                        try store.update(record)
                    }
                    switch index % 6 {
                    case 0, 3:
                        try store.removePending(id: record.id)
                    case 1:
                        _ = try store.moveToFailed(record, reason: "thread \(thread)")
                        expectedFailed.withLock { _ = $0.insert(record.id) }
                    default:
                        expectedPending.withLock { $0[record.id] = record }
                    }
                }
            } catch {
                problems.withLock { $0.append("thread \(thread): \(error)") }
            }
        }
        #expect(problems.withLock { $0 }.isEmpty)
        // Then exactly the expected records are pending, at their last version, and failed
        let pending = try store.loadPending()
        let expected = expectedPending.withLock { $0 }
        #expect(pending.records.count == threads * recordsPerThread / 2)
        #expect(Dictionary(uniqueKeysWithValues: pending.records.map { ($0.id, $0) }) == expected)
        #expect(Set(try store.loadFailed().records.map(\.id)) == expectedFailed.withLock { $0 })
        #expect(expectedFailed.withLock { $0.count } == threads * recordsPerThread / 6)
        // And the enqueue sequences handed out were all different
        #expect(Set(pending.records.map(\.enqueueSequence)).count == pending.records.count)
        #expect(try directory.names(in: "quarantine").isEmpty)
    }
}

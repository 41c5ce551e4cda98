import Foundation
import Testing
@testable import PersistentOperations

/// S6 of the journal store's targets: flushes per operation lifecycle (add → success → removal),
/// counted through the file-system seam (`fdatasync` and `fsync` alike).
@Suite("Flushes per operation lifecycle", .serialized, .timeLimit(.minutes(2)))
struct FlushCountTests {
    /// A queue over a file system that counts flushes; `width` attempts run at once.
    ///
    /// The writer's flush delay is an hour here, not 50 ms (a run slowed by Thread Sanitizer can
    /// outlast seconds): a removal then always rides along with the next add's flush (or the
    /// close's), as it does in an app whose next add comes within 50 ms. With the default, a removal whose next add comes later (under Thread
    /// Sanitizer, one at a time) gets a flush of its own, and the counts would measure the
    /// machine's speed.
    static func queue(_ directory: TemporaryDirectory, flushes: Locked<Int>, width: Int = 1) throws -> PersistentOperationQueue {
        var configuration = PersistentOperationQueue.Configuration()
        configuration.fileSystem = .countingFlushes(flushes, fileSyncs: true, directorySyncs: true)
        configuration.storeFlushDelay = 3_600
        let operationQueue = OperationQueue()
        operationQueue.maxConcurrentOperationCount = width
        let queue = try PersistentOperationQueue(directory: directory.store, operationQueue: operationQueue, configuration: configuration)
        queue.register(ScriptedUpload.self)
        return queue
    }

    /// Runs `lifecycles` operations through `add` and returns the flushes per lifecycle, once
    /// every removal has been flushed too (the queue closed).
    static func flushesPerLifecycle(
        _ lifecycles: Int, width: Int = 1, add: @escaping @Sendable (PersistentOperationQueue, String) throws -> Void
    ) async throws -> Double {
        let directory = try TemporaryDirectory()
        let flushes = Locked(0)
        let queue = try Self.queue(directory, flushes: flushes, width: width)
        flushes.withLock { $0 = 0 }   // (the open's)
        let journal = UUID().uuidString
        try await onDedicatedThread { try add(queue, journal) }
        await queue.allOperationsFinished()
        queue.close()
        #expect(Journal.lines(journal).count == lifecycles)
        return Double(flushes.withLock { $0 }) / Double(lifecycles)
    }

    /// Runs `produce` on 8 threads at once (told which one, 0 to 7), and throws when it threw
    /// on any of them.
    static func onEightProducers(_ produce: @escaping @Sendable (_ producer: Int) throws -> Void) throws {
        let failures = Locked(0)
        let group = DispatchGroup()
        for producer in 0..<8 {
            group.enter()
            Thread.detachNewThread {
                if (try? produce(producer)) == nil { failures.withLock { $0 += 1 } }
                group.leave()
            }
        }
        group.wait()
        guard failures.withLock({ $0 }) == 0 else { throw ChildAppError("some adds failed on \(failures.withLock { $0 }) of 8 producers") }
    }

    @Test func oneAtATimeALifecycleCostsOneFlush() async throws {
        // When 200 operations are added one after the other, each run to completion first
        let perLifecycle = try await Self.flushesPerLifecycle(200) { queue, journal in
            for index in 0..<200 {
                let upload = ScriptedUpload(payload: UploadPayload(name: "u\(index)", journal: journal))
                try queue.addOperation(upload)
                upload.waitUntilFinished()
            }
        }
        // Then each lifecycle cost at most about one flush: its add's (the removal rides along)
        print("flushes per lifecycle, one at a time: \(String(format: "%.3f", perLifecycle))")
        #expect(perLifecycle <= 1.1)
    }

    @Test func inBatchesOfAHundredALifecycleCostsAFewHundredthsOfAFlush() async throws {
        // When 1,000 operations are added in batches of 100
        let perLifecycle = try await Self.flushesPerLifecycle(1_000, width: 4) { queue, journal in
            for batch in 0..<10 {
                try queue.addOperations((0..<100).map { ScriptedUpload(payload: UploadPayload(name: "b\(batch)-\($0)", journal: journal)) })
            }
        }
        // Then a lifecycle cost at most 0.05 flushes: one per batch, and removals sharing flushes
        print("flushes per lifecycle, batches of 100: \(String(format: "%.3f", perLifecycle))")
        #expect(perLifecycle <= 0.05)
    }

    @Test func eightProducersAddingBatchesOfAHundredCostAFewHundredthsOfAFlushALifecycle() async throws {
        // When 8 threads each add two batches of 100 at once, on a queue running 4 at once
        let perLifecycle = try await Self.flushesPerLifecycle(1_600, width: 4) { queue, journal in
            try Self.onEightProducers { producer in
                for batch in 0..<2 {
                    try queue.addOperations((0..<100).map { ScriptedUpload(payload: UploadPayload(name: "p\(producer)-b\(batch)-\($0)", journal: journal)) })
                }
            }
        }
        // Then a lifecycle cost at most 0.05 flushes: a batch's one flush (fewer where
        // batches of different producers share one), and removals sharing flushes
        print("flushes per lifecycle, 8 producers in batches of 100: \(String(format: "%.3f", perLifecycle))")
        #expect(perLifecycle <= 0.05)
    }

    @Test func eightProducersShareFlushes() async throws {
        // When 8 threads each add 50 operations, one at a time, on a queue running 4 at once
        let perLifecycle = try await Self.flushesPerLifecycle(400, width: 4) { queue, journal in
            try Self.onEightProducers { producer in
                for index in 0..<50 {
                    try queue.addOperation(ScriptedUpload(payload: UploadPayload(name: "p\(producer)-\(index)", journal: journal)))
                }
            }
        }
        // Then concurrent adds shared flushes: fewer than one a lifecycle (the target, 0.05,
        // would need more than 8 adds to meet in each flush; the figure is printed)
        print("flushes per lifecycle, 8 producers: \(String(format: "%.3f", perLifecycle))")
        #expect(perLifecycle < 1)
    }
}

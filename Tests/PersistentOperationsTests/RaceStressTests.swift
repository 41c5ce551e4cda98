import CrashHarness
import Foundation
import Testing
@testable import PersistentOperations

#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// Every public entry point of the queue at once, from many threads; run under Thread
/// Sanitizer in CI (`swift test --sanitize=thread --filter RaceStressTests`).
@Suite("Race stress", .timeLimit(.minutes(3)))
struct RaceStressTests {
    /// What one queue's adds came to, checked against its events and its store.
    final class Ledger: Sendable {
        let acknowledged = Locked<[PersistentOperationID: String]>([:])
        let refusedNames = Locked<Set<String>>([])
        let events = Locked<[PersistentOperationEvent]>([])

        /// The last terminal event of each operation, and how often each kind came.
        func outcomes() -> (last: [PersistentOperationID: String], succeededTwice: [PersistentOperationID]) {
            var last: [PersistentOperationID: String] = [:]
            var succeeded: [PersistentOperationID: Int] = [:]
            for event in events.withLock({ $0 }) {
                switch event {
                case .succeeded(let id): last[id] = "succeeded"; succeeded[id, default: 0] += 1
                case .cancelled(let id): last[id] = "cancelled"
                case .failed(let id, _): last[id] = "failed"
                default: break
                }
            }
            return (last, succeeded.filter { $0.value > 1 }.map(\.key))
        }
    }

    static func openQueue(_ directory: URL, ledger: Ledger) throws -> PersistentOperationQueue {
        let operationQueue = OperationQueue()
        operationQueue.maxConcurrentOperationCount = 4
        let queue = try PersistentOperationQueue(directory: directory, operationQueue: operationQueue, configuration: .init())
        queue.eventHandler = { event in ledger.events.withLock { $0.append(event) } }
        queue.register(ScriptedUpload.self)
        return queue
    }

    /// An upload of one of five shapes: succeeds, retries (counted or not), fails once
    /// (then succeeds if retried from the failed area), or hangs until cancelled.
    static func upload(_ name: String, journal: String, shape: Int) -> (ScriptedUpload, Set<String>) {
        let steps: [[UploadStep]] = [[.succeed], [.retry, .succeed], [.retryUncounted, .succeed], [.fail, .succeed], [.hang]]
        let operation = ScriptedUpload(payload: UploadPayload(name: name, journal: journal, steps: steps[shape], retryDelay: 0.005))
        return (operation, shape == 4 ? ["hang"] : [])
    }

    @Test func addsCancelsSuspendsRetriesAndReopensFromManyThreadsEndWithExactAccounting() async throws {
        // Given queue A, and queue B whose directory one thread keeps closing, reopening and restoring
        let directoryA = try TemporaryDirectory()
        let directoryB = try TemporaryDirectory()
        let journal = UUID().uuidString
        let ledgerA = Ledger()
        let ledgerB = Ledger()
        let queueA = try Self.openQueue(directoryA.store, ledger: ledgerA)
        let queueB = Locked(try Self.openQueue(directoryB.store, ledger: ledgerB))
        let reopens = Locked(0)
        let threads = 8
        let iterations = 60

        // When 8 threads add, cancel by id and by tag, suspend and resume, retry all failed,
        // query, and add to B while B is closed, reopened and restored under them
        let finished = try await onDedicatedThread { () -> Bool in
            let done = DispatchSemaphore(value: 0)
            Thread.detachNewThread {
                runOnThreads(threads) { thread in
                    var random = SeededGenerator(seed: UInt64(thread) &* 0x9E37 &+ 1)
                    var mine: [PersistentOperationID] = []
                    for iteration in 0..<iterations {
                        let name = "t\(thread)-\(iteration)"
                        let group = "g\(Int.random(in: 0..<12, using: &random))"
                        switch Int.random(in: 0..<12, using: &random) {
                        case 0..<4:
                            let (operation, tags) = Self.upload(name, journal: journal, shape: Int.random(in: 0..<5, using: &random))
                            if let result = try? queueA.addOperation(operation, options: EnqueueOptions(tags: tags.union([group]))) {
                                ledgerA.acknowledged.withLock { $0[result.id] = name }
                                mine.append(result.id)
                            }
                        case 4:
                            if let id = mine.randomElement(using: &random) { _ = queueA.cancelOperation(withID: id) }
                        case 5:
                            _ = queueA.cancelOperations(taggedWith: group)
                        case 6:
                            queueA.isSuspended = true
                            usleep(UInt32.random(in: 0...500, using: &random))
                            queueA.isSuspended = false
                        case 7:
                            _ = try? queueA.retryAllFailedOperations()
                        case 8:
                            _ = try? queueA.counts()
                            _ = queueA.operations(taggedWith: group)
                            _ = try? queueA.failedOperations()
                        case 9 where thread == 0:
                            // Close B and reopen it; its pending records are restored by the new instance.
                            queueB.withLock { queue in
                                queue.close()
                                if let reopened = try? Self.openQueue(directoryB.store, ledger: ledgerB) {
                                    _ = try? reopened.restore()
                                    queue = reopened
                                }
                            }
                            reopens.withLock { $0 += 1 }
                        default:
                            let (operation, tags) = Self.upload("B-" + name, journal: journal, shape: Int.random(in: 0..<4, using: &random))
                            let queue = queueB.withLock { $0 }
                            do {
                                let result = try queue.addOperation(operation, options: EnqueueOptions(tags: tags))
                                ledgerB.acknowledged.withLock { $0[result.id] = "B-" + name }
                            } catch {
                                ledgerB.refusedNames.withLock { _ = $0.insert("B-" + name) }
                            }
                            if Int.random(in: 0..<3, using: &random) == 0 {
                                _ = queue.cancelOperations(taggedWith: "hang")
                                _ = try? queue.retryAllFailedOperations()
                            }
                        }
                    }
                }
                done.signal()
            }
            // A watchdog: the threads must be done within 60 s.
            return done.wait(timeout: .now() + 60) == .success
        }
        #expect(finished, "the threads did not finish within 60 s (deadlock?)")
        try #require(finished)

        // Then, once the hanging uploads are cancelled, both queues drain within the watchdog's limit
        queueA.isSuspended = false
        _ = queueA.cancelOperations(taggedWith: "hang")
        queueB.withLock { $0.close() }
        let reopenedB = try Self.openQueue(directoryB.store, ledger: ledgerB)
        _ = try reopenedB.restore()
        let drained = try await onDedicatedThread { () -> Bool in
            let done = DispatchSemaphore(value: 0)
            Thread.detachNewThread {
                queueA.waitUntilAllOperationsAreFinished()
                reopenedB.waitUntilAllOperationsAreFinished()
                done.signal()
            }
            return done.wait(timeout: .now() + 60) == .success
        }
        #expect(drained, "the queues did not drain within 60 s: A \(String(describing: try? queueA.counts())), B \(String(describing: try? reopenedB.counts()))")
        try #require(drained)
        queueA.hub.flush()
        reopenedB.hub.flush()

        // And every acknowledged add ended succeeded, failed (and sits in the failed area) or
        // cancelled; nothing is pending; a refused add never ran
        for (label, ledger, directory) in [("A", ledgerA, directoryA), ("B", ledgerB, directoryB)] {
            let store = try RecordStore(directory: directory.store, access: .readOnly)
            let stillPending = try store.loadPending().records.map { record in
                (ledger.acknowledged.withLock { $0[PersistentOperationID(record: record.id)] } ?? record.id) + " (\(record.numberOfAttempts) attempts)"
            }
            #expect(stillPending.isEmpty, "\(label): records still pending: \(stillPending)")
            let failedIDs = Set(try store.loadFailed().records.map { PersistentOperationID(record: $0.id) })
            let acknowledged = ledger.acknowledged.withLock { $0 }
            let (last, succeededTwice) = ledger.outcomes()
            var tally: [String: Int] = [:]
            for (id, name) in acknowledged {
                let outcome = last[id] ?? "none"
                tally[outcome, default: 0] += 1
                #expect(outcome != "none", "\(label): \(name) never ended")
                #expect((outcome == "failed") == failedIDs.contains(id), "\(label): \(name) ended \(outcome), in the failed area: \(failedIDs.contains(id))")
            }
            #expect(failedIDs.isSubset(of: Set(acknowledged.keys)))
            if label == "A" {
                // A was never closed: no operation succeeded twice.
                #expect(succeededTwice.isEmpty, "A: succeeded twice: \(succeededTwice)")
            }
            let ran = Set(Journal.lines(journal).map { String($0.prefix { $0 != "#" }) })
            let refusedThatRan = ledger.refusedNames.withLock { $0 }.intersection(ran)
            #expect(refusedThatRan.isEmpty, "\(label): refused adds ran: \(refusedThatRan)")
            print("race stress \(label): \(acknowledged.count) acknowledged adds: \(tally.sorted { $0.key < $1.key }.map { "\($0.value) \($0.key)" }.joined(separator: ", ")); \(ledger.refusedNames.withLock { $0.count }) adds refused while closed; \(label == "B" ? "\(reopens.withLock { $0 }) reopens" : "never closed")")
        }
    }
}

import CrashHarness
import Foundation
import Testing
@testable import PersistentOperations

/// When each attempt of the operations of a test started (monotonic nanoseconds), by tag.
final class StartLog: Sendable {
    private let state = Locked<[(tags: [String], at: UInt64, label: String)]>([])

    func record(_ tags: [String], label: String) {
        let now = DispatchTime.now().uptimeNanoseconds
        state.withLock { $0.append((tags, now, label)) }
    }

    /// The start times of the attempts of operations tagged `tag`, in order.
    func starts(of tag: String) -> [UInt64] {
        state.withLock { $0.filter { $0.tags.contains(tag) }.map(\.at) }
    }

    /// The labels of the attempts of operations tagged `tag`, in start order.
    func labels(of tag: String) -> [String] {
        state.withLock { $0.filter { $0.tags.contains(tag) }.map(\.label) }
    }

    /// The logs of the running tests, by name (an operation finds its own by its payload).
    static let byName = Locked<[String: StartLog]>([:])
}

/// An attempt that logs its start and ends at once, retrying `retries` times (at once) before
/// it succeeds.
final class RateWork: RetryingOperation, PersistentOperation, @unchecked Sendable {
    // @unchecked: the payload never changes; the rest belongs to RetryingOperation.
    struct Payload: Codable, Sendable {
        var log: String
        var tags: [String]
        var label: String
        var retries = 0
    }

    struct Busy: Error {}

    static let persistenceIdentifier = "test.rate-work"
    let payload: Payload

    init(payload: Payload) {
        self.payload = payload
        super.init()
        retryPolicy = .constant(0, retryLimit: .maximum(payload.retries + 1))
    }

    override var isAsynchronous: Bool { true }

    override func startBaseOperation(isRetry: Bool) {
        StartLog.byName.withLock { $0[payload.log] }?.record(payload.tags, label: payload.label)
        if numberOfAttempts <= payload.retries {
            baseOperationEnded(withRetriableError: Busy())
        } else {
            baseOperationEnded()
        }
    }
}

@Suite("Persistent queue: start-rate limits by tag", .timeLimit(.minutes(1)))
struct StartRateLimitTests {
    /// A queue of `width` slots with `limits`, and a log of its attempts' starts.
    static func queue(width: Int, limits: [String: StartRateLimit], suspended: Bool = false) throws -> (PersistentOperationQueue, StartLog, String, TemporaryDirectory) {
        let directory = try TemporaryDirectory()
        let operationQueue = OperationQueue()
        operationQueue.maxConcurrentOperationCount = width
        operationQueue.isSuspended = suspended
        var configuration = PersistentOperationQueue.Configuration()
        configuration.startRateLimits = limits
        let queue = try PersistentOperationQueue(directory: directory.store, operationQueue: operationQueue, configuration: configuration)
        queue.register(RateWork.self)
        let name = UUID().uuidString
        let log = StartLog()
        StartLog.byName.withLock { $0[name] = log }
        return (queue, log, name, directory)
    }

    @Test func attemptsOfALimitedTagStartNoFasterThanItsRateAfterTheBurstInRunOrderRetriesIncluded() async throws {
        // Given an 8-slot queue where "api" starts 20 attempts a second, 2 at once
        let (queue, log, name, directory) = try Self.queue(width: 8, limits: ["api": StartRateLimit(startsPerSecond: 20, burst: 2)])
        defer { queue.close(); withExtendedLifetime(directory) {} }

        // When 8 operations tagged "api" are added at once, two of them retrying once
        let added = DispatchTime.now().uptimeNanoseconds
        let operations = (0..<8).map { RateWork(payload: .init(log: name, tags: ["api"], label: "\($0)", retries: $0 == 1 || $0 == 5 ? 1 : 0)) }
        try queue.addOperations(operations, options: EnqueueOptions(tags: ["api"]))
        await queue.allOperationsFinished()

        // Then all 10 attempts ran, the first attempts in the order added, and the last started
        // no sooner than the rate allows: 2 at once, then 8 more at 20 a second (0.4 s)
        let starts = log.starts(of: "api")
        #expect(starts.count == 10)
        #expect(log.labels(of: "api").filter { $0 != "1" && $0 != "5" } == ["0", "2", "3", "4", "6", "7"])
        let span = Double(try #require(starts.max()) - added) / 1e9
        #expect(span >= 0.4 - 0.005, "the last of 10 starts came \(span) s after the add")
        #expect(try queue.counts().pending == 0)
        #expect(queue.state.withLock { $0.rateWaiters.isEmpty && $0.rateWakes.isEmpty && $0.rateReserved.isEmpty })
    }

    @Test func operationsWaitingForAStartHoldNoSlotAndAreReportedQueuedWhileOtherWorkRuns() async throws {
        // Given a 2-slot queue where "slow-api" starts one attempt every 1,000 seconds
        let (queue, log, name, directory) = try Self.queue(width: 2, limits: ["slow-api": StartRateLimit(startsPerSecond: 0.001)])
        defer { queue.close(); withExtendedLifetime(directory) {} }

        // When 3 operations tagged "slow-api" are added, then 6 others
        let limited = (0..<3).map { RateWork(payload: .init(log: name, tags: ["slow-api"], label: "s\($0)")) }
        try queue.addOperations(limited, options: EnqueueOptions(tags: ["slow-api"]))
        let others = (0..<6).map { RateWork(payload: .init(log: name, tags: ["other"], label: "o\($0)")) }
        try queue.addOperations(others, options: EnqueueOptions(tags: ["other"]))

        // Then one limited one and all the others run, while the two left wait for the
        // next start without a slot, reported queued (not waiting for conditions)
        #expect(try await eventually { try log.starts(of: "other").count == 6 && queue.counts().pending == 2 })
        let counts = try queue.counts()
        // (One of them: the first two get the two slots together, and either may take the start.)
        #expect(log.labels(of: "slow-api").count == 1)
        #expect(counts.queued == 2)
        #expect(counts.waitingForConditions == 0)
        #expect(queue.state.withLock { $0.slotsInQueue } == 0)
    }

    @Test func slotsQueuedWhileTheOperationQueueIsSuspendedDoNotAllStartWhenItResumes() async throws {
        // Given a suspended 8-slot queue where "api" starts 10 attempts a second, 1 at once,
        // and 5 due operations tagged "api" that got their slots while it was suspended
        let (queue, log, name, directory) = try Self.queue(width: 8, limits: ["api": StartRateLimit(startsPerSecond: 10)], suspended: true)
        defer { queue.close(); withExtendedLifetime(directory) {} }
        let operations = (0..<5).map { RateWork(payload: .init(log: name, tags: ["api"], label: "\($0)")) }
        try queue.addOperations(operations, options: EnqueueOptions(tags: ["api"]))
        try await Task.sleep(for: .milliseconds(300))   // the bucket would be full again by now

        // When the queue resumes
        let resumed = DispatchTime.now().uptimeNanoseconds
        queue.isSuspended = false
        await queue.allOperationsFinished()

        // Then they started one at a time at the rate: the fifth 0.4 s after the resume
        let starts = log.starts(of: "api")
        #expect(starts.count == 5)
        let span = Double(try #require(starts.max()) - resumed) / 1e9
        #expect(span >= 0.4 - 0.005, "the fifth start came \(span) s after the resume")
    }

    @Test func onlyAsManySlotsAreGivenAsTheBucketHoldsStartsSoTheFirstInRunOrderStartFirst() async throws {
        // Given a suspended 8-slot queue where "api" starts 2 attempts at once and then one
        // every 1,000 seconds
        let (queue, log, name, directory) = try Self.queue(width: 8, limits: ["api": StartRateLimit(startsPerSecond: 0.001, burst: 2)], suspended: true)
        defer { queue.close(); withExtendedLifetime(directory) {} }

        // When 6 operations tagged "api" are added
        let operations = (0..<6).map { RateWork(payload: .init(log: name, tags: ["api"], label: "\($0)")) }
        try queue.addOperations(operations, options: EnqueueOptions(tags: ["api"]))

        // Then the first two hold the bucket's two starts and got slots, and the other four wait
        // without one: the `OperationQueue`, which starts slots on several threads at once,
        // cannot let a later one take a start before them
        #expect(queue.state.withLock { $0.slotsInQueue } == 2)
        #expect(try queue.counts().queued == 6)

        // And when the queue resumes, those two start, and no other
        queue.isSuspended = false
        #expect(try await eventually { log.starts(of: "api").count == 2 && queue.state.withLock { $0.slotsInQueue } == 0 })
        #expect(Set(log.labels(of: "api")) == ["0", "1"])
        #expect(try queue.counts().queued == 4)
    }

    @Test func aSlotCancelledInTheOperationQueueBeforeItStartsGivesItsReservedStartBack() async throws {
        // Given a suspended queue where "api" starts one attempt and then one every 1,000
        // seconds, holding two operations tagged "api": the first has the start and a slot
        let (queue, log, name, directory) = try Self.queue(width: 4, limits: ["api": StartRateLimit(startsPerSecond: 0.001)], suspended: true)
        defer { queue.close(); withExtendedLifetime(directory) {} }
        let operations = (0..<2).map { RateWork(payload: .init(log: name, tags: ["api"], label: "\($0)")) }
        try queue.addOperations(operations, options: EnqueueOptions(tags: ["api"]))
        #expect(queue.state.withLock { $0.slotsInQueue } == 1)

        // When its slot is cancelled in the `OperationQueue`, and the queue resumes
        // (A cancelled slot leaves when the `OperationQueue` starts it, as it resumes.)
        queue.operationQueue.cancelAllOperations()
        queue.isSuspended = false

        // Then the start the cancelled slot held was given back: the first operation runs with
        // it, and the second still waits for the next
        #expect(try await eventually { log.starts(of: "api").count == 1 && queue.state.withLock { $0.slotsInQueue } == 0 })
        #expect(log.labels(of: "api") == ["0"])
        #expect(try queue.counts().pending == 1)
        #expect(queue.state.withLock { $0.rateReserved.isEmpty && $0.rateReservingSlots.isEmpty })
    }

    @Test func aBoundedRunDoesNotEndWhileOperationsWaitOnlyForTheirTagsNextStart() async throws {
        // Given a suspended queue where "api" starts 10 attempts a second, 1 at once, and 4
        // operations tagged "api"
        let (queue, log, name, directory) = try Self.queue(width: 4, limits: ["api": StartRateLimit(startsPerSecond: 10)], suspended: true)
        defer { queue.close(); withExtendedLifetime(directory) {} }
        let operations = (0..<4).map { RateWork(payload: .init(log: name, tags: ["api"], label: "\($0)")) }
        try queue.addOperations(operations, options: EnqueueOptions(tags: ["api"]))

        // When a bounded run starts them
        let run = queue.startBoundedRun(until: Date().addingTimeInterval(30))
        let report = await run.report

        // Then it ended drained, with every operation run, not cut short while they waited for
        // their starts
        #expect(report.ending == .drained)
        #expect(report.succeeded.count == 4)
        #expect(log.starts(of: "api").count == 4)
        #expect(try queue.counts().pending == 0)
    }

    @Test(arguments: [
        StartRateLimit(startsPerSecond: 0), StartRateLimit(startsPerSecond: -1), StartRateLimit(startsPerSecond: .infinity),
        StartRateLimit(startsPerSecond: .nan), StartRateLimit(startsPerSecond: 5, burst: 0),
    ])
    func aRateLimitThatCannotBeKeptIsRefusedClearlyAndTheStoreKeepsItsWork(limit: StartRateLimit) throws {
        // Given a store holding an operation
        let directory = try TemporaryDirectory()
        do {
            let queue = try PersistentOperationQueue(directory: directory.store, operationQueue: OperationQueue())
            queue.operationQueue.isSuspended = true
            queue.register(RateWork.self)
            try queue.addOperation(RateWork(payload: .init(log: "none", tags: [], label: "kept")))
            queue.close()
        }

        // When a queue is opened on it with an unusable start-rate limit
        var configuration = PersistentOperationQueue.Configuration()
        configuration.startRateLimits = ["ok": StartRateLimit(startsPerSecond: 1), "bad": limit]
        #expect {
            _ = try PersistentOperationQueue(directory: directory.store, operationQueue: OperationQueue(), configuration: configuration)
        } throws: { error in
            // Then it is refused with invalidOptions, naming the tag
            guard let error = error as? PersistenceError else { return false }
            return error.code == .invalidOptions && error.message.contains("\"bad\"")
        }

        // And the stored operation is still there for a queue opened correctly
        let reopened = try PersistentOperationQueue(directory: directory.store, operationQueue: OperationQueue())
        defer { reopened.close() }
        reopened.operationQueue.isSuspended = true
        reopened.register(RateWork.self)
        #expect(try reopened.restore().restored.count == 1)
    }
}
